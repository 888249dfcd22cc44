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

from ._budget import SLO as SLO
from ._budget import Budget as Budget
from ._budget import BudgetFileError as BudgetFileError
from ._budget import BudgetReport as BudgetReport
from ._budget import BudgetRow as BudgetRow
from ._budget import SLOReport as SLOReport
from ._budget import StageLimit as StageLimit
from ._budget import assert_within_budget as assert_within_budget
from ._configure import ConfigurationError as ConfigurationError
from ._configure import ExportSettings as ExportSettings
from ._configure import configure as configure
from ._configure import otel_views as otel_views
from ._errors import BudgetExceeded as BudgetExceeded
from ._errors import CardinalityWarning as CardinalityWarning
from ._errors import InvalidDurationError as InvalidDurationError
from ._errors import LedgerMismatchError as LedgerMismatchError
from ._errors import PerfError as PerfError
from ._hdrlog import HdrLogWriter as HdrLogWriter
from ._hdrlog import merge_hdr_logs as merge_hdr_logs
from ._ledger import Ledger as Ledger
from ._ledger import default_ledger as default_ledger
from ._ledger import set_default_ledger as set_default_ledger
from ._logsink import LogContextFilter as LogContextFilter
from ._logsink import current_stage as current_stage
from ._logsink import structlog_processor as structlog_processor
from ._models import LedgerSnapshot as LedgerSnapshot
from ._models import RequestTrace as RequestTrace
from ._models import Summary as Summary
from ._models import SummaryRow as SummaryRow
from ._prometheus import LedgerCollector as LedgerCollector
from ._prometheus import MetricsServer as MetricsServer
from ._prometheus import SnapshotWriter as SnapshotWriter
from ._prometheus import prometheus_app as prometheus_app
from ._prometheus import read_snapshot_dir as read_snapshot_dir
from ._prometheus import start_http_server as start_http_server
from ._prometheus import start_snapshot_writer as start_snapshot_writer
from ._prometheus import write_snapshot as write_snapshot
from ._request import Request as Request
from ._request import current_request as current_request
from ._request import current_request_id as current_request_id
from ._request import request as request
from ._stage import stage as stage
from ._stream import stream as stream
from ._window import Window as Window

__version__ = "0.1.0"

__all__ = (
    "SLO",
    "Budget",
    "BudgetExceeded",
    "BudgetFileError",
    "BudgetReport",
    "BudgetRow",
    "CardinalityWarning",
    "ConfigurationError",
    "ExportSettings",
    "HdrLogWriter",
    "InvalidDurationError",
    "Ledger",
    "LedgerCollector",
    "LedgerMismatchError",
    "LedgerSnapshot",
    "LogContextFilter",
    "MetricsServer",
    "PerfError",
    "Request",
    "RequestTrace",
    "SLOReport",
    "SnapshotWriter",
    "StageLimit",
    "Summary",
    "SummaryRow",
    "Window",
    "assert_within_budget",
    "configure",
    "current_request",
    "current_request_id",
    "current_stage",
    "default_ledger",
    "merge_hdr_logs",
    "otel_views",
    "prometheus_app",
    "read_snapshot_dir",
    "request",
    "set_default_ledger",
    "stage",
    "start_http_server",
    "start_snapshot_writer",
    "stream",
    "structlog_processor",
    "write_snapshot",
)
