"""aiperf-sdk for vLLM: installing the package registers the ``aiperf`` stat-logger plugin
(entry point group ``vllm.stat_logger_plugins``); vLLM loads it by itself.

The vLLM-independent part, :class:`StatsFeeder`, is importable without vLLM.
"""

from ._feed import StatsFeeder as StatsFeeder
from ._feed import VllmStatsShapeError as VllmStatsShapeError

__version__ = "0.1.0"

__all__ = ("StatsFeeder", "VllmStatsShapeError")
