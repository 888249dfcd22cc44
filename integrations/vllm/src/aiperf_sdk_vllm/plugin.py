"""The vLLM stat-logger plugin (entry point ``vllm.stat_logger_plugins: aiperf``).

Imported by vLLM only (``load_stat_logger_plugin_factories`` in vllm/v1/metrics/loggers.py);
importing it without vLLM installed raises ``ModuleNotFoundError``.

Environment (read once per process, at engine start):

* ``AIPERF_VLLM_BUDGET``: a budget YAML (``perf.Budget.from_yaml``), checked at every
  ``log()`` (vLLM's periodic stats log) and logged on logger ``aiperf_sdk_vllm``;
* ``AIPERF_PROMETHEUS_PORT``, ``AIPERF_OTEL``, ...: when any ``AIPERF_*`` export variable is
  set, ``perf.configure()`` is called once so the ledger is exported (see docs/export.md).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase
from vllm.v1.metrics.stats import FinishedRequestStats, IterationStats

import aiperf_sdk as perf

from ._feed import StatsFeeder, VllmStatsShapeError, check_shape
from .package import FINISHED_FIELDS, ITERATION_FIELDS

log = logging.getLogger("aiperf_sdk_vllm")

_configured = threading.Lock()
_did_configure = [False]


def _configure_once() -> None:
    export_vars = [k for k in os.environ
                   if k.startswith("AIPERF_") and not k.startswith("AIPERF_VLLM_")]
    with _configured:
        if export_vars and not _did_configure[0]:
            perf.configure()
            _did_configure[0] = True


def check_vllm_shape() -> None:
    """Raise :class:`VllmStatsShapeError` if this vLLM's stats classes lack what we read."""
    names = {f.name for f in dataclasses.fields(FinishedRequestStats)}
    missing = [f for f in FINISHED_FIELDS if f not in names]
    if missing:
        raise VllmStatsShapeError(f"vLLM's FinishedRequestStats has no {', '.join(missing)}")
    check_shape(IterationStats(), ITERATION_FIELDS, "IterationStats")


class AiperfStatLogger(StatLoggerBase):  # type: ignore[misc]
    """Feeds vLLM's per-request stats into the aiperf ledger (one per engine)."""

    def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
        check_vllm_shape()  # fail at engine start, not with wrong numbers later
        model_config = getattr(vllm_config, "model_config", None)
        names = getattr(model_config, "served_model_name", None) or getattr(
            model_config, "model", None) or "vllm"
        model = names[0] if isinstance(names, (list, tuple)) else str(names)
        self.engine_index = engine_index
        self.feeder = StatsFeeder(model)
        budget_path = os.environ.get("AIPERF_VLLM_BUDGET")
        self.budget = perf.Budget.from_yaml(budget_path) if budget_path else None
        _configure_once()

    def record(self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None,
               engine_idx: int = 0) -> None:
        self.feeder.record(iteration_stats)

    def log_engine_initialized(self) -> None:
        log.info("aiperf-sdk-vllm: recording model %r", self.feeder.model)

    def log(self) -> None:
        if self.budget is not None:
            report = perf.default_ledger().check(self.budget)
            log.log(logging.INFO if report.ok else logging.WARNING, "%s", report)
