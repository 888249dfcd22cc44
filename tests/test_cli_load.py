"""`aiperf-sdk` CLI: help, load/report end to end against a real local server, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_loadgen_servers import TestServer, free_port, serve

import aiperf_sdk as perf
from aiperf_sdk.cli import main


@pytest.fixture
def server() -> Iterator[TestServer]:
    yield from serve()


def test_help_and_no_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["load", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--rate" in out and "examples:" in out
    assert main([]) == 2


def test_python_dash_m_works() -> None:
    proc = subprocess.run([sys.executable, "-m", "aiperf_sdk", "--help"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0 and "demo" in proc.stdout


def test_load_then_report_with_plots(server: TestServer, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    plots = tmp_path / "plots"
    code = main(["load", server.url("/sse"), "--rate", "30", "--duration-s", "1",
                 "--warmup-s", "0.2", "--slo", "e2e=2000", "--slo", "ttft=1000",
                 "--out", str(out), "--hdr-log", str(tmp_path / "r.hlog"),
                 "--plots", str(plots), "--max-lag-ms", "50", "--no-progress"])
    text = capsys.readouterr().out
    assert code == 0, text
    r = perf.load_result(out)
    assert isinstance(r, perf.LoadResult) and r.completed > 0
    assert "goodput" in text and "ttft" in text
    pngs = sorted(p.name for p in plots.iterdir())
    assert pngs == ["latency_over_time.png", "latency_percentiles.png"]
    assert all((plots / p).read_bytes()[:4] == b"\x89PNG" for p in pngs)
    assert main(["report", str(out)]) == 0
    assert "from intended send time" in capsys.readouterr().out


def test_report_of_a_ledger_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    led = perf.Ledger()
    for i in range(5):
        with perf.request(id=f"req-{i}", ledger=led), perf.stage("prefill"):
            pass
    snap = tmp_path / "snap.json"
    snap.write_text(led.snapshot().model_dump_json())
    budget = tmp_path / "b.yaml"
    budget.write_text("stages:\n  prefill: {p99_ms: 1000}\n")
    assert main(["report", str(snap), "--budget", str(budget), "--plots",
                 str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out
    assert "latency budget (ms): PASS" in out and "req-" in out and "prefill" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["load", "http://127.0.0.1:{port}/", "--rate", "5", "--duration-s", "1"],
         "cannot connect"),
        (["load", "ftp://x/", "--rate", "5", "--duration-s", "1"], "http://host:port/path"),
        (["load", "http://127.0.0.1:1/", "--rate", "5"], "--duration-s and --requests"),
        (["load", "http://127.0.0.1:1/", "--rate", "5", "--concurrency", "2",
          "--duration-s", "1"], "exactly one of --rate"),
        (["load", "nomodule_xyz:fn", "--rate", "5", "--duration-s", "1"], "cannot import"),
        (["load", "{tmp}/missing.py:fn", "--rate", "5", "--duration-s", "1"],
         "target file not found"),
        (["load", "{url}", "--rate", "5", "--duration-s", "1", "--dataset",
          "{tmp}/none.jsonl"], "cannot read dataset"),
        (["load", "{url}", "--replay", "{tmp}/bad.jsonl"], "bad.jsonl:1"),
        (["report", "{tmp}/none.json"], "cannot read"),
        (["report", "{tmp}/bad.jsonl"], "not JSON"),
        (["report", "{tmp}/other.json"], "neither a load result"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], message: str, tmp_path: Path, server: TestServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    (tmp_path / "other.json").write_text(json.dumps({"hello": 1}))
    subs = {"port": str(free_port()), "tmp": str(tmp_path), "url": server.url("/json")}
    assert main([a.format(**subs) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("aiperf-sdk: error:") and err.count("\n") == 1, err
    assert message in err


def test_bad_argument_values_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["load", "http://x/", "--rate", "-3"], ["load", "http://x/", "--spike", "1:2"],
                 ["load", "http://x/", "--slo", "e2e"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_callable_target_from_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mod = tmp_path / "svc_under_test.py"
    mod.write_text("import asyncio\n\nasync def handle(p):\n    await asyncio.sleep(0.001)\n"
                   "    return {'ok': 1}\n")
    out = tmp_path / "r.json"
    assert main(["load", f"{mod}:handle", "--concurrency", "2", "--requests", "20",
                 "--warmup-s", "0.1", "--out", str(out), "--no-progress"]) == 0
    r = perf.load_result(out)
    assert isinstance(r, perf.LoadResult) and r.completed == 20 and r.mode == "closed"
