"""KJBOD_TRACE (kjbod.net.trace, kjbod.server.tracing) and the bench's reading of it (tools.bench.latency_trace)."""

from __future__ import annotations

import asyncio
import gc
import importlib

import pytest

from kjbod.net import trace
from kjbod.server import tracing
from tools.bench import latency_trace


@pytest.fixture
def traced(tmp_path):
    assert trace.start(str(tmp_path))
    yield tmp_path
    trace.stop()


def _kinds_written(directory) -> list[str]:
    """Every event kind of the trace, in order, its own flushes left out: tracing stopped first, so that what the
    flusher thread (every FLUSH_S) already took out of memory and what it had not are both in the file."""
    trace.stop()
    (path,) = directory.glob("trace-*.txt")
    return [e[1] for e in trace.read(str(path)) if not e[1].startswith("trace_flush")]


def test_off_by_default_records_nothing(monkeypatch):
    monkeypatch.delenv(trace.ENV, raising=False)
    assert not trace.start()
    assert not trace.ON
    trace.event("appended", 1, "t")
    assert trace._events == []


def test_events_are_written_in_order_with_their_fields(traced):
    trace.event("appended", 5, "rf3")
    trace.event("hw", 5, "rf3")
    trace.stop()
    (path,) = traced.glob("trace-*.txt")
    events = trace.read(str(path))
    kinds = [e[1] for e in events if not e[1].startswith("trace_flush")]
    assert kinds == ["appended", "hw"]
    assert [e[2:] for e in events if e[1] == "appended"] == [("5", "rf3")]
    assert events == sorted(events, key=lambda e: e[0])


def test_every_hooked_method_exists():
    """A renamed method would leave its background work out of the trace without a word."""
    for module, cls, method, _kind in tracing.HOOKS:
        assert callable(getattr(getattr(importlib.import_module(module), cls), method)), (module, cls, method)


def test_install_wraps_the_hooks_in_spans(traced, monkeypatch):
    for module, cls, method, _kind in tracing.HOOKS:  # restored after the test
        owner = getattr(importlib.import_module(module), cls)
        monkeypatch.setattr(owner, method, getattr(owner, method))
    callbacks = list(gc.callbacks)
    try:
        assert tracing.install_tracing()
        from kjbod.storage.health import DirWatchdog

        DirWatchdog([]).check()
        gc.collect()
    finally:
        gc.callbacks[:] = callbacks
    kinds = _kinds_written(traced)
    assert kinds.index("watchdog+") < kinds.index("watchdog-")
    assert "gc+" in kinds and "gc-" in kinds


def test_async_spans_close_after_the_await(traced):
    async def work():
        trace.event("inside")
        await asyncio.sleep(0)
        return 7

    spanned = tracing._spanned(work, "metadata_fetch")
    assert asyncio.run(spanned()) == 7
    kinds = _kinds_written(traced)
    assert kinds == ["metadata_fetch+", "inside", "metadata_fetch-"]


def _trace(*events):
    return latency_trace.Trace([(t, k, str(a), str(b)) for t, k, a, b in events])


def test_a_records_legs_follow_the_follower_that_acknowledged_last():
    """Record offset 10 sent at t=0: appended at 1 ms; follower 2 is answered at 2 ms and acknowledges at 6 ms,
    follower 3 at 3 ms and 9 ms (the last: its legs are the record's); HW at 9.5 ms; delivered at 11 ms."""
    ms = 0.001
    leader = _trace((1 * ms, "appended", 11, "rf3"), (2 * ms, "answered", 2, 11), (3 * ms, "answered", 3, 11),
                    (6 * ms, "fetched_by", 2, 11), (9 * ms, "fetched_by", 3, 11), (9.5 * ms, "hw", 11, "rf3"))
    f2 = _trace((2.5 * ms, "fetch_got", 1, ""), (3 * ms, "f_appended", 11, "rf3"), (3.2 * ms, "f_applied", 11, "rf3"),
                (3.4 * ms, "fetch_sent", 1, 11))
    f3 = _trace((4 * ms, "fetch_got", 1, ""), (5 * ms, "f_appended", 11, "rf3"), (5.5 * ms, "f_applied", 11, "rf3"),
                (7 * ms, "fetch_sent", 1, 11))
    legs = latency_trace.legs_acks_all(leader, {2: f2, 3: f3}, (0.0, 11.0, 10), "rf3")
    assert legs == pytest.approx([1, 2, 1, 1, 0.5, 1.5, 2, 0.5, 1.5])
    assert sum(legs) == pytest.approx(11)
    # a record whose acknowledgement is not in the trace is left out, not half counted
    assert latency_trace.legs_acks_all(leader, {2: f2, 3: f3}, (0.0, 11.0, 11), "rf3") is None


def test_background_spans_under_slow_records_are_counted():
    tr = _trace((0.100, "gc+", 0, ""), (0.104, "gc-", 0, ""), (0.500, "isr_expiration", "", ""))
    assert tr.intervals("gc") == [(0.100, 0.104)]
    slow = [(0.098, 10.0, 1)]  # 98-108 ms: the collection ran under it
    every = slow + [(0.2 + i * 0.002, 1.0, 2 + i) for i in range(100)]
    lines = latency_trace.background({"leader": tr}, slow, every, "acks=all")
    gc_line = next(x for x in lines if x.strip().startswith("gc"))
    assert "under 100% of the slowest" in gc_line


def test_answer_hops_are_split_by_the_followers_placement_state():
    ms = 0.001
    leader = _trace((1 * ms, "answered", 2, 5), (10 * ms, "answered", 2, 6), (20 * ms, "answered", 2, 7))
    follower = _trace((0.5 * ms, "placement_place-", "", ""), (1.5 * ms, "fetch_got", 1, ""),
                      (5 * ms, "placement_spread-", "", ""), (10.2 * ms, "fetch_got", 1, ""),
                      (19 * ms, "placement_place-", "", ""), (50 * ms, "fetch_got", 1, ""))
    lines = latency_trace.placement_hops(leader, {2: follower})
    placed = next(x for x in lines if "placed" in x)
    spread = next(x for x in lines if "spread" in x)
    assert "2 answers" in placed and "max 30.0 ms, 1 over 20 ms" in placed
    assert "1 answers" in spread and "max 0.2 ms" in spread


def test_a_copy_is_split_into_waiting_for_the_leader_the_worker_and_the_way_back():
    """Two fetches of 1 MB: each waits 10 ms for the leader, 4 ms on the worker; 1 ms back to the next fetch."""
    ms = 0.001
    follower = _trace((0, "fetch_sent", 1, 0), (10 * ms, "fetch_got", 1, 1_000_000),
                      (14 * ms, "f_appended", 100, "backlog"), (15 * ms, "fetch_sent", 1, 100),
                      (25 * ms, "fetch_got", 1, 1_000_000), (29 * ms, "f_appended", 200, "backlog"),
                      (29.5 * ms, "f_appended", 7, "other"))
    line = latency_trace.copy_legs(follower, 1, "backlog", 0.0, 0.030)
    assert line.startswith("2 fetches, 2 MB (1.00 MB each)")
    assert "waiting for the leader 0.02 s, on the follower's dir worker 0.01 s, back to the next fetch 0.00 s" in line
