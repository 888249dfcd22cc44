"""Regression gate: ``perf.gate.check(result, baseline) -> GateReport``.

Compares a load result (``aiperf-sdk load --out result.json``, or a :class:`LoadResult`) with
a baseline YAML: per-metric tolerances (throughput ≥ 0.95× baseline, p99 ≤ 1.1×, GPU
utilisation ≥ a minimum, accuracy may drop by at most 0.005, ...) and functional checks (no
NaN/Inf, required metrics). Invalid runs and runs without warm-up are refused.

Example::

    import aiperf_sdk as perf

    report = perf.gate.check("result.json", "baseline.yaml")
    print(report)                      # table: what regressed and by how much
    assert report.ok, report.regressions
    perf.gate.update_baseline("result.json", "baseline.yaml")   # accept the new numbers
"""

from ._gate import Baseline as Baseline
from ._gate import BaselineError as BaselineError
from ._gate import FunctionalChecks as FunctionalChecks
from ._gate import GateRefusedError as GateRefusedError
from ._gate import GateReport as GateReport
from ._gate import GateRow as GateRow
from ._gate import MetricTolerance as MetricTolerance
from ._gate import check as check
from ._gate import default_direction as default_direction
from ._gate import update_baseline as update_baseline

__all__ = (
    "Baseline",
    "BaselineError",
    "FunctionalChecks",
    "GateRefusedError",
    "GateReport",
    "GateRow",
    "MetricTolerance",
    "check",
    "default_direction",
    "update_baseline",
)
