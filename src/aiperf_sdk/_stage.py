"""``stage``: time a block or a function into the ledger, tied to the current request.

The hot path is two ``perf_counter_ns()`` reads, one ``ContextVar.get()``, one dict update
on the request (its per-stage breakdown) and one append to the series' buffer; histogram work
is folded in bulk later (see ``_ledger``). The decorator caches its series per ledger, so a
decorated call does no dictionary lookup by key.

When the optional C extension ``_speedups`` is built (it is by ``pip install``; set
``AIPERF_PURE_PYTHON=1`` to disable it), the ``with`` / ``async with`` block, the decorated
sync call and the recording of a decorated coroutine function run their common case in C: no
hooks, no exception. Every other case calls back into the Python code below, which stays the
reference implementation and the fallback.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncGenerator, Callable, Generator
from time import perf_counter_ns
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, cast

from . import _hooks
from ._ledger import (
    CANCELLED_LABEL,
    ERROR_LABEL,
    Labels,
    Ledger,
    SeriesKey,
    _default,
    _Series,
    _speedups,
    check_ledger,
    make_labels,
)
from ._request import _current

F = TypeVar("F", bound=Callable[..., Any])


def _outcome_key(name: str, labels: Labels, exc: BaseException) -> SeriesKey:
    pair = ERROR_LABEL if isinstance(exc, Exception) else CANCELLED_LABEL
    return (name, tuple(sorted((*labels, pair))))


def _record(name: str, key: SeriesKey, ledger: Ledger | None, duration: int, end: int) -> None:
    req = _current.get()
    if req is not None:
        stages = req.stages
        stages[name] += duration
        if ledger is None:
            ledger = req.ledger
    if ledger is None:
        ledger = _default[0]
    ledger._append(key, duration, end)


class _PyStageBase:
    """Pure-Python ``with``-block part of :class:`stage` (the reference implementation)."""

    __slots__ = ("_labels", "_ledger", "_name", "_t0", "_tokens")

    def __init__(self, name: str, *, ledger: Ledger | None = None, **labels: object) -> None:
        if type(name) is not str or not name:
            raise TypeError(f"stage name must be a non-empty str, got {name!r}")
        self._name = name
        self._labels: Labels = make_labels(labels) if labels else ()
        self._ledger = check_ledger(ledger, "stage()")
        self._t0 = 0
        self._tokens: list[tuple[_hooks.StageHook, object]] | None = None

    def __enter__(self) -> Any:
        if self._t0:
            raise RuntimeError(
                f"stage {self._name!r} object is already active; use a new perf.stage(...) "
                "per with-block"
            )
        if _hooks.HOOKS:
            _enter_hooks(self)
        self._t0 = perf_counter_ns()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        end = perf_counter_ns()
        duration = end - self._t0
        self._t0 = 0
        if exc is not None or self._labels or self._tokens:
            _exit_general(self, exc, end, duration)
            return
        name = self._name
        # -- hot path: _record() inlined --
        led = self._ledger
        req = _current.get()
        if req is not None:
            stages = req.stages
            stages[name] += duration
            if led is None:
                led = req.ledger
        if led is None:
            led = _default[0]
        series = led._by_name.get(name)  # str hashes are cached: cheaper than a tuple key
        if series is None:
            series = led._series_for((name, ()))
        series.add(duration, end)

    async def __aenter__(self) -> Any:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)


def _enter_hooks(self: Any) -> None:
    self._tokens = _hooks.hooks_start(self._name, self._labels, _current_id(), "stage")


def _exit_general(self: Any, exc: BaseException | None, end: int, duration: int) -> None:
    """``__exit__`` beyond the common case: labels, an exception, hooks."""
    name, labels = self._name, self._labels
    key = (name, labels) if exc is None else _outcome_key(name, labels, exc)
    _record(name, key, self._ledger, duration, end)
    if self._tokens:
        tokens, self._tokens = self._tokens, None
        _hooks.hooks_end(tokens, exc, end - duration, end)


if TYPE_CHECKING:
    _StageBase = _PyStageBase
else:
    # _ledger decided whether the C extension is loaded (and AIPERF_PURE_PYTHON honoured)
    if _speedups is None:
        _StageBase = _PyStageBase
    else:
        _StageBase = _speedups.StageBase
        _speedups.configure(
            _current, _default, _hooks.HOOKS, make_labels, _exit_general, _enter_hooks
        )

#: "c" when the C hot path is in use, "python" otherwise
IMPLEMENTATION = "python" if _speedups is None else "c"


class stage(_StageBase):
    """Time a block (``with`` / ``async with``) or a function into the ledger.

    As a decorator it works on sync and async functions and on sync and async generators
    (a generator's stage is the time spent inside its body, summed over resumptions; one
    closed early records what ran). A body that raises records its duration with the label
    ``outcome="error"`` (``"cancelled"`` for cancellation and other ``BaseException``) and
    re-raises unchanged.

    Example::

        @perf.stage("prefill", model="chat_v3")
        def prefill(tokens): ...

        with perf.stage("tokenize"):
            ids = tokenizer(text)

    Args:
        name: stage name (free string; ``e2e``, ``ttft``, ``itl``, ``tpot`` are filled by
            ``request()`` and ``stream()``).
        ledger: ledger to record into; default: the request's, else the default ledger.
        **labels: labels of the series (bounded values only).

    Raises:
        TypeError: ``name`` is not a non-empty string, or ``ledger`` is not a Ledger.
        RuntimeError: one stage object entered again while already active (create one per
            ``with``; a decorated function is safe to call concurrently).
    """

    __slots__ = ()

    @property
    def _key(self) -> SeriesKey:
        return (self._name, self._labels)

    # -- context manager: _StageBase (``with`` and ``async with``) ----------------------

    if TYPE_CHECKING:
        def __enter__(self) -> stage: ...
        async def __aenter__(self) -> stage: ...

    # -- decorator ------------------------------------------------------------------------

    def __call__(self, fn: F) -> F:
        if inspect.isasyncgenfunction(fn):
            return cast(F, self._wrap_asyncgen(fn))
        if inspect.isgeneratorfunction(fn):
            return cast(F, self._wrap_gen(fn))
        if inspect.iscoroutinefunction(fn):
            return cast(F, self._wrap_async(fn))
        if not callable(fn):
            raise TypeError(f"@stage decorates a callable, got {type(fn).__name__}")
        return cast(F, self._wrap_sync(fn))

    def _wrap_sync(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        name, labels, key, ledger = self._name, self._labels, self._key, self._ledger
        if _speedups is not None:
            slow = _SlowSync(fn, name, labels, key, ledger)
            timed = _speedups.timed(fn, name, key if labels else None, ledger, slow)
            return functools.update_wrapper(timed, fn)

        cached_ledger: Ledger | None = None  # the ledger last recorded into ...
        cached_series: _Series | None = None  # ... and its series for `key`

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            nonlocal cached_ledger, cached_series
            if _hooks.HOOKS:
                return _call_hooked(fn, name, labels, key, ledger, args, kwargs)
            t0 = perf_counter_ns()
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                end = perf_counter_ns()
                _record(name, _outcome_key(name, labels, exc), ledger, end - t0, end)
                raise
            end = perf_counter_ns()
            # -- hot path: _record() inlined, with the series cached --
            duration = end - t0
            led = ledger
            req = _current.get()
            if req is not None:
                stages = req.stages
                stages[name] += duration
                if led is None:
                    led = req.ledger
            if led is None:
                led = _default[0]
            if led is cached_ledger and cached_series is not None:
                series = cached_series
            else:
                series = cached_series = led._series_for(key)
                cached_ledger = led
            series.add(duration, end)
            return result

        return wrapper

    def _wrap_async(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        name, labels, key, ledger = self._name, self._labels, self._key, self._ledger
        hooks = _hooks.HOOKS  # one list for the life of the process, mutated in place
        # the C recorder of a decorated call (series cached per ledger; reads the end time)
        record_since = (
            None if _speedups is None
            else _speedups.timed(fn, name, key if labels else None, ledger, None).record_since
        )

        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            if hooks or record_since is None:
                return await _call_async_general(fn, name, labels, key, ledger, args, kwargs)
            t0 = perf_counter_ns()
            try:
                result = await fn(*args, **kwargs)
            except BaseException as exc:
                end = perf_counter_ns()
                _record(name, _outcome_key(name, labels, exc), ledger, end - t0, end)
                raise
            record_since(t0)
            return result

        return wrapper

    def _wrap_gen(self, fn: Callable[..., Generator[Any, Any, Any]]) -> Callable[..., Any]:
        name, labels, key, ledger = self._name, self._labels, self._key, self._ledger

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            gen = fn(*args, **kwargs)
            busy = 0
            first = 0  # perf_counter_ns of the first resumption (the span's start)
            failure: BaseException | None = None
            to_send: Any = None
            to_throw: BaseException | None = None
            try:
                while True:
                    t0 = perf_counter_ns()
                    if not first:
                        first = t0
                    try:
                        if to_throw is not None:
                            exc, to_throw = to_throw, None
                            item = gen.throw(exc)
                        else:
                            item = gen.send(to_send)
                    except StopIteration as stop:
                        busy += perf_counter_ns() - t0
                        return stop.value
                    except BaseException as exc:
                        busy += perf_counter_ns() - t0
                        failure = exc
                        raise
                    busy += perf_counter_ns() - t0
                    try:
                        to_send = yield item
                    except GeneratorExit:
                        t0 = perf_counter_ns()
                        try:
                            gen.close()
                        finally:
                            busy += perf_counter_ns() - t0
                        raise
                    except BaseException as exc:
                        to_send, to_throw = None, exc
            finally:
                end = perf_counter_ns()
                k = key if failure is None else _outcome_key(name, labels, failure)
                _record(name, k, ledger, busy, end)
                if _hooks.HOOKS:
                    rid = _current_id()
                    _hooks.hooks_sample(name, k[1], rid, busy, failure)
                    if first:  # a span over the generator's lifetime; the ledger has busy time
                        _hooks.hooks_span(name, labels, rid, first, end, failure)

        return wrapper

    def _wrap_asyncgen(self, fn: Callable[..., AsyncGenerator[Any, Any]]) -> Callable[..., Any]:
        name, labels, key, ledger = self._name, self._labels, self._key, self._ledger

        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> AsyncGenerator[Any, Any]:
            agen = fn(*args, **kwargs)
            busy = 0
            first = 0  # perf_counter_ns of the first resumption (the span's start)
            failure: BaseException | None = None
            to_send: Any = None
            to_throw: BaseException | None = None
            try:
                while True:
                    t0 = perf_counter_ns()
                    if not first:
                        first = t0
                    try:
                        if to_throw is not None:
                            exc, to_throw = to_throw, None
                            item = await agen.athrow(exc)
                        else:
                            item = await agen.asend(to_send)
                    except StopAsyncIteration:
                        busy += perf_counter_ns() - t0
                        return
                    except BaseException as exc:
                        busy += perf_counter_ns() - t0
                        failure = exc
                        raise
                    busy += perf_counter_ns() - t0
                    try:
                        to_send = yield item
                    except GeneratorExit:
                        t0 = perf_counter_ns()
                        try:
                            await agen.aclose()
                        finally:
                            busy += perf_counter_ns() - t0
                        raise
                    except BaseException as exc:
                        to_send, to_throw = None, exc
            finally:
                end = perf_counter_ns()
                k = key if failure is None else _outcome_key(name, labels, failure)
                _record(name, k, ledger, busy, end)
                if _hooks.HOOKS:
                    rid = _current_id()
                    _hooks.hooks_sample(name, k[1], rid, busy, failure)
                    if first:  # a span over the generator's lifetime; the ledger has busy time
                        _hooks.hooks_span(name, labels, rid, first, end, failure)

        return wrapper

    def __repr__(self) -> str:
        return f"stage({self._name!r}, labels={dict(self._labels)!r})"


# the C base's __init__ has no introspectable signature; give help()/IDEs the Python one
_init_sig = inspect.signature(_PyStageBase.__init__)
stage.__signature__ = _init_sig.replace(  # type: ignore[attr-defined]
    parameters=list(_init_sig.parameters.values())[1:],
    return_annotation=inspect.Signature.empty,
)


class _SlowSync:
    """What the C timer of a decorated sync call hands back to Python: the hooked call, and
    the recording of a body that raised (outcome label)."""

    __slots__ = ("fn", "key", "labels", "ledger", "name")

    def __init__(
        self, fn: Callable[..., Any], name: str, labels: Labels, key: SeriesKey,
        ledger: Ledger | None,
    ) -> None:
        self.fn, self.name, self.labels, self.key, self.ledger = fn, name, labels, key, ledger

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _call_hooked(self.fn, self.name, self.labels, self.key, self.ledger, args, kwargs)

    def record_error(self, exc: BaseException, end: int, duration: int) -> None:
        _record(self.name, _outcome_key(self.name, self.labels, exc), self.ledger, duration, end)


async def _call_async_general(
    fn: Callable[..., Any],
    name: str,
    labels: Labels,
    key: SeriesKey,
    ledger: Ledger | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """A decorated coroutine function's call with hooks (and the pure-Python path)."""
    tokens = _hooks.hooks_start(name, labels, _current_id(), "stage") if _hooks.HOOKS else None
    t0 = perf_counter_ns()
    try:
        result = await fn(*args, **kwargs)
    except BaseException as exc:
        end = perf_counter_ns()
        _record(name, _outcome_key(name, labels, exc), ledger, end - t0, end)
        if tokens:
            _hooks.hooks_end(tokens, exc, t0, end)
        raise
    end = perf_counter_ns()
    _record(name, key, ledger, end - t0, end)
    if tokens:
        _hooks.hooks_end(tokens, None, t0, end)
    return result


def _current_id() -> str | None:
    req = _current.get()
    return None if req is None else req.id


def _call_hooked(
    fn: Callable[..., Any],
    name: str,
    labels: Labels,
    key: SeriesKey,
    ledger: Ledger | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    tokens = _hooks.hooks_start(name, labels, _current_id(), "stage")
    t0 = perf_counter_ns()
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:
        end = perf_counter_ns()
        _record(name, _outcome_key(name, labels, exc), ledger, end - t0, end)
        _hooks.hooks_end(tokens, exc, t0, end)
        raise
    end = perf_counter_ns()
    _record(name, key, ledger, end - t0, end)
    _hooks.hooks_end(tokens, None, t0, end)
    return result
