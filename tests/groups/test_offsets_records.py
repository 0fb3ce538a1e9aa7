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
