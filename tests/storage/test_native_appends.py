"""A log dir's native append writer (kjbod/storage/_nativewrite.c) and PartitionLog.append_native on top of it.

Strategy: the writer is driven directly on real fds (a file, a pipe that fills, an fd that refuses writes); the
writer's ``hold`` seam keeps a write from starting, which is how a write "not back in time" is made here without a
slow disk (the live FUSE tests hang a real one). append_native is checked against append_validated on the
random mixes of tests/storage/test_group_commit.py (idempotent producers, retries, rolls of every kind, epochs):
every answer, the producer state, the segments and indexes, and every file byte for byte must be the same, each
append going through the writer where append_native takes it and through append_validated where it does not.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

import live
import pytest

from kjbod.broker.txn import records as txnrec
from kjbod.storage import workers
from kjbod.storage.config import LogConfig
from kjbod.storage.errors import KafkaStorageError, StorageError
from kjbod.storage.fsio import FileHandle
from kjbod.storage.log import AppendInfo, NativeAppend
from kjbod.storage.records import build_batch, iter_batches
from tests.storage.conftest import FakeClock, kp_batch, region_bytes
from tests.storage.test_group_commit import SEEDS, _answer, _files, _log, _scenario, _state

kjbod_server_factory = live.kjbod_server_factory  # the live-server fixtures
native = pytest.importorskip("kjbod.storage._nativewrite", reason="the native writer is not built (no C compiler)")


@pytest.fixture
def writer():
    return native.Writer()


# ---------------------------------------------------------------------------------------------------- the writer
def test_the_writer_writes_every_buffer_in_order_at_the_files_end(tmp_path, writer):
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT | os.O_APPEND)
    try:
        os.write(fd, b"head:")
        writer.submit(fd, [b"abc", memoryview(b"xdefg")[1:], bytearray(b"hi")])
        assert writer.in_flight
        assert writer.wait(5.0) == 9
        assert not writer.in_flight
        assert (tmp_path / "f").read_bytes() == b"head:abcdefghi"
    finally:
        os.close(fd)


def test_a_held_write_is_not_back_in_time_and_answers_once_let_go(tmp_path, writer):
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT | os.O_APPEND)
    try:
        writer.hold(True)
        writer.submit(fd, [b"late"])
        assert writer.wait(0.005) is None
        assert writer.in_flight and (tmp_path / "f").read_bytes() == b""
        with pytest.raises(RuntimeError, match="already in flight"):
            writer.submit(fd, [b"more"])
        writer.hold(False)
        assert writer.wait(-1.0) == 4  # no on_late: the caller may wait again
        assert (tmp_path / "f").read_bytes() == b"late"
    finally:
        os.close(fd)


def test_a_write_that_blocks_in_the_kernel_finishes_after_short_writes(writer):
    r, w = os.pipe()
    try:
        payload = bytes(range(256)) * 4096  # 1 MiB: far more than the pipe holds, so writev returns short
        writer.submit(w, [payload[:1000], payload[1000:]])
        assert writer.wait(0.01) is None  # blocked on the full pipe
        got = bytearray()
        while (done := writer.wait(0.0)) is None:
            got += os.read(r, 1 << 16)
        assert done == len(payload)
        while len(got) < len(payload):
            got += os.read(r, 1 << 16)
        assert bytes(got) == payload
    finally:
        os.close(r)
        os.close(w)


def test_a_failed_write_raises_its_errno_and_frees_the_writer(tmp_path, writer):
    fd = os.open(tmp_path / "f", os.O_RDONLY | os.O_CREAT)
    try:
        writer.submit(fd, [b"x"])
        with pytest.raises(OSError) as e:
            writer.wait(5.0)
        assert e.value.errno == 9  # EBADF
        assert not writer.in_flight
    finally:
        os.close(fd)


def test_bad_arguments_are_refused_before_anything_is_handed_over(writer):
    with pytest.raises(TypeError):
        writer.submit(1, [b"ok", 123])
    with pytest.raises(TypeError):
        writer.submit(1, 5)
    assert not writer.in_flight
    with pytest.raises(RuntimeError, match="no write in flight to wait for"):
        writer.wait(0.0)
    assert os.path.exists(f"/proc/self/task/{writer.native_id}")


# -------------------------------------------------------------------------------------------- append_native
def _through_native(plog, writer, records: bytes, now: int, epoch: int) -> tuple[object, bool]:
    """One append as the Produce path makes it: append_native where it takes it, else append_validated (what the
    dir's worker does). (the answer, whether the writer wrote it)."""
    validated = plog.validate(records, now_ms=now)
    try:
        got = plog.append_native(validated, writer, 5.0, leader_epoch=epoch)
        if got is None:
            return _answer(plog.append_validated(validated, leader_epoch=epoch)), False
    except StorageError as e:
        return _answer(e), False
    assert isinstance(got, AppendInfo)  # 5 s: a write to a local file is always back
    return _answer(got), not got.duplicate


@pytest.mark.parametrize("seed", SEEDS[:20])
def test_a_random_mix_through_the_native_writer_equals_the_workers_appends(tmp_path, seed, writer):
    config, steps = _scenario(seed)
    clock = FakeClock()
    fast, alone = _log(tmp_path, "native", config, clock), _log(tmp_path, "alone", config, clock)
    written = 0
    try:
        for group, advance, epoch in steps:
            now = clock.advance(advance)
            for records in group:
                try:
                    expected = _answer(alone.append_validated(alone.validate(records, now_ms=now),
                                                              leader_epoch=epoch))
                except StorageError as e:
                    expected = _answer(e)
                answer, by_writer = _through_native(fast, writer, records, now, epoch)
                assert answer == expected
                written += by_writer
            assert _state(fast) == _state(alone)
        assert written > len(steps)  # most appends went through the writer, not only the fallbacks
    finally:
        fast.close()
        alone.close()
    assert _files(fast) == _files(alone)


def _ready_log(tmp_path, config: LogConfig | None = None):
    """A log with one append in its active segment (an empty segment is never taken: its first batch sets the
    rolling timestamp, a read the loop does not make)."""
    clock = FakeClock()
    plog = _log(tmp_path, "d", config or LogConfig(), clock)
    plog.append_validated(plog.validate(kp_batch([b"first"], timestamp=clock.now), now_ms=clock.now))
    return plog, clock


def _unchanged(plog) -> tuple:
    return plog.log_end_offset, plog.active_segment.size, os.path.getsize(plog.active_segment.log_path)


def test_appends_that_need_more_of_the_disk_are_left_to_the_worker(tmp_path, writer):
    plog, clock = _ready_log(tmp_path, LogConfig(segment_bytes=400, flush_interval_messages=1_000_000))
    try:
        now = clock.now
        small = plog.validate(kp_batch([b"x"], timestamp=now), now_ms=now)
        before = _unchanged(plog)
        assert plog.append_native(small, writer, 5.0, leader_epoch=3) is None  # a new leader epoch to record
        big = plog.validate(kp_batch([b"y" * 300], timestamp=now), now_ms=now)
        assert plog.append_native(big, writer, 5.0) is None  # a roll (segment.bytes)
        marker = plog.validate(build_batch([(txnrec.marker_key(False), txnrec.marker_value(0), [], now)],
                                           producer_id=7, producer_epoch=0, is_transactional=True, is_control=True),
                               from_coordinator=True)
        assert plog.append_native(marker, writer, 5.0) is None  # a control batch (a transaction's marker)
        with plog.lock:  # another thread's append in progress: never waited for
            assert plog.append_native(small, writer, 5.0) is None
        plog.config = LogConfig(segment_bytes=400, flush_interval_messages=2)
        assert plog.append_native(small, writer, 5.0) is None  # flush.messages due with this append
        assert _unchanged(plog) == before and not writer.in_flight
        assert plog.lock.acquire(blocking=False)
        plog.lock.release()
    finally:
        plog.close()


def test_a_write_not_back_in_time_holds_the_partition_until_the_writers_thread_settles_it(tmp_path, writer):
    plog, clock = _ready_log(tmp_path)
    try:
        now = clock.now
        writer.hold(True)
        pending = plog.append_native(plog.validate(kp_batch([b"a", b"b"], timestamp=now), now_ms=now), writer,
                                     0.002)
        assert isinstance(pending, NativeAppend)
        assert plog.log_end_offset == 1  # not moved: its bytes are not written yet
        op, path, _started = plog.io.oldest_outstanding()  # the stall watchdog sees the write
        assert (op, path) == ("write", plog.active_segment.log_path)
        assert plog.append_native(plog.validate(kp_batch([b"c"], timestamp=now), now_ms=now), writer, 5.0) is None
        behind: list[AppendInfo] = []
        worker_append = threading.Thread(target=lambda: behind.append(
            plog.append_validated(plog.validate(kp_batch([b"c"], timestamp=now), now_ms=now))))
        worker_append.start()  # another append to the partition (the worker's) waits for the partition's lock
        time.sleep(0.05)
        assert not behind
        settled = threading.Event()
        answers: list[tuple[bool, object, int]] = []
        pending.when_settled(lambda ok, value: (answers.append((ok, value, threading.get_native_id())),
                                                settled.set()))
        writer.hold(False)  # the write goes; the writer's thread settles it, waiting for nobody
        assert settled.wait(10)
        worker_append.join(10)
        ok, info, settled_on = answers[0]
        assert ok and (info.base_offset, info.last_offset) == (1, 2)
        assert settled_on == writer.native_id
        assert behind[0].base_offset == 3
        assert plog.log_end_offset == 4 and plog.io.oldest_outstanding() is None
        data = region_bytes(plog.read(0, 1 << 20))
        assert [(b.base_offset, b.last_offset) for _pos, b in iter_batches(data)] == [(0, 0), (1, 2), (3, 3)]
    finally:
        plog.close()


def test_an_append_settled_before_anyone_asks_keeps_its_answer_for_them(tmp_path, writer):
    plog, clock = _ready_log(tmp_path)
    try:
        now = clock.now
        writer.hold(True)
        pending = plog.append_native(plog.validate(kp_batch([b"a"], timestamp=now), now_ms=now), writer, 0.001)
        writer.hold(False)
        deadline = time.monotonic() + 10
        while writer.in_flight and time.monotonic() < deadline:  # settled on the writer's thread meanwhile
            time.sleep(0.001)
        answers: list[tuple[bool, object]] = []
        pending.when_settled(lambda ok, value: answers.append((ok, value)))
        assert [(ok, info.base_offset) for ok, info in answers] == [(True, 1)]  # at once, on this thread
    finally:
        plog.close()


@pytest.mark.parametrize("late", [False, True])
def test_a_failed_native_write_fails_the_dir_as_the_workers_write_would(tmp_path, writer, late):
    plog, clock = _ready_log(tmp_path)
    seg = plog.active_segment
    try:
        now = clock.now
        before = _unchanged(plog)
        seg._fh.close()
        seg._fh = FileHandle(os.open(seg.log_path, os.O_RDONLY), seg.log_path, plog.io)  # the disk refuses writes
        validated = plog.validate(kp_batch([b"z"], timestamp=now), now_ms=now)
        if not late:
            with pytest.raises(KafkaStorageError):
                plog.append_native(validated, writer, 5.0)
        else:
            writer.hold(True)
            pending = plog.append_native(validated, writer, 0.001)
            answers: list[tuple[bool, object]] = []
            settled = threading.Event()
            pending.when_settled(lambda ok, value: (answers.append((ok, value)), settled.set()))
            writer.hold(False)
            assert settled.wait(10)
            assert not answers[0][0] and isinstance(answers[0][1], KafkaStorageError)
        assert not plog.io.online
        assert _unchanged(plog) == before
        assert plog.lock.acquire(blocking=False)
        plog.lock.release()
    finally:
        plog.close()


def test_a_write_that_runs_out_of_space_is_cut_back_and_the_dir_is_full_not_offline(tmp_path, writer):
    """ENOSPC from a real filesystem (a 1 MiB tmpfs would need root; /dev/full refuses every write with ENOSPC,
    which is the same answer at the system call): the writer cuts the file back to where the append began."""
    plog, clock = _ready_log(tmp_path)
    seg = plog.active_segment
    try:
        now = clock.now
        before = _unchanged(plog)
        real, seg._fh = seg._fh, FileHandle(os.open("/dev/full", os.O_WRONLY), seg.log_path, plog.io)
        with pytest.raises(StorageError) as e:
            plog.append_native(plog.validate(kp_batch([b"z"], timestamp=now), now_ms=now), writer, 5.0)
        assert type(e.value).__name__ == "LogDirFullError"
        assert plog.io.online and plog.io.full
        os.close(seg._fh.fd)
        seg._fh = real
        assert _unchanged(plog) == before
        assert plog.lock.acquire(blocking=False)
        plog.lock.release()
    finally:
        plog.close()


# ------------------------------------------------------------------------------- when the loop may use the writer
@pytest.mark.parametrize("why", ["busy process", "the worker busy", "dir slow", "faults injected", "dir offline",
                                 "turned off", "a wait ran out", "dir failed"])
def test_the_writer_is_offered_only_to_a_quiet_loop_on_an_idle_healthy_dir(worker, monkeypatch, why):
    monkeypatch.setattr(workers, "_may_wait", lambda: True)
    fixture_worker = worker
    first = worker.native_writer()
    assert first is not None and worker.native_writer() is first  # one writer thread per dir
    if why == "busy process":
        monkeypatch.setattr(workers, "_may_wait", lambda: False)
    elif why == "the worker busy":
        worker._jobs.append([])
    elif why == "dir slow":
        worker.degraded = lambda: True
    elif why == "faults injected":
        monkeypatch.setattr(workers.fsio.FAULTS, "active", True)
    elif why == "dir offline":
        monkeypatch.setattr(worker.io, "online", False)
    elif why == "turned off":
        monkeypatch.setenv(workers.NATIVE_ENV, "0")
        worker = workers.DirWorker(worker.io)
    elif why == "a wait ran out":
        worker.native_missed()  # not again for SYNC_BACKOFF_S
    else:
        worker.abandon()
    try:
        assert worker.native_writer() is None
    finally:
        if why == "the worker busy":
            worker._jobs.clear()
        if worker is not fixture_worker:
            worker.stop()
            worker.join(60)


# ----------------------------------------------------------------------------------------------------- live
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2,
                    reason="one CPU only: kjbod serve never places its threads, and the native path is taken only "
                           "while placed (a quiet process)")
def test_kjbod_serve_writes_a_quiet_producers_appends_through_the_native_writer(kjbod_server_factory, tmp_path,
                                                                               monkeypatch):
    """A producer sending one small batch at a time (acks=1) to a quiet node: its appends are written by the
    dirs' native writers (the node's KJBOD_TIMELINE records each as a "native append" the loop waited for), and
    a consumer reads back every record at its offset."""
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

    from tools.bench.dir_workers import read_timeline

    monkeypatch.setenv("KJBOD_TIMELINE", str(tmp_path / "timeline"))
    server = kjbod_server_factory()
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    admin.create_topics([NewTopic("quiet", 3, 1)])  # one partition per dir
    admin.close()
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, linger_ms=0, acks=1)
    sent = []
    for i in range(60):
        sent.append(producer.send("quiet", f"v{i}".encode(), partition=i % 3).get(timeout=30))
        time.sleep(0.005)  # one request at a time, a quiet node between them
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, consumer_timeout_ms=10_000,
                             enable_auto_commit=False)
    parts = [TopicPartition("quiet", p) for p in range(3)]
    consumer.assign(parts)
    consumer.seek_to_beginning()
    got = {(m.partition, m.offset): m.value for _, m in zip(range(60), consumer, strict=False)}
    consumer.close()
    assert got == {(md.partition, md.offset): f"v{i}".encode() for i, md in enumerate(sent)}
    assert server.stop() == 0
    native = [e for e in read_timeline(tmp_path / "timeline") if e[0] == "native append"]
    assert sum(1 for e in native if e[3] == "done") >= 30, native  # most of them, once the node is placed


class _Job:
    """A job with a native variant, as dir_work's _Call for a Produce: counts which way it ran."""

    def __init__(self, ran: list[str], name: str) -> None:
        self.ran = ran
        self.name = name

    def __call__(self) -> str:
        self.ran.append(f"{self.name} on the worker")
        return self.name

    def native(self, writer, worker):
        self.ran.append(f"{self.name} native")
        return self.name, None


def test_only_a_hand_over_of_one_job_is_done_natively_a_busier_pass_goes_to_the_worker(worker, monkeypatch):
    """At the end of a loop pass: one job held for the dir is done on the loop (its write on the native writer);
    several (a busy loop: they are written together, in one hand-over, by the worker) go to the worker."""
    monkeypatch.setattr(workers, "_may_wait", lambda: True)
    monkeypatch.setattr(workers, "SYNC_WAIT_MS", 60_000)
    ran: list[str] = []
    answers: list[object] = []

    async def scenario() -> None:
        done = asyncio.get_running_loop().create_future()
        worker.submit(_Job(ran, "alone"), lambda ok, v: answers.append(v))
        await asyncio.sleep(0)
        worker.submit(_Job(ran, "first"), lambda ok, v: answers.append(v))
        worker.submit(_Job(ran, "second"), lambda ok, v: (answers.append(v), done.set_result(None)))
        await done

    asyncio.run(scenario())
    assert ran == ["alone native", "first on the worker", "second on the worker"]
    assert answers == ["alone", "first", "second"]


def test_a_native_variant_that_raises_answers_its_request_and_the_dir_goes_on(worker, monkeypatch):
    monkeypatch.setattr(workers, "_may_wait", lambda: True)
    monkeypatch.setattr(workers, "SYNC_WAIT_MS", 60_000)
    ran: list[str] = []
    answers: list[tuple[bool, object]] = []

    class Broken(_Job):
        def native(self, writer, worker):
            raise RuntimeError("a bug in the native path")

    async def scenario() -> None:
        worker.submit(Broken(ran, "broken"), lambda ok, v: answers.append((ok, v)))
        await asyncio.sleep(0)
        worker.submit(_Job(ran, "next"), lambda ok, v: answers.append((ok, v)))
        await asyncio.sleep(0)

    asyncio.run(scenario())
    assert [(ok, str(v)) for ok, v in answers] == [(False, "a bug in the native path"), (True, "next")]
    assert ran == ["next native"]
