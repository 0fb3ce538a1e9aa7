"""The share coordinator on a real `kjbod serve` node, its RPCs sent raw: FindCoordinator for share keys (v6),
`__share_group_state` made on first use, state initialized, written, read back (also after a restart, from
snapshots and updates), summarized and deleted, and Kafka's error codes for bad requests."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import urllib.request
import uuid
from types import SimpleNamespace

from kafka.admin import KafkaAdminClient, NewTopic

from kjbod.net.connection import ClientConnection
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    DeleteShareGroupStateRequest,
    DescribeConfigsRequest,
    FindCoordinatorRequest,
    InitializeShareGroupStateRequest,
    MetadataRequest,
    ReadShareGroupStateRequest,
    ReadShareGroupStateSummaryRequest,
    WriteShareGroupStateRequest,
)
from kjbod.protocol.generated import delete_share_group_state_request as dreq
from kjbod.protocol.generated import initialize_share_group_state_request as ireq
from kjbod.protocol.generated import read_share_group_state_request as rreq
from kjbod.protocol.generated import read_share_group_state_summary_request as sreq
from kjbod.protocol.generated import write_share_group_state_request as wreq
from kjbod.protocol.generated.describe_configs_request import DescribeConfigsResource
from kjbod.protocol.generated.metadata_request import MetadataRequestTopic
from tests.live import free_port, kjbod_server_factory  # noqa: F401

SETTINGS = {"share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.num.partitions": "4",
            "share.coordinator.state.topic.min.isr": "1",
            "share.coordinator.state.topic.segment.bytes": "1048576",
            "share.coordinator.snapshot.update.records.per.snapshot": "2"}
TOPIC = "shared-events"
GROUP = "sg-1"
ACKED, ARCHIVED = 2, 4


async def ask(port: int, message, version: int):
    conn = await ClientConnection.open("127.0.0.1", port, client_id="share-state-test", connect_timeout=10.0)
    try:
        return await conn.request(message.API_KEY, version, message, 30.0)
    finally:
        conn.close()


def call(port: int, message, version: int = 0):
    return asyncio.run(ask(port, message, version))


def topic_id(port: int, name: str) -> uuid.UUID:
    md = call(port, MetadataRequest(topics=[MetadataRequestTopic(name=name)], allow_auto_topic_creation=False), 12)
    return md.topics[0].topic_id


def find(port: int, keys: list[str], version: int = 6):
    return call(port, FindCoordinatorRequest(key_type=2, coordinator_keys=keys), version).coordinators


def share_key(tid: uuid.UUID, partition: int, group: str = GROUP) -> str:
    from kjbod.broker.share.state_records import coordinator_key

    return coordinator_key(group, tid, partition)


def initialize(port, tid, parts, group=GROUP, state_epoch=0, start_offset=-1):
    resp = call(port, InitializeShareGroupStateRequest(group_id=group, topics=[ireq.InitializeStateData(
        topic_id=tid, partitions=[ireq.PartitionData(partition=p, state_epoch=state_epoch, start_offset=start_offset)
                                  for p in parts])]))
    return {r.partition: r for t in resp.results for r in t.partitions}


def write(port, tid, p, batches, group=GROUP, state_epoch=0, leader_epoch=1, start_offset=-1, complete=-1):
    resp = call(port, WriteShareGroupStateRequest(group_id=group, topics=[wreq.WriteStateData(
        topic_id=tid, partitions=[wreq.PartitionData(
            partition=p, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start_offset,
            delivery_complete_count=complete,
            state_batches=[wreq.StateBatch(*b) for b in batches])])]), 1)
    return resp.results[0].partitions[0]


def read(port, tid, parts, group=GROUP, leader_epoch=1):
    resp = call(port, ReadShareGroupStateRequest(group_id=group, topics=[rreq.ReadStateData(
        topic_id=tid, partitions=[rreq.PartitionData(partition=p, leader_epoch=leader_epoch) for p in parts])]))
    return {r.partition: r for t in resp.results for r in t.partitions}


def summary(port, tid, parts, group=GROUP, version=1):
    resp = call(port, ReadShareGroupStateSummaryRequest(group_id=group, topics=[sreq.ReadStateSummaryData(
        topic_id=tid, partitions=[sreq.PartitionData(partition=p, leader_epoch=0) for p in parts])]), version)
    return {r.partition: r for t in resp.results for r in t.partitions}


def delete(port, tid, parts, group=GROUP):
    resp = call(port, DeleteShareGroupStateRequest(group_id=group, topics=[dreq.DeleteStateData(
        topic_id=tid, partitions=[dreq.PartitionData(partition=p) for p in parts])]))
    return {r.partition: r for t in resp.results for r in t.partitions}


def batches_of(r) -> list[tuple[int, int, int, int]]:
    return [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in r.state_batches]


def key_json(tid: uuid.UUID, partition: int) -> str:
    """A ShareSnapshot key as Kafka's dump tool prints it."""
    from kjbod.storage.ids import uuid_to_str

    return f'{{"type":"0","data":{{"groupId":"{GROUP}","topicId":"{uuid_to_str(tid.bytes)}","partition":{partition}}}}}'


def make_topic(bootstrap: str, partitions: int = 3) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(TOPIC, partitions, 1)])
    finally:
        admin.close()


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        text = r.read().decode()
    return {line.rpartition(" ")[0]: float(line.rpartition(" ")[2]) for line in text.splitlines()
            if line.startswith(("kafka_server_share_coordinator", "kjbod_share_coordinator"))}


def test_state_is_written_read_back_after_a_restart_and_deleted(kjbod_server_factory):  # noqa: F811
    metrics_port = free_port()
    server = kjbod_server_factory(overrides={**SETTINGS, "kjbod.metrics.listener": f"127.0.0.1:{metrics_port}"},
                                  log_dir_count=2)
    make_topic(server.bootstrap)
    tid = topic_id(server.port, TOPIC)
    port = server.port

    # FindCoordinator v6 makes __share_group_state and names this broker for every well-formed key
    found = find(port, [share_key(tid, 0), share_key(tid, 1), "no-colons", f"{GROUP}:not-a-uuid:0"])
    assert [(c.error_code, c.node_id) for c in found[:2]] == [(0, 1), (0, 1)]
    assert [c.error_code for c in found[2:]] == [ErrorCode.INVALID_REQUEST] * 2
    assert "no-colons" in found[2].error_message
    assert find(port, [share_key(tid, 0)], version=5)[0].error_code == ErrorCode.INVALID_REQUEST
    md = call(port, MetadataRequest(topics=[MetadataRequestTopic(name="__share_group_state")]), 12)
    assert md.topics[0].error_code == 0 and md.topics[0].is_internal and len(md.topics[0].partitions) == 4
    configs = call(port, DescribeConfigsRequest(resources=[DescribeConfigsResource(
        resource_type=2, resource_name="__share_group_state", configuration_keys=None)]), 4).results[0].configs
    # as Kafka's: not compacted (the updates are deltas), kept for ever, pruned by the coordinator itself
    assert {c.name: c.value for c in configs if c.name in ("cleanup.policy", "min.insync.replicas", "retention.ms",
                                                           "segment.bytes", "compression.type")} == {
        "cleanup.policy": "delete", "retention.ms": "-1", "compression.type": "producer",
        "min.insync.replicas": "1", "segment.bytes": "1048576"}

    # never initialized: a read and a write are INVALID_REQUEST, a summary answers the defaults
    assert read(port, tid, [0])[0].error_code == ErrorCode.INVALID_REQUEST
    assert write(port, tid, 0, [(0, 4, ACKED, 1)]).error_code == ErrorCode.INVALID_REQUEST
    s = summary(port, tid, [0])[0]
    assert (s.error_code, s.start_offset, s.delivery_complete_count) == (0, -1, -1)

    assert {p: r.error_code for p, r in initialize(port, tid, [0, 1, 2]).items()} == {0: 0, 1: 0, 2: 0}
    r0 = read(port, tid, [0])[0]
    assert (r0.error_code, r0.state_epoch, r0.start_offset, batches_of(r0)) == (0, 0, -1, [])

    # five writes to partition 0 (with a snapshot every 2 updates), one to partition 1
    steps = [dict(start_offset=0, batches=[(0, 9, 0, 1)]), dict(batches=[(0, 4, ACKED, 1)]),
             dict(batches=[(5, 6, 0, 2)]), dict(start_offset=3, batches=[(10, 12, ARCHIVED, 5)], complete=2),
             dict(batches=[(7, 9, ACKED, 1)])]
    for step in steps:
        assert write(port, tid, 0, **step).error_code == 0
    assert write(port, tid, 1, [(100, 199, ACKED, 1)], start_offset=100).error_code == 0
    want0 = [(3, 4, ACKED, 1), (5, 6, 0, 2), (7, 9, ACKED, 1), (10, 12, ARCHIVED, 5)]
    got = read(port, tid, [0, 1])
    assert (got[0].start_offset, batches_of(got[0])) == (3, want0)
    assert (got[1].start_offset, batches_of(got[1])) == (100, [(100, 199, ACKED, 1)])
    s = summary(port, tid, [0])[0]
    assert (s.state_epoch, s.leader_epoch, s.start_offset, s.delivery_complete_count) == (0, 1, 3, -1)
    assert summary(port, tid, [0], version=0)[0].start_offset == 3

    # Kafka's refusals
    assert write(port, tid, 0, [(20, 21, ACKED, 1)], leader_epoch=0).error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert read(port, tid, [0], leader_epoch=0)[0].error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert initialize(port, tid, [2], state_epoch=3)[2].error_code == 0
    assert write(port, tid, 2, [(0, 1, ACKED, 1)], state_epoch=2).error_code == ErrorCode.FENCED_STATE_EPOCH
    assert initialize(port, tid, [2], state_epoch=1)[2].error_code == ErrorCode.FENCED_STATE_EPOCH
    empty = initialize(port, tid, [0], group="")[0]
    assert empty.error_code == ErrorCode.INVALID_REQUEST and "group id" in empty.error_message
    assert initialize(port, tid, [-1])[-1].error_code == ErrorCode.INVALID_REQUEST
    assert initialize(port, tid, [7])[7].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert initialize(port, uuid.uuid4(), [0])[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert read(port, tid, [0], group="other-group")[0].error_code == ErrorCode.INVALID_REQUEST

    # Kafka's share-coordinator-metrics: nine writes reached the coordinator (refused ones too)
    figures = scrape(metrics_port)
    assert figures["kafka_server_share_coordinator_metrics_write_total"] == 9
    assert figures["kafka_server_share_coordinator_metrics_write_latency_max"] >= \
        figures["kafka_server_share_coordinator_metrics_write_latency_avg"] > 0
    assert figures['kjbod_share_coordinator_partitions{state="loaded"}'] == 4
    assert figures["kjbod_share_coordinator_share_partitions"] == 3

    # a restart loads the partitions of __share_group_state back: the same state, epochs included
    server.stop()
    server.start()
    deadline = 60
    for _ in range(deadline * 10):
        got = read(port, tid, [0, 1, 2], leader_epoch=-1)
        if all(r.error_code == 0 for r in got.values()):
            break
        assert all(r.error_code in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR,
                                    ErrorCode.COORDINATOR_NOT_AVAILABLE) for r in got.values()), got
        asyncio.run(asyncio.sleep(0.1))
    assert (got[0].start_offset, batches_of(got[0])) == (3, want0)
    assert (got[1].start_offset, batches_of(got[1])) == (100, [(100, 199, ACKED, 1)])
    assert got[2].state_epoch == 3
    assert read(port, tid, [0], leader_epoch=0)[0].error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert write(port, tid, 2, [(0, 1, ACKED, 1)], state_epoch=2).error_code == ErrorCode.FENCED_STATE_EPOCH

    # delete: the state goes (reads are refused again, a summary answers the defaults); deleting again is fine
    assert {p: r.error_code for p, r in delete(port, tid, [0, 1]).items()} == {0: 0, 1: 0}
    assert delete(port, tid, [0])[0].error_code == 0
    assert read(port, tid, [0])[0].error_code == ErrorCode.INVALID_REQUEST
    assert summary(port, tid, [1])[1].start_offset == -1
    assert read(port, tid, [2], leader_epoch=-1)[2].error_code == 0

    # deleting the topic deletes the state of its share-partitions (partition 2's is all that is left)
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        admin.delete_topics([TOPIC])
    finally:
        admin.close()

    # kjbod dump-log shows the records of __share_group_state decoded, tombstones as <DELETE>
    def tombstones() -> tuple[str, set[int]]:
        segments = sorted(p for d in server.log_dirs for p in d.glob("__share_group_state-*/*.log"))
        done = subprocess.run([sys.executable, "-m", "kjbod", "dump-log", "--share-group-state-decoder", "--files",
                               ",".join(map(str, segments))], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout, {p for p in range(3) if f"key: {key_json(tid, p)} payload: <DELETE>" in done.stdout}

    for _ in range(600):
        dumped, deleted = tombstones()
        if deleted == {0, 1, 2}:
            break
        asyncio.run(asyncio.sleep(0.1))
    assert deleted == {0, 1, 2}
    assert read(port, tid, [2], leader_epoch=-1)[2].error_code == ErrorCode.INVALID_REQUEST  # no state left
    assert summary(port, tid, [2])[2].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # nor a topic
    done = SimpleNamespace(stdout=dumped)
    assert '"type":"1"' in done.stdout  # updates
    assert ('"stateBatches":[{"firstOffset":3,"lastOffset":4,"deliveryState":2,"deliveryCount":1}'
            in done.stdout)  # a snapshot with the combined state


def state_log_range(port: int) -> tuple[int, int]:
    """(earliest, latest) offsets of partition 0 of __share_group_state."""
    from kjbod.protocol.generated import ListOffsetsRequest
    from kjbod.protocol.generated.list_offsets_request import ListOffsetsPartition, ListOffsetsTopic

    def at(timestamp: int) -> int:
        resp = call(port, ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsTopic(
            name="__share_group_state", partitions=[ListOffsetsPartition(partition_index=0, timestamp=timestamp)])]),
            7)
        part = resp.topics[0].partitions[0]
        assert part.error_code == 0
        return part.offset

    return at(-2), at(-1)


def test_the_state_topic_is_pruned_below_the_oldest_latest_snapshot(kjbod_server_factory):  # noqa: F811
    """Kafka's pruning of __share_group_state: the records below the oldest of the keys' latest snapshots go; the
    state reads back the same after a restart from what is left."""
    server = kjbod_server_factory(overrides={
        **SETTINGS, "share.coordinator.state.topic.num.partitions": "1",
        "share.coordinator.snapshot.update.records.per.snapshot": "0",  # every write a snapshot
        "share.coordinator.state.topic.prune.interval.ms": "100"})
    make_topic(server.bootstrap)
    tid, port = topic_id(server.port, TOPIC), server.port
    assert find(port, [share_key(tid, 0)])[0].error_code == 0
    for _ in range(600):
        if all(r.error_code == 0 for r in initialize(port, tid, [0, 1]).values()):
            break
        asyncio.run(asyncio.sleep(0.1))
    for i in range(5):
        assert write(port, tid, 0, [(10 * i, 10 * i + 9, ACKED, 1)], start_offset=10 * i).error_code == 0
    assert write(port, tid, 1, [(7, 7, ARCHIVED, 5)], start_offset=7).error_code == 0
    assert write(port, tid, 0, [(60, 61, ACKED, 1)], start_offset=60).error_code == 0
    # partition 0's latest snapshot is the last record, partition 1's the one before it: everything else goes
    for _ in range(600):
        earliest, latest = state_log_range(port)
        if earliest == latest - 2:
            break
        asyncio.run(asyncio.sleep(0.1))
    assert earliest == latest - 2 > 0

    server.stop()
    server.start()
    for _ in range(600):
        got = read(port, tid, [0, 1], leader_epoch=-1)
        if all(r.error_code == 0 for r in got.values()):
            break
        asyncio.run(asyncio.sleep(0.1))
    assert (got[0].start_offset, batches_of(got[0])) == (60, [(60, 61, ACKED, 1)])
    assert (got[1].start_offset, batches_of(got[1])) == (7, [(7, 7, ARCHIVED, 5)])

    # both states deleted: all but the last tombstone goes
    assert {p: r.error_code for p, r in delete(port, tid, [0, 1]).items()} == {0: 0, 1: 0}
    for _ in range(600):
        earliest, latest = state_log_range(port)
        if earliest == latest - 1:
            break
        asyncio.run(asyncio.sleep(0.1))
    assert earliest == latest - 1


def test_with_fewer_brokers_than_the_replication_factor_share_keys_are_not_served(kjbod_server_factory):  # noqa: F811
    server = kjbod_server_factory(log_dir_count=1)  # share.coordinator.state.topic.replication.factor 3
    make_topic(server.bootstrap, 1)
    tid = topic_id(server.port, TOPIC)
    (c,) = find(server.port, [share_key(tid, 0)])
    assert c.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE and "__share_group_state" in c.error_message
    r = initialize(server.port, tid, [0])[0]
    assert r.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
