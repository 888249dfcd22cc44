"""The load generator: open-loop (and closed-loop) runs, measured from intended send times.

Coordinated omission: a closed-loop client that waits for each reply before sending the next
sends *fewer* requests while the server stalls, so the stall hides in a handful of samples.
Here every request has an intended send time fixed in advance by the arrival process, and its
latency is measured from that time — a request held back by a stalled server or a busy
connection pool is charged for the wait. The generator's own delay (intended → actually
sent) is recorded as ``schedule_lag``; when its p99 exceeds ``max_lag_ms`` the run is
marked invalid, because then the numbers would include the generator's overload.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import numpy as np

from ._hdrlog import HdrLogWriter
from ._ledger import Ledger
from ._loadgen_arrivals import ArrivalProcess, LoadConfigError, TraceEntry, trace_schedule
from ._loadgen_env import environment_fingerprint
from ._loadgen_http import CallableTarget, HttpTarget, Outcome, Target
from ._loadgen_models import (
    LoadResult,
    MetricStats,
    SLOCompliance,
    SweepResult,
    TimelinePoint,
)
from ._window import Window

#: metrics ``slo_ms`` may name (per-request values)
SLO_METRICS = ("e2e", "ttft", "tpot")
DEFAULT_PAYLOAD: dict[str, Any] = {"prompt": "Hello, how are you?", "max_tokens": 16}

Progress = Callable[[float, float], None]  # (done, total) in seconds or requests


def load_dataset(path: str | os.PathLike[str]) -> list[Any]:
    """Payloads from a JSONL file: each line is one request body (any JSON value).

    Raises:
        LoadConfigError: missing file, malformed line (with its number), or no lines.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise LoadConfigError(f"cannot read dataset {p}: {exc.strerror or exc}") from None
    out = []
    for no, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise LoadConfigError(
                    f"{p}:{no}: not JSON ({exc.msg}); a dataset has one JSON request body "
                    f"per line"
                ) from None
    if not out:
        raise LoadConfigError(f"{p}: the dataset has no payloads")
    return out


def payload_length(payload: Any) -> int:
    """Length feature of a payload: characters of its ``prompt``/``text``/``input`` field,
    else of its JSON form."""
    if isinstance(payload, str):
        return len(payload)
    if isinstance(payload, dict):
        for key in ("prompt", "text", "input"):
            v = payload.get(key)
            if isinstance(v, str):
                return len(v)
        if isinstance(payload.get("messages"), list):
            return sum(len(str(m.get("content", ""))) for m in payload["messages"]
                       if isinstance(m, dict))
    return len(json.dumps(payload, default=str))


def _replay_payload(entry: TraceEntry, fallback: Any) -> Any:
    if entry.body is not None:
        return entry.body
    chars = entry.features.get("prompt_chars")
    if isinstance(chars, int) and chars >= 0 and isinstance(fallback, dict):
        # bodies were not recorded: keep the recorded length, synthesise the text
        return {**fallback, "prompt": ("lorem ipsum " * (chars // 12 + 1))[:chars]}
    return fallback


class _Run:
    """State of one run; ``_one`` is the per-request hot path."""

    def __init__(self, target: Target, slo_ms: dict[str, float], timeout_s: float,
                 windows_kept: int) -> None:
        self.target = target
        self.slo = slo_ms
        self.timeout_s = timeout_s
        self.ledger = Ledger(window_s=1.0, windows_kept=windows_kept)
        self.good = 0
        self.completed = 0
        self.errors = 0
        self.tokens = 0
        self.warm = 0
        self.error_kinds: Counter[str] = Counter()
        self.nonfinite = False
        self.saw_output = False
        self.done_at = 0
        self.sent = 0

    async def one(self, intended: int, payload: Any, path: str | None, measured: bool) -> None:
        task = asyncio.current_task()
        start = perf_counter_ns()
        timed_out = False

        def expire() -> None:
            nonlocal timed_out
            timed_out = True
            if task is not None:
                task.cancel()

        handle = asyncio.get_running_loop().call_later(self.timeout_s, expire)
        try:
            outcome = await self.target.send(payload, path)
        except asyncio.CancelledError:
            if not timed_out:
                raise
            if task is not None and hasattr(task, "uncancel"):
                task.uncancel()
            outcome = Outcome(False, f"timeout after {self.timeout_s:g} s")
        finally:
            handle.cancel()
        end = perf_counter_ns()
        if not measured:
            self.warm += 1
            return
        self._account(intended, start, end, outcome)

    def _account(self, intended: int, start: int, end: int, outcome: Outcome) -> None:
        led = self.ledger
        led.record("schedule_lag", max(0, start - intended))
        e2e = end - intended
        self.done_at = max(self.done_at, end)
        if not outcome.ok:
            self.errors += 1
            self.error_kinds[outcome.error or "error"] += 1
            led.record("e2e", e2e, outcome="error")
            return
        self.completed += 1
        led.record("e2e", e2e)
        good = e2e <= self.slo.get("e2e", math.inf) * 1e6
        toks = outcome.tokens
        if toks:
            n = len(toks)
            self.tokens += n
            ttft = toks[0] - intended
            led.record("ttft", max(0, ttft))
            good = good and ttft <= self.slo.get("ttft", math.inf) * 1e6
            prev = toks[0]
            for t in toks[1:]:
                led.record("itl", t - prev)
                prev = t
            if n >= 2:
                tpot = (toks[-1] - toks[0]) // (n - 1)
                led.record("tpot", tpot)
                good = good and tpot <= self.slo.get("tpot", math.inf) * 1e6
        elif "ttft" in self.slo or "tpot" in self.slo:
            good = False  # a threshold on a stream metric the reply did not have
        if good:
            self.good += 1
        if outcome.output is not None:
            self.saw_output = True
            if not self.nonfinite and not _finite(outcome.output):
                self.nonfinite = True


def _finite(value: Any) -> bool:
    """False if ``value`` (numbers, sequences, mappings, numpy arrays) holds NaN or Inf."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (str, bytes, int)) or value is None:
        return True
    if isinstance(value, np.ndarray):
        return not np.issubdtype(value.dtype, np.number) or bool(np.isfinite(value).all())
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    tolist = getattr(value, "tolist", None)  # torch tensors and friends
    if callable(tolist):
        return _finite(tolist())
    return True


def _check_slo(slo_ms: dict[str, float] | None) -> dict[str, float]:
    slo = dict(slo_ms or {})
    for k, v in slo.items():
        if k not in SLO_METRICS:
            raise LoadConfigError(f"SLO metric must be one of {', '.join(SLO_METRICS)}, got {k!r}")
        if not (isinstance(v, (int, float)) and 0 < v < math.inf):
            raise LoadConfigError(f"SLO threshold for {k} must be a positive number of ms")
    return slo


def _as_target(target: Target | str | Callable[..., Any], **http: Any) -> Target:
    if isinstance(target, (HttpTarget, CallableTarget)):
        return target
    if isinstance(target, str):
        return HttpTarget(target, **http)
    return CallableTarget(target)


async def run_load_async(
    target: Target | str | Callable[..., Any],
    *,
    arrival: ArrivalProcess | None = None,
    concurrency: int | None = None,
    duration_s: float | None = None,
    requests: int | None = None,
    warmup_s: float = 2.0,
    seed: int = 0,
    payloads: Sequence[Any] | None = None,
    replay: Sequence[TraceEntry] | None = None,
    time_scale: float = 1.0,
    slo_ms: dict[str, float] | None = None,
    slo_window_s: float = 5.0,
    slo_percentile: float = 95.0,
    max_lag_ms: float = 10.0,
    timeout_s: float = 30.0,
    hdr_log: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
) -> LoadResult:
    """Run one load test and return its :class:`LoadResult` (see :func:`run_load`)."""
    slo = _check_slo(slo_ms)
    modes = sum(x is not None for x in (arrival, concurrency, replay))
    if modes != 1:
        raise LoadConfigError("give exactly one of arrival (open loop), concurrency (closed "
                              "loop) or replay (a recorded trace)")
    if replay is None and (duration_s is None) == (requests is None):
        raise LoadConfigError("give exactly one of duration_s and requests")
    if concurrency is not None and concurrency < 1:
        raise LoadConfigError(f"concurrency must be >= 1, got {concurrency}")
    if warmup_s < 0 or timeout_s <= 0 or max_lag_ms <= 0:
        raise LoadConfigError("warmup_s must be >= 0, timeout_s and max_lag_ms > 0")
    if slo_window_s < 1 or slo_window_s != int(slo_window_s):
        raise LoadConfigError(f"slo_window_s must be a whole number of seconds >= 1, got "
                              f"{slo_window_s!r}")
    if not 0 < slo_percentile <= 100:
        raise LoadConfigError(f"slo_percentile must be within (0, 100], got {slo_percentile}")
    if payloads is not None and len(payloads) == 0:
        raise LoadConfigError("payloads is empty")
    tgt = _as_target(target)
    await tgt.preflight()
    rng = np.random.default_rng(seed)
    pool = list(payloads) if payloads else [DEFAULT_PAYLOAD]

    # the schedule: warm-up offsets (negative) then measured offsets, in seconds
    paths: list[str | None] | None = None
    pick: list[Any] = []
    if replay is not None:
        measured = trace_schedule(list(replay), time_scale)
        pick = [_replay_payload(e, pool[0]) for e in replay]
        if isinstance(tgt, HttpTarget):
            paths = [e.route for e in replay]
        warm = np.zeros(0)
    elif arrival is not None:
        measured = arrival.schedule(duration_s=duration_s, count=requests, seed=seed)
        warm = (ArrivalProcess(kind=arrival.kind, rate=arrival.rate,
                               burstiness=arrival.burstiness)
                .schedule(duration_s=warmup_s, seed=seed + 1) - warmup_s
                if warmup_s > 0 else np.zeros(0))
    else:
        measured = warm = np.zeros(0)
    span = float(measured[-1]) if len(measured) else 0.0
    windows_kept = int(max(span, duration_s or 0.0) + warmup_s + timeout_s) + 120
    run = _Run(tgt, slo, timeout_s, windows_kept)
    writer = HdrLogWriter(hdr_log, run.ledger) if hdr_log is not None else None
    config: dict[str, Any] = {
        "arrival": arrival.model_dump() if arrival is not None else None,
        "concurrency": concurrency, "duration_s": duration_s, "requests": requests,
        "warmup_s": warmup_s, "seed": seed, "replay": replay is not None,
        "time_scale": time_scale, "slo_ms": slo, "slo_window_s": slo_window_s,
        "slo_percentile": slo_percentile, "max_lag_ms": max_lag_ms, "timeout_s": timeout_s,
        "payloads": len(pool),
    }
    arrivals_at: list[float] = []
    lengths: list[int] = []
    try:
        if concurrency is not None:
            t0_ns, started_unix = await _closed_loop(run, concurrency, warmup_s, duration_s,
                                                     requests, pool, rng, lengths, progress,
                                                     writer)
        else:
            if replay is None:
                pick = [pool[int(i)] for i in rng.integers(0, len(pool), len(measured))]
            all_off = np.concatenate([warm, measured])
            all_pay = [pool[int(i)] for i in rng.integers(0, len(pool), len(warm))] + pick
            lengths = [payload_length(p) for p in pick]
            arrivals_at = [float(x) for x in measured]
            t0_ns, started_unix = await _open_loop(run, all_off, all_pay, len(warm), paths,
                                                   progress, writer)
    finally:
        await tgt.aclose()
        if writer is not None:
            writer.write_interval()
            writer.close()
    return _result(run, tgt, config, t0_ns, started_unix, warmup_s, arrivals_at, lengths,
                   concurrency, slo, slo_window_s, slo_percentile, max_lag_ms)


async def _open_loop(
    run: _Run, offsets: np.ndarray[Any, Any], payloads: list[Any], n_warm: int,
    paths: list[str | None] | None, progress: Progress | None, writer: HdrLogWriter | None,
) -> tuple[int, float]:
    lead_ns = 20_000_000
    warm_ns = int(-float(offsets[0]) * 1e9) if n_warm else 0
    origin = perf_counter_ns() + lead_ns + warm_ns  # measured phase starts here
    started_unix = time.time() + (origin - perf_counter_ns()) / 1e9
    intended = (offsets * 1e9).astype(np.int64) + origin
    tasks: set[asyncio.Task[None]] = set()
    total = len(offsets)
    ticker = asyncio.ensure_future(_tick(run, origin, progress, writer,
                                         float(offsets[-1]) if total else 0.0))
    loop = asyncio.get_running_loop()
    create = loop.create_task
    one = run.one
    try:
        i = 0
        while i < total:
            now = perf_counter_ns()
            due = int(intended[i])
            if due > now:
                await asyncio.sleep((due - now) / 1e9)
                continue
            # everything that is due goes out now, without a sleep in between
            while i < total and intended[i] <= now:
                t = create(one(int(intended[i]), payloads[i],
                               paths[i - n_warm] if paths is not None and i >= n_warm else None,
                               i >= n_warm))
                tasks.add(t)
                t.add_done_callback(tasks.discard)
                i += 1
            run.sent = i
            await asyncio.sleep(0)
        if tasks:
            await asyncio.gather(*tasks)
    finally:
        ticker.cancel()
        for t in tasks:
            t.cancel()
    return origin, started_unix


async def _closed_loop(
    run: _Run, concurrency: int, warmup_s: float, duration_s: float | None,
    requests: int | None, pool: list[Any], rng: np.random.Generator, lengths: list[int],
    progress: Progress | None, writer: HdrLogWriter | None,
) -> tuple[int, float]:
    origin = perf_counter_ns() + int(warmup_s * 1e9)
    started_unix = time.time() + warmup_s
    stop = origin + int(duration_s * 1e9) if duration_s is not None else None
    left = [requests if requests is not None else -1]
    picks = _cycle_random(rng, len(pool))

    async def user() -> None:
        while True:
            now = perf_counter_ns()
            if stop is not None and now >= stop:
                return
            measured = now >= origin
            if measured and left[0] == 0:
                return
            if measured and left[0] > 0:
                left[0] -= 1
            payload = pool[next(picks)]
            if measured:
                lengths.append(payload_length(payload))
            await run.one(now, payload, None, measured)

    ticker = asyncio.ensure_future(_tick(run, origin, progress, writer,
                                         duration_s if duration_s is not None else 0.0))
    try:
        await asyncio.gather(*(user() for _ in range(concurrency)))
    finally:
        ticker.cancel()
    return origin, started_unix


def _cycle_random(rng: np.random.Generator, n: int) -> Iterator[int]:
    while True:
        yield from (int(i) for i in rng.integers(0, n, 1024))


async def _tick(run: _Run, origin: int, progress: Progress | None,
                writer: HdrLogWriter | None, total_s: float) -> None:
    next_log = perf_counter_ns() + 1_000_000_000
    while True:
        await asyncio.sleep(0.25)
        now = perf_counter_ns()
        if progress is not None:
            progress(max(0.0, (now - origin) / 1e9), total_s)
        if writer is not None and now >= next_log and now >= origin:
            next_log = now + 1_000_000_000
            # encoding histograms takes milliseconds: keep it off the schedule's loop
            await asyncio.to_thread(writer.write_interval)


def _result(
    run: _Run, tgt: Target, config: dict[str, Any], origin: int, started_unix: float,
    warmup_s: float, arrivals_at: list[float], lengths: list[int], concurrency: int | None,
    slo: dict[str, float], slo_window_s: float, slo_percentile: float, max_lag_ms: float,
) -> LoadResult:
    led = run.ledger
    metrics: dict[str, MetricStats] = {}
    for name in ("e2e", "ttft", "itl", "tpot", "schedule_lag"):
        m = MetricStats.from_ledger(led, name)
        if m is not None:
            metrics[name] = m
    end = run.done_at or perf_counter_ns()
    duration = max((end - origin) / 1e9, 1e-9)
    scheduled = run.completed + run.errors
    reasons: list[str] = []
    lag = metrics.get("schedule_lag")
    if concurrency is None and lag is not None and lag.p99_ms > max_lag_ms:
        reasons.append(
            f"the generator fell behind its own schedule: schedule lag p99 {lag.p99_ms:.1f} ms "
            f"> {max_lag_ms:g} ms, so its overload would be reported as latency; lower the "
            f"rate, or split the load over several processes and merge their HDR logs"
        )
    if run.completed == 0:
        reasons.append("no request completed successfully")
    span = arrivals_at[-1] if len(arrivals_at) > 1 else duration
    timeline = _timeline(led, started_unix, arrivals_at)
    compliance = _slo_compliance(run, led, slo, slo_window_s, slo_percentile, duration)
    lengths_stats = None
    if lengths:
        a = np.asarray(lengths, dtype=np.float64)
        lengths_stats = {"mean": float(a.mean()), "p50": float(np.percentile(a, 50)),
                         "p90": float(np.percentile(a, 90)), "max": float(a.max())}
    return LoadResult(
        target=tgt.url, mode="open" if concurrency is None else "closed", config=config,
        valid=not reasons, invalid_reasons=reasons, warmup_s=warmup_s,
        warmup_requests=run.warm, started_unix_s=started_unix, duration_s=duration,
        scheduled=scheduled, completed=run.completed, errors=run.errors,
        error_rate=run.errors / scheduled if scheduled else 0.0,
        offered_rps=len(arrivals_at) / span if arrivals_at and span > 0 else
        scheduled / duration,
        throughput_rps=run.completed / duration,
        goodput_rps=compliance.goodput_rps if compliance is not None else None,
        output_tokens=run.tokens, output_tokens_per_s=run.tokens / duration,
        concurrency=concurrency, metrics=metrics,
        error_kinds=dict(run.error_kinds.most_common(10)), slo=compliance,
        payload_lengths=lengths_stats, timeline=timeline,
        fingerprint=environment_fingerprint(),
        outputs_finite=(not run.nonfinite) if run.saw_output else None,
        ledger=led.snapshot(),
    )


def _timeline(led: Ledger, started_unix: float, arrivals_at: list[float]) -> list[TimelinePoint]:
    # one point per wall-clock second (the ledger's windows are aligned to unix seconds)
    arrivals: Counter[int] = Counter(math.floor(started_unix + a) for a in arrivals_at)
    by_second: dict[int, Window] = {round(w.start_unix_s): w for w in led.window(1.0, "e2e")}
    seconds = set(arrivals) | set(by_second)
    if not seconds:
        return []
    out = []
    for sec in range(min(seconds), max(seconds) + 1):
        win = by_second.get(sec)
        n = win.count if win is not None else 0
        pts: dict[str, float | None] = {"p50_ms": None, "p95_ms": None, "p99_ms": None,
                                        "p999_ms": None}
        if win is not None and n:
            pts = {"p50_ms": win.percentile(50), "p95_ms": win.percentile(95),
                   "p99_ms": win.percentile(99), "p999_ms": win.percentile(99.9)}
        out.append(TimelinePoint(
            t_s=round(sec - started_unix, 3), arrivals=arrivals.get(sec, 0), completed=n,
            errors=win.errors if win is not None else 0, **pts,
        ))
    return out


def _slo_compliance(run: _Run, led: Ledger, slo: dict[str, float], window_s: float,
                    percentile: float, duration: float) -> SLOCompliance | None:
    if not slo:
        return None
    # a window complies when, for every metric, the share of its requests within the
    # threshold reaches the percentile (errors count as over: the report never flatters)
    per_window: dict[float, bool] = {}
    for metric, threshold in slo.items():
        for w in led.window(window_s, metric):
            n = w.count + (w.errors if metric == "e2e" else 0)
            if n == 0:
                continue
            ok = w.count_within(threshold) / n >= percentile / 100.0
            per_window[w.start_unix_s] = per_window.get(w.start_unix_s, True) and ok
    windows = len(per_window)
    compliant = sum(per_window.values())
    return SLOCompliance(
        thresholds_ms=slo, percentile=percentile, window_s=window_s, windows=windows,
        compliant_windows=compliant,
        window_compliance=compliant / windows if windows else None, good=run.good,
        goodput_rps=run.good / duration,
    )


def run_load(
    target: Target | str | Callable[..., Any], **options: Any
) -> LoadResult:
    """Run a load test against an HTTP URL or a Python callable; return the result.

    Open loop (``arrival=``): each request is sent at the time the arrival process fixed in
    advance and its latency is measured from that time (no coordinated omission). Closed
    loop (``concurrency=``): that many users send back to back. Replay (``replay=``): the
    entries of a recorded trace, at their recorded inter-arrival times × ``time_scale``.
    Samples of the first ``warmup_s`` seconds are discarded.

    Example::

        result = perf.run_load("http://127.0.0.1:8000/v1/chat",
                               arrival=perf.ArrivalProcess(kind="poisson", rate=20),
                               duration_s=30, slo_ms={"e2e": 500})
        print(result.metrics["e2e"].p99_ms, result.goodput_rps, result.valid)

    Args:
        target: ``http://`` URL, :class:`HttpTarget`, or a callable (sync or async; an
            iterator/async-iterator return value is a token stream).
        arrival, concurrency, replay: the mode (exactly one).
        duration_s, requests: length of the measured phase (exactly one, except replay).
        warmup_s: warm-up length at the base rate; its samples are discarded.
        seed: seeds the arrival process and the payload choice.
        payloads: request bodies to pick from (see :func:`load_dataset`).
        slo_ms: per-request thresholds (``e2e``, ``ttft``, ``tpot``) for goodput and windowed
            compliance (per ``slo_window_s`` window, ``slo_percentile`` within thresholds).
        max_lag_ms: schedule-lag p99 above which the run is marked invalid.
        timeout_s: per-request limit; a request past it is an error, charged the full time.
        hdr_log: also write an HDR interval log (one interval per second) there.

    Raises:
        LoadConfigError: conflicting or invalid options.
        TargetUnreachableError: the URL does not accept connections.
    """
    return asyncio.run(run_load_async(target, **options))


async def sweep_async(
    target: Target | str | Callable[..., Any], *, mode: str, levels: Sequence[float],
    progress_level: Callable[[int, float], None] | None = None, **options: Any,
) -> SweepResult:
    """Run one load test per level; see :func:`sweep`."""
    if mode not in ("concurrency", "rate"):
        raise LoadConfigError(f"sweep mode must be concurrency or rate, got {mode!r}")
    if not levels or any(not (isinstance(v, (int, float)) and v > 0) for v in levels):
        raise LoadConfigError("sweep levels must be positive numbers")
    base = options.pop("arrival", None)
    points = []
    for i, level in enumerate(levels):
        if progress_level is not None:
            progress_level(i, level)
        if mode == "concurrency":
            if level != int(level):
                raise LoadConfigError(f"concurrency levels are integers, got {level}")
            points.append(await run_load_async(target, concurrency=int(level), **options))
        else:
            arr = (base.model_copy(update={"rate": float(level)}) if base is not None
                   else ArrivalProcess(kind="poisson", rate=float(level)))
            points.append(await run_load_async(target, arrival=arr, **options))
    return SweepResult(mode=mode, levels=[float(v) for v in levels],  # type: ignore[arg-type]
                       points=points, fingerprint=environment_fingerprint())


def sweep(target: Target | str | Callable[..., Any], *, mode: str, levels: Sequence[float],
          **options: Any) -> SweepResult:
    """Concurrency sweep (closed loop per level) or rate sweep (open loop per level).

    Example::

        s = perf.sweep("http://127.0.0.1:8000/", mode="rate", levels=[10, 20, 40],
                       duration_s=20)
        [(p.throughput_rps, p.metrics["e2e"].p99_ms) for p in s.points]

    Raises:
        LoadConfigError: bad mode or levels, or any option :func:`run_load` rejects.
    """
    return asyncio.run(sweep_async(target, mode=mode, levels=levels, **options))
