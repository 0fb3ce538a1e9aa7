"""`kjbod dump-log`: Kafka's kafka-dump-log.sh lines for segments, indexes and snapshots, checked line by line.

The expected lines are written out here from what each test wrote (offsets, timestamps, keys, record fields) in
the exact shape of Kafka's DumpLogSegments; the batch CRCs and sizes are read from the files' headers.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from kjbod.cli.main import main
from kjbod.cli.record_json import metadata_record_json, uuid_text
from kjbod.protocol.generated import PartitionRecord, RegisterBrokerRecord, TopicRecord
from kjbod.storage.config import LogConfig
from kjbod.storage.fsio import LogDirIO
from kjbod.storage.log import PartitionLog
from kjbod.storage.metadata_log import TOPIC_DIR, MetadataLog
from kjbod.storage.metadata_records import records_batch
from kjbod.storage.records import build_batch, iter_batches

T = 1_700_000_000_000
TID = uuid.UUID("00000000-0000-0000-0000-000000000001")
DIR = uuid.UUID("1b1c1d1e-0000-4000-8000-00000000000f")


def dump(capsys, *args: str) -> tuple[int, list[str], str]:
    capsys.readouterr()  # what the setup logged
    rc = main(["dump-log", *args])
    out, err = capsys.readouterr()
    return rc, out.splitlines(), err


def batch_line(data: bytes, pos: int, *, epoch: int, control: bool = False, ts: int = T) -> str:
    h = next(h for p, h in iter_batches(data) if p == pos)
    return (f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} baseSequence: -1 "
            f"lastSequence: -1 producerId: -1 producerEpoch: -1 partitionLeaderEpoch: {epoch} isTransactional: "
            f"false isControl: {'true' if control else 'false'} deleteHorizonMs: OptionalLong.empty position: {pos} "
            f"CreateTime: {ts} size: {h.size} magic: 2 compresscodec: none crc: {h.crc} isvalid: true")


def positions(data: bytes) -> list[int]:
    return [p for p, _ in iter_batches(data)]


def test_kafkas_json_for_metadata_records() -> None:
    assert uuid_text(TID) == "AAAAAAAAAAAAAAAAAAAAAQ"
    rec = PartitionRecord(partition_id=0, topic_id=TID, replicas=[1, 2], isr=[1], leader=1, leader_epoch=3,
                          partition_epoch=4, directories=[DIR, DIR])
    no_dirs = PartitionRecord(partition_id=0, topic_id=TID, replicas=[1, 2], isr=[1], leader=1, leader_epoch=3,
                              partition_epoch=4)
    assert metadata_record_json(no_dirs, 0) == (
        '{"type":"PARTITION_RECORD","version":0,"data":{"partitionId":0,"topicId":"AAAAAAAAAAAAAAAAAAAAAQ",'
        '"replicas":[1,2],"isr":[1],"removingReplicas":[],"addingReplicas":[],"leader":1,"leaderEpoch":3,'
        '"partitionEpoch":4}}')  # Directories is v1+, untagged: absent from v0 only
    assert metadata_record_json(no_dirs, 1).endswith('"partitionEpoch":4,"directories":[]}}')
    assert metadata_record_json(rec, 2).endswith(
        f'"partitionEpoch":4,"directories":["{uuid_text(DIR)}","{uuid_text(DIR)}"]}}}}')
    assert metadata_record_json(PartitionRecord(topic_id=TID, leader_recovery_state=1), 1).count(
        '"leaderRecoveryState":1') == 1  # a tagged field appears only when it differs from its default
    broker = RegisterBrokerRecord(broker_id=2, broker_epoch=7, incarnation_id=TID, rack=None)
    text = metadata_record_json(broker, 0)
    assert text.startswith('{"type":"REGISTER_BROKER_RECORD","version":0,"data":{"brokerId":2,'
                           '"incarnationId":"AAAAAAAAAAAAAAAAAAAAAQ","brokerEpoch":7,')
    assert '"rack":null' in text


def test_the_metadata_log_with_the_decoder(tmp_path: Path, capsys) -> None:
    mlog = MetadataLog(str(tmp_path), node_id=1, clock=lambda: T)
    mlog.load()
    mlog.append([TopicRecord(name="orders", topic_id=TID),
                 PartitionRecord(partition_id=0, topic_id=TID, replicas=[1], isr=[1], leader=1, leader_epoch=0,
                                 partition_epoch=0, directories=[DIR])])
    mlog.close()
    seg = tmp_path / TOPIC_DIR / "00000000000000000000.log"
    data = seg.read_bytes()
    p0, p1 = positions(data)
    rc, lines, err = dump(capsys, "--files", str(seg), "--cluster-metadata-decoder")
    assert rc == 0 and err == ""
    assert lines == [
        f"Dumping {seg}",
        "Log starting offset: 0",
        batch_line(data, p0, epoch=1, control=True),
        f"| offset: 0 CreateTime: {T} keySize: 4 valueSize: 19 sequence: -1 headerKeys: [] "
        "controlType: LEADER_CHANGE(2)",
        batch_line(data, p1, epoch=1),
        f"| offset: 1 CreateTime: {T} keySize: -1 valueSize: 27 sequence: -1 headerKeys: [] payload: "
        '{"type":"TOPIC_RECORD","version":0,"data":{"name":"orders","topicId":"AAAAAAAAAAAAAAAAAAAAAQ"}}',
        f"| offset: 2 CreateTime: {T} keySize: -1 valueSize: 65 sequence: -1 headerKeys: [] payload: "
        '{"type":"PARTITION_RECORD","version":2,"data":{"partitionId":0,"topicId":"AAAAAAAAAAAAAAAAAAAAAQ",'
        '"replicas":[1],"isr":[1],"removingReplicas":[],"addingReplicas":[],"leader":1,"leaderEpoch":0,'
        f'"partitionEpoch":0,"directories":["{uuid_text(DIR)}"]}}}}',
    ]
    # Without --deep-iteration (and no decoder): a line per batch only.
    rc, lines, _ = dump(capsys, "--files", str(seg))
    assert lines == [f"Dumping {seg}", "Log starting offset: 0", batch_line(data, p0, epoch=1, control=True),
                     batch_line(data, p1, epoch=1)]


def test_an_unknown_metadata_record_type_is_reported_on_its_line(tmp_path: Path, capsys) -> None:
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(records_batch([bytes([1, 120, 0, 0])], base_offset=0, epoch=1, timestamp_ms=T))
    rc, lines, _ = dump(capsys, "--files", str(seg), "--cluster-metadata-decoder")
    assert rc == 0
    assert lines[-1].endswith("payload: Error at 0, skipping. Unknown metadata id 120")


def test_a_snapshot_with_the_decoder(tmp_path: Path, capsys) -> None:
    mlog = MetadataLog(str(tmp_path), node_id=1, clock=lambda: T)
    mlog.load()
    mlog.append([TopicRecord(name="t", topic_id=TID)])
    path = Path(mlog.write_snapshot([TopicRecord(name="t", topic_id=TID)], 2))
    mlog.close()
    data = path.read_bytes()
    p0, p1, p2 = positions(data)
    rc, lines, _ = dump(capsys, "--files", str(path), "--cluster-metadata-decoder")
    assert rc == 0
    assert lines == [
        f"Dumping {path}",
        "Snapshot end offset: 2, epoch: 1",
        batch_line(data, p0, epoch=1, control=True),
        f"| offset: 0 CreateTime: {T} keySize: 4 valueSize: 11 sequence: -1 headerKeys: [] "
        f'SnapshotHeader {{"version":0,"lastContainedLogTimestamp":{T}}}',
        batch_line(data, p1, epoch=1),
        f"| offset: 1 CreateTime: {T} keySize: -1 valueSize: 22 sequence: -1 headerKeys: [] payload: "
        '{"type":"TOPIC_RECORD","version":0,"data":{"name":"t","topicId":"AAAAAAAAAAAAAAAAAAAAAQ"}}',
        batch_line(data, p2, epoch=1, control=True),
        f"| offset: 2 CreateTime: {T} keySize: 4 valueSize: 3 sequence: -1 headerKeys: [] "
        'SnapshotFooter {"version":0}',
    ]


def data_partition(tmp_path: Path) -> Path:
    """A data partition with three batches and an index entry for each (index.interval.bytes = 1)."""
    io = LogDirIO(str(tmp_path))
    pdir = tmp_path / "t-0"
    plog = PartitionLog.create(io, str(pdir), "t", 0, None, LogConfig(index_interval_bytes=1))
    plog.append(build_batch([(b"k1", b"hello", (), T), (None, b"world", [("h1", b"x"), ("h2", None)], T + 5)]),
                leader_epoch=4)
    plog.append(build_batch([(b"k2", None, (), T + 10)]), leader_epoch=4)
    plog.append(build_batch([(None, "żółw".encode(), (), T + 20)]), leader_epoch=5)
    plog.close()
    return pdir


def test_a_data_segment_with_print_data_log(tmp_path: Path, capsys) -> None:
    pdir = data_partition(tmp_path)
    seg = pdir / "00000000000000000000.log"
    data = seg.read_bytes()
    p0, p1, p2 = positions(data)
    rc, lines, _ = dump(capsys, "--files", str(seg), "--print-data-log")
    assert rc == 0
    assert lines == [
        f"Dumping {seg}",
        "Log starting offset: 0",
        batch_line(data, p0, epoch=4, ts=T + 5),
        f"| offset: 0 CreateTime: {T} keySize: 2 valueSize: 5 sequence: -1 headerKeys: [] key: k1 payload: hello",
        f"| offset: 1 CreateTime: {T + 5} keySize: -1 valueSize: 5 sequence: -1 headerKeys: [h1,h2] payload: world",
        batch_line(data, p1, epoch=4, ts=T + 10),
        f"| offset: 2 CreateTime: {T + 10} keySize: 2 valueSize: -1 sequence: -1 headerKeys: [] key: k2",
        batch_line(data, p2, epoch=5, ts=T + 20),
        f"| offset: 3 CreateTime: {T + 20} keySize: -1 valueSize: 7 sequence: -1 headerKeys: [] payload: żółw",
    ]


def test_indexes(tmp_path: Path, capsys) -> None:
    pdir = data_partition(tmp_path)
    data = (pdir / "00000000000000000000.log").read_bytes()
    p0, p1, p2 = positions(data)
    index, time_index = pdir / "00000000000000000000.index", pdir / "00000000000000000000.timeindex"
    rc, lines, err = dump(capsys, "--files", f"{index},{time_index}")
    assert rc == 0 and err == ""
    # An entry per batch after the first (Kafka indexes a batch once index.interval.bytes were written before
    # it): its last offset and its position; the time index: the max timestamp so far.
    assert lines == [f"Dumping {index}", f"offset: 2 position: {p1}", f"offset: 3 position: {p2}",
                     f"Dumping {time_index}", f"timestamp: {T + 10} offset: 2", f"timestamp: {T + 20} offset: 3"]
    # An entry that does not point at the batch ending at its offset is reported on stderr, as Kafka does.
    raw = bytearray(index.read_bytes())
    raw[4:8] = p0.to_bytes(4, "big")
    index.write_bytes(bytes(raw))
    rc, lines, err = dump(capsys, "--files", str(index))
    assert lines[1] == f"offset: 2 position: {p0}"
    assert err.splitlines() == [f"Mismatches in :{index}", "  Index offset: 2, log offset: 1"]
    empty = tmp_path / "00000000000000000042.index"
    empty.write_bytes(b"")
    rc, lines, _ = dump(capsys, "--files", str(empty))
    assert lines == [f"Dumping {empty}", f"{empty} is empty."]


def test_bytes_that_are_not_batches_are_counted_and_fail_the_exit_code(tmp_path: Path, capsys) -> None:
    seg = tmp_path / "00000000000000000000.log"
    good = records_batch([bytes([1, 2, 0, 0])], base_offset=0, epoch=0, timestamp_ms=T)
    seg.write_bytes(good + b"not a batch at all, just text")
    rc, lines, _ = dump(capsys, "--files", str(seg))
    assert rc == 1
    assert lines[-1] == "Found 29 invalid bytes at the end of 00000000000000000000.log"
    text = tmp_path / "00000000000000000001.log"
    text.write_text("hello, I am a text file\n" * 10)
    rc, lines, _ = dump(capsys, "--files", str(text))
    assert rc == 1 and lines == [f"Dumping {text}", "Log starting offset: 1",
                                 "Found 240 invalid bytes at the end of 00000000000000000001.log"]


@pytest.mark.parametrize("name, message", [
    ("missing/00000000000000000000.log", "does not exist"),
    ("notes.txt", "is not a log segment, index or snapshot"),
    ("segment.log", "a segment file is named <base offset>.log"),
    ("1-2.checkpoint", "a snapshot is named <20-digit end offset>-<10-digit epoch>.checkpoint"),
])
def test_files_that_cannot_be_dumped_are_one_line_and_exit_2(tmp_path: Path, capsys, name: str,
                                                            message: str) -> None:
    path = tmp_path / name
    if not name.startswith("missing"):
        path.write_bytes(b"x")
    rc, lines, err = dump(capsys, "--files", str(path))
    assert rc == 2 and lines == []
    assert err.count("\n") == 1 and err.startswith("kjbod: error: ") and message in err


def test_deep_iteration_reports_offsets_that_do_not_follow_on_stderr(tmp_path: Path, capsys) -> None:
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(build_batch([(None, b"a", (), T), (None, b"b", (), T)], base_offset=0)
                    + build_batch([(None, b"c", (), T)], base_offset=5)
                    + build_batch([(None, b"d", (), T)], base_offset=9))
    rc, lines, err = dump(capsys, "--files", str(seg), "--deep-iteration")
    assert rc == 0
    assert [ln.split(" CreateTime")[0] for ln in lines if ln.startswith("|")] == [
        "| offset: 0", "| offset: 1", "| offset: 5", "| offset: 9"]
    assert err.splitlines() == [f"Non-consecutive offsets in {seg}", "  5 is followed by 9", "  1 is followed by 5"]


def test_skip_record_metadata_leaves_keys_and_payloads(tmp_path: Path, capsys) -> None:
    pdir = data_partition(tmp_path)
    seg = pdir / "00000000000000000000.log"
    rc, lines, _ = dump(capsys, "--files", str(seg), "--print-data-log", "--skip-record-metadata")
    assert rc == 0
    assert [ln for ln in lines if not ln.startswith(("Dumping", "Log starting", "baseOffset"))] == [
        "| key: k1 payload: hello", " payload: world", "| key: k2", " payload: żółw"]
    mlog = MetadataLog(str(tmp_path / "meta"), clock=lambda: T)
    mlog.load()
    mlog.close()
    rc, lines, _ = dump(capsys, "--files", str(tmp_path / "meta" / TOPIC_DIR / "00000000000000000000.log"),
                        "--cluster-metadata-decoder", "--skip-record-metadata")
    assert lines[-1] == ""  # the LeaderChangeMessage: its line keeps nothing, as in Kafka's tool


def test_a_producer_state_snapshot(tmp_path: Path, capsys) -> None:
    io = LogDirIO(str(tmp_path))
    pdir = tmp_path / "t-0"
    plog = PartitionLog.create(io, str(pdir), "t", 0, None, LogConfig())
    plog.append(build_batch([(None, b"a", (), T), (None, b"b", (), T + 1)], producer_id=42, producer_epoch=3,
                            base_sequence=0))
    plog.append(build_batch([(None, b"c", (), T + 7)], producer_id=42, producer_epoch=3, base_sequence=2))
    plog.close()
    snap = pdir / "00000000000000000003.snapshot"
    rc, lines, _ = dump(capsys, "--files", str(snap))
    assert rc == 0
    assert lines == [f"Dumping {snap}",
                     f"producerId: 42 producerEpoch: 3 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty "
                     f"lastTimestamp: {T + 7} firstSequence: 2 lastSequence: 2 lastOffset: 2 offsetDelta: 0 "
                     f"timestamp: {T + 7}"]
    # A producer with a transaction open at offset 3: the snapshot keeps where it began.
    from kjbod.storage.producer_state import ProducerEntry, ProducerStateManager

    state = ProducerStateManager()
    state.producers[7] = ProducerEntry(7, 1, last_timestamp=T, txn_first_offset=3)
    open_txn = pdir / "00000000000000000009.snapshot"
    open_txn.write_bytes(state.snapshot_bytes())
    rc, lines, _ = dump(capsys, "--files", str(open_txn))
    assert lines[1] == (f"producerId: 7 producerEpoch: 1 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong[3] "
                        f"lastTimestamp: {T} ")
    snap.write_bytes(b"\x00\x01garbage")
    rc, lines, err = dump(capsys, "--files", str(snap))
    assert lines == [f"Dumping {snap}"] and "producer snapshot" in err


def test_cordoned_log_dirs_in_the_broker_records(tmp_path: Path, capsys) -> None:
    """KIP-1066 (metadata.version 4.3-IV0): RegisterBrokerRecord v4 and BrokerRegistrationChangeRecord v3 print
    `cordonedLogDirs` when it is set (an empty list too: "none cordoned"), never when null (not known)."""
    from kjbod.cli.dump_log import _resolved
    from kjbod.protocol.generated import BrokerRegistrationChangeRecord, FeatureLevelRecord
    from kjbod.storage.metadata_records import frame_record

    other = uuid.UUID("1b1c1d1e-0000-4000-8000-000000000010")
    values = [frame_record(FeatureLevelRecord(name="metadata.version", feature_level=30), 0),
              frame_record(RegisterBrokerRecord(broker_id=2, broker_epoch=7, incarnation_id=TID,
                                                log_dirs=[DIR, other], cordoned_log_dirs=[DIR]), 4),
              frame_record(BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=7, cordoned_log_dirs=[]), 3),
              frame_record(BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=7, fenced=-1), 3)]
    seg = tmp_path / "__cluster_metadata-0" / "00000000000000000000.log"
    seg.parent.mkdir()
    seg.write_bytes(records_batch(values, base_offset=0, epoch=1, timestamp_ms=T))
    rc, lines, err = dump(capsys, "--files", str(seg), "--cluster-metadata-decoder")
    assert rc == 0 and err == ""
    payloads = [line.split("payload: ", 1)[1] for line in lines if "payload: " in line]
    assert payloads[1].startswith('{"type":"REGISTER_BROKER_RECORD","version":4,')
    assert payloads[1].endswith(
        f'"logDirs":["{uuid_text(DIR)}","{uuid_text(other)}"],"cordonedLogDirs":["{uuid_text(DIR)}"]}}}}')
    assert payloads[2] == ('{"type":"BROKER_REGISTRATION_CHANGE_RECORD","version":3,"data":{"brokerId":2,'
                           '"brokerEpoch":7,"cordonedLogDirs":[]}}')
    assert "cordoned" not in payloads[3]
    # With --bootstrap-server, the cordoned ids resolve to their broker and path like the other dir ids.
    resolved = _resolved(RegisterBrokerRecord(log_dirs=[DIR, other], cordoned_log_dirs=[DIR]),
                         {DIR: (2, "/data/a"), other: (2, "/data/b")})
    assert resolved.splitlines()[1:] == [
        f"|   LogDirs: [{uuid_text(DIR)} (broker 2 /data/a), {uuid_text(other)} (broker 2 /data/b)]",
        f"|   CordonedLogDirs: [{uuid_text(DIR)} (broker 2 /data/a)]"]
