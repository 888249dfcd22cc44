from __future__ import annotations

import textwrap
from pathlib import Path

import pydantic
import pytest

import aiperf_sdk as perf


def _fill(ledger: perf.Ledger, stage: str, ms_values: list[float], **labels: object) -> None:
    for v in ms_values:
        ledger.record(stage, int(v * 1_000_000), **labels)


BUDGET_YAML = """\
total: {p99_ms: 2000}
stages:
  gateway:    {p99_ms: 50}
  preprocess: {p99_ms: 300}
  prefill:    {p95_ms: 1200}
  itl:        {p99_ms: 50}
slo:
  stage: e2e
  threshold_ms: 80
  target: 0.99
  window_s: 5
"""


def test_from_yaml_and_passing_check(tmp_path: Path) -> None:
    path = tmp_path / "budget.yaml"
    path.write_text(BUDGET_YAML)
    budget = perf.Budget.from_yaml(path)
    assert budget.stages["prefill"].p95_ms == 1200
    ledger = perf.Ledger()
    _fill(ledger, "gateway", [10] * 100)
    _fill(ledger, "preprocess", [100] * 100)
    _fill(ledger, "prefill", [500] * 100)
    _fill(ledger, "itl", [20] * 100)
    _fill(ledger, "e2e", [60] * 100)
    report = ledger.check(budget)
    assert report.ok, str(report)
    row = next(r for r in report.rows if r.stage == "prefill")
    assert row.quantile == "p95" and row.limit_ms == 1200
    assert row.measured_ms == pytest.approx(500, rel=1e-3)
    assert row.headroom_ms == pytest.approx(700, rel=1e-2)
    assert report.slo is not None and report.slo.compliance == 1.0
    assert report.slo.error_budget_remaining == 1.0
    assert "PASS" in str(report)


def test_failing_check_table_and_assert(perf_ledger: perf.Ledger) -> None:
    _fill(perf_ledger, "prefill", [10] * 90 + [200] * 10)
    budget = {"stages": {"prefill": {"p99_ms": 100, "p50_ms": 20}}}
    with pytest.raises(perf.BudgetExceeded) as info:
        perf.assert_within_budget(budget)
    msg = str(info.value)
    assert "FAIL" in msg and "prefill" in msg and "p99" in msg and "over by" in msg
    assert isinstance(info.value, AssertionError)
    report = info.value.report
    assert isinstance(report, perf.BudgetReport)
    assert [r.ok for r in report.rows] == [True, False]  # p50 ok, p99 over


def test_stage_with_no_samples_never_passes() -> None:
    ledger = perf.Ledger()
    report = ledger.check(perf.Budget.model_validate({"stages": {"decode": {"p99_ms": 1}}}))
    assert not report.ok
    assert report.rows[0].note == "no samples" and report.rows[0].measured_ms is None
    assert "no samples" in str(report)


def test_slo_error_budget_windows_and_goodput() -> None:
    ledger = perf.Ledger(window_s=1.0)
    ledger._unix_offset_ns = 0  # white-box: exact window placement
    sec = 1_000_000_000
    t0 = 10**12
    # window 0: 100 good; window 1: 90 good + 10 slow; window 2: 99 good + 1 error
    for i in range(100):
        ledger._append(("e2e", ()), 10_000_000, t0 + i)
    for i in range(90):
        ledger._append(("e2e", ()), 10_000_000, t0 + sec + i)
    for i in range(10):
        ledger._append(("e2e", ()), 500_000_000, t0 + sec + 100 + i)
    for i in range(99):
        ledger._append(("e2e", ()), 10_000_000, t0 + 2 * sec + i)
    ledger._append(("e2e", (("outcome", "error"),)), 1_000_000, t0 + 2 * sec + 200)
    budget = perf.Budget.model_validate(
        {"slo": {"threshold_ms": 80, "target": 0.95, "window_s": 1}}
    )
    slo = ledger.check(budget).slo
    assert slo is not None
    assert slo.total == 300 and slo.good == 289
    assert slo.compliance == pytest.approx(289 / 300)
    assert slo.error_budget_remaining == pytest.approx(1 - 11 / 15)
    assert (slo.windows, slo.compliant_windows) == (3, 2)
    assert slo.ok
    assert slo.goodput_rps is not None and slo.goodput_rps > 0
    strict = perf.Budget.model_validate({"slo": {"threshold_ms": 80, "target": 0.99}})
    assert not ledger.check(strict).ok


def test_slo_with_no_requests_fails() -> None:
    budget = perf.Budget.model_validate({"slo": {"threshold_ms": 80, "target": 0.99}})
    assert not perf.Ledger().check(budget).ok


@pytest.mark.parametrize(
    ("doc", "field", "value"),
    [
        ("stages:\n  prefill: {p98_ms: 10}\n", "stages.prefill.p98_ms", "10"),
        ("stages:\n  prefill: {p99_ms: -5}\n", "stages.prefill.p99_ms", "-5"),
        ("stages:\n  prefill: {p99_ms: fast}\n", "stages.prefill.p99_ms", "fast"),
        ("slo: {threshold_ms: 80, target: 1.5}\n", "slo.target", "1.5"),
        ("totl: {p99_ms: 1}\n", "totl", "p99_ms"),
    ],
)
def test_invalid_file_names_file_field_and_value(
    tmp_path: Path, doc: str, field: str, value: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(doc)
    with pytest.raises(pydantic.ValidationError) as info:
        perf.Budget.from_yaml(path)
    msg = str(info.value)
    assert str(path) in msg and field in msg and value in msg


def test_stage_p99_sum_over_total_is_rejected() -> None:
    with pytest.raises(pydantic.ValidationError, match="sum to 150"):
        perf.Budget.model_validate(
            {"total": {"p99_ms": 100}, "stages": {"a": {"p99_ms": 100}, "b": {"p99_ms": 50}}}
        )


def test_empty_limit_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(pydantic.ValidationError, match="at least one"):
        perf.Budget.model_validate({"stages": {"a": {}}})
    bad = tmp_path / "x.yaml"
    bad.write_text("stages: [unclosed")
    with pytest.raises(perf.BudgetFileError, match="not valid YAML"):
        perf.Budget.from_yaml(bad)
    bad.write_text("- a list\n")
    with pytest.raises(perf.BudgetFileError, match="mapping"):
        perf.Budget.from_yaml(bad)
    with pytest.raises(FileNotFoundError):
        perf.Budget.from_yaml(tmp_path / "missing.yaml")


def test_budget_doc_example_is_valid() -> None:
    text = textwrap.dedent(BUDGET_YAML)
    import yaml

    assert perf.Budget.model_validate(yaml.safe_load(text)).slo is not None
