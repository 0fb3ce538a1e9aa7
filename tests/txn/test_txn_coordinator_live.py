"""The transaction coordinator and the log side in a real `kjbod serve`, driven by hand-made requests (a
producer's every step checked on the wire; tests/txn/test_txn_clients_live.py drives real transactional clients).

Strategy: one single-node server for the module (`__transaction_state` with one replica and one partition, the
timed-out check every 200 ms); each test uses its own transactional id and topic.  What the coordinator wrote is
checked where it lands: the markers as control batches in the partition's own segment file (Kafka's layout:
transactional and control attributes, the producer's id and epoch, the marker key and the coordinator epoch),
the transactional offsets through OffsetFetch, and the state through the answers after a restart.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient, NewTopic
from live import LiveServer, start_server

from kjbod.broker.txn import records as rec
from kjbod.net.connection import ClientConnection
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    DescribeConfigsRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    ListTransactionsRequest,
    MetadataRequest,
    OffsetFetchRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
)
from kjbod.protocol.generated.add_partitions_to_txn_request import AddPartitionsToTxnTopic
from kjbod.protocol.generated.describe_configs_request import DescribeConfigsResource
from kjbod.protocol.generated.offset_fetch_request import OffsetFetchRequestGroup, OffsetFetchRequestTopics
from kjbod.protocol.generated.produce_request import PartitionProduceData, TopicProduceData
from kjbod.protocol.generated.txn_offset_commit_request import (
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from kjbod.storage.records import build_batch, iter_batches, iter_records

pytestmark = pytest.mark.slow

OVERRIDES = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "2",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
    "transaction.max.timeout.ms": "120000",
    "transaction.state.log.segment.bytes": "52428800",
}
WAIT_S = 30.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    s = start_server(tmp_path_factory.mktemp("txn"), log_dir_count=2, overrides=OVERRIDES)
    yield s
    s.stop()


def make_topic(server: LiveServer, partitions: int = 2) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()
    return name


class Txn:
    """A transactional producer's requests, by hand."""

    def __init__(self, conn: ClientConnection, tid: str) -> None:
        self.conn, self.tid = conn, tid
        self.pid, self.epoch = -1, -1

    async def call(self, message, version: int):
        return await self.conn.request(message.API_KEY, version, message, 30.0)

    async def init(self, timeout_ms: int = 60_000, version: int = 4) -> int:
        deadline = time.monotonic() + WAIT_S
        while True:
            r = await self.call(InitProducerIdRequest(transactional_id=self.tid, transaction_timeout_ms=timeout_ms),
                                version)
            if r.error_code not in (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS) \
                    or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        if r.error_code == 0:
            self.pid, self.epoch = r.producer_id, r.producer_epoch
        return r.error_code

    async def add(self, topic: str, *partitions: int, epoch: int | None = None) -> list[int]:
        """The codes, once the last transaction's markers are out (CONCURRENT_TRANSACTIONS retried, as clients
        do)."""
        deadline = time.monotonic() + WAIT_S
        while True:
            r = await self.call(AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=self.tid, v3_and_below_producer_id=self.pid,
                v3_and_below_producer_epoch=self.epoch if epoch is None else epoch,
                v3_and_below_topics=[AddPartitionsToTxnTopic(name=topic, partitions=list(partitions))]), 3)
            codes = [p.partition_error_code for t in r.results_by_topic_v3_and_below for p in t.results_by_partition]
            if set(codes) != {ErrorCode.CONCURRENT_TRANSACTIONS} or time.monotonic() > deadline:
                return codes
            await asyncio.sleep(0.05)

    async def end(self, commit: bool, epoch: int | None = None, version: int = 3) -> int:
        r = await self.call(EndTxnRequest(transactional_id=self.tid, producer_id=self.pid,
                                          producer_epoch=self.epoch if epoch is None else epoch,
                                          committed=commit), version)
        return r.error_code


async def connect(server: LiveServer) -> ClientConnection:
    return await ClientConnection.open(server.host, server.port, client_id="txn-test", connect_timeout=10.0)


def control_batches(server: LiveServer, topic: str, partition: int) -> list[tuple[int, int, bool, bool, int]]:
    """(producer id, epoch, transactional, commit, coordinator epoch) of each control batch in the partition."""
    out = []
    for d in server.log_dirs:
        for path in sorted(Path(d).glob(f"{topic}-{partition}/*.log")):
            view = memoryview(path.read_bytes())
            for pos, header in iter_batches(view):
                if header.is_control:
                    [r] = list(iter_records(view[pos:pos + header.size]))
                    commit, coordinator_epoch = rec.read_marker(bytes(r.key), bytes(r.value))
                    out.append((header.producer_id, header.producer_epoch, header.is_transactional, commit,
                                coordinator_epoch))
    return out


def wait_for(check, what: str):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_commit_and_abort_write_markers_to_every_partition(server):
    topic = make_topic(server)

    async def run():
        conn = await connect(server)
        try:
            t = Txn(conn, f"tx-{uuid.uuid4().hex[:6]}")
            assert await t.init() == 0 and t.epoch == 0
            assert await t.add(topic, 0, 1) == [0, 0]
            assert await t.end(True) == 0
            # Then an abort in the next transaction, on one partition.
            assert await t.add(topic, 1) == [0]
            assert await t.end(False) == 0
            return t.pid
        finally:
            conn.close()

    pid = asyncio.run(run())
    wait_for(lambda: len(control_batches(server, topic, 1)) == 2, "both markers on partition 1")
    assert control_batches(server, topic, 0) == [(pid, 0, True, True, 0)]
    assert control_batches(server, topic, 1) == [(pid, 0, True, True, 0), (pid, 0, True, False, 0)]


def test_states_and_error_codes(server):
    topic = make_topic(server)

    async def run():
        conn = await connect(server)
        try:
            t = Txn(conn, f"tx-{uuid.uuid4().hex[:6]}")
            assert await t.init(timeout_ms=120_001) == ErrorCode.INVALID_TRANSACTION_TIMEOUT
            assert await t.end(True) == ErrorCode.INVALID_PRODUCER_ID_MAPPING  # never initialized
            assert await t.init() == 0
            assert await t.end(True) == ErrorCode.INVALID_TXN_STATE  # nothing in the transaction
            assert await t.add("no-such-topic", 0) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
            assert await t.add(topic, 0) == [0]
            assert await t.end(True) == 0
            deadline = time.monotonic() + WAIT_S
            while (code := await t.end(True)) == ErrorCode.CONCURRENT_TRANSACTIONS and time.monotonic() < deadline:
                await asyncio.sleep(0.05)  # PrepareCommit: the markers are still going out
            assert code == 0  # a retry of the completed commit
            assert await t.end(False) == ErrorCode.INVALID_TXN_STATE
            r = await t.call(InitProducerIdRequest(transactional_id="", transaction_timeout_ms=1000), 4)
            assert r.error_code == ErrorCode.INVALID_REQUEST
        finally:
            conn.close()

    asyncio.run(run())


def test_a_second_instance_fences_the_first_and_aborts_its_transaction(server):
    topic = make_topic(server)

    async def run():
        conn = await connect(server)
        try:
            tid = f"tx-{uuid.uuid4().hex[:6]}"
            first, second = Txn(conn, tid), Txn(conn, tid)
            assert await first.init() == 0
            assert await first.add(topic, 0) == [0]
            assert await second.init() == 0  # CONCURRENT_TRANSACTIONS while the abort runs, then a new epoch
            assert second.pid == first.pid and second.epoch >= first.epoch + 1
            assert await first.add(topic, 1) == [ErrorCode.PRODUCER_FENCED]
            assert await first.end(True) == ErrorCode.PRODUCER_FENCED
            assert await first.end(True, version=1) == ErrorCode.INVALID_PRODUCER_EPOCH  # before PRODUCER_FENCED
            return first.pid, first.epoch
        finally:
            conn.close()

    pid, epoch = asyncio.run(run())
    # The fenced transaction was aborted with the bumped epoch.
    assert wait_for(lambda: control_batches(server, topic, 0), "the abort marker") == [
        (pid, epoch + 1, True, False, 0)]


def test_a_transaction_past_its_timeout_is_aborted(server):
    topic = make_topic(server)

    async def run():
        conn = await connect(server)
        try:
            t = Txn(conn, f"tx-{uuid.uuid4().hex[:6]}")
            assert await t.init(timeout_ms=500) == 0
            assert await t.add(topic, 0) == [0]
            return t
        finally:
            conn.close()

    t = asyncio.run(run())
    assert wait_for(lambda: control_batches(server, topic, 0), "the timed-out abort") == [
        (t.pid, t.epoch + 1, True, False, 0)]

    async def late():
        conn = await connect(server)
        try:
            t.conn = conn
            return await t.end(True)
        finally:
            conn.close()

    assert asyncio.run(late()) == ErrorCode.PRODUCER_FENCED


def test_transactional_offsets_show_only_after_the_commit(server):
    topic = make_topic(server)
    group = f"g-{uuid.uuid4().hex[:6]}"

    async def run():
        conn = await connect(server)
        try:
            r = await conn.request(10, 1, FindCoordinatorRequest(key=group, key_type=0), 30.0)
            assert r.error_code == 0
            t = Txn(conn, f"tx-{uuid.uuid4().hex[:6]}")
            assert await t.init() == 0

            async def commit_offset(offset: int) -> int:
                deadline = time.monotonic() + WAIT_S
                while True:
                    r = await t.call(AddOffsetsToTxnRequest(transactional_id=t.tid, producer_id=t.pid,
                                                            producer_epoch=t.epoch, group_id=group), 3)
                    if r.error_code != ErrorCode.CONCURRENT_TRANSACTIONS or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.05)
                assert r.error_code == 0
                r = await t.call(TxnOffsetCommitRequest(
                    transactional_id=t.tid, group_id=group, producer_id=t.pid, producer_epoch=t.epoch,
                    topics=[TxnOffsetCommitRequestTopic(name=topic, partitions=[TxnOffsetCommitRequestPartition(
                        partition_index=0, committed_offset=offset, committed_metadata="m")])]), 3)
                return r.topics[0].partitions[0].error_code

            async def fetched(require_stable: bool = False):
                r = await conn.request(9, 8, OffsetFetchRequest(require_stable=require_stable, groups=[
                    OffsetFetchRequestGroup(group_id=group, topics=[
                        OffsetFetchRequestTopics(name=topic, partition_indexes=[0])])]), 30.0)
                part = r.groups[0].topics[0].partitions[0]
                return (part.committed_offset, part.error_code) if require_stable else part.committed_offset

            assert await commit_offset(5) == 0
            assert await fetched() == -1  # pending in the transaction
            assert await fetched(require_stable=True) == (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)
            assert await t.end(True) == 0
            deadline = time.monotonic() + WAIT_S
            while await fetched() != 5 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert await fetched() == 5
            assert await commit_offset(9) == 0
            assert await t.end(False) == 0
            await asyncio.sleep(0.5)
            assert await fetched() == 5  # the aborted offset never shows
        finally:
            conn.close()

    asyncio.run(run())


def test_find_coordinator_names_the_leader_of_the_ids_partition(server):
    async def run():
        conn = await connect(server)
        try:
            return await conn.request(10, 1, FindCoordinatorRequest(key="tx-any", key_type=1), 30.0)
        finally:
            conn.close()

    r = asyncio.run(run())
    assert (r.error_code, r.node_id, r.port) == (0, server.node_id, server.port)


def test_a_restarted_coordinator_keeps_the_state(server):
    topic = make_topic(server)
    tid = f"tx-{uuid.uuid4().hex[:6]}"

    async def before():
        conn = await connect(server)
        try:
            t = Txn(conn, tid)
            assert await t.init() == 0
            assert await t.add(topic, 0) == [0]
            assert await t.end(True) == 0
            assert await t.add(topic, 1) == [0]  # left Ongoing across the restart
            return t
        finally:
            conn.close()

    t = asyncio.run(before())
    wait_for(lambda: control_batches(server, topic, 0), "the commit marker")
    server.stop()
    server.start()

    async def after():
        conn = await connect(server)
        try:
            t.conn = conn
            deadline = time.monotonic() + WAIT_S
            while (code := await t.end(True)) in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR,
                                                  ErrorCode.COORDINATOR_NOT_AVAILABLE) \
                    and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert code == 0  # the Ongoing transaction with its partition was loaded back
            again = Txn(conn, tid)
            assert await again.init() == 0
            assert (again.pid, again.epoch) == (t.pid, t.epoch + 1)
        finally:
            conn.close()

    asyncio.run(after())
    wait_for(lambda: control_batches(server, topic, 1), "the commit marker written after the restart")


def test_the_transaction_topic_follows_its_keys_and_is_internal(server):
    async def run():
        conn = await connect(server)
        try:
            t = Txn(conn, f"tx-{uuid.uuid4().hex[:6]}")
            assert await t.init() == 0  # the topic exists from the first transactional InitProducerId
            meta = await conn.request(3, 12, MetadataRequest(topics=None), 30.0)
            configs = await conn.request(32, 4, DescribeConfigsRequest(resources=[DescribeConfigsResource(
                resource_type=2, resource_name="__transaction_state", configuration_keys=None)]), 30.0)
            produced = await conn.request(0, 9, ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[
                TopicProduceData(name="__transaction_state", partition_data=[PartitionProduceData(
                    index=0, records=build_batch([(b"k", b"v", [], 0)]))])]), 30.0)
            return meta, configs, produced
        finally:
            conn.close()

    meta, configs, produced = asyncio.run(run())
    [topic] = [t for t in meta.topics if t.name == "__transaction_state"]
    assert topic.is_internal and len(topic.partitions) == 2
    assert all(len(p.replica_nodes) == 1 for p in topic.partitions)
    values = {c.name: c.value for c in configs.results[0].configs}
    assert values["cleanup.policy"] == "compact" and values["min.insync.replicas"] == "1"
    assert values["segment.bytes"] == "52428800"
    part = produced.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION  # only the coordinator writes it


# ------------------------------------------------------------------------------------------------ the log side
async def produce_txn(conn: ClientConnection, t: Txn, topic: str, partition: int, values: list[bytes],
                      seq: int) -> int:
    batch = build_batch([(None, v, [], int(time.time() * 1000)) for v in values], producer_id=t.pid,
                        producer_epoch=t.epoch, base_sequence=seq, is_transactional=True)
    r = await conn.request(0, 9, ProduceRequest(transactional_id=t.tid, acks=-1, timeout_ms=5000, topic_data=[
        TopicProduceData(name=topic, partition_data=[PartitionProduceData(index=partition, records=batch)])]), 30.0)
    return r.responses[0].partition_responses[0].error_code


def read_all(server: LiveServer, topic: str, isolation: str) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=server.bootstrap, isolation_level=isolation, enable_auto_commit=False,
                      auto_offset_reset="earliest", consumer_timeout_ms=1500)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        return [r.value for r in c]
    finally:
        c.close()


def end_offset(server: LiveServer, topic: str, isolation: str) -> int:
    """ListOffsets latest, as a consumer of that isolation level asks it."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=server.bootstrap, isolation_level=isolation)
    try:
        tp = TopicPartition(topic, 0)
        return c.end_offsets([tp])[tp]
    finally:
        c.close()


def confluent_read_all(server: LiveServer, topic: str, isolation: str, want: int) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "isolation.level": isolation, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        idle = 0
        while time.monotonic() < deadline and (len(out) < want or idle < 3):
            m = c.poll(0.5)
            if m is None:
                idle += 1
                continue
            idle = 0
            if m.error() is None:
                out.append(m.value())
        return out
    finally:
        c.close()


def test_read_committed_consumers_skip_aborted_and_wait_for_open_transactions(server):
    topic = make_topic(server, partitions=1)

    async def run():
        conn = await connect(server)
        try:
            t = Txn(conn, f"tx-{uuid.uuid4().hex[:6]}")
            assert await t.init() == 0
            assert await t.add(topic, 0) == [0]
            assert await produce_txn(conn, t, topic, 0, [b"c1", b"c2"], 0) == 0
            assert await t.end(True) == 0
            assert await t.add(topic, 0) == [0]
            assert await produce_txn(conn, t, topic, 0, [b"a1", b"a2"], 2) == 0
            assert await t.end(False) == 0
            assert await t.add(topic, 0) == [0]
            assert await produce_txn(conn, t, topic, 0, [b"c3"], 4) == 0
            assert await t.end(True) == 0
            assert await t.add(topic, 0) == [0]
            assert await produce_txn(conn, t, topic, 0, [b"open"], 5) == 0  # left open
            return t
        finally:
            conn.close()

    asyncio.run(run())
    wait_for(lambda: len(control_batches(server, topic, 0)) == 3, "three markers")
    committed = [b"c1", b"c2", b"c3"]
    assert read_all(server, topic, "read_committed") == committed
    assert read_all(server, topic, "read_uncommitted") == [b"c1", b"c2", b"a1", b"a2", b"c3", b"open"]
    assert end_offset(server, topic, "read_committed") == 8  # the open transaction's first offset (the LSO)
    assert end_offset(server, topic, "read_uncommitted") == 9  # the high watermark
    assert confluent_read_all(server, topic, "read_committed", 3) == committed
    assert confluent_read_all(server, topic, "read_uncommitted", 6) == [
        b"c1", b"c2", b"a1", b"a2", b"c3", b"open"]


def test_a_transactional_batch_needs_the_transactional_id(server):
    topic = make_topic(server, partitions=1)

    async def run():
        conn = await connect(server)
        try:
            batch = build_batch([(None, b"x", [], 0)], producer_id=5, producer_epoch=0, base_sequence=0,
                                is_transactional=True)
            r = await conn.request(0, 9, ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[TopicProduceData(
                name=topic, partition_data=[PartitionProduceData(index=0, records=batch)])]), 30.0)
            return r.responses[0].partition_responses[0].error_code
        finally:
            conn.close()

    assert asyncio.run(run()) == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_aborted_records_stay_hidden_after_a_restart(server):
    topic = make_topic(server, partitions=1)

    async def run():
        conn = await connect(server)
        try:
            t = Txn(conn, f"tx-{uuid.uuid4().hex[:6]}")
            assert await t.init() == 0
            for seq, (value, commit) in enumerate([(b"kept", True), (b"gone", False), (b"kept2", True)]):
                assert await t.add(topic, 0) == [0]
                assert await produce_txn(conn, t, topic, 0, [value], seq) == 0
                assert await t.end(commit) == 0
        finally:
            conn.close()

    asyncio.run(run())
    wait_for(lambda: len(control_batches(server, topic, 0)) == 3, "three markers")
    server.stop()
    server.start()
    deadline = time.monotonic() + WAIT_S
    seen: list[bytes] = []
    while len(seen) < 2 and time.monotonic() < deadline:
        seen = read_all(server, topic, "read_committed")
    assert seen == [b"kept", b"kept2"]


def test_describe_and_list_transactions(server):
    topic = make_topic(server, partitions=2)

    async def run():
        conn = await connect(server)
        try:
            t = Txn(conn, f"tx-{uuid.uuid4().hex[:6]}")
            assert await t.init(timeout_ms=45_000) == 0
            assert await t.add(topic, 1, 0) == [0, 0]
            described = await conn.request(65, 0, DescribeTransactionsRequest(
                transactional_ids=[t.tid, "tx-never-seen"]), 30.0)
            listed = await conn.request(66, 1, ListTransactionsRequest(
                state_filters=["Ongoing", "Sleeping"], producer_id_filters=[t.pid], duration_filter=-1), 30.0)
            none_old = await conn.request(66, 1, ListTransactionsRequest(
                state_filters=[], producer_id_filters=[t.pid], duration_filter=3_600_000), 30.0)
            # v2 (KIP-1152): the pattern must match the whole id; null or empty keeps every id
            by_pattern = {pattern: await conn.request(66, 2, ListTransactionsRequest(
                producer_id_filters=[t.pid], transactional_id_pattern=pattern), 30.0)
                for pattern in ("tx-.*", "tx", t.tid[:5] + ".+", "", None, "tx-(")}
            assert await t.end(False) == 0
            return t, described, listed, none_old, by_pattern
        finally:
            conn.close()

    t, described, listed, none_old, by_pattern = asyncio.run(run())
    ids = {p: [s.transactional_id for s in r.transaction_states] for p, r in by_pattern.items()}
    assert ids == {"tx-.*": [t.tid], "tx": [], t.tid[:5] + ".+": [t.tid], "": [t.tid], None: [t.tid], "tx-(": []}
    assert by_pattern["tx-("].error_code == ErrorCode.INVALID_REGULAR_EXPRESSION
    assert all(r.error_code == 0 for p, r in by_pattern.items() if p != "tx-(")
    known, unknown = described.transaction_states
    assert (known.error_code, known.transactional_id, known.transaction_state, known.transaction_timeout_ms,
            known.producer_id, known.producer_epoch) == (0, t.tid, "Ongoing", 45_000, t.pid, t.epoch)
    assert known.transaction_start_time_ms > 0
    assert [(d.topic, d.partitions) for d in known.topics] == [(topic, [0, 1])]
    assert (unknown.transactional_id, unknown.error_code) == ("tx-never-seen", ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
    assert listed.error_code == 0 and listed.unknown_state_filters == ["Sleeping"]
    assert [(s.transactional_id, s.producer_id, s.transaction_state) for s in listed.transaction_states] == [
        (t.tid, t.pid, "Ongoing")]
    assert none_old.transaction_states == []  # not running for an hour
