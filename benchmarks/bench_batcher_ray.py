"""Ray Serve's ``@serve.batch`` next to ``perf.DynamicBatcher``, inside one real Serve replica.

Run by ``benchmarks/bench_batcher.py`` in the Ray venv (``benchmarks/ray_peer.sh`` creates
build/venv-ray); it prints one ``RESULT {json}`` line that the parent merges. Nothing is
patched: ``serve.start`` + ``serve.run`` start a local Ray cluster, the Serve controller and an
HTTP proxy on 127.0.0.1, and one replica of the ``Peer`` deployment below. ``@serve.batch``
only runs inside a replica, so the replica itself drives the loads (the same closed-loop and
Poisson drivers as bench_batcher.py) against its own ``@serve.batch`` methods and, in the same
process and event loop, against ``perf.DynamicBatcher`` and the bare batcher, interleaved.
The driver also measures ``@serve.batch`` end to end through a ``DeploymentHandle``.

Run:  build/venv-ray/bin/python benchmarks/bench_batcher_ray.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, os.pardir, "src")
sys.path[:0] = [HERE, SRC]

import ray  # noqa: E402
from bench_batcher import (  # noqa: E402
    SLOW_A_S,
    SLOW_B_S,
    SLOW_BATCH,
    SLOW_RATE,
    SLOW_WAIT_MS,
)
from ray import serve  # noqa: E402


@serve.deployment(max_ongoing_requests=1000, ray_actor_options={"num_cpus": 0})
class Peer:
    def __init__(self) -> None:
        sys.path[:0] = [HERE, SRC]
        import bench_batcher

        self.bb = bench_batcher
        self.sizes: list[int] = []

    @serve.batch(max_batch_size=64, batch_wait_timeout_s=0.001)
    async def ray_noop(self, items: list[int]) -> list[int]:
        return items

    @serve.batch(max_batch_size=SLOW_BATCH, batch_wait_timeout_s=SLOW_WAIT_MS / 1e3)
    async def ray_slow(self, items: list[int]) -> list[int]:
        self.sizes.append(len(items))
        await asyncio.sleep(SLOW_A_S + SLOW_B_S * len(items))
        return items

    async def overhead(self, reps: int, clients: int, per_client: int) -> dict[str, Any]:
        bb = self.bb
        await bb.drive(self.ray_noop, clients, 10)  # warm up (creates the batch queue)
        await bb.bare_noop(clients, 10)
        await bb.ours_noop(clients, 10)
        out: dict[str, Any] = {"ray": [], "bare": [], "ours": [], "clients": clients,
                               "per_client": per_client,
                               "loop": type(asyncio.get_running_loop()).__module__}
        for _ in range(reps):
            out["ray"].append(await bb.drive(self.ray_noop, clients, per_client))
            out["bare"].append(await bb.bare_noop(clients, per_client))
            out["ours"].append(await bb.ours_noop(clients, per_client))
        return out

    async def slow(self, rate: float, n: int, seed: int) -> dict[str, Any]:
        bb = self.bb
        self.sizes = []
        ray_lat = await bb.open_loop(self.ray_slow, rate, n, seed)
        ray_res = bb.summary(ray_lat, self.sizes)
        return {"ray": ray_res, "ours": await bb.ours_slow(rate, n, seed)}


async def via_handle(handle: Any, concurrency: int, per_client: int) -> float:
    async def client() -> None:
        for i in range(per_client):
            await handle.ray_noop.remote(i)

    await asyncio.gather(*(client() for _ in range(concurrency)))  # warm up
    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return (time.perf_counter() - t0) / (concurrency * per_client) * 1e6


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join([HERE, SRC, os.environ.get("PYTHONPATH", "")])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             object_store_memory=200 * 1024**2, logging_level="ERROR")
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": free_port()})
        handle = serve.run(Peer.bind(), name="batch_peer", route_prefix=None)
        reps = 3 if args.quick else 7
        ov = handle.overhead.remote(reps, 256, 200).result(timeout_s=600)
        n_slow = int(SLOW_RATE * (1.0 if args.quick else 2.0))
        slow = handle.slow.remote(SLOW_RATE, n_slow, 7).result(timeout_s=600)
        conc, per = 64, (10 if args.quick else 30)
        h_us = asyncio.run(via_handle(handle, conc, per))
        res = {"overhead": ov, "slow": slow, "ray": ray.__version__,
               "handle": {"us": h_us, "n": conc * per, "concurrency": conc}}
        print("RESULT " + json.dumps(res), flush=True)
    finally:
        serve.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    main()
