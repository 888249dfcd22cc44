"""DynamicBatcher / @batched: every rule of issue 3, on asyncio and trio.

The "model" here is a plain Python function (a fake: no ML model runs in unit tests); the
batcher, the event loops, threads and the ledger are the real ones.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import aiperf_sdk as perf
from aiperf_sdk._batch_types import CostModel

pytestmark = pytest.mark.anyio


class Model:
    """Batch fn that logs its batches; optionally blocks on a gate or sleeps."""

    def __init__(self, fn: Callable[[Any], Any] = lambda x: ("y", x), sleep_s: float = 0.0):
        self.fn = fn
        self.sleep_s = sleep_s
        self.batches: list[list[Any]] = []
        self.gate: anyio.Event | None = None
        self.running = 0
        self.max_running = 0

    async def __call__(self, items: list[Any]) -> list[Any]:
        self.batches.append(list(items))
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            if self.gate is not None:
                await self.gate.wait()
            if self.sleep_s:
                await anyio.sleep(self.sleep_s)
        finally:
            self.running -= 1
        return [self.fn(x) for x in items]


async def until(pred: Callable[[], bool], timeout_s: float = 10.0) -> None:
    with anyio.fail_after(timeout_s):
        while not pred():
            await anyio.sleep(0.001)


async def gather(calls: list[Callable[[], Awaitable[Any]]]) -> list[Any]:
    """Run calls concurrently (started in order); each slot gets a result or the exception."""
    out: list[Any] = [None] * len(calls)

    async def one(i: int) -> None:
        try:
            out[i] = await calls[i]()
        except Exception as exc:
            out[i] = exc

    async with anyio.create_task_group() as tg:
        for i in range(len(calls)):
            tg.start_soon(one, i)
            await anyio.sleep(0)  # keep submission order = arrival order
    return out


# -- basics ---------------------------------------------------------------------------------


async def test_results_map_back_to_their_callers(perf_ledger: perf.Ledger) -> None:
    model = Model(lambda x: x * 10)
    async with perf.DynamicBatcher(model, max_batch_size=8, max_wait_ms=1) as b:
        out = await gather([lambda i=i: b.submit(i) for i in range(50)])
    assert out == [i * 10 for i in range(50)]
    assert sorted(x for batch in model.batches for x in batch) == list(range(50))
    assert max(len(x) for x in model.batches) <= 8
    s = b.stats
    assert (s.submitted, s.completed, s.failed, s.queued) == (50, 50, 0, 0)
    assert sum(n * c for n, c in s.batch_sizes.items()) == 50
    assert s.batches == len(model.batches)


async def test_full_batch_dispatches_without_waiting() -> None:
    model = Model()
    # max_wait of a minute: only the size rule can dispatch within the test's time limit
    async with perf.DynamicBatcher(model, max_batch_size=4, max_wait_ms=60_000) as b:
        with anyio.fail_after(20):
            out = await gather([lambda i=i: b.submit(i) for i in range(8)])
    assert out == [("y", i) for i in range(8)]
    assert model.batches == [[0, 1, 2, 3], [4, 5, 6, 7]]


async def test_oldest_item_waits_max_wait_then_goes_alone(perf_ledger: perf.Ledger) -> None:
    model = Model()
    async with perf.DynamicBatcher(model, max_batch_size=64, max_wait_ms=30) as b:
        assert await b.submit("x") == ("y", "x")
    assert model.batches == [["x"]]
    # it waited for company up to max_wait (lower bound only; no upper wall-clock bound)
    assert perf_ledger.percentile("batch.queue", 100.0, bucket="all") >= 30 * 0.95


async def test_token_cap_closes_batches_on_padded_tokens() -> None:
    model = Model()
    b = perf.DynamicBatcher(model, max_batch_size=16, max_batch_tokens=35, length_fn=len,
                            max_wait_ms=60_000)
    async with anyio.create_task_group() as tg, b:
        # 3 * 10 = 30 fits, 4 * 10 = 40 does not: the 4th item closes the first batch,
        # the 7th the second; the 7th itself waits (max_wait is a minute) until stop
        for _ in range(7):
            tg.start_soon(b.submit, "a" * 10)
            await anyio.sleep(0)
        await until(lambda: len(model.batches) == 2)
        assert b.stats.queued == 1
    sizes = [len(x) for x in model.batches]
    assert sizes == [3, 3, 1]
    assert all(len(x) * max(map(len, x)) <= 35 for x in model.batches)


async def test_longer_item_padding_counts_against_cap() -> None:
    model = Model()
    model.gate = anyio.Event()
    b = perf.DynamicBatcher(model, max_batch_size=16, max_batch_tokens=40, length_fn=len,
                            max_wait_ms=5)
    async with b, anyio.create_task_group() as tg:
        tg.start_soon(b.submit, "z")  # occupies the model
        await until(lambda: len(model.batches) == 1)
        # queued while the model is busy: 3, 5, 20 -> [3, 5] (2 * 5 = 10 padded); adding
        # 20 would make 3 * 20 = 60 > 40 padded tokens, so it goes to the next batch
        for text in ("a" * 3, "b" * 5, "c" * 20):
            tg.start_soon(b.submit, text)
            await anyio.sleep(0)
        await until(lambda: b.stats.queued == 3)
        model.gate.set()
    assert model.batches[1:] == [["a" * 3, "b" * 5], ["c" * 20]]
    s = b.stats
    assert (s.padded_tokens, s.real_tokens) == (1 + 10 + 20, 1 + 8 + 20)


async def test_item_longer_than_token_cap_runs_alone() -> None:
    model = Model()
    b = perf.DynamicBatcher(model, max_batch_size=8, max_batch_tokens=10, length_fn=len,
                            max_wait_ms=1)
    async with b:
        assert await b.submit("x" * 50) == ("y", "x" * 50)
    assert model.batches == [["x" * 50]]


async def test_items_only_batch_with_their_bucket() -> None:
    model = Model()
    model.gate = anyio.Event()
    b = perf.DynamicBatcher(model, max_batch_size=16, length_fn=len, buckets=[4, 8],
                            max_wait_ms=1)
    async with b, anyio.create_task_group() as tg:
        tg.start_soon(b.submit, "")
        await until(lambda: len(model.batches) == 1)
        words = ["ab", "abcdef", "abc", "x" * 30, "abcdefg", "a", "y" * 9]
        for w in words:
            tg.start_soon(b.submit, w)
        await until(lambda: b.stats.queued == len(words))
        model.gate.set()
    groups = sorted(sorted(x) for x in model.batches[1:])
    assert groups == [["a", "ab", "abc"], ["abcdef", "abcdefg"], ["x" * 30, "y" * 9]]
    assert set(b.stats.buckets) == {"4", "8", "inf"}


async def test_pow2_buckets_and_padding_ratio(perf_ledger: perf.Ledger) -> None:
    model = Model()
    model.gate = anyio.Event()
    b = perf.DynamicBatcher(model, max_batch_size=16, length_fn=len, buckets="pow2",
                            max_wait_ms=1)
    async with b, anyio.create_task_group() as tg:
        tg.start_soon(b.submit, "x")
        await until(lambda: len(model.batches) == 1)
        for n in (3, 4, 5, 8, 100, 128):
            tg.start_soon(b.submit, "a" * n)
        await until(lambda: b.stats.queued == 6)
        model.gate.set()
    groups = sorted(sorted(map(len, x)) for x in model.batches)
    assert groups == [[1], [3, 4], [5, 8], [100, 128]]
    s = b.stats
    assert s.padded_tokens == 1 + 2 * 4 + 2 * 8 + 2 * 128
    assert s.real_tokens == 1 + 3 + 4 + 5 + 8 + 100 + 128
    assert s.padding_ratio == pytest.approx(s.padded_tokens / s.real_tokens)
    assert perf_ledger.count("batch.run", bucket="128") == 2
    assert perf_ledger.count("batch.queue", bucket="4") == 2


async def test_priority_first_then_arrival_order() -> None:
    model = Model()
    model.gate = anyio.Event()
    b = perf.DynamicBatcher(model, max_batch_size=2, max_wait_ms=1)
    async with b, anyio.create_task_group() as tg:
        tg.start_soon(b.submit, "busy")
        await until(lambda: len(model.batches) == 1)
        for name, prio in [("l1", 0), ("l2", 0), ("h1", 5), ("m1", 1), ("h2", 5)]:
            tg.start_soon(lambda n=name, p=prio: b.submit(n, priority=p))
            await anyio.sleep(0)
        await until(lambda: b.stats.queued == 5)
        model.gate.set()
    assert model.batches[1:] == [["h1", "h2"], ["m1", "l1"], ["l2"]]


async def test_no_bucket_starves_behind_a_busy_one() -> None:
    model = Model()
    model.gate = anyio.Event()
    # max_wait 0: every non-empty bucket is ready; the one with the oldest request wins
    b = perf.DynamicBatcher(model, max_batch_size=2, length_fn=len, buckets=[1, 10],
                            max_wait_ms=0)
    async with b, anyio.create_task_group() as tg:
        tg.start_soon(b.submit, "")
        await until(lambda: len(model.batches) == 1)
        order = ["a1", "a2", "a3", "a4", "long-b", "a5", "a6", "a7", "a8"]
        for w in order:
            tg.start_soon(b.submit, w if w == "long-b" else "a")
            await anyio.sleep(0)
        await until(lambda: b.stats.queued == len(order))
        model.gate.set()
    # bucket "1" is always full, but the long item is older than a5..a8: it goes third
    lens = [[len(x) for x in batch] for batch in model.batches[1:]]
    assert lens == [[1, 1], [1, 1], [6], [1, 1], [1, 1]]


async def test_queue_full_rejects_at_once_and_changes_nothing() -> None:
    model = Model()
    model.gate = anyio.Event()
    b = perf.DynamicBatcher(model, max_batch_size=1, max_queue_size=3, max_wait_ms=0)
    async with b, anyio.create_task_group() as tg:
        tg.start_soon(b.submit, "running")
        await until(lambda: len(model.batches) == 1)
        for i in range(3):
            tg.start_soon(b.submit, i)
            await anyio.sleep(0)
        await until(lambda: b.stats.queued == 3)
        with pytest.raises(perf.QueueFullError, match="max_queue_size=3"):
            await b.submit("overflow")
        assert b.stats.queued == 3 and b.stats.rejected == 1
        model.gate.set()
    assert [x for batch in model.batches for x in batch] == ["running", 0, 1, 2]
    s = b.stats
    assert (s.submitted, s.completed, s.rejected) == (5, 4, 1)


async def test_queued_request_past_deadline_is_never_sent(perf_ledger: perf.Ledger) -> None:
    model = Model()
    model.gate = anyio.Event()
    b = perf.DynamicBatcher(model, max_batch_size=4, max_wait_ms=0)
    async with b, anyio.create_task_group() as tg:
        tg.start_soon(b.submit, "running")
        await until(lambda: len(model.batches) == 1)
        with pytest.raises(perf.DeadlineExceededError, match="queued"):
            await b.submit("late", timeout_ms=20)
        assert b.stats.queued == 0
        model.gate.set()
    assert "late" not in [x for batch in model.batches for x in batch]
    assert b.stats.timed_out == 1
    assert perf_ledger.count("batch.queue", outcome="error") == 1


async def test_default_timeout_and_deadline_while_running() -> None:
    model = Model()
    model.gate = anyio.Event()
    b = perf.DynamicBatcher(model, max_batch_size=4, max_wait_ms=0, timeout_ms=30)
    async with b:
        with pytest.raises(perf.DeadlineExceededError, match="running"):
            await b.submit("stuck")  # the batcher's default timeout_ms applies
        model.gate.set()
        assert await b.submit("next", timeout_ms=10_000) == ("y", "next")
    assert model.batches == [["stuck"], ["next"]]
    assert (b.stats.timed_out, b.stats.completed) == (1, 1)



async def test_result_and_deadline_in_the_same_loop_turn_end_it_once() -> None:
    """A request's deadline fires in the same event-loop turn as its batch is released: the
    request must end exactly once, with its result or DeadlineExceededError, and be counted
    once. (On asyncio the timer cancels the caller's future just before the batch delivers
    to it; the batcher must treat that request as gone, not as delivered.)"""
    model = Model()
    model.gate = anyio.Event()
    b = perf.DynamicBatcher(model, max_batch_size=4, max_wait_ms=0)
    out: list[Any] = []

    async def call() -> None:
        try:
            out.append(await b.submit("x", timeout_ms=50))
        except perf.DeadlineExceededError as exc:
            out.append(exc)

    async with b, anyio.create_task_group() as tg:
        tg.start_soon(call)
        await until(lambda: model.running == 1)
        time.sleep(0.08)  # block the loop past the request's deadline, then in one turn:
        await anyio.lowlevel.checkpoint()  # we run first (scheduled before the timer) ...
        model.gate.set()  # ... the batch is released, then the deadline timer fires
    assert len(out) == 1
    assert out[0] == ("y", "x") or isinstance(out[0], perf.DeadlineExceededError)
    s = b.stats
    assert (s.submitted, s.completed + s.timed_out, s.failed, s.cancelled) == (1, 1, 0, 0)


# -- gating: batches grow under a slow model --------------------------------------------------


async def test_slow_model_batches_grow_instead_of_collapsing() -> None:
    """Load above the model's single-item rate: a gated batcher forms big batches.

    One batch takes ~20 ms whatever its size; requests arrive every ~2 ms (500/s, 10x the
    single-item rate of 50/s). An eager batcher would send batches of 1-2 and fall behind;
    forming batches only when the model is free lets ~10 accumulate per batch.
    """
    model = Model(sleep_s=0.02)
    b = perf.DynamicBatcher(model, max_batch_size=64, max_wait_ms=1, max_queue_size=10_000)
    async with b, anyio.create_task_group() as tg:
        for i in range(150):
            tg.start_soon(b.submit, i)
            await anyio.sleep(0.002)
    s = b.stats
    assert s.completed == 150
    assert model.max_running == 1
    # batch size ~= run time x arrival rate (~10 here); generous bound, measured ratio
    assert s.mean_batch_size >= 4, s.batch_sizes
    assert s.batches <= 150 / 4


async def test_max_concurrent_batches_limits_running_batches() -> None:
    model = Model(sleep_s=0.01)
    b = perf.DynamicBatcher(model, max_batch_size=2, max_wait_ms=0,
                            max_concurrent_batches=3)
    async with b:
        out = await gather([lambda i=i: b.submit(i) for i in range(40)])
    assert out == [("y", i) for i in range(40)]
    assert 2 <= model.max_running <= 3


# -- errors -------------------------------------------------------------------------------


async def test_exception_result_fails_only_that_item() -> None:
    boom = ValueError("bad item 3")
    model = Model(lambda x: boom if x == 3 else x)
    async with perf.DynamicBatcher(model, max_batch_size=8, max_wait_ms=5) as b:
        out = await gather([lambda i=i: b.submit(i) for i in range(6)])
    assert out == [0, 1, 2, boom, 4, 5]
    assert (b.stats.completed, b.stats.failed) == (5, 1)


async def test_fn_exception_reaches_its_batch_only(perf_ledger: perf.Ledger) -> None:
    calls = 0

    async def fn(items: list[int]) -> list[int]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("model crashed")
        return items

    async with perf.DynamicBatcher(fn, max_batch_size=3, max_wait_ms=60_000) as b:
        out = await gather([lambda i=i: b.submit(i) for i in range(6)])
    first, rest = out[:3], out[3:]
    assert all(isinstance(e, RuntimeError) for e in first)
    assert first[0] is first[1] is first[2]  # the exception itself, not a copy
    assert rest == [3, 4, 5]
    assert perf_ledger.count("batch.run", outcome="error") == 3


@pytest.mark.parametrize("bad", [[1], [1, 2, 3, 4], None, "abc"])
async def test_wrong_result_count_fails_the_batch(bad: Any) -> None:
    async def fn(items: list[int]) -> Any:
        return bad if items[0] == 0 else items

    async with perf.DynamicBatcher(fn, max_batch_size=3, max_wait_ms=60_000) as b:
        out = await gather([lambda i=i: b.submit(i) for i in range(6)])
    assert all(isinstance(e, perf.BatchResultMismatchError) for e in out[:3])
    assert out[3:] == [3, 4, 5]
    assert isinstance(out[0], perf.BatcherError) and isinstance(out[0], perf.PerfError)


async def test_sync_fn_runs_in_a_worker_thread() -> None:
    threads: list[int] = []

    def fn(items: list[int]) -> list[int]:
        threads.append(threading.get_ident())
        return [x + 1 for x in items]

    async with perf.DynamicBatcher(fn, max_batch_size=4, max_wait_ms=1) as b:
        loop_thread = threading.get_ident()
        assert await gather([lambda i=i: b.submit(i) for i in range(8)]) == list(range(1, 9))
    assert threads and loop_thread not in threads


# -- cancellation and shutdown --------------------------------------------------------------


async def test_cancelled_while_queued_is_removed_and_never_sent() -> None:
    model = Model()
    model.gate = anyio.Event()
    b = perf.DynamicBatcher(model, max_batch_size=4, max_wait_ms=0)
    async with b, anyio.create_task_group() as tg:
        tg.start_soon(b.submit, "running")
        await until(lambda: len(model.batches) == 1)
        results: dict[str, Any] = {}

        async def keep(x: str) -> None:
            results[x] = await b.submit(x)

        scope = anyio.CancelScope()

        async def victim() -> None:
            with scope:
                await b.submit("cancel-me")

        tg.start_soon(keep, "a")
        await anyio.sleep(0)
        tg.start_soon(victim)
        await anyio.sleep(0)
        tg.start_soon(keep, "c")
        await until(lambda: b.stats.queued == 3)
        scope.cancel()
        await until(lambda: b.stats.cancelled == 1)
        assert b.stats.queued == 2
        model.gate.set()
    assert model.batches[1] == ["a", "c"]
    assert results == {"a": ("y", "a"), "c": ("y", "c")}


async def test_cancelled_while_running_drops_result_only() -> None:
    model = Model()
    model.gate = anyio.Event()
    b = perf.DynamicBatcher(model, max_batch_size=4, max_wait_ms=20)
    got: dict[int, Any] = {}
    async with b, anyio.create_task_group() as tg:
        scope = anyio.CancelScope()

        async def one(i: int) -> None:
            if i == 1:
                with scope:
                    got[i] = await b.submit(i)
            else:
                got[i] = await b.submit(i)

        for i in range(3):
            tg.start_soon(one, i)
        await until(lambda: len(model.batches) == 1)
        scope.cancel()
        await until(lambda: b.stats.cancelled == 1)
        model.gate.set()
    assert got == {0: ("y", 0), 2: ("y", 2)}
    s = b.stats
    assert (s.completed, s.cancelled) == (2, 1)


async def test_stop_drains_queue_then_rejects() -> None:
    model = Model(sleep_s=0.005)
    b = perf.DynamicBatcher(model, max_batch_size=4, max_wait_ms=60_000)
    results: list[Any] = []
    async with anyio.create_task_group() as tg, b:
        for i in range(10):
            tg.start_soon(lambda i=i: _append(results, b.submit(i)))
        await until(lambda: b.stats.submitted == 10)
        # leaving the context sent everything queued (even the partial last batch)
    assert sorted(r[1] for r in results) == list(range(10))
    assert not b.running
    with pytest.raises(perf.BatcherClosedError):
        await b.submit(99)
    s = b.stats
    assert (s.completed, s.rejected) == (10, 1)


async def _append(out: list[Any], aw: Awaitable[Any]) -> None:
    out.append(await aw)


async def test_host_cancelled_fails_pending_with_closed_error() -> None:
    model = Model()
    model.gate = anyio.Event()
    b = perf.DynamicBatcher(model, max_batch_size=1, max_wait_ms=0)
    errors: list[BaseException] = []

    async def caller(x: int) -> None:
        try:
            await b.submit(x)
        except perf.BatcherClosedError as exc:
            errors.append(exc)

    async with anyio.create_task_group() as outer:
        with anyio.CancelScope() as host:
            async with b:
                outer.start_soon(caller, 1)
                outer.start_soon(caller, 2)
                await until(lambda: len(model.batches) == 1 and b.stats.queued == 1)
                host.cancel()
    assert len(errors) == 2  # one running, one queued: both ended with a typed error
    assert b.stats.failed == 2


async def test_not_started_is_closed() -> None:
    b = perf.DynamicBatcher(Model())
    with pytest.raises(perf.BatcherClosedError, match="async with"):
        await b.submit(1)


# -- observability ----------------------------------------------------------------------------


async def test_stages_recorded_with_bucket_label_and_request(perf_ledger: perf.Ledger) -> None:
    model = Model(sleep_s=0.005)
    b = perf.DynamicBatcher(model, max_batch_size=4, max_wait_ms=1, length_fn=len,
                            buckets=[8, 64], labels={"model": "m"})
    async with b:
        async with perf.request() as req:
            await b.submit("short")
        await gather([lambda: b.submit("x" * 20) for _ in range(3)])
    assert perf_ledger.count("batch.queue", bucket="8", model="m") == 1
    assert perf_ledger.count("batch.run", bucket="64", model="m") == 3
    assert perf_ledger.percentile("batch.run", 50.0, bucket="8") >= 5 * 0.95
    assert set(req.stages) >= {"batch.queue", "batch.run"}
    text = b.report()
    assert "queue p99" in text and "mean size" in text


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_batch_size": 0},
        {"max_batch_size": 2.5},
        {"max_wait_ms": -1},
        {"max_wait_ms": math.nan},
        {"max_queue_size": 0},
        {"max_concurrent_batches": 0},
        {"timeout_ms": 0},
        {"max_batch_tokens": 100},  # needs length_fn
        {"buckets": [8, 4], "length_fn": len},
        {"buckets": [], "length_fn": len},
        {"buckets": "log2", "length_fn": len},
        {"buckets": [4, 8]},  # needs length_fn
        {"ledger": "default"},
    ],
)
def test_bad_config_raises_typed_error(kwargs: dict[str, Any]) -> None:
    with pytest.raises(perf.BatcherConfigError):
        perf.DynamicBatcher(Model(), **kwargs)
    with pytest.raises(perf.BatcherConfigError):
        perf.batched(**kwargs)(Model())


async def test_bad_submit_arguments_change_nothing() -> None:
    b = perf.DynamicBatcher(Model(), length_fn=lambda x: x, max_wait_ms=1)
    async with b:
        for call in (
            lambda: b.submit(1, priority=1.5),  # type: ignore[arg-type]
            lambda: b.submit(1, timeout_ms=-5),
            lambda: b.submit(-3),  # negative length
            lambda: b.submit(2.5),  # non-int length
        ):
            with pytest.raises(perf.BatcherConfigError):
                await call()
        assert b.stats.submitted == 0 and b.stats.queued == 0
        assert await b.submit(4) == ("y", 4)


# -- cost model and deadline-aware admission --------------------------------------------------


def test_cost_model_fits_a_plus_b_padded_tokens() -> None:
    m = CostModel(window=64)
    for i in range(300):
        x = 100 + (i * 37) % 900
        m.add(x, int(2e6 + 5e3 * x), m.predict_ns(x) if m.samples >= 2 else None)
    assert m.a == pytest.approx(2e6, rel=1e-6)
    assert m.b == pytest.approx(5e3, rel=1e-6)
    pred, act, mae = m.error_stats_ms()
    assert mae == pytest.approx(0.0, abs=1e-6) and pred == pytest.approx(act)


async def test_stats_show_predicted_vs_actual_batch_cost() -> None:
    async def fn(items: list[str]) -> list[int]:
        await anyio.sleep(0.002 + 0.00002 * len(items) * max(map(len, items)))
        return [len(x) for x in items]

    b = perf.DynamicBatcher(fn, max_batch_size=8, max_wait_ms=1, length_fn=len,
                            buckets="pow2")
    async with b:
        for n in (10, 50, 100, 200, 400, 10, 50, 100, 200, 400):
            await gather([lambda n=n: b.submit("a" * n) for _ in range(4)])
    s = b.stats
    assert s.cost_b_us_per_token > 0 and s.cost_predicted_ms > 0
    # the model explains most of the batch cost (generous: sleeps overshoot under load)
    assert s.cost_mae_ms < 0.5 * s.cost_actual_ms


async def test_deadline_admission_sheds_hopeless_requests_at_once() -> None:
    model = Model(sleep_s=0.02)
    b = perf.DynamicBatcher(model, max_batch_size=1, max_wait_ms=0, deadline_admission=True,
                            max_queue_size=1000)
    async with b:
        for i in range(8):  # learn the cost: ~20 ms per batch
            await b.submit(i)
        async with anyio.create_task_group() as tg:
            for i in range(5):
                tg.start_soon(b.submit, i)
            await until(lambda: b.stats.queued >= 4)
            sent_before = len(model.batches)
            # 4+ batches of ~20 ms are ahead: a 10 ms deadline cannot be met
            with pytest.raises(perf.DeadlineExceededError, match="admission"):
                await b.submit("hopeless", timeout_ms=10)
            assert len(model.batches) == sent_before  # rejected at once, not served late
            assert await b.submit("patient", timeout_ms=10_000) == ("y", "patient")
    assert b.stats.shed == 1
    assert "hopeless" not in [x for batch in model.batches for x in batch]


# -- entry points: decorator and synchronous callers -------------------------------------------


async def test_batched_decorator_takes_one_item() -> None:
    seen: list[list[str]] = []

    @perf.batched(max_batch_size=4, max_wait_ms=5, length_fn=len, buckets="pow2")
    async def upper(texts: list[str]) -> list[str]:
        seen.append(texts)
        return [t.upper() for t in texts]

    try:
        out = await gather([lambda w=w: upper(w) for w in ["ab", "cd", "efgh", "x"]])
        assert out == ["AB", "CD", "EFGH", "X"]
        assert sorted(map(sorted, seen)) == [["ab", "cd"], ["efgh"], ["x"]]
        assert upper.stats is not None and upper.stats.completed == 4
        assert upper.__name__ == "upper"
    finally:
        await upper.aclose()
    assert upper.batcher is not None and not upper.batcher.running


def test_submit_sync_from_threads_with_background_loop() -> None:
    model = Model(lambda x: x * 2, sleep_s=0.002)
    b = perf.DynamicBatcher(model, max_batch_size=8, max_wait_ms=2)
    with pytest.raises(perf.BatcherClosedError):
        b.submit_sync(1)
    results: dict[int, int] = {}

    def worker(base: int) -> None:
        for i in range(base, base + 10):
            results[i] = b.submit_sync(i, timeout_ms=10_000)

    with b.run_in_thread():
        threads = [threading.Thread(target=worker, args=(k * 10,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert results == {i: 2 * i for i in range(40)}
    assert b.stats.mean_batch_size > 1  # threads' calls were batched together
    assert not b.running


async def test_submit_sync_on_loop_thread_is_a_usage_error() -> None:
    async with perf.DynamicBatcher(Model(), max_wait_ms=0) as b:
        with pytest.raises(perf.BatcherUsageError, match="event loop thread"):
            b.submit_sync(1)
        # from a worker thread of this same loop it works
        assert await anyio.to_thread.run_sync(lambda: b.submit_sync(7)) == ("y", 7)


def test_bulk_ledger_records_match_one_append_per_value() -> None:
    """The batcher records a batch's stages with one buffer extend per series; the ledger
    must end up exactly as with one ``_append`` per request (values, windows, errors)."""
    import random
    import time

    from aiperf_sdk._batch_queue import _append_many

    a = perf.Ledger(window_s=0.001, windows_kept=1000, buffer_size=7)
    b = perf.Ledger(window_s=0.001, windows_kept=1000, buffer_size=7)
    b._unix_offset_ns = a._unix_offset_ns
    keys = [("batch.run", (("bucket", "all"),)),
            ("batch.run", (("bucket", "all"), ("outcome", "error")))]
    rng = random.Random(3)
    base = time.perf_counter_ns()
    for i in range(80):
        end = base + i * 400_000  # a new 1 ms window every few batches
        key = keys[i % 3 == 0]
        durations = [rng.randrange(1, 5_000_000) for _ in range(rng.randrange(0, 10))]
        for d in durations:
            a._append(key, d, end)
        _append_many(b, key, durations, end)
    assert a.count("batch.run", bucket="all") > 0
    assert a.snapshot() == b.snapshot()
    wa, wb = a.window(stage="batch.run"), b.window(stage="batch.run")
    assert len(wa) > 10
    assert [(w.start_unix_s, w.count, w.errors, w.percentile(99)) for w in wa] == [
        (w.start_unix_s, w.count, w.errors, w.percentile(99)) for w in wb]
