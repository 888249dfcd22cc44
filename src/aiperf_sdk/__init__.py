"""aiperf-sdk: stage timing, HDR latency ledger and latency budgets for AI serving code.

Example::

    import aiperf_sdk as perf

    @perf.stage("prefill")
    def prefill(x): ...

    with perf.request() as req:
        with perf.stage("tokenize"):
            ...
        prefill(x)

    print(perf.default_ledger().summary())
"""

from . import gate as gate
from ._batch_types import BatcherClosedError as BatcherClosedError
from ._batch_types import BatcherConfigError as BatcherConfigError
from ._batch_types import BatcherError as BatcherError
from ._batch_types import BatcherStats as BatcherStats
from ._batch_types import BatcherUsageError as BatcherUsageError
from ._batch_types import BatchResultMismatchError as BatchResultMismatchError
from ._batch_types import BucketStats as BucketStats
from ._batch_types import DeadlineExceededError as DeadlineExceededError
from ._batch_types import QueueFullError as QueueFullError
from ._batched import BatchedFunction as BatchedFunction
from ._batched import batched as batched
from ._batcher import DynamicBatcher as DynamicBatcher
from ._budget import SLO as SLO
from ._budget import Budget as Budget
from ._budget import BudgetFileError as BudgetFileError
from ._budget import BudgetReport as BudgetReport
from ._budget import BudgetRow as BudgetRow
from ._budget import SLOReport as SLOReport
from ._budget import StageLimit as StageLimit
from ._budget import assert_within_budget as assert_within_budget
from ._capacity import CapacityError as CapacityError
from ._capacity import CapacityPlan as CapacityPlan
from ._capacity import plan as plan_capacity
from ._configure import ConfigurationError as ConfigurationError
from ._configure import ExportSettings as ExportSettings
from ._configure import configure as configure
from ._configure import flush_spans as flush_spans
from ._configure import otel_views as otel_views
from ._device_telemetry import DeviceTelemetry as DeviceTelemetry
from ._device_telemetry import GpuSample as GpuSample
from ._device_telemetry import TelemetryReport as TelemetryReport
from ._device_telemetry import TelemetrySample as TelemetrySample
from ._device_timing import device_stage as device_stage
from ._device_timing import flush_device_timings as flush_device_timings
from ._device_torch import DeviceUnavailableError as DeviceUnavailableError
from ._device_torch import TorchNotInstalledError as TorchNotInstalledError
from ._errors import BudgetExceeded as BudgetExceeded
from ._errors import CardinalityWarning as CardinalityWarning
from ._errors import InvalidDurationError as InvalidDurationError
from ._errors import LedgerMismatchError as LedgerMismatchError
from ._errors import PerfError as PerfError
from ._fingerprint import Fingerprint as Fingerprint
from ._fingerprint import fingerprint as fingerprint
from ._hdrlog import HdrLogWriter as HdrLogWriter
from ._hdrlog import merge_hdr_logs as merge_hdr_logs
from ._ledger import Ledger as Ledger
from ._ledger import default_ledger as default_ledger
from ._ledger import set_default_ledger as set_default_ledger
from ._loadgen import load_dataset as load_dataset
from ._loadgen import run_load as run_load
from ._loadgen import sweep as sweep
from ._loadgen_arrivals import ArrivalProcess as ArrivalProcess
from ._loadgen_arrivals import LoadConfigError as LoadConfigError
from ._loadgen_arrivals import Spike as Spike
from ._loadgen_arrivals import Step as Step
from ._loadgen_arrivals import load_trace as load_trace
from ._loadgen_env import environment_fingerprint as environment_fingerprint
from ._loadgen_http import HttpTarget as HttpTarget
from ._loadgen_http import TargetUnreachableError as TargetUnreachableError
from ._loadgen_models import LoadResult as LoadResult
from ._loadgen_models import ResultFileError as ResultFileError
from ._loadgen_models import SweepResult as SweepResult
from ._loadgen_models import load_result as load_result
from ._logsink import LogContextFilter as LogContextFilter
from ._logsink import current_stage as current_stage
from ._logsink import structlog_processor as structlog_processor
from ._models import LedgerSnapshot as LedgerSnapshot
from ._models import RequestTrace as RequestTrace
from ._models import Summary as Summary
from ._models import SummaryRow as SummaryRow
from ._preprocess import DevicePreprocessor as DevicePreprocessor
from ._preprocess import PreprocessInputError as PreprocessInputError
from ._preprocess import SequenceTooLongError as SequenceTooLongError
from ._preprocess import TextBatch as TextBatch
from ._prometheus import LedgerCollector as LedgerCollector
from ._prometheus import MetricsServer as MetricsServer
from ._prometheus import SnapshotWriter as SnapshotWriter
from ._prometheus import prometheus_app as prometheus_app
from ._prometheus import read_snapshot_dir as read_snapshot_dir
from ._prometheus import start_http_server as start_http_server
from ._prometheus import start_snapshot_writer as start_snapshot_writer
from ._prometheus import write_snapshot as write_snapshot
from ._recorder import RecorderError as RecorderError
from ._recorder import TrafficRecorder as TrafficRecorder
from ._request import Request as Request
from ._request import current_request as current_request
from ._request import current_request_id as current_request_id
from ._request import request as request
from ._request import valid_request_id as valid_request_id
from ._stage import stage as stage
from ._stream import stream as stream
from ._warmup import Readiness as Readiness
from ._warmup import ShapeWarmup as ShapeWarmup
from ._warmup import WarmupError as WarmupError
from ._warmup import WarmupReport as WarmupReport
from ._warmup import warmup as warmup
from ._warmup import warmup_shapes as warmup_shapes
from ._window import Window as Window

__version__ = "0.1.0"

__all__ = (
    "ArrivalProcess",
    "CapacityError",
    "CapacityPlan",
    "HttpTarget",
    "LoadConfigError",
    "LoadResult",
    "RecorderError",
    "ResultFileError",
    "SLO",
    "BatchResultMismatchError",
    "BatchedFunction",
    "BatcherClosedError",
    "BatcherConfigError",
    "BatcherError",
    "BatcherStats",
    "BatcherUsageError",
    "Budget",
    "BudgetExceeded",
    "BudgetFileError",
    "BudgetReport",
    "BudgetRow",
    "BucketStats",
    "CardinalityWarning",
    "DeadlineExceededError",
    "DevicePreprocessor",
    "DeviceTelemetry",
    "DeviceUnavailableError",
    "DynamicBatcher",
    "ConfigurationError",
    "ExportSettings",
    "Fingerprint",
    "GpuSample",
    "HdrLogWriter",
    "InvalidDurationError",
    "Ledger",
    "LedgerCollector",
    "LedgerMismatchError",
    "LedgerSnapshot",
    "LogContextFilter",
    "MetricsServer",
    "PerfError",
    "PreprocessInputError",
    "QueueFullError",
    "Readiness",
    "Request",
    "RequestTrace",
    "SLOReport",
    "SequenceTooLongError",
    "ShapeWarmup",
    "SnapshotWriter",
    "Spike",
    "StageLimit",
    "Step",
    "Summary",
    "SummaryRow",
    "SweepResult",
    "TargetUnreachableError",
    "TelemetryReport",
    "TelemetrySample",
    "TextBatch",
    "TorchNotInstalledError",
    "TrafficRecorder",
    "WarmupError",
    "WarmupReport",
    "Window",
    "assert_within_budget",
    "batched",
    "configure",
    "current_request",
    "current_request_id",
    "current_stage",
    "default_ledger",
    "device_stage",
    "environment_fingerprint",
    "fingerprint",
    "flush_device_timings",
    "flush_spans",
    "load_dataset",
    "load_result",
    "load_trace",
    "merge_hdr_logs",
    "otel_views",
    "plan_capacity",
    "prometheus_app",
    "read_snapshot_dir",
    "request",
    "run_load",
    "set_default_ledger",
    "stage",
    "start_http_server",
    "start_snapshot_writer",
    "stream",
    "valid_request_id",
    "structlog_processor",
    "sweep",
    "warmup",
    "warmup_shapes",
    "write_snapshot",
)
