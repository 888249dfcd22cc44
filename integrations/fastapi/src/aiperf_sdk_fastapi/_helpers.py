"""What a service author wires next to the middleware: /metrics, /perf/summary, readiness,
warm-up in the lifespan, and ``instrument_app`` / ``uninstrument_app`` (idempotent)."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import aiperf_sdk as perf

from ._middleware import ASGIApp, MiddlewareConfigError, PerfMiddleware, Receive, Scope, Send

log = logging.getLogger("aiperf_sdk_fastapi")


def instrument_app(app: Starlette, **options: Any) -> bool:
    """Add :class:`PerfMiddleware` to a FastAPI/Starlette app; a second call does nothing.

    Call before the app starts serving (Starlette refuses new middleware afterwards). The
    middleware is added outermost among user middleware; to reuse asgi-correlation-id's ID,
    add ``CorrelationIdMiddleware`` after this call (so it runs first).

    Example::

        app = FastAPI()
        instrument_app(app, exclude=[r"/healthz"])

    Returns:
        True if the middleware was added, False if it was already there.

    Raises:
        MiddlewareConfigError: invalid options (checked now, not at the first request).
        RuntimeError: the app has already started (Starlette's own error).
    """
    if _find(app):
        return False
    PerfMiddleware(_noop_app, **options)  # validate now: a typo must not surface at request 1
    app.add_middleware(PerfMiddleware, **options)
    return True


def uninstrument_app(app: Starlette) -> bool:
    """Remove :class:`PerfMiddleware` added by :func:`instrument_app`; safe to call twice.

    Returns:
        True if it was removed, False if it was not there.
    """
    found = _find(app)
    if not found:
        return False
    app.user_middleware = [m for m in app.user_middleware if not _is_ours(m)]
    if app.middleware_stack is not None:  # already serving: rebuild without us
        app.middleware_stack = app.build_middleware_stack()
    return True


def _find(app: Starlette) -> bool:
    if not isinstance(app, Starlette):
        raise MiddlewareConfigError(
            f"instrument_app needs a FastAPI/Starlette app, got {type(app).__name__}; for any "
            "other ASGI app wrap it: app = PerfMiddleware(app)"
        )
    return any(_is_ours(m) for m in app.user_middleware)


def _is_ours(middleware: object) -> bool:
    return getattr(middleware, "cls", None) is PerfMiddleware


async def _noop_app(scope: Scope, receive: Receive, send: Send) -> None:  # pragma: no cover
    return None


class _AsgiEndpoint:
    """Starlette treats a plain function endpoint as ``f(request)``; an object is ASGI."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)


def mount_metrics(
    app: Starlette, path: str = "/metrics", *, ledger: perf.Ledger | None = None,
    **prometheus_options: Any,
) -> None:
    """Serve the ledger in the Prometheus text format at ``path`` (exact path, GET).

    Uses ``perf.prometheus_app`` (needs ``prometheus-client``); ``prometheus_options`` go to it
    (``buckets_s``, ``quantiles``, ``snapshot_dir``). Excluded from timing by default.

    Raises:
        ConfigurationError: bad buckets/quantiles (from ``perf.prometheus_app``).
        ModuleNotFoundError: prometheus-client is not installed.
    """
    asgi = perf.prometheus_app(ledger, **prometheus_options)
    app.router.routes.append(
        Route(path, endpoint=_AsgiEndpoint(asgi), methods=["GET"], include_in_schema=False)
    )


def add_summary_route(
    app: Starlette, path: str = "/perf/summary", *, ledger: perf.Ledger | None = None
) -> None:
    """Opt-in JSON view of the ledger at ``path``: ``{"rows": [{stage, labels, count, p50_ms,
    ...}]}`` (``perf.Summary`` as JSON). Expose it only where its audience should see it."""

    async def summary(request: Request) -> JSONResponse:
        led = ledger if ledger is not None else perf.default_ledger()
        return JSONResponse(led.summary().model_dump(mode="json"))

    app.router.routes.append(Route(path, summary, methods=["GET"], include_in_schema=False))


def add_readiness_route(app: Starlette, readiness: perf.Readiness, path: str = "/ready") -> None:
    """``GET path``: 200 with ``readiness.status()`` when ready, else 503 (readinessProbe)."""

    async def ready(request: Request) -> JSONResponse:
        return JSONResponse(readiness.status(), status_code=200 if readiness.ready else 503)

    app.router.routes.append(Route(path, ready, methods=["GET"], include_in_schema=False))


def warmup_lifespan(
    fn: Callable[[Any], Any],
    inputs: Mapping[Any, Any] | Sequence[Any],
    *,
    readiness: perf.Readiness,
    background: bool = True,
    on_report: Callable[[perf.WarmupReport], object] | None = None,
    inner: Callable[[Any], contextlib.AbstractAsyncContextManager[Any]] | None = None,
    **warmup_options: Any,
) -> Callable[[Any], contextlib.AbstractAsyncContextManager[None]]:
    """A lifespan that runs ``perf.warmup(fn, inputs)`` at startup and flips ``readiness``.

    With ``background=True`` (default) the server starts accepting at once (liveness passes)
    and ``/ready`` answers 503 until warm-up finished; with ``False`` startup waits for it (in
    a worker thread, the event loop stays free). Warm-up samples go to a scratch ledger, never
    the serving one. A failing warm-up leaves readiness not ready with the reason.

    Example::

        readiness = perf.Readiness()
        app = FastAPI(lifespan=warmup_lifespan(model, samples, readiness=readiness))
        add_readiness_route(app, readiness)

    Args:
        inner: the app's own lifespan, entered around the warm-up.
        warmup_options: passed to ``perf.warmup`` (``rounds``, ``tolerance``, ...).
    """

    def run() -> None:
        try:
            report = perf.warmup(fn, inputs, readiness=readiness, **warmup_options)
        except perf.WarmupError as exc:  # readiness already says why
            log.error("warm-up failed: %s", type(exc.__cause__ or exc).__name__)
            return
        except Exception as exc:  # bad options: say so on /ready instead of dying silently
            readiness.set_not_ready(warmup_options.get("readiness_component", "warmup"),
                                    f"warm-up could not start: {exc}")
            log.error("warm-up could not start: %s", exc)
            return
        if on_report is not None:
            on_report(report)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            if inner is not None:
                await stack.enter_async_context(inner(app))
            if background:
                ctx = contextvars.copy_context()
                threading.Thread(target=ctx.run, args=(run,), name="aiperf-warmup",
                                 daemon=True).start()
            else:
                import anyio.to_thread

                await anyio.to_thread.run_sync(run)
            yield

    return lifespan
