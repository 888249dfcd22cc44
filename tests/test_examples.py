"""The README's main job (examples/toy_pipeline.py) runs and prints the budget report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_toy_pipeline_prints_summary_budget_and_slowest() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "toy_pipeline.py"), "--seconds", "1",
         "--rate", "30"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "latency per stage (ms)" in out
    assert "latency budget (ms):" in out
    assert "SLO e2e <= 120 ms" in out
    assert "slowest requests (by correlation ID):" in out
    for stage in ("tokenize", "prefill", "ttft", "itl", "tpot", "decode", "serialize", "e2e"):
        assert f"\n{stage} " in out


def test_toy_pipeline_rejects_bad_input(tmp_path: Path) -> None:
    script = str(ROOT / "examples" / "toy_pipeline.py")
    bad_rate = subprocess.run([sys.executable, script, "--rate", "0"], capture_output=True,
                              text=True, timeout=60, check=False)
    assert bad_rate.returncode == 2 and "must be > 0" in bad_rate.stderr
    budget = tmp_path / "b.yaml"
    budget.write_text("stages: {prefill: {p98_ms: 1}}\n")
    bad_budget = subprocess.run([sys.executable, script, "--budget", str(budget)],
                                capture_output=True, text=True, timeout=60, check=False)
    assert bad_budget.returncode != 0 and "p98_ms" in bad_budget.stderr
