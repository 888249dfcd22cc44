"""Capacity planning from a sweep: the SLO-meeting capacity per instance, then instances."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

from ._errors import PerfError
from ._loadgen_models import LoadResult, SweepResult


class CapacityError(PerfError, ValueError):
    """The inputs cannot give a capacity (no point meets the SLO, bad numbers)."""


class CapacityPlan(BaseModel):
    """The arithmetic of a capacity plan; ``str()`` shows every step."""

    model_config = ConfigDict(frozen=True)

    per_instance_rps: float | None = None  #: highest throughput still meeting the SLO
    chosen_level: float | None = None  #: sweep level that gave it
    slo_metric: str = "e2e.p99_ms"
    slo_ms: float | None = None
    target_rps: float | None = None
    target_tokens_per_s: float | None = None
    per_instance_tokens_per_s: float | None = None
    peak_factor: float = 1.0
    redundancy: int = 1
    instances: int
    lines: list[str]  #: the arithmetic, one step per line

    def __str__(self) -> str:
        return "\n".join(self.lines)


def _point_value(p: LoadResult, metric: str) -> float | None:
    name, _, field = metric.partition(".")
    m = p.metrics.get(name)
    return None if m is None else getattr(m, field, None)


def slo_capacity(sweep: SweepResult, slo_ms: float, metric: str = "e2e.p99_ms"
                 ) -> tuple[LoadResult, list[str]]:
    """The sweep point with the highest throughput whose ``metric`` is within ``slo_ms``.

    Invalid points (generator fell behind) and points with errors above 1 % do not count.

    Raises:
        CapacityError: no point meets the SLO, or ``metric`` is not ``<stage>.<pXX_ms>``.
    """
    if "." not in metric:
        raise CapacityError(f"metric must look like e2e.p99_ms, got {metric!r}")
    lines = [f"sweep ({sweep.mode}): {metric} must be <= {slo_ms:g} ms"]
    best: LoadResult | None = None
    for level, p in zip(sweep.levels, sweep.points, strict=True):
        v = _point_value(p, metric)
        ok = p.valid and v is not None and v <= slo_ms and p.error_rate <= 0.01
        why = ("invalid run" if not p.valid else "no data" if v is None else
               f"errors {p.error_rate:.1%}" if p.error_rate > 0.01 else
               "meets SLO" if ok else "over SLO")
        lines.append(f"  level {level:g}: throughput {p.throughput_rps:.2f} req/s, {metric} "
                     f"{'-' if v is None else f'{v:.1f}'} ms -> {why}")
        if ok and (best is None or p.throughput_rps > best.throughput_rps):
            best = p
    if best is None:
        raise CapacityError(
            f"no sweep point meets {metric} <= {slo_ms:g} ms; sweep lower levels"
        )
    return best, lines


def plan(
    *,
    sweep: SweepResult | None = None,
    slo_ms: float | None = None,
    slo_metric: str = "e2e.p99_ms",
    per_instance_rps: float | None = None,
    target_rps: float | None = None,
    peak_factor: float = 1.0,
    redundancy: int = 1,
    users: int | None = None,
    tokens_per_reply: float | None = None,
    think_time_s: float | None = None,
    per_instance_tokens_per_s: float | None = None,
) -> CapacityPlan:
    """Instances needed: ``ceil(target × peak_factor / per-instance capacity) + redundancy``.

    Request-based: per-instance capacity is the highest sweep throughput that still meets
    the SLO (not the peak throughput), or ``per_instance_rps``. Token-based: target
    tokens/s = ``users × tokens_per_reply ÷ think_time_s``, against
    ``per_instance_tokens_per_s`` (or the SLO-meeting sweep point's output tokens/s).

    Example::

        p = plan(sweep=perf.load_result("sweep.json"), slo_ms=500, target_rps=800,
                 peak_factor=1.5)
        print(p)          # every step of the arithmetic
        p.instances

    Raises:
        CapacityError: missing or non-positive inputs, or no sweep point meets the SLO.
    """
    if peak_factor <= 0 or redundancy < 0:
        raise CapacityError("peak_factor must be > 0 and redundancy >= 0")
    lines: list[str] = []
    chosen_level = None
    tokens_mode = users is not None or tokens_per_reply is not None or think_time_s is not None
    sweep_tps = None
    if sweep is not None:
        if slo_ms is None or slo_ms <= 0:
            raise CapacityError("a sweep needs --slo-ms (the latency the capacity must meet)")
        best, lines = slo_capacity(sweep, slo_ms, slo_metric)
        chosen_level = sweep.levels[sweep.points.index(best)]
        if per_instance_rps is None:
            per_instance_rps = best.throughput_rps
        sweep_tps = best.output_tokens_per_s or None
        lines.append(f"per-instance capacity = {per_instance_rps:.2f} req/s (level "
                     f"{chosen_level:g}, the highest throughput meeting the SLO)")
    if tokens_mode:
        if users is None or tokens_per_reply is None or think_time_s is None:
            raise CapacityError("the token-based plan needs users, tokens_per_reply and "
                                "think_time_s")
        if users <= 0 or tokens_per_reply <= 0 or think_time_s <= 0:
            raise CapacityError("users, tokens_per_reply and think_time_s must be > 0")
        cap = per_instance_tokens_per_s if per_instance_tokens_per_s is not None else sweep_tps
        if cap is None or cap <= 0:
            raise CapacityError("the token-based plan needs per-instance tokens/s (give it, "
                                "or a sweep of a streaming target)")
        target_tps = users * tokens_per_reply / think_time_s
        lines.append(f"target tokens/s = users × tokens per reply ÷ think time = {users} × "
                     f"{tokens_per_reply:g} ÷ {think_time_s:g} s = {target_tps:.2f} tokens/s")
        need = target_tps * peak_factor / cap
        instances = math.ceil(need - 1e-9) + redundancy
        lines.append(f"instances = ceil({target_tps:.2f} × {peak_factor:g} ÷ {cap:.2f}) + "
                     f"{redundancy} = ceil({need:.3f}) + {redundancy} = {instances}")
        return CapacityPlan(per_instance_rps=per_instance_rps, chosen_level=chosen_level,
                            slo_metric=slo_metric, slo_ms=slo_ms, target_tokens_per_s=target_tps,
                            per_instance_tokens_per_s=cap, peak_factor=peak_factor,
                            redundancy=redundancy, instances=instances, lines=lines)
    if target_rps is None or target_rps <= 0:
        raise CapacityError("give the target load (target_rps > 0), or users/tokens_per_reply/"
                            "think_time_s for the token-based plan")
    if per_instance_rps is None or per_instance_rps <= 0:
        raise CapacityError("give a sweep result (with the SLO) or per_instance_rps > 0")
    need = target_rps * peak_factor / per_instance_rps
    instances = math.ceil(need - 1e-9) + redundancy
    lines.append(f"instances = ceil(target × peak factor ÷ capacity) + redundancy = "
                 f"ceil({target_rps:g} × {peak_factor:g} ÷ {per_instance_rps:.2f}) + "
                 f"{redundancy} = ceil({need:.3f}) + {redundancy} = {instances}")
    return CapacityPlan(per_instance_rps=per_instance_rps, chosen_level=chosen_level,
                        slo_metric=slo_metric, slo_ms=slo_ms, target_rps=target_rps,
                        peak_factor=peak_factor, redundancy=redundancy, instances=instances,
                        lines=lines)
