"""``PerfMiddleware``: pure ASGI middleware that times every HTTP request into the ledger.

Per request (hot path, in order): one header scan for the correlation ID, one
``perf.request()`` scope, a ``send`` wrapper that notes the time after the first body bytes
(TTFB) and after the message that ends the response (``more_body`` false: streaming and SSE
are measured to their last byte), and at the end two ``Ledger.record`` calls. Labels are the
route template (``/items/{item_id}``, never the raw path) and the status class (``2xx``).
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from time import perf_counter_ns
from typing import Any, NamedTuple

from opentelemetry import trace as otel_trace

import aiperf_sdk as perf

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("aiperf_sdk_fastapi")

#: paths not timed unless ``exclude=`` says otherwise (regexes, matched against the whole path)
DEFAULT_EXCLUDE: tuple[str, ...] = (
    r"/metrics(/.*)?",
    r"/perf/summary",
    r"/(health|healthz|ready|readyz|live|livez)",
)
_HEADER_NAME_RE = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}")  # RFC 9110 token
_MAX_ID_BYTES = 128  # perf.request() accepts at most 128 characters; longer is never decoded
_STATUS_CLASS = {1: "1xx", 2: "2xx", 3: "3xx", 4: "4xx", 5: "5xx"}

try:  # route templates of mounted apps: the Mount's own path, not the inner raw path
    from starlette.routing import Mount as _Mount
except ImportError:  # pragma: no cover - starlette is a dependency; pure ASGI apps still work
    _Mount = None  # type: ignore[assignment,misc]


class MiddlewareConfigError(perf.PerfError, ValueError):
    """A ``PerfMiddleware`` option is invalid (bad regex, header name, stage name...)."""


class HttpExchange(NamedTuple):
    """One timed HTTP request, handed to the ``recorder`` hook after the response ended."""

    request_id: str  #: correlation ID used (validated, reused or generated)
    method: str  #: HTTP method
    route: str  #: route template (``/items/{item_id}``) or the ``unmatched`` label
    status: int  #: status code sent; 0 when no response was started
    arrival_unix_ns: int  #: wall-clock arrival time (``time.time_ns()``), for replay
    ttfb_ns: int | None  #: request start to first body bytes sent; None: none sent
    total_ns: int | None  #: request start to the last byte sent; None: never completed
    error: bool  #: the application raised


class PerfMiddleware:
    """Pure ASGI middleware: a ``perf.request()`` scope and TTFB/total stages per request.

    Records into the ledger, labelled ``route`` (template) and ``status_class``:

    * ``e2e``: the request scope (includes background tasks run after the response);
    * ``http_ttfb``: start to the first body bytes handed to the server;
    * ``http_total``: start to the last byte (the ``more_body=False`` message), so streaming
      and SSE responses are measured to their end. Not recorded if the response never ends.

    The correlation ID comes from ``header_name`` when valid (1–128 of ``[A-Za-z0-9._:-]``),
    from ``asgi-correlation-id`` when that middleware already ran, else is a new UUID4 hex; a
    hostile value (newline, 10 kB, non-ASCII) is replaced, never decoded past 128 bytes and
    never logged. The ID is echoed in the response header (unless a header of that name is
    already there, e.g. from asgi-correlation-id), passed downstream in the request headers
    when it was generated, and set as span attribute ``aiperf.request_id`` on the current
    OpenTelemetry span (the server span of opentelemetry-instrumentation-fastapi).

    Example::

        app = FastAPI()
        app.add_middleware(PerfMiddleware, exclude=[r"/metrics", r"/healthz"])
        # or: aiperf_sdk_fastapi.instrument_app(app)   (idempotent)

    Args:
        app: the ASGI app to wrap.
        header_name: request/response header carrying the correlation ID.
        ledger: ledger to record into; None: the default ledger at record time.
        exclude: regexes matched against the whole ``scope["path"]``; matching requests pass
            through untimed. Default: ``/metrics``, ``/perf/summary``, health/ready/live.
        echo_header: add the ID to the response headers.
        propagate_header: when the ID was generated, replace/add it in the request headers
            the app sees (so the app, logs and inner middleware agree).
        otel_attribute: span attribute name set on a recording current span; None: off.
        ttfb_stage, total_stage: stage names.
        unmatched_route: ``route`` label of requests no route matched (404s).
        route_label: optional ``scope -> template`` for non-Starlette routers.
        recorder: called with an :class:`HttpExchange` after each request (traffic
            recording for replay); its exceptions are logged (type only) and swallowed.

    Raises:
        MiddlewareConfigError: a bad regex, header name or stage name.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        header_name: str = "X-Request-ID",
        ledger: perf.Ledger | None = None,
        exclude: Iterable[str] = DEFAULT_EXCLUDE,
        echo_header: bool = True,
        propagate_header: bool = True,
        otel_attribute: str | None = "aiperf.request_id",
        ttfb_stage: str = "http_ttfb",
        total_stage: str = "http_total",
        unmatched_route: str = "unmatched",
        route_label: Callable[[Scope], str | None] | None = None,
        recorder: Callable[[HttpExchange], object] | None = None,
    ) -> None:
        if not isinstance(header_name, str) or not _HEADER_NAME_RE.fullmatch(header_name):
            raise MiddlewareConfigError(
                f"header_name must be an HTTP token (letters, digits, '-'), got {header_name!r}"
            )
        for name, value in (("ttfb_stage", ttfb_stage), ("total_stage", total_stage),
                            ("unmatched_route", unmatched_route)):
            if not isinstance(value, str) or not value:
                raise MiddlewareConfigError(f"{name} must be a non-empty str, got {value!r}")
        if isinstance(exclude, str):
            raise MiddlewareConfigError("exclude must be a list of regexes, not one string")
        patterns = list(exclude)
        try:
            self._exclude = (
                re.compile("|".join(f"(?:{p})" for p in patterns)) if patterns else None
            )
        except (re.error, TypeError) as exc:
            raise MiddlewareConfigError(f"exclude has an invalid regex: {exc}") from None
        if ledger is not None and not isinstance(ledger, perf.Ledger):
            raise MiddlewareConfigError(f"ledger must be a perf.Ledger, got {type(ledger)}")
        self.app = app
        self.header_name = header_name
        self._hname = header_name.lower().encode("ascii")
        self._ledger = ledger
        self._echo = echo_header
        self._propagate = propagate_header
        self._otel_attr = otel_attribute
        self._ttfb = ttfb_stage
        self._total = total_stage
        self._unmatched = unmatched_route
        self._route_label = route_label
        self._recorder = recorder
        self._recorder_failed = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (
            self._exclude is not None and self._exclude.fullmatch(scope["path"])
        ):
            await self.app(scope, receive, send)
            return
        arrival = time.time_ns() if self._recorder is not None else 0
        root0 = scope.get("root_path", "")  # before a Mount below us extends it
        hname = self._hname
        incoming: bytes | None = None
        for key, value in scope["headers"]:
            if key.lower() == hname:
                incoming = value
                break
        candidate: str | None = None
        echo = self._echo
        acid = sys.modules.get("asgi_correlation_id.context")
        if acid is not None:  # asgi-correlation-id ran outside us: reuse its ID, it echoes
            candidate = acid.correlation_id.get()
            if candidate is not None:
                echo = False
        if candidate is None and incoming is not None and len(incoming) <= _MAX_ID_BYTES:
            candidate = incoming.decode("latin-1")
        with perf.request(id=candidate, ledger=self._ledger) as req:
            rid = req.id
            rid_b = rid.encode("ascii")
            inner = scope
            if self._propagate and (incoming is None or incoming != rid_b):
                inner = dict(scope)
                inner["headers"] = [
                    (k, v) for k, v in scope["headers"] if k.lower() != hname
                ] + [(hname, rid_b)]
            if self._otel_attr is not None:
                span = otel_trace.get_current_span()
                if span.is_recording():
                    span.set_attribute(self._otel_attr, rid)
            status = 0
            first_ns = 0
            last_ns = 0
            trailers = False

            async def send_wrapper(message: Message) -> None:
                nonlocal status, first_ns, last_ns, trailers
                mtype = message["type"]
                if mtype == "http.response.body":
                    await send(message)
                    more = message.get("more_body", False)
                    if not first_ns and (message.get("body") or not more):
                        first_ns = perf_counter_ns()
                    if not more and not trailers:
                        last_ns = perf_counter_ns()
                    return
                if mtype == "http.response.start":
                    status = message["status"]
                    trailers = message.get("trailers", False)
                    if echo:
                        headers = list(message.get("headers", ()))
                        for key, _ in headers:
                            if key.lower() == hname:
                                break
                        else:
                            headers.append((hname, rid_b))
                            message["headers"] = headers
                    await send(message)
                    return
                await send(message)
                if mtype == "http.response.pathsend" or (
                    mtype == "http.response.trailers" and not message.get("more_trailers")
                ):
                    last_ns = perf_counter_ns()
                    first_ns = first_ns or last_ns

            error = True
            try:
                await self.app(inner, receive, send_wrapper)
                error = False
            finally:
                self._finish(req, inner, root0, status, first_ns, last_ns, error, arrival)

    def _finish(
        self, req: perf.Request, inner: Scope, root0: str, status: int, first_ns: int,
        last_ns: int, error: bool, arrival: int,
    ) -> None:
        route = self._route(inner, root0)
        status_class = _STATUS_CLASS.get(status // 100, "other") if status else "5xx"
        # the request's e2e series: labels known only now (routing ran inside the app)
        req.set_labels(route=route, status_class=status_class)
        ledger = self._ledger or req.ledger or perf.default_ledger()
        start = req.start_ns
        ttfb = first_ns - start if first_ns else None
        total = last_ns - start if last_ns else None
        if ttfb is not None:
            req.stages[self._ttfb] = ttfb
            ledger.record(self._ttfb, ttfb, route=route, status_class=status_class)
        if total is not None:
            req.stages[self._total] = total
            ledger.record(self._total, total, route=route, status_class=status_class)
        if self._recorder is not None:
            exchange = HttpExchange(req.id, str(inner.get("method", "")), route, status,
                                    arrival, ttfb, total, error)
            try:
                self._recorder(exchange)
            except Exception as exc:  # a broken hook must not break the service
                if not self._recorder_failed:
                    self._recorder_failed = True
                    log.error("aiperf recorder hook raised %s; further failures are silent",
                              type(exc).__name__)

    def _route(self, inner: Scope, root0: str) -> str:
        if self._route_label is not None:
            label = self._route_label(inner)
            return label if isinstance(label, str) and label else self._unmatched
        route = inner.get("route")
        if route is None:
            return self._unmatched
        template = getattr(route, "path_format", None) or getattr(route, "path", None)
        if not isinstance(template, str):
            return self._unmatched
        if _Mount is not None and isinstance(route, _Mount):
            return template or "/"
        # a route inside a mounted sub-app: prefix the mount's path
        root = inner.get("root_path", "")
        if len(root) > len(root0) and root.startswith(root0):
            template = root[len(root0):] + template
        return template
