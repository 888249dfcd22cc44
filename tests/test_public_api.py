"""The public surface: `__all__` is complete and every name in it imports."""

from __future__ import annotations

import types

import aiperf_sdk as perf


def test_all_is_complete_and_importable() -> None:
    assert isinstance(perf.__all__, tuple)
    for name in perf.__all__:
        assert hasattr(perf, name), name
    public = {
        name
        for name, value in vars(perf).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    missing = public - set(perf.__all__)
    assert not missing, f"public names missing from __all__: {sorted(missing)}"


def test_public_objects_have_docstrings() -> None:
    undocumented = [n for n in perf.__all__ if not getattr(perf, n).__doc__]
    assert not undocumented


def test_core_contract_names() -> None:
    for name in (
        "request", "stage", "stream", "current_request_id", "Ledger", "default_ledger",
        "set_default_ledger", "Budget", "assert_within_budget", "BudgetExceeded",
    ):
        assert name in perf.__all__
    assert issubclass(perf.BudgetExceeded, AssertionError)
