"""PyTriton: time an infer function per request (the outer function sees the request list)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

import aiperf_sdk as perf

from ._batch import RequestBatch, TritonIntegrationError

F = TypeVar("F", bound=Callable[..., Any])

_current: ContextVar[RequestBatch | None] = ContextVar("aiperf_triton_batch", default=None)


def current_batch() -> RequestBatch | None:
    """The :class:`RequestBatch` of the infer call running in this context (its ``ids``)."""
    return _current.get()


def perf_infer(
    model: str, *, id_parameter: str = "request_id", ledger: perf.Ledger | None = None
) -> Callable[[F], F]:
    """Decorate a PyTriton infer function: one ``perf.request()`` per request it receives.

    Put it outermost, above ``@batch``: it sees PyTriton's ``list[Request]``, takes each
    request's correlation ID from ``request.parameters[id_parameter]`` (client side:
    ``ModelClient.infer_sample(..., parameters={"request_id": "abc"})``; invalid or missing:
    a new one), and records ``e2e`` per request labelled ``model`` and ``batch_size`` (the
    number of requests Triton's dynamic batcher grouped). ``perf.stage`` blocks in the
    function record once per batch.

    Example::

        @perf_infer("embed")
        @batch
        def infer(input_ids):
            with perf.stage("forward"):
                return {"embedding": model(input_ids)}

    Raises:
        TritonIntegrationError: empty ``model`` or ``id_parameter``.
    """
    if not isinstance(model, str) or not model:
        raise TritonIntegrationError(f"model must be a non-empty str, got {model!r}")
    if not isinstance(id_parameter, str) or not id_parameter:
        raise TritonIntegrationError(f"id_parameter must be a non-empty str, got {id_parameter!r}")

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(requests: Any, *args: Any, **kwargs: Any) -> Any:
            ids = [_param(r, id_parameter) for r in requests]
            with RequestBatch(ids, model=model, ledger=ledger) as b:
                token = _current.set(b)
                try:
                    return fn(requests, *args, **kwargs)
                finally:
                    _current.reset(token)

        return wrapper  # type: ignore[return-value]

    return decorate


def _param(request: Any, key: str) -> object:
    params = getattr(request, "parameters", None)
    return params.get(key) if isinstance(params, dict) else None
