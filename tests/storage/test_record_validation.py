"""Record-level validation (records.validate_records), as Kafka's LogValidator does it for a client's append.

Every case runs against both scanners, the C one (``_recordscan``, built by ``make install``) and the
pure-Python one, which must give the same verdicts; Hypothesis compares them on valid batches and on every kind
of single-byte corruption. The corrupted batches get a correct CRC, as a buggy producer would send them, so the
records themselves are what gets checked.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kjbod.storage import records
from kjbod.storage.config import LogConfig
from kjbod.storage.errors import CorruptMessageError, InvalidRecordError, InvalidTimestampError
from kjbod.storage.records import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    RECORD_BATCH_OVERHEAD,
    RecordProblem,
    build_batch,
    crc_matches,
    iter_records,
    parse_header,
    scan_records,
    scan_records_python,
    validate_batches,
    validate_records,
    write_varint,
)
from tests.datapath.support import recrc
from tests.storage.conftest import T0, region_bytes

CODECS = [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD]
NATIVE = records._recordscan  # the C module, also while a test runs with it switched off


@pytest.fixture(params=["native", "python"])
def native(request, monkeypatch) -> bool:
    if request.param == "python":
        monkeypatch.setattr(records, "_recordscan", None)
        return False
    return True


def test_the_native_scanner_is_built():
    # make install builds it; without it every produce pays the pure-Python walk.
    assert NATIVE is not None


def with_records(batch: bytes, body: bytes, *, count: int | None = None) -> bytes:
    """``batch`` with its records section replaced by ``body`` (uncompressed), lengths and CRC fixed."""
    out = bytearray(batch[:RECORD_BATCH_OVERHEAD]) + body
    struct.pack_into(">i", out, 8, len(out) - 12)
    if count is not None:
        struct.pack_into(">i", out, 23, count - 1)
        struct.pack_into(">i", out, 57, count)
    return recrc(out)


def record(*, ts_delta: int = 0, offset_delta: int = 0, key: bytes | None = None, value: bytes | None = b"v",
           headers: list[tuple[bytes, bytes | None]] = (), raw_key_len: int | None = None) -> bytes:
    rec = bytearray(b"\x00")
    write_varint(rec, ts_delta)
    write_varint(rec, offset_delta)
    for blob in (key, value):
        write_varint(rec, -1 if blob is None else len(blob))
        rec += blob or b""
    write_varint(rec, len(headers))
    for hk, hv in headers:
        write_varint(rec, len(hk) if raw_key_len is None else raw_key_len)
        rec += hk
        write_varint(rec, -1 if hv is None else len(hv))
        rec += hv or b""
    out = bytearray()
    write_varint(out, len(rec))
    return bytes(out + rec)


def check(batch: bytes, *, now: int = T0, native: bool = True, **kw) -> list:
    return validate_records(batch, validate_batches(batch, max_message_bytes=1 << 22), now_ms=now, native=native,
                            **kw)


def good(n: int = 3, codec: int = CODEC_NONE, ts: int = T0) -> bytes:
    return build_batch([(b"k%d" % i, b"value-%d" % i, [("h", b"x")], ts + i) for i in range(n)], compression=codec)


# ------------------------------------------------------------------------------------------------ refusals


@pytest.mark.parametrize("codec", CODECS)
def test_valid_batches_of_every_codec_pass_unchanged(codec, native):
    batch = good(5, codec)
    [checked] = check(batch, native=native)
    assert checked.new_header is None and checked.header == parse_header(batch)


def test_random_bytes_as_records_are_invalid_record(native):
    batch = with_records(good(3), bytes(range(200, 256)) * 3)
    with pytest.raises(InvalidRecordError) as info:
        check(batch, native=native)
    assert info.value.record_errors and info.value.record_errors[0][0] == 0
    assert "record 0" in info.value.message


def test_record_length_overrunning_the_batch(native):
    body = bytearray(record(value=b"abc"))
    body[0] = 0x7E  # zigzag 63: far more than is left
    with pytest.raises(InvalidRecordError, match="overruns the batch"):
        check(with_records(good(1), bytes(body), count=1), native=native)


def test_record_count_that_does_not_match(native):
    body = record(offset_delta=0) + record(offset_delta=1)
    with pytest.raises(InvalidRecordError, match="payload ends after 2"):
        check(with_records(good(1), body, count=3), native=native)
    with pytest.raises(InvalidRecordError, match="follow the last"):
        check(with_records(good(1), body, count=1), native=native)


def test_offset_deltas_out_of_order(native):
    body = record(offset_delta=0) + record(offset_delta=2) + record(offset_delta=1)
    with pytest.raises(InvalidRecordError) as info:
        check(with_records(good(1), body, count=3), native=native)
    assert info.value.record_errors == [(1, "offset delta 2 where 1 was expected (deltas run 0, 1, 2, ...)")]


def test_header_key_length_minus_five(native):
    body = record(offset_delta=0) + record(offset_delta=1, headers=[(b"", b"x")], raw_key_len=-5)
    with pytest.raises(InvalidRecordError, match="invalid negative header key size -5") as info:
        check(with_records(good(1), body, count=2), native=native)
    assert info.value.record_errors[0][0] == 1


@pytest.mark.parametrize("body, why", [
    (record(key=None, value=None)[:-1] + b"\x03", "header count"),  # a header count with no headers after it
    (record(headers=[(b"\xff\xfe", b"x")]), "not valid UTF-8"),
    (b"\x02\x00", "timestamp delta"),  # a record of 1 byte: attributes only
    (b"\x00", "before its attributes"),
    (bytes([2 * len(record())]) + record()[1:] + b"\x00", "fields end 1 bytes before"),  # one byte too long
    (b"\x01", "negative record length -1"),
])
def test_malformed_fields(body, why, native):
    with pytest.raises(InvalidRecordError, match=why):
        check(with_records(good(1), body, count=1), native=native)


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_a_compressed_payload_that_does_not_decompress_is_corrupt_message(codec, native):
    batch = bytearray(good(20, codec))
    mid = (RECORD_BATCH_OVERHEAD + len(batch)) // 2
    batch[RECORD_BATCH_OVERHEAD:] = b"\x00\xff" * 8 + batch[mid:]  # garbage, then the second half
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    with pytest.raises(CorruptMessageError, match="does not decompress"):
        check(recrc(batch), native=native)


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_a_payload_decompressing_past_the_limit_is_refused_before_it_is_allocated(codec, native, monkeypatch):
    monkeypatch.setattr(records, "MAX_DECOMPRESSED_BYTES", 1 << 20)
    check(build_batch([(None, b"\0" * 500_000, [], T0)], compression=codec), native=native)
    bomb = build_batch([(None, b"\0" * 1_100_000, [], T0)], compression=codec)
    with pytest.raises(CorruptMessageError, match="decompresses to more than 1048576 bytes"):
        check(bomb, native=native)


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_a_valid_compressed_payload_holding_malformed_records_is_invalid_record(codec, native):
    header = good(2)[:RECORD_BATCH_OVERHEAD]
    bad = record(offset_delta=0) + record(offset_delta=1, headers=[(b"", b"x")], raw_key_len=-5)
    out = bytearray(header) + records.compress(codec, bad)
    out[22] = codec
    struct.pack_into(">i", out, 8, len(out) - 12)
    with pytest.raises(InvalidRecordError, match="negative header key size -5"):
        check(recrc(out), native=native)


def test_timestamps_outside_the_window_are_invalid_timestamp(native):
    batch = build_batch([(None, b"a", [], T0 - 10_000), (None, b"b", [], T0), (None, b"c", [], T0 + 5_000)])
    with pytest.raises(InvalidTimestampError) as info:
        check(batch, native=native, timestamp_before_max_ms=1_000, timestamp_after_max_ms=1_000)
    assert [i for i, _ in info.value.record_errors] == [0, 2]
    assert f"should be within [{T0 - 1000}, {T0 + 1000}]" in info.value.record_errors[0][1]
    # Inside the window (and the defaults: no limit) it passes.
    check(batch, native=native, timestamp_before_max_ms=10_000, timestamp_after_max_ms=5_000)
    check(batch, native=native)


def test_a_producer_may_not_set_log_append_time_itself(native):
    # Kafka's rule: on a CreateTime topic a producer's LogAppendTime batch is judged by its max timestamp
    # (refused when it is -1, else restamped CreateTime); on a LogAppendTime topic it is always refused.
    batch = build_batch([(None, b"a", [], -1)], log_append_time=True)
    with pytest.raises(InvalidTimestampError, match="LogAppendTime"):
        check(batch, native=native)
    marked = build_batch([(None, b"a", [], T0)], log_append_time=True)
    [checked] = check(marked, native=native)
    assert not checked.header.is_log_append_time and checked.header.max_timestamp == T0
    with pytest.raises(InvalidTimestampError, match="LogAppendTime"):
        check(marked, native=native, log_append_time=True)


# ------------------------------------------------------------------------------------------------ max timestamp


def stamped(batch: bytes, max_ts: int) -> bytes:
    out = bytearray(batch)
    struct.pack_into(">q", out, 35, max_ts)
    return recrc(out)


@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_LZ4])
def test_a_max_timestamp_of_minus_one_is_recomputed_with_a_fresh_crc(codec, native):
    batch = stamped(good(4, codec, ts=T0 - 50_000), -1)
    [checked] = check(batch, native=native)
    assert checked.new_header is not None and checked.header.max_timestamp == T0 - 50_000 + 3
    rebuilt = checked.new_header + batch[RECORD_BATCH_OVERHEAD:]
    assert parse_header(rebuilt) == checked.header and crc_matches(rebuilt, 0, checked.header)
    assert [r.timestamp for r in iter_records(rebuilt)] == [T0 - 50_000 + i for i in range(4)]


def test_log_append_time_topics_stamp_the_broker_time(native):
    batch = good(3)
    [checked] = check(batch, native=native, now=T0 + 999, log_append_time=True)
    assert checked.header.is_log_append_time and checked.header.max_timestamp == T0 + 999
    rebuilt = checked.new_header + batch[RECORD_BATCH_OVERHEAD:]
    assert crc_matches(rebuilt, 0, checked.header)
    assert {r.timestamp for r in iter_records(rebuilt)} == {T0 + 999}


def test_append_stores_the_recomputed_header_and_refuses_without_writing(plog, clock):
    before = plog.log_end_offset
    with pytest.raises(InvalidRecordError):
        plog.append(with_records(good(1), b"\x00" * 10, count=1))
    assert plog.log_end_offset == before and plog.active_segment.size == 0
    info = plog.append(stamped(good(3, ts=T0 - 5), -1))
    assert info.log_append_time == -1
    stored = region_bytes(plog.read(0, 1 << 20))
    header = parse_header(stored)
    assert header.max_timestamp == T0 - 5 + 2 and crc_matches(stored, 0, header)
    assert plog.offset_for_timestamp(T0 - 4) == (1, T0 - 4)


def test_time_retention_sees_the_records_of_unstamped_batches(plog, clock):
    # One batch per segment: an old one (records at T0 - 10 s), a newer one (T0), the active segment. Both
    # headers say max_timestamp = -1; retention must go by the records' real timestamps.
    hour = 3_600_000
    plog.config = LogConfig(segment_bytes=600, retention_ms=hour)
    for first_ts in (T0 - 10_000, T0, T0):
        plog.append(stamped(build_batch([(None, b"x" * 200, [], first_ts + i) for i in range(2)]), -1))
    assert [s.base_offset for s in plog.segments] == [0, 2, 4]
    assert plog.delete_old_segments(T0 - 10_000 + 1 + hour) == 0  # the old records are exactly retention.ms old
    assert plog.delete_old_segments(T0 - 10_000 + 2 + hour) == 1
    assert plog.log_start_offset == 2
    assert plog.delete_old_segments(T0 + 1 + hour) == 0


def test_append_to_a_log_append_time_topic_answers_the_time(plog, clock):
    plog.config = LogConfig(segment_bytes=1024, message_timestamp_type="LogAppendTime")
    info = plog.append(good(2))
    assert info.log_append_time == clock.now
    header = parse_header(region_bytes(plog.read(0, 1 << 20)))
    assert header.is_log_append_time and header.max_timestamp == clock.now


# ------------------------------------------------------------------------------------------------ Hypothesis

record_specs = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=20),
        st.none() | st.binary(max_size=60),
        st.lists(st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=8)), max_size=3),
        st.integers(min_value=-5_000, max_value=5_000),
    ),
    min_size=1, max_size=8,
)


def _decoded(batch: bytes) -> list:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in iter_records(batch)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=record_specs, codec=st.sampled_from(CODECS))
def test_valid_batches_are_always_accepted_by_both_scanners(specs, codec):
    batch = build_batch([(k, v, h, T0 + ts) for k, v, h, ts in specs], compression=codec)
    [checked] = check(batch)
    assert checked.new_header is None
    assert check(batch, native=False)[0] == checked


@settings(max_examples=400, deadline=None)
@given(specs=record_specs, data=st.data())
def test_single_byte_corruptions_are_refused_or_change_nothing(specs, data):
    batch = build_batch([(k, v, h, T0 + ts) for k, v, h, ts in specs])
    payload = bytearray(batch[RECORD_BATCH_OVERHEAD:])
    where = data.draw(st.integers(0, len(payload) - 1))
    payload[where] = data.draw(st.integers(0, 255).filter(lambda b: b != payload[where]))
    count = parse_header(batch).records_count
    # The two scanners agree, byte for byte of verdict.
    try:
        native_found = scan_records(bytes(payload), count)
    except RecordProblem:
        native_found = None
    try:
        python_found = scan_records_python(bytes(payload), count)
    except RecordProblem:
        python_found = None
    assert native_found == python_found
    # As sent over a bad link: the CRC catches it.
    with pytest.raises(CorruptMessageError):
        check(batch[:RECORD_BATCH_OVERHEAD] + payload)
    # As a buggy producer would send it, with a CRC over the damaged bytes: the records are checked.
    corrupted = recrc(batch[:RECORD_BATCH_OVERHEAD] + payload)
    try:
        [checked] = check(corrupted)
    except InvalidRecordError:
        return
    # Accepted: the byte changed a key, value, header or timestamp into another well-formed one. A reader of
    # the stored batch sees every record, at its offset, exactly as the producer's bytes encode it.
    stored = (checked.new_header or corrupted[:RECORD_BATCH_OVERHEAD]) + corrupted[RECORD_BATCH_OVERHEAD:]
    after = _decoded(stored)
    assert [o for o, *_ in after] == [o for o, *_ in _decoded(batch)]
    assert [rest[1:] for rest in after] == [rest[1:] for rest in _decoded(corrupted)]
    assert crc_matches(stored, 0, parse_header(stored))


@settings(max_examples=500, deadline=None)
@given(key=st.binary(max_size=8) | st.text(max_size=4).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_both_scanners_judge_header_keys_as_python_decodes_utf8(key):
    body = record(headers=[(key, b"v")])
    try:
        key.decode("utf-8")
        expected = (0, 0)
    except UnicodeDecodeError:
        expected = None
    assert NATIVE.scan(body, 1) == expected
    try:
        found = scan_records_python(body, 1)
    except RecordProblem:
        found = None
    assert found == expected


# A batch librdkafka (confluent-kafka 2.x) compressed with snappy: 3000 records "snappy-NNNNN-" + "abc" * (N % 50),
# stored by kjbod (tests/datapath/test_record_validation_live.py wrote it). Real snappy: copies, not only literals.
LIBRDKAFKA_SNAPPY = (Path(__file__).parents[1] / "golden" / "librdkafka-snappy-batch.bin").read_bytes()


def test_a_librdkafka_snappy_batch_reads_the_same_with_both_readers(native):
    [checked] = check(LIBRDKAFKA_SNAPPY, now=T0, native=native)
    assert checked.new_header is None
    payload = LIBRDKAFKA_SNAPPY[RECORD_BATCH_OVERHEAD:]
    assert NATIVE.snappy_block(payload) == records.snappy_block_python(payload)
    values = [r.value for r in iter_records(LIBRDKAFKA_SNAPPY)]
    assert values == [b"snappy-%05d-" % i + b"abc" * (i % 50) for i in range(3000)]


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_both_snappy_readers_agree_on_every_single_byte_corruption(data):
    block = bytearray(LIBRDKAFKA_SNAPPY[RECORD_BATCH_OVERHEAD:])
    where = data.draw(st.integers(0, len(block) - 1))
    block[where] = data.draw(st.integers(0, 255).filter(lambda b: b != block[where]))
    try:
        python_found = records.snappy_block_python(bytes(block))
    except CorruptMessageError:
        python_found = None
    assert NATIVE.snappy_block(bytes(block)) == python_found
