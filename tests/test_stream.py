from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator

import anyio
import pytest

import aiperf_sdk as perf


def tokens(n: int, gap_s: float) -> Iterator[int]:
    for i in range(n):
        time.sleep(gap_s)
        yield i


def test_sync_stream_records_ttft_itl_tpot(perf_ledger: perf.Ledger) -> None:
    with perf.request():
        time.sleep(0.02)  # before the stream: part of TTFT, measured from request start
        out = list(perf.stream("decode", tokens(5, 0.005), model="m"))
    assert out == [0, 1, 2, 3, 4]
    assert perf_ledger.count("ttft", model="m") == 1
    assert perf_ledger.count("itl", model="m") == 4
    assert perf_ledger.count("tpot", model="m") == 1
    assert perf_ledger.count("decode", model="m") == 1
    assert perf_ledger.percentile("ttft", 50) >= 24.0
    assert 4.0 <= perf_ledger.percentile("itl", 50) < 100
    # tpot = (last - first) / (n - 1) equals the mean ITL
    assert perf_ledger.mean("tpot") == pytest.approx(perf_ledger.mean("itl"), rel=0.01)


def test_ttft_without_request_is_from_stream_start(perf_ledger: perf.Ledger) -> None:
    time.sleep(0.02)
    list(perf.stream("decode", tokens(2, 0.003)))
    assert 2.5 <= perf_ledger.percentile("ttft", 50) < 20.0


@pytest.mark.anyio
async def test_async_stream(perf_ledger: perf.Ledger) -> None:
    async def gen() -> AsyncIterator[str]:
        for t in "abc":
            await anyio.sleep(0.002)
            yield t

    async with perf.request() as req:
        got = [t async for t in perf.stream("decode", gen())]
    assert got == ["a", "b", "c"]
    assert perf_ledger.count("itl") == 2
    trace = perf_ledger.slowest()[0]
    assert trace.id == req.id and "ttft" in trace.stages and "decode" in trace.stages


def test_stream_closed_early_records_what_ran(perf_ledger: perf.Ledger) -> None:
    s = iter(perf.stream("decode", tokens(100, 0.0)))
    next(s), next(s), next(s)
    s.close()  # type: ignore[attr-defined]
    assert perf_ledger.count("decode") == 1
    assert perf_ledger.count("itl") == 2


def test_stream_source_error_is_labelled(perf_ledger: perf.Ledger) -> None:
    def broken() -> Iterator[int]:
        yield 1
        raise ConnectionError("engine died")

    with pytest.raises(ConnectionError):
        list(perf.stream("decode", broken()))
    assert perf_ledger.count("decode", outcome="error") == 1
    assert perf_ledger.count("ttft") == 1


def test_single_token_has_no_tpot(perf_ledger: perf.Ledger) -> None:
    list(perf.stream("decode", [1]))
    assert perf_ledger.count("tpot") == 0 and perf_ledger.count("ttft") == 1


def test_bad_input() -> None:
    with pytest.raises(TypeError, match="iterable"):
        perf.stream("decode", 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        perf.stream("", [])
    with pytest.raises(TypeError, match="async for"):
        async def agen() -> AsyncIterator[int]:
            yield 1

        iter(perf.stream("d", agen()))  # type: ignore[call-overload]
