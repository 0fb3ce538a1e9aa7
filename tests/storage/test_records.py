"""Record batch v2: header layout, validation on append, the builder, record decoding.

kafka-python's builder is the second implementation everything is checked against.
"""

from __future__ import annotations

import struct

import pytest

from kjbod.storage.errors import CorruptMessageError, InvalidRecordError, MessageTooLargeError
from kjbod.storage.records import (
    HEADER,
    RECORD_BATCH_OVERHEAD,
    build_batch,
    iter_all_records,
    iter_batches,
    iter_records,
    parse_header,
    validate_batches,
)
from tests.storage.conftest import T0, kp_batch, kp_records

# The worked example of the encoding notes: one record, null key, value "hi", timestamp 1700000000000.
HI_BATCH = bytes.fromhex(
    "0000000000000000" "0000003a" "00000000" "02" "bbcc4115" "0000" "00000000"
    "0000018bcfe56800" "0000018bcfe56800" "ffffffffffffffff" "ffff" "ffffffff" "00000001"
    "10" "00" "00" "00" "01" "046869" "00"
)


def test_header_struct_is_61_bytes_big_endian():
    assert HEADER.size == RECORD_BATCH_OVERHEAD == 61
    h = parse_header(HI_BATCH)
    assert (h.base_offset, h.length, h.magic, h.crc) == (0, 58, 2, 0xBBCC4115)
    assert (h.last_offset_delta, h.records_count, h.max_timestamp) == (0, 1, T0)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (-1, -1, -1)
    assert h.size == len(HI_BATCH) == 70


def test_builder_matches_kafka_python_byte_for_byte():
    mine = build_batch([(None, b"hi", [], T0)], partition_leader_epoch=0)
    assert mine == HI_BATCH
    theirs = kp_batch([b"a", b"bb", b"ccc"], timestamp=T0, step=7, key=b"k")
    mine = build_batch([(b"k", v, [], T0 + 7 * i) for i, v in enumerate([b"a", b"bb", b"ccc"])], partition_leader_epoch=0)
    # kafka-python writes PartitionLeaderEpoch 0; everything else must agree.
    assert mine == theirs


def test_builder_headers_and_idempotence_fields_decode():
    raw = build_batch(
        [(b"k1", b"v1", [("h", b"x"), ("n", None)], T0), (None, None, [], T0 + 5)],
        producer_id=42, producer_epoch=3, base_sequence=7,
    )
    h = parse_header(raw)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (42, 3, 7, 8)
    recs = list(iter_records(raw))
    assert recs[0].headers == [("h", b"x"), ("n", None)]
    assert (recs[1].key, recs[1].value, recs[1].timestamp, recs[1].offset) == (None, None, T0 + 5, 1)
    assert validate_batches(raw, max_message_bytes=1 << 20)[0][1] == h


@pytest.mark.parametrize("codec", [0, 1, 3, 4])
def test_kafka_python_batches_validate_and_decode(codec):
    values = [b"value %d " % i * 20 for i in range(10)]  # compressible, so kafka-python keeps the codec
    raw = kp_batch(values, compression=codec)
    [(pos, h)] = validate_batches(raw, max_message_bytes=1 << 20)
    assert pos == 0 and h.compression == codec and h.records_count == 10
    assert [(r.offset, r.value) for r in iter_records(raw)] == list(enumerate(values))


def test_several_batches_are_all_returned():
    a, b = kp_batch([b"a"]), kp_batch([b"b", b"c"])
    found = validate_batches(a + b, max_message_bytes=1 << 20)
    assert [p for p, _ in found] == [0, len(a)]
    assert [p for p, _ in iter_batches(a + b)] == [0, len(a)]
    assert [r.value for r in iter_all_records(a + b)] == [b"a", b"b", b"c"]


def test_iter_batches_ignores_a_partial_trailing_batch():
    a = kp_batch([b"a"])
    assert [p for p, _ in iter_batches(a + a[:30])] == [0]


def flip(raw: bytes, pos: int) -> bytes:
    b = bytearray(raw)
    b[pos] ^= 0x40
    return bytes(b)


@pytest.mark.parametrize("pos", [21, 30, 45, 61, 65])
def test_crc_covers_attributes_to_end(pos):
    raw = kp_batch([b"hello", b"world"])
    with pytest.raises(CorruptMessageError, match="CRC"):
        validate_batches(flip(raw, pos), max_message_bytes=1 << 20)


def test_epoch_is_outside_the_crc_but_base_offset_must_be_zero_from_clients():
    raw = bytearray(kp_batch([b"x"]))
    struct.pack_into(">i", raw, 12, 99)  # PartitionLeaderEpoch: not covered by the CRC
    validate_batches(bytes(raw), max_message_bytes=1 << 20)
    struct.pack_into(">q", raw, 0, 5)
    with pytest.raises(InvalidRecordError, match="should be 0"):
        validate_batches(bytes(raw), max_message_bytes=1 << 20)
    validate_batches(bytes(raw), max_message_bytes=1 << 20, from_client=False)


def test_validation_errors_carry_kafka_codes():
    raw = kp_batch([b"x" * 100])
    with pytest.raises(MessageTooLargeError) as e:
        validate_batches(raw, max_message_bytes=len(raw) - 1)
    assert e.value.error_code == 10
    with pytest.raises(CorruptMessageError) as e:
        validate_batches(raw[:-1], max_message_bytes=1 << 20)
    assert e.value.error_code == 2
    with pytest.raises(CorruptMessageError):
        validate_batches(raw + b"\x00" * 5, max_message_bytes=1 << 20)
    with pytest.raises(InvalidRecordError) as e:
        validate_batches(b"", max_message_bytes=1 << 20)
    assert e.value.error_code == 87
    bad_magic = bytearray(raw)
    bad_magic[16] = 1
    with pytest.raises(InvalidRecordError, match="magic 1"):
        validate_batches(bytes(bad_magic), max_message_bytes=1 << 20)
    short = bytearray(raw)
    struct.pack_into(">i", short, 8, 10)
    with pytest.raises(CorruptMessageError, match="length 10"):
        validate_batches(bytes(short), max_message_bytes=1 << 20)


def test_count_must_match_offset_range_and_control_batches_are_refused():
    raw = build_batch([(None, b"a", [], T0), (None, b"b", [], T0)])
    # Rewrite RecordsCount and recompute the CRC, so only the count check can object.
    import crc32c

    bad = bytearray(raw)
    struct.pack_into(">i", bad, 57, 3)
    struct.pack_into(">I", bad, 17, crc32c.crc32c(bytes(bad[21:])))
    with pytest.raises(InvalidRecordError, match="offset range"):
        validate_batches(bytes(bad), max_message_bytes=1 << 20)
    control = build_batch([(b"\x00\x00\x00\x01", b"", [], T0)], is_control=True)
    with pytest.raises(InvalidRecordError, match="control"):
        validate_batches(control, max_message_bytes=1 << 20)


def test_kafka_python_reads_builder_output():
    raw = build_batch([(None, b"one", [], T0), (b"k", b"two", [("a", b"b")], T0 + 1)])
    assert kp_records(raw) == [(0, b"one", T0), (1, b"two", T0 + 1)]
