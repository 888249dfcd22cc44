"""Request scope: the correlation ID and the per-request stage breakdown.

The current request lives in a ``ContextVar``, so asyncio tasks (which copy the context when
created) and ``anyio.to_thread.run_sync`` workers (which run in a copy of it) see the request
that was current where they were started. Plain ``threading.Thread`` does not copy contexts:
use ``contextvars.copy_context().run`` there.
"""

from __future__ import annotations

import re
import uuid
from collections import defaultdict
from contextlib import suppress
from contextvars import ContextVar, Token
from time import perf_counter_ns
from types import TracebackType

from . import _hooks
from ._ledger import (
    CANCELLED_LABEL,
    ERROR_LABEL,
    Labels,
    Ledger,
    _default,
    check_ledger,
    make_labels,
)

_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")

#: reserved stage names that ``request()`` and ``stream()`` fill in
RESERVED_STAGES = frozenset({"e2e", "ttft", "itl", "tpot"})


def valid_request_id(value: object) -> bool:
    """True when ``value`` is an acceptable correlation ID: 1–128 of ``[A-Za-z0-9._:-]``.

    ``perf.request(id=...)`` applies this rule; adapters that must know the final ID before
    the scope opens (to put it in a response) can apply it themselves::

        rid = header if perf.valid_request_id(header) else None
    """
    return isinstance(value, str) and _ID_RE.fullmatch(value) is not None


def new_request_id() -> str:
    return uuid.uuid4().hex


class Request:
    """A request in flight: its correlation ID, attributes and per-stage time so far."""

    __slots__ = ("attrs", "id", "id_replaced", "labels", "ledger", "stages", "start_ns")

    def __init__(
        self, request_id: str, attrs: dict[str, str], labels: Labels, ledger: Ledger | None,
        id_replaced: bool,
    ) -> None:
        #: correlation ID (validated, or generated)
        self.id = request_id
        #: attributes given to ``request()``, kept in the slowest-request traces
        self.attrs = attrs
        #: labels of the request's ``e2e`` series
        self.labels = labels
        #: ledger the request (and stages without their own) record into; None: the default
        self.ledger = ledger
        #: nanoseconds per stage name accumulated inside this request
        self.stages: defaultdict[str, int] = defaultdict(int)
        #: ``perf_counter_ns()`` at the start of the request. Adapters that open the scope
        #: after the fact (replaying an engine's own timings) may set it to an earlier value.
        self.start_ns = 0
        #: True when an ``id=`` was given but invalid and a new one was generated instead
        self.id_replaced = id_replaced

    def set_labels(self, **labels: object) -> None:
        """Replace the labels of this request's ``e2e`` series before the scope ends.

        For values known only during the request, e.g. the route template a web framework
        matched. Bounded values only (see ``Ledger(max_label_sets=...)``).
        """
        self.labels = make_labels(labels)

    @property
    def elapsed_ms(self) -> float:
        """Milliseconds since the request started."""
        return (perf_counter_ns() - self.start_ns) / 1e6

    def __repr__(self) -> str:
        return f"Request(id={self.id!r})"


_current: ContextVar[Request | None] = ContextVar("aiperf_sdk_request", default=None)


def current_request() -> Request | None:
    """The request in scope in this context (task, thread), or None."""
    return _current.get()


def current_request_id() -> str | None:
    """Correlation ID of the request in scope, or None outside any request."""
    req = _current.get()
    return None if req is None else req.id


class request:
    """Scope of one request: sets the correlation ID and records the ``e2e`` stage.

    Works with ``with`` and ``async with``; ``as`` gives the :class:`Request`. An ``id`` that
    is not 1–128 characters of ``[A-Za-z0-9._:-]`` is replaced by a new UUID4 hex (the bad
    value is never stored or propagated). Inside another request and without ``id``, the
    scope joins the outer request (same ID, no second ``e2e``); with an ``id`` it is a request
    of its own.

    Example::

        with perf.request(id=headers.get("x-request-id"), route="/v1/chat") as req:
            reply = handle(body)
        log.info("done", extra={"request_id": req.id})

    Args:
        id: correlation ID to use (validated), or None for a new one.
        ledger: where the ``e2e`` stage and the request's stages record; default ledger if
            None.
        labels: labels of the ``e2e`` series (bounded values only, e.g. a route template).
        **attrs: attributes kept with the request's trace (``Ledger.slowest``).

    Raises:
        TypeError: ``ledger`` is not a :class:`Ledger` (or None).
    """

    __slots__ = ("_attrs", "_id", "_joined", "_labels", "_ledger", "_req", "_token", "_tokens")

    def __init__(
        self,
        id: str | None = None,
        *,
        ledger: Ledger | None = None,
        labels: dict[str, object] | None = None,
        **attrs: object,
    ) -> None:
        self._id = id
        self._ledger = check_ledger(ledger, "request()")
        self._labels = labels
        self._attrs = attrs
        self._req: Request | None = None
        self._token: Token[Request | None] | None = None
        self._joined = False
        self._tokens: list[tuple[_hooks.StageHook, object]] = []

    def __enter__(self) -> Request:
        if self._req is not None:
            raise RuntimeError("this request() scope is already active; create one per request")
        outer = _current.get()
        attrs = {str(k): str(v) for k, v in self._attrs.items()}
        if outer is not None and self._id is None:
            outer.attrs.update(attrs)
            self._req = outer
            self._joined = True
            return outer
        replaced = False
        if self._id is None:
            rid = new_request_id()
        elif valid_request_id(self._id):
            rid = self._id
        else:
            rid = new_request_id()
            replaced = True
        ledger = self._ledger if self._ledger is not None else (
            outer.ledger if outer is not None else None
        )
        req = Request(rid, attrs, make_labels(self._labels or {}), ledger, replaced)
        self._req = req
        self._token = _current.set(req)
        if _hooks.HOOKS:
            self._tokens = _hooks.hooks_start("request", req.labels, rid, "request")
        req.start_ns = perf_counter_ns()
        return req

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        end = perf_counter_ns()
        req = self._req
        self._req = None
        if req is None or self._joined:
            self._joined = False
            return
        if self._token is not None:
            # exited in another context (e.g. an async generator finalised elsewhere):
            # the variable belongs to that other context, which is gone with it
            with suppress(ValueError):
                _current.reset(self._token)
            self._token = None
        labels = req.labels
        if exc is not None:
            labels = tuple(sorted((*labels, ERROR_LABEL if isinstance(exc, Exception)
                                   else CANCELLED_LABEL)))
        ledger = req.ledger if req.ledger is not None else _default[0]
        total = end - req.start_ns
        ledger._append(("e2e", labels), total, end)
        ledger._add_trace(total, req.stages, req.id, req.attrs, exc is not None, end)
        if self._tokens:
            tokens, self._tokens = self._tokens, []
            _hooks.hooks_end(tokens, exc, req.start_ns, end)

    async def __aenter__(self) -> Request:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)
