"""kraft.version 1 (KIP-853) at rest: the KRaftVersionRecord and VotersRecord control records, the bootstrap snapshot
`kjbod format --standalone` / `--initial-controllers` writes, and the voter set a metadata log reads back from its
snapshot and its log (pure, plus the format command run as a user runs it)."""

from __future__ import annotations

import struct
import subprocess
import uuid
from pathlib import Path

import pytest
from live import COMMAND, free_port, new_cluster_id, read_meta_properties

from kjbod.protocol.generated.k_raft_version_record import KRaftVersionRecord
from kjbod.protocol.generated.leader_change_message import LeaderChangeMessage
from kjbod.protocol.generated.topic_record import TopicRecord
from kjbod.raft.voters import VoterNode, VoterSet, parse_dynamic_voters, parse_uuid, uuid_text
from kjbod.storage.metadata_log import MetadataLog
from kjbod.storage.metadata_records import (
    KRAFT_VERSION,
    KRAFT_VOTERS,
    LEADER_CHANGE,
    SNAPSHOT_FOOTER,
    SNAPSHOT_HEADER,
    control_type,
    kraft_control_records,
)
from kjbod.storage.metadata_snapshot import BOOTSTRAP_SNAPSHOT_ID, bootstrap_snapshot, parse_snapshot
from kjbod.storage.records import iter_batches, iter_records

D1, D2, D3 = "JEXY6aqzQY-32P5TStzaFg", "MvDxzVmcRsaTz33bUuRU6A", "07R5amHmR32VDA6jHkGbTA"


def three() -> VoterSet:
    return parse_dynamic_voters(f"1@localhost:9093:{D1},2@[::1]:9094:{D2},3@host-3:9095:{D3}", "CONTROLLER")


# ------------------------------------------------------------------------------------------- --initial-controllers

def test_initial_controllers_parse_as_kafka_reads_them():
    voters = three()
    assert list(voters) == [1, 2, 3]
    assert voters.addresses() == {1: ("localhost", 9093), 2: ("::1", 9094), 3: ("host-3", 9095)}
    assert {n: uuid_text(d) for n, d in voters.directory_ids().items()} == {1: D1, 2: D2, 3: D3}
    assert voters[2].endpoints == (("CONTROLLER", "::1", 9094),)
    assert voters[1].supported == (0, 1)


@pytest.mark.parametrize(("text", "problem"), [
    ("", "empty"),
    (f"1@localhost:9093:{D1},", "empty entry"),
    ("1@localhost:9093", "expected id@host:port:directoryId"),
    (f"x@localhost:9093:{D1}", "expected id@host:port:directoryId"),
    (f"1@localhost:99999:{D1}", "invalid port 99999"),
    ("1@localhost:9093:not-a-uuid", "invalid directory id"),
    ("1@localhost:9093:AAAAAAAAAAAAAAAAAAAAAA", "zero directory id"),
    (f"1@a:1:{D1},1@b:2:{D2}", "node id 1 appears twice"),
    (f"1@a:1:{D1},2@b:2:{D1}", f"directory id {D1} appears twice"),
])
def test_bad_initial_controllers_are_named(text, problem):
    with pytest.raises(ValueError, match=problem):
        parse_dynamic_voters(text, "CONTROLLER")


def test_a_voter_set_goes_through_a_voters_record_unchanged():
    voters = three()
    record = voters.to_record()
    again = type(record).decode(record.encode(0), 0)
    assert VoterSet.from_record(again) == voters
    assert [v.voter_id for v in again.voters] == [1, 2, 3]
    assert again.voters[0].voter_directory_id == parse_uuid(D1)


# ------------------------------------------------------------------------------------------- byte layout

def test_control_records_have_kafkas_layout():
    # KRaftVersionRecord v0: int16 version, int16 kraft.version, no tagged fields
    assert KRaftVersionRecord(version=0, k_raft_version=1).encode(0) == struct.pack(">hhB", 0, 1, 0)
    one = VoterSet.of([VoterNode(7, uuid.UUID(int=5), (("CONTROLLER", "h", 9093),))]).to_record()
    expected = b"".join([
        struct.pack(">h", 0),  # Version
        bytes([2]),  # Voters: compact array of 1
        struct.pack(">i", 7), uuid.UUID(int=5).bytes,  # VoterId, VoterDirectoryId
        bytes([2]), bytes([11]), b"CONTROLLER", bytes([2]), b"h", struct.pack(">H", 9093), bytes([0]),  # Endpoints
        struct.pack(">hh", 0, 1), bytes([0]),  # KRaftVersionFeature
        bytes([0]),  # the voter's tagged fields
        bytes([0]),  # the record's tagged fields
    ])
    assert one.encode(0) == expected


def test_the_bootstrap_snapshot_is_header_kraft_version_voters_then_footer():
    data = bootstrap_snapshot(three().to_record(), now_ms=1234)
    batches = list(iter_batches(memoryview(data)))
    assert len(batches) == 2 and all(h.is_control and h.partition_leader_epoch == 0 for _p, h in batches)
    pos, header = batches[0]
    first = list(iter_records(memoryview(data)[pos:pos + header.size]))
    assert [(r.offset, control_type(r.key)) for r in first] == [
        (0, SNAPSHOT_HEADER), (1, KRAFT_VERSION), (2, KRAFT_VOTERS)]
    pos, header = batches[1]
    assert [(r.offset, control_type(r.key)) for r in iter_records(memoryview(data)[pos:pos + header.size])] == [
        (3, SNAPSHOT_FOOTER)]
    kraft: list = []
    assert parse_snapshot(data, kraft) == []
    assert kraft[0] == KRaftVersionRecord(version=0, k_raft_version=1)
    assert VoterSet.from_record(kraft[1]) == three()
    assert BOOTSTRAP_SNAPSHOT_ID.file_name == "00000000000000000000-0000000000.checkpoint"


# ------------------------------------------------------------------------------------------- the metadata log

def formatted_log(root: Path, voters: VoterSet) -> Path:
    topic_dir = root / "__cluster_metadata-0"
    topic_dir.mkdir(parents=True)
    (topic_dir / BOOTSTRAP_SNAPSHOT_ID.file_name).write_bytes(bootstrap_snapshot(voters.to_record(), now_ms=1))
    return root


def test_a_static_log_is_at_kraft_version_0_with_no_voters(tmp_path):
    mlog = MetadataLog(str(tmp_path), writer=False, replicated=True)
    mlog.load()
    assert (mlog.kraft_version, mlog.voters) == (0, None)
    mlog.close()


def test_the_voters_of_a_dynamic_log_come_from_its_snapshot_then_its_log(tmp_path):
    voters = three()
    mlog = MetadataLog(str(formatted_log(tmp_path, voters)), writer=False, replicated=True)
    assert mlog.load() == []
    assert mlog.kraft_version == 1 and VoterSet.from_record(mlog.voters) == voters
    assert mlog.kraft_changes[0][0] == -1  # a snapshot's records sit at its last offset
    # the leader of epoch 1 writes its first batch with the voter set in it, as Kafka's leader does
    two = VoterSet.of([voters[1], voters[2]])
    message = LeaderChangeMessage(version=0, leader_id=1)
    base = mlog.append_control_as_leader([(LEADER_CHANGE, message), (KRAFT_VERSION, KRaftVersionRecord(
        version=0, k_raft_version=1)), (KRAFT_VOTERS, two.to_record())], epoch=1)
    assert base == 0 and VoterSet.from_record(mlog.voters) == two
    mlog.append_as_leader([TopicRecord(name="t", topic_id=uuid.uuid4())], epoch=1)
    mlog.close()

    again = MetadataLog(str(tmp_path), writer=False, replicated=True)
    assert [r.name for r in again.load()] == ["t"]
    assert VoterSet.from_record(again.voters) == two
    assert [o for o, _m in again.kraft_changes] == [-1, -1, 1, 2]
    # a follower whose log parts from the leader's drops the voter set with the records it cuts off
    again.truncate_to(1)
    assert VoterSet.from_record(again.voters) == voters
    again.close()


def test_a_snapshot_carries_the_voter_set_in_force_at_its_end(tmp_path):
    voters = three()
    mlog = MetadataLog(str(formatted_log(tmp_path, voters)), writer=False, replicated=True)
    mlog.load()
    two = VoterSet.of([voters[1], voters[3]])
    mlog.append_control_as_leader([(LEADER_CHANGE, LeaderChangeMessage(version=0, leader_id=1)),
                                   (KRAFT_VOTERS, two.to_record())], epoch=1)
    mlog.append_as_leader([TopicRecord(name="a", topic_id=uuid.uuid4())], epoch=1)
    mlog.advance_high_watermark(mlog.next_offset)
    path = mlog.write_snapshot([TopicRecord(name="a", topic_id=uuid.uuid4())], mlog.next_offset)
    mlog.close()
    data = Path(path).read_bytes()
    kraft: list = []
    assert [r.name for r in parse_snapshot(data, kraft)] == ["a"]
    assert kraft[0].k_raft_version == 1 and VoterSet.from_record(kraft[1]) == two
    assert [m for _o, m in kraft_control_records(data)] == kraft
    # a follower that installs it knows the voters from it
    other = tmp_path / "other"
    follower = MetadataLog(str(other), writer=False, replicated=True)
    follower.load()
    from kjbod.storage.metadata_snapshot import SnapshotId

    follower.install_snapshot(data, SnapshotId(int(Path(path).name[:20]), 1))
    assert follower.kraft_version == 1 and VoterSet.from_record(follower.voters) == two
    follower.close()


# ------------------------------------------------------------------------------------------- kjbod format

def controller_config(path: Path, node_id: int, port: int, *, voters: str | None = None) -> Path:
    lines = {"process.roles": "controller", "node.id": str(node_id), "listeners": f"CONTROLLER://127.0.0.1:{port}",
             "controller.listener.names": "CONTROLLER", "log.dirs": str(path.parent / f"c{node_id}")}
    if voters is not None:
        lines["controller.quorum.voters"] = voters
    else:
        lines["controller.quorum.bootstrap.servers"] = f"127.0.0.1:{port}"
    path.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
    return path


def kjbod(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=60)


def test_format_standalone_writes_the_bootstrap_snapshot_with_this_controller(tmp_path):
    port = free_port()
    config = controller_config(tmp_path / "c1.properties", 1, port)
    done = kjbod("format", "-c", str(config), "--cluster-id", new_cluster_id(), "--standalone")
    assert done.returncode == 0, done.stderr
    meta = read_meta_properties(tmp_path / "c1")
    mlog = MetadataLog(str(tmp_path / "c1"), writer=False, replicated=True)
    mlog.load()
    voters = VoterSet.from_record(mlog.voters)
    mlog.close()
    assert mlog.kraft_version == 1
    assert voters == VoterSet.of([VoterNode(1, parse_uuid(meta["directory.id"]),
                                            (("CONTROLLER", "127.0.0.1", port),))])


def test_format_initial_controllers_gives_the_metadata_dir_the_listed_directory_id(tmp_path):
    config = controller_config(tmp_path / "c2.properties", 2, free_port())
    listed = f"1@127.0.0.1:9093:{D1},2@127.0.0.1:9094:{D2},3@127.0.0.1:9095:{D3}"
    done = kjbod("format", "-c", str(config), "--cluster-id", new_cluster_id(), "--initial-controllers", listed)
    assert done.returncode == 0, done.stderr
    assert read_meta_properties(tmp_path / "c2")["directory.id"] == D2
    snapshot = tmp_path / "c2" / "__cluster_metadata-0" / BOOTSTRAP_SNAPSHOT_ID.file_name
    kraft: list = []
    parse_snapshot(snapshot.read_bytes(), kraft)
    assert VoterSet.from_record(kraft[1]) == parse_dynamic_voters(listed, "CONTROLLER")


def test_format_no_initial_controllers_writes_no_snapshot(tmp_path):
    config = controller_config(tmp_path / "c3.properties", 3, free_port())
    done = kjbod("format", "-c", str(config), "--cluster-id", new_cluster_id(), "--no-initial-controllers")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "c3" / "meta.properties").exists()
    assert not list((tmp_path / "c3").glob("__cluster_metadata-0/*.checkpoint"))


@pytest.mark.parametrize(("extra", "voters", "roles", "message"), [
    (["--standalone", "--no-initial-controllers"], None, "controller", "not allowed with argument"),
    (["--standalone"], "1@127.0.0.1:9093", "controller", "controller.quorum.voters is set"),
    (["--standalone"], None, "broker", "You can only use --standalone on a controller."),
    (["--initial-controllers", "1@h:1"], None, "controller", "expected id@host:port:directoryId"),
])
def test_format_refusals_name_the_problem(tmp_path, extra, voters, roles, message):
    config = controller_config(tmp_path / "c.properties", 1, free_port(), voters=voters)
    if roles == "broker":
        text = config.read_text().replace("process.roles=controller", "process.roles=broker").replace(
            "listeners=CONTROLLER://", "listeners=PLAINTEXT://").replace(
            "controller.quorum.bootstrap.servers=127.0.0.1", "controller.quorum.bootstrap.servers=127.0.0.1")
        config.write_text(text)
    done = kjbod("format", "-c", str(config), "--cluster-id", new_cluster_id(), *extra)
    assert done.returncode == 2, done
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "c1" / "meta.properties").exists()
