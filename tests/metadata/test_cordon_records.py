"""KIP-1066's cordoned log dirs in Kafka 4.3's bytes and records: BrokerHeartbeat v2, RegisterBrokerRecord v4 and
BrokerRegistrationChangeRecord v3, read by hand as Kafka's layout puts them; the record versions metadata.version
picks; replay and snapshot round trips; and what an older kjbod sent or wrote (its heartbeats and registrations
carried the cordon in its own tag 10000; its metadata log never held one) still reads."""

from __future__ import annotations

import struct
import uuid

import pytest

from kjbod.metadata import EMPTY_IMAGE, image_records, replay
from kjbod.protocol.generated import (
    BrokerHeartbeatRequest,
    BrokerRegistrationChangeRecord,
    BrokerRegistrationRequest,
    FeatureLevelRecord,
    RegisterBrokerRecord,
)
from kjbod.protocol.generated.broker_registration_request import Listener
from kjbod.protocol.generated.register_broker_record import BrokerEndpoint
from kjbod.protocol.runtime import EncodeError, write_uvarint
from kjbod.storage.metadata_records import (
    decode_batches,
    frame_record,
    record_version,
    records_batch,
    unframe,
    unframe_record,
)
from kjbod.storage.metadata_snapshot import build_snapshot, parse_snapshot

D1, D2, D3 = (uuid.UUID(int=(7 << 64) + i) for i in (1, 2, 3))
INC = uuid.UUID("33333333-3333-3333-3333-333333333333")


def uuids(*ids: uuid.UUID) -> bytes:
    """A compact array of uuids: length + 1 as an unsigned varint, then 16 bytes each."""
    return write_uvarint(len(ids) + 1) + b"".join(u.bytes for u in ids)


def tagged(tag: int, body: bytes) -> bytes:
    return write_uvarint(tag) + write_uvarint(len(body)) + body


# ------------------------------------------------------------------------------------------ BrokerHeartbeat v2

HEAD = struct.pack(">iqq??", 4, 12, 99, False, False)


def heartbeat(**kw) -> BrokerHeartbeatRequest:
    return BrokerHeartbeatRequest(broker_id=4, broker_epoch=12, current_metadata_offset=99, want_fence=False,
                                  want_shut_down=False, **kw)


def test_heartbeat_v2_carries_the_cordoned_dirs_as_tag_1():
    wire = heartbeat(offline_log_dirs=[D3], cordoned_log_dirs=[D1, D2]).encode(2)
    assert wire == HEAD + b"\x02" + tagged(0, uuids(D3)) + tagged(1, uuids(D1, D2))
    back = BrokerHeartbeatRequest.decode(wire, 2)
    assert (back.offline_log_dirs, back.cordoned_log_dirs) == ([D3], [D1, D2])


def test_heartbeat_v2_null_is_absent_and_empty_is_an_empty_list():
    null = heartbeat().encode(2)
    assert null == HEAD + b"\x00"  # null is the default: not written
    assert BrokerHeartbeatRequest.decode(null, 2).cordoned_log_dirs is None
    empty = heartbeat(cordoned_log_dirs=[]).encode(2)
    assert empty == HEAD + b"\x01" + tagged(1, b"\x01")  # "none cordoned" is said, not left out
    assert BrokerHeartbeatRequest.decode(empty, 2).cordoned_log_dirs == []


def test_heartbeat_v1_cannot_carry_a_cordon_and_reads_tag_1_as_unknown():
    with pytest.raises(EncodeError, match="CordonedLogDirs at version 1"):
        heartbeat(cordoned_log_dirs=[D1]).encode(1)
    v1 = BrokerHeartbeatRequest.decode(HEAD + b"\x01" + tagged(1, uuids(D1)), 1)
    assert v1.cordoned_log_dirs is None and v1.unknown_tagged_fields == ((1, uuids(D1)),)


def test_an_older_kjbod_brokers_tag_10000_is_kept_as_unknown_and_means_no_cordon():
    """kjbod before Kafka 4.3's field sent the cordon as tag 10000 in every heartbeat (v0-v1) and registration:
    a newer controller reads past it, so the cordon counts only once the broker is upgraded and sends v2."""
    old = tagged(10000, uuids(D1))
    for version in (1, 2):
        back = BrokerHeartbeatRequest.decode(HEAD + b"\x01" + old, version)
        assert back.cordoned_log_dirs is None and back.unknown_tagged_fields == ((10000, uuids(D1)),)
    registration = BrokerRegistrationRequest(
        broker_id=4, cluster_id="c", incarnation_id=INC, listeners=[Listener(name="PLAINTEXT", host="h", port=1)],
        log_dirs=[D1])
    wire = registration.encode(4)
    assert wire.endswith(b"\x00")  # no tagged fields: Kafka's registration has no cordon
    with_old = BrokerRegistrationRequest.decode(wire[:-1] + b"\x01" + old, 4)
    assert with_old.unknown_tagged_fields == ((10000, uuids(D1)),) and with_old.log_dirs == [D1]


# ------------------------------------------------------------------------------------------ the records


def register(cordoned: list[uuid.UUID] | None = None) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(broker_id=4, incarnation_id=INC, broker_epoch=12, fenced=False,
                                end_points=[BrokerEndpoint(name="PLAINTEXT", host="h", port=9004)],
                                log_dirs=[D1, D2], cordoned_log_dirs=cordoned)


def test_register_broker_record_v4_puts_the_cordon_after_the_log_dirs_as_tag_1():
    v3, v4 = register().encode(3), register([D2]).encode(4)
    assert v3.endswith(b"\x01" + tagged(0, uuids(D1, D2)))
    assert v4 == v3[:-len(b"\x01" + tagged(0, uuids(D1, D2)))] + b"\x02" + tagged(0, uuids(D1, D2)) + tagged(
        1, uuids(D2))
    assert RegisterBrokerRecord.decode(v4, 4).cordoned_log_dirs == [D2]
    assert register().encode(4) == v3  # null: the same body as v3
    assert RegisterBrokerRecord.decode(v3, 3).cordoned_log_dirs is None
    with pytest.raises(EncodeError, match="CordonedLogDirs at version 3"):
        register([D2]).encode(3)


def test_broker_registration_change_record_v3_uses_tag_3_and_null_means_no_change():
    head = struct.pack(">iq", 4, 12)
    change = BrokerRegistrationChangeRecord(broker_id=4, broker_epoch=12, cordoned_log_dirs=[D1])
    assert change.encode(3) == head + b"\x01" + tagged(3, uuids(D1))
    assert BrokerRegistrationChangeRecord(broker_id=4, broker_epoch=12, cordoned_log_dirs=[]).encode(3) == (
        head + b"\x01" + tagged(3, b"\x01"))
    assert BrokerRegistrationChangeRecord.decode(head + b"\x00", 3).cordoned_log_dirs is None
    with pytest.raises(EncodeError, match="CordonedLogDirs at version 2"):
        change.encode(2)


@pytest.mark.parametrize(("level", "register_version", "change_version"), [(17, 3, 2), (29, 3, 2), (30, 4, 3)])
def test_metadata_version_picks_the_broker_record_versions(level, register_version, change_version):
    """Kafka's registerBrokerRecordVersion: v4 from 4.3-IV0; a Kafka 4.2 controller or broker reading kjbod's log
    below that level meets only versions it knows."""
    assert record_version(register(), level) == register_version
    assert record_version(BrokerRegistrationChangeRecord(), level) == change_version
    assert (record_version(register(), None), record_version(BrokerRegistrationChangeRecord(), None)) == (4, 3)
    framed = frame_record(register(), register_version)
    assert unframe(framed)[:2] == (0, register_version)


def image_with_cordons():
    return replay(EMPTY_IMAGE, [
        FeatureLevelRecord(name="metadata.version", feature_level=30),
        register(),
        BrokerRegistrationChangeRecord(broker_id=4, broker_epoch=12, cordoned_log_dirs=[D2]),
        RegisterBrokerRecord(broker_id=5, incarnation_id=INC, broker_epoch=13, log_dirs=[D3]),
    ])


def test_replay_keeps_the_cordon_and_null_changes_leave_it():
    image = image_with_cordons()
    assert image.broker(4).cordoned_dirs == (D2,) and image.broker(5).cordoned_dirs is None
    image = replay(image, [BrokerRegistrationChangeRecord(broker_id=4, broker_epoch=12, fenced=1)])
    assert image.broker(4).cordoned_dirs == (D2,) and image.broker(4).fenced  # null: unchanged
    assert image.broker(4).has_uncordoned_dirs
    image = replay(image, [BrokerRegistrationChangeRecord(broker_id=4, broker_epoch=12, cordoned_log_dirs=[D1, D2])])
    assert not image.broker(4).has_uncordoned_dirs
    image = replay(image, [BrokerRegistrationChangeRecord(broker_id=4, broker_epoch=12, cordoned_log_dirs=[])])
    assert image.broker(4).cordoned_dirs == () and image.broker(4).has_uncordoned_dirs
    image = replay(image, [register()])  # a registration replaces it: not known until the next heartbeat
    assert image.broker(4).cordoned_dirs is None


def test_a_snapshot_keeps_the_cordons_in_register_broker_record_v4():
    image = image_with_cordons()
    records = image_records(image)
    assert replay(EMPTY_IMAGE, records).brokers == image.brokers
    data = build_snapshot(records, epoch=3, last_contained_timestamp=0, now_ms=0)
    parsed = parse_snapshot(data)
    assert replay(EMPTY_IMAGE, parsed).brokers == image.brokers
    [reg4] = [r for r in parsed if isinstance(r, RegisterBrokerRecord) and r.broker_id == 4]
    assert reg4.cordoned_log_dirs == [D2]


def test_an_older_kjbod_metadata_log_replays_with_cordons_unknown():
    """What kjbod wrote before 4.3-IV0 (RegisterBrokerRecord v3, BrokerRegistrationChangeRecord v2, never a
    cordon): it loads as it did, every broker's cordons not known, so none counts as cordoned."""
    old = records_batch([frame_record(FeatureLevelRecord(name="metadata.version", feature_level=29), 0),
                         frame_record(register(), 3),
                         frame_record(BrokerRegistrationChangeRecord(broker_id=4, broker_epoch=12, fenced=-1), 2)],
                        base_offset=0, epoch=1, timestamp_ms=0)
    decoded = [rec for _, rec in decode_batches(old)]
    image = replay(EMPTY_IMAGE, decoded)
    assert image.broker(4).cordoned_dirs is None and image.broker(4).has_uncordoned_dirs
    assert image.broker(4).log_dirs == (D1, D2) and not image.broker(4).fenced
    assert unframe_record(frame_record(register(), 3)) == register()
