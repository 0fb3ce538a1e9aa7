"""Each log dir's data path on its own worker, in process: the fsio seam holds one dir's operations while the
Produce and Fetch handlers serve partitions on all three dirs.

What these show: a request spanning dirs gets its healthy dirs' partitions answered while another dir is held
(and the event loop keeps serving other requests meanwhile); the held dir's partitions answer REQUEST_TIMED_OUT
(Produce) or "nothing new" (Fetch, as an expired long poll) at the request's own bound, and normally once the dir
moves again; a dir failed for a stall answers its waiting requests KAFKA_STORAGE_ERROR at once, before their own
timeouts; appends keep their order per partition through the hand-off; a shutdown does not wait for a worker
stuck in a held dir. No test waits for a clock: a hold lasts until released, and the watchdog's clock runs an
hour ahead.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from types import SimpleNamespace

import pytest
from structlog.testing import capture_logs

from kjbod.broker.handlers import fetch, produce
from kjbod.broker.parked_fetches import ParkedFetches
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import FetchRequest, ProduceRequest
from kjbod.storage import fsio
from kjbod.storage import manager as manager_module
from kjbod.storage.workers import DirWorker
from kjbod.wire.handler import Later
from tests.storage.conftest import kp_batch, kp_records, region_bytes
from tests.storage.test_dir_health import AN_HOUR, PATIENCE_S, _ahead, _held_in, _wait_for

PV = 9  # Produce version: flexible, error messages
FV = 12  # Fetch version: topic names, flexible


class _Node:
    """What the Produce and Fetch handlers ask of the node, over a real LogManager."""

    def __init__(self, lm) -> None:
        self.logs = SimpleNamespace(manager=lm)
        self.manager = lm
        self.stopping = False
        self.topic_stats = None  # no metrics endpoint
        self.fetch_max_bytes = 55 * 1024 * 1024  # Kafka's default fetch.max.bytes
        self.replication = None  # no followers: acks=all answers once appended
        self.parked_fetches = ParkedFetches()  # BrokerNode's long polls
        topics = {}
        for plog in lm.partitions():
            topics.setdefault(plog.topic, SimpleNamespace(partitions={}))
            topics[plog.topic].partitions[plog.partition] = None
        self.metadata = SimpleNamespace(topic=topics.get)

    def partition_log(self, topic, partition):
        return self.manager.get(topic, partition)

    local_log = partition_log  # every replica here leads (a consumer's Fetch v11+ may read any local replica)

    def leader_epoch(self, topic, partition) -> int:
        return 0

    def notify_append(self, topic: str, partition: int) -> None:
        self.parked_fetches.appended((topic, partition))


def _request(version: int):
    return SimpleNamespace(api_version=version, ctx=SimpleNamespace(listener_kind="broker"))


def _produce(node, parts: dict[str, list[int]], *, timeout_ms: int = 600_000, value: bytes = b"v", acks: int = 1):
    body = ProduceRequest(acks=acks, timeout_ms=timeout_ms, topic_data=[
        ProduceRequest.TopicProduceData(name=t, partition_data=[
            ProduceRequest.PartitionProduceData(index=p, records=kp_batch([value])) for p in ps])
        for t, ps in parts.items()])
    return _awaitable(produce.handle(node, _request(PV), body))


def _awaitable(reply):
    """The handler's answer as something to await: a Later (what a request handed to the workers returns) as
    a future completed with its outcome."""
    if reply.__class__ is not Later:
        return reply
    future = asyncio.get_running_loop().create_future()

    def copy(done: Later) -> None:
        try:
            future.set_result(done.result())
        except Exception as e:
            future.set_exception(e)

    reply.on_done(copy)
    return future


def _answers(resp) -> dict[tuple[str, int], tuple[int, int]]:
    return {(t.name, p.index): (p.error_code, p.base_offset) for t in resp.responses for p in t.partition_responses}


def _fetch_body(parts: dict[str, list[int]], *, max_wait_ms: int) -> FetchRequest:
    return FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, topics=[
        FetchRequest.FetchTopic(topic=t, partitions=[
            FetchRequest.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20) for p in ps])
        for t, ps in parts.items()])


def _fetched(resp) -> dict[tuple[str, int], tuple[int, list[bytes | None]]]:
    """(error, values) per partition; the regions are read and closed."""
    out = {}
    for t in resp.responses:
        for p in t.partitions:
            regions = p.records if isinstance(p.records, list) else []
            data = region_bytes(SimpleNamespace(regions=regions)) if regions else bytes(p.records or b"")
            out[(t.topic, p.partition_index)] = (p.error_code, [v for _, v, _ in kp_records(data)])
    return out


def test_produce_spanning_dirs_answers_the_healthy_dirs_while_one_is_held(spread, log_dirs):
    bad = log_dirs[2]
    node = _Node(spread)

    async def scenario():
        rule = fsio.slow(bad, hold=True, ops={"write"})
        try:
            spanning = asyncio.ensure_future(_produce(node, {"a": [0], "b": [0], "c": [0]}))
            await asyncio.sleep(0)
            _wait_for("the bad dir's append to block", lambda: _held_in(spread.dir_io(bad), "write"))
            # The loop is free: a produce to the healthy dirs alone completes while the spanning one waits.
            alone = _answers(await _produce(node, {"a": [0], "b": [0]}))
            assert alone == {("a", 0): (0, 1), ("b", 0): (0, 1)}  # after the spanning request's appends
            assert not spanning.done()
            # A request with a short timeout answers its held partition REQUEST_TIMED_OUT, the others normally.
            timed = await _produce(node, {"a": [0], "c": [0]}, timeout_ms=50)
            codes = {(t.name, p.index): (p.error_code, p.error_message) for t in timed.responses
                     for p in t.partition_responses}
            assert codes[("a", 0)] == (0, None)
            assert codes[("c", 0)][0] == ErrorCode.REQUEST_TIMED_OUT and "timeout_ms 50" in codes[("c", 0)][1]
        finally:
            rule.release()
        # Once the dir moves, the spanning request is answered in full.
        assert _answers(await spanning) == {("a", 0): (0, 0), ("b", 0): (0, 0), ("c", 0): (0, 0)}

    asyncio.run(scenario())
    # The timed-out append still happened after the spanning one (the producer would retry: at-least-once).
    _wait_for("the timed-out append to be made", lambda: spread.get("c", 0).log_end_offset == 2)


def test_fetch_spanning_dirs_gets_the_healthy_dirs_data_while_one_is_held(spread, log_dirs):
    bad = log_dirs[2]
    node = _Node(spread)
    for name in "abc":
        spread.get(name, 0).append(kp_batch([name.encode()]))
    spread.get("c", 0).segments[0].release()  # the next read of c opens its segment through the seam

    async def scenario():
        rule = fsio.slow(bad, hold=True)
        try:
            resp = await fetch.handle(node, _request(FV), _fetch_body({"a": [0], "b": [0], "c": [0]},
                                                                      max_wait_ms=100))
            got = _fetched(resp)
            assert got[("a", 0)] == (0, [b"a"]) and got[("b", 0)] == (0, [b"b"])
            assert got[("c", 0)] == (0, [])  # nothing new from the held dir, as a long poll that expired
            assert spread.dir_io(bad).oldest_outstanding() is not None  # still held: nothing waited for it
        finally:
            rule.release()
        resp = await fetch.handle(node, _request(FV), _fetch_body({"c": [0]}, max_wait_ms=0))
        assert _fetched(resp)[("c", 0)] == (0, [b"c"])

    asyncio.run(scenario())


def test_a_stalled_dir_answers_its_waiting_requests_at_once(spread, log_dirs):
    good, _, bad = log_dirs
    node = _Node(spread)

    async def scenario():
        rule = fsio.slow(bad, hold=True, ops={"write"})
        try:
            waiting = [asyncio.ensure_future(_produce(node, {"a": [0], "c": [0]})) for _ in range(3)]
            await asyncio.sleep(0)
            _wait_for("the bad dir's append to block", lambda: _held_in(spread.dir_io(bad), "write"))
            _ahead(spread.watchdog, AN_HOUR)
            with capture_logs() as logs:
                assert spread.watchdog.check() == [bad]
            assert [e["op"] for e in logs if e["event"] == "log_dir_stalled"] == ["write"]
            # Their 10-minute timeouts are not waited for: the stuck append and those queued behind it fail now.
            for request in waiting:
                answers = _answers(await request)
                assert answers[("a", 0)][0] == 0
                assert answers[("c", 0)] == (ErrorCode.KAFKA_STORAGE_ERROR, -1)
            # A new request for the failed dir answers at once too.
            assert _answers(await _produce(node, {"c": [0]}))[("c", 0)] == (ErrorCode.KAFKA_STORAGE_ERROR, -1)
        finally:
            rule.release()

    asyncio.run(scenario())
    assert spread.get("a", 0).log_end_offset == 3
    assert bad not in spread.online_dirs and good in spread.online_dirs


def test_appends_keep_their_order_per_partition_through_the_hand_off(spread):
    node = _Node(spread)

    async def scenario():
        requests = [_produce(node, {"a": [0], "b": [0]}, value=b"%03d" % i) for i in range(200)]
        return await asyncio.gather(*requests)

    writes = sum(spread.get("b", 0).io.latency_buckets["write"])
    answers = [_answers(r) for r in asyncio.run(scenario())]
    assert [a[("a", 0)] for a in answers] == [(0, i) for i in range(200)]
    data = spread.get("b", 0).read_bytes(0, 1 << 20)
    assert [v for _, v, _ in kp_records(data)] == [b"%03d" % i for i in range(200)]
    # Submitted in one pass of the loop, the 200 appends reach each worker together and go in one write (group
    # commit; a few more writes are the dir's own bookkeeping at most).
    assert sum(spread.get("b", 0).io.latency_buckets["write"]) - writes < 10


def test_idempotent_producers_appends_handed_over_together_go_in_one_write(spread):
    """Idempotent producers' batches from many requests of one pass reach the worker together and go in one
    write, each checked against the batches before it: a gap and a retry among them answer as they would one
    request at a time (OUT_OF_ORDER_SEQUENCE_NUMBER; the first append's offset), the others are not moved."""
    node = _Node(spread)
    sends = [(pid, seq) for seq in range(40) for pid in (11, 12, 13)] + [(12, 45), (11, 38), (13, 40)]

    def request(pid: int, seq: int):
        records = kp_batch([b"%d-%d" % (pid, seq)], producer_id=pid, producer_epoch=0, base_sequence=seq)
        body = ProduceRequest(acks=1, timeout_ms=600_000, topic_data=[ProduceRequest.TopicProduceData(
            name="b", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)])])
        return _awaitable(produce.handle(node, _request(PV), body))

    async def scenario():
        return await asyncio.gather(*(request(pid, seq) for pid, seq in sends))

    plog = spread.get("b", 0)
    writes = sum(plog.io.latency_buckets["write"])
    answers = [_answers(r)[("b", 0)] for r in asyncio.run(scenario())]
    assert answers == [(0, i) for i in range(120)] + [(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1), (0, 114), (0, 120)]
    assert sum(plog.io.latency_buckets["write"]) - writes < 10  # one for the data, the dir's bookkeeping at most
    values = [v for _, v, _ in kp_records(plog.read_bytes(0, 1 << 20))]
    assert values == [b"%d-%d" % s for s in sends[:120]] + [b"13-40"]


def test_a_shutdown_does_not_wait_for_a_worker_stuck_in_a_held_dir(spread, log_dirs, monkeypatch):
    good, _, bad = log_dirs
    monkeypatch.setattr(manager_module, "SHUTDOWN_GRACE_S", 0.0)
    node = _Node(spread)
    rule = fsio.slow(bad, hold=True, ops={"write"})
    try:
        async def scenario():
            pending = asyncio.ensure_future(_produce(node, {"a": [0], "c": [0]}))
            await asyncio.sleep(0)
            _wait_for("the bad dir's append to block", lambda: _held_in(spread.dir_io(bad), "write"))
            with capture_logs() as logs:
                await asyncio.to_thread(spread.close)
            assert [e["log_dir"] for e in logs if e["event"] == "log_dir_stuck_at_shutdown"] == [bad]
            assert _answers(await pending)[("c", 0)][0] == ErrorCode.KAFKA_STORAGE_ERROR

        asyncio.run(scenario())
        assert bad not in spread.online_dirs
    finally:
        rule.release()


def test_a_worker_runs_what_was_submitted_in_one_pass_as_one_batch(spread, log_dirs):
    worker = spread.worker(log_dirs[0])
    assert isinstance(worker, DirWorker)
    seen: list[tuple[bool, object]] = []
    threads: list[object] = []

    async def scenario():
        import threading

        done = asyncio.Event()

        def job(i):
            threads.append(threading.current_thread().name)
            return i

        for i in range(5):
            worker.submit(lambda i=i: job(i), lambda ok, v: (seen.append((ok, v)), len(seen) == 5 and done.set()))
        worker.submit(lambda: 1 // 0, lambda ok, v: seen.append((ok, type(v).__name__)))
        await asyncio.wait_for(done.wait(), 120)
        deadline = time.monotonic() + 120
        while len(seen) < 6 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    asyncio.run(scenario())
    assert seen == [(True, i) for i in range(5)] + [(False, "ZeroDivisionError")]
    assert set(threads) == {f"kjbod-dir-worker {log_dirs[0]}"}


def test_list_offsets_by_timestamp_answers_the_healthy_dirs_while_one_is_held(spread, log_dirs):
    from kjbod.broker.handlers import list_offsets
    from kjbod.protocol.generated import ListOffsetsRequest as L

    bad = log_dirs[2]
    node = _Node(spread)
    for name in "abc":
        spread.get(name, 0).append(kp_batch([name.encode()]))
        spread.get(name, 0).segments[0].release()  # the lookup opens the segment again, through the seam

    def body(timeout_ms: int) -> L:
        return L(replica_id=-1, timeout_ms=timeout_ms, topics=[
            L.ListOffsetsTopic(name=n, partitions=[L.ListOffsetsPartition(partition_index=0, timestamp=0)])
            for n in "abc"])

    async def scenario():
        rule = fsio.slow(bad, hold=True)
        try:
            resp = await list_offsets.handle(node, _request(10), body(50))
            got = {t.name: (t.partitions[0].error_code, t.partitions[0].offset) for t in resp.topics}
            assert got == {"a": (0, 0), "b": (0, 0), "c": (ErrorCode.REQUEST_TIMED_OUT, -1)}
        finally:
            rule.release()
        resp = await list_offsets.handle(node, _request(10), body(600_000))
        assert {t.name: t.partitions[0].error_code for t in resp.topics} == {"a": 0, "b": 0, "c": 0}

    asyncio.run(scenario())


def test_deleting_a_topic_whose_dir_is_held_does_not_wait_for_it(spread, log_dirs):
    from kjbod.broker.storage_glue import StorageAdapter

    good, _, bad = log_dirs
    node = _Node(spread)
    adapter = StorageAdapter(SimpleNamespace(mover=None), spread)

    async def scenario():
        rule = fsio.slow(bad, hold=True, ops={"write"})
        try:
            pending = asyncio.ensure_future(_produce(node, {"c": [0]}))
            await asyncio.sleep(0)
            _wait_for("the bad dir's append to block", lambda: _held_in(spread.dir_io(bad), "write"))
            # Its worker holds c-0's lock in the write: the delete is left to that worker, the loop goes on.
            adapter.delete_topic_partitions("c", [0])
            adapter.delete_topic_partitions("a", [0])
            assert spread.find("a", 0) is None and spread.find("c", 0) is not None
        finally:
            rule.release()
        assert _answers(await pending)[("c", 0)] == (0, 0)

    asyncio.run(scenario())
    _wait_for("the held dir's delete to run on its worker", lambda: spread.find("c", 0) is None)
    # The partition leaves the manager's books before its dir is renamed to -delete: wait for both renames.
    _wait_for("the held dir's rename to run on its worker", lambda: "c-0" not in os.listdir(bad))
    _wait_for("the healthy dir's rename to run on its worker", lambda: "a-0" not in os.listdir(good))


def test_a_degraded_dirs_fetch_is_read_on_its_worker_not_sent_from_disk_by_the_loop(spread, log_dirs):
    node = _Node(spread)
    for name in "ac":
        spread.get(name, 0).append(kp_batch([name.encode()]))
    spread.watchdog.health[log_dirs[2]].degraded = True  # as the watchdog marks a slow dir

    async def scenario():
        return await fetch.handle(node, _request(FV), _fetch_body({"a": [0], "c": [0]}, max_wait_ms=0))

    resp = asyncio.run(scenario())
    records = {t.topic: t.partitions[0].records for t in resp.responses}
    assert isinstance(records["a"], list)  # a healthy dir's records leave as file regions (sendfile)
    assert isinstance(records["c"], bytes)  # the slow dir's were read into memory by its worker
    assert [v for _, v, _ in kp_records(records["c"])] == [b"c"]
    fetch.close_regions(resp)


def test_a_cached_read_is_served_on_the_loop_and_one_that_would_wait_goes_to_the_worker(spread):
    node = _Node(spread)
    plog = spread.get("a", 0)
    plog.append(kp_batch([b"one"]))
    plog.roll()
    plog.append(kp_batch([b"two"]))
    body = _fetch_body({"a": [0]}, max_wait_ms=0)
    resolved = fetch._resolve(node, body, FV)

    async def scenario(offset: int):
        body.topics[0].partitions[0].fetch_offset = offset
        built = fetch._build(node, resolved, body, FV, body.max_bytes, time.monotonic(), None)
        on_loop = built.__class__ is tuple
        resp, _ = built if on_loop else await built
        return on_loop, _fetched(resp)[("a", 0)]

    # The active segment's batch, in the page cache, fd open: answered on the loop, no hand-off.
    assert asyncio.run(scenario(1)) == (True, (0, [b"two"]))
    # The closed segment gave back its fd after the last read: reopening it might wait, so its worker reads it.
    plog.segments[0].release()
    assert asyncio.run(scenario(0)) == (False, (0, [b"one", b"two"]))


def test_dir_work_answers_with_what_then_returns_a_further_wait_or_its_error(spread, log_dirs):
    """A handler's answer as the future DirWork.run returns (no task per request): then() once every dir is in,
    a coroutine it returns awaited in turn (acks=all's wait), its exception the future's."""
    from kjbod.broker.dir_work import DirWork

    node = _Node(spread)
    filled: list[object] = []

    async def later(value):
        await asyncio.sleep(0)
        return value

    def refuse():
        raise ValueError("refused")

    async def scenario():
        outcomes = []
        for then in (lambda: "plain", lambda: later("awaited"), refuse):
            work = DirWork(node, lambda item, result: filled.append((item, result)), lambda item, e: None)
            work.add(log_dirs[0], "x")
            work.add(log_dirs[1], "y")
            pending = work.run(lambda items: [i.upper() for i in items], 60, then=then)
            assert pending is not None and not pending.done()
            try:
                outcomes.append(await pending)
            except ValueError as e:
                outcomes.append(str(e))
        return outcomes

    assert asyncio.run(scenario()) == ["plain", "awaited", "refused"]
    assert sorted(filled) == sorted([("x", "X"), ("y", "Y")] * 3)


def test_dir_work_hands_a_further_laters_outcome_to_its_own_through_its_steps(spread, log_dirs):
    """With later=True, a then() that returns a Later (acks=all: the wait for the HW move) gives that Later's
    outcome to the request's own, in the callback that completes it: its result through the request's steps
    (the router's encoding), its failure as the request's; a request cancelled meanwhile takes neither."""
    from kjbod.broker.dir_work import DirWork

    node = _Node(spread)

    async def scenario():
        outcomes = []
        for how in ("resolve", "fail", "cancel"):
            further = Later()
            work = DirWork(node, lambda item, result: None, lambda item, e: None)
            work.add(log_dirs[0], "x")
            asked: list[int] = []
            own = work.run(lambda items: [i.upper() for i in items], 60,
                           then=lambda f=further, a=asked: (a.append(1), f)[1], later=True)
            assert own.__class__ is Later
            own.then(lambda v: ("encoded", v))
            seen: list[Later] = []
            own.on_done(seen.append)
            for _ in range(6000):  # the dir's worker answers, then() gives `further`, which `own` waits on
                if asked:
                    break
                await asyncio.sleep(0.01)
            assert asked and not own.done()
            if how == "resolve":
                further.resolve("answer")
                outcomes.append(own.result())
            elif how == "fail":
                further.fail(ValueError("refused"))
                with pytest.raises(ValueError, match="refused"):
                    own.result()
                outcomes.append("failed")
            else:
                own.cancel()
                further.resolve("late")
                outcomes.append(own.cancelled() and not seen)
            assert seen in ([own], [])
        return outcomes

    assert asyncio.run(scenario()) == [("encoded", "answer"), "failed", True]


def test_server_process_settles_the_gc_after_start():
    """`kjbod serve` (app.run) freezes what the started node built and collects young objects every
    GC_YOUNG_THRESHOLD net allocations: requests in flight to the dir workers then die before a collection sees
    them. Checked in a child process: the test process's own GC is not the server's to change."""
    import subprocess
    import sys

    code = ("import gc\nfrom kjbod.server.app import GC_YOUNG_THRESHOLD, _settle_gc\n"
            "assert gc.get_freeze_count() == 0\n_settle_gc()\n"
            "assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD > 700, gc.get_threshold()\n"
            "assert gc.get_freeze_count() > 1000, gc.get_freeze_count()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


async def _worker_busy(worker: DirWorker) -> tuple[threading.Event, asyncio.Future]:
    """Hand ``worker`` a closure that runs until the returned gate is set (its answer: the future)."""
    started, gate = threading.Event(), threading.Event()
    first = asyncio.get_running_loop().create_future()
    worker.submit(lambda: started.set() or gate.wait(PATIENCE_S), lambda ok, v: first.set_result(v))
    await asyncio.sleep(0)  # handed over at the end of that pass
    _wait_for("the first closure to run", started.is_set)
    return gate, first


async def _release(gate: threading.Event, first: asyncio.Future, answers: list, count: int) -> None:
    gate.set()
    assert await first is True
    deadline = time.monotonic() + PATIENCE_S
    while len(answers) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


def test_what_the_loop_submits_while_a_hand_over_runs_waits_on_the_loop_and_goes_over_as_one_batch(spread, log_dirs):
    """One hand-over in flight per worker: closures submitted meanwhile (here in three passes of the loop) are
    held on the loop, not queued one wake-up each, and reach the worker together when the answers are in."""
    worker = spread.worker(log_dirs[0])
    assert isinstance(worker, DirWorker)
    batches: list[int] = []
    answers: list[object] = []

    async def scenario():
        gate, first = await _worker_busy(worker)
        for i in range(3):
            worker.submit(lambda i=i: (batches.append(id(worker._current)), i)[1], lambda ok, v: answers.append(v))
            await asyncio.sleep(0)
            assert not worker._jobs  # held on the loop while the first hand-over runs
        await _release(gate, first, answers, 3)

    asyncio.run(scenario())
    assert answers == [0, 1, 2]
    assert len(batches) == 3 and len(set(batches)) == 1  # one batch: the worker woken once for the three


def test_closures_held_on_the_loop_get_the_offline_error_when_the_dir_is_failed(spread, log_dirs):
    """A dir failed while its worker is stuck: what the loop was holding for it (a hand-over was in flight) is
    answered at once, as the stuck closure and those queued are."""
    worker = spread.worker(log_dirs[0])
    assert isinstance(worker, DirWorker)
    gate = threading.Event()
    answers: list[tuple[bool, str]] = []

    async def scenario():
        loop = asyncio.get_running_loop()
        all_in = asyncio.Event()

        def answered(ok, v):
            answers.append((ok, type(v).__name__))
            if len(answers) == 3:
                all_in.set()

        worker.submit(lambda: gate.wait(PATIENCE_S), answered)
        await asyncio.sleep(0)
        worker.submit(lambda: 1, answered)
        worker.submit(lambda: 2, answered, loop)
        await asyncio.sleep(0)
        await asyncio.to_thread(worker.abandon)
        await asyncio.wait_for(all_in.wait(), PATIENCE_S)

    try:
        asyncio.run(scenario())
    finally:
        gate.set()
    assert answers == [(False, "KafkaStorageError")] * 3


class _Heavy:
    at_once = True  # a big Produce to validate and write: not held behind a running batch

    def __init__(self, value: int) -> None:
        self.value = value

    def __call__(self) -> int:
        return self.value


def test_heavy_work_goes_over_at_once_with_what_is_held_before_it(spread, log_dirs):
    worker = spread.worker(log_dirs[0])
    assert isinstance(worker, DirWorker)
    answers: list[object] = []

    async def scenario():
        gate, first = await _worker_busy(worker)
        worker.submit(lambda: 1, lambda ok, v: answers.append(v))
        await asyncio.sleep(0)
        assert not worker._jobs  # a light closure waits on the loop for the running batch
        worker.submit(_Heavy(2), lambda ok, v: answers.append(v))
        await asyncio.sleep(0)
        assert worker._jobs  # the heavy one went over, the light one before it with it
        await _release(gate, first, answers, 2)

    asyncio.run(scenario())
    assert answers == [1, 2]


def test_requests_answered_in_time_leave_no_timer_but_the_newest_ticks(spread, log_dirs):
    """A request's timeout is kept in a 10 ms tick with one loop timer; once every request of a tick is
    answered, its timer is cancelled (it would wake the loop for nothing), except the newest tick's, which the
    next requests may join, until a later tick replaces it; and a timeout still answers."""
    from kjbod.broker import dir_work

    node = _Node(spread)
    bad = log_dirs[2]

    async def scenario():
        loop = asyncio.get_running_loop()
        deadlines = dir_work._deadlines(loop)
        for _ in range(3):
            assert _answers(await _produce(node, {"a": [0]}))[("a", 0)][0] == 0
            await asyncio.sleep(0.015)  # the next request's deadline falls in a later tick
            assert list(deadlines.ticks) == list(deadlines.timers) == [deadlines.newest]
            assert deadlines.ticks[deadlines.newest] == {}
        rule = fsio.slow(bad, hold=True, ops={"write"})
        try:
            answers = _answers(await _produce(node, {"a": [0], "c": [0]}, timeout_ms=50))
        finally:
            rule.release()
        assert answers[("a", 0)][0] == 0
        assert answers[("c", 0)] == (ErrorCode.REQUEST_TIMED_OUT, -1)
        assert all(not group for group in deadlines.ticks.values()) and len(deadlines.timers) <= 1

    asyncio.run(scenario())


def test_a_request_in_flight_takes_the_loop_running_on_its_thread_without_asking_asyncio(spread, monkeypatch):
    """DirWork takes the running loop as its thread's last one found running (asyncio.get_running_loop() is a
    getpid system call on Python 3.11): asked once per loop and thread, and still right when a thread goes on to
    another loop (asyncio.run once per scenario here) and when two threads run loops at once (each its own)."""
    from kjbod.broker import dir_work

    node = _Node(spread)
    asked: list[tuple[int, asyncio.AbstractEventLoop]] = []
    here = dir_work._here

    def counted():
        found = here()
        asked.append((threading.get_ident(), found.loop))
        return found

    monkeypatch.setattr(dir_work, "_here", counted)

    async def scenario(n: int) -> list[int]:
        offsets = []
        for _ in range(n):
            offsets.append(_answers(await _produce(node, {"a": [0], "b": [0]}, timeout_ms=60_000))[("a", 0)][1])
        return offsets

    first = asyncio.run(scenario(3))
    second = asyncio.run(scenario(2))  # a new loop on the same thread: found again, not the closed one
    assert first == [0, 1, 2] and second == [3, 4]
    assert len(asked) == 2 and asked[0][1] is not asked[1][1]

    # Two threads with loops running at once: each request's timer and answer on its own thread's loop.
    go = threading.Barrier(2)
    got: dict[str, object] = {}

    async def paired(name: str) -> None:
        # Waited for off the loop (each loop stays free to run what it is handed), and bounded: a request
        # answered on the wrong loop fails the test instead of hanging it.
        await asyncio.to_thread(go.wait, 30)
        await asyncio.wait_for(_produce(node, {name: [0]}, timeout_ms=60_000), 30)
        got[name] = asyncio.get_running_loop()
        await asyncio.to_thread(go.wait, 30)  # both loops still running while the other's request was in flight

    threads = [threading.Thread(target=lambda n=n: asyncio.run(paired(n)), daemon=True) for n in "bc"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert set(got) == {"b", "c"} and got["b"] is not got["c"]
    by_thread = {ident: loop for ident, loop in asked[2:]}
    assert len(by_thread) == 2 and set(by_thread.values()) == {got["b"], got["c"]}
