"""OpenTelemetry sink: a span per request and stage, one histogram of stage durations.

Traces are *live* spans: a stage's span is started when the stage starts and made current
(``context.attach``), so code inside the stage that calls an OTel-instrumented client (httpx,
gRPC) propagates the stage's span, and stages inside ``asyncio.gather``, anyio task groups
and ``anyio.to_thread`` get the right parent because OTel's context is a ``ContextVar``.
A ``request()`` inside an already recording span (e.g. FastAPI's OTel instrumentation) joins
it: no second span, the correlation ID becomes an attribute of the existing one.

Metrics never touch the OTel SDK on the request path: a stage end appends a tuple to a
bounded deque; the samples are recorded into the histogram instrument when a metric reader
collects (the callback of an observable counter drains the deque first), i.e. on the
reader's thread.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Iterable, Sequence
from contextvars import Token
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any, Final, cast

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, Meter, Observation
from opentelemetry.trace import Span, Status, StatusCode, Tracer

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


class TraceHook:
    """Stage hook that opens a live OTel span per request and stage."""

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
        if error is not None:
            if isinstance(error, Exception):
                span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            else:
                span.set_attribute("aiperf.outcome", "cancelled")
        otel_context.detach(ctx_token)
        span.end()


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
) -> Sequence[TraceHook | MetricHook]:
    """The OTel hooks for ``configure``; ``None`` providers mean the global ones."""
    from . import __version__

    hooks: list[TraceHook | MetricHook] = []
    if traces:
        provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        hooks.append(TraceHook(provider.get_tracer(SCOPE, __version__)))
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
