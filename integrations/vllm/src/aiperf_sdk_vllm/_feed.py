"""``StatsFeeder``: vLLM's per-iteration stats into the aiperf ledger (no vLLM import here).

From each ``IterationStats`` (vllm/v1/metrics/stats.py): every ``time_to_first_tokens_iter``
value is a ``ttft`` sample, every ``inter_token_latencies_iter`` value an ``itl`` sample; each
``FinishedRequestStats`` gives ``queue`` (queued_time), ``prefill``, ``decode``,
``inference``, ``tpot`` (mean_time_per_output_token, requests with >= 2 output tokens) and a
``perf.request()`` scope with the request's ID whose ``e2e`` is ``e2e_latency`` (so
``Ledger.slowest()`` finds it by ``X-Request-Id``). vLLM reports seconds (floats).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from time import perf_counter_ns
from typing import Any

import aiperf_sdk as perf

from .package import FINISHED_FIELDS, ITERATION_FIELDS, _instruments

log = logging.getLogger("aiperf_sdk_vllm")

_STAGES = (("queued_time", "queue"), ("prefill_time", "prefill"),
           ("decode_time", "decode"), ("inference_time", "inference"))


class VllmStatsShapeError(perf.PerfError, TypeError):
    """vLLM's stats objects do not have the fields this plugin was written against."""


def check_shape(obj: Any, fields: Iterable[str], what: str) -> None:
    """Raise :class:`VllmStatsShapeError` naming the missing fields of ``obj``."""
    missing = [f for f in fields if not hasattr(obj, f)]
    if missing:
        raise VllmStatsShapeError(
            f"vLLM's {what} has no {', '.join(missing)}: this vLLM is not one aiperf-sdk-vllm "
            f"supports ({', '.join(_instruments)}); nothing is recorded. Upgrade "
            "aiperf-sdk-vllm or pin vLLM."
        )


def _ns(seconds: float) -> int:
    return max(0, round(seconds * 1e9))


class StatsFeeder:
    """Records vLLM stats into a ledger; a wrong shape disables it (logged once), so it never
    records wrong numbers and never breaks vLLM's output loop.

    Example::

        feeder = StatsFeeder(model="llama-3-8b")
        feeder.record(iteration_stats)          # from StatLoggerBase.record()

    Raises:
        ValueError: empty ``model``.
    """

    def __init__(self, model: str, *, ledger: perf.Ledger | None = None) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty str, got {model!r}")
        self.model = model
        self.ledger = ledger
        self.disabled_reason: str | None = None

    def record(self, iteration_stats: Any) -> None:
        if iteration_stats is None or self.disabled_reason is not None:
            return
        try:
            check_shape(iteration_stats, ITERATION_FIELDS, "IterationStats")
            for fin in iteration_stats.finished_requests:
                check_shape(fin, FINISHED_FIELDS, "FinishedRequestStats")
        except VllmStatsShapeError as exc:
            self.disabled_reason = str(exc)
            log.error("%s", exc)
            return
        ledger = self.ledger if self.ledger is not None else perf.default_ledger()
        model = self.model
        for v in iteration_stats.time_to_first_tokens_iter:
            ledger.record("ttft", _ns(v), model=model)
        for v in iteration_stats.inter_token_latencies_iter:
            ledger.record("itl", _ns(v), model=model)
        for fin in iteration_stats.finished_requests:
            self._finished(fin, ledger)

    def _finished(self, fin: Any, ledger: perf.Ledger) -> None:
        model = self.model
        stages: dict[str, int] = {}
        for attr, stage in _STAGES:
            ns = _ns(getattr(fin, attr))
            stages[stage] = ns
            ledger.record(stage, ns, model=model)
        if fin.num_generation_tokens > 1:
            ns = _ns(fin.mean_time_per_output_token)
            stages["tpot"] = ns
            ledger.record("tpot", ns, model=model)
        # request_id: in FinishedRequestStats of recent vLLM (the external X-Request-Id);
        # older ones lack it and get a generated ID.
        rid = getattr(fin, "request_id", None)
        scope = perf.request(id=rid if isinstance(rid, str) else None, ledger=ledger,
                             labels={"model": model}, model=model,
                             finish_reason=str(getattr(fin, "finish_reason", "")))
        req = scope.__enter__()
        req.stages.update(stages)
        # e2e from vLLM's own clock: the scope ends now, so it started e2e_latency ago
        req.start_ns = perf_counter_ns() - _ns(fin.e2e_latency)
        scope.__exit__(None, None, None)
