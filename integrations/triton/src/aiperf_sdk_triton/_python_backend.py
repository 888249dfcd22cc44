"""Triton Python backend (``model.py``): time ``execute(requests)`` per Triton request."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import aiperf_sdk as perf

from ._batch import RequestBatch, TritonIntegrationError

log = logging.getLogger("aiperf_sdk_triton")

F = TypeVar("F", bound=Callable[..., Any])

#: seconds; Triton's /metrics gets a histogram with these upper bounds
DEFAULT_BUCKETS_S: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)
_MAX_METRICS = 64  # batch_size label values kept as Triton metrics (bounded: max_batch_size)


class PythonBackendPerf:
    """Per-request timing for a Triton Python-backend model; create it in ``initialize``.

    Each Triton request in ``execute(requests)`` gets a ``perf.request()`` scope with the ID
    from ``request.request_id()`` (the ``id`` of the KServe request / ``X-Request-ID`` in
    Triton's HTTP frontend), else the ``id_parameter`` key of ``request.parameters()``, else
    a new one; ``e2e`` is labelled ``model`` and ``batch_size``. With ``pb_utils`` given, the
    same durations feed a histogram family on Triton's own ``/metrics``
    (``aiperf_execute_duration_seconds``; needs ``MetricFamily.HISTOGRAM``, Triton 24.08+,
    skipped with a log line otherwise). The family is kept referenced here: Triton drops a
    family whose Python object is garbage collected.

    Example (``model.py``)::

        import triton_python_backend_utils as pb_utils
        from aiperf_sdk_triton import PythonBackendPerf, timed_execute

        class TritonPythonModel:
            def initialize(self, args):
                self.perf = PythonBackendPerf(args["model_name"], pb_utils=pb_utils)

            @timed_execute
            def execute(self, requests):
                with perf.stage("infer"):
                    ...

    Raises:
        TritonIntegrationError: empty ``model`` or ``id_parameter``, bad buckets.
    """

    def __init__(
        self,
        model: str,
        *,
        id_parameter: str = "request_id",
        ledger: perf.Ledger | None = None,
        pb_utils: Any = None,
        buckets_s: Sequence[float] = DEFAULT_BUCKETS_S,
        metric_name: str = "aiperf_execute_duration_seconds",
    ) -> None:
        if not isinstance(model, str) or not model:
            raise TritonIntegrationError(f"model must be a non-empty str, got {model!r}")
        if not isinstance(id_parameter, str) or not id_parameter:
            raise TritonIntegrationError(
                f"id_parameter must be a non-empty str, got {id_parameter!r}")
        buckets = [float(b) for b in buckets_s]
        if not buckets or any(b <= 0 for b in buckets) or buckets != sorted(set(buckets)):
            raise TritonIntegrationError(
                f"buckets_s must be increasing positive seconds, got {list(buckets_s)!r}")
        self.model = model
        self.id_parameter = id_parameter
        self.ledger = ledger
        self._buckets = buckets
        self._family: Any = None
        self._metrics: dict[str, Any] = {}
        if pb_utils is not None:
            kind = getattr(getattr(pb_utils, "MetricFamily", None), "HISTOGRAM", None)
            if kind is None:
                log.warning("this Triton's pb_utils has no MetricFamily.HISTOGRAM (Triton "
                            "24.08+); %s is not exported to Triton's /metrics", metric_name)
            else:
                self._family = pb_utils.MetricFamily(
                    name=metric_name,
                    description="aiperf-sdk: execute() duration per Triton request",
                    kind=kind,
                )

    def request_ids(self, requests: Sequence[Any]) -> list[object]:
        """Raw correlation IDs of Triton requests (validated later by :class:`RequestBatch`)."""
        out: list[object] = []
        for r in requests:
            rid = r.request_id()
            if not rid:
                try:
                    params = json.loads(r.parameters() or "{}")
                except ValueError:
                    params = {}
                rid = params.get(self.id_parameter) if isinstance(params, dict) else None
            out.append(rid)
        return out

    def batch(self, requests: Sequence[Any]) -> RequestBatch:
        """Context manager around the work of one ``execute`` call."""
        return RequestBatch(self.request_ids(requests), model=self.model, ledger=self.ledger,
                            observer=self._observe if self._family is not None else None)

    def _observe(self, bucket: str, duration_ns: int, failed: bool) -> None:
        metric = self._metrics.get(bucket)
        if metric is None:
            if len(self._metrics) >= _MAX_METRICS:
                return
            metric = self._family.Metric(
                labels={"model": self.model, "batch_size": bucket}, buckets=self._buckets)
            self._metrics[bucket] = metric
        metric.observe(duration_ns / 1e9)


def timed_execute(fn: F) -> F:
    """Decorate ``TritonPythonModel.execute``; uses the ``PythonBackendPerf`` found on
    ``self.perf`` (set in ``initialize``).

    Raises:
        TritonIntegrationError: at call time, when ``self.perf`` is not a PythonBackendPerf.
    """

    @functools.wraps(fn)
    def execute(self: Any, requests: Any, *args: Any, **kwargs: Any) -> Any:
        helper = getattr(self, "perf", None)
        if not isinstance(helper, PythonBackendPerf):
            raise TritonIntegrationError(
                "timed_execute needs self.perf = PythonBackendPerf(...) set in initialize()")
        with helper.batch(requests):
            return fn(self, requests, *args, **kwargs)

    return execute  # type: ignore[return-value]
