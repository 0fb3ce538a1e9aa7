"""The leader's waiting requests, in process: the acks=all purgatory (one wait per Produce request, completed by
HW moves, answered at its timeout) and a follower's long-polling Fetch, which a leader append completes and a
HW move leaves parked.  Everything is asserted by the order of events; the waits' own bounds are far beyond any
test's run (60 s), so a wake-up that never comes fails the test by its timeout instead of passing slowly."""

from __future__ import annotations

import asyncio
import os
from types import SimpleNamespace

import pytest

from kjbod.broker.handlers import fetch as fetch_handler
from kjbod.broker.node import BrokerNode
from kjbod.broker.parked_fetches import ParkedFetches
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import FetchRequest, FetchResponse
from kjbod.wire.handler import Later
from tests.replication.conftest import batch
from tests.replication.test_replica_manager import FakeNode, fetch, leader  # noqa: F401  (the fixture)

LONG_S = 60.0
FETCH_VERSION = 12  # topic names, ReplicaId in the body


class CountingParked(ParkedFetches):
    """BrokerNode's registry of parked fetches, counting how many times a fetch went (back) to waiting."""

    def __init__(self) -> None:
        super().__init__()
        self.parks = 0

    def park(self, keys, callback, *, follower: bool) -> None:
        self.parks += 1
        super().park(keys, callback, follower=follower)


class PollingNode(FakeNode):
    """The fake node with what the Fetch handler asks for, and BrokerNode's own wake-ups of long polls."""

    notify_append = BrokerNode.notify_append
    notify_high_watermark = BrokerNode.notify_high_watermark

    def __init__(self, node: FakeNode, plog: object) -> None:
        self.__dict__.update(node.__dict__)
        self.parked_fetches = CountingParked()
        self.stopping = False
        self.topic_stats = None
        self.fetch_max_bytes = 55 * 1024 * 1024  # Kafka's default fetch.max.bytes
        self.logs.manager.worker = lambda log_dir: None  # reads run inline
        self.logs.manager.dir_degraded = lambda log_dir: False
        self.partition_log = lambda topic, partition: plog
        self.local_log = self.partition_log  # the leader's own replica (a consumer's Fetch v11+ reads any local one)

    @property
    def parked(self) -> int:
        return self.parked_fetches.parks


class IdleWorker:
    """A dir's worker with nothing queued, which runs what it is handed at once (kjbod.storage.workers)."""

    io = SimpleNamespace(online=True)

    def idle(self) -> bool:
        return True

    def submit(self, job, done, loop=None) -> None:
        try:
            value = job()
        except Exception as e:
            done(False, e)
        else:
            done(True, value)


IDLE_WORKER = IdleWorker()


@pytest.fixture(params=["inline", "idle worker"])
def polling(leader, request):  # noqa: F811
    """The leader on a node whose dir reads run inline (no workers: the general way), or on one whose dir has an
    idle worker (a follower's fetch of one partition is then read on the loop by its own short way)."""
    node = PollingNode(leader.node, leader.plog)
    node.replication = leader.manager
    if request.param == "idle worker":
        node.logs.manager.worker = lambda log_dir: IDLE_WORKER
    leader.manager.node = node
    leader.node = node
    return leader


def follower_fetch(lead, replica: int, offset: int):
    body = FetchRequest(replica_id=replica, max_wait_ms=int(LONG_S * 1000), min_bytes=1, max_bytes=1 << 20,
                        topics=[FetchRequest.FetchTopic(topic="t", partitions=[FetchRequest.FetchPartition(
                            partition=0, current_leader_epoch=0, fetch_offset=offset, last_fetched_epoch=-1,
                            log_start_offset=0, partition_max_bytes=1 << 20)])])
    request = SimpleNamespace(api_version=FETCH_VERSION, ctx=SimpleNamespace(listener_kind="broker"))
    return as_future(fetch_handler.handle(lead.node, request, body))


def as_future(answer) -> asyncio.Future:
    """The handler's answer (the response, a Later of it, or a coroutine: the long way) as a future."""
    if answer.__class__ is Later:
        return _awaited(answer)
    if asyncio.iscoroutine(answer):
        return asyncio.ensure_future(answer)
    future = asyncio.get_running_loop().create_future()
    future.set_result(answer)
    return future


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def answered(resp) -> tuple[int, int, int]:
    """(error, record bytes, high watermark) of the one partition answered."""
    (part,) = resp.responses[0].partitions
    size = sum(len(r) for r in part.records) if isinstance(part.records, list) else len(part.records)
    fetch_handler.close_regions(resp)
    return part.error_code, size, part.high_watermark


async def test_a_parked_follower_fetch_is_answered_by_the_leaders_append(polling):
    polling.plog.append(batch(2), leader_epoch=0)
    fetch(polling, 2, 2)
    fetch(polling, 3, 2)
    assert polling.plog.high_watermark == 2
    waiting = follower_fetch(polling, 2, 2)  # at the log end: parks
    await settle()
    assert not waiting.done() and polling.node.parked == 1
    polling.plog.append(batch(3), leader_epoch=0)
    polling.node.notify_append("t", 0)  # what the Produce handler does once its dir appended
    error, size, _hw = answered(await asyncio.wait_for(waiting, LONG_S))
    assert error == 0 and size > 0
    assert polling.node.parked == 1  # answered on its first wake-up


async def test_a_high_watermark_move_leaves_a_follower_fetch_parked(polling):
    polling.plog.append(batch(2), leader_epoch=0)
    fetch(polling, 3, 2)  # broker 3 has everything; broker 2 has not fetched yet
    waiting = follower_fetch(polling, 3, 2)
    await settle()
    assert polling.node.parked == 1
    consumer = consumer_fetch(polling, 0, ("t", 0))  # at the HW, 0: parks
    await settle()
    assert not consumer.done() and polling.node.parked == 2
    fetch(polling, 2, 2)  # broker 2 catches up: the HW moves to 2
    assert polling.plog.high_watermark == 2
    assert answered(await asyncio.wait_for(consumer, LONG_S))[:2] == (0, len(polling.plog.read_bytes(0, 1 << 20)))
    await settle()  # the consumer long-polling at the old HW was woken and read; broker 3's fetch was not woken:
    assert not waiting.done() and polling.node.parked == 2  # nothing new to read
    polling.plog.append(batch(1), leader_epoch=0)
    polling.node.notify_append("t", 0)
    assert answered(await asyncio.wait_for(waiting, LONG_S))[0] == 0


def consumer_fetch(lead, offset: int, *partitions: tuple[str, int]) -> asyncio.Future:
    """A consumer's long poll (replica id -1) of `partitions` at `offset` (the fake node has one log for all)."""
    topics: dict[str, list] = {}
    for name, index in partitions:
        topics.setdefault(name, []).append(FetchRequest.FetchPartition(
            partition=index, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
            partition_max_bytes=1 << 20))
    body = FetchRequest(replica_id=-1, max_wait_ms=int(LONG_S * 1000), min_bytes=1, max_bytes=1 << 20,
                        topics=[FetchRequest.FetchTopic(topic=name, partitions=parts) for name, parts in topics.items()])
    request = SimpleNamespace(api_version=FETCH_VERSION, ctx=SimpleNamespace(listener_kind="broker"))
    return as_future(fetch_handler.handle(lead.node, request, body))


async def test_a_parked_follower_fetch_is_woken_by_appends_to_its_own_partition_only(polling):
    """Kafka's DelayedFetch is watched per partition: an append to another partition leaves it parked, with no
    look at its partitions (it does not even go back to waiting), an append to its own answers it."""
    polling.plog.append(batch(2), leader_epoch=0)
    parked = follower_answer(polling, 2, 2)
    assert parked.__class__ is Later and polling.node.parked == 1
    assert polling.node.parked_fetches.count(("t", 0)) == 1 and polling.node.parked_fetches.count(("t", 1)) == 0
    polling.node.notify_append("t", 1)
    polling.node.notify_append("other", 0)
    polling.node.notify_high_watermark("t", 0)  # a follower reads to the log end: a HW move is nothing to it
    assert not parked.done() and polling.node.parked == 1
    polling.plog.append(batch(1), leader_epoch=0)
    polling.node.notify_append("t", 0)
    assert parked.done()
    assert answered(parked.result())[:2] == (0, len(polling.plog.read_bytes(2, 1 << 20)))
    assert polling.node.parked_fetches.count() == 0


async def test_a_long_poll_of_several_partitions_is_woken_by_any_of_them_and_leaves_the_others(polling):
    """A consumer's fetch of t-0 and t-1 parks under both (the fake node's one log stands for both): an append or
    HW move elsewhere leaves it parked; an append to t-1 wakes it (nothing to read below the HW: it parks again,
    once); the HW move of t-0 that follows answers it, and it is parked under neither any more."""
    registry = polling.node.parked_fetches
    polling.plog.append(batch(2), leader_epoch=0)
    fetch(polling, 2, 2)
    fetch(polling, 3, 2)
    assert polling.plog.high_watermark == 2
    consumer = consumer_fetch(polling, 2, ("t", 0), ("t", 1))
    await settle()
    assert not consumer.done() and polling.node.parked == 1
    assert registry.count(("t", 0)) == registry.count(("t", 1)) == 1
    polling.node.notify_append("other", 0)
    polling.node.notify_high_watermark("other", 0)
    await settle()
    assert not consumer.done() and polling.node.parked == 1  # never woken
    polling.plog.append(batch(1), leader_epoch=0)  # the leader's LEO 3; its HW stays 2 until the followers fetch
    polling.node.notify_append("t", 1)
    await settle()
    assert not consumer.done() and polling.node.parked == 2  # woken once, nothing to read: parked again
    assert registry.count(("t", 0)) == registry.count(("t", 1)) == 1
    fetch(polling, 2, 3)
    fetch(polling, 3, 3)  # the HW moves to 3: the manager wakes t-0's consumers
    error, size, hw = answered_all(await asyncio.wait_for(consumer, LONG_S))
    assert error == 0 and hw == 3 and size == 2 * len(polling.plog.read_bytes(2, 1 << 20))
    assert registry.count() == 0 and polling.node.parked == 2


def answered_all(resp) -> tuple[int, int, int]:
    """(the first error, record bytes, the smallest high watermark) over every partition answered."""
    parts = [p for t in resp.responses for p in t.partitions]
    size = sum(sum(len(r) for r in p.records) if isinstance(p.records, list) else len(p.records) for p in parts)
    fetch_handler.close_regions(resp)
    return next((p.error_code for p in parts if p.error_code), 0), size, min(p.high_watermark for p in parts)


async def test_one_produce_request_waits_for_each_of_its_partitions(polling):
    manager = polling.manager
    polling.plog.append(batch(4), leader_epoch=0)
    # Two waits in one request on the same partition, as a request spanning partitions has several.
    done = manager.delay_produce([("t", 0, 2), ("t", 0, 4)], LONG_S)
    fetch(polling, 2, 4)
    fetch(polling, 3, 2)
    await settle()
    assert not done.done()  # the HW is at 2: the first is replicated, the second is not yet
    fetch(polling, 3, 4)
    assert await done == [0, 0]
    assert manager._waiters == {("t", 0): []}


async def test_an_acks_all_answer_is_complete_when_the_hw_passes_it_with_no_task_in_between(polling):
    """The Produce answer (a Later) is done by the follower fetch that moves the HW itself (no task to step, no
    loop pass: an asyncio future's callbacks would wait for one), with each partition's code written into the
    answer; a code other than 0 (here the timeout of a second request) lands in its partition."""
    from kjbod.broker.replication import hooks
    from kjbod.protocol.generated.produce_response import (
        PartitionProduceResponse,
        ProduceResponse,
        TopicProduceResponse,
    )

    polling.plog.append(batch(2), leader_epoch=0)
    part = PartitionProduceResponse(index=0, error_code=0, base_offset=0)
    response = ProduceResponse(responses=[TopicProduceResponse(name="t", partition_responses=[part])])
    tasks = len(asyncio.all_tasks())
    answer = hooks.await_replication(polling.node, response, [("t", part, 2)], int(LONG_S * 1000))
    assert answer.__class__ is Later and len(asyncio.all_tasks()) == tasks
    written: list[object] = []
    answer.on_done(lambda done: written.append(done.result()))  # what the connection does with it
    fetch(polling, 2, 2)
    assert not answer.done()  # broker 3 has not fetched it yet
    fetch(polling, 3, 2)
    assert written == [response] and part.error_code == 0  # in the fetch's own call: no loop pass

    late = PartitionProduceResponse(index=0, error_code=0, base_offset=2)
    polling.plog.append(batch(1), leader_epoch=0)
    timed_out = hooks.await_replication(polling.node, ProduceResponse(), [("t", late, 3)], 0)
    await asyncio.wait_for(_awaited(timed_out), LONG_S)
    assert late.error_code == ErrorCode.REQUEST_TIMED_OUT


def _awaited(later: Later) -> asyncio.Future:
    future = asyncio.get_running_loop().create_future()
    later.on_done(lambda done: future.set_result(done.result()))
    return future


async def test_a_produce_handed_to_the_dirs_is_answered_in_the_callback_that_completes_its_acks_all_wait():
    """DirWork's answer (a Later) chains the acks=all Later its then() returns: the HW move's callback completes
    both, so the answer is queued for writing with no loop pass between (dir_work._copy_later)."""
    from kjbod.broker.dir_work import DirWork, _Waiting

    class Worker:
        def submit(self, call, done, loop) -> None:
            self.call, self.done = call, done

    acks_all = Later()
    work = DirWork(SimpleNamespace(logs=None), lambda item, result: None, lambda item, e: None)
    worker = Worker()
    outer = _Waiting(work, lambda items: [x.upper() for x in items], [(worker, ["x"])], None,
                     lambda: acks_all, True).future
    worker.done(True, worker.call())  # the dir's append is in: the request now waits for the HW
    assert outer.__class__ is Later and not outer.done()
    acks_all.resolve("the answer")
    assert outer.done() and outer.result() == "the answer"
    failing = Later()
    outer = _Waiting(work, lambda items: items, [(worker, ["y"])], None, lambda: failing, True).future
    worker.done(True, worker.call())
    failing.fail(ValueError("bug"))
    with pytest.raises(ValueError, match="bug"):
        outer.result()


async def test_a_request_timing_out_answers_what_waits_and_leaves_the_purgatory(polling):
    manager = polling.manager
    polling.plog.append(batch(4), leader_epoch=0)
    fetch(polling, 2, 4)
    fetch(polling, 3, 2)
    codes = await manager.delay_produce([("t", 0, 2), ("t", 0, 4), ("nope", 0, 1)], 0)
    assert codes == [0, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_LEADER_OR_FOLLOWER]
    assert manager._waiters == {("t", 0): []}


async def test_leadership_loss_and_shutdown_answer_every_waiting_request(polling):
    from tests.replication.test_replica_manager import image

    manager = polling.manager
    polling.plog.append(batch(2), leader_epoch=0)
    first = manager.delay_produce([("t", 0, 2)], LONG_S)
    manager.sync(image(leader=2, leader_epoch=1, partition_epoch=1))
    assert await first == [ErrorCode.NOT_LEADER_OR_FOLLOWER]
    manager.sync(image(leader_epoch=2, partition_epoch=2))
    polling.plog.append(batch(1), leader_epoch=2)
    second = manager.delay_produce([("t", 0, 3)], LONG_S)
    await manager.close()
    assert await second == [ErrorCode.NOT_LEADER_OR_FOLLOWER]



async def test_a_followers_small_read_goes_out_as_bytes_and_a_backlog_as_file_regions(polling):
    """A caught-up follower's answer (a batch or two) is copied into the answer, one write with its header; a
    backlog above SMALL_FOLLOWER_READ stays zero-copy. Both carry exactly the log's bytes from the fetch offset."""
    polling.plog.append(batch(2), leader_epoch=0)
    answer = await asyncio.wait_for(follower_fetch(polling, 2, 0), LONG_S)
    (part,) = answer.responses[0].partitions
    assert part.records.__class__ is bytes
    assert part.records == polling.plog.read_bytes(0, 1 << 20)
    assert polling.plog.log_end_offset == 2

    big = b"x" * 1024
    while polling.plog.log_end_offset < 2 + 2 * fetch_handler.SMALL_FOLLOWER_READ // len(big):
        polling.plog.append(batch(1, tag=big), leader_epoch=0)
    answer = await asyncio.wait_for(follower_fetch(polling, 3, 0), LONG_S)
    (part,) = answer.responses[0].partitions
    assert isinstance(part.records, list) and part.records
    sent = b"".join(region_bytes(r) for r in part.records)
    fetch_handler.close_regions(answer)
    assert sent == polling.plog.read_bytes(0, 1 << 20)


def region_bytes(region) -> bytes:
    return os.pread(region.fd, region.count, region.offset)


async def test_a_follower_read_is_one_read_of_file_regions_copied_only_when_small(polling, monkeypatch):
    """A caught-up follower's few bytes are read from the last appends' positions in one pread
    (PartitionLog.read_to_end); otherwise regions first, with the whole budget: a few bytes are copied out of
    them, a follower behind gets them as they are; neither pays a read it throws away (the bytes read of the old
    way, ~3% extra reads while a follower was behind)."""
    reads: list[str] = []
    real_read, real_bytes, real_to_end = polling.plog.read, polling.plog.read_bytes, polling.plog.read_to_end
    monkeypatch.setattr(polling.plog, "read", lambda *a, **k: reads.append("regions") or real_read(*a, **k))
    monkeypatch.setattr(polling.plog, "read_bytes", lambda *a, **k: reads.append("bytes") or real_bytes(*a, **k))
    monkeypatch.setattr(polling.plog, "read_to_end", lambda *a: reads.append("to_end") or real_to_end(*a))
    polling.plog.append(batch(2), leader_epoch=0)
    polling.plog.append(batch(1), leader_epoch=0)
    small, _hw, _lso = fetch_handler._small_read(polling.plog, 2, 1 << 20)
    assert small == real_bytes(2, 1 << 20) and reads == ["to_end"]
    small, _hw, _lso = fetch_handler._small_read(polling.plog, 1, 1 << 20)  # not where an append began
    assert small.__class__ is bytes and small == real_bytes(1, 1 << 20) and reads == ["to_end", "to_end", "regions"]
    big = b"x" * 1024
    while polling.plog.log_end_offset < 3 + 2 * fetch_handler.SMALL_FOLLOWER_READ // len(big):
        polling.plog.append(batch(1, tag=big), leader_epoch=0)
    reads.clear()
    behind, _hw, _lso = fetch_handler._small_read(polling.plog, 0, 1 << 20)
    assert isinstance(behind, list) and reads == ["to_end", "regions"]
    for r in behind:
        r.close()


async def test_a_small_read_the_page_cache_cannot_answer_closes_its_regions_for_the_worker(polling, monkeypatch):
    """On the loop (fsio.no_waiting) a region's bytes come from the page cache only: when they cannot, the read
    gives up with WouldBlock (the dir's worker reads it again) and closes the regions it held."""
    from kjbod.storage import fsio

    polling.plog.append(batch(2), leader_epoch=0)
    held = []
    real_read = polling.plog.read

    def read(*a, **k):
        result = real_read(*a, **k)
        held.extend(result.regions)
        return result

    real_pread = fsio.pread_region

    def not_cached(fd, n, offset, what):  # the log's own reads found it cached; the region's bytes are not
        if not fsio.waiting_allowed():
            raise fsio.WouldBlock(f"read {what}: not cached")
        return real_pread(fd, n, offset, what)

    monkeypatch.setattr(polling.plog, "read", read)
    monkeypatch.setattr(polling.plog, "read_to_end", lambda *a: None)  # a read the last appends' ends do not answer
    monkeypatch.setattr(fsio, "pread_region", not_cached)
    with pytest.raises(fsio.WouldBlock), fsio.no_waiting():
        fetch_handler._small_read(polling.plog, 0, 1 << 20)
    assert held and all(r.closed for r in held)
    data, _hw, _lso = fetch_handler._small_read(polling.plog, 0, 1 << 20)  # waiting allowed: a plain pread
    assert data == polling.plog.read_bytes(0, 1 << 20)


def follower_answer(lead, replica: int, offset: int, max_wait_ms: int = int(LONG_S * 1000)):
    """The Fetch handler's own answer to a follower's fetch (the response, or a Later of it)."""
    body = FetchRequest(replica_id=replica, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20,
                        topics=[FetchRequest.FetchTopic(topic="t", partitions=[FetchRequest.FetchPartition(
                            partition=0, current_leader_epoch=0, fetch_offset=offset, last_fetched_epoch=-1,
                            log_start_offset=0, partition_max_bytes=1 << 20)])])
    request = SimpleNamespace(api_version=FETCH_VERSION, ctx=SimpleNamespace(listener_kind="broker"))
    return fetch_handler.handle(lead.node, request, body)


async def test_a_parked_follower_fetch_is_answered_in_the_appends_own_callback_with_no_task(polling):
    """Kafka's DelayedFetch by callbacks: a follower's fetch with data waiting is answered at once (the response
    itself), one at the log end is a Later that the append's notification completes in its own call, with the
    bytes appended; nothing stays registered for later appends."""
    polling.plog.append(batch(2), leader_epoch=0)
    tasks = len(asyncio.all_tasks())
    at_once = follower_answer(polling, 2, 0)
    assert at_once.__class__ is FetchResponse
    assert answered(at_once)[:2] == (0, len(polling.plog.read_bytes(0, 1 << 20)))
    parked = follower_answer(polling, 3, 2)
    assert parked.__class__ is Later and not parked.done() and len(asyncio.all_tasks()) == tasks
    polling.plog.append(batch(3), leader_epoch=0)
    polling.node.notify_append("t", 0)
    assert parked.done()  # in notify_append's call: no loop pass
    (part,) = parked.result().responses[0].partitions
    assert part.error_code == 0 and part.records == polling.plog.read_bytes(2, 1 << 20)
    assert polling.node.parked_fetches.count() == 0


async def test_a_parked_follower_fetch_ends_at_its_wait_and_leaves_nothing_registered(polling):
    polling.plog.append(batch(2), leader_epoch=0)
    parked = follower_answer(polling, 2, 2, max_wait_ms=1)
    assert parked.__class__ is Later
    error, size, hw = answered(await asyncio.wait_for(_awaited(parked), LONG_S))
    assert (error, size) == (0, 0)
    assert polling.node.parked_fetches.count() == 0  # an idle partition's fetches, one after another, pile nothing up


async def test_a_parked_follower_fetch_whose_connection_went_is_dropped_and_shutdown_answers_the_rest(polling):
    polling.plog.append(batch(2), leader_epoch=0)
    gone = follower_answer(polling, 2, 2)
    waiting = follower_answer(polling, 3, 2)
    gone.cancel()  # what the connection does with its queued replies when it closes
    polling.node.stopping = True  # BrokerNode.begin_shutdown: stopping, then every parked fetch woken
    polling.node.parked_fetches.wake_all()
    assert gone.cancelled()
    assert waiting.done() and answered(waiting.result())[:2] == (0, 0)  # nothing new: answered empty, at once
    assert polling.node.parked_fetches.count() == 0


async def test_a_one_partition_follower_fetch_gets_from_the_short_way_what_the_general_way_answers(polling,
                                                                                                   monkeypatch):
    """The short way (_FollowerFetch._answer_single: an idle dir, one partition, read on the loop) answers the
    bytes the general way (the dirs' hand-off, the response assembled per partition) does, at once and parked."""
    polling.plog.append(batch(2), leader_epoch=0)
    fetch(polling, 3, 2)
    fetch(polling, 2, 2)  # the HW at 2, where the fetches below leave it
    taken = short_way_answers(monkeypatch)
    parked = follower_answer(polling, 2, 2)
    polling.plog.append(batch(1), leader_epoch=0)
    polling.node.notify_append("t", 0)
    assert parked.done()
    answers = [follower_answer(polling, 2, 0), parked.result()]
    monkeypatch.setattr(fetch_handler, "_single", lambda *a: None)  # the general way from here on
    general = [follower_answer(polling, 2, 0), follower_answer(polling, 2, 2)]
    short_way = polling.node.logs.manager.worker("d") is IDLE_WORKER
    assert taken == ([True, True, True] if short_way else [])  # parked, then woken; at once
    for got, want in zip(answers, general, strict=True):
        assert got.__class__ is want.__class__ is FetchResponse
        assert got.encode(FETCH_VERSION) == want.encode(FETCH_VERSION)
        assert answered(got)[1] > 0
        fetch_handler.close_regions(want)


def short_way_answers(monkeypatch) -> list[bool]:
    """From now on, one entry per look the short way (_FollowerFetch._answer_single) takes at a fetch: True
    when it answered (or parked) the fetch itself, False when it handed it to the general way."""
    taken: list[bool] = []
    real = fetch_handler._FollowerFetch._answer_single

    def spy(self, single):
        out = real(self, single)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(fetch_handler._FollowerFetch, "_answer_single", spy)
    return taken
