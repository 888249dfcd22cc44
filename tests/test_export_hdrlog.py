"""HdrHistogram interval logs: written by us, read by the hdrh package's reader, merged."""

from __future__ import annotations

from pathlib import Path

import pytest
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

import aiperf_sdk as perf

MS = 1_000_000


def test_interval_log_reads_back_with_hdrh_reader(tmp_path: Path) -> None:
    ledger = perf.Ledger()
    path = tmp_path / "run.hlog"
    with perf.HdrLogWriter(path, ledger) as log:
        for i in range(1, 101):
            ledger.record("prefill", i * MS)
        ledger.record("decode", 5 * MS)
        assert log.write_interval() == 2
        assert log.write_interval() == 0  # nothing new
        for i in range(101, 201):
            ledger.record("prefill", i * MS)
        assert log.write_interval() == 1
    text = path.read_text().splitlines()
    assert text[0] == "#[Histogram log format version 1.3]"
    assert text[1].startswith("#[StartTime: ")
    reader = HistogramLogReader(str(path), HdrHistogram(1, 3_600_000 * MS, 3))
    intervals = []
    while (h := reader.get_next_interval_histogram()) is not None:
        intervals.append(h)
    start = reader.get_start_time_sec()
    reader.close()
    assert start == pytest.approx(log.start_unix_s, abs=0.01)
    assert [(h.get_tag(), h.get_total_count()) for h in intervals] == [
        ("prefill", 100), ("decode", 1), ("prefill", 100)
    ]
    assert intervals[2].get_value_at_percentile(50) == pytest.approx(150 * MS, rel=1e-3)
    assert intervals[0].get_max_value() == pytest.approx(100 * MS, rel=1e-3)


def test_merging_logs_from_two_hosts_is_exact(tmp_path: Path) -> None:
    everything = perf.Ledger()
    paths = []
    for host in range(2):
        ledger = perf.Ledger()
        path = tmp_path / f"host{host}.hlog"
        with perf.HdrLogWriter(path, ledger) as log:
            for i in range(1, 1001):
                value = (i * 7 + host * 5000) * 1000
                ledger.record("prefill", value)
                everything.record("prefill", value)
                if i % 250 == 0:
                    log.write_interval()
        paths.append(path)
    merged = perf.merge_hdr_logs(paths)
    assert merged.count("prefill") == 2000
    for p in (50.0, 90.0, 99.0, 99.9):
        assert merged.percentile("prefill", p) == everything.percentile("prefill", p)
    assert merged.encode("prefill") == everything.encode("prefill")


def test_merge_rejects_a_log_of_other_precision(tmp_path: Path) -> None:
    ledger = perf.Ledger(significant_figures=2)
    path = tmp_path / "a.hlog"
    with perf.HdrLogWriter(path, ledger) as log:
        ledger.record("x", MS)
        log.write_interval()
    target = perf.Ledger()
    with pytest.raises(perf.LedgerMismatchError):
        perf.merge_hdr_logs([path], target)
    assert target.stages() == []
