"""Hot-path cost of stage timing vs the peers, in one run.

    .venv/bin/python benchmarks/bench_overhead.py [--n 200000] [--reps 7]

Prints ns per operation (median of interleaved repetitions) for: the floor (two
``perf_counter_ns()`` calls), ``@perf.stage`` on a no-op function (sync, and async awaited
inside one event loop) and ``with`` / ``async with perf.stage()`` inside a request,
``ledger.record``, raw ``hdrh`` ``record_value``, an OpenTelemetry SDK span (SDK
TracerProvider, no exporter) and ``prometheus_client.Histogram`` (``observe`` and
``with h.time()``); then the ratios the core issue sets as targets, and a check that the
ledger's percentiles are identical to hdrh's for the same values.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import aiperf_sdk as perf

Bench = Callable[[int], float]  # runs n operations, returns elapsed ns


def bench_floor(n: int) -> float:
    pc = time.perf_counter_ns
    t0 = pc()
    for _ in range(n):
        pc()
        pc()
    return pc() - t0


def bench_loop(n: int) -> float:
    pc = time.perf_counter_ns
    t0 = pc()
    for _ in range(n):
        pass
    return pc() - t0


def make_decorator_bench(ledger: perf.Ledger) -> Bench:
    @perf.stage("noop", ledger=ledger)
    def noop() -> None:
        return None

    def run(n: int) -> float:
        pc = time.perf_counter_ns
        with perf.request(ledger=ledger):
            t0 = pc()
            for _ in range(n):
                noop()
            return pc() - t0

    return run


def make_plain_call_bench() -> Bench:
    def noop() -> None:
        return None

    def run(n: int) -> float:
        pc = time.perf_counter_ns
        t0 = pc()
        for _ in range(n):
            noop()
        return pc() - t0

    return run


def make_async_benches(ledger: perf.Ledger) -> tuple[Bench, Bench, Bench]:
    """(awaiting a plain no-op coroutine function, awaiting it under @perf.stage,
    ``async with perf.stage()``), each loop inside one coroutine on one event loop, inside a
    request."""
    import asyncio

    async def plain() -> None:
        return None

    decorated = perf.stage("async_noop", ledger=ledger)(plain)

    def bench(fn: Callable[[], Any]) -> Bench:
        async def loop(n: int) -> float:
            pc = time.perf_counter_ns
            t0 = pc()
            for _ in range(n):
                await fn()
            return pc() - t0

        def run(n: int) -> float:
            with perf.request(ledger=ledger):
                return asyncio.run(loop(n))

        return run

    async def async_with_loop(n: int) -> float:
        pc = time.perf_counter_ns
        stage = perf.stage
        t0 = pc()
        for _ in range(n):
            async with stage("async_block"):
                pass
        return pc() - t0

    def async_with(n: int) -> float:
        with perf.request(ledger=ledger):
            return asyncio.run(async_with_loop(n))

    return bench(plain), bench(decorated), async_with


def make_with_bench(ledger: perf.Ledger) -> Bench:
    def run(n: int) -> float:
        pc = time.perf_counter_ns
        stage = perf.stage
        with perf.request(ledger=ledger):
            t0 = pc()
            for _ in range(n):
                with stage("block"):
                    pass
            return pc() - t0

    return run


class _BareTimer:
    """The least a Python context manager can do: two clock reads, nothing recorded."""

    __slots__ = ("name", "t0")

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> _BareTimer:
        self.t0 = time.perf_counter_ns()
        return self

    def __exit__(self, *exc: object) -> None:
        self.t0 = time.perf_counter_ns() - self.t0


def bench_bare_cm(n: int) -> float:
    pc = time.perf_counter_ns
    t0 = pc()
    for _ in range(n):
        with _BareTimer("block"):
            pass
    return pc() - t0


def make_record_bench(ledger: perf.Ledger, values: list[int]) -> Bench:
    def run(n: int) -> float:
        rec = ledger.record
        vals = values[:n]
        pc = time.perf_counter_ns
        t0 = pc()
        for v in vals:
            rec("rec", v)
        ledger.count("rec")  # include the fold: the cost must be paid somewhere
        return pc() - t0

    return run


def make_hdrh_bench(values: list[int]) -> tuple[Bench, object]:  # (bench, histogram)
    from hdrh.histogram import HdrHistogram

    h = HdrHistogram(1, 3_600_000 * 1_000_000, 3)

    def run(n: int) -> float:
        rec = h.record_value
        vals = values[:n]
        pc = time.perf_counter_ns
        t0 = pc()
        for v in vals:
            rec(v)
        return pc() - t0

    return run, h


def make_otel_bench() -> Bench | None:
    try:
        from opentelemetry.sdk.trace import TracerProvider
    except ImportError:
        return None
    tracer = TracerProvider().get_tracer("bench")

    def run(n: int) -> float:
        pc = time.perf_counter_ns
        t0 = pc()
        for _ in range(n):
            with tracer.start_as_current_span("block"):
                pass
        return pc() - t0

    return run


def make_prom_benches() -> tuple[Bench, Bench] | None:
    try:
        from prometheus_client import CollectorRegistry, Histogram
    except ImportError:
        return None
    h = Histogram("bench_seconds", "bench", registry=CollectorRegistry())

    def observe(n: int) -> float:
        pc = time.perf_counter_ns
        obs = h.observe
        t0 = pc()
        for _ in range(n):
            a = pc()
            obs((pc() - a) / 1e9)
        return pc() - t0

    def timer(n: int) -> float:
        pc = time.perf_counter_ns
        t0 = pc()
        for _ in range(n):
            with h.time():
                pass
        return pc() - t0

    return observe, timer


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000, help="operations per repetition")
    ap.add_argument("--reps", type=int, default=7, help="interleaved repetitions (>= 5)")
    args = ap.parse_args(argv)
    n, reps = args.n, max(5, args.reps)
    slow_n = max(1000, n // 20)  # OTel spans are ~100x slower; fewer of them

    rng = np.random.default_rng(0)
    values = (rng.lognormal(15, 1.5, size=n).astype(np.int64) + 1).tolist()
    ledger = perf.Ledger()
    hdr_bench, _ = make_hdrh_bench(values)
    async_plain, async_deco, async_with = make_async_benches(ledger)
    benches: dict[str, tuple[Bench, int]] = {
        "loop (empty for-loop)": (bench_loop, n),
        "floor (2x perf_counter_ns)": (bench_floor, n),
        "plain no-op call": (make_plain_call_bench(), n),
        "@perf.stage no-op call": (make_decorator_bench(ledger), n),
        "bare __slots__ CM (no record)": (bench_bare_cm, n),
        "with perf.stage()": (make_with_bench(ledger), n),
        "await plain no-op coroutine": (async_plain, n),
        "await @perf.stage coroutine": (async_deco, n),
        "async with perf.stage()": (async_with, n),
        "ledger.record": (make_record_bench(perf.Ledger(), values), n),
        "hdrh record_value": (hdr_bench, n),
    }
    otel = make_otel_bench()
    if otel is not None:
        benches["OTel SDK span"] = (otel, slow_n)
    prom = make_prom_benches()
    if prom is not None:
        benches["prometheus observe"] = (prom[0], n)
        benches["prometheus with h.time()"] = (prom[1], n)

    samples: dict[str, list[float]] = {k: [] for k in benches}
    for _ in range(reps):  # interleaved: each repetition runs every benchmark once
        for name, (fn, count) in benches.items():
            samples[name].append(fn(count) / count)
    med = {k: statistics.median(v) for k, v in samples.items()}

    loop = med["loop (empty for-loop)"]
    print(f"python {sys.version.split()[0]}, n={n}, reps={reps} (median ns/op; loop "
          f"overhead {loop:.0f} ns subtracted)")
    net = {k: max(v - loop, 1e-9) for k, v in med.items() if k != "loop (empty for-loop)"}
    for k, v in net.items():
        print(f"  {k:<28} {v:9.0f} ns")

    floor = net["floor (2x perf_counter_ns)"]
    deco = net["@perf.stage no-op call"] - net["plain no-op call"]
    with_ = net["with perf.stage()"]
    print("\nratios (targets from the core issue)")
    print(f"  decorator overhead / floor       {deco / floor:6.2f}x   (target <= 3)")
    print(f"  with-block / floor               {with_ / floor:6.2f}x   (target <= 5)")
    async_over = net["await @perf.stage coroutine"] - net["await plain no-op coroutine"]
    print(f"  async decorator overhead / floor {async_over / floor:6.2f}x   (no target; "
          f"{async_over:.0f} ns)")
    print(f"  async with-block / floor         {net['async with perf.stage()'] / floor:6.2f}x"
          "   (no target)")
    bare = net["bare __slots__ CM (no record)"]
    print(f"  bare CM, nothing recorded / floor {bare / floor:5.2f}x   (the protocol's own cost)")
    if otel is not None:
        print(f"  OTel SDK span / with-block       {net['OTel SDK span'] / with_:6.1f}x   "
              "(target >= 30)")
    if prom is not None:
        print(f"  with-block / prometheus h.time() {with_ / net['prometheus with h.time()']:6.2f}x"
              "   (target <= 0.5)")
    print(f"  hdrh record_value / ledger.record "
          f"{net['hdrh record_value'] / net['ledger.record']:5.1f}x   (target >= 10)")

    from hdrh.histogram import HdrHistogram

    check, ref = perf.Ledger(), HdrHistogram(1, 3_600_000 * 1_000_000, 3)
    for v in values:
        check.record("v", v)
        ref.record_value(v)
    top = max(values)  # the ledger never reports above the exact maximum; hdrh may
    same = all(
        check.percentile("v", q) == min(ref.get_value_at_percentile(q), top) / 1e6
        for q in (50.0, 90.0, 99.0, 99.9)
    )
    print(f"  percentiles identical to hdrh: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
