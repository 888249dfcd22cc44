"""Profiler ranges: every request and stage as an NVTX range and a torch.profiler range.

Both are named after the stage, so Nsight Systems timelines, ``torch.profiler`` traces and the
ledger show the same names. Neither costs much when nothing is recording:

* NVTX: without a tool attached (``NVTX_INJECTION64_PATH`` unset) the ``nvtx`` package hands
  out a dummy domain whose calls return at once (~0.1 µs). Ranges are NVTX *start/end* ranges
  rather than push/pop: push/pop is a per-thread stack, and two async stages interleaved on
  one event-loop thread would pop each other's ranges; start/end ranges may end anywhere.
* torch: ``record_function`` costs ~8 µs even with no profiler running, so the hook checks
  ``"torch" in sys.modules`` (never imports torch) and the profiler's enabled flag first.

Each hook exposes ``gate`` = (object, attribute name): while that attribute is false the C hot
path of ``stage()`` skips the hook entirely and keeps its fast path, so ``nvtx=True`` without
a tool and ``torch_profiler=True`` without a running profiler cost (almost) nothing.
"""

from __future__ import annotations

import sys
from typing import Any

Labels = tuple[tuple[str, str], ...]

#: NVTX domain of every range the SDK opens
NVTX_DOMAIN = "aiperf"


class NvtxHook:
    """Opens an NVTX range per request and stage in the ``aiperf`` domain."""

    __slots__ = ("_attrs", "_domain", "gate", "tool_attached")

    def __init__(self) -> None:
        import os

        import nvtx  # type: ignore[import-untyped]

        self._domain: Any = nvtx.get_domain(NVTX_DOMAIN)
        self._attrs: dict[str, Any] = {}
        #: an NVTX tool (Nsight) injects itself through this variable at process start; none
        #: can attach later, so without it every range is a no-op
        self.tool_attached = bool(os.environ.get("NVTX_INJECTION64_PATH"))
        #: (object, attribute): the C hot path skips this hook while the attribute is false
        self.gate = (self, "tool_attached")

    def start(self, name: str, labels: Labels, request_id: str | None, kind: str) -> object:
        attrs = self._attrs.get(name)
        if attrs is None:
            attrs = self._domain.get_event_attributes(message=name)
            if len(self._attrs) < 4096:
                self._attrs[name] = attrs
        return self._domain.start_range(attrs)

    def end(self, token: object, error: BaseException | None) -> None:
        self._domain.end_range(token)


class TorchProfilerHook:
    """Wraps each request and stage in ``torch.profiler.record_function`` while profiling."""

    __slots__ = ()

    @property
    def gate(self) -> tuple[Any, str] | None:
        """(object, attribute) the C hot path reads to skip this hook while no profiler runs:
        torch's own enabled flag, once torch is imported; None (always call) before that."""
        torch = sys.modules.get("torch")
        if torch is None:
            return (self, "_never")
        return (torch.autograd.profiler, "_is_profiler_enabled")

    #: stands for "no profiler" while torch is not imported (it cannot be profiling)
    _never = False

    def start(self, name: str, labels: Labels, request_id: str | None, kind: str) -> object:
        torch = sys.modules.get("torch")
        if torch is None or not torch.autograd.profiler._is_profiler_enabled:
            return None
        rf = torch.profiler.record_function(name)
        rf.__enter__()
        return rf

    def end(self, token: object, error: BaseException | None) -> None:
        if token is not None:
            token.__exit__(None, None, None)  # type: ignore[attr-defined]
