"""The batcher's invariant under random and hostile load, on asyncio and trio.

Every submitted request ends exactly once — a result or one typed error (or the caller's own
cancellation) — none lost, none duplicated, results never mixed up between callers, and the
queue stays bounded. The batch function is a fake model (pure Python, optionally sleeping);
the batcher, event loops and cancellation machinery are real.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aiperf_sdk as perf

BACKENDS = ["asyncio", "trio"]


class Flaky(Exception):
    """Raised by the fake model for a whole batch."""


class ItemFailed(Exception):
    """Returned by the fake model in place of one item's result."""


def _check_batch(batch: list[tuple[int, int]], cfg: dict[str, Any]) -> None:
    assert 1 <= len(batch) <= cfg["max_batch_size"]
    cap = cfg.get("max_batch_tokens")
    if cap is not None and len(batch) > 1:
        assert len(batch) * max(n for _, n in batch) <= cap
    buckets = cfg.get("buckets")
    if buckets == "pow2":
        assert len({(max(n, 1) - 1).bit_length() for _, n in batch}) == 1
    elif buckets is not None:
        assert len({sum(n > b for b in buckets) for _, n in batch}) == 1


async def _scenario(ops: list[dict[str, Any]], cfg: dict[str, Any]) -> None:
    sent: Counter[int] = Counter()
    fail_batch_ids = {op["id"] for op in ops if op["fail"] == "batch"}

    async def model(batch: list[tuple[int, int]]) -> list[Any]:
        _check_batch(batch, cfg)
        sent.update(i for i, _ in batch)
        await anyio.sleep(cfg["model_sleep_s"])
        if any(i in fail_batch_ids for i, _ in batch):
            raise Flaky(f"batch with {[i for i, _ in batch]}")
        return [ItemFailed(i) if ops[i]["fail"] == "item" else ("r", i) for i, _ in batch]

    b = perf.DynamicBatcher(model, length_fn=lambda x: x[1], **{
        k: v for k, v in cfg.items() if k != "model_sleep_s"})
    outcomes: dict[int, list[str]] = {op["id"]: [] for op in ops}

    async def client(op: dict[str, Any]) -> None:
        i = op["id"]
        await anyio.sleep(op["delay_s"])
        with anyio.move_on_after(op["cancel_after_s"] or float("inf")) as scope:
            try:
                r = await b.submit((i, op["length"]), timeout_ms=op["timeout_ms"],
                                   priority=op["priority"])
            except perf.QueueFullError:
                outcomes[i].append("rejected")
            except perf.DeadlineExceededError:
                outcomes[i].append("timed_out")
            except (Flaky, perf.BatchResultMismatchError):
                outcomes[i].append("failed")
            except ItemFailed as exc:
                assert exc.args == (i,), "another caller's per-item error"
                outcomes[i].append("failed")
            else:
                assert r == ("r", i), f"request {i} got {r}"
                outcomes[i].append("completed")
        if scope.cancelled_caught:
            outcomes[i].append("cancelled")

    async with b, anyio.create_task_group() as tg:
        for op in ops:
            tg.start_soon(client, op)

    assert all(len(v) == 1 for v in outcomes.values()), outcomes
    assert all(n == 1 for n in sent.values()), "an item was sent to fn twice"
    seen = Counter(v[0] for v in outcomes.values())
    s = b.stats
    assert s.submitted == len(ops)
    assert (s.completed, s.failed, s.rejected, s.timed_out, s.cancelled, s.shed) == (
        seen["completed"], seen["failed"], seen["rejected"], seen["timed_out"],
        seen["cancelled"], 0)
    assert s.queued == 0 and s.running_batches == 0
    for i, (outcome,) in outcomes.items():
        if outcome == "completed":
            assert sent[i] == 1
        if outcome == "rejected":
            assert sent[i] == 0


op_strategy = st.fixed_dictionaries({
    "length": st.integers(0, 300),
    "priority": st.sampled_from([0, 0, 0, 1, 5]),
    "timeout_ms": st.one_of(st.none(), st.floats(0.5, 20)),
    "cancel_after_s": st.one_of(st.none(), st.none(), st.floats(0.0001, 0.01)),
    "delay_s": st.sampled_from([0.0, 0.0, 0.0005, 0.002]),
    "fail": st.sampled_from([None, None, None, None, "item", "batch"]),
})
cfg_strategy = st.fixed_dictionaries({
    "max_batch_size": st.integers(1, 8),
    "max_wait_ms": st.sampled_from([0.0, 0.5, 2.0]),
    "buckets": st.sampled_from([None, "pow2", [16, 64, 256]]),
    "max_batch_tokens": st.sampled_from([None, 200, 1000]),
    "max_queue_size": st.sampled_from([4, 64]),
    "max_concurrent_batches": st.integers(1, 3),
    "model_sleep_s": st.sampled_from([0.0, 0.001]),
})


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op_strategy, min_size=1, max_size=60), cfg=cfg_strategy)
def test_every_request_ends_exactly_once(backend: str, ops: list[dict[str, Any]],
                                         cfg: dict[str, Any]) -> None:
    ops = [{**op, "id": i} for i, op in enumerate(ops)]
    anyio.run(_scenario, ops, cfg, backend=backend)


async def _chaos(n_requests: int, seed: int) -> dict[str, int]:
    """100k+ requests at ~10x what the queue admits, with everything going wrong at once."""
    rng = random.Random(seed)
    max_queue = 256
    in_flight_cap = 10 * max_queue  # offered concurrency: 10x what the queue admits
    sent: Counter[int] = Counter()

    async def model(batch: list[tuple[int, int]]) -> list[Any]:
        sent.update(i for i, _ in batch)
        r = rng.random()
        # ~10 ms a batch: capacity 2 x 32 / 10 ms = 6.4k req/s, about a tenth of what the
        # clients offer; 5% of batches are 5x slower still
        await anyio.sleep(0.05 if r > 0.95 else 0.01)
        if r < 0.01:
            raise Flaky("whole batch fails")
        if r < 0.015:
            return [("r", i) for i, _ in batch[1:]]  # wrong result count
        return [ItemFailed(i) if i % 97 == 0 else ("r", i) for i, _ in batch]

    b = perf.DynamicBatcher(model, max_batch_size=32, max_wait_ms=0.5, length_fn=lambda x: x[1],
                            buckets="pow2", max_batch_tokens=4096, max_queue_size=max_queue,
                            max_concurrent_batches=2)
    ended: list[int] = [0] * n_requests
    tally: Counter[str] = Counter()
    peak = {"queued": 0, "held": 0}
    slots = anyio.Semaphore(in_flight_cap)

    async def client(i: int, timeout_ms: float | None, cancel_s: float | None) -> None:
        try:
            with anyio.move_on_after(cancel_s if cancel_s is not None else float("inf")) as sc:
                try:
                    r = await b.submit((i, 1 + (i * 7919) % 1500), timeout_ms=timeout_ms,
                                       priority=i % 3)
                    assert r == ("r", i), f"request {i} got {r}"
                    tally["completed"] += 1
                except perf.QueueFullError:
                    tally["rejected"] += 1
                except perf.DeadlineExceededError:
                    tally["timed_out"] += 1
                except ItemFailed as exc:
                    assert exc.args == (i,)
                    tally["failed"] += 1
                except (Flaky, perf.BatchResultMismatchError):
                    tally["failed"] += 1
            if sc.cancelled_caught:
                tally["cancelled"] += 1
            ended[i] += 1
        finally:
            slots.release()

    async def monitor() -> None:
        while True:
            peak["queued"] = max(peak["queued"], b.stats.queued)
            held = sum(len(q) for bk in b._bucket_list for q in bk.queues.values())
            peak["held"] = max(peak["held"], held)
            await anyio.sleep(0.005)

    async with b, anyio.create_task_group() as tg:
        tg.start_soon(monitor)
        for i in range(n_requests):
            await slots.acquire()
            r = rng.random()
            timeout = rng.choice([0.2, 1.0, 5.0]) if r < 0.2 else None
            cancel = rng.uniform(0.0001, 0.003) if 0.2 <= r < 0.3 else None
            tg.start_soon(client, i, timeout, cancel)
        while slots.value < in_flight_cap:
            await anyio.sleep(0.001)
        tg.cancel_scope.cancel()

    assert ended == [1] * n_requests, "a request ended twice or never"
    assert all(n == 1 for n in sent.values()), "an item was sent to fn twice"
    s = b.stats
    assert s.submitted == n_requests
    assert (s.completed, s.failed, s.rejected, s.timed_out, s.cancelled) == (
        tally["completed"], tally["failed"], tally["rejected"], tally["timed_out"],
        tally["cancelled"])
    # memory stays bounded: the queue never passes max_queue_size, and what the deques hold
    # (live + cancelled-not-yet-compacted) stays within a constant factor of it
    assert peak["queued"] <= max_queue
    assert peak["held"] <= 2 * max_queue + 33 * len(b._bucket_list)
    assert s.queued == 0
    return dict(tally)


@pytest.mark.anyio
@pytest.mark.slow
async def test_chaos_100k_requests_overload_failures_cancellations_deadlines() -> None:
    tally = await _chaos(100_000, seed=3)
    # the scenario really exercised every path
    assert all(tally.get(k, 0) > 0 for k in
               ("completed", "failed", "rejected", "timed_out", "cancelled")), tally
