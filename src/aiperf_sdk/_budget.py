"""Latency budgets: an end-to-end SLO split over stages, checked against a ledger."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails

from ._errors import BudgetExceeded, PerfError
from ._ledger import Ledger, default_ledger
from ._models import format_table

_STRICT = ConfigDict(extra="forbid", frozen=True)

#: quantile key -> percentile (0..100)
QUANTILES: dict[str, float] = {
    "p50_ms": 50.0,
    "p75_ms": 75.0,
    "p90_ms": 90.0,
    "p95_ms": 95.0,
    "p99_ms": 99.0,
    "p999_ms": 99.9,
    "max_ms": 100.0,
}


class BudgetFileError(PerfError, ValueError):
    """A budget file cannot be read or is not YAML."""


class StageLimit(BaseModel):
    """Latency limits of one stage; keys are the quantile names of ``QUANTILES``."""

    model_config = _STRICT

    p50_ms: float | None = Field(default=None, gt=0)
    p75_ms: float | None = Field(default=None, gt=0)
    p90_ms: float | None = Field(default=None, gt=0)
    p95_ms: float | None = Field(default=None, gt=0)
    p99_ms: float | None = Field(default=None, gt=0)
    p999_ms: float | None = Field(default=None, gt=0)
    max_ms: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _at_least_one(self) -> StageLimit:
        if not self.limits():
            raise ValueError(f"give at least one limit: {', '.join(QUANTILES)}")
        return self

    def limits(self) -> list[tuple[str, float]]:
        """(quantile key, limit ms) pairs that are set."""
        return [(k, v) for k in QUANTILES if (v := getattr(self, k)) is not None]


class SLO(BaseModel):
    """Error budget: ``target`` of requests of ``stage`` must finish within ``threshold_ms``."""

    model_config = _STRICT

    stage: str = "e2e"
    threshold_ms: float = Field(gt=0)
    target: float = Field(gt=0, lt=1)
    window_s: float | None = Field(default=None, gt=0)


class Budget(BaseModel):
    """The latency budget table.

    Example::

        budget = perf.Budget.model_validate(
            {"total": {"p99_ms": 2000}, "stages": {"prefill": {"p95_ms": 1200}}}
        )
        perf.default_ledger().check(budget).ok

    Raises:
        pydantic.ValidationError: unknown keys (quantiles included), non-positive limits,
            stage p99 budgets summing above ``total.p99_ms``.
    """

    model_config = _STRICT

    total: StageLimit | None = None
    stages: dict[str, StageLimit] = Field(default_factory=dict)
    slo: SLO | None = None

    @model_validator(mode="after")
    def _stages_fit_total(self) -> Budget:
        if self.total is not None and self.total.p99_ms is not None:
            parts = {k: v.p99_ms for k, v in self.stages.items() if v.p99_ms is not None}
            if sum(parts.values()) > self.total.p99_ms:
                raise ValueError(
                    f"stage p99 budgets sum to {sum(parts.values()):g} ms "
                    f"({', '.join(f'{k}={v:g}' for k, v in parts.items())}), above "
                    f"total.p99_ms={self.total.p99_ms:g}: the end-to-end SLO cannot hold"
                )
        return self

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str]) -> Budget:
        """Load a budget file. Validation errors name the file, the field and the value.

        Raises:
            FileNotFoundError: no such file.
            BudgetFileError: the file is not valid YAML or not a mapping.
            pydantic.ValidationError: titled with the file's path.
        """
        p = Path(path)
        text = p.read_text(encoding="utf-8")
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise BudgetFileError(f"{p}: not valid YAML: {exc}") from exc
        if not isinstance(data, Mapping):
            raise BudgetFileError(
                f"{p}: a budget file is a mapping with keys total/stages/slo, "
                f"got {type(data).__name__}"
            )
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ValidationError.from_exception_data(
                title=str(p),
                line_errors=[_init_error(e) for e in exc.errors()],
            ) from None


def _init_error(e: Mapping[str, Any]) -> InitErrorDetails:
    detail: dict[str, Any] = {"type": e["type"], "loc": e["loc"], "input": e["input"]}
    if "ctx" in e:
        detail["ctx"] = e["ctx"]
    return detail  # type: ignore[return-value]


class BudgetRow(BaseModel):
    """One limit of the budget table and what was measured against it."""

    model_config = ConfigDict(frozen=True)

    stage: str
    quantile: str  #: e.g. ``"p99"``
    limit_ms: float
    measured_ms: float | None  #: None when the stage has no samples
    headroom_ms: float | None  #: limit - measured; negative when over budget
    count: int
    ok: bool
    note: str = ""  #: ``"no samples"`` or ``"over by X%"``


class SLOReport(BaseModel):
    """Error budget and windowed compliance of the SLO."""

    model_config = ConfigDict(frozen=True)

    stage: str
    threshold_ms: float
    target: float
    total: int  #: requests (including errored ones)
    good: int  #: successful requests within the threshold
    compliance: float  #: good / total
    error_budget_remaining: float  #: 1 - bad / allowed bad; < 0 once the budget is spent
    windows: int  #: windows with at least one request
    compliant_windows: int
    window_compliance: float | None  #: compliant / windows (None without window_s)
    goodput_rps: float | None  #: good requests per second over the recorded span
    ok: bool


class BudgetReport(BaseModel):
    """Result of ``Ledger.check``: ``.ok``, the rows, and the SLO part; ``str()`` is a table."""

    model_config = ConfigDict(frozen=True)

    ok: bool
    rows: list[BudgetRow]
    slo: SLOReport | None = None

    @property
    def failures(self) -> list[BudgetRow]:
        return [r for r in self.rows if not r.ok]

    def __str__(self) -> str:
        def ms(v: float | None) -> str:
            return "-" if v is None else f"{v:.3f}"

        table = format_table(
            ["stage", "quantile", "limit", "measured", "headroom", "count", "status"],
            [
                [
                    r.stage, r.quantile, ms(r.limit_ms), ms(r.measured_ms), ms(r.headroom_ms),
                    str(r.count), ("ok" if r.ok else "FAIL") + (f" ({r.note})" if r.note else ""),
                ]
                for r in self.rows
            ],
            title=f"latency budget (ms): {'PASS' if self.ok else 'FAIL'}",
        )
        if self.slo is not None:
            s = self.slo
            wc = "-" if s.window_compliance is None else f"{s.window_compliance:.1%}"
            gp = "-" if s.goodput_rps is None else f"{s.goodput_rps:.2f} req/s"
            table += (
                f"\nSLO {s.stage} <= {s.threshold_ms:g} ms for {s.target:.2%}: "
                f"{'ok' if s.ok else 'FAIL'}; compliance {s.compliance:.3%} "
                f"({s.good}/{s.total}), error budget remaining {s.error_budget_remaining:.1%}, "
                f"compliant windows {wc} ({s.compliant_windows}/{s.windows}), goodput {gp}"
            )
        return table


def check(ledger: Ledger, budget: Budget) -> BudgetReport:
    """Check ``ledger`` against ``budget``; a stage with no samples fails ("no samples")."""
    rows: list[BudgetRow] = []
    items: list[tuple[str, StageLimit]] = list(budget.stages.items())
    if budget.total is not None:
        items.append(("e2e", budget.total))
    for stage, limit in items:
        count = ledger.count(stage)
        for key, limit_ms in limit.limits():
            q = "max" if key == "max_ms" else "p" + key[1:-3].replace("999", "99.9")
            if count == 0:
                rows.append(BudgetRow(stage=stage, quantile=q, limit_ms=limit_ms,
                                      measured_ms=None, headroom_ms=None, count=0, ok=False,
                                      note="no samples"))
                continue
            measured = ledger.percentile(stage, QUANTILES[key])
            ok = measured <= limit_ms
            note = "" if ok else f"over by {(measured / limit_ms - 1):.1%}"
            rows.append(BudgetRow(stage=stage, quantile=q, limit_ms=limit_ms,
                                  measured_ms=measured, headroom_ms=limit_ms - measured,
                                  count=count, ok=ok, note=note))
    slo = _check_slo(ledger, budget.slo) if budget.slo is not None else None
    ok = all(r.ok for r in rows) and (slo is None or slo.ok)
    return BudgetReport(ok=ok, rows=rows, slo=slo)


def _check_slo(ledger: Ledger, slo: SLO) -> SLOReport:
    good = ledger.count_within(slo.stage, slo.threshold_ms)
    total = ledger.count(slo.stage, outcome="error") + ledger.count(
        slo.stage, outcome="cancelled"
    ) + ledger.count(slo.stage)
    compliance = good / total if total else 0.0
    allowed_bad = (1 - slo.target) * total
    bad = total - good
    remaining = 1 - bad / allowed_bad if allowed_bad > 0 else (1.0 if bad == 0 else -math.inf)
    windows = compliant = 0
    window_compliance = None
    if slo.window_s is not None:
        seconds = max(ledger.window_s, round(slo.window_s / ledger.window_s) * ledger.window_s)
        for w in ledger.window(seconds, stage=slo.stage):
            n = w.count + w.errors
            if n == 0:
                continue
            windows += 1
            if w.count_within(slo.threshold_ms) / n >= slo.target:
                compliant += 1
        window_compliance = compliant / windows if windows else None
    span = ledger.span_s(slo.stage)
    goodput = good / span if span > 0 else None
    return SLOReport(
        stage=slo.stage, threshold_ms=slo.threshold_ms, target=slo.target, total=total,
        good=good, compliance=compliance, error_budget_remaining=remaining, windows=windows,
        compliant_windows=compliant, window_compliance=window_compliance, goodput_rps=goodput,
        ok=total > 0 and compliance >= slo.target,
    )


BudgetLike = Budget | Mapping[str, Any] | str | os.PathLike[str]


def load_budget(budget: BudgetLike) -> Budget:
    """A :class:`Budget` from a Budget, a mapping, or a YAML file path."""
    if isinstance(budget, Budget):
        return budget
    if isinstance(budget, Mapping):
        return Budget.model_validate(dict(budget))
    return Budget.from_yaml(budget)


def assert_within_budget(budget: BudgetLike, ledger: Ledger | None = None) -> BudgetReport:
    """Check the ledger (default: the default ledger) and raise if over budget.

    Example::

        perf.assert_within_budget({"stages": {"prefill": {"p99_ms": 50}}})

    Returns:
        the passing :class:`BudgetReport`.

    Raises:
        BudgetExceeded: an AssertionError whose message is the budget table.
    """
    report = check(ledger if ledger is not None else default_ledger(), load_budget(budget))
    if not report.ok:
        raise BudgetExceeded(str(report), report)
    return report
