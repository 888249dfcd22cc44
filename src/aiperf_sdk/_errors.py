"""Typed errors and warnings of the SDK."""

from __future__ import annotations


class PerfError(Exception):
    """Base class of every error the SDK raises on purpose."""


class InvalidDurationError(PerfError, ValueError):
    """A duration handed to ``Ledger.record`` is negative or not an integer number of ns."""


class LedgerMismatchError(PerfError, ValueError):
    """Two ledgers (or a ledger and a snapshot) have different precision or range."""


class UnknownSeriesError(PerfError, KeyError):
    """A read asked for a stage (and labels) that has no samples in the ledger."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class BudgetExceeded(AssertionError):
    """A latency budget check failed; the message is the budget table."""

    def __init__(self, message: str, report: object = None) -> None:
        super().__init__(message)
        #: the :class:`BudgetReport` that failed
        self.report = report


class CardinalityWarning(UserWarning):
    """A stage got more distinct label sets than the ledger allows; the rest fold into one."""
