"""Time a toy LLM-like pipeline under open-loop load and print the latency budget report.

    .venv/bin/python examples/toy_pipeline.py [--rate 40] [--seconds 5] [--budget FILE]

Each request goes tokenize -> prefill -> decode (a token stream) -> serialize, with simulated
work (sleeps scaled by prompt length, plus a rare slow prefill). Arrivals are Poisson at
``--rate`` requests/s; every request runs in its own task under ``perf.request()``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio

import aiperf_sdk as perf

HERE = Path(__file__).resolve().parent


@perf.stage("tokenize")
def tokenize(text: str) -> list[int]:
    return [hash(w) % 50_000 for w in text.split()]


@perf.stage("prefill", model="toy")
async def prefill(tokens: list[int], rng: random.Random) -> int:
    # prefill cost grows with prompt length; 1 request in 50 hits a slow path
    delay = 0.004 + 0.00005 * len(tokens) + (0.05 if rng.random() < 0.02 else 0.0)
    await anyio.sleep(delay)
    return len(tokens)


async def decode(n_tokens: int) -> AsyncIterator[str]:
    for i in range(n_tokens):
        await anyio.sleep(0.004)
        yield f"tok{i}"


@perf.stage("serialize")
def serialize(tokens: list[str]) -> str:
    return json.dumps({"text": " ".join(tokens)})


async def handle(prompt: str, rng: random.Random) -> str:
    async with perf.request(route="/v1/generate"):
        ids = tokenize(prompt)
        await prefill(ids, rng)
        out = [t async for t in perf.stream("decode", decode(rng.randint(4, 12)), model="toy")]
        return serialize(out)


async def run_load(rate: float, seconds: float, seed: int) -> int:
    rng = random.Random(seed)
    sent = 0
    async with anyio.create_task_group() as tg:
        deadline = anyio.current_time() + seconds
        next_at = anyio.current_time()
        while next_at < deadline:
            await anyio.sleep_until(next_at)
            words = " ".join("w" for _ in range(rng.randint(16, 512)))
            tg.start_soon(handle, words, random.Random(rng.random()))
            sent += 1
            next_at += rng.expovariate(rate)
    return sent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rate", type=float, default=40.0, help="requests per second (Poisson)")
    ap.add_argument("--seconds", type=float, default=5.0, help="load duration")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--budget", type=Path, default=HERE / "budget.yaml")
    ap.add_argument("--strict", action="store_true", help="exit 1 when over budget")
    args = ap.parse_args(argv)
    if args.rate <= 0 or args.seconds <= 0:
        ap.error("--rate and --seconds must be > 0")
    try:
        budget = perf.Budget.from_yaml(args.budget)
    except (OSError, ValueError) as exc:  # missing file, bad YAML, pydantic ValidationError
        print(f"error: budget {args.budget}: {exc}", file=sys.stderr)
        return 2

    ledger = perf.Ledger()
    perf.set_default_ledger(ledger)
    print(f"running {args.seconds:g} s of Poisson load at {args.rate:g} req/s ...", flush=True)
    sent = anyio.run(run_load, args.rate, args.seconds, args.seed)
    print(f"{sent} requests\n")
    print(ledger.summary())
    print()
    report = ledger.check(budget)
    print(report)
    print("\nslowest requests (by correlation ID):")
    for t in ledger.slowest("e2e", k=5):
        parts = ", ".join(f"{k} {v:.1f}" for k, v in t.stages.items() if k not in ("itl",))
        print(f"  {t.id}  {t.total_ms:7.1f} ms  [{parts}]")
    return 1 if (args.strict and not report.ok) else 0


if __name__ == "__main__":
    sys.exit(main())
