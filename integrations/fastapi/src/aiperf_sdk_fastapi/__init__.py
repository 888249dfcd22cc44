"""aiperf-sdk for FastAPI, Starlette and any ASGI app.

Example::

    from fastapi import FastAPI
    import aiperf_sdk as perf
    from aiperf_sdk_fastapi import instrument_app, mount_metrics

    app = FastAPI()
    instrument_app(app)          # per-request scope, X-Request-ID, TTFB and total per route
    mount_metrics(app)           # /metrics (Prometheus)
"""

from ._helpers import add_readiness_route as add_readiness_route
from ._helpers import add_summary_route as add_summary_route
from ._helpers import instrument_app as instrument_app
from ._helpers import mount_metrics as mount_metrics
from ._helpers import uninstrument_app as uninstrument_app
from ._helpers import warmup_lifespan as warmup_lifespan
from ._middleware import DEFAULT_EXCLUDE as DEFAULT_EXCLUDE
from ._middleware import HttpExchange as HttpExchange
from ._middleware import MiddlewareConfigError as MiddlewareConfigError
from ._middleware import PerfMiddleware as PerfMiddleware

__version__ = "0.1.0"

__all__ = (
    "DEFAULT_EXCLUDE",
    "HttpExchange",
    "MiddlewareConfigError",
    "PerfMiddleware",
    "add_readiness_route",
    "add_summary_route",
    "instrument_app",
    "mount_metrics",
    "uninstrument_app",
    "warmup_lifespan",
)
