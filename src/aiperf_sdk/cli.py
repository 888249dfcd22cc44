"""``aiperf-sdk`` command line: load, gate, capacity, report, demo.

Exit codes: 0 success; 1 the gate found a regression; 2 bad input (one line on stderr);
3 ``load`` finished but the run is invalid (the generator fell behind its schedule).

Example::

    aiperf-sdk load http://127.0.0.1:8000/v1/chat --rate 20 --duration-s 60 --slo e2e=500 \\
        --out result.json --plots plots/
    aiperf-sdk gate --baseline baseline.yaml result.json
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ._errors import PerfError

PROG = "aiperf-sdk"

EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, EXIT_INVALID_RUN = 0, 1, 2, 3


class CliError(PerfError):
    """Bad command-line input; printed as one line, exit status 2."""


def _fail(msg: str) -> int:
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    return EXIT_USAGE


# -- argument types --------------------------------------------------------------------------


def _positive(kind: type[float] | type[int]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not v > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return v

    return parse


def _non_negative(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return v


def _levels(text: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}"
                                         ) from None
    if not vals or any(v <= 0 for v in vals):
        raise argparse.ArgumentTypeError(f"expected positive numbers, got {text!r}")
    return vals


def _slo(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected METRIC=MS (e.g. e2e=500), got {text!r}")
    try:
        ms = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"threshold is not a number in {text!r}") from None
    return name.strip(), ms


def _spike(text: str) -> dict[str, float]:
    parts = text.split(":")
    try:
        at, seconds, factor = (float(x) for x in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected AT_S:SECONDS:FACTOR (e.g. 10:5:3), got {text!r}") from None
    return {"at_s": at, "seconds": seconds, "factor": factor}


def _step(text: str) -> dict[str, float]:
    try:
        at, rate = (float(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected AT_S:RATE (e.g. 30:80), got {text!r}"
                                         ) from None
    return {"at_s": at, "rate": rate}


def _header(text: str) -> tuple[str, str]:
    k, sep, v = text.partition(":")
    if not sep or not k.strip():
        raise argparse.ArgumentTypeError(f"expected 'Name: value', got {text!r}")
    return k.strip(), v.strip()


# -- parser ----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The ``aiperf-sdk`` argument parser."""
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Measure, gate and plan AI serving performance. Start with "
                    "`aiperf-sdk demo`; then `aiperf-sdk load URL --rate R` against your "
                    "service, `aiperf-sdk gate` in CI.",
        epilog="Exit status: 0 ok, 1 regression (gate), 2 bad input, 3 invalid run (load).",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    ld = sub.add_parser(
        "load", help="open-loop load test of an HTTP endpoint or a Python callable",
        description="Send requests at times fixed in advance (open loop) and measure latency "
                    "from those intended times, so a stalling server cannot hide its stall. "
                    "Writes a JSON result (gate/report/capacity read it).",
        epilog="examples:\n"
               "  aiperf-sdk load http://127.0.0.1:8000/v1/chat --rate 20 --duration-s 60\n"
               "  aiperf-sdk load http://127.0.0.1:8000/ --rate 50 --spike 20:10:3 "
               "--slo e2e=300\n"
               "  aiperf-sdk load myapp.py:handle --concurrency 8 --requests 500\n"
               "  aiperf-sdk load http://127.0.0.1:8000/ --sweep-rate 10,20,40 "
               "--duration-s 20 --out sweep.json\n"
               "  aiperf-sdk load http://127.0.0.1:8000/ --replay traffic.jsonl "
               "--time-scale 0.5",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ld.add_argument("target", help="http://host:port/path, or module:function / "
                                   "file.py:function (sync, async or async generator)")
    mode = ld.add_argument_group("mode (choose one)")
    mode.add_argument("--rate", type=_positive(float), help="open loop, mean requests/s")
    mode.add_argument("--concurrency", type=_positive(int), help="closed loop, N users")
    mode.add_argument("--replay", metavar="TRACE.jsonl",
                      help="replay a recorded trace (TrafficRecorder JSONL)")
    mode.add_argument("--sweep-rate", type=_levels, metavar="R1,R2,...",
                      help="open-loop run per rate")
    mode.add_argument("--sweep-concurrency", type=_levels, metavar="N1,N2,...",
                      help="closed-loop run per concurrency")
    arr = ld.add_argument_group("arrival process (open loop)")
    arr.add_argument("--arrival", choices=["poisson", "constant", "gamma"], default="poisson")
    arr.add_argument("--burstiness", type=_positive(float), default=1.0,
                     help="gamma shape: 1 = Poisson, <1 burstier, >1 smoother")
    arr.add_argument("--spike", type=_spike, action="append", default=[],
                     metavar="AT_S:SECONDS:FACTOR", help="multiply the rate for a while")
    arr.add_argument("--step", type=_step, action="append", default=[], metavar="AT_S:RATE",
                     help="change the base rate from AT_S on")
    arr.add_argument("--time-scale", type=_positive(float), default=1.0,
                     help="replay: multiply recorded gaps (0.5 = twice as fast)")
    ln = ld.add_argument_group("length")
    ln.add_argument("--duration-s", type=_positive(float), help="measured phase length")
    ln.add_argument("--requests", type=_positive(int), help="measured requests")
    ln.add_argument("--warmup-s", type=_non_negative, default=2.0,
                    help="warm-up whose samples are discarded (default 2; 0 makes the result "
                         "ungateable)")
    ln.add_argument("--seed", type=int, default=0)
    ln.add_argument("--timeout-s", type=_positive(float), default=30.0,
                    help="per-request limit; later is an error charged the full time")
    pl = ld.add_argument_group("payloads and HTTP")
    pl.add_argument("--dataset", metavar="FILE.jsonl", help="one JSON request body per line")
    pl.add_argument("--stream", choices=["auto", "sse", "chunked", "none"], default="auto")
    pl.add_argument("--method", default="POST")
    pl.add_argument("--header", type=_header, action="append", default=[],
                    metavar="'NAME: VALUE'")
    pl.add_argument("--max-connections", type=_positive(int), default=512)
    sl = ld.add_argument_group("SLO and validity")
    sl.add_argument("--slo", type=_slo, action="append", default=[], metavar="METRIC=MS",
                    help="per-request threshold for goodput (e2e, ttft, tpot); repeatable")
    sl.add_argument("--slo-window-s", type=_positive(float), default=5.0)
    sl.add_argument("--slo-percentile", type=_positive(float), default=95.0)
    sl.add_argument("--max-lag-ms", type=_positive(float), default=10.0,
                    help="schedule-lag p99 above which the run is marked invalid")
    out = ld.add_argument_group("output")
    out.add_argument("--out", default="aiperf-result.json", help="result JSON path")
    out.add_argument("--hdr-log", metavar="FILE.hlog", help="also write an HDR interval log")
    out.add_argument("--plots", metavar="DIR", help="write PNG plots there")
    out.add_argument("--extra-metrics", metavar="FILE.json",
                     help="JSON object of named metrics (accuracy, gpu_util...) for the gate")
    out.add_argument("--no-progress", action="store_true")

    gt = sub.add_parser(
        "gate", help="compare a result with a baseline; exit 1 on regression",
        description="Checks every metric of the baseline (tolerances per metric) and its "
                    "functional checks; warns when the environment fingerprints differ; "
                    "refuses invalid runs and runs without warm-up.",
        epilog="example:\n  aiperf-sdk gate --baseline baseline.yaml result.json\n"
               "  aiperf-sdk gate --baseline baseline.yaml result.json --update-baseline",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    gt.add_argument("result", help="result JSON from `aiperf-sdk load --out`")
    gt.add_argument("--baseline", required=True, help="baseline YAML")
    gt.add_argument("--update-baseline", action="store_true",
                    help="write the result's values into the baseline (keeps tolerances)")

    cp = sub.add_parser(
        "capacity", help="instances needed for a target load, with the arithmetic",
        description="Per-instance capacity = highest sweep throughput still meeting the SLO "
                    "(not the peak); instances = ceil(target × peak factor ÷ capacity) + "
                    "redundancy. Token-based with --users/--tokens-per-reply/--think-time-s.",
        epilog="examples:\n"
               "  aiperf-sdk capacity sweep.json --slo-ms 500 --target-rps 800 "
               "--peak-factor 1.5\n"
               "  aiperf-sdk capacity --users 2000 --tokens-per-reply 300 --think-time-s 30 "
               "--instance-tokens-per-s 2500",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cp.add_argument("sweep", nargs="?", help="sweep result JSON (`load --sweep-rate ...`)")
    cp.add_argument("--slo-ms", type=_positive(float))
    cp.add_argument("--metric", default="e2e.p99_ms", help="SLO metric (default e2e.p99_ms)")
    cp.add_argument("--target-rps", type=_positive(float))
    cp.add_argument("--per-instance-rps", type=_positive(float))
    cp.add_argument("--peak-factor", type=_positive(float), default=1.0)
    cp.add_argument("--redundancy", type=int, default=1, help="spare instances (N+1: 1)")
    cp.add_argument("--users", type=_positive(int))
    cp.add_argument("--tokens-per-reply", type=_positive(float))
    cp.add_argument("--think-time-s", type=_positive(float))
    cp.add_argument("--instance-tokens-per-s", type=_positive(float))

    rp = sub.add_parser(
        "report", help="render a result or ledger snapshot: budget, slowest requests, plots",
        epilog="example:\n  aiperf-sdk report aiperf-demo/service_ledger.json "
               "--budget budget.yaml --plots plots/",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rp.add_argument("file", help="result JSON or ledger snapshot JSON")
    rp.add_argument("--budget", help="budget YAML to check the ledger against")
    rp.add_argument("--plots", metavar="DIR", help="write PNG plots there")
    rp.add_argument("--slowest", type=int, default=10, help="slowest requests to list")

    dm = sub.add_parser(
        "demo", help="run a simulated LLM service under load and gate it (no downloads)",
        description="Starts an in-process LLM-like service (stages, dynamic batcher, "
                    "streaming), loads it with a spike, prints the budget table, the slowest "
                    "requests, goodput and the gate verdict, and writes plots.",
    )
    dm.add_argument("--seconds", type=_positive(float), default=30.0,
                    help="measured phase (default 30)")
    dm.add_argument("--rate", type=_positive(float), default=24.0, help="base requests/s")
    dm.add_argument("--out-dir", default="aiperf-demo", help="where files and plots go")
    dm.add_argument("--no-plots", action="store_true")
    dm.add_argument("--strict", action="store_true", help="exit 1 when the gate fails")
    return p


# -- commands --------------------------------------------------------------------------------


def _load_callable(spec: str) -> Callable[..., Any]:
    mod_name, sep, attr = spec.rpartition(":")
    if not sep or not mod_name or not attr:
        raise CliError(f"target must be http://host:port/path or module:function, got {spec!r}")
    if mod_name.endswith(".py"):
        path = Path(mod_name)
        if not path.is_file():
            raise CliError(f"target file not found: {path}")
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        if module_spec is None or module_spec.loader is None:
            raise CliError(f"cannot import {path}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[path.stem] = module
        module_spec.loader.exec_module(module)
    else:
        sys.path.insert(0, str(Path.cwd()))
        try:
            module = importlib.import_module(mod_name)
        except ImportError as exc:
            raise CliError(f"cannot import {mod_name!r}: {exc}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise CliError(f"{mod_name} has no callable {attr!r}")
    return fn  # type: ignore[no-any-return]


class _ProgressBar:
    """rich progress bar on stderr (silent without rich or a terminal)."""

    def __init__(self, enabled: bool, label: str) -> None:
        self._bar: Any = None
        self._task: Any = None
        if not enabled or not sys.stderr.isatty():
            return
        try:
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
        except ImportError:
            return
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(),
                             TextColumn("{task.completed:.0f}/{task.total:.0f} s"),
                             TimeRemainingColumn(), transient=True)
        self._task = self._bar.add_task(label, total=1)
        self._bar.start()

    def label(self, text: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, description=text, completed=0)

    def __call__(self, done: float, total: float) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=min(done, total or done),
                             total=total or max(done, 1))

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def _cmd_load(a: argparse.Namespace) -> int:
    from ._loadgen import load_dataset, run_load_async, sweep_async
    from ._loadgen_arrivals import ArrivalProcess, load_trace
    from ._loadgen_http import CallableTarget, HttpTarget
    from ._report import render, result_headline, write_plots

    modes = [m for m in ("rate", "concurrency", "replay", "sweep_rate", "sweep_concurrency")
             if getattr(a, m) is not None]
    if len(modes) != 1:
        raise CliError("choose exactly one of --rate, --concurrency, --replay, --sweep-rate, "
                       "--sweep-concurrency")
    if a.replay is None and (a.duration_s is None) == (a.requests is None):
        raise CliError("give exactly one of --duration-s and --requests")
    target: HttpTarget | CallableTarget
    if "://" in a.target:
        target = HttpTarget(a.target, method=a.method, stream=a.stream,
                            headers=dict(a.header), max_connections=a.max_connections)
    else:
        target = CallableTarget(_load_callable(a.target))
    extra: dict[str, float] = {}
    if a.extra_metrics:
        try:
            raw = json.loads(Path(a.extra_metrics).read_text(encoding="utf-8"))
        except OSError as exc:
            raise CliError(f"cannot read {a.extra_metrics}: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise CliError(f"{a.extra_metrics}: not JSON ({exc.msg})") from None
        if not isinstance(raw, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in raw.values()
        ):
            raise CliError(f"{a.extra_metrics}: expected a JSON object of name: number")
        extra = {str(k): float(v) for k, v in raw.items()}
    options: dict[str, Any] = {
        "duration_s": a.duration_s, "requests": a.requests, "warmup_s": a.warmup_s,
        "seed": a.seed, "slo_ms": dict(a.slo), "slo_window_s": a.slo_window_s,
        "slo_percentile": a.slo_percentile, "max_lag_ms": a.max_lag_ms,
        "timeout_s": a.timeout_s, "hdr_log": a.hdr_log,
        "payloads": load_dataset(a.dataset) if a.dataset else None,
    }
    arrival = None
    if a.rate is not None or a.sweep_rate is not None:
        arrival = ArrivalProcess(kind=a.arrival, rate=a.rate or a.sweep_rate[0],
                                 burstiness=a.burstiness, spikes=a.spike, steps=a.step)
    bar = _ProgressBar(not a.no_progress, "load")
    options["progress"] = bar
    try:
        if a.sweep_rate is not None or a.sweep_concurrency is not None:
            options.pop("hdr_log")
            levels = a.sweep_rate or a.sweep_concurrency
            smode = "rate" if a.sweep_rate is not None else "concurrency"
            sweep = asyncio.run(sweep_async(
                target, mode=smode, levels=levels, arrival=arrival,
                progress_level=lambda i, lvl: bar.label(f"{smode} {lvl:g}"), **options))
            for pnt in sweep.points:
                pnt.extra.update(extra)
            Path(a.out).write_text(sweep.model_dump_json(indent=1), encoding="utf-8")
            bar.stop()
            print(render(sweep))
            print(f"\nwrote {a.out}")
            return EXIT_OK if sweep.valid else EXIT_INVALID_RUN
        if a.replay is not None:
            options.pop("duration_s")
            options.pop("requests")
            result = asyncio.run(run_load_async(target, replay=load_trace(a.replay),
                                                time_scale=a.time_scale, **options))
        elif arrival is not None:
            result = asyncio.run(run_load_async(target, arrival=arrival, **options))
        else:
            result = asyncio.run(run_load_async(target, concurrency=a.concurrency, **options))
    finally:
        bar.stop()
    result.extra.update(extra)
    Path(a.out).write_text(result.model_dump_json(indent=1), encoding="utf-8")
    print(result_headline(result))
    written = [a.out] + ([a.hdr_log] if a.hdr_log else [])
    if a.plots:
        written += [str(x) for x in write_plots(result, a.plots)]
    print("\nwrote " + ", ".join(written))
    return EXIT_OK if result.valid else EXIT_INVALID_RUN


def _cmd_gate(a: argparse.Namespace) -> int:
    from ._gate import check, update_baseline

    if a.update_baseline:
        new = update_baseline(a.result, a.baseline)
        print(f"wrote baseline {a.baseline} ({len(new.metrics)} metrics)")
        for name, tol in new.metrics.items():
            print(f"  {name}: {tol.model_dump(exclude_none=True)}")
        return EXIT_OK
    report = check(a.result, a.baseline)
    print(report)
    return EXIT_OK if report.ok else EXIT_REGRESSION


def _cmd_capacity(a: argparse.Namespace) -> int:
    from ._capacity import plan
    from ._loadgen_models import ResultFileError, SweepResult, load_result

    sweep = None
    if a.sweep is not None:
        doc = load_result(a.sweep)
        if not isinstance(doc, SweepResult):
            raise ResultFileError(f"{a.sweep}: capacity needs a sweep result "
                                  f"(`aiperf-sdk load --sweep-rate 10,20,40 ...`)")
        sweep = doc
    p = plan(sweep=sweep, slo_ms=a.slo_ms, slo_metric=a.metric, per_instance_rps=a.per_instance_rps,
             target_rps=a.target_rps, peak_factor=a.peak_factor, redundancy=a.redundancy,
             users=a.users, tokens_per_reply=a.tokens_per_reply, think_time_s=a.think_time_s,
             per_instance_tokens_per_s=a.instance_tokens_per_s)
    print(p)
    return EXIT_OK


def _cmd_report(a: argparse.Namespace) -> int:
    from ._budget import Budget
    from ._loadgen_models import SweepResult
    from ._report import read_report_input, render, write_plots

    doc = read_report_input(a.file)
    budget = Budget.from_yaml(a.budget) if a.budget else None
    print(render(doc, budget=budget, slowest=a.slowest))
    if a.plots:
        if isinstance(doc, SweepResult):
            paths = [x for i, pt in enumerate(doc.points)
                     for x in write_plots(pt, a.plots, prefix=f"level{i}_")]
        else:
            paths = write_plots(doc, a.plots)
        print("\nwrote " + ", ".join(str(x) for x in paths))
    return EXIT_OK


def _cmd_demo(a: argparse.Namespace) -> int:
    from ._demo import run_demo

    return run_demo(seconds=a.seconds, rate=a.rate, out_dir=a.out_dir, plots=not a.no_plots,
                    strict=a.strict)


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "load": _cmd_load, "gate": _cmd_gate, "capacity": _cmd_capacity, "report": _cmd_report,
    "demo": _cmd_demo,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``aiperf-sdk`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return _COMMANDS[args.command](args)
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = ".".join(str(x) for x in e["loc"])
        return _fail(f"{exc.title}: {loc}: {e['msg']}" if loc else f"{exc.title}: {e['msg']}")
    except PerfError as exc:
        return _fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    except OSError as exc:
        return _fail(f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""))
    except KeyboardInterrupt:
        return _fail("interrupted")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
