"""Arrival processes of the load generator: when each request is *meant* to be sent.

A schedule is an increasing array of offsets in seconds from the start of the measured
phase. The generator sends request ``i`` at ``start + offsets[i]`` whatever the server does
(open loop), and measures its latency from that intended time.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ._errors import PerfError

_STRICT = ConfigDict(extra="forbid", frozen=True)


class LoadConfigError(PerfError, ValueError):
    """A load-generator setting, dataset, trace or target is invalid; the message says which."""


class Spike(BaseModel):
    """Multiply the rate by ``factor`` during ``[at_s, at_s + seconds)``."""

    model_config = _STRICT

    at_s: float = Field(ge=0)  #: start, seconds after the measured phase begins
    seconds: float = Field(gt=0)  #: how long the spike lasts
    factor: float = Field(gt=0)  #: rate multiplier, e.g. 3.0 for a 3x spike


class Step(BaseModel):
    """From ``at_s`` on, the base rate becomes ``rate`` requests/s."""

    model_config = _STRICT

    at_s: float = Field(ge=0)
    rate: float = Field(gt=0)


class ArrivalProcess(BaseModel):
    """Open-loop arrival process: constant, Poisson or gamma inter-arrival times.

    ``burstiness`` is the gamma distribution's shape (as in vLLM's ``benchmark_serving``):
    1.0 is Poisson, below 1 burstier (clumps and gaps), above 1 more regular. The mean rate
    is ``rate`` whatever the burstiness. ``steps`` change the base rate from a given time on;
    ``spikes`` multiply it for a while.

    Example::

        proc = ArrivalProcess(kind="poisson", rate=50,
                              spikes=[Spike(at_s=10, seconds=5, factor=3)])
        offsets = proc.schedule(duration_s=30, seed=1)   # seconds from the start

    Raises:
        pydantic.ValidationError: non-positive rate, factor or burstiness; unknown kind.
    """

    model_config = _STRICT

    kind: Literal["constant", "poisson", "gamma"] = "poisson"
    rate: float = Field(gt=0)  #: mean requests per second
    burstiness: float = Field(default=1.0, gt=0)
    steps: list[Step] = Field(default_factory=list)
    spikes: list[Spike] = Field(default_factory=list)

    @model_validator(mode="after")
    def _gamma_only(self) -> ArrivalProcess:
        if self.burstiness != 1.0 and self.kind != "gamma":
            raise ValueError("burstiness applies to kind='gamma' only")
        return self

    def rate_at(self, t: float) -> float:
        """Requests per second at ``t`` seconds (steps and spikes applied)."""
        rate = self.rate
        for s in sorted(self.steps, key=lambda s: s.at_s):
            if s.at_s <= t:
                rate = s.rate
        for sp in self.spikes:
            if sp.at_s <= t < sp.at_s + sp.seconds:
                rate *= sp.factor
        return rate

    def _breakpoints(self) -> list[float]:
        pts = {0.0}
        pts.update(s.at_s for s in self.steps)
        for sp in self.spikes:
            pts.add(sp.at_s)
            pts.add(sp.at_s + sp.seconds)
        return sorted(pts)

    def schedule(
        self, *, duration_s: float | None = None, count: int | None = None, seed: int = 0
    ) -> np.ndarray[Any, np.dtype[np.float64]]:
        """Intended send offsets (seconds, increasing) for ``duration_s`` or ``count`` requests.

        The rate is piecewise constant; at each change the next gap is drawn afresh at the
        new rate (exact for Poisson, which is memoryless).

        Raises:
            LoadConfigError: neither or both of ``duration_s`` and ``count``, or bad values.
        """
        if (duration_s is None) == (count is None):
            raise LoadConfigError("give exactly one of duration_s and count")
        if duration_s is not None and not (0 < duration_s < math.inf):
            raise LoadConfigError(f"duration_s must be > 0, got {duration_s!r}")
        if count is not None and count < 1:
            raise LoadConfigError(f"count must be >= 1, got {count!r}")
        rng = np.random.default_rng(seed)
        bounds = self._breakpoints()
        horizon = duration_s if duration_s is not None else math.inf
        out: list[np.ndarray[Any, np.dtype[np.float64]]] = []
        have = 0
        for i, a in enumerate(bounds):
            if a >= horizon:
                break
            b = min(bounds[i + 1] if i + 1 < len(bounds) else math.inf, horizon)
            rate = self.rate_at(a)
            t = a
            while t < b and (count is None or have < count):
                n = 64 if math.isinf(b) else int((b - t) * rate * 1.2) + 16
                if count is not None:
                    n = min(n, count - have + 16)
                gaps = self._gaps(rng, rate, n)
                times = t + np.cumsum(gaps)
                inside = times[times < b]
                if count is not None:
                    inside = inside[: count - have]
                out.append(inside)
                have += inside.size
                if inside.size < times.size:
                    break  # crossed into the next segment (or reached count)
                t = float(times[-1])
            if count is not None and have >= count:
                break
        return np.concatenate(out) if out else np.zeros(0, dtype=np.float64)

    def _gaps(
        self, rng: np.random.Generator, rate: float, n: int
    ) -> np.ndarray[Any, np.dtype[np.float64]]:
        if self.kind == "constant":
            return np.full(n, 1.0 / rate)
        if self.kind == "poisson":
            return rng.exponential(1.0 / rate, n)
        shape = self.burstiness
        return rng.gamma(shape, 1.0 / (rate * shape), n)


class TraceEntry(BaseModel):
    """One recorded arrival (a line of a traffic-recorder JSONL file)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    t: float  #: arrival time, unix seconds (or any origin: only differences matter)
    route: str | None = None
    method: str | None = None
    req_bytes: int | None = None
    features: dict[str, Any] = Field(default_factory=dict)
    body: Any = None  #: present only when the recorder was told to keep bodies


def load_trace(path: str | os.PathLike[str]) -> list[TraceEntry]:
    """Read a JSONL trace (``t`` per line, as written by :class:`TrafficRecorder`).

    Raises:
        LoadConfigError: missing file, malformed line (with its number), empty trace, or
            arrival times that go backwards.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise LoadConfigError(f"cannot read trace {p}: {exc.strerror or exc}") from None
    entries: list[TraceEntry] = []
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entries.append(TraceEntry.model_validate(json.loads(line)))
        except (json.JSONDecodeError, ValidationError) as exc:
            msg = exc.msg if isinstance(exc, json.JSONDecodeError) else exc.errors()[0]["msg"]
            raise LoadConfigError(
                f"{p}:{no}: not a trace line ({msg}); each line is a JSON object with a "
                f"numeric 't' (arrival time in seconds)"
            ) from None
    if not entries:
        raise LoadConfigError(f"{p}: the trace has no entries")
    for no, (a, b) in enumerate(itertools.pairwise(entries), 2):
        if b.t < a.t:
            raise LoadConfigError(f"{p}: arrival {no} goes back in time ({b.t} < {a.t})")
    return entries


def trace_schedule(
    entries: list[TraceEntry], time_scale: float = 1.0
) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Offsets keeping the trace's inter-arrival times, multiplied by ``time_scale``.

    ``time_scale=0.5`` replays twice as fast; 2.0 twice as slow.

    Raises:
        LoadConfigError: ``time_scale`` is not positive.
    """
    if not time_scale > 0 or math.isinf(time_scale):
        raise LoadConfigError(f"time_scale must be > 0, got {time_scale!r}")
    t = np.array([e.t for e in entries], dtype=np.float64)
    out: np.ndarray[Any, np.dtype[np.float64]] = (t - t[0]) * time_scale
    return out
