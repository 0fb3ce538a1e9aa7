"""The log cleaner in process: the offset map, the rewrite of segments (keys kept, tombstones and their delete
horizon, empty batches kept for idempotent producers, compressed batches, offsets and timestamps preserved, valid
indexes), the bounded map, crash images taken at each step of the swap, and the produce-side rules of compacted
topics. Stored bytes are decoded by kafka-python (CRC checked), a second implementation."""

from __future__ import annotations

import os
import shutil
import warnings

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords

from kjbod.storage import cleaner as cleaner_module
from kjbod.storage import fsio
from kjbod.storage.cleaner import (
    DELETE_HORIZON_MASK,
    Cleaner,
    CleanerConfig,
    OffsetMap,
    group_segments,
    log_to_clean,
    should_clean,
)
from kjbod.storage.config import LogConfig
from kjbod.storage.errors import InvalidRecordError
from kjbod.storage.log import PartitionLog
from kjbod.storage.records import crc_matches, iter_all_records, iter_batches, parse_header
from tests.storage.conftest import T0, region_bytes

TOPIC_ID = "3uI2M2AbQVO0J2cYw2xvOA"
COMPACT = LogConfig(segment_bytes=600, index_interval_bytes=64, segment_index_bytes=4096, cleanup_policy="compact",
                    min_cleanable_dirty_ratio=0.01, delete_retention_ms=1000)


def keyed(pairs: list[tuple[bytes | None, bytes | None]], *, ts: int = T0, compression: int = 0,
          producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=False,
                                  producer_id=producer_id, producer_epoch=producer_epoch,
                                  base_sequence=base_sequence, batch_size=1 << 24)
    for i, (k, v) in enumerate(pairs):
        b.append(i, timestamp=ts + i, key=k, value=v, headers=[])
    return bytes(b.build())


def all_records(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None, int]]:
    """(offset, key, value, timestamp) of every record the log serves from its start, CRCs checked."""
    data = region_bytes(plog.read(plog.log_start_offset, 1 << 24))
    out = []
    mr = MemoryRecords(data)
    while (batch := mr.next_batch()) is not None:
        assert batch.validate_crc()
        out.extend((r.offset, r.key, r.value, r.timestamp) for r in batch)
    return out


def latest_per_key(records):
    last = {}
    for off, k, v, ts in records:
        last[k] = (off, k, v, ts)
    return last


@pytest.fixture
def io(tmp_path):
    io = fsio.LogDirIO(str(tmp_path / "d"))
    io.mkdir(io.path, parents=True)
    return io


@pytest.fixture
def make_log(io, clock):
    made = []

    def make(cfg: LogConfig = COMPACT) -> PartitionLog:
        plog = PartitionLog.create(io, io.join("t-0"), "t", 0, TOPIC_ID, cfg, clock=clock)
        made.append(plog)
        return plog

    yield make
    for plog in made:
        plog.close_quietly()


def clean_once(plog: PartitionLog, clock, capacity: int = 1 << 16) -> int | None:
    ltc, _ = log_to_clean(plog, plog.cleaner_offset, clock())
    if not should_clean(ltc):
        return None
    cl = Cleaner(CleanerConfig(), clock)
    cl.map = OffsetMap(capacity)
    with plog.clean_lock:
        offset, _ = cl.clean(ltc)
    plog.cleaner_offset = offset
    return offset


def write_updates(plog: PartitionLog, keys: int, rounds: int, **kw) -> list:
    written = []
    for r in range(rounds):
        for k in range(keys):
            key, value = b"key-%d" % k, b"value-%d-%d" % (k, r)
            info = plog.append(keyed([(key, value)], ts=T0 + r * 100 + k, **kw))
            written.append((info.base_offset, key, value, T0 + r * 100 + k))
    return written


def reload(plog: PartitionLog, io, clock, *, clean: bool = False, path: str | None = None) -> PartitionLog:
    plog.close() if clean else plog.close_quietly()
    return PartitionLog.load(io, path or plog.dir, "t", 0, plog.config, had_clean_shutdown=clean, clock=clock)


# ---------------------------------------------------------------------------------------------- the map


def test_offset_map_keeps_the_last_offset_and_is_bounded_by_its_capacity_in_kafkas_units():
    m = OffsetMap(3)
    m.put(b"a", 1)
    m.put(b"a", 7)
    m.put(b"b", 2)
    assert (m.get(b"a"), m.get(b"b"), m.get(b"c"), len(m)) == (7, 2, -1, 2)
    assert CleanerConfig(dedupe_buffer_size=24 * 1000, threads=1).map_capacity == 900  # 24 B a key, 0.9 full
    assert CleanerConfig(dedupe_buffer_size=24 * 1000, threads=2).map_capacity == 450


# ---------------------------------------------------------------------------------------------- the rewrite


def test_clean_keeps_the_latest_record_of_each_key_with_its_offset_and_timestamp(make_log, clock, io):
    plog = make_log()
    written = write_updates(plog, keys=4, rounds=30)
    before_segments = len(plog.segments)
    assert before_segments > 5
    size_before = plog.size_bytes
    active_base = plog.active_segment.base_offset
    assert clean_once(plog, clock) == active_base  # everything up to the active segment mapped
    got = all_records(plog)
    expected_latest = latest_per_key(written)
    # Below the active segment only each key's latest record (as of the cleaned range) remains; the active
    # segment is untouched.
    cleaned = [r for r in got if r[0] < active_base]
    active = [r for r in got if r[0] >= active_base]
    assert active == [r for r in written if r[0] >= active_base]
    # The map covers the cleaned range only (Kafka's): a key's latest record there stays even when the active
    # segment holds a newer one.
    assert cleaned == sorted(latest_per_key([r for r in written if r[0] < active_base]).values())
    assert latest_per_key(got) == expected_latest  # a consumer from the start sees every key's latest value
    assert plog.size_bytes < size_before
    # The emptied segments are grouped into one at the next clean (groups are sized by segment.bytes).
    assert plog.log_end_offset == written[-1][0] + 1
    written += write_updates(plog, keys=4, rounds=3)
    plog.roll()
    clean_once(plog, clock)
    assert len(plog.segments) < before_segments / 2
    got = all_records(plog)
    assert latest_per_key(got) == latest_per_key(written)
    # Every remaining record is readable at its own offset (the rebuilt indexes find it) ...
    for off, k, v, _ts in got:
        assert all_records_from(plog, off)[0][:3] == (off, k, v)
    # ... and the files pass crash recovery (CRCs, records, offsets, indexes rebuilt).
    again = reload(plog, io, clock)
    assert all_records(again) == got
    assert again.load_stats.truncated_bytes == 0
    again.close_quietly()


def all_records_from(plog: PartitionLog, offset: int):
    data = region_bytes(plog.read(offset, 1 << 20))
    mr = MemoryRecords(data)
    out = []
    while (batch := mr.next_batch()) is not None:
        out.extend((r.offset, r.key, r.value, r.timestamp) for r in batch if r.offset >= offset)
    return out


def test_a_batch_keeps_its_base_offset_last_offset_and_producer_fields_when_records_go(make_log, clock):
    plog = make_log()
    first = plog.append(keyed([(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], producer_id=9, producer_epoch=2,
                              base_sequence=0))
    plog.append(keyed([(b"a", b"2"), (b"c", b"2")]))
    plog.roll()
    plog.append(keyed([(b"z", b"z")]))
    clean_once(plog, clock)
    data = region_bytes(plog.read(0, 1 << 20))
    headers = [h for _, h in iter_batches(data)]
    h = headers[0]
    assert (h.base_offset, h.last_offset_delta, h.records_count) == (first.base_offset, 2, 1)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (9, 2, 0)
    assert [(o, k, v) for o, k, v, _ in all_records(plog)] == [(1, b"b", b"1"), (3, b"a", b"2"), (4, b"c", b"2"),
                                                              (5, b"z", b"z")]
    assert all_records(plog)[0][3] == T0 + 1  # b's own timestamp, re-based


@pytest.mark.parametrize("codec", [1, 3, 4], ids=["gzip", "lz4", "zstd"])
def test_a_compressed_batch_is_rebuilt_with_its_codec(make_log, clock, codec):
    plog = make_log()
    plog.append(keyed([(b"k%d" % i, b"old" * 20) for i in range(10)], compression=codec))
    plog.append(keyed([(b"k%d" % i, b"new" * 20) for i in range(0, 10, 2)], compression=codec))
    plog.roll()
    plog.append(keyed([(b"z", b"z")]))
    clean_once(plog, clock)
    data = region_bytes(plog.read(0, 1 << 20))
    headers = [h for _, h in iter_batches(data)]
    assert headers[0].compression == codec
    assert headers[0].records_count == 5 and headers[0].last_offset_delta == 9
    assert [(o, k) for o, k, _, _ in all_records(plog)][:5] == [(i, b"k%d" % i) for i in range(1, 10, 2)]


def test_a_snappy_batch_is_recompressed_with_snappy(make_log, clock):
    plog = make_log()
    from kjbod.storage.records import CODEC_SNAPPY, build_batch

    plog.append(build_batch([(b"a", b"1", [], T0), (b"b", b"1", [], T0)], compression=CODEC_SNAPPY))
    plog.append(keyed([(b"a", b"2")]))
    plog.roll()
    plog.append(keyed([(b"z", b"z")]))
    clean_once(plog, clock)
    data = region_bytes(plog.read(0, 1 << 20))
    first = next(iter_batches(data))[1]
    assert first.compression == CODEC_SNAPPY and first.records_count == 1
    assert all(crc_matches(data, pos, h) for pos, h in iter_batches(data))  # kafka-python has no snappy here
    assert [(r.offset, r.key, r.value) for r in iter_all_records(data)] == [(1, b"b", b"1"), (2, b"a", b"2"),
                                                                             (3, b"z", b"z")]


def test_records_without_a_key_are_dropped_by_the_cleaner(make_log, clock):
    plog = make_log(LogConfig(cleanup_policy="delete", min_cleanable_dirty_ratio=0.01))
    plog.append(keyed([(None, b"nokey"), (b"a", b"1")]))
    plog.roll()
    plog.append(keyed([(b"z", b"z")]))
    plog.config = COMPACT  # the topic became compacted after these records were written
    clean_once(plog, clock)
    assert [(o, k, v) for o, k, v, _ in all_records(plog)] == [(1, b"a", b"1"), (2, b"z", b"z")]


def test_tombstones_get_a_delete_horizon_then_go_after_delete_retention_ms(make_log, clock):
    plog = make_log()
    plog.append(keyed([(b"a", b"1"), (b"b", b"1")]))
    plog.append(keyed([(b"a", None)]))
    plog.roll()
    plog.append(keyed([(b"z", b"1")]))
    clean_once(plog, clock)
    got = all_records(plog)
    assert [(o, k, v) for o, k, v, _ in got] == [(1, b"b", b"1"), (2, b"a", None), (3, b"z", b"1")]
    data = region_bytes(plog.read(2, 1 << 20))
    tomb = next(iter_batches(data))[1]
    assert tomb.attributes & DELETE_HORIZON_MASK and tomb.base_timestamp == clock() + 1000
    assert got[1][3] == T0  # the tombstone's own timestamp survives the re-basing
    # Before the horizon a second clean keeps it; after it, the tombstone goes.
    plog.append(keyed([(b"z", b"2")]))
    plog.roll()
    plog.append(keyed([(b"y", b"1")]))
    clean_once(plog, clock)
    assert (2, b"a", None) in [(o, k, v) for o, k, v, _ in all_records(plog)]
    clock.advance(1001)
    plog.append(keyed([(b"y", b"2")]))
    plog.roll()
    plog.append(keyed([(b"x", b"1")]))
    clean_once(plog, clock)
    assert b"a" not in [k for _, k, _, _ in all_records(plog)]


def test_an_idempotent_producers_last_batch_stays_as_an_empty_batch(make_log, clock, io):
    plog = make_log()
    plog.append(keyed([(b"a", b"1")], producer_id=5, producer_epoch=0, base_sequence=0))
    last = plog.append(keyed([(b"a", b"2"), (b"b", b"2")], producer_id=5, producer_epoch=0, base_sequence=1))
    plog.append(keyed([(b"a", b"3"), (b"b", b"3")]))  # a plain producer overwrites both keys
    plog.roll()
    plog.append(keyed([(b"z", b"z")]))
    clean_once(plog, clock)
    data = region_bytes(plog.read(0, 1 << 20))
    headers = [h for _, h in iter_batches(data)]
    empty = headers[0]
    assert (empty.base_offset, empty.last_offset, empty.records_count) == (last.base_offset, last.last_offset, 0)
    assert (empty.producer_id, empty.producer_epoch, empty.base_sequence) == (5, 0, 1)
    assert len(headers) == 3  # the first batch of producer 5 went entirely
    # After a restart the producer's sequence is known from the empty batch: its next batch is in order, and a
    # retry of its last one is a duplicate.
    again = reload(plog, io, clock)
    nxt = again.append(keyed([(b"c", b"1")], producer_id=5, producer_epoch=0, base_sequence=3))
    assert not nxt.duplicate
    again.close_quietly()


def test_the_map_bound_leaves_what_does_not_fit_for_the_next_round(make_log, clock):
    plog = make_log()
    written = write_updates(plog, keys=60, rounds=2)  # distinct keys fill the map (Kafka counts keys and spans)
    segs = plog.segments[:-1]
    span0 = segs[1].base_offset - segs[0].base_offset
    first = clean_once(plog, clock, capacity=span0 * 2)
    assert first is not None and first < plog.active_segment.base_offset
    while (nxt := clean_once(plog, clock, capacity=span0 * 2)) is not None and nxt < plog.active_segment.base_offset:
        pass
    assert plog.cleaner_offset == plog.active_segment.base_offset
    assert latest_per_key(all_records(plog)) == latest_per_key(written)


def test_grouping_respects_segment_bytes(make_log, clock):
    plog = make_log()
    write_updates(plog, keys=3, rounds=20)
    segs = plog.segments[:-1]
    groups = group_segments(segs, 1000, 4096, 64, plog.active_segment.base_offset)
    assert [s for g in groups for s in g] == segs
    assert all(sum(s.size for s in g) <= 1000 or len(g) == 1 for g in groups)


def test_only_logs_over_the_dirty_ratio_or_past_max_compaction_lag_are_cleaned(make_log, clock):
    plog = make_log(LogConfig(segment_bytes=600, cleanup_policy="compact", min_cleanable_dirty_ratio=0.99))
    write_updates(plog, keys=3, rounds=20)
    ltc, _ = log_to_clean(plog, None, clock())
    assert ltc.ratio == 1.0 and should_clean(ltc)  # nothing clean yet: all dirty
    clean_once(plog, clock)
    write_updates(plog, keys=3, rounds=1)
    ltc, _ = log_to_clean(plog, plog.cleaner_offset, clock())
    assert not should_clean(ltc)
    plog.config = plog.config.with_overrides(max_compaction_lag_ms=1000)
    ltc, _ = log_to_clean(plog, plog.cleaner_offset, clock() + 10_000)
    assert ltc.need_now == (ltc.cleanable_bytes > 0)


def test_min_compaction_lag_keeps_recent_segments_dirty(make_log, clock):
    plog = make_log(COMPACT.with_overrides(min_compaction_lag_ms=10_000))
    write_updates(plog, keys=3, rounds=20)  # timestamps T0 .. T0 + 1902
    ltc, _ = log_to_clean(plog, None, T0 + 5_000)
    assert ltc.first_uncleanable == plog.segments[0].base_offset  # all within the lag
    ltc, _ = log_to_clean(plog, None, T0 + 60_000)
    assert ltc.first_uncleanable == plog.active_segment.base_offset


# ---------------------------------------------------------------------------------------------- crash images


@pytest.mark.parametrize("point", cleaner_module.FAILPOINTS)
def test_a_crash_at_each_step_of_the_swap_loses_and_duplicates_nothing(make_log, clock, io, monkeypatch, point):
    plog = make_log()
    written = write_updates(plog, keys=4, rounds=30)
    image = io.join("crash-image")

    def snapshot(name: str) -> None:
        if name == point and not os.path.exists(image):
            shutil.copytree(plog.dir, image)  # the dir exactly as a kill -9 here would leave it

    monkeypatch.setattr(cleaner_module, "failpoint", snapshot)
    clean_once(plog, clock)
    names = os.listdir(image)
    assert any(n.endswith(".cleaned" if point == "cleaned_written" else ".swap") for n in names)
    after = PartitionLog.load(io, image, "t", 0, COMPACT, had_clean_shutdown=False, clock=clock)
    got = all_records(after)
    offsets = [r[0] for r in got]
    assert offsets == sorted(set(offsets))  # no offset twice
    assert latest_per_key(got) == latest_per_key(written)  # every key's latest value is there
    assert after.log_end_offset == plog.log_end_offset
    left = os.listdir(image)
    assert not [n for n in left if n.endswith((".cleaned", ".swap"))]
    after.close_quietly()


# ---------------------------------------------------------------------------------------------- produce rules


def test_a_compacted_topic_refuses_records_without_a_key_with_kafkas_message(make_log):
    plog = make_log()
    with pytest.raises(InvalidRecordError) as e:
        plog.append(keyed([(b"a", b"1"), (None, b"2"), (None, b"3")]))
    assert e.value.error_code == 87
    assert e.value.record_errors == [
        (i, "Compacted topic cannot accept message without key in topic partition t-0.") for i in (1, 2)]
    assert plog.log_end_offset == 0


def test_a_delete_topic_takes_records_without_a_key(make_log):
    plog = make_log(LogConfig())
    assert plog.append(keyed([(None, b"x")])).base_offset == 0


def test_compact_only_retention_keeps_old_segments(make_log, clock):
    plog = make_log(COMPACT.with_overrides(retention_ms=1))
    write_updates(plog, keys=2, rounds=10)
    clock.advance(10_000)
    assert plog.delete_old_segments() == 0
    plog.config = plog.config.with_overrides(cleanup_policy="compact,delete")
    assert plog.delete_old_segments() > 0


def test_cleanup_policy_values():
    assert LogConfig(cleanup_policy="delete, compact").cleanup_policy == "delete,compact"
    assert LogConfig(cleanup_policy="compact").compact and not LogConfig(cleanup_policy="compact").delete
    with pytest.raises(ValueError):
        LogConfig(cleanup_policy="shred")


def test_the_header_of_the_empty_batch_parses():
    from kjbod.storage.cleaner import empty_batch

    h = parse_header(keyed([(b"a", b"1"), (b"b", b"2")], producer_id=3, producer_epoch=1, base_sequence=4))
    raw = empty_batch(h)
    e = parse_header(raw)
    assert (e.records_count, e.last_offset_delta, e.base_timestamp, e.max_timestamp, e.length) == (
        0, 1, -1, h.max_timestamp, len(raw) - 12)


def test_log_append_time_batches_keep_their_time_and_the_time_index_finds_cleaned_records(make_log, clock):
    plog = make_log(COMPACT.with_overrides(message_timestamp_type="LogAppendTime"))
    plog.append(keyed([(b"a", b"1"), (b"b", b"1")], ts=T0 - 50_000))
    clock.advance(1000)
    plog.append(keyed([(b"a", b"2")]))
    plog.roll()
    clock.advance(1000)
    plog.append(keyed([(b"z", b"z")]))
    clean_once(plog, clock)
    got = all_records(plog)
    assert [(o, k, v, ts) for o, k, v, ts in got] == [(1, b"b", b"1", T0), (2, b"a", b"2", T0 + 1000),
                                                      (3, b"z", b"z", T0 + 2000)]
    data = region_bytes(plog.read(0, 1 << 20))
    assert next(iter_batches(data))[1].is_log_append_time
    # ListOffsets by time over the cleaned segment: the first record at or after each time.
    assert plog.offset_for_timestamp(T0)[0] == 1
    assert plog.offset_for_timestamp(T0 + 1)[0] == 2
    assert plog.offset_for_timestamp(T0 + 1500)[0] == 3


def test_a_follower_appends_a_compacted_leaders_batches_with_their_holes_and_empty_batches(make_log, clock, io):
    leader = make_log()
    leader.append(keyed([(b"key-0", b"1")], producer_id=5, producer_epoch=0, base_sequence=0))
    leader.append(keyed([(b"key-0", b"2"), (b"key-1", b"2")], producer_id=5, producer_epoch=0, base_sequence=1))
    leader.append(keyed([(b"key-0", b"3"), (b"key-9", b"3"), (b"key-1", b"3")]))  # a batch that keeps a hole
    write_updates(leader, keys=2, rounds=10)
    leader.roll()
    leader.append(keyed([(b"z", b"z")]))
    clean_once(leader, clock)
    data = leader.read_bytes(0, 1 << 24)
    headers = [h for _, h in iter_batches(data)]
    assert any(h.records_count == 0 for h in headers)  # producer 5's last batch, emptied
    assert any(0 < h.records_count < h.last_offset_delta + 1 for h in headers)  # key-9 kept, its neighbours not
    follower = PartitionLog.create(io, io.join("t-1"), "t", 1, TOPIC_ID, COMPACT, clock=clock)
    try:
        follower.append_as_follower(data)
        assert follower.log_end_offset == leader.log_end_offset
        assert all_records(follower) == all_records(leader)
        assert follower.producer_state.producers[5].last_seq == 2  # the empty batch carries the sequence
    finally:
        follower.close_quietly()


def test_a_client_batch_still_needs_a_record_per_offset():
    from kjbod.storage.records import validate_batches

    h = parse_header(keyed([(b"a", b"1"), (b"b", b"2")]))
    from kjbod.storage.cleaner import empty_batch

    raw = empty_batch(h)
    with pytest.raises(InvalidRecordError, match="record count 0"):
        validate_batches(raw, max_message_bytes=1 << 20)
    assert validate_batches(raw, max_message_bytes=1 << 20, from_client=False)[0][1].records_count == 0
