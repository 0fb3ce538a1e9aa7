"""One partition's log: a directory ``<topic>-<partition>`` of segments, appended to and read from.

Strategy:

* **Append** validates every batch (records.validate_batches) and, from a client, every record in it
  (records.validate_records, outside the lock), checks idempotent-producer sequences against a scratch copy of
  the producer state, rolls the segment if needed, and writes all batches with one ``writev``: per batch a
  freshly packed 16-byte prefix (BaseOffset, Length, PartitionLeaderEpoch) followed by a zero-copy view of the
  rest of the producer's bytes (after the 45 header bytes validate_records rewrote, when the max timestamp or
  the timestamp type had to change). A follower's batches, which carry their offsets, are written unchanged by a
  path of their own (``_append_follower``, once per fetch answer on the dir's worker). Nothing is fsynced unless
  ``flush.messages`` says so; Kafka relies on the page cache and on replication, and so does kjbod (``flush.ms``
  is honoured by the manager's tick).
* **Read** finds the batch containing the offset with the sparse index plus a short header walk, then finds the
  end of the read (whole batches only, at least one) with the index again, so a 1 MiB fetch reads a few batch
  headers, never the data: the result is a list of file regions (fd dup, offset, count) sent with sendfile.
* **Threads**: the event loop appends and reads; the manager's background thread flushes, applies retention,
  compacts (kjbod.storage.cleaner: only its final swap takes the lock) and deletes; a later replica mover copies closed segments. ``lock`` (a ``threading.Lock``) guards appends, reads
  and every structural change (roll, truncate, retention, rename). fsync runs outside it on duplicated fds, so
  a flush never stalls appends.
* **Opening** after a clean shutdown reads the tail of the active segment only; after a crash every segment
  from the recovery point on is re-validated, and an invalid tail is copied aside to
  ``<segment>.log.<position>-<ms>.corrupt`` in the partition dir (Kafka's loader ignores files with unknown
  suffixes), logged at warning with partition, offset and byte counts, then truncated; segments after it are
  set aside the same way, as Kafka deletes them.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import structlog

from kjbod.storage import cleaner
from kjbod.storage import records as records_module
from kjbod.storage.checkpoint import (
    PARTITION_METADATA_FILE,
    CheckpointFormatError,
    parse_partition_metadata,
    render_partition_metadata,
)
from kjbod.storage.config import LONG_MAX, LogConfig
from kjbod.storage.epoch_cache import LeaderEpochCache
from kjbod.storage.errors import (
    CorruptMessageError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    KafkaStorageError,
    LogDirFullError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordListTooLargeError,
    StorageError,
    UnknownTopicOrPartitionError,
)
from kjbod.storage.fsio import LogDirIO, WouldBlock, waiting_allowed
from kjbod.storage.ids import uuid_text
from kjbod.storage.producer_state import (
    CompletedTxn,
    ProducerEntry,
    ProducerStateManager,
    SnapshotFormatError,
)
from kjbod.storage.records import (
    CONTROL_MASK,
    LOG_OVERHEAD,
    NO_PRODUCER_ID,
    PREFIX,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_MASK,
    BatchHeader,
    Record,
    UnsupportedCompressionError,
    control_marker_type,
    iter_records,
    marker_coordinator_epoch,
    validate_batches,
    validate_records,
)
from kjbod.storage.segment import (
    CORRUPT_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    INT32_MAX,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_ENTRY,
    TXN_INDEX_SUFFIX,
    LogSegment,
    parse_segment_file,
    segment_name,
)
from kjbod.storage.tasks import DeletionQueue

log = structlog.get_logger("kjbod.storage.log")

# ListOffsets special timestamps (Kafka's ListOffsetsRequest)
RECENT_ENDS = 16  # how many append boundaries a log keeps for read_to_end
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4


class ValidatedAppend(NamedTuple):
    """A producer's records that passed PartitionLog.validate: the bytes, (position, header) per batch, the time
    they were checked at, and the batch headers validate_records rewrote (None: record validation was off)."""

    view: memoryview
    batches: list[tuple[int, BatchHeader]]
    now_ms: int
    new_headers: dict[int, bytes] | None


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class AppendInfo:
    base_offset: int
    last_offset: int
    log_append_time: int
    log_start_offset: int
    record_count: int
    duplicate: bool = False


@dataclass
class ReadResult:
    regions: list[Any]
    high_watermark: int
    log_start_offset: int
    log_end_offset: int

    @property
    def size(self) -> int:
        return sum(getattr(r, "count", 0) for r in self.regions)


@dataclass(frozen=True)
class SegmentFile:
    path: str
    size: int


@dataclass
class LoadStats:
    recovered_segments: int = 0
    truncated_bytes: int = 0
    replayed_batches: int = 0
    notes: list[str] = field(default_factory=list)


class _ReadLock:
    """``with log._reading:`` the log lock for a read; afterwards, closed segments give back the fds the read
    opened. Where waiting is not allowed (fsio.no_waiting: the event loop), a lock held by another thread raises
    WouldBlock. A class rather than a generator-based context manager: that one cost five more Python calls a
    read, on the event loop's path of every caught-up follower's fetch."""

    __slots__ = ("log",)

    def __init__(self, log: PartitionLog) -> None:
        self.log = log

    def __enter__(self) -> None:
        log = self.log
        if not log.lock.acquire(waiting_allowed()):  # blocking when waiting is allowed: then it always gets it
            raise WouldBlock(f"{log.name} is locked by another thread")

    def __exit__(self, *exc: object) -> None:
        log = self.log
        try:
            for seg in log.segments[:-1]:
                seg.release()
        finally:
            log.lock.release()


class PartitionLog:
    """The log of one partition (current or ``-future``) in one log dir."""

    def __init__(
        self,
        io: LogDirIO,
        dir_path: str,
        topic: str,
        partition: int,
        topic_id: str | None,
        config: LogConfig,
        *,
        is_future: bool = False,
        clock: Callable[[], int] = _wall_ms,
        deletions: DeletionQueue | None = None,
        on_roll: Callable[[PartitionLog], None] | None = None,
    ) -> None:
        self.io = io
        self.dir = dir_path
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.config = config
        self.is_future = is_future
        self.clock = clock
        self.deletions = deletions if deletions is not None else DeletionQueue()
        self.on_roll = on_roll
        self.lock = threading.Lock()
        self._reading = _ReadLock(self)
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []  # base offsets of self.segments, for bisect
        self._leo = 0
        self._log_start = 0
        self._hw = 0
        self.auto_high_watermark = True  # single node: HW follows LEO; replication turns this off
        self.checkpoint_high_watermark: int | None = None  # from replication-offset-checkpoint at load
        self._epochs = LeaderEpochCache(io, dir_path)  # loaded with the log (_load): see leader_epochs
        self._latest_epoch = -1
        self.recovery_point = 0
        self.producer_state = ProducerStateManager()
        self._unflushed_messages = 0
        self.last_flush_ms = clock()
        self._dir_dirty = False  # a file was created or renamed in the dir since the last flush
        self.closed = False
        self.replaced_by: PartitionLog | None = None  # the log a KIP-113 move swapped in for this one (closed)
        self.moved_from: PartitionLog | None = None  # the log this one replaced, while appends may be out there
        self.appends_in_flight = 0  # Produce appends handed to this log's dir worker, not answered (the loop's)
        self.load_stats = LoadStats()
        self._created_unsynced = False
        self._producer_state_ready = True  # a new log has none; a loaded one builds it lazily
        self._pending_snapshots: dict[int, str] = {}
        # Where the last appends begin and end in their segment, by offset (the first offset of an append, and
        # the offset after it), at most RECENT_ENDS of them, in offset order: a read from one of these offsets
        # (a caught-up follower's fetch: read_to_end; a consumer near the end: _recent_slice) needs no index
        # lookup or header scan. Each is (segment, position, whether the append starting there is one batch:
        # False for the log end, until the next append starts there); the last is always the log end (every
        # move of it notes its appends here or clears them). Positions only, no bytes. Set and cleared under the
        # lock.
        self._ends: dict[int, tuple[LogSegment, int, bool]] = {}
        # Compaction (kjbod.storage.cleaner): where the cleaner stopped (cleaner-offset-checkpoint), the lock its
        # dir's cleaner holds while cleaning this log, the request to stop (a move, a deletion), how many holders
        # keep it paused, and a count of truncations (a swap into a truncated log is refused).
        self.cleaner_offset: int | None = None
        self.clean_lock = threading.Lock()
        self.clean_abort = False
        self.clean_paused = 0
        self.truncations = 0

    def __repr__(self) -> str:
        return f"PartitionLog({self.topic}-{self.partition}, dir={self.dir!r})"

    # ------------------------------------------------------------------------------------------ properties

    @property
    def log_dir(self) -> str:
        return self.io.path

    @property
    def online(self) -> bool:
        return self.io.online and not self.closed

    def current(self) -> PartitionLog:
        """This log, or the one a KIP-113 move swapped in for it: appends handed to the source dir's worker
        before the swap (which runs on that worker) land in the moved replica, as Kafka's partition lock
        would order them, instead of failing on a closed log."""
        plog = self
        while plog.closed and plog.replaced_by is not None:
            plog = plog.replaced_by
        return plog

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def high_watermark(self) -> int:
        return self._hw

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        """Set by replication (which also sets ``auto_high_watermark = False``); clamped to [start, LEO].  No
        lock: a leader sets it on the event loop, which must not wait for an append holding the lock on a slow
        disk; an append only moves the LEO up (a clamp to the one before is still right), and a log is truncated
        only as a follower, whose HW is set where its truncations run (its dir's worker)."""
        self._hw = max(self._log_start, min(value, self._leo))

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the high watermark, or the first offset of the oldest transaction still open if that is
        lower (what a read_committed consumer may read up to).  Before this log's producer state is loaded (it is
        loaded on the first append, on the dir's worker) no transaction is known: the high watermark."""
        hw = self._hw
        if not self._producer_state_ready:
            return hw
        first = self.producer_state.first_unstable_offset()
        return hw if first is None or first >= hw else first

    def aborted_transactions(self, fetch_offset: int, upper: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions a read_committed read of [fetch_offset,
        upper) must tell the consumer about: those ending at or after `fetch_offset` that began before `upper`
        (Kafka's collectAbortedTransactions over the transaction index)."""
        if not self._producer_state_ready:
            return []
        return [(t.producer_id, t.first_offset) for t in self.producer_state.aborted
                if t.last_offset >= fetch_offset and t.first_offset < upper]

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def first_segment_base_offset(self) -> int:
        return self.segments[0].base_offset


    def _check_usable(self) -> None:
        if not self.io.online:
            raise self.io.offline_error()
        if self.closed:
            raise UnknownTopicOrPartitionError(f"partition {self.topic}-{self.partition} is closed or deleted")

    # ------------------------------------------------------------------------------------------ creation

    @classmethod
    def create(
        cls,
        io: LogDirIO,
        dir_path: str,
        topic: str,
        partition: int,
        topic_id: Any,
        config: LogConfig,
        **kwargs: Any,
    ) -> PartitionLog:
        """Make the partition dir, write partition.metadata (before any data, as Kafka does), create the first
        segment. ``topic_id`` may be Kafka text, 16 bytes or a ``uuid.UUID``; it is kept as text."""
        topic_id = uuid_text(topic_id) if topic_id is not None else None
        plog = cls(io, dir_path, topic, partition, topic_id, config, **kwargs)
        io.mkdir(dir_path)
        try:
            if topic_id is not None:
                meta = render_partition_metadata(topic_id).encode()
                io.write_atomic(os.path.join(dir_path, PARTITION_METADATA_FILE), meta, fsync=False)
            seg = plog._new_segment(0)
            seg.create()
        except KafkaStorageError:
            if io.online:  # a process limit, not the disk: do not leave a half-made dir behind
                try:
                    io.rmtree(dir_path)
                except KafkaStorageError:
                    pass
            raise
        plog._set_segments([seg])
        # Nothing is fsynced here (10,000 partitions would cost 30,000 fsyncs): the new dir, its
        # partition.metadata and the parent's entry are made durable by the log's first flush, like its data.
        plog._dir_dirty = True
        plog._created_unsynced = True
        return plog

    def _new_segment(self, base_offset: int, size: int = 0) -> LogSegment:
        return LogSegment(
            self.io,
            self.dir,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_size=self.config.segment_index_bytes,
            size=size,
            created_ms=self.clock(),
            roll_jitter_ms=self.config.random_segment_jitter(),
        )

    def _set_segments(self, segments: list[LogSegment]) -> None:
        self.segments = segments
        self._bases = [s.base_offset for s in segments]

    # ------------------------------------------------------------------------------------------ loading

    @classmethod
    def load(
        cls,
        io: LogDirIO,
        dir_path: str,
        topic: str,
        partition: int,
        config: LogConfig,
        *,
        had_clean_shutdown: bool,
        recovery_point: int = 0,
        log_start_offset: int | None = None,
        high_watermark: int | None = None,
        **kwargs: Any,
    ) -> PartitionLog:
        plog = cls(io, dir_path, topic, partition, None, config, **kwargs)
        plog._load(had_clean_shutdown, recovery_point, log_start_offset, high_watermark)
        return plog

    def _load(self, clean: bool, recovery_point: int, lso_checkpoint: int | None, hw_checkpoint: int | None) -> None:
        io = self.io
        logs: dict[int, str] = {}
        indexes: set[str] = set()
        snapshots: dict[int, str] = {}
        entries = io.list_entries(self.dir)
        if any(name.endswith((cleaner.SWAP_SUFFIX, cleaner.CLEANED_SUFFIX)) for name, _ in entries):
            cleaner.complete_swaps(io, self.dir, [name for name, is_dir in entries if not is_dir])
            entries = io.list_entries(self.dir)
        for name, is_dir in entries:
            if is_dir:
                continue
            path = os.path.join(self.dir, name)
            if name == PARTITION_METADATA_FILE:
                data = io.read_bytes_or_none(path)
                if data is not None:
                    try:
                        self.topic_id = parse_partition_metadata(data.decode("utf-8", "replace"), path)
                    except CheckpointFormatError as e:
                        log.warning("partition_metadata_unreadable", partition=self.name, error=str(e))
                continue
            if name.endswith((DELETED_SUFFIX, ".cleaned", ".tmp")):
                # Left over from a deletion or a write interrupted by the shutdown: finish the job.
                io.unlink(path, missing_ok=True)
                continue
            parsed = parse_segment_file(name)
            if parsed is None:
                continue
            base, suffix = parsed
            if suffix == LOG_SUFFIX:
                logs[base] = path
            elif suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                indexes.add(path)
            elif suffix == SNAPSHOT_SUFFIX:
                snapshots[base] = path
        # An index without its log is useless (Kafka deletes it too).
        for path in indexes:
            base = int(os.path.basename(path)[:20])
            if base not in logs:
                io.unlink(path, missing_ok=True)
        segments = []
        for base in sorted(logs):
            st = io.stat_or_none(logs[base])
            segments.append(self._new_segment(base, st.st_size if st is not None else 0))
        if not segments:
            seg = self._new_segment(lso_checkpoint or 0)
            seg.create()
            segments = [seg]
        self._set_segments(segments)

        if clean:
            try:
                nxt = self.active_segment.load_tail()
                self._leo = nxt if nxt is not None else self.active_segment.base_offset
                self.recovery_point = self._leo
            except CorruptMessageError as e:
                # A clean marker with a broken tail (copied from elsewhere, or damaged since): recover it.
                self.load_stats.notes.append(str(e))
                clean = False
                recovery_point = min(recovery_point, self.active_segment.base_offset)
        recovered: list[tuple[int, int]] = []  # (epoch, base offset) where epochs begin in what recovery re-read
        recovered_from: int | None = None
        if not clean:
            recovered_from = self._recover_segments(recovery_point, recovered)

        first_base = self.segments[0].base_offset
        lso = max(lso_checkpoint if lso_checkpoint is not None else first_base, first_base)
        self._log_start = min(lso, self._leo)
        if recovered_from is not None:
            try:
                self._rebuild_txn_indexes(recovered_from, snapshots)
            except CorruptMessageError as e:  # a bad batch before the range: the indexes stay as they were
                log.warning("transaction_index_rebuild_skipped", partition=self.name, log_dir=self.log_dir,
                            error=str(e))
        # Producer state is rebuilt on first use (the first append), not here: most partitions of a restarted
        # node are not written to soon, and a startup of 10,000 partitions should not read 10,000 snapshots.
        self._pending_snapshots = snapshots
        self._producer_state_ready = False
        self.checkpoint_high_watermark = hw_checkpoint
        if self.auto_high_watermark or hw_checkpoint is None:
            self._hw = self._leo
        else:
            self._hw = max(self._log_start, min(hw_checkpoint, self._leo))
        self._load_leader_epochs(recovered, recovered_from)

    def _recover_segments(self, recovery_point: int, epochs: list[tuple[int, int]]) -> int:
        """Re-reads the segments from the one holding ``recovery_point`` on, and returns that one's base offset;
        ``epochs`` gets (leader epoch, base offset) where each epoch begins in the valid batches read."""
        stats = self.load_stats
        start = max(bisect_right(self._bases, recovery_point) - 1, 0)
        recovered_from = self.segments[start].base_offset
        last_next: int | None = None
        self._recovered_transactional = False

        def on_batch(header: BatchHeader) -> None:
            _epoch_start(epochs, header)
            if header.attributes & TRANSACTIONAL_MASK:
                self._recovered_transactional = True

        for i in range(start, len(self.segments)):
            seg = self.segments[i]
            result = seg.recover(on_batch=on_batch)
            stats.recovered_segments += 1
            last_next = result.next_offset
            if i < len(self.segments) - 1 and not result.truncated_bytes:
                seg.on_roll()
            if result.truncated_bytes:
                self._set_aside_tail(seg, result.valid_bytes, result.truncated_bytes, result.reason,
                                     result.first_bad_offset, result.next_offset)
                for bad in self.segments[i + 1 :]:
                    self._set_aside_segment(bad)
                self._set_segments(self.segments[: i + 1])
                break
        active = self.active_segment
        # The active segment is always in the recovered range; empty, the log ends at its base offset.
        self._leo = last_next if active.size > 0 and last_next is not None else active.base_offset
        self.recovery_point = min(recovery_point, self._leo)
        return recovered_from

    def _set_aside_tail(
        self,
        seg: LogSegment,
        valid_bytes: int,
        bad_bytes: int,
        reason: str | None,
        bad_offset: int | None,
        next_offset: int | None,
    ) -> None:
        target = f"{seg.log_path}.{valid_bytes}-{self.clock()}{CORRUPT_SUFFIX}"
        aside: str | None = target
        try:
            seg.copy_range_to(target, valid_bytes, valid_bytes + bad_bytes)
        except LogDirFullError as e:
            # No room to keep the bad bytes: truncate in place rather than not start (the range is logged).
            self.io.unlink(target, missing_ok=True)
            aside = None
            log.warning("corrupt_log_tail_dropped_no_space", partition=self.name, log_dir=self.log_dir,
                        segment=os.path.basename(seg.log_path), dropped_from=valid_bytes,
                        dropped_to=valid_bytes + bad_bytes, error=str(e))
        seg.truncate_bytes(valid_bytes)
        self.load_stats.truncated_bytes += bad_bytes
        log.warning(
            "corrupt_log_tail_truncated",
            partition=self.name,
            log_dir=self.log_dir,
            segment=os.path.basename(seg.log_path),
            position=valid_bytes,
            offset=next_offset if next_offset is not None else seg.base_offset,
            claimed_offset=bad_offset,
            truncated_bytes=bad_bytes,
            kept_bytes=valid_bytes,
            reason=reason,
            copied_to=aside,
        )

    def _set_aside_segment(self, seg: LogSegment) -> None:
        aside = f"{seg.log_path}.0-{self.clock()}{CORRUPT_SUFFIX}"
        seg.close_quietly()
        self.io.rename(seg.log_path, aside)
        self.io.unlink(seg.index.path, missing_ok=True)
        self.io.unlink(seg.time_index.path, missing_ok=True)
        self.io.unlink(seg.txn_index_path, missing_ok=True)
        self.load_stats.truncated_bytes += seg.size
        log.warning(
            "log_segment_after_corruption_set_aside",
            partition=self.name,
            log_dir=self.log_dir,
            segment=os.path.basename(seg.log_path),
            offset=seg.base_offset,
            truncated_bytes=seg.size,
            copied_to=aside,
        )

    def _rebuild_txn_indexes(self, recovered_from: int, snapshots: dict[int, str]) -> None:
        """After recovery re-read the segments from ``recovered_from`` on: their ``.txnindex`` files made again
        from the batches, as Kafka's segment recovery does.  A crash can lose an entry whose marker the log kept
        (it is written after the marker), and recovery can cut off a marker whose entry was written.  The
        producers' open transactions where the range begins come from the newest snapshot at or below it and
        the batches after that snapshot; each abort marker in the range then gives its entry, with the last
        stable offset after it, as at append time."""
        first = max(bisect_right(self._bases, recovered_from) - 1, 0)
        recovered = self.segments[first:]
        if not self._recovered_transactional and not any(seg.read_aborted() for seg in recovered):
            return  # no transaction in the range and no entry to drop: nothing to rebuild
        io = self.io
        state = ProducerStateManager()
        start = self._log_start
        for off in sorted((o for o in snapshots if self._log_start <= o <= recovered_from), reverse=True):
            data = io.read_bytes_or_none(snapshots[off])
            if data is None:
                continue
            try:
                state.load_snapshot(data, off)
            except SnapshotFormatError:
                continue
            start = off
            break
        base = recovered[0].base_offset
        try:
            if start < base:
                state.replay(h for h in self._iter_batch_headers(start) if h.base_offset < base)
            entries: dict[int, list[tuple[int, int, int, int]]] = {seg.base_offset: [] for seg in recovered}
            for seg in recovered:
                for pos, header in seg.iter_headers(0):
                    if header.producer_id <= NO_PRODUCER_ID:
                        continue
                    marker = -1
                    if header.attributes & CONTROL_MASK:
                        marker = control_marker_type(seg.read_bytes(pos, header.size), 0, header)
                    plan = state.plan()
                    plan.check(header, header.base_offset, from_client=False, marker=marker)
                    plan.commit(header.next_offset)
                    if any(t.aborted for t in plan.completed):
                        lso = state.first_unstable_offset()
                        entries[seg.base_offset] += [
                            (t.producer_id, t.first_offset, t.last_offset, lso if lso is not None else t.last_offset + 1)
                            for t in plan.completed if t.aborted]
        finally:
            for seg in self.segments[:-1]:
                seg.release()
        for seg in recovered:
            kept, made = seg.read_aborted(), entries[seg.base_offset]
            if kept == made:
                continue
            if made:
                io.write_atomic(seg.txn_index_path, b"".join(TXN_ENTRY.pack(0, *e) for e in made))
            else:
                io.unlink(seg.txn_index_path, missing_ok=True)
            log.warning("transaction_index_rebuilt", partition=self.name, log_dir=self.log_dir,
                        segment=os.path.basename(seg.txn_index_path), entries_before=len(kept),
                        entries_after=len(made))

    def _snapshot_path(self, offset: int) -> str:
        return os.path.join(self.dir, segment_name(offset) + SNAPSHOT_SUFFIX)

    def _ensure_producer_state(self) -> None:
        if not self._producer_state_ready:
            snapshots, self._pending_snapshots = self._pending_snapshots, {}
            self._load_producer_state(snapshots)

    def _load_producer_state(self, snapshots: dict[int, str]) -> None:
        self._producer_state_ready = True
        io = self.io
        for off in [o for o in snapshots if o > self._leo]:
            io.unlink(snapshots.pop(off), missing_ok=True)
        start = self._log_start
        self.producer_state.clear(start)
        for off in sorted(snapshots, reverse=True):
            if off < self._log_start:
                continue
            data = io.read_bytes_or_none(snapshots[off])
            if data is None:
                continue
            try:
                self.producer_state.load_snapshot(data, off)
                start = off
                break
            except SnapshotFormatError as e:
                log.warning("producer_snapshot_unreadable", partition=self.name, path=snapshots[off], error=str(e))
                io.unlink(snapshots.pop(off), missing_ok=True)
        if start < self._leo:
            try:
                headers = list(self._iter_batch_headers(start))
            finally:
                for seg in self.segments[:-1]:
                    seg.release()
            self.producer_state.replay(headers)
            self.load_stats.replayed_batches += len(headers)
        self.producer_state.map_end_offset = self._leo
        self.producer_state.aborted = self._read_aborted()

    def _read_aborted(self) -> list[CompletedTxn]:
        """The aborted transactions of the log's segments, from their ``.txnindex`` files (the truth on disk: the
        in-memory list is rebuilt from them whenever the producer state is)."""
        out = []
        for seg in self.segments:
            for pid, first, last, _lso in seg.read_aborted():
                if self._log_start <= last < self._leo:
                    out.append(CompletedTxn(pid, first, last, True))
        return out

    def _index_aborted(self, seg: LogSegment, completed: list[CompletedTxn]) -> None:
        """Under the lock, once an append with markers is committed: the aborted transactions it ended go to the
        ``.txnindex`` of the segment holding their markers, with the last stable offset after them."""
        aborted = [t for t in completed if t.aborted]
        if not aborted:
            return
        first = self.producer_state.first_unstable_offset()
        seg.append_aborted([(t.producer_id, t.first_offset, t.last_offset,
                             first if first is not None else t.last_offset + 1) for t in aborted])

    @property
    def producer_state_ready(self) -> bool:
        return self._producer_state_ready

    def ensure_producer_state(self) -> None:
        """Loads the producer state now (on the dir's worker): what a read_committed read needs first."""
        if not self._producer_state_ready:
            with self.lock:
                self._ensure_producer_state()

    def check_transaction_guard(self, producer_id: int, guard: object | None) -> None:
        """KIP-890, on the dir's worker before a transactional batch is appended: the producer has a transaction
        open here, or the append carries the guard its transaction coordinator's verification made
        (producer_state.VerificationEntry); else InvalidTxnStateError, nothing written."""
        self.ensure_producer_state()
        state = self.producer_state
        if state.has_ongoing_txn(producer_id):
            return
        if guard is not None and state.verification_guard(producer_id) is guard:
            return
        raise InvalidTxnStateError(f"Record was not part of an ongoing transaction (producer {producer_id}, "
                                   f"{self.name})")

    def _iter_batch_headers(self, from_offset: int):
        i = max(bisect_right(self._bases, from_offset) - 1, 0)
        first = True
        for seg in self.segments[i:]:
            if first:
                found = seg.find_batch(from_offset)
                first = False
                if found is None:
                    continue
                start = found[0]
            else:
                start = 0
            for _pos, header in seg.iter_headers(start):
                yield header

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    # ------------------------------------------------------------------------------------------ leader epochs

    @property
    def leader_epochs(self) -> LeaderEpochCache:
        """The leader epoch cache (kjbod.storage.epoch_cache), in memory since the log was loaded or created:
        reading it does no I/O and takes no lock another thread holds for I/O (the event loop reads it).
        Appends keep it for any log; they write its file only once replication has taken the log over
        (``auto_high_watermark`` off): a single-node log never needs the file, rebuilt exactly at its next load."""
        return self._epochs

    def _load_leader_epochs(self, recovered: list[tuple[int, int]], recovered_from: int | None) -> None:
        """At load (a dir's loader or worker, never the event loop): the cache from its file, its epochs in the
        range recovery re-read (from `recovered_from`) taken from the batches instead (a crash can keep batches
        whose epoch the file missed, or lose some it has), and none at or past the LEO, as Kafka's LogLoader
        does; rebuilt from every batch header when there is no file.  A future log's stays as its file says:
        its swap gives it the current log's (replace_current_with_future)."""
        cache = LeaderEpochCache.load(self.io, self.dir)
        changed = False
        if cache is None:
            cache = LeaderEpochCache(self.io, self.dir)
            if not self.is_future:
                recovered = self._batch_epochs()
        elif recovered_from is not None:
            changed = cache.truncate_from_end(recovered_from, flush=False)
        for epoch, base in recovered:
            changed = cache.assign(epoch, base, flush=False) or changed
        changed = cache.truncate_from_end(self._leo, flush=False) or changed
        if changed:
            cache.flush()
        self._epochs = cache
        self._latest_epoch = cache.latest_epoch

    def _batch_epochs(self) -> list[tuple[int, int]]:
        """(epoch, base offset) where each epoch begins, from every batch header of the log."""
        out: list[tuple[int, int]] = []
        if self._leo <= self._log_start:
            return out
        try:
            for header in self._iter_batch_headers(self._log_start):
                _epoch_start(out, header)
        finally:
            for seg in self.segments[:-1]:
                seg.release()
        return out

    def rebuild_leader_epochs(self) -> None:
        """The cache rebuilt from the batches and written (a future log promoted at startup: it kept none)."""
        with self.lock:
            self._epochs.replace(self._batch_epochs())
            self._latest_epoch = self._epochs.latest_epoch
            self._epochs.flush()

    def take_leader_epochs(self, other: PartitionLog) -> None:
        """A KIP-113 swap (on the dir's worker, both logs locked): this copy holds the other's batches, so its
        epochs too; written here. A write that fails is logged (the seam fails the dir on an I/O error; a full
        dir drops the file, rebuilt at the next load)."""
        self._epochs.replace(other.leader_epochs.entries)
        self._latest_epoch = self._epochs.latest_epoch
        if self._epochs.entries:
            try:
                self._epochs.flush()
            except KafkaStorageError as e:
                log.warning("leader_epoch_checkpoint_not_written", partition=self.name, log_dir=self.log_dir,
                            error=str(e))

    def take_producer_state(self, other: PartitionLog) -> None:
        """A KIP-113 swap, appends held off and both logs at the same log end: this copy holds the other's
        batches, so it takes the other's producer state, every producer's last five batches. Its own was rebuilt
        from the copied snapshots, which keep one batch per producer, and a retry of an older in-flight batch
        would then be refused (OUT_OF_ORDER_SEQUENCE_NUMBER) instead of answered as a duplicate: Kafka's future
        replica replays every batch from the current one, so its state is the current one's."""
        with other.lock:
            other._ensure_producer_state()
            producers = {pid: entry.copy() for pid, entry in other.producer_state.producers.items()}
        with self.lock:
            if self._leo != other._leo:
                raise ValueError(f"{self.name}: producer state taken at {other._leo}, this log ends at {self._leo}")
            self._producer_state_ready = True
            self._pending_snapshots = {}
            self.producer_state.producers = producers
            self.producer_state.map_end_offset = self._leo

    def assign_leader_epoch(self, epoch: int, start_offset: int) -> bool:
        """A new leader epoch starting at `start_offset` (this broker became leader, Kafka's makeLeader: its
        LEO), in memory at once, with no I/O and no lock held for I/O (the event loop calls it, and the new epoch
        must be seen at once).  Returns whether it changed the cache: then ``settle_leader_epoch(epoch)`` must
        run where the log's appends run (its dir's worker), queued before any append of the new epoch."""
        cache = self._epochs
        if not cache.assign(epoch, start_offset, flush=False):
            return False
        self._latest_epoch = cache.latest_epoch
        return True

    def settle_leader_epoch(self, epoch: int) -> None:
        """On the log's dir worker, after what was queued before the new epoch (a follower's last appends or
        truncation): the epoch starts where the log ends now, and the file is written.  A crash before this
        loses no batch of the new epoch (its appends come after); a stale file is mended at load (see
        _load_leader_epochs).  An empty log's first epoch stays in memory: a file would say nothing the log
        cannot (with no file the cache is rebuilt from the batches' epochs, and a restarted broker assigns its
        epoch again when it leads), which spares each new partition a checkpoint write and its two fsyncs."""
        with self.lock:
            if self.closed or not self.io.online:
                return  # deleted, swapped out or failed: nothing to keep
            cache = self._epochs
            cache.start_at(epoch, self._leo)
            self._latest_epoch = cache.latest_epoch
            if cache.unwritten and (len(cache.entries) > 1 or self._leo > self._log_start):
                cache.flush()

    def _note_epoch(self, epoch: int, base_offset: int) -> None:
        """Under the lock, before an append whose batch carries an epoch above the latest known (rare): the file
        is written before the batch, so no batch on disk has an epoch the file misses."""
        if epoch < 0:
            return
        cache = self._epochs
        cache.assign(epoch, base_offset, flush=not self.auto_high_watermark)
        self._latest_epoch = cache.latest_epoch

    # ------------------------------------------------------------------------------------------ append

    def append(self, records: bytes | bytearray | memoryview, *, leader_epoch: int = 0, now_ms: int | None = None) -> AppendInfo:
        """Append a producer's batches: validate them and their records, assign offsets, stamp the leader epoch
        (and, where records.validate_records says so, a new max timestamp), write. See the module doc."""
        return self.append_validated(self.validate(records, now_ms=now_ms), leader_epoch=leader_epoch)

    def validate(self, records: bytes | bytearray | memoryview, *, now_ms: int | None = None,
                 from_coordinator: bool = False) -> ValidatedAppend:
        """The checks of :meth:`append` that touch no file and take no lock (the batches, their records, the
        timestamps against this log's config): what a caller may do on one thread before handing the write
        (:meth:`append_validated`) to another. Raises what :meth:`append` raises for bad input."""
        view = memoryview(records)
        cfg = self.config
        batches = validate_batches(view, max_message_bytes=cfg.max_message_bytes, from_coordinator=from_coordinator)
        now = self.clock() if now_ms is None else now_ms
        if records_module.SKIP_RECORD_VALIDATION:
            return ValidatedAppend(view, batches, now, None)
        checked = validate_records(
            view, batches, now_ms=now, log_append_time=cfg.log_append_time,
            timestamp_before_max_ms=cfg.message_timestamp_before_limit_ms,
            timestamp_after_max_ms=cfg.message_timestamp_after_limit_ms,
            compacted_partition=self.name if cfg.compact else None,
            target_codec=cfg.target_codec, target_level=cfg.target_level,
        )
        if any(c.rebuilt is not None for c in checked):
            return self._rebuilt_append(view, checked, now)
        restamped = {c.pos: c.new_header for c in checked if c.new_header is not None}
        return ValidatedAppend(view, [(c.pos, c.header) for c in checked], now, restamped)

    def _rebuilt_append(self, view: memoryview, checked: list[Any], now: int) -> ValidatedAppend:
        """The append as it will be stored once compression.type rebuilt some of its batches: one new buffer of
        every batch (rebuilt, restamped or as sent), each checked against max.message.bytes again, since a batch
        stored in another codec may be larger than the one sent (Kafka's RecordBatchTooLargeException)."""
        parts: list[bytes | memoryview] = []
        batches: list[tuple[int, BatchHeader]] = []
        pos = 0
        limit = self.config.max_message_bytes
        for c in checked:
            if c.rebuilt is not None:
                part: bytes | memoryview = c.rebuilt
            elif c.new_header is not None:
                part = c.new_header + bytes(view[c.pos + RECORD_BATCH_OVERHEAD : c.pos + c.header.size])
            else:
                part = view[c.pos : c.pos + c.header.size]
            if len(part) > limit:
                raise MessageTooLargeError(
                    f"record batch of {len(part)} bytes once stored as compression.type="
                    f"{self.config.compression_type} is larger than max.message.bytes {limit} of {self.name}")
            parts.append(part)
            batches.append((pos, c.header))
            pos += len(part)
        return ValidatedAppend(memoryview(b"".join(parts)), batches, now, {})

    def append_validated(self, validated: ValidatedAppend, *, leader_epoch: int = 0) -> AppendInfo:
        """The write of :meth:`append`, for batches :meth:`validate` checked."""
        view, batches, now, restamped = validated
        info = self._append(view, batches, leader_epoch=leader_epoch, now_ms=now, new_headers=restamped)
        if restamped is not None and self.config.log_append_time and not info.duplicate:
            info = dataclasses.replace(info, log_append_time=now)
        return info

    def append_native(self, validated: ValidatedAppend, writer: Any, wait_s: float, *,
                      leader_epoch: int = 0) -> AppendInfo | NativeAppend | None:
        """:meth:`append_validated` on the event loop, its one file operation, the segment's ``writev``, made by
        the dir's native writer thread (kjbod/storage/_nativewrite.c), waited for up to ``wait_s`` with the GIL
        released.

        Only an append that needs nothing else of the disk is taken: the partition's lock free at once (never
        waited for), the producer state and the active segment's indexes loaded and its file open, no roll, no
        flush (flush.messages), no new leader epoch to record, no control batch, room by the dir's estimate.
        Otherwise None, having changed nothing: the caller hands the append to the dir's worker as before.
        Returns the AppendInfo when the write came back in time (a duplicate's, with no write), raises what the
        append raises (a refused sequence, a failed write); else a :class:`NativeAppend`, which holds the lock
        until the writer's thread settles it with the write's answer."""
        view, batches, now, restamped = validated
        total = len(view)
        cfg = self.config
        if total > cfg.segment_bytes or writer.in_flight or not self.lock.acquire(blocking=False):
            return None
        pending: NativeAppend | None = None
        try:
            io = self.io
            seg = self.segments[-1]
            fh = seg._fh
            if (not io.online or self.closed or not self._producer_state_ready or not io.room_for(total)
                    or fh is None or seg.size == 0 or not seg.index.loaded or not seg.time_index.loaded
                    or not seg._rolling_ts_known or leader_epoch > self._latest_epoch
                    or any(header.attributes & CONTROL_MASK for _pos, header in batches)):
                return None
            plan = self.producer_state.plan()
            buffers: list[Any] = []
            meta: list[tuple[int, int, int, int]] = []
            placed = self._place(view, batches, restamped, plan, self._leo, leader_epoch, 0, buffers, meta)
            if placed.__class__ is AppendInfo:
                return placed  # type: ignore[no-any-return]
            first_base, next_offset, count, max_ts = placed
            if (self._unflushed_messages + count >= cfg.flush_interval_messages
                    or self._roll_reason(seg, total, next_offset - 1, max_ts, now) is not None):
                return None
            io.make_room(total)  # room by the estimate (checked above): a comparison, no statvfs
            key = object()
            started = io.begin_handed("write", fh.path, key)
            pending = NativeAppend(self, seg, meta, total, plan, next_offset, first_base, count, key, started,
                                   now if restamped is not None and cfg.log_append_time else -1)
            writer.submit(fh.fd, buffers, seg.size, pending.late)
            try:
                written = writer.wait(wait_s)
            except OSError as e:
                return pending.settle(e)  # raises the dir's storage error
            if written is None:
                return pending  # not back in time: the writer's thread settles it (NativeAppend.late)
            return pending.settle(written)
        finally:
            if pending is None:
                self.lock.release()

    def append_as_follower(self, records: bytes | bytearray | memoryview, *, now_ms: int | None = None) -> AppendInfo:
        """Append batches that already carry their offsets (a follower or a ``-future`` log catching up): the
        bytes are stored unchanged; offsets must not go backwards."""
        view = memoryview(records)
        batches = validate_batches(view, max_message_bytes=max(self.config.max_message_bytes, len(view)),
                                   from_client=False)
        return self._append_follower(view, batches, now_ms)

    def append_validated_together(
        self, validated: list[ValidatedAppend], *, leader_epoch: int = 0
    ) -> list[AppendInfo | StorageError] | None:
        """Several producers' appends to this log at once, in order, each answered and written as
        :meth:`append_validated` would one after another, under one lock and with one ``writev`` (a dir's worker
        appending the requests of one hand-over: group commit).

        Idempotent batches are checked in one producer-state plan across the group, each append on a plan of
        its own stacked on the group's (producer_state.AppendPlan), so it sees the state the appends before it
        in the group left: an append refused there (OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH) gets
        its error in the list and changes nothing, a duplicate gets the stored offsets and writes nothing, and
        neither moves another's offsets. A roll falls where one at a time would put it: the bytes placed before
        it are written first, so segments, indexes, producer snapshots and state come out the same.

        Returns None, having done nothing, when the group cannot go as one (an append above segment.bytes, or a
        space problem an append of its own would answer): the caller then appends each on its own. Raises what
        an append raises when the log cannot be appended to at all (offline, closed) or a write fails (then the
        appends of the runs written before it stay, as those before a failing one would one at a time)."""
        cfg = self.config
        total = 0
        for v in validated:
            size = len(v.view)
            if size > cfg.segment_bytes:
                return None  # RecordListTooLargeError, from an append of its own
            total += size
        io = self.io
        epoch = leader_epoch
        append_time = cfg.log_append_time
        place = self._place
        results: list[AppendInfo | StorageError] = []
        with self.lock:
            self._check_appendable()
            if not io.room_for(total):
                return None  # each append finds out on its own (make_room): some of them may fit
            io.make_room(total)
            self._ensure_producer_state()
            log_start = self._log_start
            plan = self.producer_state.plan()  # the run's: what the appends placed and not yet written change
            buffers: list[Any] = []
            meta: list[tuple[int, int, int, int]] = []
            run_bytes = run_count = 0
            run_first = next_offset = self._leo
            seg = self.segments[-1]
            limits: tuple[int, int, int, int | None, int] = (0, 0, 0, None, 0)  # set as a run starts
            run_start = 0  # where the run's appends begin in results
            written = False  # a run before this one was written
            try:
                for view, batches, now, new_headers in validated:
                    # an append of one batch without a producer id changes no producer state: no plan of its own
                    plain = len(batches) == 1 and batches[0][1].producer_id < 0
                    step = plan if plain else plan.stacked()
                    b0, m0 = len(buffers), len(meta)
                    try:
                        placed = place(view, batches, new_headers, step, next_offset, epoch, run_bytes, buffers, meta)
                    except (OutOfOrderSequenceError, InvalidProducerEpochError) as e:
                        placed = e
                    if placed.__class__ is not tuple:  # refused, or a duplicate: nothing of it is written
                        del buffers[b0:], meta[m0:]
                        results.append(placed)
                        continue
                    first, after, count, max_ts = placed
                    size = len(view)
                    if run_bytes and (run_bytes + size > limits[0] or after > limits[1] or m0 >= limits[2] or (
                            max_ts > limits[3] if max_ts >= 0 and limits[3] is not None else now > limits[4])):
                        # A roll may fall here: write what comes before, so it is decided on the segment as it then is.
                        self._write_placed(seg, buffers[:b0], meta[:m0], run_bytes, plan, first, epoch, run_first,
                                           run_count)
                        buffers = buffers[b0:]
                        meta = [(pos - run_bytes, last, ts, n) for pos, last, ts, n in meta[m0:]]
                        plan = self.producer_state.plan()
                        run_bytes = run_count = 0
                        written = True
                        run_start = len(results)
                    if not run_bytes:
                        seg = self._maybe_roll(size, first, after - 1, max_ts, now)
                        run_first = first
                        limits = self._run_limits(seg, meta[0][2])
                    if not plain:
                        step.merge_into(plan)
                    run_bytes += size
                    run_count += count
                    next_offset = after
                    results.append(AppendInfo(first, after - 1, now if new_headers is not None and append_time else -1,
                                              log_start, count))
                if run_bytes:
                    self._write_placed(seg, buffers, meta, run_bytes, plan, next_offset, epoch, run_first, run_count)
            except StorageError as e:
                if not written:
                    raise
                # What was written before stays and is answered; from the run that failed on, the error (as one
                # at a time: the appends before a failing one kept, it and those after answered with the failure).
                results[run_start:] = [e] * (len(results) - run_start)
                results.extend([e] * (len(validated) - len(results)))
            flush_now = self._unflushed_messages >= cfg.flush_interval_messages
        if flush_now:
            self.flush()
        return results

    def _run_limits(self, seg: LogSegment, first_ts: int) -> tuple[int, int, int, int | None, int]:
        """For a run of a group's appends to ``seg`` (the first of them placed, its first batch's max timestamp
        ``first_ts``): where :meth:`_maybe_roll` could roll for an append once the appends before it in the run
        are written: above (0) bytes in the run, (1) an append's next offset, (2) batches in the run (each adds
        an index entry at most; 0 while the indexes are not loaded: those are counted once they are), (3) an
        append's max timestamp (None: none to measure segment.ms from, the clock decides), (4) the clock. Exact
        but for the index."""
        cfg = self.config
        index, time_index = seg.index, seg.time_index
        index_room = 0
        if index.loaded and time_index.loaded:
            index_room = min(index.max_entries - len(index), time_index.max_entries - len(time_index))
        if seg.size:
            rolling_ts = seg.rolling_based_timestamp()
        else:  # the run starts the segment: its first batch sets the rolling timestamp (LogSegment.append)
            rolling_ts = first_ts if first_ts >= 0 else None
        roll_ms = cfg.segment_ms - seg.roll_jitter_ms
        return (cfg.segment_bytes - seg.size, seg.base_offset + INT32_MAX + 1, index_room,
                None if rolling_ts is None else rolling_ts + roll_ms, seg.created_ms + roll_ms)

    def _check_appendable(self) -> None:
        io = self.io
        if not io.online:
            raise io.offline_error()
        if self.closed:
            raise UnknownTopicOrPartitionError(f"partition {self.name} is closed or deleted")

    def _place(
        self,
        view: memoryview,
        batches: list[tuple[int, BatchHeader]],
        new_headers: dict[int, bytes] | None,
        plan: Any,
        next_offset: int,
        epoch: int,
        rel: int,
        buffers: list[Any],
        meta: list[tuple[int, int, int, int]],
    ) -> Any:
        """Assign a producer's batches offsets from ``next_offset`` and add what to write for them to ``buffers``
        and ``meta`` (``rel``: where they start within the write). Returns (first offset, next offset, record
        count, max timestamp), or the earlier append's AppendInfo when a batch is an idempotent duplicate."""
        first = next_offset
        count = 0
        max_ts = -1
        pack = PREFIX.pack
        for pos, header in batches:
            base = next_offset
            duplicate = plan.check(header, base, marker=control_marker_type(view, pos, header),
                                   coordinator_epoch=marker_coordinator_epoch(view, pos, header)) \
                if header.attributes & CONTROL_MASK else plan.check(header, base)
            if duplicate is not None:  # answered as Kafka does: the batch's stored max timestamp too
                return AppendInfo(duplicate.first_offset, duplicate.last_offset, duplicate.timestamp,
                                  self._log_start, duplicate.last_offset - duplicate.first_offset + 1,
                                  duplicate=True)
            next_offset = base + header.last_offset_delta + 1
            count += header.records_count
            if header.max_timestamp > max_ts:
                max_ts = header.max_timestamp
            buffers.append(pack(base, header.length, epoch))
            stamped = new_headers.get(pos) if new_headers else None
            if stamped is None:
                buffers.append(view[pos + PREFIX.size : pos + header.size])
            else:  # the header validate_records rewrote (max timestamp, timestamp type, CRC)
                buffers.append(memoryview(stamped)[PREFIX.size :])
                buffers.append(view[pos + RECORD_BATCH_OVERHEAD : pos + header.size])
            meta.append((rel + pos, next_offset - 1, header.max_timestamp, header.size))
        return first, next_offset, count, max_ts

    def _write_placed(self, seg: LogSegment, buffers: list[Any], meta: list[tuple[int, int, int, int]], total: int,
                      plan: Any, next_offset: int, epoch: int, first_base: int, count: int) -> None:
        """Under the lock: write what :meth:`_place` prepared, then move the log end (readers never see offsets
        whose bytes are not written)."""
        if epoch > self._latest_epoch:  # see leader_epochs
            self._note_epoch(epoch, first_base)
        seg.append(buffers, meta, total)
        self._placed_written(seg, meta, total, plan, next_offset, first_base, count)

    def _placed_written(self, seg: LogSegment, meta: list[tuple[int, int, int, int]], total: int, plan: Any,
                        next_offset: int, first_base: int, count: int) -> None:
        """Under the lock, once what :meth:`_place` prepared is in ``seg``: the log end moves (in memory)."""
        self._note_ends(seg, first_base, next_offset, total, len(meta) == 1)
        plan.commit(next_offset)
        if plan.completed:
            self._index_aborted(seg, plan.completed)
        self._leo = next_offset
        if self.auto_high_watermark:
            self._hw = next_offset
        self._unflushed_messages += count

    def _note_ends(self, seg: LogSegment, first: int, next_offset: int, total: int, single: bool) -> None:
        """Under the lock, once an append's bytes are in ``seg``: where it begins and ends, and whether it is one
        batch (see ``_ends``)."""
        ends = self._ends
        ends[first] = (seg, seg.size - total, single)  # after a roll: in the new segment, not the old one's end
        ends[next_offset] = (seg, seg.size, False)
        while len(ends) > RECENT_ENDS:
            del ends[next(iter(ends))]

    def _append(
        self,
        view: memoryview,
        batches: list[tuple[int, BatchHeader]],
        *,
        leader_epoch: int | None,
        now_ms: int | None,
        new_headers: dict[int, bytes] | None = None,
    ) -> AppendInfo:
        """A producer's validated batches, offsets assigned here (a follower's: _append_follower)."""
        total = len(view)
        if total > self.config.segment_bytes:
            raise RecordListTooLargeError(
                f"{total} bytes of records exceed segment.bytes {self.config.segment_bytes} for {self.name}"
            )
        now = self.clock() if now_ms is None else now_ms
        with self.lock:
            self._check_appendable()
            self.io.make_room(total)  # a full dir (or one this append would take into its reserve) refuses appends
            self._ensure_producer_state()
            buffers: list[Any] = []
            meta: list[tuple[int, int, int, int]] = []
            plan = self.producer_state.plan()
            epoch = leader_epoch if leader_epoch is not None else -1
            placed = self._place(view, batches, new_headers, plan, self._leo, epoch, 0, buffers, meta)
            if placed.__class__ is AppendInfo:
                return placed  # type: ignore[no-any-return]
            first_base, next_offset, count, max_ts = placed
            seg = self._maybe_roll(total, first_base, next_offset - 1, max_ts, now)
            self._write_placed(seg, buffers, meta, total, plan, next_offset, epoch, first_base, count)
            flush_now = self._unflushed_messages >= self.config.flush_interval_messages
            log_start = self._log_start
        if flush_now:
            self.flush()
        return AppendInfo(first_base, next_offset - 1, -1, log_start, count)

    def _append_follower(self, view: memoryview, batches: list[tuple[int, BatchHeader]],
                         now_ms: int | None) -> AppendInfo:
        """Under the lock, batches that carry their offsets (:meth:`append_as_follower`): written unchanged. A
        follower appends once per fetch answer on its dir's worker, so this path reads each header field once
        and does in line what the leader's path calls helpers for (the clock only when a roll by segment.ms
        needs it, the epoch cache only when a batch carries a newer epoch): same checks, same outcome."""
        total = len(view)
        if total > self.config.segment_bytes:
            raise RecordListTooLargeError(
                f"{total} bytes of records exceed segment.bytes {self.config.segment_bytes} for {self.name}"
            )
        with self.lock:
            io = self.io
            if not io.online or self.closed:
                self._check_appendable()
            io.make_room(total)  # a full dir (or one this append would take into its reserve) refuses appends
            if not self._producer_state_ready:
                self._ensure_producer_state()
            next_offset = self._leo
            count = 0
            max_ts = -1
            latest_epoch = self._latest_epoch
            newer_epoch = False
            follower_plan = None  # made for the first batch with a producer id: the others change no state
            meta: list[tuple[int, int, int, int]] = []
            for pos, header in batches:
                base = header.base_offset
                if base < next_offset:
                    raise InvalidRecordError(
                        f"out of order offsets for {self.name}: batch at {base} but the log ends at {next_offset}"
                    )
                if header.producer_id > NO_PRODUCER_ID:
                    if follower_plan is None:
                        follower_plan = self.producer_state.plan()
                    control = header.attributes & CONTROL_MASK
                    follower_plan.check(header, base, from_client=False,
                                        marker=control_marker_type(view, pos, header) if control else -1,
                                        coordinator_epoch=marker_coordinator_epoch(view, pos, header)
                                        if control else -1)
                last = base + header.last_offset_delta
                next_offset = last + 1
                count += header.records_count
                ts = header.max_timestamp
                if ts > max_ts:
                    max_ts = ts
                meta.append((pos, last, ts, header.length + LOG_OVERHEAD))
                if header.partition_leader_epoch > latest_epoch:
                    newer_epoch = True
            first_base = batches[0][1].base_offset
            seg = self._maybe_roll(total, first_base, next_offset - 1, max_ts, now_ms)
            if newer_epoch:  # see leader_epochs; the latest epoch only grows here, so no batch was missed above
                for _pos, h in batches:
                    if h.partition_leader_epoch > self._latest_epoch:
                        self._note_epoch(h.partition_leader_epoch, h.base_offset)
            seg.append([view], meta, total)
            self._note_ends(seg, first_base, next_offset, total, len(meta) == 1)
            if follower_plan is not None:
                follower_plan.commit(next_offset)
                if follower_plan.completed:
                    self._index_aborted(seg, follower_plan.completed)
            else:
                self.producer_state.map_end_offset = next_offset  # what a commit of no producer's batch does
            self._leo = next_offset
            if self.auto_high_watermark:
                self._hw = next_offset
            self._unflushed_messages += count
            flush_now = self._unflushed_messages >= self.config.flush_interval_messages
            log_start = self._log_start
        if flush_now:
            self.flush()
        return AppendInfo(first_base, next_offset - 1, -1, log_start, count)

    def _maybe_roll(self, total: int, first_offset: int, last_offset: int, max_ts: int, now: int | None) -> LogSegment:
        seg = self.segments[-1]
        if seg.size == 0:
            if seg.base_offset != first_offset:
                # A follower append that skips ahead: replace the empty segment with one at its offset.
                return self._roll_locked(first_offset)
            return seg
        reason = self._roll_reason(seg, total, last_offset, max_ts, now)
        if reason is None:
            return seg
        return self._roll_locked(first_offset, reason)

    def _roll_reason(self, seg: LogSegment, total: int, last_offset: int, max_ts: int, now: int | None) -> str | None:
        """Why an append of ``total`` bytes must go to a new segment rather than the non-empty ``seg``, or None."""
        cfg = self.config
        if seg.size > cfg.segment_bytes - total:
            return "segment.bytes"
        if seg.index_full():
            return "index full"
        if last_offset - seg.base_offset > INT32_MAX:
            return "offset overflow"
        rolling_ts = seg.rolling_based_timestamp()
        if rolling_ts is not None and max_ts >= 0:
            waited = max_ts - rolling_ts
        else:  # the clock read only here: a follower's append passes no time (_append_follower)
            waited = (self.clock() if now is None else now) - seg.created_ms
        if waited > cfg.segment_ms - seg.roll_jitter_ms:
            return "segment.ms"
        return None

    def roll(self) -> LogSegment:
        """Start a new segment at the log end offset (no-op if the active segment is empty)."""
        with self.lock:
            self._check_usable()
            if self.active_segment.size == 0:
                return self.active_segment
            return self._roll_locked(self._leo, "requested")

    def _roll_locked(self, new_base: int, reason: str = "follower offset jump") -> LogSegment:
        old = self.segments[-1]
        if old.size == 0:
            # An empty active segment is replaced rather than left behind (Kafka does the same).
            old.delete_files()
            segments = self.segments[:-1]
        else:
            old.on_roll()
            segments = list(self.segments)
        new = self._new_segment(new_base)
        new.create()
        segments.append(new)
        self._set_segments(segments)
        self._dir_dirty = True
        self._write_producer_snapshot(new_base, fsync=False)
        log.debug("segment_rolled", partition=self.name, base_offset=new_base, reason=reason)
        if self.on_roll is not None:
            self.on_roll(self)
        return new

    def _write_producer_snapshot(self, offset: int, *, fsync: bool) -> None:
        if not self._producer_state_ready:
            return  # never loaded, so unchanged: the snapshot from which it would load is still on disk
        self.io.write_atomic(self._snapshot_path(offset), self.producer_state.snapshot_bytes(), fsync=fsync)
        # Keep the two newest snapshots (enough to recover the active segment); older ones only cost a replay.
        names = [n for n in self.io.listdir(self.dir) if n.endswith(SNAPSHOT_SUFFIX)]
        offsets = sorted(int(n[:20]) for n in names if n[:20].isdigit())
        for off in offsets[:-2]:
            self.io.unlink(self._snapshot_path(off), missing_ok=True)

    # ------------------------------------------------------------------------------------------ read

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> ReadResult:
        """Whole batches from the one containing ``offset``, up to ``max_bytes`` (but at least one batch when
        ``min_one_batch``) and below ``max_offset`` (e.g. the high watermark), as file regions."""
        with self._reading:
            self._check_usable()
            leo, lso, hw = self._leo, self._log_start, self._hw
            if offset < lso or offset > leo:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is out of range for {self.name}: log start {lso}, log end {leo}"
                )
            limit = leo if max_offset is None else min(max_offset, leo)
            regions: list[Any] = []
            result = ReadResult(regions, hw, lso, leo)
            if offset >= limit:
                return result
            budget = max_bytes
            recent = self._recent_slice(offset, budget, limit, min_one_batch)
            if recent is not None:
                seg, start, end = recent
                if end > start:
                    regions.append(seg.region(start, end - start))
                return result
            i = max(bisect_right(self._bases, offset) - 1, 0)
            try:
                while i < len(self.segments):
                    if budget <= 0 and (regions or not min_one_batch):
                        break
                    seg = self.segments[i]
                    found = seg.find_batch(offset)
                    if found is None:
                        i += 1
                        continue
                    start, first = found
                    if first.base_offset >= limit:
                        break
                    end = self._slice_end(seg, start, budget, limit)
                    if end == start:
                        if regions or not min_one_batch:
                            break
                        end = start + first.size
                    regions.append(seg.region(start, end - start))
                    budget -= end - start
                    if end < seg.size:
                        break
                    i += 1
                    if i < len(self.segments):
                        offset = self.segments[i].base_offset
            except BaseException:
                for r in regions:
                    close = getattr(r, "close", None)
                    if close is not None:
                        close()
                raise
            return result

    def read_to_end(self, offset: int, max_bytes: int) -> tuple[bytes, int, int] | None:
        """(bytes, high watermark, log start) of everything from ``offset`` to the log end when both are where
        one of the last appends began or ended, in the same segment, and it is 1 to ``max_bytes`` bytes: what
        :meth:`read` up to the log end would send, read with one pread (a caught-up follower's fetch); None
        otherwise (then :meth:`read`)."""
        with self._reading:
            return self._to_end(offset, max_bytes, False)

    def read_to_end_cached(self, offset: int, max_bytes: int) -> tuple[bytes, int, int] | None:
        """:meth:`read_to_end` from the page cache only, as under fsio.no_waiting (the event loop's read for a
        caught-up follower) without switching that on for the thread: the log lock only if it is free, no file
        opened (a segment whose fd was given back), the pread with RWF_NOWAIT; fsio.WouldBlock where it would
        wait. Nine Python calls fewer than ``read_to_end`` under ``no_waiting`` (the mode's switch, the read lock's
        enter and exit, the file seam's look at the mode), on the leader's loop once per replicated append."""
        lock = self.lock
        if not lock.acquire(False):
            raise WouldBlock(f"{self.name} is locked by another thread")
        try:
            return self._to_end(offset, max_bytes, True)
        finally:
            lock.release()

    def _to_end(self, offset: int, max_bytes: int, cached: bool) -> tuple[bytes, int, int] | None:
        self._check_usable()
        ends = self._ends
        start = ends.get(offset)
        end = ends.get(self._leo)
        if (start is None or end is None or start[0] is not end[0] or not 0 < end[1] - start[1] <= max_bytes
                or offset < self._log_start):
            return None
        seg = end[0]
        if not cached:
            return seg.fh.pread(end[1] - start[1], start[1]), self._hw, self._log_start
        fh = seg._fh  # open already, or the read would open a file: not on the loop
        if fh is None:
            raise WouldBlock(f"{seg.log_path} is not open")
        return fh.pread(end[1] - start[1], start[1], cached=True), self._hw, self._log_start

    def _recent_slice(self, offset: int, budget: int, limit: int, min_one_batch: bool,
                      ) -> tuple[LogSegment, int, int] | None:
        """Under the lock, with ``log start <= offset < limit <= log end``: what :meth:`read` would send, as
        (segment, start, end) byte positions, found from the last appends' boundaries (``_ends``) alone, no index
        lookup and no header read: for a read from one of those boundaries (a consumer near the log end) whose
        slice ends at one of them. None where the boundaries cannot say and the batches' headers must be read:
        the offset not among them, the read reaching past the log end's segment, or the budget or ``limit``
        ending inside an append of several batches (where some of them may still fit or begin below it).
        Batch by batch the same rules as the scan (:meth:`_slice_end`): whole batches up to ``budget`` bytes,
        each beginning below ``limit`` (a batch that straddles it included), at least the first one with
        ``min_one_batch``."""
        ends = self._ends
        at = ends.get(offset)
        if at is None:
            return None
        seg, start, single = at
        target = start + budget
        end = start
        first_end = -1  # where the append beginning at ``offset`` ends
        prev, prev_pos, prev_single = offset, start, single
        for off, (s, pos, one) in ends.items():  # up to the log end: always the last of them
            if off <= offset:
                continue
            if s is not seg:
                return None  # a roll: the read may go on into the next segment, the scan's case
            if first_end < 0:
                first_end = pos
            # The append [prev, off) at bytes [prev_pos, pos): its batches begin at prev and end below off.
            if pos <= target and off <= limit:
                end = pos
            elif not prev_single:
                if pos == prev_pos:  # an empty append (a follower's batches after a gap in the offsets)
                    prev, prev_single = off, one
                    continue
                return None  # several batches: the budget or the limit may end among them
            else:
                if prev < limit <= off - 1 and pos <= target:
                    end = pos  # one batch straddling the limit: it begins below it, and fits
                break
            prev, prev_pos, prev_single = off, pos, one
        if end == start and min_one_batch:
            if not single or first_end < 0:
                return None
            end = first_end  # the first batch, whole, though it is over the budget (Kafka's minOneMessage)
        return seg, start, end

    def bytes_to_end(self, offset: int) -> int | None:
        """The bytes from ``offset`` to the log end when both are where one of the last appends began or ended, in
        the same segment (what :meth:`read_to_end` would read), else None. A hint, read without the log lock while
        the dir's worker may be appending: the read itself looks again."""
        ends = self._ends
        start = ends.get(offset)
        end = ends.get(self._leo)
        if start is None or end is None or start[0] is not end[0]:
            return None
        return end[1] - start[1]

    def _slice_end(self, seg: LogSegment, start: int, budget: int, limit: int) -> int:
        """The largest batch boundary ``end`` with ``end - start <= budget`` such that every batch in
        [start, end) begins below offset ``limit``; ``start`` if the first batch does not fit."""
        hi = seg.size
        if limit < self._leo:
            _, pos = seg.index.lookup(limit)
            for p, h in seg.iter_headers(max(pos, start)):
                if h.base_offset >= limit or h.last_offset >= limit:
                    hi = p if h.base_offset >= limit else p + h.size
                    break
        target = min(start + budget, hi)
        pos = max(_floor_position(seg, target), start)
        end = pos
        for p, h in seg.iter_headers(pos, hi):
            if p + h.size > target:
                break
            end = p + h.size
        return end

    def read_bytes(self, offset: int, max_bytes: int, *, max_offset: int | None = None) -> bytes:
        """The bytes :meth:`read` would send (tests, the mover's catch-up, timestamp lookups)."""
        with self._reading:
            self._check_usable()
            leo, lso = self._leo, self._log_start
            if offset < lso or offset > leo:
                raise OffsetOutOfRangeError(f"offset {offset} is out of range for {self.name}: [{lso}, {leo}]")
            limit = leo if max_offset is None else min(max_offset, leo)
            out = bytearray()
            if offset >= limit:
                return bytes(out)
            i = max(bisect_right(self._bases, offset) - 1, 0)
            while i < len(self.segments) and (len(out) < max_bytes or not out):
                seg = self.segments[i]
                found = seg.find_batch(offset)
                if found is not None:
                    start, first = found
                    if first.base_offset >= limit:
                        break
                    end = self._slice_end(seg, start, max_bytes - len(out), limit)
                    if end == start:
                        if out:
                            break
                        end = start + first.size
                    out += seg.read_bytes(start, end - start)
                    if end < seg.size:
                        break
                i += 1
                if i < len(self.segments):
                    offset = self.segments[i].base_offset
            return bytes(out)

    # ------------------------------------------------------------------------------------------ timestamps

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets: the first record with timestamp >= ``timestamp`` as (offset, timestamp), or None.
        The special values -1 (latest), -2 (earliest), -3 (max timestamp), -4 (earliest local) are handled."""
        if timestamp == EARLIEST_TIMESTAMP or timestamp == EARLIEST_LOCAL_TIMESTAMP:
            return self.earliest_offset()
        if timestamp == LATEST_TIMESTAMP:
            return self.latest_offset()
        if timestamp == MAX_TIMESTAMP:
            return self.max_timestamp_offset()
        with self._reading:
            self._check_usable()
            lso = self._log_start
            for seg in self.segments:
                if seg.size == 0 or seg.max_timestamp < timestamp:
                    continue
                seg.ensure_indexes_loaded()
                _, ts_offset = seg.time_index.lookup(timestamp)
                _, pos = seg.index.lookup(max(ts_offset, lso))
                for p, h in seg.iter_headers(pos):
                    if h.max_timestamp < timestamp or h.last_offset < lso:
                        continue
                    for rec in self._records_of(seg, p, h):
                        if rec.timestamp >= timestamp and rec.offset >= lso:
                            return (rec.offset, rec.timestamp)
            return None

    def _records_of(self, seg: LogSegment, pos: int, header: BatchHeader) -> list[Record]:
        try:
            return list(iter_records(seg.read_bytes(pos, header.size)))
        except UnsupportedCompressionError:
            # Without the codec, answer at batch granularity (the batch's first offset and max timestamp).
            return [Record(header.base_offset, header.max_timestamp, None, None, [])]

    def earliest_offset(self) -> tuple[int, int]:
        self._check_usable()
        return (self._log_start, -1)

    def latest_offset(self) -> tuple[int, int]:
        self._check_usable()
        return (self._leo, -1)

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """KIP-734: the record with the largest timestamp (the first one, if several), as (offset, timestamp)."""
        with self._reading:
            self._check_usable()
            best: tuple[int, int, LogSegment] | None = None
            for seg in self.segments:
                if seg.size == 0:
                    continue
                ts, off = seg.max_timestamp_and_offset
                if ts >= 0 and (best is None or ts > best[0]):
                    best = (ts, off, seg)
            if best is None:
                return None
            ts, off, seg = best
            found = seg.find_batch(off)
            if found is None:
                return (off, ts)
            pos, header = found
            for rec in self._records_of(seg, pos, header):
                if rec.timestamp == ts:
                    return (rec.offset, ts)
            return (off, ts)

    # ------------------------------------------------------------------------------------------ flush

    def flush(self, up_to: int | None = None) -> None:
        """fsync data below ``up_to`` (default: everything) and advance the recovery point. The fsyncs run on
        duplicated fds outside the lock, so appends continue meanwhile."""
        with self.lock:
            self._check_usable()
            target = self._leo if up_to is None else min(up_to, self._leo)
            if target <= self.recovery_point and not self._dir_dirty and not self._created_unsynced:
                return
            first = max(bisect_right(self._bases, self.recovery_point) - 1, 0)
            handles = []
            try:
                for seg in self.segments[first:]:
                    if seg.base_offset >= target and seg.size:
                        break
                    handles.extend(seg.handles_for_flush())
            except BaseException:
                for h in handles:
                    h.close()
                raise
            dir_dirty = self._dir_dirty
            self._dir_dirty = False
            created = self._created_unsynced
            self._created_unsynced = False
            if created:
                meta = self.io.open_or_none(os.path.join(self.dir, PARTITION_METADATA_FILE))
                if meta is not None:
                    handles.append(meta)
            flushed_messages = self._unflushed_messages if target >= self._leo else 0
        try:
            for h in handles:
                h.fsync()
            if dir_dirty:
                self.io.fsync_dir(self.dir)
            if created:
                self.io.fsync_dir(os.path.dirname(self.dir))
        finally:
            for h in handles:
                h.close()
        with self.lock:
            if target > self.recovery_point:
                self.recovery_point = target
            self._unflushed_messages = max(0, self._unflushed_messages - flushed_messages)
            self.last_flush_ms = self.clock()

    def flush_if_due(self, now_ms: int) -> bool:
        """``flush.ms``: flush when the oldest unflushed data is older than the interval."""
        if self.config.flush_interval_ms >= LONG_MAX or self._leo <= self.recovery_point:
            return False
        if now_ms - self.last_flush_ms < self.config.flush_interval_ms:
            return False
        self.flush()
        return True

    # ------------------------------------------------------------------------------------------ retention

    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Apply retention.ms, then retention.bytes, then the log start offset (Kafka's order and rules);
        returns the number of segments deleted. Never deletes data at or above the high watermark; if every
        segment is due, the log rolls first so an empty active segment remains. A compacted log without
        ``delete`` in its cleanup.policy only drops segments below its log start offset (Kafka's rule)."""
        now = self.clock() if now_ms is None else now_ms
        cfg = self.config
        with self.lock:
            self._check_usable()
            deleted = 0
            if cfg.delete and cfg.retention_ms >= 0:
                deleted += self._delete_segments(
                    lambda seg, nxt: now - seg.largest_timestamp() > cfg.retention_ms, "retention.ms"
                )
            if cfg.delete and cfg.retention_bytes >= 0:
                diff = self.size_bytes - cfg.retention_bytes
                if diff > 0:
                    state = {"diff": diff}

                    def over_size(seg: LogSegment, nxt: LogSegment | None) -> bool:
                        if state["diff"] - seg.size >= 0:
                            state["diff"] -= seg.size
                            return True
                        return False

                    deleted += self._delete_segments(over_size, "retention.bytes")
            deleted += self._delete_segments(
                lambda seg, nxt: nxt is not None and nxt.base_offset <= self._log_start, "log start offset"
            )
            return deleted

    def _delete_segments(self, predicate: Callable[[LogSegment, LogSegment | None], bool], reason: str) -> int:
        deletable: list[LogSegment] = []
        segs = self.segments
        for i, seg in enumerate(segs):
            nxt = segs[i + 1] if i + 1 < len(segs) else None
            upper = nxt.base_offset if nxt is not None else self._leo
            last_and_empty = nxt is None and seg.size == 0
            if last_and_empty or self._hw < upper or not predicate(seg, nxt):
                break
            deletable.append(seg)
        if not deletable:
            return 0
        if len(deletable) == len(self.segments):
            self._roll_locked(self._leo, reason)
            if deletable[-1].base_offset == self.segments[-1].base_offset:
                deletable.pop()
        remaining = [s for s in self.segments if s not in deletable]
        self._set_segments(remaining)
        for seg in deletable:
            self._schedule_segment_deletion(seg)
        new_start = self.segments[0].base_offset
        if new_start > self._log_start:
            self._log_start = min(new_start, self._leo)
            self._delete_old_snapshots()
        log.info(
            "segments_deleted",
            partition=self.name,
            reason=reason,
            segments=[s.base_offset for s in deletable],
            log_start_offset=self._log_start,
        )
        return len(deletable)

    def _schedule_segment_deletion(self, seg: LogSegment) -> None:
        seg.close_quietly()
        seg.rename_for_deletion()
        self._dir_dirty = True
        self.deletions.schedule(
            self.clock() + self.config.file_delete_delay_ms, seg.log_path, seg.delete_files
        )

    def _delete_old_snapshots(self) -> None:
        for name in self.io.listdir(self.dir):
            if name.endswith(SNAPSHOT_SUFFIX) and name[:20].isdigit() and int(name[:20]) < self._log_start:
                # Keep the one the producer state could be rebuilt from only if it is at the log start.
                self.io.unlink(os.path.join(self.dir, name), missing_ok=True)

    def advance_log_start_offset(self, offset: int) -> None:
        """DeleteRecords: move the log start forward (to at most the high watermark) and drop whole segments
        below it."""
        with self.lock:
            self._check_usable()
            if offset > self._hw:
                raise OffsetOutOfRangeError(
                    f"cannot move the log start of {self.name} to {offset}, above the high watermark {self._hw}"
                )
            if offset <= self._log_start:
                return
            self._log_start = offset
            self._delete_segments(
                lambda seg, nxt: nxt is not None and nxt.base_offset <= self._log_start, "log start offset"
            )

    def expire_producers(self, now_ms: int, expiration_ms: int) -> int:
        with self.lock:
            if not self._producer_state_ready:
                return 0
            return self.producer_state.remove_expired(now_ms, expiration_ms)

    def active_producers(self) -> list[ProducerEntry]:
        """Copies of the producers this log keeps state for, by producer id (DescribeProducers); on the dir's
        worker: the state is loaded first when it is not yet."""
        with self.lock:
            self._ensure_producer_state()
            return [e.copy() for _, e in sorted(self.producer_state.producers.items())]

    # ------------------------------------------------------------------------------------------ compaction

    def swap_in_cleaned(self, old: list[LogSegment], cleaned: LogSegment, truncations: int, *,
                        aborted: list[tuple[int, int, int, int]] | None = None) -> None:
        """The cleaner's last step (kjbod.storage.cleaner): ``cleaned``, whose files end in ``.swap``, replaces the
        segments ``old``, under the lock. Refused (the swap files deleted, CleanAborted raised) when the clean was
        aborted, the log was truncated since the clean began, or any of ``old`` is no longer the log's.
        ``aborted``: the cleaned segment's ``.txnindex`` entries (the abort markers it keeps whose transactions
        still had records in the clean); None keeps those of the segments it replaces."""
        io = self.io
        with self.lock:
            current = {id(s) for s in self.segments[:-1]}
            if (self.clean_abort or self.closed or truncations != self.truncations
                    or any(id(s) not in current for s in old)):
                for path in (cleaned.log_path, cleaned.index.path, cleaned.time_index.path):
                    io.unlink(path, missing_ok=True)
                raise cleaner.CleanAborted(f"the segments of {self.name} changed while it was cleaned")
            if aborted is None:
                aborted = [e for seg in old for e in seg.read_aborted()]
            lo = old[0].base_offset
            after = self.segments.index(old[-1]) + 1
            hi = self.segments[after].base_offset if after < len(self.segments) else self._leo
            for seg in old:
                self._schedule_segment_deletion(seg)
            cleaner.failpoint("old_segments_deleted")
            base_path = os.path.join(self.dir, segment_name(cleaned.base_offset))
            for idx, suffix in ((cleaned.index, INDEX_SUFFIX), (cleaned.time_index, TIME_INDEX_SUFFIX)):
                idx.rename(base_path + suffix)
            io.rename(cleaned.log_path, base_path + LOG_SUFFIX)
            cleaned.log_path = base_path + LOG_SUFFIX
            cleaned.txn_index_path = base_path + TXN_INDEX_SUFFIX
            if aborted:
                cleaned.append_aborted(aborted)
            if self._producer_state_ready:  # what read_committed reads are told follows the files
                state = self.producer_state
                state.aborted = sorted(
                    [t for t in state.aborted if not lo <= t.last_offset < hi]
                    + [CompletedTxn(pid, first, last, True) for pid, first, last, _lso in aborted],
                    key=lambda t: t.last_offset)
            cleaned.created_ms = self.clock()
            first = self.segments.index(old[0])
            last = self.segments.index(old[-1])
            self._set_segments([*self.segments[:first], cleaned, *self.segments[last + 1 :]])
            self._ends = {k: v for k, v in self._ends.items() if v[0] is self.segments[-1]}
            self._dir_dirty = True
        io.fsync_dir(self.dir)

    def abort_cleaning(self) -> None:
        """Kafka's abortAndPauseCleaning: stop a clean of this log in progress (waiting for the cleaner to let it
        go) and keep the cleaner off it until :meth:`resume_cleaning`. For a move or a deletion."""
        self.clean_abort = True
        with self.clean_lock:
            self.clean_paused += 1
        self.clean_abort = False

    def resume_cleaning(self) -> None:
        with self.clean_lock:
            self.clean_paused = max(0, self.clean_paused - 1)

    # ------------------------------------------------------------------------------------------ truncation

    def truncate_to(self, offset: int) -> None:
        """Drop everything at and above ``offset`` (a follower diverging from its leader)."""
        with self.lock:
            self._check_usable()
            if offset >= self._leo:
                return
            if offset < self._log_start:
                self._truncate_fully_locked(offset)
                return
            doomed = [s for s in self.segments if s.base_offset > offset]
            keep = [s for s in self.segments if s.base_offset <= offset]
            if not keep:
                self._truncate_fully_locked(offset)
                return
            self._set_segments(keep)
            for seg in doomed:
                self._schedule_segment_deletion(seg)
            keep[-1].truncate_to_offset(offset)
            keep[-1].truncate_aborted(offset)
            self._ends.clear()
            self._leo = offset
            self._epochs.truncate_from_end(offset)
            self._latest_epoch = self._epochs.latest_epoch
            # what the snapshot cannot give back: the batches below `offset` (see restore_older_batches)
            self._after_truncation(offset, dict(self.producer_state.producers) if self._producer_state_ready else {})

    def truncate_fully_and_start_at(self, offset: int) -> None:
        with self.lock:
            self._check_usable()
            self._truncate_fully_locked(offset)

    def _truncate_fully_locked(self, offset: int) -> None:
        doomed = list(self.segments)
        new = self._new_segment(offset)
        new.create()
        self._set_segments([new])
        for seg in doomed:
            self._schedule_segment_deletion(seg)
        self._ends.clear()
        self._leo = offset
        self._log_start = offset
        self._epochs.clear()
        self._latest_epoch = -1
        self._after_truncation(offset)

    def _after_truncation(self, offset: int, before: dict | None = None) -> None:
        self.truncations += 1
        if self.cleaner_offset is not None and self.cleaner_offset > offset:
            self.cleaner_offset = offset  # Kafka's maybeTruncateCheckpoint
        self.recovery_point = min(self.recovery_point, offset)
        self._hw = min(self._hw, offset) if not self.auto_high_watermark else offset
        self._dir_dirty = True
        snapshots = {}
        for name in self.io.listdir(self.dir):
            if name.endswith(SNAPSHOT_SUFFIX) and name[:20].isdigit():
                snapshots[int(name[:20])] = os.path.join(self.dir, name)
        self._load_producer_state(snapshots)
        if before:
            self.producer_state.restore_older_batches(before, offset)

    # ------------------------------------------------------------------------------------------ files

    def segment_files(self, *, include_active: bool = False) -> list[SegmentFile]:
        """(path, size) of the files of closed segments (and the active one if asked), oldest first: what a
        replica mover copies with sendfile before it catches up on the tail through reads."""
        with self.lock:
            self._check_usable()
            segs = self.segments if include_active else self.segments[:-1]
            out = []
            for seg in segs:
                out.append(SegmentFile(seg.log_path, seg.size))
                for path in (seg.index.path, seg.time_index.path, seg.txn_index_path):
                    st = self.io.stat_or_none(path)
                    if st is not None:
                        out.append(SegmentFile(path, st.st_size))
            return out

    def relocate(self, new_dir: str) -> None:
        """The partition dir was renamed (``-delete``, or a future log promoted): update every path."""
        # Segment files live directly in the partition dir; this runs while appends wait (the swap), so it does
        # no more than string work per file.
        self.dir = new_dir
        self._epochs.partition_dir = new_dir
        prefix = new_dir + os.sep
        for seg in self.segments:
            seg.dir_path = new_dir
            seg.log_path = prefix + os.path.basename(seg.log_path)
            seg.index.path = prefix + os.path.basename(seg.index.path)
            seg.time_index.path = prefix + os.path.basename(seg.time_index.path)
            seg.txn_index_path = prefix + os.path.basename(seg.txn_index_path)

    # ------------------------------------------------------------------------------------------ close

    def close(self) -> None:
        """Clean close: flush, record final time-index entries, trim indexes, snapshot producer state."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            if not self.io.online:
                for seg in self.segments:
                    seg.close_quietly()
                return
            try:
                if self._leo > self.recovery_point or self._dir_dirty:
                    # Untouched logs skip this: a clean shutdown of 10,000 idle partitions costs no fsync.
                    self.active_segment.add_final_time_entry()
                    for seg in self.segments[max(bisect_right(self._bases, self.recovery_point) - 1, 0):]:
                        seg.flush()
                self.recovery_point = self._leo
                self._write_producer_snapshot(self._leo, fsync=True)
                if self._epochs.unwritten and self._leo > self._log_start:
                    # kept in memory only until now (see assign_leader_epoch, leader_epochs): a clean start
                    # then reads the file instead of every batch header
                    self._epochs.flush()
                for seg in self.segments:
                    seg.close()
                if self._created_unsynced:
                    meta = self.io.open_or_none(os.path.join(self.dir, PARTITION_METADATA_FILE))
                    if meta is not None:
                        try:
                            meta.fsync()
                        finally:
                            meta.close()
                if self._dir_dirty or self._created_unsynced:
                    self.io.fsync_dir(self.dir)
                    self._dir_dirty = False
                if self._created_unsynced:
                    self.io.fsync_dir(os.path.dirname(self.dir))
                    self._created_unsynced = False
            except KafkaStorageError:
                for seg in self.segments:
                    seg.close_quietly()
                raise

    def close_quietly(self) -> None:
        """Release fds without writing (the dir is going away or offline)."""
        with self.lock:
            self.closed = True
            for seg in self.segments:
                seg.close_quietly()


def _epoch_start(out: list[tuple[int, int]], header: BatchHeader) -> None:
    """Adds (epoch, base offset) to ``out`` when the batch's epoch is above the last one there (it begins here)."""
    if header.partition_leader_epoch > (out[-1][0] if out else -1):
        out.append((header.partition_leader_epoch, header.base_offset))


def _floor_position(seg: LogSegment, target: int) -> int:
    """Position of the last indexed batch starting at or before byte ``target`` (0 if none)."""
    positions = seg.index._positions
    i = bisect_right(positions, target) - 1
    return positions[i] if i >= 0 else 0


class NativeAppend:
    """An append whose ``writev`` a dir's native writer thread was given (PartitionLog.append_native), holding
    the partition's lock until :meth:`settle` has the write's answer: on the event loop when the write came back
    within its wait, else on the writer's thread (:meth:`late`), where nothing waits for the loop or the dir's
    worker. Settling moves the log end exactly as PartitionLog._append does after its write, or fails the append
    as a failed write there does, and releases the lock."""

    __slots__ = ("log", "seg", "meta", "total", "plan", "next_offset", "first_base", "count", "key", "started",
                 "append_time", "start", "_mu", "_answer", "_settled")

    def __init__(self, log: PartitionLog, seg: LogSegment, meta: list[tuple[int, int, int, int]], total: int,
                 plan: Any, next_offset: int, first_base: int, count: int, key: object, started: float,
                 append_time: int) -> None:
        self.log = log
        self.seg = seg
        self.meta = meta
        self.total = total
        self.plan = plan
        self.next_offset = next_offset
        self.first_base = first_base
        self.count = count
        self.key = key
        self.started = started
        self.append_time = append_time  # LogAppendTime: the time restamped into the batches; else -1
        self.start = seg.size
        self._mu = threading.Lock()  # never held across anything but its own two fields
        self._answer: Callable[[bool, Any], None] | None = None
        self._settled: tuple[bool, Any] | None = None

    def settle(self, outcome: int | OSError) -> AppendInfo:
        """The write's answer (bytes written, or its error; the writer cut a write that ran out of space back):
        the segment, the indexes, the producer state and the log end, in memory, or the dir failed (offline, or
        full) and nothing moved; the lock released either way."""
        log = self.log
        try:
            io = log.io
            io.end_handed(self.key, self.started)  # raises the dir's offline error if it was failed meanwhile
            if outcome.__class__ is not int:
                io.fail("write", self.seg.log_path, outcome)  # type: ignore[arg-type]
            io.usable_bytes -= outcome  # type: ignore[operator]
            self.seg.appended(self.start, self.total, self.meta)
            log._placed_written(self.seg, self.meta, self.total, self.plan, self.next_offset, self.first_base,
                                self.count)
            log_start = log._log_start
        finally:
            log.lock.release()
        return AppendInfo(self.first_base, self.next_offset - 1, self.append_time, log_start, self.count)

    def late(self, outcome: int | OSError) -> None:
        """On the writer's thread, with the GIL, once a write the loop stopped waiting for is back: settled, and
        the answer handed to what :meth:`when_settled` was given (kept for it if that has not come yet)."""
        try:
            got: tuple[bool, Any] = (True, self.settle(outcome))
        except Exception as e:  # the failed append's error, for its request
            got = (False, e)
        with self._mu:
            answer = self._answer
            if answer is None:
                self._settled = got
                return
        answer(*got)

    def when_settled(self, answer: Callable[[bool, Any], None]) -> None:
        """``answer(True, AppendInfo)`` or ``answer(False, exception)`` once settled: at once if it is, else on
        the writer's thread."""
        with self._mu:
            got = self._settled
            if got is None:
                self._answer = answer
                return
        answer(*got)
