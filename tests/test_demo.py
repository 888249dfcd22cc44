"""`aiperf-sdk demo`: the simulated LLM service under load, budget, slowest, gate, plots."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

import aiperf_sdk as perf
from aiperf_sdk.cli import main


def test_short_demo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--seconds", "4", "--out-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for part in ("latency budget (ms):", "slowest requests by correlation ID", "demo-0",
                 "goodput", "regression gate:", "batch.queue", "decode"):
        assert part in out, part
    r = perf.load_result(tmp_path / "result.json")
    assert isinstance(r, perf.LoadResult) and r.completed > 0 and r.extra["accuracy"] > 0.9
    for name in ("latency_percentiles.png", "latency_over_time.png",
                 "service_latency_percentiles.png", "run.hlog", "service_ledger.json"):
        assert (tmp_path / name).stat().st_size > 0, name
    # the snapshot the demo wrote renders with `report`
    assert main(["report", str(tmp_path / "service_ledger.json")]) == 0
    assert "demo-0" in capsys.readouterr().out


def test_shipped_demo_files_are_valid() -> None:
    from aiperf_sdk._demo import demo_file

    perf.Budget.from_yaml(demo_file("budget.yaml"))
    perf.gate.Baseline.from_yaml(demo_file("baseline.yaml"))


@pytest.mark.slow
def test_full_demo_from_the_console_script(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("aiperf-sdk")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "aiperf_sdk"]
    start = time.monotonic()
    proc = subprocess.run([*cmd, "demo", "--out-dir", str(tmp_path)], capture_output=True,
                          text=True, timeout=600, check=False)
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    assert "regression gate:" in proc.stdout
    print(f"full demo took {elapsed:.1f} s")
