"""Prometheus exposition: text format, ASGI app, HTTP server, multi-process, real Prometheus."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import aiperf_sdk as perf

MS = 1_000_000


pytestmark = pytest.mark.usefixtures("export_reset")


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def k(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        body: bytes = resp.read()
    return body.decode()


def _fill(ledger: perf.Ledger) -> None:
    # 1..1000 ms for prefill (model=a); 100 errors; a second label set
    for i in range(1, 1001):
        ledger.record("prefill", i * MS, model="a")
    for _ in range(100):
        ledger.record("prefill", 7 * MS, model="a", outcome="error")
    ledger.record("decode", 3 * MS)


def test_exposition_buckets_counts_sums_and_quantiles(perf_ledger: perf.Ledger) -> None:
    _fill(perf_ledger)
    server = perf.start_http_server(0, buckets_s=(0.01, 0.1, 0.5, 1.0))
    try:
        text = _get(server.url)
    finally:
        server.close()
    s = _samples(text)
    lab = k(model="a", stage="prefill")
    bucket = "aiperf_stage_duration_seconds_bucket"
    for le, count in (("0.01", 10), ("0.1", 100), ("0.5", 500), ("1.0", 1000), ("+Inf", 1000)):
        assert s[(bucket, k(model="a", stage="prefill", le=le))] == count
    assert s[("aiperf_stage_duration_seconds_count", lab)] == 1000
    assert s[("aiperf_stage_duration_seconds_sum", lab)] == pytest.approx(500.5)
    err = (("model", "a"), ("outcome", "error"), ("stage", "prefill"))
    assert s[("aiperf_stage_duration_seconds_count", err)] == 100
    for q, p in (("0.5", 50.0), ("0.9", 90.0), ("0.99", 99.0), ("0.999", 99.9)):
        got = s[("aiperf_stage_latency_seconds", k(model="a", stage="prefill", quantile=q))]
        assert got == pytest.approx(perf_ledger.percentile("prefill", p, model="a") / 1e3)
    assert s[("aiperf_stage_latency_seconds_count", (("stage", "decode"),))] == 1


@pytest.mark.anyio
async def test_asgi_app_serves_the_exposition(perf_ledger: perf.Ledger) -> None:
    perf_ledger.record("prefill", 5 * MS, **{"model.name": "x", "le": "y"})
    app = perf.prometheus_app()
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http", "method": "GET", "path": "/metrics", "query_string": b"",
        "headers": [], "http_version": "1.1", "scheme": "http", "root_path": "",
        "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 1234),
    }
    await app(scope, receive, send)
    assert sent[0]["status"] == 200
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    s = _samples(body.decode())
    # invalid / reserved label names are made valid, never dropped
    key = (("label_le", "y"), ("model_name", "x"), ("stage", "prefill"))
    assert s[("aiperf_stage_duration_seconds_count", key)] == 1


def test_bad_buckets_and_quantiles_are_typed_errors() -> None:
    with pytest.raises(perf.ConfigurationError, match="strictly increasing"):
        perf.prometheus_app(buckets_s=(0.1, 0.01))
    with pytest.raises(perf.ConfigurationError, match="quantiles"):
        perf.prometheus_app(quantiles=(0.5, 1.5))
    with pytest.raises(perf.ConfigurationError, match="interval_s"):
        perf.start_snapshot_writer("/tmp", interval_s=0)


_WORKER = """
import sys, aiperf_sdk as perf
worker, directory = int(sys.argv[1]), sys.argv[2]
for i in range(1, 501):
    perf.default_ledger().record("prefill", (i + 1000 * worker) * 1_000_000)
w = perf.start_snapshot_writer(directory, interval_s=60, name=f"worker{worker}")
w.stop()
"""


@pytest.mark.slow
def test_multi_process_workers_merge_through_a_snapshot_directory(tmp_path: Path) -> None:
    procs = [
        subprocess.run([sys.executable, "-c", _WORKER, str(w), str(tmp_path)], check=True,
                       capture_output=True, timeout=120)
        for w in (0, 1)
    ]
    assert all(p.returncode == 0 for p in procs)
    (tmp_path / "garbage.json").write_text("{not json")  # a broken file is skipped
    assert sorted(p.name for p in tmp_path.glob("*.json")) == [
        "garbage.json", "worker0.json", "worker1.json"
    ]
    expected = perf.Ledger()
    for w in (0, 1):
        for i in range(1, 501):
            expected.record("prefill", (i + 1000 * w) * MS)
    server = perf.start_http_server(0, snapshot_dir=tmp_path)
    try:
        s = _samples(_get(server.url))
    finally:
        server.close()
    lab = (("stage", "prefill"),)
    assert s[("aiperf_stage_duration_seconds_count", lab)] == 1000
    assert s[("aiperf_stage_duration_seconds_sum", lab)] == pytest.approx(
        sum((i + 1000 * w) / 1e3 for w in (0, 1) for i in range(1, 501))
    )
    p99 = s[("aiperf_stage_latency_seconds", (("quantile", "0.99"), ("stage", "prefill")))]
    assert p99 == pytest.approx(expected.percentile("prefill", 99.0) / 1e3)
    # the merged p50 lies between the workers' ranges: neither worker alone has it
    p50 = s[("aiperf_stage_latency_seconds", (("quantile", "0.5"), ("stage", "prefill")))]
    assert p50 == pytest.approx(expected.percentile("prefill", 50.0) / 1e3)


def test_configure_starts_one_server_and_is_safe_twice(perf_ledger: perf.Ledger) -> None:
    from aiperf_sdk._configure import prometheus_server

    perf.configure(prometheus_port=0)
    first = prometheus_server()
    perf.configure(prometheus_port=0)
    assert prometheus_server() is first  # same settings: the running server is kept
    perf_ledger.record("x", MS)
    assert "aiperf_stage_duration_seconds_count" in _get(first.url)
    perf.configure()
    assert prometheus_server() is None


# -- a real Prometheus server ------------------------------------------------------------------


def _prometheus_binary() -> str | None:
    return shutil.which("prometheus") or (
        "/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None
    )


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, perf.MetricsServer]]:
    binary = _prometheus_binary()
    if binary is None:
        pytest.skip("the prometheus binary is not installed (run scripts/install_prometheus.sh)")
    target = perf.start_http_server(0)
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: aiperf\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{target.port}']\n"
    )
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = tmp_path / "prometheus.log"
    with log.open("wb") as log_file:
        proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log_file, stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if "Ready" in _get(base + "/-/ready"):
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                err = log.read_text(errors="replace")
                pytest.fail(f"prometheus did not become ready: {err[-2000:]}")
            time.sleep(0.2)
        yield base, target
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        target.close()


def _query(base: str, promql: str) -> list[dict[str, Any]]:
    url = base + "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    body = json.loads(_get(url))
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


@pytest.mark.slow
def test_real_prometheus_histogram_quantile_agrees_with_ledger(
    prometheus: tuple[str, perf.MetricsServer], perf_ledger: perf.Ledger
) -> None:
    base, _ = prometheus
    buckets = perf._prometheus.DEFAULT_BUCKETS_S
    for i in range(1, 2001):  # 1..2000 ms, skewed so p99 is in the tail
        perf_ledger.record("prefill", (i * i // 2000 + 1) * MS, model="chat")
    q = (
        "histogram_quantile(0.99, sum by (le) "
        '(aiperf_stage_duration_seconds_bucket{stage="prefill"}))'
    )
    deadline = time.monotonic() + 60
    result: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        result = _query(base, q)
        if result and result[0]["value"][1] not in ("NaN",):
            break
        time.sleep(0.5)
    assert result, "prometheus never scraped the SDK's /metrics"
    prom_p99 = float(result[0]["value"][1])
    ledger_p99 = perf_ledger.percentile("prefill", 99.0, model="chat") / 1e3
    # the same bucket: histogram_quantile interpolates inside the bucket holding the rank
    upper = min(b for b in buckets if b >= ledger_p99)
    lower = max([b for b in buckets if b < ledger_p99], default=0.0)
    assert lower <= prom_p99 <= upper, (prom_p99, ledger_p99, lower, upper)
    # and the exact quantile the summary exposes is the ledger's
    summ = _query(base, 'aiperf_stage_latency_seconds{stage="prefill",quantile="0.99"}')
    assert float(summ[0]["value"][1]) == pytest.approx(ledger_p99)
    count = _query(base, 'aiperf_stage_duration_seconds_count{stage="prefill"}')
    assert float(count[0]["value"][1]) == 2000
