"""The pytest plugin, exercised in isolated pytest runs through `pytester`."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

STAGE_CODE = """
import time
import pytest
import aiperf_sdk as perf

@perf.stage("prefill")
def prefill(delay_s):
    time.sleep(delay_s)
"""


def test_fixture_installs_a_fresh_default_ledger(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        STAGE_CODE
        + """
def test_a(perf_ledger):
    assert perf.default_ledger() is perf_ledger
    prefill(0)
    assert perf_ledger.count("prefill") == 1

def test_b(perf_ledger):
    assert perf_ledger.count("prefill") == 0
"""
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_latency_budget_marker_passes_and_fails_with_table(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        STAGE_CODE
        + """
@pytest.mark.latency_budget({"stages": {"prefill": {"p99_ms": 1000}}})
def test_fast(perf_ledger):
    for _ in range(5):
        prefill(0)

@pytest.mark.latency_budget({"stages": {"prefill": {"p99_ms": 1}}})
def test_slow():
    prefill(0.02)

@pytest.mark.latency_budget({"stages": {"decode": {"p99_ms": 1}}})
def test_nothing_recorded():
    prefill(0)
"""
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*BudgetExceeded*latency budget (ms): FAIL*"])
    result.stdout.fnmatch_lines(["*prefill*p99*FAIL (over by*"])
    result.stdout.fnmatch_lines(["*decode*p99*FAIL (no samples)*"])


def test_latency_budget_from_yaml_beside_the_test(pytester: pytest.Pytester) -> None:
    pytester.makefile(".yaml", budget="stages:\n  prefill: {p99_ms: 1}\n")
    pytester.makepyfile(
        STAGE_CODE
        + """
@pytest.mark.latency_budget("budget.yaml")
def test_slow():
    prefill(0.01)
"""
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*prefill*FAIL*"])


def test_failing_body_is_reported_as_itself(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        STAGE_CODE
        + """
@pytest.mark.latency_budget({"stages": {"prefill": {"p99_ms": 1000}}})
def test_body_fails():
    assert 1 == 2, "the body's own failure"
"""
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the body's own failure*"])
    assert "BudgetExceeded" not in result.stdout.str()


def test_perf_report_option_env_and_ini(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        STAGE_CODE
        + """
def test_records(perf_ledger):
    prefill(0)

def test_silent(perf_ledger):
    pass
"""
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--perf-report")
    result.stdout.fnmatch_lines(["*aiperf-sdk latency*", "*test_records*", "*prefill*"])
    assert "test_silent" not in result.stdout.str().split("aiperf-sdk latency")[1]

    assert "aiperf-sdk latency" not in pytester.runpytest("-p", "no:cacheprovider").stdout.str()

    pytester.makeini("[pytest]\nperf_report = true\n")
    assert "aiperf-sdk latency" in pytester.runpytest("-p", "no:cacheprovider").stdout.str()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIPERF_PERF_REPORT", "0")  # env beats ini
        out = pytester.runpytest("-p", "no:cacheprovider").stdout.str()
        assert "aiperf-sdk latency" not in out


def test_marker_is_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["*latency_budget(budget)*"])


def test_marker_misuse_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
import pytest

@pytest.mark.latency_budget()
def test_x():
    pass
"""
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*exactly one*"])
