"""Prometheus exposition of the ledger: per-stage histograms, counts and exact quantiles.

Everything is computed from the ledger at scrape time (nothing on the request path):

* ``aiperf_stage_duration_seconds`` (histogram): cumulative bucket counts at the configured
  bounds, read off the HDR counts (the HDR bucket that contains a bound, 0.1 % wide at 3
  significant figures, counts under it: values equal to the bound always do, values up to
  0.1 % above it may), plus the exact ``_count`` and ``_sum``. Use it with
  ``histogram_quantile`` and to aggregate replicas.
* ``aiperf_stage_latency_seconds`` (summary): p50/p90/p99/p99.9 from the HDR histogram, exact
  to its precision, cumulative since the process (or the snapshot directory) started.

Multi-process servers: each worker writes its ledger snapshot into one directory
(:func:`start_snapshot_writer`); an exposition built with ``snapshot_dir`` merges every file
there at each scrape. HDR merging is exact, so the merged quantiles are those of all workers'
samples together, and histogram counts are the workers' sums.
"""

from __future__ import annotations

import logging
import math
import os
import re
import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from ._configure import ConfigurationError
from ._hdr import HdrLayout, Histogram
from ._ledger import Ledger, default_ledger
from ._models import LedgerSnapshot

if TYPE_CHECKING:  # prometheus_client is an extra: imported only when used
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import Metric

_log = logging.getLogger("aiperf_sdk")

#: default histogram bucket bounds (seconds), from 0.5 ms to 60 s
DEFAULT_BUCKETS_S: Final = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
)
#: default quantiles of the summary
DEFAULT_QUANTILES: Final = (0.5, 0.9, 0.99, 0.999)
HISTOGRAM_NAME: Final = "aiperf_stage_duration_seconds"
SUMMARY_NAME: Final = "aiperf_stage_latency_seconds"
_RESERVED: Final = frozenset({"stage", "le", "quantile"})
_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def _label_name(key: str) -> str:
    name = _INVALID.sub("_", key)
    if not name or name[0].isdigit() or name.startswith("__") or name in _RESERVED:
        name = "label_" + name
    return name


def _validate(buckets_s: Sequence[float], quantiles: Sequence[float]) -> tuple[
    tuple[float, ...], tuple[float, ...]
]:
    b = tuple(float(x) for x in buckets_s)
    if not b or any(not math.isfinite(x) or x <= 0 for x in b) or list(b) != sorted(set(b)):
        raise ConfigurationError(
            f"buckets_s must be strictly increasing, finite, positive seconds; got {buckets_s!r}"
        )
    q = tuple(float(x) for x in quantiles)
    if any(not 0.0 < x < 1.0 for x in q):
        raise ConfigurationError(f"quantiles must lie in (0, 1); got {quantiles!r}")
    return b, q


def read_snapshot_dir(directory: str | os.PathLike[str]) -> Ledger | None:
    """Merge every ``*.json`` ledger snapshot in ``directory`` into a new ledger.

    Files that cannot be read or do not match the first one's precision are skipped with a
    warning logged (one bad worker must not take the whole exposition down). Returns None
    when there is no readable snapshot.
    """
    merged: Ledger | None = None
    for path in sorted(Path(directory).glob("*.json")):
        try:
            snap = LedgerSnapshot.model_validate_json(path.read_bytes())
            snap = snap.model_copy(update={"windows": [], "slowest": {}})
            if merged is None:
                merged = Ledger(
                    snap.significant_figures, snap.highest_ms, window_s=snap.window_s,
                    max_label_sets=1 << 20, slowest_capacity=0,
                )
            merged.merge(snap)
        except Exception as exc:
            _log.warning("aiperf_sdk: skipping ledger snapshot %s: %s", path, exc)
    return merged


class LedgerCollector:
    """prometheus_client collector exposing a ledger (or a directory of snapshots).

    Args:
        ledger: ledger to expose; None: the default ledger at each scrape.
        buckets_s: histogram bucket upper bounds in seconds (strictly increasing).
        quantiles: summary quantiles, each in (0, 1).
        snapshot_dir: expose the merge of every worker snapshot in this directory instead.

    Raises:
        ConfigurationError: bad buckets or quantiles.
    """

    def __init__(
        self,
        ledger: Ledger | None = None,
        *,
        buckets_s: Sequence[float] = DEFAULT_BUCKETS_S,
        quantiles: Sequence[float] = DEFAULT_QUANTILES,
        snapshot_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self._buckets, self._quantiles = _validate(buckets_s, quantiles)
        self._ledger = ledger
        self._dir = snapshot_dir

    def _snapshot(self) -> LedgerSnapshot | None:
        if self._dir is not None:
            ledger = read_snapshot_dir(self._dir)
            return None if ledger is None else ledger.snapshot()
        return (self._ledger if self._ledger is not None else default_ledger()).snapshot()

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        from prometheus_client.core import Metric

        snap = self._snapshot()
        hist = Metric(HISTOGRAM_NAME, "Duration of aiperf_sdk stages", "histogram")
        summ = Metric(SUMMARY_NAME, "Quantiles of aiperf_sdk stage durations (HDR)", "summary")
        if snap is None:
            return [hist, summ]
        layout = HdrLayout(snap.highest_ms * 1_000_000, snap.significant_figures)
        bounds_ns = [round(b * 1e9) for b in self._buckets]
        pcts = [q * 100.0 for q in self._quantiles]
        for s in snap.series:
            h = Histogram.decode(layout, s.histogram)
            labels = {"stage": s.stage, **{_label_name(k): v for k, v in s.labels.items()}}
            cumulative = np.cumsum(h.counts)
            last = len(cumulative) - 1
            for bound, bound_ns in zip(self._buckets, bounds_ns, strict=True):
                index = layout.index_of(min(bound_ns, layout.highest))
                below = 0 if last < 0 else int(cumulative[min(index, last)])
                hist.add_sample(
                    HISTOGRAM_NAME + "_bucket", {**labels, "le": _fmt(bound)}, float(below)
                )
            hist.add_sample(HISTOGRAM_NAME + "_bucket", {**labels, "le": "+Inf"}, float(s.count))
            hist.add_sample(HISTOGRAM_NAME + "_count", labels, float(s.count))
            hist.add_sample(HISTOGRAM_NAME + "_sum", labels, s.sum_ns / 1e9)
            h.max_ns = s.max_ns  # exact max from the snapshot caps the top percentiles
            for q, v in zip(self._quantiles, h.percentiles_ns(pcts), strict=True):
                summ.add_sample(SUMMARY_NAME, {**labels, "quantile": _fmt(q)}, v / 1e9)
            summ.add_sample(SUMMARY_NAME + "_count", labels, float(s.count))
            summ.add_sample(SUMMARY_NAME + "_sum", labels, s.sum_ns / 1e9)
        return [hist, summ]


def _fmt(x: float) -> str:
    return repr(float(x))


def _registry(
    ledger: Ledger | None,
    buckets_s: Sequence[float],
    quantiles: Sequence[float],
    snapshot_dir: str | os.PathLike[str] | None,
) -> CollectorRegistry:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        LedgerCollector(
            ledger, buckets_s=buckets_s, quantiles=quantiles, snapshot_dir=snapshot_dir
        )
    )
    return registry


def prometheus_app(
    ledger: Ledger | None = None,
    *,
    buckets_s: Sequence[float] = DEFAULT_BUCKETS_S,
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
    snapshot_dir: str | os.PathLike[str] | None = None,
) -> Callable[..., Any]:
    """An ASGI app serving the ledger in the Prometheus text format; mount it at /metrics.

    Example::

        app.mount("/metrics", perf.prometheus_app())              # FastAPI / Starlette
        app.mount("/metrics", perf.prometheus_app(snapshot_dir="/run/aiperf"))  # workers

    Raises:
        ConfigurationError: bad buckets or quantiles.
    """
    from prometheus_client import make_asgi_app

    app: Callable[..., Any] = make_asgi_app(
        _registry(ledger, buckets_s, quantiles, snapshot_dir)
    )
    return app


class MetricsServer:
    """A running ``/metrics`` HTTP server (a daemon thread); ``close()`` stops it."""

    def __init__(self, httpd: Any, thread: threading.Thread, requested_port: int,
                 addr: str) -> None:
        self._httpd = httpd
        self._thread = thread
        #: the port asked for (0: any free port)
        self.requested_port = requested_port
        #: the address it listens on
        self.addr = addr
        #: the port it actually listens on
        self.port: int = httpd.server_port

    @property
    def url(self) -> str:
        return f"http://{self.addr}:{self.port}/metrics"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __repr__(self) -> str:
        return f"MetricsServer(url={self.url!r})"


def start_http_server(
    port: int,
    addr: str = "127.0.0.1",
    *,
    ledger: Ledger | None = None,
    buckets_s: Sequence[float] = DEFAULT_BUCKETS_S,
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
    snapshot_dir: str | os.PathLike[str] | None = None,
) -> MetricsServer:
    """Serve ``/metrics`` on ``addr:port`` from a daemon thread (port 0: any free port).

    Example::

        server = perf.start_http_server(9464)
        print(server.url)      # http://127.0.0.1:9464/metrics
        server.close()

    Raises:
        ConfigurationError: bad buckets or quantiles.
        OSError: the port cannot be bound.
    """
    from prometheus_client import start_http_server as _prom_start_http_server

    registry = _registry(ledger, buckets_s, quantiles, snapshot_dir)
    httpd, thread = _prom_start_http_server(port, addr=addr, registry=registry)
    return MetricsServer(httpd, thread, port, addr)


# -- multi-process: snapshot files ---------------------------------------------------------


def write_snapshot(
    directory: str | os.PathLike[str], ledger: Ledger | None = None, name: str | None = None
) -> Path:
    """Write ``ledger``'s snapshot atomically to ``directory/<name>.json`` (default name:
    ``<hostname>-<pid>``); returns the path. A reader never sees a half-written file."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    name = name or f"{socket.gethostname()}-{os.getpid()}"
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,128}", name):
        raise ConfigurationError(f"snapshot name must be 1-128 of [A-Za-z0-9._-], got {name!r}")
    snap = (ledger if ledger is not None else default_ledger()).snapshot()
    snap = snap.model_copy(update={"windows": [], "slowest": {}})
    target = d / f"{name}.json"
    tmp = d / f".{name}.json.tmp"
    tmp.write_text(snap.model_dump_json())
    os.replace(tmp, target)
    return target


class SnapshotWriter:
    """Background thread writing a ledger snapshot every ``interval_s`` (and on ``stop``)."""

    def __init__(self, directory: str | os.PathLike[str], ledger: Ledger | None,
                 interval_s: float, name: str | None) -> None:
        if not interval_s > 0:
            raise ConfigurationError(f"interval_s must be > 0, got {interval_s!r}")
        self._dir = directory
        self._ledger = ledger
        self._interval = interval_s
        self._name = name
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="aiperf-snapshots", daemon=True)
        self.path = write_snapshot(directory, ledger, name)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                write_snapshot(self._dir, self._ledger, self._name)
            except Exception:
                _log.exception("aiperf_sdk: writing a ledger snapshot failed")

    def stop(self) -> None:
        """Stop the thread and write one final snapshot."""
        self._stop.set()
        self._thread.join(timeout=10)
        write_snapshot(self._dir, self._ledger, self._name)


def start_snapshot_writer(
    directory: str | os.PathLike[str],
    *,
    ledger: Ledger | None = None,
    interval_s: float = 5.0,
    name: str | None = None,
) -> SnapshotWriter:
    """Write this process's ledger snapshot to ``directory`` now and every ``interval_s``.

    Call it in each worker (e.g. gunicorn's ``post_worker_init``); serve the merge with
    ``prometheus_app(snapshot_dir=directory)`` or ``start_http_server(..., snapshot_dir=)``.

    Raises:
        ConfigurationError: ``interval_s`` is not positive or ``name`` is invalid.
    """
    return SnapshotWriter(directory, ledger, interval_s, name)
