"""Regression gate: compare a load result with a baseline, speed and correctness together."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ._errors import PerfError
from ._loadgen_env import fingerprint_differences
from ._loadgen_models import LoadResult, ResultFileError, SweepResult, flat_metrics, load_result
from ._models import format_table

_STRICT = ConfigDict(extra="forbid", frozen=True)
_LOWER_SUFFIXES = ("_ms", "error_rate", "_s", "loss", "latency")


class BaselineError(PerfError, ValueError):
    """A baseline file is missing, not YAML, or invalid (the field is named)."""


class GateRefusedError(PerfError, ValueError):
    """The result cannot be gated: the run was invalid, or had no warm-up."""


def default_direction(metric: str) -> Literal["higher", "lower"]:
    """``"lower"`` for latencies (``*_ms``), error rates and losses; else ``"higher"``."""
    return "lower" if metric.endswith(_LOWER_SUFFIXES) else "higher"


class MetricTolerance(BaseModel):
    """How far one metric may move from its baseline ``value``.

    Relative (``min_ratio``/``max_ratio`` of ``value``), absolute change (``max_drop`` for
    higher-is-better, ``max_rise`` for lower-is-better) and bounds (``min``/``max``) may be
    combined; all given must hold. With only ``value``: higher-is-better metrics must reach
    0.95× it, lower-is-better ones stay under 1.10× it.
    """

    model_config = _STRICT

    value: float | None = None
    direction: Literal["higher", "lower"] | None = None
    min_ratio: float | None = Field(default=None, gt=0)
    max_ratio: float | None = Field(default=None, gt=0)
    max_drop: float | None = Field(default=None, ge=0)
    max_rise: float | None = Field(default=None, ge=0)
    min: float | None = None
    max: float | None = None

    @model_validator(mode="after")
    def _usable(self) -> MetricTolerance:
        if self.value is None and self.min is None and self.max is None:
            raise ValueError("give a baseline value, or a min/max bound")
        needs_value = [k for k in ("min_ratio", "max_ratio", "max_drop", "max_rise")
                       if getattr(self, k) is not None]
        if needs_value and self.value is None:
            raise ValueError(f"{', '.join(needs_value)} need a baseline value")
        return self


class FunctionalChecks(BaseModel):
    """Correctness beside speed: finite numbers, required metrics present."""

    model_config = _STRICT

    finite: bool = True  #: every metric (and the target's outputs) free of NaN/Inf
    required: list[str] = Field(default_factory=list)  #: metrics that must be present
    max_error_rate: float | None = Field(default=None, ge=0, le=1)


class Baseline(BaseModel):
    """A gate baseline (YAML).

    Example::

        metrics:
          throughput_rps: {value: 120.0, min_ratio: 0.95}
          e2e.p99_ms:     {value: 80.0, max_ratio: 1.10}
          gpu_util:       {min: 0.6}
          accuracy:       {value: 0.912, max_drop: 0.005}
        functional: {finite: true, required: [e2e.p99_ms]}
        fingerprint: {...}       # written by --update-baseline

    Raises:
        pydantic.ValidationError: unknown keys, a tolerance without a value.
    """

    model_config = _STRICT

    metrics: dict[str, MetricTolerance]
    functional: FunctionalChecks = Field(default_factory=FunctionalChecks)
    fingerprint: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str]) -> Baseline:
        """Load a baseline file.

        Raises:
            BaselineError: missing file, not YAML, not a mapping, or an invalid field.
        """
        p = Path(path)
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
        except OSError as exc:
            raise BaselineError(f"cannot read baseline {p}: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            raise BaselineError(f"{p}: not valid YAML: {exc}".splitlines()[0]) from None
        if not isinstance(data, Mapping):
            raise BaselineError(f"{p}: a baseline is a mapping with a 'metrics' key")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            e = exc.errors()[0]
            loc = ".".join(str(x) for x in e["loc"])
            raise BaselineError(f"{p}: invalid baseline at {loc!r}: {e['msg']}") from None


class GateRow(BaseModel):
    """One check of the gate."""

    model_config = ConfigDict(frozen=True)

    metric: str
    direction: str  #: ``higher`` / ``lower`` is better; ``check`` for functional checks
    baseline: float | None
    measured: float | None
    limit: str  #: the condition, e.g. ``>= 114.0 (0.95x)``
    change: float | None  #: measured / baseline - 1
    ok: bool
    note: str = ""


class GateReport(BaseModel):
    """Result of :func:`check`: ``.ok``, the rows, warnings; ``str()`` is the table."""

    model_config = ConfigDict(frozen=True)

    ok: bool
    rows: list[GateRow]
    warnings: list[str] = Field(default_factory=list)

    @property
    def regressions(self) -> list[GateRow]:
        return [r for r in self.rows if not r.ok]

    def __str__(self) -> str:
        def num(v: float | None) -> str:
            return "-" if v is None else f"{v:.4g}"

        table = format_table(
            ["metric", "better", "baseline", "measured", "change", "limit", "status"],
            [[r.metric, r.direction, num(r.baseline), num(r.measured),
              "-" if r.change is None else f"{r.change:+.1%}", r.limit,
              ("ok" if r.ok else "REGRESSED") + (f" ({r.note})" if r.note else "")]
             for r in self.rows],
            title=f"regression gate: {'PASS' if self.ok else 'FAIL'}",
        )
        for w in self.warnings:
            table = f"WARNING: {w}\n" + table
        return table


def _limits(name: str, tol: MetricTolerance) -> tuple[str, list[tuple[str, float, bool]]]:
    """(direction, [(text, bound, is_lower_bound)])."""
    direction = tol.direction or default_direction(name)
    out: list[tuple[str, float, bool]] = []
    v = tol.value
    if v is not None:
        if tol.min_ratio is not None:
            out.append((f">= {v * tol.min_ratio:.4g} ({tol.min_ratio:g}x)", v * tol.min_ratio,
                        True))
        if tol.max_ratio is not None:
            out.append((f"<= {v * tol.max_ratio:.4g} ({tol.max_ratio:g}x)", v * tol.max_ratio,
                        False))
        if tol.max_drop is not None:
            out.append((f">= {v - tol.max_drop:.4g} (-{tol.max_drop:g})", v - tol.max_drop, True))
        if tol.max_rise is not None:
            out.append((f"<= {v + tol.max_rise:.4g} (+{tol.max_rise:g})", v + tol.max_rise,
                        False))
    if tol.min is not None:
        out.append((f">= {tol.min:g}", tol.min, True))
    if tol.max is not None:
        out.append((f"<= {tol.max:g}", tol.max, False))
    if not out and v is not None:  # value only: the seeds' default tolerances
        if direction == "higher":
            out.append((f">= {v * 0.95:.4g} (0.95x)", v * 0.95, True))
        else:
            out.append((f"<= {v * 1.10:.4g} (1.1x)", v * 1.10, False))
    return direction, out


def _as_result(result: LoadResult | SweepResult | str | os.PathLike[str]) -> LoadResult:
    r = load_result(result) if isinstance(result, (str, os.PathLike)) else result
    if isinstance(r, SweepResult):
        raise ResultFileError("the gate compares one load run, not a sweep; gate one point "
                              "or re-run `aiperf-sdk load` without --sweep")
    return r


def _as_baseline(baseline: Baseline | Mapping[str, Any] | str | os.PathLike[str]) -> Baseline:
    if isinstance(baseline, Baseline):
        return baseline
    if isinstance(baseline, Mapping):
        return Baseline.model_validate(dict(baseline))
    return Baseline.from_yaml(baseline)


def check(
    result: LoadResult | SweepResult | str | os.PathLike[str],
    baseline: Baseline | Mapping[str, Any] | str | os.PathLike[str],
) -> GateReport:
    """Compare ``result`` with ``baseline``; every tolerance and functional check must hold.

    Example::

        report = perf.gate.check("result.json", "baseline.yaml")
        if not report.ok:
            print(report)            # what regressed, by how much
            raise SystemExit(1)

    A metric missing from the result fails (``"missing"``); a faster run that lost accuracy
    fails. Fingerprint differences are warnings (``report.warnings``), not failures.

    Raises:
        GateRefusedError: the result is marked invalid or had no warm-up.
        BaselineError, ResultFileError: unreadable or invalid files.
    """
    res = _as_result(result)
    base = _as_baseline(baseline)
    if not res.valid:
        raise GateRefusedError("refusing to gate an invalid run: " + "; ".join(
            res.invalid_reasons))
    if res.warmup_s <= 0 or res.warmup_requests == 0:
        raise GateRefusedError(
            "refusing to gate a run without warm-up: cold-start samples (compilation, "
            "caches, connection setup) would decide the verdict; run load with --warmup-s > 0"
        )
    flat = flat_metrics(res)
    rows: list[GateRow] = []
    for name, tol in base.metrics.items():
        direction, limits = _limits(name, tol)
        measured = flat.get(name)
        limit_text = " and ".join(t for t, _, _ in limits)
        if measured is None:
            rows.append(GateRow(metric=name, direction=direction, baseline=tol.value,
                                measured=None, limit=limit_text, change=None, ok=False,
                                note="missing"))
            continue
        failed = [t for t, bound, lower in limits
                  if not math.isfinite(measured) or (measured < bound if lower
                                                     else measured > bound)]
        change = (measured / tol.value - 1) if tol.value else None
        rows.append(GateRow(metric=name, direction=direction, baseline=tol.value,
                            measured=measured, limit=limit_text, change=change,
                            ok=not failed, note="not finite" if not math.isfinite(measured)
                            else ""))
    fn = base.functional
    if fn.finite:
        bad = sorted(k for k, v in flat.items() if not math.isfinite(v))
        if res.outputs_finite is False:
            bad.append("target outputs")
        rows.append(GateRow(metric="no NaN/Inf", direction="check", baseline=None,
                            measured=None, limit="all finite", change=None, ok=not bad,
                            note=", ".join(bad)[:80]))
    for name in fn.required:
        rows.append(GateRow(metric=f"has {name}", direction="check", baseline=None,
                            measured=flat.get(name), limit="present", change=None,
                            ok=name in flat, note="" if name in flat else "missing"))
    if fn.max_error_rate is not None:
        rows.append(GateRow(metric="error_rate", direction="check", baseline=None,
                            measured=res.error_rate, limit=f"<= {fn.max_error_rate:g}",
                            change=None, ok=res.error_rate <= fn.max_error_rate))
    warnings = []
    if base.fingerprint:
        diffs = fingerprint_differences(base.fingerprint, res.fingerprint)
        if diffs:
            warnings.append("environment differs from the baseline's, the comparison may be "
                            "meaningless: " + "; ".join(diffs))
    return GateReport(ok=all(r.ok for r in rows), rows=rows, warnings=warnings)


_DEFAULT_METRICS: dict[str, dict[str, float]] = {
    "throughput_rps": {"min_ratio": 0.95},
    "goodput_rps": {"min_ratio": 0.95},
    "e2e.p99_ms": {"max_ratio": 1.10},
    "ttft.p99_ms": {"max_ratio": 1.10},
    "tpot.p99_ms": {"max_ratio": 1.10},
}


def update_baseline(
    result: LoadResult | SweepResult | str | os.PathLike[str],
    path: str | os.PathLike[str],
) -> Baseline:
    """Write ``result``'s values as the new baseline at ``path``, keeping its tolerances.

    An existing baseline keeps its metrics, tolerances and functional checks (only the
    values and the fingerprint change); a new one gates throughput, goodput and the p99 of
    e2e/TTFT/TPOT (what the result has) plus every ``extra`` metric (``max_drop`` 0.5 %
    of the value for higher-is-better, ``max_ratio`` 1.1 otherwise).

    Raises:
        GateRefusedError: the result is invalid or had no warm-up (never baseline those).
        BaselineError: the existing baseline is invalid.
    """
    res = _as_result(result)
    if not res.valid or res.warmup_s <= 0:
        raise GateRefusedError("refusing to make a baseline of an invalid run or one without "
                               "warm-up")
    flat = flat_metrics(res)
    p = Path(path)
    if p.exists():
        old = Baseline.from_yaml(p)
        specs = {k: v.model_dump(exclude_none=True) for k, v in old.metrics.items()}
        functional = old.functional
    else:
        specs = {k: dict(v) for k, v in _DEFAULT_METRICS.items() if k in flat}
        for k in res.extra:
            specs[k] = ({"max_drop": round(abs(flat[k]) * 0.005, 6)}
                        if default_direction(k) == "higher" else {"max_ratio": 1.10})
        functional = FunctionalChecks(required=[k for k in specs if k in flat])
    metrics: dict[str, Any] = {}
    for k, spec in specs.items():
        if k in flat and ("value" in spec or not ({"min", "max"} & set(spec))):
            spec["value"] = round(flat[k], 6)
        metrics[k] = spec
    new = Baseline.model_validate({"metrics": metrics, "functional": functional.model_dump(),
                                   "fingerprint": res.fingerprint})
    header = ("# aiperf-sdk gate baseline; `aiperf-sdk gate --update-baseline` rewrites the "
              "values\n")
    p.write_text(header + yaml.safe_dump(new.model_dump(exclude_none=True), sort_keys=False),
                 encoding="utf-8")
    return new
