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
from ._errors import BudgetExceeded as BudgetExceeded
from ._errors import CardinalityWarning as CardinalityWarning
from ._errors import InvalidDurationError as InvalidDurationError
from ._errors import LedgerMismatchError as LedgerMismatchError
from ._errors import PerfError as PerfError
from ._ledger import Ledger as Ledger
from ._ledger import Window as Window
from ._ledger import default_ledger as default_ledger
from ._ledger import set_default_ledger as set_default_ledger
from ._models import LedgerSnapshot as LedgerSnapshot
from ._models import RequestTrace as RequestTrace
from ._models import Summary as Summary
from ._models import SummaryRow as SummaryRow
from ._request import Request as Request
from ._request import current_request as current_request
from ._request import current_request_id as current_request_id
from ._request import request as request
from ._stage import stage as stage
from ._stream import stream as stream

__version__ = "0.1.0"

__all__ = (
    "SLO",
    "Budget",
    "BudgetExceeded",
    "BudgetFileError",
    "BudgetReport",
    "BudgetRow",
    "CardinalityWarning",
    "InvalidDurationError",
    "Ledger",
    "LedgerMismatchError",
    "LedgerSnapshot",
    "PerfError",
    "Request",
    "RequestTrace",
    "SLOReport",
    "StageLimit",
    "Summary",
    "SummaryRow",
    "Window",
    "assert_within_budget",
    "current_request",
    "current_request_id",
    "default_ledger",
    "request",
    "set_default_ledger",
    "stage",
    "stream",
)
