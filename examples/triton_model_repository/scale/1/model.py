"""Triton Python-backend model timed with aiperf-sdk-triton (examples/triton_model_repository).

Each Triton request in ``execute`` gets a ``perf.request()`` scope with Triton's request ID
(the ``id`` of the KServe v2 JSON request), ``e2e`` labelled ``model`` and ``batch_size``; the
stages ``pre``/``infer``/``post`` record once per batch; the same durations appear on Triton's
own ``/metrics`` as ``aiperf_execute_duration_seconds``. Each response carries the ID the
request was recorded under (``request_id`` output), so a client can find it in the ledger.

Run: ``tritonserver --model-repository examples/triton_model_repository`` with
``aiperf-sdk-triton`` importable by the Python backend (see docs/integrations.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils  # only inside Triton's Python backend
from aiperf_sdk_triton import PythonBackendPerf

import aiperf_sdk as perf


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        self.perf = PythonBackendPerf(args["model_name"], pb_utils=pb_utils)

    def execute(self, requests: list[Any]) -> list[Any]:
        # the explicit form of @timed_execute: the batch's resolved IDs are needed below
        with self.perf.batch(requests) as batch:
            with perf.stage("pre"):
                xs = [pb_utils.get_input_tensor_by_name(r, "x").as_numpy() for r in requests]
            with perf.stage("infer"):
                ys = [x * np.float32(2) for x in xs]
            with perf.stage("post"):
                responses = [
                    pb_utils.InferenceResponse(output_tensors=[
                        pb_utils.Tensor("y", y.astype(np.float32)),
                        pb_utils.Tensor("request_id",
                                        np.array([[rid.encode()]] * len(y), dtype=np.object_)),
                    ])
                    for y, rid in zip(ys, batch.ids, strict=True)
                ]
        return responses
