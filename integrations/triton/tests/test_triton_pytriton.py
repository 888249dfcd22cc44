"""``perf_infer`` against a REAL PyTriton 0.7.0 server (bundled tritonserver 2.51.0, CPU) on
127.0.0.1, driven by PyTriton's own ``ModelClient`` over HTTP.

PyTriton pins numpy 1.26, so this module runs in its own environment:
``integrations/triton/run_tests.sh`` (creates and caches build/venv-triton). In the main
project environment (numpy 2.x, no PyTriton) it is skipped with that reason.
"""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator

import pytest

pytriton = pytest.importorskip(
    "pytriton", reason="PyTriton is not in this environment: run integrations/triton/run_tests.sh"
)

import numpy as np  # noqa: E402
from aiperf_sdk_triton import current_batch, perf_infer  # noqa: E402
from pytriton.client import ModelClient  # noqa: E402
from pytriton.decorators import batch  # noqa: E402
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor  # noqa: E402
from pytriton.triton import Triton, TritonConfig  # noqa: E402

import aiperf_sdk as perf  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    # PyTriton's own weakref.finalize raises inside its shutdown (server already stopped);
    # that is its cleanup, not this SDK: do not turn it into a test error.
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

LEDGER = perf.Ledger(slowest_capacity=256)
SEEN_IDS: list[list[str]] = []  # current_batch().ids as the infer function saw them


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@perf_infer("double", ledger=LEDGER)
@batch
def infer(x: np.ndarray) -> dict[str, np.ndarray]:
    b = current_batch()
    assert b is not None
    SEEN_IDS.append(list(b.ids))
    with perf.stage("forward", ledger=LEDGER):
        threading.Event().wait(0.02)  # a 20 ms "model", so concurrent requests queue up
        return {"y": x * 2}


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    http = _free_port()
    config = TritonConfig(http_address="127.0.0.1", http_port=http, grpc_address="127.0.0.1",
                          grpc_port=_free_port(), metrics_port=_free_port())
    with Triton(config=config) as triton:
        triton.bind(
            model_name="double",
            infer_func=infer,
            inputs=[Tensor(name="x", dtype=np.float32, shape=(-1,))],
            outputs=[Tensor(name="y", dtype=np.float32, shape=(-1,))],
            config=ModelConfig(max_batch_size=32,
                               batcher=DynamicBatcher(max_queue_delay_microseconds=20_000)),
            strict=True,
        )
        triton.run()
        yield f"127.0.0.1:{http}"


def _traces() -> dict[str, perf.RequestTrace]:
    return {t.id: t for t in LEDGER.slowest("e2e", k=256)}


def test_request_id_travels_from_client_to_ledger(url: str) -> None:
    with ModelClient(url, "double") as client:
        out = client.infer_sample(x=np.array([1.0, 2.0], np.float32),
                                  parameters={"request_id": "client-7"})
    np.testing.assert_array_equal(out["y"], [2.0, 4.0])
    trace = _traces()["client-7"]
    assert trace.attrs == {"batch_size": "1"}
    assert trace.total_ms >= 20  # the request waited for the whole 20 ms forward
    assert ["client-7"] in SEEN_IDS


def test_hostile_or_missing_id_is_replaced(url: str) -> None:
    before = set(_traces())
    with ModelClient(url, "double") as client:
        client.infer_sample(x=np.array([1.0], np.float32),
                            parameters={"request_id": "bad id\twith spaces"})
        client.infer_sample(x=np.array([1.0], np.float32))
    new = set(_traces()) - before
    assert len(new) == 2
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in new)


def test_concurrent_requests_are_batched_and_each_keeps_its_id(url: str) -> None:
    n = 24
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            with ModelClient(url, "double") as client:
                barrier.wait(30)
                out = client.infer_sample(x=np.full(3, i, np.float32),
                                          parameters={"request_id": f"conc-{i}"})
            np.testing.assert_array_equal(out["y"], np.full(3, 2 * i))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    traces = _traces()
    ids = {f"conc-{i}" for i in range(n)}
    assert ids <= set(traces)
    sizes = {i: int(traces[i].attrs["batch_size"]) for i in ids}
    assert max(sizes.values()) > 1, sizes  # Triton's dynamic batcher grouped them
    # every batch the function saw holds exactly the IDs recorded with that batch size
    for seen in SEEN_IDS:
        for rid in seen:
            if rid in ids:
                assert sizes[rid] == len(seen)
    by_size: dict[str, int] = {}
    for rid in ids:
        by_size[str(sizes[rid])] = by_size.get(str(sizes[rid]), 0) + 1
    for size, count in by_size.items():
        assert LEDGER.count("e2e", model="double", batch_size=size) >= count
    # the model author's stage ran once per batch, not once per request
    assert LEDGER.count("forward") < LEDGER.count("e2e")
