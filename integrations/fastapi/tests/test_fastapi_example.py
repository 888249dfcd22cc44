"""examples/fastapi_service.py runs: a real uvicorn, 20 streaming clients, summary + budget."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "fastapi_service.py"


@pytest.mark.slow
def test_fastapi_service_selftest() -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--selftest", "--requests", "20", "--concurrency", "5"],
        capture_output=True, text=True, timeout=180, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for stage in ("tokenize", "prefill", "batch.run", "ttft", "itl", "tpot", "decode"):
        assert f"\n{stage} " in out, stage
    assert "http_ttfb    route=/v1/completions,status_class=2xx     20" in out
    assert "http_total   route=/v1/completions,status_class=2xx     20" in out
    assert "latency budget (ms):" in out  # PASS/FAIL depends on the machine's load
    assert out.rstrip().endswith("requests: 20")


def test_fastapi_service_rejects_bad_arguments() -> None:
    proc = subprocess.run([sys.executable, str(EXAMPLE), "--selftest", "--requests", "0"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "must be >= 1" in proc.stderr
