"""Regression gate: tolerances, quality and functional checks, refusals, fingerprints, CLI."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

import aiperf_sdk as perf
from aiperf_sdk.cli import main


async def _target(p: Any) -> float:
    await asyncio.sleep(0.002)
    return 1.0


@pytest.fixture(scope="module")
def result() -> perf.LoadResult:
    r = perf.run_load(_target, arrival=perf.ArrivalProcess(kind="constant", rate=100),
                      requests=50, warmup_s=0.1, max_lag_ms=50)
    assert r.valid
    return r.model_copy(update={"extra": {"accuracy": 0.912}})


def _baseline(r: perf.LoadResult, **metrics: dict[str, Any]) -> dict[str, Any]:
    base: dict[str, Any] = {
        "throughput_rps": {"value": r.throughput_rps, "min_ratio": 0.95},
        "e2e.p99_ms": {"value": r.metrics["e2e"].p99_ms, "max_ratio": 1.10},
        "accuracy": {"value": 0.912, "max_drop": 0.005},
    }
    base.update(metrics)
    return {"metrics": base, "functional": {"finite": True, "required": ["e2e.p99_ms"]},
            "fingerprint": r.fingerprint}


def test_same_numbers_pass(result: perf.LoadResult) -> None:
    report = perf.gate.check(result, _baseline(result))
    assert report.ok, str(report)
    assert not report.warnings
    assert "regression gate: PASS" in str(report)


def test_throughput_regression_fails_with_its_size(result: perf.LoadResult) -> None:
    slower = result.model_copy(update={"throughput_rps": result.throughput_rps * 0.8})
    report = perf.gate.check(slower, _baseline(result))
    assert not report.ok
    (row,) = report.regressions
    assert row.metric == "throughput_rps"
    assert row.change == pytest.approx(-0.2)
    assert "-20.0%" in str(report) and "REGRESSED" in str(report)


def test_faster_but_less_accurate_fails(result: perf.LoadResult) -> None:
    faster = result.model_copy(update={"throughput_rps": result.throughput_rps * 2,
                                       "extra": {"accuracy": 0.90}})
    report = perf.gate.check(faster, _baseline(result))
    assert [r.metric for r in report.regressions] == ["accuracy"]


def test_absolute_bounds_and_default_tolerance(result: perf.LoadResult) -> None:
    r = result.model_copy(update={"extra": {"accuracy": 0.912, "gpu_util": 0.4}})
    report = perf.gate.check(r, _baseline(result, gpu_util={"min": 0.6},
                                          **{"e2e.p50_ms": {"value": 1e-3}}))
    failed = {row.metric for row in report.regressions}
    assert failed == {"gpu_util", "e2e.p50_ms"}  # value only: lower-is-better ≤ 1.1x
    assert perf.gate.default_direction("ttft.p99_ms") == "lower"
    assert perf.gate.default_direction("goodput_rps") == "higher"


def test_nan_and_missing_metrics_fail(result: perf.LoadResult) -> None:
    r = result.model_copy(update={"extra": {"accuracy": math.nan}, "outputs_finite": False})
    report = perf.gate.check(r, _baseline(result, bleu={"value": 30.0}))
    notes = {row.metric: row.note for row in report.regressions}
    assert notes["bleu"] == "missing"
    assert "accuracy" in notes and "target outputs" in notes["no NaN/Inf"]


def test_fingerprint_mismatch_warns_loudly(result: perf.LoadResult) -> None:
    base = _baseline(result)
    base["fingerprint"] = {**result.fingerprint, "cpu_count": "64"}
    report = perf.gate.check(result, base)
    assert report.ok
    assert "cpu_count" in report.warnings[0]
    assert str(report).startswith("WARNING: environment differs")


def test_refuses_invalid_and_cold_runs(result: perf.LoadResult) -> None:
    bad = result.model_copy(update={"valid": False, "invalid_reasons": ["lag"]})
    with pytest.raises(perf.gate.GateRefusedError, match="invalid run"):
        perf.gate.check(bad, _baseline(result))
    cold = result.model_copy(update={"warmup_s": 0.0, "warmup_requests": 0})
    with pytest.raises(perf.gate.GateRefusedError, match="without warm-up"):
        perf.gate.check(cold, _baseline(result))


def test_baseline_file_errors(tmp_path: Path, result: perf.LoadResult) -> None:
    with pytest.raises(perf.gate.BaselineError, match="cannot read baseline"):
        perf.gate.Baseline.from_yaml(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("metrics: [unclosed\n")
    with pytest.raises(perf.gate.BaselineError, match="not valid YAML"):
        perf.gate.Baseline.from_yaml(bad)
    novalue = tmp_path / "novalue.yaml"
    novalue.write_text("metrics:\n  throughput_rps: {min_ratio: 0.9}\n")
    with pytest.raises(perf.gate.BaselineError, match="give a baseline value"):
        perf.gate.Baseline.from_yaml(novalue)


def test_update_baseline_roundtrip(tmp_path: Path, result: perf.LoadResult) -> None:
    path = tmp_path / "baseline.yaml"
    new = perf.gate.update_baseline(result, path)
    assert new.metrics["throughput_rps"].min_ratio == 0.95
    assert new.metrics["accuracy"].max_drop is not None
    assert perf.gate.check(result, path).ok
    # an existing baseline keeps its tolerances; values move
    data = yaml.safe_load(path.read_text())
    data["metrics"]["throughput_rps"]["min_ratio"] = 0.5
    data["metrics"]["throughput_rps"]["value"] = 1.0
    path.write_text(yaml.safe_dump(data))
    again = perf.gate.update_baseline(result, path)
    assert again.metrics["throughput_rps"].min_ratio == 0.5
    assert again.metrics["throughput_rps"].value == pytest.approx(result.throughput_rps,
                                                                  rel=1e-5)


def test_cli_exit_codes(tmp_path: Path, result: perf.LoadResult,
                        capsys: pytest.CaptureFixture[str]) -> None:
    res = tmp_path / "result.json"
    res.write_text(result.model_dump_json())
    base = tmp_path / "baseline.yaml"
    assert main(["gate", "--baseline", str(base), str(res), "--update-baseline"]) == 0
    assert main(["gate", "--baseline", str(base), str(res)]) == 0
    slow = tmp_path / "slow.json"
    slow.write_text(result.model_copy(update={"throughput_rps": 1.0}).model_dump_json())
    assert main(["gate", "--baseline", str(base), str(slow)]) == 1
    assert "REGRESSED" in capsys.readouterr().out
    assert main(["gate", "--baseline", str(tmp_path / "nope.yaml"), str(res)]) == 2
    notjson = tmp_path / "x.json"
    notjson.write_text("{")
    assert main(["gate", "--baseline", str(base), str(notjson)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "aiperf-sdk: error:" in err  # one line each
