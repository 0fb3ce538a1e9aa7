"""DeleteRecords against a real `kjbod serve` (one combined node, three log dirs), driven by kafka-python's and
confluent-kafka's `delete_records` as operators drive it, and by kjbod's codec for what the clients do not send
(offsets below -1, every version).

What only a real process shows: the records below the new log start are gone for consumers (a fetch below it is
OFFSET_OUT_OF_RANGE), ListOffsets' earliest answers it, the segment files wholly below it are deleted on the
partition's dir, and it survives a restart (the dir's log-start-offset checkpoint). Each test uses topics of its
own on the module's server; the restart test has a server of its own."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import closing

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient
from live import LiveServer, start_server

from datapath.support import (
    RawClient,
    batch,
    fetch,
    list_offset,
    new_topic,
    partition_dirs,
    produce,
    write_faults,
)
from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import DeleteRecordsRequest
from kjbod.protocol.generated.delete_records_request import DeleteRecordsPartition, DeleteRecordsTopic

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's import uses a deprecated importlib API
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import OffsetOutOfRangeError as KafkaPythonOffsetOutOfRange

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning"),
]

EARLIEST, LATEST = -2, -1
SMALL_SEGMENTS = {"segment.bytes": "200"}  # a few one-record batches a segment, so whole segments fall below


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = start_server(tmp_path_factory.mktemp("delete-records"))
    try:
        yield live
    finally:
        live.stop()


@pytest.fixture
def admin(server: LiveServer) -> Iterator[KafkaAdminClient]:
    with closing(KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=15000)) as client:
        yield client


def filled(server: LiveServer, name: str, count: int, partitions: int = 1) -> None:
    """A topic of small segments with `count` one-record batches in partition 0 (offsets 0 to count - 1)."""
    with RawClient.to(server) as raw:
        new_topic(raw, name, partitions, SMALL_SEGMENTS)
        for i in range(count):
            assert produce(raw, name, 0, batch([b"r%d" % i])).error_code == 0


def segment_bases(server: LiveServer, name: str) -> list[int]:
    """The base offsets of partition 0's segment files on disk (files renamed for deletion excluded)."""
    path = partition_dirs(server.log_dirs)[f"{name}-0"]
    return sorted(int(p.name[:20]) for p in path.glob("*.log"))


def delete(raw: RawClient, topic: str, offsets: dict[int, int], *, version: int = 2, timeout_ms: int = 10_000):
    """DeleteRecords through kjbod's codec: [(partition, low watermark, error code)] in the request's order."""
    req = DeleteRecordsRequest(timeout_ms=timeout_ms, topics=[DeleteRecordsTopic(name=topic, partitions=[
        DeleteRecordsPartition(partition_index=p, offset=o) for p, o in offsets.items()])])
    (t,) = raw.call(req, version).topics
    assert t.name == topic
    return [(p.partition_index, p.low_watermark, p.error_code) for p in t.partitions]


def test_kafka_python_deletes_the_records_below_an_offset(server, admin):
    filled(server, "cut", 12)
    before = segment_bases(server, "cut")
    assert len(before) > 2 and before[0] == 0
    answer = admin.delete_records({TopicPartition("cut", 0): 7})
    assert answer == {TopicPartition("cut", 0): {"partition_index": 0, "low_watermark": 7, "error_code": 0}}
    with RawClient.to(server) as raw:
        assert list_offset(raw, "cut", 0, EARLIEST).offset == 7
        assert list_offset(raw, "cut", 0, LATEST).offset == 12
        assert fetch(raw, "cut", 0, 6).error_code == E.OFFSET_OUT_OF_RANGE
        assert fetch(raw, "cut", 0, 0).error_code == E.OFFSET_OUT_OF_RANGE
        first = fetch(raw, "cut", 0, 7)
    assert (first.error_code, first.log_start_offset) == (0, 7)
    after = segment_bases(server, "cut")
    # Every segment wholly below 7 is gone from disk; the one holding offset 7 stays.
    assert after == [b for b in before if b >= max(x for x in before if x <= 7)]


def test_confluent_kafka_deletes_to_the_high_watermark_with_offset_minus_one(server):
    filled(server, "to-the-end", 5)
    client = AdminClient({"bootstrap.servers": server.bootstrap})
    futures = client.delete_records([confluent_kafka.TopicPartition("to-the-end", 0, confluent_kafka.OFFSET_END)])
    [(tp, future)] = futures.items()
    assert (tp.topic, tp.partition, future.result(30).low_watermark) == ("to-the-end", 0, 5)
    with RawClient.to(server) as raw:
        assert list_offset(raw, "to-the-end", 0, EARLIEST).offset == 5
        assert list_offset(raw, "to-the-end", 0, LATEST).offset == 5


def test_an_offset_above_the_high_watermark_or_below_minus_one_is_out_of_range(server, admin):
    filled(server, "bounds", 4)
    with RawClient.to(server) as raw:
        assert delete(raw, "bounds", {0: 5}) == [(0, -1, E.OFFSET_OUT_OF_RANGE)]
        assert delete(raw, "bounds", {0: -2}) == [(0, -1, E.OFFSET_OUT_OF_RANGE)]
        assert list_offset(raw, "bounds", 0, EARLIEST).offset == 0  # nothing moved
        # At the high watermark itself is allowed; going back below the log start changes nothing.
        assert delete(raw, "bounds", {0: 4}) == [(0, 4, 0)]
        assert delete(raw, "bounds", {0: 1}) == [(0, 4, 0)]
    with pytest.raises(KafkaPythonOffsetOutOfRange):
        admin.delete_records({TopicPartition("bounds", 0): 9})


def test_unknown_topics_and_partitions_are_unknown_topic_or_partition(server):
    filled(server, "two-parts", 1, partitions=2)
    with RawClient.to(server) as raw:
        assert delete(raw, "no-such-topic", {0: 0}) == [(0, -1, E.UNKNOWN_TOPIC_OR_PARTITION)]
        # One partition's error does not hold the others: partition 1 exists and is empty.
        assert delete(raw, "two-parts", {5: 0, 1: 0, 0: 1}) == [
            (5, -1, E.UNKNOWN_TOPIC_OR_PARTITION), (1, 0, 0), (0, 1, 0)]


def test_a_partition_named_twice_is_answered_once_for_the_offset_named_last(server):
    filled(server, "twice", 6)
    req = DeleteRecordsRequest(timeout_ms=10_000, topics=[
        DeleteRecordsTopic(name="twice", partitions=[DeleteRecordsPartition(partition_index=0, offset=2)]),
        DeleteRecordsTopic(name="twice", partitions=[DeleteRecordsPartition(partition_index=0, offset=4)])])
    with RawClient.to(server) as raw:
        answer = raw.call(req, 2)
        assert [(t.name, [(p.partition_index, p.low_watermark, p.error_code) for p in t.partitions])
                for t in answer.topics] == [("twice", [(0, 4, 0)])]
        assert list_offset(raw, "twice", 0, EARLIEST).offset == 4


@pytest.mark.parametrize("version", [0, 1, 2])
def test_every_version_is_served(server, version):
    filled(server, f"version-{version}", 3)
    with RawClient.to(server) as raw:
        assert delete(raw, f"version-{version}", {0: 2}, version=version) == [(0, 2, 0)]


def test_the_new_log_start_survives_a_restart(tmp_path):
    live = start_server(tmp_path / "restart")
    try:
        filled(live, "kept", 10)
        with RawClient.to(live) as raw:
            assert delete(raw, "kept", {0: 6}) == [(0, 6, 0)]
        # SIGKILL: no clean shutdown writes the checkpoint for it; the one written before the answer must hold.
        assert live.process is not None
        live.process.kill()
        live.process.wait()
        live.start()
        with RawClient.to(live) as raw:
            assert list_offset(raw, "kept", 0, EARLIEST).offset == 6
            assert list_offset(raw, "kept", 0, LATEST).offset == 10
            assert fetch(raw, "kept", 0, 5).error_code == E.OFFSET_OUT_OF_RANGE
            assert fetch(raw, "kept", 0, 6).error_code == 0
    finally:
        live.stop()


def test_a_partition_in_an_offline_dir_is_kafka_storage_error_and_the_others_are_cut(kjbod_server_factory,
                                                                                     tmp_path, monkeypatch):
    """Three partitions, one a dir; the dir of spread-1 fails (an injected EIO): its partition answers
    KAFKA_STORAGE_ERROR, the two others in the same request are cut as asked."""
    control = tmp_path / "faults.json"
    monkeypatch.setenv("KJBOD_FAULTS", str(control))
    server = kjbod_server_factory(overrides={"log.dir.placement.policy": "fewest-partitions"})
    with RawClient.to(server) as raw:
        new_topic(raw, "spread", 3)
        for p in range(3):
            for i in range(3):
                assert produce(raw, "spread", p, batch([b"r%d" % i])).error_code == 0
        dirs = {name: path.parent for name, path in partition_dirs(server.log_dirs).items()}
        assert len({dirs[f"spread-{p}"] for p in range(3)}) == 3
        write_faults(control, [{"dir": str(dirs["spread-1"]), "errno": "EIO"}])
        assert produce(raw, "spread", 1, batch([b"y"])).error_code == E.KAFKA_STORAGE_ERROR
        assert delete(raw, "spread", {0: 2, 1: 2, 2: 1}) == [
            (0, 2, 0), (1, -1, E.KAFKA_STORAGE_ERROR), (2, 1, 0)]
        assert list_offset(raw, "spread", 0, EARLIEST).offset == 2
    assert server.running
