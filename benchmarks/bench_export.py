"""Hot-path cost of the telemetry sinks, next to the raw OpenTelemetry SDK span.

Run:  .venv/bin/python benchmarks/bench_export.py [--n 20000] [--repeat 5]

Each row times ``with perf.stage("prefill", model="m"): pass`` inside a request (best of
``repeat`` runs of ``n``), so it is the per-stage overhead a service pays. Peers, measured in
the same run: a bare ``tracer.start_as_current_span(name, attributes=2 attrs)`` on the same
SDK TracerProvider (BatchSpanProcessor into an in-memory exporter), and ``Histogram.record``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import aiperf_sdk as perf


def best_ns(fn: Callable[[int], None], n: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn(n)
        best = min(best, (time.perf_counter_ns() - t0) / n)
    return best


def stage_loop(n: int) -> None:
    stage = perf.stage
    for _ in range(n):
        with stage("prefill", model="m"):
            pass


def in_request(fn: Callable[[int], None]) -> Callable[[int], None]:
    def run(n: int) -> None:
        with perf.request():
            fn(n)

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    n, repeat = args.n, args.repeat

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader], views=perf.otel_views())
    tracer = tracer_provider.get_tracer("bench")
    hist = meter_provider.get_meter("bench").create_histogram("raw", unit="s")

    def raw_span(n: int) -> None:
        attrs = {"aiperf.stage": "prefill", "model": "m"}
        for _ in range(n):
            with tracer.start_as_current_span("prefill", attributes=attrs):
                pass

    def raw_record(n: int) -> None:
        attrs = {"aiperf.stage": "prefill", "model": "m"}
        for _ in range(n):
            hist.record(0.001, attrs)

    loop = in_request(stage_loop)
    rows: list[tuple[str, float]] = []
    rows.append(("never configured", best_ns(loop, n, repeat)))
    perf.configure()
    rows.append(("configure() nothing on", best_ns(loop, n, repeat)))
    configs: list[tuple[str, dict[str, object]]] = [
        ("otel traces", {"otel_traces": True, "tracer_provider": tracer_provider}),
        ("otel metrics", {"otel_metrics": True, "meter_provider": meter_provider}),
        ("torch_profiler (no profiler running)", {"torch_profiler": True}),
        ("nvtx (no tool attached)", {"nvtx": True}),
        ("logging", {"logging": True}),
    ]
    for label, kwargs in configs:
        perf.configure(**kwargs)  # type: ignore[arg-type]
        rows.append((label, best_ns(loop, n, repeat)))
        reader.get_metrics_data()  # drain what metrics queued (off the timed path)
        perf.configure()
    peer_span = best_ns(raw_span, n, repeat)
    peer_record = best_ns(raw_record, n, repeat)
    tracer_provider.shutdown()
    meter_provider.shutdown()

    plain = rows[0][1]
    print(f"per stage, best of {repeat} x {n}  (ratio vs never configured)")
    for label, ns in rows:
        print(f"  {label:40s} {ns:9.0f} ns   {ns / plain:6.2f}x")
    otel = dict(rows)["otel traces"]
    metrics = dict(rows)["otel metrics"]
    print(f"  {'peer: raw OTel start_as_current_span':40s} {peer_span:9.0f} ns")
    print(f"  {'peer: raw OTel Histogram.record':40s} {peer_record:9.0f} ns")
    print(f"otel traces stage / raw span:            {otel / peer_span:.2f}x")
    print(f"otel metrics stage / raw Histogram.record: {metrics / peer_record:.2f}x")
    print(f"configure() nothing / never configured:  {rows[1][1] / plain:.2f}x")


if __name__ == "__main__":
    main()
