"""A streaming LLM-like FastAPI service instrumented with aiperf-sdk.

What it shows, in the order a request meets it:

* ``PerfMiddleware`` (via ``instrument_app``): ``X-Request-ID`` in and out, ``http_ttfb`` and
  ``http_total`` (to the last SSE byte) per route template and status class;
* stages inside the handler: ``tokenize``, ``prefill`` (through a ``perf.DynamicBatcher``
  that groups concurrent prompts), ``decode`` as a ``perf.stream`` (``ttft``, ``itl``,
  ``tpot``);
* warm-up of the toy model in the lifespan, ``/ready`` answering 503 until it is done;
* ``/metrics`` (Prometheus), ``/perf/summary`` (JSON) and a latency budget check.

Run it::

    pip install -e integrations/fastapi uvicorn
    python examples/fastapi_service.py --port 8000          # serve
    curl -N -H 'X-Request-ID: demo-1' 'localhost:8000/v1/completions?prompt=hello&max_tokens=8'
    python examples/fastapi_service.py --selftest           # serve on a free port, load it,
                                                            # print summary and budget, exit
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from aiperf_sdk_fastapi import (
    add_readiness_route,
    add_summary_route,
    instrument_app,
    mount_metrics,
    warmup_lifespan,
)
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

import aiperf_sdk as perf

BUDGET = perf.Budget.model_validate({
    "total": {"p99_ms": 400},
    "stages": {
        "tokenize": {"p99_ms": 5},
        "prefill": {"p95_ms": 60, "p99_ms": 80},
        "ttft": {"p95_ms": 150},
        "itl": {"p99_ms": 30},
    },
})


# -- a toy model: costs grow with batch size and prompt length, like the real thing --------

def prefill_batch(prompts: list[list[int]]) -> list[int]:
    longest = max(len(p) for p in prompts)
    time.sleep(0.004 + 0.00002 * longest * len(prompts))  # one "forward" for the batch
    return [sum(p) % 1000 for p in prompts]


def warm_prefill(batch: list[list[int]]) -> list[int]:
    return prefill_batch(batch)


@perf.stage("tokenize")
def tokenize(text: str) -> list[int]:
    return [ord(c) for c in text][:512]


async def decode(state: int, max_tokens: int) -> AsyncIterator[str]:
    for i in range(max_tokens):
        await asyncio.sleep(0.005)  # one decode step
        yield f"tok{(state + i) % 97}"


# -- the service -------------------------------------------------------------------------

def build_app() -> FastAPI:
    readiness = perf.Readiness()
    batcher: perf.DynamicBatcher[list[int], int] = perf.DynamicBatcher(
        prefill_batch, max_batch_size=8, max_wait_ms=4.0, length_fn=len, buckets="pow2"
    )

    @contextlib.asynccontextmanager
    async def serve_batcher(app: Any) -> AsyncIterator[None]:
        async with batcher:
            yield

    samples = {f"{b}x{n}": [[1] * n for _ in range(b)] for b in (1, 8) for n in (16, 256)}
    app = FastAPI(lifespan=warmup_lifespan(
        warm_prefill, samples, readiness=readiness, inner=serve_batcher, rounds=6, window=2,
    ))

    @app.get("/v1/completions")
    async def completions(prompt: str, max_tokens: int = 16) -> StreamingResponse:
        ids = tokenize(prompt)
        async with perf.stage("prefill"):
            state = await batcher.submit(ids)

        async def sse() -> AsyncIterator[bytes]:
            async for tok in perf.stream("decode", decode(state, max_tokens)):
                yield f"data: {json.dumps({'token': tok})}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(sse(), media_type="text/event-stream")

    instrument_app(app)
    mount_metrics(app)
    add_summary_route(app)
    add_readiness_route(app, readiness)
    return app


# -- self-test: real uvicorn on 127.0.0.1, concurrent streaming clients ----------------------

def selftest(requests: int, concurrency: int) -> int:
    import httpx
    import uvicorn

    app = build_app()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        with httpx.Client(base_url=url) as c:
            deadline = time.monotonic() + 60
            while True:  # wait for warm-up through the readiness endpoint, like a probe
                with contextlib.suppress(httpx.TransportError):
                    if c.get("/ready").status_code == 200:
                        break
                if time.monotonic() > deadline:
                    print("service never became ready", file=sys.stderr)
                    return 1
                time.sleep(0.05)

        async def load() -> list[str]:
            sem = asyncio.Semaphore(concurrency)
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                async def one(i: int) -> str:
                    async with sem, client.stream(
                        "GET", "/v1/completions",
                        params={"prompt": "x" * (8 + 37 * i % 300), "max_tokens": 12},
                        headers={"X-Request-ID": f"selftest-{i}"},
                    ) as r:
                        body = b"".join([c async for c in r.aiter_bytes()])
                        assert body.endswith(b"data: [DONE]\n\n"), body[-40:]
                        return r.headers["x-request-id"]

                return list(await asyncio.gather(*(one(i) for i in range(requests))))

        ids = asyncio.run(load())
        assert ids == [f"selftest-{i}" for i in range(requests)], "correlation IDs crossed"
        with httpx.Client(base_url=url) as c:
            metrics = c.get("/metrics").text
            summary = c.get("/perf/summary").json()
    finally:
        server.should_exit = True
        thread.join(30)
    ledger = perf.default_ledger()
    deadline = time.monotonic() + 10
    while ledger.count("http_total") < requests and time.monotonic() < deadline:
        time.sleep(0.01)  # the last record lands just after the last byte
    print(ledger.summary())
    print()
    print(ledger.check(BUDGET))
    print(f"\n/metrics: {metrics.count(chr(10))} lines; /perf/summary: "
          f"{len(summary['rows'])} series; requests: {len(ids)}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description="streaming LLM-like FastAPI service")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--concurrency", type=int, default=8)
    args = ap.parse_args()
    if args.requests < 1 or args.concurrency < 1:
        ap.error("--requests and --concurrency must be >= 1")
    if args.selftest:
        return selftest(args.requests, args.concurrency)
    import uvicorn

    uvicorn.run(build_app(), host="127.0.0.1", port=args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
