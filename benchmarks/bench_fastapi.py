"""Throughput cost of aiperf_sdk_fastapi.PerfMiddleware vs no middleware and vs a no-op
Starlette ``BaseHTTPMiddleware`` (the peer), from the same run.

Two measurements:

* ``asgi``: the FastAPI app called in-process (no sockets), so the middleware's own cost is
  not drowned by the HTTP stack: microseconds per request, best of ``--repeats`` interleaved
  rounds.
* ``http``: a real uvicorn server on 127.0.0.1 (one worker, in a subprocess per variant) and
  an httpx.AsyncClient with ``--concurrency`` requests in flight: requests per second.

    .venv/bin/python benchmarks/bench_fastapi.py            # both, ~1 minute
    .venv/bin/python benchmarks/bench_fastapi.py --skip-http

Needs ``pip install -e 'integrations/fastapi[test]'``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

VARIANTS = ("none", "perf", "basehttp")


def build_app(variant: str) -> Any:
    from aiperf_sdk_fastapi import PerfMiddleware
    from fastapi import FastAPI
    from starlette.middleware.base import BaseHTTPMiddleware

    import aiperf_sdk as perf

    app = FastAPI()

    @app.get("/items/{item_id}")
    async def item(item_id: int) -> dict[str, int]:
        return {"item": item_id}

    if variant == "perf":
        app.add_middleware(PerfMiddleware, ledger=perf.Ledger())
    elif variant == "basehttp":

        async def passthrough(request: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
            return await call_next(request)

        app.add_middleware(BaseHTTPMiddleware, dispatch=passthrough)
    return app


# -- in-process ASGI ----------------------------------------------------------------------


async def _asgi_round(app: Any, n: int) -> float:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        return None

    t0 = time.perf_counter_ns()
    for i in range(n):
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "GET", "scheme": "http", "path": f"/items/{i}", "raw_path": b"",
            "query_string": b"", "root_path": "", "headers": [(b"host", b"bench")],
            "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
        }
        await app(scope, receive, send)
    return (time.perf_counter_ns() - t0) / n / 1000


def bench_asgi(n: int, repeats: int) -> dict[str, float]:
    apps = {v: build_app(v) for v in VARIANTS}
    best: dict[str, float] = {v: float("inf") for v in VARIANTS}

    async def main() -> None:
        for v in VARIANTS:  # warm-up: build middleware stacks, routes, pydantic
            await _asgi_round(apps[v], 200)
        for _ in range(repeats):
            for v in VARIANTS:
                best[v] = min(best[v], await _asgi_round(apps[v], n))

    asyncio.run(main())
    return best


# -- real uvicorn over HTTP ---------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(variant: str, port: int) -> None:  # runs in the server subprocess
    import uvicorn

    uvicorn.run(build_app(variant), host="127.0.0.1", port=port, log_level="warning",
                access_log=False)


async def _load(url: str, n: int, concurrency: int) -> float:
    import httpx

    async with httpx.AsyncClient(base_url=url) as client:
        for i in range(50):
            (await client.get(f"/items/{i}")).raise_for_status()
        it = iter(range(n))

        async def worker() -> None:
            for i in it:
                (await client.get(f"/items/{i}")).raise_for_status()

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return n / (time.perf_counter() - t0)


def bench_http(n: int, concurrency: int, repeats: int) -> dict[str, float]:
    import httpx

    rps: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for _ in range(repeats):
        for v in VARIANTS:
            port = _free_port()
            proc = subprocess.Popen(
                [sys.executable, __file__, "--serve", v, "--port", str(port)],
                env={**os.environ, "PYTHONWARNINGS": "ignore"},
            )
            try:
                url = f"http://127.0.0.1:{port}"
                deadline = time.monotonic() + 30
                while True:
                    try:
                        httpx.get(f"{url}/items/1", timeout=1)
                        break
                    except httpx.TransportError:
                        if time.monotonic() > deadline or proc.poll() is not None:
                            raise RuntimeError(f"server {v} did not start") from None
                        time.sleep(0.1)
                rps[v].append(asyncio.run(_load(url, n, concurrency)))
            finally:
                proc.terminate()
                proc.wait(10)
    return {v: statistics.median(xs) for v, xs in rps.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1000, help="per in-process round")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--http-requests", type=int, default=2000)
    ap.add_argument("--http-repeats", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--skip-http", action="store_true")
    ap.add_argument("--serve", choices=VARIANTS, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        _serve(args.serve, args.port)
        return

    us = bench_asgi(args.requests, args.repeats)
    print(f"in-process ASGI, FastAPI GET /items/{{id}}, best of {args.repeats} x "
          f"{args.requests} requests")
    print(f"{'variant':<34}{'us/request':>12}{'vs none':>10}{'added us':>10}")
    names = {"none": "no middleware", "perf": "PerfMiddleware (ours)",
             "basehttp": "BaseHTTPMiddleware no-op (peer)"}
    for v in VARIANTS:
        print(f"{names[v]:<34}{us[v]:>12.2f}{us[v] / us['none']:>9.2f}x"
              f"{us[v] - us['none']:>10.2f}")
    print(f"ours vs BaseHTTPMiddleware: {us['perf'] / us['basehttp']:.2f}x time per request")

    if args.skip_http:
        return
    rps = bench_http(args.http_requests, args.concurrency, args.http_repeats)
    print(f"\nreal uvicorn on 127.0.0.1 (1 worker), httpx.AsyncClient, concurrency "
          f"{args.concurrency}, median of {args.http_repeats} x {args.http_requests} requests")
    print(f"{'variant':<34}{'req/s':>12}{'vs none':>10}")
    for v in VARIANTS:
        print(f"{names[v]:<34}{rps[v]:>12.0f}{rps[v] / rps['none']:>9.2f}x")
    print(f"ours vs BaseHTTPMiddleware: {rps['perf'] / rps['basehttp']:.2f}x throughput")


if __name__ == "__main__":
    main()
