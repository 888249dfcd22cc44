"""HDR histogram storage in numpy, bit-compatible with the ``hdrhistogram`` package.

The counts array uses exactly HdrHistogram's index layout (lowest trackable value 1, so the
unit is one nanosecond), so encoding to the standard compressed base64 form is a copy of the
counts into an ``hdrh`` histogram. What differs from ``hdrh.HdrHistogram``:

* values are folded in bulk (``np.unique`` over a whole batch) instead of one Python call each;
* the counts array grows lazily up to the largest value seen, so a series whose values stay
  under 1 ms costs ~90 KiB at 3 significant figures instead of the ~270 KiB a full 1 h range
  allocates up front (8 KiB per doubling of the largest value, plus 16 KiB for the first);
* values above the highest trackable value are clamped to it and counted, never dropped;
* the exact sum, min and max of the raw values are kept beside the counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import cast

import numpy as np
import numpy.typing as npt
from hdrh.histogram import HdrHistogram

IntArray = npt.NDArray[np.int64]

#: the ledger records nanoseconds and reports milliseconds
NS_PER_MS = 1_000_000


class HdrLayout:
    """Index arithmetic of an HdrHistogram with lowest trackable value 1."""

    __slots__ = (
        "bucket_count",
        "counts_len",
        "half_count",
        "half_mag",
        "highest",
        "significant_figures",
        "sub_bucket_count",
        "sub_bucket_mask",
    )

    def __init__(self, highest: int, significant_figures: int) -> None:
        if not 1 <= significant_figures <= 5:
            raise ValueError(f"significant_figures must be 1..5, got {significant_figures!r}")
        if highest < 2:
            raise ValueError(f"highest trackable value must be >= 2, got {highest!r}")
        self.highest = int(highest)
        self.significant_figures = significant_figures
        largest_single_unit = 2 * 10**significant_figures
        sub_mag = math.ceil(math.log2(largest_single_unit))
        self.half_mag = sub_mag - 1 if sub_mag > 1 else 0
        self.sub_bucket_count = 1 << (self.half_mag + 1)
        self.half_count = self.sub_bucket_count // 2
        self.sub_bucket_mask = self.sub_bucket_count - 1
        smallest_untrackable = self.sub_bucket_count
        buckets = 1
        while smallest_untrackable <= self.highest:
            smallest_untrackable <<= 1
            buckets += 1
        self.bucket_count = buckets
        self.counts_len = (buckets + 1) * self.half_count

    def indices(self, values: IntArray) -> IntArray:
        """Counts-array index of each value (values already clamped to [0, highest])."""
        # bit_length(v | mask) via frexp: exact for integers below 2**53.
        bit_length = np.frexp((values | self.sub_bucket_mask).astype(np.float64))[1].astype(
            np.int64
        )
        bucket = bit_length - (self.half_mag + 1)
        sub_bucket = values >> bucket
        return ((bucket + 1) << self.half_mag) + sub_bucket - self.half_count

    def index_of(self, value: int) -> int:
        bucket = (value | self.sub_bucket_mask).bit_length() - (self.half_mag + 1)
        return ((bucket + 1) << self.half_mag) + (value >> bucket) - self.half_count

    def lowest_value(self, index: IntArray) -> IntArray:
        bucket = (index >> self.half_mag) - 1
        sub_bucket = (index & (self.half_count - 1)) + self.half_count
        first = bucket < 0
        sub_bucket = np.where(first, sub_bucket - self.half_count, sub_bucket)
        bucket = np.where(first, 0, bucket)
        return sub_bucket << bucket

    def highest_value(self, index: IntArray) -> IntArray:
        """Highest value equivalent to the bucket at ``index`` (what hdrh reports)."""
        low = self.lowest_value(index)
        bucket = (low | self.sub_bucket_mask)
        bit_length = np.frexp(bucket.astype(np.float64))[1].astype(np.int64)
        bucket_index = bit_length - (self.half_mag + 1)
        return low + (np.int64(1) << bucket_index) - 1


class Histogram:
    """One series: counts in HDR layout, grown on demand, plus exact sum/min/max."""

    __slots__ = ("clamped", "counts", "layout", "max_ns", "min_ns", "sum_ns", "total")

    def __init__(self, layout: HdrLayout) -> None:
        self.layout = layout
        self.counts: IntArray = np.zeros(0, dtype=np.int64)
        self.total = 0
        self.sum_ns = 0
        self.min_ns = 0
        self.max_ns = 0
        self.clamped = 0

    def _grow(self, max_index: int) -> None:
        if max_index < len(self.counts):
            return
        # round up to a whole bucket so growth happens at most once per doubling
        half = self.layout.half_count
        new_len = min(self.layout.counts_len, ((max_index // half) + 2) * half)
        grown = np.zeros(new_len, dtype=np.int64)
        grown[: len(self.counts)] = self.counts
        self.counts = grown

    def add_values(self, values: IntArray) -> tuple[IntArray, IntArray]:
        """Fold raw nanosecond values (non-negative int64) into the histogram.

        Returns the (unique counts-array indices, counts) that were added.
        """
        if values.size == 0:
            return values, values
        highest = self.layout.highest
        vmax = int(values.max())
        vmin = min(int(values.min()), highest)
        clamped = 0
        if vmax > highest:
            clamped = int(np.count_nonzero(values > highest))
            values = np.minimum(values, highest)
        idx = self.layout.indices(values)
        # dense bincount beats np.unique (a sort) by ~5x for a few thousand values
        dense = np.bincount(idx)
        self._grow(len(dense) - 1)
        self.counts[: len(dense)] += dense
        uniq = np.flatnonzero(dense)
        cnt = dense[uniq]
        if min(vmax, highest) * values.size < 2**63:
            sum_ns = int(values.sum())
        else:  # an int64 sum could wrap: add exactly in Python ints
            sum_ns = sum(values.tolist())
        self._account(int(values.size), sum_ns, vmin, min(vmax, highest), clamped)
        return uniq, cnt

    def _account(self, total: int, sum_ns: int, vmin: int, vmax: int, clamped: int) -> None:
        """Add a folded chunk's statistics (over clamped values)."""
        self.min_ns = vmin if self.total == 0 else min(self.min_ns, vmin)
        self.max_ns = max(self.max_ns, vmax)
        self.sum_ns += sum_ns
        self.total += total
        self.clamped += clamped

    def add_raw(self, raw: bytes, c_fold: Callable[..., object]) -> tuple[IntArray, IntArray]:
        """:meth:`add_values` for a buffer of int64 values, folded by the C extension's
        ``fold`` (no numpy temporaries); same result."""
        lay = self.layout
        while True:
            r = c_fold(raw, self.counts, lay.highest, lay.half_mag, lay.sub_bucket_mask,
                       lay.half_count)
            if not isinstance(r, int):
                break
            self._grow(r)  # the counts array is too short for this chunk: grow, fold again
        if r is None:  # the chunk's sum would overflow int64 in C
            return self.add_values(np.frombuffer(raw, dtype=np.int64))
        uniq, cnt, total, sum_ns, vmin, vmax, clamped = cast(
            "tuple[bytes, bytes, int, int, int, int, int]", r
        )
        self._account(total, sum_ns, vmin, vmax, clamped)
        return np.frombuffer(uniq, dtype=np.int64), np.frombuffer(cnt, dtype=np.int64)

    def add_histogram(self, other: Histogram) -> None:
        if other.layout.counts_len != self.layout.counts_len:
            raise ValueError("histograms have different layouts (significant figures or range)")
        if other.total == 0:
            return
        n = len(other.counts)
        self._grow(n - 1)
        self.counts[:n] += other.counts
        self.min_ns = other.min_ns if self.total == 0 else min(self.min_ns, other.min_ns)
        self.max_ns = max(self.max_ns, other.max_ns)
        self.sum_ns += other.sum_ns
        self.total += other.total
        self.clamped += other.clamped

    def add_sparse(self, indices: IntArray, counts: IntArray) -> None:
        """Add counts at sorted, unique counts-array indices (min/max from the buckets)."""
        if indices.size == 0:
            return
        self._grow(int(indices[-1]))
        self.counts[indices] += counts
        low = int(self.layout.lowest_value(indices[:1])[0])
        high = int(self.layout.highest_value(indices[-1:])[0])
        self.min_ns = low if self.total == 0 else min(self.min_ns, low)
        self.max_ns = max(self.max_ns, high)
        self.sum_ns += int(((self.layout.lowest_value(indices) + self.layout.highest_value(
            indices)) // 2 * counts).sum())
        self.total += int(counts.sum())

    def copy(self) -> Histogram:
        h = Histogram(self.layout)
        h.add_histogram(self)
        return h

    def percentiles_ns(self, percentiles: list[float]) -> list[int]:
        """HdrHistogram's ``get_value_at_percentile`` for each percentile (0..100)."""
        if self.total == 0:
            return [0 for _ in percentiles]
        cumulative = np.cumsum(self.counts)
        out: list[int] = []
        for p in percentiles:
            target = max(int(min(p, 100.0) * self.total / 100 + 0.5), 1)
            index = int(np.searchsorted(cumulative, target, side="left"))
            if p == 0:
                value = int(self.layout.lowest_value(np.array([index], dtype=np.int64))[0])
            else:
                value = int(self.layout.highest_value(np.array([index], dtype=np.int64))[0])
            # the exact max is known: never report a percentile above it
            out.append(min(value, self.max_ns))
        return out

    def count_at_or_below(self, value_ns: int) -> int:
        """Recorded values whose bucket lies entirely at or below ``value_ns``."""
        if self.total == 0 or value_ns < 0:
            return 0
        if value_ns >= self.max_ns:
            return self.total
        index = self.layout.index_of(min(value_ns, self.layout.highest))
        upto = min(index + 1, len(self.counts))
        # the bucket containing value_ns holds values both sides of it; count it as
        # within only when its whole range is (conservative: never flatters the SLO).
        hi = int(self.layout.highest_value(np.array([index], dtype=np.int64))[0])
        if hi > value_ns:
            upto = min(index, len(self.counts))
        return int(self.counts[:upto].sum())

    # -- standard encoding -------------------------------------------------------------

    def to_hdrh(self) -> HdrHistogram:
        h = HdrHistogram(1, self.layout.highest, self.layout.significant_figures)
        if self.total:
            view = np.ctypeslib.as_array(h.counts)
            view[: len(self.counts)] = self.counts
            nonzero = np.flatnonzero(self.counts)
            h.set_internal_tacking_values(int(nonzero[0]), int(nonzero[-1]), self.total)
        return h

    def encode(self) -> str:
        """Standard HdrHistogram V2 compressed, base64 form (``HISTFAAA...``)."""
        encoded: bytes = self.to_hdrh().encode()
        return encoded.decode("ascii")

    @classmethod
    def decode(cls, layout: HdrLayout, encoded: str) -> Histogram:
        """Decode a standard encoding into this layout (which must match its parameters)."""
        h = HdrHistogram.decode(encoded.encode("ascii"))
        if h.significant_figures != layout.significant_figures or h.lowest_trackable_value != 1:
            raise ValueError(
                "encoded histogram has significant_figures="
                f"{h.significant_figures}, lowest={h.lowest_trackable_value}; this ledger uses "
                f"significant_figures={layout.significant_figures}, lowest=1"
            )
        counts = np.ctypeslib.as_array(h.counts).astype(np.int64)
        out = cls(layout)
        nonzero = np.flatnonzero(counts)
        if nonzero.size == 0:
            return out
        if int(nonzero[-1]) >= layout.counts_len:
            raise ValueError(
                "encoded histogram holds values above this ledger's highest trackable value"
            )
        out._grow(int(nonzero[-1]))
        out.counts[: int(nonzero[-1]) + 1] = counts[: int(nonzero[-1]) + 1]
        out.total = int(counts.sum())
        idx = nonzero.astype(np.int64)
        out.min_ns = int(layout.lowest_value(idx[:1])[0])
        out.max_ns = int(layout.highest_value(idx[-1:])[0])
        mids = (layout.lowest_value(idx) + layout.highest_value(idx)) // 2
        out.sum_ns = int((mids * counts[nonzero]).sum())
        return out
