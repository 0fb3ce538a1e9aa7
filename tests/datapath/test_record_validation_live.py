"""Record-level validation over the wire: hand-built Produce requests whose batch header and CRC are right but
whose records are not (the codec builds them, the CRC is recomputed over the damage) are refused with Kafka's
code, a message and per-record errors; nothing is appended; a good produce after them and real consumers
(kafka-python, confluent-kafka) read every good record. Batches whose header says max_timestamp = -1 get the
real max timestamp on disk (fresh CRC), so ListOffsets by timestamp finds their records (time retention of such
batches is checked on a log with a controlled clock, tests/storage/test_record_validation.py).
"""

from __future__ import annotations

import struct
import time

import pytest
from live import start_server

from kjbod.protocol.errors import ErrorCode as E
from kjbod.storage.records import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    RECORD_BATCH_OVERHEAD,
    build_batch,
    compress,
    crc_matches,
    iter_batches,
    write_varint,
)

from .support import list_offset, new_topic, partition_dirs, produce, recrc, refused
from .test_clients import PARTITIONS, confluent_consume, kafka_python_consume

pytestmark = pytest.mark.slow

HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = start_server(tmp_path_factory.mktemp("record-validation"), overrides={
        "auto.create.topics.enable": "false",
    })
    yield s
    s.stop()


def now_ms() -> int:
    return int(time.time() * 1000)


def record_bytes(offset_delta: int, value: bytes = b"v", *, header_key_len: int | None = None) -> bytes:
    """One record as a producer frames it (optionally one header whose key length field is `header_key_len`)."""
    rec = bytearray(b"\x00")
    write_varint(rec, 0)
    write_varint(rec, offset_delta)
    write_varint(rec, -1)
    write_varint(rec, len(value))
    rec += value
    if header_key_len is None:
        write_varint(rec, 0)
    else:
        write_varint(rec, 1)
        write_varint(rec, header_key_len)
        write_varint(rec, 1)
        rec += b"x"
    out = bytearray()
    write_varint(out, len(rec))
    return bytes(out + rec)


def hand_built(records_section: bytes, count: int, codec: int = 0, *, timestamp: int | None = None) -> bytes:
    """A batch header for `count` records around `records_section` (already compressed if `codec`), with a
    correct CRC: only the records are wrong."""
    head = bytearray(build_batch([(None, b"", [], now_ms() if timestamp is None else timestamp)])[:RECORD_BATCH_OVERHEAD])
    head[22] = codec
    out = head + records_section
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">i", out, 23, count - 1)
    struct.pack_into(">i", out, 57, count)
    return recrc(out)


def garbage_payload(codec: int) -> bytes:
    good = compress(codec, record_bytes(0) + record_bytes(1))
    return b"\x00\xff\x13\x37" * 4 + good[len(good) // 2 :]


BAD_BATCHES = [
    ("random bytes as records", hand_built(bytes(range(97, 160)), 3), E.INVALID_RECORD, "record 0"),
    ("a record length overrunning the batch", hand_built(b"\x7e" + record_bytes(0)[1:], 1), E.INVALID_RECORD,
     "overruns the batch"),
    ("a record count that does not match", hand_built(record_bytes(0) + record_bytes(1), 3), E.INVALID_RECORD,
     "payload ends after 2"),
    ("offset deltas out of order", hand_built(record_bytes(0) + record_bytes(2) + record_bytes(1), 3),
     E.INVALID_RECORD, "offset delta 2 where 1"),
    ("a header key length of -5", hand_built(record_bytes(0) + record_bytes(1, header_key_len=-5), 2),
     E.INVALID_RECORD, "negative header key size -5"),
    *[(f"a corrupt {name} payload", hand_built(garbage_payload(codec), 2, codec), E.CORRUPT_MESSAGE,
       f"{name} payload does not decompress")
      for name, codec in (("gzip", CODEC_GZIP), ("lz4", CODEC_LZ4), ("zstd", CODEC_ZSTD), ("snappy", CODEC_SNAPPY))],
    *[(f"a valid {name} payload holding malformed records",
       hand_built(compress(codec, record_bytes(0) + record_bytes(1, header_key_len=-5)), 2, codec),
       E.INVALID_RECORD, "negative header key size -5")
      for name, codec in (("gzip", CODEC_GZIP), ("lz4", CODEC_LZ4), ("zstd", CODEC_ZSTD), ("snappy", CODEC_SNAPPY))],
]


def test_bad_records_are_refused_and_consumers_read_every_good_record(raw, server):
    topic = "poison"
    new_topic(raw, topic, PARTITIONS)
    values = [b"good-%03d" % i for i in range(5)]
    assert produce(raw, topic, 0, build_batch([(None, v, [], now_ms()) for v in values])).error_code == 0
    for what, records, code, text in BAD_BATCHES:
        resp = refused(raw, topic, records, code)
        assert resp.error_message and text in resp.error_message, f"{what}: {resp.error_message}"
        # Produce v8+: which record and why (a payload that does not decompress is refused as a whole).
        [first, *_] = resp.record_errors
        assert first.batch_index_error_message in resp.error_message, f"{what}: {resp.record_errors}"
    more = [b"after-%03d" % i for i in range(5)]
    for codec in (0, CODEC_GZIP, CODEC_LZ4, CODEC_ZSTD):  # good batches of every codec pass
        chunk = [v + b"-%d" % codec for v in more]
        assert produce(raw, topic, 0, build_batch([(None, v, [], now_ms()) for v in chunk],
                                                  compression=codec)).error_code == 0
        values += chunk
    for consume in (kafka_python_consume(server), confluent_consume(server)):
        consumed, ends = consume(topic)
        assert ends[0] == len(values)
        assert [(offset, value) for offset, _key, value, _h in consumed[0]] == list(enumerate(values))


def test_snappy_batches_from_librdkafka_and_by_hand(raw, server):
    # kafka-python has no snappy codec here, so confluent-kafka (librdkafka's own snappy) writes and reads.
    from confluent_kafka import Producer

    new_topic(raw, "snappy", PARTITIONS)
    producer = Producer({"bootstrap.servers": server.bootstrap, "compression.type": "snappy", "linger.ms": 20,
                         "acks": "all", "log_level": 3})
    values = [b"snappy-%05d-" % i + b"abc" * (i % 50) for i in range(3000)]
    for v in values:
        producer.produce("snappy", value=v, partition=0)
    assert producer.flush(30) == 0
    del producer
    refused(raw, "snappy", hand_built(garbage_payload(CODEC_SNAPPY), 2, CODEC_SNAPPY), E.CORRUPT_MESSAGE)
    mine = [b"by-hand-%d" % i for i in range(3)]
    assert produce(raw, "snappy", 0, build_batch([(None, v, [], now_ms()) for v in mine],
                                                 compression=CODEC_SNAPPY)).error_code == 0
    consumed, ends = confluent_consume(server)("snappy")
    assert [value for _o, _k, value, _h in consumed[0]] == values + mine
    assert any(h.compression == CODEC_SNAPPY for h, _ in stored_headers(server, "snappy"))


def test_timestamps_outside_the_topic_window_are_invalid_timestamp(raw):
    new_topic(raw, "window", configs={"message.timestamp.before.max.ms": str(HOUR_MS),
                                      "message.timestamp.after.max.ms": str(HOUR_MS)})
    now = now_ms()
    late = build_batch([(None, b"ok", [], now), (None, b"old", [], now - 3 * HOUR_MS), (None, b"ok", [], now)])
    resp = refused(raw, "window", late, E.INVALID_TIMESTAMP)
    assert [e.batch_index for e in resp.record_errors] == [1]
    assert "out of range" in resp.record_errors[0].batch_index_error_message
    assert produce(raw, "window", 0, build_batch([(None, b"ok", [], now)])).error_code == 0


def test_log_append_time_topics_stamp_the_broker_time(raw):
    new_topic(raw, "appendtime", configs={"message.timestamp.type": "LogAppendTime"})
    before = now_ms()
    resp = produce(raw, "appendtime", 0, build_batch([(None, b"x", [], before - 5 * HOUR_MS)]))
    assert resp.error_code == 0 and resp.log_append_time_ms >= before
    found = list_offset(raw, "appendtime", 0, -3)  # the max timestamp: the broker's, not the producer's
    assert found.timestamp == resp.log_append_time_ms


def unstamped(values: list[bytes], first_ts: int) -> bytes:
    """A batch whose header says max_timestamp = -1 while its records carry real timestamps (CRC correct)."""
    data = bytearray(build_batch([(None, v, [], first_ts + i) for i, v in enumerate(values)]))
    struct.pack_into(">q", data, 35, -1)
    return recrc(data)


def stored_headers(server, topic: str) -> list:
    path = partition_dirs(server.log_dirs)[f"{topic}-0"]
    out = []
    for log in sorted(path.glob("*.log")):
        data = log.read_bytes()
        out += [(h, crc_matches(data, pos, h)) for pos, h in iter_batches(data)]
    return out


def test_max_timestamp_minus_one_is_recomputed_for_lookups(raw, server):
    new_topic(raw, "unstamped")
    t0 = now_ms() - 2 * HOUR_MS
    assert produce(raw, "unstamped", 0, unstamped([b"a", b"b", b"c"], t0)).error_code == 0
    [(header, crc_ok)] = stored_headers(server, "unstamped")
    assert header.max_timestamp == t0 + 2 and crc_ok
    found = list_offset(raw, "unstamped", 0, t0 + 1)
    assert (found.error_code, found.offset, found.timestamp) == (0, 1, t0 + 1)
    assert list_offset(raw, "unstamped", 0, -3).timestamp == t0 + 2
