"""Interval windows of a stage: sparse HDR counts per window, for windowed SLO checks."""

from __future__ import annotations

import numpy as np

from ._hdr import NS_PER_MS as _NS_PER_MS
from ._hdr import Histogram, IntArray


class _Window:
    """Sparse interval histogram of one stage over one window: ok values plus error count.

    ``add`` only queues the (indices, counts) chunk; chunks are merged when more than
    ``_MAX_PENDING`` wait or when the window is read, keeping the fold cheap.
    """

    __slots__ = ("_counts", "_indices", "_pending", "errors")

    _MAX_PENDING = 16

    def __init__(self) -> None:
        self._indices: IntArray = np.zeros(0, dtype=np.int64)
        self._counts: IntArray = np.zeros(0, dtype=np.int64)
        self._pending: list[tuple[IntArray, IntArray]] = []
        self.errors = 0

    def add(self, indices: IntArray, counts: IntArray) -> None:
        self._pending.append((indices, counts))
        if len(self._pending) > self._MAX_PENDING:
            self._compact()

    def _compact(self) -> None:
        if not self._pending:
            return
        idx = np.concatenate([self._indices, *(p[0] for p in self._pending)])
        cnt = np.concatenate([self._counts, *(p[1] for p in self._pending)])
        self._pending.clear()
        uniq, inverse = np.unique(idx, return_inverse=True)
        self._indices = uniq
        self._counts = np.bincount(inverse, weights=cnt, minlength=uniq.size).astype(np.int64)

    def sparse(self) -> tuple[IntArray, IntArray]:
        """(sorted unique counts-array indices, counts)."""
        self._compact()
        return self._indices, self._counts


class Window:
    """One interval of a stage (all label sets, successful samples) and its error count.

    Returned by :meth:`Ledger.window`; times are wall-clock unix seconds.
    """

    __slots__ = ("_hist", "end_unix_s", "errors", "start_unix_s")

    def __init__(self, start: float, end: float, hist: Histogram, errors: int) -> None:
        #: start of the window (unix seconds)
        self.start_unix_s = start
        #: end of the window (unix seconds)
        self.end_unix_s = end
        #: samples recorded with ``outcome="error"`` in the window
        self.errors = errors
        self._hist = hist

    @property
    def count(self) -> int:
        """Successful samples in the window."""
        return self._hist.total

    def percentile(self, percentile: float) -> float:
        """Latency (ms) at ``percentile`` (0..100) of the window's successful samples."""
        return self._hist.percentiles_ns([percentile])[0] / _NS_PER_MS

    def count_within(self, threshold_ms: float) -> int:
        """Successful samples at or under ``threshold_ms`` (bucket-conservative)."""
        return self._hist.count_at_or_below(int(threshold_ms * _NS_PER_MS))

    def __repr__(self) -> str:
        return (
            f"Window(start_unix_s={self.start_unix_s:.3f}, count={self.count}, "
            f"errors={self.errors})"
        )
