"""``DeviceTelemetry``: a background sampler of GPU and process resource use.

GPU readings come from NVML (``nvidia-ml-py``, imported as ``pynvml``): utilization, memory
used/total, power and SM clock per GPU. Process CPU (percent of one core, over the interval)
and resident memory come from the OS; torch's allocator numbers are added when torch is
already imported and CUDA is initialised. Without NVML or a GPU the sampler still runs and
says why there are no GPU readings (``gpu_status``). Samples are kept in a bounded ring; the
report summarises them (the regression gate reads ``gpu_util_mean_pct``).
"""

from __future__ import annotations

import collections
import contextlib
import os
import statistics
import sys
import threading
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ._models import format_table

_FROZEN = ConfigDict(frozen=True, extra="forbid")
_MB = 1024 * 1024


class GpuSample(BaseModel):
    """One GPU at one instant (fields the driver does not support are None)."""

    model_config = _FROZEN

    index: int  #: NVML device index
    name: str  #: e.g. ``"NVIDIA H100 80GB HBM3"``
    utilization_pct: float | None  #: percent of time a kernel ran over the driver's window
    memory_used_mb: float | None
    memory_total_mb: float | None
    power_w: float | None
    sm_clock_mhz: float | None


class TelemetrySample(BaseModel):
    """One sample of the process and every GPU sampled."""

    model_config = _FROZEN

    unix_s: float  #: wall-clock time of the sample
    process_cpu_pct: float | None  #: CPU time of this process / wall time since last sample
    process_rss_mb: float | None  #: resident set size of this process
    torch_allocated_mb: float | None = None  #: torch CUDA allocator: memory in tensors
    torch_reserved_mb: float | None = None  #: torch CUDA allocator: memory held from the driver
    gpus: list[GpuSample] = Field(default_factory=list)


class TelemetryReport(BaseModel):
    """Summary of the samples kept; ``str(report)`` is a table."""

    model_config = _FROZEN

    samples: int
    interval_s: float
    gpu_available: bool  #: NVML readings are or were taken
    gpu_status: str  #: ``"ok: N GPU(s)"`` or why there are no GPU readings
    gpu_util_mean_pct: float | None  #: mean over samples and GPUs
    gpu_util_max_pct: float | None
    gpu_memory_max_mb: float | None  #: highest memory used on any GPU
    gpu_power_mean_w: float | None
    process_cpu_mean_pct: float | None
    process_rss_max_mb: float | None

    def __str__(self) -> str:
        def f(v: float | None) -> str:
            return "-" if v is None else f"{v:.1f}"

        rows = [
            ["gpu", self.gpu_status],
            ["gpu util mean %", f(self.gpu_util_mean_pct)],
            ["gpu util max %", f(self.gpu_util_max_pct)],
            ["gpu memory max MB", f(self.gpu_memory_max_mb)],
            ["gpu power mean W", f(self.gpu_power_mean_w)],
            ["process cpu mean %", f(self.process_cpu_mean_pct)],
            ["process rss max MB", f(self.process_rss_max_mb)],
        ]
        return format_table(
            ["metric", "value"], rows,
            title=f"device telemetry ({self.samples} samples every {self.interval_s:g} s)",
        )


class DeviceTelemetry:
    """Sample GPU utilization, memory, power, SM clock and process CPU/RSS in the background.

    Use as a context manager (or ``start()``/``stop()``); ``sample()`` takes one reading now.
    NVML is initialised on start and shut down on stop. Without a GPU or NVML,
    ``gpu_available`` is False, ``gpu_status`` says why, and process readings continue.

    Example::

        with perf.DeviceTelemetry(interval_s=0.5) as tel:
            run_load()
        print(tel.report())       # gpu util mean/max, memory, power, process cpu / rss

    Args:
        interval_s: seconds between samples.
        history: samples kept (a ring; the oldest are dropped).
        gpus: NVML device indices to sample; None: all.

    Raises:
        ValueError: ``interval_s`` <= 0 or ``history`` < 1.
    """

    def __init__(
        self, interval_s: float = 1.0, *, history: int = 3600, gpus: list[int] | None = None
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        if history < 1:
            raise ValueError(f"history must be >= 1, got {history}")
        self.interval_s = float(interval_s)
        self._want = gpus
        self._lock = threading.Lock()
        self._samples: collections.deque[TelemetrySample] = collections.deque(maxlen=history)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._nvml: Any = None
        self._handles: list[tuple[int, str, Any]] = []
        self._nvml_inited = False
        self.gpu_status = "not started"
        self._last_cpu: tuple[float, float] | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def gpu_available(self) -> bool:
        """True when NVML readings are being taken."""
        return bool(self._handles)

    def start(self) -> DeviceTelemetry:
        """Start the background sampler (a no-op when already running)."""
        if self._thread is not None:
            return self
        self._init_nvml()
        self._stop.clear()
        self._last_cpu = _cpu_clock()
        self._thread = threading.Thread(
            target=self._run, name="aiperf-device-telemetry", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the sampler and shut NVML down; safe to call twice."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join()
        self._shutdown_nvml()

    def __enter__(self) -> DeviceTelemetry:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sample()
            except Exception:  # a failing reading must never kill the service's process
                self.gpu_status = "sampling error (see logs)"
                import logging

                logging.getLogger("aiperf_sdk").exception("device telemetry sample failed")

    # -- readings ------------------------------------------------------------------------------

    def sample(self) -> TelemetrySample:
        """Take one reading now (also kept in the history) and return it."""
        if not self._nvml_inited and self._thread is None:
            self._init_nvml()
        now = time.time()
        cpu_pct: float | None = None
        clock = _cpu_clock()
        with self._lock:
            last, self._last_cpu = self._last_cpu, clock
        if last is not None and clock[1] > last[1]:
            cpu_pct = 100.0 * (clock[0] - last[0]) / (clock[1] - last[1])
        alloc, reserved = _torch_memory()
        s = TelemetrySample(
            unix_s=now,
            process_cpu_pct=cpu_pct,
            process_rss_mb=_rss_mb(),
            torch_allocated_mb=alloc,
            torch_reserved_mb=reserved,
            gpus=[self._gpu(i, name, h) for i, name, h in self._handles],
        )
        with self._lock:
            self._samples.append(s)
        return s

    def latest(self) -> TelemetrySample | None:
        """The newest sample, or None before the first."""
        with self._lock:
            return self._samples[-1] if self._samples else None

    def samples(self) -> list[TelemetrySample]:
        """The samples kept, oldest first."""
        with self._lock:
            return list(self._samples)

    def report(self) -> TelemetryReport:
        """Summary of the samples kept (means and maxima; None where nothing was read)."""
        samples = self.samples()
        utils = [g.utilization_pct for s in samples for g in s.gpus
                 if g.utilization_pct is not None]
        mems = [g.memory_used_mb for s in samples for g in s.gpus if g.memory_used_mb is not None]
        power = [g.power_w for s in samples for g in s.gpus if g.power_w is not None]
        cpu = [s.process_cpu_pct for s in samples if s.process_cpu_pct is not None]
        rss = [s.process_rss_mb for s in samples if s.process_rss_mb is not None]
        return TelemetryReport(
            samples=len(samples),
            interval_s=self.interval_s,
            gpu_available=self.gpu_available or any(s.gpus for s in samples),
            gpu_status=self.gpu_status,
            gpu_util_mean_pct=statistics.fmean(utils) if utils else None,
            gpu_util_max_pct=max(utils) if utils else None,
            gpu_memory_max_mb=max(mems) if mems else None,
            gpu_power_mean_w=statistics.fmean(power) if power else None,
            process_cpu_mean_pct=statistics.fmean(cpu) if cpu else None,
            process_rss_max_mb=max(rss) if rss else None,
        )

    # -- NVML ----------------------------------------------------------------------------------

    def _init_nvml(self) -> None:
        self._handles = []
        try:
            import pynvml  # type: ignore[import-untyped,import-not-found,unused-ignore]
        except ImportError:
            self.gpu_status = "no GPU readings: nvidia-ml-py is not installed"
            return
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded on CPU hosts
            self.gpu_status = f"no GPU readings: NVML unavailable ({exc})"
            return
        self._nvml = pynvml
        self._nvml_inited = True
        try:
            count = int(pynvml.nvmlDeviceGetCount())
            wanted = range(count) if self._want is None else self._want
            for i in wanted:
                if not 0 <= i < count:
                    continue
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                name = pynvml.nvmlDeviceGetName(h)
                if isinstance(name, bytes):
                    name = name.decode()
                self._handles.append((i, str(name), h))
        except Exception as exc:
            self.gpu_status = f"no GPU readings: NVML query failed ({exc})"
            self._handles = []
            return
        self.gpu_status = (
            f"ok: {len(self._handles)} GPU(s)" if self._handles else "no GPU: NVML sees no device"
        )

    def _shutdown_nvml(self) -> None:
        if self._nvml_inited:
            self._nvml_inited = False
            self._handles = []
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()

    def _gpu(self, index: int, name: str, h: Any) -> GpuSample:
        nv = self._nvml

        def read(fn: Any, *args: Any) -> Any:
            try:
                return fn(h, *args)
            except Exception:  # NVMLError_NotSupported on some boards / MIG slices
                return None

        util = read(nv.nvmlDeviceGetUtilizationRates)
        mem = read(nv.nvmlDeviceGetMemoryInfo)
        power_mw = read(nv.nvmlDeviceGetPowerUsage)
        clock = read(nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_SM)
        return GpuSample(
            index=index,
            name=name,
            utilization_pct=None if util is None else float(util.gpu),
            memory_used_mb=None if mem is None else mem.used / _MB,
            memory_total_mb=None if mem is None else mem.total / _MB,
            power_w=None if power_mw is None else power_mw / 1000.0,
            sm_clock_mhz=None if clock is None else float(clock),
        )

    def __repr__(self) -> str:
        return (
            f"DeviceTelemetry(interval_s={self.interval_s}, running={self._thread is not None}, "
            f"gpu_status={self.gpu_status!r})"
        )


def _cpu_clock() -> tuple[float, float]:
    """(process CPU seconds, monotonic seconds)."""
    t = os.times()
    return t.user + t.system, time.monotonic()


def _rss_mb() -> float | None:
    try:
        with open("/proc/self/statm", "rb") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / _MB
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource

        # peak, not current, where /proc is missing (macOS reports bytes, Linux KiB)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / _MB if sys.platform == "darwin" else peak / 1024
    except (ImportError, OSError):
        return None


def _torch_memory() -> tuple[float | None, float | None]:
    torch = sys.modules.get("torch")
    if torch is None:
        return None, None
    try:
        if not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return None, None
        return (torch.cuda.memory_allocated() / _MB, torch.cuda.memory_reserved() / _MB)
    except Exception:
        return None, None
