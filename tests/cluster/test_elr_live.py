"""KIP-966 on a real cluster (conftest.py's `kjbod cluster up`: a controller and three brokers as processes):
formatted at metadata.version 4.0-IV0, upgraded with `kjbod features upgrade` to the latest level and
eligible.leader.replicas.version 1; then a topic with min.insync.replicas=2 on three replicas loses its brokers
one by one (clean shutdowns) until its ISR is empty.  The replica that left while the ISR was below
min.insync.replicas is eligible; when it comes back it leads again, cleanly, and every record the producer had
acknowledged (acks=all) is there; the first broker to go, not eligible, could not lead."""

from __future__ import annotations

import signal
import subprocess
import warnings

import pytest
from live import COMMAND

from .conftest import Cluster, running_cluster, wait_for

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's import uses a deprecated importlib API
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import KafkaError

pytestmark = pytest.mark.slow

TOPIC = "elr"


def kjbod(cluster: Cluster, *argv: str, bootstrap: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, *argv[:1], "--bootstrap-server", bootstrap or cluster.bootstrap, *argv[1:]],
                          capture_output=True, text=True, timeout=120)


def features(cluster: Cluster) -> dict[str, str]:
    done = kjbod(cluster, "features", "describe")
    assert done.returncode == 0, done.stderr
    out = {}
    for line in done.stdout.splitlines():
        fields = dict(f.split(": ", 1) for f in line.split("\t"))
        out[fields["Feature"]] = fields["FinalizedVersionLevel"]
    return out


def describe(cluster: Cluster, broker: int) -> dict[str, str] | None:
    """The partition line of `kjbod topics --describe` asked of `broker`, as fields; None while it cannot answer."""
    done = kjbod(cluster, "topics", "--describe", "--topic", TOPIC,
                 bootstrap=f"127.0.0.1:{cluster.broker_port(broker)}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("\tTopic:")]
    if done.returncode != 0 or len(lines) != 1:
        return None
    return dict(f.split(": ", 1) if ": " in f else (f.rstrip(":"), "") for f in lines[0].strip("\t").split("\t"))


def state_is(cluster: Cluster, broker: int, **want: str) -> dict[str, str] | None:
    got = describe(cluster, broker)
    return got if got is not None and all(got.get(k) == v for k, v in want.items()) else None


def produce(bootstrap: str, first: int, count: int) -> list[bytes]:
    """Sends `count` records with acks=all; returns the values the leader acknowledged."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=0, request_timeout_ms=10_000,
                             max_block_ms=30_000)
    acked = []
    try:
        for i in range(first, first + count):
            value = f"r{i}".encode()
            try:
                producer.send(TOPIC, value, partition=0).get(timeout=30)
            except KafkaError:
                continue
            acked.append(value)
    finally:
        producer.close()
    return acked


def consume_all(bootstrap: str) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=5_000)
    tp = TopicPartition(TOPIC, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    try:
        return [m.value for m in consumer]
    finally:
        consumer.close()


def test_a_clean_leader_comes_back_from_the_elr_with_every_acknowledged_record(tmp_path):
    with running_cluster(tmp_path / "cluster", release_version="4.0-IV0") as cluster:
        run(cluster)


def run(cluster: Cluster) -> None:
    # Formatted at 4.0-IV0: no ELR; upgraded on the running cluster.
    assert features(cluster)["metadata.version"] == "4.0-IV0"
    assert features(cluster)["eligible.leader.replicas.version"] == "0"
    up = kjbod(cluster, "features", "upgrade", "--release-version", "4.2")
    assert (up.returncode, up.stdout) == (0, "metadata.version was upgraded to 29.\n"), up.stdout + up.stderr
    up = kjbod(cluster, "features", "upgrade", "--feature", "eligible.leader.replicas.version=1")
    assert (up.returncode, up.stdout) == (0, "eligible.leader.replicas.version was upgraded to 1.\n")
    # share.version, streams.version and transaction.version stay where 4.0-IV0's bootstrap put them: upgrading
    # metadata.version moves no other feature
    wanted = {"metadata.version": "4.2-IV1", "eligible.leader.replicas.version": "1", "group.version": "1",
              "transaction.version": "0", "kraft.version": "0", "share.version": "0",
              "streams.version": "0"}
    try:
        wait_for(lambda: features(cluster) == wanted, "every broker reports the new levels")
    except AssertionError:
        assert features(cluster) == wanted  # pytest shows which levels differ
        raise

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    try:
        admin.create_topics([NewTopic(TOPIC, num_partitions=-1, replication_factor=-1,
                                      replica_assignments={0: [1, 2, 3]},
                                      topic_configs={"min.insync.replicas": "2"})])
    finally:
        admin.close()
    wait_for(lambda: state_is(cluster, 1, Leader="1", Isr="1,2,3", Elr="", LastKnownElr=""), "1 leads, all in sync")
    acked = produce(cluster.bootstrap, 0, 20)
    assert len(acked) == 20

    # 3 goes: the ISR is still at min.insync.replicas, so nobody needs to be eligible.
    cluster.signal("broker-3", signal.SIGTERM)
    wait_for(lambda: state_is(cluster, 1, Leader="1", Isr="1,2", Elr=""), "3 leaves the ISR")
    acked += produce(f"127.0.0.1:{cluster.broker_port(1)}", 20, 20)
    assert len(acked) == 40

    # 2 goes: the ISR falls below min.insync.replicas; 2 holds every committed record and becomes eligible.
    # acks=all writes are refused now (NOT_ENOUGH_REPLICAS) and the high watermark stays where it was.
    cluster.signal("broker-2", signal.SIGTERM)
    wait_for(lambda: state_is(cluster, 1, Leader="1", Isr="1", Elr="2"), "2 leaves the ISR into the ELR")
    refused = produce(f"127.0.0.1:{cluster.broker_port(1)}", 40, 3)
    assert refused == []

    # 1, the leader, goes: the ISR empties, 1 and 2 are eligible, 1 is the last known leader.
    cluster.signal("broker-1", signal.SIGTERM)
    cluster.start("broker-3")  # 3 left while the ISR was at min ISR: not eligible, it cannot lead
    seen = wait_for(lambda: state_is(cluster, 3, Leader="none", Isr="", Elr="1,2", LastKnownElr="1"),
                    "the partition is leaderless with ELR 1,2")
    assert seen["Replicas"] == "1,2,3"

    # 2 comes back (it shut down cleanly, so it stays eligible) and is elected from the ELR.
    cluster.start("broker-2")
    # (3 may rejoin the ISR at once; the ISR at min.insync.replicas then empties the ELR too.)
    back = wait_for(lambda: state_is(cluster, 3, Leader="2", LastKnownElr=""), "2 leads again from the ELR")
    assert back["Elr"] in ("1", "") and back["Isr"] in ("2", "2,3")
    leader = f"127.0.0.1:{cluster.broker_port(2)}"
    values = wait_for(lambda: (got := consume_all(leader)) and set(acked) <= set(got) and got,
                      "every acknowledged record can be read from the new leader")
    assert [v for v in values if v in set(acked)] == acked  # in order, none lost
    assert not set(values) - set(acked) - {f"r{i}".encode() for i in range(40, 43)}

    cluster.start("broker-1")

    def all_back() -> bool:
        d = state_is(cluster, 2, Leader="2", Elr="", LastKnownElr="")
        return d is not None and sorted(d["Isr"].split(",")) == ["1", "2", "3"]

    wait_for(all_back, "every replica back in sync, the ELR empty again")
