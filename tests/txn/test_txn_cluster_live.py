"""Transactions on a three-broker cluster (`kjbod cluster up`): `__transaction_state` gets Kafka's default three
replicas, a transaction over a topic whose partitions are led by different brokers gets its markers through
WriteTxnMarkers to each leader (and its followers replicate them), and when the coordinator is killed (SIGKILL)
the broker that takes over its partition loads the transactional id's state: the producer's next instance gets
the next epoch of the same producer id, and read_committed readers keep skipping the aborted records."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import NotLeaderForPartitionError

from kjbod.net.connection import ClientConnection
from kjbod.protocol.generated import FindCoordinatorRequest, InitProducerIdRequest
from tests.cluster.conftest import running_cluster

pytestmark = pytest.mark.slow

WAIT_S = 90.0
TOPIC = "txn-events"


async def ask(port: int, message, version: int):
    conn = await ClientConnection.open("127.0.0.1", port, client_id="txn-test", connect_timeout=10.0)
    try:
        return await conn.request(message.API_KEY, version, message, 30.0)
    finally:
        conn.close()


def coordinator(cluster, via: int, tid: str) -> int:
    found = asyncio.run(ask(cluster.broker_port(via), FindCoordinatorRequest(key_type=1, coordinator_keys=[tid]),
                            4)).coordinators[0]
    return found.node_id if found.error_code == 0 else -1


def read_committed(bootstrap: str, want: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                  "isolation.level": "read_committed", "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(TOPIC, p, 0) for p in range(3)])
        out: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        idle = 0
        while time.monotonic() < deadline and (len(out) < want or idle < 4):
            m = c.poll(0.5)
            if m is None:
                idle += 1
                continue
            idle = 0
            if m.error() is None:
                out.append(m.value())
        return sorted(out)
    finally:
        c.close()


def test_markers_reach_every_leader_and_a_new_coordinator_loads_the_state(tmp_path):
    tid = "cluster-tx"
    with running_cluster(tmp_path / "cluster", {"transaction.state.log.num.partitions": "3"},
                         log_dirs=1) as cluster:
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        try:
            admin.create_topics([NewTopic(TOPIC, 3, 3)])
        finally:
            admin.close()
        p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid})
        p.init_transactions(WAIT_S)
        for values, commit in (([b"c0", b"c1", b"c2"], True), ([b"a0", b"a1", b"a2"], False)):
            p.begin_transaction()
            for i, v in enumerate(values):
                p.produce(TOPIC, v, partition=i)  # one record on each partition: three leaders
            if commit:
                p.commit_transaction(WAIT_S)
            else:
                p.flush(WAIT_S)
                p.abort_transaction(WAIT_S)
        assert read_committed(cluster.bootstrap, 3) == [b"c0", b"c1", b"c2"]

        # DescribeProducers: the leader describes the producer (both its transactions ended on partition 0), a
        # follower answers NOT_LEADER_OR_FOLLOWER, as Kafka's does.
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        try:
            [meta] = admin.describe_topics([TOPIC])
            leader = next(q["leader_id"] for q in meta["partitions"] if q["partition_index"] == 0)
            state = admin.describe_producers([KafkaTopicPartition(TOPIC, 0)])  # routed to the leader
            with pytest.raises(NotLeaderForPartitionError):
                admin.describe_producers([KafkaTopicPartition(TOPIC, 0)],
                                         broker_id=next(b for b in cluster.broker_ids if b != leader))
        finally:
            admin.close()
        [producer] = state[KafkaTopicPartition(TOPIC, 0)].active_producers
        assert (producer.last_sequence, producer.current_transaction_start_offset) == (1, -1)
        assert producer.coordinator_epoch >= 0  # written by a marker

        brokers = cluster.broker_ids
        old = coordinator(cluster, brokers[0], tid)
        assert old in brokers
        answer = asyncio.run(ask(cluster.broker_port(old), InitProducerIdRequest(
            transactional_id=tid, transaction_timeout_ms=60_000), 4))
        assert answer.error_code == 0
        pid, epoch = answer.producer_id, answer.producer_epoch
        cluster.signal(f"broker-{old}", signal.SIGKILL)
        survivor = next(b for b in brokers if b != old)
        deadline = time.monotonic() + WAIT_S
        while (new := coordinator(cluster, survivor, tid)) in (-1, old) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert new not in (-1, old)
        deadline = time.monotonic() + WAIT_S
        while True:
            answer = asyncio.run(ask(cluster.broker_port(new), InitProducerIdRequest(
                transactional_id=tid, transaction_timeout_ms=60_000), 4))
            if answer.error_code == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert (answer.error_code, answer.producer_id, answer.producer_epoch) == (0, pid, epoch + 1)
        survivors = ",".join(f"127.0.0.1:{cluster.broker_port(b)}" for b in brokers if b != old)
        assert read_committed(survivors, 3) == [b"c0", b"c1", b"c2"]
