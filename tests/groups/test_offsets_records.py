"""The `__consumer_offsets` keys and values (kjbod.broker.groups.records) byte for byte, as Kafka's schemas lay
them out (OffsetCommitKey/Value, GroupMetadataKey/Value), both ways."""

from __future__ import annotations

import pytest

from kjbod.broker.groups import records as rec
from kjbod.broker.groups.state import CommittedOffset


def test_offset_key_bytes():
    raw = rec.offset_key("g1", "topic", 7)
    assert raw == b"\x00\x01" + b"\x00\x02g1" + b"\x00\x05topic" + b"\x00\x00\x00\x07"
    assert rec.read_key(raw) == rec.OffsetKey("g1", "topic", 7)
    # Key version 0 has the same layout.
    assert rec.read_key(b"\x00\x00" + raw[2:]) == rec.OffsetKey("g1", "topic", 7)


def test_group_key_bytes():
    raw = rec.group_key("group")
    assert raw == b"\x00\x02\x00\x05group"
    assert rec.read_key(raw) == rec.GroupKey("group")


def test_offset_value_v3_and_v1_bytes():
    c = CommittedOffset(offset=42, leader_epoch=3, metadata="m", commit_timestamp_ms=1000)
    raw = rec.offset_value(c)
    assert raw == (b"\x00\x03" + (42).to_bytes(8, "big") + (3).to_bytes(4, "big") + b"\x00\x01m"
                   + (1000).to_bytes(8, "big"))
    assert rec.read_offset_value(raw) == c
    expiring = CommittedOffset(offset=42, leader_epoch=-1, metadata="", commit_timestamp_ms=1000,
                               expire_timestamp_ms=5000)
    raw = rec.offset_value(expiring)
    assert raw == (b"\x00\x01" + (42).to_bytes(8, "big") + b"\x00\x00" + (1000).to_bytes(8, "big")
                   + (5000).to_bytes(8, "big"))
    assert rec.read_offset_value(raw) == expiring
    # v0: offset, metadata, commit timestamp.
    v0 = b"\x00\x00" + (9).to_bytes(8, "big") + b"\x00\x00" + (77).to_bytes(8, "big")
    assert rec.read_offset_value(v0) == CommittedOffset(9, -1, "", 77)


def test_group_value_v3_bytes():
    g = rec.GroupRecord("consumer", 4, "range", "m-1", 123, (
        rec.MemberRecord("m-1", None, "cid", "/127.0.0.1", 30000, 10000, b"sub", b"asg"),))
    raw = rec.group_value(g)
    assert raw == (b"\x00\x03" + b"\x00\x08consumer" + (4).to_bytes(4, "big") + b"\x00\x05range" + b"\x00\x03m-1"
                   + (123).to_bytes(8, "big") + (1).to_bytes(4, "big")
                   + b"\x00\x03m-1" + b"\xff\xff" + b"\x00\x03cid" + b"\x00\x0a/127.0.0.1"
                   + (30000).to_bytes(4, "big") + (10000).to_bytes(4, "big")
                   + b"\x00\x00\x00\x03sub" + b"\x00\x00\x00\x03asg")
    assert rec.read_group_value(raw) == g


def test_an_empty_group_has_null_protocol_and_leader():
    g = rec.GroupRecord("consumer", 5, None, None, 9, ())
    assert rec.read_group_value(rec.group_value(g)) == g


@pytest.mark.parametrize("raw", [b"", b"\x00", b"\x00\x05\x00\x01g", b"\x00\x01\x00\x09short"])
def test_bad_keys_raise_a_format_error(raw):
    with pytest.raises(rec.RecordFormatError):
        rec.read_key(raw)


def test_unknown_value_versions_raise_a_format_error():
    with pytest.raises(rec.RecordFormatError):
        rec.read_offset_value(b"\x00\x09" + bytes(30))
    with pytest.raises(rec.RecordFormatError):
        rec.read_group_value(b"\x00\x04" + bytes(30))


# ------------------------------------------------------------------------------------------------ KIP-848 groups
def _consumer_group():
    import uuid

    from kjbod.broker.groups.consumer import ConsumerGroup, ConsumerMember, MemberState, TopicMeta

    tid = uuid.UUID(int=0x0102)
    g = ConsumerGroup("g", group_epoch=5, assignment_epoch=4, topics={"t": TopicMeta(tid, "t", 3)})
    g.members["m"] = ConsumerMember("m", instance_id=None, rack_id="r", client_id="c", client_host="/h",
                                    subscribed_topic_names=("t",), rebalance_timeout_ms=300, server_assignor=None,
                                    member_epoch=4, previous_member_epoch=3, state=MemberState.UNREVOKED_PARTITIONS,
                                    assigned={tid: frozenset({0})}, pending_revocation={tid: frozenset({2, 1})})
    g.target["m"] = {tid: frozenset({0})}
    return g, tid


def test_consumer_group_records_bytes():
    g, tid = _consumer_group()
    out = rec.consumer_group_records(g)
    i32 = lambda n: n.to_bytes(4, "big", signed=True)  # noqa: E731
    # keys: int16 version, then int16-length strings
    assert list(out) == [b"\x00\x05\x00\x01g\x00\x01m", b"\x00\x04\x00\x01g", b"\x00\x03\x00\x01g",
                         b"\x00\x07\x00\x01g\x00\x01m", b"\x00\x06\x00\x01g", b"\x00\x08\x00\x01g\x00\x01m"]
    # values: int16 version 0, flexible: compact strings/arrays (length + 1), a tag count closing each struct
    assert out[b"\x00\x03\x00\x01g"] == b"\x00\x00" + i32(5) + b"\x00"
    assert out[b"\x00\x06\x00\x01g"] == b"\x00\x00" + i32(4) + b"\x00"
    assert out[b"\x00\x05\x00\x01g\x00\x01m"] == (
        b"\x00\x00" + b"\x00" + b"\x02r" + b"\x02c" + b"\x03/h" + b"\x02" + b"\x02t" + b"\x00" + i32(300) + b"\x00"
        + b"\x00")
    assert out[b"\x00\x04\x00\x01g"] == (b"\x00\x00" + b"\x02" + tid.bytes + b"\x02t" + i32(3) + b"\x01" + b"\x00"
                                         + b"\x00")
    topic_0 = b"\x02" + tid.bytes + b"\x02" + i32(0) + b"\x00"
    assert out[b"\x00\x07\x00\x01g\x00\x01m"] == b"\x00\x00" + topic_0 + b"\x00"
    assert out[b"\x00\x08\x00\x01g\x00\x01m"] == (
        b"\x00\x00" + i32(4) + i32(3) + b"\x01" + topic_0 + b"\x02" + tid.bytes + b"\x03" + i32(1) + i32(2)
        + b"\x00" + b"\x00")


def test_consumer_group_records_load_back():
    g, _ = _consumer_group()
    out = rec.consumer_group_records(g)
    keys = {rec.read_key(k): v for k, v in out.items()}
    assert all(isinstance(k, rec.ConsumerKey) for k in keys)
    back = rec.consumer_group_of("g", keys)
    assert back is not None
    assert (back.group_epoch, back.assignment_epoch, back.topics, back.target) == (
        g.group_epoch, g.assignment_epoch, g.topics, g.target)
    m, b = g.members["m"], back.members["m"]
    assert (b.rack_id, b.client_id, b.client_host, b.subscribed_topic_names, b.rebalance_timeout_ms, b.member_epoch,
            b.previous_member_epoch, b.state, b.assigned, b.pending_revocation) == (
        m.rack_id, m.client_id, m.client_host, m.subscribed_topic_names, m.rebalance_timeout_ms, m.member_epoch,
        m.previous_member_epoch, m.state, m.assigned, m.pending_revocation)
    # without the group's epoch record the group is gone (a tombstone)
    del keys[rec.ConsumerKey(rec.CG_METADATA, "g", None)]
    assert rec.consumer_group_of("g", keys) is None
    # a member metadata value with a tagged field this version does not know still reads (tag 0, a classic
    # member's protocols, is read: tests/groups/test_group_migration.py)
    key = rec.ConsumerKey(rec.CG_MEMBER, "g", "m")
    raw = out[rec.consumer_key(rec.CG_MEMBER, "g", "m")]
    keys = {rec.read_key(k): v for k, v in out.items()}
    keys[key] = raw[:-1] + b"\x01\x05\x02\xab\xcd"
    assert rec.consumer_group_of("g", keys).members["m"].client_id == "c"


def test_records_between_writes_changes_then_tombstones():
    g, _ = _consumer_group()
    before = rec.consumer_group_records(g)
    g.members.pop("m")
    g.target.pop("m")
    g.group_epoch = 6
    after = rec.consumer_group_records(g)
    pairs = rec.records_between(before, after)
    assert pairs == [(b"\x00\x03\x00\x01g", after[b"\x00\x03\x00\x01g"]), (b"\x00\x08\x00\x01g\x00\x01m", None),
                     (b"\x00\x07\x00\x01g\x00\x01m", None), (b"\x00\x05\x00\x01g\x00\x01m", None)]
    assert rec.records_between(after, after) == []


@pytest.mark.parametrize("raw", [b"\x00\x03", b"\x00\x01\x00\x00", b"\x00\x00\x05", b"\x00\x00\x02"])
def test_bad_consumer_values_raise_the_format_error(raw):
    keys = {rec.ConsumerKey(rec.CG_METADATA, "g", None): b"\x00\x00\x00\x00\x00\x01\x00",
            rec.ConsumerKey(rec.CG_MEMBER, "g", "m"): raw}
    with pytest.raises(rec.RecordFormatError):
        rec.consumer_group_of("g", keys)
