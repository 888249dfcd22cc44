from __future__ import annotations

from collections.abc import Iterator

import pytest

# The `perf_ledger` fixture (a fresh default ledger per test) comes from the project's own
# pytest plugin, aiperf_sdk.pytest_plugin, loaded through its pytest11 entry point.


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run every `@pytest.mark.anyio` test on both asyncio and trio."""
    return str(request.param)


@pytest.fixture
def export_reset(monkeypatch: pytest.MonkeyPatch, perf_ledger: object) -> Iterator[None]:
    """For export tests: no AIPERF_* variable from outside, and every sink switched off
    (perf.configure()) afterwards, leaving no hook registered."""
    import os

    from aiperf_sdk import _hooks, configure

    for name in list(os.environ):
        if name.startswith("AIPERF_"):
            monkeypatch.delenv(name)
    yield
    monkeypatch.undo()  # the environment of the test must not leak into the reset
    configure()
    assert not _hooks.HOOKS
