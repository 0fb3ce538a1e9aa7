"""The metadata log as a Kafka partition: framing, epochs, segments, torn tails, snapshots, migration.

Records are built here (TopicRecord, PartitionRecord, ...) and the log's files are read back byte by byte with
the storage layer's batch parser, so each test checks what is on disk, not only what `load` says.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest
import structlog

from kjbod.protocol.generated import ConfigRecord, PartitionRecord, RemoveTopicRecord, TopicRecord
from kjbod.protocol.generated.leader_change_message import LeaderChangeMessage
from kjbod.storage.errors import OffsetOutOfRangeError
from kjbod.storage.fsio import LogDirIO
from kjbod.storage.metadata_log import TOPIC_DIR, MetadataLog, MetadataLogError
from kjbod.storage.metadata_records import (
    LEADER_CHANGE,
    SNAPSHOT_FOOTER,
    SNAPSHOT_HEADER,
    control_type,
    decode_control,
    frame_record,
    records_batch,
    unframe_record,
)
from kjbod.storage.metadata_snapshot import SnapshotId, parse_snapshot, parse_snapshot_name
from kjbod.storage.records import crc_matches, iter_batches, iter_records

FIXTURE = Path(__file__).parent / "fixtures" / "metadata-log-v0.1.log"
T1 = uuid.UUID("5f9a3d2c-0c41-4a55-9a51-1b2b0c0d0e01")


def topic(name: str, partitions: int = 1) -> list:
    tid = uuid.uuid5(uuid.NAMESPACE_DNS, name)
    return [TopicRecord(name=name, topic_id=tid)] + [
        PartitionRecord(partition_id=p, topic_id=tid, replicas=[1], isr=[1], leader=1, leader_epoch=0,
                        partition_epoch=0) for p in range(partitions)]


def open_log(root: Path, **kw) -> tuple[MetadataLog, list]:
    mlog = MetadataLog(str(root), **kw)
    return mlog, mlog.load()


def part_dir(root: Path) -> Path:
    return root / TOPIC_DIR


def batches_on_disk(root: Path) -> list:
    """(header, records) of every batch of every segment, in offset order."""
    out = []
    for seg in sorted(part_dir(root).glob("*.log")):
        data = seg.read_bytes()
        for pos, h in iter_batches(data):
            assert crc_matches(data, pos, h)
            out.append((h, list(iter_records(data[pos:pos + h.size]))))
    return out


def test_records_come_back_in_order_framed_as_kafka_frames_them(tmp_path: Path) -> None:
    mlog, records = open_log(tmp_path, node_id=3)
    assert records == []
    first = mlog.append(topic("a", 2))
    second = mlog.append([RemoveTopicRecord(topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, "a"))])
    assert (first, second) == (1, 4)  # offset 0 is the LeaderChangeMessage
    assert mlog.next_offset == mlog.high_watermark == 5
    mlog.close()

    on_disk = batches_on_disk(tmp_path)
    lcm_header, lcm_records = on_disk[0]
    assert lcm_header.is_control and lcm_header.partition_leader_epoch == 1 and lcm_header.base_offset == 0
    assert control_type(lcm_records[0].key) == LEADER_CHANGE
    lcm = decode_control(LEADER_CHANGE, lcm_records[0].value)
    assert isinstance(lcm, LeaderChangeMessage)
    assert lcm.leader_id == 3 and [v.voter_id for v in lcm.voters] == [3]
    h, recs = on_disk[1]
    assert not h.is_control and h.partition_leader_epoch == 1 and h.base_offset == 1 and h.records_count == 3
    assert all(r.key is None for r in recs)
    # frame version 1, api key 2 (TopicRecord), record version, then the body
    assert recs[0].value[:3] == bytes([1, 2, TopicRecord.MAX_VERSION])
    assert [unframe_record(r.value) for r in recs] == topic("a", 2)

    again, records = open_log(tmp_path, node_id=3)
    assert records == topic("a", 2) + [RemoveTopicRecord(topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, "a"))]
    assert again.loaded_offsets == [1, 2, 3, 4]
    assert again.epoch == 2  # each start of a controller is a new epoch, opened by a LeaderChangeMessage
    assert again.append(topic("b")) == 6
    again.close()
    headers = [h for h, _ in batches_on_disk(tmp_path)]
    assert [(h.base_offset, h.partition_leader_epoch, h.is_control) for h in headers] == [
        (0, 1, True), (1, 1, False), (4, 1, False), (5, 2, True), (6, 2, False)]
    names = sorted(os.listdir(part_dir(tmp_path)))
    assert {"00000000000000000000.log", "00000000000000000000.index", "00000000000000000000.timeindex"} <= set(names)
    assert (part_dir(tmp_path) / "partition.metadata").read_text() == "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ"


def test_read_serves_whole_committed_batches(tmp_path: Path) -> None:
    mlog, _ = open_log(tmp_path)
    for i in range(5):
        mlog.append(topic(f"t{i}"))
    data = mlog.read(3, 1)  # at least the batch holding offset 3
    got = [h.base_offset for _, h in iter_batches(data)]
    assert got == [3]
    everything = mlog.read(0, 1 << 20)
    assert [h.base_offset for _, h in iter_batches(everything)] == [0, 1, 3, 5, 7, 9]
    assert mlog.read(mlog.next_offset, 1 << 20) == b""
    with pytest.raises(OffsetOutOfRangeError):
        mlog.read(mlog.next_offset + 1, 100)
    mlog.close()


def test_commit_listeners_hear_the_new_high_watermark(tmp_path: Path) -> None:
    mlog, _ = open_log(tmp_path)
    heard: list[int] = []
    mlog.add_commit_listener(heard.append)
    mlog.append(topic("x"))
    mlog.append(topic("y"))
    mlog.remove_commit_listener(heard.append)
    mlog.append(topic("z"))
    assert heard == [3, 5]
    mlog.close()


def test_segments_roll_at_the_configured_size_and_all_load(tmp_path: Path) -> None:
    mlog, _ = open_log(tmp_path, segment_bytes=600)
    written = []
    for i in range(12):
        recs = topic(f"topic-{i}", 2)
        mlog.append(recs)
        written += recs
    mlog.close()
    logs = sorted(part_dir(tmp_path).glob("*.log"))
    assert len(logs) > 3
    assert all(p.stat().st_size <= 600 for p in logs)
    for p in logs:
        assert p.with_suffix(".index").exists() and p.with_suffix(".timeindex").exists()
    _, records = open_log(tmp_path, segment_bytes=600)
    assert records == written


def test_a_torn_tail_is_copied_aside_and_truncated(tmp_path: Path) -> None:
    mlog, _ = open_log(tmp_path)
    mlog.append(topic("kept"))
    mlog.append(topic("torn", 3))
    mlog.close()
    seg = part_dir(tmp_path) / "00000000000000000000.log"
    data = seg.read_bytes()
    seg.write_bytes(data[:-7])  # the last batch loses its end, as in a crash mid-write
    last_pos = [p for p, _ in iter_batches(data)][-1]

    again, records = open_log(tmp_path)
    assert records == topic("kept")
    assert again.next_offset == 4  # LCM 0, kept 1-2, the new epoch's LCM at 3
    again.close()
    aside = [p for p in part_dir(tmp_path).iterdir() if p.name.endswith(".corrupt")]
    assert len(aside) == 1 and aside[0].name.startswith(f"00000000000000000000.log.{last_pos}-")
    assert aside[0].read_bytes() == data[last_pos:-7]


def test_a_bad_crc_mid_file_ends_the_log_there(tmp_path: Path) -> None:
    mlog, _ = open_log(tmp_path)
    for name in ("one", "two", "three", "four"):
        mlog.append(topic(name))
    mlog.close()
    seg = part_dir(tmp_path) / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    positions = [p for p, _ in iter_batches(data)]
    data[positions[2] + 70] ^= 0xFF  # a byte inside the records of batch "two"
    seg.write_bytes(bytes(data))
    _, records = open_log(tmp_path)
    assert records == topic("one")
    aside = [p for p in part_dir(tmp_path).iterdir() if p.name.endswith(".corrupt")]
    assert len(aside) == 1 and aside[0].read_bytes() == bytes(data[positions[2]:])


def test_with_no_room_to_copy_the_tail_is_truncated_in_place(tmp_path: Path, monkeypatch) -> None:
    mlog, _ = open_log(tmp_path)
    mlog.append(topic("kept"))
    mlog.append(topic("lost"))
    mlog.close()
    seg = part_dir(tmp_path) / "00000000000000000000.log"
    data = seg.read_bytes()
    seg.write_bytes(data[:-3])
    monkeypatch.setattr(LogDirIO, "statvfs", lambda self: (1 << 30, 0))
    with structlog.testing.capture_logs() as logs:
        _, records = open_log(tmp_path)
    assert records == topic("kept")
    assert not [p for p in part_dir(tmp_path).iterdir() if p.name.endswith(".corrupt")]
    event = next(e for e in logs if e["event"] == "metadata_log_tail_truncated_in_place")
    last_pos = [p for p, _ in iter_batches(data)][-1]
    assert (event["dropped_from_byte"], event["dropped_to_byte"]) == (last_pos, len(data) - 3)


def test_an_unknown_record_type_stops_the_load_with_one_line(tmp_path: Path) -> None:
    mlog, _ = open_log(tmp_path)
    mlog.append(topic("fine"))
    unknown = bytes([1, 120, 0]) + b"\x00"  # frame 1, api key 120, version 0, an empty body
    mlog.log.append_as_follower(records_batch([unknown], base_offset=mlog.next_offset, epoch=1, timestamp_ms=1))
    mlog.close()
    with pytest.raises(MetadataLogError, match=r"record at offset 3 has unknown type 120"):
        MetadataLog(str(tmp_path)).load()


# ---------------------------------------------------------------------------------------------------------------
# Snapshots


def test_a_snapshot_is_kafkas_layout_and_bounds_the_replay(tmp_path: Path) -> None:
    mlog, _ = open_log(tmp_path)
    mlog.append(topic("a"))
    mlog.append(topic("b"))
    image = topic("a") + topic("b")
    path = mlog.write_snapshot(image, mlog.high_watermark)
    assert os.path.basename(path) == "00000000000000000005-0000000001.checkpoint"
    assert mlog.latest_snapshot() == SnapshotId(5, 1)
    data = Path(path).read_bytes()
    batches = list(iter_batches(data))
    first, last = batches[0][1], batches[-1][1]
    assert first.is_control and first.base_offset == 0 and first.partition_leader_epoch == 1
    header_rec = next(iter_records(data[:first.size]))
    assert control_type(header_rec.key) == SNAPSHOT_HEADER
    footer_rec = next(iter_records(data[batches[-1][0]:]))
    assert last.is_control and control_type(footer_rec.key) == SNAPSHOT_FOOTER
    assert parse_snapshot(data) == image
    mlog.append(topic("c"))
    mlog.close()

    again, records = open_log(tmp_path)
    assert records == image + topic("c")
    assert again.loaded_offsets == [4, 4, 4, 4, 5, 6]  # snapshot records at its last offset, then the log's
    assert again.latest_snapshot() == SnapshotId(5, 1)
    again.close()


def test_a_snapshot_with_a_bad_crc_is_refused_and_the_previous_one_used(tmp_path: Path) -> None:
    mlog, _ = open_log(tmp_path)
    mlog.append(topic("a"))
    mlog.write_snapshot(topic("a"), mlog.high_watermark)
    mlog.append(topic("b"))
    newest = mlog.write_snapshot(topic("a") + topic("b"), mlog.high_watermark)
    mlog.append(topic("c"))
    mlog.close()
    raw = bytearray(Path(newest).read_bytes())
    raw[100] ^= 0x55
    Path(newest).write_bytes(bytes(raw))
    with structlog.testing.capture_logs() as logs:
        again, records = open_log(tmp_path)
    assert records == topic("a") + topic("b") + topic("c")
    assert again.latest_snapshot() == SnapshotId(3, 1)
    refused = next(e for e in logs if e["event"] == "metadata_snapshot_refused")
    assert "CRC" in refused["error"] and refused["path"] == newest
    assert not Path(newest).exists() and Path(refused["moved_to"]).exists()
    again.close()


def test_a_truncated_snapshot_is_refused(tmp_path: Path) -> None:
    mlog, _ = open_log(tmp_path)
    mlog.append(topic("a"))
    path = mlog.write_snapshot(topic("a"), mlog.high_watermark)
    mlog.close()
    data = Path(path).read_bytes()
    footer_pos = [p for p, _ in iter_batches(data)][-1]
    Path(path).write_bytes(data[:footer_pos])  # every batch whole, but no footer
    with structlog.testing.capture_logs() as logs:
        again, records = open_log(tmp_path)
    assert records == topic("a")  # from the log, which still holds everything
    assert "no SnapshotFooter" in next(e for e in logs if e["event"] == "metadata_snapshot_refused")["error"]
    assert again.latest_snapshot() is None
    again.close()


def snapshot_ids(root: Path) -> list:
    return sorted(parse_snapshot_name(n) for n in os.listdir(part_dir(root)) if n.endswith(".checkpoint"))


def three_rounds(mlog: MetadataLog, clock: list[int] | None = None, gaps: tuple[int, ...] = (0, 0, 0)) -> list:
    """Three rounds of four topics, a snapshot after each (the fake clock moved by `gaps` before each round)."""
    image: list = []
    for round_, gap in enumerate(gaps):
        if clock is not None:
            clock[0] += gap
        for i in range(4):
            recs = topic(f"r{round_}-{i}")
            mlog.append(recs)
            image += recs
        mlog.write_snapshot(image, mlog.high_watermark)
    return image


def test_snapshots_within_the_retention_limits_are_all_kept(tmp_path: Path) -> None:
    mlog, _ = open_log(tmp_path, segment_bytes=400)  # Kafka's defaults: 100 MiB, 7 days
    three_rounds(mlog)
    assert len(snapshot_ids(tmp_path)) == 3 and mlog.log_start_offset == 0
    mlog.close()


def test_old_snapshots_and_segments_wholly_before_them_go_past_the_retention_bytes(tmp_path: Path) -> None:
    mlog, _ = open_log(tmp_path, segment_bytes=400, retention_bytes=0)
    with structlog.testing.capture_logs() as logs:
        image = three_rounds(mlog)
    (newest,) = snapshot_ids(tmp_path)  # every one over the limit goes, never the newest
    assert [e["reason"] for e in logs if e["event"] == "metadata_snapshot_deleted"] == [
        "metadata.max.retention.bytes"] * 2
    segment_bases = sorted(int(p.name[:20]) for p in part_dir(tmp_path).glob("*.log"))
    assert segment_bases[0] <= newest.end_offset
    assert mlog.log_start_offset == segment_bases[0] > 0
    mlog.append(topic("tail"))
    mlog.close()
    _, records = open_log(tmp_path, segment_bytes=400)
    assert records == image + topic("tail")

    # A limit the log and two snapshots fit under keeps two of the three.
    other = tmp_path / "other"
    mlog, _ = open_log(other, segment_bytes=400, retention_bytes=-1)
    three_rounds(mlog)
    sizes = sum(p.stat().st_size for p in part_dir(other).glob("*.checkpoint"))
    mlog.retention_bytes = mlog.log.size_bytes + sizes - 1  # one byte over: the oldest goes
    mlog.append(topic("more"))
    mlog.write_snapshot(image + topic("more"), mlog.high_watermark)
    assert len(snapshot_ids(other)) == 3  # four, less the oldest
    mlog.close()


def test_snapshots_older_than_the_retention_ms_go(tmp_path: Path) -> None:
    clock = [1_000_000]
    mlog, _ = open_log(tmp_path, segment_bytes=400, retention_bytes=-1, retention_ms=1000, clock=lambda: clock[0])
    image = three_rounds(mlog, clock, gaps=(0, 4500, 500))  # last records at t0, t0+4500, t0+5000
    ids = snapshot_ids(tmp_path)
    assert len(ids) == 2  # the first is 5000 ms older than now; the second only 500
    clock[0] += 10_000
    mlog.append(topic("late"))
    mlog.write_snapshot(image + topic("late"), mlog.high_watermark)
    assert snapshot_ids(tmp_path) == [mlog.latest_snapshot()]  # the newest is kept whatever its age
    mlog.close()
    _, records = open_log(tmp_path, segment_bytes=400)
    assert records == image + topic("late")


def test_write_snapshot_refuses_an_end_offset_beyond_the_committed_log(tmp_path: Path) -> None:
    mlog, _ = open_log(tmp_path)
    mlog.append(topic("a"))
    with pytest.raises(ValueError, match="outside the committed log"):
        mlog.write_snapshot([], mlog.high_watermark + 1)
    mlog.close()


# ---------------------------------------------------------------------------------------------------------------
# Observers


def test_an_observer_appends_fetched_batches_and_installs_a_snapshot(tmp_path: Path) -> None:
    leader, _ = open_log(tmp_path / "controller", node_id=9)
    leader.append(topic("a"))
    leader.append(topic("b"))
    observer = MetadataLog(str(tmp_path / "broker"), node_id=1, writer=False)
    assert observer.load() == []
    assert observer.append_fetched(leader.read(0, 1 << 20), leader.high_watermark) == 5
    assert observer.high_watermark == 5 and observer.epoch == 1
    assert observer.read(0, 1 << 20) == leader.read(0, 1 << 20)
    observer.close()
    again = MetadataLog(str(tmp_path / "broker"), node_id=1, writer=False)
    assert again.load() == topic("a") + topic("b")
    assert again.next_offset == 5  # an observer starts no epoch

    leader.append(topic("c"))
    path = leader.write_snapshot(topic("a") + topic("b") + topic("c"), leader.high_watermark)
    sid = leader.latest_snapshot()
    assert sid is not None
    size, chunk = leader.read_snapshot(sid, 0, 1 << 20) or (0, b"")
    assert size == len(chunk) == os.path.getsize(path)
    assert again.install_snapshot(chunk, sid) == topic("a") + topic("b") + topic("c")
    assert again.next_offset == again.log_start_offset == sid.end_offset
    leader.close()
    again.close()
    _, records = open_log(tmp_path / "broker", writer=False)
    assert records == topic("a") + topic("b") + topic("c")


# ---------------------------------------------------------------------------------------------------------------
# Migration from kjbod 0.1


def test_a_log_written_by_kjbod_0_1_loads_and_gains_an_epoch(tmp_path: Path) -> None:
    # The fixture is the file kjbod 0.1's writer produced (one segment, epoch 0, no LeaderChangeMessage,
    # no indexes): a topic with a config and 3 partitions, a topic created then removed, another topic.
    seg_dir = part_dir(tmp_path)
    seg_dir.mkdir(parents=True)
    shutil.copy(FIXTURE, seg_dir / "00000000000000000000.log")
    old_bytes = FIXTURE.read_bytes()
    assert [h.partition_leader_epoch for _, h in iter_batches(old_bytes)] == [0, 0, 0, 0]

    mlog, records = open_log(tmp_path, node_id=1)
    assert [type(r).__name__ for r in records] == [
        "ConfigRecord", "TopicRecord", "PartitionRecord", "PartitionRecord", "PartitionRecord",
        "TopicRecord", "PartitionRecord", "RemoveTopicRecord", "TopicRecord", "PartitionRecord"]
    assert isinstance(records[0], ConfigRecord) and records[0].value == "86400000"
    assert records[1] == TopicRecord(name="orders", topic_id=T1)
    assert [r.name for r in records if isinstance(r, TopicRecord)] == ["orders", "gone", "events"]
    assert mlog.next_offset == 11 and mlog.epoch == 1
    mlog.append(topic("new"))
    mlog.close()

    assert (seg_dir / "00000000000000000000.log").read_bytes().startswith(old_bytes)  # kept as it was
    assert (seg_dir / "00000000000000000000.index").exists()
    headers = [h for h, _ in batches_on_disk(tmp_path)]
    assert [(h.base_offset, h.partition_leader_epoch, h.is_control) for h in headers][-2:] == [
        (10, 1, True), (11, 1, False)]
    _, again = open_log(tmp_path)
    assert again == records + topic("new")


def test_the_frame_is_kafkas(tmp_path: Path) -> None:
    rec = PartitionRecord(partition_id=7, topic_id=T1, replicas=[1, 2], isr=[1], leader=1)
    value = frame_record(rec, 1)
    assert value[:3] == b"\x01\x03\x01"  # frame version 1, PartitionRecord = 3, version 1
    assert value[3:] == rec.encode(1)
    assert unframe_record(value) == rec


def test_fetched_batches_decode_to_records_and_a_new_epoch_can_start(tmp_path: Path) -> None:
    from kjbod.storage.metadata_records import decode_batches

    mlog, _ = open_log(tmp_path)
    mlog.append(topic("a", 2))
    assert mlog.start_new_epoch() == 2
    mlog.append(topic("b"))
    got = decode_batches(mlog.read(0, 1 << 20))
    assert got == list(zip([1, 2, 3, 5, 6], topic("a", 2) + topic("b"), strict=True))  # 0 and 4: LeaderChange
    assert [h.partition_leader_epoch for _, h in iter_batches(mlog.read(0, 1 << 20))] == [1, 1, 2, 2]
    assert not mlog.snapshot_due() and mlog.snapshot_due(100)
    mlog.write_snapshot(topic("a", 2) + topic("b"), mlog.high_watermark)
    assert mlog.bytes_since_snapshot == 0 and not mlog.snapshot_due(100)
    mlog.close()


def test_kafka_python_reads_the_metadata_log_and_a_snapshot(tmp_path: Path) -> None:
    # A second implementation of the record batch format (kafka-python's) reads what the metadata log writes.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.record.memory_records import MemoryRecords

    mlog, _ = open_log(tmp_path, node_id=5)
    mlog.append(topic("a", 2))
    path = mlog.write_snapshot(topic("a", 2), mlog.high_watermark)
    mlog.close()

    def read(data: bytes) -> list:
        out = []
        records = MemoryRecords(data)
        while (batch := records.next_batch()) is not None:
            assert batch.validate_crc()
            out.append((batch.base_offset, batch.leader_epoch, batch.is_control_batch,
                        [(r.offset, r.key, r.value) for r in batch]))
        return out

    log_batches = read((part_dir(tmp_path) / "00000000000000000000.log").read_bytes())
    assert [(b[0], b[1], b[2]) for b in log_batches] == [(0, 1, True), (1, 1, False)]
    assert log_batches[0][3][0][1] == b"\x00\x00\x00\x02"  # control key: version 0, LEADER_CHANGE
    assert [unframe_record(v) for _, _, v in log_batches[1][3]] == topic("a", 2)
    snap_batches = read(Path(path).read_bytes())
    assert [(b[0], b[2]) for b in snap_batches] == [(0, True), (1, False), (4, True)]
    assert [b[3][0][1] for b in snap_batches if b[2]] == [b"\x00\x00\x00\x03", b"\x00\x00\x00\x04"]


def test_the_metadata_log_keys_reach_the_log(tmp_path: Path) -> None:
    """metadata.log.segment.bytes / .ms / .min.bytes and metadata.max.retention.bytes / .ms, from a node's
    server.properties to what its metadata log does."""
    from kjbod.server.config import build_config
    from kjbod.storage.metadata_log import MetadataLogError, metadata_log_options

    base = {"node.id": "1", "process.roles": "broker,controller", "controller.quorum.voters": "1@127.0.0.1:9093",
            "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
            "controller.listener.names": "CONTROLLER", "log.dirs": str(tmp_path / "d")}
    defaults = metadata_log_options(build_config(base))
    assert defaults == {"segment_bytes": 1 << 30, "segment_ms": 7 * 24 * 3_600_000, "retention_bytes": 100 << 20,
                        "retention_ms": 7 * 24 * 3_600_000}
    with pytest.raises(MetadataLogError, match="Cannot set metadata.log.segment.bytes below 8388608: 400"):
        metadata_log_options(build_config({**base, "metadata.log.segment.bytes": "400"}))
    clock = [1_000_000]
    options = metadata_log_options(build_config({
        **base, "metadata.log.segment.min.bytes": "100", "metadata.log.segment.bytes": "400",
        "metadata.log.segment.ms": "60000", "metadata.max.retention.bytes": "-1", "metadata.max.retention.ms": "1000"}))
    mlog = MetadataLog(str(tmp_path / "m"), clock=lambda: clock[0], **options)
    mlog.load()
    mlog.append(topic("a"))
    assert len(mlog.log.segments) == 1
    clock[0] += 61_000  # metadata.log.segment.ms: the next append rolls
    mlog.append(topic("b"))
    assert len(mlog.log.segments) == 2
    for i in range(3):  # metadata.log.segment.bytes: 400-byte segments
        mlog.append(topic(f"c{i}", partitions=3))
    assert len(mlog.log.segments) > 3
    mlog.write_snapshot(topic("a") + topic("b"), mlog.high_watermark)
    clock[0] += 2000  # metadata.max.retention.ms: the first snapshot is now too old once a newer one exists
    mlog.append(topic("d"))
    mlog.write_snapshot(topic("a") + topic("b") + topic("d"), mlog.high_watermark)
    assert snapshot_ids(tmp_path / "m") == [mlog.latest_snapshot()] and mlog.log_start_offset > 0
    mlog.close()
    options["retention_ms"] = -1
    options["retention_bytes"] = 0  # metadata.max.retention.bytes
    mlog = MetadataLog(str(tmp_path / "n"), clock=lambda: clock[0], **options)
    mlog.load()
    for name in ("x", "y"):
        mlog.append(topic(name))
        mlog.write_snapshot(topic("x") + (topic("y") if name == "y" else []), mlog.high_watermark)
    assert snapshot_ids(tmp_path / "n") == [mlog.latest_snapshot()]
    mlog.close()
