"""Result models of the load generator (written as JSON, read by gate/capacity/report)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ._errors import PerfError
from ._ledger import Ledger
from ._models import LedgerSnapshot

_MODEL = ConfigDict(extra="forbid")


class ResultFileError(PerfError, ValueError):
    """A result file is missing, not JSON, or not a load/sweep result."""


class MetricStats(BaseModel):
    """Latency statistics of one metric over the measured phase (successful requests)."""

    model_config = _MODEL

    count: int
    mean_ms: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float

    @classmethod
    def from_ledger(cls, ledger: Ledger, stage: str) -> MetricStats | None:
        n = ledger.count(stage)
        if n == 0:
            return None
        p = [ledger.percentile(stage, q) for q in (50.0, 90.0, 95.0, 99.0, 99.9, 100.0)]
        return cls(count=n, mean_ms=ledger.mean(stage), p50_ms=p[0], p90_ms=p[1],
                   p95_ms=p[2], p99_ms=p[3], p999_ms=p[4], max_ms=p[5])


class TimelinePoint(BaseModel):
    """One wall-clock second of the measured phase (completions counted by end time)."""

    model_config = _MODEL

    t_s: float  #: start of the second relative to the measured phase's start (first may be < 0)
    arrivals: int  #: requests whose intended send time falls in this second
    completed: int  #: successful completions in this second
    errors: int
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    p999_ms: float | None = None


class SLOCompliance(BaseModel):
    """Goodput and windowed compliance against per-metric thresholds."""

    model_config = _MODEL

    thresholds_ms: dict[str, float]  #: metric -> threshold (e2e, ttft, tpot)
    percentile: float  #: a window complies when this percentile is within every threshold
    window_s: float
    windows: int
    compliant_windows: int
    window_compliance: float | None  #: compliant / windows
    good: int  #: requests that succeeded within every threshold
    goodput_rps: float  #: good requests per second of the measured phase


class LoadResult(BaseModel):
    """Everything one load run measured. ``model_dump_json()`` is the ``load`` JSON output."""

    model_config = _MODEL

    version: int = 1
    kind: Literal["load"] = "load"
    target: str
    mode: Literal["open", "closed"]
    config: dict[str, Any]
    valid: bool  #: False when the generator could not keep its schedule (see reasons)
    invalid_reasons: list[str] = Field(default_factory=list)
    warmup_s: float  #: warm-up length whose samples were discarded (0: none)
    warmup_requests: int
    started_unix_s: float  #: wall-clock start of the measured phase
    duration_s: float  #: measured phase, start to last completion
    scheduled: int  #: requests whose intended time fell in the measured phase
    completed: int  #: successful requests
    errors: int
    error_rate: float
    offered_rps: float  #: scheduled / scheduled span (open loop)
    throughput_rps: float  #: successful requests per second
    goodput_rps: float | None = None  #: requests/s meeting every SLO threshold (needs --slo)
    output_tokens: int = 0
    output_tokens_per_s: float = 0.0
    concurrency: int | None = None  #: closed-loop concurrency
    metrics: dict[str, MetricStats]  #: e2e, ttft, itl, tpot, schedule_lag
    error_kinds: dict[str, int] = Field(default_factory=dict)  #: error text -> count
    slo: SLOCompliance | None = None
    payload_lengths: dict[str, float] | None = None  #: mean/p50/p90/max of payload length
    timeline: list[TimelinePoint] = Field(default_factory=list)
    fingerprint: dict[str, str]
    #: named metrics added by the caller for the gate: accuracy, bleu, gpu_util, ...
    extra: dict[str, float] = Field(default_factory=dict)
    outputs_finite: bool | None = None  #: outputs held no NaN/Inf (callable targets)
    ledger: LedgerSnapshot  #: HDR histograms of every metric (exactly mergeable)

    def metric(self, name: str) -> float | None:
        """A flat metric by name, as the gate reads it: ``throughput_rps``, ``e2e.p99_ms``,
        ``accuracy`` (from ``extra``), … ; None when the result does not have it."""
        return flat_metrics(self).get(name)


class SweepResult(BaseModel):
    """A concurrency or rate sweep: one :class:`LoadResult` per level."""

    model_config = _MODEL

    version: int = 1
    kind: Literal["sweep"] = "sweep"
    mode: Literal["concurrency", "rate"]
    levels: list[float]
    points: list[LoadResult]
    fingerprint: dict[str, str]

    @property
    def valid(self) -> bool:
        return all(p.valid for p in self.points)


AnyResult = LoadResult | SweepResult


def flat_metrics(result: LoadResult) -> dict[str, float]:
    """``{"throughput_rps": …, "e2e.p99_ms": …, "accuracy": …}`` of a result."""
    out: dict[str, float] = {
        "throughput_rps": result.throughput_rps,
        "error_rate": result.error_rate,
        "output_tokens_per_s": result.output_tokens_per_s,
    }
    if result.goodput_rps is not None:
        out["goodput_rps"] = result.goodput_rps
    if result.slo is not None and result.slo.window_compliance is not None:
        out["slo.window_compliance"] = result.slo.window_compliance
    for name, m in result.metrics.items():
        for field, value in m.model_dump().items():
            if field != "count":
                out[f"{name}.{field}"] = float(value)
    out.update(result.extra)
    return out


def read_json(p: Path, what: str = "") -> Any:
    """The parsed JSON of ``p``; ``what`` (e.g. ``"result "``) names it in the read error.

    Raises:
        ResultFileError: missing/unreadable file or not JSON.
    """
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ResultFileError(f"cannot read {what}{p}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ResultFileError(f"{p}: not JSON ({exc.msg} at line {exc.lineno})") from None


def load_result(path: str | os.PathLike[str]) -> AnyResult:
    """Read a ``load`` JSON result (single run or sweep).

    Raises:
        ResultFileError: missing file, not JSON, or not a result (the field is named).
    """
    p = Path(path)
    return result_from_json(read_json(p, "result "), p)


def result_from_json(data: Any, p: Path) -> AnyResult:
    """A result from already-parsed JSON ``data`` read from ``p`` (named in errors).

    Raises:
        ResultFileError: not a result (the field is named).
    """
    if not isinstance(data, dict) or data.get("kind") not in ("load", "sweep"):
        raise ResultFileError(
            f"{p}: not an aiperf-sdk load result (expected a JSON object with kind "
            f"'load' or 'sweep', as written by `aiperf-sdk load --out`)"
        )
    try:
        if data["kind"] == "sweep":
            return SweepResult.model_validate(data)
        return LoadResult.model_validate(data)
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = ".".join(str(x) for x in e["loc"])
        raise ResultFileError(f"{p}: invalid result field {loc!r}: {e['msg']}") from None
