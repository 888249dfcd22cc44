"""PerfMiddleware against a REAL uvicorn server on 127.0.0.1, driven by an httpx client.

Every test starts its own uvicorn (in a thread, on a free port) around its own app and
ledger; nothing here is faked. The middleware records after the last byte is handed to the
server, so the client can see the response a moment before the record lands: tests wait for
the ``recorder`` hook (which runs after recording) instead of sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx
import pytest
import uvicorn
from aiperf_sdk_fastapi import (
    HttpExchange,
    MiddlewareConfigError,
    PerfMiddleware,
    add_readiness_route,
    add_summary_route,
    instrument_app,
    mount_metrics,
    uninstrument_app,
    warmup_lifespan,
)
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, StreamingResponse

import aiperf_sdk as perf

pytestmark = pytest.mark.slow

HEX32 = re.compile(r"[0-9a-f]{32}")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Recorder:
    """The middleware's ``recorder`` hook: collects exchanges, lets a test wait for them."""

    def __init__(self) -> None:
        self.items: list[HttpExchange] = []
        self._cond = threading.Condition()

    def __call__(self, exchange: HttpExchange) -> None:
        with self._cond:
            self.items.append(exchange)
            self._cond.notify_all()

    def wait(self, n: int, timeout_s: float = 10.0) -> list[HttpExchange]:
        with self._cond:
            ok = self._cond.wait_for(lambda: len(self.items) >= n, timeout_s)
        assert ok, f"expected {n} recorded requests, got {len(self.items)}"
        return list(self.items)

    def by_id(self, rid: str) -> HttpExchange:
        matches = [e for e in self.items if e.request_id == rid]
        assert len(matches) == 1, (rid, self.items)
        return matches[0]


@contextlib.contextmanager
def serve(app: Any) -> Iterator[str]:
    """Run ``app`` under a real uvicorn on 127.0.0.1:<free port>; yield its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="auto", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive(), "uvicorn exited during startup"
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(20)
        sock.close()


def make_app(rec: Recorder, ledger: perf.Ledger, **options: Any) -> FastAPI:
    app = FastAPI()

    @app.get("/echo")
    async def echo(request: Request) -> dict[str, str | None]:
        await asyncio.sleep(random.uniform(0, 0.02))  # interleave concurrent requests
        return {
            "current": perf.current_request_id(),
            "header": request.headers.get("x-request-id"),
        }

    @app.get("/items/{item_id}")
    async def item(item_id: int) -> dict[str, int]:
        return {"item": item_id}

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("boom")

    @app.get("/healthz")
    async def healthz() -> PlainTextResponse:
        return PlainTextResponse("ok")

    @app.get("/stream")
    async def stream(chunks: int = 5, gap_ms: float = 30, sse: bool = False) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            for i in range(chunks):
                if i:
                    await asyncio.sleep(gap_ms / 1000)
                yield f"data: {i}\n\n".encode() if sse else f"{i}\n".encode()

        media = "text/event-stream" if sse else "text/plain"
        return StreamingResponse(body(), media_type=media)

    app.add_middleware(PerfMiddleware, ledger=ledger, recorder=rec, **options)
    return app


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


@pytest.fixture
def ledger() -> perf.Ledger:
    return perf.Ledger()


# -- correlation IDs ----------------------------------------------------------------------


def test_valid_id_is_used_echoed_and_seen_by_the_app(rec: Recorder, ledger: perf.Ledger) -> None:
    with serve(make_app(rec, ledger)) as url:
        r = httpx.get(f"{url}/echo", headers={"X-Request-ID": "client-42.a:b"})
    assert r.status_code == 200
    assert r.headers.get_list("x-request-id") == ["client-42.a:b"]
    assert r.json() == {"current": "client-42.a:b", "header": "client-42.a:b"}
    assert rec.wait(1)[0].request_id == "client-42.a:b"
    assert [t.id for t in ledger.slowest("e2e")] == ["client-42.a:b"]


def test_absent_id_is_generated_echoed_and_propagated(rec: Recorder, ledger: perf.Ledger) -> None:
    with serve(make_app(rec, ledger)) as url:
        r = httpx.get(f"{url}/echo")
    rid = r.headers["x-request-id"]
    assert HEX32.fullmatch(rid)
    # the app sees the same ID as the ledger and the client, in its context and its headers
    assert r.json() == {"current": rid, "header": rid}
    assert rec.wait(1)[0].request_id == rid


@pytest.mark.parametrize(
    "hostile",
    [
        b"x" * 10_000,  # 10 kB
        "caf\u00e9-\u2603".encode(),  # non-ASCII
        b"id with spaces",
        b"tab\there",
        b"<script>alert(1)</script>",
        b"a" * 129,  # one past the limit
        b"",
    ],
    ids=["10kB", "non-ascii", "spaces", "tab", "markup", "129", "empty"],
)
def test_hostile_id_is_replaced_and_never_logged(
    hostile: bytes, rec: Recorder, ledger: perf.Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with serve(make_app(rec, ledger)) as url:
        r = httpx.get(f"{url}/echo", headers=[(b"X-Request-ID", hostile)])
    rid = r.headers["x-request-id"]
    assert HEX32.fullmatch(rid), rid
    assert r.json() == {"current": rid, "header": rid}  # the app never sees the hostile value
    assert rec.wait(1)[0].request_id == rid
    needle = hostile.decode("latin-1")[:40]
    if needle:
        assert all(needle not in rec_.getMessage() for rec_ in caplog.records)
        assert all(needle not in str(t) for t in ledger.slowest("e2e"))


def test_newline_in_id_is_replaced(rec: Recorder, ledger: perf.Ledger) -> None:
    """CR, LF, VT and NUL cannot reach the app through uvicorn (it answers 400 itself, checked
    here on the wire); a laxer server or proxy could deliver them, so the middleware is also
    called directly with such a scope (the one place this file does not go through uvicorn)."""
    with serve(make_app(rec, ledger)) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as s:
            s.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Request-ID: bad\ninjected\r\n"
                      b"Connection: close\r\n\r\n")
            raw = b""
            while chunk := s.recv(65536):
                raw += chunk
    assert raw.startswith(b"HTTP/1.1 400") and b"injected" not in raw
    assert not rec.items

    sent: list[dict[str, Any]] = []
    seen: list[list[tuple[bytes, bytes]]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(list(scope["headers"]))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    mw = PerfMiddleware(app, ledger=ledger, recorder=rec)
    hostile = b"bad\r\nSet-Cookie: x=1"
    scope = {"type": "http", "method": "GET", "path": "/echo", "root_path": "",
             "headers": [(b"x-request-id", hostile)]}
    anyio.run(mw, scope, receive, send)
    echoed = [v for k, v in sent[0]["headers"] if k == b"x-request-id"]
    assert len(echoed) == 1 and HEX32.fullmatch(echoed[0].decode())
    assert seen[0] == [(b"x-request-id", echoed[0])]  # the app got the clean ID only
    assert rec.wait(1)[0].request_id == echoed[0].decode()


@pytest.mark.anyio
async def test_concurrent_requests_never_cross_ids(rec: Recorder, ledger: perf.Ledger) -> None:
    n = 60
    with serve(make_app(rec, ledger)) as url:
        async with httpx.AsyncClient(base_url=url) as client:
            results: dict[int, httpx.Response] = {}

            async def one(i: int) -> None:
                headers = {"X-Request-ID": f"req-{i}"} if i % 3 else {}
                results[i] = await client.get("/echo", headers=headers)

            async with anyio.create_task_group() as tg:
                for i in range(n):
                    tg.start_soon(one, i)
        rec.wait(n)
    seen = set()
    for i, r in results.items():
        rid = r.headers["x-request-id"]
        if i % 3:
            assert rid == f"req-{i}"
        assert r.json() == {"current": rid, "header": rid}
        assert rec.by_id(rid).route == "/echo"
        seen.add(rid)
    assert len(seen) == n
    assert ledger.count("e2e") == n


# -- timing -------------------------------------------------------------------------------


@pytest.mark.parametrize("sse", [False, True], ids=["chunked", "sse"])
def test_streaming_is_timed_to_the_last_byte(
    sse: bool, rec: Recorder, ledger: perf.Ledger
) -> None:
    chunks, gap_ms = 5, 40
    with serve(make_app(rec, ledger)) as url, httpx.stream(
        "GET", f"{url}/stream", params={"chunks": chunks, "gap_ms": gap_ms, "sse": sse}
    ) as r:
        t0 = time.perf_counter_ns()
        got = list(r.iter_bytes())
        client_ns = time.perf_counter_ns() - t0
        rid = r.headers["x-request-id"]
    assert b"".join(got).count(b"\n") >= chunks
    ex = rec.wait(1)[0]
    assert ex.request_id == rid and ex.status == 200
    assert ex.ttfb_ns is not None and ex.total_ns is not None
    # the body sleeps (chunks-1)*gap between chunks: total must include it, TTFB must not
    assert ex.total_ns >= (chunks - 1) * gap_ms * 1_000_000
    assert ex.ttfb_ns < ex.total_ns / 2
    # measured to the last byte: the client's own read of the body cannot be much longer
    assert ex.total_ns >= 0.5 * client_ns
    labels = {"route": "/stream", "status_class": "2xx"}
    assert ledger.count("http_ttfb", **labels) == 1
    assert ledger.count("http_total", **labels) == 1
    assert ledger.percentile("http_total", 50, **labels) > 3 * ledger.percentile(
        "http_ttfb", 50, **labels)
    trace = ledger.slowest("e2e")[0]
    assert trace.id == rid and set(trace.stages) >= {"http_ttfb", "http_total"}


def test_labels_are_route_templates_and_status_classes(
    rec: Recorder, ledger: perf.Ledger
) -> None:
    with serve(make_app(rec, ledger)) as url, httpx.Client(base_url=url) as c:
        for i in (1, 2, 3):
            assert c.get(f"/items/{i}").status_code == 200
        assert c.get("/items/not-a-number").status_code == 422
        assert c.get("/no/such/path/123").status_code == 404
        assert c.get("/boom").status_code == 500
        rec.wait(6)
    summary = ledger.summary()
    routes = {r.labels.get("route") for r in summary.rows}
    assert routes == {"/items/{item_id}", "unmatched", "/boom"}  # never a raw path
    assert ledger.count("http_total", route="/items/{item_id}", status_class="2xx") == 3
    assert ledger.count("http_total", route="/items/{item_id}", status_class="4xx") == 1
    assert ledger.count("http_total", route="unmatched", status_class="4xx") == 1
    # the exception escaped the app: e2e is labelled error and 5xx; no response went through us
    assert ledger.count("e2e", route="/boom", status_class="5xx", outcome="error") == 1
    boom = next(e for e in rec.items if e.route == "/boom")
    assert boom.error and boom.status == 0 and boom.total_ns is None


def test_mounted_sub_app_routes_are_prefixed(rec: Recorder, ledger: perf.Ledger) -> None:
    app = FastAPI()
    sub = FastAPI()

    @sub.get("/users/{uid}")
    async def user(uid: str) -> dict[str, str]:
        return {"uid": uid}

    app.mount("/v2", sub)
    app.add_middleware(PerfMiddleware, ledger=ledger, recorder=rec)
    with serve(app) as url:
        assert httpx.get(f"{url}/v2/users/alice").status_code == 200
    assert rec.wait(1)[0].route == "/v2/users/{uid}"


def test_excluded_paths_are_not_timed(rec: Recorder, ledger: perf.Ledger) -> None:
    app = make_app(rec, ledger, exclude=[r"/healthz", r"/items/.*"])
    with serve(app) as url, httpx.Client(base_url=url) as c:
        h = c.get("/healthz")
        i = c.get("/items/7")
        e = c.get("/echo")
        rec.wait(1)
        time.sleep(0.1)  # give a wrongly timed excluded request the chance to show up
    assert h.status_code == i.status_code == e.status_code == 200
    assert "x-request-id" not in h.headers and "x-request-id" not in i.headers
    assert [x.route for x in rec.items] == ["/echo"]
    assert ledger.count("e2e") == 1


def test_custom_header_name(rec: Recorder, ledger: perf.Ledger) -> None:
    with serve(make_app(rec, ledger, header_name="X-Correlation-ID")) as url:
        r = httpx.get(f"{url}/items/1", headers={"X-Correlation-ID": "corr-1"})
    assert r.headers["x-correlation-id"] == "corr-1"
    assert "x-request-id" not in r.headers
    assert rec.wait(1)[0].request_id == "corr-1"


def test_broken_recorder_never_breaks_requests(ledger: perf.Ledger) -> None:
    def bad(exchange: HttpExchange) -> None:
        raise ValueError("recorder bug")

    app = FastAPI()

    @app.get("/x")
    async def x() -> dict[str, int]:
        return {"ok": 1}

    app.add_middleware(PerfMiddleware, ledger=ledger, recorder=bad)
    with serve(app) as url, httpx.Client(base_url=url) as c:
        assert [c.get("/x").status_code for _ in range(3)] == [200, 200, 200]
    deadline = time.monotonic() + 10
    while ledger.count("e2e") < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ledger.count("http_total", route="/x", status_class="2xx") == 3


# -- cooperation with other middleware ----------------------------------------------------


def test_reuses_asgi_correlation_id(rec: Recorder, ledger: perf.Ledger) -> None:
    from asgi_correlation_id import CorrelationIdMiddleware, correlation_id

    app = make_app(rec, ledger)

    @app.get("/cid")
    async def cid() -> dict[str, str | None]:
        return {"cid": correlation_id.get(), "current": perf.current_request_id()}

    app.add_middleware(CorrelationIdMiddleware)  # added last: runs first, decides the ID
    with serve(app) as url, httpx.Client(base_url=url) as c:
        r1 = c.get("/cid")
        r2 = c.get("/cid", headers={"X-Request-ID": "not-a-uuid"})  # it rejects, we follow
        good = "7b9f1c2a0d6e4f5a8b3c2d1e0f9a8b7c"
        r3 = c.get("/cid", headers={"X-Request-ID": good})
        rec.wait(3)
    for r in (r1, r2, r3):
        ids = r.headers.get_list("x-request-id")
        assert len(ids) == 1  # one header: we do not add a second one
        assert r.json() == {"cid": ids[0], "current": ids[0]}
        assert rec.by_id(ids[0]).status == 200
    assert r3.headers["x-request-id"] == good
    assert r2.headers["x-request-id"] != "not-a-uuid"


def test_opentelemetry_fastapi_server_span_carries_our_id(
    rec: Recorder, ledger: perf.Ledger
) -> None:
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = make_app(rec, ledger)
    FastAPIInstrumentor.instrument_app(app, tracer_provider=provider)
    try:
        with serve(app) as url:
            r = httpx.get(f"{url}/items/5", headers={"X-Request-ID": "otel-1"})
            rec.wait(1)
    finally:
        FastAPIInstrumentor.uninstrument_app(app)
    server_spans = [s for s in exporter.get_finished_spans()
                    if s.kind.name == "SERVER"]
    assert len(server_spans) == 1
    span = server_spans[0]
    assert span.attributes is not None
    assert span.attributes.get("aiperf.request_id") == "otel-1" == r.headers["x-request-id"]
    assert span.attributes.get("http.route") == rec.items[0].route == "/items/{item_id}"


# -- helpers ------------------------------------------------------------------------------


def test_instrument_app_is_idempotent_and_validates() -> None:
    app = FastAPI()
    with pytest.raises(MiddlewareConfigError):
        instrument_app(app, exclude=["(unclosed"])
    with pytest.raises(MiddlewareConfigError):
        instrument_app(app, header_name="X Request\nID")
    assert app.user_middleware == []  # bad options changed nothing
    assert instrument_app(app) is True
    assert instrument_app(app) is False
    assert sum(m.cls is PerfMiddleware for m in app.user_middleware) == 1
    assert uninstrument_app(app) is True
    assert uninstrument_app(app) is False
    assert app.user_middleware == []
    with pytest.raises(MiddlewareConfigError):
        instrument_app(object())  # type: ignore[arg-type]


def test_uninstrument_after_start_stops_timing(rec: Recorder, ledger: perf.Ledger) -> None:
    app = FastAPI()

    @app.get("/x")
    async def x() -> dict[str, int]:
        return {"ok": 1}

    instrument_app(app, ledger=ledger, recorder=rec)
    with serve(app) as url, httpx.Client(base_url=url) as c:
        assert "x-request-id" in c.get("/x").headers
        rec.wait(1)
        uninstrument_app(app)
        assert "x-request-id" not in c.get("/x").headers
    assert len(rec.items) == 1


def test_metrics_and_summary_routes(rec: Recorder, ledger: perf.Ledger) -> None:
    app = make_app(rec, ledger)
    mount_metrics(app, ledger=ledger)
    add_summary_route(app, ledger=ledger)
    with serve(app) as url, httpx.Client(base_url=url) as c:
        assert c.get("/items/3").status_code == 200
        rec.wait(1)
        metrics = c.get("/metrics")
        summary = c.get("/perf/summary")
    assert metrics.status_code == 200
    assert (
        'aiperf_stage_duration_seconds_count{route="/items/{item_id}",stage="http_total",'
        'status_class="2xx"} 1.0' in metrics.text
    )
    rows = summary.json()["rows"]
    row = next(r for r in rows if r["stage"] == "http_total")
    assert row["labels"] == {"route": "/items/{item_id}", "status_class": "2xx"}
    assert row["count"] == 1 and row["p50_ms"] > 0
    assert [x.route for x in rec.items] == ["/items/{item_id}"]  # /metrics etc. not timed


def test_warmup_lifespan_flips_readiness(rec: Recorder, ledger: perf.Ledger) -> None:
    release = threading.Event()
    calls: list[int] = []

    def model(x: int) -> int:
        release.wait(10)
        calls.append(x)
        return x * 2

    readiness = perf.Readiness()
    reports: list[perf.WarmupReport] = []
    app = FastAPI(lifespan=warmup_lifespan(model, {"small": 1, "large": 8}, readiness=readiness,
                                           on_report=reports.append, rounds=4, window=2))
    add_readiness_route(app, readiness)
    app.add_middleware(PerfMiddleware, ledger=ledger, recorder=rec)
    with serve(app) as url, httpx.Client(base_url=url) as c:
        r = c.get("/ready")
        assert r.status_code == 503 and r.json()["ready"] is False
        release.set()
        assert readiness.wait(10)
        r = c.get("/ready")
        assert r.status_code == 200 and r.json() == {"ready": True, "pending": {}}
    assert {s.shape for s in reports[0].shapes} == {"small", "large"}
    assert len(calls) >= 2 * 3
    assert ledger.stages() == []  # warm-up never touched the serving ledger; /ready untimed


def test_warmup_lifespan_failure_is_reported_on_ready() -> None:
    def broken(x: int) -> int:
        raise RuntimeError("cuda oom")

    readiness = perf.Readiness()
    app = FastAPI(lifespan=warmup_lifespan(broken, [1], readiness=readiness, background=False))
    add_readiness_route(app, readiness)
    with serve(app) as url:
        r = httpx.get(f"{url}/ready")
    assert r.status_code == 503
    assert "warm-up failed" in r.json()["pending"]["warmup"]


def test_plain_asgi_app_without_starlette(rec: Recorder, ledger: perf.Ledger) -> None:
    """The middleware is pure ASGI: a bare ASGI callable works, route via ``route_label``."""

    async def bare(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 201,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"a", "more_body": True})
        await send({"type": "http.response.body", "body": b"b"})

    app = PerfMiddleware(bare, ledger=ledger, recorder=rec,
                         route_label=lambda scope: "/bare/{anything}")
    with serve(app) as url:
        r = httpx.get(f"{url}/bare/123")
    assert r.status_code == 201 and r.text == "ab"
    ex = rec.wait(1)[0]
    assert ex.route == "/bare/{anything}" and ex.request_id == r.headers["x-request-id"]
    assert ledger.count("http_total", route="/bare/{anything}", status_class="2xx") == 1
