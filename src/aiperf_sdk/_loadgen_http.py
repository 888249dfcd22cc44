"""Targets of the load generator: an HTTP endpoint or an in-process Python callable.

The HTTP client is a small HTTP/1.1 client on asyncio streams with keep-alive connections:
it parses just what a load test needs (status, ``Content-Length``, ``Transfer-Encoding:
chunked``, server-sent events) and timestamps every chunk/event as it arrives, so TTFT and
inter-token latency are what a client sees. It stays lean so one process can sustain a high
open-loop rate (see ``benchmarks/bench_loadgen.py``).
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from time import perf_counter_ns
from typing import Any, Literal
from urllib.parse import urlsplit

from ._errors import PerfError
from ._loadgen_arrivals import LoadConfigError

StreamMode = Literal["auto", "none", "sse", "chunked"]


class TargetUnreachableError(PerfError, ConnectionError):
    """The target URL refused or timed out the preflight connection."""


class Outcome:
    """What one request produced: success, error text, and token arrival times (ns)."""

    __slots__ = ("error", "ok", "output", "tokens")

    def __init__(self, ok: bool, error: str | None = None,
                 tokens: list[int] | None = None, output: Any = None) -> None:
        self.ok = ok
        self.error = error
        #: ``perf_counter_ns()`` of each token (SSE event / chunk / yielded item); None: no stream
        self.tokens = tokens
        #: the callable target's return value (for functional/quality checks); None for HTTP
        self.output = output


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def close(self) -> None:
        self.writer.close()


class HttpTarget:
    """POST (or GET) JSON to a URL; reads JSON, chunked or SSE streams.

    Example::

        target = HttpTarget("http://127.0.0.1:8000/v1/completions", stream="sse")

    Args:
        url: ``http://host:port/path`` (https is not supported: measure behind TLS
            termination, or with a proxy).
        method: HTTP method.
        stream: ``"auto"`` (SSE when the reply is ``text/event-stream``, chunks when it is
            chunked, else one reply), ``"sse"``, ``"chunked"`` or ``"none"``.
        headers: extra request headers.
        max_connections: keep-alive connections at most; a request that finds them all busy
            waits for one, and that wait counts in its latency (it started at its intended
            time).

    Raises:
        LoadConfigError: the URL is not ``http://host[:port]/path``.
    """

    def __init__(
        self,
        url: str,
        *,
        method: str = "POST",
        stream: StreamMode = "auto",
        headers: dict[str, str] | None = None,
        max_connections: int = 512,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise LoadConfigError(
                f"target URL must look like http://host:port/path, got {url!r}"
                + (" (https is not supported)" if parts.scheme == "https" else "")
            )
        if stream not in ("auto", "none", "sse", "chunked"):
            raise LoadConfigError(f"stream must be auto, none, sse or chunked, got {stream!r}")
        if max_connections < 1:
            raise LoadConfigError(f"max_connections must be >= 1, got {max_connections}")
        self.url = url
        self.host = parts.hostname
        self.port = parts.port or 80
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.method = method.upper()
        self.stream: StreamMode = stream
        self.max_connections = max_connections
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._head_tail = (
            f" HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nUser-Agent: aiperf-sdk\r\n"
            f"Accept: */*\r\n{extra}"
        )
        self._idle: list[_Conn] = []
        self._open = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def preflight(self, timeout_s: float = 5.0) -> None:
        """Open (and keep) one connection, so a dead URL fails before the run starts.

        Raises:
            TargetUnreachableError: connection refused, unknown host or timeout.
        """
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port), timeout_s
            )
        except (OSError, asyncio.TimeoutError) as exc:
            why = "timed out" if isinstance(exc, asyncio.TimeoutError) else (
                exc.strerror or str(exc))
            raise TargetUnreachableError(
                f"cannot connect to {self.url}: {why}; is the server running?"
            ) from None
        self._open += 1
        self._idle.append(_Conn(reader, writer))

    async def _acquire(self) -> _Conn:
        while True:
            if self._idle:
                return self._idle.pop()
            if self._open < self.max_connections:
                self._open += 1
                try:
                    reader, writer = await asyncio.open_connection(self.host, self.port)
                except BaseException:
                    self._open -= 1
                    self._wake()
                    raise
                return _Conn(reader, writer)
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await fut
            except BaseException:
                if not fut.cancelled() and fut.done():
                    self._wake()  # pass the wake-up on
                raise

    def _wake(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    def _release(self, conn: _Conn, reuse: bool) -> None:
        if reuse:
            self._idle.append(conn)
        else:
            self._open -= 1
            conn.close()
        self._wake()

    def _request_bytes(self, payload: Any, path: str | None) -> bytes:
        if payload is None:
            body = b""
        elif isinstance(payload, (bytes, bytearray)):
            body = bytes(payload)
        else:
            body = json.dumps(payload).encode()
        head = f"{self.method} {path or self.path}{self._head_tail}"
        if body or self.method in ("POST", "PUT", "PATCH"):
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        return (head + "\r\n").encode("latin-1") + body

    async def send(self, payload: Any, path: str | None = None) -> Outcome:
        """Send one request; never raises for server or network errors (see ``Outcome``)."""
        try:
            conn = await self._acquire()
        except OSError as exc:
            return Outcome(False, f"connect: {exc.strerror or exc}")
        reuse = False
        try:
            conn.writer.write(self._request_bytes(payload, path))
            outcome, reuse = await self._read_response(conn.reader)
            return outcome
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            return Outcome(False, f"{type(exc).__name__}: {exc}"[:200])
        finally:
            self._release(conn, reuse)

    async def _read_response(self, reader: asyncio.StreamReader) -> tuple[Outcome, bool]:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status_parts = lines[0].split(" ", 2)
        if len(status_parts) < 2 or not status_parts[0].startswith("HTTP/"):
            raise ValueError(f"not an HTTP response: {lines[0][:60]!r}")
        status = int(status_parts[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
        keep = headers.get("connection", "").lower() != "close" and status_parts[0] != "HTTP/1.0"
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        ctype = headers.get("content-type", "")
        mode = self.stream
        if mode == "auto":
            mode = "sse" if "text/event-stream" in ctype else ("chunked" if chunked else "none")
        tokens: list[int] | None = None if mode == "none" else []
        sse = _SSECounter() if mode == "sse" else None
        if chunked:
            while True:
                size_line = await reader.readuntil(b"\r\n")
                size = int(size_line.split(b";", 1)[0], 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")  # trailer end (no trailers expected)
                    break
                data = await reader.readexactly(size + 2)
                now = perf_counter_ns()
                if tokens is not None:
                    if sse is not None:
                        tokens.extend([now] * sse.feed(data[:-2]))
                    else:
                        tokens.append(now)
        elif "content-length" in headers:
            n = int(headers["content-length"])
            if sse is not None and tokens is not None:
                left = n
                while left > 0:
                    data = await reader.read(min(left, 65536))
                    if not data:
                        raise asyncio.IncompleteReadError(b"", left)
                    left -= len(data)
                    tokens.extend([perf_counter_ns()] * sse.feed(data))
            elif n:
                await reader.readexactly(n)
        else:
            keep = False
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                if tokens is not None:
                    if sse is not None:
                        tokens.extend([perf_counter_ns()] * sse.feed(data))
                    else:
                        tokens.append(perf_counter_ns())
        if status >= 400:
            return Outcome(False, f"HTTP {status}", tokens), keep
        return Outcome(True, None, tokens), keep

    async def aclose(self) -> None:
        """Close idle connections."""
        for conn in self._idle:
            conn.close()
        self._open -= len(self._idle)
        self._idle.clear()


class _SSECounter:
    """Counts complete server-sent events with data (``data: [DONE]`` excluded)."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> int:
        buf = (self._buf + data).replace(b"\r\n", b"\n")
        *events, self._buf = buf.split(b"\n\n")
        n = 0
        for ev in events:
            for line in ev.split(b"\n"):
                if line.startswith(b"data:"):
                    if line[5:].strip() != b"[DONE]":
                        n += 1
                    break
        return n


class CallableTarget:
    """An in-process Python callable as the target: ``fn(payload)``.

    ``fn`` may be async or an async generator (run on the generator's event loop) or sync
    (run in a worker
    thread, so a blocking function cannot stall the schedule — though it still competes
    for the GIL, which the schedule-lag check will show). When it returns an iterator or
    async iterator, each item is one token: TTFT, ITL and TPOT are measured.

    Raises:
        LoadConfigError: ``fn`` is not callable.
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise LoadConfigError(f"the target must be callable, got {type(fn).__name__}")
        self.fn = fn
        call = getattr(fn, "__call__", None)  # noqa: B004 - objects with an async __call__
        #: called on the event loop (async function / async generator), else in a thread
        self._on_loop = any(
            check(f) for f in (fn, call) for check in
            (inspect.iscoroutinefunction, inspect.isasyncgenfunction)
        )
        self.url = f"python:{getattr(fn, '__qualname__', type(fn).__name__)}"

    async def preflight(self, timeout_s: float = 5.0) -> None:
        return None

    async def send(self, payload: Any, path: str | None = None) -> Outcome:
        try:
            if self._on_loop:
                result = self.fn(payload)
                if inspect.isawaitable(result):
                    result = await result
            else:
                result = await asyncio.to_thread(self.fn, payload)
            if hasattr(result, "__aiter__"):
                return await _drain_async(result)
            if isinstance(result, Iterator):
                return await asyncio.to_thread(_drain_sync, result)
            return Outcome(True, output=result)
        except Exception as exc:  # the target's failure is a measured error, not ours
            return Outcome(False, f"{type(exc).__name__}: {exc}"[:200])

    async def aclose(self) -> None:
        return None


async def _drain_async(it: AsyncIterator[Any]) -> Outcome:
    tokens: list[int] = []
    out: list[Any] = []
    async for item in it:
        tokens.append(perf_counter_ns())
        out.append(item)
    return Outcome(True, tokens=tokens, output=out)


def _drain_sync(it: Iterator[Any]) -> Outcome:
    tokens: list[int] = []
    out: list[Any] = []
    for item in it:
        tokens.append(perf_counter_ns())
        out.append(item)
    return Outcome(True, tokens=tokens, output=out)


Target = HttpTarget | CallableTarget
