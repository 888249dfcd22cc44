"""Reports: text of a result or ledger snapshot (budget, slowest requests) and PNG plots.

matplotlib is imported only when a plot is drawn (extra ``aiperf-sdk[cli]``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ._budget import Budget
from ._errors import PerfError
from ._ledger import Ledger
from ._loadgen_models import LoadResult, ResultFileError, SweepResult, read_json, result_from_json
from ._models import LedgerSnapshot, RequestTrace, format_table

#: percentiles on the distribution plot (x axis: 1 / (1 - q), the HdrHistogram convention)
_DIST_Q = [0.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99, 99.999]


class PlotUnavailableError(PerfError, ImportError):
    """matplotlib is not installed."""


def ledger_of(snapshot: LedgerSnapshot) -> Ledger:
    """A ledger holding exactly ``snapshot`` (same precision, range and windows)."""
    led = Ledger(snapshot.significant_figures, snapshot.highest_ms, window_s=snapshot.window_s,
                 windows_kept=max(300, len({w.window_index for w in snapshot.windows}) + 1))
    led.merge(snapshot)
    return led


def read_report_input(path: str | os.PathLike[str]) -> LoadResult | SweepResult | LedgerSnapshot:
    """A load/sweep result or a ledger snapshot (``Ledger.snapshot()`` as JSON).

    Raises:
        ResultFileError: missing file, not JSON, or neither kind of document.
    """
    p = Path(path)
    data = read_json(p)
    if isinstance(data, dict) and data.get("kind") in ("load", "sweep"):
        return result_from_json(data, p)  # parsed once, not read a second time
    try:
        return LedgerSnapshot.model_validate(data)
    except ValidationError:
        raise ResultFileError(
            f"{p}: neither a load result (`aiperf-sdk load --out`) nor a ledger snapshot "
            f"(`json.dump(ledger.snapshot().model_dump(), f)`)"
        ) from None


def slowest_table(traces: list[RequestTrace], title: str = "slowest requests (ms)") -> str:
    """The slowest requests with their stage breakdown, one row each."""
    stages: list[str] = []
    for t in traces:
        for s in t.stages:
            if s not in stages:
                stages.append(s)
    return format_table(
        ["request id", "outcome", "total", *stages],
        [[t.id, t.outcome, f"{t.total_ms:.2f}",
          *(f"{t.stages[s]:.2f}" if s in t.stages else "-" for s in stages)]
         for t in traces],
        title=title,
    )


def result_headline(r: LoadResult) -> str:
    """A few lines: validity, throughput, errors, goodput, e2e percentiles, schedule lag."""
    lines = [f"target {r.target} ({r.mode} loop"
             + (f", concurrency {r.concurrency}" if r.concurrency else "")
             + f"), measured {r.duration_s:.1f} s after {r.warmup_s:g} s warm-up "
             f"({r.warmup_requests} requests discarded)"]
    if not r.valid:
        lines.append("RUN INVALID: " + "; ".join(r.invalid_reasons))
    lines.append(f"requests {r.scheduled}: ok {r.completed}, errors {r.errors} "
                 f"({r.error_rate:.2%}); offered {r.offered_rps:.2f} req/s, throughput "
                 f"{r.throughput_rps:.2f} req/s"
                 + (f", goodput {r.goodput_rps:.2f} req/s" if r.goodput_rps is not None else ""))
    if r.error_kinds:
        lines.append("errors: " + ", ".join(f"{k} ×{v}" for k, v in r.error_kinds.items()))
    rows = [[name, str(m.count), *(f"{v:.3f}" for v in (m.mean_ms, m.p50_ms, m.p90_ms, m.p95_ms,
                                                         m.p99_ms, m.p999_ms, m.max_ms))]
            for name, m in r.metrics.items()]
    lines.append(format_table(["metric", "", "count", "mean", "p50", "p90", "p95", "p99",
                               "p99.9", "max"], [[row[0], "", *row[1:]] for row in rows],
                              title="latency (ms), from intended send time"))
    if r.slo is not None:
        s = r.slo
        wc = "-" if s.window_compliance is None else f"{s.window_compliance:.1%}"
        th = ", ".join(f"{k} <= {v:g} ms" for k, v in s.thresholds_ms.items())
        lines.append(f"SLO {th}: goodput {s.goodput_rps:.2f} req/s ({s.good} good); windows "
                     f"({s.window_s:g} s, p{s.percentile:g} within SLO) compliant {wc} "
                     f"({s.compliant_windows}/{s.windows})")
    if r.output_tokens:
        lines.append(f"output tokens {r.output_tokens} ({r.output_tokens_per_s:.1f}/s)")
    return "\n".join(lines)


def render(doc: LoadResult | SweepResult | LedgerSnapshot, *, budget: Budget | None = None,
           slowest: int = 10) -> str:
    """The text report of a result or snapshot (budget table when ``budget`` is given)."""
    parts: list[str] = []
    if isinstance(doc, SweepResult):
        parts.append(format_table(
            ["level", "valid", "throughput", "errors", "p50", "p99", "lag p99"],
            [[f"{lvl:g}", "yes" if p.valid else "NO", f"{p.throughput_rps:.2f}",
              f"{p.error_rate:.2%}",
              *(f"{p.metrics['e2e'].p50_ms:.2f}" if "e2e" in p.metrics else "-",
                f"{p.metrics['e2e'].p99_ms:.2f}" if "e2e" in p.metrics else "-"),
              f"{p.metrics['schedule_lag'].p99_ms:.2f}" if "schedule_lag" in p.metrics
              else "-"]
             for lvl, p in zip(doc.levels, doc.points, strict=True)],
            title=f"{doc.mode} sweep (req/s, ms)"))
        return "\n".join(parts)
    if isinstance(doc, LoadResult):
        parts.append(result_headline(doc))
        snap = doc.ledger
    else:
        snap = doc
    led = ledger_of(snap)
    if not isinstance(doc, LoadResult):
        parts.append(str(led.summary()))
    if budget is not None:
        parts.append(str(led.check(budget)))
    traces = led.slowest("e2e", slowest)
    if traces:
        parts.append(slowest_table(traces))
    return "\n\n".join(parts)


def _plt() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailableError(
            "plots need matplotlib: pip install 'aiperf-sdk[cli]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_percentiles(led: Ledger, path: str | os.PathLike[str],
                     metrics: tuple[str, ...] = ("e2e", "ttft", "tpot"),
                     title: str = "latency by percentile") -> Path:
    """Percentile distribution plot (x: percentile on a 1/(1-q) log axis, y: ms) as PNG.

    Raises:
        PlotUnavailableError: matplotlib is not installed.
    """
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    xs = [1.0 / (1.0 - q / 100.0) for q in _DIST_Q]
    for m in metrics:
        if led.count(m):
            ax.plot(xs, [led.percentile(m, q) for q in _DIST_Q], marker="o", markersize=3,
                    label=m)
    ax.set_xscale("log")
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{q:g}" for q in _DIST_Q], rotation=45, fontsize=7)
    ax.set_xlabel("percentile")
    ax.set_ylabel("latency (ms)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def plot_timeline(result: LoadResult, path: str | os.PathLike[str]) -> Path:
    """Latency over time (p50/p95/p99/p99.9 per second) with the arrival rate under it.

    Raises:
        PlotUnavailableError: matplotlib is not installed.
    """
    plt = _plt()
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True,
                                  gridspec_kw={"height_ratios": [3, 1]})
    t = [p.t_s for p in result.timeline]
    for field, label in (("p50_ms", "p50"), ("p95_ms", "p95"), ("p99_ms", "p99"),
                         ("p999_ms", "p99.9")):
        values = [getattr(p, field) for p in result.timeline]
        ax.plot([x + 0.5 for x in t], [float("nan") if v is None else v for v in values],
                label=label)
    ax.set_ylabel("e2e latency (ms)")
    ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left")
    ax.set_title(f"latency over time — {result.target}")
    ax2.bar(t, [p.arrivals for p in result.timeline], width=0.9, align="edge",
            label="arrivals/s", alpha=0.6)
    ax2.plot([x + 0.5 for x in t], [p.completed for p in result.timeline], color="black",
             label="completed/s")
    ax2.set_ylabel("req/s")
    ax2.set_xlabel("seconds since the measured phase started")
    ax2.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def write_plots(doc: LoadResult | LedgerSnapshot, out_dir: str | os.PathLike[str],
                prefix: str = "") -> list[Path]:
    """Write the plots of a result (distribution + timeline) or a snapshot (distribution).

    Raises:
        PlotUnavailableError: matplotlib is not installed.
    """
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    snap = doc.ledger if isinstance(doc, LoadResult) else doc
    led = ledger_of(snap)
    metrics = ("e2e", "ttft", "tpot") if isinstance(doc, LoadResult) else tuple(led.stages())
    paths = [plot_percentiles(led, d / f"{prefix}latency_percentiles.png", metrics)]
    if isinstance(doc, LoadResult) and doc.timeline:
        paths.append(plot_timeline(doc, d / f"{prefix}latency_over_time.png"))
    return paths
