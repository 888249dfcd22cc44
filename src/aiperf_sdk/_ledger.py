"""The ledger: HDR histograms keyed by (stage, labels), the one source of numbers.

Hot path: ``_append`` puts a ``(key, duration_ns, end_ns)`` tuple on a list (atomic under the
GIL, and under free-threading where list appends are internally locked). Every
``buffer_size`` records, or before any read, the buffer is folded into the histograms in bulk
with numpy under the ledger's lock. Items are never swapped out of the list: the fold copies
the first ``n`` and deletes exactly those, so an append racing with the fold is kept for the
next one.
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
import time
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

import numpy as np

from ._errors import CardinalityWarning, InvalidDurationError, LedgerMismatchError
from ._hdr import HdrLayout, Histogram, IntArray
from ._models import (
    LedgerSnapshot,
    RequestTrace,
    SeriesSnapshot,
    Summary,
    SummaryRow,
    WindowSnapshot,
)

if TYPE_CHECKING:
    from ._budget import Budget, BudgetReport

Labels = tuple[tuple[str, str], ...]
SeriesKey = tuple[str, Labels]

#: label set that a stage's series beyond ``max_label_sets`` fold into
OVERFLOW_LABELS: Final[Labels] = (("overflow", "other"),)
ERROR_LABEL: Final[tuple[str, str]] = ("outcome", "error")
CANCELLED_LABEL: Final[tuple[str, str]] = ("outcome", "cancelled")
_NS_PER_MS: Final = 1_000_000
SUMMARY_PERCENTILES: Final = [50.0, 90.0, 95.0, 99.0, 99.9]


def make_labels(labels: Mapping[str, object]) -> Labels:
    """Canonical (sorted, stringified) label tuple."""
    if not labels:
        return ()
    return tuple(sorted((str(k), str(v)) for k, v in labels.items()))


class _Series:
    __slots__ = ("first_start_unix_ns", "hist", "key", "last_end_unix_ns", "stage_id")

    def __init__(self, key: SeriesKey, hist: Histogram, stage_id: int) -> None:
        self.key = key
        self.hist = hist
        self.stage_id = stage_id
        self.first_start_unix_ns = 0
        self.last_end_unix_ns = 0

    @property
    def is_error(self) -> bool:
        """Errored or cancelled samples: any series carrying an ``outcome`` label."""
        return any(k == "outcome" for k, _ in self.key[1])


class _Window:
    """Sparse interval histogram of one stage over one window: ok values plus error count."""

    __slots__ = ("counts", "errors", "indices")

    def __init__(self) -> None:
        self.indices: IntArray = np.zeros(0, dtype=np.int64)
        self.counts: IntArray = np.zeros(0, dtype=np.int64)
        self.errors = 0

    def add(self, indices: IntArray, counts: IntArray) -> None:
        if self.indices.size == 0:
            self.indices, self.counts = indices.copy(), counts.copy()
            return
        idx = np.concatenate([self.indices, indices])
        cnt = np.concatenate([self.counts, counts])
        uniq, inverse = np.unique(idx, return_inverse=True)
        summed = np.zeros(uniq.size, dtype=np.int64)
        np.add.at(summed, inverse, cnt)
        self.indices, self.counts = uniq, summed


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


class Ledger:
    """HDR latency histograms per (stage, labels); thread-safe, bounded, mergeable.

    Args:
        significant_figures: HDR precision (1..5); 3 means every percentile is within 0.1%.
        highest_ms: largest value tracked; larger values are clamped to it and counted.
        max_label_sets: distinct label sets per stage before the rest fold into one series
            labelled ``overflow="other"`` (with a :class:`CardinalityWarning`).
        slowest_capacity: per-stage number of slowest request traces kept.
        window_s: length of the interval histograms behind :meth:`window`.
        windows_kept: how many recent intervals are kept per stage.
        buffer_size: records buffered on the hot path before they are folded in bulk.

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
        self._buf: list[tuple[SeriesKey, int, int]] = []
        self._traces: list[tuple[int, dict[str, int], str, Mapping[str, str], bool, int]] = []
        self._init_state()

    def _init_state(self) -> None:
        self._ids: dict[SeriesKey, int] = {}
        self._series: list[_Series] = []
        self._stage_ids: dict[str, int] = {}
        self._stage_names: list[str] = []
        self._label_sets: dict[str, int] = {}
        self._overflow_warned: set[str] = set()
        self._windows: dict[tuple[int, int], _Window] = {}  # (stage_id, window_index)
        self._slowest: dict[str, list[tuple[float, int, RequestTrace]]] = {}
        self._seq = itertools.count()

    # -- recording ------------------------------------------------------------------------

    def record(self, stage: str, duration_ns: int, /, **labels: object) -> None:
        """Record one duration (integer nanoseconds) for ``stage`` under ``labels``.

        Raises:
            InvalidDurationError: ``duration_ns`` is negative or not an integer.
            TypeError: ``stage`` is not a non-empty string.
        """
        if not isinstance(stage, str) or not stage:
            raise TypeError(f"stage must be a non-empty str, got {stage!r}")
        if isinstance(duration_ns, bool) or not isinstance(duration_ns, (int, np.integer)):
            raise InvalidDurationError(
                f"duration_ns must be an integer number of nanoseconds, got {duration_ns!r}"
                " (convert seconds with int(seconds * 1e9))"
            )
        if duration_ns < 0:
            raise InvalidDurationError(f"duration_ns must be >= 0, got {duration_ns}")
        self._append((stage, make_labels(labels)), int(duration_ns), time.perf_counter_ns())

    def _append(self, key: SeriesKey, duration_ns: int, end_ns: int) -> None:
        buf = self._buf
        buf.append((key, duration_ns, end_ns))
        if len(buf) >= self._flush_at:
            self._fold()

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
        warn_stages: list[str] = []
        with self._lock:
            n = len(self._buf)
            if n:
                chunk = self._buf[:n]
                del self._buf[:n]
                warn_stages = self._fold_chunk(chunk)
            t = len(self._traces)
            if t:
                traces = self._traces[:t]
                del self._traces[:t]
                self._fold_traces(traces)
        for stage in warn_stages:
            warnings.warn(
                f"stage {stage!r} has more than {self.max_label_sets} distinct label sets; "
                f"further ones are folded into labels {dict(OVERFLOW_LABELS)}. Labels must "
                "have bounded values (a route template, a model name), never request IDs or "
                "raw paths; raise Ledger(max_label_sets=...) if the set really is larger.",
                CardinalityWarning,
                stacklevel=3,
            )

    def _series_id(self, key: SeriesKey, warn: list[str]) -> int:
        sid = self._ids.get(key)
        if sid is not None:
            return sid
        stage = key[0]
        if self._label_sets.get(stage, 0) >= self.max_label_sets:
            okey = (stage, OVERFLOW_LABELS)
            if okey not in self._ids:
                self._register(okey)
            if stage not in self._overflow_warned:
                self._overflow_warned.add(stage)
                warn.append(stage)
            return self._ids[okey]
        return self._register(key)

    def _register(self, key: SeriesKey) -> int:
        stage = key[0]
        stage_id = self._stage_ids.get(stage)
        if stage_id is None:
            stage_id = self._stage_ids[stage] = len(self._stage_names)
            self._stage_names.append(stage)
        if key[1] != OVERFLOW_LABELS:
            self._label_sets[stage] = self._label_sets.get(stage, 0) + 1
        sid = len(self._series)
        self._series.append(_Series(key, Histogram(self._layout), stage_id))
        self._ids[key] = sid
        return sid

    def _fold_chunk(self, chunk: list[tuple[SeriesKey, int, int]]) -> list[str]:
        keys, durations, ends = zip(*chunk, strict=True)
        warn: list[str] = []
        unknown = set(keys).difference(self._ids)
        lookup: Mapping[SeriesKey, int] = self._ids
        if unknown:
            extra = {k: self._series_id(k, warn) for k in unknown}
            lookup = {**self._ids, **extra}
        sids = np.fromiter(map(lookup.__getitem__, keys), dtype=np.int64, count=len(keys))
        values = np.fromiter(durations, dtype=np.int64, count=len(durations))
        end_arr = np.fromiter(ends, dtype=np.int64, count=len(ends)) + self._unix_offset_ns

        order = np.argsort(sids, kind="stable")
        sids_sorted = sids[order]
        bounds = np.flatnonzero(np.diff(sids_sorted)) + 1
        starts = np.concatenate(([0], bounds))
        stops = np.concatenate((bounds, [len(sids_sorted)]))
        for lo, hi in zip(starts.tolist(), stops.tolist(), strict=True):
            sel = order[lo:hi]
            series = self._series[int(sids_sorted[lo])]
            vals = values[sel]
            e = end_arr[sel]
            series.hist.add_values(vals)
            first = int((e - vals).min())
            if series.first_start_unix_ns == 0 or first < series.first_start_unix_ns:
                series.first_start_unix_ns = first
            series.last_end_unix_ns = max(series.last_end_unix_ns, int(e.max()))
            self._fold_windows(series, vals, e)
        return warn

    def _fold_windows(self, series: _Series, values: IntArray, ends: IntArray) -> None:
        win = ends // self._window_ns
        if series.is_error:
            w_uniq, w_cnt = np.unique(win, return_counts=True)
            for w, c in zip(w_uniq.tolist(), w_cnt.tolist(), strict=True):
                self._window(series.stage_id, w).errors += c
        else:
            idx = self._layout.indices(np.minimum(values, self._layout.highest))
            combined = (win - win.min()) * self._layout.counts_len + idx
            uniq, cnt = np.unique(combined, return_counts=True)
            w_rel = uniq // self._layout.counts_len
            w_idx = uniq % self._layout.counts_len
            base = int(win.min())
            for w in np.unique(w_rel).tolist():
                m = w_rel == w
                self._window(series.stage_id, base + w).add(w_idx[m], cnt[m])
        self._trim_windows()

    def _window(self, stage_id: int, window_index: int) -> _Window:
        key = (stage_id, window_index)
        w = self._windows.get(key)
        if w is None:
            w = self._windows[key] = _Window()
        return w

    def _trim_windows(self) -> None:
        # keep the newest `windows_kept` window indices per stage
        by_stage: dict[int, list[int]] = {}
        for sid, w in self._windows:
            by_stage.setdefault(sid, []).append(w)
        for sid, wins in by_stage.items():
            if len(wins) > self.windows_kept:
                for w in sorted(wins)[: len(wins) - self.windows_kept]:
                    del self._windows[(sid, w)]

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
        first, last = 0, 0
        with self._lock:
            for s in self._series:
                if s.key[0] == stage and all(p in s.key[1] for p in want) and s.hist.total:
                    first = s.first_start_unix_ns if not first else min(
                        first, s.first_start_unix_ns
                    )
                    last = max(last, s.last_end_unix_ns)
        return (last - first) / 1e9 if last > first else 0.0

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
            base = {w: win for (sid, w), win in self._windows.items() if sid == stage_id}
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
                if win.indices.size:
                    hist.add_sparse(win.indices, win.counts)
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
                    first_start_unix_ns=s.first_start_unix_ns,
                    last_end_unix_ns=s.last_end_unix_ns,
                )
                for s in self._series
                if s.hist.total
            ]
            windows = [
                WindowSnapshot(
                    stage=self._stage_names[sid],
                    window_index=w,
                    indices=win.indices.tolist(),
                    counts=win.counts.tolist(),
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
        self._fold()
        warn: list[str] = []
        with self._lock:
            for s, h in decoded:
                series = self._series[self._series_id((s.stage, make_labels(s.labels)), warn)]
                series.hist.add_histogram(h)
                if s.first_start_unix_ns and (
                    not series.first_start_unix_ns
                    or s.first_start_unix_ns < series.first_start_unix_ns
                ):
                    series.first_start_unix_ns = s.first_start_unix_ns
                series.last_end_unix_ns = max(series.last_end_unix_ns, s.last_end_unix_ns)
            for ws in snap.windows:
                stage_id = self._stage_ids.get(ws.stage)
                if stage_id is None:
                    stage_id = self._stage_ids[ws.stage] = len(self._stage_names)
                    self._stage_names.append(ws.stage)
                win = self._window(stage_id, ws.window_index)
                win.errors += ws.errors
                if ws.indices:
                    win.add(
                        np.asarray(ws.indices, dtype=np.int64),
                        np.asarray(ws.counts, dtype=np.int64),
                    )
            self._trim_windows()
            for stage, traces in snap.slowest.items():
                heap = self._slowest.setdefault(stage, [])
                for t in traces:
                    ns = t.total_ms if stage == "e2e" else t.stages.get(stage, 0.0)
                    item = (float(ns * _NS_PER_MS), next(self._seq), t)
                    if len(heap) < self.slowest_capacity:
                        heapq.heappush(heap, item)
                    elif item[0] > heap[0][0]:
                        heapq.heapreplace(heap, item)
        for stage in warn:
            warnings.warn(
                f"stage {stage!r}: merged label sets past max_label_sets fold into "
                f"{dict(OVERFLOW_LABELS)}",
                CardinalityWarning,
                stacklevel=2,
            )

    def reset(self) -> None:
        """Drop every sample, window and trace (configuration is kept)."""
        with self._lock:
            del self._buf[:]
            del self._traces[:]
            self._init_state()

    def __repr__(self) -> str:
        return (
            f"Ledger(significant_figures={self.significant_figures}, "
            f"highest_ms={self.highest_ms}, series={len(self._series)})"
        )


_default: list[Ledger] = [Ledger()]


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
