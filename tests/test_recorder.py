"""TrafficRecorder: JSONL arrivals, no bodies by default, redaction, thread safety."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

import aiperf_sdk as perf


def test_no_bodies_unless_enabled(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with perf.TrafficRecorder(path) as rec:
        rec.record(route="/v1/chat", req_bytes=12, resp_bytes=40, status=200,
                   features={"prompt_chars": 7}, body={"prompt": "secret!"})
    (line,) = [json.loads(x) for x in path.read_text().splitlines()]
    assert "body" not in line and "secret" not in path.read_text()
    assert line["route"] == "/v1/chat" and line["features"] == {"prompt_chars": 7}
    assert isinstance(line["t"], float)


def test_bodies_with_redaction(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"

    def redact(body: dict[str, str]) -> dict[str, str] | None:
        if body.get("drop"):
            return None
        return {**body, "email": "<redacted>"}

    with perf.TrafficRecorder(path, include_bodies=True, redact=redact) as rec:
        rec.record(route="/a", body={"prompt": "hi", "email": "a@b.c"})
        rec.record(route="/a", body={"drop": "yes"})
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert lines[0]["body"] == {"prompt": "hi", "email": "<redacted>"}
    assert "body" not in lines[1]
    entries = perf.load_trace(path)  # what `load --replay` reads
    assert entries[0].body == {"prompt": "hi", "email": "<redacted>"}


def test_misuse_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(perf.RecorderError, match="include_bodies"):
        perf.TrafficRecorder(tmp_path / "x", redact=lambda b: b)
    rec = perf.TrafficRecorder(tmp_path / "y")
    rec.close()
    rec.close()  # twice is fine
    with pytest.raises(perf.RecorderError, match="closed"):
        rec.record(route="/")


def test_threads_lose_no_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    rec = perf.TrafficRecorder(path, flush_every=7)

    def work() -> None:
        for _ in range(500):
            rec.record(route="/r", features={"n": 1})

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rec.close()
    lines = path.read_text().splitlines()
    assert len(lines) == rec.records == 2000
    assert all(json.loads(x)["route"] == "/r" for x in lines)
