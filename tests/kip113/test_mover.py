"""The replica mover against a real LogManager on three log dirs (in-process; no server).

An appender thread writes under the rig's append lock, the lock the mover's final step holds (the node's event
loop plays that role in production), so the tests see what a producer would see while a partition moves.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path

import pytest

from kjbod.broker.kip113 import failpoints
from kjbod.broker.kip113 import mover as mover_module
from kjbod.broker.kip113.mover import MoverStopped
from kjbod.storage import fsio
from kjbod.storage.config import LogConfig
from kjbod.storage.errors import KafkaStorageError
from kjbod.storage.manager import parse_partition_dir_name

from .conftest import TOPIC_ID, Rig, captured_logs, records, wait_for


def fill(rig: Rig, topic: str, count: int, *, size: int = 200, start: int = 0) -> list[bytes]:
    values = [b"%08d:" % i + b"x" * size for i in range(start, start + count)]
    for v in values:
        rig.append(topic, 0, [v])
    return values


def dir_kinds(path: str) -> dict[str, str | None]:
    """{dir name: suffix} of the partition dirs in a log dir."""
    out = {}
    for name in os.listdir(path):
        parsed = parse_partition_dir_name(name)
        if parsed is not None and os.path.isdir(os.path.join(path, name)):
            out[name] = parsed[2]
    return out


def moving(rig: Rig, topic: str, dest: str, *, copied: int) -> list[bytes]:
    """Put 3000 records in ``topic``-0 (in the rig's first dir), start moving it to ``dest`` and return once the
    move has copied ``copied`` bytes (a throttled rig keeps it going); the values written."""
    rig.manager.create_partition(topic, 0, TOPIC_ID, dir=rig.dirs[0])
    values = fill(rig, topic, 3000)
    rig.mover.request_move(topic, 0, dest)
    wait_for(lambda: (p := rig.mover.progress(topic, 0)) is not None and p.bytes_copied > copied)
    return values


class Appender:
    """Appends one-record batches to topic-0 until stopped; remembers what it wrote."""

    def __init__(self, rig: Rig, topic: str, start: int) -> None:
        self.rig, self.topic, self.next = rig, topic, start
        self.values: list[bytes] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            v = b"%08d:" % self.next + b"y" * 300
            try:
                self.rig.append(self.topic, 0, [v])
            except Exception as e:  # the test decides whether an error was expected
                self.errors.append(e)
                return
            self.values.append(v)
            self.next += 1
            time.sleep(0.0005)

    def stop(self) -> list[bytes]:
        self._stop.set()
        self._thread.join()
        return self.values


def test_move_under_appends_keeps_every_record_and_copies_segments_whole(make_rig, log_dirs):
    rig = make_rig(config=LogConfig(segment_bytes=64 << 10, file_delete_delay_ms=3_600_000))
    rig.manager.create_partition("mv", 0, TOPIC_ID, dir=log_dirs[0])
    before = fill(rig, "mv", 1500)
    closed_before = {os.path.basename(s.log_path): Path(s.log_path).read_bytes()
                     for s in rig.manager.get("mv", 0).segments[:-1]}
    appender = Appender(rig, "mv", 1500)
    with captured_logs() as logs:
        rig.mover.request_move("mv", 0, log_dirs[1])
        wait_for(lambda: rig.moved("mv", 0, log_dirs[1]), what="the move")
    written = before + appender.stop()
    assert not appender.errors
    got = rig.read_all("mv", 0)
    assert [o for o, _ in got] == list(range(len(written)))
    assert [v for _, v in got] == written
    new = rig.manager.get("mv", 0)
    assert os.path.basename(new.dir) == "mv-0" and not new.is_future and new.log_dir == log_dirs[1]
    # Closed segments arrive byte for byte (sendfile of the whole file), with their indexes.
    for name, data in closed_before.items():
        assert Path(new.dir, name).read_bytes() == data
        assert Path(new.dir, name[:20] + ".index").exists() and Path(new.dir, name[:20] + ".timeindex").exists()
    assert [s.base_offset for s in new.segments][: len(closed_before)] == sorted(int(n[:20]) for n in closed_before)
    # The source became a -delete dir (removed after file.delete.delay.ms); nothing -future is left.
    assert set(dir_kinds(log_dirs[0]).values()) == {"-delete"}
    assert dir_kinds(log_dirs[1]) == {"mv-0": None}
    events = [e["event"] for e in logs]
    assert events.count("replica_move_started") == 1 and events.count("replica_move_completed") == 1
    assert events.count("replica_move_segment_copied") >= len(closed_before)
    done = next(e for e in logs if e["event"] == "replica_move_completed")
    assert done["log_end_offset"] <= len(written) and done["bytes_copied"] > 0


def test_old_copy_is_deleted_in_the_background(make_rig, log_dirs):
    rig = make_rig()
    rig.manager.create_partition("bg", 0, TOPIC_ID, dir=log_dirs[0])
    fill(rig, "bg", 600)
    rig.mover.request_move("bg", 0, log_dirs[2])
    wait_for(lambda: rig.moved("bg", 0, log_dirs[2]))
    assert set(dir_kinds(log_dirs[0]).values()) == {"-delete"}
    rig.manager.tick()  # file.delete.delay.ms = 0 here: the next housekeeping round removes it
    assert dir_kinds(log_dirs[0]) == {}


def test_swap_renames_in_kip113_order(make_rig, log_dirs):
    rig = make_rig()
    rig.manager.create_partition("order", 0, TOPIC_ID, dir=log_dirs[0])
    fill(rig, "order", 400)
    seen: list[tuple[str, dict, dict]] = []

    def record(name: str) -> None:
        seen.append((name, dir_kinds(log_dirs[0]), dir_kinds(log_dirs[1])))

    for name in ("future_dir_created", "caught_up_before_lock", "source_renamed_to_delete",
                 "future_renamed_to_current", "before_old_copy_deleted"):
        failpoints.arm(name, action=record)
    rig.mover.request_move("order", 0, log_dirs[1])
    wait_for(lambda: rig.moved("order", 0, log_dirs[1]))
    rig.manager.tick()
    names = [s[0] for s in seen]
    assert names == ["future_dir_created", "caught_up_before_lock", "source_renamed_to_delete",
                     "future_renamed_to_current", "before_old_copy_deleted"]
    states = {name: (list(src.values()), list(dst.values())) for name, src, dst in seen}
    assert states["future_dir_created"] == ([None], ["-future"])
    assert states["caught_up_before_lock"] == ([None], ["-future"])
    assert states["source_renamed_to_delete"] == (["-delete"], ["-future"])
    assert states["future_renamed_to_current"] == (["-delete"], [None])
    assert states["before_old_copy_deleted"] == (["-delete"], [None])


def test_cancel_deletes_the_future_log(make_rig, log_dirs):
    rig = make_rig(rate=300_000)
    values = moving(rig, "cx", log_dirs[1], copied=100_000)
    assert rig.mover.cancel("cx", 0)
    wait_for(lambda: rig.mover.progress("cx", 0) is None, what="the cancel")
    assert rig.manager.get("cx", 0).log_dir == log_dirs[0] and rig.manager.get_future("cx", 0) is None
    assert all(kind != "-future" for kind in dir_kinds(log_dirs[1]).values())
    assert [v for _, v in rig.read_all("cx", 0)] == values
    assert not rig.mover.cancel("cx", 0)  # nothing moving any more


def test_new_destination_restarts_the_move(make_rig, log_dirs):
    rig = make_rig(rate=400_000)
    values = moving(rig, "rt", log_dirs[1], copied=50_000)
    rig.mover.throttle.set_rate(1 << 62)
    rig.mover.request_move("rt", 0, log_dirs[2])
    assert rig.mover.destination("rt", 0) == log_dirs[2]
    wait_for(lambda: rig.moved("rt", 0, log_dirs[2]))
    assert [v for _, v in rig.read_all("rt", 0)] == values
    assert all(kind in (None, "-delete") for kind in dir_kinds(log_dirs[1]).values())
    assert rig.manager.get_future("rt", 0) is None


def test_progress_reports_bytes_rate_and_eta(make_rig, log_dirs):
    rig = make_rig(rate=500_000)
    rig.manager.create_partition("pg", 0, TOPIC_ID, dir=log_dirs[0])
    fill(rig, "pg", 3000)
    size = rig.manager.get("pg", 0).size_bytes
    rig.mover.request_move("pg", 0, log_dirs[1])
    wait_for(lambda: (p := rig.mover.progress("pg", 0)) is not None and p.bytes_copied > 150_000)
    p = rig.mover.progress("pg", 0)
    assert p.state == "copying" and p.source_dir == log_dirs[0] and p.dest_dir == log_dirs[1]
    assert p.bytes_total >= size - 100 and 0 < p.bytes_copied < p.bytes_total
    assert 200_000 < p.rate < 1_000_000  # the throttle's 500 kB/s, measured
    assert p.eta_seconds is not None and 0 < p.eta_seconds < 10
    assert p.future_size > 0 and p.future_log_end_offset is not None and not p.registered


def test_resume_after_restart_keeps_what_was_copied(make_rig, log_dirs, monkeypatch):
    # Copied files are made durable in groups (64 MiB or 96 files); here after each segment's three files.
    monkeypatch.setattr(mover_module._PendingFiles, "MAX_FILES", 3)
    config = LogConfig(segment_bytes=256 << 10, file_delete_delay_ms=0)
    rig = make_rig(config=config, rate=3_000_000)  # 64 KiB chunks: four per segment
    rig.manager.create_partition("rs", 0, TOPIC_ID, dir=log_dirs[0])
    values = fill(rig, "rs", 4000)
    paused = threading.Event()

    def pause(_name: str) -> None:
        paused.set()
        raise MoverStopped()

    failpoints.arm("mid_segment_copy", after=10, action=pause)
    rig.mover.request_move("rs", 0, log_dirs[1])
    assert paused.wait(30)
    time.sleep(0.1)
    copied_before = rig.mover.progress("rs", 0).bytes_copied
    rig.close()
    [future_dir] = [n for n, k in dir_kinds(log_dirs[1]).items() if k == "-future"]
    names = os.listdir(Path(log_dirs[1], future_dir))
    assert any(n.endswith(".log.tmp") for n in names)  # the interrupted copy
    assert any(n.endswith(".log") for n in names)  # segments copied whole before it

    rig2 = make_rig(config=config, start=False)
    assert rig2.manager.get_future("rs", 0) is not None
    rig2.mover.start()
    with captured_logs() as logs:
        rig2.mover.resume_at_startup()
        wait_for(lambda: rig2.moved("rs", 0, log_dirs[1]))
    started = next(e for e in logs if e["event"] == "replica_move_started")
    assert started["resumed"] is True
    done = next(e for e in logs if e["event"] == "replica_move_completed")
    total = rig2.manager.get("rs", 0).size_bytes
    assert copied_before > 256 << 10
    assert done["bytes_copied"] < total - (256 << 10)  # the whole segments already there were kept
    assert [v for _, v in rig2.read_all("rs", 0)] == values
    assert all(kind is None for kind in dir_kinds(log_dirs[1]).values())


def test_resume_after_the_future_log_was_opened(make_rig, log_dirs):
    config = LogConfig(segment_bytes=64 << 10, file_delete_delay_ms=0)
    rig = make_rig(config=config)
    rig.manager.create_partition("ro", 0, TOPIC_ID, dir=log_dirs[0])
    values = fill(rig, "ro", 2500)

    def pause(_name: str) -> None:
        raise MoverStopped()

    failpoints.arm("caught_up_before_lock", action=pause)
    rig.mover.request_move("ro", 0, log_dirs[2])
    wait_for(lambda: rig.manager.get_future("ro", 0) is not None and _idle_on(rig, "ro"))
    values += fill(rig, "ro", 100, start=2500)  # the source keeps growing while the move waits
    rig.close()
    rig2 = make_rig(config=config)
    rig2.mover.resume_at_startup()
    wait_for(lambda: rig2.moved("ro", 0, log_dirs[2]))
    assert [v for _, v in rig2.read_all("ro", 0)] == values


def _idle_on(rig: Rig, topic: str) -> bool:
    p = rig.mover.progress(topic, 0)
    if p is None:
        return False
    time.sleep(0.2)
    q = rig.mover.progress(topic, 0)
    return q is not None and q.bytes_copied == p.bytes_copied and q.state == "catching-up"


def test_crash_between_the_swap_renames_promotes_the_future(make_rig, log_dirs):
    rig = make_rig()
    rig.manager.create_partition("sw", 0, TOPIC_ID, dir=log_dirs[0])
    values = fill(rig, "sw", 800)

    def crash(_name: str) -> None:
        raise MoverStopped()  # the worker stops dead: the source is already -delete, the future not renamed

    failpoints.arm("source_renamed_to_delete", action=crash)
    rig.mover.request_move("sw", 0, log_dirs[1])
    wait_for(lambda: list(dir_kinds(log_dirs[0]).values()) == ["-delete"])
    time.sleep(0.1)
    assert list(dir_kinds(log_dirs[1]).values()) == ["-future"]
    rig.kill()

    rig2 = make_rig(start=False)
    assert rig2.manager.find("sw", 0) is None and rig2.manager.get_future("sw", 0) is not None
    assert dir_kinds(log_dirs[0]) == {}  # the loader removed the -delete dir
    rig2.mover.start()
    rig2.mover.resume_at_startup()  # only -future, every dir online: promoted
    plog = rig2.manager.get("sw", 0)
    assert plog.log_dir == log_dirs[1] and not plog.is_future and os.path.basename(plog.dir) == "sw-0"
    assert [v for _, v in rig2.read_all("sw", 0)] == values


def test_future_without_current_is_left_alone_while_a_dir_is_offline(make_rig, log_dirs):
    rig = make_rig(start=False)
    rig.manager.create_partition("lone", 0, TOPIC_ID, dir=log_dirs[0])
    fill(rig, "lone", 50)
    rig.close()
    # The current log's dir and a future copy elsewhere; then the current's dir fails to open.
    src = Path(log_dirs[0], "lone-0")
    future = Path(log_dirs[1], "lone-0.0123456789abcdef0123456789abcdef-future")
    import shutil

    shutil.copytree(src, future)
    shutil.rmtree(src)
    fsio.inject(log_dirs[2], errno.EIO, ops={"listdir"})
    rig2 = make_rig(start=False)
    assert log_dirs[2] not in rig2.manager.online_dirs
    rig2.mover.start()
    rig2.mover.resume_at_startup()
    assert rig2.manager.find("lone", 0) is None and rig2.manager.get_future("lone", 0) is not None
    assert future.exists()


def test_destination_failure_aborts_the_move_and_the_source_serves_on(make_rig, log_dirs):
    rig = make_rig(rate=400_000)
    values = moving(rig, "df", log_dirs[1], copied=100_000)
    with captured_logs() as logs:
        fsio.inject(log_dirs[1], errno.EIO, ops={"write", "copy", "fsync"})
        wait_for(lambda: rig.mover.progress("df", 0) is None, what="the abort")
    assert log_dirs[1] not in rig.manager.online_dirs and rig.events == [log_dirs[1]]
    assert any(e["event"] == "replica_move_aborted_destination_failed" for e in logs)
    assert rig.manager.get_future("df", 0) is None
    assert rig.manager.get("df", 0).log_dir == log_dirs[0]
    values += fill(rig, "df", 10, start=3000)  # the source keeps taking appends
    assert [v for _, v in rig.read_all("df", 0)] == values


def test_source_failure_takes_the_partition_offline_and_stops_the_move(make_rig, log_dirs):
    rig = make_rig(rate=400_000)
    rig.manager.create_partition("other", 0, TOPIC_ID, dir=log_dirs[2])
    moving(rig, "sf", log_dirs[1], copied=100_000)
    with captured_logs() as logs:
        fsio.inject(log_dirs[0], errno.EIO, ops={"read", "copy", "open"})
        wait_for(lambda: rig.mover.progress("sf", 0) is None, what="the stop")
    assert log_dirs[0] not in rig.manager.online_dirs
    assert any(e["event"] == "replica_move_stopped_source_failed" for e in logs)
    with pytest.raises(KafkaStorageError):
        rig.append("sf", 0, [b"nope"])
    # The future copy stays on disk (closed, not in the manager); other dirs are unaffected.
    assert rig.manager.get_future("sf", 0) is None
    assert "-future" in dir_kinds(log_dirs[1]).values()
    assert rig.append("other", 0, [b"fine"]) == 0


def test_moves_share_one_throttle(make_rig, log_dirs):
    rate = 2_000_000
    rig = make_rig(rate=rate, threads=2, config=LogConfig(segment_bytes=256 << 10, file_delete_delay_ms=0))
    for t in ("a", "b"):
        rig.manager.create_partition(t, 0, TOPIC_ID, dir=log_dirs[0])
        fill(rig, t, 4000, size=400)
    total = sum(rig.manager.get(t, 0).size_bytes for t in ("a", "b"))
    started = time.monotonic()
    for t in ("a", "b"):
        rig.mover.request_move(t, 0, log_dirs[1])
    wait_for(lambda: rig.moved("a", 0, log_dirs[1]) and rig.moved("b", 0, log_dirs[1]), timeout=60)
    elapsed = time.monotonic() - started
    # Two threads together, not each, are held to the rate.
    assert total / rate * 0.8 < elapsed < total / rate * 1.5 + 1.0


def test_precreated_files_are_taken_in_order_and_skipped_ones_closed(tmp_path):
    # The bulk copy creates .tmp files ahead of the copy on a helper thread; a file the copy skips (its source
    # was deleted by retention) is closed, never handed out, and never created again under a taken name.
    from concurrent.futures import ThreadPoolExecutor

    io = fsio.LogDirIO(str(tmp_path))
    finals = [str(tmp_path / f"{i:020d}.log") for i in range(60)]
    with ThreadPoolExecutor(max_workers=1) as pool:
        creator = mover_module._Precreator(io, pool)
        creator.plan(finals)
        first = creator.take(finals[0])
        first.write(b"kept")
        # Skip more files than are created ahead: the one taken must still be the planned create.
        late = creator.take(finals[40])
        late.write(b"late")
        rest = creator.take(finals[59])
        creator.close()
        for fh in (first, late, rest):
            fh.close()
    assert Path(finals[0] + ".tmp").read_bytes() == b"kept"
    assert Path(finals[40] + ".tmp").read_bytes() == b"late"
    # Skipped files were created (ahead) and are left as .tmp files for the bulk copy's clean-up.
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(f) + ".tmp" for f in finals)


def test_create_failure_on_the_helper_thread_aborts_the_move(make_rig, log_dirs, monkeypatch):
    # The .tmp files are created on the mover's helper thread: an I/O error there is a destination failure
    # like any other (dir offline, future removed where possible, the source serves on).
    rig = make_rig(config=LogConfig(segment_bytes=16 << 10, file_delete_delay_ms=0))
    rig.manager.create_partition("cf", 0, TOPIC_ID, dir=log_dirs[0])
    values = fill(rig, "cf", 1000)
    created = []
    real_create = mover_module._create_tmp

    def create(io, final):
        created.append(final)
        if len(created) == 10:
            fsio.inject(log_dirs[1], errno.EIO, ops={"open"})
        return real_create(io, final)

    monkeypatch.setattr(mover_module, "_create_tmp", create)
    with captured_logs() as logs:
        rig.mover.request_move("cf", 0, log_dirs[1])
        assert rig.mover.wait_settled("cf", 0, timeout=30)
    assert log_dirs[1] not in rig.manager.online_dirs
    assert any(e["event"] == "replica_move_aborted_destination_failed" for e in logs)
    assert rig.manager.get("cf", 0).log_dir == log_dirs[0] and rig.manager.get_future("cf", 0) is None
    values += fill(rig, "cf", 5, start=1000)
    assert [v for _, v in rig.read_all("cf", 0)] == values


def test_wait_settled_returns_when_the_move_ends(make_rig, log_dirs):
    rig = make_rig()
    rig.manager.create_partition("ws", 0, TOPIC_ID, dir=log_dirs[0])
    fill(rig, "ws", 300)
    assert rig.mover.wait_settled("ws", 0, timeout=0)  # nothing moving
    rig.mover.request_move("ws", 0, log_dirs[1])
    assert rig.mover.wait_settled("ws", 0, timeout=30)
    assert rig.manager.get("ws", 0).log_dir == log_dirs[1]


def test_writeback_hint_is_harmless(tmp_path):
    # FileHandle.start_writeback only starts writeback (sync_file_range); it changes no data, and where the
    # call cannot apply (a pipe) it does nothing.
    io = fsio.LogDirIO(str(tmp_path))
    fh = io.open(str(tmp_path / "f"), os.O_RDWR | os.O_CREAT)
    fh.write(b"x" * 10_000)
    fh.start_writeback()
    fh.start_writeback(4096, 4096)
    fh.fsync()
    assert fh.pread(10_000, 0) == b"x" * 10_000
    fh.close()
    r, w = os.pipe()
    try:
        fsio.FileHandle(w, "pipe", io).start_writeback()
    finally:
        os.close(r)
        os.close(w)
    assert io.online


def test_catch_up_read_stays_in_one_source_segment_when_the_source_rolls_meanwhile(make_rig, log_dirs, monkeypatch):
    """The source may roll between the mover listing its segments and reading: the read must still hand back
    only one segment's batches (together they could exceed segment.bytes, which the future log refuses), with
    that segment's base offset. A clean-clone CI run lost a move this way (RecordListTooLargeError)."""
    rig = make_rig(config=LogConfig(segment_bytes=16 << 10, file_delete_delay_ms=3_600_000))
    rig.manager.create_partition("roll", 0, TOPIC_ID, dir=log_dirs[0])
    fill(rig, "roll", 200, size=300)
    source = rig.manager.get("roll", 0)
    bases = [s.base_offset for s in source.segments]
    assert len(bases) >= 3
    # As listed before the last rolls: the second segment looks like the last one.
    monkeypatch.setattr(mover_module, "_segment_bases", lambda plog: bases[:2])
    offset = bases[1] + 1
    data, base = rig.mover._read_source(source, offset, 1 << 30)
    monkeypatch.undo()
    seg = source.segments[1]
    assert base == bases[1]
    assert 0 < len(data) <= seg.size <= 16 << 10
    got = records(data)
    assert got[-1][0] == bases[2] - 1 and got[0][0] <= offset
