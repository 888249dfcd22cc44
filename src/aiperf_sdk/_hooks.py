"""Extension point for sinks (trace spans, profiler ranges) around stages and requests.

Stages and requests check ``HOOKS`` (a list, empty by default) on every call; with nothing
registered that is one truthiness test. Sinks register through ``perf.configure``-style
helpers in their own modules; a hook that raises is disabled and logged, never propagated
into the service.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

_log = logging.getLogger("aiperf_sdk")


class StageHook(Protocol):
    """Receives stage and request boundaries. ``start`` returns a token given to ``end``.

    A hook class may also define ``end_at(token, error, start_ns, end_ns)``: it is then called
    instead of ``end`` with the stage's (or request's) own two clock reads
    (``perf_counter_ns``), so what it exports has exactly the duration the ledger recorded.
    """

    def start(self, name: str, labels: tuple[tuple[str, str], ...], request_id: str | None,
              kind: str) -> object: ...

    def end(self, token: object, error: BaseException | None) -> None: ...


class SampleHook(StageHook, Protocol):
    """Optionally also receives durations that have no start/end pair: stream ``ttft``/
    ``itl``/``tpot``/stream totals and generator stages (``sample`` is looked up with
    ``getattr``, so plain :class:`StageHook` objects need not define it)."""

    def sample(self, name: str, labels: tuple[tuple[str, str], ...], request_id: str | None,
               duration_ns: int, error: BaseException | None) -> None: ...


#: registered hooks. One list object for the life of the process, mutated in place by
#: add_hook/remove_hook (the C hot path holds a reference to it and checks its length);
#: iterations below work on a snapshot, so a hook added or removed meanwhile is harmless.
HOOKS: list[StageHook] = []


def add_hook(hook: StageHook) -> None:
    if hook not in HOOKS:
        HOOKS.append(hook)


def remove_hook(hook: StageHook) -> None:
    HOOKS[:] = [h for h in HOOKS if h is not hook]


def hooks_start(name: str, labels: tuple[tuple[str, str], ...], request_id: str | None,
                kind: str) -> list[tuple[StageHook, object]]:
    tokens = []
    for hook in tuple(HOOKS):
        try:
            tokens.append((hook, hook.start(name, labels, request_id, kind)))
        except Exception:
            _log.exception("aiperf_sdk hook %r failed in start(); disabling it", hook)
            remove_hook(hook)
    return tokens


#: hook class -> its ``end_at`` function (None: it has none)
_END_AT: dict[type, Any] = {}
_UNKNOWN: Any = object()


def hooks_end(tokens: list[tuple[StageHook, object]], error: BaseException | None,
              start_ns: int = 0, end_ns: int = 0) -> None:
    """End the hooks' tokens; ``start_ns``/``end_ns`` (when given) are the measured bounds."""
    for hook, token in reversed(tokens):
        try:
            cls = type(hook)
            end_at = _END_AT.get(cls, _UNKNOWN) if end_ns else None
            if end_at is _UNKNOWN:  # looked up once per hook class, not per stage
                end_at = _END_AT[cls] = getattr(cls, "end_at", None)
            if end_at is not None:
                end_at(hook, token, error, start_ns, end_ns)
            else:
                hook.end(token, error)
        except Exception:
            _log.exception("aiperf_sdk hook %r failed in end(); disabling it", hook)
            remove_hook(hook)


def hooks_sample(name: str, labels: tuple[tuple[str, str], ...], request_id: str | None,
                 duration_ns: int, error: BaseException | None = None) -> None:
    for hook in tuple(HOOKS):
        sample = getattr(hook, "sample", None)
        if sample is None:
            continue
        try:
            sample(name, labels, request_id, duration_ns, error)
        except Exception:
            _log.exception("aiperf_sdk hook %r failed in sample(); disabling it", hook)
            remove_hook(hook)


def hooks_span(name: str, labels: tuple[tuple[str, str], ...], request_id: str | None,
               start_ns: int, end_ns: int, error: BaseException | None = None) -> None:
    """A finished interval (``perf_counter_ns`` clock) that had no start/end hook calls:
    a decorated generator's lifetime, a ``stream()``. Hooks opt in with a ``span`` method."""
    for hook in tuple(HOOKS):
        span = getattr(hook, "span", None)
        if span is None:
            continue
        try:
            span(name, labels, request_id, start_ns, end_ns, error)
        except Exception:
            _log.exception("aiperf_sdk hook %r failed in span(); disabling it", hook)
            remove_hook(hook)
