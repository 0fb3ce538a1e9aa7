"""The share-partition leader's own logic, in process: loading and writing state through the (in-memory)
persister on a real partition log, the reset strategies, and reading batch headers (read_committed filtering)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import types
import uuid

import pytest

from kjbod.broker.share.fetch import ShareError, ShareLeader, duration_ms, mark_aborted, parse_batches
from kjbod.broker.share.partition import ACCEPT, REJECT, AckBatch
from kjbod.broker.share.persister import InitializeData, MemoryPersister, PartitionAnswer
from kjbod.protocol.errors import ErrorCode
from kjbod.server.config import ServerConfig
from kjbod.storage import fsio
from kjbod.storage.config import LogConfig
from kjbod.storage.errors import KafkaStorageError
from kjbod.storage.log import PartitionLog
from kjbod.storage.records import build_batch

TID = uuid.uuid4()
# Kafka 4.3's share group defaults, by the names the leader reads
KAFKA_DEFAULTS = {"share.record.lock.duration.ms": 30_000, "share.delivery.count.limit": 5,
                  "share.partition.max.record.locks": 2000, "share.auto.offset.reset": "latest",
                  "share.isolation.level": "read_uncommitted", "share.renew.acknowledge.enable": True}


@pytest.fixture
def plog(tmp_path):
    io = fsio.LogDirIO(str(tmp_path / "d"))
    io.mkdir(io.path, parents=True)
    log = PartitionLog.create(io, io.join("t-0"), "t", 0, TID, LogConfig())
    for i in range(3):  # offsets 0-8, three batches of three
        log.append(build_batch([(None, f"v{i}{j}".encode(), [], 1000) for j in range(3)]))
    log.high_watermark = log.log_end_offset
    yield log
    log.close_quietly()


# the server keys' defaults, as a node started with no server.properties lines for them has them
DEFAULT_CONFIG = types.SimpleNamespace(**{f.name: f.default for f in dataclasses.fields(ServerConfig)
                                          if f.default is not dataclasses.MISSING})


def node() -> types.SimpleNamespace:
    """What the leader needs of a node here: its persister, the default server keys, no dir workers."""
    return types.SimpleNamespace(config=DEFAULT_CONFIG, share_persister=MemoryPersister(),
                                 logs=types.SimpleNamespace(manager=None))  # no dir workers: reads run inline


def test_latest_by_default_and_state_survives_a_new_leader(plog):
    async def run():
        n = node()
        first = ShareLeader(n)
        sp = await first.partition("g", TID, 0, plog, 0)
        assert sp.start_offset == 9  # share.auto.offset.reset=latest: the high watermark
        # the state written here is what a new leader (a restart, with a durable persister) starts from
        sp.acquire("m", [(9, 11)], 10, now=0)
        sp.acknowledge("m", [AckBatch(9, 11, (REJECT, ACCEPT, ACCEPT))], now=0)
        await first.persist("g", TID, 0, sp, 0)
        again = await ShareLeader(n).partition("g", TID, 0, plog, 1)
        assert (again.start_offset, again.state_batches()) == (12, ())
        # an older leader epoch is fenced: NOT_LEADER_OR_FOLLOWER
        with pytest.raises(ShareError) as e:
            await ShareLeader(n).partition("g", TID, 0, plog, 0)
        assert e.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    asyncio.run(run())


def test_earliest_and_by_duration(plog, monkeypatch):
    import kjbod.broker.share.fetch as leader_module

    async def start(reset: str) -> int:
        monkeypatch.setattr(leader_module.ShareLeader, "settings", lambda _self, _g: {**KAFKA_DEFAULTS,
                                                                                   "share.auto.offset.reset": reset})
        return (await ShareLeader(node()).partition("g", TID, 0, plog, 0)).start_offset

    async def run():
        assert await start("earliest") == 0
        assert await start("by_duration:P36500D") == 0  # records at timestamp 1000 are younger than a century
        assert await start("by_duration:PT0S") == 9  # none at or after now: the high watermark
    asyncio.run(run())


def test_durations():
    assert duration_ms("PT1H") == 3_600_000
    assert duration_ms("P1DT2M0.5S") == 86_400_000 + 120_000 + 500
    assert duration_ms("1H") is None and duration_ms("P") is None


def test_batch_headers_and_aborted_transactions():
    plain = build_batch([(None, b"a", [], 1), (None, b"b", [], 1)], base_offset=0)
    txn = build_batch([(None, b"c", [], 1)], base_offset=2, producer_id=7, producer_epoch=0, base_sequence=0,
                      is_transactional=True)
    other = build_batch([(None, b"d", [], 1)], base_offset=3, producer_id=8, producer_epoch=0, base_sequence=0,
                        is_transactional=True)
    data = plain + txn + other + plain[:20]  # a partial tail is left out
    batches = parse_batches(data)
    assert [(b.base, b.last) for b in batches] == [(0, 1), (2, 2), (3, 3)]
    assert data[batches[1].start:batches[1].end] == txn
    mark_aborted(data, batches, [(7, 2)])
    assert [b.aborted for b in batches] == [False, True, False]


class FailingWrites(MemoryPersister):
    """The in-memory persister, its writes refused with `code` while it is set."""

    def __init__(self) -> None:
        super().__init__()
        self.code = 0

    async def write(self, group_id, partitions):
        if self.code:
            return {(w.topic_id, w.partition): PartitionAnswer(self.code, "refused by the test") for w in partitions}
        return await super().write(group_id, partitions)


@pytest.mark.parametrize("refusal, answered, evicted", [
    (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, False),
    (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER, True),
    (ErrorCode.FENCED_STATE_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER, True),
    (ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.GROUP_ID_NOT_FOUND, True),
    (9999, ErrorCode.UNKNOWN_SERVER_ERROR, False),  # a code Kafka does not know: no traceback either
])
def test_a_failed_state_write_rolls_the_acknowledgement_back(plog, refusal, answered, evicted):
    from kjbod.broker.handlers.share_fetch import Target, acknowledge
    from kjbod.broker.share.partition import ACQUIRED

    async def run():
        n = node()
        n.share_persister = persister = FailingWrites()
        leader = ShareLeader(n)
        sp = await leader.partition("g", TID, 0, plog, 0)
        sp.acquire("m", [(9, 11)], 10, now=asyncio.get_running_loop().time() + 1e9)
        target = Target(TID, 0, "t", plog=plog, leader_epoch=0, acks=[AckBatch(9, 11, (ACCEPT,))])
        persister.code = refusal
        assert (await acknowledge(leader, "g", "m", target, renew=False))[0] == answered
        # the records are the member's again, nothing moved, nothing pending
        assert sp.start_offset == 9 and not sp.pending
        assert [(sp.records[o].state, sp.records[o].member) for o in (9, 10, 11)] == [(ACQUIRED, "m")] * 3
        assert (("g", TID, 0) not in leader.partitions) == evicted
        persister.code = 0
        if evicted:  # a fresh load: the records were never acknowledged, so they are delivered again
            again = await leader.partition("g", TID, 0, plog, 0)
            assert again is not sp and again.start_offset == 9
        else:  # the member acknowledges again and this time it holds
            assert await acknowledge(leader, "g", "m", target, renew=False) == (0, None)
            assert sp.start_offset == 12
            assert (await ShareLeader(n).partition("g", TID, 0, plog, 0)).start_offset == 12
    asyncio.run(run())


@pytest.mark.parametrize("how", ["session closed", "connection closed"])
def test_a_failed_state_write_rolls_a_leaving_member_s_release_back(plog, how):
    """Kafka 4.3: the release of a member's records when its share session ends is rolled back when its state
    write fails: the records stay the member's (not delivered to another) until their locks run out."""
    from kjbod.broker.share import fetch
    from kjbod.broker.share.partition import ACQUIRED, AVAILABLE

    async def run():
        n = node()
        n.share_persister = persister = FailingWrites()
        leader = ShareLeader(n)
        for connection, member in ((1, "m1"), (2, "m2")):  # m2's session keeps the group's state cached
            leader.sessions.for_fetch("g", member, 0, [(TID, 0)], [], connection, acknowledging=False)
        sp = await leader.partition("g", TID, 0, plog, 0)
        now = time.monotonic()
        sp.acquire("m1", [(9, 11)], 10, now=now)
        deadline = sp.next_deadline()
        persister.code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if how == "session closed":
            await leader.close_session("g", "m1")
        else:
            leader.connection_closed(1)
            await asyncio.gather(*fetch._background)
        assert leader.sessions.get("g", "m1") is None and leader.partitions[("g", TID, 0)][1] is sp
        assert [(sp.records[o].state, sp.records[o].member) for o in (9, 10, 11)] == [(ACQUIRED, "m1")] * 3
        assert not sp.pending and sp.acquire("m2", [(9, 11)], 10, now=now) == []
        persister.code = 0
        assert sp.expire_locks(deadline) and sp.acquire("m2", [(9, 11)], 10, now=deadline) == [(9, 11, 2)]
        # a release whose write holds is kept, and what it wrote is what a new leader reads
        await leader.close_session("g", "m2")
        assert [sp.records[o].state for o in (9, 10, 11)] == [AVAILABLE] * 3 and not sp.pending
        again = await ShareLeader(n).partition("g", TID, 0, plog, 0)
        assert [(again.records[o].state, again.records[o].delivery_count) for o in (9, 10, 11)] == [(AVAILABLE, 2)] * 3
    asyncio.run(run())


def test_a_lock_timeout_s_release_stands_when_its_state_write_fails(plog):
    """Kafka 4.3 never rolls a lock timeout's release back: the records are acquirable again whatever the state
    write that carries the release answers."""
    from kjbod.broker.handlers.share_fetch import Target, acquire, read_available

    async def run():
        n = node()
        n.share_persister = persister = FailingWrites()
        leader = ShareLeader(n)
        sp = await leader.partition("g", TID, 0, plog, 0)
        plog.append(build_batch([(None, b"w%d" % j, [], 1000) for j in range(3)]))  # offsets 9-11
        plog.high_watermark = plog.log_end_offset
        target = Target(TID, 0, "t", plog=plog, leader_epoch=0)
        sp.lock_ms = 0  # every lock runs out as soon as it is taken
        got = await acquire(leader, "g", "m1", target, await read_available(leader, "g", target, 1 << 20), 10, 1 << 20)
        assert got.ranges == [(9, 11, 1)]
        persister.code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        found = await read_available(leader, "g", target, 1 << 20)
        assert found.changed  # the locks ran out: a state write goes, and fails
        got = await acquire(leader, "g", "m2", target, found, 10, 1 << 20)
        assert got.error == 0 and got.ranges == [(9, 11, 2)]
    asyncio.run(run())


def test_the_group_s_last_session_closing_drops_its_share_partitions(plog):
    """As Kafka's onGroupEmpty: once no member of the group has a share session here, the cached state goes, so a
    reset by the group coordinator (AlterShareGroupOffsets: state initialized again at a newer state epoch) is
    what the next fetch starts from, not the leader's stale start offset."""
    async def run():
        n = node()
        leader = ShareLeader(n)
        for member in ("m1", "m2"):
            leader.sessions.for_fetch("g", member, 0, [(TID, 0)], [], 1, acknowledging=False)
        sp = await leader.partition("g", TID, 0, plog, 0)
        assert sp.start_offset == 9
        await leader.close_session("g", "m1")
        assert ("g", TID, 0) in leader.partitions  # m2 still has a session
        await leader.close_session("g", "m2")
        assert ("g", TID, 0) not in leader.partitions
        await n.share_persister.initialize("g", [InitializeData(TID, 0, 1, 3)])  # the offsets altered to 3
        assert (await leader.partition("g", TID, 0, plog, 0)).start_offset == 3
    asyncio.run(run())


def test_partitions_no_longer_led_here_are_dropped(plog):
    def image(topic):  # the metadata the leader reads here: topics by id, no group configs
        return types.SimpleNamespace(topic_by_id=lambda tid: topic if tid == TID else None,
                                     resource_configs=lambda _kind, _name: {})

    async def run():
        n = node()
        n.node_id = 1
        leader = ShareLeader(n)
        await leader.partition("g", TID, 0, plog, 0)
        n.metadata = image(types.SimpleNamespace(partitions={0: types.SimpleNamespace(leader=1)}))
        leader.prune()
        assert ("g", TID, 0) in leader.partitions
        n.metadata = image(types.SimpleNamespace(partitions={0: types.SimpleNamespace(leader=2)}))  # led elsewhere
        leader.prune()
        assert ("g", TID, 0) not in leader.partitions
        await leader.partition("g", TID, 0, plog, 0)
        n.metadata = image(None)  # the topic deleted
        leader.prune()
        assert not leader.partitions
    asyncio.run(run())


def test_a_compacted_log_s_gaps_do_not_stop_the_start_offset(tmp_path):
    """A log with offsets missing (as compaction leaves it): the fetch acquires across them, and once the records
    and the gap are acknowledged the next fetch goes on past them instead of reading the gap again and again."""
    from kjbod.broker.handlers.share_fetch import Target, acknowledge, acquire, read_available
    from kjbod.broker.share.partition import GAP

    io = fsio.LogDirIO(str(tmp_path / "d"))
    io.mkdir(io.path, parents=True)
    log = PartitionLog.create(io, io.join("t-0"), "t", 0, TID, LogConfig())
    for base in (0, 10, 20):  # offsets 3-9 and 13-19 compacted away
        log.append_as_follower(build_batch([(None, f"v{base + j}".encode(), [], 1000) for j in range(3)],
                                           base_offset=base))
    log.high_watermark = log.log_end_offset

    async def run(monkeypatch_settings):
        leader = ShareLeader(node())
        leader.settings = monkeypatch_settings
        target = Target(TID, 0, "t", plog=log, leader_epoch=0)
        found = await read_available(leader, "g", target, 1 << 20)
        got = await acquire(leader, "g", "m", target, found, 100, 1 << 20)
        assert got.ranges == [(0, 22, 1)]
        target.acks = [AckBatch(0, 2, (ACCEPT,)), AckBatch(3, 9, (GAP,)), AckBatch(10, 12, (ACCEPT,)),
                       AckBatch(13, 19, (GAP,)), AckBatch(20, 22, (ACCEPT,))]
        assert await acknowledge(leader, "g", "m", target, renew=False) == (0, None)
        sp = await leader.partition("g", TID, 0, log, 0)
        assert sp.start_offset == 23 and sp.in_flight() == 0

    try:
        asyncio.run(run(lambda _g: {**KAFKA_DEFAULTS, "share.auto.offset.reset": "earliest"}))
    finally:
        log.close_quietly()


class RaisingReads(MemoryPersister):
    """The in-memory persister, its reads raising `error` (a fault below it: a log dir, a bug)."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    async def read(self, group_id, partitions):
        raise self.error


@pytest.mark.parametrize("error, code", [
    (KafkaStorageError("the log dir failed"), ErrorCode.KAFKA_STORAGE_ERROR),
    (OSError(5, "Input/output error"), ErrorCode.KAFKA_STORAGE_ERROR),
    (RuntimeError("a bug"), ErrorCode.UNKNOWN_SERVER_ERROR),
])
def test_a_failure_below_the_leader_is_the_partition_s_error_code(plog, error, code):
    from kjbod.broker.handlers.share_fetch import Target, acknowledge, read_available

    async def run():
        n = node()
        n.share_persister = RaisingReads(error)
        leader = ShareLeader(n)
        target = Target(TID, 0, "t", plog=plog, leader_epoch=0, acks=[AckBatch(0, 0, (ACCEPT,))])
        assert (await acknowledge(leader, "g", "m", target, renew=False))[0] == code
        assert (await read_available(leader, "g", target, 1 << 20)).error == code
    asyncio.run(run())


class SlowWrites(MemoryPersister):
    """The in-memory persister, each write held until the test lets it go; it notes what was in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.in_flight = 0
        self.most_in_flight = 0
        self.written: list[int] = []  # the start offset of each write, in the order they landed

    async def write(self, group_id, partitions):
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await self.gate.wait()
        self.in_flight -= 1
        self.written.extend(w.start_offset for w in partitions)
        return await super().write(group_id, partitions)


def test_state_writes_of_a_share_partition_go_one_at_a_time_with_the_latest_state(plog):
    async def run():
        n = node()
        n.share_persister = persister = SlowWrites()
        persister.gate.set()
        leader = ShareLeader(n)
        sp = await leader.partition("g", TID, 0, plog, 0)
        sp.acquire("m", [(9, 14)], 10, now=asyncio.get_running_loop().time() + 1e9)
        persister.gate.clear()
        persister.written.clear()
        first = asyncio.ensure_future(leader.persist("g", TID, 0, sp, 0))
        await asyncio.sleep(0)
        sp.acknowledge("m", [AckBatch(9, 10, (ACCEPT,))], now=0)  # start 11, while the first write is held
        second = asyncio.ensure_future(leader.persist("g", TID, 0, sp, 0))
        sp.acknowledge("m", [AckBatch(11, 12, (ACCEPT,))], now=0)  # start 13
        third = asyncio.ensure_future(leader.persist("g", TID, 0, sp, 0))
        await asyncio.sleep(0.01)
        persister.gate.set()
        assert await asyncio.gather(first, second, third) == [(0, None)] * 3
        assert persister.most_in_flight == 1
        assert persister.written == [9, 13]  # the second write carried the third's change too; none overtook
        assert (await ShareLeader(n).partition("g", TID, 0, plog, 0)).start_offset == 13
    asyncio.run(run())
