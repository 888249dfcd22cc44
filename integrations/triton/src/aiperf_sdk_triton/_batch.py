"""``RequestBatch``: time one batched call as one ``perf.request()`` per request in it.

Triton hands a model a list of requests that its own dynamic batcher grouped; each of them
waited for the whole call. So each request gets its own scope (its own correlation ID, an
``e2e`` sample from the start of the call to its end, labels ``model`` and ``batch_size``),
while the model author's ``perf.stage`` blocks inside the call record once per batch — that
is what they cost.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from time import perf_counter_ns
from types import TracebackType

import aiperf_sdk as perf


class TritonIntegrationError(perf.PerfError, ValueError):
    """Bad arguments to an aiperf-sdk-triton helper (model name, parameter key, ...)."""


def resolve_id(value: object) -> str:
    """``value`` when it is a valid correlation ID, else a new UUID4 hex (never the bad one).

    Resolved up front (same rule as ``perf.request``) so the model can put the ID it will be
    recorded under into its responses while the call runs.
    """
    if isinstance(value, str) and perf.valid_request_id(value):
        return value
    return uuid.uuid4().hex


class RequestBatch:
    """Context manager timing one batched call; ``ids`` are the requests' correlation IDs.

    Example::

        with RequestBatch(["a", "b"], model="embed") as batch:
            outputs = run(batch_inputs)
        batch.ids   # -> ["a", "b"]; two e2e samples labelled model=embed, batch_size=2

    Raises:
        TritonIntegrationError: ``model`` is empty.
    """

    __slots__ = ("_ledger", "_observer", "_t0", "bucket", "ids", "model")

    def __init__(self, ids: Sequence[object], *, model: str, ledger: perf.Ledger | None = None,
                 bucket: str | None = None,
                 observer: Callable[[str, int, bool], object] | None = None) -> None:
        if not isinstance(model, str) or not model:
            raise TritonIntegrationError(f"model must be a non-empty str, got {model!r}")
        #: correlation IDs, one per request, in request order (validated or generated)
        self.ids = [resolve_id(v) for v in ids]
        self.model = model
        #: ``batch_size`` label value (the batch size itself, or a bucket name)
        self.bucket = bucket if bucket is not None else str(len(self.ids))
        self._ledger = ledger
        self._observer = observer  # (batch_size label, duration_ns, failed) per request
        self._t0 = 0

    def __enter__(self) -> RequestBatch:
        self._t0 = perf_counter_ns()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        labels: dict[str, object] = {"model": self.model, "batch_size": self.bucket}
        for rid in self.ids:
            scope = perf.request(id=rid, ledger=self._ledger, labels=labels,
                                 batch_size=self.bucket)
            req = scope.__enter__()
            req.start_ns = self._t0  # the request waited for the whole call
            scope.__exit__(exc_type, exc, tb)
        if self._observer is not None:
            duration = perf_counter_ns() - self._t0
            for _ in self.ids:
                self._observer(self.bucket, duration, exc is not None)
