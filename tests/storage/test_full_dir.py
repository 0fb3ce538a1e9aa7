"""A full dir is not a dead dir: ENOSPC/EDQUOT or a dir at its reserve refuses appends and keeps everything else.

Space is faked through the fsio seam (``fsio.fake_space`` makes statvfs answer given sizes, ``fsio.inject`` raises
ENOSPC on chosen ops), so every state change is driven here without a real full disk; tests/datapath/
test_full_disk_live.py does the same on a real tmpfs.
"""

from __future__ import annotations

import errno
import os

import pytest
from structlog.testing import capture_logs

from kjbod.storage import fsio
from kjbod.storage.config import LogConfig
from kjbod.storage.errors import DuplicateLogError, KafkaStorageError, LogDirFullError
from kjbod.storage.health import DirState
from kjbod.storage.placement import FEWEST_PARTITIONS, MOST_USABLE
from tests.storage.conftest import kp_batch, kp_records

TOPIC_ID = "3uI2M2AbQVO0J2cYw2xvOA"
GIB = 1 << 30
MIB = 1 << 20


@pytest.fixture
def manager(make_manager, log_dirs):
    lm = make_manager(reserved_bytes=10 * MIB)
    for i, d in enumerate(log_dirs):
        lm.create_partition("t", i, TOPIC_ID, dir=d).append(kp_batch([b"before"]))
    return lm


def _fill(lm, path: str, usable: int = 0, total: int = GIB) -> None:
    fsio.fake_space(path, total, usable)
    lm.check_space()


def _events(logs, name):
    return [e for e in logs if e["event"] == name]


def test_enospc_on_an_append_makes_the_dir_full_not_offline(manager, log_dirs):
    full = log_dirs[2]
    plog = manager.get("t", 2)
    fsio.inject(full, errno.ENOSPC, ops={"write"}, count=1)
    with capture_logs() as logs, pytest.raises(LogDirFullError) as e:
        plog.append(kp_batch([b"x" * 100]))
    assert e.value.error_code == KafkaStorageError.error_code == 56
    assert full in e.value.message and "bytes free" in e.value.message and "reserved" in e.value.message
    assert plog.online and full in manager.online_dirs
    assert manager.dir_health(full).state is DirState.FULL
    assert len(_events(logs, "log_dir_full")) == 1 and not _events(logs, "log_dir_offline")
    # Nothing else is refused: its data reads, the other dirs append, a second append is refused without I/O.
    assert [v for _, v, _ in kp_records(plog.read_bytes(0, 1 << 20))] == [b"before"]
    assert plog.offset_for_timestamp(0) is not None
    assert manager.get("t", 0).append(kp_batch([b"ok"])).base_offset == 1
    with pytest.raises(LogDirFullError, match="appends are refused until space returns"):
        plog.append(kp_batch([b"y"]))
    fsio.fake_space(full, GIB, 0)  # what the filesystem says when it refused a write (DescribeLogDirs asks it)
    info = {i.path: i for i in manager.dirs}[full]
    assert info.online and info.state is DirState.FULL and info.reserved_bytes == 10 * MIB


def test_edquot_is_full_too_and_eio_still_fails_the_dir(manager, log_dirs):
    fsio.inject(log_dirs[1], errno.EDQUOT, ops={"write"}, count=1)
    with pytest.raises(LogDirFullError):
        manager.get("t", 1).append(kp_batch([b"x"]))
    assert log_dirs[1] in manager.online_dirs
    fsio.inject(log_dirs[0], errno.EIO, ops={"write"}, count=1)
    with pytest.raises(KafkaStorageError) as e:
        manager.get("t", 0).append(kp_batch([b"x"]))
    assert not isinstance(e.value, LogDirFullError)
    assert log_dirs[0] in manager.offline_dirs


def test_a_partial_append_is_truncated_back(manager, log_dirs, monkeypatch):
    plog = manager.get("t", 1)
    seg = plog.active_segment
    before = os.path.getsize(seg.log_path)
    real_write = os.write

    def half_then_enospc(fd, buffers):
        data = b"".join(bytes(b) for b in buffers)
        real_write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "writev", half_then_enospc)
    with pytest.raises(LogDirFullError):
        plog.append(kp_batch([b"z" * 500]))
    monkeypatch.undo()
    assert os.path.getsize(seg.log_path) == before == seg.size
    assert plog.log_end_offset == 1
    _fill(manager, log_dirs[1], GIB // 2)
    assert plog.append(kp_batch([b"after"])).base_offset == 1
    assert [(o, v) for o, v, _ in kp_records(plog.read_bytes(0, 1 << 20))] == [(0, b"before"), (1, b"after")]


def test_the_reserve_refuses_appends_before_the_filesystem_is_full(manager, log_dirs):
    d = log_dirs[0]
    plog = manager.get("t", 0)
    _fill(manager, d, 10 * MIB + 3000)
    assert manager.dir_health(d).state is DirState.ONLINE
    assert plog.append(kp_batch([b"x" * 100])).base_offset == 1  # fits above it
    with pytest.raises(LogDirFullError, match="this append needs"):
        plog.append(kp_batch([b"x" * 4000]))  # would go below the reserve
    assert manager.dir_health(d).state is DirState.FULL
    _fill(manager, d, 10 * MIB + 3000)
    assert manager.dir_health(d).state is DirState.FULL  # back only once the refused append would fit
    with pytest.raises(LogDirFullError):
        plog.append(kp_batch([b"x"]))
    _fill(manager, d, 10 * MIB + 5000)
    assert plog.append(kp_batch([b"x" * 4000])).base_offset == 2
    _fill(manager, d, 10 * MIB)
    assert manager.dir_health(d).state is DirState.FULL


def test_free_space_is_counted_from_writes_between_checks(manager, log_dirs, clock):
    io = manager.dir_io(log_dirs[0])
    _fill(manager, log_dirs[0], GIB // 2)
    assert io.usable_bytes == GIB // 2
    batch = kp_batch([b"x" * 1000])
    manager.get("t", 0).append(batch)
    manager.tick()  # the space check is not due yet
    assert io.usable_bytes <= GIB // 2 - len(batch)  # no statvfs asked: counted
    clock.advance(manager.space_check_interval_ms)
    manager.tick()
    assert io.usable_bytes == GIB // 2  # corrected by the periodic check


def test_the_default_reserve_is_1_percent_capped_at_1_gib(make_manager, log_dirs):
    fsio.fake_space(log_dirs[0], 10 * GIB, 5 * GIB)
    fsio.fake_space(log_dirs[1], 1000 * GIB, 500 * GIB)
    lm = make_manager()  # opening checks the space of every dir
    assert lm.dir_io(log_dirs[0]).reserved_bytes == 10 * GIB // 100
    assert lm.dir_io(log_dirs[1]).reserved_bytes == GIB
    lm.close()
    explicit = make_manager(reserved_bytes=0)
    assert explicit.dir_io(log_dirs[1]).reserved_bytes == 0


def test_every_writer_honours_the_reserve(manager, log_dirs):
    # Appends from clients and from a future log catching up (a move into the dir), and the mover's segment copy.
    full = log_dirs[2]
    _fill(manager, full, 5 * MIB)
    source = manager.get("t", 0)
    with pytest.raises(LogDirFullError):
        manager.get("t", 2).append(kp_batch([b"x"]))
    future = manager.create_future_log("t", 0, full)
    with pytest.raises(LogDirFullError):
        future.append_as_follower(source.read_bytes(0, 1 << 20))
    dst = manager.dir_io(full).open(os.path.join(full, "copy-target"), os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(LogDirFullError):
            source.active_segment.fh.copy_to(dst, 0, source.active_segment.size)
    finally:
        dst.close()
    assert future.log_end_offset == 0


def test_space_returning_brings_the_dir_back_without_a_restart(manager, log_dirs, clock):
    d = log_dirs[1]
    plog = manager.get("t", 1)
    _fill(manager, d)
    with pytest.raises(LogDirFullError):
        plog.append(kp_batch([b"x"]))
    with capture_logs() as logs:
        fsio.fake_space(d, GIB, 11 * MIB)  # above the reserve again
        manager.tick()
        assert manager.dir_health(d).state is DirState.FULL  # until the next periodic check
        clock.advance(manager.space_check_interval_ms)
        manager.tick()
    assert manager.dir_health(d).state is DirState.ONLINE
    assert len(_events(logs, "log_dir_space_returned")) == 1
    assert plog.append(kp_batch([b"back"])).base_offset == 1


def test_usage_warnings_once_per_crossing(manager, log_dirs):
    d = log_dirs[0]
    with capture_logs() as logs:
        for used_pct in (50, 85, 86, 92, 96, 97, 60, 81):
            _fill(manager, d, GIB - GIB * used_pct // 100)
    crossed = [e["crossed_percent"] for e in _events(logs, "log_dir_usage_high") if e["log_dir"] == d]
    assert crossed == [80, 90, 95, 80]


@pytest.mark.parametrize("policy", [MOST_USABLE, FEWEST_PARTITIONS])
def test_placement_never_picks_a_full_dir(make_manager, log_dirs, policy):
    lm = make_manager(placement_policy=policy, reserved_bytes=MIB)
    for d in log_dirs:
        fsio.fake_space(d, GIB, GIB // 2)
    # The full dir has the most usable bytes and the fewest partitions: each policy would pick it.
    fsio.fake_space(log_dirs[0], 100 * GIB, MIB)
    lm.create_partition("busy", 0, None, dir=log_dirs[1])
    lm.create_partition("busy", 1, None, dir=log_dirs[2])
    lm.tick()
    placed = [lm.create_partition("new", p, None).log_dir for p in range(6)]
    assert log_dirs[0] not in placed and set(placed) == {log_dirs[1], log_dirs[2]}
    for d in log_dirs[1:]:
        fsio.fake_space(d, GIB, 0)
    with pytest.raises(KafkaStorageError, match="full"):
        lm.create_partition("none", 0, None)


def test_reads_moves_off_retention_and_deletes_work_on_a_full_dir(make_manager, log_dirs, clock):
    lm = make_manager(reserved_bytes=MIB)
    full = log_dirs[0]
    plog = lm.create_partition("m", 0, TOPIC_ID, dir=full)
    for i in range(20):
        plog.append(kp_batch([b"%03d" % i + b"." * 200]))
    lm.create_partition("gone", 0, TOPIC_ID, dir=full)
    _fill(lm, full)
    # A KIP-113 move off it: the future log in another dir catches up and is swapped in.
    future = lm.create_future_log("m", 0, log_dirs[1])
    future.append_as_follower(plog.read_bytes(0, 1 << 20))
    moved = lm.replace_current_with_future("m", 0)
    assert moved.log_dir == log_dirs[1] and moved.log_end_offset == 20
    assert moved.append(kp_batch([b"on the new dir"])).base_offset == 20
    lm.delete_partition("gone", 0)
    # Retention on a full dir deletes.
    keep = lm.create_partition("r", 0, TOPIC_ID, LogConfig(segment_bytes=2000, retention_ms=1000), dir=log_dirs[2])
    for _ in range(20):
        keep.append(kp_batch([b"x" * 200], timestamp=clock.now))
    lm.dir_io(log_dirs[2]).full = True  # as if ENOSPC had been seen
    clock.advance(10_000)
    assert lm.run_retention() > 0
    clock.advance(120_000)
    lm.tick()
    assert not any(n.startswith("gone-0") for n in os.listdir(full))


def test_a_torn_tail_on_a_full_dir_is_truncated_in_place(make_manager, log_dirs):
    lm = make_manager()
    plog = lm.create_partition("torn", 0, TOPIC_ID, dir=log_dirs[1])
    for i in range(5):
        plog.append(kp_batch([b"r%d" % i]))
    plog.flush()
    tail = plog.active_segment.log_path
    lm._release_everything()  # a crash: no close, no clean-shutdown marker
    with open(tail, "ab") as f:
        f.write(b"\x00" * 7 + b"\x07garbage")
    fsio.fake_space(log_dirs[1], GIB, 0)
    fsio.inject(log_dirs[1], errno.ENOSPC, ops={"copy"})
    with capture_logs() as logs:
        again = make_manager()
    loaded = again.get("torn", 0)
    assert loaded.log_end_offset == 5 and loaded.load_stats.truncated_bytes == 15
    assert again.dir_health(log_dirs[1]).state is DirState.FULL
    dropped = _events(logs, "corrupt_log_tail_dropped_no_space")
    assert dropped and dropped[0]["dropped_to"] - dropped[0]["dropped_from"] == 15
    assert not [n for n in os.listdir(loaded.dir) if n.endswith(".corrupt")]


def test_a_creation_failing_on_a_full_dir_leaves_no_half_made_dir(make_manager, log_dirs):
    lm = make_manager(placement_policy=FEWEST_PARTITIONS)
    lm.create_partition("t", 0, TOPIC_ID, dir=log_dirs[0])
    lm.create_partition("t", 1, TOPIC_ID, dir=log_dirs[1])
    fsio.inject(log_dirs[2], errno.ENOSPC, ops={"open"}, count=1)  # partition.metadata's temp file
    with pytest.raises(LogDirFullError):
        lm.create_partition("asked-for", 0, TOPIC_ID, dir=log_dirs[2])  # a dir named by the caller: refused
    assert not any(n.startswith("asked-for") for n in os.listdir(log_dirs[2]))
    # Placed by the policy in a dir that turns out full: placed again elsewhere, nothing left behind.
    fsio.inject(log_dirs[2], errno.ENOSPC, ops={"open"}, count=2)
    with capture_logs() as logs:
        plog = lm.create_partition("newonfull", 0, TOPIC_ID)
    assert plog.log_dir != log_dirs[2] and _events(logs, "partition_placed_again")
    assert not any(n.startswith("newonfull") for n in os.listdir(log_dirs[2]))


def test_half_made_debris_is_stray_at_start_not_a_second_copy(make_manager, log_dirs):
    lm = make_manager()
    lm.create_partition("newonfull", 0, TOPIC_ID, dir=log_dirs[0]).append(kp_batch([b"real"]))
    lm.close()
    debris = os.path.join(log_dirs[2], "newonfull-0")
    os.mkdir(debris)
    with open(os.path.join(debris, "partition.metadata"), "w") as f:
        f.write(f"version: 0\ntopic_id: {TOPIC_ID}\n")
    with capture_logs() as logs:
        again = make_manager()
    assert again.get("newonfull", 0).log_dir == log_dirs[0]
    assert [v for _, v, _ in kp_records(again.get("newonfull", 0).read_bytes(0, 1 << 20))] == [b"real"]
    assert not os.path.exists(debris)
    assert [os.path.basename(s).endswith("-stray") for s in again.stray_dirs()] == [True]
    assert _events(logs, "half_made_partition_dir_set_aside")


def test_two_real_logs_still_refuse_to_start_and_say_what_each_holds(make_manager, log_dirs):
    lm = make_manager()
    lm.create_partition("dup", 0, TOPIC_ID, dir=log_dirs[0]).append(kp_batch([b"a", b"b"]))
    lm.create_partition("dup2", 0, TOPIC_ID, dir=log_dirs[1])
    lm.close()
    os.rename(os.path.join(log_dirs[1], "dup2-0"), os.path.join(log_dirs[1], "dup-0"))
    with pytest.raises(DuplicateLogError) as e:
        make_manager()
    msg = str(e.value)
    assert log_dirs[0] in msg and log_dirs[1] in msg
    assert "offsets 0 to 2" in msg and "offsets 0 to 0" in msg


def test_a_dir_with_no_room_at_all_still_loads_and_a_load_failure_is_never_an_empty_dir(make_manager, log_dirs):
    # Every write refused (ENOSPC) at the restart after a crash: recovery keeps index entries in memory.
    lm = make_manager(config=LogConfig(segment_bytes=3000))
    plog = lm.create_partition("norm", 0, TOPIC_ID, dir=log_dirs[1])
    for i in range(40):
        plog.append(kp_batch([b"%02d" % i * 30]))
    lm._release_everything()
    fsio.fake_space(log_dirs[1], GIB, 0)
    fsio.inject(log_dirs[1], errno.ENOSPC, ops={"write", "copy"})
    again = make_manager(config=LogConfig(segment_bytes=3000))
    loaded = again.get("norm", 0)
    assert loaded.log_end_offset == 40 and len(loaded.segments) >= 2
    assert [o for o, _, _ in kp_records(loaded.read_bytes(0, 1 << 20))] == list(range(40))
    assert loaded.offset_for_timestamp(0) is not None
    again.close()
    fsio.clear()
    # A load that fails all the same takes the dir offline: its partitions are not served as if it were empty.
    fsio.inject(log_dirs[1], errno.ENOSPC, ops={"listdir"})
    third = make_manager(config=LogConfig(segment_bytes=3000))
    assert log_dirs[1] in third.offline_dirs and third.find("norm", 0) is None
