"""The optional C hot path (aiperf_sdk._speedups) against the pure-Python reference.

CI also runs the core test modules with AIPERF_PURE_PYTHON=1 (scripts/test.sh), so both
implementations pass the same behavioural tests; this module checks that they record
exactly the same things and that the C path is really built and used where it can be.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aiperf_sdk as perf
from aiperf_sdk import _hooks, _stage

C_BUILT = _stage._speedups is not None


def test_c_hot_path_is_built_where_a_compiler_exists() -> None:
    if os.environ.get("AIPERF_PURE_PYTHON", "").strip() not in ("", "0"):
        pytest.skip("AIPERF_PURE_PYTHON is set: the pure-Python path is under test")
    if not sys.platform.startswith("linux"):
        pytest.skip("the C hot path is used on Linux only")
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler here: the optional extension cannot be built")
    assert _stage.IMPLEMENTATION == "c"
    assert isinstance(perf.stage("x"), _stage._speedups.StageBase)
    assert type(perf.Ledger.__mro__[1]).__name__ == "type"
    assert perf.Ledger.__mro__[1] is _stage._speedups.LedgerBase


class _PyStage(_stage._PyStageBase):
    """The reference with-block implementation, for side-by-side comparison."""

    __slots__ = ()


def _scenario(make: Callable[..., Any], ledger: perf.Ledger) -> perf.Request:
    with perf.request(id="r1", ledger=ledger) as req:
        for _ in range(3):
            with make("plain"):
                pass
        with make("labelled", model="m", bucket="64"):
            pass
        with pytest.raises(ValueError), make("failing"):
            raise ValueError("x")
        other = perf.Ledger()
        with make("explicit", ledger=other):
            pass
        assert other.count("explicit") == 1
    with make("outside", ledger=ledger):
        pass
    return req


@pytest.mark.skipif(not C_BUILT, reason="C extension not built")
def test_with_block_c_and_python_record_the_same() -> None:
    c_ledger, py_ledger = perf.Ledger(), perf.Ledger()
    c_req = _scenario(perf.stage, c_ledger)
    py_req = _scenario(_PyStage, py_ledger)
    assert sorted(c_req.stages) == sorted(py_req.stages)
    for ledger in (c_ledger, py_ledger):
        assert ledger.count("plain") == 3
        assert ledger.count("labelled", model="m", bucket="64") == 1
        assert ledger.count("failing", outcome="error") == 1 and ledger.count("failing") == 0
        assert ledger.count("outside") == 1
    assert [(r.stage, r.labels, r.count) for r in c_ledger.summary().rows] == [
        (r.stage, r.labels, r.count) for r in py_ledger.summary().rows
    ]
    assert c_ledger.slowest()[0].stages.keys() == py_ledger.slowest()[0].stages.keys()


@pytest.mark.skipif(not C_BUILT, reason="C extension not built")
def test_decorator_c_and_python_record_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    def body(x: int, *, fail: bool = False) -> int:
        """doc"""
        if fail:
            raise KeyError(x)
        return x + 1

    def run(deco: Callable[..., Any], ledger: perf.Ledger) -> None:
        with perf.request(ledger=ledger):
            assert deco(body)(1) == 2
            assert deco(body)(x=2) == 3
            with pytest.raises(KeyError):
                deco(body)(3, fail=True)

    c_ledger = perf.Ledger()
    c_deco = perf.stage("call", model="m")
    wrapped = c_deco(body)
    assert type(wrapped).__name__ == "Timed"
    assert wrapped.__name__ == "body" and wrapped.__doc__ == "doc"
    assert wrapped.__wrapped__ is body  # type: ignore[attr-defined]
    run(c_deco, c_ledger)

    monkeypatch.setattr(_stage, "_speedups", None)
    py_ledger = perf.Ledger()
    py_deco = perf.stage("call", model="m")
    assert type(py_deco(body)).__name__ == "function"
    run(py_deco, py_ledger)
    for ledger in (c_ledger, py_ledger):
        assert ledger.count("call", model="m") == 2
        assert ledger.count("call", model="m", outcome="error") == 1


def test_decorated_method_receives_self() -> None:
    class Model:
        def __init__(self) -> None:
            self.k = 10

        @perf.stage("method")
        def infer(self, x: int) -> int:
            return self.k + x

    ledger = perf.Ledger()
    previous = perf.set_default_ledger(ledger)
    try:
        assert Model().infer(1) == 11
        assert Model.infer(Model(), 2) == 12
    finally:
        perf.set_default_ledger(previous)
    assert ledger.count("method") == 2


class _Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def start(self, name: str, labels: Any, request_id: Any, kind: str) -> object:
        self.events.append(("start", name))
        return name

    def end(self, token: object, error: BaseException | None) -> None:
        self.events.append(("end", str(token)))


def test_hooks_are_called_from_the_c_path_too() -> None:
    hook = _Recorder()
    _hooks.add_hook(hook)
    try:
        ledger = perf.Ledger()

        @perf.stage("deco", ledger=ledger)
        def f() -> None:
            pass

        with perf.stage("block", ledger=ledger):
            pass
        f()
    finally:
        _hooks.remove_hook(hook)
    assert hook.events == [("start", "block"), ("end", "block"), ("start", "deco"),
                           ("end", "deco")]
    assert ledger.count("block") == 1 and ledger.count("deco") == 1
    assert not _hooks.HOOKS


def test_ledger_record_paths() -> None:
    import numpy as np

    ledger = perf.Ledger()
    ledger.record("s", 5)  # plain int, no labels: the C fast path where built
    ledger.record("s", np.int64(7))  # numpy int: the Python path
    ledger.record("s", 9, model="m")  # labels: the Python path
    ledger.record("s", 2**70)  # beyond int64: Python path, clamped
    assert ledger.count("s") == 4 and ledger.count("s", model="m") == 1
    assert ledger.clamped() == 1
    for bad in (-1, True, 1.0):
        with pytest.raises(perf.InvalidDurationError):
            ledger.record("s", bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ledger.record("", 1)
    with pytest.raises(TypeError):
        ledger.record("s")  # type: ignore[call-arg]
    assert ledger.count("s") == 4


def test_decorator_follows_the_default_ledger_and_survives_reset() -> None:
    a, b = perf.Ledger(), perf.Ledger()

    @perf.stage("f")
    def f() -> None:
        pass

    previous = perf.set_default_ledger(a)
    try:
        f()
        f()
        perf.set_default_ledger(b)  # the decorator's cached series must not stick to `a`
        f()
        a.reset()
        perf.set_default_ledger(a)
        f()  # the series object of `a` survives reset() and keeps counting
    finally:
        perf.set_default_ledger(previous)
    assert a.count("f") == 1 and b.count("f") == 1


class _GatedRecorder(_Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.on = False
        self.gate = (self, "on")


@pytest.mark.skipif(not C_BUILT, reason="C extension not built")
def test_gated_off_hooks_keep_the_c_fast_path() -> None:
    """A profiler hook with no profiler running (gate false) is skipped by the C path; once
    its gate turns true it is called like any hook."""
    hook = _GatedRecorder()
    _hooks.add_hook(hook)
    try:
        ledger = perf.Ledger()

        @perf.stage("deco", ledger=ledger)
        def f() -> None:
            pass

        with perf.stage("block", ledger=ledger):
            pass
        f()
        assert hook.events == []
        hook.on = True
        with perf.stage("block", ledger=ledger):
            pass
        f()
        assert hook.events == [("start", "block"), ("end", "block"), ("start", "deco"),
                               ("end", "deco")]
    finally:
        _hooks.remove_hook(hook)
    assert ledger.count("block") == 2 and ledger.count("deco") == 2


def test_stage_signature_is_introspectable() -> None:
    import inspect

    params = inspect.signature(perf.stage).parameters
    assert list(params) == ["name", "ledger", "labels"]
    assert params["ledger"].kind is inspect.Parameter.KEYWORD_ONLY


@pytest.mark.skipif(not C_BUILT, reason="C extension not built")
@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2**62), min_size=1, max_size=500),
       st.sampled_from([2, 3, 4]))
def test_c_fold_equals_the_numpy_fold(values: list[int], sig: int) -> None:
    """_speedups.fold (a taken C buffer into the HDR counts) against Histogram.add_values."""
    import numpy as np

    from aiperf_sdk._hdr import HdrLayout, Histogram

    layout = HdrLayout(3_600_000 * 1_000_000, sig)
    raw = np.asarray(values, dtype=np.int64).tobytes()
    c_hist, np_hist = Histogram(layout), Histogram(layout)
    c_hist.add_values(np.asarray([5, 7], dtype=np.int64))  # fold into non-empty counts too
    np_hist.add_values(np.asarray([5, 7], dtype=np.int64))
    c_uniq, c_cnt = c_hist.add_raw(raw, _stage._speedups.fold)
    np_uniq, np_cnt = np_hist.add_values(np.frombuffer(raw, dtype=np.int64))
    assert c_uniq.tolist() == np_uniq.tolist() and c_cnt.tolist() == np_cnt.tolist()
    n = len(np_hist.counts)
    assert c_hist.counts[:n].tolist() == np_hist.counts.tolist()
    assert not c_hist.counts[n:].any()
    for field in ("total", "sum_ns", "min_ns", "max_ns", "clamped"):
        assert getattr(c_hist, field) == getattr(np_hist, field), field


@pytest.mark.skipif(not C_BUILT, reason="C extension not built")
def test_c_series_rejects_bad_values_and_changes_nothing() -> None:
    ledger = perf.Ledger(buffer_size=8)
    ledger.record("s", 1)
    series = ledger._by_name["s"]
    with pytest.raises(ValueError):
        series.add(-1, 0)
    with pytest.raises(TypeError):
        series.add_many([1, "x"], 0)  # converted first: the good value is not added either
    with pytest.raises(ValueError):
        series.add_many([1, 2**70], 0)
    with pytest.raises(TypeError):
        _stage._speedups.fold(b"\x00" * 8, [0, 0], 10, 1, 3, 2)  # counts: no int64 buffer
    assert series.pending == 1 and ledger.count("s") == 1
    series.add_many([2, 3, 4], 0)
    assert ledger.count("s") == 4 and ledger.percentile("s", 100) == 4 / 1e6


@pytest.mark.skipif(not C_BUILT, reason="C extension not built")
def test_uninitialised_c_series_raises_instead_of_crashing() -> None:
    series = _stage._speedups.SeriesBase.__new__(_stage._speedups.SeriesBase)
    for call in (lambda: series.add(1, 5), lambda: series.take(), lambda: series.reset(),
                 lambda: series.add_many([1], 5)):
        with pytest.raises(RuntimeError, match="not initialised"):
            call()
    with pytest.raises(ValueError):
        _stage._speedups.SeriesBase(perf.Ledger(), 2**40, 10**9, 0)  # buffer beyond 2**24
    with pytest.raises(ValueError, match="layout"):
        _stage._speedups.fold(b"\x00" * 8, bytearray(64), 10**6, 10, 1, 1024)
