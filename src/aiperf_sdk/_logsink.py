"""Logging: correlation ID and current stage on every log record; one line per request.

``LogContextFilter`` works on its own (the request ID lives in the request scope). The
current stage is tracked only while ``configure(logging=True)`` is on, which also logs one
structured line per finished request on the ``aiperf_sdk.requests`` logger (INFO).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import MutableMapping
from contextvars import ContextVar, Token
from time import perf_counter_ns
from typing import Any, Final

from ._request import Request, _current

Labels = tuple[tuple[str, str], ...]

#: logger that receives one line per finished request when ``configure(logging=True)``
REQUEST_LOGGER: Final = "aiperf_sdk.requests"

_current_stage: ContextVar[str | None] = ContextVar("aiperf_sdk_stage", default=None)
_request_log = logging.getLogger(REQUEST_LOGGER)


def current_stage() -> str | None:
    """Innermost stage running in this context, or None (tracked while logging is on)."""
    return _current_stage.get()


class LogContextFilter(logging.Filter):
    """Puts ``request_id`` and ``stage`` on every record (``"-"`` outside a request/stage).

    Never drops a record. Attach it to a handler so every logger's records carry the fields.

    Example::

        handler = logging.StreamHandler()
        handler.addFilter(perf.LogContextFilter())
        handler.setFormatter(logging.Formatter("%(request_id)s %(stage)s %(message)s"))
        logging.getLogger().addHandler(handler)
    """

    def filter(self, record: logging.LogRecord) -> bool:
        req = _current.get()
        record.request_id = "-" if req is None else req.id
        stage = _current_stage.get()
        record.stage = "-" if stage is None else stage
        return True


def structlog_processor(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor adding ``request_id`` and ``stage`` (when set) to the event dict.

    Example::

        structlog.configure(processors=[perf.structlog_processor,
                                        structlog.processors.JSONRenderer()])
    """
    req = _current.get()
    if req is not None:
        event_dict.setdefault("request_id", req.id)
    stage = _current_stage.get()
    if stage is not None:
        event_dict.setdefault("stage", stage)
    return event_dict


class LogHook:
    """Tracks the current stage and logs one line per request when it ends."""

    __slots__ = ()

    def start(self, name: str, labels: Labels, request_id: str | None, kind: str) -> object:
        if kind == "request":
            return _current.get()
        return _current_stage.set(name)

    def end(self, token: object, error: BaseException | None) -> None:
        self.end_at(token, error, 0, 0)

    def end_at(self, token: object, error: BaseException | None, start_ns: int,
               end_ns: int) -> None:
        """``end`` with the measured bounds: the logged ``e2e_ms`` is the ledger's."""
        if isinstance(token, Token):
            # ValueError: ended in another context (e.g. a generator closed elsewhere)
            with contextlib.suppress(ValueError):
                _current_stage.reset(token)
        elif isinstance(token, Request) and _request_log.isEnabledFor(logging.INFO):
            e2e_ns = end_ns - start_ns if end_ns else perf_counter_ns() - token.start_ns
            _log_request(token, error, e2e_ns)


def _log_request(req: Request, error: BaseException | None, e2e_ns: int) -> None:
    e2e_ms = e2e_ns / 1e6
    outcome = "ok" if error is None else ("error" if isinstance(error, Exception) else "cancelled")
    fields = {
        "request_id": req.id,
        "e2e_ms": round(e2e_ms, 3),
        "outcome": outcome,
        "stages_ms": {k: round(v / 1e6, 3) for k, v in req.stages.items()},
    }
    if req.attrs:
        fields["attrs"] = dict(req.attrs)
    _request_log.info(
        "%s", _LazyJson(fields), extra={"request_id": req.id, "aiperf": fields}
    )


class _LazyJson:
    """Serialises only if a handler formats the record."""

    __slots__ = ("fields",)

    def __init__(self, fields: dict[str, Any]) -> None:
        self.fields = fields

    def __str__(self) -> str:
        return json.dumps(self.fields, sort_keys=True)
