from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram
from hypothesis import given, settings
from hypothesis import strategies as st

import aiperf_sdk as perf


def _record_all(ledger: perf.Ledger, stage: str, values: np.ndarray, **labels: object) -> None:
    for v in values.tolist():
        ledger.record(stage, int(v), **labels)


@pytest.mark.parametrize("sig", [2, 3, 4])
def test_percentiles_agree_with_numpy_within_hdr_precision(sig: int) -> None:
    rng = np.random.default_rng(sig)
    values = rng.lognormal(mean=15, sigma=1.5, size=50_000).astype(np.int64) + 1
    ledger = perf.Ledger(significant_figures=sig)
    _record_all(ledger, "prefill", values)
    # HDR buckets are at most 1 part in 10^sig wide; the reported value is the bucket's top
    ordered = np.sort(values)
    for q in (50.0, 90.0, 95.0, 99.0, 99.9):
        rank = max(int(q * values.size / 100 + 0.5), 1)  # HdrHistogram's rank definition
        exact = ordered[rank - 1] / 1e6
        got = ledger.percentile("prefill", q)
        assert exact <= got <= exact * (1 + 10.0**-sig), q
        numpy_exact = float(np.percentile(values, q)) / 1e6
        assert got == pytest.approx(numpy_exact, rel=10.0 ** -(sig - 1) + 2e-3), q
    assert ledger.count("prefill") == values.size
    assert ledger.mean("prefill") == pytest.approx(values.mean() / 1e6, rel=1e-12)
    assert ledger.summary().row("prefill").max_ms == values.max() / 1e6


def test_percentiles_equal_hdrhistogram_record_value() -> None:
    rng = np.random.default_rng(7)
    values = rng.integers(1, 5_000_000_000, size=20_000)
    ref = HdrHistogram(1, 3_600_000 * 1_000_000, 3)
    ledger = perf.Ledger()
    for v in values.tolist():
        ref.record_value(v)
        ledger.record("s", v)
    # identical to hdrh, except that nothing is reported above the exact maximum
    top = int(values.max())
    for q in (1.0, 50.0, 99.0, 99.99):
        assert ledger.percentile("s", q) == min(ref.get_value_at_percentile(q), top) / 1e6


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=10**13), min_size=1, max_size=300))
def test_any_values_bucket_like_hdrh(values: list[int]) -> None:
    ledger = perf.Ledger(buffer_size=64)
    highest = ledger.highest_ms * 1_000_000
    ref = HdrHistogram(1, highest, 3)
    for v in values:
        ledger.record("x", v)
        ref.record_value(min(v, highest))
    assert ledger.count("x") == len(values)
    assert ledger.clamped() == sum(v > highest for v in values)
    for q in (0.0, 50.0, 100.0):
        want = min(ref.get_value_at_percentile(q), max(min(v, highest) for v in values))
        assert ledger.percentile("x", q) == want / 1e6


@pytest.mark.parametrize("bad", [-1, 1.5, 2.0, "10", None, True, float("nan")])
def test_bad_durations_are_rejected_and_change_nothing(bad: object) -> None:
    ledger = perf.Ledger()
    ledger.record("s", 5)
    with pytest.raises(perf.InvalidDurationError):
        ledger.record("s", bad)  # type: ignore[arg-type]
    assert ledger.count("s") == 1
    assert isinstance(perf.InvalidDurationError("x"), ValueError)


def test_bad_stage_and_percentile() -> None:
    ledger = perf.Ledger()
    with pytest.raises(TypeError):
        ledger.record("", 1)
    with pytest.raises(ValueError, match=r"0\.\.100"):
        ledger.percentile("s", 101)
    with pytest.raises(ValueError):
        perf.Ledger(significant_figures=0)
    with pytest.raises(ValueError):
        perf.Ledger(highest_ms=0)


def test_out_of_range_is_clamped_and_counted() -> None:
    ledger = perf.Ledger(highest_ms=10)
    ledger.record("s", 5_000_000)
    ledger.record("s", 60_000_000_000)  # 60 s into a 10 ms ledger
    assert ledger.count("s") == 2
    assert ledger.clamped() == 1
    assert ledger.percentile("s", 100) == pytest.approx(10.0, rel=1e-3)
    assert ledger.summary().row("s").clamped == 1


def test_eight_threads_lose_no_count() -> None:
    ledger = perf.Ledger(buffer_size=1000)
    n = 25_000

    def worker(i: int) -> None:
        for k in range(n):
            ledger.record("s", k + 1, worker=str(i % 2))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ledger.count("s") == 8 * n
    assert ledger.count("s", worker="0") == 4 * n


def test_label_filter_merges_series_and_excludes_errors() -> None:
    ledger = perf.Ledger()
    ledger.record("p", 1_000_000, model="a")
    ledger.record("p", 3_000_000, model="b")
    ledger.record("p", 9_000_000, model="a", outcome="error")
    assert ledger.count("p") == 2
    assert ledger.count("p", model="a") == 1
    assert ledger.count("p", outcome="error") == 1
    assert ledger.percentile("p", 100) == pytest.approx(3.0, rel=1e-3)
    assert ledger.count("nope") == 0 and ledger.percentile("nope", 99) == 0.0
    assert ledger.stages() == ["p"]


def test_encode_is_standard_hdrhistogram() -> None:
    ledger = perf.Ledger()
    values = np.arange(1, 10_001) * 1000
    _record_all(ledger, "prefill", values, model="m")
    encoded = ledger.encode("prefill", model="m")
    assert encoded.startswith("HISTFAAA")
    h = HdrHistogram.decode(encoded)
    assert h.get_total_count() == 10_000
    assert h.get_value_at_percentile(99) / 1e6 == ledger.percentile("prefill", 99)


def test_snapshot_roundtrips_json_and_merges_exactly() -> None:
    rng = np.random.default_rng(1)
    a, b, both = perf.Ledger(), perf.Ledger(), perf.Ledger()
    for ledger, seed_vals in ((a, rng.integers(1, 10**9, 3000)), (b, rng.integers(1, 10**8, 5000))):
        with perf.request(ledger=ledger):
            pass
        for v in seed_vals.tolist():
            ledger.record("s", v, host="h")
            both.record("s", v, host="h")
    snap = perf.LedgerSnapshot.model_validate_json(json.dumps(b.snapshot().model_dump()))
    a.merge(snap)
    assert a.count("s") == 8000 == both.count("s")
    for q in (50.0, 99.0, 99.9, 100.0):
        assert a.percentile("s", q) == both.percentile("s", q)
    assert a.mean("s") == pytest.approx(both.mean("s"), rel=1e-12)
    assert a.count("e2e") == 2 and len(a.slowest(k=10)) == 2
    assert a.encode("s") == both.encode("s")


def test_merge_mismatch_changes_nothing() -> None:
    a = perf.Ledger()
    a.record("s", 100)
    other = perf.Ledger(significant_figures=2)
    other.record("s", 100)
    with pytest.raises(perf.LedgerMismatchError):
        a.merge(other)
    bad = a.snapshot().model_copy(update={"series": [
        a.snapshot().series[0].model_copy(update={"count": 99})
    ]})
    with pytest.raises(perf.LedgerMismatchError):
        a.merge(bad)
    assert a.count("s") == 1


def test_slowest_keeps_bounded_breakdowns() -> None:
    ledger = perf.Ledger(slowest_capacity=5)
    for i in range(50):
        with perf.request(id=f"r{i}", ledger=ledger, shard="0"):
            ledger.record("noise", 1)
    traces = ledger.slowest("e2e", k=100)
    assert len(traces) == 5
    assert traces == sorted(traces, key=lambda t: -t.total_ms)
    assert all(t.attrs == {"shard": "0"} for t in traces)


def test_slowest_by_stage_returns_the_slow_requests_by_id() -> None:
    ledger = perf.Ledger(slowest_capacity=3)
    import time

    for i in range(10):
        with perf.request(id=f"req{i}", ledger=ledger), perf.stage("prefill"):
            time.sleep(0.02 if i in (3, 7) else 0.0)
    slow = ledger.slowest("prefill", k=2)
    assert {t.id for t in slow} == {"req3", "req7"}
    assert all(t.stages["prefill"] >= 19.0 for t in slow)


def _one_second_windows() -> tuple[perf.Ledger, int, int]:
    """(ledger with 1 s windows, ns per window, a window's start): white-box, the ledger's
    perf_counter -> unix offset is zeroed so samples land at exact window boundaries."""
    ledger = perf.Ledger(window_s=1.0)
    ledger._unix_offset_ns = 0
    base = 1_000_000_000
    return ledger, base, (10**12 // base) * base


def test_windows_count_and_compliance() -> None:
    ledger, base, t0 = _one_second_windows()
    for w in range(3):
        for k in range(10):
            ledger._append(("e2e", ()), (k + 1) * 1_000_000, t0 + w * base + k)
    ledger._append(("e2e", (("outcome", "error"),)), 1, t0 + 2 * base)
    wins = ledger.window(1)
    assert [w.count for w in wins] == [10, 10, 10]
    assert [w.errors for w in wins] == [0, 0, 1]
    assert wins[0].count_within(5.01) == 5
    # a value in the bucket that straddles the threshold is not counted as within
    assert wins[0].count_within(5.0) == 4
    assert wins[0].percentile(50) == pytest.approx(5.0, rel=1e-3)
    merged = ledger.window(3)
    assert sum(w.count for w in merged) == 30
    with pytest.raises(ValueError, match="multiple"):
        ledger.window(1.5)
    assert ledger.window(1, stage="unknown") == []


def test_windows_are_bounded() -> None:
    ledger = perf.Ledger(window_s=1.0, windows_kept=4)
    ledger._unix_offset_ns = 0
    for w in range(10):
        ledger._append(("e2e", ()), 1000, w * 1_000_000_000)
    assert len(ledger.window(1)) == 4


def test_reset_and_summary_table() -> None:
    ledger = perf.Ledger()
    ledger.record("prefill", 2_000_000, model="m")
    text = str(ledger.summary())
    assert "prefill" in text and "model=m" in text and "2.000" in text
    ledger.reset()
    assert ledger.stages() == [] and ledger.summary().rows == []


def test_series_memory_grows_with_largest_value_only() -> None:
    ledger = perf.Ledger()
    ledger.record("fast", 500_000)  # 0.5 ms
    ledger.count("fast")
    small = ledger._series[0].hist.counts.nbytes
    ledger.record("slow", 3_000_000_000_000)  # 50 min
    ledger.count("slow")
    big = ledger._series[1].hist.counts.nbytes
    assert small < 100 * 1024 < big <= 300 * 1024


def test_records_racing_a_blocked_fold_are_all_kept() -> None:
    """A reader holds the ledger's lock while writers fill the buffer many times over: every
    writer that triggers a fold waits for the lock, the others keep buffering (the buffer
    grows past ``buffer_size``), and once the lock is free every value is counted once."""
    ledger = perf.Ledger(buffer_size=4)
    ledger.record("s", 1)  # create the series before the lock is taken
    held, release = threading.Event(), threading.Event()

    def reader() -> None:
        with ledger._lock:
            held.set()
            release.wait(10)

    values = [[(w * 1000 + k + 1) * 1000 for k in range(50)] for w in range(8)]

    def writer(vals: list[int]) -> None:
        for v in vals:
            ledger.record("s", v)

    r = threading.Thread(target=reader)
    r.start()
    held.wait(10)
    writers = [threading.Thread(target=writer, args=(v,)) for v in values]
    for t in writers:
        t.start()
    # each writer buffers until its add finds the buffer full and waits for the lock: the
    # first after 3 values (1 + 3 = buffer_size), the 7 others after one value each
    series = ledger._series[0]
    deadline = time.monotonic() + 30
    while series.pending < 4 + 7 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert series.pending == 4 + 7  # past buffer_size: nothing dropped while the fold waits
    release.set()
    r.join()
    for t in writers:
        t.join()
    flat = [1] + [v for vals in values for v in vals]
    assert ledger.count("s") == len(flat)
    assert ledger.mean("s") == pytest.approx(sum(flat) / len(flat) / 1e6)
    assert ledger.percentile("s", 100) == max(flat) / 1e6


def test_open_window_is_frozen_and_late_samples_still_count() -> None:
    ledger, base, t0 = _one_second_windows()
    for k in range(5):
        ledger._append(("e2e", ()), 1_000_000, t0 + k)  # window 0
    for k in range(3):
        ledger._append(("e2e", ()), 2_000_000, t0 + base + k)  # window 1
    # another series of the stage reports late samples for window 0
    ledger._append(("e2e", (("route", "/a"),)), 3_000_000, t0 + 10)
    wins = ledger.window(1)
    assert [w.count for w in wins] == [6, 3]
    assert wins[0].percentile(100) == pytest.approx(3.0, rel=1e-3)
    stage_id = ledger._stage_ids["e2e"]
    first, newest = (ledger._windows[(stage_id, t0 // base + i)] for i in (0, 1))
    assert first._dense is None  # history is kept sparse
    assert newest._dense is not None  # the open window takes chunks densely
    idx, cnt = first.sparse()
    assert idx.tolist() == sorted(idx.tolist()) and int(cnt.sum()) == 6


def test_huge_range_sums_exactly() -> None:
    """Values near the top of int64 (a huge highest_ms): the exact sum never wraps."""
    ledger = perf.Ledger(highest_ms=9_000_000_000_000)
    for _ in range(3):
        ledger.record("x", 9 * 10**18)
    assert ledger.count("x") == 3
    assert ledger.mean("x") == 9 * 10**12


def test_merge_validates_and_canonicalises_snapshot_windows() -> None:
    src = perf.Ledger()
    src.record("s", 1000)
    snap = src.snapshot()
    win = snap.windows[0]
    index = win.indices[0]
    # a hand-made snapshot listing one bucket twice: both counts are added
    dup = snap.model_copy(update={"windows": [
        win.model_copy(update={"indices": [index, index], "counts": [1, 2]})
    ]})
    a = perf.Ledger()
    a.merge(dup)
    assert sum(w.count for w in a.window(stage="s")) == 3
    # out of range, negative or mismatched: rejected before anything is merged
    b = perf.Ledger()
    for update in ({"indices": [10**9], "counts": [1]}, {"indices": [index], "counts": [-1]},
                   {"indices": [index], "counts": [1, 1]}):
        bad = snap.model_copy(update={"windows": [win.model_copy(update=update)]})
        with pytest.raises(perf.LedgerMismatchError, match="window"):
            b.merge(bad)
    assert b.count("s") == 0 and b.window(stage="s") == []


def test_buffer_size_is_bounded() -> None:
    with pytest.raises(ValueError, match="buffer_size"):
        perf.Ledger(buffer_size=2**62)
    ledger = perf.Ledger(buffer_size=1 << 24)  # the largest allowed
    for k in range(10_000):  # a large buffer fills gradually (not allocated up front)
        ledger.record("s", k)
    assert ledger.count("s") == 10_000
