"""Queue internals of the dynamic batcher: requests, length buckets, argument checks."""

from __future__ import annotations

import asyncio
import bisect
import inspect
import math
from collections import deque
from collections.abc import Iterator
from typing import Any

from ._batch_types import BatcherConfigError
from ._ledger import CANCELLED_LABEL, ERROR_LABEL, Labels, Ledger, SeriesKey

# request states
_QUEUED, _RUNNING, _DONE, _GONE = 0, 1, 2, 3
# outcomes
_OK, _FAILED, _TIMED_OUT = 0, 1, 2
_STOPPED, _STARTED = 0, 1
#: what a request's waiter carries unless the request succeeded (its result otherwise)
_NOT_OK: Any = object()


class _Req:
    __slots__ = (
        "deadline_ns", "end_ns", "enq_ns", "error", "item", "kind", "length", "result",
        "start_ns", "state", "waiter",
    )

    def __init__(
        self, item: Any, length: int, enq_ns: int, deadline_ns: int, waiter: Any
    ) -> None:
        self.item = item
        self.length = length
        self.enq_ns = enq_ns
        self.deadline_ns = deadline_ns  # 0: none
        self.waiter = waiter
        self.state = _QUEUED
        self.kind = _OK
        self.result: Any = _NOT_OK
        self.error: BaseException | None = None
        self.start_ns = 0
        self.end_ns = 0


class _Bucket:
    __slots__ = (
        "batches", "bound", "label", "labels", "live", "max_len", "padded", "prios", "q0",
        "queue_key", "queues", "real", "requests", "run_cancel_key", "run_err_key", "run_key",
        "stale",
    )

    def __init__(self, bound: float, label: str, base: Labels) -> None:
        self.bound = bound
        self.label = label
        self.labels: Labels = tuple(sorted((*base, ("bucket", label))))
        self.queue_key: SeriesKey = ("batch.queue", self.labels)
        self.run_key: SeriesKey = ("batch.run", self.labels)
        self.run_err_key: SeriesKey = ("batch.run", tuple(sorted((*self.labels, ERROR_LABEL))))
        self.run_cancel_key: SeriesKey = (
            "batch.run", tuple(sorted((*self.labels, CANCELLED_LABEL))))
        #: priority -> FIFO of requests; ``prios`` lists the priorities, highest first
        self.queues: dict[int, deque[_Req]] = {0: deque()}
        self.q0 = self.queues[0]  #: the priority-0 queue (the hot path's)
        self.prios: list[int] = [0]
        self.live = 0  # queued requests still waiting
        self.stale = 0  # cancelled/expired requests still sitting in the deques
        self.max_len = 0  # longest length queued since the bucket was last empty
        self.batches = self.requests = self.padded = self.real = 0

    def push(self, req: _Req, priority: int) -> None:
        q = self.queues.get(priority)
        if q is None:
            q = self.queues[priority] = deque()
            # prios is kept sorted highest first; new priorities are rare
            keys = [-p for p in self.prios]
            self.prios.insert(bisect.bisect_left(keys, -priority), priority)
        q.append(req)
        self.live += 1
        if req.length > self.max_len:
            self.max_len = req.length

    def oldest_ns(self) -> int:
        best = 0
        for p in self.prios:
            q = self.queues[p]
            while q and q[0].state != _QUEUED:
                q.popleft()
                self.stale -= 1
            if q and (not best or q[0].enq_ns < best):
                best = q[0].enq_ns
        return best

    def iter_queued(self) -> Iterator[_Req]:
        for p in self.prios:
            for r in self.queues[p]:
                if r.state == _QUEUED:
                    yield r

    def compact(self) -> None:
        for p in list(self.prios):
            q = self.queues[p]
            live = deque(r for r in q if r.state == _QUEUED)
            if live or p == 0:
                self.queues[p] = live
                if p == 0:
                    self.q0 = live
            else:
                del self.queues[p]
                self.prios.remove(p)
        self.stale = 0


def _append_many(ledger: Ledger, key: SeriesKey, durations: list[int], end_ns: int) -> None:
    """Record ``durations``, all ending at ``end_ns``: a batch's requests start and end
    together, so the two ledger records per request become two list extends per batch."""
    ledger._append_many(key, durations, end_ns)


def _is_async_callable(fn: object) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - callable objects with async __call__
    )


def _wake_future(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_result(_NOT_OK)


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BatcherConfigError(f"{name} must be an int >= {minimum}, got {value!r}")


def _check_timeout(timeout_ms: object) -> None:
    if timeout_ms is None:
        return
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, (int, float)) or not (
        0 < timeout_ms < math.inf
    ):
        raise BatcherConfigError(f"timeout_ms must be a number > 0 or None, got {timeout_ms!r}")
