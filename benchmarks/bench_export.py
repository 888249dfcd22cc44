"""Hot-path cost of the telemetry sinks, next to the raw OpenTelemetry SDK span.

Run:  .venv/bin/python benchmarks/bench_export.py [--n 20000] [--repeat 5]

Each row times ``with perf.stage("prefill", model="m"): pass`` inside a request (best of
``repeat`` runs of ``n``), so it is the per-stage overhead a service pays, with each sink of
issue 4 switched on alone: OTel traces (deferred and live spans), OTel metrics, NVTX,
torch.profiler ranges, logging. Peers, measured in the same run: a hand-written
``tracer.start_as_current_span(name, attributes=...)`` with the same three attributes the SDK
puts on a stage span (``aiperf.stage``, ``aiperf.request_id``, ``model``) on the same SDK
TracerProvider (BatchSpanProcessor into an in-memory exporter), and ``Histogram.record``.

Deferred spans are built on a background thread; it runs during the timed loop and takes the
GIL for its share, so the "deferred" row already pays part of the building. The
"deferred incl. building" row also times ``perf.flush_spans()`` after the loop, i.e. every
span of the loop built and handed to the processor: the whole CPU cost, not only the
request path's.
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
        attrs = {"aiperf.stage": "prefill", "aiperf.request_id": "0" * 32, "model": "m"}
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
    def with_flush(n: int) -> None:
        loop(n)
        perf.flush_spans()

    # The span variants and their peer alternate within each round, so load that drifts
    # during the run (shared CPUs) hits all of them alike; best round per variant.
    spans = {"otel_traces": True, "tracer_provider": tracer_provider}
    variants: list[tuple[str, str | None, Callable[[int], None]]] = [
        ("otel traces, deferred (default)", "deferred", loop),
        ("otel traces, deferred incl. building", "deferred", with_flush),
        ("otel traces, live", "live", loop),
        ("peer: raw OTel start_as_current_span", None, raw_span),
    ]
    best = {label: float("inf") for label, _, _ in variants}
    for _ in range(repeat):
        for label, mode, fn in variants:
            if mode is not None:
                perf.configure(**spans, otel_spans=mode)  # type: ignore[arg-type]
            best[label] = min(best[label], best_ns(fn, n, 1))
            perf.flush_spans()
            perf.configure()
    peer_span = best.pop("peer: raw OTel start_as_current_span")
    rows.extend(best.items())
    configs: list[tuple[str, dict[str, object]]] = [
        ("otel metrics", {"otel_metrics": True, "meter_provider": meter_provider}),
        ("torch_profiler (no profiler running)", {"torch_profiler": True}),
        ("nvtx (no tool attached)", {"nvtx": True}),
        ("logging", {"logging": True}),
    ]
    for label, kwargs in configs:
        perf.configure(**kwargs)  # type: ignore[arg-type]
        rows.append((label, best_ns(loop, n, repeat)))
        reader.get_metrics_data()  # drain what metrics queued (off the timed path)
        perf.flush_spans()  # build what deferred spans queued (off the timed path)
        perf.configure()
    peer_record = best_ns(raw_record, n, repeat)
    tracer_provider.shutdown()
    meter_provider.shutdown()

    plain = rows[0][1]
    print(f"per stage, best of {repeat} x {n}  (ratio vs never configured)")
    for label, ns in rows:
        print(f"  {label:40s} {ns:9.0f} ns   {ns / plain:6.2f}x")
    by = dict(rows)
    metrics = by["otel metrics"]
    print(f"  {'peer: raw OTel start_as_current_span':40s} {peer_span:9.0f} ns   "
          f"{peer_span / plain:6.2f}x")
    print(f"  {'peer: raw OTel Histogram.record':40s} {peer_record:9.0f} ns")
    for label in ("otel traces, deferred (default)", "otel traces, deferred incl. building",
                  "otel traces, live"):
        print(f"{label + ' / raw span:':50s} {by[label] / peer_span:.2f}x")
    print(f"{'otel metrics stage / raw Histogram.record:':50s} {metrics / peer_record:.2f}x")
    for label in ("torch_profiler (no profiler running)", "nvtx (no tool attached)", "logging"):
        print(f"{label + ' / never configured:':50s} {by[label] / plain:.2f}x")
    print(f"{'configure() nothing / never configured:':50s} {rows[1][1] / plain:.2f}x")


if __name__ == "__main__":
    main()
