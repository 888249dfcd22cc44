"""Dynamic batching on a simulated model, and the batcher's own per-request overhead.

Part 1 — goodput. A simulated model whose batch costs ``A + B * len(batch) * longest`` (padding
costs compute; the "GPU" is an ``asyncio.sleep``), lengths lognormal (median ~100 tokens,
tail clipped at 2048), Poisson arrivals swept over rates. Configurations, same load each:
no batching; FIFO dynamic batching (size + wait); + token cap; + length buckets (pow2);
+ deadline-aware admission. Reported: goodput (req/s finishing within the SLO), p50/p99 of
end-to-end latency, mean batch size, padding ratio.

Part 2 — overhead. A no-op batch function driven by 256 closed-loop clients: µs per request
of ``perf.DynamicBatcher`` next to a bare ~40-line asyncio queue + futures batcher written
below, in the same run, and their ratio (median of interleaved repetitions).

Part 3 — slow model. A model whose batch costs ``SLOW_A + SLOW_B * len(batch)`` (fixed cost
dominates), driven at ``SLOW_RATE`` req/s, far above its single-item rate: a batcher that forms
batches only when the model can take one lets them grow; an eager one (Ray Serve's) cuts
small batches while the model is busy, falls behind and queues for seconds.

Ray Serve's ``@serve.batch`` (the peer) runs in its own venv (``benchmarks/ray_peer.sh``
creates build/venv-ray). When that venv exists, this script starts
``benchmarks/bench_batcher_ray.py`` in it: a real ``serve.run`` deployment on 127.0.0.1 whose
replica runs the no-op and slow-model loads against its own ``@serve.batch`` methods and, in
the same replica process, against ``perf.DynamicBatcher`` and the bare batcher, interleaved;
its numbers are merged into the output. Without the venv the Ray part prints "skipped".

Run:  .venv/bin/python benchmarks/bench_batcher.py [--quick] [--no-ray]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiperf_sdk as perf

A_S = 0.003  # fixed cost per batch
B_S = 0.5e-6  # cost per padded token
SLO_MS = 100.0
MAX_LEN = 2048


def lengths(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [max(1, min(MAX_LEN, int(rng.lognormvariate(math.log(100), 1.0)))) for _ in range(n)]


async def model(batch: list[int]) -> list[int]:
    await asyncio.sleep(A_S + B_S * len(batch) * max(batch))
    return batch


FINE_BUCKETS = sorted({round(16 * 1.25**i) for i in range(24) if 16 * 1.25**i <= 2048} | {2048})

CONFIGS: dict[str, dict[str, Any]] = {
    "no batching": dict(max_batch_size=1, max_wait_ms=0, length_fn=int),
    "FIFO (size+wait)": dict(max_batch_size=32, max_wait_ms=5, length_fn=int),
    "+ token cap": dict(max_batch_size=32, max_wait_ms=5, length_fn=int,
                        max_batch_tokens=8192),
    "+ length buckets": dict(max_batch_size=32, max_wait_ms=5, length_fn=int,
                             max_batch_tokens=8192, buckets="pow2"),
    # geometric buckets 1.25x apart: padding inside a bucket is bounded by 1.25
    "+ fine buckets (1.25x)": dict(max_batch_size=32, max_wait_ms=5, length_fn=int,
                                   max_batch_tokens=8192, buckets=FINE_BUCKETS),
    "+ deadline admission": dict(max_batch_size=32, max_wait_ms=5, length_fn=int,
                                 max_batch_tokens=8192, buckets="pow2",
                                 deadline_admission=True, timeout_ms=SLO_MS),
}


async def run_load(
    cfg: dict[str, Any], rate: float, duration_s: float, seed: int
) -> dict[str, Any]:
    rng = random.Random(seed)
    n = int(rate * duration_s)
    lens = lengths(n, seed)
    lat_ms: list[float] = []
    errors = 0
    b = perf.DynamicBatcher(model, max_queue_size=100_000, ledger=perf.Ledger(), **cfg)

    async def one(x: int) -> None:
        nonlocal errors
        t0 = time.perf_counter()
        try:
            await b.submit(x)
        except perf.BatcherError:
            errors += 1
            return
        lat_ms.append((time.perf_counter() - t0) * 1e3)

    t_start = time.perf_counter()
    async with b:
        tasks = []
        t_next = t_start
        for x in lens:
            t_next += rng.expovariate(rate)
            delay = t_next - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(one(x)))
        await asyncio.gather(*tasks)
    wall = time.perf_counter() - t_start
    lat_ms.sort()
    s = b.stats
    good = sum(1 for v in lat_ms if v <= SLO_MS)

    def pct(p: float) -> float:
        return lat_ms[min(len(lat_ms) - 1, int(p / 100 * len(lat_ms)))] if lat_ms else math.nan

    return dict(goodput=good / wall, p50=pct(50), p99=pct(99), batch=s.mean_batch_size,
                padding=s.padding_ratio, shed=errors, n=n)


class BareBatcher:
    """The ~40-line baseline: asyncio.Queue of (item, future), size + wait only."""

    def __init__(self, fn: Any, max_batch_size: int, max_wait_ms: float) -> None:
        self.fn, self.max, self.wait = fn, max_batch_size, max_wait_ms / 1e3
        self.q: asyncio.Queue[tuple[Any, asyncio.Future[Any]]] = asyncio.Queue()

    async def submit(self, x: Any) -> Any:
        fut = asyncio.get_running_loop().create_future()
        self.q.put_nowait((x, fut))
        return await fut

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self.q.get()]
            deadline = loop.time() + self.wait
            while len(batch) < self.max:
                try:
                    batch.append(self.q.get_nowait())
                    continue
                except asyncio.QueueEmpty:
                    pass
                t = deadline - loop.time()
                if t <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self.q.get(), t))
                except TimeoutError:
                    break
            try:
                results = await self.fn([x for x, _ in batch])
            except Exception as exc:
                for _, f in batch:
                    if not f.done():
                        f.set_exception(exc)
                continue
            for (_, f), r in zip(batch, results, strict=True):
                if not f.done():
                    f.set_result(r)


async def noop(items: list[int]) -> list[int]:
    return items


async def drive(
    submit: Callable[[int], Awaitable[Any]], clients: int, per_client: int
) -> tuple[float, float]:
    """Closed loop: ``clients`` tasks, each awaiting ``per_client`` no-op submits.

    Returns (wall µs, event-loop thread CPU µs) per request. The CPU time is what the
    batcher costs; on a shared machine it is far less noisy than wall time."""
    async def client() -> None:
        for i in range(per_client):
            await submit(i)

    t0, c0 = time.perf_counter(), time.thread_time()
    await asyncio.gather(*(client() for _ in range(clients)))
    n = clients * per_client
    return (time.perf_counter() - t0) / n * 1e6, (time.thread_time() - c0) / n * 1e6


async def bare_noop(clients: int, per_client: int) -> tuple[float, float]:
    bb = BareBatcher(noop, 64, 1.0)
    task = asyncio.ensure_future(bb.run())
    try:
        return await drive(bb.submit, clients, per_client)
    finally:
        task.cancel()


async def ours_noop(clients: int, per_client: int) -> tuple[float, float]:
    b = perf.DynamicBatcher(noop, max_batch_size=64, max_wait_ms=1.0,
                            max_queue_size=100_000, ledger=perf.Ledger())
    async with b:
        return await drive(b.submit, clients, per_client)


def overhead_table(runs: dict[str, list[tuple[float, float]]], labels: dict[str, str]) -> None:
    """Rows of median wall µs, req/s and CPU µs per request (runs: name -> [(wall, cpu)])."""
    print(f"{'batcher':<40} {'µs/req wall':>11} {'req/s':>9} {'µs/req CPU':>11}")
    for name, label in labels.items():
        wall = statistics.median(w for w, _ in runs[name])
        cpu = statistics.median(c for _, c in runs[name])
        print(f"{label:<40} {wall:>11.2f} {1e6 / wall:>9.0f} {cpu:>11.2f}")


def paired_ratio(num: list[tuple[float, float]], den: list[tuple[float, float]]) -> str:
    """Median of per-run ratios num/den (runs are interleaved, so each pair shares the
    machine's load at that moment), for wall and CPU time."""
    wall = statistics.median(n[0] / d[0] for n, d in zip(num, den, strict=True))
    cpu = statistics.median(n[1] / d[1] for n, d in zip(num, den, strict=True))
    return f"{wall:.2f}x wall, {cpu:.2f}x CPU"


async def overhead(reps: int, clients: int = 256, per_client: int = 200) -> None:
    runs: dict[str, list[tuple[float, float]]] = {"bare": [], "ours": []}
    await bare_noop(clients, 10)  # warm up
    await ours_noop(clients, 10)
    for _ in range(reps):
        runs["bare"].append(await bare_noop(clients, per_client))
        runs["ours"].append(await ours_noop(clients, per_client))
    print(f"\nper-request overhead, no-op fn, {clients} clients x {per_client} requests, "
          f"median of {reps} interleaved runs")
    overhead_table(runs, {"bare": "bare asyncio queue+futures", "ours": "perf.DynamicBatcher"})
    print(f"per-request time ours/bare: {paired_ratio(runs['ours'], runs['bare'])} "
          "(median of per-run ratios; target <= 1.5x)")


# -- slow model: gated vs eager batch formation ---------------------------------------------

SLOW_A_S = 0.020  # fixed cost per batch: single-item rate ~49/s
SLOW_B_S = 0.0002  # per item
SLOW_RATE = 1000.0
SLOW_BATCH, SLOW_WAIT_MS = 32, 5.0


def make_slow_model(sizes: list[int]) -> Callable[[list[int]], Awaitable[list[int]]]:
    async def slow_model(batch: list[int]) -> list[int]:
        sizes.append(len(batch))
        await asyncio.sleep(SLOW_A_S + SLOW_B_S * len(batch))
        return batch
    return slow_model


async def open_loop(
    submit: Callable[[int], Awaitable[Any]], rate: float, n: int, seed: int
) -> list[float]:
    """Poisson arrivals of ``n`` requests at ``rate``/s; sorted end-to-end latencies in ms."""
    rng = random.Random(seed)
    lat_ms: list[float] = []

    async def one(x: int) -> None:
        t0 = time.perf_counter()
        await submit(x)
        lat_ms.append((time.perf_counter() - t0) * 1e3)

    tasks = []
    t_next = time.perf_counter()
    for i in range(n):
        t_next += rng.expovariate(rate)
        delay = t_next - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one(i)))
    await asyncio.gather(*tasks)
    return sorted(lat_ms)


def summary(lat_ms: list[float], sizes: list[int]) -> dict[str, float]:
    def pct(p: float) -> float:
        return lat_ms[min(len(lat_ms) - 1, int(p / 100 * len(lat_ms)))]
    return dict(p50=pct(50), p99=pct(99), batch=sum(sizes) / len(sizes), n=len(lat_ms))


async def ours_slow(rate: float, n: int, seed: int) -> dict[str, float]:
    sizes: list[int] = []
    b = perf.DynamicBatcher(make_slow_model(sizes), max_batch_size=SLOW_BATCH,
                            max_wait_ms=SLOW_WAIT_MS, max_queue_size=100_000,
                            ledger=perf.Ledger())
    async with b:
        lat = await open_loop(b.submit, rate, n, seed)
    return summary(lat, sizes)


def slow_header(n: int) -> str:
    return (f"\nslow model: {SLOW_A_S * 1e3:.0f} ms + {SLOW_B_S * 1e3:.1f} ms x len(batch) "
            f"(single-item rate {1 / (SLOW_A_S + SLOW_B_S):.0f}/s), Poisson {SLOW_RATE:.0f} "
            f"req/s, {n} requests, max_batch_size={SLOW_BATCH}, wait {SLOW_WAIT_MS:.0f} ms\n"
            f"{'batcher':<40} {'batch':>6} {'p50 ms':>9} {'p99 ms':>9}")


def slow_row(name: str, r: dict[str, float]) -> str:
    return f"{name:<40} {r['batch']:>6.1f} {r['p50']:>9.1f} {r['p99']:>9.1f}"


# -- Ray Serve peer (separate venv, separate process) ---------------------------------------

RAY_PYTHON = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "build",
                          "venv-ray", "bin", "python")


def ray_peer(quick: bool, ray_python: str) -> None:
    print("\nRay Serve @serve.batch peer (real serve.run deployment on 127.0.0.1; ours and the "
          "bare batcher run in the same replica process, interleaved)")
    if not os.path.exists(ray_python):
        print("skipped: ray not installed in this interpreter; run with build/venv-ray "
              "(create it with benchmarks/ray_peer.sh)")
        return
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_batcher_ray.py")
    cmd = [ray_python, script] + (["--quick"] if quick else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        print(f"failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
        return
    res = json.loads(lines[-1][len("RESULT "):])
    print_ray(res)


def print_ray(res: dict[str, Any]) -> None:
    ov = res["overhead"]
    c, k, reps = ov["clients"], ov["per_client"], len(ov["ours"])
    print(f"ray {res['ray']}; per-request overhead, no-op fn, {c} clients x {k} requests inside "
          f"the replica ({ov['loop']} event loop), median of {reps} interleaved runs")
    runs = {name: [tuple(x) for x in ov[name]] for name in ("ray", "bare", "ours")}
    overhead_table(runs, {"ray": "ray.serve.batch (in replica)",
                          "bare": "bare asyncio queue+futures",
                          "ours": "perf.DynamicBatcher"})
    print(f"throughput ours/Ray: {paired_ratio(runs['ray'], runs['ours'])} (target >= 2.5x)")
    print(f"per-request time ours/bare: {paired_ratio(runs['ours'], runs['bare'])} "
          "(target <= 1.5x)")
    h = res["handle"]
    print(f"{'ray.serve.batch via DeploymentHandle':<40} {h['us']:>11.2f} {1e6 / h['us']:>9.0f}"
          f"   (driver -> replica, {h['n']} requests, {h['concurrency']} in flight)")
    print(slow_header(res["slow"]["ours"]["n"]))
    print(slow_row("ray.serve.batch (eager)", res["slow"]["ray"]))
    print(slow_row("perf.DynamicBatcher (gated)", res["slow"]["ours"]))


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="shorter run (smoke test)")
    ap.add_argument("--no-ray", action="store_true", help="skip the Ray Serve peer")
    ap.add_argument("--ray-python", default=RAY_PYTHON,
                    help="interpreter with ray[serve] (default: build/venv-ray/bin/python)")
    args = ap.parse_args()
    duration = 1.0 if args.quick else 3.0
    rates = [800.0, 2000.0] if args.quick else [800.0, 2000.0, 3500.0]
    print(f"simulated model: {A_S * 1e3:.1f} ms + {B_S * 1e6:.2f} µs x len(batch) x longest; "
          f"lengths lognormal median 100 (max {MAX_LEN}); Poisson arrivals; SLO {SLO_MS:.0f} ms "
          f"end to end; {duration:.0f} s per point")
    print(f"{'rate/s':>7} {'configuration':<22} {'goodput/s':>10} {'p50 ms':>8} {'p99 ms':>9} "
          f"{'batch':>6} {'padding':>8} {'shed':>6}")
    for rate in rates:
        fifo_good = 0.0
        for name, cfg in CONFIGS.items():
            r = await run_load(cfg, rate, duration, seed=int(rate))
            if name.startswith("FIFO"):
                fifo_good = r["goodput"]
            vs = f"  ({r['goodput'] / fifo_good:.2f}x FIFO)" if fifo_good and name[0] == "+" \
                else ""
            print(f"{rate:>7.0f} {name:<22} {r['goodput']:>10.0f} {r['p50']:>8.1f} "
                  f"{r['p99']:>9.1f} {r['batch']:>6.1f} {r['padding']:>8.2f} {r['shed']:>6}{vs}")
    await overhead(reps=3 if args.quick else 7)
    n_slow = int(SLOW_RATE * (1.0 if args.quick else 2.0))
    print(slow_header(n_slow))
    print(slow_row("perf.DynamicBatcher (gated)", await ours_slow(SLOW_RATE, n_slow, seed=7)))
    if not args.no_ray:
        ray_peer(args.quick, args.ray_python)


if __name__ == "__main__":
    asyncio.run(main())
