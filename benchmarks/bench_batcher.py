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

Ray Serve's ``@serve.batch`` is the issue's named peer; it is not run here (see
docs/batching.md).

Run:  .venv/bin/python benchmarks/bench_batcher.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import statistics
import time
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


CONFIGS: dict[str, dict[str, Any]] = {
    "no batching": dict(max_batch_size=1, max_wait_ms=0, length_fn=int),
    "FIFO (size+wait)": dict(max_batch_size=32, max_wait_ms=5, length_fn=int),
    "+ token cap": dict(max_batch_size=32, max_wait_ms=5, length_fn=int,
                        max_batch_tokens=8192),
    "+ length buckets": dict(max_batch_size=32, max_wait_ms=5, length_fn=int,
                             max_batch_tokens=8192, buckets="pow2"),
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


async def drive(submit: Any, clients: int, per_client: int) -> float:
    async def client() -> None:
        for i in range(per_client):
            await submit(i)

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return (time.perf_counter() - t0) / (clients * per_client) * 1e6


async def overhead(reps: int, clients: int = 256, per_client: int = 200) -> None:
    bare, ours = [], []
    for _ in range(reps):
        bb = BareBatcher(noop, 64, 1.0)
        task = asyncio.ensure_future(bb.run())
        bare.append(await drive(bb.submit, clients, per_client))
        task.cancel()
        b = perf.DynamicBatcher(noop, max_batch_size=64, max_wait_ms=1.0,
                                max_queue_size=100_000, ledger=perf.Ledger())
        async with b:
            ours.append(await drive(b.submit, clients, per_client))
    mb, mo = statistics.median(bare), statistics.median(ours)
    print(f"\nper-request overhead, no-op fn, {clients} clients x {per_client} requests, "
          f"median of {reps} interleaved runs")
    print(f"{'batcher':<34} {'µs/request':>10} {'req/s':>10}")
    print(f"{'bare asyncio queue+futures':<34} {mb:>10.2f} {1e6 / mb:>10.0f}")
    print(f"{'perf.DynamicBatcher':<34} {mo:>10.2f} {1e6 / mo:>10.0f}")
    print(f"ratio ours/bare: {mo / mb:.2f}x")


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="shorter run (smoke test)")
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


if __name__ == "__main__":
    asyncio.run(main())
