"""Conformance of one partition log: append, read, roll, indexes, timestamps, retention, producers, flush."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from kjbod.storage.config import LogConfig
from kjbod.storage.errors import (
    CorruptMessageError,
    InvalidProducerEpochError,
    InvalidRecordError,
    LogDirFullError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordListTooLargeError,
)
from kjbod.storage.fsio import LogDirIO
from kjbod.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, PartitionLog
from kjbod.storage.records import iter_batches, parse_header
from tests.storage.conftest import T0, kp_batch, kp_records, region_bytes


def fill(plog: PartitionLog, n: int, *, ts: int = T0, per_batch: int = 1, size: int = 20) -> None:
    for i in range(n):
        values = [(b"%06d" % (i * per_batch + j)).ljust(size, b".") for j in range(per_batch)]
        plog.append(kp_batch(values, timestamp=ts + i * 10))


def values_from(plog: PartitionLog, offset: int, max_bytes: int = 1 << 20, **kw) -> list[tuple[int, bytes]]:
    return [(o, v) for o, v, _ in kp_records(region_bytes(plog.read(offset, max_bytes, **kw)))]


# ---------------------------------------------------------------------------------------------- append


def test_append_assigns_offsets_and_stamps_epoch_keeping_the_crc_valid(plog):
    a = plog.append(kp_batch([b"a", b"b"]), leader_epoch=4)
    b = plog.append(kp_batch([b"c"]), leader_epoch=4)
    assert (a.base_offset, a.last_offset, a.record_count, a.log_append_time) == (0, 1, 2, -1)
    assert (b.base_offset, b.last_offset, b.log_start_offset) == (2, 2, 0)
    assert plog.log_end_offset == plog.high_watermark == 3
    data = region_bytes(plog.read(0, 1 << 20))
    headers = [h for _, h in iter_batches(data)]
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(0, 4), (2, 4)]
    assert kp_records(data) == [(0, b"a", T0), (1, b"b", T0 + 1), (2, b"c", T0)]


def test_bytes_are_stored_as_received_apart_from_offset_and_epoch(plog):
    raw = kp_batch([b"x" * 50] * 5, compression=1)
    plog.append(kp_batch([b"first"]))
    plog.append(raw, leader_epoch=2)
    stored = plog.read_bytes(1, 1 << 20)
    assert stored[16:] == raw[16:]  # everything after BaseOffset/Length/Epoch is untouched
    assert struct.unpack_from(">qii", stored) == (1, len(raw) - 12, 2)
    assert parse_header(stored).compression == 1


def test_several_batches_in_one_append(plog):
    info = plog.append(kp_batch([b"a"]) + kp_batch([b"b", b"c"]) + kp_batch([b"d"]))
    assert (info.base_offset, info.last_offset, info.record_count) == (0, 3, 4)
    assert [o for o, _ in values_from(plog, 0)] == [0, 1, 2, 3]


def test_append_validation_errors(plog):
    small = PartitionLog.create(plog.io, plog.io.join("small-0"), "small", 0, None, LogConfig(max_message_bytes=500))
    with pytest.raises(MessageTooLargeError):
        small.append(kp_batch([b"x" * 500]))
    small.close()
    big = PartitionLog.create(
        plog.io, plog.io.join("big-0"), "big", 0, None, LogConfig(segment_bytes=200, max_message_bytes=1 << 20)
    )
    with pytest.raises(RecordListTooLargeError) as e:
        big.append(kp_batch([b"x" * 300]))
    assert e.value.error_code == 18
    assert plog.log_end_offset == 0 and big.log_end_offset == 0
    big.close()


# ---------------------------------------------------------------------------------------------- read


def test_read_returns_whole_batches_from_the_one_containing_the_offset(plog):
    plog.append(kp_batch([b"a", b"b", b"c"]))
    plog.append(kp_batch([b"d"]))
    assert [o for o, _ in values_from(plog, 1)] == [0, 1, 2, 3]
    assert [o for o, _ in values_from(plog, 3)] == [3]
    result = plog.read(4, 100)
    assert result.regions == [] and result.log_end_offset == 4


def test_read_limits(plog):
    fill(plog, 10)
    size = len(kp_batch([b"000000".ljust(20, b".")]))
    assert len(values_from(plog, 0, max_bytes=3 * size)) == 3
    assert len(values_from(plog, 0, max_bytes=3 * size - 1)) == 2
    assert len(values_from(plog, 0, max_bytes=1)) == 1  # at least one batch
    assert plog.read(0, 1, min_one_batch=False).regions == []
    assert [o for o, _ in values_from(plog, 2, max_offset=5)] == [2, 3, 4]
    assert values_from(plog, 5, max_offset=5) == []


def test_read_out_of_range(plog):
    fill(plog, 3)
    for bad in (-1, 4):
        with pytest.raises(OffsetOutOfRangeError) as e:
            plog.read(bad, 100)
        assert e.value.error_code == 1
    assert plog.read(3, 100).regions == []


def test_read_spans_segments_and_every_offset_is_found(plog):
    fill(plog, 60)  # ~71 bytes per batch, 1024-byte segments -> several segments
    assert len(plog.segments) > 3
    for offset in range(60):
        got = values_from(plog, offset, max_bytes=200)
        assert got[0][0] == offset
        assert got[0][1].startswith(b"%06d" % offset)
    everything = values_from(plog, 0, max_bytes=1 << 20)
    assert [o for o, _ in everything] == list(range(60))


# ---------------------------------------------------------------------------------------------- segments, indexes


def test_roll_at_segment_bytes_names_and_trimmed_indexes(plog):
    fill(plog, 40)
    names = sorted(os.listdir(plog.dir))
    logs = [n for n in names if n.endswith(".log")]
    assert logs[0] == "00000000000000000000.log"
    assert all(len(n) == 24 and n[:20].isdigit() for n in logs)
    for seg in plog.segments:
        assert seg.size <= 1024
        assert os.path.getsize(seg.log_path) == seg.size
    closed = plog.segments[0]
    entries = closed.index.entries()
    assert entries, "a 1 KiB segment with a 100-byte interval has index entries"
    assert os.path.getsize(closed.index.path) == 8 * len(entries)  # trimmed on roll
    assert os.path.getsize(closed.time_index.path) == 12 * len(closed.time_index.entries())
    active = plog.active_segment
    assert os.path.getsize(active.index.path) == 4096  # preallocated (segment.index.bytes)
    assert plog.size_bytes == sum(os.path.getsize(s.log_path) for s in plog.segments)


def test_index_entries_point_at_batch_starts_and_lookup_is_exact(plog):
    fill(plog, 12)
    seg = plog.segments[0]
    raw = Path(seg.log_path).read_bytes()
    starts = {h.last_offset: p for p, h in iter_batches(raw)}
    with open(seg.index.path, "rb") as f:
        on_disk = [struct.unpack(">ii", f.read(8)) for _ in range(len(seg.index.entries()))]
    assert [(seg.base_offset + rel, pos) for rel, pos in on_disk] == seg.index.entries()
    for offset, pos in seg.index.entries():
        assert starts[offset] == pos
    for offset in range(seg.base_offset, plog.segments[1].base_offset):
        pos, header = seg.find_batch(offset)
        assert header.base_offset <= offset <= header.last_offset
        assert parse_header(raw, pos) == header


def test_roll_by_segment_ms_uses_first_batch_timestamp(tmp_path, clock):
    io = LogDirIO(str(tmp_path))
    log = PartitionLog.create(io, io.join("t-0"), "t", 0, None, LogConfig(segment_ms=1000), clock=clock)
    log.append(kp_batch([b"a"], timestamp=T0))
    log.append(kp_batch([b"b"], timestamp=T0 + 1000))
    assert len(log.segments) == 1
    log.append(kp_batch([b"c"], timestamp=T0 + 1001))
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_roll_when_the_index_is_full(tmp_path, clock):
    io = LogDirIO(str(tmp_path))
    cfg = LogConfig(index_interval_bytes=0, segment_index_bytes=8 * 3)
    log = PartitionLog.create(io, io.join("t-0"), "t", 0, None, cfg, clock=clock)
    for i in range(10):
        log.append(kp_batch([b"%d" % i]))
    assert len(log.segments) > 1
    assert all(len(s.index) <= 3 for s in log.segments)
    assert [o for o, _ in values_from(log, 0)] == list(range(10))
    log.close()


# ---------------------------------------------------------------------------------------------- timestamps


def test_offset_for_timestamp_through_the_time_index(plog):
    for i in range(30):
        plog.append(kp_batch([b"a" * 20, b"b" * 20], timestamp=T0 + 100 * i, step=10))
    assert len(plog.segments) > 1
    assert plog.offset_for_timestamp(T0 - 5) == (0, T0)
    assert plog.offset_for_timestamp(T0) == (0, T0)
    assert plog.offset_for_timestamp(T0 + 5) == (1, T0 + 10)
    assert plog.offset_for_timestamp(T0 + 11) == (2, T0 + 100)
    for i in range(30):
        assert plog.offset_for_timestamp(T0 + 100 * i + 1) == (2 * i + 1, T0 + 100 * i + 10)
    assert plog.offset_for_timestamp(T0 + 100 * 29 + 11) is None
    assert plog.offset_for_timestamp(EARLIEST_TIMESTAMP) == (0, -1)
    assert plog.offset_for_timestamp(LATEST_TIMESTAMP) == (60, -1)
    assert plog.offset_for_timestamp(MAX_TIMESTAMP) == (59, T0 + 2910)
    for seg in plog.segments:
        ts = [t for t, _ in seg.time_index.entries()]
        assert ts == sorted(set(ts))


def test_max_timestamp_is_the_first_record_holding_it(plog):
    plog.append(kp_batch([b"a", b"b"], timestamp=T0 + 50, step=-50))  # 50, 0
    plog.append(kp_batch([b"c", b"d", b"e"], timestamp=T0 + 10, step=20))  # 10, 30, 50
    assert plog.offset_for_timestamp(MAX_TIMESTAMP) == (0, T0 + 50)
    assert PartitionLog.create(plog.io, plog.io.join("e-0"), "e", 0, None, LogConfig()).max_timestamp_offset() is None


# ---------------------------------------------------------------------------------------------- retention


def test_retention_by_time_deletes_old_segments_via_deleted_suffix(plog, clock):
    for i in range(40):
        plog.append(kp_batch([b"x" * 20], timestamp=T0 + i * 1000))
    segs = list(plog.segments)
    assert len(segs) >= 3
    plog.config = plog.config.with_overrides(retention_ms=10_000, file_delete_delay_ms=500)
    newest_of_second = segs[1].max_timestamp
    deleted = plog.delete_old_segments(now_ms=newest_of_second + 10_001)
    assert deleted == 2
    assert plog.log_start_offset == segs[2].base_offset == plog.segments[0].base_offset
    assert os.path.exists(segs[0].log_path) and segs[0].log_path.endswith(".log.deleted")
    assert not os.path.exists(os.path.join(plog.dir, "00000000000000000000.log"))
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(0, 100)
    assert plog.deletions.run_due(clock.now + 499) == 0
    assert plog.deletions.run_due(clock.now + 500) == 2
    assert not any(n.endswith(".deleted") for n in os.listdir(plog.dir))


def test_retention_by_bytes(plog):
    fill(plog, 40)
    sizes = [s.size for s in plog.segments]
    plog.config = plog.config.with_overrides(retention_bytes=sum(sizes) - sizes[0])
    assert plog.delete_old_segments() == 1
    # Kafka deletes a segment only if the whole segment fits in the excess.
    plog.config = plog.config.with_overrides(retention_bytes=sum(sizes) - sizes[0] - sizes[1] + 1)
    assert plog.delete_old_segments() == 0
    plog.config = plog.config.with_overrides(retention_bytes=sum(sizes) - sizes[0] - sizes[1])
    assert plog.delete_old_segments() == 1
    assert plog.size_bytes == sum(sizes[2:])


def test_retention_of_everything_rolls_and_keeps_the_log_end(plog):
    fill(plog, 5)
    plog.config = plog.config.with_overrides(retention_ms=1)
    assert plog.delete_old_segments(now_ms=T0 + 10_000) == 1
    assert (plog.log_start_offset, plog.log_end_offset) == (5, 5)
    assert len(plog.segments) == 1 and plog.segments[0].base_offset == 5 and plog.segments[0].size == 0
    assert plog.append(kp_batch([b"new"])).base_offset == 5


def test_retention_never_passes_the_high_watermark(plog):
    fill(plog, 40)
    plog.auto_high_watermark = False
    plog.high_watermark = plog.segments[1].base_offset  # only segment 0 lies entirely below the HW
    plog.config = plog.config.with_overrides(retention_ms=1)
    assert plog.delete_old_segments(now_ms=T0 + 10**9) == 1
    assert plog.log_start_offset == plog.segments[0].base_offset <= plog.high_watermark


def test_advance_log_start_offset(plog):
    fill(plog, 40)
    second = plog.segments[1].base_offset
    plog.advance_log_start_offset(second + 1)
    assert plog.log_start_offset == second + 1
    assert plog.segments[0].base_offset == second  # the segment holding the new start stays
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(second, 10)
    assert values_from(plog, second + 1, max_bytes=1)[0][0] == second + 1
    with pytest.raises(OffsetOutOfRangeError):
        plog.advance_log_start_offset(plog.high_watermark + 1)


# ---------------------------------------------------------------------------------------------- producers


def idem(values, seq, *, pid=1000, epoch=0):
    return kp_batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_duplicate_batch_returns_the_original_offsets(plog):
    first = plog.append(idem([b"a", b"b"], 0))
    plog.append(idem([b"c"], 2))
    retry = plog.append(idem([b"a", b"b"], 0))
    assert retry.duplicate and (retry.base_offset, retry.last_offset) == (first.base_offset, first.last_offset)
    assert plog.log_end_offset == 3
    # Kafka (UnifiedLog.append) answers a duplicate with the stored batch's max timestamp as its log append
    # time, even on a CreateTime topic where a first append answers -1.
    assert first.log_append_time == -1 and retry.log_append_time == T0 + 1


def test_only_the_last_five_batches_are_remembered(plog):
    for i in range(6):
        plog.append(idem([b"x"], i))
    assert plog.append(idem([b"x"], 5)).duplicate
    assert plog.append(idem([b"x"], 1)).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        plog.append(idem([b"x"], 0))  # fell out of the window: now it is simply out of order


def test_sequence_gap_and_old_epoch(plog):
    plog.append(idem([b"a"], 0, epoch=1))
    with pytest.raises(OutOfOrderSequenceError) as e:
        plog.append(idem([b"b"], 2, epoch=1))
    assert e.value.error_code == 45
    with pytest.raises(InvalidProducerEpochError) as e:
        plog.append(idem([b"b"], 1, epoch=0))
    assert e.value.error_code == 47
    with pytest.raises(OutOfOrderSequenceError, match="new epoch"):
        plog.append(idem([b"b"], 5, epoch=2))
    assert plog.append(idem([b"b"], 0, epoch=2)).base_offset == 1
    assert plog.log_end_offset == 2


def test_unknown_producer_may_start_anywhere_and_wraps(plog):
    plog.append(idem([b"a", b"b"], 0x7FFFFFFE))
    plog.append(idem([b"c"], 0))
    assert plog.log_end_offset == 3


def test_a_failed_batch_in_a_multi_batch_append_writes_nothing(plog):
    with pytest.raises(OutOfOrderSequenceError):
        plog.append(idem([b"a"], 0) + idem([b"b"], 3))
    assert plog.log_end_offset == 0
    assert plog.append(idem([b"a"], 0) + idem([b"b"], 1)).last_offset == 1


# ---------------------------------------------------------------------------------------------- flush


def test_flush_messages_advances_the_recovery_point(tmp_path, clock):
    io = LogDirIO(str(tmp_path))
    log = PartitionLog.create(io, io.join("t-0"), "t", 0, None, LogConfig(flush_interval_messages=3), clock=clock)
    log.append(kp_batch([b"a", b"b"]))
    assert log.recovery_point == 0
    log.append(kp_batch([b"c"]))
    assert log.recovery_point == 3
    log.close()


def test_flush_ms_is_checked_by_flush_if_due(tmp_path, clock):
    io = LogDirIO(str(tmp_path))
    log = PartitionLog.create(io, io.join("t-0"), "t", 0, None, LogConfig(flush_interval_ms=1000), clock=clock)
    log.append(kp_batch([b"a"]))
    assert not log.flush_if_due(clock.now + 999)
    assert log.flush_if_due(clock.now + 1000) and log.recovery_point == 1
    log.close()


def test_default_config_never_fsyncs_on_append(plog):
    fill(plog, 5)
    assert plog.recovery_point == 0
    plog.flush()
    assert plog.recovery_point == 5


# ---------------------------------------------------------------------------------------------- follower / mover


def test_append_as_follower_keeps_offsets_and_truncate_to(plog):
    leader_io = LogDirIO(os.path.join(os.path.dirname(plog.io.path), "leader"))
    leader_io.mkdir(leader_io.path, parents=True)
    leader = PartitionLog.create(leader_io, leader_io.join("t-0"), "t", 0, None, plog.config)
    fill(leader, 30)
    copy = PartitionLog.create(plog.io, plog.io.join("copy-0"), "copy", 0, None, plog.config)
    offset = 0
    while offset < leader.log_end_offset:
        chunk = leader.read_bytes(offset, 300)
        copy.append_as_follower(chunk)
        offset = copy.log_end_offset
    assert copy.read_bytes(0, 1 << 20) == leader.read_bytes(0, 1 << 20)
    with pytest.raises(InvalidRecordError, match="out of order"):
        copy.append_as_follower(leader.read_bytes(0, 10))
    copy.truncate_to(17)
    assert copy.log_end_offset == 17
    assert [o for o, _ in values_from(copy, 0)] == list(range(17))
    files = copy.segment_files()
    assert files and all(os.path.getsize(f.path) == f.size for f in files)
    assert all(not f.path.startswith(copy.active_segment.log_path[:-4]) for f in files)
    leader.close()
    copy.close()


def test_close_trims_the_active_indexes_and_keeps_the_max_timestamp(plog):
    for i in range(8):
        plog.append(kp_batch([b"x" * 40], timestamp=T0 + 100 * i))
    active = plog.active_segment
    entries = len(active.index.entries())
    assert entries > 0 and os.path.getsize(active.index.path) == 4096
    plog.close()
    assert os.path.getsize(active.index.path) == 8 * entries
    last_ts = struct.unpack(">qi", Path(active.time_index.path).read_bytes()[-12:])
    assert last_ts == (T0 + 700, 7)  # the final entry Kafka writes on close
    assert sorted(n for n in os.listdir(plog.dir) if n.endswith(".snapshot")) == ["00000000000000000008.snapshot"]


def test_segment_scan_finds_every_batch_whatever_the_mix_of_sizes(tmp_path, clock):
    # The header scan reads small first and grows its reads while they hold several headers; a mix of tiny and
    # large batches must still yield every batch exactly once, from any starting batch.
    io = LogDirIO(str(tmp_path / "d"))
    io.mkdir(io.path, parents=True)
    cfg = LogConfig(index_interval_bytes=100_000)  # a sparse index: the scans do the work
    plog = PartitionLog.create(io, io.join("topic-0"), "topic", 0, "3uI2M2AbQVO0J2cYw2xvOA", cfg, clock=clock)
    sizes = [20, 20, 70_000, 20, 20, 20, 300_000, 5_000, 20, 20, 20, 20, 20, 150_000, 20]
    for i, size in enumerate(sizes):
        plog.append(kp_batch([(b"%03d" % i).ljust(size, b".")]))
    seg = plog.active_segment
    expected = [(pos, h.base_offset) for pos, h in iter_batches(seg.read_bytes(0, seg.size))]
    assert len(expected) == len(sizes)
    for k, (start, _) in enumerate(expected):
        assert [(p, h.base_offset) for p, h in seg.iter_headers(start)] == expected[k:]
    for offset in range(len(sizes)):
        assert values_from(plog, offset, 1)[0][0] == offset  # min one batch, found through the scan
    plog.close_quietly()


def test_validate_then_append_validated_is_append_and_a_refused_batch_touches_nothing(plog, clock):
    """The produce handler validates small appends on the event loop and hands only the write to the dir's
    worker: the two steps give what one append gives, and a bad batch is refused before any file is touched."""
    plog.append(kp_batch([b"a", b"b"]), leader_epoch=3)
    checked = plog.validate(kp_batch([b"c"]), now_ms=clock())
    info = plog.append_validated(checked, leader_epoch=3)
    assert (info.base_offset, info.last_offset, info.record_count) == (2, 2, 1)
    assert [v for _, v, _ in kp_records(plog.read_bytes(0, 1 << 20))] == [b"a", b"b", b"c"]
    corrupt = bytearray(kp_batch([b"d"]))
    corrupt[-1] ^= 0xFF  # the CRC no longer matches
    size = plog.size_bytes
    with pytest.raises(CorruptMessageError):
        plog.validate(bytes(corrupt), now_ms=clock())
    assert plog.size_bytes == size and plog.log_end_offset == 3


def _same_log(tmp_path: Path, clock) -> PartitionLog:
    io = LogDirIO(str(tmp_path / "reference"))
    io.mkdir(io.path, parents=True)
    cfg = LogConfig(segment_bytes=1024, index_interval_bytes=100, segment_index_bytes=4096)
    return PartitionLog.create(io, io.join("topic-0"), "topic", 0, "3uI2M2AbQVO0J2cYw2xvOA", cfg, clock=clock)


def _writes(plog: PartitionLog) -> int:
    return sum(plog.io.latency_buckets["write"])


def test_appends_validated_together_give_what_one_after_another_gives_in_one_write(plog, clock, tmp_path):
    """Group commit (a dir's worker appending the small batches several requests bring to one partition): the
    same offsets, bytes, indexes and answers as the appends one by one, with one write."""
    reference = _same_log(tmp_path, clock)
    try:
        values = [[b"a", b"b"], [b"c"], [b"d" * 40, b"e", b"f"], [b"g" * 90]]
        for log in (plog, reference):
            log.append(kp_batch([b"0"]), leader_epoch=2)
        one_by_one = [reference.append_validated(reference.validate(kp_batch(v), now_ms=clock()), leader_epoch=2)
                      for v in values]
        writes = _writes(plog)
        together = plog.append_validated_together([plog.validate(kp_batch(v), now_ms=clock()) for v in values],
                                                  leader_epoch=2)
        assert _writes(plog) == writes + 1
        assert together == one_by_one
        assert [(i.base_offset, i.last_offset) for i in together] == [(1, 2), (3, 3), (4, 6), (7, 7)]
        assert plog.log_end_offset == plog.high_watermark == reference.log_end_offset == 8
        for suffix in (".log", ".index", ".timeindex"):
            name = f"{0:020d}{suffix}"
            assert Path(plog.dir, name).read_bytes() == Path(reference.dir, name).read_bytes()
        assert values_from(plog, 0) == values_from(reference, 0)
    finally:
        reference.close_quietly()


def test_appends_together_roll_where_one_at_a_time_would(plog, clock):
    group = [plog.validate(kp_batch([b"%d" % i * 30]), now_ms=clock()) for i in range(3)]
    while plog.active_segment.size < 1024 - sum(len(g.view) for g in group[:2]):
        plog.append(kp_batch([b"f" * 20]))  # room left for the first of the group, not for all three
    first_segments, end = len(plog.segments), plog.log_end_offset
    infos = plog.append_validated_together(group, leader_epoch=0)
    assert infos is not None and [i.base_offset for i in infos] == [end, end + 1, end + 2]
    # the first in the old segment, then the roll, the other two in the new one
    assert len(plog.segments) == first_segments + 1 and plog.active_segment.base_offset == end + 1
    assert plog.active_segment.size == sum(len(g.view) for g in group[1:])
    assert [v for _, v in values_from(plog, end)] == [b"%d" % i * 30 for i in range(3)]


def test_idempotent_appends_together_each_checked_against_the_ones_before_it(plog, clock):
    """Group commit of idempotent producers: one write for the batches kept; a batch refused or answered as a
    duplicate inside the group leaves the others' offsets and answers as one at a time gives them."""
    def batch(pid: int, seq: int, *values: bytes, epoch: int = 0) -> bytes:
        return kp_batch(list(values), producer_id=pid, producer_epoch=epoch, base_sequence=seq)

    plog.append(batch(7, 0, b"a"))
    group = [batch(7, 1, b"b", b"c"), batch(8, 0, b"x"), batch(7, 5, b"gap"), batch(7, 1, b"b", b"c"),
             batch(7, 3, b"d"), batch(8, 0, b"y", epoch=1), batch(8, 1, b"old"), batch(9, 40, b"new")]
    writes = _writes(plog)
    outcomes = plog.append_validated_together([plog.validate(b, now_ms=clock()) for b in group], leader_epoch=0)
    assert _writes(plog) == writes + 1
    assert outcomes is not None
    answers = [type(o).__name__ if isinstance(o, Exception) else (o.base_offset, o.last_offset, o.duplicate)
               for o in outcomes]
    assert answers == [(1, 2, False), (3, 3, False), "OutOfOrderSequenceError", (1, 2, True), (4, 4, False),
                       (5, 5, False), "InvalidProducerEpochError", (6, 6, False)]
    assert [v for _, v in values_from(plog, 0)] == [b"a", b"b", b"c", b"x", b"d", b"y", b"new"]
    state = plog.producer_state.producers
    assert (state[7].epoch, state[7].last_seq, state[8].epoch, state[8].last_seq, state[9].last_seq) == (0, 3, 1, 0, 40)


def test_a_write_failing_after_a_roll_inside_a_group_keeps_what_was_written_before_it(plog, clock, monkeypatch):
    """The appends written before the roll are answered with their offsets; the failing write's appends and
    those after it get the error, as one at a time would answer them."""
    group = [plog.validate(kp_batch([b"%d" % i * 30]), now_ms=clock()) for i in range(3)]
    while plog.active_segment.size < 1024 - sum(len(g.view) for g in group[:2]):
        plog.append(kp_batch([b"f" * 20]))  # room for the first of the group before a roll
    end = plog.log_end_offset
    real = plog._write_placed
    writes: list[int] = []

    def write_once(*args, **kwargs):
        writes.append(1)
        if len(writes) > 1:
            raise LogDirFullError("no space for the second write")
        return real(*args, **kwargs)

    monkeypatch.setattr(plog, "_write_placed", write_once)
    outcomes = plog.append_validated_together(group, leader_epoch=0)
    assert outcomes is not None and len(writes) == 2
    assert outcomes[0].base_offset == end
    assert [type(o) for o in outcomes[1:]] == [LogDirFullError, LogDirFullError]
    assert plog.log_end_offset == end + 1
