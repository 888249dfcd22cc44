"""Triton trace parser on a REAL trace file and on malformed variants of it.

``data/trace_http_tritonserver_2.51.0.json`` was written by the tritonserver 2.51.0 bundled in
nvidia-pytriton 0.7.0 (``--trace-config triton,file=... --trace-config level=TIMESTAMPS
--trace-config rate=1 --trace-config triton,log-frequency=1``) for one KServe v2 HTTP request
(``"id": "req-1"``) to examples/triton_model_repository/scale. test_triton_server.py produces
fresh ones from a running server in the Triton environment (integrations/triton/run_tests.sh).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from aiperf_sdk_triton import (
    TritonIntegrationError,
    TritonTrace,
    TritonTraceError,
    parse_triton_trace,
    read_triton_trace,
    record_triton_traces,
    trace_files,
)

import aiperf_sdk as perf

REAL = Path(__file__).parent / "data" / "trace_http_tritonserver_2.51.0.json"


def _records() -> list[dict[str, Any]]:
    return list(json.loads(REAL.read_text()))


def _set_ns(records: list[dict[str, Any]], name: str, ns: object) -> None:
    for r in records:
        for s in r.get("timestamps", []):
            if s["name"] == name:
                s["ns"] = ns


def test_real_trace_stages_follow_tritons_timestamps() -> None:
    [t] = read_triton_trace(REAL)
    assert (t.trace_id, t.model, t.model_version, t.request_id, t.parent_id) == (
        1, "scale", 1, "req-1", None)
    assert t.protocol == "http"
    ts, st = t.timestamps, t.stages
    assert st["queue"] == ts["COMPUTE_START"] - ts["QUEUE_START"]
    assert st["infer"] == ts["COMPUTE_OUTPUT_START"] - ts["COMPUTE_INPUT_END"]
    assert st["e2e"] == ts["HTTP_SEND_END"] - ts["HTTP_RECV_START"]
    # the compute parts tile compute; the handler holds queue + compute; e2e holds it all
    assert st["compute_input"] + st["infer"] + st["compute_output"] == st["compute"]
    assert st["queue"] + st["compute"] <= st["handler"] <= st["e2e"]
    assert st["network"] == st["recv"] + st["send"] <= st["e2e"] - st["handler"]


def test_response_sent_before_request_end_is_valid() -> None:
    # Triton sends the response as soon as it is complete, and releases the request after:
    # HTTP_SEND_START before REQUEST_END happens on a real server under load
    recs = _records()
    [t0] = parse_triton_trace(json.dumps(recs))
    _set_ns(recs, "REQUEST_END", t0.timestamps["HTTP_SEND_END"] + 10)
    [t] = parse_triton_trace(json.dumps(recs))
    assert t.stages["handler"] > t0.stages["handler"]
    assert t.stages["e2e"] == t0.stages["e2e"]


def test_record_into_ledger_keyed_by_triton_request_id() -> None:
    ledger = perf.Ledger()
    traces = read_triton_trace(REAL)
    assert record_triton_traces(traces, ledger) == 1
    [rt] = ledger.slowest("e2e")
    assert rt.id == "req-1"
    assert rt.attrs == {"triton_trace_id": "1", "model_version": "1"}
    st = traces[0].stages
    assert rt.stages["queue"] == st["queue"] / 1e6
    # e2e is Triton's own (the scope adds only the recording's own microseconds)
    assert st["e2e"] / 1e6 <= rt.total_ms < st["e2e"] / 1e6 + 1.0
    assert ledger.count("queue", model="scale", protocol="http") == 1
    assert ledger.count("e2e", model="scale", protocol="http") == 1
    # a budget checked against Triton's own queue time: passes above it, fails below it
    queue_ms = st["queue"] / 1e6
    loose = perf.Budget.model_validate({"stages": {"queue": {"p99_ms": queue_ms * 1.5}}})
    tight = perf.Budget.model_validate({"stages": {"queue": {"p99_ms": queue_ms / 1.5}}})
    assert ledger.check(loose).ok
    assert not ledger.check(tight).ok


def test_numbered_files_from_log_frequency_are_joined(tmp_path: Path) -> None:
    recs = _records()
    base = tmp_path / "trace.json"
    # Triton with log-frequency writes trace.json.0, .1, ...; here one trace split over two
    (tmp_path / "trace.json.0").write_text(json.dumps(recs[:5]))
    (tmp_path / "trace.json.1").write_text(json.dumps(recs[5:]))
    (tmp_path / "trace.json.x").write_text("not a trace")  # not Triton's name: ignored
    assert [p.name for p in trace_files(base)] == ["trace.json.0", "trace.json.1"]
    [t] = read_triton_trace(base)
    assert t == read_triton_trace(REAL)[0]


def test_older_layout_one_record_per_trace_parses_the_same() -> None:
    # older Triton releases wrote each trace as one record holding all its timestamps
    recs = _records()
    merged: dict[str, Any] = {"timestamps": []}
    for r in recs:
        merged["timestamps"].extend(r.pop("timestamps", []))
        merged.update(r)
    [t] = parse_triton_trace(json.dumps([merged]))
    assert t == read_triton_trace(REAL)[0]


def test_grpc_e2e_starts_after_the_idle_wait() -> None:
    recs = _records()
    for r in recs:
        for s in r.get("timestamps", []):
            s["name"] = {"HTTP_RECV_START": "GRPC_WAITREAD_START",
                         "HTTP_RECV_END": "GRPC_WAITREAD_END",
                         "HTTP_SEND_START": "GRPC_SEND_START",
                         "HTTP_SEND_END": "GRPC_SEND_END"}.get(s["name"], s["name"])
    [t] = parse_triton_trace(json.dumps(recs))
    ts = t.timestamps
    assert t.protocol == "grpc"
    assert t.stages["e2e"] == ts["GRPC_SEND_END"] - ts["GRPC_WAITREAD_END"]
    assert "recv" not in t.stages and t.stages["network"] == t.stages["send"]


def test_in_process_trace_has_handler_as_e2e_and_children_are_skipped() -> None:
    recs = [r for r in _records()
            if not any(s["name"].startswith("HTTP") for s in r.get("timestamps", []))]
    child = [dict(r, id=2) for r in recs]
    for r in child:
        if "model_name" in r:
            r["parent_id"] = 1
    [top, sub] = parse_triton_trace(json.dumps(recs + child))
    assert top.protocol == "none" and top.stages["e2e"] == top.stages["handler"]
    assert sub.parent_id == 1
    ledger = perf.Ledger()
    assert record_triton_traces([top, sub], ledger) == 1
    assert record_triton_traces([sub], ledger, include_children=True) == 1
    assert ledger.count("queue", model="scale", protocol="none") == 2


def test_invalid_request_id_is_replaced() -> None:
    recs = _records()
    for r in recs:
        if "model_name" in r:
            r["request_id"] = "bad id\nwith newline"
    ledger = perf.Ledger()
    record_triton_traces(parse_triton_trace(json.dumps(recs)), ledger)
    [rt] = ledger.slowest("e2e")
    assert re.fullmatch(r"[0-9a-f]{32}", rt.id)


def test_unescaped_control_character_in_request_id_as_triton_writes_it() -> None:
    # tritonserver 2.51 writes the client's request ID into the file without escaping it
    # (seen with a tab, test_triton_server.py); the file is still read, the ID replaced
    text = REAL.read_text().replace('"request_id":"req-1"', '"request_id":"bad\tid"')
    assert "\t" in text
    [t] = parse_triton_trace(text)
    assert t.request_id == "bad\tid"
    ledger = perf.Ledger()
    record_triton_traces([t], ledger)
    assert re.fullmatch(r"[0-9a-f]{32}", ledger.slowest("e2e")[0].id)


def _broken_cases() -> list[tuple[str, str]]:
    cases: list[tuple[str, str]] = [
        ("[{\"id\": 1, \"timestamps\": [", "not valid JSON"),
        (json.dumps({"id": 1}), "JSON array"),
        (json.dumps([[1, 2]]), "must be an object"),
        (json.dumps([{"timestamps": []}]), "'id' must be an integer"),
        (json.dumps([{"id": "1", "model_name": "m"}]), "'id' must be an integer"),
        (json.dumps([{"id": 1, "model_name": ""}]), "model_name"),
        (json.dumps([{"id": 1, "model_name": "m", "request_id": 5}]), "request_id"),
        (json.dumps([{"id": 1, "timestamps": {"name": "x"}}]), "timestamps must be an array"),
        (json.dumps([{"id": 1, "timestamps": [{"ns": 5}]}]), "a timestamp must be"),
        (json.dumps([{"id": 1, "timestamps": [{"name": "QUEUE_START", "ns": 1}]}]),
         "no model_name record"),
    ]
    recs = _records()
    _set_ns(recs, "QUEUE_START", "123")
    cases.append((json.dumps(recs), "ns must be an integer"))
    recs = _records()
    _set_ns(recs, "QUEUE_START", -5)
    cases.append((json.dumps(recs), "negative"))
    recs = _records()
    _set_ns(recs, "COMPUTE_END", 1)  # before COMPUTE_START
    cases.append((json.dumps(recs), "COMPUTE_END"))
    return cases


@pytest.mark.parametrize(("text", "message"), _broken_cases())
def test_malformed_trace_raises_typed_error(text: str, message: str) -> None:
    with pytest.raises(TritonTraceError, match=re.escape(message)):
        parse_triton_trace(text)


def test_errors_are_perf_errors_and_change_nothing(tmp_path: Path) -> None:
    assert issubclass(TritonTraceError, TritonIntegrationError)
    assert issubclass(TritonTraceError, perf.PerfError)
    with pytest.raises(TritonTraceError, match="no Triton trace file"):
        read_triton_trace(tmp_path / "missing.json")
    # one good file and one broken one: nothing comes back
    (tmp_path / "t.json.0").write_text(REAL.read_text())
    (tmp_path / "t.json.1").write_text("[{\"id\": 9, ")
    with pytest.raises(TritonTraceError, match=r"t\.json\.1"):
        read_triton_trace(tmp_path / "t.json")
    ledger = perf.Ledger()
    good = read_triton_trace(REAL)
    with pytest.raises(TritonTraceError, match="TritonTrace items"):
        record_triton_traces([*good, "not a trace"], ledger)  # type: ignore[list-item]
    assert ledger.stages() == []


def test_trace_is_immutable() -> None:
    [t] = read_triton_trace(REAL)
    assert isinstance(t, TritonTrace)
    with pytest.raises(AttributeError):
        t.model = "other"  # type: ignore[misc]
