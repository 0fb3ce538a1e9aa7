"""CreatePartitions on a real cluster (conftest.py: `kjbod cluster up`, a controller and three brokers with three
log dirs each), as kafka-python's admin client drives it: the request reaches a broker-only node, which forwards
it to the controller and answers once its image has the new partitions.  The tests share the module's cluster,
each on topics of its own.

What the cluster adds over one node: the new partitions of a replication factor 3 topic are placed over the three
brokers (each leads one of three new partitions, as Kafka's striped placer does), their followers fetch and join
the ISR, acks=all records land in them, every broker holds its replica in one of its log dirs, and a manual
assignment is checked against the topic's replication factor and taken in its order."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from typing import Any

import pytest

from kjbod.protocol.errors import ErrorCode as E

from .conftest import Cluster, wait_for
from .test_replication_live import PARTITIONS, admin_client, create_rf3, partitions

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's import uses a deprecated importlib API
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning"),
]


def in_sync(cluster: Cluster, topic: str, count: int, rf: int) -> dict[int, dict[str, Any]]:
    """Waits until Metadata lists `count` partitions of `topic`, each with `rf` replicas all in the ISR and a
    leader among them."""

    def ready() -> dict[int, dict[str, Any]] | None:
        parts = partitions(cluster, topic)
        ok = parts is not None and sorted(parts) == list(range(count)) and all(
            len(set(p["replicas"])) == rf and sorted(p["isr"]) == sorted(p["replicas"])
            and p["leader"] in p["replicas"] and p["error"] == 0 for p in parts.values())
        return parts if ok else None

    return wait_for(ready, f"{topic}: {count} partitions, each with {rf} replicas in sync")


def results(response: Any) -> list[tuple[str, int, str | None]]:
    return [(r.name, r.error_code, r.error_message) for r in response.results]


def test_new_partitions_of_a_replicated_topic_get_followers_in_the_isr_and_take_records(cluster):
    before = create_rf3(cluster, "grown3")
    with admin_client(cluster) as admin:
        assert results(admin.create_partitions({"grown3": PARTITIONS + 3})) == [("grown3", 0, None)]
    after = in_sync(cluster, "grown3", PARTITIONS + 3, 3)
    assert all(after[p]["replicas"] == before[p]["replicas"] for p in range(PARTITIONS))
    new = range(PARTITIONS, PARTITIONS + 3)
    # Kafka's striped placer: three new partitions over three unfenced brokers, one leader each (the first
    # replica, as the controller elects it).
    assert sorted(after[p]["leader"] for p in new) == sorted(cluster.broker_ids)
    assert all(after[p]["leader"] == after[p]["replicas"][0] for p in new)

    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    try:
        sent = [producer.send("grown3", b"new-%d" % p, partition=p).get(timeout=60) for p in new]
    finally:
        producer.close()
    assert [(m.partition, m.offset) for m in sent] == [(p, 0) for p in new]
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=20000)
    try:
        consumer.assign([TopicPartition("grown3", p) for p in new])
        read = []
        for record in consumer:
            read.append((record.partition, record.value))
            if len(read) == 3:
                break
    finally:
        consumer.close()
    assert sorted(read) == [(p, b"new-%d" % p) for p in new]

    # Every broker holds its replica of each new partition in one of its log dirs.
    done = subprocess.run([sys.executable, "-m", "kjbod", "log-dirs", "describe", "--bootstrap-server",
                           cluster.bootstrap, "--topic-list", "grown3", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    held: dict[int, list[int]] = {}
    for broker in json.loads(done.stdout)["brokers"]:
        for d in broker["log_dirs"]:
            for p in d["partitions"]:
                if p["partition"] in new and not p["is_temporary"]:
                    held.setdefault(p["partition"], []).append(broker["broker"])
    assert {p: sorted(b) for p, b in held.items()} == {p: sorted(cluster.broker_ids) for p in new}


def test_a_manual_assignment_is_checked_against_the_topic_and_taken_in_its_order(cluster):
    first, second, third = sorted(cluster.broker_ids)
    with admin_client(cluster) as admin:
        admin.create_topics([NewTopic("manual2", 1, 2)])
        in_sync(cluster, "manual2", 1, 2)
        refused = admin.create_partitions({"manual2": {"count": 2, "assignments": [[first, second, third]]}},
                                          raise_errors=False)
        assert results(refused) == [("manual2", E.INVALID_REPLICA_ASSIGNMENT,
                                     "The manual partition assignment includes a partition with 3 replica(s), but "
                                     "this is not consistent with previous partitions, which have 2 replica(s).")]
        taken = admin.create_partitions({"manual2": {"count": 3, "assignments": [[third, first], [second, third]]}})
        assert results(taken) == [("manual2", 0, None)]
    parts = in_sync(cluster, "manual2", 3, 2)
    assert [(parts[p]["replicas"], parts[p]["leader"]) for p in (1, 2)] == [
        ([third, first], third), ([second, third], second)]


def test_the_controller_listener_serves_it_too(cluster):
    # Kafka's controllers serve CreatePartitions on their own listener too (its message definition lists the
    # controller); the brokers then make the new replicas from the metadata they follow.
    from datapath.support import RawClient

    from kjbod.protocol.generated import CreatePartitionsRequest
    from kjbod.protocol.generated.create_partitions_request import CreatePartitionsTopic

    with admin_client(cluster) as admin:
        admin.create_topics([NewTopic("direct", 1, 3)])
    in_sync(cluster, "direct", 1, 3)
    body = CreatePartitionsRequest(topics=[CreatePartitionsTopic(name="direct", count=3, assignments=None)],
                                   timeout_ms=15000)
    with RawClient("127.0.0.1", cluster.port("controller")) as raw:
        assert results(raw.call(body, 3)) == [("direct", 0, None)]
    in_sync(cluster, "direct", 3, 3)
