"""OpenTelemetry sink against the real SDK (in-memory exporter and reader, OTLP over HTTP)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ExponentialHistogramDataPoint,
    InMemoryMetricReader,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import aiperf_sdk as perf
from aiperf_sdk import _hooks

pytestmark = pytest.mark.usefixtures("export_reset")


class Spans:
    """The real SDK's in-memory exporter behind a TracerProvider configured into perf."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def finished(self) -> tuple[ReadableSpan, ...]:
        stats = perf.flush_spans()  # deferred: build what was recorded; live: nothing to do
        if self.mode == "deferred":
            assert stats is not None and stats.dropped == 0 and stats.queued == 0
        else:
            assert stats is None
        return self.exporter.get_finished_spans()


@pytest.fixture(params=["deferred", "live"])
def spans(request: pytest.FixtureRequest) -> Iterator[Spans]:
    sp = Spans(request.param)
    perf.configure(otel_traces=True, otel_spans=request.param, tracer_provider=sp.provider)
    yield sp
    perf.configure()
    sp.provider.shutdown()


def by_name(finished: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in finished if s.name == name]


def parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def test_request_and_stages_become_nested_spans(spans: Spans) -> None:

    @perf.stage("prefill", model="chat")
    def prefill() -> None:
        with perf.stage("kernel"):
            pass

    with perf.request(id="req-1"):
        with perf.stage("tokenize"):
            pass
        prefill()
    finished = spans.finished()
    req = by_name(finished, "request")[0]
    tok, pre, ker = (by_name(finished, n)[0] for n in ("tokenize", "prefill", "kernel"))
    assert parent_id(req) is None
    assert parent_id(tok) == req.context.span_id
    assert parent_id(pre) == req.context.span_id
    assert parent_id(ker) == pre.context.span_id
    assert {s.context.trace_id for s in finished} == {req.context.trace_id}
    assert pre.attributes is not None
    assert dict(pre.attributes) == {
        "aiperf.stage": "prefill", "aiperf.request_id": "req-1", "model": "chat"
    }
    assert req.attributes is not None and req.attributes["aiperf.request_id"] == "req-1"
    assert pre.start_time is not None and ker.start_time is not None
    assert pre.start_time <= ker.start_time


def test_request_joins_an_existing_recording_span(spans: Spans) -> None:
    tracer = spans.provider.get_tracer("framework")
    with (
        tracer.start_as_current_span("GET /v1/chat") as server_span,
        perf.request(id="abc"),
        perf.stage("decode"),
    ):
        pass
    finished = sorted(spans.finished(), key=lambda s: s.name)
    assert [s.name for s in finished] == ["GET /v1/chat", "decode"]  # no second request span
    server = finished[0]
    assert server.attributes is not None and server.attributes["aiperf.request_id"] == "abc"
    assert parent_id(finished[1]) == server_span.get_span_context().span_id
    assert finished[1].context.trace_id == server.context.trace_id


def test_exception_is_recorded_and_reraised(spans: Spans) -> None:
    with pytest.raises(ValueError, match="boom"), perf.request(), perf.stage("prefill"):
        raise ValueError("boom")
    finished = spans.finished()
    assert sorted(s.name for s in finished) == ["prefill", "request"]
    for span in finished:
        assert span.status.status_code is StatusCode.ERROR
        assert [e.name for e in span.events] == ["exception"]
        assert span.events[0].attributes is not None
        assert span.events[0].attributes["exception.type"] == "ValueError"


@pytest.mark.anyio
async def test_async_stages_in_gather_task_group_and_thread_get_right_parents(
    spans: Spans, anyio_backend: str
) -> None:

    @perf.stage("leaf")
    async def leaf(i: int) -> None:
        await anyio.sleep(0.001 * (3 - i))

    def blocking() -> None:
        with perf.stage("in_thread"):
            time.sleep(0.001)

    async with perf.request(id="r-async"):
        async with perf.stage("group"), anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(leaf, i)
        if anyio_backend == "asyncio":
            async with perf.stage("gathered"):
                await asyncio.gather(*(leaf(i) for i in range(3)))
        async with perf.stage("threaded"):
            await anyio.to_thread.run_sync(blocking)
    finished = spans.finished()
    ids = {s.name: s.context.span_id for s in finished if s.name != "leaf"}
    leaves = by_name(finished, "leaf")
    parents = sorted(parent_id(s) for s in leaves if parent_id(s) == ids["group"])
    assert len(parents) == 3
    if anyio_backend == "asyncio":
        assert sum(parent_id(s) == ids["gathered"] for s in leaves) == 3
        assert len(leaves) == 6
    else:
        assert len(leaves) == 3
    assert parent_id(by_name(finished, "in_thread")[0]) == ids["threaded"]
    assert parent_id(by_name(finished, "group")[0]) == ids["request"]


def test_metrics_histogram_with_stream_ttft_itl_tpot() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], views=perf.otel_views())
    perf.configure(otel_metrics=True, meter_provider=provider)
    try:
        with perf.request():
            with perf.stage("prefill", model="chat"):
                time.sleep(0.002)
            for _ in perf.stream("decode", iter(range(4))):
                pass
        with pytest.raises(KeyError), perf.stage("prefill", model="chat"):
            raise KeyError("x")
        data = reader.get_metrics_data()
    finally:
        provider.shutdown()
    assert data is not None
    metrics = {
        m.name: m
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    hist = metrics["aiperf.stage.duration"]
    assert hist.unit == "s"
    points = {
        tuple(sorted(p.attributes.items())): p  # type: ignore[union-attr]
        for p in hist.data.data_points
    }
    for point in points.values():
        assert isinstance(point, ExponentialHistogramDataPoint)
    prefill = points[(("aiperf.stage", "prefill"), ("model", "chat"))]
    assert prefill.count == 1 and prefill.sum >= 0.002
    assert points[(("aiperf.stage", "prefill"), ("model", "chat"), ("outcome", "error"))].count == 1
    assert points[(("aiperf.stage", "ttft"),)].count == 1
    assert points[(("aiperf.stage", "itl"),)].count == 3
    assert points[(("aiperf.stage", "tpot"),)].count == 1
    assert points[(("aiperf.stage", "decode"),)].count == 1
    assert points[(("aiperf.stage", "e2e"),)].count == 1
    # the metric gets the stage's own clock reads (end_at): the ledger's durations, exactly
    ledger = perf.default_ledger()
    assert points[(("aiperf.stage", "e2e"),)].sum * 1e3 == pytest.approx(ledger.mean("e2e"))
    assert prefill.sum * 1e3 == pytest.approx(ledger.mean("prefill", model="chat"))


def test_configure_twice_with_same_meter_provider_still_exports() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    perf.configure(otel_metrics=True, meter_provider=provider)
    perf.configure(otel_metrics=True, meter_provider=provider)
    assert len(_hooks.HOOKS) == 1
    with perf.stage("s"):
        pass
    data = reader.get_metrics_data()
    provider.shutdown()
    assert data is not None
    counts = [
        p.count  # type: ignore[union-attr]
        for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
        if m.name == "aiperf.stage.duration" for p in m.data.data_points
    ]
    assert counts == [1]


# -- OTLP over HTTP to a real receiver on 127.0.0.1 ------------------------------------------


class _Receiver(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.traces: list[ExportTraceServiceRequest] = []
        self.metrics: list[ExportMetricsServiceRequest] = []
        self.got = threading.Event()


class _Handler(BaseHTTPRequestHandler):
    server: _Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        assert self.headers["Content-Type"] == "application/x-protobuf"
        if self.path == "/v1/traces":
            msg = ExportTraceServiceRequest()
            msg.ParseFromString(body)
            self.server.traces.append(msg)
        elif self.path == "/v1/metrics":
            msg2 = ExportMetricsServiceRequest()
            msg2.ParseFromString(body)
            self.server.metrics.append(msg2)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
        self.server.got.set()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.mark.slow
def test_otlp_http_export_to_a_real_receiver() -> None:
    receiver = _Receiver()
    thread = threading.Thread(target=receiver.serve_forever, daemon=True)
    thread.start()
    try:
        perf.configure(otel=True, otlp_endpoint=f"http://127.0.0.1:{receiver.server_port}",
                       otel_export_interval_s=60)
        with perf.request(id="otlp-1"), perf.stage("prefill", model="m"):
            pass
        perf.configure()  # shuts the providers down, which flushes spans and metrics
    finally:
        receiver.shutdown()
        receiver.server_close()
    spans = [
        s for req in receiver.traces for rs in req.resource_spans
        for ss in rs.scope_spans for s in ss.spans
    ]
    assert sorted(s.name for s in spans) == ["prefill", "request"]
    prefill = next(s for s in spans if s.name == "prefill")
    attrs = {a.key: a.value.string_value for a in prefill.attributes}
    assert attrs == {"aiperf.stage": "prefill", "aiperf.request_id": "otlp-1", "model": "m"}
    request = next(s for s in spans if s.name == "request")
    assert prefill.parent_span_id == request.span_id
    metrics = [
        m for req in receiver.metrics for rm in req.resource_metrics
        for sm in rm.scope_metrics for m in sm.metrics
    ]
    hist = next(m for m in metrics if m.name == "aiperf.stage.duration")
    assert hist.WhichOneof("data") == "exponential_histogram"
    stages = {
        a.value.string_value
        for p in hist.exponential_histogram.data_points for a in p.attributes
        if a.key == "aiperf.stage"
    }
    assert stages == {"prefill", "e2e"}


def _black_hole() -> tuple[socket.socket, list[socket.socket]]:
    """A TCP listener that accepts connections and never answers (a hung collector)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    return listener, held


def _request_latency_ns(n: int) -> list[int]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        with perf.request(), perf.stage("a"), perf.stage("b"):
            pass
        out.append(time.perf_counter_ns() - t0)
    return out


@pytest.mark.slow
def test_hung_or_dead_otlp_endpoint_does_not_slow_or_break_requests() -> None:
    # Baseline: the same SDK pipeline (batch processor) with an exporter that keeps spans
    # in memory; then the OTLP exporter pointed at a hung endpoint and at a closed port.
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    n = 3000
    base_provider = TracerProvider()
    base_provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    perf.configure(otel_traces=True, tracer_provider=base_provider)
    _request_latency_ns(300)  # warm up
    baseline = sorted(_request_latency_ns(n))
    perf.configure()
    base_provider.shutdown()

    listener, held = _black_hole()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    dead_port = closed.getsockname()[1]
    closed.close()
    try:
        results = {}
        for label, port in (("hung", listener.getsockname()[1]), ("dead", dead_port)):
            perf.configure(otel=True, otlp_endpoint=f"http://127.0.0.1:{port}",
                           otlp_timeout_s=0.5, otel_export_interval_s=0.05)
            _request_latency_ns(300)
            results[label] = sorted(_request_latency_ns(n))
            t0 = time.monotonic()
            perf.configure()  # shutdown must not hang on the bad endpoint either
            assert time.monotonic() - t0 < 30
    finally:
        listener.close()
        for conn in held:
            conn.close()
    p50 = baseline[n // 2]
    for label, lat in results.items():
        ratio = lat[n // 2] / p50
        print(f"{label}: p50 {lat[n // 2] / 1e3:.1f} us vs {p50 / 1e3:.1f} us -> {ratio:.2f}x")
        assert ratio < 3.0, (label, ratio)
    assert trace.get_current_span() is trace.INVALID_SPAN
