"""aiperf-sdk for Triton Inference Server: Python-backend ``execute`` and PyTriton infer
functions timed per Triton request, with the request's correlation ID; Triton's own trace
files (``--trace-config level=TIMESTAMPS``) read into per-request stages.

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
from ._trace import TritonTrace as TritonTrace
from ._trace import TritonTraceError as TritonTraceError
from ._trace import parse_triton_trace as parse_triton_trace
from ._trace import read_triton_trace as read_triton_trace
from ._trace import record_triton_traces as record_triton_traces
from ._trace import trace_files as trace_files

__version__ = "0.1.0"

__all__ = (
    "PythonBackendPerf",
    "RequestBatch",
    "TritonIntegrationError",
    "TritonTrace",
    "TritonTraceError",
    "current_batch",
    "parse_triton_trace",
    "perf_infer",
    "read_triton_trace",
    "record_triton_traces",
    "timed_execute",
    "trace_files",
)
