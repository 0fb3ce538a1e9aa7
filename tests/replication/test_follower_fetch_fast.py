"""The leader's short way for a replica fetcher's Fetch (kjbod.broker.handlers.follower_fetch_fast), in process,
through the router as the connection calls it (frames in, reply bytes out), on a leader whose dir has an idle
worker: every answer it gives must be the bytes, and leave the HW and the follower's position, that the general
way gives for the same fetch. Each test runs the same fetches on two leaders holding the same log, one with the
short way and one without it, and compares them; and it checks which way answered, so a short way that never
runs cannot pass for one that answers right."""

from __future__ import annotations

import asyncio
import os
import struct
from types import SimpleNamespace

import pytest

from kjbod.broker.handlers import fetch as fetch_handler
from kjbod.broker.handlers import follower_fetch_fast as fast
from kjbod.broker.replication import ReplicaManager, ReplicationConfig
from kjbod.broker.router import Router
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import FetchRequest, FetchResponse
from kjbod.protocol.generated.fetch_response import FetchableTopicResponse, PartitionData
from kjbod.storage.records import build_batch
from kjbod.wire.handler import Later, RequestContext
from kjbod.wire.region import FileRegion
from tests.replication.test_purgatory import IDLE_WORKER, PollingNode
from tests.replication.test_replica_manager import EPOCHS, TOPIC_ID, Clock, FakeNode, image

WAIT_MS = 60_000  # beyond any test's run: a fetch that should be woken and is not fails by its timeout


class Leader:
    """Broker 1 leading t-0 (RF 3, brokers 2 and 3 following), with a router; `short` says whether its router
    may answer by the short way."""

    def __init__(self, make_log, short: bool) -> None:
        plog = make_log("t-0")
        node = FakeNode(1, plog, image())
        self.clock = Clock()
        self.manager = ReplicaManager(node, ReplicationConfig(lag_time_max_ms=30_000), clock=self.clock)
        self.manager.sync(node.metadata)
        self.node = PollingNode(node, plog)
        self.node.replication = self.manager
        self.node.logs.manager.worker = lambda log_dir: IDLE_WORKER
        self.manager.node = self.node
        self.plog = plog
        self.router = Router(self.node)
        if not short:
            for route in self.router._routes.values():
                route.follower_fetch = None
        self.ctx = {r: RequestContext(100 + r, "127.0.0.1", 40000 + r, "PLAINTEXT", "broker") for r in (2, 3)}
        self.corr = 0
        self.counted: list[tuple] = []  # what the metrics were told, in order
        self.node.topic_stats = Counted(self.counted)
        self.router.stats = self.node.topic_stats

    def append(self, n: int = 1, size: int = 10) -> None:
        """`n` records of `size` bytes, the same bytes on both leaders (a fixed timestamp)."""
        records = [(None, b"v" * size, (), 1_700_000_000_000) for _ in range(n)]
        self.plog.append(build_batch(records, partition_leader_epoch=0), leader_epoch=0)
        self.manager.leader_appended("t", 0)
        self.node.notify_append("t", 0)

    def fetch(self, replica: int, offset: int, **kw):
        """The router's reply to the follower's fetch frame: bytes, or a Later of them."""
        self.corr += 1
        return self.router.handle(frame(self.corr, replica, offset, **kw), self.ctx[replica])

    def follower(self, replica: int) -> tuple[int, int]:
        f = self.manager.states[("t", 0)].followers[replica]
        return f.log_end_offset, f.broker_epoch


class Counted:
    """The metrics' counters (kjbod.metrics) a follower's fetch reaches, as a list of what they were told: the
    request counted as FetchFollower, the partition's answer, the response's error code."""

    def __init__(self, counted: list[tuple]) -> None:
        self.counted = counted
        self.requests = self

    def follower_fetch(self) -> None:
        self.counted.append(("FetchFollower",))

    def fetched(self, topic: str, code: int, nbytes: int) -> None:
        self.counted.append(("fetched", topic, code, nbytes))

    def error(self, api_key: int, code: int) -> None:
        self.counted.append(("error", api_key, code))


def frame(corr: int, replica: int, offset: int, *, version: int = 17, last_epoch: int = 0, max_bytes: int = 1 << 20,
          isolation: int = 0, leader_epoch: int = 0, wait_ms: int = WAIT_MS, min_bytes: int = 1,
          log_start: int = 0) -> bytes:
    """A follower's Fetch frame as a replica fetcher sends it (header v2, then the body)."""
    part = FetchRequest.FetchPartition(partition=0, current_leader_epoch=leader_epoch, fetch_offset=offset,
                                       last_fetched_epoch=last_epoch, log_start_offset=log_start,
                                       partition_max_bytes=1 << 20)
    topic = (FetchRequest.FetchTopic(topic_id=TOPIC_ID, partitions=[part]) if version >= 13
             else FetchRequest.FetchTopic(topic="t", partitions=[part]))
    body = FetchRequest(max_wait_ms=wait_ms, min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=isolation,
                        topics=[topic])
    if version >= 15:
        body.replica_state = FetchRequest.ReplicaState(replica_id=replica, replica_epoch=EPOCHS[replica])
    else:
        body.replica_id = replica
    return struct.pack(">hhih", 1, version, corr, 4) + b"kjbd" + b"\x00" + body.encode(version)


def reply_bytes(reply) -> bytes:
    if reply.__class__ is Later:
        assert reply.done()
        reply = reply.result()
    return reply if reply.__class__ is bytes else b"".join(reply)


def decoded(reply, version: int = 17) -> FetchResponse:
    return FetchResponse.decode(reply_bytes(reply)[5:], version)


@pytest.fixture
def pair(make_log):
    return Leader(make_log, short=True), Leader(make_log, short=False)


@pytest.fixture
def taken(monkeypatch) -> list[bool]:
    """One entry per fetch the short way looked at: True when it answered it."""
    seen: list[bool] = []
    real = fast.answer

    def spy(*args):
        out = real(*args)
        seen.append(out is not None)
        return out

    monkeypatch.setattr(fast, "answer", spy)
    return seen


@pytest.fixture
def reads(pair, monkeypatch) -> list[int]:
    """The offsets the short way's leader reads its log from (PartitionLog.read_to_end_cached, or read_to_end:
    one pread each)."""
    seen: list[int] = []
    for name in ("read_to_end", "read_to_end_cached"):
        real = getattr(type(pair[0].plog), name)

        def counted(plog, offset, max_bytes, real=real):
            if plog is pair[0].plog:
                seen.append(offset)
            return real(plog, offset, max_bytes)

        monkeypatch.setattr(type(pair[0].plog), name, counted)
    return seen


def both(pair, replica: int, offset: int, **kw) -> tuple[bytes, bytes]:
    """The same fetch on both leaders; their replies, which must be the same bytes."""
    got = [lead.fetch(replica, offset, **kw) for lead in pair]
    return got[0], got[1]


def same_state(pair) -> None:
    short, general = pair
    assert short.plog.high_watermark == general.plog.high_watermark
    assert short.counted == general.counted
    for r in (2, 3):
        assert short.follower(r) == general.follower(r)


@pytest.mark.parametrize("version", range(12, 18))
@pytest.mark.parametrize("isolation", [0, 1])
async def test_the_short_ways_answers_are_the_general_ways_bytes(pair, taken, version, isolation):
    """At every version a follower may use, both isolation levels, record sizes whose length takes one, two and
    three varint bytes: the answer at once and the answer of a parked fetch woken by an append."""
    for lead in pair:
        lead.append(2)
    for r in (2, 3):  # the first look learns the shape (the general way answers it)
        a, b = both(pair, r, 0, version=version, isolation=isolation)
        assert reply_bytes(a) == reply_bytes(b)
    offset = 2
    for size in (10, 200, 20_000):
        parked = both(pair, 3, offset, version=version, isolation=isolation)
        assert all(p.__class__ is Later and not p.done() for p in parked)
        for lead in pair:
            lead.append(1, size)
        assert reply_bytes(parked[0]) == reply_bytes(parked[1])
        a, b = both(pair, 2, offset, version=version, isolation=isolation)  # at once: the records are there
        assert reply_bytes(a) == reply_bytes(b) and a.__class__ is bytes
        assert len(decoded(a, version).responses[0].partitions[0].records) > size
        offset = pair[0].plog.log_end_offset
        same_state(pair)
    assert taken == [False, False] + [True, True] * 3
    assert pair[0].counted.count(("FetchFollower",)) == 8  # once per fetch, however it was answered


async def test_a_caught_up_followers_fetches_move_the_hw_and_complete_acks_all_as_the_general_way(pair, taken):
    answers = []
    for lead in pair:
        lead.append(3)
        answers.append(lead.manager.delay_produce([("t", 0, 3)], 60.0))
    for r in (2, 3):
        both(pair, r, 0)  # learned
        both(pair, r, 3)  # the short way: the followers reach the LEO, the HW follows
    same_state(pair)
    assert pair[0].plog.high_watermark == 3
    for a in answers:
        assert a.done() and a.result() == [0]
    assert taken == [False, True, False, True]


async def test_a_followers_log_start_reaches_the_leader_by_the_short_way_too(pair, taken):
    """DeleteRecords' low watermark is the smallest log start of the replicas: a fetch the short way answers must
    pass the follower's LogStartOffset on as the general way does."""
    for lead in pair:
        lead.append(6)
    both(pair, 2, 0)  # learned, log start 0
    both(pair, 2, 3, log_start=2)
    same_state(pair)
    assert [lead.manager.states[("t", 0)].followers[2].log_start_offset for lead in pair] == [2, 2]
    assert taken == [False, True]


async def test_a_changed_shape_goes_the_general_way_and_is_learned_again(pair, taken):
    for lead in pair:
        lead.append(2)
    both(pair, 2, 0)
    a, b = both(pair, 2, 0, max_bytes=1 << 19)  # another shape: the general way, which keeps it
    assert reply_bytes(a) == reply_bytes(b)
    a, b = both(pair, 2, 0, max_bytes=1 << 19)
    assert reply_bytes(a) == reply_bytes(b)
    assert taken == [False, False, True]


async def test_a_new_image_or_leader_epoch_makes_the_general_way_check_again(pair, taken):
    for lead in pair:
        lead.append(2)
    both(pair, 2, 0)
    for lead in pair:  # the same partition, a new image (a delta elsewhere): checked again, then short again
        lead.node.metadata = image()
        lead.manager.sync(lead.node.metadata)
    both(pair, 2, 0)
    both(pair, 2, 0)
    assert taken == [False, False, True]
    for lead in pair:  # a new leader epoch: the follower's fetch in the old one is fenced
        lead.node.metadata = image(leader_epoch=1, partition_epoch=1)
        lead.manager.sync(lead.node.metadata)
    a, b = both(pair, 2, 2)
    assert reply_bytes(a) == reply_bytes(b)
    assert decoded(a).responses[0].partitions[0].error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert taken[-1] is False


async def test_an_isr_change_makes_the_general_way_check_again(pair, taken):
    for lead in pair:
        lead.append(2)
    both(pair, 2, 0)
    for lead in pair:
        lead.manager.states[("t", 0)].isr = (1, 2)
    both(pair, 2, 0)
    assert taken == [False, False]


async def test_fetches_the_checks_refuse_go_the_general_way_which_answers_their_errors(pair, taken):
    for lead in pair:
        lead.append(2)
    both(pair, 2, 0)
    a, b = both(pair, 2, 5, last_epoch=-1)  # past the log end
    assert reply_bytes(a) == reply_bytes(b)
    assert decoded(a).responses[0].partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    for lead in pair:
        lead.node.metadata = image(leader_epoch=1, partition_epoch=1)
        lead.manager.sync(lead.node.metadata)
        lead.append(1)
    both(pair, 2, 2, leader_epoch=1, last_epoch=0)  # learned in epoch 1
    a, b = both(pair, 2, 2, leader_epoch=1, last_epoch=3)  # an epoch this leader never had
    assert reply_bytes(a) == reply_bytes(b)
    assert decoded(a).responses[0].partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    a, b = both(pair, 2, 3, leader_epoch=1, last_epoch=0)  # past epoch 0's end (2): where to truncate
    assert reply_bytes(a) == reply_bytes(b)
    part = decoded(a).responses[0].partitions[0]
    assert (part.error_code, part.diverging_epoch.epoch, part.diverging_epoch.end_offset) == (0, 0, 2)
    # At the latest epoch (1: the short way skips the epoch lookup) past the log end (3): the general way's answer.
    a, b = both(pair, 2, 4, leader_epoch=1, last_epoch=1)
    assert reply_bytes(a) == reply_bytes(b)
    part = decoded(a).responses[0].partitions[0]
    assert (part.error_code, part.diverging_epoch.epoch, part.diverging_epoch.end_offset) == (0, 1, 3)
    assert taken == [False, False, False, False, False, False]
    same_state(pair)


def parked_at_the_log_end(pair, taken) -> tuple[Later, Later]:
    """Follower 2's fetch at the log end (2) on both leaders, the short way's parked by the short way."""
    for lead in pair:
        lead.append(2)
    both(pair, 2, 2)  # learned
    parked = both(pair, 2, 2)
    assert taken[-1] is True and all(p.__class__ is Later and not p.done() for p in parked)
    return parked


async def test_a_parked_fetch_at_shutdown_or_at_its_wait_is_answered_empty_as_the_general_way(pair, taken):
    parked = parked_at_the_log_end(pair, taken)
    for lead in pair:
        lead.node.stopping = True
        lead.node.parked_fetches.wake_all()
    assert reply_bytes(parked[0]) == reply_bytes(parked[1])
    assert not decoded(parked[0]).responses[0].partitions[0].records
    for lead in pair:
        lead.node.stopping = False
        assert lead.node.parked_fetches.count() == 0
    quick = both(pair, 3, 2, wait_ms=1)
    both(pair, 3, 2, wait_ms=1)  # learned, then short
    answered = [await asyncio.wait_for(_done(p), 60) for p in quick]
    assert answered[0] == answered[1]


async def test_a_parked_fetch_whose_connection_went_is_dropped(pair, taken):
    lead = pair[0]
    lead.append(2)
    lead.fetch(2, 2)
    parked = lead.fetch(2, 2)
    assert taken == [False, True]
    parked.cancel()
    lead.append(1)
    assert parked.cancelled() and lead.node.parked_fetches.count() == 0


async def _done(reply) -> bytes:
    if reply.__class__ is Later:
        while not reply.done():
            await asyncio.sleep(0.01)
    return reply_bytes(reply)


def test_the_answer_packed_by_hand_is_the_generated_encoders_for_the_plain_answer():
    """The fixed bytes a shape keeps, with the changing fields packed, against the generated encoder."""
    for version in range(12, 18):
        for committed in (False, True):
            for records in (b"x" * 5, b"y" * 300, b"z" * 20_000):
                topic = (FetchableTopicResponse(topic_id=TOPIC_ID) if version >= 13
                         else FetchableTopicResponse(topic="t"))
                topic.partitions = [PartitionData(
                    partition_index=0, error_code=0, high_watermark=7, last_stable_offset=7, log_start_offset=1,
                    aborted_transactions=[] if committed else None, records=records)]
                resp = FetchResponse(error_code=0, session_id=0, responses=[topic])
                want = struct.pack(">iB", 9, 0) + resp.encode(version)
                assert fast.plain_answer(version, "t", TOPIC_ID, 0, committed, 9, 7, 1, records) == want


async def test_a_fetch_at_another_version_on_the_same_connection_goes_the_general_way(pair, taken):
    """v15 and v16 fetches have the same bytes; their answers are told apart by the version alone."""
    for lead in pair:
        lead.append(2)
    both(pair, 2, 0, version=15)
    a, b = both(pair, 2, 0, version=16)
    assert reply_bytes(a) == reply_bytes(b)
    both(pair, 2, 0, version=16)
    assert taken == [False, False, True]
    same_state(pair)


def materialized(reply) -> bytes:
    """A reply's bytes with its file regions read (and closed), as the connection would send them."""
    if reply.__class__ is Later:
        assert reply.done()
        reply = reply.result()
    out = []
    for part in [reply] if reply.__class__ is bytes else reply:
        if isinstance(part, FileRegion):
            out.append(os.pread(part.fd, part.count, part.offset))
            part.close()
        else:
            out.append(bytes(part))
    return b"".join(out)


async def test_a_read_over_the_small_read_size_is_the_general_ways_at_once_and_parked(pair, taken):
    """Past SMALL_FOLLOWER_READ the answer is file regions: the short way hands the read to the general way,
    whose answer it gives."""
    big = fetch_handler.SMALL_FOLLOWER_READ + 1000
    for lead in pair:
        lead.append(1)
    offset = pair[0].plog.log_end_offset
    both(pair, 2, offset)
    parked = both(pair, 2, offset)
    for lead in pair:
        lead.append(1, big)
    assert materialized(parked[0]) == materialized(parked[1])
    for lead in pair:
        lead.append(1, big)
    a, b = both(pair, 2, offset)
    sent = materialized(a)
    assert sent == materialized(b) and len(sent) > 2 * big
    assert taken == [False, True, True]
    same_state(pair)


async def test_the_followers_one_append_wakes_share_one_read_and_answer_as_the_general_way(pair, taken, reads):
    """Both followers parked at the log end, one append: the second answer is the first one's read (one pread for
    both), and both are the general way's bytes; outside an append's wake-up nothing is shared."""
    for lead in pair:
        lead.append(2)
    for r in (2, 3):
        both(pair, r, 2)  # learned (at the log end: parked, then woken by the append below)
    for lead in pair:
        lead.append(1)
    for offset in (3, 4):
        parked = [both(pair, r, offset) for r in (2, 3)]
        assert all(p.__class__ is Later and not p.done() for two in parked for p in two)
        reads.clear()
        for lead in pair:
            lead.append(1, 300)
        assert reads == [offset]  # the short leader read once for its two followers
        for short_reply, general_reply in parked:
            assert reply_bytes(short_reply) == reply_bytes(general_reply)
        same_state(pair)
        assert pair[0].node.parked_fetches.shared is None
    assert taken.count(True) == 4


def test_a_shared_read_is_not_given_once_the_log_end_hw_or_log_start_moved(make_log):
    """`_read_again` gives what another follower read only while everything that read depends on is unchanged."""
    lead = Leader(make_log, short=True)
    lead.append(3)
    plog = lead.plog
    got = (b"records", plog.high_watermark, plog.log_start_offset)
    shared = {(plog, 1, 100): (got, plog.log_end_offset)}
    assert fast._read_again(shared, plog, 1, 100) is got
    assert fast._read_again(shared, plog, 2, 100) is None  # another offset
    assert fast._read_again(shared, plog, 1, 99) is None  # another limit
    shared[(plog, 1, 100)] = (got, plog.log_end_offset - 1)  # read before the last append
    assert fast._read_again(shared, plog, 1, 100) is None
    shared[(plog, 1, 100)] = ((b"records", got[1] + 1, got[2]), plog.log_end_offset)  # another HW
    assert fast._read_again(shared, plog, 1, 100) is None
    shared[(plog, 1, 100)] = ((b"records", got[1], got[2] + 1), plog.log_end_offset)  # another log start
    assert fast._read_again(shared, plog, 1, 100) is None


class ManualTimers:
    """A shape's loop whose timers the test runs by hand (`fire`), on a clock it moves (`now`)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.armed: list[tuple[float, object, tuple]] = []  # (when, callback, args), in the order armed
        self.cancelled: list[object] = []

    def call_later(self, delay: float, callback, *args):
        entry = (self.now + delay, callback, args)
        self.armed.append(entry)
        timers = self

        class Handle:
            def cancel(self) -> None:
                timers.cancelled.append(entry)

        return Handle()

    def fire(self, entry) -> None:
        self.now = entry[0]
        self.armed.remove(entry)
        if entry not in self.cancelled:
            entry[1](*entry[2])


async def test_a_connections_parked_fetches_share_one_timer_and_each_still_expires_at_its_own_wait(
        pair, taken, monkeypatch):
    """One timer per follower connection: fetches woken by appends leave it running and make none; when it fires
    before the fetch parked now is due it waits for what is left of it; then that fetch is answered as the general
    way answers an expired one. A second fetch parked on the connection while one is gets a timer of its own."""
    short, general = pair
    timers = ManualTimers()
    monkeypatch.setattr(fast, "time", SimpleNamespace(monotonic=lambda: timers.now))  # the module's clock only
    wait_s = 0.5
    for lead in pair:
        lead.append(2)
    both(pair, 2, 2, wait_ms=500)  # learned by the general way (parked there; woken below)
    short.router.follower_fetch_shapes[short.ctx[2].connection_id].loop = timers
    first = short.fetch(2, 2, wait_ms=500)
    assert first.__class__ is Later and len(timers.armed) == 1 and timers.armed[0][0] == 1000.0 + wait_s
    for lead in pair:
        lead.append(1)
    assert first.done() and len(timers.armed) == 1 and not timers.cancelled  # left running
    timers.now += 0.2
    second = short.fetch(2, 3, wait_ms=500)
    assert not second.done() and len(timers.armed) == 1  # the running timer watches it
    timers.fire(timers.armed[0])  # the first fetch's wait is over, not the second's: it waits for the rest
    assert not second.done() and len(timers.armed) == 1 and timers.armed[0][0] == pytest.approx(1000.2 + wait_s)
    timers.fire(timers.armed[0])
    assert second.done() and not timers.armed
    assert short.node.parked_fetches.count() == 0
    expired = general.fetch(2, 3, wait_ms=1)  # the general way's answer to the same fetch, expired
    general_bytes = reply_bytes(await asyncio.wait_for(_later_of(expired), 60))
    assert reply_bytes(second)[4:] == general_bytes[4:]  # after the correlation id (each leader counts its own)
    assert not decoded(second).responses[0].partitions[0].records
    # A fetch parked while another one is, on the same connection: a timer of its own, cancelled when woken.
    third = short.fetch(2, 3, wait_ms=500)
    fourth = short.fetch(2, 3, wait_ms=500)
    assert len(timers.armed) == 2 and timers.armed[0][1] is fast._shape_timer
    for lead in pair:
        lead.append(1)
    assert third.done() and fourth.done() and timers.cancelled == [timers.armed[1]]
    assert taken.count(True) == 4


async def _later_of(reply):
    await _done(reply)
    return reply


class BusyWorker:
    """A dir's worker running something (the loop may not read the dir): what it is handed runs at once."""

    io = SimpleNamespace(online=True)
    submit = IDLE_WORKER.submit

    def idle(self) -> bool:
        return False


BUSY_WORKER = BusyWorker()


def unannounced_append(lead: Leader, size: int = 10) -> None:
    """An append the dir's worker made (the log end moved) whose answer has not reached the loop yet: one more
    Produce append in flight, the worker busy."""
    lead.plog.append(build_batch([(None, b"w" * size, (), 1_700_000_000_000)], partition_leader_epoch=0),
                     leader_epoch=0)
    lead.plog.appends_in_flight += 1
    lead.node.logs.manager.worker = lambda log_dir: BUSY_WORKER


def announced(lead: Leader, *, still_busy: bool = False) -> None:
    """One in-flight append's answer on the loop, as Produce's fill gives it: the parked fetches wake."""
    lead.plog.appends_in_flight -= 1
    if not still_busy:
        lead.node.logs.manager.worker = lambda log_dir: IDLE_WORKER
    lead.manager.leader_appended("t", 0)
    lead.node.notify_append("t", 0)


def at_once(reply) -> bool:
    """Answered in the call (bytes, or a Later done already: the general way's read by a worker that ran it)."""
    return reply.__class__ is not Later or reply.done()


@pytest.fixture
def general_calls(monkeypatch) -> list[int]:
    """The offsets of the fetches the short way handed to the general way (`_general`)."""
    seen: list[int] = []
    real = fast._general

    def spy(router, route, frame_, ctx, corr, deadline):
        seen.append(struct.unpack_from(">q", frame_, router.follower_fetch_shapes[ctx.connection_id].at)[0])
        return real(router, route, frame_, ctx, corr, deadline)

    monkeypatch.setattr(fast, "_general", spy)
    return seen


@pytest.mark.parametrize("in_flight", [1, 2, fast.APPENDS_WAITED])
async def test_a_fetch_a_busy_workers_appends_hold_back_waits_for_their_wake_ups(pair, taken, general_calls, reads,
                                                                                in_flight):
    """The worker moved the log end by appends whose answers are on their way to the loop (the first one's run, the
    others' hand-over held behind it), and may not be read by the loop meanwhile: the followers' fetches park
    through every wake-up but the last, whose wake-up reads once for both, on the loop, with the general way's
    records (which it gets by handing its reads to the busy worker) and the HW their fetches moved."""
    short, general = pair
    for lead in pair:
        lead.append(2)
    for r in (2, 3):
        both(pair, r, 2)  # learned (parked at the log end, woken below)
    for lead in pair:
        lead.append(1)
        for _ in range(in_flight):
            unannounced_append(lead, 300)
    parked = [short.fetch(r, 3) for r in (2, 3)]
    assert all(p.__class__ is Later and not p.done() for p in parked)
    assert short.node.parked_fetches.count(("t", 0)) == 2
    wanted = [reply_bytes(general.fetch(r, 3)) for r in (2, 3)]
    reads.clear()
    for _ in range(in_flight - 1):
        for lead in pair:
            announced(lead, still_busy=True)
        assert not any(p.done() for p in parked) and reads == []
    for lead in pair:
        announced(lead)
    assert reads == [3]
    for got, want in zip(parked, wanted, strict=True):  # the records the general way answered, and the HW now
        part, general_part = decoded(got).responses[0].partitions[0], decoded(want).responses[0].partitions[0]
        assert part.records == general_part.records and len(part.records) > 300 * in_flight
        assert part.high_watermark == short.plog.high_watermark == 3  # the general way's first one ran before it
        assert reply_bytes(got)[4:] == fast.plain_answer(17, "t", TOPIC_ID, 0, False, 0, 3, 0, part.records)[4:]
    assert short.plog.high_watermark == general.plog.high_watermark
    assert sorted(short.counted) == sorted(general.counted)  # the same counts; both answers after both fetches
    assert [short.follower(r) for r in (2, 3)] == [general.follower(r) for r in (2, 3)]
    assert general_calls == [] and taken.count(True) == 2


async def test_a_fetch_a_busy_worker_holds_back_otherwise_goes_the_general_way(pair, taken, general_calls):
    """Every other fetch the busy worker keeps the loop from reading is the general way's: one while more appends
    than APPENDS_WAITED are in flight, one with more than a small read to send, one parked for an append whose
    answer does not come (at its max_wait_ms), one woken while the worker is still busy after it waited once; a
    worker idle again lets the loop read at once."""
    short, general = pair
    for lead in pair:
        lead.append(1)
    both(pair, 2, 0)  # learned
    for lead in pair:
        lead.append(1)  # the fetch below starts where an append began: a small read, not the general way's for that
        for _ in range(fast.APPENDS_WAITED + 1):
            unannounced_append(lead)  # one more in flight than a fetch waits for
    a, b = both(pair, 2, 1)
    assert materialized(a) == materialized(b) and at_once(a) and general_calls == [1]
    big = short.plog.log_end_offset
    for lead in pair:
        for _ in range(fast.APPENDS_WAITED + 1):
            announced(lead, still_busy=True)  # one in flight, a big one: more than one small read to send
        unannounced_append(lead, fetch_handler.SMALL_FOLLOWER_READ + 1000)
    a, b = both(pair, 2, big)
    assert materialized(a) == materialized(b) and at_once(a) and general_calls == [1, big]
    for lead in pair:
        announced(lead, still_busy=True)
        unannounced_append(lead)
        lead.node.logs.manager.worker = lambda log_dir: IDLE_WORKER  # one in flight, the worker idle again
    a, b = both(pair, 2, big + 1)
    assert reply_bytes(a) == reply_bytes(b) and a.__class__ is bytes and general_calls == [1, big]
    # Parked for an append whose answer never comes (it failed): answered at its max_wait_ms, by the general way.
    for lead in pair:
        settled(lead)
    a, b = both(pair, 2, big + 1, wait_ms=1)  # a new shape (its max_wait_ms), learned by the general way
    assert reply_bytes(a) == reply_bytes(b) and at_once(a)
    for lead in pair:
        unannounced_append(lead)
    expired = short.fetch(2, big + 2, wait_ms=1)
    assert expired.__class__ is Later and not expired.done()
    got = reply_bytes(await asyncio.wait_for(_later_of(expired), 60))
    assert general_calls == [1, big, big + 2]
    want = reply_bytes(await asyncio.wait_for(_later_of(general.fetch(2, big + 2, wait_ms=1)), 60))
    assert got[4:] == want[4:]  # after the correlation id (each leader counts its own)
    assert len(decoded(expired).responses[0].partitions[0].records) > 0
    # Woken by an answer while the worker is still busy (another append in flight behind it): the general way then.
    for lead in pair:
        settled(lead)
        unannounced_append(lead)
    woken = short.fetch(2, big + 3, wait_ms=1)
    assert woken.__class__ is Later and not woken.done()
    for lead in pair:
        unannounced_append(lead)
        announced(lead, still_busy=True)
    assert woken.done() and general_calls == [1, big, big + 2, big + 3]
    want = reply_bytes(await asyncio.wait_for(_later_of(general.fetch(2, big + 3, wait_ms=1)), 60))
    assert reply_bytes(woken)[4:] == want[4:]
    same_state(pair)


def settled(lead: Leader) -> None:
    """Every append in flight answered (or failed) and the worker idle."""
    lead.plog.appends_in_flight = 0
    lead.node.logs.manager.worker = lambda log_dir: IDLE_WORKER
    lead.manager.leader_appended("t", 0)


async def test_a_woken_fetch_the_next_append_holds_back_waits_for_it_once(pair, taken, general_calls, reads):
    """A fetch parked at the log end, woken by an append's answer while the worker already runs the next one: it
    waits for that one's wake-up and is then read on the loop, both appends at once, with the general way's
    records. Woken so a second time, it takes the general way (a steady stream of appends cannot hold it)."""
    short, general = pair
    for lead in pair:
        lead.append(2)
    both(pair, 2, 0)  # learned
    parked = short.fetch(2, 2)
    assert parked.__class__ is Later and not parked.done()
    for lead in pair:
        unannounced_append(lead, 100)
        unannounced_append(lead, 200)
        announced(lead, still_busy=True)  # the first one's answer, the worker running the second
    assert not parked.done() and short.node.parked_fetches.count(("t", 0)) == 1
    reads.clear()
    for lead in pair:
        announced(lead)
    assert parked.done() and reads == [2] and general_calls == []
    want = reply_bytes(general.fetch(2, 2))
    got = decoded(parked).responses[0].partitions[0]
    assert got.records == FetchResponse.decode(want[5:], 17).responses[0].partitions[0].records
    assert len(got.records) > 300  # both appends
    # Woken twice with the worker busy: the second time, the general way.
    again = short.fetch(2, 4)
    assert again.__class__ is Later and not again.done()
    for lead in pair:
        unannounced_append(lead)
        unannounced_append(lead)
        announced(lead, still_busy=True)
    assert not again.done()
    for lead in pair:
        unannounced_append(lead)
        announced(lead, still_busy=True)
    assert general_calls == [4]
    answered = reply_bytes(await asyncio.wait_for(_later_of(again), 60))
    want = reply_bytes(await asyncio.wait_for(_later_of(general.fetch(2, 4)), 60))
    assert answered[4:] == want[4:]
    assert taken.count(True) == 2


async def test_a_fetch_waits_only_for_the_appends_in_flight_when_it_began_to_wait(pair, taken, general_calls):
    """A fetch waits for the appends in flight when it began to wait, not for any that a producer adds meanwhile:
    woken by the first of two with more in flight than the one left (a new one behind it), or by the second with
    the worker busy again, it takes the general way with what is there; so does a fetch parked at the log end
    that waits for the two appends in flight behind the one that woke it and then finds a third."""
    short, general = pair
    for lead in pair:
        lead.append(1)
    both(pair, 2, 0)  # learned
    for start, behind in ((1, 1), (3, 0)):
        for lead in pair:
            lead.append(1)
            unannounced_append(lead)
            unannounced_append(lead)
        held = short.fetch(2, start)
        assert held.__class__ is Later and not held.done()
        for lead in pair:
            for _ in range(behind):
                unannounced_append(lead)  # a new one, behind the two
            announced(lead, still_busy=True)  # the first one's answer
        if not behind:
            assert not held.done() and general_calls == [1]  # the one left to wait for, alone in flight
            for lead in pair:
                unannounced_append(lead)
                announced(lead, still_busy=True)
        assert general_calls == [1, 3][:2 - behind]
        answered = reply_bytes(await asyncio.wait_for(_later_of(held), 60))
        want = reply_bytes(await asyncio.wait_for(_later_of(general.fetch(2, start)), 60))
        assert answered[4:] == want[4:]
        for lead in pair:
            settled(lead)
    # Parked at the log end: woken by an append with two behind it, it waits for those two only.
    end = short.plog.log_end_offset
    parked = short.fetch(2, end)
    assert parked.__class__ is Later and not parked.done()
    for lead in pair:
        for _ in range(3):
            unannounced_append(lead)
        announced(lead, still_busy=True)  # woken, two behind: it waits
    assert not parked.done()
    for lead in pair:
        unannounced_append(lead)
        announced(lead, still_busy=True)  # one left to wait for, two in flight
    assert general_calls == [1, 3, end]
    answered = reply_bytes(await asyncio.wait_for(_later_of(parked), 60))
    want = reply_bytes(await asyncio.wait_for(_later_of(general.fetch(2, end)), 60))
    assert answered[4:] == want[4:]


@pytest.mark.parametrize("change", ["new leader epoch", "follower"])
async def test_a_parked_fetch_woken_after_the_leadership_changed_is_answered_as_the_general_way(pair, taken, change):
    """Kafka's DelayedFetch looks at the partition again when it completes: a leader epoch that moved on answers
    FENCED_LEADER_EPOCH, a leadership gone NOT_LEADER_OR_FOLLOWER. The short way's fetch, parked at the log end
    while its checks held, is woken by an append after the metadata changed them: it is answered as the general
    way's parked fetch is, not with records read as if nothing had changed."""
    parked = parked_at_the_log_end(pair, taken)
    for lead in pair:
        lead.node.metadata = (image(leader_epoch=1, partition_epoch=1) if change == "new leader epoch"
                              else image(leader=3, leader_epoch=1, partition_epoch=1))
        lead.manager.sync(lead.node.metadata)
        lead.append(1)  # wakes the parked fetches
    got = [await asyncio.wait_for(_done(p), 60) for p in parked]
    assert got[0][4:] == got[1][4:]
    part = decoded(parked[0]).responses[0].partitions[0]
    assert part.error_code == (ErrorCode.FENCED_LEADER_EPOCH if change == "new leader epoch"
                               else ErrorCode.NOT_LEADER_OR_FOLLOWER)
