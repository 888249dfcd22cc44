"""The ledger: HDR histograms keyed by (stage, labels), the one source of numbers.

Hot path (the series base class's ``add``): a duration is appended to its series' buffer, a
window mark is added when the end time crosses into a new interval window (one integer
compare otherwise), and every ``buffer_size`` values the series is folded into its histogram
in bulk under the ledger's lock. With the optional C extension the buffer holds C integers,
the fold takes it (values and marks) in one step no other thread can interleave with, and
folds it in C; the pure-Python buffer (``_PySeriesBase``) is a list whose fold (numpy) copies
the first ``n`` values and deletes exactly those, so an append racing with it is kept for the
next fold. Neither ever loses or double-counts a value in the histogram.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import os
import sys
import threading
import time
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, cast

import numpy as np

from ._errors import CardinalityWarning, InvalidDurationError, LedgerMismatchError
from ._hdr import NS_PER_MS as _NS_PER_MS
from ._hdr import HdrLayout, Histogram, IntArray
from ._models import (
    LedgerSnapshot,
    RequestTrace,
    SeriesSnapshot,
    Summary,
    SummaryRow,
    WindowSnapshot,
)
from ._window import Window, _Window

if TYPE_CHECKING:
    from ._budget import Budget, BudgetReport

Labels = tuple[tuple[str, str], ...]
SeriesKey = tuple[str, Labels]

#: label set that a stage's series beyond ``max_label_sets`` fold into
OVERFLOW_LABELS: Final[Labels] = (("overflow", "other"),)
ERROR_LABEL: Final[tuple[str, str]] = ("outcome", "error")
CANCELLED_LABEL: Final[tuple[str, str]] = ("outcome", "cancelled")
SUMMARY_PERCENTILES: Final = [50.0, 90.0, 95.0, 99.0, 99.9]
#: largest ``Ledger(buffer_size=...)``: 2**24 values, 128 MiB of buffer per series
MAX_BUFFER_SIZE: Final = 1 << 24


def make_labels(labels: Mapping[str, object]) -> Labels:
    """Canonical (sorted, stringified) label tuple."""
    if not labels:
        return ()
    return tuple(sorted((str(k), str(v)) for k, v in labels.items()))


class _PyLedgerBase:
    """``Ledger.record`` without the optional C extension."""

    __slots__ = ()

    def record(self, stage: str, duration_ns: int, /, **labels: object) -> None:
        """Record one duration (integer nanoseconds) for ``stage`` under ``labels``.

        Example::

            ledger.record("prefill", 12_500_000, model="chat")

        Raises:
            InvalidDurationError: ``duration_ns`` is negative or not an integer.
            TypeError: ``stage`` is not a non-empty string.
        """
        _record_py(cast("Ledger", self), stage, duration_ns, **labels)


class _PySeriesBase:
    """A series' hot-path buffer without the optional C extension (the reference version).

    ``add`` appends to a plain list (atomic under the GIL). ``take`` copies the first ``n``
    values and deletes exactly those, so an append racing with it is kept for the next fold;
    a mark appended meanwhile points into the old buffer and is shifted back. (The C
    ``SeriesBase`` buffers C integers and takes everything in one uninterruptible step.)
    """

    __slots__ = ("_flush_at", "_unix_offset_ns", "_window_ns", "buf", "first_start",
                 "last_end", "ledger", "marks", "window_end")

    def __init__(self, ledger: Ledger, flush_at: int, window_ns: int, unix_offset_ns: int) -> None:
        self.ledger = ledger
        self._flush_at = flush_at
        self._window_ns = window_ns
        self._unix_offset_ns = unix_offset_ns
        self.buf: list[int] = []
        self.marks: list[tuple[int, int]] = []  # (buffer position, window index from there)
        self.window_end = 0  # perf_counter_ns at which the current window ends
        self.first_start = 0  # perf_counter_ns
        self.last_end = 0

    @property
    def pending(self) -> int:
        """Values buffered, not yet folded."""
        return len(self.buf)

    def add(self, duration: int, end: int) -> None:
        """Hot path: buffer one value; fold when the buffer is full."""
        buf = self.buf
        if end >= self.window_end:
            self.roll(end, duration)  # before the append: a fold in between loses no mark
        buf.append(duration)
        if end > self.last_end:
            self.last_end = end
        if len(buf) >= self._flush_at:
            self.ledger._fold_series(self)  # type: ignore[arg-type]

    def add_many(self, durations: list[int], end: int) -> None:
        """Buffer values that all end at ``end`` (a batch): same as ``add`` per value."""
        if not durations:
            return
        buf = self.buf
        if end >= self.window_end:  # the first value opens a new window, as add() does
            self.roll(end, durations[0])
        buf.extend(durations)
        if end > self.last_end:
            self.last_end = end
        if len(buf) >= self._flush_at:
            self.ledger._fold_series(self)  # type: ignore[arg-type]

    def roll(self, end: int, duration: int) -> None:
        """The value about to be appended ends in a new window: mark where that starts."""
        w = (end + self._unix_offset_ns) // self._window_ns
        self.marks.append((len(self.buf), w))
        self.window_end = (w + 1) * self._window_ns - self._unix_offset_ns
        if not self.first_start:
            self.first_start = end - duration

    def take(self) -> tuple[bytes | list[int], list[tuple[int, int]]]:
        """(buffered values, their window marks), removed from the buffer."""
        marks, buf = self.marks, self.buf
        m = len(marks)
        n = len(buf)
        values = buf[:n]
        del buf[:n]
        taken = marks[:m]
        del marks[:m]
        # marks appended since the snapshot point into the old buffer: shift them
        for i, (pos, w) in enumerate(marks):
            marks[i] = (max(0, pos - n), w)
        return values, taken

    def reset(self) -> None:
        del self.buf[:]
        del self.marks[:]
        self.window_end = 0
        self.first_start = self.last_end = 0


#: the optional C extension (None when not built or AIPERF_PURE_PYTHON is set); _stage
#: uses the same module object
_speedups: Any
if TYPE_CHECKING:
    _LedgerBase = _PyLedgerBase
    _SeriesBase = _PySeriesBase
    _speedups = None
else:
    try:
        if os.environ.get("AIPERF_PURE_PYTHON", "").strip() not in ("", "0"):
            raise ImportError("AIPERF_PURE_PYTHON is set")
        if not sys.platform.startswith("linux"):
            # its clock is CLOCK_MONOTONIC, perf_counter_ns()'s clock on Linux only
            raise ImportError("the C hot path is used on Linux only")
        from . import _speedups
    except ImportError:
        _speedups = None
        _LedgerBase = _PyLedgerBase
        _SeriesBase = _PySeriesBase
    else:
        # its record() handles a label-less plain int in C and calls _record_py otherwise
        _LedgerBase = _speedups.LedgerBase
        _SeriesBase = _speedups.SeriesBase  # C-integer buffer, atomic take()


class _Series(_SeriesBase):
    """One (stage, labels) series: the hot-path buffer (base class) and its histogram."""

    __slots__ = ("carry_window", "first_start_unix_ns", "hist", "is_error", "key",
                 "last_end_unix_ns", "stage_id")

    def __init__(self, key: SeriesKey, ledger: Ledger, stage_id: int) -> None:
        super().__init__(ledger, ledger._flush_at, ledger._window_ns, ledger._unix_offset_ns)
        self.key = key
        self.hist = Histogram(ledger._layout)
        self.stage_id = stage_id
        #: errored or cancelled samples: any series carrying an ``outcome`` label
        self.is_error = any(k == "outcome" for k, _ in key[1])
        self.carry_window = -1  # window of buffered values before the first mark
        self.first_start_unix_ns = 0  # from merged snapshots
        self.last_end_unix_ns = 0

    def clear(self) -> None:
        self.reset()
        self.carry_window = -1
        self.first_start_unix_ns = self.last_end_unix_ns = 0
        self.hist = Histogram(self.ledger._layout)

    def span_unix_ns(self) -> tuple[int, int]:
        """(first start, last end) in unix ns over local and merged samples; 0 if none."""
        off = self.ledger._unix_offset_ns
        firsts = [v for v in (self.first_start + off if self.first_start else 0,
                              self.first_start_unix_ns) if v]
        last = max(self.last_end + off if self.last_end else 0, self.last_end_unix_ns)
        return (min(firsts) if firsts else 0), last


class Ledger(_LedgerBase):
    """HDR latency histograms per (stage, labels); thread-safe, bounded, mergeable.

    Args:
        significant_figures: HDR precision (1..5); 3 means every percentile is within 0.1%.
        highest_ms: largest value tracked; larger values are clamped to it and counted.
        max_label_sets: distinct label sets per stage before the rest fold into one series
            labelled ``overflow="other"`` (with a :class:`CardinalityWarning`).
        slowest_capacity: per-stage number of slowest request traces kept.
        window_s: length of the interval histograms behind :meth:`window`.
        windows_kept: how many recent intervals are kept per stage.
        buffer_size: records buffered on the hot path before they are folded in bulk
            (1..``MAX_BUFFER_SIZE``).

    Memory: each series grows its counts array to its largest value, ~8 KiB per doubling
    (3 significant figures): ~90 KiB for a series whose largest value is 1 ms, ~170 KiB at
    1 s, ~270 KiB at 1 h. Total is bounded by stages × ``max_label_sets`` × that, plus the
    sparse windows (16 bytes per distinct bucket per window).

    Example::

        ledger = Ledger()
        ledger.record("prefill", 12_500_000, model="chat")
        ledger.percentile("prefill", 99.0)   # -> 12.5 (ms, within 0.1%)

    Raises:
        ValueError: for invalid construction parameters.
    """

    def __init__(
        self,
        significant_figures: int = 3,
        highest_ms: int = 3_600_000,
        *,
        max_label_sets: int = 64,
        slowest_capacity: int = 64,
        window_s: float = 1.0,
        windows_kept: int = 300,
        buffer_size: int = 4096,
    ) -> None:
        if not isinstance(highest_ms, int) or highest_ms < 1:
            raise ValueError(f"highest_ms must be a positive integer, got {highest_ms!r}")
        if max_label_sets < 1 or slowest_capacity < 0 or windows_kept < 1 or buffer_size < 1:
            raise ValueError("max_label_sets, windows_kept and buffer_size must be >= 1")
        if buffer_size > MAX_BUFFER_SIZE:
            raise ValueError(
                f"buffer_size must be <= {MAX_BUFFER_SIZE} (8 bytes per value per series), "
                f"got {buffer_size!r}"
            )
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0, got {window_s!r}")
        self.significant_figures = significant_figures
        self.highest_ms = highest_ms
        self.max_label_sets = max_label_sets
        self.slowest_capacity = slowest_capacity
        self.window_s = float(window_s)
        self.windows_kept = windows_kept
        self._layout = HdrLayout(highest_ms * _NS_PER_MS, significant_figures)
        self._window_ns = int(window_s * 1e9)
        self._flush_at = buffer_size
        # perf_counter_ns -> unix ns; fixed at creation so windows of one ledger line up
        self._unix_offset_ns = time.time_ns() - time.perf_counter_ns()
        self._lock = threading.RLock()
        self._traces: list[tuple[int, dict[str, int], str, Mapping[str, str], bool, int]] = []
        self._init_state()

    def _init_state(self) -> None:
        self._by_key: dict[SeriesKey, _Series] = {}
        self._by_name: dict[str, _Series] = {}  # label-less series by stage name (hot path)
        self._series: list[_Series] = []
        self._stage_ids: dict[str, int] = {}
        self._stage_names: list[str] = []
        self._label_sets: dict[str, int] = {}
        self._overflow_warned: set[str] = set()
        self._windows: dict[tuple[int, int], _Window] = {}  # (stage_id, window_index)
        self._stage_windows: dict[int, list[int]] = {}  # stage_id -> its window indices, sorted
        self._slowest: dict[str, list[tuple[float, int, RequestTrace]]] = {}
        self._seq = itertools.count()

    # -- recording ------------------------------------------------------------------------

    def _append(self, key: SeriesKey, duration_ns: int, end_ns: int) -> None:
        """Record a validated value ending at ``end_ns`` (``perf_counter_ns`` clock)."""
        series = self._by_key.get(key) or self._series_for(key)
        series.add(duration_ns, end_ns)

    def _append_many(self, key: SeriesKey, durations: list[int], end_ns: int) -> None:
        """Record validated values that all end at ``end_ns`` (one buffer extend)."""
        (self._by_key.get(key) or self._series_for(key)).add_many(durations, end_ns)

    def _series_for(self, key: SeriesKey) -> _Series:
        """The series of ``key``, created on first use (cardinality-bounded)."""
        series = self._by_key.get(key)
        if series is not None:
            return series
        warn = False
        with self._lock:
            series = self._by_key.get(key)
            if series is None:
                series, warn = self._register(key)
        if warn:
            warnings.warn(
                f"stage {key[0]!r} has more than {self.max_label_sets} distinct label sets; "
                f"further ones are folded into labels {dict(OVERFLOW_LABELS)}. Labels must "
                "have bounded values (a route template, a model name), never request IDs or "
                "raw paths; raise Ledger(max_label_sets=...) if the set really is larger.",
                CardinalityWarning,
                stacklevel=4,
            )
        return series

    def _register(self, key: SeriesKey) -> tuple[_Series, bool]:
        """Create the series of ``key`` (lock held); past the cap, the overflow series."""
        stage = key[0]
        if key[1] != OVERFLOW_LABELS and self._label_sets.get(stage, 0) >= self.max_label_sets:
            okey = (stage, OVERFLOW_LABELS)
            overflow = self._by_key.get(okey)
            if overflow is None:
                overflow, _ = self._register(okey)
            first = stage not in self._overflow_warned
            self._overflow_warned.add(stage)
            return overflow, first  # the overflowing key itself is never stored
        stage_id = self._stage_ids.get(stage)
        if stage_id is None:
            stage_id = self._stage_ids[stage] = len(self._stage_names)
            self._stage_names.append(stage)
        if key[1] != OVERFLOW_LABELS:
            self._label_sets[stage] = self._label_sets.get(stage, 0) + 1
        series = _Series(key, self, stage_id)
        self._series.append(series)
        self._by_key[key] = series
        if not key[1]:
            self._by_name[stage] = series
        return series, False

    def _add_trace(
        self,
        total_ns: int,
        stages: dict[str, int],
        request_id: str,
        attrs: Mapping[str, str],
        error: bool,
        end_ns: int,
    ) -> None:
        if self.slowest_capacity:
            self._traces.append((total_ns, stages, request_id, attrs, error, end_ns))

    # -- folding (off the hot path, amortised) --------------------------------------------

    def _fold(self) -> None:
        with self._lock:
            for series in self._series:
                if series.pending:
                    self._fold_series(series)
            t = len(self._traces)
            if t:
                traces = self._traces[:t]
                del self._traces[:t]
                self._fold_traces(traces)

    def _fold_series(self, s: _Series) -> None:
        with self._lock:
            raw, marks = s.take()
            if not raw:
                return
            # the carry moves on before anything that may run Python code (a finalizer can
            # record into this series and fold it again, re-entering the RLock)
            carry = s.carry_window
            if marks:
                s.carry_window = marks[-1][1]
            if isinstance(raw, bytes):  # the C buffer: folded in C
                values = np.frombuffer(raw, dtype=np.int64)
                uniq, cnt = s.hist.add_raw(raw, _speedups.fold)
            else:
                values = np.fromiter(raw, dtype=np.int64, count=len(raw))
                uniq, cnt = s.hist.add_values(values)
            n = len(values)
            # split the chunk into window segments: [start, next start) -> window
            segments = [(0, carry)] if not marks or marks[0][0] > 0 else []
            segments.extend((min(pos, n), w) for pos, w in marks)
            if len(segments) == 1 and not s.is_error:
                if segments[0][1] >= 0:
                    self._window_add(s.stage_id, segments[0][1], uniq, cnt)
            else:
                bounds = [pos for pos, _ in segments[1:]] + [n]
                for (lo, w), hi in zip(segments, bounds, strict=True):
                    if hi <= lo or w < 0:
                        continue
                    if s.is_error:
                        self._window(s.stage_id, w).errors += hi - lo
                    else:
                        vals = np.minimum(values[lo:hi], self._layout.highest)
                        u, c = np.unique(self._layout.indices(vals), return_counts=True)
                        self._window_add(s.stage_id, w, u, c)

    def _window_add(
        self, stage_id: int, window_index: int, indices: IntArray, counts: IntArray
    ) -> None:
        win = self._window(stage_id, window_index)
        win.add(indices, counts)
        if window_index != self._stage_windows[stage_id][-1]:
            win.freeze()  # a late chunk for an older window: back to the sparse form

    def _window(self, stage_id: int, window_index: int) -> _Window:
        key = (stage_id, window_index)
        w = self._windows.get(key)
        if w is None:
            w = self._windows[key] = _Window()
            kept = self._stage_windows.setdefault(stage_id, [])
            if not kept or window_index > kept[-1]:
                if kept:  # the stage's newest window so far stops receiving samples
                    newest = self._windows.get((stage_id, kept[-1]))
                    if newest is not None:
                        newest.freeze()
                kept.append(window_index)
            else:  # a late sample for an older interval (or a merged snapshot)
                bisect.insort(kept, window_index)
            # keep the newest ``windows_kept`` windows of the stage
            while len(kept) > self.windows_kept:
                del self._windows[(stage_id, kept.pop(0))]
        return w

    def _fold_traces(
        self, traces: list[tuple[int, dict[str, int], str, Mapping[str, str], bool, int]]
    ) -> None:
        cap = self.slowest_capacity
        for total_ns, stages, rid, attrs, error, end_ns in traces:
            candidates = {"e2e": total_ns, **stages}
            trace: RequestTrace | None = None
            for stage, ns in candidates.items():
                heap = self._slowest.setdefault(stage, [])
                if len(heap) >= cap and ns <= heap[0][0]:
                    continue
                if trace is None:
                    trace = RequestTrace(
                        id=rid,
                        total_ms=total_ns / _NS_PER_MS,
                        stages={k: v / _NS_PER_MS for k, v in stages.items()},
                        attrs=dict(attrs),
                        outcome="error" if error else "ok",
                        start_unix_s=(end_ns + self._unix_offset_ns - total_ns) / 1e9,
                    )
                item = (float(ns), next(self._seq), trace)
                if len(heap) >= cap:
                    heapq.heapreplace(heap, item)
                else:
                    heapq.heappush(heap, item)

    # -- reading ----------------------------------------------------------------------------

    def _select(self, stage: str, labels: Mapping[str, object]) -> Histogram:
        """Merged histogram of the stage's series whose labels include ``labels``.

        Series with an ``outcome`` label (error, cancelled) are left out unless ``outcome``
        is asked for.
        """
        self._fold()
        want = make_labels(labels)
        with_outcome = any(k == "outcome" for k, _ in want)
        merged = Histogram(self._layout)
        with self._lock:
            for s in self._series:
                if s.key[0] != stage:
                    continue
                have = s.key[1]
                if not with_outcome and any(k == "outcome" for k, _ in have):
                    continue
                if all(pair in have for pair in want):
                    merged.add_histogram(s.hist)
        return merged

    def percentile(self, stage: str, percentile: float, /, **labels: object) -> float:
        """Latency in ms at ``percentile`` (0..100) of ``stage``; 0.0 when it has no samples.

        ``labels`` filter: every series of the stage whose label set contains them is merged;
        ``outcome="error"``/``"cancelled"`` series are included only when ``outcome`` is given.

        Raises:
            ValueError: ``percentile`` outside 0..100.
        """
        if not 0.0 <= percentile <= 100.0 or math.isnan(percentile):
            raise ValueError(f"percentile must be within 0..100, got {percentile!r}")
        return self._select(stage, labels).percentiles_ns([percentile])[0] / _NS_PER_MS

    def count(self, stage: str, /, **labels: object) -> int:
        """Number of samples of ``stage`` (same label filter as :meth:`percentile`)."""
        return self._select(stage, labels).total

    def count_within(self, stage: str, threshold_ms: float, /, **labels: object) -> int:
        """Samples of ``stage`` at or under ``threshold_ms`` (bucket-conservative)."""
        return self._select(stage, labels).count_at_or_below(int(threshold_ms * _NS_PER_MS))

    def mean(self, stage: str, /, **labels: object) -> float:
        """Exact mean in ms of ``stage`` (0.0 when it has no samples)."""
        h = self._select(stage, labels)
        return h.sum_ns / h.total / _NS_PER_MS if h.total else 0.0

    def span_s(self, stage: str, /, **labels: object) -> float:
        """Seconds from the first sample's start to the last sample's end of ``stage``."""
        self._fold()
        want = make_labels(labels)
        firsts, last = [], 0
        with self._lock:
            for s in self._series:
                if s.key[0] == stage and all(p in s.key[1] for p in want) and s.hist.total:
                    f, e = s.span_unix_ns()
                    if f:
                        firsts.append(f)
                    last = max(last, e)
        first = min(firsts) if firsts else 0
        return (last - first) / 1e9 if first and last > first else 0.0

    def stages(self) -> list[str]:
        """Names of the stages that have samples, in order of first appearance."""
        self._fold()
        with self._lock:
            return [n for n in self._stage_names if any(
                s.key[0] == n and s.hist.total for s in self._series
            )]

    def clamped(self) -> int:
        """Values recorded above ``highest_ms`` (clamped to it) across all series."""
        self._fold()
        with self._lock:
            return sum(s.hist.clamped for s in self._series)

    def summary(self) -> Summary:
        """Per-series statistics; ``str()`` of the result is a table."""
        self._fold()
        rows = []
        with self._lock:
            for s in self._series:
                h = s.hist
                if not h.total:
                    continue
                p = [v / _NS_PER_MS for v in h.percentiles_ns(SUMMARY_PERCENTILES)]
                rows.append(
                    SummaryRow(
                        stage=s.key[0],
                        labels=dict(s.key[1]),
                        count=h.total,
                        mean_ms=h.sum_ns / h.total / _NS_PER_MS,
                        p50_ms=p[0],
                        p90_ms=p[1],
                        p95_ms=p[2],
                        p99_ms=p[3],
                        p999_ms=p[4],
                        max_ms=h.max_ns / _NS_PER_MS,
                        clamped=h.clamped,
                    )
                )
        return Summary(rows=rows)

    def encode(self, stage: str, /, **labels: object) -> str:
        """The stage's merged histogram (ns) in the standard HdrHistogram encoding."""
        return self._select(stage, labels).encode()

    def slowest(self, stage: str = "e2e", k: int = 10) -> list[RequestTrace]:
        """The ``k`` slowest requests by their time in ``stage`` (``"e2e"``: whole request).

        Only requests run under ``perf.request()`` have traces; at most ``slowest_capacity``
        are kept per stage.
        """
        self._fold()
        with self._lock:
            heap = list(self._slowest.get(stage, []))
        heap.sort(key=lambda item: (-item[0], item[1]))
        return [t for _, _, t in heap[:k]]

    def window(self, seconds: float | None = None, stage: str = "e2e") -> list[Window]:
        """Interval histograms of ``stage``, oldest first, each ``seconds`` long.

        ``seconds`` must be a whole multiple of the ledger's ``window_s`` (default: it).
        Intervals with no samples inside the covered span are returned empty, so a quiet
        window is visible as such.

        Raises:
            ValueError: ``seconds`` is not a positive multiple of ``window_s``.
        """
        seconds = self.window_s if seconds is None else seconds
        factor = seconds / self.window_s
        if seconds <= 0 or abs(factor - round(factor)) > 1e-9 or round(factor) < 1:
            raise ValueError(
                f"seconds must be a positive multiple of the ledger's window_s "
                f"({self.window_s}), got {seconds!r}"
            )
        factor_i = round(factor)
        self._fold()
        with self._lock:
            stage_id = self._stage_ids.get(stage)
            if stage_id is None:
                return []
            base = {w: self._windows[(stage_id, w)] for w in self._stage_windows.get(stage_id, [])}
        if not base:
            return []
        groups: dict[int, list[_Window]] = {}
        for w, win in base.items():
            groups.setdefault(w // factor_i, []).append(win)
        out = []
        for g in range(min(groups), max(groups) + 1):
            hist = Histogram(self._layout)
            errors = 0
            for win in groups.get(g, []):
                errors += win.errors
                w_idx, w_cnt = win.sparse()
                if w_idx.size:
                    hist.add_sparse(w_idx, w_cnt)
            start = g * factor_i * self._window_ns / 1e9
            out.append(Window(start, start + seconds, hist, errors))
        return out

    def check(self, budget: Budget) -> BudgetReport:
        """Check this ledger against a latency budget (see :class:`Budget`)."""
        from ._budget import check

        return check(self, budget)

    # -- snapshots and merging --------------------------------------------------------------

    def snapshot(self) -> LedgerSnapshot:
        """A JSON-serialisable copy of everything; ``Ledger.merge`` adds it back exactly."""
        self._fold()
        with self._lock:
            series = [
                SeriesSnapshot(
                    stage=s.key[0],
                    labels=dict(s.key[1]),
                    histogram=s.hist.encode(),
                    count=s.hist.total,
                    sum_ns=s.hist.sum_ns,
                    min_ns=s.hist.min_ns,
                    max_ns=s.hist.max_ns,
                    clamped=s.hist.clamped,
                    first_start_unix_ns=s.span_unix_ns()[0],
                    last_end_unix_ns=s.span_unix_ns()[1],
                )
                for s in self._series
                if s.hist.total
            ]
            windows = [
                WindowSnapshot(
                    stage=self._stage_names[sid],
                    window_index=w,
                    indices=win.sparse()[0].tolist(),
                    counts=win.sparse()[1].tolist(),
                    errors=win.errors,
                )
                for (sid, w), win in sorted(self._windows.items())
            ]
            slowest = {
                stage: [t for _, _, t in sorted(heap, key=lambda i: (-i[0], i[1]))]
                for stage, heap in self._slowest.items()
            }
        return LedgerSnapshot(
            significant_figures=self.significant_figures,
            highest_ms=self.highest_ms,
            window_s=self.window_s,
            series=series,
            windows=windows,
            slowest=slowest,
        )

    def merge(self, other: LedgerSnapshot | Ledger) -> None:
        """Add another ledger's (or a snapshot's) samples to this one, exactly.

        Raises:
            LedgerMismatchError: precision, range or window length differ; nothing is added.
        """
        snap = other.snapshot() if isinstance(other, Ledger) else other
        if (
            snap.significant_figures != self.significant_figures
            or snap.highest_ms != self.highest_ms
            or snap.window_s != self.window_s
        ):
            raise LedgerMismatchError(
                "cannot merge: snapshot has significant_figures="
                f"{snap.significant_figures}, highest_ms={snap.highest_ms}, "
                f"window_s={snap.window_s}; this ledger has {self.significant_figures}, "
                f"{self.highest_ms}, {self.window_s}"
            )
        # decode everything first so a bad snapshot changes nothing
        decoded = []
        for s in snap.series:
            h = Histogram.decode(self._layout, s.histogram)
            if h.total != s.count:
                raise LedgerMismatchError(
                    f"series {s.stage!r} {s.labels}: histogram holds {h.total} samples, "
                    f"snapshot says {s.count}"
                )
            h.sum_ns, h.min_ns, h.max_ns, h.clamped = s.sum_ns, s.min_ns, s.max_ns, s.clamped
            decoded.append((s, h))
        windows = [(ws, *self._window_counts(ws)) for ws in snap.windows]
        self._fold()
        for s, _ in decoded:  # create series (and warn on overflow) outside the lock
            self._series_for((s.stage, make_labels(s.labels)))
        with self._lock:
            for s, h in decoded:
                series = self._series_for((s.stage, make_labels(s.labels)))
                series.hist.add_histogram(h)
                if s.first_start_unix_ns and (
                    not series.first_start_unix_ns
                    or s.first_start_unix_ns < series.first_start_unix_ns
                ):
                    series.first_start_unix_ns = s.first_start_unix_ns
                series.last_end_unix_ns = max(series.last_end_unix_ns, s.last_end_unix_ns)
            for ws, w_idx, w_cnt in windows:
                stage_id = self._stage_ids.get(ws.stage)
                if stage_id is None:
                    stage_id = self._stage_ids[ws.stage] = len(self._stage_names)
                    self._stage_names.append(ws.stage)
                self._window(stage_id, ws.window_index).errors += ws.errors
                if w_idx.size:
                    self._window_add(stage_id, ws.window_index, w_idx, w_cnt)
            for stage, traces in snap.slowest.items():
                heap = self._slowest.setdefault(stage, [])
                for t in traces:
                    ns = t.total_ms if stage == "e2e" else t.stages.get(stage, 0.0)
                    item = (float(ns * _NS_PER_MS), next(self._seq), t)
                    if len(heap) < self.slowest_capacity:
                        heapq.heappush(heap, item)
                    elif item[0] > heap[0][0]:
                        heapq.heapreplace(heap, item)

    def _window_counts(self, ws: WindowSnapshot) -> tuple[IntArray, IntArray]:
        """A snapshot window's counts as sorted unique indices (validated; duplicates add).

        Raises:
            LedgerMismatchError: indices outside this layout, negative counts or lengths
                that differ.
        """
        idx = np.asarray(ws.indices, dtype=np.int64)
        cnt = np.asarray(ws.counts, dtype=np.int64)
        if (
            idx.shape != cnt.shape
            or ws.errors < 0
            or (idx.size and (int(idx.min()) < 0 or int(idx.max()) >= self._layout.counts_len))
            or (cnt.size and int(cnt.min()) < 0)
        ):
            raise LedgerMismatchError(
                f"window {ws.window_index} of stage {ws.stage!r}: indices must lie in "
                f"0..{self._layout.counts_len - 1}, counts be >= 0 and as many as the indices"
            )
        if idx.size and not bool(np.all(idx[1:] > idx[:-1])):
            uniq, inverse = np.unique(idx, return_inverse=True)
            summed = np.zeros(uniq.size, dtype=np.int64)
            np.add.at(summed, inverse, cnt)
            idx, cnt = uniq, summed
        return idx, cnt

    def reset(self) -> None:
        """Drop every sample, window and trace (configuration is kept)."""
        with self._lock:
            del self._traces[:]
            # series objects stay (decorators cache them); their contents go
            for series in self._series:
                series.clear()
            self._windows.clear()
            self._stage_windows.clear()
            self._slowest.clear()

    def __repr__(self) -> str:
        return (
            f"Ledger(significant_figures={self.significant_figures}, "
            f"highest_ms={self.highest_ms}, series={len(self._series)})"
        )


def _record_py(self: Ledger, stage: str, duration_ns: int, /, **labels: object) -> None:
    """``Ledger.record`` in Python (the C base class calls it beyond the plain-int case).

    Record one duration (integer nanoseconds) for ``stage`` under ``labels``.

    Raises:
        InvalidDurationError: ``duration_ns`` is negative or not an integer.
        TypeError: ``stage`` is not a non-empty string.
    """
    if type(duration_ns) is not int:  # fast path: a plain int (bool is not int here)
        if isinstance(duration_ns, bool) or not isinstance(duration_ns, (int, np.integer)):
            raise InvalidDurationError(
                "duration_ns must be an integer number of nanoseconds, got "
                f"{duration_ns!r} (convert seconds with int(seconds * 1e9))"
            )
        duration_ns = int(duration_ns)
    if duration_ns < 0:
        raise InvalidDurationError(f"duration_ns must be >= 0, got {duration_ns}")
    if duration_ns > self._layout.highest:
        # beyond the range (possibly beyond int64): keep it above `highest`, so the fold
        # clamps and counts it like any other out-of-range value
        duration_ns = self._layout.highest + 1
    if type(stage) is not str or not stage:
        raise TypeError(f"stage must be a non-empty str, got {stage!r}")
    if labels:
        key = (stage, make_labels(labels))
        series = self._by_key.get(key) or self._series_for(key)
    else:
        series = self._by_name.get(stage) or self._series_for((stage, ()))
    series.add(duration_ns, time.perf_counter_ns())


if _speedups is not None:
    _speedups.configure_ledger(_record_py)

_default: list[Ledger] = [Ledger()]


def check_ledger(ledger: object, where: str) -> Ledger | None:
    """``ledger`` when it is a :class:`Ledger` or None; else a TypeError naming ``where``."""
    if ledger is None or isinstance(ledger, Ledger):
        return ledger
    raise TypeError(f"{where}: ledger must be a perf.Ledger or None, got {type(ledger).__name__}")


def default_ledger() -> Ledger:
    """The ledger that stages record into when none is passed."""
    return _default[0]


def set_default_ledger(ledger: Ledger) -> Ledger:
    """Install ``ledger`` as the default; returns the previous one (to restore it).

    Raises:
        TypeError: ``ledger`` is not a :class:`Ledger`.
    """
    if not isinstance(ledger, Ledger):
        raise TypeError(f"expected a Ledger, got {type(ledger).__name__}")
    previous = _default[0]
    _default[0] = ledger
    return previous
