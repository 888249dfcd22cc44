"""``configure``: the one place where telemetry sinks are switched on and off.

Every sink is a hook in ``_hooks.HOOKS`` (or a server thread); ``configure()`` with nothing
enabled leaves ``HOOKS`` empty, which is exactly the unconfigured hot path (one truthiness
test per stage). Each call replaces the whole previous configuration, so calling it twice
with the same arguments leaves one set of hooks, one server, one set of providers.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from . import _hooks
from ._errors import PerfError

if TYPE_CHECKING:
    from ._otel import SpanStats

#: prefix of the environment variables read by ``configure`` (``AIPERF_OTEL=1`` ...)
ENV_PREFIX: Final = "AIPERF_"


class ConfigurationError(PerfError, ValueError):
    """A telemetry setting is invalid or its extra is not installed; nothing was changed."""


class ExportSettings(BaseModel):
    """Telemetry settings; each field can also come from ``AIPERF_<FIELD>`` (e.g.
    ``AIPERF_OTEL=1``, ``AIPERF_PROMETHEUS_PORT=9464``). Arguments to ``configure`` win over
    the environment, the environment over the defaults (everything off)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: OpenTelemetry traces and metrics (each can be overridden below)
    otel: bool = False
    #: spans per request and stage; default: ``otel``
    otel_traces: bool | None = None
    #: ``"deferred"``: spans built off the request path from recorded timestamps (cheaper
    #: than one raw span per stage); ``"live"``: each stage span is the current OTel span
    #: while it runs, so downstream instrumented calls nest under it
    otel_spans: Literal["deferred", "live"] = "deferred"
    #: ``aiperf.stage.duration`` histogram; default: ``otel``
    otel_metrics: bool | None = None
    #: OTLP/HTTP base URL (``http://collector:4318``); None: use the global/provided providers
    otlp_endpoint: str | None = Field(default=None, pattern=r"^https?://\S+$")
    #: seconds an OTLP export may take before it is abandoned (on the exporter's thread)
    otlp_timeout_s: float = Field(default=10.0, gt=0, le=300)
    #: seconds between metric exports to ``otlp_endpoint``
    otel_export_interval_s: float = Field(default=10.0, gt=0, le=3600)
    #: an NVTX range per request and stage (needs the ``nvtx`` package)
    nvtx: bool = False
    #: a ``torch.profiler.record_function`` range per request and stage while profiling
    torch_profiler: bool = False
    #: ``stage`` on log records and one INFO line per request on ``aiperf_sdk.requests``
    logging: bool = False
    #: serve ``/metrics`` for Prometheus on this port (None: no server)
    prometheus_port: int | None = Field(default=None, ge=0, le=65535)
    #: address of the Prometheus server
    prometheus_addr: str = "127.0.0.1"

    @property
    def traces_on(self) -> bool:
        return self.otel if self.otel_traces is None else self.otel_traces

    @property
    def metrics_on(self) -> bool:
        return self.otel if self.otel_metrics is None else self.otel_metrics

    @property
    def anything_on(self) -> bool:
        return (
            self.traces_on or self.metrics_on or self.nvtx or self.torch_profiler
            or self.logging or self.prometheus_port is not None
        )


class _Active:
    """What the current configuration set up (to be torn down by the next one)."""

    def __init__(self) -> None:
        self.settings = ExportSettings()
        self.hooks: list[_hooks.StageHook] = []
        self.owned: Any = None  # _otel.OwnedProviders
        self.prometheus: Any = None  # _prometheus.MetricsServer


_lock = threading.Lock()
_active = _Active()


def _from_env() -> dict[str, str]:
    out = {}
    for field in ExportSettings.model_fields:
        value = os.environ.get(ENV_PREFIX + field.upper(), "").strip()
        if value:
            out[field] = value
    return out


def _settings(kwargs: dict[str, Any]) -> ExportSettings:
    env = _from_env()
    given = {k: v for k, v in kwargs.items() if v is not None}
    try:
        return ExportSettings.model_validate({**env, **given})
    except ValidationError as exc:
        fields = {str(e["loc"][0]) for e in exc.errors() if e["loc"]}
        from_env = sorted(f for f in fields if f in env and f not in given)
        where = (
            " (from environment: " + ", ".join(ENV_PREFIX + f.upper() for f in from_env) + ")"
            if from_env else ""
        )
        raise ConfigurationError(f"invalid telemetry settings{where}: {exc}") from None


def _require(module: str, extra: str) -> None:
    try:
        __import__(module)
    except ImportError as exc:
        raise ConfigurationError(
            f"{module!r} is needed for this setting and is not importable ({exc}); "
            f"install it with: pip install 'aiperf-sdk[{extra}]'"
        ) from None


def configure(
    *,
    otel: bool | None = None,
    otel_traces: bool | None = None,
    otel_metrics: bool | None = None,
    otel_spans: str | None = None,
    otlp_endpoint: str | None = None,
    otlp_timeout_s: float | None = None,
    otel_export_interval_s: float | None = None,
    tracer_provider: Any | None = None,
    meter_provider: Any | None = None,
    nvtx: bool | None = None,
    torch_profiler: bool | None = None,
    logging: bool | None = None,
    prometheus_port: int | None = None,
    prometheus_addr: str | None = None,
) -> ExportSettings:
    """Switch telemetry sinks on or off; replaces the previous configuration as a whole.

    Arguments left as None come from ``AIPERF_<NAME>`` environment variables, else default
    to off. ``configure()`` with nothing enabled removes every sink (the request path is then
    exactly as cheap as never configured). Calling it again with the same arguments is safe.

    OpenTelemetry uses the global tracer/meter providers unless ``tracer_provider`` /
    ``meter_provider`` are given, or ``otlp_endpoint`` is set, in which case the SDK builds
    its own providers exporting OTLP/HTTP on background threads (and shuts them down on the
    next ``configure``).

    ``otel_spans="deferred"`` (the default) records each stage's timestamps on the request
    path and builds its span on a background thread (see :func:`flush_spans`);
    ``otel_spans="live"`` makes each stage span current while it runs, for code that must
    propagate the stage's context to downstream calls.

    Example::

        perf.configure(otel=True, otlp_endpoint="http://127.0.0.1:4318",
                       prometheus_port=9464, logging=True)
        ...
        perf.configure()  # everything off again

    Returns:
        The effective :class:`ExportSettings`.

    Raises:
        ConfigurationError: an invalid value (argument or environment variable), a sink
            whose package is not installed, a port that cannot be bound, or
            ``otlp_endpoint`` together with explicit providers. Nothing is changed then.
    """
    settings = _settings(
        {
            "otel": otel, "otel_traces": otel_traces, "otel_metrics": otel_metrics,
            "otel_spans": otel_spans,
            "otlp_endpoint": otlp_endpoint, "otlp_timeout_s": otlp_timeout_s,
            "otel_export_interval_s": otel_export_interval_s, "nvtx": nvtx,
            "torch_profiler": torch_profiler, "logging": logging,
            "prometheus_port": prometheus_port, "prometheus_addr": prometheus_addr,
        }
    )
    with _lock:
        return _apply(settings, tracer_provider, meter_provider)


def _apply(
    settings: ExportSettings, tracer_provider: Any | None, meter_provider: Any | None
) -> ExportSettings:
    otel_on = settings.traces_on or settings.metrics_on
    if settings.otlp_endpoint and (tracer_provider is not None or meter_provider is not None):
        raise ConfigurationError(
            "give either otlp_endpoint (the SDK builds its own providers) or "
            "tracer_provider/meter_provider, not both"
        )
    if settings.otlp_endpoint and otel_on:
        _require("opentelemetry.sdk", "otel")
        _require("opentelemetry.exporter.otlp.proto.http", "otel")
    if settings.nvtx:
        _require("nvtx", "nvtx")
    if settings.prometheus_port is not None:
        _require("prometheus_client", "prometheus")

    # build everything new first: if any of it fails, the old configuration stays
    new_hooks: list[_hooks.StageHook] = []
    owned = None
    prom = _active.prometheus
    started_prom = None
    try:
        if otel_on:
            from . import _otel

            if settings.otlp_endpoint:
                owned = _otel.build_otlp_providers(
                    settings.otlp_endpoint,
                    traces=settings.traces_on,
                    metrics=settings.metrics_on,
                    timeout_s=settings.otlp_timeout_s,
                    export_interval_s=settings.otel_export_interval_s,
                )
                tracer_provider, meter_provider = owned.tracer_provider, owned.meter_provider
            new_hooks.extend(
                _otel.make_hooks(
                    traces=settings.traces_on, metrics=settings.metrics_on,
                    tracer_provider=tracer_provider, meter_provider=meter_provider,
                    spans=settings.otel_spans,
                )
            )
        if settings.nvtx:
            from ._profiler import NvtxHook

            new_hooks.append(NvtxHook())
        if settings.torch_profiler:
            from ._profiler import TorchProfilerHook

            new_hooks.append(TorchProfilerHook())
        if settings.logging:
            from ._logsink import LogHook

            new_hooks.append(LogHook())
        if settings.prometheus_port is not None:
            same = prom is not None and (prom.requested_port, prom.addr) == (
                settings.prometheus_port, settings.prometheus_addr
            )
            if not same:
                from ._prometheus import start_http_server

                try:
                    started_prom = start_http_server(
                        settings.prometheus_port, addr=settings.prometheus_addr
                    )
                except OSError as exc:
                    raise ConfigurationError(
                        f"cannot serve /metrics on {settings.prometheus_addr}:"
                        f"{settings.prometheus_port}: {exc}"
                    ) from None
    except BaseException:
        if owned is not None:
            owned.shutdown()
        raise

    # swap: hooks first (the request path sees the new set at once), then tear down the old
    for hook in _active.hooks:
        _hooks.remove_hook(hook)
        if hook not in new_hooks:
            close = getattr(hook, "close", None)  # deferred spans: build what is queued
            if close is not None:
                close()
    for hook in new_hooks:
        _hooks.add_hook(hook)
    old_owned = _active.owned
    _active.hooks = new_hooks
    _active.owned = owned
    if settings.prometheus_port is None or started_prom is not None:
        if prom is not None:
            prom.close()
        _active.prometheus = started_prom
    _active.settings = settings
    if old_owned is not None:
        old_owned.shutdown()
    return settings


def otel_views() -> list[Any]:
    """Recommended OpenTelemetry SDK views: base-2 exponential buckets for the stage histogram.

    Exponential histograms of different replicas merge without losing resolution, so a
    collector or backend computes fleet-wide percentiles. Pass them to your own
    ``MeterProvider(views=...)``; ``configure(otlp_endpoint=...)`` uses them already.

    Example::

        provider = MeterProvider(metric_readers=[reader], views=perf.otel_views())
        perf.configure(otel=True, meter_provider=provider)

    Raises:
        ConfigurationError: ``opentelemetry-sdk`` is not installed.
    """
    _require("opentelemetry.sdk", "otel")
    from ._otel import otel_views as views

    return list(views())


def flush_spans(timeout_s: float = 5.0) -> SpanStats | None:
    """Build the deferred spans recorded so far and flush the tracer provider.

    With ``configure(otel_traces=True)`` in the default ``otel_spans="deferred"`` mode, spans
    are built on a background thread every 50 ms; call this before reading an in-memory
    exporter in a test, or before a short script exits (interpreter exit and the next
    ``configure()`` also build what is queued). Then the provider's ``force_flush`` (if it
    has one) pushes them through its span processors.

    Example::

        perf.configure(otel=True)
        with perf.request(), perf.stage("prefill"):
            ...
        stats = perf.flush_spans()
        assert stats.dropped == 0

    Returns:
        ``SpanStats(built, dropped, queued)`` of the deferred builder, or None when
        deferred traces are not configured.

    Raises:
        ConfigurationError: ``timeout_s`` is not positive.
    """
    if timeout_s <= 0:
        raise ConfigurationError(f"timeout_s must be > 0, got {timeout_s!r}")
    for hook in _active.hooks:
        flush = getattr(hook, "flush", None)
        if flush is not None:
            stats: SpanStats = flush(timeout_s)
            return stats
    return None


def current_settings() -> ExportSettings:
    """The settings of the last successful :func:`configure` (all off before any)."""
    return _active.settings


def prometheus_server() -> Any:
    """The ``/metrics`` server started by ``configure(prometheus_port=...)``, or None."""
    return _active.prometheus
