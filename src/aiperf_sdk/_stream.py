"""``stream``: time a token stream — TTFT, inter-token latency, time per output token."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from time import perf_counter_ns
from typing import Generic, TypeVar

from . import _hooks
from ._ledger import (
    CANCELLED_LABEL,
    ERROR_LABEL,
    Labels,
    Ledger,
    _default,
    check_ledger,
    make_labels,
)
from ._request import Request, _current

T = TypeVar("T")


class stream(Generic[T]):
    """Wrap a token iterator (sync or async) and record its latency profile.

    Records, under the stream's labels:

    * ``name``: wall time from the stream's creation to its end (also when closed early);
    * ``ttft``: time to first token, from the start of the enclosing ``request()`` (from the
      stream's creation when there is none);
    * ``itl``: each gap between consecutive tokens;
    * ``tpot``: per stream with ≥ 2 tokens, (last token - first token) / (tokens - 1).

    Example::

        async for tok in perf.stream("decode", engine.generate(prompt), model="chat"):
            await send(tok)

    Raises:
        TypeError: ``source`` is neither iterable nor async iterable, or ``ledger`` is not
            a Ledger.
    """

    __slots__ = (
        "_count",
        "_done",
        "_first",
        "_labels",
        "_last",
        "_ledger",
        "_name",
        "_req",
        "_source",
        "_start",
        "_ttft_from",
    )

    def __init__(
        self,
        name: str,
        source: Iterable[T] | AsyncIterable[T],
        *,
        ledger: Ledger | None = None,
        **labels: object,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"stream name must be a non-empty str, got {name!r}")
        if not isinstance(source, (Iterable, AsyncIterable)):
            raise TypeError(
                f"stream() needs an iterable or async iterable, got {type(source).__name__}"
            )
        self._name = name
        self._source = source
        self._ledger = check_ledger(ledger, "stream()")
        self._labels: Labels = make_labels(labels)
        self._req: Request | None = _current.get()
        self._start = perf_counter_ns()
        self._ttft_from = self._req.start_ns if self._req is not None else self._start
        self._first = 0
        self._last = 0
        self._count = 0
        self._done = False

    def _token(self) -> None:
        now = perf_counter_ns()
        if self._count == 0:
            self._first = now
            self._rec("ttft", self._labels, now - self._ttft_from, now)
        else:
            self._rec("itl", self._labels, now - self._last, now)
        self._last = now
        self._count += 1

    def _rec(self, name: str, labels: Labels, duration: int, end: int) -> None:
        ledger = self._ledger
        if ledger is None and self._req is not None:
            ledger = self._req.ledger
        req = self._req
        if req is not None:
            stages = req.stages
            stages[name] += duration
        (ledger if ledger is not None else _default[0])._append((name, labels), duration, end)
        if _hooks.HOOKS:
            _hooks.hooks_sample(name, labels, None if req is None else req.id, duration)

    def _finish(self, exc: BaseException | None) -> None:
        if self._done:
            return
        self._done = True
        end = perf_counter_ns()
        labels = self._labels
        if exc is not None:
            pair = ERROR_LABEL if isinstance(exc, Exception) else CANCELLED_LABEL
            labels = tuple(sorted((*labels, pair)))
        self._rec(self._name, labels, end - self._start, end)
        if self._count >= 2:
            tpot = (self._last - self._first) // (self._count - 1)
            self._rec("tpot", self._labels, tpot, end)
        if _hooks.HOOKS:
            req = self._req
            _hooks.hooks_span(self._name, self._labels, None if req is None else req.id,
                              self._start, end, exc)

    @property
    def tokens(self) -> int:
        """Tokens seen so far."""
        return self._count

    # -- sync ---------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[T]:
        if not isinstance(self._source, Iterable):
            raise TypeError("this stream wraps an async iterable: use `async for`")
        return self._iterate(iter(self._source))

    def _iterate(self, it: Iterator[T]) -> Iterator[T]:
        try:
            for item in it:
                self._token()
                yield item
        except BaseException as exc:
            if isinstance(exc, GeneratorExit):
                self._finish(None)
            else:
                self._finish(exc)
            raise
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()
            self._finish(None)

    # -- async --------------------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[T]:
        if not isinstance(self._source, AsyncIterable):
            raise TypeError("this stream wraps a sync iterable: use `for`")
        return self._aiterate(aiter(self._source))

    async def _aiterate(self, it: AsyncIterator[T]) -> AsyncIterator[T]:
        try:
            async for item in it:
                self._token()
                yield item
        except BaseException as exc:
            if isinstance(exc, GeneratorExit):
                self._finish(None)
            else:
                self._finish(exc)
            raise
        finally:
            aclose = getattr(it, "aclose", None)
            if aclose is not None:
                await aclose()
            self._finish(None)

