"""aiperf-sdk for Triton Inference Server: Python-backend ``execute`` and PyTriton infer
functions timed per Triton request, with the request's correlation ID.

Example (PyTriton)::

    from aiperf_sdk_triton import perf_infer
    from pytriton.decorators import batch

    @perf_infer("embed")
    @batch
    def infer(input_ids): ...
"""

from ._batch import RequestBatch as RequestBatch
from ._batch import TritonIntegrationError as TritonIntegrationError
from ._python_backend import PythonBackendPerf as PythonBackendPerf
from ._python_backend import timed_execute as timed_execute
from ._pytriton import current_batch as current_batch
from ._pytriton import perf_infer as perf_infer

__version__ = "0.1.0"

__all__ = (
    "PythonBackendPerf",
    "RequestBatch",
    "TritonIntegrationError",
    "current_batch",
    "perf_infer",
    "timed_execute",
)
