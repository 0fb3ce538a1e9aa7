"""KIP-392 on a real cluster: brokers in three racks (`kjbod cluster up --racks`), replica.selector.class set to
Kafka's RackAwareReplicaSelector; a consumer that names its rack is sent by the leader to the in-sync replica
there, and reads every record from it."""

from __future__ import annotations

import uuid
import warnings

import pytest
from datapath.support import RawClient, iter_all_records

from kjbod.protocol.generated import FetchRequest
from kjbod.server.config import RACK_AWARE_REPLICA_SELECTOR
from tests.metrics.scrape import scrape

from .conftest import Cluster, running_cluster, wait_for
from .test_cluster_metrics_live import metrics_port
from .test_replication_live import partitions

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

pytestmark = pytest.mark.slow

RACKS = ("az-a", "az-b", "az-c")
RECORDS = 30


@pytest.fixture(scope="module")
def racked(tmp_path_factory: pytest.TempPathFactory):
    with running_cluster(tmp_path_factory.mktemp("racks"), {"replica.selector.class": RACK_AWARE_REPLICA_SELECTOR},
                         log_dirs=1, racks=",".join(RACKS)) as cluster:
        yield cluster


def rack_of(broker: int) -> str:
    return RACKS[(broker - 1) % len(RACKS)]


def topic_with_records(cluster: Cluster) -> tuple[str, dict]:
    topic = f"ff-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=10_000)
    try:
        admin.create_topics([NewTopic(topic, 1, 3)])
    finally:
        admin.close()
    part = wait_for(lambda: (ps := partitions(cluster, topic)) is not None and len(ps.get(0, {}).get("isr", [])) == 3
                    and ps[0]["leader"] >= 0 and ps[0], f"{topic}: three replicas in sync")
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    try:
        for i in range(RECORDS):
            producer.send(topic, b"value-%d" % i, partition=0)
        producer.flush()
    finally:
        producer.close()
    return topic, part


def consumer_fetch(cluster: Cluster, broker: int, topic: str, rack: str, version: int = 12):
    with RawClient("127.0.0.1", cluster.broker_port(broker)) as client:
        resp = client.call(FetchRequest(
            replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, rack_id=rack,
            topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
                partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]), version)
    (t,) = resp.responses
    (p,) = t.partitions
    return p


def test_the_leader_names_the_in_sync_replica_in_the_consumers_rack(racked):
    topic, part = topic_with_records(racked)
    leader = part["leader"]
    follower = next(b for b in part["replicas"] if b != leader)

    # From its rack's replica: the leader answers at once with no records, only where to read.
    p = consumer_fetch(racked, leader, topic, rack_of(follower))
    assert (p.error_code, p.preferred_read_replica, p.records or b"") == (0, follower, b"")
    assert p.high_watermark == RECORDS
    # The consumer in the leader's own rack, in a rack with no replica, or naming none reads from the leader.
    for rack in (rack_of(leader), "az-elsewhere", ""):
        p = consumer_fetch(racked, leader, topic, rack)
        assert p.preferred_read_replica == -1, rack
        assert len(list(iter_all_records(p.records or b""))) == RECORDS, rack
    # Before v11 a fetch has no rack: nothing to prefer.
    p = consumer_fetch(racked, leader, topic, "", version=10)
    assert p.preferred_read_replica == -1
    # The replica named serves the consumer, up to its own high watermark.
    p = wait_for(lambda: (q := consumer_fetch(racked, follower, topic, rack_of(follower))).high_watermark == RECORDS
                 and q, f"broker {follower} has the high watermark")
    assert p.error_code == 0 and p.preferred_read_replica == -1
    assert [r.value for r in iter_all_records(p.records)] == [b"value-%d" % i for i in range(RECORDS)]


def test_a_confluent_kafka_consumer_with_client_rack_reads_from_its_racks_replica(racked):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic, part = topic_with_records(racked)
    leader = part["leader"]
    follower = next(b for b in part["replicas"] if b != leader)

    def consumer_fetches(broker: int) -> float:
        """Consumers' Fetch requests the broker has answered (every version)."""
        samples = scrape(metrics_port(racked, f"broker-{broker}"))
        return sum(n for (name, labels), n in samples.items() if name == "kafka_network_requestmetrics_requests_total"
                   and dict(labels).get("request") == "FetchConsumer")

    before = consumer_fetches(follower)
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": racked.bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
        "client.rack": rack_of(follower), "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline_polls = 300
        while len(got) < RECORDS and deadline_polls:
            deadline_polls -= 1
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    assert got == [b"value-%d" % i for i in range(RECORDS)]
    # librdkafka followed the leader's answer: the replica in its rack served its fetches.
    assert consumer_fetches(follower) > before
