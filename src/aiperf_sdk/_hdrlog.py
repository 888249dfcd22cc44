"""HdrHistogram interval logs: write a ledger's stages per interval, merge logs exactly.

The format is the standard one written by Java's ``HistogramLogWriter`` and read by
``HistogramLogProcessor`` / ``hdrh.log.HistogramLogReader``::

    #[Histogram log format version 1.3]
    #[StartTime: 1700000000.000 (seconds since epoch), 2023-11-14 22:13:20]
    #[BaseTime: 1700000000.000 (seconds since epoch)]
    "StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"
    Tag=prefill,0.000,5.001,12.345,HISTFAAAA...

Values are nanoseconds; ``Interval_Max`` is in milliseconds (max value unit ratio 1e6).
The header lines are written here: ``hdrh``'s ``HistogramLogWriter.output_start_time`` is
broken (it calls a method ``datetime`` does not have).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import IO, Final

import numpy as np
from hdrh.log import HistogramLogReader

from ._errors import LedgerMismatchError
from ._hdr import HdrLayout, Histogram, IntArray
from ._ledger import Ledger, default_ledger
from ._models import LedgerSnapshot, SeriesSnapshot

LOG_FORMAT_VERSION: Final = "1.3"
_TAG_UNSAFE = re.compile(r"[,\s]")


def _tag(stage: str) -> str:
    return _TAG_UNSAFE.sub("_", stage)


class HdrLogWriter:
    """Writes each stage's new samples since the previous call as one tagged interval.

    Each ``write_interval()`` appends, per stage with new samples, the histogram of the
    stage's successful samples (all label sets merged, like ``Ledger.percentile``) recorded
    since the previous call. Call it on a timer (e.g. every 5 s) or at the end of a run.

    Example::

        with perf.HdrLogWriter("run.hlog") as log:
            for _ in range(60):
                time.sleep(1.0)
                log.write_interval()

    Args:
        target: a path (created/truncated) or a text file object.
        ledger: ledger to read; default: the default ledger at each write.
    """

    def __init__(self, target: str | os.PathLike[str] | IO[str],
                 ledger: Ledger | None = None) -> None:
        if isinstance(target, (str, os.PathLike)):
            self._file: IO[str] = open(target, "w", encoding="utf-8")  # noqa: SIM115
            self._owns = True
        else:
            self._file = target
            self._owns = False
        self._ledger = ledger
        self._last: dict[str, IntArray] = {}
        self.start_unix_s = time.time()
        self._interval_start = self.start_unix_s
        stamp = datetime.fromtimestamp(self.start_unix_s, tz=timezone.utc)
        self._file.write(f"#[Histogram log format version {LOG_FORMAT_VERSION}]\n")
        self._file.write(
            f"#[StartTime: {self.start_unix_s:.3f} (seconds since epoch), "
            f"{stamp.isoformat(' ', 'seconds')}]\n"
        )
        self._file.write(f"#[BaseTime: {self.start_unix_s:.3f} (seconds since epoch)]\n")
        self._file.write(
            '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"\n'
        )
        self._file.flush()

    def write_interval(self) -> int:
        """Append one interval line per stage with new samples; returns lines written."""
        ledger = self._ledger if self._ledger is not None else default_ledger()
        now = time.time()
        start = self._interval_start - self.start_unix_s
        length = now - self._interval_start
        self._interval_start = now
        layout = HdrLayout(ledger.highest_ms * 1_000_000, ledger.significant_figures)
        lines = 0
        for stage in ledger.stages():
            current = Histogram.decode(layout, ledger.encode(stage)).counts
            previous = self._last.get(stage)
            delta = current.copy()
            if previous is not None:
                delta[: len(previous)] -= previous
            self._last[stage] = current
            nonzero = np.flatnonzero(delta)
            if nonzero.size == 0:
                continue
            interval = Histogram(layout)
            interval.add_sparse(nonzero.astype(np.int64), delta[nonzero])
            self._file.write(
                f"Tag={_tag(stage)},{start:.3f},{length:.3f},{interval.max_ns / 1e6:.3f},"
                f"{interval.encode()}\n"
            )
            lines += 1
        self._file.flush()
        return lines

    def close(self) -> None:
        """Flush, and close the file if this writer opened it."""
        self._file.flush()
        if self._owns:
            self._file.close()

    def __enter__(self) -> HdrLogWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def merge_hdr_logs(
    paths: Iterable[str | os.PathLike[str]], ledger: Ledger | None = None
) -> Ledger:
    """Add every interval of every log (tag = stage) into one ledger, exactly.

    Logs from several processes or hosts merge into the percentiles of all their samples
    together (HDR counts add; nothing is averaged). Untagged intervals go to stage
    ``"untagged"``. The mean (and so ``Ledger.mean``) is reconstructed from bucket midpoints.

    Example::

        merged = perf.merge_hdr_logs(["host1.hlog", "host2.hlog"])
        merged.percentile("prefill", 99.0)

    Args:
        ledger: ledger to add into; default: a new ``Ledger()``.

    Raises:
        LedgerMismatchError: a log's histograms do not fit the ledger's precision or range
            (nothing from that log is added).
        FileNotFoundError: a path does not exist.
    """
    target = ledger if ledger is not None else Ledger()
    layout = HdrLayout(target.highest_ms * 1_000_000, target.significant_figures)
    for path in paths:
        reader = HistogramLogReader(str(Path(path)), None)
        series: list[SeriesSnapshot] = []
        try:
            while True:
                h = reader.get_next_interval_histogram()
                if h is None:
                    break
                encoded = h.encode().decode("ascii")
                try:
                    ours = Histogram.decode(layout, encoded)
                except ValueError as exc:
                    raise LedgerMismatchError(f"{path}: {exc}") from None
                series.append(
                    SeriesSnapshot(
                        stage=h.get_tag() or "untagged",
                        labels={},
                        histogram=encoded,
                        count=ours.total,
                        sum_ns=ours.sum_ns,
                        min_ns=ours.min_ns,
                        max_ns=ours.max_ns,
                    )
                )
        finally:
            reader.close()
        target.merge(
            LedgerSnapshot(
                significant_figures=target.significant_figures,
                highest_ms=target.highest_ms,
                window_s=target.window_s,
                series=series,
            )
        )
    return target
