"""The combined node (process.roles=broker,controller) goes through its controller: a real `kjbod serve`, real
requests, then the metadata log it wrote, read back with the metadata log's own reader after a stop.

What only a real process shows: the broker registered itself and is unfenced; topics are created by controller
records, placed by the broker's storage and the chosen dirs recorded back, so the metadata says where each
replica is; producer ids come from durable blocks, so a restart never hands out an id again; the node
restarts with a new incarnation and keeps its topics."""

from __future__ import annotations

import uuid

from datapath.support import RawClient, create_topic, metadata
from live import kafka_uuid, read_meta_properties

from kjbod.metadata import DIR_UNASSIGNED, EMPTY_IMAGE, replay
from kjbod.protocol.generated import (
    DescribeClusterRequest,
    InitProducerIdRequest,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
)
from kjbod.storage.metadata_log import MetadataLog


def read_log(server):
    mlog = MetadataLog(str(server.metadata_dir))
    try:
        return mlog.load()
    finally:
        mlog.close()


def partition_homes(server) -> dict[str, uuid.UUID]:
    """partition dir name -> directory id of the log dir holding it."""
    out = {}
    for d in server.log_dirs:
        dir_id = kafka_uuid(read_meta_properties(d)["directory.id"])
        for child in d.iterdir():
            if child.is_dir() and "-" in child.name and not child.name.startswith("__"):
                out[child.name] = dir_id
    return out


def new_producer_id(raw) -> int:
    resp = raw.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=-1), 4)
    assert resp.error_code == 0
    return resp.producer_id


def test_combined_node_goes_through_its_controller(kjbod_server):
    server = kjbod_server
    with RawClient.to(server) as raw:
        assert create_topic(raw, "orders", 6).error_code == 0
        md = metadata(raw, ["orders"])
        assert [(b.node_id, b.port) for b in md.brokers] == [(1, server.port)]
        assert md.controller_id == 1
        assert sorted(p.leader_id for p in md.topics[0].partitions) == [1] * 6
        cluster = raw.call(DescribeClusterRequest(include_fenced_brokers=True), 2)
        assert [(b.broker_id, b.is_fenced) for b in cluster.brokers] == [(1, False)]
        first = [new_producer_id(raw) for _ in range(3)]
        assert len(set(first)) == 3
    assert server.stop() == 0

    records = read_log(server)
    reg = [r for r in records if isinstance(r, RegisterBrokerRecord)]
    assert len(reg) == 1 and reg[0].broker_id == 1 and len(reg[0].log_dirs) == 3
    # Three log dirs: the controller leaves each new partition's dir UNASSIGNED; the broker records its choice.
    created = [r for r in records if isinstance(r, PartitionRecord)]
    assert len(created) == 6 and all(r.directories == [DIR_UNASSIGNED] for r in created)
    assert len([r for r in records if isinstance(r, PartitionChangeRecord) and r.directories]) == 6
    assert [r for r in records if isinstance(r, ProducerIdsRecord)]
    image = replay(EMPTY_IMAGE, records)
    homes = partition_homes(server)
    topic = image.topic("orders")
    assert {f"orders-{p}": part.directories[0] for p, part in topic.partitions.items()} == homes

    # A restart: a new incarnation, the same topics, and producer ids never seen before.
    server.start()
    with RawClient.to(server) as raw:
        md = metadata(raw, ["orders"])
        assert md.topics[0].error_code == 0 and len(md.topics[0].partitions) == 6
        assert all(p.leader_id == 1 for p in md.topics[0].partitions)
        later = new_producer_id(raw)
        assert later > max(first)
    assert server.stop() == 0
    regs = [r for r in read_log(server) if isinstance(r, RegisterBrokerRecord)]
    assert len(regs) == 2 and regs[0].incarnation_id != regs[1].incarnation_id
    assert regs[1].broker_epoch > regs[0].broker_epoch


def test_a_metadata_log_written_by_the_single_node_starts_and_keeps_its_topics(kjbod_server):
    """The single node before the controller wrote topics alone: TopicRecord, ConfigRecords and PartitionRecords
    with replicas, ISR and leader all this node and no real directory, and no broker registration at all.  Such a
    log starts: the node registers, keeps the topics and their data, and records where each replica is."""
    from datapath.support import batch, fetch_all, produce

    from kjbod.protocol.generated import ConfigRecord, TopicRecord

    server = kjbod_server
    with RawClient.to(server) as raw:
        assert create_topic(raw, "legacy", 3, {"retention.ms": "86400000"}).error_code == 0
        for p in range(3):
            assert produce(raw, "legacy", p, batch([b"v%d" % p])).error_code == 0
    assert server.stop() == 0
    mlog = MetadataLog(str(server.metadata_dir))
    old_style = []
    for r in mlog.load():
        if isinstance(r, (TopicRecord, ConfigRecord)):
            old_style.append(r)
        elif isinstance(r, PartitionRecord):
            r.directories = [uuid.UUID(int=0)]
            old_style.append(r)
    mlog.close()
    for f in (server.metadata_dir / "__cluster_metadata-0").iterdir():
        f.unlink()
    mlog = MetadataLog(str(server.metadata_dir))
    mlog.load()
    mlog.append(old_style)
    mlog.close()

    server.start()
    with RawClient.to(server) as raw:
        md = metadata(raw, ["legacy"])
        assert md.topics[0].error_code == 0
        assert [(p.partition_index, p.leader_id) for p in md.topics[0].partitions] == [(0, 1), (1, 1), (2, 1)]
        for p in range(3):
            assert [r.value for r in fetch_all(raw, "legacy", p)] == [b"v%d" % p]
        assert new_producer_id(raw) >= 0
    assert server.stop() == 0
    image = replay(EMPTY_IMAGE, read_log(server))
    assert image.broker(1) is not None and dict(image.topic("legacy").configs) == {"retention.ms": "86400000"}
    homes = partition_homes(server)
    assert {f"legacy-{p}": part.directories[0] for p, part in image.topic("legacy").partitions.items()} == homes
