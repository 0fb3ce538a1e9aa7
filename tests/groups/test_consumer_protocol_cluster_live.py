"""A KIP-848 consumer group on a three-broker cluster (`kjbod cluster up`): when the group's coordinator is
killed (SIGKILL), the broker that takes its `__consumer_offsets` partition over loads the group's records, and the
confluent-kafka consumers (group.protocol=consumer) carry on with their member epochs: the group epoch stays what
it was (a group rebuilt from scratch would start again at 1 and count only the members that rejoined), and at no
moment is a partition held by both consumers."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from kjbod.net.connection import ClientConnection
from kjbod.protocol.generated import ConsumerGroupDescribeRequest, FindCoordinatorRequest
from tests.cluster.conftest import running_cluster

pytestmark = pytest.mark.slow

WAIT_S = 90.0
GROUP = "kip848-cluster-group"
TOPIC = "events"


async def ask(port: int, message, version: int):
    conn = await ClientConnection.open("127.0.0.1", port, client_id="kip848-test", connect_timeout=10.0)
    try:
        return await conn.request(message.API_KEY, version, message, 30.0)
    finally:
        conn.close()


def coordinator(cluster, via: int) -> int:
    found = asyncio.run(ask(cluster.broker_port(via), FindCoordinatorRequest(key_type=0, coordinator_keys=[GROUP]),
                            4)).coordinators[0]
    return found.node_id if found.error_code == 0 else -1


def described(cluster, node: int):
    return asyncio.run(ask(cluster.broker_port(node), ConsumerGroupDescribeRequest(group_ids=[GROUP]), 0)).groups[0]


def consumer(cluster, name: str) -> Consumer:
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": GROUP, "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "client.id": name})
    c.subscribe([TOPIC])
    return c


def settle(consumers: list[Consumer], partitions: int) -> list[set[int]]:
    deadline = time.monotonic() + WAIT_S
    while True:
        for c in consumers:
            c.poll(0.05)
        holdings = [{tp.partition for tp in c.assignment()} for c in consumers]
        flat = [p for h in holdings for p in h]
        assert len(flat) == len(set(flat)), f"a partition held twice: {holdings}"
        if sorted(flat) == list(range(partitions)) and all(holdings):
            return holdings
        assert time.monotonic() < deadline, f"the consumers did not settle: {holdings}"


def test_the_group_survives_a_coordinator_failover(tmp_path):
    settings = {"offsets.topic.num.partitions": "3", "group.consumer.heartbeat.interval.ms": "300",
                "group.consumer.min.heartbeat.interval.ms": "100", "group.consumer.session.timeout.ms": "30000",
                "group.consumer.min.session.timeout.ms": "1000"}
    with running_cluster(tmp_path / "cluster", settings, log_dirs=1) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, 4, 3)]).values():
            f.result(60)
        a, b = consumer(cluster, "a"), consumer(cluster, "b")
        try:
            settle([a, b], 4)
            c = consumer(cluster, "c")  # joins and leaves: the group epoch moves on to 4
            settle([a, b, c], 4)
            c.close()
            settle([a, b], 4)
            brokers = sorted(cluster.broker_ids)
            old = coordinator(cluster, brokers[0])
            assert old in brokers
            before = described(cluster, old)
            assert before.error_code == 0 and before.group_epoch == 4 and len(before.members) == 2
            cluster.signal(f"broker-{old}", signal.SIGKILL)
            survivors = [x for x in brokers if x != old]
            deadline = time.monotonic() + WAIT_S
            new = -1
            while time.monotonic() < deadline:
                for x in (a, b):
                    x.poll(0.05)
                new = coordinator(cluster, survivors[0])
                if new in survivors and described(cluster, new).error_code == 0:
                    break
            assert new in survivors, "no broker took the group's partition over"
            settle([a, b], 4)
            after = described(cluster, new)
            assert after.group_epoch == 4  # loaded, not rebuilt
            assert sorted(m.member_id for m in after.members) == sorted(m.member_id for m in before.members)
        finally:
            a.close()
            b.close()
