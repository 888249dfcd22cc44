"""Versions of the host libraries this integration supports and is tested with."""

_instruments = ("nvidia-pytriton >= 0.5, < 0.8",)
#: Triton Python backend: any release whose ``pb_utils.InferenceRequest`` has
#: ``request_id()`` and ``parameters()`` (2.2x+); histograms via ``pb_utils.MetricFamily``
#: need ``MetricFamily.HISTOGRAM`` (Triton 24.08+), else the export is skipped with a log line.
_triton_python_backend = ">= 2.30"
_tested_with = {"nvidia-pytriton": "0.7.0", "tritonserver (bundled)": "2.51.0", "numpy": "1.26.4"}
#: trace files: Triton's JSON trace output (``--trace-config triton,file=...``,
#: level=TIMESTAMPS). Parsed from tritonserver 2.51.0's real files (HTTP and gRPC); the older
#: layout (one record per trace holding all its timestamps) parses too.
_trace_format = "tritonserver JSON trace, tested 2.51.0"
