"""The LogManager: startup checks, locking, dir naming, clean shutdown, checkpoints, deletion, future logs."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from kjbod.storage.config import LogConfig
from kjbod.storage.errors import (
    DuplicateLogError,
    InvalidTopicError,
    LogDirLockedError,
    TopicAlreadyExistsError,
    UnformattedDirError,
    UnknownTopicOrPartitionError,
)
from kjbod.storage.fsio import LogDirIO
from kjbod.storage.manager import LogManager, parse_partition_dir_name, suffixed_dir_name
from kjbod.storage.meta import read_meta_properties
from tests.storage.conftest import T0, kp_batch, kp_records

TOPIC_ID = "3uI2M2AbQVO0J2cYw2xvOA"


def test_dir_names_parse_like_kafka():
    assert parse_partition_dir_name("my-topic-3") == ("my-topic", 3, None)
    assert parse_partition_dir_name("a.b-12") == ("a.b", 12, None)
    hexid = "0123456789abcdef0123456789abcdef"
    assert parse_partition_dir_name(f"my-topic-3.{hexid}-future") == ("my-topic", 3, "-future")
    assert parse_partition_dir_name(f"t-0.{hexid}-delete") == ("t", 0, "-delete")
    assert parse_partition_dir_name(f"t-0.{hexid}-stray") == ("t", 0, "-stray")
    assert parse_partition_dir_name("nodash") is None and parse_partition_dir_name("t-x") is None
    name = suffixed_dir_name("t" * 249, 7, "-delete")
    assert len(name) == 255 and name.endswith("-delete") and parse_partition_dir_name(name)[1] == 7


def test_unformatted_dir_is_refused_with_a_hint(tmp_path):
    lm = LogManager([str(tmp_path / "fresh")], node_id=1)
    with pytest.raises(UnformattedDirError, match="kjbod format"):
        lm.open()


def test_two_managers_cannot_share_a_dir(make_manager, log_dirs):
    make_manager()
    with pytest.raises(LogDirLockedError, match=r"\.lock"):
        make_manager()


def test_another_process_cannot_take_the_lock(make_manager, log_dirs):
    make_manager()
    probe = (
        "import fcntl, os, sys\n"
        f"fd = os.open({os.path.join(log_dirs[0], '.lock')!r}, os.O_RDWR)\n"
        "try:\n    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept OSError:\n    sys.exit(3)\n"
    )
    assert subprocess.run([sys.executable, "-c", probe]).returncode == 3


def test_lock_is_released_on_close(make_manager):
    make_manager().close()
    make_manager()


def test_clean_shutdown_marker_and_checkpoints(make_manager, log_dirs):
    lm = make_manager()
    a = lm.create_partition("alpha", 0, TOPIC_ID, dir=log_dirs[0])
    b = lm.create_partition("alpha", 1, TOPIC_ID, dir=log_dirs[0])
    a.append(kp_batch([b"x", b"y"]))
    b.append(kp_batch([b"z"]))
    lm.close(broker_epoch=17)
    d = Path(log_dirs[0])
    assert (d / ".kafka_cleanshutdown").read_text() == '{"version":0,"brokerEpoch":17}'
    assert (d / "recovery-point-offset-checkpoint").read_text() == "0\n2\nalpha 0 2\nalpha 1 1\n"
    assert (d / "replication-offset-checkpoint").read_text() == "0\n2\nalpha 0 2\nalpha 1 1\n"
    assert (d / "log-start-offset-checkpoint").read_text() == "0\n0\n"
    assert (d / "alpha-0" / "partition.metadata").read_text() == f"version: 0\ntopic_id: {TOPIC_ID}"
    assert not (Path(log_dirs[1]) / "recovery-point-offset-checkpoint").read_text().count("alpha")
    lm2 = make_manager()
    assert lm2.had_clean_shutdown(log_dirs[0])
    assert not (d / ".kafka_cleanshutdown").exists()  # a crash from now on is unclean
    assert lm2.get("alpha", 0).log_end_offset == 2
    assert sum(p.load_stats.recovered_segments for p in lm2.partitions()) == 0


def test_the_previous_broker_epoch_comes_from_every_dirs_clean_shutdown_marker(make_manager, log_dirs):
    """KIP-966: what the broker sends as PreviousBrokerEpoch (Kafka's readBrokerEpochFromCleanShutdownFiles)."""
    lm = make_manager()
    lm.close(broker_epoch=17)
    lm = make_manager()
    assert lm.clean_shutdown_broker_epoch() == 17  # read at open, though the markers are gone now
    lm.close(broker_epoch=23)
    (Path(log_dirs[1]) / ".kafka_cleanshutdown").unlink()  # one dir without a marker: a crash, as far as it knows
    assert make_manager().clean_shutdown_broker_epoch() == -1


def test_log_start_offset_checkpoint_and_reopen(make_manager, log_dirs):
    lm = make_manager(config=LogConfig(segment_bytes=300))
    log = lm.create_partition("lso", 0, TOPIC_ID, dir=log_dirs[1])
    for i in range(20):
        log.append(kp_batch([b"v%02d" % i]))
    log.advance_log_start_offset(7)
    lm.checkpoint()
    text = Path(log_dirs[1], "log-start-offset-checkpoint").read_text()
    assert text == "0\n1\nlso 0 7\n"
    lm.close()
    log2 = make_manager(config=LogConfig(segment_bytes=300)).get("lso", 0)
    assert (log2.log_start_offset, log2.log_end_offset) == (7, 20)
    assert [o for o, _, _ in kp_records(log2.read_bytes(7, 1 << 20))][0] == 7


def test_special_dirs_at_open(make_manager, log_dirs):
    d = Path(log_dirs[0])
    hexid = "0123456789abcdef0123456789abcdef"
    lm = make_manager()
    lm.create_partition("keep", 0, TOPIC_ID, dir=log_dirs[0]).append(kp_batch([b"a"]))
    lm.close()
    (d / f"gone-0.{hexid}-delete").mkdir()
    (d / f"gone-0.{hexid}-delete" / "00000000000000000000.log").write_bytes(b"x")
    (d / f"lost-2.{hexid}-stray").mkdir()
    (d / "__cluster_metadata-0").mkdir()
    (d / "not a partition").mkdir()
    future = LogDirIO(log_dirs[0])
    from kjbod.storage.log import PartitionLog

    PartitionLog.create(future, future.join(f"moving-1.{hexid}-future"), "moving", 1, TOPIC_ID, LogConfig()).close()
    with capture_logs() as logs:
        lm2 = make_manager()
    assert not (d / f"gone-0.{hexid}-delete").exists()
    assert lm2.stray_dirs() == [str(d / f"lost-2.{hexid}-stray")]
    assert (d / f"lost-2.{hexid}-stray").exists() and (d / "__cluster_metadata-0").exists()
    [fut] = lm2.future_logs()
    assert (fut.topic, fut.partition, fut.is_future) == ("moving", 1, True)
    assert lm2.get_future("moving", 1) is fut and lm2.find("moving", 1) is None
    assert any(e["event"] == "unknown_dir_in_log_dir" for e in logs)
    assert [p.name for p in lm2.partitions()] == ["keep-0"]


def test_duplicate_current_logs_refuse_startup(make_manager, log_dirs):
    lm = make_manager()
    lm.create_partition("dup", 0, TOPIC_ID, dir=log_dirs[0])
    lm.close()
    import shutil

    shutil.copytree(Path(log_dirs[0], "dup-0"), Path(log_dirs[2], "dup-0"))
    with pytest.raises(DuplicateLogError, match="dup-0") as e:
        make_manager()
    assert log_dirs[0] in str(e.value) and log_dirs[2] in str(e.value)
    # The failed open released its locks: fixing the dirs makes the next open work.
    shutil.rmtree(Path(log_dirs[2], "dup-0"))
    make_manager()


def test_create_errors(make_manager):
    lm = make_manager()
    lm.create_partition("t", 0, None)
    with pytest.raises(TopicAlreadyExistsError) as e:
        lm.create_partition("t", 0, None)
    assert e.value.error_code == 36
    for bad in ("", "..", "has space", "x" * 250, "slash/y"):
        with pytest.raises(InvalidTopicError):
            lm.create_partition(bad, 0, None)
    with pytest.raises(UnknownTopicOrPartitionError) as e:
        lm.get("t", 9)
    assert e.value.error_code == 3


def test_dirs_report_ids_and_sizes(make_manager, log_dirs):
    lm = make_manager()
    infos = {i.path: i for i in lm.dirs}
    assert list(infos) == log_dirs
    for path, info in infos.items():
        assert info.online and info.total_bytes > 0 and 0 <= info.usable_bytes <= info.total_bytes
        assert info.directory_id == read_meta_properties(LogDirIO(path)).directory_id
    assert set(lm.directory_ids()) == {i.directory_id for i in infos.values()}


def test_delete_partition_renames_then_removes_after_the_delay(make_manager, log_dirs, clock):
    lm = make_manager(config=LogConfig(file_delete_delay_ms=1000))
    log = lm.create_partition("del", 0, TOPIC_ID, dir=log_dirs[0])
    log.append(kp_batch([b"a"]))
    lm.delete_partition("del", 0)
    names = os.listdir(log_dirs[0])
    [renamed] = [n for n in names if n.startswith("del-0.")]
    assert parse_partition_dir_name(renamed) == ("del", 0, "-delete")
    assert "del-0" not in names and lm.find("del", 0) is None
    with pytest.raises(UnknownTopicOrPartitionError):
        log.append(kp_batch([b"b"]))
    assert "del" not in Path(log_dirs[0], "recovery-point-offset-checkpoint").read_text()
    lm.tick(clock.now + 999)
    assert Path(log_dirs[0], renamed).exists()
    lm.tick(clock.now + 1000)
    assert not Path(log_dirs[0], renamed).exists()
    lm.create_partition("del", 0, TOPIC_ID)  # the name is free again


def test_mark_stray_renames_and_keeps_the_log_and_its_future(make_manager, log_dirs, clock):
    lm = make_manager(config=LogConfig(file_delete_delay_ms=1000))
    log = lm.create_partition("gone", 0, TOPIC_ID, dir=log_dirs[0])
    log.append(kp_batch([b"kept"]))
    lm.create_future_log("gone", 0, log_dirs[1])
    renamed = lm.mark_stray("gone", 0)
    assert sorted(parse_partition_dir_name(os.path.basename(p)) for p in renamed) == [("gone", 0, "-stray")] * 2
    assert {os.path.dirname(p) for p in renamed} == set(log_dirs[:2])
    assert lm.find("gone", 0) is None and lm.get_future("gone", 0) is None
    with pytest.raises(UnknownTopicOrPartitionError):
        log.append(kp_batch([b"b"]))
    assert sorted(lm.stray_dirs()) == sorted(renamed)
    lm.tick(clock.now + 10_000)  # unlike -delete, nothing removes a stray
    current = next(p for p in renamed if os.path.dirname(p) == log_dirs[0])
    assert kp_records(Path(current, "00000000000000000000.log").read_bytes())[0][1] == b"kept"
    lm.create_partition("gone", 0, TOPIC_ID)  # the name is free again
    with pytest.raises(UnknownTopicOrPartitionError):
        lm.mark_stray("never", 0)
    lm.close()
    again = make_manager()
    assert sorted(again.stray_dirs()) == sorted(renamed) and again.find("gone", 0) is not None


def test_tick_flushes_rolled_segments_and_writes_checkpoints(make_manager, log_dirs, clock):
    lm = make_manager(config=LogConfig(segment_bytes=400), checkpoint_interval_ms=60_000)
    log = lm.create_partition("roll", 0, TOPIC_ID, dir=log_dirs[0])
    for i in range(20):
        log.append(kp_batch([b"v%02d" % i]))
    assert len(log.segments) > 2 and log.recovery_point == 0
    lm.tick(clock.now)
    assert log.recovery_point == log.active_segment.base_offset
    assert not Path(log_dirs[0], "recovery-point-offset-checkpoint").exists()  # not due yet
    lm.tick(clock.now + 60_000)
    assert f"roll 0 {log.recovery_point}" in Path(log_dirs[0], "recovery-point-offset-checkpoint").read_text()


def test_tick_runs_retention_on_its_interval(make_manager, clock):
    lm = make_manager(config=LogConfig(segment_bytes=300, retention_ms=1000), retention_check_interval_ms=5000)
    log = lm.create_partition("ret", 0, TOPIC_ID)
    for i in range(10):
        log.append(kp_batch([b"v%02d" % i], timestamp=T0))
    segs = len(log.segments)
    lm.tick(T0 + 4999)
    assert len(log.segments) == segs
    lm.tick(T0 + 5000)
    assert log.log_start_offset > 0 and len(log.segments) < segs


def _fill_over_retention_bytes(lm: LogManager, name: str) -> object:
    log = lm.create_partition(name, 0, TOPIC_ID)
    for i in range(10):
        log.append(kp_batch([b"v%02d" % i]))
    return log


def test_first_retention_pass_comes_after_the_initial_delay_counted_from_start(make_manager, clock):
    # Kafka's defaults: a 300 s interval, a 30 s initial delay. The first pass is 30 s after the manager opened,
    # not 300 s, and not counted from some earlier run: a node restarted every few minutes still applies retention.
    lm = make_manager(config=LogConfig(segment_bytes=300, retention_bytes=300))
    assert (lm.retention_check_interval_ms, lm.initial_task_delay_ms) == (300_000, 30_000)
    log = _fill_over_retention_bytes(lm, "first")
    segs = len(log.segments)
    lm.tick(T0 + 29_999)
    assert len(log.segments) == segs
    lm.tick(T0 + 30_000)
    assert log.log_start_offset > 0 and len(log.segments) < segs
    for i in range(10):
        log.append(kp_batch([b"w%02d" % i]))
    segs = len(log.segments)
    lm.tick(T0 + 30_000 + 299_999)
    assert len(log.segments) == segs
    lm.tick(T0 + 30_000 + 300_000)
    assert len(log.segments) < segs


def test_a_short_retention_interval_also_shortens_the_first_pass(make_manager, clock):
    lm = make_manager(config=LogConfig(segment_bytes=300, retention_bytes=300), retention_check_interval_ms=1000)
    log = _fill_over_retention_bytes(lm, "short")
    segs = len(log.segments)
    lm.tick(T0 + 999)
    assert len(log.segments) == segs
    lm.tick(T0 + 1000)
    assert len(log.segments) < segs


def test_retention_runs_in_every_short_life_of_a_restarted_manager(make_manager, clock):
    # Restarted every 3 s with a 1 s check interval: every life applies retention once it is 1 s old.
    lm = make_manager(config=LogConfig(segment_bytes=300, retention_bytes=300), retention_check_interval_ms=1000)
    log = _fill_over_retention_bytes(lm, "restarted")
    lm.close()
    for life in range(3):
        lm = make_manager(config=LogConfig(segment_bytes=300, retention_bytes=300), retention_check_interval_ms=1000)
        log = lm.get("restarted", 0)
        for i in range(10):
            log.append(kp_batch([b"l%d-%02d" % (life, i)]))
        before = log.log_start_offset
        lm.tick(clock.now + 999)
        assert log.log_start_offset == before
        lm.tick(clock.now + 1000)
        assert log.log_start_offset > before and log.size_bytes <= 300 + log.active_segment.size
        clock.advance(3000)
        lm.close()


def test_checkpoints_follow_their_interval(make_manager, log_dirs, clock):
    lm = make_manager(config=LogConfig(segment_bytes=300), checkpoint_interval_ms=2000)
    log = lm.create_partition("cp", 0, TOPIC_ID, dir=log_dirs[0])
    recovery = Path(log_dirs[0], "recovery-point-offset-checkpoint")
    for round_ in range(3):
        for i in range(10):
            log.append(kp_batch([b"c%d-%02d" % (round_, i)]))
        lm.tick(clock.now + 1999)  # flushes the rolled segments; the checkpoint is not due yet
        expected = f"cp 0 {log.recovery_point}"
        assert not recovery.exists() or expected not in recovery.read_text()
        lm.tick(clock.now + 2000)
        assert expected in recovery.read_text()
        clock.advance(2000)


def test_a_checkpoint_interval_of_0_checkpoints_once(make_manager, log_dirs, clock):
    # Kafka's scheduler runs a task with a period of 0 once, after the initial delay.
    lm = make_manager(checkpoint_interval_ms=0, hw_checkpoint_interval_ms=10**9, initial_task_delay_ms=500)
    lm.create_partition("once", 0, TOPIC_ID, dir=log_dirs[0])
    recovery = Path(log_dirs[0], "recovery-point-offset-checkpoint")
    recovery.unlink(missing_ok=True)  # written when the partition was created
    lm.tick(T0 + 499)
    assert not recovery.exists()
    lm.tick(T0 + 500)
    assert recovery.exists()
    recovery.unlink()
    lm.tick(T0 + 10**8)
    assert not recovery.exists()


def test_background_thread_ticks(make_manager):
    lm = make_manager(config=LogConfig(segment_bytes=300), clock=lambda: int(time.time() * 1000))
    log = lm.create_partition("bg", 0, TOPIC_ID)
    for i in range(10):
        log.append(kp_batch([b"v%02d" % i]))
    lm.start_background(interval_s=0.01)
    deadline = time.monotonic() + 10
    while log.recovery_point == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    lm.stop_background()
    assert log.recovery_point == log.active_segment.base_offset > 0


def test_appends_race_background_flushes(make_manager):
    lm = make_manager(config=LogConfig(segment_bytes=2000, flush_interval_ms=0))
    log = lm.create_partition("race", 0, TOPIC_ID)
    stop = threading.Event()

    def flusher():
        while not stop.is_set():
            lm.tick()

    t = threading.Thread(target=flusher)
    t.start()
    try:
        for i in range(300):
            log.append(kp_batch([b"r%03d" % i]))
    finally:
        stop.set()
        t.join()
    assert [o for o, _, _ in kp_records(log.read_bytes(0, 1 << 30))] == list(range(300))


def test_future_log_move_and_swap(make_manager, log_dirs, clock):
    lm = make_manager(config=LogConfig(segment_bytes=500, file_delete_delay_ms=0))
    cur = lm.create_partition("mv", 0, TOPIC_ID, dir=log_dirs[0])
    for i in range(30):
        cur.append(kp_batch([b"m%02d" % i]))
    fut = lm.create_future_log("mv", 0, log_dirs[2])
    assert parse_partition_dir_name(os.path.basename(fut.dir))[2] == "-future"
    # Copy closed segments with sendfile, then catch up through reads (what the mover will do).
    for f in cur.segment_files():
        if f.path.endswith(".log"):
            src = cur.active_segment.io.open(f.path, os.O_RDONLY)
            try:
                seg_chunk = src.pread(f.size, 0)
            finally:
                src.close()
            fut.append_as_follower(seg_chunk)
    while fut.log_end_offset < cur.log_end_offset:
        fut.append_as_follower(cur.read_bytes(fut.log_end_offset, 1 << 20))
    assert fut.read_bytes(0, 1 << 30) == cur.read_bytes(0, 1 << 30)
    assert [i.path for i in lm.dirs]  # still describable mid-move
    assert {p.log_dir for p in lm.logs_in_dir(log_dirs[2])} == {log_dirs[2]}
    new = lm.replace_current_with_future("mv", 0)
    assert new.log_dir == log_dirs[2] and os.path.basename(new.dir) == "mv-0" and not new.is_future
    assert lm.get("mv", 0) is new and lm.get_future("mv", 0) is None
    assert new.append(kp_batch([b"after"])).base_offset == 30
    lm.tick(clock.now)
    assert not any(n.startswith("mv-0") for n in os.listdir(log_dirs[0]))
    lm.close()
    again = make_manager(config=LogConfig(segment_bytes=500)).get("mv", 0)
    assert again.log_dir == log_dirs[2] and again.log_end_offset == 31


def test_copy_to_uses_the_seam(tmp_path):
    a, b = LogDirIO(str(tmp_path / "a")), LogDirIO(str(tmp_path / "b"))
    for io in (a, b):
        io.mkdir(io.path)
    src = a.open(a.join("f"), os.O_RDWR | os.O_CREAT)
    src.write(b"0123456789" * 1000)
    dst = b.open(b.join("g"), os.O_WRONLY | os.O_CREAT)
    assert src.copy_to(dst, 5, 20_000, chunk=1000) == 9995
    src.close()
    dst.close()
    assert Path(b.join("g")).read_bytes() == (b"0123456789" * 1000)[5:]


def test_a_future_log_swapped_in_or_promoted_has_the_epochs_of_its_batches(make_manager, log_dirs):
    """A future log's closed segments are copied as files (no appends to note their epochs): swapped in, it takes
    the current log's epochs; promoted at startup (the current log gone), it rebuilds them from its batches."""
    import shutil

    from kjbod.storage.epoch_cache import LEADER_EPOCH_CHECKPOINT
    from kjbod.storage.manager import FUTURE_DIR_SUFFIX

    lm = make_manager()

    def copied_future(name: str) -> str:
        """A -future dir in dir 1 holding copies of the current log's files, as the mover leaves it."""
        cur = lm.create_partition(name, 0, TOPIC_ID, dir=log_dirs[0])
        cur.auto_high_watermark = False  # a replica's log
        cur.append(kp_batch([b"a"]), leader_epoch=1)
        cur.append(kp_batch([b"b", b"c"]), leader_epoch=4)
        cur.flush()
        path = os.path.join(log_dirs[1], suffixed_dir_name(name, 0, FUTURE_DIR_SUFFIX))
        os.mkdir(path)
        for f in cur.segment_files(include_active=True):
            shutil.copy(f.path, path)
        return path

    future = lm.open_future_log("sw", 0, copied_future("sw"))
    assert future.leader_epochs.entries == []  # its copy has none (nothing was appended to it)
    swapped = lm.replace_current_with_future("sw", 0)
    assert swapped.leader_epochs.entries == [(1, 0), (4, 1)]
    assert Path(swapped.dir, LEADER_EPOCH_CHECKPOINT).read_text() == "0\n2\n1 0\n4 1\n"

    lm.open_future_log("pr", 0, copied_future("pr"))
    current_dir = lm.get("pr", 0).dir
    lm.close()
    shutil.rmtree(current_dir)  # the current log gone (a crash between the swap's two renames)
    restarted = make_manager()
    assert restarted.get_future("pr", 0).leader_epochs.entries == []
    promoted = restarted.promote_future_log("pr", 0)
    assert promoted.leader_epochs.entries == [(1, 0), (4, 1)]
    assert Path(promoted.dir, LEADER_EPOCH_CHECKPOINT).read_text() == "0\n2\n1 0\n4 1\n"
