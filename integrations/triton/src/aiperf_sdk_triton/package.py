"""Versions of the host libraries this integration supports and is tested with."""

_instruments = ("nvidia-pytriton >= 0.5, < 0.8",)
#: Triton Python backend: any release whose ``pb_utils.InferenceRequest`` has
#: ``request_id()`` and ``parameters()`` (2.2x+); histograms via ``pb_utils.MetricFamily``
#: need ``MetricFamily.HISTOGRAM`` (Triton 24.08+), else the export is skipped with a log line.
_triton_python_backend = ">= 2.30"
_tested_with = {"nvidia-pytriton": "0.7.0", "tritonserver (bundled)": "2.51.0", "numpy": "1.26.4"}
