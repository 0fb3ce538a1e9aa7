"""Inter-broker replication throttles on a real cluster (`kjbod cluster up`: a controller and three brokers).

* A new follower of a 200 MB backlog copies it at the throttled rate: two 100 MB partitions led by broker 1 are
  reassigned to (1, 2) at once, one throttled only on the leader's side (broker 1's
  `leader.replication.throttled.rate`, `leader.replication.throttled.replicas` = `0:1`), the other only on the
  follower's (broker 2's `follower.replication.throttled.rate`, `follower.replication.throttled.replicas` = `1:2`),
  each at 5 MB/s: 200 MB at 10 MB/s, about 20 s.  Each partition joining the ISR is timed; the bounds are generous
  (0.5x to 3x of 20 s): the lower one is what an unthrottled copy would break.
* An in-sync follower is never throttled: with both rates at 1 kB/s and `*` lists on an RF 2 topic that is in
  sync, 20 MB produced with acks=all are all acknowledged (a throttled follower would need hours).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from kjbod.admin import SyncAdminClient
from kjbod.admin.types import ConfigResource, ConfigResourceType, NewTopic
from tests.cluster.conftest import Cluster, running_cluster, wait_for

pytestmark = pytest.mark.slow

MB = 1_000_000
PARTITION_BYTES = 100 * MB
RATE = 5 * MB  # per direction: each partition is throttled by one of them
EXPECTED_S = 2 * PARTITION_BYTES / (2 * RATE)
VALUE = b"x" * 100_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("throttle"), brokers=3, log_dirs=1) as running:
        yield running


def produce(cluster: Cluster, topic: str, partition: int, nbytes: int, *, acks: str) -> int:
    """Sends `nbytes` of 100 kB records; returns how many were acknowledged."""
    acked = 0

    def done(err, _msg) -> None:
        nonlocal acked
        if err is None:
            acked += 1

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": acks, "linger.ms": 20,
                         "batch.size": 1_000_000, "message.timeout.ms": 240_000, "enable.idempotence": False})
    for _ in range(nbytes // len(VALUE)):
        while True:
            try:
                producer.produce(topic, VALUE, partition=partition, on_delivery=done)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(300) == 0
    return acked


def isr(admin: SyncAdminClient, topic: str) -> dict[int, tuple[int, ...]]:
    return {p.partition: tuple(sorted(p.isr)) for p in admin.describe_topics([topic])[topic].partitions}


def set_rates(admin: SyncAdminClient, rate: int) -> None:
    admin.incremental_alter_configs({ConfigResource(ConfigResourceType.BROKER, ""): {
        "leader.replication.throttled.rate": str(rate), "follower.replication.throttled.rate": str(rate)}})


def test_a_throttled_new_follower_copies_at_the_rate(cluster: Cluster):
    with SyncAdminClient(cluster.bootstrap, request_timeout=30) as admin:
        admin.create_topics([NewTopic("backlog", assignments={0: [1], 1: [1]}, configs={
            "leader.replication.throttled.replicas": "0:1", "follower.replication.throttled.replicas": "1:2"})])
        for partition in (0, 1):
            assert produce(cluster, "backlog", partition, PARTITION_BYTES, acks="1") == PARTITION_BYTES // len(VALUE)
        set_rates(admin, RATE)
        start = time.monotonic()
        answers = admin.alter_partition_reassignments({("backlog", 0): [1, 2], ("backlog", 1): [1, 2]})
        assert {code for code, _ in answers.values()} == {0}
        joined: dict[int, float] = {}

        def both_joined() -> bool:
            for partition, members in isr(admin, "backlog").items():
                if 2 in members and partition not in joined:
                    joined[partition] = time.monotonic() - start
            return len(joined) == 2

        wait_for(both_joined, "both partitions' new replicas in the ISR", timeout=6 * EXPECTED_S)
        for partition, took in joined.items():
            assert 0.5 * EXPECTED_S <= took <= 3 * EXPECTED_S, (
                f"partition {partition} ({'leader' if partition == 0 else 'follower'} throttle) took {took:.1f}s, "
                f"expected about {EXPECTED_S:.0f}s")


def test_an_in_sync_follower_is_not_throttled(cluster: Cluster):
    with SyncAdminClient(cluster.bootstrap, request_timeout=30) as admin:
        admin.create_topics([NewTopic("in-sync", assignments={0: [1, 2]}, configs={
            "leader.replication.throttled.replicas": "*", "follower.replication.throttled.replicas": "*"})])
        wait_for(lambda: isr(admin, "in-sync") == {0: (1, 2)}, "the new topic in sync")
        set_rates(admin, 1000)
        total = 20 * MB
        assert produce(cluster, "in-sync", 0, total, acks="all") == total // len(VALUE)
        assert isr(admin, "in-sync") == {0: (1, 2)}
        set_rates(admin, (1 << 63) - 1)


def test_the_throttle_configs_through_kafka_clients(cluster: Cluster):
    """confluent-kafka's IncrementalAlterConfigs and DescribeConfigs, kafka-python's AlterConfigs: the lists and
    rates are set, shown and refused as any other config, with Kafka's message for a bad list."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigSource
    from confluent_kafka.admin import ConfigResource as Resource

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    with SyncAdminClient(cluster.bootstrap, request_timeout=30) as kjbod:
        kjbod.create_topics([NewTopic("configured", num_partitions=2, replication_factor=2)])
    topic = Resource("TOPIC", "configured")
    ok = Resource("TOPIC", "configured", incremental_configs=[
        ConfigEntry("leader.replication.throttled.replicas", "0:1,1:2", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([ok])[ok].result(30)
    bad = Resource("TOPIC", "configured", incremental_configs=[
        ConfigEntry("follower.replication.throttled.replicas", "0:x", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([bad])[bad].result(30)
    error = refused.value.args[0]
    assert error.name() == "INVALID_CONFIG"
    assert ("Invalid value [0:x] for configuration follower.replication.throttled.replicas: follower.replication."
            "throttled.replicas must be the literal '*' or a list of replicas") in error.str()
    shown = admin.describe_configs([topic])[topic].result(30)
    assert shown["leader.replication.throttled.replicas"].value == "0:1,1:2"
    assert shown["leader.replication.throttled.replicas"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert shown["follower.replication.throttled.replicas"].value == ""
    assert shown["follower.replication.throttled.replicas"].source == ConfigSource.DEFAULT_CONFIG.value

    broker = Resource("BROKER", "2", incremental_configs=[
        ConfigEntry("follower.replication.throttled.rate", "-1", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([broker])[broker].result(30)
    assert refused.value.args[0].name() == "INVALID_REQUEST" and "follower.replication.throttled.rate" in (
        refused.value.args[0].str())
    broker = Resource("BROKER", "2", incremental_configs=[
        ConfigEntry("follower.replication.throttled.rate", "2000000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([broker])[broker].result(30)
    described = Resource("BROKER", "2")
    rates = admin.describe_configs([described])[described].result(30)
    assert rates["follower.replication.throttled.rate"].value == "2000000"
    assert rates["follower.replication.throttled.rate"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert rates["leader.replication.throttled.rate"].value == str((1 << 63) - 1)  # unlimited: Kafka's default

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's import uses a deprecated importlib API
        from kafka.admin import ConfigResource as KafkaResource
        from kafka.admin import ConfigResourceType, KafkaAdminClient
    legacy = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=20_000)
    try:  # AlterConfigs (legacy): kafka-python sends the other dynamic values too, as they are
        legacy.alter_configs([KafkaResource(ConfigResourceType.TOPIC, "configured",
                                            configs={"follower.replication.throttled.replicas": "*"})],
                            incremental=False)
    finally:
        legacy.close()
    shown = admin.describe_configs([topic])[topic].result(30)
    assert shown["follower.replication.throttled.replicas"].value == "*"
    assert shown["leader.replication.throttled.replicas"].value == "0:1,1:2"
