"""DeviceTelemetry: real process readings here; no GPU, so the NVML mapping is tested with a
fake `pynvml` module standing in for the driver (it cannot run here)."""

from __future__ import annotations

import sys
import time
import types
from collections.abc import Iterator

import pytest

import aiperf_sdk as perf


def test_cpu_host_reports_no_gpu_and_samples_the_process() -> None:
    with perf.DeviceTelemetry(interval_s=0.01) as tel:
        deadline = time.monotonic() + 10
        while len(tel.samples()) < 5 and time.monotonic() < deadline:
            sum(i * i for i in range(20_000))  # keep the process busy
    report = tel.report()
    assert report.samples >= 5
    assert not report.gpu_available and not tel.gpu_available
    assert report.gpu_status.startswith("no GPU")
    assert report.gpu_util_mean_pct is None and report.gpu_memory_max_mb is None
    assert report.process_rss_max_mb is not None and report.process_rss_max_mb > 1
    assert report.process_cpu_mean_pct is not None and report.process_cpu_mean_pct > 0
    assert all(s.gpus == [] for s in tel.samples())
    assert "no GPU" in str(report)


def test_sampler_stops_and_is_restartable() -> None:
    tel = perf.DeviceTelemetry(interval_s=0.005, history=3)
    tel.start()
    tel.start()  # no second thread
    time.sleep(0.1)
    tel.stop()
    tel.stop()
    n = len(tel.samples())
    assert n == 3  # bounded history
    time.sleep(0.05)
    assert len(tel.samples()) == n and tel.latest() is tel.samples()[-1]
    s = tel.sample()  # one-shot reading without the thread
    assert tel.latest() is s


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        perf.DeviceTelemetry(interval_s=0)
    with pytest.raises(ValueError):
        perf.DeviceTelemetry(history=0)


class _NotSupported(Exception):
    pass


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.SimpleNamespace]:
    """A stand-in for nvidia-ml-py with two GPUs; GPU 1 does not support power readings."""
    state = types.SimpleNamespace(inited=0, shutdown=0, util=[40, 80])
    mod = types.ModuleType("pynvml")

    def get_power(h: int) -> int:
        if h == 1:
            raise _NotSupported("power")
        return 250_000

    mod.NVML_CLOCK_SM = 1  # type: ignore[attr-defined]
    mod.nvmlInit = lambda: setattr(state, "inited", state.inited + 1)  # type: ignore[attr-defined]
    mod.nvmlShutdown = (  # type: ignore[attr-defined]
        lambda: setattr(state, "shutdown", state.shutdown + 1)
    )
    mod.nvmlDeviceGetCount = lambda: 2  # type: ignore[attr-defined]
    mod.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    mod.nvmlDeviceGetName = lambda h: b"Fake GPU %d" % h  # type: ignore[attr-defined]
    mod.nvmlDeviceGetUtilizationRates = (  # type: ignore[attr-defined]
        lambda h: types.SimpleNamespace(gpu=state.util[h], memory=0)
    )
    mod.nvmlDeviceGetMemoryInfo = (  # type: ignore[attr-defined]
        lambda h: types.SimpleNamespace(used=(h + 1) * 1024**3, total=80 * 1024**3)
    )
    mod.nvmlDeviceGetPowerUsage = get_power  # type: ignore[attr-defined]
    mod.nvmlDeviceGetClockInfo = lambda h, clock: 1980  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    yield state


def test_nvml_readings_are_mapped(fake_nvml: types.SimpleNamespace) -> None:
    tel = perf.DeviceTelemetry(interval_s=60).start()
    try:
        s = tel.sample()
        fake_nvml.util = [60, 100]
        tel.sample()
    finally:
        tel.stop()
    assert fake_nvml.inited == 1 and fake_nvml.shutdown == 1
    assert [g.name for g in s.gpus] == ["Fake GPU 0", "Fake GPU 1"]
    g0, g1 = s.gpus
    assert (g0.utilization_pct, g0.memory_used_mb, g0.memory_total_mb) == (40.0, 1024.0, 81920.0)
    assert g0.power_w == 250.0 and g0.sm_clock_mhz == 1980.0
    assert g1.power_w is None  # not supported on that board: None, not a crash
    r = tel.report()
    assert r.gpu_available and not tel.gpu_available  # readings were taken; NVML now shut
    assert r.gpu_status == "ok: 2 GPU(s)"
    assert r.gpu_util_mean_pct == pytest.approx((40 + 80 + 60 + 100) / 4)
    assert r.gpu_util_max_pct == 100.0 and r.gpu_memory_max_mb == 2048.0
    assert r.gpu_power_mean_w == 250.0


def test_gpu_selection(fake_nvml: types.SimpleNamespace) -> None:
    with perf.DeviceTelemetry(interval_s=60, gpus=[1, 7]) as tel:
        assert [g.index for g in tel.sample().gpus] == [1]
