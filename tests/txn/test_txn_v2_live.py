"""transaction.version 2 (KIP-890 part 2) in a real `kjbod serve`, driven by hand-made requests (no installed
client speaks it: kafka-python and confluent-kafka keep to transaction.version 0/1, checked here to work unchanged
on a cluster finalized at 2, as Kafka's coordinator decides by each request's version).

Strategy: one single-node server for the module, upgraded to transaction.version 2 with `kjbod features`; each
test its own transactional id and topic.  The producer's steps are checked on the wire (EndTxn v5's id and epoch,
Produce v12 adding the partition itself, TxnOffsetCommit v5 adding the group), the markers where they land (the
control batches in the partition's segment files, with the bumped epoch) and what read_committed readers see.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid

import pytest
from live import LiveServer, start_server

from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    ApiVersionsRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    FindCoordinatorRequest,
    OffsetFetchRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
)
from kjbod.protocol.generated.offset_fetch_request import OffsetFetchRequestGroup, OffsetFetchRequestTopics
from kjbod.protocol.generated.produce_request import PartitionProduceData, TopicProduceData
from kjbod.protocol.generated.txn_offset_commit_request import (
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from kjbod.protocol.generated.write_txn_markers_request import WritableTxnMarker, WritableTxnMarkerTopic
from kjbod.storage.records import build_batch

from .test_txn_coordinator_live import (
    OVERRIDES,
    WAIT_S,
    Txn,
    connect,
    control_batches,
    make_topic,
    read_all,
    wait_for,
)

pytestmark = pytest.mark.slow


def set_transaction_version(server: LiveServer, level: int, *, down: bool = False) -> None:
    done = subprocess.run([sys.executable, "-m", "kjbod", "features", "--bootstrap-server", server.bootstrap,
                           "downgrade" if down else "upgrade", "--feature", f"transaction.version={level}"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr

    async def finalized() -> int:
        conn = await connect(server)
        try:
            r = await conn.request(18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"),
                                   30.0)
            return {f.name: f.max_version_level for f in r.finalized_features}.get("transaction.version", 0)
        finally:
            conn.close()

    deadline = time.monotonic() + WAIT_S
    while asyncio.run(finalized()) != level:
        assert time.monotonic() < deadline, f"transaction.version never reached {level}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    s = start_server(tmp_path_factory.mktemp("tv2"), log_dir_count=2, overrides=OVERRIDES)
    try:
        set_transaction_version(s, 2)
        yield s
    finally:
        s.stop()


class Tv2(Txn):
    """A transaction.version 2 producer: EndTxn v5, Produce v12, TxnOffsetCommit v5, no AddPartitionsToTxn."""

    def __init__(self, conn, tid: str) -> None:
        super().__init__(conn, tid)
        self.seq: dict[tuple[str, int], int] = {}

    async def end5(self, commit: bool, epoch: int | None = None, pid: int | None = None):
        """EndTxn v5 (CONCURRENT_TRANSACTIONS retried: the last transaction's markers still going out); on
        success the producer goes on with the id and epoch it was given."""
        deadline = time.monotonic() + WAIT_S
        while True:
            r = await self.call(EndTxnRequest(transactional_id=self.tid, producer_id=self.pid if pid is None else pid,
                                              producer_epoch=self.epoch if epoch is None else epoch,
                                              committed=commit), 5)
            if r.error_code != ErrorCode.CONCURRENT_TRANSACTIONS or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        if r.error_code == 0 and epoch is None:
            if r.producer_id != self.pid or r.producer_epoch != self.epoch:
                self.seq.clear()  # a new epoch starts its sequences at 0
            self.pid, self.epoch = r.producer_id, r.producer_epoch
        return r

    async def produce(self, topic: str, partition: int, values: list[bytes], version: int = 12,
                      epoch: int | None = None, pid: int | None = None) -> int:
        """A transactional batch; retried while the coordinator is busy ending the last transaction (answered
        NOT_ENOUGH_REPLICAS, as a producer retries it)."""
        seq = self.seq.get((topic, partition), 0)
        batch = build_batch([(None, v, [], int(time.time() * 1000)) for v in values],
                            producer_id=self.pid if pid is None else pid,
                            producer_epoch=self.epoch if epoch is None else epoch,
                            base_sequence=seq, is_transactional=True)
        deadline = time.monotonic() + WAIT_S
        while True:
            r = await self.call(ProduceRequest(transactional_id=self.tid, acks=-1, timeout_ms=5000, topic_data=[
                TopicProduceData(name=topic, partition_data=[PartitionProduceData(index=partition, records=batch)])]),
                version)
            code = r.responses[0].partition_responses[0].error_code
            if code != ErrorCode.NOT_ENOUGH_REPLICAS or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        if code == 0:
            self.seq[(topic, partition)] = seq + len(values)
        return code

    async def describe(self):
        r = await self.call(DescribeTransactionsRequest(transactional_ids=[self.tid]), 0)
        return r.transaction_states[0]


def test_end_txn_v5_bumps_the_epoch_at_every_end_and_markers_carry_it(server):
    topic = make_topic(server)

    async def run():
        conn = await connect(server)
        try:
            t = Tv2(conn, f"tv2-{uuid.uuid4().hex[:6]}")
            assert await t.init(version=5) == 0 and t.epoch == 0
            pid = t.pid
            # Produce v12: the leader adds the partition itself (no AddPartitionsToTxn).
            assert await t.produce(topic, 0, [b"c1", b"c2"]) == 0
            state = await t.describe()
            assert (state.transaction_state, [(x.topic, x.partitions) for x in state.topics]) == \
                ("Ongoing", [(topic, [0])])
            r = await t.end5(True)
            assert (r.error_code, r.producer_id, r.producer_epoch) == (0, pid, 1)
            # The next transaction runs at epoch 1 (sequences from 0); aborted, it ends at epoch 2.
            assert await t.produce(topic, 0, [b"a1"]) == 0
            r = await t.end5(False)
            assert (r.error_code, r.producer_id, r.producer_epoch) == (0, pid, 2)
            # A retry of that EndTxn (the epoch before the bump) answers success and the current id and epoch.
            r = await t.end5(False, epoch=1)
            assert (r.error_code, r.producer_id, r.producer_epoch) == (0, pid, 2)
            # A stale epoch: fenced, no id or epoch given.
            r = await t.end5(True, epoch=0)
            assert (r.error_code, r.producer_id, r.producer_epoch) == (ErrorCode.PRODUCER_FENCED, -1, -1)
            # Abort with nothing added: an empty transaction, still a bump (Kafka's TV2 table); commit is refused.
            r = await t.end5(True)
            assert r.error_code == ErrorCode.INVALID_TXN_STATE
            r = await t.end5(False)
            assert (r.error_code, r.producer_epoch) == (0, 3)
            # A batch of the ended transaction arriving late (its old epoch) is refused and nothing is written.
            assert await t.produce(topic, 0, [b"late"], epoch=1) == ErrorCode.INVALID_PRODUCER_EPOCH
            return pid
        finally:
            conn.close()

    pid = asyncio.run(run())
    wait_for(lambda: len(control_batches(server, topic, 0)) == 2, "both markers")
    markers = control_batches(server, topic, 0)
    # The markers carry the bumped epochs: the commit's 1, the abort's 2.
    assert markers == [(pid, 1, True, True, 0), (pid, 2, True, False, 0)]
    assert read_all(server, topic, "read_committed") == [b"c1", b"c2"]


def test_produce_v12_the_coordinators_refusal_is_the_batchs_answer(server):
    topic = make_topic(server)

    async def run():
        conn = await connect(server)
        try:
            t = Tv2(conn, f"tv2-{uuid.uuid4().hex[:6]}")
            assert await t.init(version=5) == 0
            assert await t.end5(False) is not None and t.epoch == 1  # an empty abort: epoch 1
            # An older epoch: the coordinator says PRODUCER_FENCED, the producer hears INVALID_PRODUCER_EPOCH.
            assert await t.produce(topic, 0, [b"x"], epoch=0) == ErrorCode.INVALID_PRODUCER_EPOCH
            # A producer id the coordinator never gave this transactional id.
            assert await t.produce(topic, 1, [b"x"], pid=t.pid + 1000, epoch=0) == \
                ErrorCode.INVALID_PRODUCER_ID_MAPPING
            assert (await t.describe()).transaction_state == "CompleteAbort"  # nothing was added
            # Produce v11 (transaction.version 1) only asks: a partition the producer did not add is refused.
            assert await t.produce(topic, 0, [b"x"], version=11) == ErrorCode.TRANSACTION_ABORTABLE
            # A transactional id nobody initialized.
            other = Tv2(conn, f"tv2-{uuid.uuid4().hex[:6]}")
            other.pid, other.epoch = t.pid, t.epoch
            assert await other.produce(topic, 0, [b"x"]) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        finally:
            conn.close()

    asyncio.run(run())
    assert control_batches(server, topic, 0) == []
    assert read_all(server, topic, "read_uncommitted") == []


def test_txn_offset_commit_v5_adds_the_group_itself(server):
    topic = make_topic(server)
    group = f"g-{uuid.uuid4().hex[:6]}"

    async def run():
        conn = await connect(server)
        try:
            r = await conn.request(10, 1, FindCoordinatorRequest(key=group, key_type=0), 30.0)
            assert r.error_code == 0
            t = Tv2(conn, f"tv2-{uuid.uuid4().hex[:6]}")
            assert await t.init(version=5) == 0

            async def commit_offset(offset: int, version: int = 5) -> int:
                r = await t.call(TxnOffsetCommitRequest(
                    transactional_id=t.tid, group_id=group, producer_id=t.pid, producer_epoch=t.epoch,
                    topics=[TxnOffsetCommitRequestTopic(name=topic, partitions=[TxnOffsetCommitRequestPartition(
                        partition_index=0, committed_offset=offset, committed_metadata="m")])]), version)
                return r.topics[0].partitions[0].error_code

            async def fetched() -> int:
                r = await conn.request(9, 8, OffsetFetchRequest(groups=[OffsetFetchRequestGroup(
                    group_id=group, topics=[OffsetFetchRequestTopics(name=topic, partition_indexes=[0])])]), 30.0)
                return r.groups[0].topics[0].partitions[0].committed_offset

            # v4 (transaction.version 1) needs AddOffsetsToTxn first; v5 adds the group's partition itself.
            assert await commit_offset(4, version=4) == ErrorCode.INVALID_TXN_STATE
            assert await commit_offset(5) == 0
            assert (await t.describe()).transaction_state == "Ongoing"
            assert await fetched() == -1
            r = await t.end5(True)
            assert (r.error_code, r.producer_epoch) == (0, 1)
            deadline = time.monotonic() + WAIT_S
            while await fetched() != 5 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert await fetched() == 5
            # A stale epoch is refused by the coordinator: nothing pending, nothing added.
            assert await commit_offset(9) == 0  # epoch 1, the new transaction
            t.epoch = 0
            assert await commit_offset(11) == ErrorCode.INVALID_PRODUCER_EPOCH
            t.epoch = 1
            r = await t.end5(False)
            assert r.error_code == 0
            await asyncio.sleep(0.5)
            assert await fetched() == 5  # the aborted offset never shows
        finally:
            conn.close()

    asyncio.run(run())


def test_a_client_add_partitions_then_end_txn_v5(server):
    """AddPartitionsToTxn v3 (a producer's own) then EndTxn v5: answered as Kafka's coordinator does, by each
    request's version (the add at client version 0, the end with v5's bump)."""
    topic = make_topic(server)

    async def run():
        conn = await connect(server)
        try:
            t = Tv2(conn, f"tv2-{uuid.uuid4().hex[:6]}")
            assert await t.init(version=5) == 0
            assert await t.add(topic, 0) == [0]
            assert await t.produce(topic, 0, [b"v"], version=11) == 0
            r = await t.end5(True)
            assert (r.error_code, r.producer_epoch) == (0, 1)
            return t.pid
        finally:
            conn.close()

    pid = asyncio.run(run())
    assert wait_for(lambda: control_batches(server, topic, 0), "the commit marker") == [(pid, 1, True, True, 0)]


def test_write_txn_markers_v2_refuses_a_marker_not_above_the_producers_epoch(server):
    topic = make_topic(server)

    async def run():
        conn = await connect(server)
        try:
            t = Tv2(conn, f"tv2-{uuid.uuid4().hex[:6]}")
            assert await t.init(version=5) == 0
            assert await t.produce(topic, 0, [b"open"]) == 0  # a transaction open at epoch 0

            async def marker(version: int, epoch: int, tv: int) -> int:
                r = await conn.request(27, version, WriteTxnMarkersRequest(markers=[WritableTxnMarker(
                    producer_id=t.pid, producer_epoch=epoch, transaction_result=False, coordinator_epoch=0,
                    transaction_version=tv, topics=[WritableTxnMarkerTopic(name=topic, partition_indexes=[0])])]),
                    30.0)
                return r.markers[0].topics[0].partitions[0].error_code

            # transaction.version 2: the marker must carry the bumped epoch.
            assert await marker(2, 0, 2) == ErrorCode.INVALID_PRODUCER_EPOCH
            assert control_batches(server, topic, 0) == []
            # Below it (v1, or v2 with 0) the same epoch is taken, as before KIP-890 part 2.
            assert await marker(1, 0, 0) == 0
            # Once that transaction has ended, the same marker again is written again (a resent marker).
            assert await marker(2, 0, 2) == 0
            return t.pid
        finally:
            conn.close()

    pid = asyncio.run(run())
    assert control_batches(server, topic, 0) == [(pid, 0, True, False, 0), (pid, 0, True, False, 0)]
    assert read_all(server, topic, "read_committed") == []


def test_real_clients_keep_working_at_transaction_version_2(server):
    """confluent-kafka's transactional producer (EndTxn v3/v4, AddPartitionsToTxn) and kafka-python's
    read_committed consumer, unchanged."""
    from confluent_kafka import Producer

    topic = make_topic(server, partitions=1)
    p = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": f"ck-{uuid.uuid4().hex[:6]}"})
    p.init_transactions(60)
    p.begin_transaction()
    p.produce(topic, b"kept", partition=0)
    p.commit_transaction(60)
    p.begin_transaction()
    p.produce(topic, b"dropped", partition=0)
    p.abort_transaction(60)
    p.begin_transaction()
    p.produce(topic, b"kept-too", partition=0)
    p.commit_transaction(60)
    assert read_all(server, topic, "read_committed") == [b"kept", b"kept-too"]


def test_kafka_python_transactions_keep_working_at_transaction_version_2(server):
    """kafka-python 3's transactional producer (EndTxn v3, AddPartitionsToTxn, AddOffsetsToTxn with
    TxnOffsetCommit), unchanged, read back by confluent-kafka's read_committed consumer."""
    from confluent_kafka import Consumer, TopicPartition
    from kafka import KafkaProducer
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KTopicPartition

    topic = make_topic(server, partitions=1)
    group = f"kp-{uuid.uuid4().hex[:6]}"
    p = KafkaProducer(bootstrap_servers=server.bootstrap, transactional_id=f"kp-{uuid.uuid4().hex[:6]}")
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"one", partition=0)
        p.send_offsets_to_transaction({KTopicPartition(topic, 0): OffsetAndMetadata(7, "", -1)}, group)
        p.commit_transaction()
        p.begin_transaction()
        p.send(topic, b"gone", partition=0)
        p.abort_transaction()
    finally:
        p.close()
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group, "isolation.level": "read_committed",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        [committed] = c.committed([TopicPartition(topic, 0)], timeout=30)
        assert committed.offset == 7
        c.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and not got:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        time.sleep(1.0)
        while (m := c.poll(0.5)) is not None:
            if m.error() is None:
                got.append(m.value())
        assert got == [b"one"]
    finally:
        c.close()


@pytest.fixture
def level_1_server(tmp_path):
    s = start_server(tmp_path / "tv1", log_dir_count=1, overrides=OVERRIDES)
    try:
        set_transaction_version(s, 1, down=True)
        yield s
    finally:
        s.stop()


def test_tv2_requests_at_level_1_are_answered_by_their_version(level_1_server):
    """As Kafka's coordinator: the finalized level tells producers what they may speak, and each request is
    answered by its own version; a producer that sends EndTxn v5 at transaction.version 1 still gets the bump."""
    server = level_1_server
    topic = make_topic(server)

    async def run():
        conn = await connect(server)
        try:
            t = Tv2(conn, f"tv2-{uuid.uuid4().hex[:6]}")
            assert await t.init(version=5) == 0
            assert await t.produce(topic, 0, [b"x"]) == 0
            r = await t.end5(True)
            assert (r.error_code, r.producer_epoch) == (0, 1)
            r = await t.end5(True, epoch=3)
            assert (r.error_code, r.producer_id, r.producer_epoch) == (ErrorCode.PRODUCER_FENCED, -1, -1)
            # EndTxn v4 from the same producer keeps the older rules: no bump, a second commit INVALID_TXN_STATE.
            assert await t.produce(topic, 1, [b"y"]) == 0
            assert await t.end(True, version=4) == 0
            assert (await t.describe()).producer_epoch == 1
            return t.pid
        finally:
            conn.close()

    pid = asyncio.run(run())
    assert wait_for(lambda: control_batches(server, topic, 1), "the v4 commit marker") == [(pid, 1, True, True, 0)]
    assert control_batches(server, topic, 0) == [(pid, 1, True, True, 0)]
