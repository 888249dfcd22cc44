"""Read-side models of the ledger: summaries, request traces, snapshots."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class SummaryRow(BaseModel):
    """Latency statistics of one series (a stage and one label set), in milliseconds."""

    model_config = _FROZEN

    stage: str  #: stage name, e.g. ``"prefill"`` or the reserved ``"e2e"``
    labels: dict[str, str] = Field(default_factory=dict)  #: the series' label set
    count: int  #: samples recorded
    mean_ms: float  #: exact mean of the recorded values
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float  #: exact maximum (clamped values count as the ledger's highest)
    clamped: int = 0  #: values above the ledger's range, recorded as its highest value


class Summary(BaseModel):
    """Every series of a ledger; ``str(summary)`` is a table a person can read."""

    model_config = _FROZEN

    rows: list[SummaryRow]

    def row(self, stage: str, **labels: str) -> SummaryRow:
        """The row of ``stage`` with exactly ``labels``; raises ``KeyError`` if absent."""
        for r in self.rows:
            if r.stage == stage and r.labels == labels:
                return r
        raise KeyError(f"no series {stage!r} with labels {labels!r} in this summary")

    def __str__(self) -> str:
        return format_table(
            ["stage", "labels", "count", "mean", "p50", "p90", "p95", "p99", "p99.9", "max"],
            [
                [
                    r.stage,
                    ",".join(f"{k}={v}" for k, v in sorted(r.labels.items())) or "-",
                    str(r.count),
                    *(
                        f"{v:.3f}"
                        for v in (
                            r.mean_ms, r.p50_ms, r.p90_ms, r.p95_ms, r.p99_ms, r.p999_ms, r.max_ms
                        )
                    ),
                ]
                for r in self.rows
            ],
            title="latency per stage (ms)",
        )


class RequestTrace(BaseModel):
    """One request's breakdown, kept for the slowest requests so they can be pulled by ID."""

    model_config = _FROZEN

    id: str  #: correlation ID
    total_ms: float  #: end-to-end duration of the request
    stages: dict[str, float]  #: milliseconds spent in each stage (summed over repeats)
    attrs: dict[str, str] = Field(default_factory=dict)  #: attributes given to ``request()``
    outcome: str = "ok"  #: ``"ok"`` or ``"error"``
    start_unix_s: float = 0.0  #: wall-clock start of the request


class SeriesSnapshot(BaseModel):
    model_config = _FROZEN

    stage: str
    labels: dict[str, str]
    histogram: str  #: standard HdrHistogram V2 compressed base64 encoding, in nanoseconds
    count: int
    sum_ns: int
    min_ns: int
    max_ns: int
    clamped: int = 0
    first_start_unix_ns: int = 0
    last_end_unix_ns: int = 0


class WindowSnapshot(BaseModel):
    model_config = _FROZEN

    stage: str
    window_index: int  #: unix time // window length
    indices: list[int]  #: HDR counts-array indices (sparse)
    counts: list[int]
    errors: int = 0


class LedgerSnapshot(BaseModel):
    """JSON-serialisable, exactly mergeable state of a ledger (see ``Ledger.merge``)."""

    model_config = _FROZEN

    version: int = 1
    significant_figures: int
    highest_ms: int
    window_s: float
    series: list[SeriesSnapshot]
    windows: list[WindowSnapshot] = Field(default_factory=list)
    slowest: dict[str, list[RequestTrace]] = Field(default_factory=dict)


def format_table(header: list[str], rows: list[list[str]], title: str = "") -> str:
    """Plain-text table with right-aligned numeric columns."""
    widths = [len(h) for h in header]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def fmt(cells: list[str]) -> str:
        parts = []
        for i, c in enumerate(cells):
            parts.append(c.ljust(widths[i]) if i < 2 else c.rjust(widths[i]))
        return "  ".join(parts).rstrip()

    lines = [title] if title else []
    lines.append(fmt(header))
    lines.append("  ".join("-" * w for w in widths))
    lines.extend(fmt(r) for r in rows)
    return "\n".join(lines)
