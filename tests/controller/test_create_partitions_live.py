"""CreatePartitions against a real `kjbod serve` (one combined node, three log dirs), driven by kafka-python and
confluent-kafka as operators drive it, and by kjbod's codec for what the clients cannot send (a topic named
twice, the oldest version).

What only a real process shows: the request goes from the broker handler through the controller to the records
and the broker making the new logs before it answers; the new partitions then have a leader and ISR in Metadata,
take records and serve them, and sit in a log dir that `kjbod log-dirs describe` reports.  Each test uses topics
of its own on the module's server."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from collections.abc import Iterator

import pytest
from datapath.support import RawClient, create_topic, metadata, partition_dirs
from live import LiveServer, start_server

from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import CreatePartitionsRequest
from kjbod.protocol.generated.create_partitions_request import (
    CreatePartitionsAssignment,
    CreatePartitionsTopic,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's import uses a deprecated importlib API
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient

pytestmark = [
    pytest.mark.slow,
    # kafka-python loads its schemas with importlib.resources' legacy API (its own warning, not ours).
    pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning"),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = start_server(tmp_path_factory.mktemp("create-partitions"))
    yield live
    live.stop()


@pytest.fixture
def admin(server: LiveServer) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=15000)
    try:
        yield client
    finally:
        client.close()


def make_topic(server: LiveServer, name: str, partitions: int) -> None:
    with RawClient.to(server) as raw:
        assert create_topic(raw, name, partitions).error_code == 0


def partitions_of(server: LiveServer, name: str) -> list[tuple[int, int, int, list[int], list[int]]]:
    """(partition, error code, leader, replicas, ISR) of each partition Metadata lists for `name`."""
    with RawClient.to(server) as raw:
        (topic,) = metadata(raw, [name]).topics
    return sorted((p.partition_index, p.error_code, p.leader_id, list(p.replica_nodes), list(p.isr_nodes))
                  for p in topic.partitions)


def results(response) -> list[tuple[str, int, str | None]]:
    return [(r.name, r.error_code, r.error_message) for r in response.results]


def test_kafka_python_grows_a_topic_whose_new_partitions_take_and_serve_records(server, admin):
    make_topic(server, "grown", 2)
    response = admin.create_partitions({"grown": 5})
    assert results(response) == [("grown", 0, None)]
    node = server.node_id
    assert partitions_of(server, "grown") == [(i, 0, node, [node], [node]) for i in range(5)]

    producer = KafkaProducer(bootstrap_servers=server.bootstrap, acks="all")
    try:
        sent = [producer.send("grown", b"in-%d" % p, partition=p).get(timeout=30) for p in range(5)]
    finally:
        producer.close()
    assert [(m.partition, m.offset) for m in sent] == [(p, 0) for p in range(5)]
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=10000)
    try:
        consumer.assign([TopicPartition("grown", p) for p in range(5)])
        read = []
        for record in consumer:
            read.append((record.partition, record.offset, record.value))
            if len(read) == 5:
                break
    finally:
        consumer.close()
    assert sorted(read) == [(p, 0, b"in-%d" % p) for p in range(5)]

    # Each new replica is in one of the broker's log dirs, and `kjbod log-dirs describe` says which.
    done = subprocess.run([sys.executable, "-m", "kjbod", "log-dirs", "describe", "--bootstrap-server",
                           server.bootstrap, "--topic-list", "grown", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (broker,) = json.loads(done.stdout)["brokers"]
    described = {p["partition"]: d["path"] for d in broker["log_dirs"] for p in d["partitions"]
                 if p["topic"] == "grown"}
    on_disk = partition_dirs(server.log_dirs)
    assert described == {p: str(on_disk[f"grown-{p}"].parent) for p in range(5)}


def test_kafka_python_refusals_carry_kafkas_codes_and_messages(server, admin):
    make_topic(server, "kept", 2)
    response = admin.create_partitions({
        "kept": 2,
        "absent": 4,
        "assigned-short": {"count": 4, "assignments": [[1]]},
    }, raise_errors=False)
    assert sorted(results(response)) == [
        ("absent", E.UNKNOWN_TOPIC_OR_PARTITION, None),
        ("assigned-short", E.UNKNOWN_TOPIC_OR_PARTITION, None),
        ("kept", E.INVALID_PARTITIONS, "Topic already has 2 partition(s)."),
    ]
    cases = [
        (1, E.INVALID_PARTITIONS, "The topic kept currently has 2 partition(s); 1 would not be an increase."),
        ({"count": 4, "assignments": [[1]]}, E.INVALID_REPLICA_ASSIGNMENT,
         "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."),
        ({"count": 3, "assignments": [[7]]}, E.INVALID_REPLICA_ASSIGNMENT,
         "The manual partition assignment includes broker 7, but no such broker is registered."),
        ({"count": 3, "assignments": [[1, 1]]}, E.INVALID_REPLICA_ASSIGNMENT,
         "The manual partition assignment includes the broker 1 more than once."),
    ]
    for wanted, code, message in cases:
        assert results(admin.create_partitions({"kept": wanted}, raise_errors=False)) == [("kept", code, message)]
    # validate_only answers as the real request would, and adds nothing.
    assert results(admin.create_partitions({"kept": 6}, validate_only=True)) == [("kept", 0, None)]
    assert len(partitions_of(server, "kept")) == 2
    # Explicit assignments naming this broker are taken.
    assert results(admin.create_partitions({"kept": {"count": 4, "assignments": [[1], [1]]}})) == [
        ("kept", 0, None)]
    assert len(partitions_of(server, "kept")) == 4


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_every_version_and_a_topic_named_twice(server, version):
    # A topic named twice is refused once, before the others (Kafka's ControllerApis), which go on.
    once, twice = f"once-v{version}", f"twice-v{version}"
    make_topic(server, once, 1)
    make_topic(server, twice, 1)
    body = CreatePartitionsRequest(topics=[
        CreatePartitionsTopic(name=twice, count=2, assignments=None),
        CreatePartitionsTopic(name=once, count=3, assignments=None),
        CreatePartitionsTopic(name=twice, count=3, assignments=[CreatePartitionsAssignment(broker_ids=[1])] * 2),
    ], timeout_ms=15000, validate_only=False)
    with RawClient.to(server) as raw:
        response = raw.call(body, version)
    assert response.throttle_time_ms == 0
    assert results(response) == [(twice, E.INVALID_REQUEST, "Duplicate topic name."), (once, 0, None)]
    assert len(partitions_of(server, once)) == 3 and len(partitions_of(server, twice)) == 1


def test_confluent_kafka_grows_a_topic_and_reads_kafkas_errors(server):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewPartitions

    make_topic(server, "confluent", 1)
    client = AdminClient({"bootstrap.servers": server.bootstrap})
    checked = client.create_partitions([NewPartitions("confluent", 4)], validate_only=True, request_timeout=15)
    assert checked["confluent"].result(timeout=30) is None
    assert len(partitions_of(server, "confluent")) == 1
    grown = client.create_partitions([NewPartitions("confluent", 3)], request_timeout=15)
    assert grown["confluent"].result(timeout=30) is None
    node = server.node_id
    assert partitions_of(server, "confluent") == [(i, 0, node, [node], [node]) for i in range(3)]
    again = client.create_partitions([NewPartitions("confluent", 3)], request_timeout=15)
    with pytest.raises(KafkaException) as raised:
        again["confluent"].result(timeout=30)
    error = raised.value.args[0]
    assert error.code() == KafkaError.INVALID_PARTITIONS
    assert "Topic already has 3 partition(s)." in error.str()
    assigned = client.create_partitions([NewPartitions("confluent", 4, replica_assignment=[[node]])],
                                        request_timeout=15)
    assert assigned["confluent"].result(timeout=30) is None
    assert len(partitions_of(server, "confluent")) == 4


def test_new_replicas_on_a_broker_with_several_dirs_get_the_dir_they_are_in_recorded(kjbod_server):
    """KIP-858, as for a new topic's partitions: with three log dirs the controller writes each new partition's
    dir as UNASSIGNED, the broker places it and records the dir it chose, so the metadata log read back after a
    stop says where every replica is."""
    from kjbod.metadata import DIR_UNASSIGNED, EMPTY_IMAGE, replay
    from kjbod.protocol.generated import PartitionRecord

    from .test_combined_live import partition_homes, read_log

    server = kjbod_server
    make_topic(server, "homed", 1)
    with RawClient.to(server) as raw:
        body = CreatePartitionsRequest(topics=[CreatePartitionsTopic(name="homed", count=4, assignments=None)],
                                       timeout_ms=15000)
        assert results(raw.call(body, 3)) == [("homed", 0, None)]
    assert server.stop() == 0
    records = read_log(server)
    topic = replay(EMPTY_IMAGE, records).topic("homed")
    added = [r for r in records if isinstance(r, PartitionRecord) and r.topic_id == topic.topic_id
             and r.partition_id > 0]
    assert sorted(r.partition_id for r in added) == [1, 2, 3]
    assert all(r.directories == [DIR_UNASSIGNED] for r in added)
    homes = {name: dir_id for name, dir_id in partition_homes(server).items() if name.startswith("homed-")}
    assert {f"homed-{p}": part.directories[0] for p, part in topic.partitions.items()} == homes
