"""A consumer group on a three-broker cluster (`kjbod cluster up`: a controller and three brokers): the offsets
topic gets Kafka's default three replicas, the coordinator is the leader of the group's partition, and when that
broker is killed (SIGKILL) the new leader loads the partition and answers the offsets the group committed; the
other brokers answer NOT_COORDINATOR."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from kjbod.net.connection import ClientConnection
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import FindCoordinatorRequest, OffsetFetchRequest
from kjbod.protocol.generated.offset_fetch_request import OffsetFetchRequestGroup
from tests.cluster.conftest import running_cluster

pytestmark = pytest.mark.slow

WAIT_S = 90.0
GROUP = "cluster-group"
TOPIC = "events"


async def ask(port: int, message, version: int):
    conn = await ClientConnection.open("127.0.0.1", port, client_id="groups-test", connect_timeout=10.0)
    try:
        return await conn.request(message.API_KEY, version, message, 30.0)
    finally:
        conn.close()


def coordinator(cluster, via: int) -> int:
    found = asyncio.run(ask(cluster.broker_port(via), FindCoordinatorRequest(key_type=0, coordinator_keys=[GROUP]),
                            4)).coordinators[0]
    return found.node_id if found.error_code == 0 else -1


def committed(cluster) -> dict[int, int | None]:
    c = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id=GROUP, enable_auto_commit=False)
    try:
        return {p: c.committed(TopicPartition(TOPIC, p)) for p in range(2)}
    finally:
        c.close()


def test_committed_offsets_survive_a_coordinator_failover(tmp_path):
    settings = {"group.initial.rebalance.delay.ms": "100", "offsets.topic.num.partitions": "3"}
    with running_cluster(tmp_path / "cluster", settings, log_dirs=1) as cluster:
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        try:
            admin.create_topics([NewTopic(TOPIC, 2, 3)])
        finally:
            admin.close()
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
        for i in range(10):
            producer.send(TOPIC, value=f"v{i}".encode(), partition=i % 2)
        producer.flush()
        producer.close()
        consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id=GROUP, auto_offset_reset="earliest",
                                 enable_auto_commit=False)
        try:
            consumer.subscribe([TOPIC])
            seen: list = []
            deadline = time.monotonic() + WAIT_S
            while len(seen) < 10 and time.monotonic() < deadline:
                for batch in consumer.poll(timeout_ms=200).values():
                    seen.extend(r.value for r in batch)
            assert sorted(seen) == sorted(f"v{i}".encode() for i in range(10))
            consumer.commit()
        finally:
            consumer.close()
        assert committed(cluster) == {0: 5, 1: 5}

        brokers = sorted(cluster.broker_ids)
        old = coordinator(cluster, brokers[0])
        assert old in brokers
        cluster.signal(f"broker-{old}", signal.SIGKILL)
        survivors = [b for b in brokers if b != old]
        deadline = time.monotonic() + WAIT_S
        new = -1
        while time.monotonic() < deadline:
            new = coordinator(cluster, survivors[0])
            if new in survivors:
                break
            time.sleep(0.2)
        assert new in survivors, "no broker took the group's partition over"
        assert committed(cluster) == {0: 5, 1: 5}  # read from the partition the new leader loaded

        cluster.start(f"broker-{old}")
        now = coordinator(cluster, survivors[0])
        for b in brokers:
            if b == now:
                continue
            answer = asyncio.run(ask(cluster.broker_port(b), OffsetFetchRequest(groups=[
                OffsetFetchRequestGroup(group_id=GROUP, topics=None)]), 8))
            assert answer.groups[0].error_code == ErrorCode.NOT_COORDINATOR, b
