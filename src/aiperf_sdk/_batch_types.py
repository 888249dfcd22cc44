"""Errors, statistics and the online batch-cost model of the dynamic batcher."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, NamedTuple

from ._errors import PerfError

if TYPE_CHECKING:
    from ._ledger import Ledger


class BatcherError(PerfError):
    """Base class of every error the dynamic batcher raises on purpose."""


class QueueFullError(BatcherError):
    """The batcher's queue holds ``max_queue_size`` requests; this one was rejected at once.

    Fast rejection is the point: retry later, shed load upstream, or raise ``max_queue_size``
    if the latency budget can afford the longer queue.
    """


class DeadlineExceededError(BatcherError, TimeoutError):
    """The request's deadline passed (in the queue it was removed and never sent to ``fn``),
    or deadline-aware admission predicted it could not be met and rejected it at once."""


class BatcherClosedError(BatcherError):
    """The batcher is not running (not started, stopping, or stopped)."""


class BatchResultMismatchError(BatcherError):
    """The batch function returned a different number of results than it got items.

    Every request of that batch gets this error; other batches are unaffected.
    """


class BatcherConfigError(BatcherError, ValueError):
    """An argument to ``DynamicBatcher``, ``batched`` or ``submit`` is invalid; nothing
    changed."""


class BatcherUsageError(BatcherError, RuntimeError):
    """The batcher was used from the wrong place (e.g. the blocking entry point called on
    the event loop's own thread, where it would deadlock)."""


class BucketStats(NamedTuple):
    """Per-bucket counters of a :class:`DynamicBatcher` (see :class:`BatcherStats`)."""

    #: batches dispatched from this bucket
    batches: int
    #: requests sent to ``fn`` from this bucket
    requests: int
    #: requests / batches
    mean_batch_size: float
    #: padded tokens / real tokens (0.0 without ``length_fn``)
    padding_ratio: float


class BatcherStats(NamedTuple):
    """A consistent snapshot of a :class:`DynamicBatcher`'s counters.

    ``submitted == completed + failed + rejected + shed + timed_out + cancelled`` once every
    request has ended (requests still queued or running make up the difference).
    """

    #: calls to ``submit`` that passed argument validation
    submitted: int
    #: requests that returned a result
    completed: int
    #: requests that raised an error from ``fn`` (raised, returned per item, or result
    #: count mismatch) or were failed by a forced stop (``BatcherClosedError``)
    failed: int
    #: requests rejected at submit: queue full or batcher closed
    rejected: int
    #: requests rejected at submit by deadline-aware admission
    shed: int
    #: requests whose deadline passed (queued or running)
    timed_out: int
    #: requests whose caller cancelled the await
    cancelled: int
    #: requests waiting in the queue now
    queued: int
    #: batches running now
    running_batches: int
    #: batches dispatched to ``fn``
    batches: int
    #: batch size -> number of batches of that size
    batch_sizes: dict[int, int]
    #: requests sent to ``fn`` / batches
    mean_batch_size: float
    #: sum over batches of ``len(batch) * longest item``
    padded_tokens: int
    #: sum of item lengths sent to ``fn``
    real_tokens: int
    #: padded_tokens / real_tokens (1.0 means no padding; 0.0 without ``length_fn``)
    padding_ratio: float
    #: fitted fixed cost per batch ``a`` (ms) of the online model ``a + b * padded_tokens``
    cost_a_ms: float
    #: fitted cost per padded token ``b`` (µs)
    cost_b_us_per_token: float
    #: mean predicted batch time (ms) over recent batches, predicted before each ran
    cost_predicted_ms: float
    #: mean actual batch time (ms) over the same batches
    cost_actual_ms: float
    #: mean absolute prediction error (ms) over the same batches
    cost_mae_ms: float
    #: per bucket label (its upper bound, ``"inf"`` past the last, ``"all"`` unbucketed)
    buckets: dict[str, BucketStats]


class CostModel:
    """Least-squares fit of batch time ``a + b * padded_tokens`` over recent batches.

    Sums are kept incrementally (O(1) per batch) and recomputed from the window every
    ``window`` updates so floating-point drift cannot accumulate.
    """

    __slots__ = (
        "_errs", "_n_since_refit", "_sx", "_sxx", "_sxy", "_sy", "_xs", "_ys", "a", "b",
        "window",
    )

    def __init__(self, window: int = 256) -> None:
        self.window = window
        self._xs: deque[float] = deque()
        self._ys: deque[float] = deque()
        #: (predicted_ns, actual_ns) of recent batches that had a prediction
        self._errs: deque[tuple[float, float]] = deque(maxlen=window)
        self._sx = self._sy = self._sxx = self._sxy = 0.0
        self._n_since_refit = 0
        self.a = 0.0
        self.b = 0.0

    @property
    def samples(self) -> int:
        return len(self._xs)

    def predict_ns(self, padded_tokens: float) -> float:
        return self.a + self.b * padded_tokens

    def add(self, padded_tokens: int, duration_ns: int, predicted_ns: float | None) -> None:
        x, y = float(padded_tokens), float(duration_ns)
        if predicted_ns is not None:
            self._errs.append((predicted_ns, y))
        self._xs.append(x)
        self._ys.append(y)
        self._sx += x
        self._sy += y
        self._sxx += x * x
        self._sxy += x * y
        if len(self._xs) > self.window:
            ox, oy = self._xs.popleft(), self._ys.popleft()
            self._sx -= ox
            self._sy -= oy
            self._sxx -= ox * ox
            self._sxy -= ox * oy
        self._n_since_refit += 1
        if self._n_since_refit >= self.window:
            self._n_since_refit = 0
            self._sx, self._sy = sum(self._xs), sum(self._ys)
            self._sxx = sum(v * v for v in self._xs)
            self._sxy = sum(u * v for u, v in zip(self._xs, self._ys, strict=True))
        self._fit()

    def _fit(self) -> None:
        n = len(self._xs)
        mx, my = self._sx / n, self._sy / n
        var = self._sxx / n - mx * mx
        b = (self._sxy / n - mx * my) / var if var > 1e-9 * max(1.0, mx * mx) else 0.0
        b = max(b, 0.0)  # noise must not predict that longer batches are cheaper
        self.b = b
        self.a = max(my - b * mx, 0.0)

    def error_stats_ms(self) -> tuple[float, float, float]:
        """(mean predicted, mean actual, mean absolute error) in ms over recent batches."""
        if not self._errs:
            return 0.0, 0.0, 0.0
        n = len(self._errs)
        pred = sum(p for p, _ in self._errs) / n
        act = sum(a for _, a in self._errs) / n
        mae = sum(abs(p - a) for p, a in self._errs) / n
        return pred / 1e6, act / 1e6, mae / 1e6


def format_report(s: BatcherStats, ledger: Ledger, labels: dict[str, str]) -> str:
    """The table behind ``DynamicBatcher.report()``: per bucket, batch size and padding next
    to the ``batch.queue`` / ``batch.run`` percentiles read from ``ledger``."""
    lines = [
        f"{'bucket':>8} {'batches':>8} {'requests':>9} {'mean size':>9} {'padding':>8} "
        f"{'queue p50':>10} {'queue p99':>10} {'run p50':>9} {'run p99':>9}"
    ]
    for label, b in s.buckets.items():
        q50, q99, r50, r99 = (
            ledger.percentile(st, p, bucket=label, **labels)
            for st in ("batch.queue", "batch.run") for p in (50.0, 99.0)
        )
        lines.append(
            f"{label:>8} {b.batches:>8} {b.requests:>9} {b.mean_batch_size:>9.2f} "
            f"{b.padding_ratio:>8.2f} {q50:>8.2f}ms {q99:>8.2f}ms {r50:>7.2f}ms {r99:>7.2f}ms")
    lines.append(
        f"submitted={s.submitted} completed={s.completed} failed={s.failed} "
        f"rejected={s.rejected} shed={s.shed} timed_out={s.timed_out} "
        f"cancelled={s.cancelled}; padding ratio {s.padding_ratio:.2f}; batch cost "
        f"{s.cost_a_ms:.3f} ms + {s.cost_b_us_per_token:.3f} µs/token "
        f"(predicted {s.cost_predicted_ms:.2f} ms vs actual {s.cost_actual_ms:.2f} ms)")
    return "\n".join(lines)
