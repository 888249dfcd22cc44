"""Capacity planning: SLO-meeting capacity (not peak), N+1 arithmetic, token-based plan."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import pytest

import aiperf_sdk as perf
from aiperf_sdk.cli import main


async def _target(p: Any) -> None:
    await asyncio.sleep(0.001)


@pytest.fixture(scope="module")
def sweep() -> perf.SweepResult:
    """A real two-level sweep, with each point's throughput/p99 then set to known numbers
    so the arithmetic can be checked exactly."""
    s = perf.sweep(_target, mode="rate", levels=[10, 20, 40], requests=10, warmup_s=0.05,
                   max_lag_ms=50)
    numbers = [(10.0, 50.0), (19.5, 180.0), (30.0, 900.0)]  # (throughput, p99 ms)
    points = []
    for p, (tput, p99) in zip(s.points, numbers, strict=True):
        e2e = p.metrics["e2e"].model_copy(update={"p99_ms": p99})
        points.append(p.model_copy(update={"throughput_rps": tput, "output_tokens_per_s": 0.0,
                                           "metrics": {**p.metrics, "e2e": e2e}}))
    return s.model_copy(update={"points": points})


def test_capacity_is_highest_throughput_meeting_slo(sweep: perf.SweepResult) -> None:
    plan = perf.plan_capacity(sweep=sweep, slo_ms=200, target_rps=100, peak_factor=1.5,
                              redundancy=1)
    assert plan.per_instance_rps == 19.5  # not the 30 req/s peak, which breaks the SLO
    assert plan.chosen_level == 20
    assert plan.instances == math.ceil(100 * 1.5 / 19.5) + 1 == 9
    text = str(plan)
    assert "ceil(100 × 1.5 ÷ 19.50) + 1 = ceil(7.692) + 1 = 9" in text
    assert "over SLO" in text and "meets SLO" in text


def test_no_point_meets_slo(sweep: perf.SweepResult) -> None:
    with pytest.raises(perf.CapacityError, match="no sweep point meets"):
        perf.plan_capacity(sweep=sweep, slo_ms=10, target_rps=5)


def test_token_based_plan() -> None:
    plan = perf.plan_capacity(users=2000, tokens_per_reply=300, think_time_s=30,
                              per_instance_tokens_per_s=2500, peak_factor=1.2, redundancy=1)
    assert plan.target_tokens_per_s == 20000
    assert plan.instances == math.ceil(20000 * 1.2 / 2500) + 1 == 11
    assert "2000 × 300 ÷ 30 s = 20000.00 tokens/s" in str(plan)
    with pytest.raises(perf.CapacityError, match="needs users"):
        perf.plan_capacity(users=10, per_instance_tokens_per_s=5)


def test_cli_capacity(tmp_path: Path, sweep: perf.SweepResult,
                      capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "sweep.json"
    f.write_text(sweep.model_dump_json())
    assert main(["capacity", str(f), "--slo-ms", "200", "--target-rps", "100",
                 "--peak-factor", "1.5"]) == 0
    assert "= 9" in capsys.readouterr().out
    assert main(["capacity", str(f), "--target-rps", "100"]) == 2  # no --slo-ms
    assert "needs --slo-ms" in capsys.readouterr().err
    single = tmp_path / "single.json"
    single.write_text(sweep.points[0].model_dump_json())
    assert main(["capacity", str(single), "--slo-ms", "200", "--target-rps", "1"]) == 2
    assert "needs a sweep result" in capsys.readouterr().err
