"""``@batched``: turn a batch function into a function of one item, batched dynamically.

The decorated function starts its :class:`DynamicBatcher` lazily, on the first call in each
event loop, as a background task of that loop (``asyncio`` task, or a trio system task), so
it is a drop-in replacement with no ``async with`` at the call sites. When the loop ends the
background task is cancelled and anything still queued gets :class:`BatcherClosedError`;
``await fn.aclose()`` drains and stops it explicitly.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any, Generic, Literal, TypeVar

import anyio

from ._batch_types import BatcherClosedError, BatcherStats, BatcherUsageError
from ._batcher import DynamicBatcher
from ._ledger import Ledger

T = TypeVar("T")
R = TypeVar("R")

_log = logging.getLogger("aiperf_sdk")


def _current_loop() -> object:
    loop = asyncio._get_running_loop()
    if loop is not None:
        return loop
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            return trio.lowlevel.current_trio_token()
        except RuntimeError:
            pass
    raise BatcherUsageError("a @batched function must be awaited inside a running asyncio "
                            "or trio event loop")


class _Entry:
    __slots__ = ("batcher", "done", "failure", "ready", "stop", "task")

    def __init__(self, batcher: DynamicBatcher[Any, Any]) -> None:
        self.batcher = batcher
        self.ready = anyio.Event()
        self.stop = anyio.Event()
        self.done = anyio.Event()
        self.failure: BaseException | None = None
        self.task: object = None  # the asyncio task serving it (a strong reference)


class BatchedFunction(Generic[T, R]):
    """A batch function made callable with one item; see :func:`batched`."""

    def __init__(self, fn: Callable[[list[T]], Any], config: dict[str, Any]) -> None:
        DynamicBatcher(fn, **config)  # validate the configuration now, at decoration time
        self._fn = fn
        self._config = config
        self._entries: dict[object, _Entry] = {}
        self._last: DynamicBatcher[T, R] | None = None
        functools.update_wrapper(self, fn)

    async def __call__(self, item: T, *, timeout_ms: float | None = None,
                       priority: int = 0) -> R:
        """Batch ``item`` with concurrent calls; raises what ``DynamicBatcher.submit``
        raises."""
        entry = self._entries.get(_current_loop())
        if entry is None or not entry.ready.is_set():
            entry = await self._start()
        result: R = await entry.batcher.submit(item, timeout_ms=timeout_ms, priority=priority)
        return result

    @property
    def batcher(self) -> DynamicBatcher[T, R] | None:
        """The batcher of the current event loop (or the last one started), or None."""
        try:
            entry = self._entries.get(_current_loop())
        except BatcherUsageError:
            entry = None
        return entry.batcher if entry is not None else self._last

    @property
    def stats(self) -> BatcherStats | None:
        """``batcher.stats`` of :attr:`batcher` (None before the first call)."""
        b = self.batcher
        return None if b is None else b.stats

    async def aclose(self) -> None:
        """Drain and stop the current event loop's batcher; the next call starts a new one."""
        entry = self._entries.pop(_current_loop(), None)
        if entry is not None:
            entry.stop.set()
            await entry.done.wait()

    async def _start(self) -> _Entry:
        loop = _current_loop()
        entry = self._entries.get(loop)
        if entry is None:
            self._purge()
            batcher: DynamicBatcher[T, R] = DynamicBatcher(self._fn, **self._config)
            entry = self._entries[loop] = _Entry(batcher)
            self._last = batcher
            if isinstance(loop, asyncio.AbstractEventLoop):
                entry.task = loop.create_task(self._serve(entry))
            else:
                import trio

                trio.lowlevel.spawn_system_task(self._serve, entry)
        await entry.ready.wait()
        if entry.failure is not None:
            raise BatcherClosedError("the batcher failed to start") from entry.failure
        return entry

    def _purge(self) -> None:
        for key, entry in list(self._entries.items()):
            closed = isinstance(key, asyncio.AbstractEventLoop) and key.is_closed()
            if closed or entry.done.is_set():
                del self._entries[key]

    async def _serve(self, entry: _Entry) -> None:
        try:
            async with entry.batcher:
                entry.ready.set()
                await entry.stop.wait()
        except Exception as exc:  # never crash the loop from a background task
            entry.failure = exc
            _log.exception("aiperf_sdk: background batcher of %r failed", self._fn)
        finally:
            entry.ready.set()
            entry.done.set()

    def __repr__(self) -> str:
        return f"batched({getattr(self._fn, '__qualname__', self._fn)!r})"


def batched(
    *,
    max_batch_size: int = 16,
    max_batch_tokens: int | None = None,
    max_wait_ms: float = 8.0,
    length_fn: Callable[[Any], int] | None = None,
    buckets: Sequence[int] | Literal["pow2"] | None = None,
    max_queue_size: int = 1024,
    timeout_ms: float | None = None,
    max_concurrent_batches: int = 1,
    deadline_admission: bool = False,
    ledger: Ledger | None = None,
    labels: dict[str, object] | None = None,
) -> Callable[[Callable[[list[T]], Any]], BatchedFunction[T, Any]]:
    """Decorate a batch function (``list[item] -> list[result]``) so callers pass ONE item.

    Concurrent calls are grouped by a :class:`DynamicBatcher` with these arguments (see it
    for their meaning). The batcher starts on the first call in each event loop, in the
    background; ``.stats`` reads its counters, ``await f.aclose()`` drains and stops it.

    Example::

        @perf.batched(max_batch_size=16, max_wait_ms=5, length_fn=len, buckets="pow2")
        async def embed(texts: list[str]) -> list[list[float]]: ...

        vector = await embed("one text")

    Raises:
        BatcherConfigError: an argument is invalid (at decoration time).
    """
    config: dict[str, Any] = dict(
        max_batch_size=max_batch_size, max_batch_tokens=max_batch_tokens,
        max_wait_ms=max_wait_ms, length_fn=length_fn, buckets=buckets,
        max_queue_size=max_queue_size, timeout_ms=timeout_ms,
        max_concurrent_batches=max_concurrent_batches, deadline_admission=deadline_admission,
        ledger=ledger, labels=labels,
    )

    def decorate(fn: Callable[[list[T]], Any]) -> BatchedFunction[T, Any]:
        return BatchedFunction(fn, config)

    return decorate
