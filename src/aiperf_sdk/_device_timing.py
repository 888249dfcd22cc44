"""``device_stage``: stage timing that is correct for asynchronous CUDA work.

Wall-clock time around a kernel launch measures the launch, not the work. ``device_stage``
records the usual wall-time stage and, when the work runs on a CUDA device, a pair of CUDA
events on the current stream at enter and exit. The events are resolved later, off the hot
path and without a device-wide synchronize: every ``device_stage`` exit polls the oldest
pending pairs with ``Event.query()`` (non-blocking) and records the finished ones as
``<name>.gpu``; :func:`flush_device_timings` resolves the rest (waiting on those events only,
when asked to).

Without CUDA (CPU-only torch, no GPU, torch not imported, or ``device="cpu"``) the work is
synchronous, so the wall time *is* the device time: only ``<name>`` is recorded and no
``.gpu`` series appears.
"""

from __future__ import annotations

import collections
import functools
import inspect
import sys
import threading
from collections.abc import Callable
from time import perf_counter_ns
from types import TracebackType
from typing import Any, Protocol, TypeVar, cast

from ._ledger import Labels, Ledger, SeriesKey, _default, make_labels
from ._request import _current
from ._stage import stage

F = TypeVar("F", bound=Callable[..., Any])

#: suffix of the series that holds device (CUDA event) time
GPU_SUFFIX = ".gpu"
#: pending event pairs kept before the oldest is waited on (bounds memory under a GPU backlog)
MAX_PENDING = 8192
#: finished pairs resolved per ``device_stage`` exit (keeps each exit's extra work bounded)
POLL_PER_EXIT = 8


class _Event(Protocol):
    def record(self, stream: Any = None) -> None: ...

    def query(self) -> bool: ...

    def synchronize(self) -> None: ...

    def elapsed_time(self, end_event: Any) -> float: ...


class _EventResolver:
    """FIFO of recorded (start, end) event pairs, resolved into the ledger when finished."""

    def __init__(self, max_pending: int = MAX_PENDING) -> None:
        self._lock = threading.Lock()
        self._pending: collections.deque[
            tuple[_Event, _Event, SeriesKey, Ledger | None, int, int]
        ] = collections.deque()
        self._max_pending = max_pending
        #: free events per CUDA device index, reused after their pair is resolved
        self._free: dict[int, list[_Event]] = {}
        #: pairs resolved so far (for tests and diagnostics)
        self.resolved = 0

    def take_event(self, device_index: int, factory: Callable[[], _Event]) -> _Event:
        free = self._free.get(device_index)
        if free:
            try:
                return free.pop()
            except IndexError:  # raced with another thread
                pass
        return factory()

    def submit(
        self, start: _Event, end: _Event, key: SeriesKey, ledger: Ledger | None, end_ns: int,
        device_index: int,
    ) -> None:
        with self._lock:
            self._pending.append((start, end, key, ledger, end_ns, device_index))
            if len(self._pending) > self._max_pending:
                # the device is far behind: wait for the oldest pair rather than grow unbounded
                self._resolve_head(wait=True)
            self._poll_locked(POLL_PER_EXIT)

    def poll(self, limit: int = POLL_PER_EXIT) -> int:
        """Resolve up to ``limit`` finished pairs, oldest first; never blocks on the device."""
        with self._lock:
            return self._poll_locked(limit)

    def _poll_locked(self, limit: int) -> int:
        done = 0
        while done < limit and self._pending and self._pending[0][1].query():
            self._resolve_head(wait=False)
            done += 1
        return done

    def flush(self, wait: bool) -> int:
        """Resolve every pending pair (``wait``: block on each unfinished end event)."""
        done = 0
        with self._lock:
            while self._pending:
                if not wait and not self._pending[0][1].query():
                    break
                self._resolve_head(wait=wait)
                done += 1
        return done

    def give_back(self, device_index: int, *events: _Event) -> None:
        free = self._free.setdefault(device_index, [])
        if len(free) < 256:
            free.extend(events)

    def pending(self) -> int:
        return len(self._pending)

    def _resolve_head(self, wait: bool) -> None:
        start, end, key, ledger, end_ns, device_index = self._pending.popleft()
        if wait:
            end.synchronize()
        ms = start.elapsed_time(end)
        if ledger is None:
            ledger = _default[0]
        ledger._append(key, max(0, round(ms * 1e6)), end_ns)
        self.give_back(device_index, start, end)
        self.resolved += 1


_RESOLVER = _EventResolver()
_CUDA_OK: list[bool] = []  # cached torch.cuda.is_available() (does not change in a process)


def _cuda_torch() -> Any | None:
    """torch when it is already imported and has CUDA, else None (never imports torch)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    if not _CUDA_OK:
        _CUDA_OK.append(bool(torch.cuda.is_available()))
    return torch if _CUDA_OK[0] else None


def flush_device_timings(wait: bool = True) -> int:
    """Resolve pending ``device_stage`` CUDA timings into their ledgers.

    ``device_stage`` resolves finished timings on its own as later stages exit; call this
    before reading ``<name>.gpu`` series (a report, a test, shutdown). With ``wait=True`` it
    blocks until each pending end event has completed (``Event.synchronize`` on those events,
    not a device-wide synchronize); with ``wait=False`` it only takes what has finished.
    Without CUDA there is never anything pending and it returns 0.

    Example::

        with perf.device_stage("prefill", device="cuda"):
            logits = model(ids)
        perf.flush_device_timings()
        perf.default_ledger().percentile("prefill.gpu", 99.0)

    Returns:
        the number of timings recorded.
    """
    return _RESOLVER.flush(wait)


class device_stage:
    """Time a block on the device: wall time as ``name`` plus CUDA time as ``name.gpu``.

    On a CUDA device it records ``torch.cuda.Event(enable_timing=True)`` on the current stream
    at enter and at exit and hands the pair to a background-free resolver: the device time is
    recorded when the events have completed (polled non-blockingly at later exits, or by
    :func:`flush_device_timings`), so the hot path never synchronizes. Without CUDA (CPU-only
    torch, no GPU, torch never imported, or ``device="cpu"``) execution is synchronous and the
    wall time is the device time: only ``name`` is recorded.

    The ``.gpu`` value is recorded into the ledger but not into the request's per-stage trace
    (it usually resolves after the request has finished).

    Example::

        with perf.request():
            with perf.device_stage("prefill", device="cuda", model="chat"):
                out = model(input_ids)          # launches kernels and returns at once
        perf.flush_device_timings()             # off the hot path
        ledger.percentile("prefill", 50.0)      # wall (launch + any host sync)
        ledger.percentile("prefill.gpu", 50.0)  # time the stream spent on the work

    Args:
        name: stage name (the device series is ``name + ".gpu"``).
        device: ``"cuda"``, ``"cuda:N"``, a ``torch.device`` or ``"cpu"``; ``None`` (default)
            means the current CUDA device when CUDA is available.
        ledger: ledger to record into; default: the request's, else the default ledger.
        **labels: labels of both series.

    Raises:
        TypeError: ``name`` is not a non-empty string, or the decorated object is a generator.
        ValueError: ``device`` is neither None, a CUDA device nor ``"cpu"``.
        RuntimeError: the same object entered twice concurrently.
    """

    __slots__ = ("_cpu_only", "_device_index", "_gpu_key", "_ledger", "_start", "_wall")

    def __init__(
        self,
        name: str,
        *,
        device: object = None,
        ledger: Ledger | None = None,
        **labels: object,
    ) -> None:
        self._wall = stage(name, ledger=ledger, **labels)  # validates name
        lab: Labels = make_labels(labels) if labels else ()
        self._gpu_key: SeriesKey = (name + GPU_SUFFIX, lab)
        self._ledger = ledger
        self._cpu_only, self._device_index = _parse_device(device)
        self._start: tuple[Any, Any, int] | None = None

    def __enter__(self) -> device_stage:
        self._wall.__enter__()  # raises on re-entry before anything else changes
        torch = None if self._cpu_only else _cuda_torch()
        if torch is not None:
            idx = self._device_index
            if idx is None:
                idx = torch.cuda.current_device()
            try:
                ev = _RESOLVER.take_event(idx, _timing_event_factory(torch))
                ev.record(torch.cuda.current_stream(idx))
            except BaseException as exc:
                self._wall.__exit__(type(exc), exc, exc.__traceback__)
                raise
            self._start = (ev, torch, idx)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        started, self._start = self._start, None
        if started is not None:
            start_ev, torch, idx = started
            end_ev = _RESOLVER.take_event(idx, _timing_event_factory(torch))
            end_ev.record(torch.cuda.current_stream(idx))
        self._wall.__exit__(exc_type, exc, tb)
        if started is None:
            return
        if exc is not None:  # the wall series carries the outcome label; no device time
            _RESOLVER.give_back(idx, start_ev, end_ev)
            return
        ledger = self._ledger
        if ledger is None:
            req = _current.get()
            if req is not None:
                ledger = req.ledger
        _RESOLVER.submit(start_ev, end_ev, self._gpu_key, ledger, perf_counter_ns(), idx)

    async def __aenter__(self) -> device_stage:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    def __call__(self, fn: F) -> F:
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            raise TypeError("@device_stage decorates functions and coroutines, not generators")
        name = self._wall._name
        labels = dict(self._wall._labels)
        ledger = self._ledger
        device: object = "cpu" if self._cpu_only else (
            None if self._device_index is None else f"cuda:{self._device_index}"
        )

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def awrapper(*args: Any, **kwargs: Any) -> Any:
                with device_stage(name, device=device, ledger=ledger, **labels):
                    return await fn(*args, **kwargs)

            return cast(F, awrapper)
        if not callable(fn):
            raise TypeError(f"@device_stage decorates a callable, got {type(fn).__name__}")

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with device_stage(name, device=device, ledger=ledger, **labels):
                return fn(*args, **kwargs)

        return cast(F, wrapper)

    def __repr__(self) -> str:
        return f"device_stage({self._wall._name!r}, labels={dict(self._wall._labels)!r})"


@functools.lru_cache(maxsize=64)
def _parse_device_str(device: str) -> tuple[bool, int | None]:
    text = device.strip().lower()
    if text == "cpu":
        return True, None
    if text == "cuda":
        return False, None
    if text.startswith("cuda:") and text[5:].isdigit():
        return False, int(text[5:])
    raise ValueError(f"device must be None, 'cpu', 'cuda' or 'cuda:N', got {device!r}")


def _parse_device(device: object) -> tuple[bool, int | None]:
    """(cpu_only, cuda_index) from a device spec, without importing torch."""
    if device is None:
        return False, None
    if isinstance(device, str):
        return _parse_device_str(device)
    dtype = getattr(device, "type", None)
    if dtype == "cpu":
        return True, None
    if dtype == "cuda":
        index = getattr(device, "index", None)
        return False, index if isinstance(index, int) else None
    raise ValueError(f"device must be None, 'cpu', 'cuda[:N]' or a torch.device, got {device!r}")


_FACTORIES: dict[int, Callable[[], _Event]] = {}


def _timing_event_factory(torch: Any) -> Callable[[], _Event]:
    f = _FACTORIES.get(id(torch))
    if f is None:
        f = _FACTORIES[id(torch)] = functools.partial(torch.cuda.Event, enable_timing=True)
    return f
