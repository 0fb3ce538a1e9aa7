"""Kafka 4.3's metadata records kjbod lacked: NoOpRecord, ZkMigrationStateRecord, the KIP-868 transaction markers
and RegisterControllerRecord.  Their bytes as Kafka frames them, replay (NoOps move the offset only, controller
registrations land in the image and its snapshot records), and MetadataLoader publishing a transaction whole or
not at all, across batches, with out-of-place markers reported rather than applied."""

from __future__ import annotations

import struct
import uuid

from kjbod.metadata import EMPTY_IMAGE, MetadataLoader, image_records, replay
from kjbod.protocol.generated import (
    AbortTransactionRecord,
    BeginTransactionRecord,
    EndTransactionRecord,
    NoOpRecord,
    RegisterControllerRecord,
    TopicRecord,
    ZkMigrationStateRecord,
)
from kjbod.protocol.generated.register_controller_record import ControllerEndpoint, ControllerFeature
from kjbod.storage.metadata_records import frame_record, unframe_record

T1, T2, T3 = (uuid.UUID(int=i) for i in (1, 2, 3))
INC = uuid.UUID("33333333-3333-3333-3333-333333333333")


def controller_record(cid: int = 3001, inc: uuid.UUID = INC, port: int = 9093) -> RegisterControllerRecord:
    return RegisterControllerRecord(
        controller_id=cid, incarnation_id=inc, zk_migration_ready=False,
        end_points=[ControllerEndpoint(name="CONTROLLER", host="c1", port=port, security_protocol=0)],
        features=[ControllerFeature(name="metadata.version", min_supported_version=17, max_supported_version=29)])


def topic(name: str, tid: uuid.UUID) -> TopicRecord:
    return TopicRecord(name=name, topic_id=tid)


# ------------------------------------------------------------------------------------------------------ bytes
def test_the_records_as_kafka_frames_them():
    # Kafka's MetadataRecordSerde: frame version 1, api key, record version (unsigned varints), then the
    # flexible message: its fields and the tagged-field section.
    assert frame_record(NoOpRecord(), 0) == bytes([1, 20, 0, 0])
    assert frame_record(EndTransactionRecord(), 0) == bytes([1, 24, 0, 0])
    assert frame_record(AbortTransactionRecord(reason=None), 0) == bytes([1, 25, 0, 0])  # null: tag left out
    name = b"Bootstrap records"
    # one tagged field (tag 0), its size, then a compact string (length + 1)
    assert frame_record(BeginTransactionRecord(name=name.decode()), 0) == bytes(
        [1, 23, 0, 1, 0, len(name) + 1, len(name) + 1]) + name
    assert frame_record(AbortTransactionRecord(reason="x"), 0) == bytes([1, 25, 0, 1, 0, 2, 2]) + b"x"
    assert frame_record(ZkMigrationStateRecord(zk_migration_state=2), 0) == bytes([1, 21, 0, 2, 0])
    expected = (bytes([1, 27, 0]) + struct.pack(">i", 3001) + INC.bytes + b"\x00"  # id, incarnation, not ZK ready
                + bytes([2, len("CONTROLLER") + 1]) + b"CONTROLLER" + bytes([3]) + b"c1"
                + struct.pack(">Hh", 9093, 0) + b"\x00"  # endpoint: name, host, uint16 port, protocol, no tags
                + bytes([2, len("metadata.version") + 1]) + b"metadata.version" + struct.pack(">hh", 17, 29)
                + b"\x00" + b"\x00")  # the feature's tags, the record's tags
    assert frame_record(controller_record(), 0) == expected
    for rec in (NoOpRecord(), BeginTransactionRecord(name="n"), EndTransactionRecord(),
                AbortTransactionRecord(reason="r"), ZkMigrationStateRecord(zk_migration_state=1), controller_record()):
        assert unframe_record(frame_record(rec, 0)) == rec


# ------------------------------------------------------------------------------------------------------ replay
def test_a_no_op_moves_the_offset_and_nothing_else():
    before = replay(EMPTY_IMAGE, [topic("a", T1)], 5)
    after = replay(before, [NoOpRecord(), NoOpRecord(), ZkMigrationStateRecord(zk_migration_state=3)], 6)
    assert after.offset == 8
    assert after.topics_by_id == before.topics_by_id and after.brokers == before.brokers
    assert after.features == before.features and after.controllers == before.controllers


def test_controller_registrations_are_kept_per_id_and_survive_a_snapshot():
    image = replay(EMPTY_IMAGE, [controller_record(3001), controller_record(3002, T2, 9094)], 0)
    assert sorted(image.controllers) == [3001, 3002]
    reg = image.controllers[3002]
    assert (reg.incarnation_id, reg.endpoint("CONTROLLER").port, reg.features) == (
        T2, 9094, {"metadata.version": (17, 29)})
    assert reg.endpoint("OTHER") is None and reg.zk_migration_ready is False
    # the last record of an id wins, whatever its incarnation (Kafka's ClusterDelta)
    newer = replay(image, [controller_record(3001, T3, 9999)])
    assert newer.controllers[3001].incarnation_id == T3 and newer.controllers[3002] is reg
    rebuilt = replay(EMPTY_IMAGE, image_records(newer))
    assert rebuilt.controllers == newer.controllers
    assert sum(isinstance(r, RegisterControllerRecord) for r in image_records(newer)) == 2


# ------------------------------------------------------------------------------------------------------ loader
def offsets(records, first):
    return list(zip(records, range(first, first + len(records)), strict=True))


def test_records_before_a_transaction_are_published_alone_and_the_transaction_at_its_end():
    loader = MetadataLoader(EMPTY_IMAGE)
    out = loader.load(offsets([topic("a", T1), BeginTransactionRecord(name="two"), topic("b", T2)], 0))
    assert [img.offset for _, img in out] == [0]  # "a" alone; "b" is held
    assert loader.image.topic("a") is not None and loader.image.topic("b") is None
    assert loader.in_transaction and loader.transaction_start == 1 and loader.offset == 2
    # the transaction goes on in the next batch: still nothing of it is published
    assert loader.load(offsets([topic("c", T3)], 3)) == []
    assert loader.image.topic("b") is None and loader.image.offset == 0
    out = loader.load(offsets([EndTransactionRecord(), NoOpRecord()], 4))
    assert len(out) == 1  # one image with both topics and everything after the end in that call
    delta, image = out[0]
    assert image.topic("b") is not None and image.topic("c") is not None and image.offset == 5
    assert set(delta.changed_topic_ids()) == {T2, T3}
    assert not loader.in_transaction and loader.faults == []


def test_an_aborted_transaction_leaves_nothing_but_its_offset():
    loader = MetadataLoader(replay(EMPTY_IMAGE, [topic("a", T1)], 0))
    base = loader.image
    assert loader.load(offsets([BeginTransactionRecord(name=None), topic("b", T2), controller_record()], 1)) == []
    out = loader.load(offsets([AbortTransactionRecord(reason="Controller failover")], 4))
    assert len(out) == 1
    delta, image = out[0]
    assert image.offset == 4 and image.topic("b") is None and image.controllers == {}
    assert image.topics_by_id == base.topics_by_id and delta.changed_topic_ids() == []
    # a later transaction that ends is applied
    out = loader.load(offsets([BeginTransactionRecord(name="again"), topic("b", T2), EndTransactionRecord()], 5))
    assert [img.topic("b") is not None for _, img in out] == [True] and loader.image.offset == 7


def test_markers_out_of_place_are_reported_and_ignored():
    loader = MetadataLoader(EMPTY_IMAGE)
    out = loader.load(offsets([EndTransactionRecord(), AbortTransactionRecord(reason=None), topic("a", T1)], 0))
    assert out[-1][1].topic("a") is not None and out[-1][1].offset == 2
    assert loader.load(offsets([BeginTransactionRecord(name="x"), BeginTransactionRecord(name="y"),
                                topic("b", T2)], 3)) == []
    assert loader.transaction_start == 3  # the first Begin still holds
    assert [f.split(" at offset")[0] for f in loader.faults] == [
        "EndTransactionRecord", "AbortTransactionRecord", "BeginTransactionRecord"]
    out = loader.load(offsets([EndTransactionRecord()], 6))
    assert out[-1][1].topic("b") is not None


def test_a_reset_drops_a_held_transaction():
    loader = MetadataLoader(EMPTY_IMAGE)
    loader.load(offsets([BeginTransactionRecord(name=None), topic("a", T1)], 0))
    snapshot = replay(EMPTY_IMAGE, [topic("z", T3)], 9)
    loader.reset(snapshot)
    assert not loader.in_transaction and loader.image is snapshot
    out = loader.load(offsets([NoOpRecord()], 10))
    assert out[-1][1].topic("a") is None and out[-1][1].topic("z") is not None and out[-1][1].offset == 10
