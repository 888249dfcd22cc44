from __future__ import annotations

import pytest

# The `perf_ledger` fixture (a fresh default ledger per test) comes from the project's own
# pytest plugin, aiperf_sdk.pytest_plugin, loaded through its pytest11 entry point.


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run every `@pytest.mark.anyio` test on both asyncio and trio."""
    return str(request.param)
