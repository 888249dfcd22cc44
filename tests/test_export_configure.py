"""perf.configure: one entry point, environment variables, idempotence, typed errors."""

from __future__ import annotations

import pytest

import aiperf_sdk as perf
from aiperf_sdk import _hooks
from aiperf_sdk._configure import current_settings

pytestmark = pytest.mark.usefixtures("export_reset")


def hook_types() -> list[str]:
    return sorted(type(h).__name__ for h in _hooks.HOOKS)


def test_nothing_enabled_leaves_no_hooks() -> None:
    settings = perf.configure()
    assert not settings.anything_on
    assert _hooks.HOOKS == []


def test_twice_is_safe_and_each_call_replaces_the_previous() -> None:
    perf.configure(otel_traces=True, torch_profiler=True, logging=True)
    perf.configure(otel_traces=True, torch_profiler=True, logging=True)
    assert hook_types() == ["LogHook", "TorchProfilerHook", "TraceHook"]
    perf.configure(logging=True)
    assert hook_types() == ["LogHook"]
    perf.configure()
    assert hook_types() == []


def test_settings_from_environment_and_arguments_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIPERF_LOGGING", "true")
    monkeypatch.setenv("AIPERF_TORCH_PROFILER", "1")
    settings = perf.configure(torch_profiler=False)
    assert settings.logging and not settings.torch_profiler
    assert hook_types() == ["LogHook"]
    assert current_settings() == settings


def test_bad_env_value_is_a_typed_error_naming_the_variable_and_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    perf.configure(logging=True)
    before = list(_hooks.HOOKS)
    monkeypatch.setenv("AIPERF_PROMETHEUS_PORT", "not-a-port")
    with pytest.raises(perf.ConfigurationError, match="AIPERF_PROMETHEUS_PORT"):
        perf.configure(logging=True, otel=True)
    assert before == _hooks.HOOKS


def test_bad_arguments_are_typed_errors() -> None:
    with pytest.raises(perf.ConfigurationError):
        perf.configure(prometheus_port=70000)
    with pytest.raises(perf.ConfigurationError, match="otlp_endpoint"):
        perf.configure(otlp_endpoint="ftp://x")
    with pytest.raises(perf.ConfigurationError, match="not both"):
        perf.configure(otel=True, otlp_endpoint="http://127.0.0.1:1", tracer_provider=object())
    assert _hooks.HOOKS == []
    assert isinstance(perf.ConfigurationError("x"), perf.PerfError)


def test_port_in_use_is_a_typed_error_and_keeps_the_old_configuration() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        perf.configure(logging=True)
        with pytest.raises(perf.ConfigurationError, match="cannot serve"):
            perf.configure(prometheus_port=port)
    assert hook_types() == ["LogHook"]


def test_a_failing_hook_is_disabled_not_raised_into_the_app() -> None:
    class Broken:
        def start(self, *args: object) -> object:
            raise RuntimeError("sink bug")

        def end(self, token: object, error: BaseException | None) -> None:
            pass

    broken = Broken()
    _hooks.add_hook(broken)
    try:
        with perf.stage("s"):
            pass
        assert broken not in _hooks.HOOKS
        assert perf.default_ledger().count("s") == 1
    finally:
        _hooks.remove_hook(broken)
