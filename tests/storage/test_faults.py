"""The fsio seam: a failing dir goes offline alone, its partitions fail fast, the others keep serving.

Faults are injected through the seam itself (in-process rules, or the KJBOD_FAULTS control file for a
subprocess); test_realdisk.py checks the same behaviour against real kernel errors.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from kjbod.storage import fsio
from kjbod.storage.config import LogConfig
from kjbod.storage.errors import KafkaStorageError
from kjbod.storage.fsio import FaultInjector, LogDirIO
from tests.storage.conftest import kp_batch, kp_records

TOPIC_ID = "3uI2M2AbQVO0J2cYw2xvOA"


@pytest.fixture
def offline_events():
    return {"dirs": [], "all": 0}


@pytest.fixture
def manager(make_manager, log_dirs, offline_events):
    lm = make_manager(
        on_dir_offline=offline_events["dirs"].append,
        on_all_dirs_offline=lambda: offline_events.__setitem__("all", offline_events["all"] + 1),
    )
    for i, d in enumerate(log_dirs):
        lm.create_partition("t", i, TOPIC_ID, dir=d).append(kp_batch([b"before"]))
    return lm


def test_faults_are_off_by_default():
    assert FaultInjector().active is False
    assert fsio.FAULTS.active is False or os.environ.get(fsio.FAULTS_ENV)


def test_rules_match_dir_prefix_ops_and_count(tmp_path):
    inj = FaultInjector()
    inj.inject(str(tmp_path / "a"), errno.EIO, ops={"write"}, count=2)
    inj.check("write", str(tmp_path / "ab" / "f"))  # a sibling with the same prefix is not hit
    inj.check("read", str(tmp_path / "a" / "f"))
    for _ in range(2):
        with pytest.raises(OSError) as e:
            inj.check("write", str(tmp_path / "a" / "f"))
        assert e.value.errno == errno.EIO
    inj.check("write", str(tmp_path / "a" / "f"))  # used up
    with pytest.raises(ValueError):
        inj.inject(str(tmp_path), ops={"levitate"})


def test_eio_on_one_dir(manager, log_dirs, offline_events):
    bad, good = log_dirs[1], log_dirs[0]
    fsio.inject(bad, errno.EIO, count=1)
    with capture_logs() as logs:
        with pytest.raises(KafkaStorageError) as e:
            manager.get("t", 1).append(kp_batch([b"x"]))
        assert e.value.error_code == 56 and e.value.log_dir == bad
        # The one-shot rule is used up, yet the dir stays offline: later calls fail without touching the disk.
        for call in (
            lambda: manager.get("t", 1).append(kp_batch([b"y"])),
            lambda: manager.get("t", 1).read(0, 100),
            lambda: manager.get("t", 1).flush(),
            lambda: manager.get("t", 1).offset_for_timestamp(0),
            lambda: manager.create_partition("new", 0, None, dir=bad),
        ):
            with pytest.raises(KafkaStorageError):
                call()
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["log_dir_offline"]
    assert offline_events == {"dirs": [bad], "all": 0}
    good_log = manager.get("t", 0)
    assert good_log.append(kp_batch([b"still fine"])).base_offset == 1
    assert [v for _, v, _ in kp_records(good_log.read_bytes(0, 1 << 20))] == [b"before", b"still fine"]
    infos = {i.path: i for i in manager.dirs}
    assert not infos[bad].online and (infos[bad].total_bytes, infos[bad].usable_bytes) == (-1, -1)
    assert infos[good].online and infos[good].usable_bytes > 0
    assert bad not in manager.directory_ids().values()
    # New partitions avoid the offline dir.
    assert all(manager.create_partition("later", p, None).log_dir != bad for p in range(4))


def test_enospc_on_append(manager, log_dirs):
    # A full dir is not a failed one (tests/storage/test_full_dir.py has the rest): refused, still online.
    fsio.inject(log_dirs[2], errno.ENOSPC, ops={"write"}, count=1)
    with pytest.raises(KafkaStorageError, match="No space left"):
        manager.get("t", 2).append(kp_batch([b"x" * 100]))
    assert manager.get("t", 2).online
    assert manager.get("t", 1).append(kp_batch([b"ok"])).base_offset == 1


def test_fsync_failure_in_a_background_flush(make_manager, log_dirs, offline_events, clock):
    lm = make_manager(config=LogConfig(segment_bytes=300), on_dir_offline=offline_events["dirs"].append)
    log = lm.create_partition("f", 0, TOPIC_ID, dir=log_dirs[0])
    for i in range(10):
        log.append(kp_batch([b"v%d" % i]))
    fsio.inject(log_dirs[0], errno.EIO, ops={"fsync"})
    lm.tick(clock.now)  # must not raise: the failure is the dir's, reported through the callback
    assert offline_events["dirs"] == [log_dirs[0]]
    with pytest.raises(KafkaStorageError):
        log.append(kp_batch([b"x"]))


def test_all_dirs_offline_calls_back_once(manager, log_dirs, offline_events):
    for i, d in enumerate(log_dirs):
        fsio.inject(d, errno.EIO)
        with pytest.raises(KafkaStorageError):
            manager.get("t", i).append(kp_batch([b"x"]))
        assert offline_events["all"] == (1 if i == len(log_dirs) - 1 else 0)
    assert offline_events["dirs"] == log_dirs
    with pytest.raises(KafkaStorageError):
        manager.create_partition("none", 0, None)


def test_offline_dir_is_recovered_at_next_start(make_manager, manager, log_dirs):
    fsio.inject(log_dirs[1], errno.EIO, count=1)
    with pytest.raises(KafkaStorageError):
        manager.get("t", 1).append(kp_batch([b"x"]))
    manager.close()
    assert Path(log_dirs[0], ".kafka_cleanshutdown").exists()
    assert not Path(log_dirs[1], ".kafka_cleanshutdown").exists()
    lm = make_manager()
    assert lm.had_clean_shutdown(log_dirs[0]) and not lm.had_clean_shutdown(log_dirs[1])
    assert lm.get("t", 1).log_end_offset == 1 and lm.get("t", 1).load_stats.recovered_segments == 1


def test_dir_failing_during_open_is_left_offline(make_manager, log_dirs):
    lm = make_manager()
    lm.create_partition("t", 0, TOPIC_ID, dir=log_dirs[2]).append(kp_batch([b"a"]))
    lm.create_partition("t", 1, TOPIC_ID, dir=log_dirs[0]).append(kp_batch([b"a"]))
    lm.close()
    fsio.inject(log_dirs[2], errno.EIO, ops={"listdir"})
    lm2 = make_manager()
    assert [i.online for i in lm2.dirs] == [True, True, False]
    assert lm2.find("t", 0) is None and lm2.get("t", 1).log_end_offset == 1


def test_failed_read_does_not_leak_regions(manager, log_dirs):
    log = manager.get("t", 0)
    for i in range(5):
        log.append(kp_batch([b"r%d" % i]))
    before = len(os.listdir("/proc/self/fd"))
    fsio.inject(log_dirs[0], errno.EIO, ops={"dup"}, count=1)
    with pytest.raises(KafkaStorageError):
        log.read(0, 1 << 20)
    assert len(os.listdir("/proc/self/fd")) == before


# ---------------------------------------------------------------------------------------------- KJBOD_FAULTS


SERVER = textwrap.dedent(
    """
    import json, os, sys, time
    import structlog
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    sys.path.insert(0, {root!r})
    from kjbod.storage import LogManager, KafkaStorageError
    from tests.storage.conftest import kp_batch
    dirs = {dirs!r}
    lm = LogManager(dirs, node_id=1)
    lm.open()
    logs = [lm.create_partition("env", i, None, dir=d) for i, d in enumerate(dirs)]
    def attempt():
        out = []
        for log in logs:
            try:
                log.append(kp_batch([b"x"]))
                out.append("ok")
            except KafkaStorageError as e:
                out.append(e.error_code)
        return out
    print(json.dumps(attempt()), flush=True)
    sys.stdin.readline()  # the test arms the fault file while this process runs
    print(json.dumps(attempt()), flush=True)
    lm.close()
    """
)


def test_fault_control_file_armed_while_a_server_runs(tmp_path, log_dirs):
    root = str(Path(__file__).resolve().parents[2])
    control = tmp_path / "faults.json"
    env = dict(os.environ, KJBOD_FAULTS=str(control))
    with subprocess.Popen(
        [sys.executable, "-c", SERVER.format(root=root, dirs=log_dirs)],
        cwd=root, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    ) as proc:
        try:
            assert json.loads(proc.stdout.readline()) == ["ok", "ok", "ok"]
            tmp = tmp_path / "faults.json.new"
            tmp.write_text(json.dumps({"faults": [{"dir": log_dirs[1], "errno": "ENOSPC", "ops": ["write"]}]}))
            os.replace(tmp, control)
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert json.loads(proc.stdout.readline()) == ["ok", 56, "ok"]
            assert proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()


def test_control_file_rules_reload_on_change(tmp_path):
    control = tmp_path / "faults.json"
    inj = FaultInjector(str(control))
    inj.check("write", "/x/y")  # missing file: no faults
    control.write_text(json.dumps([{"dir": "/x", "errno": 28, "count": 1}]))
    with pytest.raises(OSError) as e:
        inj.check("write", "/x/y")
    assert e.value.errno == errno.ENOSPC
    inj.check("write", "/x/y")  # count used up for this version of the file
    time.sleep(0.01)
    control.write_text(json.dumps({"faults": [{"dir": "/x", "errno": "EIO", "ops": ["fsync"]}]}))
    inj.check("write", "/x/y")
    with pytest.raises(OSError):
        inj.check("fsync", "/x/y")
    control.unlink()
    inj.check("fsync", "/x/y")


def test_seam_overhead_is_small_with_faults_off(tmp_path):
    """Faults off, a seam write costs little more than os.write (the fast path is one attribute test)."""
    io = LogDirIO(str(tmp_path))
    fh = io.open(io.join("f"), os.O_WRONLY | os.O_CREAT)
    raw_fd = os.open(str(tmp_path / "g"), os.O_WRONLY | os.O_CREAT)
    data = b"x" * 64
    n = 20_000

    def best(fn):
        times = []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(n):
                fn(data)
            times.append(time.perf_counter() - t)
        return min(times)

    try:
        seam = best(fh.write)
        raw = best(lambda d: os.write(raw_fd, d))
    finally:
        fh.close()
        os.close(raw_fd)
    assert seam < raw * 3 + 0.05, (seam, raw)


def test_a_vanished_dir_goes_offline_at_its_next_path_operation(make_manager, log_dirs, offline_events):
    """A pulled disk (the mount path gone): old fds keep working, the next create hits ENOENT for real."""
    lm = make_manager(config=LogConfig(segment_bytes=400), on_dir_offline=offline_events["dirs"].append)
    a = lm.create_partition("v", 0, TOPIC_ID, dir=log_dirs[0])
    b = lm.create_partition("v", 1, TOPIC_ID, dir=log_dirs[1])
    os.rename(log_dirs[1], log_dirs[1] + ".gone")
    try:
        with pytest.raises(KafkaStorageError) as e:
            for i in range(20):  # enough to roll, which creates files by path
                b.append(kp_batch([b"v%02d" % i]))
        assert isinstance(e.value.__cause__, FileNotFoundError)
        assert offline_events["dirs"] == [log_dirs[1]]
        assert a.append(kp_batch([b"ok"])).base_offset == 0
        written = b.log_end_offset
        assert written > 0
    finally:
        lm.close()
        os.rename(log_dirs[1] + ".gone", log_dirs[1])
    again = make_manager()
    assert not again.had_clean_shutdown(log_dirs[1]) and again.had_clean_shutdown(log_dirs[0])
    # Everything appended before the failure went through the old fd into the same inode: recovered intact.
    assert again.get("v", 1).log_end_offset == written


def test_running_out_of_fds_is_not_a_disk_failure(manager, log_dirs, offline_events):
    fsio.inject(log_dirs[0], errno.EMFILE, ops={"open"}, count=1)
    with pytest.raises(KafkaStorageError, match="Too many open files"):
        manager.create_partition("fds", 0, None, dir=log_dirs[0])
    assert offline_events["dirs"] == [] and manager.get("t", 0).online
    assert manager.get("t", 0).append(kp_batch([b"fine"])).base_offset == 1
