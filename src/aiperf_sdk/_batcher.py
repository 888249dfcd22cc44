"""``DynamicBatcher``: group concurrent single-item calls into length-bucketed batches.

Everything that touches the queue runs on the event loop's thread (a sync ``fn`` runs in an
anyio worker thread, but its results are delivered back on the loop), so no locks are needed.

Hot path of ``submit``: one length call, one bucket lookup, one deque append, one waiter (an
asyncio future that carries the result, or an ``anyio.Event`` elsewhere). Batch formation
happens in the worker tasks — one per ``max_concurrent_batches`` slot — and only when a slot
is free, so while the model is busy requests keep accumulating into the next batch instead
of being cut into small ones. The two stage records of each request (``batch.queue``,
``batch.run``) are written per batch: one buffer extend per series, since a batch's requests
share their start and end.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from time import perf_counter_ns
from types import TracebackType
from typing import Any, Generic, Literal, TypeVar

import anyio
import anyio.abc
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

from ._batch_queue import (
    _DONE,
    _FAILED,
    _GONE,
    _NOT_OK,
    _QUEUED,
    _RUNNING,
    _STARTED,
    _STOPPED,
    _TIMED_OUT,
    _append_many,
    _Bucket,
    _check_int,
    _check_timeout,
    _is_async_callable,
    _Req,
    _wake_future,
)
from ._batch_types import (
    BatcherClosedError,
    BatcherConfigError,
    BatcherStats,
    BatcherUsageError,
    BatchResultMismatchError,
    BucketStats,
    CostModel,
    DeadlineExceededError,
    QueueFullError,
    format_report,
)
from ._ledger import Ledger, SeriesKey, _default, make_labels
from ._request import _current
from ._stage import _outcome_key, _record

T = TypeVar("T")
R = TypeVar("R")

#: a formed batch: requests, their items, their queue waits (ns), longest length, total length
_Formed = tuple[list[_Req], list[Any], list[int], int, int]

class DynamicBatcher(Generic[T, R]):
    """Group concurrent single-item calls into batches of similar length for ``fn``.

    ``fn`` (async, or sync — run in a worker thread) takes a list of items and returns a list
    of results of the same length and order; an ``Exception`` instance in place of one
    result is raised to that item's caller only. A bucket's batch is dispatched, when a
    ``max_concurrent_batches`` slot is free, as soon as the first of these holds: it has
    ``max_batch_size`` items; the next item would push ``len(batch) * longest`` past
    ``max_batch_tokens``; its oldest item has waited ``max_wait_ms``. Within a bucket higher
    ``priority`` goes first, then arrival order; among ready buckets the one holding the
    oldest request goes first, so no bucket starves.

    Example::

        batcher = perf.DynamicBatcher(embed_batch, max_batch_size=16, max_wait_ms=8.0,
                                      length_fn=len, buckets="pow2", max_batch_tokens=4096)
        async with batcher:                      # stop drains what is queued, then closes
            vector = await batcher.submit(text, timeout_ms=50)

        # from threads of a synchronous server:
        with batcher.run_in_thread():            # event loop in a background thread
            vector = batcher.submit_sync(text)   # blocking; any thread

    Args:
        fn: ``list[item] -> list[result]`` (async or sync).
        max_batch_size: most items per batch.
        max_batch_tokens: cap on padded tokens per batch (needs ``length_fn``); an item
            longer than the cap runs in a batch of its own.
        max_wait_ms: longest the oldest queued item waits for its batch to start while a
            slot is free (0: dispatch whatever is queued at once).
        length_fn: ``item -> int`` length; enables token accounting and bucketing.
        buckets: increasing upper bounds of length buckets (longer items share an ``"inf"``
            bucket), or ``"pow2"`` (bounds 1, 2, 4, 8, ...); items only batch with their
            bucket. None: one bucket.
        max_queue_size: queued (not yet running) requests beyond which ``submit`` raises
            :class:`QueueFullError` at once.
        timeout_ms: default per-request deadline, from submit to result (None: no deadline).
        max_concurrent_batches: batches running at once.
        deadline_admission: reject at submit, with :class:`DeadlineExceededError`, a
            request whose deadline the learned batch-cost model says cannot be met given
            the work queued ahead of it (load shedding). Off by default.
        ledger: ledger for the ``batch.queue`` / ``batch.run`` stages (default: the
            request's, else the default ledger).
        labels: extra labels on those stages (bounded values, e.g. a model name).

    Raises:
        BatcherConfigError: an argument is invalid.
    """

    def __init__(
        self,
        fn: Callable[[list[T]], Any],
        *,
        max_batch_size: int = 16,
        max_batch_tokens: int | None = None,
        max_wait_ms: float = 8.0,
        length_fn: Callable[[T], int] | None = None,
        buckets: Sequence[int] | Literal["pow2"] | None = None,
        max_queue_size: int = 1024,
        timeout_ms: float | None = None,
        max_concurrent_batches: int = 1,
        deadline_admission: bool = False,
        ledger: Ledger | None = None,
        labels: Mapping[str, object] | None = None,
    ) -> None:
        if not callable(fn):
            raise BatcherConfigError(f"fn must be callable, got {type(fn).__name__}")
        _check_int("max_batch_size", max_batch_size, 1)
        _check_int("max_queue_size", max_queue_size, 1)
        _check_int("max_concurrent_batches", max_concurrent_batches, 1)
        if max_batch_tokens is not None:
            _check_int("max_batch_tokens", max_batch_tokens, 1)
            if length_fn is None:
                raise BatcherConfigError("max_batch_tokens needs length_fn (item -> length)")
        if isinstance(max_wait_ms, bool) or not isinstance(max_wait_ms, (int, float)) or not (
            0 <= max_wait_ms < math.inf
        ):
            raise BatcherConfigError(f"max_wait_ms must be a number >= 0, got {max_wait_ms!r}")
        _check_timeout(timeout_ms)
        if length_fn is not None and not callable(length_fn):
            raise BatcherConfigError("length_fn must be callable (item -> int)")
        if ledger is not None and not isinstance(ledger, Ledger):
            raise BatcherConfigError(f"ledger must be a perf.Ledger, got {type(ledger).__name__}")
        self._bounds: list[int] | None = None
        self._pow2 = False
        if buckets is not None:
            if length_fn is None:
                raise BatcherConfigError("buckets need length_fn (item -> length)")
            if buckets == "pow2":
                self._pow2 = True
            elif isinstance(buckets, str) or not isinstance(buckets, Sequence) or not buckets:
                raise BatcherConfigError(
                    f'buckets must be "pow2" or a non-empty list of ints, got {buckets!r}')
            else:
                bounds: list[object] = list(buckets)
                ints = [b for b in bounds if not isinstance(b, bool) and isinstance(b, int)]
                if len(ints) != len(bounds) or ints[0] < 1 or any(
                    b >= c for b, c in itertools.pairwise(ints)
                ):
                    raise BatcherConfigError(
                        f"buckets must be strictly increasing positive ints, got {buckets!r}")
                self._bounds = ints
        self._fn = fn
        self._is_async = _is_async_callable(fn)
        self._length_fn = length_fn
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self.max_wait_ms = float(max_wait_ms)
        self.max_queue_size = max_queue_size
        self.timeout_ms = timeout_ms
        self.max_concurrent_batches = max_concurrent_batches
        self.deadline_admission = deadline_admission
        self._wait_ns = int(max_wait_ms * 1e6)
        self._cap = max_batch_tokens or 0
        self._ledger = ledger
        self._base_labels = make_labels(labels or {})
        self._buckets: dict[float, _Bucket] = {}
        self._bucket_list: list[_Bucket] = []
        if self._bounds is not None:
            for b in self._bounds:
                self._bucket(float(b), str(b))
            self._bucket(math.inf, "inf")
        elif not self._pow2:
            self._bucket(math.inf, "all")
        #: the only bucket when there is no bucketing (skips the lookup on the hot path)
        self._single = self._bucket_list[0] if len(self._bucket_list) == 1 else None
        self._cost = CostModel()
        self._counts = [0] * 7  # submitted completed failed rejected shed timed_out cancelled
        self._sizes: dict[int, int] = {}
        self._state = _STOPPED
        self._closing = False
        self._open = False  #: accepting submits: started and not closing (one hot-path check)
        self._queued = 0
        self._running: dict[int, tuple[int, float]] = {}  # batch id -> (start_ns, predicted)
        self._batch_seq = 0
        self._wake: Any = None  # the waiter a worker sleeps on while nothing is ready
        self._wake_timed = False  # that worker also wakes at a due time
        self._tg: anyio.abc.TaskGroup | None = None
        self._form_lock: anyio.Lock | None = None
        self._token: anyio.lowlevel.EventLoopToken | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0

    # -- lifecycle --------------------------------------------------------------------------

    async def __aenter__(self) -> DynamicBatcher[T, R]:
        if self._state != _STOPPED:
            raise BatcherUsageError("this DynamicBatcher is already running")
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None  # not asyncio: waiters are anyio Events
        self._token = anyio.lowlevel.current_token()
        self._loop_thread = threading.get_ident()
        self._form_lock = anyio.Lock() if self.max_concurrent_batches > 1 else None
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        self._closing = False
        self._state = _STARTED
        self._open = True
        for _ in range(self.max_concurrent_batches):
            tg.start_soon(self._worker)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        """Stop: reject new requests, drain the queue through ``fn``, wait for the batches."""
        self._closing = True
        self._open = False
        self._notify()
        tg, self._tg = self._tg, None
        cancelled = exc is not None and isinstance(exc, anyio.get_cancelled_exc_class())
        try:
            if tg is not None:
                if cancelled:
                    return await tg.__aexit__(exc_type, exc, tb)
                await tg.__aexit__(None, None, None)
            return None
        finally:
            self._fail_queued(BatcherClosedError("the batcher stopped before this request ran"))
            self._state = _STOPPED
            self._token = None

    @property
    def running(self) -> bool:
        """True between start and the end of stop."""
        return self._state == _STARTED

    @contextmanager
    def run_in_thread(self, backend: str = "asyncio") -> Iterator[DynamicBatcher[T, R]]:
        """Run the batcher on an event loop in a background thread, for synchronous callers.

        Inside the ``with``, :meth:`submit_sync` works from any thread; leaving it drains
        the queue and stops the loop.

        Example::

            with batcher.run_in_thread():
                pool.map(batcher.submit_sync, texts)
        """
        with anyio.from_thread.start_blocking_portal(backend) as portal, \
                portal.wrap_async_context_manager(self):
            yield self

    # -- submitting -------------------------------------------------------------------------

    async def submit(self, item: T, *, timeout_ms: float | None = None, priority: int = 0) -> R:
        """Queue one item and wait for its result.

        Args:
            item: one input of ``fn``.
            timeout_ms: deadline from now to result; default: the batcher's ``timeout_ms``.
            priority: higher goes first within the item's bucket.

        Raises:
            QueueFullError: ``max_queue_size`` requests are already queued.
            DeadlineExceededError: the deadline passed (or admission predicted it would).
            BatcherClosedError: the batcher is not running.
            BatchResultMismatchError: ``fn`` returned the wrong number of results.
            BatcherConfigError: bad ``timeout_ms``/``priority`` or item length.
            Exception: whatever ``fn`` raised for this item's batch, or returned for it.
        """
        if type(priority) is not int:
            raise BatcherConfigError(f"priority must be an int, got {priority!r}")
        if timeout_ms is None:
            timeout_ms = self.timeout_ms
        else:
            _check_timeout(timeout_ms)
        length = 0
        if self._length_fn is not None:
            length = self._length_fn(item)
            if type(length) is not int or length < 0:
                raise BatcherConfigError(
                    f"length_fn must return an int >= 0, got {length!r} for this item")
        counts = self._counts
        counts[0] += 1
        if not self._open:
            counts[3] += 1
            raise BatcherClosedError(
                "the batcher is not running; use `async with batcher:` (or "
                "batcher.run_in_thread()) around the calls")
        if self._queued >= self.max_queue_size:
            counts[3] += 1
            raise QueueFullError(
                f"{self._queued} requests queued (max_queue_size={self.max_queue_size}); "
                "retry later or shed load upstream")
        bucket = self._single or self._bucket_for(length)
        now = perf_counter_ns()
        deadline = 0
        if timeout_ms is not None:
            deadline = now + int(timeout_ms * 1e6)
            if self.deadline_admission and not self._admissible(bucket, length, deadline, now):
                counts[4] += 1
                raise DeadlineExceededError(
                    f"deadline of {timeout_ms} ms cannot be met with the work queued ahead "
                    "(deadline-aware admission)")
        loop = self._loop
        waiter: Any = loop.create_future() if loop is not None else anyio.Event()
        req = _Req(item, length, now, deadline, waiter)
        if priority:
            bucket.push(req, priority)
        else:  # inlined push() for the common case
            bucket.q0.append(req)
            bucket.live += 1
            if length > bucket.max_len:
                bucket.max_len = length
        self._queued += 1
        if self._wake is not None and (
            not self._wake_timed
            or bucket.live >= self.max_batch_size
            or (self._cap and bucket.live * bucket.max_len > self._cap)
        ):
            self._notify()
        result: Any = _NOT_OK  # the waiter's value: the result, or _NOT_OK if it failed
        try:
            if loop is not None:
                if deadline:
                    with anyio.move_on_after(timeout_ms / 1e3):  # type: ignore[operator]
                        result = await waiter
                else:
                    result = await waiter
            else:
                if deadline:
                    with anyio.move_on_after(timeout_ms / 1e3):  # type: ignore[operator]
                        await waiter.wait()
                else:
                    await waiter.wait()
                result = req.result
        except BaseException as exc:
            counts[6] += 1
            if req.state == _QUEUED:
                self._record_unsent(req, bucket, exc)
            self._abandon(req, bucket)
            raise
        if result is not _NOT_OK:  # the hot path: it succeeded
            counts[1] += 1
            rq = _current.get()
            if rq is not None:
                st = rq.stages
                st["batch.queue"] = st.get("batch.queue", 0) + req.start_ns - now
                st["batch.run"] = st.get("batch.run", 0) + req.end_ns - req.start_ns
            ok: R = result
            return ok
        if req.state != _DONE:  # our own deadline fired first
            req.kind = _TIMED_OUT
            req.error = DeadlineExceededError(
                f"request deadline of {timeout_ms} ms passed "
                + ("while it was queued" if req.state == _QUEUED
                   else "while its batch was running"))
            if req.state == _QUEUED:
                self._record_unsent(req, bucket, req.error)
            self._abandon(req, bucket)
        elif not req.start_ns:  # expired in the queue by the worker
            assert req.error is not None
            self._record_unsent(req, bucket, req.error)
        counts[5 if req.kind == _TIMED_OUT else 2] += 1
        assert req.error is not None
        raise req.error

    def _record_unsent(self, req: _Req, bucket: _Bucket, exc: BaseException) -> None:
        """``batch.queue`` of a request that left the queue without being sent to fn."""
        now = perf_counter_ns()
        _record("batch.queue", _outcome_key("batch.queue", bucket.labels, exc),
                self._ledger or _default[0], now - req.enq_ns, now)

    def submit_sync(
        self, item: T, *, timeout_ms: float | None = None, priority: int = 0
    ) -> R:
        """Blocking :meth:`submit` for synchronous code, callable from any thread but the
        event loop's own while the batcher runs (``async with`` in some thread, or
        :meth:`run_in_thread`). The calling thread blocks; use ``timeout_ms`` to bound it.

        Raises:
            BatcherUsageError: called on the batcher's event loop thread (it would deadlock;
                ``await submit()`` there).
            BatcherClosedError: the batcher is not running.
            and everything :meth:`submit` raises.
        """
        token = self._token
        if token is None or self._state != _STARTED:
            self._counts[0] += 1
            self._counts[3] += 1
            raise BatcherClosedError("the batcher is not running; start it first "
                                     "(batcher.run_in_thread() for synchronous servers)")
        if threading.get_ident() == self._loop_thread:
            raise BatcherUsageError("submit_sync() called on the batcher's event loop thread; "
                                    "use `await batcher.submit(item)` there")

        async def call() -> R:
            return await self.submit(item, timeout_ms=timeout_ms, priority=priority)

        try:
            return anyio.from_thread.run(call, token=token)
        except anyio.RunFinishedError:
            raise BatcherClosedError("the batcher's event loop has finished") from None

    # -- stats ------------------------------------------------------------------------------

    @property
    def stats(self) -> BatcherStats:
        """A snapshot of the batcher's counters, batch sizes, padding and cost model."""
        c = self._counts
        batches = sum(self._sizes.values())
        sent = sum(s * n for s, n in self._sizes.items())
        padded = sum(b.padded for b in self._bucket_list)
        real = sum(b.real for b in self._bucket_list)
        pred, act, mae = self._cost.error_stats_ms()
        return BatcherStats(
            submitted=c[0], completed=c[1], failed=c[2], rejected=c[3], shed=c[4],
            timed_out=c[5], cancelled=c[6],
            queued=self._queued,
            running_batches=len(self._running),
            batches=batches,
            batch_sizes=dict(sorted(self._sizes.items())),
            mean_batch_size=sent / batches if batches else 0.0,
            padded_tokens=padded,
            real_tokens=real,
            padding_ratio=padded / real if real else 0.0,
            cost_a_ms=self._cost.a / 1e6,
            cost_b_us_per_token=self._cost.b / 1e3,
            cost_predicted_ms=pred,
            cost_actual_ms=act,
            cost_mae_ms=mae,
            buckets={
                b.label: BucketStats(
                    batches=b.batches, requests=b.requests,
                    mean_batch_size=b.requests / b.batches if b.batches else 0.0,
                    padding_ratio=b.padded / b.real if b.real else 0.0)
                for b in self._bucket_list if b.batches
            },
        )

    def report(self) -> str:
        """Batch size, padding and latency side by side, per bucket, as a table.

        Latencies come from the ledger's ``batch.queue`` and ``batch.run`` stages; queue
        p99 growing with batch size is the classic sign of a ``max_wait_ms`` too large.
        """
        return format_report(self.stats, self._ledger or _default[0], dict(self._base_labels))

    # -- internals: queue -------------------------------------------------------------------

    def _bucket(self, bound: float, label: str) -> _Bucket:
        b = _Bucket(bound, label, self._base_labels)
        self._buckets[bound] = b
        self._bucket_list.append(b)
        return b

    def _bucket_for(self, length: int) -> _Bucket:
        if self._pow2:
            bound = float(1 << (max(length, 1) - 1).bit_length())
            b = self._buckets.get(bound)
            return b if b is not None else self._bucket(bound, str(int(bound)))
        if self._bounds is None:
            return self._bucket_list[0]
        return self._bucket_list[bisect.bisect_left(self._bounds, length)]

    def _notify(self) -> None:
        w = self._wake
        if w is not None:
            self._wake = None
            if self._loop is not None:
                _wake_future(w)
            else:
                w.set()

    def _wake_req(self, req: _Req) -> None:
        if self._loop is not None:
            _wake_future(req.waiter)
        else:
            req.waiter.set()

    def _abandon(self, req: _Req, bucket: _Bucket) -> None:
        """The caller stopped waiting: take the request out of the queue (or drop its result
        when it is already running)."""
        if req.state == _QUEUED:
            req.state = _GONE
            bucket.live -= 1
            bucket.stale += 1
            self._queued -= 1
            if bucket.live == 0:
                bucket.max_len = 0
            if bucket.stale > 32 and bucket.stale > bucket.live:
                bucket.compact()
        elif req.state == _RUNNING:
            req.state = _GONE

    def _fail_queued(self, error: BaseException) -> None:
        for b in self._bucket_list:
            for r in list(b.iter_queued()):
                r.state, r.kind, r.error = _DONE, _FAILED, error
                self._wake_req(r)
            b.compact()
            b.live = 0
            b.max_len = 0
        self._queued = 0

    def _admissible(self, bucket: _Bucket, length: int, deadline: int, now: int) -> bool:
        cost = self._cost
        if cost.samples < 8:
            return True  # too little history to predict; admit
        size, cap = self.max_batch_size, self._cap
        work = 0.0
        for b in self._bucket_list:
            live = b.live + (1 if b is bucket else 0)
            if not live:
                continue
            longest = max(b.max_len, length) if b is bucket else b.max_len
            per = min(size, max(cap // max(longest, 1), 1)) if cap else size
            work += math.ceil(live / per) * cost.a + cost.b * live * longest
        for start, predicted in self._running.values():
            work += max(predicted - (now - start), 0.0)
        return now + work / self.max_concurrent_batches <= deadline

    # -- internals: workers -----------------------------------------------------------------

    async def _worker(self) -> None:
        lock = self._form_lock
        while True:
            if lock is not None:
                async with lock:
                    nxt = await self._next_batch()
            else:
                nxt = await self._next_batch()
            if nxt is None:
                return
            await self._run_batch(*nxt)

    async def _next_batch(self) -> tuple[_Bucket, _Formed, int] | None:
        size, cap, wait_ns = self.max_batch_size, self._cap, self._wait_ns
        while True:
            now = perf_counter_ns()
            best: _Bucket | None = None
            best_oldest = 0
            next_due = 0
            if self._queued:
                closing = self._closing
                for b in self._bucket_list:
                    if not b.live:
                        continue
                    oldest = b.oldest_ns()
                    if (
                        closing or b.live >= size or now - oldest >= wait_ns
                        or (cap and b.live * b.max_len > cap and self._token_full(b))
                    ):
                        if best is None or oldest < best_oldest:
                            best, best_oldest = b, oldest
                    elif not next_due or oldest + wait_ns < next_due:
                        next_due = oldest + wait_ns
            if best is not None:
                formed = self._form(best, now)
                if formed[0]:
                    return best, formed, now
                continue
            if self._closing and not self._queued:
                self._notify()  # let the next free worker see the end too
                return None
            waiter: Any = self._loop.create_future() if self._loop is not None else anyio.Event()
            self._wake = waiter
            self._wake_timed = bool(next_due)
            try:
                if next_due:
                    with anyio.move_on_after((next_due - now) / 1e9):
                        await (waiter if self._loop is not None else waiter.wait())
                else:
                    await (waiter if self._loop is not None else waiter.wait())
            finally:
                if self._wake is waiter:
                    self._wake = None

    def _token_full(self, b: _Bucket) -> bool:
        """True when the bucket's next batch is closed by the token cap (an item after it
        would not fit)."""
        n = longest = 0
        cap, size = self._cap, self.max_batch_size
        for r in b.iter_queued():
            if n >= size:
                return False
            m = max(longest, r.length)
            if n and (n + 1) * m > cap:
                return True
            n, longest = n + 1, m
        return False

    def _form(self, b: _Bucket, now: int) -> _Formed:
        """Take the bucket's next batch, starting at ``now``: (requests, their items, their
        queue waits, longest length, sum of lengths)."""
        batch: list[_Req] = []
        items: list[Any] = []
        waits: list[int] = []
        size, cap = self.max_batch_size, self._cap
        longest = real = 0
        expired = 0
        full = False
        for p in list(b.prios):
            q = b.queues[p]
            while q:
                r = q[0]
                if r.state != _QUEUED:
                    q.popleft()
                    b.stale -= 1
                    continue
                if r.deadline_ns and r.deadline_ns <= now:
                    q.popleft()
                    r.state, r.kind = _DONE, _TIMED_OUT
                    r.error = DeadlineExceededError(
                        "request deadline passed while it was queued; it was not sent to fn")
                    expired += 1
                    self._wake_req(r)
                    continue
                if len(batch) >= size or (cap and batch and (len(batch) + 1) * max(
                        longest, r.length) > cap):
                    full = True
                    break
                q.popleft()
                r.state = _RUNNING
                r.start_ns = now
                batch.append(r)
                items.append(r.item)
                waits.append(now - r.enq_ns)
                length = r.length
                real += length
                if length > longest:
                    longest = length
            if not q and p != 0:
                del b.queues[p]
                b.prios.remove(p)
            if full:
                break
        taken = len(batch) + expired
        b.live -= taken
        self._queued -= taken
        if b.live == 0:
            b.max_len = 0
        return batch, items, waits, longest, real

    async def _run_batch(self, b: _Bucket, formed: _Formed, start: int) -> None:
        """Run one formed batch through fn (``start``: when it was formed, the end of its
        requests' ``batch.queue`` and the start of their ``batch.run``)."""
        batch, items, waits, longest, real = formed
        n = len(batch)
        padded = n * longest
        cost = self._cost
        predicted = cost.predict_ns(padded) if cost.samples >= 2 else None
        bid = self._batch_seq = self._batch_seq + 1
        self._running[bid] = (start, predicted or 0.0)
        self._sizes[n] = self._sizes.get(n, 0) + 1
        b.batches += 1
        b.requests += n
        b.padded += padded
        b.real += real
        ledger = self._ledger or _default[0]
        _append_many(ledger, b.queue_key, waits, start)
        try:
            if self._is_async:
                results: Any = await self._fn(items)
            else:
                results = await anyio.to_thread.run_sync(self._fn, items)
        except Exception as exc:
            self._deliver_error(b, batch, exc, b.run_err_key)
            return
        except BaseException:
            self._deliver_error(b, batch, BatcherClosedError(
                "the batcher was stopped while this request's batch was running"),
                b.run_cancel_key)
            raise
        finally:
            del self._running[bid]
        end = perf_counter_ns()
        cost.add(padded, end - start, predicted)
        if not isinstance(results, Sequence) or isinstance(results, (str, bytes)) or (
            len(results) != n
        ):
            got = f"{len(results)} results" if isinstance(results, Sequence) else (
                f"a {type(results).__name__}")
            self._deliver_error(b, batch, BatchResultMismatchError(
                f"batch function returned {got} for {n} items; it must return a list of the "
                "same length and order"), b.run_err_key, end)
            return
        failed = 0
        loop = self._loop
        for r, res in zip(batch, results, strict=True):
            if isinstance(res, Exception):
                failed += 1
                r.kind, r.error = _FAILED, res
                res = _NOT_OK
            if r.state != _RUNNING:
                continue  # its caller left (cancelled or timed out): result dropped
            w = r.waiter
            if loop is None:
                r.state, r.end_ns, r.result = _DONE, end, res
                w.set()
            elif not w.done():
                r.state, r.end_ns = _DONE, end
                w.set_result(res)
            # else: its future was cancelled (the caller's deadline or cancellation fired
            # this loop turn); it stays _RUNNING and its submit() ends it as timed out or
            # cancelled, exactly once
        d = end - start
        if failed != n:
            _append_many(ledger, b.run_key, [d] * (n - failed), end)
        if failed:
            _append_many(ledger, b.run_err_key, [d] * failed, end)

    def _deliver_error(
        self, b: _Bucket, batch: list[_Req], exc: BaseException, key: SeriesKey, end: int = 0
    ) -> None:
        end = end or perf_counter_ns()
        d = batch[0].start_ns and end - batch[0].start_ns
        _append_many(self._ledger or _default[0], key, [d] * len(batch), end)
        for r in batch:
            if r.state != _RUNNING:
                continue
            r.state, r.kind, r.error, r.end_ns = _DONE, _FAILED, exc, end
            self._wake_req(r)

    def __repr__(self) -> str:
        state = "running" if self._state == _STARTED else "stopped"
        return (f"DynamicBatcher({getattr(self._fn, '__qualname__', self._fn)!r}, "
                f"max_batch_size={self.max_batch_size}, max_wait_ms={self.max_wait_ms}, "
                f"{state}, queued={self._queued})")
