"""A slow or hung log dir, in process: the fsio seam delays or holds one dir's operations.

What these show: each dir's background work (flushes, retention, deletions, checkpoints) runs on its own thread
with its own checkpoint lock, so a hung dir stops only its own; the watchdog fails a dir whose operation has been
outstanding past ``log.dir.stall.timeout.ms`` once, as an I/O error would; a stuck call that returns afterwards
changes nothing; a slow dir is degraded (logged once a minute) and comes back. The watchdog is given a clock that
runs an hour ahead, so no test waits for a timeout or depends on how fast this machine is.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from structlog.testing import capture_logs

from kjbod.broker.handlers import describe_log_dirs
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import DescribeLogDirsRequest
from kjbod.storage import fsio
from kjbod.storage import manager as manager_module
from kjbod.storage.config import LogConfig
from kjbod.storage.errors import KafkaStorageError
from kjbod.storage.fsio import FaultInjector, LogDirIO
from kjbod.storage.health import DirState, DirWatchdog
from tests.storage.conftest import kp_batch, kp_records, region_bytes

TOPIC_ID = "3uI2M2AbQVO0J2cYw2xvOA"
AN_HOUR = 3600.0
PATIENCE_S = 120.0  # how long a test waits for another thread to reach a point; never reached when all is well


def _wait_for(what: str, cond) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.005)


def _held_in(io: LogDirIO, op: str) -> bool:
    oldest = io.oldest_outstanding()
    return oldest is not None and oldest[0] == op


def _ahead(watchdog: DirWatchdog, seconds: float) -> None:
    watchdog.clock = lambda: time.monotonic() + seconds


class _Blocked:
    """Runs ``fn`` on a thread of its own, which the test expects to block in the held dir."""

    def __init__(self, fn) -> None:
        self.result: object = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn) -> None:
        try:
            self.result = fn()
        except BaseException as e:  # handed to the test
            self.error = e

    def join(self) -> None:
        self.thread.join(PATIENCE_S)
        assert not self.thread.is_alive()


def test_delay_and_hold_rules(tmp_path):
    inj = FaultInjector()
    held = inj.slow(str(tmp_path / "a"), hold=True, ops={"write"})
    inj.check("read", str(tmp_path / "a" / "f"))  # another op is not held
    inj.check("write", str(tmp_path / "ab" / "f"))  # nor a sibling dir
    waiter = _Blocked(lambda: inj.check("write", str(tmp_path / "a" / "f")))
    assert not held.gate.wait(0) and waiter.thread.is_alive()
    inj.clear()  # clearing the rules lets what they hold go
    waiter.join()
    assert waiter.error is None
    inj.slow(str(tmp_path / "b"), delay_ms=1, ops={"fsync"})
    inj.inject(str(tmp_path / "b"), errno.EIO, ops={"fsync"})
    with pytest.raises(OSError):  # a slow rule delays, the errno rule still fails the op
        inj.check("fsync", str(tmp_path / "b" / "f"))
    with pytest.raises(ValueError, match="negative"):
        inj.slow(str(tmp_path), delay_ms=-1)


def test_healthy_dirs_work_while_another_dir_hangs(make_manager, log_dirs, clock):
    good, _, bad = log_dirs
    lm = make_manager(
        config=LogConfig(segment_bytes=400, file_delete_delay_ms=0),
        checkpoint_interval_ms=10, initial_task_delay_ms=0, stall_timeout_ms=0,
    )
    plog = lm.create_partition("good", 0, TOPIC_ID, dir=good)
    doomed = lm.create_partition("doomed", 0, TOPIC_ID, dir=good)
    stuck = lm.create_partition("bad", 0, TOPIC_ID, dir=bad)
    stuck.append(kp_batch([b"before"]))
    rule = fsio.slow(bad, hold=True)
    try:
        lm.start_background(interval_s=0.01)
        # The bad dir's own background thread is stuck in its checkpoint...
        _wait_for("the bad dir's thread to block", lambda: lm.dir_io(bad).oldest_outstanding() is not None)
        # ...while the good dir's checkpoint is written by its thread,
        _wait_for("the good dir's checkpoint", lambda: Path(good, "recovery-point-offset-checkpoint").exists())
        # and appends (with rolls), reads, flushes and a delete (which checkpoints its dir) go on there.
        for i in range(20):
            plog.append(kp_batch([b"v%02d" % i]))
        assert len(plog.segments) > 2
        plog.flush()
        assert plog.recovery_point == plog.log_end_offset
        assert [v for _, v, _ in kp_records(region_bytes(plog.read(0, 1 << 20)))][:2] == [b"v00", b"v01"]
        lm.delete_partition("doomed", 0)
        assert doomed.closed and lm.find("doomed", 0) is None
        _wait_for("the deleted dir to be removed in the background",
                  lambda: not [n for n in Path(good).iterdir() if n.name.startswith("doomed-0.")])
        assert lm.dir_io(bad).oldest_outstanding() is not None  # still stuck: nothing waited for it
    finally:
        rule.release()
    lm.stop_background()
    assert kp_records(region_bytes(stuck.read(0, 1 << 20)))[0][1] == b"before"  # slow, not failed


def test_a_stalled_dir_is_failed_once_and_a_late_return_changes_nothing(make_manager, log_dirs):
    good, _, bad = log_dirs
    offline: list[str] = []
    lm = make_manager(on_dir_offline=offline.append, stall_timeout_ms=30_000)
    ok = lm.create_partition("ok", 0, TOPIC_ID, dir=good)
    stuck = lm.create_partition("bad", 0, TOPIC_ID, dir=bad)
    stuck.append(kp_batch([b"acked"]))
    leo = stuck.log_end_offset
    rule = fsio.slow(bad, hold=True, ops={"write"})
    try:
        append = _Blocked(lambda: stuck.append(kp_batch([b"never acked"])))
        _wait_for("the append to block", lambda: _held_in(lm.dir_io(bad), "write"))
        assert lm.watchdog.check() == []  # running, but not for 30 s yet
        _ahead(lm.watchdog, AN_HOUR)
        with capture_logs() as logs:
            assert lm.watchdog.check() == [bad]
            assert lm.watchdog.check() == []  # once
        [stall] = [e for e in logs if e["event"] == "log_dir_stalled"]
        assert stall["log_dir"] == bad and stall["op"] == "write" and stall["path"].endswith(".log")
        assert [e["op"] for e in logs if e["event"] == "log_dir_offline"] == ["write"]
        assert offline == [bad]
        assert lm.dir_health(bad).state is DirState.OFFLINE
        assert not stuck.online
        ok.append(kp_batch([b"fine"]))  # the other dirs are not touched
        assert lm.dir_health(good).state is DirState.ONLINE
    finally:
        rule.release()
    append.join()
    assert isinstance(append.error, KafkaStorageError)  # the write went through, but counts for nothing
    assert stuck.log_end_offset == leo and offline == [bad]
    with pytest.raises(KafkaStorageError, match="offline"):
        stuck.read(0, 1 << 20)
    assert bad not in lm.online_dirs
    lm.stop_background()


def test_a_stall_timeout_of_0_never_fails_a_dir_but_it_is_degraded(make_manager, log_dirs):
    _, slow, _ = log_dirs
    lm = make_manager(stall_timeout_ms=0, slow_threshold_ms=60_000)
    plog = lm.create_partition("slow", 0, TOPIC_ID, dir=slow)
    rule = fsio.slow(slow, hold=True, ops={"fsync"})
    try:
        flush = _Blocked(lambda: plog.append(kp_batch([b"x"])) and plog.flush())
        _wait_for("the flush to block", lambda: _held_in(lm.dir_io(slow), "fsync"))
        _ahead(lm.watchdog, AN_HOUR)
        with capture_logs() as logs:
            assert lm.watchdog.check() == [] and lm.watchdog.check() == []
        [degraded] = [e for e in logs if e["event"] == "log_dir_degraded"]  # logged once, not per look
        assert degraded["log_dir"] == slow and degraded["outstanding"].startswith("fsync ")
        health = lm.dir_health(slow)
        assert health.state is DirState.DEGRADED and health.recent_latency_ms >= AN_HOUR * 1000
        info = {d.path: d for d in lm.dirs}[slow]
        assert info.online and info.state is DirState.DEGRADED
    finally:
        rule.release()
    flush.join()
    assert flush.error is None and plog.recovery_point == plog.log_end_offset
    # Once the slow operations are out of the latency window the dir is online again (the held fsync itself
    # took far less than the 60 s threshold).
    _ahead(lm.watchdog, AN_HOUR * 2)
    with capture_logs() as logs:
        lm.watchdog.check()
    assert lm.dir_health(slow).state is DirState.ONLINE
    assert [e["event"] for e in logs] == ["log_dir_no_longer_degraded"]


def test_a_slow_threshold_of_0_never_degrades(tmp_path):
    io = LogDirIO(str(tmp_path))
    dog = DirWatchdog([io], stall_timeout_ms=0, slow_threshold_ms=0)
    rule = fsio.slow(str(tmp_path), hold=True)
    try:
        lister = _Blocked(io.listdir)
        _wait_for("the listdir to block", lambda: _held_in(io, "listdir"))
        _ahead(dog, AN_HOUR)
        assert dog.check() == [] and dog.health[io.path].state() is DirState.ONLINE
    finally:
        rule.release()
    lister.join()
    assert lister.error is None


def test_the_watchdog_thread_fails_a_stalled_dir(tmp_path):
    failed = threading.Event()
    io = LogDirIO(str(tmp_path), on_offline=lambda *_: failed.set())
    dog = DirWatchdog([io], stall_timeout_ms=1)
    rule = fsio.slow(str(tmp_path), hold=True)
    try:
        lister = _Blocked(io.listdir)
        dog.start()
        assert failed.wait(PATIENCE_S)
        dog.stop()
    finally:
        rule.release()
    lister.join()
    assert isinstance(lister.error, KafkaStorageError) and not io.online and io.stalled
    assert "log.dir.stall.timeout.ms" in (io.offline_reason or "")


def test_describe_log_dirs_and_placement_do_not_wait_for_a_hung_dir(make_manager, log_dirs):
    good, other, hung = log_dirs
    lm = make_manager(slow_threshold_ms=200)  # the probe timeout: a dir slower than the threshold is not waited for
    lm.create_partition("t", 0, TOPIC_ID, dir=good)
    rule = fsio.slow(hung, hold=True, ops={"statvfs"})
    node = SimpleNamespace(logs=SimpleNamespace(manager=lm), mover=None)
    def describe() -> tuple[dict, list]:
        with capture_logs() as logs:
            response = asyncio.run(describe_log_dirs.handle(
                node, None, DescribeLogDirsRequest(topics=None, include_directory_ids=True)))
        assert [r.log_dir for r in response.results] == log_dirs
        return {r.log_dir: r for r in response.results}, logs

    try:
        # Its probe is late, but for less than the not-answering bound: slow, not silent. It is degraded, with
        # the sizes it last counted (from opening), and says why.
        results, logs = describe()
        for path in (good, other):
            assert results[path].error_code == 0 and results[path].total_bytes > 0
            assert (results[path].dir_state, results[path].state_reason) == ("online", "")
        assert results[good].topics[0].name == "t"
        late = results[hung]
        assert (late.error_code, late.dir_state) == (0, "degraded")
        assert late.total_bytes > 0 and late.state_reason.startswith("slow: its size probe took longer than 200 ms")
        assert not [e for e in logs if e["event"] == "log_dir_not_answering"]
        # Once its statvfs has been outstanding for the bound (five probe timeouts: 1 s here), it is not answering.
        assert lm.not_answering_after_s == 1.0
        hung_io = lm.watchdog.health[hung].io
        while time.monotonic() - hung_io.oldest_outstanding()[2] < lm.not_answering_after_s:
            time.sleep(0.05)
        results, logs = describe()
        silent = results[hung]
        assert (silent.error_code, silent.total_bytes, silent.usable_bytes, silent.dir_state) == (
            ErrorCode.KAFKA_STORAGE_ERROR, -1, -1, "not-answering")
        assert silent.state_reason.startswith("no answer for ") and f"statvfs {hung} has not returned" in (
            silent.state_reason)
        assert [e["log_dir"] for e in logs if e["event"] == "log_dir_not_answering"] == [hung]
        # New partitions go to the dirs that answer, whatever their sizes.
        placed = {lm.create_partition("new", i, TOPIC_ID).log_dir for i in range(4)}
        assert placed <= {good, other} and placed
        assert hung in lm.online_dirs  # not answering a size probe is not a failure by itself
    finally:
        rule.release()
    answers = lm.probe_dirs(None)  # once released, the dir answers again
    assert answers[hung] is not None and answers[hung][0] > 0


def test_describe_log_dirs_says_why_a_dir_is_offline(make_manager, log_dirs):
    """A stalled dir and a dir failed by an I/O error are both offline (KAFKA_STORAGE_ERROR); DescribeLogDirs'
    StateReason (kjbod's tagged field) tells them apart: the operation and file that stalled, or the failed call
    with its errno."""
    stalled, broken, good = log_dirs
    lm = make_manager(stall_timeout_ms=30_000)
    logs = {d: lm.create_partition(f"t{i}", 0, TOPIC_ID, dir=d) for i, d in enumerate(log_dirs)}
    rule = fsio.slow(stalled, hold=True, ops={"write"})
    try:
        append = _Blocked(lambda: logs[stalled].append(kp_batch([b"stuck"])))
        _wait_for("the append to block", lambda: _held_in(lm.dir_io(stalled), "write"))
        _ahead(lm.watchdog, AN_HOUR)
        assert lm.watchdog.check() == [stalled]
    finally:
        rule.release()
    append.join()
    fsio.inject(broken, errno.EIO, ops={"write"})
    with pytest.raises(KafkaStorageError):
        logs[broken].append(kp_batch([b"lost"]))
    node = SimpleNamespace(logs=SimpleNamespace(manager=lm), mover=None)
    response = asyncio.run(describe_log_dirs.handle(
        node, None, DescribeLogDirsRequest(topics=None, include_directory_ids=True)))
    results = {r.log_dir: r for r in response.results}
    for path in (stalled, broken):
        assert (results[path].error_code, results[path].dir_state) == (ErrorCode.KAFKA_STORAGE_ERROR, "offline")
    reason = results[stalled].state_reason
    assert reason.startswith(f"stalled: write {stalled}/") and ".log did not return for " in reason
    assert reason.endswith("(log.dir.stall.timeout.ms)")
    reason = results[broken].state_reason
    assert reason.startswith(f"write {broken}/") and f".log failed: [Errno {errno.EIO}] {os.strerror(errno.EIO)}" in (
        reason), reason
    assert (results[good].dir_state, results[good].state_reason) == ("online", "")
    # Only a client that asks for kjbod's extensions gets the reason; Kafka's response stays Kafka's.
    plain = asyncio.run(describe_log_dirs.handle(node, None, DescribeLogDirsRequest(topics=None)))
    assert {r.state_reason for r in plain.results} == {""}


def test_a_faults_file_can_make_a_dir_slow(tmp_path):
    control = tmp_path / "faults.json"
    control.write_text(json.dumps({"faults": [{"dir": str(tmp_path / "d"), "delay_ms": 1, "ops": ["fsync"]},
                                              {"dir": str(tmp_path / "d"), "errno": "EIO", "ops": ["unlink"]}]}))
    inj = FaultInjector(str(control))
    inj.check("fsync", str(tmp_path / "d" / "f"))  # delayed, not failed
    with pytest.raises(OSError):
        inj.check("unlink", str(tmp_path / "d" / "f"))
    slow = [r for r in inj._env_rules if r.errno == 0]
    assert [(r.delay_ms, r.ops) for r in slow] == [(1.0, frozenset({"fsync"}))]


def test_a_shutdown_does_not_hang_on_a_hung_dir(make_manager, log_dirs, monkeypatch):
    good, _, bad = log_dirs
    monkeypatch.setattr(manager_module, "SHUTDOWN_GRACE_S", 0.0)
    lm = make_manager(checkpoint_interval_ms=10, initial_task_delay_ms=0, stall_timeout_ms=0)
    lm.create_partition("good", 0, TOPIC_ID, dir=good).append(kp_batch([b"kept"]))
    rule = fsio.slow(bad, hold=True, ops={"write"})
    try:
        lm.start_background(interval_s=0.01)
        _wait_for("the bad dir's checkpoint to block", lambda: _held_in(lm.dir_io(bad), "write"))
        with capture_logs() as logs:
            closing = _Blocked(lm.close)
            closing.join()  # with the stall detection off, only the shutdown's own check frees it
        assert closing.error is None
        [stuck] = [e for e in logs if e["event"] == "log_dir_stuck_at_shutdown"]
        assert stuck["log_dir"] == bad and stuck["op"] == "write"
        assert bad not in lm.online_dirs and good in lm.online_dirs
        assert Path(good, ".kafka_cleanshutdown").exists() and not Path(bad, ".kafka_cleanshutdown").exists()
    finally:
        rule.release()
