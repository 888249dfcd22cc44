from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator

import anyio
import pytest

import aiperf_sdk as perf


def _ms(ledger: perf.Ledger, stage: str, **labels: object) -> float:
    return ledger.percentile(stage, 50.0, **labels)


def test_decorated_sync_function(perf_ledger: perf.Ledger) -> None:
    @perf.stage("prefill", model="chat_v3")
    def prefill(x: int) -> int:
        time.sleep(0.01)
        return x * 2

    assert prefill(21) == 42
    assert prefill.__name__ == "prefill"
    assert perf_ledger.count("prefill", model="chat_v3") == 1
    assert 9.0 <= _ms(perf_ledger, "prefill") < 1000


@pytest.mark.anyio
async def test_decorated_async_function(perf_ledger: perf.Ledger) -> None:
    @perf.stage("fetch")
    async def fetch() -> str:
        await anyio.sleep(0.01)
        return "ok"

    assert await fetch() == "ok"
    assert perf_ledger.count("fetch") == 1
    assert _ms(perf_ledger, "fetch") >= 9.0


@pytest.mark.anyio
async def test_decorated_async_function_labels_breakdown_and_ledgers(
    perf_ledger: perf.Ledger,
) -> None:
    """The async wrapper's recorder (C where built): labelled series, the request's
    breakdown, and the default ledger followed across set_default_ledger/reset."""
    @perf.stage("decode", model="m")
    async def decode(x: int) -> int:
        await anyio.sleep(0)
        return x + 1

    async with perf.request(id="r-async") as req:
        assert await decode(1) == 2
        assert await decode(2) == 3
    assert perf_ledger.count("decode", model="m") == 2 and perf_ledger.count("decode") == 2
    assert req.stages["decode"] > 0
    assert perf_ledger.slowest("decode")[0].id == "r-async"
    other = perf.Ledger()
    previous = perf.set_default_ledger(other)
    try:
        await decode(3)  # the cached series must not stick to the first ledger
    finally:
        perf.set_default_ledger(previous)
    assert other.count("decode", model="m") == 1 and perf_ledger.count("decode") == 2
    perf_ledger.reset()
    await decode(4)  # series objects survive reset() and keep counting
    assert perf_ledger.count("decode", model="m") == 1


def test_with_block_and_request_breakdown(perf_ledger: perf.Ledger) -> None:
    with perf.request(id="r1"):
        with perf.stage("tokenize"):
            time.sleep(0.005)
        with perf.stage("tokenize"):
            time.sleep(0.005)
    assert perf_ledger.count("tokenize") == 2
    trace = perf_ledger.slowest("e2e")[0]
    assert trace.id == "r1"
    assert trace.stages["tokenize"] >= 10.0
    assert trace.total_ms >= trace.stages["tokenize"]


@pytest.mark.anyio
async def test_async_with_block(perf_ledger: perf.Ledger) -> None:
    async with perf.request(), perf.stage("io", kind="disk"):
        await anyio.sleep(0.005)
    assert perf_ledger.count("io", kind="disk") == 1


@pytest.mark.anyio
async def test_async_with_gives_the_stage_and_records_errors_and_cancellation(
    perf_ledger: perf.Ledger,
) -> None:
    async with perf.request() as req, perf.stage("step") as st:
        assert isinstance(st, perf.stage)
        await anyio.sleep(0)
    assert req.stages["step"] > 0
    err = KeyError("k")
    with pytest.raises(KeyError) as info:
        async with perf.stage("step"):
            raise err
    assert info.value is err  # re-raised unchanged
    with anyio.move_on_after(0.01):
        async with perf.stage("step"):
            await anyio.sleep(10)
    assert perf_ledger.count("step") == 1
    assert perf_ledger.count("step", outcome="error") == 1
    assert perf_ledger.count("step", outcome="cancelled") == 1
    # the awaitables behind `async with` (C: already done; Python: coroutines) are
    # awaitable directly too, with the same results
    st = perf.stage("direct")
    assert await st.__aenter__() is st
    assert await st.__aexit__(None, None, None) is None
    assert perf_ledger.count("direct") == 1


def test_stage_outside_request_records_with_no_request(perf_ledger: perf.Ledger) -> None:
    with perf.stage("lonely"):
        assert perf.current_request_id() is None
    assert perf_ledger.count("lonely") == 1
    assert perf_ledger.slowest("lonely") == []  # no request, no trace


def test_error_is_labelled_and_reraised_unchanged(perf_ledger: perf.Ledger) -> None:
    err = ValueError("bad input")

    @perf.stage("decode")
    def decode() -> None:
        raise err

    with pytest.raises(ValueError) as info:
        decode()
    assert info.value is err
    with pytest.raises(ZeroDivisionError), perf.stage("decode"):
        _ = 1 / 0
    assert perf_ledger.count("decode") == 0
    assert perf_ledger.count("decode", outcome="error") == 2


@pytest.mark.anyio
async def test_cancellation_is_labelled_cancelled(perf_ledger: perf.Ledger) -> None:
    @perf.stage("slow")
    async def slow() -> None:
        await anyio.sleep(10)

    with anyio.move_on_after(0.01):
        await slow()
    assert perf_ledger.count("slow", outcome="cancelled") == 1
    assert perf_ledger.count("slow") == 0


def test_sync_generator_records_body_time_and_early_close(perf_ledger: perf.Ledger) -> None:
    @perf.stage("gen")
    def gen(n: int) -> Iterator[int]:
        for i in range(n):
            time.sleep(0.002)
            yield i
        return

    out = []
    for v in gen(5):
        out.append(v)
        time.sleep(0.01)  # consumer time is not the generator's
    assert out == [0, 1, 2, 3, 4]
    body = _ms(perf_ledger, "gen")
    assert 10.0 <= body < 40.0  # ~5 × 2 ms, not the ~60 ms wall time

    g = gen(100)
    assert next(g) == 0
    g.close()  # closed early: records what ran
    assert perf_ledger.count("gen") == 2
    assert perf_ledger.count("gen", outcome="error") == 0


def test_sync_generator_send_throw_and_return_value(perf_ledger: perf.Ledger) -> None:
    @perf.stage("echo")
    def echo() -> Iterator[int]:
        total = 0
        while True:
            try:
                got = yield total
            except KeyError:
                total = -1
                continue
            if got is None:
                return
            total += got

    g = echo()
    assert next(g) == 0
    assert g.send(5) == 5
    assert g.throw(KeyError("k")) == -1
    with pytest.raises(StopIteration):
        g.send(None)
    assert perf_ledger.count("echo") == 1


def test_generator_raising_is_an_error(perf_ledger: perf.Ledger) -> None:
    @perf.stage("gen")
    def gen() -> Iterator[int]:
        yield 1
        raise RuntimeError("mid-stream")

    with pytest.raises(RuntimeError, match="mid-stream"):
        list(gen())
    assert perf_ledger.count("gen", outcome="error") == 1


@pytest.mark.anyio
async def test_async_generator_and_early_close(perf_ledger: perf.Ledger) -> None:
    @perf.stage("agen")
    async def agen(n: int) -> AsyncIterator[int]:
        for i in range(n):
            await anyio.sleep(0.001)
            yield i

    assert [x async for x in agen(3)] == [0, 1, 2]
    g = agen(10)
    assert await g.__anext__() == 0
    await g.aclose()
    assert perf_ledger.count("agen") == 2


@pytest.mark.anyio
async def test_async_generator_error(perf_ledger: perf.Ledger) -> None:
    @perf.stage("agen")
    async def agen() -> AsyncIterator[int]:
        yield 1
        raise OSError("eof")

    with pytest.raises(OSError, match="eof"):
        async for _ in agen():
            pass
    assert perf_ledger.count("agen", outcome="error") == 1


def test_stage_object_reused_sequentially_but_not_reentered(perf_ledger: perf.Ledger) -> None:
    s = perf.stage("shared")
    with s:
        pass
    with s:
        pass
    assert perf_ledger.count("shared") == 2
    with s, pytest.raises(RuntimeError, match="already active"), s:
        pass


def test_bad_stage_name_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        perf.stage("")
    with pytest.raises(TypeError):
        perf.stage(3)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["ledger", 3, object()])
def test_a_ledger_that_is_not_a_ledger_fails_where_it_is_passed(
    bad: object, perf_ledger: perf.Ledger
) -> None:
    """Caught when the scope is created, not after the user's code ran (in __exit__)."""
    for make in (
        lambda: perf.stage("s", ledger=bad),  # type: ignore[arg-type]
        lambda: perf.stage("s", ledger=bad, model="m"),  # type: ignore[arg-type]
        lambda: perf.request(ledger=bad),  # type: ignore[arg-type]
        lambda: perf.stream("s", [1], ledger=bad),  # type: ignore[arg-type]
    ):
        with pytest.raises(TypeError, match=r"ledger must be a perf\.Ledger"):
            make()
    assert perf_ledger.stages() == []


def test_explicit_ledger_wins(perf_ledger: perf.Ledger) -> None:
    other = perf.Ledger()
    with perf.request(), perf.stage("x", ledger=other):
        pass
    assert other.count("x") == 1 and perf_ledger.count("x") == 0


def test_threads_lose_no_count() -> None:
    import threading

    ledger = perf.Ledger(buffer_size=512)

    @perf.stage("t", ledger=ledger)
    def work() -> None:
        pass

    def run() -> None:
        for _ in range(20_000):
            work()

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ledger.count("t") == 160_000


def test_label_cardinality_is_bounded_with_a_warning() -> None:
    ledger = perf.Ledger(max_label_sets=4)
    for i in range(4):
        with perf.stage("s", ledger=ledger, user=str(i)):
            pass
    with pytest.warns(perf.CardinalityWarning, match="more than 4 distinct label sets"):
        for i in range(4, 50):
            with perf.stage("s", ledger=ledger, user=str(i)):
                pass
        ledger.count("s")  # reading folds the buffer
    assert ledger.count("s", overflow="other") == 46
    assert ledger.count("s") == 50
    assert len(ledger.summary().rows) == 5
