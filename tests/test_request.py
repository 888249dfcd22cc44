from __future__ import annotations

import asyncio
import contextvars
import threading

import anyio
import anyio.to_thread
import pytest

import aiperf_sdk as perf


def test_request_generates_uuid4_hex_and_records_e2e(perf_ledger: perf.Ledger) -> None:
    with perf.request() as req:
        assert perf.current_request_id() == req.id
    assert len(req.id) == 32 and int(req.id, 16) >= 0
    assert perf.current_request_id() is None
    assert perf_ledger.count("e2e") == 1


def test_request_keeps_a_valid_id() -> None:
    with perf.request(id="req-1.a:B_9") as req:
        assert req.id == "req-1.a:B_9"
        assert not req.id_replaced


@pytest.mark.parametrize(
    "bad", ["", "x" * 129, "has space", "new\nline", "é", "a/b", "<script>", 42, b"bytes"]
)
def test_invalid_id_is_replaced_and_not_propagated(bad: object, perf_ledger: perf.Ledger) -> None:
    with perf.request(id=bad) as req:  # type: ignore[arg-type]
        assert perf.current_request_id() == req.id
    assert req.id != bad and len(req.id) == 32
    assert req.id_replaced
    trace = perf_ledger.slowest()[0]
    assert trace.id == req.id != bad


def test_id_of_128_chars_is_accepted() -> None:
    with perf.request(id="a" * 128) as req:
        assert req.id == "a" * 128


def test_nested_request_keeps_outer_id_unless_new_id(perf_ledger: perf.Ledger) -> None:
    with perf.request(id="outer") as outer:
        with perf.request(step="2") as inner:
            assert inner is outer
            assert perf.current_request_id() == "outer"
        with perf.request(id="child") as child:
            assert perf.current_request_id() == "child"
            assert child is not outer
        assert perf.current_request_id() == "outer"
    assert outer.attrs == {"step": "2"}
    # outer + the child with its own id; the joined scope records no second e2e
    assert perf_ledger.count("e2e") == 2


def test_request_error_is_labelled_and_reraised(perf_ledger: perf.Ledger) -> None:
    with pytest.raises(KeyError, match="boom"), perf.request():
        raise KeyError("boom")
    assert perf_ledger.count("e2e") == 0
    assert perf_ledger.count("e2e", outcome="error") == 1
    assert perf_ledger.slowest()[0].outcome == "error"


def test_request_labels_and_attrs(perf_ledger: perf.Ledger) -> None:
    with perf.request(labels={"route": "/v1/chat"}, user_tier="gold") as req:
        pass
    assert perf_ledger.count("e2e", route="/v1/chat") == 1
    assert perf_ledger.slowest()[0].attrs == {"user_tier": "gold"}
    assert req.elapsed_ms >= 0


def test_request_scope_object_cannot_be_entered_twice() -> None:
    scope = perf.request()
    with scope, pytest.raises(RuntimeError, match="already active"), scope:
        pass


def test_request_into_explicit_ledger_and_its_stages_follow(perf_ledger: perf.Ledger) -> None:
    mine = perf.Ledger()
    with perf.request(ledger=mine), perf.stage("inner"):
        pass
    assert mine.count("e2e") == 1 and mine.count("inner") == 1
    assert perf_ledger.count("e2e") == 0 and perf_ledger.count("inner") == 0


@pytest.mark.anyio
async def test_ids_are_isolated_between_concurrent_tasks(perf_ledger: perf.Ledger) -> None:
    seen: dict[str, list[str | None]] = {}

    async def handler(i: int) -> None:
        async with perf.request(id=f"r{i}") as req:
            ids = seen.setdefault(req.id, [])
            for _ in range(5):
                await anyio.sleep(0)
                ids.append(perf.current_request_id())
                async with perf.stage("work"):
                    await anyio.sleep(0)
                ids.append(await anyio.to_thread.run_sync(perf.current_request_id))

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(handler, i)
    assert len(seen) == 20
    for rid, ids in seen.items():
        assert ids == [rid] * 10
    assert perf_ledger.count("work") == 100
    assert {t.id for t in perf_ledger.slowest(k=100)} == set(seen)


def test_asyncio_gather_children_see_the_request() -> None:
    async def child() -> str | None:
        await asyncio.sleep(0)
        return perf.current_request_id()

    async def main() -> list[str | None]:
        async with perf.request(id="parent"):
            return list(await asyncio.gather(child(), child(), asyncio.create_task(child())))

    assert asyncio.run(main()) == ["parent"] * 3


def test_plain_thread_needs_copy_context() -> None:
    out: dict[str, str | None] = {}
    with perf.request(id="t1"):
        ctx = contextvars.copy_context()
        plain = threading.Thread(target=lambda: out.__setitem__("plain", perf.current_request_id()))
        copied = threading.Thread(
            target=lambda: out.__setitem__("copied", ctx.run(perf.current_request_id))
        )
        plain.start(), copied.start()
        plain.join(), copied.join()
    assert out == {"plain": None, "copied": "t1"}


def test_request_exited_in_another_context_still_records(perf_ledger: perf.Ledger) -> None:
    scope = perf.request(id="moved")
    ctx = contextvars.copy_context()
    ctx.run(scope.__enter__)
    scope.__exit__(None, None, None)  # exit from the outer context, as a finaliser would
    assert perf_ledger.count("e2e") == 1
    assert perf.current_request_id() is None


def test_set_labels_during_the_request(perf_ledger: perf.Ledger) -> None:
    with perf.request() as req:
        req.set_labels(route="/items/{id}", status_class="2xx")
    assert perf_ledger.count("e2e", route="/items/{id}", status_class="2xx") == 1


def test_valid_request_id_is_the_request_rule() -> None:
    assert perf.valid_request_id("abc-1.2:3_Z")
    for bad in ("", "a b", "x" * 129, None, 5, "é"):
        assert not perf.valid_request_id(bad)
