"""aiperf-sdk-vllm's stat logger, WITHOUT a real vLLM.

vLLM is not installed here (its wheel pins a multi-GB CUDA torch, and the engine needs a
GPU), so no vLLM server or engine ran for these tests. The stats objects below copy the
fields of vLLM's own classes as read in vllm-project/vllm ``vllm/v1/metrics/stats.py``
(commit 28ed1fb87ed5686e1d4d0cf4134b8e05d8a25a8a: ``FinishedRequestStats`` dataclass,
``IterationStats.__init__`` attributes) plus ``request_id``, which newer releases carry; the
``StatLoggerBase`` stand-in copies the abstract interface of ``vllm/v1/metrics/loggers.py``
(``__init__(vllm_config, engine_index)``, ``record(scheduler_stats, iteration_stats,
mm_cache_stats, engine_idx)``, ``log_engine_initialized``, ``log``). The entry point is
checked through importlib.metadata, as vLLM's ``load_plugins_by_group`` discovers it.
"""

from __future__ import annotations

import abc
import dataclasses
import importlib
import sys
import time
import types
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
from aiperf_sdk_vllm import StatsFeeder

import aiperf_sdk as perf


@dataclasses.dataclass
class FinishedRequestStats:  # vllm/v1/metrics/stats.py, fields in vLLM's order
    finish_reason: str
    e2e_latency: float = 0.0
    num_prompt_tokens: int = 0
    num_generation_tokens: int = 0
    max_tokens_param: int | None = None
    queued_time: float = 0.0
    prefill_time: float = 0.0
    inference_time: float = 0.0
    decode_time: float = 0.0
    mean_time_per_output_token: float = 0.0
    is_corrupted: bool = False
    request_id: str | None = None


class IterationStats:  # vllm/v1/metrics/stats.py
    def __init__(self) -> None:
        self.iteration_timestamp = time.time()
        self.num_generation_tokens = 0
        self.num_prompt_tokens = 0
        self.num_preempted_reqs = 0
        self.finished_requests: list[FinishedRequestStats] = []
        self.max_num_generation_tokens_iter: list[int] = []
        self.n_params_iter: list[int] = []
        self.time_to_first_tokens_iter: list[float] = []
        self.inter_token_latencies_iter: list[float] = []
        self.waiting_lora_adapters: dict[str, int] = {}
        self.running_lora_adapters: dict[str, int] = {}
        self.num_corrupted_reqs = 0


def finished(rid: str | None, e2e: float, tokens: int = 5) -> FinishedRequestStats:
    return FinishedRequestStats(
        finish_reason="stop", e2e_latency=e2e, num_prompt_tokens=12,
        num_generation_tokens=tokens, queued_time=0.010, prefill_time=0.040,
        inference_time=e2e - 0.015, decode_time=0.080, mean_time_per_output_token=0.020,
        request_id=rid,
    )


def close(a: float, b: float) -> bool:
    return abs(a - b) <= 0.002 * b  # HDR histograms: 3 significant figures


def test_feeder_records_every_stage_with_the_right_values() -> None:
    ledger = perf.Ledger()
    feeder = StatsFeeder("llama", ledger=ledger)
    it = IterationStats()
    it.time_to_first_tokens_iter = [0.050, 0.070]
    it.inter_token_latencies_iter = [0.020, 0.021, 0.019]
    it.finished_requests = [finished("chatcmpl-abc123", 0.150), finished("req-2", 0.300, 1)]
    feeder.record(it)
    assert ledger.count("ttft", model="llama") == 2
    assert close(ledger.percentile("ttft", 100, model="llama"), 70.0)
    assert ledger.count("itl", model="llama") == 3
    for stage, ms in (("queue", 10.0), ("prefill", 40.0), ("decode", 80.0)):
        assert ledger.count(stage, model="llama") == 2
        assert close(ledger.percentile(stage, 50, model="llama"), ms)
    assert ledger.count("tpot", model="llama") == 1  # the 1-token request has no TPOT
    traces = {t.id: t for t in ledger.slowest("e2e")}
    assert set(traces) == {"chatcmpl-abc123", "req-2"}
    assert close(traces["chatcmpl-abc123"].total_ms, 150.0)
    assert close(traces["req-2"].total_ms, 300.0)
    assert close(traces["chatcmpl-abc123"].stages["prefill"], 40.0)
    assert traces["req-2"].attrs == {"model": "llama", "finish_reason": "stop"}
    assert ledger.count("e2e", model="llama") == 2


def test_missing_or_hostile_request_id_is_replaced() -> None:
    ledger = perf.Ledger()
    it = IterationStats()
    it.finished_requests = [finished(None, 0.1), finished("bad id\n" * 50, 0.1)]
    StatsFeeder("m", ledger=ledger).record(it)
    ids = [t.id for t in ledger.slowest("e2e")]
    assert len(ids) == 2 and all(len(i) == 32 for i in ids)


def test_unknown_shape_disables_instead_of_recording_wrong_numbers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class OldIterationStats:  # vLLM 0.7's shape: time_per_output_tokens_iter, no ITL list
        def __init__(self) -> None:
            self.finished_requests: list[Any] = []
            self.time_to_first_tokens_iter = [0.05]
            self.time_per_output_tokens_iter = [0.02]

    ledger = perf.Ledger()
    feeder = StatsFeeder("m", ledger=ledger)
    feeder.record(OldIterationStats())
    assert feeder.disabled_reason is not None
    assert "inter_token_latencies_iter" in feeder.disabled_reason
    assert "inter_token_latencies_iter" in caplog.text
    good = IterationStats()
    good.time_to_first_tokens_iter = [0.05]
    feeder.record(good)  # stays off: one bad shape means this vLLM is not understood
    assert ledger.stages() == []
    with pytest.raises(ValueError):
        StatsFeeder("")


def test_entry_point_is_registered_for_vllm() -> None:
    (ep,) = [e for e in entry_points(group="vllm.stat_logger_plugins") if e.name == "aiperf"]
    assert ep.value == "aiperf_sdk_vllm.plugin:AiperfStatLogger"
    assert ep.dist is not None and ep.dist.name == "aiperf-sdk-vllm"


@pytest.fixture
def vllm_stand_in(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Minimal ``vllm.v1.metrics.{loggers,stats}`` modules (vLLM is not installed here)."""

    class StatLoggerBase(abc.ABC):
        @abc.abstractmethod
        def __init__(self, vllm_config: Any, engine_index: int = 0): ...

        @abc.abstractmethod
        def record(self, scheduler_stats: Any, iteration_stats: Any,
                   mm_cache_stats: Any = None, engine_idx: int = 0) -> None: ...

        @abc.abstractmethod
        def log_engine_initialized(self) -> None: ...

        def log(self) -> None:  # noqa: B027 - copied from vLLM: a no-op default
            pass

    mods = {n: types.ModuleType(n) for n in
            ("vllm", "vllm.v1", "vllm.v1.metrics", "vllm.v1.metrics.loggers",
             "vllm.v1.metrics.stats")}
    mods["vllm.v1.metrics.loggers"].StatLoggerBase = StatLoggerBase  # type: ignore[attr-defined]
    stats = mods["vllm.v1.metrics.stats"]
    stats.FinishedRequestStats = FinishedRequestStats  # type: ignore[attr-defined]
    stats.IterationStats = IterationStats  # type: ignore[attr-defined]
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.delitem(sys.modules, "aiperf_sdk_vllm.plugin", raising=False)
    yield
    sys.modules.pop("aiperf_sdk_vllm.plugin", None)


def test_plugin_loads_through_its_entry_point_and_feeds_the_default_ledger(
    vllm_stand_in: None, perf_ledger: perf.Ledger, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    budget = tmp_path / "budget.yaml"
    budget.write_text("stages: {prefill: {p99_ms: 1}}\n")  # 40 ms prefill will fail it
    monkeypatch.setenv("AIPERF_VLLM_BUDGET", str(budget))
    (ep,) = [e for e in entry_points(group="vllm.stat_logger_plugins") if e.name == "aiperf"]
    cls = ep.load()
    base = sys.modules["vllm.v1.metrics.loggers"].StatLoggerBase
    assert isinstance(cls, type) and issubclass(cls, base)  # vLLM's own check
    config = types.SimpleNamespace(model_config=types.SimpleNamespace(
        served_model_name=["qwen-0.5b"], model="Qwen/Qwen2.5-0.5B"))
    logger = cls(config, 0)
    it = IterationStats()
    it.time_to_first_tokens_iter = [0.05]
    it.finished_requests = [finished("cmpl-1", 0.2)]
    logger.record(None, it, None, 0)
    logger.record(None, None, None, 0)  # vLLM passes None when stats are off
    assert [t.id for t in perf_ledger.slowest("e2e")] == ["cmpl-1"]
    assert perf_ledger.count("ttft", model="qwen-0.5b") == 1
    logger.log()
    assert "FAIL" in caplog.text and "prefill" in caplog.text


def test_plugin_refuses_an_unknown_vllm_at_engine_start(vllm_stand_in: None) -> None:
    @dataclasses.dataclass
    class OldFinished:  # vLLM 0.7: no latency fields at all
        finish_reason: str
        num_prompt_tokens: int = 0
        num_generation_tokens: int = 0

    sys.modules["vllm.v1.metrics.stats"].FinishedRequestStats = OldFinished  # type: ignore[attr-defined]
    plugin = importlib.import_module("aiperf_sdk_vllm.plugin")
    with pytest.raises(perf.PerfError, match="e2e_latency"):
        plugin.AiperfStatLogger(types.SimpleNamespace(), 0)


def test_plugin_module_needs_vllm() -> None:
    sys.modules.pop("aiperf_sdk_vllm.plugin", None)
    with pytest.raises(ModuleNotFoundError, match="vllm"):
        importlib.import_module("aiperf_sdk_vllm.plugin")
