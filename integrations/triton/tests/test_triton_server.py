"""examples/triton_model_repository and the trace parser against a REAL tritonserver 2.51.0.

The server binary, the Python backend and its stub are the ones bundled in the
nvidia-pytriton 0.7.0 wheel (run directly here, without PyTriton's proxy): it loads the
example's Python-backend model (which uses ``PythonBackendPerf``), serves KServe v2 HTTP and
gRPC on 127.0.0.1, exports the helper's histogram on its own ``/metrics`` and writes its own trace
files (``--trace-config level=TIMESTAMPS``), which ``read_triton_trace`` parses.

Runs in the Triton environment (integrations/triton/run_tests.sh: numpy 1.26, and
``LD_LIBRARY_PATH`` at the interpreter's lib/ for the stub); skipped elsewhere.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

pytriton = pytest.importorskip(
    "pytriton", reason="PyTriton is not in this environment: run integrations/triton/run_tests.sh"
)

import aiperf_sdk_triton  # noqa: E402
from aiperf_sdk_triton import (  # noqa: E402
    TritonTrace,
    TritonTraceError,
    read_triton_trace,
    record_triton_traces,
)

import aiperf_sdk as perf  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
REPOSITORY = ROOT / "examples" / "triton_model_repository"
DIST = Path(pytriton.__file__).parent / "tritonserver"
SENT: list[str] = []  # request IDs sent to the server by this module


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, tmp: Path) -> None:
        backends = tmp / "backends"
        shutil.copytree(DIST / "backends", backends)
        ver = f"{sys.version_info[0]}.{sys.version_info[1]}"
        shutil.copy(DIST / "python_backend_stubs" / ver / "triton_python_backend_stub",
                    backends / "python" / "triton_python_backend_stub")
        self.trace = tmp / "trace.json"
        self.log = tmp / "tritonserver.log"
        self.http, self.grpc, self.metrics = _free_port(), _free_port(), _free_port()
        env = dict(os.environ)
        libs = Path(pytriton.__file__).parent.parent / "nvidia_pytriton.libs"
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (env.get("LD_LIBRARY_PATH", ""), str(libs)) if p)
        # the stub's embedded interpreter: this environment's packages (numpy 1.26) and the
        # SDK + integration sources (editable installs' .pth files are not read from PYTHONPATH)
        env["PYTHONPATH"] = os.pathsep.join([
            sysconfig.get_paths()["purelib"],
            str(Path(perf.__file__).parents[1]),
            str(Path(aiperf_sdk_triton.__file__).parents[1]),
        ])
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        cmd = [
            str(DIST / "bin" / "tritonserver"),
            f"--model-repository={REPOSITORY}", f"--backend-directory={backends}",
            "--http-address=127.0.0.1", f"--http-port={self.http}",
            "--grpc-address=127.0.0.1", f"--grpc-port={self.grpc}",
            "--metrics-address=127.0.0.1", f"--metrics-port={self.metrics}",
            f"--trace-config=triton,file={self.trace}", "--trace-config=triton,log-frequency=1",
            "--trace-config=level=TIMESTAMPS", "--trace-config=rate=1",
        ]
        self._log_file = self.log.open("wb")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._log_file,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tritonserver exited: {self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url("/v2/models/scale/ready"), timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"tritonserver not ready: {self.log.read_text()[-3000:]}")
            time.sleep(0.2)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.http}{path}"

    def infer(self, rid: str | None, x: list[float]) -> dict[str, object]:
        body: dict[str, object] = {
            "inputs": [{"name": "x", "shape": [1, len(x)], "datatype": "FP32", "data": x}]}
        if rid is not None:
            body["id"] = rid
            SENT.append(rid)
        req = urllib.request.Request(self.url("/v2/models/scale/infer"),
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            out = json.loads(r.read())
        return {o["name"]: o["data"] for o in out["outputs"]}

    def histogram(self) -> dict[str, tuple[int, float]]:
        """batch_size -> (count, sum seconds) of aiperf_execute_duration_seconds."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics}/metrics", timeout=5) as r:
            text = r.read().decode()
        out: dict[str, list[float]] = {}
        for m in re.finditer(r'^aiperf_execute_duration_seconds_(count|sum)\{([^}]*)\} (\S+)$',
                             text, re.M):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            assert labels["model"] == "scale"
            slot = out.setdefault(labels["batch_size"], [0.0, 0.0])
            slot[0 if m.group(1) == "count" else 1] = float(m.group(3))
        return {k: (int(c), s) for k, (c, s) in out.items()}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log_file.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("tritonserver"))
    try:
        yield s
    finally:
        s.stop()


def test_example_model_serves_and_echoes_the_request_id(server: Server) -> None:
    out = server.infer("client-1", [1.0, 2.5])
    assert out == {"y": [2.0, 5.0], "request_id": ["client-1"]}
    hostile = server.infer("bad id\twith tab", [1.0])
    [rid] = hostile["request_id"]  # type: ignore[misc]
    assert isinstance(rid, str) and re.fullmatch(r"[0-9a-f]{32}", rid)
    # the helper's histogram is on Triton's own /metrics, one observation per request so far
    hist = server.histogram()
    assert sum(c for c, _ in hist.values()) == 2
    assert "1" in hist


def test_concurrent_requests_are_batched_by_triton(server: Server) -> None:
    n = 16
    barrier = threading.Barrier(n)
    results: dict[int, dict[str, object]] = {}
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            barrier.wait(30)
            results[i] = server.infer(f"conc-{i}", [float(i)] * 3)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for i in range(n):
        assert results[i] == {"y": [2.0 * i] * 3, "request_id": [f"conc-{i}"]}
    hist = server.histogram()
    assert sum(c for c, _ in hist.values()) == n + 2
    assert max(int(b) for b in hist) > 1, hist  # Triton's dynamic batcher grouped them


def test_grpc_requests_keep_their_id(server: Server) -> None:
    import numpy as np
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc}")
    try:
        x = grpcclient.InferInput("x", [1, 2], "FP32")
        x.set_data_from_numpy(np.array([[1.5, -1.0]], np.float32))
        for rid in ("grpc-1", "grpc-2"):
            result = client.infer("scale", [x], request_id=rid)
            SENT.append(rid)
            np.testing.assert_array_equal(result.as_numpy("y"), [[3.0, -2.0]])
            assert result.as_numpy("request_id").tolist() == [[rid.encode()]]
    finally:
        client.close()


def _wait_for_traces(server: Server, ids: set[str]) -> list[TritonTrace]:
    """Triton writes each trace file (log-frequency=1) when a trace completes: poll."""
    deadline = time.monotonic() + 30
    while True:
        try:
            traces = read_triton_trace(server.trace)
        except TritonTraceError:  # no file yet, or one still being written
            if time.monotonic() > deadline:
                raise
        else:
            missing = ids - {t.request_id for t in traces}
            if not missing:
                return traces
            if time.monotonic() > deadline:
                raise AssertionError(f"no trace for {missing} after 30 s")
        time.sleep(0.2)


def test_real_trace_file_parses_into_consistent_stages(server: Server) -> None:
    server.infer("traced-1", [3.0])
    sent = set(SENT)
    traces = _wait_for_traces(server, sent)
    hist = server.histogram()
    n_requests = sum(c for c, _ in hist.values())
    assert len(traces) == n_requests  # rate=1: every request traced, once
    protocols = Counter(t.protocol for t in traces)
    assert protocols == {"grpc": 2, "http": n_requests - 2}, protocols
    for t in traces:
        assert (t.model, t.model_version, t.parent_id) == ("scale", 1, None)
        st, ts = t.stages, t.timestamps
        p = t.protocol.upper()
        recv = "recv" if t.protocol == "http" else None  # gRPC's read includes idle waiting
        for name in ("queue", "compute_input", "infer", "compute_output", "compute", "handler",
                     "send", "network", "e2e", *([recv] if recv else [])):
            assert st[name] >= 0, (t, name)
        assert st["compute_input"] + st["infer"] + st["compute_output"] == st["compute"]
        assert st["queue"] + st["compute"] <= st["handler"]
        # recv, then queue..infer (the Python backend builds the responses in execute(),
        # before COMPUTE_OUTPUT_START), then send: disjoint parts of e2e
        assert st["network"] + st["queue"] + st["compute_input"] + st["infer"] <= st["e2e"]
        assert ts[f"{p}_SEND_START"] >= ts["COMPUTE_OUTPUT_START"]
        if t.protocol == "http":
            assert ts["HTTP_RECV_END"] <= ts["REQUEST_START"]
            assert st["e2e"] == ts["HTTP_SEND_END"] - ts["HTTP_RECV_START"]
        else:
            assert ts["GRPC_WAITREAD_END"] <= ts["REQUEST_START"]
            assert st["e2e"] == ts["GRPC_SEND_END"] - ts["GRPC_WAITREAD_END"]
    # Triton's trace and the helper's batch_size labels agree: requests of one batch share
    # their compute timestamps, and each batch of k requests added k observations at "k"
    batches = Counter(t.timestamps["COMPUTE_START"] for t in traces)
    per_size = Counter(k for k in batches.values() for _ in range(k))
    assert {str(k): c for k, c in per_size.items()} == {b: c for b, (c, _) in hist.items()}
    # execute() (timed inside the stub) runs within Triton's compute span of each batch
    compute_s = sum(t.stages["compute"] for t in traces) / 1e9
    assert 0 < sum(s for _, s in hist.values()) <= compute_s

    ledger = perf.Ledger(slowest_capacity=256)
    assert record_triton_traces(traces, ledger) == len(traces)
    by_id = {rt.id: rt for rt in ledger.slowest("e2e", k=256)}
    assert len(by_id) == len(traces)
    assert {i for i in sent if perf.valid_request_id(i)} <= set(by_id)  # the tab one: replaced
    t1 = next(t for t in traces if t.request_id == "traced-1")
    assert by_id["traced-1"].stages["queue"] == t1.stages["queue"] / 1e6
    assert ledger.count("e2e", model="scale", protocol="http") == len(traces) - 2
    assert ledger.count("e2e", model="scale", protocol="grpc") == 2
