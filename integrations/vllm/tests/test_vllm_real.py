"""The plugin inside REAL vLLM 0.33.0 code: vLLM's own plugin loader finds it through the
installed entry point, vLLM's own ``IterationStats.update_from_finished_request`` builds the
``FinishedRequestStats``, and vLLM's own ``PerEngineStatLoggerAdapter`` (what
``StatLoggerManager`` wraps a per-engine plugin in) delivers them.

Not run: the engine (no GPU here). ``VllmConfig()`` cannot be built on this CPU-only machine
("Failed to infer device type"), so the config handed to the plugin is a stand-in with the
one field it reads (``model_config.served_model_name``).

Runs in its own environment: ``integrations/vllm/run_tests.sh`` (build/venv-vllm: vLLM
installed with --no-deps beside torch 2.13.0 CPU). Skipped where vLLM is not installed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

loggers = pytest.importorskip(
    "vllm.v1.metrics.loggers",
    reason="vLLM is not in this environment: run integrations/vllm/run_tests.sh")

from vllm.v1.engine import FinishReason  # noqa: E402
from vllm.v1.metrics.stats import (  # noqa: E402
    FinishedRequestStats,
    IterationStats,
    RequestStateStats,
)

import aiperf_sdk as perf  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture
def ledger() -> Iterator[perf.Ledger]:
    fresh = perf.Ledger()
    previous = perf.set_default_ledger(fresh)
    try:
        yield fresh
    finally:
        perf.set_default_ledger(previous)


def _config() -> SimpleNamespace:
    return SimpleNamespace(model_config=SimpleNamespace(served_model_name=["tiny-llm"]))


def test_vllms_loader_finds_the_installed_plugin() -> None:
    from aiperf_sdk_vllm.plugin import AiperfStatLogger

    factories = loggers.load_stat_logger_plugin_factories()
    assert AiperfStatLogger in factories
    assert issubclass(AiperfStatLogger, loggers.StatLoggerBase)
    # a per-engine logger, as StatLoggerManager decides it (not an aggregate one)
    assert not issubclass(AiperfStatLogger, loggers.AggregateStatLoggerBase)


def _finished(stats: IterationStats, rid: str, *, arrival: float, queued: float,
              scheduled: float, first: float, last: float, tokens: int) -> None:
    req = RequestStateStats(num_generation_tokens=tokens, arrival_time=arrival,
                            queued_ts=queued, scheduled_ts=scheduled, first_token_ts=first,
                            last_token_ts=last)
    stats.update_from_finished_request(FinishReason.STOP, rid, num_prompt_tokens=12,
                                       max_tokens_param=64, req_stats=req)


def test_vllm_stats_through_vllms_adapter_land_in_the_ledger(ledger: perf.Ledger) -> None:
    [factory] = [f for f in loggers.load_stat_logger_plugin_factories()
                 if f.__module__ == "aiperf_sdk_vllm.plugin"]
    adapter = loggers.PerEngineStatLoggerAdapter(_config(), [0], factory)
    adapter.log_engine_initialized()

    stats = IterationStats()
    now = stats.iteration_timestamp
    # engine-core timestamps are monotonic seconds; arrival is wall clock (vLLM's own rule)
    _finished(stats, "req-a", arrival=now - 0.500, queued=100.000, scheduled=100.040,
              first=100.140, last=100.440, tokens=7)
    _finished(stats, "req-b", arrival=now - 0.250, queued=200.000, scheduled=200.010,
              first=200.210, last=200.210, tokens=1)
    stats.time_to_first_tokens_iter.extend([0.130, 0.205])
    stats.inter_token_latencies_iter.extend([0.050, 0.049, 0.051])
    assert all(isinstance(f, FinishedRequestStats) for f in stats.finished_requests)

    adapter.record(None, stats, engine_idx=0)
    adapter.log()

    traces = {t.id: t for t in ledger.slowest("e2e", k=10)}
    assert set(traces) == {"req-a", "req-b"}
    a, b = traces["req-a"], traces["req-b"]
    assert a.stages["queue"] == pytest.approx(40.0, abs=1e-3)
    assert a.stages["prefill"] == pytest.approx(100.0, abs=1e-3)
    assert a.stages["decode"] == pytest.approx(300.0, abs=1e-3)
    assert a.stages["inference"] == pytest.approx(400.0, abs=1e-3)
    assert a.stages["tpot"] == pytest.approx(50.0, abs=1e-3)  # 300 ms / (7 - 1) tokens
    assert "tpot" not in b.stages  # one output token: no time per output token
    assert b.stages["prefill"] == pytest.approx(200.0, abs=1e-3)
    # e2e is vLLM's own e2e_latency (500 / 250 ms), plus the recording's microseconds
    assert 500.0 <= a.total_ms < 505.0
    assert 250.0 <= b.total_ms < 255.0
    assert a.attrs["finish_reason"] == str(FinishReason.STOP)
    assert ledger.count("ttft", model="tiny-llm") == 2
    assert ledger.count("itl", model="tiny-llm") == 3
    assert ledger.percentile("itl", 100.0, model="tiny-llm") == pytest.approx(51.0, rel=1e-3)
    assert ledger.count("e2e", model="tiny-llm") == 2



def test_the_examples_check_runs_against_real_vllm() -> None:
    doc = Path(__file__).resolve().parents[3] / "examples" / "vllm_plugin.md"
    [block] = re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)
    exec(compile(block, str(doc), "exec"), {})  # raises AssertionError if vLLM misses it
