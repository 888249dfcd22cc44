"""OpenTelemetry sink: a span per request and stage, one histogram of stage durations.

Traces come in two modes (``configure(otel_spans=...)``):

* ``"deferred"`` (default, :class:`TraceHook`): the request path only records what a span
  needs — name, labels, ``perf_counter_ns`` start/end, error, and a reference to its parent
  record — in a bounded deque; a background thread turns the records into real spans with
  ``tracer.start_span(name, context=parent, start_time=unix_ns)`` + ``span.end(end_time=...)``.
  Nesting is tracked with the SDK's own ``ContextVar`` (so ``asyncio.gather``, anyio task
  groups and ``anyio.to_thread`` see the right parent); a parent whose children are built
  before it ended is started lazily from its recorded start, and ended when its record comes.
  The stage span is never the *current* OTel span, so downstream OTel-instrumented calls
  made inside a stage nest under the enclosing live span (e.g. the server span), not under
  the stage.
* ``"live"`` (:class:`LiveTraceHook`): a stage's span is started when the stage starts and
  made current (``context.attach``), so code inside the stage that calls an OTel-instrumented
  client (httpx, gRPC) propagates the stage's span. Costs about one raw
  ``start_as_current_span`` per stage.

In both modes a ``request()`` inside an already recording span (e.g. FastAPI's OTel
instrumentation) joins it: no second span, the correlation ID becomes an attribute of the
existing one, and the stage spans are its children.

Metrics never touch the OTel SDK on the request path: a stage end appends a tuple to a
bounded deque; the samples are recorded into the histogram instrument when a metric reader
collects (the callback of an observable counter drains the deque first), i.e. on the
reader's thread.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from collections import deque
from collections.abc import Iterable, Sequence
from contextvars import ContextVar, Token
from time import perf_counter_ns, time_ns
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple, cast

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, Meter, Observation
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, Status, StatusCode, Tracer

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.view import View

Labels = tuple[tuple[str, str], ...]

#: instrumentation scope name of every span and instrument the SDK creates
SCOPE: Final = "aiperf_sdk"
#: the stage-duration histogram (seconds; attribute ``aiperf.stage`` plus the stage labels)
DURATION_INSTRUMENT: Final = "aiperf.stage.duration"
#: observable counter of samples dropped because no reader collected them in time
DROPPED_INSTRUMENT: Final = "aiperf.export.dropped"
_OUTCOME_ERROR: Final = ("outcome", "error")
_OUTCOME_CANCELLED: Final = ("outcome", "cancelled")


def _outcome(labels: Labels, error: BaseException | None) -> Labels:
    if error is None:
        return labels
    pair = _OUTCOME_ERROR if isinstance(error, Exception) else _OUTCOME_CANCELLED
    return tuple(sorted((*labels, pair)))


class LiveTraceHook:
    """Stage hook that opens a live OTel span per request and stage (``otel_spans="live"``)."""

    __slots__ = ("_attrs", "_tracer")

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer
        self._attrs: dict[tuple[str, Labels], dict[str, str]] = {}

    def _base_attrs(self, name: str, labels: Labels, kind: str) -> dict[str, str]:
        key = (name, labels)
        attrs = self._attrs.get(key)
        if attrs is None:
            attrs = dict(labels)
            if kind != "request":
                attrs["aiperf.stage"] = name
            if len(self._attrs) < 4096:  # labels are bounded; this is only a guard
                self._attrs[key] = attrs
        return attrs

    def start(
        self, name: str, labels: Labels, request_id: str | None, kind: str
    ) -> tuple[Span, object] | None:
        if kind == "request":
            current = trace.get_current_span()
            if current.is_recording():
                if request_id is not None:
                    current.set_attribute("aiperf.request_id", request_id)
                return None
            span_name = "request"
        else:
            span_name = name
        attrs = self._base_attrs(name, labels, kind)
        if request_id is not None:
            attrs = {**attrs, "aiperf.request_id": request_id}
        span = self._tracer.start_span(span_name, attributes=attrs)
        return span, otel_context.attach(trace.set_span_in_context(span))

    def end(self, token: object, error: BaseException | None) -> None:
        if token is None:
            return
        span, ctx_token = cast("tuple[Span, Token[Context]]", token)
        _set_error(span, error)
        otel_context.detach(ctx_token)
        span.end()

    def span(self, name: str, labels: Labels, request_id: str | None, start_ns: int,
             end_ns: int, error: BaseException | None) -> None:
        """A finished generator stage or stream: a child of the current span."""
        offset = time_ns() - perf_counter_ns()
        attrs = self._base_attrs(name, labels, "stage")
        if request_id is not None:
            attrs = {**attrs, "aiperf.request_id": request_id}
        span = self._tracer.start_span(name, attributes=attrs, start_time=start_ns + offset)
        _set_error(span, error, end_ns + offset)
        span.end(end_time=end_ns + offset)


def _set_error(span: Span, error: BaseException | None, at_unix_ns: int | None = None) -> None:
    if error is None:
        return
    if isinstance(error, Exception):
        span.record_exception(error, timestamp=at_unix_ns)
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
    else:
        span.set_attribute("aiperf.outcome", "cancelled")


# -- deferred spans ----------------------------------------------------------------------------

#: ``configure(otel_spans=...)``: build spans after the fact, or keep them live and current
SpanMode = Literal["deferred", "live"]

_log = logging.getLogger("aiperf_sdk")


class SpanStats(NamedTuple):
    """Counters of the deferred span builder (:func:`aiperf_sdk.flush_spans`)."""

    #: spans handed to the tracer (started and ended) so far
    built: int
    #: spans lost: the queue was full, the sink was reconfigured while they ran, or the SDK
    #: raised while building them
    dropped: int
    #: records waiting in the queue
    queued: int


class _Pending:
    """What the request path records for one deferred span (and, later, the built span)."""

    __slots__ = (
        "ctx", "error", "kind", "labels", "name", "offset", "parent", "request_id", "span", "t0",
        "t1", "token",
    )

    def __init__(
        self, name: str, labels: Labels, request_id: str | None, kind: str,
        parent: _Pending | SpanContext | None, offset: int,
    ) -> None:
        self.name = name
        self.labels = labels
        self.request_id = request_id
        self.kind = kind
        #: the enclosing deferred record, a live span's context, or None (a root span)
        self.parent = parent
        #: ``time_ns() - perf_counter_ns()`` of the trace's root, so a trace has one time base
        self.offset = offset
        self.error: BaseException | None = None
        self.t0 = 0
        self.t1 = 0
        self.token: Token[_Pending | None] | None = None
        #: the SDK span, once the builder started it (kept after it ended: late children of a
        #: fire-and-forget task still need its context)
        self.span: Span | None = None
        #: an OTel context holding ``span``, made once for all of its children
        self.ctx: Context | None = None


#: the innermost deferred record in this context (task, thread)
_current_pending: ContextVar[_Pending | None] = ContextVar("aiperf_sdk_span", default=None)


class TraceHook:
    """Stage hook recording spans on the request path and building them on a thread.

    The request path creates one small record, sets a ``ContextVar`` and appends to a bounded
    deque; ``start_span``/``end`` run on the builder thread every ``interval_s`` (or on
    :meth:`flush`). Never raises into the app: a full queue or a failing SDK call drops the
    span and counts it (:meth:`stats`).
    """

    __slots__ = (
        "__weakref__", "_at_exit", "_attrs", "_built", "_closed", "_dropped", "_interval_s",
        "_lock", "_max_queued", "_open", "_provider", "_queue", "_thread", "_tracer", "_wake",
    )

    def __init__(
        self, tracer: Tracer, provider: Any = None, *, max_queued: int = 100_000,
        interval_s: float = 0.05,
    ) -> None:
        self._tracer = tracer
        self._provider = provider
        self._queue: deque[_Pending] = deque()
        self._max_queued = max_queued
        self._interval_s = interval_s
        self._dropped = 0
        self._built = 0
        self._closed = False
        self._attrs: dict[tuple[str, Labels, str], dict[str, str]] = {}
        #: started spans whose own record has not been processed yet
        self._open: set[_Pending] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_thread()
        ref = weakref.ref(self)
        self._at_exit = lambda: _close_ref(ref)  # flush before the provider's own atexit
        atexit.register(self._at_exit)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=lambda: _restart_ref(ref))

    # -- request path ---------------------------------------------------------------------

    def start(self, name: str, labels: Labels, request_id: str | None, kind: str) -> object:
        parent = _current_pending.get()
        if parent is None:
            current = trace.get_current_span()
            if kind == "request" and current.is_recording():
                # join the framework's live span; our stages become its children
                if request_id is not None:
                    current.set_attribute("aiperf.request_id", request_id)
                return None
            ctx = current.get_span_context()
            t0 = perf_counter_ns()
            pending = _Pending(
                name, labels, request_id, kind, ctx if ctx.is_valid else None, time_ns() - t0
            )
        else:
            pending = _Pending(name, labels, request_id, kind, parent, parent.offset)
        pending.token = _current_pending.set(pending)
        pending.t0 = perf_counter_ns()
        return pending

    def end(self, token: object, error: BaseException | None) -> None:
        self._close(token, error, 0, perf_counter_ns())

    def end_at(self, token: object, error: BaseException | None, start_ns: int,
               end_ns: int) -> None:
        """``end`` with the stage's own clock reads: the span lasts what the ledger has."""
        self._close(token, error, start_ns, end_ns)

    def _close(self, token: object, error: BaseException | None, t0: int, t1: int) -> None:
        if token is None:
            return
        pending = cast(_Pending, token)
        if t0:
            pending.t0 = t0
        # try/except rather than contextlib.suppress: this is the request path
        try:  # noqa: SIM105
            _current_pending.reset(pending.token)  # type: ignore[arg-type]
        except ValueError:  # ended in another context (an async generator finalised elsewhere)
            pass
        pending.token = None
        pending.error = error
        pending.t1 = t1  # after error: the builder treats t1 != 0 as "finished"
        queue = self._queue
        if len(queue) < self._max_queued and not self._closed:
            queue.append(pending)
        else:
            self._dropped += 1

    def span(self, name: str, labels: Labels, request_id: str | None, start_ns: int,
             end_ns: int, error: BaseException | None) -> None:
        """A finished generator stage or stream: queued like a stage's own record, as a
        child of the enclosing deferred stage or request (or of the current live span)."""
        parent = _current_pending.get()
        if parent is None:
            ctx = trace.get_current_span().get_span_context()
            pending = _Pending(name, labels, request_id, "stage", ctx if ctx.is_valid else None,
                               time_ns() - perf_counter_ns())
        else:
            pending = _Pending(name, labels, request_id, "stage", parent, parent.offset)
        pending.t0 = start_ns
        pending.error = error
        pending.t1 = end_ns
        queue = self._queue
        if len(queue) < self._max_queued and not self._closed:
            queue.append(pending)
        else:
            self._dropped += 1

    # -- builder thread -------------------------------------------------------------------

    def _start_thread(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name="aiperf-span-builder", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self._interval_s)
            self._drain()

    def _drain(self) -> None:
        with self._lock:
            queue = self._queue
            while True:
                try:
                    pending = queue.popleft()
                except IndexError:
                    break
                self._finish(pending)
            # a parent started for its children whose own record was dropped (queue full):
            # it has finished (t1 set), so end it from what it recorded
            for pending in [p for p in self._open if p.t1]:
                self._finish(pending)

    def _finish(self, pending: _Pending) -> None:
        span = pending.span
        if span is not None:
            if pending not in self._open:
                return  # already ended by the sweep above
            self._open.discard(pending)
        try:
            if span is None:
                span = self._start(pending)
            end_unix = pending.t1 + pending.offset
            _set_error(span, pending.error, end_unix)
            span.end(end_time=end_unix)
            pending.error = None  # drop the traceback (and its frames)
            self._built += 1
        except Exception:
            self._open.discard(pending)
            self._dropped += 1
            _log.debug("aiperf_sdk: building a deferred span failed", exc_info=True)

    def _context_of(self, pending: _Pending) -> Context:
        """A context holding the span of ``pending`` (a parent), started now if need be."""
        ctx = pending.ctx
        if ctx is None:
            span = pending.span
            if span is None:  # a parent still running: start it from its recorded start
                span = self._start(pending)
                self._open.add(pending)
            ctx = pending.ctx = trace.set_span_in_context(span, Context())
        return ctx

    def _start(self, pending: _Pending) -> Span:
        parent = pending.parent
        if parent is None:
            ctx = Context()
        elif isinstance(parent, _Pending):
            ctx = self._context_of(parent)
        else:
            ctx = trace.set_span_in_context(NonRecordingSpan(parent), Context())
        attrs = self._base_attrs(pending)
        if pending.request_id is not None:
            attrs = {**attrs, "aiperf.request_id": pending.request_id}
        span = self._tracer.start_span(
            "request" if pending.kind == "request" else pending.name,
            context=ctx,
            attributes=attrs,
            start_time=pending.t0 + pending.offset,
        )
        pending.span = span
        return span

    def _base_attrs(self, pending: _Pending) -> dict[str, str]:
        key = (pending.name, pending.labels, pending.kind)
        attrs = self._attrs.get(key)
        if attrs is None:
            attrs = dict(pending.labels)
            if pending.kind != "request":
                attrs["aiperf.stage"] = pending.name
            if len(self._attrs) < 4096:  # labels are bounded; this is only a guard
                self._attrs[key] = attrs
        return attrs

    # -- control ----------------------------------------------------------------------------

    def flush(self, timeout_s: float = 5.0) -> SpanStats:
        """Build every queued span now (on the caller's thread), then flush the provider."""
        self._drain()
        force_flush = getattr(self._provider, "force_flush", None)
        if force_flush is not None:
            force_flush(int(timeout_s * 1000))
        return self.stats()

    def stats(self) -> SpanStats:
        return SpanStats(self._built, self._dropped, len(self._queue))

    def close(self) -> None:
        """Stop the builder thread after building what is queued; later ends are dropped."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._at_exit)
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
        self._drain()

    def _after_fork(self) -> None:
        # threads do not survive fork: the child (a pre-forked worker) needs its own builder
        self._lock = threading.Lock()
        self._queue.clear()
        self._open.clear()
        if not self._closed:
            self._start_thread()


def _close_ref(ref: weakref.ref[TraceHook]) -> None:
    hook = ref()
    if hook is not None:
        hook.close()


def _restart_ref(ref: weakref.ref[TraceHook]) -> None:
    hook = ref()
    if hook is not None:
        hook._after_fork()


class MetricHook:
    """Stage hook feeding the ``aiperf.stage.duration`` histogram off the request path."""

    __slots__ = ("_attrs", "_dropped", "_hist", "_max_pending", "_pending")

    def __init__(self, meter: Meter, max_pending: int = 100_000) -> None:
        self._pending: deque[tuple[str, Labels, int]] = deque()
        self._max_pending = max_pending
        self._dropped = 0
        self._attrs: dict[tuple[str, Labels], dict[str, str]] = {}
        self._hist = meter.create_histogram(
            DURATION_INSTRUMENT,
            unit="s",
            description="Duration of aiperf_sdk stages (e2e, ttft, itl, tpot and user stages)",
        )
        meter.create_observable_counter(
            DROPPED_INSTRUMENT,
            callbacks=[self._collect],
            unit="{sample}",
            description="Stage samples dropped because metrics were not collected in time",
        )

    # -- request path: one tuple appended ---------------------------------------------------

    def start(
        self, name: str, labels: Labels, request_id: str | None, kind: str
    ) -> tuple[str, Labels, int]:
        return ("e2e" if kind == "request" else name), labels, perf_counter_ns()

    def end(self, token: object, error: BaseException | None) -> None:
        name, labels, t0 = cast("tuple[str, Labels, int]", token)
        self._push(name, _outcome(labels, error), perf_counter_ns() - t0)

    def end_at(self, token: object, error: BaseException | None, start_ns: int,
               end_ns: int) -> None:
        """``end`` with the stage's own clock reads: the ledger's duration, exactly."""
        name, labels, _ = cast("tuple[str, Labels, int]", token)
        self._push(name, _outcome(labels, error), end_ns - start_ns)

    def sample(
        self, name: str, labels: Labels, request_id: str | None, duration_ns: int,
        error: BaseException | None,
    ) -> None:
        self._push(name, labels, duration_ns)

    def _push(self, name: str, labels: Labels, duration_ns: int) -> None:
        pending = self._pending
        if len(pending) < self._max_pending:
            pending.append((name, labels, duration_ns))
        else:
            self._dropped += 1

    # -- reader thread ----------------------------------------------------------------------

    def drain(self) -> int:
        """Record every pending sample into the histogram; returns how many."""
        pending, record, cache = self._pending, self._hist.record, self._attrs
        n = 0
        while True:
            try:
                name, labels, duration_ns = pending.popleft()
            except IndexError:
                return n
            attrs = cache.get((name, labels))
            if attrs is None:
                attrs = {"aiperf.stage": name, **dict(labels)}
                if len(cache) < 4096:
                    cache[(name, labels)] = attrs
            record(duration_ns / 1e9, attrs)
            n += 1

    def _collect(self, options: CallbackOptions) -> Iterable[Observation]:
        self.drain()
        return [Observation(self._dropped)]


def otel_views() -> list[View]:
    """Recommended OTel SDK views: base-2 exponential buckets for the stage histogram.

    Exponential histograms of different replicas merge without losing resolution, so a
    collector or backend can compute fleet-wide percentiles. Pass them to your own
    ``MeterProvider(views=...)``; ``configure(otlp_endpoint=...)`` uses them already.

    Example::

        from opentelemetry.sdk.metrics import MeterProvider
        provider = MeterProvider(metric_readers=[reader], views=perf.otel_views())
        perf.configure(otel=True, meter_provider=provider)

    Raises:
        ImportError: ``opentelemetry-sdk`` is not installed (``pip install aiperf-sdk[otel]``).
    """
    from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation, View

    return [
        View(
            instrument_name=DURATION_INSTRUMENT,
            aggregation=ExponentialBucketHistogramAggregation(max_size=160),
        )
    ]


class OwnedProviders:
    """SDK providers that ``configure(otlp_endpoint=...)`` built and must shut down."""

    def __init__(self, tracer_provider: Any | None, meter_provider: Any | None) -> None:
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider

    def shutdown(self) -> None:
        for provider in (self.tracer_provider, self.meter_provider):
            if provider is not None:
                provider.shutdown()


def build_otlp_providers(
    endpoint: str,
    *,
    traces: bool,
    metrics: bool,
    timeout_s: float,
    export_interval_s: float,
) -> OwnedProviders:
    """SDK tracer and meter providers exporting OTLP/HTTP (protobuf) to ``endpoint``.

    ``endpoint`` is the collector's base URL (``http://host:4318``); ``/v1/traces`` and
    ``/v1/metrics`` are appended. Spans go through a ``BatchSpanProcessor`` and metrics
    through a ``PeriodicExportingMetricReader``: both export on their own threads, so a dead
    or slow collector costs the request path nothing but a queue append.
    """
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    base = endpoint.rstrip("/")
    resource = Resource.create()
    tracer_provider = meter_provider = None
    if traces:
        tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=True)
        tracer_provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{base}/v1/traces", timeout=timeout_s))
        )
    if metrics:
        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=f"{base}/v1/metrics", timeout=timeout_s),
            export_interval_millis=export_interval_s * 1000,
            export_timeout_millis=timeout_s * 1000,
        )
        meter_provider = MeterProvider(
            metric_readers=[reader], resource=resource, views=otel_views(),
            shutdown_on_exit=True,
        )
    return OwnedProviders(tracer_provider, meter_provider)


def make_hooks(
    *, traces: bool, metrics: bool, tracer_provider: Any | None, meter_provider: Any | None,
    spans: SpanMode = "deferred",
) -> Sequence[TraceHook | LiveTraceHook | MetricHook]:
    """The OTel hooks for ``configure``; ``None`` providers mean the global ones."""
    from . import __version__

    hooks: list[TraceHook | LiveTraceHook | MetricHook] = []
    if traces:
        provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        tracer = provider.get_tracer(SCOPE, __version__)
        if spans == "live":
            hooks.append(LiveTraceHook(tracer))
        else:
            hooks.append(TraceHook(tracer, provider))
    if metrics:
        from opentelemetry import metrics as otel_metrics

        mp = meter_provider if meter_provider is not None else otel_metrics.get_meter_provider()
        # A meter hands back an already registered instrument (with its first callback) when
        # asked again, so reuse one hook per provider: configuring twice stays correct.
        hook = _METRIC_HOOKS.get(mp)
        if hook is None:
            hook = _METRIC_HOOKS[mp] = MetricHook(mp.get_meter(SCOPE, __version__))
        hooks.append(hook)
    return hooks


_METRIC_HOOKS: weakref.WeakKeyDictionary[Any, MetricHook] = weakref.WeakKeyDictionary()
