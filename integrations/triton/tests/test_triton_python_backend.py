"""``PythonBackendPerf`` / ``timed_execute`` for Triton Python-backend ``model.py``.

Unit tests with stand-ins: ``triton_python_backend_utils`` only exists inside Triton's
Python-backend stub process. The helper runs for real inside tritonserver 2.51.0 in
test_triton_server.py (examples/triton_model_repository, in the Triton environment of
integrations/triton/run_tests.sh); these cover the edge cases cheaply. The request and
metric objects below have exactly the
methods the helper calls on ``pb_utils.InferenceRequest`` (``request_id()``, ``parameters()``
returning a JSON string) and ``pb_utils.MetricFamily`` (``HISTOGRAM``, ``Metric(labels=,
buckets=)``, ``observe()``), as documented in triton-inference-server/python_backend's
README ("Custom Metrics") for Triton 24.08+.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

import pytest
from aiperf_sdk_triton import (
    PythonBackendPerf,
    RequestBatch,
    TritonIntegrationError,
    timed_execute,
)

import aiperf_sdk as perf


class InferenceRequest:
    def __init__(self, request_id: str = "", parameters: dict[str, Any] | None = None) -> None:
        self._id = request_id
        self._params = json.dumps(parameters or {})

    def request_id(self) -> str:
        return self._id

    def parameters(self) -> str:
        return self._params


class Metric:
    def __init__(self, labels: dict[str, str], buckets: list[float]) -> None:
        self.labels, self.buckets, self.values = labels, buckets, []  # type: ignore[var-annotated]

    def observe(self, value: float) -> None:
        self.values.append(value)


class MetricFamily:
    HISTOGRAM = "histogram"
    created: ClassVar[list[MetricFamily]] = []

    def __init__(self, name: str, description: str, kind: str) -> None:
        self.name, self.kind, self.metrics = name, kind, []  # type: ignore[var-annotated]
        MetricFamily.created.append(self)

    def Metric(self, labels: dict[str, str], buckets: list[float]) -> Metric:
        m = Metric(labels, buckets)
        self.metrics.append(m)
        return m


class PbUtils:
    MetricFamily = MetricFamily


class Model:
    """A model.py as a Triton user writes it."""

    def initialize(self, args: dict[str, str], ledger: perf.Ledger) -> None:
        self.perf = PythonBackendPerf(args["model_name"], pb_utils=PbUtils, ledger=ledger)

    @timed_execute
    def execute(self, requests: list[InferenceRequest]) -> list[int]:
        with perf.stage("infer", ledger=self.perf.ledger):
            return [len(requests)] * len(requests)


def test_one_scope_per_triton_request_with_its_id() -> None:
    ledger = perf.Ledger()
    model = Model()
    model.initialize({"model_name": "bert"}, ledger)
    reqs = [
        InferenceRequest("kserve-id-1"),
        InferenceRequest("", {"request_id": "param-id-2"}),
        InferenceRequest("", {}),
        InferenceRequest("bad id\n"),
    ]
    assert model.execute(reqs) == [4, 4, 4, 4]
    traces = {t.id: t for t in ledger.slowest("e2e")}
    assert {"kserve-id-1", "param-id-2"} <= set(traces)
    generated = set(traces) - {"kserve-id-1", "param-id-2"}
    assert len(generated) == 2 and all(re.fullmatch(r"[0-9a-f]{32}", g) for g in generated)
    assert ledger.count("e2e", model="bert", batch_size="4") == 4
    assert ledger.count("infer") == 1  # the batch's stage once, not per request
    family = MetricFamily.created[-1]
    assert family.kind == "histogram" and family.name == "aiperf_execute_duration_seconds"
    (metric,) = family.metrics
    assert metric.labels == {"model": "bert", "batch_size": "4"}
    assert len(metric.values) == 4 and all(v > 0 for v in metric.values)


def test_failing_execute_is_recorded_as_error_and_reraised() -> None:
    ledger = perf.Ledger()
    with pytest.raises(ZeroDivisionError), RequestBatch(["a", "b"], model="m", ledger=ledger):
        _ = 1 / 0
    assert ledger.count("e2e", model="m", batch_size="2", outcome="error") == 2


def test_bad_arguments_raise_typed_errors() -> None:
    with pytest.raises(TritonIntegrationError):
        PythonBackendPerf("")
    with pytest.raises(TritonIntegrationError):
        PythonBackendPerf("m", buckets_s=[0.5, 0.1])
    with pytest.raises(TritonIntegrationError):
        RequestBatch(["a"], model="")

    class NoPerf:
        @timed_execute
        def execute(self, requests: list[Any]) -> None:
            return None

    with pytest.raises(TritonIntegrationError, match=r"self\.perf"):
        NoPerf().execute([])


def test_pb_utils_without_histogram_skips_export(caplog: pytest.LogCaptureFixture) -> None:
    class OldPbUtils:
        class MetricFamily:
            COUNTER = "counter"

    helper = PythonBackendPerf("m", pb_utils=OldPbUtils, ledger=perf.Ledger())
    with helper.batch([InferenceRequest("x")]):
        pass
    assert "HISTOGRAM" in caplog.text
    assert helper.ledger is not None and helper.ledger.count("e2e") == 1
