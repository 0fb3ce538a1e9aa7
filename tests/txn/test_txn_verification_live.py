"""KIP-890 part 1 in a real `kjbod serve`: a partition leader verifies with the transaction coordinator before a
producer's transactional batch opens a transaction on the partition.

Strategy: the single-node server and the hand-made transactional steps of tests/txn/test_txn_coordinator_live.py
(each step checked on the wire); the hanging transaction is looked for where a client sees it, in the last
stable offset a read_committed consumer gets. Real clients on three brokers (leader and coordinator on
different brokers, so the question goes over the wire as AddPartitionsToTxn v5) are in
test_verification_on_three_brokers.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata
from live import start_server

from kjbod.admin import SyncAdminClient
from kjbod.admin.types import ConfigResource, ConfigResourceType
from kjbod.net.connection import ClientConnection
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import AddPartitionsToTxnRequest, ProduceRequest
from kjbod.protocol.generated.add_partitions_to_txn_request import (
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
)
from kjbod.protocol.generated.produce_request import PartitionProduceData, TopicProduceData
from kjbod.protocol.generated.produce_response import ProduceResponse
from kjbod.storage.records import build_batch
from tests.cluster.conftest import running_cluster
from tests.txn.test_txn_coordinator_live import (
    OVERRIDES,
    Txn,
    connect,
    control_batches,
    end_offset,
    make_topic,
    read_all,
    wait_for,
)

pytestmark = pytest.mark.slow

KEY = "transaction.partition.verification.enable"
WAIT_S = 90.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    s = start_server(tmp_path_factory.mktemp("verify"), log_dir_count=2, overrides=OVERRIDES)
    yield s
    s.stop()


async def produce(conn: ClientConnection, t: Txn, topic: str, partition: int, value: bytes, seq: int,
                  version: int = 9) -> ProduceResponse:
    batch = build_batch([(None, value, [], int(time.time() * 1000))], producer_id=t.pid, producer_epoch=t.epoch,
                        base_sequence=seq, is_transactional=True)
    return await conn.request(0, version, ProduceRequest(transactional_id=t.tid, acks=-1, timeout_ms=5000, topic_data=[
        TopicProduceData(name=topic, partition_data=[PartitionProduceData(index=partition, records=batch)])]), 30.0)


def code_of(r: ProduceResponse) -> int:
    return r.responses[0].partition_responses[0].error_code


def plain_record(server, topic: str) -> None:
    p = KafkaProducer(bootstrap_servers=server.bootstrap)
    try:
        p.send(topic, b"plain", partition=0).get(30)
    finally:
        p.close()


def test_a_batch_outside_the_transaction_is_refused_and_leaves_nothing_open(server):
    topic = make_topic(server, partitions=1)

    async def run():
        conn = await connect(server)
        try:
            t = Txn(conn, f"tx-{uuid.uuid4().hex[:6]}")
            assert await t.init() == 0
            # Never added to the transaction: refused (v9: INVALID_TXN_STATE with Kafka's message; v11 and later
            # hear TRANSACTION_ABORTABLE), nothing written.
            r = await produce(conn, t, topic, 0, b"hanging", 0)
            part = r.responses[0].partition_responses[0]
            assert (part.error_code, part.error_message) == (ErrorCode.INVALID_TXN_STATE,
                                                             "Partition was not added to the transaction")
            assert code_of(await produce(conn, t, topic, 0, b"hanging", 0, version=11)) == \
                ErrorCode.TRANSACTION_ABORTABLE
            # Added: verified, appended, committed.
            assert await t.add(topic, 0) == [0]
            assert code_of(await produce(conn, t, topic, 0, b"in", 0)) == 0
            assert code_of(await produce(conn, t, topic, 0, b"in2", 1)) == 0  # open here now: no question
            assert await t.end(True) == 0
            return t
        finally:
            conn.close()

    t = asyncio.run(run())
    wait_for(lambda: control_batches(server, topic, 0), "the commit marker")

    async def after_the_commit():
        # The transaction ended: the producer's next batch without AddPartitionsToTxn must not reopen one.
        conn = await connect(server)
        try:
            t.conn = conn
            return code_of(await produce(conn, t, topic, 0, b"late", 2))
        finally:
            conn.close()

    assert asyncio.run(after_the_commit()) == ErrorCode.INVALID_TXN_STATE
    plain_record(server, topic)
    # Nothing hangs: the last stable offset is the high watermark (in, in2, the marker, plain).
    assert end_offset(server, topic, "read_committed") == end_offset(server, topic, "read_uncommitted") == 4
    assert read_all(server, topic, "read_committed") == [b"in", b"in2", b"plain"]


def test_with_verification_off_the_hanging_transaction_is_back(server):
    """transaction.partition.verification.enable=false (dynamic, the cluster default here): the batch opens a
    transaction no coordinator knows, and read_committed readers stall behind it, the bug KIP-890 fixes."""
    topic = make_topic(server, partitions=1)
    with SyncAdminClient(server.bootstrap, request_timeout=30) as admin:
        default = ConfigResource(ConfigResourceType.BROKER, "")
        admin.incremental_alter_configs({default: {KEY: "false"}})
        try:
            async def run():
                conn = await connect(server)
                try:
                    t = Txn(conn, f"tx-{uuid.uuid4().hex[:6]}")
                    assert await t.init() == 0
                    deadline = time.monotonic() + WAIT_S
                    while (code := code_of(await produce(conn, t, topic, 0, b"hanging", 0))) and \
                            time.monotonic() < deadline:
                        await asyncio.sleep(0.1)  # until the broker has the dynamic value
                    return code
                finally:
                    conn.close()

            assert asyncio.run(run()) == 0
            plain_record(server, topic)
            assert end_offset(server, topic, "read_uncommitted") == 2
            assert end_offset(server, topic, "read_committed") == 0  # stalled at the hanging batch
        finally:
            admin.incremental_alter_configs({default: {KEY: None}})


def test_add_partitions_v4_verifies_and_adds_for_brokers(server):
    topic = make_topic(server, partitions=2)

    async def run():
        conn = await connect(server)
        try:
            t = Txn(conn, f"tx-{uuid.uuid4().hex[:6]}")
            assert await t.init() == 0
            assert await t.add(topic, 0) == [0]

            async def ask(tid: str, epoch: int, verify_only: bool, *parts: int, version: int = 4) -> list[int]:
                r = await conn.request(24, version, AddPartitionsToTxnRequest(transactions=[
                    AddPartitionsToTxnTransaction(transactional_id=tid, producer_id=t.pid, producer_epoch=epoch,
                                                  verify_only=verify_only,
                                                  topics=[AddPartitionsToTxnTopic(name=topic, partitions=list(parts))])
                ]), 30.0)
                assert r.error_code == 0 and [x.transactional_id for x in r.results_by_transaction] == [tid]
                return [p.partition_error_code for x in r.results_by_transaction for tr in x.topic_results
                        for p in tr.results_by_partition]

            assert await ask(t.tid, t.epoch, True, 0, 1) == [0, ErrorCode.TRANSACTION_ABORTABLE]
            assert await ask(t.tid, t.epoch, True, 0, version=5) == [0]
            assert await ask(t.tid, t.epoch + 1, True, 0) == [ErrorCode.PRODUCER_FENCED]
            assert await ask("no-such-id", t.epoch, True, 0) == [ErrorCode.INVALID_PRODUCER_ID_MAPPING]
            assert await ask(t.tid, t.epoch, False, 1) == [0]  # not VerifyOnly: added, as v3 adds
            assert await ask(t.tid, t.epoch, True, 0, 1) == [0, 0]
            assert await t.end(False) == 0
        finally:
            conn.close()

    asyncio.run(run())


def group_coordinated_elsewhere(cluster, tid: str) -> str:
    """A group id whose coordinator is not the transactional id's."""
    from kjbod.protocol.generated import FindCoordinatorRequest

    async def find(key_type: int, key: str) -> int:
        conn = await ClientConnection.open("127.0.0.1", cluster.broker_port(cluster.broker_ids[0]), client_id="t",
                                           connect_timeout=10.0)
        try:
            deadline = time.monotonic() + WAIT_S
            while True:
                r = await conn.request(10, 4, FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key]), 30.0)
                if r.coordinators[0].error_code == 0 or time.monotonic() > deadline:
                    return r.coordinators[0].node_id
                await asyncio.sleep(0.2)
        finally:
            conn.close()

    txn = asyncio.run(find(1, tid))
    return next(g for g in (f"g-{i}" for i in range(100)) if asyncio.run(find(0, g)) != txn)


def test_verification_on_three_brokers(tmp_path):
    """Coordinator and leaders on different brokers: real transactional clients still commit, and a raw batch to
    a leader that is not the coordinator, never added, is refused after the leader asked the coordinator."""
    topic = "verified"
    with running_cluster(tmp_path / "cluster", {"transaction.state.log.num.partitions": "3"},
                         log_dirs=1) as cluster:
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        try:
            admin.create_topics([NewTopic(topic, 3, 3)])
        finally:
            admin.close()
        # confluent-kafka (librdkafka) and kafka-python: one record on each partition (three leaders).
        p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "c-tx"})
        p.init_transactions(WAIT_S)
        p.begin_transaction()
        for i in range(3):
            p.produce(topic, b"c%d" % i, partition=i)
        p.commit_transaction(WAIT_S)
        kp = KafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id="k-tx")
        try:
            kp.init_transactions()
            group = group_coordinated_elsewhere(cluster, "k-tx")
            kp.begin_transaction()
            for i in range(3):
                kp.send(topic, b"k%d" % i, partition=i)
            # TxnOffsetCommit on the group's coordinator, which asks the transaction's coordinator.
            kp.send_offsets_to_transaction({KafkaTopicPartition(topic, 0): OffsetAndMetadata(7, "", -1)}, group)
            kp.commit_transaction()
        finally:
            kp.close()
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
        try:
            [tp] = wait_for(lambda: [x for x in c.committed([TopicPartition(topic, 0)], timeout=WAIT_S)
                                     if x.offset == 7], "the transaction's offset commit")
        finally:
            c.close()

        offsets_group = group_coordinated_elsewhere(cluster, "raw-tx")

        async def raw():
            from kjbod.protocol.generated import (
                FindCoordinatorRequest,
                MetadataRequest,
                TxnOffsetCommitRequest,
            )
            from kjbod.protocol.generated.metadata_request import MetadataRequestTopic
            from kjbod.protocol.generated.txn_offset_commit_request import (
                TxnOffsetCommitRequestPartition,
                TxnOffsetCommitRequestTopic,
            )

            port = cluster.broker_port(cluster.broker_ids[0])
            conn = await ClientConnection.open("127.0.0.1", port, client_id="t", connect_timeout=10.0)
            try:
                tid = "raw-tx"
                found = await conn.request(10, 4, FindCoordinatorRequest(key_type=1, coordinator_keys=[tid]), 30.0)
                coordinator = found.coordinators[0].node_id
                meta = await conn.request(3, 12, MetadataRequest(topics=[MetadataRequestTopic(name=topic)]), 30.0)
                leaders = {p.partition_index: p.leader_id for p in meta.topics[0].partitions}
                partition = next(i for i, b in leaders.items() if b != coordinator)
                brokers = {b.node_id: b.port for b in meta.brokers}
                cconn = await ClientConnection.open("127.0.0.1", brokers[coordinator], client_id="t",
                                                    connect_timeout=10.0)
                lconn = await ClientConnection.open("127.0.0.1", brokers[leaders[partition]], client_id="t",
                                                    connect_timeout=10.0)
                try:
                    t = Txn(cconn, tid)
                    assert await t.init() == 0
                    refused = code_of(await produce(lconn, t, topic, partition, b"hanging", 0))
                    assert await t.add(topic, partition) == [0]
                    accepted = code_of(await produce(lconn, t, topic, partition, b"r", 0))
                    # Offsets sent without AddOffsetsToTxn, to a group coordinator that is not the transaction's:
                    # it asks the transaction's coordinator and refuses them (v3: INVALID_TXN_STATE).
                    g = await conn.request(10, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=[offsets_group]),
                                           30.0)
                    gconn = await ClientConnection.open("127.0.0.1", brokers[g.coordinators[0].node_id],
                                                        client_id="t", connect_timeout=10.0)
                    try:
                        r = await gconn.request(28, 3, TxnOffsetCommitRequest(
                            transactional_id=tid, group_id=offsets_group, producer_id=t.pid,
                            producer_epoch=t.epoch, generation_id=-1, member_id="", topics=[
                                TxnOffsetCommitRequestTopic(name=topic, partitions=[
                                    TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=5)])]),
                            30.0)
                        offsets = r.topics[0].partitions[0].error_code
                    finally:
                        gconn.close()
                    assert await t.end(True) == 0
                    return refused, accepted, offsets
                finally:
                    cconn.close()
                    lconn.close()
            finally:
                conn.close()

        assert asyncio.run(raw()) == (ErrorCode.INVALID_TXN_STATE, 0, ErrorCode.INVALID_TXN_STATE)
