"""device_stage and the CUDA-event resolver.

No GPU here: the CPU behaviour (wall time only) is tested for real; the resolver's ordering,
non-blocking polling and backlog bound are tested with a fake event type standing in for
``torch.cuda.Event`` (it cannot run here). The real CUDA branch runs in
benchmarks/gpu_check.py.
"""

from __future__ import annotations

import time

import anyio
import pytest
import torch

import aiperf_sdk as perf
from aiperf_sdk import _device_timing
from aiperf_sdk._device_timing import _EventResolver


def test_cpu_device_records_wall_time_only(perf_ledger: perf.Ledger) -> None:
    x = torch.randn(64, 64)
    for dev in ("cpu", None, "cuda", torch.device("cpu")):
        with perf.device_stage("matmul", device=dev, model="m"):
            x @ x
    assert perf_ledger.count("matmul", model="m") == 4
    assert perf.flush_device_timings() == 0
    assert "matmul.gpu" not in perf_ledger.stages()


def test_wall_time_is_measured(perf_ledger: perf.Ledger) -> None:
    with perf.device_stage("sleep", device="cpu"):
        time.sleep(0.02)
    with perf.device_stage("noop", device="cpu"):
        pass
    # ratio within one run, not an absolute threshold
    assert perf_ledger.percentile("sleep", 50.0) > 10 * perf_ledger.percentile("noop", 50.0)


def test_decorator_sync_and_async_and_errors(perf_ledger: perf.Ledger) -> None:
    @perf.device_stage("step", device="cpu")
    def step(v: int) -> int:
        if v < 0:
            raise ValueError("neg")
        return v * 2

    @perf.device_stage("astep")
    async def astep(v: int) -> int:
        await anyio.sleep(0)
        return v + 1

    assert step(2) == 4
    with pytest.raises(ValueError, match="neg"):
        step(-1)
    assert anyio.run(astep, 1) == 2
    assert perf_ledger.count("step") == 1
    assert perf_ledger.count("step", outcome="error") == 1
    assert perf_ledger.count("astep") == 1


def test_request_breakdown_and_explicit_ledger(perf_ledger: perf.Ledger) -> None:
    other = perf.Ledger()
    with perf.request() as req:
        with perf.device_stage("a", device="cpu"):
            pass
        with perf.device_stage("b", device="cpu", ledger=other):
            pass
    assert "a" in req.stages and "b" in req.stages
    assert perf_ledger.count("a") == 1 and other.count("b") == 1
    assert "b" not in perf_ledger.stages()


def test_bad_arguments() -> None:
    with pytest.raises(TypeError):
        perf.device_stage("")
    with pytest.raises(ValueError, match="device"):
        perf.device_stage("x", device="tpu")
    with pytest.raises(ValueError, match="device"):
        perf.device_stage("x", device=3)

    def gen() -> object:
        yield 1

    with pytest.raises(TypeError, match="generators"):
        perf.device_stage("x")(gen)
    s = perf.device_stage("x", device="cpu")
    with s, pytest.raises(RuntimeError, match="already active"), s:
        pass


class FakeEvent:
    """Stands in for torch.cuda.Event (no GPU here): completion is set by the test."""

    def __init__(self, t_ms: float) -> None:
        self.t_ms = t_ms
        self.done = False
        self.synced = 0

    def record(self, stream: object = None) -> None:  # pragma: no cover - not used here
        pass

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.synced += 1
        self.done = True

    def elapsed_time(self, end_event: FakeEvent) -> float:
        assert self.done and end_event.done, "elapsed_time on an unfinished event"
        return end_event.t_ms - self.t_ms


def _pair(start: float, end: float) -> tuple[FakeEvent, FakeEvent]:
    return FakeEvent(start), FakeEvent(end)


def test_resolver_polls_without_blocking_in_order() -> None:
    led = perf.Ledger()
    res = _EventResolver()
    p1, p2 = _pair(0.0, 2.0), _pair(2.0, 5.0)
    res.submit(*p1, ("k.gpu", ()), led, 1, 0)
    res.submit(*p2, ("k.gpu", ()), led, 2, 0)
    assert res.pending() == 2 and led.count("k.gpu") == 0
    # the second finished first: FIFO waits for the oldest, never blocks
    for e in p2:
        e.done = True
    assert res.poll() == 0 and res.pending() == 2
    for e in p1:
        e.done = True
    assert res.poll() == 2 and res.pending() == 0
    assert led.count("k.gpu") == 2
    assert led.percentile("k.gpu", 0.0) == pytest.approx(2.0, rel=1e-2)
    assert led.percentile("k.gpu", 100.0) == pytest.approx(3.0, rel=1e-2)
    assert all(e.synced == 0 for e in (*p1, *p2))


def test_resolver_flush_waits_only_when_asked() -> None:
    led = perf.Ledger()
    res = _EventResolver()
    start, end = _pair(0.0, 1.5)
    start.done = True
    res.submit(start, end, ("k.gpu", (("m", "x"),)), led, 1, 0)
    assert res.flush(wait=False) == 0 and res.pending() == 1
    assert res.flush(wait=True) == 1 and end.synced == 1
    assert led.count("k.gpu", m="x") == 1
    # events go back to the free list for reuse
    assert res.take_event(0, lambda: FakeEvent(0.0)) in (start, end)


def test_resolver_backlog_is_bounded() -> None:
    led = perf.Ledger()
    res = _EventResolver(max_pending=4)
    pairs = [_pair(float(i), float(i) + 1.0) for i in range(6)]
    for p in pairs:
        p[0].done = True
        res.submit(*p, ("k.gpu", ()), led, 1, 0)
    assert res.pending() == 4  # the two oldest were waited on
    assert pairs[0][1].synced == 1 and pairs[1][1].synced == 1
    assert led.count("k.gpu") == 2


def test_resolved_into_default_ledger_when_none(perf_ledger: perf.Ledger) -> None:
    res = _EventResolver()
    s, e = _pair(0.0, 1.0)
    s.done = e.done = True
    res.submit(s, e, ("d.gpu", ()), None, 1, 0)
    assert perf_ledger.count("d.gpu") == 1


def test_module_resolver_is_used_by_flush() -> None:
    assert _device_timing._RESOLVER.pending() == 0
    assert perf.flush_device_timings(wait=False) == 0
