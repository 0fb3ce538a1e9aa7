"""The replica mover: KIP-113's "complete replica data movement" between the log dirs of this node.

Strategy. A pool of ``num.replica.alter.log.dirs.threads`` threads (default: one per log dir) takes moves from a
queue; a thread carries one move to its end before taking the next (Kafka's copy threads do the same). Every
byte a thread copies is charged to one shared :class:`~kjbod.broker.kip113.throttle.Throttle`.

Acceptance (:meth:`ReplicaMover.request_moves`, which AlterReplicaLogDirs calls from a worker thread before it
answers). As Kafka's ReplicaManager.alterReplicaLogDirs creates the future log while it handles the request, a
move gets its ``<topic>-<partition>.<32 hex>-future`` dir in the destination (with ``partition.metadata``) when
it is accepted, not when a thread gets to it: however long it waits in the queue, a kill -9 after the answer
leaves the dir, and the next start resumes the move (below). A request naming 10,000 partitions is one batch:
every dir that goes (a redirected or cancelled move's) is renamed to ``-delete`` and the renames made durable
first, so one partition never has two ``-future`` dirs on disk; then every new dir is made, and one fsync per
destination log dir makes their entries durable. ``partition.metadata`` is written but not synced (that would
be one fsync per partition): after a crash it may be missing or empty, and the move writes it again from the
current log's topic id, durably, before it copies anything. A destination that fails meanwhile (I/O error:
the fsio seam takes it offline) fails the moves into it, and only those. Redirecting or cancelling a move that a
thread is running waits until that thread has dropped its old future dir (and made the new one), which it does
between two chunks, so that answer holds after a crash as well.

A move then has three phases, with Kafka's on-disk names:

1. **Bulk copy.** The thread takes the move's ``-future`` dir (:meth:`ReplicaMover._adopt_future`: made when
   the move was accepted, found at startup, or made now if an earlier attempt dropped it) and copies every
   *closed* segment of the source whole: the ``.log`` with
   ``os.sendfile`` in throttle-sized chunks, then its ``.index`` and ``.timeindex``, each into a ``.tmp`` file.
   The ``.tmp`` files are fsynced in groups (every 64 MiB or 96 files: one fsync after another lets the disk
   write them together, which matters for small segments) and only then renamed, so a crash leaves complete
   files or ``.tmp`` files, which the loader deletes. Two things keep small segments from costing more than
   their bytes: a helper thread creates the ``.tmp`` files a few files ahead of the copy (a create can cost as
   much kernel time as copying 1 MiB), and the writeback of each copied chunk is started at once
   (sync_file_range, a hint), so the group's fsyncs find the data already on its way to the disk. Segments that roll while this runs are copied too, then
   the newest producer snapshots. None of this takes the partition's lock: closed segments never change, and
   appends carry on.
2. **Catch-up.** The future dir is opened as a ``-future`` log (LogManager.open_future_log); the thread reads
   the source from the future's log end as file regions (the lock is held only to find them) and appends the
   bytes to the future log as a follower, rolling it where the source's segments begin, until the future has
   reached the source's log end once.
   With a dir assigner (a node whose controller tracks replica dirs, KIP-858), the move then tells the
   controller where the replica is about to be and waits for the answer, catching up meanwhile (KIP-858's
   order: the metadata changes before the swap, so a dir that fails after the swap is never one the
   controller does not know holds the partition). A move that ends without its swap after that (cancelled,
   redirected, restarted, destination failed) points the metadata back at the source; one whose source
   failed reports the replica as lost (LOST_DIR), so the controller moves its leadership.
3. **Swap.** The last step runs where the partition's appends are serialised: the source dir's worker
   (kjbod.storage.workers), where a leader's produce and a follower's fetched batches and truncations are
   appended, between two of its jobs; the event loop only awaits requests as usual meanwhile (``exclusive``,
   the node's event loop, only when there are no dir workers: every append runs there then). It copies the few
   batches appended since, fsyncs the future, gives it the source's producer state (the copied snapshots keep
   one batch per producer; an idempotent producer's retry of an older in-flight batch must still be answered as
   a duplicate), then LogManager.replace_current_with_future renames the source to
   ``-delete`` and the future to ``<topic>-<partition>`` under both logs' locks and repoints the partition. The
   future dir's writes are made by the source dir's worker thread: they are stamped on the future dir's fsio seam
   all the same, so a future dir that hangs there is failed by the stall detection (and the move with it), but
   the source dir's worker waits for that call as long as the kernel holds it. The ``-delete`` dir is removed in the background after ``file.delete.delay.ms``. Produce requests
   wait only for this step (a few milliseconds), never for the copy.

Crash safety (KIP-113 "handle failure"): at startup a ``-future`` log next to its current log is resumed (the
segments it already holds whole are kept, the rest copied again; an empty one, with or without
``partition.metadata``, is a move accepted and not started), a ``-future`` log without a current log is
promoted when every dir is online and left alone (the partition offline) otherwise; ``-delete`` dirs are
removed by the loader. Failpoints (:mod:`.failpoints`) mark each step for kill -9 tests.

Disk failures: an I/O error on the destination (seen by the fsio seam, which takes that dir offline) aborts the
move and removes the future log where it still can; the source keeps serving. An I/O error on the source takes
its dir, and so the partition, offline; the move stops and the future log is closed and kept on disk.

Changing the destination while a move runs discards the future log and starts over toward the new dir;
sending the current dir (or "any") cancels the move. Progress (bytes copied of total, rate, ETA) is available
per move for DescribeLogDirs and is logged: one line per move at info, one per segment at debug. After every
pass of the copy (a chunk of a segment, a catch-up read) the move is watched (:mod:`.convergence`): one whose
source has outgrown the copy for two minutes says so in its progress (``not_converging``) and in a
``replica_move_not_converging`` warning, at most once a minute, since its catch-up could never end.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import structlog

from kjbod.broker.kip113 import failpoints
from kjbod.broker.kip113.convergence import ConvergenceWatch, NotConverging
from kjbod.broker.kip113.throttle import Throttle
from kjbod.storage.checkpoint import (
    PARTITION_METADATA_FILE,
    CheckpointFormatError,
    parse_partition_metadata,
    render_partition_metadata,
)
from kjbod.storage.errors import (
    KafkaStorageError,
    OffsetOutOfRangeError,
    StorageError,
    UnknownTopicOrPartitionError,
)
from kjbod.storage.fsio import FileHandle, LogDirIO
from kjbod.storage.log import PartitionLog
from kjbod.storage.manager import (
    DELETE_DIR_SUFFIX,
    FUTURE_DIR_SUFFIX,
    LogManager,
    suffixed_dir_name,
)
from kjbod.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, SNAPSHOT_SUFFIX, TIME_INDEX_SUFFIX

log = structlog.get_logger("kjbod.mover")

TopicPartition = tuple[str, int]
ENDED = ("done", "cancelled", "failed")
_SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)
_SWAP_FAILPOINTS = {
    "source_renamed": "source_renamed_to_delete",
    "future_renamed": "future_renamed_to_current",
    "deleting_old_copy": "before_old_copy_deleted",
}


# A dir assigner: (topic, partition, log dir path, or None for "lost") -> a future that ends True once the
# controller has the assignment, False when it never will (the partition is gone from this broker, or a newer
# assignment of it replaced this one).  Called from the mover threads; the node runs it on its event loop.
DirAssigner = Callable[[str, int, str | None], "Future[bool]"]
ASSIGN_POLL = 0.05  # s between two catch-up passes while the controller has not answered yet


class MoverStopped(Exception):
    """The node is shutting down: the move stays where it is and resumes at the next start."""


class _Retarget(Exception):
    """The destination changed or the move was cancelled while it ran."""


class _Restart(Exception):
    """The future log can no longer catch up (the source's retention overtook it): start again."""


@dataclass(frozen=True)
class MoveProgress:
    """A snapshot of one move, for DescribeLogDirs, logs and the CLI."""

    topic: str
    partition: int
    source_dir: str
    dest_dir: str
    state: str  # queued, copying, catching-up, swapping, done, cancelled, failed
    bytes_copied: int
    bytes_total: int
    rate: float  # bytes per second since the move started
    eta_seconds: float | None
    future_size: int  # bytes of the future log's segments so far
    future_log_end_offset: int | None  # while the future log is not open yet: the offset it has reached
    registered: bool  # the future log is open in the log manager (DescribeLogDirs reads it there)
    error: str | None = None
    not_converging: NotConverging | None = None  # the source outgrows the copy (see .convergence)


class _Move:
    def __init__(self, topic: str, partition: int, dest: str) -> None:
        self.topic = topic
        self.partition = partition
        self.dest = dest
        self.generation = 0
        self.cancelled = False
        self.state = "queued"
        self.source_dir = ""
        self.future_path: str | None = None  # the move's -future dir, on disk (and open in the manager if registered)
        self.preparing = False  # a request's thread is making or replacing its -future dir: no worker takes it
        self.ready_generation = -1  # the latest generation whose -future dir is in place
        self.failure: Exception | None = None  # why the move failed, for the request waiting on it
        self.registered = False
        self.bytes_copied = 0
        self.bytes_total = 0
        self.future_size = 0
        self.future_leo: int | None = None
        self.started: float | None = None
        self.error: str | None = None
        # The dir the controller was asked to record for this replica before its swap (KIP-858), until the swap
        # makes it true or the move points the metadata back at the source.
        self.assigned_dir: str | None = None
        self.watch = ConvergenceWatch()  # a new one each time the move starts copying (_move_once)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


def _run_here(fn: Callable[[], Any]) -> Any:
    return fn()


class ReplicaMover:
    """Moves partitions between the log dirs of one LogManager.

    ``exclusive(fn)`` runs the final catch-up and swap where no append can interleave and returns fn's result
    (re-raising its exception) when the source dir has no worker (``by_dir_worker`` off): the node passes a
    function that runs ``fn`` on its event loop, where every append runs then. With workers the final step runs on
    the source dir's worker instead. The default runs it in the mover thread, which is right only when nothing
    else appends (tests, tools).

    ``assign_dir`` (see DirAssigner) tells the controller where a replica is about to be; without it (a node whose
    metadata does not track dirs, tests) a move swaps as soon as its future log has caught up.
    """

    def __init__(
        self,
        manager: LogManager,
        *,
        threads: int,
        throttle: Throttle | None = None,
        exclusive: Callable[[Callable[[], Any]], Any] | None = None,
        assign_dir: DirAssigner | None = None,
        by_dir_worker: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.manager = manager
        self.clock = clock  # what judges whether a move converges (tests drive it)
        self.assign_dir = assign_dir
        self.threads = max(1, threads)
        self.throttle = throttle or Throttle()
        self.exclusive = exclusive or _run_here
        # Appends (a leader's and a follower's) run on each dir's worker: the final step runs there too, and
        # ``exclusive`` only where there are no workers. Default: without an ``exclusive`` of its own.
        self._by_dir_worker = exclusive is None if by_dir_worker is None else by_dir_worker
        self._cond = threading.Condition()
        self._queue: deque[_Move] = deque()
        self._moves: dict[TopicPartition, _Move] = {}
        self._workers: list[threading.Thread] = []
        self._stop = threading.Event()
        self._fsync_pool, self._create_pool = _helper_pools()
        self.completed = 0

    # ------------------------------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._workers:
            return
        self._stop.clear()
        for i in range(self.threads):
            t = threading.Thread(target=self._worker, name=f"kjbod-replica-mover-{i}", daemon=True)
            t.start()
            self._workers.append(t)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every thread between two chunks; moves in progress resume at the next start."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self.throttle.wake()
        deadline = time.monotonic() + timeout
        for t in self._workers:
            t.join(max(0.0, deadline - time.monotonic()))
        self._workers.clear()
        self._fsync_pool.shutdown(wait=True)
        self._create_pool.shutdown(wait=True)
        self._fsync_pool, self._create_pool = _helper_pools()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def resume_at_startup(self) -> None:
        """KIP-113's recovery for every ``-future`` log the loader found (see the module docstring)."""
        offline = self.manager.offline_dirs
        for future in self.manager.future_logs():
            topic, partition = future.topic, future.partition
            if self.manager.find(topic, partition) is not None:
                log.info("replica_move_resuming", partition=future.name, dest_dir=future.log_dir,
                         future_log_end_offset=future.log_end_offset)
                failed = self.request_move(topic, partition, future.log_dir)
                if failed is not None:
                    log.error("replica_move_not_resumed", partition=future.name, dest_dir=future.log_dir,
                              error=str(failed))
            elif offline:
                log.warning("future_log_left_offline", partition=future.name, future_dir=future.dir,
                            offline_dirs=offline,
                            reason="its current log may be in an offline dir; the partition stays offline")
            else:
                self.manager.promote_future_log(topic, partition)

    # ------------------------------------------------------------------------------------------ requests

    def request_move(self, topic: str, partition: int, dest: str) -> Exception | None:
        """Start moving ``topic-partition`` to ``dest`` (a log dir path), or redirect the move in progress; the
        error that refused it, if any (see :meth:`request_moves`)."""
        return self.request_moves([(topic, partition, dest)]).get((topic, partition))

    def request_moves(self, changes: Iterable[tuple[str, int, str | None]]) -> dict[TopicPartition, Exception]:
        """Start, redirect or cancel (``dest`` None) moves, so that the outcome survives a crash: when this
        returns, every move it started or redirected has its ``-future`` dir in its destination, durably, and
        every move it cancelled has lost its own (see "Acceptance" in the module docstring). A partition named
        twice keeps the last change. Returns the changes that failed, {partition: exception}: KafkaStorageError
        when the destination failed (it is offline now), UnknownTopicOrPartitionError when the partition went.

        Blocking (file I/O, and a move a thread is running is waited for until the thread has let go of its old
        future dir): the node calls this from a worker thread, never its event loop."""
        wanted: dict[TopicPartition, str | None] = {}
        for topic, partition, dest in changes:
            wanted.pop((topic, partition), None)
            wanted[(topic, partition)] = dest
        prepare: list[tuple[_Move, str]] = []  # queued moves whose dirs this thread makes
        dropped: list[_Move] = []  # queued moves cancelled: their dirs go
        unowned: list[_Move] = []  # a cancel with no move: a future log left behind (a stopped move's) goes
        running: list[tuple[_Move, int]] = []  # redirected or cancelled while a thread runs them: it acts

        def busy() -> bool:  # another request is making some of these dirs (file I/O only): let it finish
            return any(m.preparing for m in map(self._moves.get, wanted) if m is not None)

        with self._cond:
            self._cond.wait_for(lambda: not busy())
            for (topic, partition), dest in wanted.items():
                m = self._moves.get((topic, partition))
                if m is not None and m.state in ENDED:
                    m = None
                if dest is None:
                    if m is None:
                        unowned.append(_Move(topic, partition, ""))
                    elif self._cancel_locked(m):
                        dropped.append(m)
                    else:
                        running.append((m, m.generation))
                elif m is None:
                    m = _Move(topic, partition, dest)
                    m.preparing = True
                    self._moves[(topic, partition)] = m
                    self._queue.append(m)
                    prepare.append((m, dest))
                elif m.dest != dest or m.cancelled:
                    m.dest = dest
                    m.cancelled = False
                    m.generation += 1
                    log.info("replica_move_redirected", partition=m.name, dest_dir=dest)
                    if m.state == "queued":
                        m.preparing = True
                        prepare.append((m, dest))
                    else:
                        running.append((m, m.generation))
        if running:
            self.throttle.wake()  # a thread sleeping in the pacer notices the change now
        try:
            failures = self._settle_dirs(prepare, dropped + unowned)
        except Exception as e:  # a bug: the moves fail (none may stay "preparing", which would stall the queue)
            log.exception("future_dirs_not_made", partitions=len(prepare))
            failures = {(m.topic, m.partition): e for m, _dest in prepare}
        late = []
        with self._cond:
            for m, _dest in prepare:
                m.preparing = False
                key = (m.topic, m.partition)
                error = failures.get(key)
                if error is not None:
                    m.state, m.error, m.failure = "failed", str(error), error
                    if self._moves.get(key) is m:
                        del self._moves[key]
                    if m.future_path is not None:
                        late.append(m)
                elif m.cancelled or self._moves.get(key) is not m:
                    late.append(m)  # cancelled meanwhile (its topic was deleted): the dir just made goes
                else:
                    m.ready_generation = m.generation
            self._cond.notify_all()
        if late:
            self._settle_dirs([], late)
        for m in dropped:
            log.info("replica_move_cancelled", partition=m.name, dest_dir=m.dest, state="queued")
        for m, generation in running:
            with self._cond:
                self._cond.wait_for(self._let_go(m, generation))
                if m.generation == generation and m.state == "failed" and m.failure is not None:
                    failures[(m.topic, m.partition)] = m.failure
        if prepare or dropped or running:
            failpoints.hit("move_accepted")
        return failures

    def _let_go(self, m: _Move, generation: int) -> Callable[[], bool]:
        """Whether the thread running ``m`` has acted on change ``generation``: the future dir of the new
        destination is in place (the old one gone), or the move ended (cancelled, failed, or done before the
        change could apply), or the node is stopping."""
        return lambda: m.ready_generation >= generation or m.state in ENDED or self._stop.is_set()

    def cancel(self, topic: str, partition: int) -> bool:
        """Cancel the move of ``topic-partition`` without waiting (its future log is deleted: here for a queued
        move, by its thread for a running one); False if none was running."""
        with self._cond:
            m = self._moves.get((topic, partition))
            if m is None or m.state in ENDED:
                return False
            dropped = self._cancel_locked(m) and not m.preparing  # a preparing request drops its own dir
        if dropped:
            self._settle_dirs([], [m])
            log.info("replica_move_cancelled", partition=m.name, dest_dir=m.dest, state="queued")
        return True

    def _cancel_locked(self, m: _Move) -> bool:
        """(Holding _cond.) Mark ``m`` cancelled; True when it was only queued, so it is gone now and its dir is
        the caller's to remove (its queue entry is skipped by the workers)."""
        m.cancelled = True
        m.generation += 1
        if m.state != "queued":
            return False
        m.state = "cancelled"
        del self._moves[(m.topic, m.partition)]
        return True

    def destination(self, topic: str, partition: int) -> str | None:
        """Where ``topic-partition`` is being moved, if it is."""
        with self._cond:
            m = self._moves.get((topic, partition))
            if m is None or m.cancelled or m.state in ENDED:
                return None
            return m.dest

    def wait_settled(self, topic: str, partition: int, timeout: float | None = None) -> bool:
        """Wait until ``topic-partition`` has no move queued or running (done, cancelled, failed or paused by a
        stop); False if ``timeout`` passed first."""

        def settled() -> bool:
            m = self._moves.get((topic, partition))
            return m is None or m.state in ENDED or self._stop.is_set()

        with self._cond:
            return self._cond.wait_for(settled, timeout)

    def progress(self, topic: str, partition: int) -> MoveProgress | None:
        with self._cond:
            m = self._moves.get((topic, partition))
        return None if m is None else self._snapshot(m)

    def all_progress(self) -> list[MoveProgress]:
        with self._cond:
            moves = list(self._moves.values())
        return [self._snapshot(m) for m in moves]

    def _snapshot(self, m: _Move) -> MoveProgress:
        elapsed = time.monotonic() - m.started if m.started is not None else 0.0
        rate = m.bytes_copied / elapsed if elapsed > 0 else 0.0
        total = m.bytes_total
        source = self.manager.find(m.topic, m.partition)
        if source is not None and m.state in ("copying", "catching-up"):
            # The source keeps growing while it is copied: what is left is its size minus what the future holds.
            future = self.manager.get_future(m.topic, m.partition) if m.registered else None
            held = future.size_bytes if future is not None else m.future_size
            total = m.bytes_copied + max(0, source.size_bytes - held)
        remaining = max(0, total - m.bytes_copied)
        eta_rate = rate if self.throttle.unlimited else min(rate or self.throttle.rate, self.throttle.rate)
        eta = remaining / eta_rate if eta_rate > 0 else None
        return MoveProgress(
            m.topic, m.partition, m.source_dir, m.dest, m.state, m.bytes_copied, total, rate, eta,
            m.future_size, m.future_leo, m.registered, m.error,
            m.watch.state if m.state in ("copying", "catching-up") else None,
        )

    def _watch(self, m: _Move, source: PartitionLog, future: PartitionLog | None) -> None:
        """After a pass of the copy (a segment copied, a catch-up read): is the move still gaining on its
        source? If not, warn, at most once a minute per move: the catch-up would never end and nothing else says
        so. The way out is Kafka's: raise or remove the throttle, or cancel the move (see the README)."""
        now = self.clock()
        if not m.watch.due(now):
            return
        held = future.size_bytes if future is not None else m.future_size
        state = m.watch.observe(now, m.bytes_copied, source.size_bytes, held)
        if state is not None and m.watch.should_warn(now):
            log.warning("replica_move_not_converging", partition=m.name, source_dir=m.source_dir, dest_dir=m.dest,
                        bytes_behind=state.bytes_behind, copy_bytes_per_second=round(state.copy_rate),
                        source_growth_bytes_per_second=round(state.growth_rate),
                        window_seconds=round(state.seconds, 1),
                        throttle_bytes_per_second=None if self.throttle.unlimited else self.throttle.rate,
                        effect="the catch-up cannot end while the source grows faster than the copy; raise or "
                               "remove the throttle, or cancel the move")

    # ------------------------------------------------------------------------------------------ threads

    def _worker(self) -> None:
        _lower_priority()
        while True:
            with self._cond:
                m = self._next_move()
            if m is None:
                return
            try:
                with self.throttle.copying():
                    self._run(m)
            except MoverStopped:
                log.info("replica_move_paused", partition=m.name, dest_dir=m.dest,
                         reason="shutting down; resumes at the next start")
            finally:
                with self._cond:
                    if m.state in ENDED and self._moves.get((m.topic, m.partition)) is m:
                        del self._moves[(m.topic, m.partition)]
                    self._cond.notify_all()

    def _next_move(self) -> _Move | None:
        """(Holding _cond.) The next queued move, now "copying"; waits while its dir is being made (a request's
        batch: its moves start once the whole batch is durable); None when stopping."""
        queue = self._queue
        while not self._stop.is_set():
            if not queue:
                self._cond.wait()
                continue
            m = queue[0]
            if m.state != "queued" or self._moves.get((m.topic, m.partition)) is not m:
                queue.popleft()  # cancelled, or failed to get its dir, while queued
            elif m.preparing:
                self._cond.wait()
            else:
                queue.popleft()
                m.state = "copying"
                return m
        return None

    def _interrupted(self, m: _Move, generation: int) -> Callable[[], bool]:
        """For the pacer: stop sleeping when the node stops or the move is redirected or cancelled (a request
        waits for the thread to let go of the future dir)."""
        stop = self._stop.is_set
        return lambda: stop() or m.generation != generation

    def _check(self, m: _Move, generation: int) -> None:
        if self._stop.is_set():
            raise MoverStopped()
        if m.generation != generation:
            raise _Retarget()

    def _run(self, m: _Move) -> None:
        while True:
            with self._cond:
                generation, dest, cancelled = m.generation, m.dest, m.cancelled
            if cancelled:
                self._discard_future(m)
                m.state = "cancelled"
                log.info("replica_move_cancelled", partition=m.name, dest_dir=dest)
                return
            try:
                self._move_once(m, generation, dest)
                with self._cond:
                    redirected = m.generation != generation and not m.cancelled
                    if redirected:
                        m.state = "copying"
                if not redirected:
                    return
                # A new destination arrived while the swap ran: move again, from the new current dir.
                m.bytes_copied = m.future_size = 0
                m.future_leo = None
                continue
            except (_Retarget, _Restart) as e:
                if self._stop.is_set():
                    raise MoverStopped() from None
                self._point_metadata_back(m, lost=False, why="the move was redirected, cancelled or restarted")
                self._discard_future(m)
                m.bytes_copied = m.future_size = 0
                m.future_leo = None
                m.state = "copying"
                if isinstance(e, _Restart):
                    log.info("replica_move_restarting", partition=m.name, dest_dir=dest,
                             reason="the source's retention overtook the future log")
                continue
            except MoverStopped:
                raise
            except KafkaStorageError as e:
                self._storage_failure(m, dest, e)
                return
            except UnknownTopicOrPartitionError as e:
                # The partition was deleted while it moved.
                self._discard_future(m)
                m.state, m.error = "cancelled", str(e)
                log.info("replica_move_cancelled", partition=m.name, dest_dir=dest, reason=str(e))
                return
            except Exception as e:
                log.exception("replica_move_failed", partition=m.name, dest_dir=dest)
                self._point_metadata_back(m, lost=False, why="the move failed")
                try:
                    self._discard_future(m)
                except Exception:
                    log.exception("future_log_cleanup_failed", partition=m.name)
                m.state, m.error, m.failure = "failed", f"{type(e).__name__}: {e}", e
                return

    def _storage_failure(self, m: _Move, dest: str, e: KafkaStorageError) -> None:
        source = self.manager.find(m.topic, m.partition)
        source_down = source is None or not source.io.online or e.log_dir == m.source_dir
        m.state, m.error, m.failure = "failed", str(e), e
        if source_down and e.log_dir != dest:
            # KIP-113: the move stops; the partition is offline with its dir. The future log is closed and kept:
            # a restart with the source dir repaired resumes the move, one without it leaves both alone.
            self.manager.delete_future_log(m.topic, m.partition, keep_files=True)
            log.error("replica_move_stopped_source_failed", partition=m.name, source_dir=m.source_dir,
                      dest_dir=dest, error=str(e))
            # The controller may already record the replica in the destination, so the source dir's failure
            # would not take its leadership away: KIP-858 has the broker report it lost instead.
            self._point_metadata_back(m, lost=True, why="its source dir failed")
        else:
            # Destination failed: drop the future log (deleted if the dir still allows it); the source serves on.
            self._point_metadata_back(m, lost=False, why="its destination dir failed")
            self._discard_future(m)
            log.error("replica_move_aborted_destination_failed", partition=m.name, source_dir=m.source_dir,
                      dest_dir=dest, error=str(e))

    def _point_metadata_back(self, m: _Move, *, lost: bool, why: str) -> None:
        """A move that asked the controller to record its destination ends without its swap: the replica is
        still in its source, so the metadata is pointed back there (a still-queued assignment is simply replaced)
        or, the source having failed, at LOST_DIR.  Not waited for: the assigner retries until it is through."""
        assigned, m.assigned_dir = m.assigned_dir, None
        if assigned is None or self.assign_dir is None:
            return
        log.warning("replica_dir_assignment_reverted", partition=m.name, assigned_dir=assigned,
                    now="LOST_DIR" if lost else m.source_dir, reason=why)
        self.assign_dir(m.topic, m.partition, None if lost else m.source_dir)

    def assigned_dirs(self) -> dict[TopicPartition, str]:
        """{partition: dir} for the moves whose destination the controller was asked to record and that have not
        swapped yet: the node treats that dir as the replica's (it must not point the metadata back meanwhile)."""
        with self._cond:
            moves = list(self._moves.values())
        return {(m.topic, m.partition): d for m in moves if (d := m.assigned_dir) is not None}

    def _await_assignment(self, m: _Move, generation: int, source: PartitionLog, future: PartitionLog,
                          dest: str) -> None:
        """KIP-858's step between the first catch-up and the swap: ask the controller to record the replica in
        ``dest`` and keep catching up until it has (the source still takes appends)."""
        if self.assign_dir is None:
            return
        while True:
            m.assigned_dir = dest
            asked = time.monotonic()
            log.info("replica_dir_assignment_requested", partition=m.name, dest_dir=dest)
            confirmed = self.assign_dir(m.topic, m.partition, dest)
            while True:
                try:
                    ok = confirmed.result(timeout=ASSIGN_POLL)
                    break
                except TimeoutError:
                    # A dir found failed meanwhile by anything else (a produce, a flush) ends the move here too:
                    # with no new batch to copy, the catch-up would not touch the disk and never see it.
                    for side in (source.io, future.io):
                        side.ensure_online()
                    self._catch_up(m, generation, source, future, final=False)  # _Retarget, MoverStopped
                except CancelledError:  # the node is going away
                    raise MoverStopped() from None
            if ok:
                log.info("replica_dir_assignment_confirmed", partition=m.name, dest_dir=dest,
                         waited_ms=round((time.monotonic() - asked) * 1000, 1))
                return
            self._check(m, generation)  # replaced by the assignment of a new destination: _Retarget
            if self.manager.find(m.topic, m.partition) is None:
                raise UnknownTopicOrPartitionError(f"{m.name} is no longer on this broker")
            # Refused for something else (the node does not know the dir or the topic yet): ask again shortly.
            log.warning("replica_dir_assignment_not_confirmed", partition=m.name, dest_dir=dest, effect="asking again")
            if self._stop.wait(1.0):
                raise MoverStopped()

    def _discard_future(self, m: _Move) -> None:
        """Delete the move's future log (registered or still a bare dir); errors on an offline dir are logged."""
        self._settle_dirs([], [m])

    def _settle_dirs(self, make: list[tuple[_Move, str]], drop: Iterable[_Move] = ()) -> dict[TopicPartition, Exception]:
        """Give each move of ``make`` a ``-future`` dir in its destination and take every other one it or a move
        of ``drop`` owns away, as one batch (see "Acceptance" in the module docstring): the dirs that go are
        renamed to ``-delete`` and the renames made durable (one fsync per log dir) before any dir is made, so
        a partition never has two ``-future`` dirs on disk; the new dirs' entries are made durable with one
        fsync per destination; the ``-delete`` dirs are handed to the manager's background deletions (a dir that
        cannot be removed, its log dir being offline, is logged there). A move whose dir is already in its
        destination keeps it. Returns {partition: error} for the moves of ``make`` left without a dir."""
        mgr = self.manager
        errors: dict[TopicPartition, Exception] = {}
        renamed: list[tuple[LogDirIO, str]] = []
        touched: dict[str, LogDirIO] = {}
        for m, dest in [*make, *((m, None) for m in drop)]:
            key = (m.topic, m.partition)
            registered = mgr.get_future(*key)
            m.registered = False
            try:
                if registered is not None:
                    if registered.log_dir == dest:
                        # Found at startup: the move's own. It stays open in the manager (which reports it) until
                        # a thread adopts it.
                        m.future_path = registered.dir
                        m.registered = True
                        continue
                    mgr.delete_future_log(*key)  # renamed to -delete, durably, and removed in the background
                    m.future_path = None
                path = m.future_path
                if path is None or os.path.dirname(path) == dest:
                    continue
                m.future_path = None
                io = mgr.dir_io(os.path.dirname(path))
                if io.online and io.exists(path):
                    doomed = io.join(suffixed_dir_name(m.topic, m.partition, DELETE_DIR_SUFFIX))
                    io.rename(path, doomed)
                    renamed.append((io, doomed))
                    touched[io.path] = io
            except KafkaStorageError as e:
                log.warning("future_log_not_removed", partition=m.name, error=str(e))
        for io in touched.values():
            try:
                io.fsync_dir()
            except KafkaStorageError as e:
                log.warning("future_log_not_removed", log_dir=io.path, error=str(e))
        made: dict[str, list[_Move]] = {}
        dest_io: dict[str, LogDirIO] = {}
        for m, dest in make:
            key = (m.topic, m.partition)
            if m.future_path is not None:
                continue
            source = mgr.find(*key)
            if source is None:
                errors[key] = UnknownTopicOrPartitionError(f"this node has no log for {m.name}")
                continue
            if source.log_dir == dest:
                continue  # nothing to copy: the thread that takes the move finds it done
            try:
                io = dest_io.get(dest) or dest_io.setdefault(dest, mgr.dir_io(dest))
                path = os.path.join(io.path, suffixed_dir_name(m.topic, m.partition, FUTURE_DIR_SUFFIX))
                io.mkdir(path)
                if source.topic_id is not None:
                    _write_unsynced(io, os.path.join(path, PARTITION_METADATA_FILE),
                                    render_partition_metadata(source.topic_id).encode())
            except StorageError as e:  # KafkaStorageError: the dir is offline now, and the rest into it fail fast
                errors[key] = e
                continue
            m.future_path = path
            made.setdefault(dest, []).append(m)
        for dest, moves in made.items():
            try:
                dest_io[dest].fsync_dir()
            except KafkaStorageError as e:
                for m in moves:
                    errors[(m.topic, m.partition)] = e
                    m.future_path = None
        now = mgr.clock()
        for io, doomed in renamed:  # removed in the background, as every -delete dir is (a bulk cancel answers now)
            mgr.deletions.schedule(now, doomed, functools.partial(io.rmtree, doomed))
        return errors

    def _adopt_future(self, m: _Move, generation: int, source: PartitionLog, dio: LogDirIO, dest: str) -> tuple[str, bool]:
        """The move's ``-future`` dir in ``dest``, ready for the bulk copy, and whether it holds anything copied
        before. It is the dir made when the move was accepted or found at startup (closed in the manager: the
        bulk copy fills it as a bare dir), or one made now (a redirect while the move ran, or an earlier attempt
        that dropped its dir), the same way. ``partition.metadata`` was not synced when the dir was made: it is
        written again if a crash left it missing, empty or wrong, and fsynced either way, before any byte is
        copied (the swap must not make a log without a durable topic id current)."""
        key = (m.topic, m.partition)
        registered = self.manager.get_future(*key)
        if registered is not None and registered.log_dir == dest:
            m.future_path = registered.dir
            self.manager.delete_future_log(*key, keep_files=True)
        failed = self._settle_dirs([(m, dest)]).get(key)
        if failed is not None:
            raise failed
        path = m.future_path
        assert path is not None
        if source.topic_id is not None:
            meta_path = os.path.join(path, PARTITION_METADATA_FILE)
            data = dio.read_bytes_or_none(meta_path)
            try:
                ok = data is not None and parse_partition_metadata(data.decode("utf-8", "replace")) == source.topic_id
            except CheckpointFormatError:
                ok = False
            if ok:
                meta = dio.open(meta_path, os.O_RDONLY)
                try:
                    meta.fsync()
                finally:
                    meta.close()
            else:
                log.info("future_partition_metadata_rewritten", partition=m.name, future_dir=path,
                         found="missing" if data is None else "unreadable or another topic id")
                dio.write_atomic(meta_path, render_partition_metadata(source.topic_id).encode())
        resumed = any(name != PARTITION_METADATA_FILE for name, _is_dir in dio.list_entries(path))
        with self._cond:
            m.ready_generation = max(m.ready_generation, generation)
            self._cond.notify_all()
        return path, resumed

    # ------------------------------------------------------------------------------------------ one move

    def _move_once(self, m: _Move, generation: int, dest: str) -> None:
        mgr = self.manager
        source = mgr.get(m.topic, m.partition)
        if source.log_dir == dest:
            self._discard_future(m)
            m.state = "done"
            return
        # Kafka's abortAndPauseCleaning: the copy reads closed segments a clean would replace, so the source is
        # not compacted while it moves (the moved copy is then cleaned where it lands).
        source.abort_cleaning()
        try:
            self._move_paused(m, generation, dest, source)
        finally:
            source.resume_cleaning()

    def _move_paused(self, m: _Move, generation: int, dest: str, source: PartitionLog) -> None:
        mgr = self.manager
        dio = mgr.dir_io(dest)
        dio.ensure_online()
        source.io.ensure_online()
        m.source_dir = source.log_dir
        m.started = time.monotonic()
        m.watch = ConvergenceWatch()
        m.bytes_total = source.size_bytes
        m.future_leo = source.log_start_offset
        # The dir made when the move was accepted (or found at startup: a resume keeps the segments it holds).
        path, resumed = self._adopt_future(m, generation, source, dio, dest)
        log.info("replica_move_started", partition=m.name, source_dir=source.log_dir, dest_dir=dest,
                 bytes=m.bytes_total, resumed=resumed,
                 throttle_bytes_per_second=None if self.throttle.unlimited else self.throttle.rate)
        failpoints.hit("future_dir_created")

        self._bulk_copy(m, generation, source, dio, path)
        self._check(m, generation)
        future = mgr.open_future_log(m.topic, m.partition, path, log_start_offset=source.log_start_offset)
        m.registered = True
        m.state = "catching-up"
        future.roll()  # the source's active segment starts a new segment here too
        self._catch_up(m, generation, source, future, final=False)
        future.flush()
        self._await_assignment(m, generation, source, future, dest)
        failpoints.hit("caught_up_before_lock")
        self._check(m, generation)
        m.state = "swapping"
        swapped = time.monotonic()
        self._call_exclusive(lambda: self._finish(m, generation, source, future), source.log_dir)
        swap_ms = (time.monotonic() - swapped) * 1000
        elapsed = time.monotonic() - m.started
        log.info("replica_move_completed", partition=m.name, source_dir=m.source_dir, dest_dir=dest,
                 bytes_copied=m.bytes_copied, log_end_offset=future.log_end_offset, seconds=round(elapsed, 3),
                 bytes_per_second=round(m.bytes_copied / elapsed) if elapsed > 0 else None,
                 final_step_ms=round(swap_ms, 2))
        m.state = "done"
        self.completed += 1
        mgr.checkpoint()  # recovery points of the moved log, so an unclean restart does not re-read it all

    def _call_exclusive(self, fn: Callable[[], Any], log_dir: str | None = None) -> Any:
        # Every append to a partition (a leader's produce, a follower's fetched batches, its truncations) runs on
        # its dir's worker (kjbod.storage.workers): the final step runs there too, between two of its jobs, so
        # none can interleave with it. Without workers (KJBOD_DIR_WORKERS=0) appends run on the event loop, and
        # ``exclusive`` runs it there.
        worker = self.manager.worker(log_dir) if self._by_dir_worker and log_dir is not None else None
        if worker is None:
            return self.exclusive(fn)
        try:
            return worker.call(fn, gave_up=lambda: self.stopping)
        except TimeoutError:
            raise MoverStopped() from None

    def _finish(self, m: _Move, generation: int, source: PartitionLog, future: PartitionLog) -> None:
        """The final step, with appends held off: last batches, fsync, swap."""
        if m.generation != generation:
            raise _Retarget()
        self._catch_up(m, generation, source, future, final=True)
        if future.log_end_offset != source.log_end_offset:
            raise RuntimeError(
                f"{m.name}: future log at {future.log_end_offset} after the final catch-up, source at "
                f"{source.log_end_offset}"
            )
        future.flush()
        future.take_producer_state(source)  # the snapshots it was built from keep one batch per producer
        self.manager.replace_current_with_future(
            m.topic, m.partition, on_step=lambda step: failpoints.hit(_SWAP_FAILPOINTS[step]),
            write_checkpoints=False,
        )
        m.registered = False
        m.future_path = None
        m.assigned_dir = None  # true now: the replica is where the metadata says

    # ------------------------------------------------------------------------------------------ bulk copy

    def _bulk_copy(self, m: _Move, generation: int, source: PartitionLog, dio: LogDirIO, path: str) -> None:
        have: dict[str, int] = {}
        for name, is_dir in dio.list_entries(path):
            if not is_dir:
                st = dio.stat_or_none(os.path.join(path, name))
                if st is not None:
                    have[name] = st.st_size
        done: list[int] = []
        pending = _PendingFiles(dio, self._fsync_pool)
        creator = _Precreator(dio, self._create_pool)
        try:
            while True:
                self._check(m, generation)
                groups = _closed_segments(source)
                bases = _segment_bases(source)
                todo = [b for b in groups if not done or b > done[-1]]
                if not todo:
                    break
                # What to copy, in order: the .tmp files are created that far ahead of the copy (see _Precreator).
                plan: list[tuple[int, tuple[str, int], list[tuple[str, bool]]]] = []
                for base in todo:
                    files = groups[base]
                    log_file = files.get(LOG_SUFFIX)
                    if log_file is None:
                        continue
                    indexes = [f[0] for f in (files.get(INDEX_SUFFIX), files.get(TIME_INDEX_SUFFIX)) if f is not None]
                    if have.get(os.path.basename(log_file[0])) == log_file[1] and log_file[1] > 0:
                        # Copied whole before a restart (same base offset, same length: segments never change).
                        copies = [(p, False) for p in indexes if os.path.basename(p) not in have]
                    else:
                        copies = [(log_file[0], True)] + [(p, False) for p in indexes]
                    plan.append((base, log_file, copies))
                creator.plan(os.path.join(path, os.path.basename(p)) for _b, _l, copies in plan for p, _d in copies)
                for base, log_file, copies in plan:
                    self._check(m, generation)
                    started = time.monotonic()
                    copied: int | None = log_file[1]
                    for src_path, data in copies:
                        n = self._copy_file(m, generation, source.io, src_path, pending, data=data, creator=creator,
                                            source=source)
                        if data:
                            copied = n
                            if n is None:
                                break  # deleted by retention meanwhile: the future does not need it
                    if copied is None:
                        continue
                    if not copies or not copies[0][1]:
                        m.future_size += log_file[1]  # already there from before a restart
                    elif log.is_enabled_for(logging.DEBUG):
                        seconds = time.monotonic() - started
                        progress = self._snapshot(m)
                        log.debug("replica_move_segment_copied", partition=m.name,
                                  segment=os.path.basename(log_file[0]), bytes=copied, seconds=round(seconds, 4),
                                  bytes_copied=progress.bytes_copied, bytes_total=progress.bytes_total,
                                  bytes_per_second=round(progress.rate),
                                  eta_seconds=None if progress.eta_seconds is None else round(progress.eta_seconds, 1))
                    done.append(base)
                    self._watch(m, source, None)
                    i = bisect_right(bases, base)
                    m.future_leo = bases[i] if i < len(bases) else source.log_end_offset
                    if pending.due():
                        pending.commit(wait=False)
            pending.commit()
        finally:
            creator.close()
            pending.abandon()
        # Everything else in the future dir is stale (a resumed move's partial or extra segments, leftovers).
        keep = {PARTITION_METADATA_FILE}
        for base in done:
            keep.update(f"{base:020d}{suffix}" for suffix in _SEGMENT_SUFFIXES)
        for name, is_dir in dio.list_entries(path):
            if not is_dir and name not in keep:
                dio.unlink(os.path.join(path, name), missing_ok=True)
        self._copy_snapshots(m, generation, source, dio, path, m.future_leo if done else source.log_start_offset)
        dio.fsync_dir(path)

    def _copy_snapshots(
        self, m: _Move, generation: int, source: PartitionLog, dio: LogDirIO, path: str, up_to: int | None
    ) -> None:
        """Producer-state snapshots at or below where the copied segments end, so the future log rebuilds its
        producer state from a snapshot instead of replaying every batch header."""
        if up_to is None:
            return
        pending = _PendingFiles(dio)
        try:
            for name in source.io.listdir(source.dir):
                if name.endswith(SNAPSHOT_SUFFIX) and name[:20].isdigit() and int(name[:20]) <= up_to:
                    self._copy_file(m, generation, source.io, os.path.join(source.dir, name), pending,
                                    data=False, dest_dir=path)
            pending.commit()
        finally:
            pending.abandon()

    def _copy_file(
        self, m: _Move, generation: int, src_io: LogDirIO, src_path: str, pending: _PendingFiles, *,
        data: bool, dest_dir: str | None = None, creator: _Precreator | None = None,
        source: PartitionLog | None = None,
    ) -> int | None:
        """Copy one file with sendfile into ``<name>.tmp`` in the future dir; ``pending`` fsyncs and renames it
        into place later, with others (one fsync after another lets the disk write them together). Returns the
        bytes copied, or None when the source file is gone (retention deleted the segment).

        Unthrottled, each chunk's writeback is started as soon as it is copied (a hint, not a sync), so the
        group's fsyncs find the data already on its way to the disk instead of all of it still dirty.

        ``source``: the log a segment is copied from, watched after each chunk (see :meth:`_watch`)."""
        src = src_io.open_or_none(src_path, os.O_RDONLY)
        if src is None:
            return None
        final = os.path.join(dest_dir or pending.dir_of(m), os.path.basename(src_path))
        try:
            dst = pending.adopt(creator.take(final), final) if creator is not None else pending.create(final)
            size = src.size()
            offset = 0
            unsynced = 0
            throttle = self.throttle
            interrupted = self._interrupted(m, generation)
            while offset < size:
                self._check(m, generation)
                n = src.copy_to(dst, offset, min(throttle.chunk_size(), size - offset))
                if n <= 0:
                    break
                pending.bytes += n
                m.bytes_copied += n
                if data:
                    m.future_size += n
                throttle.pace(n, interrupted)
                if source is not None:
                    self._watch(m, source, None)
                if throttle.unlimited:
                    dst.start_writeback(offset, n)
                else:
                    unsynced += n
                    if unsynced >= max(1 << 20, throttle.rate // 10):
                        # Throttled: write back as we go (the pacer's sleeps absorb it) rather than in one fsync
                        # after the last byte, which the schedule could not repay.
                        dst.fsync()
                        unsynced = 0
                offset += n
                if offset < size:
                    failpoints.hit("mid_segment_copy")
        finally:
            src.close()
        return offset

    # ------------------------------------------------------------------------------------------ catch-up

    def _catch_up(self, m: _Move, generation: int, source: PartitionLog, future: PartitionLog, *, final: bool) -> None:
        """Append the source's batches from the future's log end until it has reached the source's log end.

        ``final``: called with appends held off, so the source cannot grow: copy without sleeping (the bytes are
        still charged to the throttle) and without checking for a stop."""
        interrupted = self._interrupted(m, generation)
        while True:
            if not final:
                self._check(m, generation)
            offset = future.log_end_offset
            if offset >= source.log_end_offset:
                return
            data, segment_base = self._read_source(source, offset, self.throttle.chunk_size())
            if not data:
                if offset < source.log_end_offset:
                    raise _Restart()
                return
            active = future.active_segment
            if segment_base > active.base_offset and active.size > 0:
                # The batch starts a new segment in the source: keep the future's segments aligned with it.
                future.roll()
            future.append_as_follower(data)
            n = len(data)
            m.bytes_copied += n
            if final:
                self.throttle.account(n)
            else:
                self.throttle.pace(n, interrupted)
                self._watch(m, source, future)

    def _read_source(self, source: PartitionLog, offset: int, max_bytes: int) -> tuple[bytes, int]:
        """Whole batches from ``offset`` within one source segment, and that segment's base offset. The data is
        read from file regions outside the source's lock (which a read holds only to find the regions).

        Only the first region is used: a read may run on into the next segment (the source can roll between
        listing its segments and reading), and one append to the future log must never take more than one
        source segment holds (it could exceed segment.bytes, and the future's segments would no longer line up
        with the source's)."""
        for _ in range(2):
            bases = _segment_bases(source)
            i = bisect_right(bases, offset) - 1
            if i < 0:
                raise _Restart()
            next_base = bases[i + 1] if i + 1 < len(bases) else None
            try:
                result = source.read(offset, max_bytes, max_offset=next_base)
            except OffsetOutOfRangeError:
                raise _Restart() from None
            try:
                data = b""
                if result.regions:
                    r = result.regions[0]
                    fh = FileHandle(r.fd, source.dir, source.io)
                    parts = []
                    got = 0
                    while got < r.count:
                        chunk = fh.pread(r.count - got, r.offset + got)
                        if not chunk:
                            raise KafkaStorageError(f"short read from {source.dir}", log_dir=source.log_dir)
                        parts.append(chunk)
                        got += len(chunk)
                    data = b"".join(parts)
            finally:
                for r in result.regions:
                    r.close()
            if data:
                # The segment the first batch is in (an offset gap may have taken the read past segment i).
                first = int.from_bytes(data[:8], "big", signed=True)
                bases = _segment_bases(source)
                return data, bases[max(bisect_right(bases, first) - 1, 0)]
            if next_base is None:
                return b"", bases[i]
            # ``offset`` is past the last batch of segment i (an offset gap): continue in the next segment.
            offset = next_base
        return b"", offset


class _PendingFiles:
    """Copied files not yet durable: fsynced, then renamed from ``.tmp`` to their names, so a crash leaves
    either a complete file under its name or a ``.tmp`` file (which the loader deletes).

    Files are made durable in groups (every 64 MiB or 96 files), and a group's fsyncs run on a small thread
    pool while the mover copies the next group: the disk writes one group back as the next is copied (as the
    kernel does for ``cp -r``), and concurrent fsyncs share the filesystem's journal commits, which matters for
    many small segments. At most one group is in flight, so dirty memory stays bounded."""

    MAX_BYTES = 64 << 20
    MAX_FILES = 96

    def __init__(self, io: LogDirIO, pool: ThreadPoolExecutor | None = None) -> None:
        self.io = io
        self.pool = pool
        self.files: list[tuple[FileHandle, str, str]] = []
        self.bytes = 0
        self._in_flight: tuple[list[tuple[FileHandle, str, str]], list[Any]] | None = None

    def dir_of(self, m: _Move) -> str:
        assert m.future_path is not None
        return m.future_path

    def create(self, final: str) -> FileHandle:
        return self.adopt(_create_tmp(self.io, final), final)

    def adopt(self, fh: FileHandle, final: str) -> FileHandle:
        """Take charge of ``fh``, open on ``final``'s ``.tmp`` file (created by :class:`_Precreator`)."""
        self.files.append((fh, final + ".tmp", final))
        return fh

    def due(self) -> bool:
        return self.bytes >= self.MAX_BYTES or len(self.files) >= self.MAX_FILES

    def commit(self, *, wait: bool = True) -> None:
        """Start making the current group durable; finish the previous one (and this one too if ``wait``)."""
        files, self.files = self.files, []
        self.bytes = 0
        if self.pool is None:
            self._finish((files, [None for _ in files]))
            return
        futures = [self.pool.submit(fh.fsync) for fh, _tmp, _final in files]
        previous, self._in_flight = self._in_flight, (files, futures)
        if previous is not None:
            self._finish(previous)
        if wait:
            current, self._in_flight = self._in_flight, None
            self._finish(current)

    def _finish(self, group: tuple[list[tuple[FileHandle, str, str]], list[Any]]) -> None:
        files, futures = group
        try:
            error: BaseException | None = None
            for (fh, _tmp, _final), fut in zip(files, futures, strict=True):
                try:
                    if fut is None:
                        fh.fsync()
                    else:
                        fut.result()
                except BaseException as e:  # wait for every fsync before closing any fd
                    error = error or e
            if error is not None:
                raise error
        finally:
            for fh, _tmp, _final in files:
                fh.close()
        for _fh, tmp, final in files:
            self.io.rename(tmp, final)

    def abandon(self) -> None:
        """Close what was not committed (an error or a stop): the ``.tmp`` files stay for the loader or the
        next attempt to remove."""
        group, self._in_flight = self._in_flight, None
        if group is not None:
            for fut in group[1]:
                if fut is not None:
                    try:
                        fut.result()
                    except BaseException:  # the error that stopped the copy is already on its way
                        pass
            for fh, _tmp, _final in group[0]:
                fh.close()
        files, self.files = self.files, []
        for fh, _tmp, _final in files:
            fh.close()



def _create_tmp(io: LogDirIO, final: str) -> FileHandle:
    return io.open(final + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)


def _write_unsynced(io: LogDirIO, path: str, data: bytes) -> None:
    """A small new file, written in place and not synced: for files that are written again when a crash left
    them missing, short or empty (a -future dir's partition.metadata, see ReplicaMover._adopt_future)."""
    fh = io.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        fh.write(data)
    finally:
        fh.close()


class _Precreator:
    """Creates the ``.tmp`` files a bulk copy will write, a few files ahead of the copy, on a helper thread.

    Creating a file is not free: on this project's ext4 VM it costs 0.2-0.9 ms of kernel CPU (inode
    allocation), about as long as copying a 1 MiB segment, and a segment has three files. Done in the copying
    thread, creates and copies take turns; done here they overlap (the copy holds no lock of the directory, a
    create holds it only for itself). ``plan`` lists the final paths in copy order; ``take(final)`` returns
    that file's handle, waiting for its create if needed; planned files skipped on the way (their source was
    deleted by retention) are closed, and their ``.tmp`` file is left for the bulk copy's clean-up. A failed
    create raises its KafkaStorageError from ``take``, as a create in the copying thread would."""

    AHEAD = 24

    def __init__(self, io: LogDirIO, pool: ThreadPoolExecutor) -> None:
        self.io = io
        self.pool = pool
        self._planned: deque[str] = deque()
        self._created: deque[tuple[str, Future[FileHandle]]] = deque()

    def plan(self, finals: Iterable[str]) -> None:
        self._planned.extend(finals)
        self._fill()

    def _fill(self) -> None:
        while self._planned and len(self._created) < self.AHEAD:
            final = self._planned.popleft()
            self._created.append((final, self.pool.submit(_create_tmp, self.io, final)))

    def take(self, final: str) -> FileHandle:
        """The handle on ``final``'s ``.tmp`` file; files are taken in the planned order, some skipped."""
        while True:
            if not self._created:
                self._fill()
                if not self._created:
                    return _create_tmp(self.io, final)  # not planned
            name, fut = self._created.popleft()
            if name == final:
                self._fill()
                return fut.result()
            _close_created(fut)

    def close(self) -> None:
        """Close every handle created and not taken (a stop, an error, or a skipped file)."""
        self._planned.clear()
        while self._created:
            _close_created(self._created.popleft()[1])


def _close_created(fut: Future[FileHandle]) -> None:
    try:
        fut.result().close()
    except BaseException:  # an error that matters reaches the copy through take(), or already has
        pass


FSYNC_THREADS = 8


def _helper_pools() -> tuple[ThreadPoolExecutor, ThreadPoolExecutor]:
    """The fsync pool (see _PendingFiles) and the one thread that creates files ahead of the copy (see
    _Precreator). Both are background work for the scheduler, as the mover threads are."""
    return (
        ThreadPoolExecutor(max_workers=FSYNC_THREADS, thread_name_prefix="kjbod-mover-fsync",
                           initializer=_lower_priority),
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="kjbod-mover-create", initializer=_lower_priority),
    )


WORKER_NICE = 10


def _lower_priority() -> None:
    """Make this mover thread background work for the Linux scheduler (both settings are per thread id):
    SCHED_BATCH, so it never preempts a thread that wakes up, and nice 10, so request handling gets the CPU
    first when both want it. A move keeps a core busy in sendfile; on a 2-core machine, without this a produce
    p99 during an unthrottled move was up to 15x its value without a move, with it 1.3-1.4x (measured by
    tools/bench/kip113.py; each setting alone was not enough every time). The move takes longer only when
    requests want the CPU."""
    tid = threading.get_native_id()
    try:
        os.sched_setscheduler(tid, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError):
        pass  # not Linux, or not allowed: the move still works
    try:
        os.setpriority(os.PRIO_PROCESS, tid, WORKER_NICE)
    except (AttributeError, OSError):
        pass


def _segment_bases(plog: PartitionLog) -> list[int]:
    return [s.base_offset for s in plog.segments]


def _closed_segments(plog: PartitionLog) -> dict[int, dict[str, tuple[str, int]]]:
    """{base offset: {suffix: (path, size)}} for the closed segments, oldest first."""
    groups: dict[int, dict[str, tuple[str, int]]] = {}
    try:
        files = plog.segment_files()
    except StorageError:
        raise
    for f in files:
        name = os.path.basename(f.path)
        if len(name) < 21 or not name[:20].isdigit():
            continue
        groups.setdefault(int(name[:20]), {})[name[20:]] = (f.path, f.size)
    return dict(sorted(groups.items()))
