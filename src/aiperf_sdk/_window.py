"""Interval windows of a stage: sparse HDR counts per window, for windowed SLO checks."""

from __future__ import annotations

import numpy as np

from ._hdr import NS_PER_MS as _NS_PER_MS
from ._hdr import Histogram, IntArray


class _Window:
    """Interval histogram of one stage over one window: ok values plus error count.

    While a window receives samples (the stage's newest) its counts are a dense array in
    the HDR index space, so each fold adds its (indices, counts) chunk with one indexed add;
    the ledger freezes it into sparse (indices, counts) form when the stage's next window
    opens (16 bytes per distinct bucket), which is what the ``windows_kept`` history holds.
    """

    __slots__ = ("_counts", "_dense", "_indices", "errors")

    def __init__(self) -> None:
        self._indices: IntArray = np.zeros(0, dtype=np.int64)
        self._counts: IntArray = np.zeros(0, dtype=np.int64)
        self._dense: IntArray | None = None
        self.errors = 0

    def add(self, indices: IntArray, counts: IntArray) -> None:
        """Add counts at sorted, unique counts-array indices."""
        if indices.size == 0:
            return
        dense = self._dense
        if dense is None:
            dense = self._thaw(int(indices[-1]))
        elif int(indices[-1]) >= dense.size:
            dense = self._grow(dense, int(indices[-1]))
        dense[indices] += counts  # indices are unique: a plain indexed add is exact

    @staticmethod
    def _size_for(top: int) -> int:
        return 1 << max(10, top.bit_length())  # > top; at most one regrow per doubling

    def _grow(self, dense: IntArray, top: int) -> IntArray:
        grown = np.zeros(self._size_for(top), dtype=np.int64)
        grown[: dense.size] = dense
        self._dense = grown
        return grown

    def _thaw(self, top: int) -> IntArray:
        if self._indices.size:
            top = max(top, int(self._indices[-1]))
        dense = np.zeros(self._size_for(top), dtype=np.int64)
        dense[self._indices] = self._counts
        self._dense = dense
        return dense

    def freeze(self) -> None:
        """Keep only the sparse form (the window no longer receives samples, normally)."""
        if self._dense is not None:
            self._indices, self._counts = self.sparse()
            self._dense = None

    def sparse(self) -> tuple[IntArray, IntArray]:
        """(sorted unique counts-array indices, counts)."""
        dense = self._dense
        if dense is None:
            return self._indices, self._counts
        nz = np.flatnonzero(dense).astype(np.int64)
        return nz, dense[nz]


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
