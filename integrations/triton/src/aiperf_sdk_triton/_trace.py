"""Triton's own trace output (``--trace-config level=TIMESTAMPS``) as per-request stages.

Triton (``--trace-config triton,file=trace.json --trace-config level=TIMESTAMPS
--trace-config rate=1``) writes a JSON array of records keyed by a numeric trace ``id``: one
with ``model_name``/``model_version``/``request_id``/``parent_id``, and one per timestamp,
``{"id": 1, "timestamps": [{"name": "QUEUE_START", "ns": ...}]}`` (steady clock, ns). With
``triton,log-frequency=N`` it writes ``trace.json.0``, ``trace.json.1``, ... instead.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import aiperf_sdk as perf

from ._batch import TritonIntegrationError, resolve_id


class TritonTraceError(TritonIntegrationError):
    """A Triton trace file that is missing, not Triton's JSON, or has impossible timestamps."""


#: stage name -> (start event, end event); a stage is recorded when both events are present
STAGES: tuple[tuple[str, str, str], ...] = (
    ("queue", "QUEUE_START", "COMPUTE_START"),
    ("compute_input", "COMPUTE_START", "COMPUTE_INPUT_END"),
    ("infer", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START"),
    ("compute_output", "COMPUTE_OUTPUT_START", "COMPUTE_END"),
    ("compute", "COMPUTE_START", "COMPUTE_END"),
    ("handler", "REQUEST_START", "REQUEST_END"),
    ("recv", "HTTP_RECV_START", "HTTP_RECV_END"),
    ("send", "HTTP_SEND_START", "HTTP_SEND_END"),
    ("send", "GRPC_SEND_START", "GRPC_SEND_END"),
)

# chains of events that cannot go backwards in time (each: those present, in this order).
# The response is sent as soon as it is complete, so the send events are ordered only after
# REQUEST_START: HTTP_SEND_START before REQUEST_END is normal (seen on tritonserver 2.51).
_ORDER = (
    ("HTTP_RECV_START", "GRPC_WAITREAD_START", "HTTP_RECV_END", "GRPC_WAITREAD_END",
     "REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
     "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END"),
    ("REQUEST_START", "HTTP_SEND_START", "GRPC_SEND_START", "HTTP_SEND_END", "GRPC_SEND_END"),
)


@dataclass(frozen=True)
class TritonTrace:
    """One traced inference request, as Triton recorded it.

    ``timestamps`` maps an event name to its time (ns, Triton's steady clock; an event seen
    more than once keeps its first time, except ``*_END``/``*_COMPLETE`` events: their last).
    """

    trace_id: int
    model: str
    model_version: int
    request_id: str
    parent_id: int | None
    timestamps: Mapping[str, int] = field(repr=False)

    @property
    def protocol(self) -> str:
        """``http``, ``grpc`` or ``none`` (in-process C API: no frontend events)."""
        ts = self.timestamps
        if "HTTP_RECV_START" in ts or "HTTP_SEND_END" in ts:
            return "http"
        if "GRPC_WAITREAD_END" in ts or "GRPC_SEND_END" in ts:
            return "grpc"
        return "none"

    @property
    def stages(self) -> dict[str, int]:
        """Durations (ns) of the stages whose start and end events are both present.

        ``queue``, ``compute_input``, ``infer``, ``compute_output`` (these four tile
        ``compute``), ``compute``, ``handler`` (REQUEST_START..REQUEST_END: includes the
        request's release, which may end after the response was sent), ``recv`` and ``send``
        (HTTP read / HTTP or gRPC send), ``network`` (recv + send) and ``e2e``: frontend
        receive start (HTTP_RECV_START; gRPC: GRPC_WAITREAD_END, since the read start
        includes idle waiting) to send end, as Triton's trace_summary.py counts it; without
        frontend events (in-process C API), the handler.
        """
        ts = self.timestamps
        out: dict[str, int] = {}
        for name, start, end in STAGES:
            if start in ts and end in ts:
                out[name] = ts[end] - ts[start]
        if "recv" in out or "send" in out:
            out["network"] = out.get("recv", 0) + out.get("send", 0)
        first = next((ts[e] for e in ("HTTP_RECV_START", "GRPC_WAITREAD_END", "REQUEST_START")
                      if e in ts), None)
        last = next((ts[e] for e in ("HTTP_SEND_END", "GRPC_SEND_END", "REQUEST_END")
                     if e in ts), None)
        if first is not None and last is not None:
            out["e2e"] = last - first
        return out


def _bad(where: str, msg: str) -> TritonTraceError:
    return TritonTraceError(f"{where}: {msg} (not a Triton TIMESTAMPS trace?)")


def _int(value: Any, what: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(where, f"{what} must be an integer, got {value!r}")
    return value


def _collect(records: Any, where: str, acc: dict[int, dict[str, Any]]) -> None:
    if not isinstance(records, list):
        raise _bad(where, f"expected a JSON array of trace records, got {type(records).__name__}")
    for i, rec in enumerate(records):
        at = f"{where}[{i}]"
        if not isinstance(rec, dict):
            raise _bad(at, f"a trace record must be an object, got {rec!r:.80}")
        tid = _int(rec.get("id"), "'id'", at)
        entry = acc.setdefault(tid, {"ts": {}})
        if "model_name" in rec:
            model = rec["model_name"]
            if not isinstance(model, str) or not model:
                raise _bad(at, f"model_name must be a non-empty string, got {model!r:.80}")
            entry["model"] = model
            entry["version"] = _int(rec.get("model_version", -1), "model_version", at)
            rid = rec.get("request_id", "")
            if not isinstance(rid, str):
                raise _bad(at, f"request_id must be a string, got {rid!r:.80}")
            entry["request_id"] = rid
            parent = rec.get("parent_id")
            entry["parent"] = None if parent in (None, 0) else _int(parent, "parent_id", at)
        stamps = rec.get("timestamps")
        if stamps is None:
            continue  # TENSORS records ("activity"/"tensor") and the like: not timing
        if not isinstance(stamps, list):
            raise _bad(at, f"timestamps must be an array, got {stamps!r:.80}")
        ts: dict[str, int] = entry["ts"]
        for stamp in stamps:
            if not isinstance(stamp, dict) or not isinstance(stamp.get("name"), str):
                raise _bad(at, f"a timestamp must be {{'name': str, 'ns': int}}, got {stamp!r:.80}")
            name = stamp["name"]
            ns = _int(stamp.get("ns"), f"timestamp {name!r} ns", at)
            if ns < 0:
                raise _bad(at, f"timestamp {name!r} is negative: {ns}")
            if name not in ts:
                ts[name] = ns
            elif name.endswith(("_END", "_COMPLETE")):
                ts[name] = max(ts[name], ns)
            else:
                ts[name] = min(ts[name], ns)


def _build(acc: dict[int, dict[str, Any]], where: str) -> list[TritonTrace]:
    out: list[TritonTrace] = []
    for tid in sorted(acc):
        entry = acc[tid]
        ts: dict[str, int] = entry["ts"]
        if "model" not in entry:
            if ts:
                raise _bad(where, f"trace id {tid} has timestamps but no model_name record")
            continue
        for chain in _ORDER:
            prev: tuple[str, int] | None = None
            for name in chain:
                if name in ts:
                    if prev is not None and ts[name] < prev[1]:
                        raise _bad(where, f"trace id {tid}: {name} ({ts[name]}) is before "
                                          f"{prev[0]} ({prev[1]})")
                    prev = (name, ts[name])
        out.append(TritonTrace(tid, entry["model"], entry["version"], entry["request_id"],
                               entry["parent"], dict(ts)))
    return out


def parse_triton_trace(text: str | bytes, *, source: str = "<trace>") -> list[TritonTrace]:
    """Parse the JSON text of one Triton trace file into traces, ordered by trace id.

    Example::

        traces = parse_triton_trace(Path("trace.json").read_text())
        traces[0].request_id, traces[0].stages["queue"]   # -> ('req-1', 23754) ns

    Raises:
        TritonTraceError: not JSON, not Triton's record layout, non-integer or negative
            timestamps, timestamps of one trace out of order (e.g. COMPUTE_END before
            COMPUTE_START), or timestamps of a trace id without its model record.
    """
    acc: dict[int, dict[str, Any]] = {}
    _collect(_loads(text, source), source, acc)
    return _build(acc, source)


def _loads(text: str | bytes, source: str) -> Any:
    try:
        # strict=False: tritonserver 2.51 writes request IDs into the file unescaped, so a
        # control character (a tab) in a client's ID would otherwise make the file unreadable
        return json.loads(text, strict=False)
    except (ValueError, UnicodeDecodeError) as exc:
        raise TritonTraceError(f"{source}: not valid JSON ({exc}); a Triton trace file still "
                               "being written, or not a trace file") from exc


_NUMBERED = re.compile(r"\.(\d+)$")


def trace_files(path: str | os.PathLike[str]) -> list[Path]:
    """The files Triton wrote for ``--trace-config triton,file=<path>``: ``path`` itself, or
    with ``log-frequency`` set, ``path.0``, ``path.1``, ... in numeric order.

    Raises:
        TritonTraceError: neither exists.
    """
    p = Path(path)
    if p.is_file():
        return [p]
    numbered = []
    if p.parent.is_dir():
        for f in p.parent.glob(p.name + ".*"):
            m = _NUMBERED.search(f.name)
            if m and f.name == p.name + m.group(0) and f.is_file():
                numbered.append((int(m.group(1)), f))
    if not numbered:
        raise TritonTraceError(f"no Triton trace file {p} (nor {p.name}.0, {p.name}.1, ...)")
    return [f for _, f in sorted(numbered)]


def read_triton_trace(path: str | os.PathLike[str]) -> list[TritonTrace]:
    """Read and parse the trace file(s) Triton wrote for ``file=<path>`` (see
    :func:`trace_files`); records of one trace id spread over files are joined.

    Example::

        traces = read_triton_trace("/tmp/trace.json")   # reads trace.json.0, .1, ... too
        record_triton_traces(traces, ledger)

    Raises:
        TritonTraceError: missing or unreadable file, or any file malformed (see
            :func:`parse_triton_trace`); nothing is returned then.
    """
    acc: dict[int, dict[str, Any]] = {}
    files = trace_files(path)
    for f in files:
        try:
            data = f.read_bytes()
        except OSError as exc:
            raise TritonTraceError(f"cannot read Triton trace file {f}: {exc}") from exc
        _collect(_loads(data, str(f)), str(f), acc)
    return _build(acc, str(path))


def record_triton_traces(traces: Iterable[TritonTrace], ledger: perf.Ledger | None = None, *,
                         include_children: bool = False) -> int:
    """Record traces into ``ledger`` (default ledger if None); returns how many.

    Each stage of :attr:`TritonTrace.stages` except ``e2e`` is recorded under its name,
    labelled ``model`` and ``protocol``; each trace is a ``perf.request()`` with Triton's
    request ID (invalid or empty: a new one) whose ``e2e`` is Triton's own e2e, labelled the
    same, so ``ledger.slowest()`` lists requests by their server-side time and a
    ``perf.Budget`` can be checked against Triton's own timestamps. Use a ledger of its own:
    these are server-side durations, not the client's. Traces with a ``parent_id``
    (composing models of an ensemble) are skipped unless ``include_children``.

    Example::

        ledger = perf.Ledger()
        record_triton_traces(read_triton_trace("trace.json"), ledger)
        ledger.percentile("queue", 99.0, model="scale", protocol="http")

    Raises:
        TritonTraceError: an item is not a :class:`TritonTrace` (nothing is recorded then).
    """
    items = list(traces)
    for t in items:
        if not isinstance(t, TritonTrace):
            raise TritonTraceError(f"expected TritonTrace items, got {type(t).__name__}")
    if ledger is None:
        ledger = perf.default_ledger()
    n = 0
    for t in items:
        if t.parent_id is not None and not include_children:
            continue
        stages = t.stages
        e2e = stages.pop("e2e", None)
        labels: dict[str, object] = {"model": t.model, "protocol": t.protocol}
        for name, ns in stages.items():
            ledger.record(name, ns, **labels)
        if e2e is not None:
            scope = perf.request(id=resolve_id(t.request_id), ledger=ledger, labels=labels,
                                 triton_trace_id=t.trace_id, model_version=t.model_version)
            req = scope.__enter__()
            req.stages.update(stages)
            req.start_ns = perf_counter_ns() - e2e  # Triton's e2e, ending now
            scope.__exit__(None, None, None)
        n += 1
    return n
