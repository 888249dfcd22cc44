"""Sustained open-loop rate of ``aiperf-sdk load`` from one process vs ``wrk``, same server.

A no-op HTTP/1.1 server (asyncio protocol, keep-alive, 2-byte reply) runs in its own
process. ``wrk`` (closed loop, C, epoll) measures the most that server answers; then our
generator runs open-loop at increasing rates, and its *sustained* rate is the highest rate at
which the run stays valid (schedule-lag p99 ≤ --max-lag-ms), answers ≥ 95 % of the offered
rate, and has no errors. Printed: wrk's rate, ours, the ratio, and our schedule-lag p99.

    .venv/bin/python benchmarks/bench_loadgen.py            # needs `apt-get install -y wrk`
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import re
import shutil
import socket
import subprocess
import sys
import time

import aiperf_sdk as perf

REPLY = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


class _NoOp(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t: asyncio.Transport = transport  # type: ignore[assignment]
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        n = self.buf.count(b"\r\n\r\n")  # GET requests without bodies
        if n:
            self.buf = self.buf[self.buf.rfind(b"\r\n\r\n") + 4:]
            self.t.write(REPLY * n)


def _serve(port: int) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        srv = await loop.create_server(_NoOp, "127.0.0.1", port, backlog=4096)
        await srv.serve_forever()

    asyncio.run(main())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_wrk(url: str, seconds: int, connections: int) -> float | None:
    if shutil.which("wrk") is None:
        return None
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", url],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    return float(m.group(1)) if m else None


def run_ours(url: str, rate: float, seconds: float, max_lag_ms: float) -> perf.LoadResult:
    target = perf.HttpTarget(url, method="GET", stream="none", max_connections=256)
    return perf.run_load(target, arrival=perf.ArrivalProcess(kind="constant", rate=rate),
                         duration_s=seconds, warmup_s=0.5, payloads=[None],
                         max_lag_ms=max_lag_ms, timeout_s=10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="per measured step")
    ap.add_argument("--max-lag-ms", type=float, default=10.0)
    ap.add_argument("--rates", default="1000,2000,3000,4000,5000,6000,8000,10000,12000")
    args = ap.parse_args()
    port = _free_port()
    proc = mp.get_context("spawn").Process(target=_serve, args=(port,), daemon=True)
    proc.start()
    url = f"http://127.0.0.1:{port}/"
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            break
        except OSError:
            time.sleep(0.05)
    try:
        wrk = run_wrk(url, max(2, round(args.seconds)), 32)
        best: perf.LoadResult | None = None
        print(f"{'offered':>8} {'achieved':>9} {'lag p99 ms':>10} {'e2e p99 ms':>10} valid")
        for rate in (float(r) for r in args.rates.split(",")):
            r = run_ours(url, rate, args.seconds, args.max_lag_ms)
            lag = r.metrics["schedule_lag"].p99_ms if "schedule_lag" in r.metrics else float("nan")
            p99 = r.metrics["e2e"].p99_ms if "e2e" in r.metrics else float("nan")
            print(f"{rate:8.0f} {r.throughput_rps:9.0f} {lag:10.2f} {p99:10.2f} {r.valid}")
            sustained = r.valid and r.errors == 0 and r.throughput_rps >= 0.95 * rate
            if not sustained:
                break
            best = r
    finally:
        proc.terminate()
        proc.join(5)
    print()
    print("| generator | sustained req/s | schedule-lag p99 |")
    print("|---|---:|---:|")
    wrk_text = f"{wrk:,.0f}" if wrk is not None else "wrk not installed"
    print(f"| wrk -t1 -c32 (closed loop, C) | {wrk_text} | n/a |")
    if best is None:
        print("| aiperf-sdk load (open loop, 1 process) | below the lowest rate tried | - |")
        sys.exit(1)
    ours = best.config["arrival"]["rate"]
    print(f"| aiperf-sdk load (open loop, 1 process) | {ours:,.0f} | "
          f"{best.metrics['schedule_lag'].p99_ms:.2f} ms |")
    if wrk:
        print(f"\nratio ours / wrk = {ours / wrk:.2f}")


if __name__ == "__main__":
    main()
