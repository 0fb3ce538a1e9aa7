"""compression.type: a topic that names a codec stores every batch in it (Kafka's LogValidator rebuilds a batch
sent in another codec), and what kjbod compresses is framed as Kafka's own readers need it.

Records are decoded twice: by kjbod's reader and by kafka-python's (a second implementation, with its CRC
check), and the lz4 and snappy framing is checked against the rules of Kafka's Java readers.
"""

from __future__ import annotations

import struct
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import lz4.block
import pytest

from kjbod.storage import fsio, records
from kjbod.storage.config import LogConfig
from kjbod.storage.errors import MessageTooLargeError
from kjbod.storage.log import PartitionLog
from kjbod.storage.records import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    RECORD_BATCH_OVERHEAD,
    build_batch,
    crc_matches,
    iter_batches,
    iter_records,
    parse_header,
    validate_batches,
    validate_records,
)
from tests.storage.conftest import T0, region_bytes

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.memory_records import MemoryRecords

CODECS = {"uncompressed": CODEC_NONE, "gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY, "lz4": CODEC_LZ4,
          "zstd": CODEC_ZSTD}

SPECS = [
    (b"key-0", b"value " * 40, [("h", b"1")], T0),
    (None, b"", [], T0 + 5),
    (b"key-2", None, [("a", None), ("b", b"")], T0 + 2),  # a tombstone, headers with null and empty values
    (b"k" * 300, bytes(range(256)) * 30, [], T0 + 9),
]


def decoded(stored: bytes) -> list[tuple[bytes | None, bytes | None, list, int]]:
    return [(r.key, r.value, [(k, v) for k, v in r.headers], r.timestamp) for r in iter_records(stored)]


def kafka_python_values(stored: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    mr = MemoryRecords(stored)
    while (batch := mr.next_batch()) is not None:
        assert batch.validate_crc()
        out += [(r.offset, r.key, r.value) for r in batch]
    return out


@pytest.fixture
def plog_with(tmp_path, clock) -> Iterator[Callable[..., PartitionLog]]:
    """Standalone partition logs with the given LogConfig fields, closed at teardown."""
    made: list[PartitionLog] = []

    def make(**config: Any) -> PartitionLog:
        io = fsio.LogDirIO(str(tmp_path / "d"))
        io.mkdir(io.path, parents=True, exist_ok=True)
        made.append(PartitionLog.create(io, io.join(f"t-{len(made)}"), "t", len(made), "3uI2M2AbQVO0J2cYw2xvOA",
                                        LogConfig(**config), clock=clock))
        return made[-1]

    yield make
    for plog in made:
        plog.close_quietly()


def stored_bytes(plog: PartitionLog) -> bytes:
    return region_bytes(plog.read(0, 1 << 24))


@pytest.mark.parametrize("source", list(CODECS))
@pytest.mark.parametrize("target", list(CODECS))
def test_every_batch_is_stored_in_the_topics_codec_with_its_records_unchanged(plog_with, source, target) -> None:
    plog = plog_with(compression_type=target)
    sent = build_batch(SPECS, compression=CODECS[source], producer_id=7, producer_epoch=2, base_sequence=0)
    info = plog.append(sent, leader_epoch=3, now_ms=T0 + 10)
    assert (info.base_offset, info.last_offset) == (0, 3)
    stored = stored_bytes(plog)
    (pos, header), = iter_batches(stored)
    assert header.compression == CODECS[target]
    assert crc_matches(stored, pos, header)
    assert header.base_offset == 0 and header.last_offset_delta == 3 and header.records_count == 4
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 2, 0)
    assert header.partition_leader_epoch == 3
    assert header.base_timestamp == T0 and header.max_timestamp == T0 + 9
    assert decoded(stored) == [(k, v, h, ts) for k, v, h, ts in SPECS]
    if target != "snappy":  # kafka-python reads snappy only with python-snappy, which kjbod does not install
        assert kafka_python_values(stored) == [(i, k, v) for i, (k, v, _, _) in enumerate(SPECS)]
    if source == target:  # nothing rebuilt: the producer's bytes after the prefix the leader stamps
        assert stored[RECORD_BATCH_OVERHEAD:] == sent[RECORD_BATCH_OVERHEAD:]


def test_producer_keeps_each_producers_codec_and_bytes(plog_with) -> None:
    plog = plog_with(compression_type="producer")
    for codec in (CODEC_GZIP, CODEC_NONE, CODEC_ZSTD):
        plog.append(build_batch(SPECS[:2], compression=codec), now_ms=T0 + 10)
    assert [h.compression for _, h in iter_batches(stored_bytes(plog))] == [CODEC_GZIP, CODEC_NONE, CODEC_ZSTD]


def test_log_append_time_applies_to_a_rebuilt_batch(plog_with) -> None:
    plog = plog_with(compression_type="zstd", message_timestamp_type="LogAppendTime")
    info = plog.append(build_batch(SPECS, compression=CODEC_GZIP), now_ms=T0 + 1000)
    assert info.log_append_time == T0 + 1000
    stored = stored_bytes(plog)
    (pos, header), = iter_batches(stored)
    assert header.compression == CODEC_ZSTD and header.is_log_append_time
    assert header.max_timestamp == T0 + 1000 and crc_matches(stored, pos, header)
    assert {r.timestamp for r in iter_records(stored)} == {T0 + 1000}


def test_an_idempotent_retry_of_a_rebuilt_batch_is_answered_as_a_duplicate(plog_with) -> None:
    plog = plog_with(compression_type="lz4")
    batch = build_batch(SPECS, producer_id=11, producer_epoch=0, base_sequence=0)
    first = plog.append(batch, now_ms=T0 + 10)
    again = plog.append(batch, now_ms=T0 + 20)
    assert again.duplicate and (again.base_offset, again.last_offset) == (first.base_offset, first.last_offset)
    assert len(list(iter_batches(stored_bytes(plog)))) == 1


def test_a_batch_too_large_once_decompressed_is_refused_with_message_too_large(plog_with) -> None:
    plog = plog_with(compression_type="uncompressed", max_message_bytes=20_000)
    small = build_batch([(None, bytes(100_000), [], T0)], compression=CODEC_ZSTD)
    assert len(small) < 20_000
    with pytest.raises(MessageTooLargeError, match="compression.type=uncompressed"):
        plog.append(small, now_ms=T0)
    assert plog.log_end_offset == 0


def test_an_uncompressed_control_batch_is_not_rebuilt() -> None:
    control = build_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", [], T0)], is_control=True,
                          producer_id=5, producer_epoch=0, is_transactional=True)
    batches = validate_batches(control, max_message_bytes=1 << 20, from_client=False)
    (checked,) = validate_records(control, batches, now_ms=T0, target_codec=CODEC_ZSTD)
    assert checked.rebuilt is None and checked.header.compression == CODEC_NONE


def lz4_frame_blocks(frame: bytes) -> tuple[int, int, list[tuple[bool, bytes]]]:
    """(FLG, BD, [(stored uncompressed, block bytes)]) of an lz4 frame."""
    assert struct.unpack_from("<I", frame)[0] == 0x184D2204
    flg, bd = frame[4], frame[5]
    pos = 7 + (8 if flg & 0x08 else 0)
    blocks = []
    while True:
        (n,) = struct.unpack_from("<I", frame, pos)
        pos += 4
        if n == 0:
            return flg, bd, blocks
        size = n & 0x7FFFFFFF
        blocks.append((bool(n & 0x80000000), frame[pos : pos + size]))
        pos += size + (4 if flg & 0x10 else 0)


@pytest.mark.parametrize("level", [None, 1, 12])
def test_lz4_frames_are_what_kafkas_reader_takes(level) -> None:
    """Kafka's Lz4BlockInputStream refuses a frame whose blocks depend on each other (the lz4 library's
    default) and decompresses each block on its own into a buffer of the frame's block size."""
    data = bytes(range(256)) * 1500  # repetitive across blocks: linked blocks would reach back
    frame = records.compress(CODEC_LZ4, data, level)
    flg, bd, blocks = lz4_frame_blocks(frame)
    assert flg >> 6 == 1 and flg & 0x20 and not flg & 0x03  # version 1, independent blocks, reserved bits 0
    assert (bd >> 4) & 0x07 == 4  # 64 KiB blocks, Kafka's
    assert len(blocks) > 1
    out = b"".join(b if raw else lz4.block.decompress(b, uncompressed_size=64 << 10) for raw, b in blocks)
    assert out == data


def test_snappy_is_written_as_snappy_javas_stream() -> None:
    import cramjam
    data = (b"kafka " * 20_000)[:100_000]
    stream = records.compress(CODEC_SNAPPY, data)
    assert stream[:8] == b"\x82SNAPPY\x00" and struct.unpack_from(">ii", stream, 8) == (1, 1)
    pos, out, blocks = 16, b"", 0
    while pos < len(stream):
        (n,) = struct.unpack_from(">i", stream, pos)
        block = stream[pos + 4 : pos + 4 + n]
        out += bytes(cramjam.snappy.decompress_raw(block))
        assert records.snappy_block_python(block) == bytes(cramjam.snappy.decompress_raw(block))
        pos += 4 + n
        blocks += 1
    assert out == data and blocks == 4  # 32 KiB of input a block
    assert len(stream) < len(data) // 10  # compressed, not stored as literals
    assert records.snappy_decompress(stream) == data


def test_gzip_and_zstd_levels_change_the_output_and_not_the_records() -> None:
    data = bytes(range(256)) * 400 + b"tail" * 5000
    assert records.compress(CODEC_GZIP, data, 1) != records.compress(CODEC_GZIP, data, 9)
    assert records.compress(CODEC_ZSTD, data, -5) != records.compress(CODEC_ZSTD, data, 19)
    for codec, level in ((CODEC_GZIP, 1), (CODEC_GZIP, -1), (CODEC_ZSTD, -5), (CODEC_ZSTD, 19)):
        batch = build_batch([(None, data, [], T0)])
        (checked,) = validate_records(batch, validate_batches(batch, max_message_bytes=1 << 22), now_ms=T0,
                                      target_codec=codec, target_level=level)
        assert checked.rebuilt is not None
        assert [r.value for r in iter_records(checked.rebuilt)] == [data]
        assert parse_header(checked.rebuilt).compression == codec


@pytest.mark.parametrize("bad", [{"compression_type": "none"}, {"compression_gzip_level": 0},
                                 {"compression_lz4_level": 18}, {"compression_zstd_level": 23}])
def test_bad_compression_configs_are_refused(bad) -> None:
    with pytest.raises(ValueError, match="compression"):
        LogConfig(**bad)
