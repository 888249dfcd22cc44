"""pytest plugin (entry point ``pytest11``): latency budgets as test assertions.

* fixture ``perf_ledger``: a fresh :class:`~aiperf_sdk.Ledger`, installed as the default ledger
  for the test's duration (the previous default is restored afterwards);
* marker ``@pytest.mark.latency_budget(budget)``: ``budget`` is a mapping, a
  :class:`~aiperf_sdk.Budget` or a YAML path (relative paths resolve against the test file's
  folder first, then the rootdir). After the test body passes, the ``perf_ledger`` is checked
  and the test fails with the budget table if it is over budget (or a stage has no samples);
* option ``--perf-report`` (ini ``perf_report``, env ``AIPERF_PERF_REPORT=1``; command line >
  env > ini): the per-stage summary of every test that recorded, in the terminal summary.

Example::

    @pytest.mark.latency_budget({"stages": {"prefill": {"p99_ms": 50}}})
    def test_prefill_is_fast(perf_ledger):
        for _ in range(100):
            prefill(sample)
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from ._budget import Budget, check, load_budget
from ._errors import BudgetExceeded
from ._ledger import Ledger, set_default_ledger
from ._models import Summary

_REPORTS = pytest.StashKey[list[tuple[str, Summary]]]()
_LEDGER = pytest.StashKey[Ledger]()
_TRUE = {"1", "true", "yes", "on"}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("aiperf-sdk", "aiperf-sdk latency budgets")
    group.addoption(
        "--perf-report",
        action="store_true",
        default=None,
        help="print the per-stage latency summary of each test that recorded "
        "(env AIPERF_PERF_REPORT, ini perf_report)",
    )
    parser.addini(
        "perf_report", type="bool", default=False,
        help="aiperf-sdk: print per-test latency summaries (like --perf-report)",
    )


def _report_enabled(config: pytest.Config) -> bool:
    opt = config.getoption("--perf-report")
    if opt is not None:
        return bool(opt)
    env = os.environ.get("AIPERF_PERF_REPORT")
    if env is not None:
        return env.strip().lower() in _TRUE
    return bool(config.getini("perf_report"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "latency_budget(budget): check the perf_ledger against a budget (mapping, "
        "perf.Budget or YAML path) after the test body; fail with the budget table",
    )
    config.stash[_REPORTS] = []


@pytest.fixture
def perf_ledger(request: pytest.FixtureRequest) -> Iterator[Ledger]:
    """A fresh Ledger installed as the default ledger for this test."""
    ledger = Ledger()
    previous = set_default_ledger(ledger)
    request.node.stash[_LEDGER] = ledger
    try:
        yield ledger
    finally:
        set_default_ledger(previous)
        if _report_enabled(request.config) and ledger.stages():
            request.config.stash[_REPORTS].append((request.node.nodeid, ledger.summary()))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("latency_budget") is not None and isinstance(
            item, pytest.Function
        ) and "perf_ledger" not in item.fixturenames:
            item.fixturenames.append("perf_ledger")


def _resolve_budget(item: pytest.Item, arg: Any) -> Budget:
    if isinstance(arg, (str, os.PathLike)):
        path = Path(arg)
        if not path.is_absolute():
            beside = Path(str(item.path)).parent / path
            path = beside if beside.exists() else Path(str(item.config.rootpath)) / path
        return load_budget(path)
    return load_budget(arg)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    result = yield
    marker = item.get_closest_marker("latency_budget")
    if marker is None:
        return result
    if len(marker.args) != 1 or marker.kwargs:
        raise pytest.UsageError(
            f"{item.nodeid}: use @pytest.mark.latency_budget(budget) with exactly one "
            "argument (a mapping, a perf.Budget or a YAML path)"
        )
    budget = _resolve_budget(item, marker.args[0])
    ledger = item.stash.get(_LEDGER, None)
    if ledger is None:
        raise pytest.UsageError(f"{item.nodeid}: latency_budget needs the perf_ledger fixture")
    report = check(ledger, budget)
    if not report.ok:
        raise BudgetExceeded(str(report), report)
    return result


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    reports = config.stash.get(_REPORTS, [])
    if not reports:
        return
    terminalreporter.section("aiperf-sdk latency")
    for nodeid, summary in reports:
        terminalreporter.write_line(nodeid)
        terminalreporter.write_line(str(summary))
        terminalreporter.write_line("")
