"""Warm-up: run each input shape until its latency is stable, outside the serving ledger.

Cold starts (lazy CUDA init, cuDNN autotune, ``torch.compile`` compilation and recompiles on
new shapes, allocator growth) poison the first requests and any benchmark that includes them.
``warmup`` runs a callable over the shapes it will serve, each until the last ``window``
latencies are within ``tolerance`` of their median (or ``rounds`` is reached), records
everything into a scratch ledger (never the serving one), reports per shape first-call ms,
steady p50, rounds to stable and graphs compiled, and can flip a :class:`Readiness` flag
that a health endpoint serves.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ._errors import PerfError
from ._ledger import Ledger
from ._models import format_table
from ._request import request

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class WarmupError(PerfError, RuntimeError):
    """The warmed function raised for one of the shapes (the original is ``__cause__``)."""


class ShapeWarmup(BaseModel):
    """Warm-up result of one input shape."""

    model_config = _FROZEN

    shape: str  #: the shape's key (from the mapping, or the input's shape, e.g. ``"4x128"``)
    first_call_ms: float  #: the cold first call (compilation, lazy init included)
    steady_p50_ms: float  #: median of the last ``window`` calls
    rounds: int  #: calls made for this shape, the first one included
    rounds_to_stable: int | None  #: calls until the stability criterion held; None: never
    stable: bool  #: the last ``window`` calls were within ``tolerance`` of their median
    graphs_compiled: int | None = None  #: new torch.compile graphs during this shape; None: n/a


class WarmupReport(BaseModel):
    """What :func:`warmup` did, per shape; ``str(report)`` is a table."""

    model_config = _FROZEN

    shapes: list[ShapeWarmup] = Field(default_factory=list)
    total_s: float  #: wall time of the whole warm-up
    graphs_compiled: int | None = None  #: new torch.compile graphs overall; None: n/a

    @property
    def stable(self) -> bool:
        """True when every shape stabilised."""
        return all(s.stable for s in self.shapes)

    def shape(self, key: str) -> ShapeWarmup:
        """The entry of ``key``; raises ``KeyError`` if that shape was not warmed."""
        for s in self.shapes:
            if s.shape == key:
                return s
        raise KeyError(f"shape {key!r} was not warmed; warmed: {[s.shape for s in self.shapes]}")

    def __str__(self) -> str:
        graphs = "n/a" if self.graphs_compiled is None else str(self.graphs_compiled)
        return format_table(
            ["shape", "stable", "first ms", "steady p50 ms", "rounds", "to stable", "graphs"],
            [
                [
                    s.shape,
                    "yes" if s.stable else "NO",
                    f"{s.first_call_ms:.3f}",
                    f"{s.steady_p50_ms:.3f}",
                    str(s.rounds),
                    "-" if s.rounds_to_stable is None else str(s.rounds_to_stable),
                    "-" if s.graphs_compiled is None else str(s.graphs_compiled),
                ]
                for s in self.shapes
            ],
            title=f"warm-up ({self.total_s:.2f} s, graphs compiled: {graphs})",
        )


class Readiness:
    """A readiness flag for health endpoints: ready once every component has reported ready.

    Thread-safe. ``warmup(..., readiness=r)`` marks its component (``"warmup"``) ready when it
    completes and not ready (with the reason) when it fails.

    Example::

        readiness = perf.Readiness()                  # components: ("warmup",)
        perf.warmup(model, inputs, readiness=readiness)

        @app.get("/ready")
        def ready():                                  # Kubernetes readinessProbe
            return JSONResponse(readiness.status(), status_code=200 if readiness else 503)

    Raises:
        ValueError: no components, or an unknown component is marked.
    """

    def __init__(self, *components: str) -> None:
        comps = components or ("warmup",)
        if any(not isinstance(c, str) or not c for c in comps):
            raise ValueError(f"components must be non-empty strings, got {comps!r}")
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._pending: dict[str, str] = {c: "not started" for c in comps}
        self._components = tuple(dict.fromkeys(comps))

    @property
    def ready(self) -> bool:
        """True when every component is ready."""
        return self._event.is_set()

    def __bool__(self) -> bool:
        return self._event.is_set()

    def set_ready(self, component: str = "warmup") -> None:
        """Mark ``component`` ready (the flag turns ready when all are)."""
        with self._lock:
            self._check(component)
            self._pending.pop(component, None)
            if not self._pending:
                self._event.set()

    def set_not_ready(self, component: str = "warmup", reason: str = "not ready") -> None:
        """Mark ``component`` not ready (e.g. a model reload), with a reason for ``status()``."""
        with self._lock:
            self._check(component)
            self._pending[component] = reason
            self._event.clear()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until ready or ``timeout_s`` passes; returns :attr:`ready`."""
        return self._event.wait(timeout_s)

    def status(self) -> dict[str, Any]:
        """JSON-able state: ``{"ready": bool, "pending": {component: reason}}``."""
        with self._lock:
            return {"ready": not self._pending, "pending": dict(self._pending)}

    def _check(self, component: str) -> None:
        if component not in self._components:
            raise ValueError(
                f"unknown readiness component {component!r}; known: {list(self._components)}"
            )

    def __repr__(self) -> str:
        return f"Readiness(ready={self.ready}, pending={sorted(self._pending)})"


def warmup_shapes(
    batch_sizes: Iterable[int] | None = None,
    lengths: Iterable[int] | None = None,
    *,
    buckets: Sequence[int] | str | None = None,
    max_batch_size: int | None = None,
    max_length: int | None = None,
    batcher: object = None,
) -> list[tuple[int, int]]:
    """The ``(batch_size, length)`` grid to warm, sorted.

    Give the grid directly (``batch_sizes`` × ``lengths``) or derive it from the batcher's
    configuration: lengths are the bucket bounds (``"pow2"``: every power of two up to
    ``max_length``), batch sizes the powers of two up to ``max_batch_size`` plus
    ``max_batch_size``. ``batcher=`` takes a ``DynamicBatcher``'s buckets and
    ``max_batch_size``; explicit arguments win over it. Lengths above the largest bucket
    (the batcher's overflow bucket) are not in the grid: add them to ``lengths``.

    Example::

        perf.warmup_shapes(batch_sizes=[1, 4, 8, 16], lengths=[64, 128, 256])  # 12 shapes
        perf.warmup_shapes(buckets=[64, 128, 256], max_batch_size=8)   # batch 1,2,4,8

    Raises:
        ValueError: a size is not a positive integer, or neither sizes nor their source given.
    """
    if batcher is not None:
        if buckets is None:
            buckets = _batcher_buckets(batcher)
        if max_batch_size is None:
            max_batch_size = getattr(batcher, "max_batch_size", None)
    if batch_sizes is None:
        if max_batch_size is None:
            raise ValueError("give batch_sizes, max_batch_size or a batcher")
        _positive("max_batch_size", [max_batch_size])
        sizes = {1 << k for k in range(max_batch_size.bit_length()) if 1 << k <= max_batch_size}
        batch_sizes = sorted(sizes | {max_batch_size})
    if lengths is None:
        if buckets is None:
            raise ValueError("give lengths, buckets or a batcher with buckets")
        if isinstance(buckets, str):
            if buckets != "pow2":
                raise ValueError(f"buckets must be 'pow2' or a list of bounds, got {buckets!r}")
            if max_length is None:
                raise ValueError("buckets='pow2' needs max_length to bound the grid")
            _positive("max_length", [max_length])
            lengths = [1 << k for k in range(max_length.bit_length()) if 1 << k <= max_length]
        else:
            lengths = list(buckets)
    bs = sorted(set(_positive("batch_sizes", list(batch_sizes))))
    ls = sorted(set(_positive("lengths", list(lengths))))
    if not bs or not ls:
        raise ValueError("the grid is empty")
    return [(b, n) for b in bs for n in ls]


def _batcher_buckets(batcher: object) -> Sequence[int] | str | None:
    public = getattr(batcher, "buckets", None)
    if public is not None:
        return public  # type: ignore[no-any-return]
    # DynamicBatcher keeps its parsed buckets privately (same package): "pow2" or the bounds
    if getattr(batcher, "_pow2", False):
        return "pow2"
    bounds = getattr(batcher, "_bounds", None)
    return list(bounds) if bounds is not None else None


def _positive(name: str, values: list[Any]) -> list[int]:
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be positive integers, got {v!r}")
    return values


def warmup(
    fn: Callable[[Any], Any],
    inputs: Mapping[Any, Any] | Sequence[Any],
    *,
    rounds: int = 10,
    until_stable: bool = True,
    window: int = 3,
    tolerance: float = 0.2,
    sync: Callable[[], Any] | None = None,
    readiness: Readiness | None = None,
    readiness_component: str = "warmup",
) -> WarmupReport:
    """Call ``fn`` on each input shape until its latency is stable; report per shape.

    ``inputs`` maps a shape key to a sample input, or is a sequence of samples (the key is
    the sample's ``.shape`` as ``"4x128"``, or its position). A callable sample is a factory:
    it is called each round and its result passed to ``fn`` (fresh tensors per call). Each
    shape runs at least ``window + 1`` times; with ``until_stable`` it stops as soon as the
    last ``window`` latencies are within ``tolerance`` (relative) of their median, else it
    runs ``rounds`` times. ``sync`` runs after each call, inside the timing (default:
    ``torch.cuda.synchronize`` when torch is imported and CUDA is available), so device work
    is measured, not its launch.

    Everything ``fn`` records through ``perf.stage``/``perf.request`` without an explicit
    ``ledger=`` goes to a scratch ledger: warm-up samples never enter the serving ledger.

    Example::

        grid = perf.warmup_shapes(batch_sizes=[2, 4, 8], lengths=[64, 128])
        samples = {f"{b}x{n}": (lambda b=b, n=n: torch.randint(0, 32000, (b, n)))
                   for b, n in grid}
        report = perf.warmup(compiled_model, samples, readiness=readiness)
        print(report)     # first-call ms, steady p50, rounds, graphs compiled per shape

    Raises:
        WarmupError: ``fn`` (or a factory) raised; the readiness component is marked not
            ready with the reason.
        ValueError: empty ``inputs`` or invalid ``rounds``/``window``/``tolerance``.
    """
    if window < 1 or rounds < window + 1:
        raise ValueError(f"need window >= 1 and rounds >= window + 1, got {window=}, {rounds=}")
    if not tolerance > 0:
        raise ValueError(f"tolerance must be > 0, got {tolerance!r}")
    items = _keyed(inputs)
    if not items:
        raise ValueError("inputs is empty: nothing to warm up")
    if sync is None:
        sync = _default_sync()
    scratch = Ledger(slowest_capacity=0)
    t_start = time.perf_counter()
    graphs0 = _graph_count()
    results: list[ShapeWarmup] = []
    try:
        for n, (key, sample) in enumerate(items):
            results.append(
                _warm_one(fn, key, sample, n, rounds, until_stable, window, tolerance, sync,
                          scratch)
            )
    except WarmupError as exc:
        if readiness is not None:
            readiness.set_not_ready(readiness_component, f"warm-up failed: {exc}")
        raise
    graphs1 = _graph_count()
    report = WarmupReport(
        shapes=results,
        total_s=time.perf_counter() - t_start,
        graphs_compiled=None if graphs0 is None or graphs1 is None else graphs1 - graphs0,
    )
    if readiness is not None:
        readiness.set_ready(readiness_component)
    return report


def _warm_one(
    fn: Callable[[Any], Any],
    key: str,
    sample: Any,
    n: int,
    rounds: int,
    until_stable: bool,
    window: int,
    tolerance: float,
    sync: Callable[[], Any] | None,
    scratch: Ledger,
) -> ShapeWarmup:
    graphs0 = _graph_count()
    times: list[float] = []
    to_stable: int | None = None
    for r in range(rounds):
        try:
            arg = sample() if callable(sample) else sample
            with request(id=f"warmup-{n}-{r}", ledger=scratch):
                t0 = time.perf_counter_ns()
                fn(arg)
                if sync is not None:
                    sync()
                times.append((time.perf_counter_ns() - t0) / 1e6)
        except Exception as exc:
            raise WarmupError(f"warm-up of shape {key!r} failed in round {r}: {exc!r}") from exc
        if len(times) > window and _is_stable(times[-window:], tolerance):
            if to_stable is None:
                to_stable = len(times)
            if until_stable:
                break
    last = times[-window:]
    graphs1 = _graph_count()
    return ShapeWarmup(
        shape=key,
        first_call_ms=times[0],
        steady_p50_ms=statistics.median(last),
        rounds=len(times),
        rounds_to_stable=to_stable,
        stable=len(times) > window and _is_stable(last, tolerance),
        graphs_compiled=None if graphs0 is None or graphs1 is None else graphs1 - graphs0,
    )


def _is_stable(last: list[float], tolerance: float) -> bool:
    med = statistics.median(last)
    return all(abs(t - med) <= tolerance * med for t in last)


def _keyed(inputs: Mapping[Any, Any] | Sequence[Any]) -> list[tuple[str, Any]]:
    if isinstance(inputs, Mapping):
        return [(_key_str(k), v) for k, v in inputs.items()]
    if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Sequence):
        raise TypeError(
            f"inputs must be a mapping {{shape: sample}} or a sequence of samples, got "
            f"{type(inputs).__name__}"
        )
    out: list[tuple[str, Any]] = []
    seen: set[str] = set()
    for i, sample in enumerate(inputs):
        shape = getattr(sample, "shape", None)
        key = "x".join(str(int(d)) for d in shape) if shape is not None else str(i)
        if key in seen:
            key = f"{key}#{i}"
        seen.add(key)
        out.append((key, sample))
    return out


def _key_str(key: Any) -> str:
    if isinstance(key, tuple):
        return "x".join(str(k) for k in key)
    return str(key)


def _default_sync() -> Callable[[], Any] | None:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        sync: Callable[[], Any] = torch.cuda.synchronize
        return sync
    return None


def _graph_count() -> int | None:
    """Graphs torch.compile (dynamo) has compiled in this process; None when not in use."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return None
    try:
        return int(utils.counters["stats"]["unique_graphs"])
    except Exception:  # private counters: tolerate their absence in other torch versions
        return None
