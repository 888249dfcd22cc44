"""Traffic recording: a JSONL trace of arrivals that ``aiperf-sdk load --replay`` replays."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import IO, Any

from ._errors import PerfError

Redactor = Callable[[Any], Any]


class RecorderError(PerfError, ValueError):
    """The recorder was misused: bad arguments, or writing after ``close()``."""


class TrafficRecorder:
    """Append one JSON line per request: arrival time, route, sizes and length features.

    Request bodies are **not** written unless ``include_bodies=True``; then each body goes
    through ``redact`` first (return the redacted body, or None to drop it). Lines are
    buffered and flushed every ``flush_every`` records and on :meth:`close`, so ``record``
    costs a ``json.dumps`` and a buffered write under a lock. Thread-safe.

    Line format (what :func:`aiperf_sdk.load_trace` reads)::

        {"t": 1718000000.123, "route": "/v1/chat", "method": "POST", "req_bytes": 812,
         "resp_bytes": 4096, "status": 200, "features": {"prompt_chars": 640}}

    Example (what the FastAPI middleware does per request)::

        recorder = perf.TrafficRecorder("traffic.jsonl")
        recorder.record(route="/v1/chat", method="POST", req_bytes=len(body),
                        features={"prompt_chars": len(prompt)})
        recorder.close()
        # later: aiperf-sdk load http://127.0.0.1:8000 --replay traffic.jsonl

    Args:
        target: a path (appended to) or a text file object.
        include_bodies: keep request bodies (JSON-serialisable) in the trace.
        redact: applied to each body before it is written (only with ``include_bodies``).
        flush_every: records between flushes.

    Raises:
        RecorderError: ``redact`` without ``include_bodies``, or ``flush_every < 1``.
        OSError: the path cannot be opened.
    """

    def __init__(
        self,
        target: str | os.PathLike[str] | IO[str],
        *,
        include_bodies: bool = False,
        redact: Redactor | None = None,
        flush_every: int = 64,
    ) -> None:
        if redact is not None and not include_bodies:
            raise RecorderError("redact= only applies with include_bodies=True")
        if flush_every < 1:
            raise RecorderError(f"flush_every must be >= 1, got {flush_every}")
        if isinstance(target, (str, os.PathLike)):
            self._file: IO[str] = open(target, "a", encoding="utf-8")  # noqa: SIM115
            self._owns = True
        else:
            self._file = target
            self._owns = False
        self.include_bodies = include_bodies
        self._redact = redact
        self._flush_every = flush_every
        self._pending = 0
        self._lock = threading.Lock()
        self._closed = False
        #: records written so far
        self.records = 0

    def record(
        self,
        *,
        route: str,
        method: str = "POST",
        req_bytes: int | None = None,
        resp_bytes: int | None = None,
        status: int | None = None,
        features: Mapping[str, Any] | None = None,
        body: Any = None,
        arrival_unix_s: float | None = None,
    ) -> None:
        """Write one arrival. ``body`` is ignored unless the recorder keeps bodies.

        Raises:
            RecorderError: the recorder is closed.
        """
        line: dict[str, Any] = {
            "t": time.time() if arrival_unix_s is None else arrival_unix_s,
            "route": route,
            "method": method,
        }
        if req_bytes is not None:
            line["req_bytes"] = req_bytes
        if resp_bytes is not None:
            line["resp_bytes"] = resp_bytes
        if status is not None:
            line["status"] = status
        if features:
            line["features"] = dict(features)
        if self.include_bodies and body is not None:
            kept = self._redact(body) if self._redact is not None else body
            if kept is not None:
                line["body"] = kept
        text = json.dumps(line, default=str) + "\n"
        with self._lock:
            if self._closed:
                raise RecorderError("this TrafficRecorder is closed")
            self._file.write(text)
            self.records += 1
            self._pending += 1
            if self._pending >= self._flush_every:
                self._file.flush()
                self._pending = 0

    def flush(self) -> None:
        """Write buffered lines to the file."""
        with self._lock:
            if not self._closed:
                self._file.flush()
                self._pending = 0

    def close(self) -> None:
        """Flush, and close the file if the recorder opened it. Safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._file.flush()
            if self._owns:
                self._file.close()

    def __enter__(self) -> TrafficRecorder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
