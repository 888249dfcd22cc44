"""Logging: request_id/stage on records, structlog processor, one line per request."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

import aiperf_sdk as perf

pytestmark = pytest.mark.usefixtures("export_reset")


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(perf.LogContextFilter())
    handler.setFormatter(logging.Formatter("%(request_id)s|%(stage)s|%(name)s|%(message)s"))
    log = logging.getLogger("app")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        log.removeHandler(handler)


def test_filter_puts_request_id_and_stage_on_records(captured: io.StringIO) -> None:
    log = logging.getLogger("app")
    perf.configure(logging=True)
    log.info("outside")
    with perf.request(id="rid-7"):
        log.info("in request")
        with perf.stage("prefill"):
            log.info("in stage")
            with perf.stage("kernel"):
                log.info("nested")
            log.info("back")
    lines = captured.getvalue().splitlines()
    assert lines == [
        "-|-|app|outside",
        "rid-7|-|app|in request",
        "rid-7|prefill|app|in stage",
        "rid-7|kernel|app|nested",
        "rid-7|prefill|app|back",
    ]


def test_request_id_works_without_configure(captured: io.StringIO) -> None:
    with perf.request(id="only-id"), perf.stage("s"):
        logging.getLogger("app").info("x")
    assert captured.getvalue().strip() == "only-id|-|app|x"


def test_one_structured_line_per_request(caplog: pytest.LogCaptureFixture) -> None:
    perf.configure(logging=True)
    ledger = perf.Ledger()
    with caplog.at_level(logging.INFO, logger="aiperf_sdk.requests"):
        with perf.request(id="r1", route="/chat", ledger=ledger):
            with perf.stage("prefill"):
                pass
            with perf.stage("prefill"):
                pass
        with pytest.raises(RuntimeError), perf.request(id="r2"):
            raise RuntimeError("x")
    records = [r for r in caplog.records if r.name == "aiperf_sdk.requests"]
    assert len(records) == 2
    first = json.loads(records[0].getMessage())
    assert first["request_id"] == "r1" and first["outcome"] == "ok"
    assert set(first["stages_ms"]) == {"prefill"} and first["attrs"] == {"route": "/chat"}
    assert first["e2e_ms"] >= first["stages_ms"]["prefill"]
    # the logged e2e is the ledger's measurement (the hook gets the request's own bounds)
    assert first["e2e_ms"] == round(ledger.mean("e2e"), 3)
    assert records[0].request_id == "r1"  # type: ignore[attr-defined]
    assert json.loads(records[1].getMessage())["outcome"] == "error"


def test_no_request_lines_when_logging_is_off(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="aiperf_sdk.requests"), perf.request():
        pass
    assert not [r for r in caplog.records if r.name == "aiperf_sdk.requests"]


def test_structlog_processor() -> None:
    structlog = pytest.importorskip("structlog")
    out: list[dict[str, Any]] = []

    def sink(logger: Any, method: str, event: dict[str, Any]) -> str:
        out.append(dict(event))
        return ""

    structlog.configure(processors=[perf.structlog_processor, sink],
                        logger_factory=structlog.ReturnLoggerFactory())
    try:
        perf.configure(logging=True)
        log = structlog.get_logger()
        with perf.request(id="s-1"), perf.stage("decode"):
            log.info("tok")
        log.info("after")
    finally:
        structlog.reset_defaults()
    assert out[0] == {"event": "tok", "request_id": "s-1", "stage": "decode"}
    assert out[1] == {"event": "after"}
