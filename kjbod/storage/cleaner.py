"""Log compaction (Kafka's log cleaner): for a log whose cleanup.policy names ``compact``, keep only the last
record of each key.

Strategy, as Kafka's cleaner behaves:

* **What is cleanable.** A log has a clean part (log start to its cleaner checkpoint, ``cleaner-offset-checkpoint``
  in its log dir) and a dirty part (checkpoint to the first uncleanable offset: the active segment's base, the
  high watermark, and the first segment holding a record newer than ``min.compaction.lag.ms``). A dir's cleaner
  picks the log whose dirty bytes are the largest share of clean + dirty (over ``min.cleanable.dirty.ratio``), or
  one whose oldest dirty record is older than ``max.compaction.lag.ms``.
* **The offset map.** The dirty segments, whole segments in order, are read into key -> last offset (keys by their
  MD5, 24 bytes an entry against ``log.cleaner.dedupe.buffer.size`` split over ``log.cleaner.threads`` times the
  0.9 load factor, as Kafka sizes it). The segments that do not fit are left dirty for the next round; the new
  checkpoint is the offset after the last batch mapped.
* **The rewrite.** The segments from the log start to that point are rewritten in groups (consecutive segments
  whose sizes add up to at most ``segment.bytes``, whose indexes fit ``segment.index.bytes`` and whose offsets fit
  one segment). A record stays when its key maps to its offset or to an earlier one, and, for a tombstone (null
  value), until its batch's delete horizon has passed: the first clean that keeps a tombstone sets the batch's
  delete horizon (the DeleteHorizon attribute bit, the base timestamp holding now + ``delete.retention.ms``), a
  later clean after that time drops it. Records without a key are dropped. A batch whose records all stay is
  copied byte for byte; one that lost records is rebuilt with its base offset, last offset delta, producer id,
  epoch, base sequence, partition leader epoch and attributes, recompressed with its codec, CRC recomputed; one
  left without records is dropped, unless it is the last batch of a producer the log still tracks: then its
  header stays as an empty batch (so the producer's sequence survives), as Kafka keeps it. Offsets never change:
  the cleaned log has holes.
* **Transactions, Kafka's rules** (:class:`TxnFilter`). The cleaner never passes the last stable offset (an open
  transaction's records stay dirty). An aborted transaction's batches (known from the ``.txnindex`` entries of
  the range) add no key to the map and lose all their records. A marker stays while the clean still sees records
  of its transaction (an abort marker then keeps its ``.txnindex`` entry in the cleaned segment, the other
  entries of the cleaned segments go); once a clean sees none, the marker gets a delete horizon as a tombstone
  does (now + ``delete.retention.ms``), and a clean after that time removes it (its header stays as an empty
  batch when it holds the producer's last epoch and the producer has no data batch left).
* **Crash safety, Kafka's scheme.** A group is written to ``<base>.log.cleaned`` (and its indexes, ``.index.cleaned``
  and ``.timeindex.cleaned``), fsynced, renamed to ``.swap``; then, under the log's lock, the old segments are
  renamed ``.deleted`` (removed after ``file.delete.delay.ms``) and the swap files renamed to the segment's names.
  At load (PartitionLog._load) ``.cleaned`` files are deleted and a ``.swap`` finishes its swap: the segments it
  covers go, its files take their names, its indexes are rebuilt.
* **Threads.** Each log dir's cleaning runs on that dir's background thread (the one that runs its retention,
  flushes and checkpoints: kjbod.storage.manager), never on the event loop, and reads the segments through fds of
  its own, so reads, appends and rolls go on while it works; only the swap takes the log's lock. A log being
  moved (a ``-future`` copy exists), deleted or truncated is not swapped into: :meth:`PartitionLog.abort_cleaning`
  stops a clean in progress and waits for it (Kafka's abortAndPauseCleaning), and the swap checks that the
  segments it replaces are still the log's, untruncated.
* ``log.cleaner.io.max.bytes.per.second`` throttles the bytes read and written; ``log.cleaner.backoff.ms`` is the
  pause when nothing is cleanable.
"""

from __future__ import annotations

import hashlib
import heapq
import os
import signal
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import crc32c
import structlog

from kjbod.storage.config import LONG_MAX
from kjbod.storage.errors import CorruptMessageError
from kjbod.storage.fsio import FileHandle, LogDirIO
from kjbod.storage.records import (
    CODEC_NONE,
    CONTROL_MASK,
    MIN_BATCH_LENGTH,
    NO_PRODUCER_ID,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    _decompress,
    compress,
    control_marker_type,
    parse_header,
    read_varint,
    write_varint,
)
from kjbod.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment, segment_name

if TYPE_CHECKING:
    from kjbod.storage.log import PartitionLog

log = structlog.get_logger("kjbod.storage.cleaner")

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETE_HORIZON_MASK = 0x40  # Attributes bit 6: the base timestamp is the batch's delete horizon (KIP-534)
MAP_ENTRY_BYTES = 24  # Kafka's SkimpyOffsetMap: a 16-byte MD5 and an 8-byte offset per key
_READ_CHUNK = 1 << 20
_WRITE_CHUNK = 1 << 20
_AFTER_CRC = struct.Struct(">hiqqqhii")  # Attributes .. RecordsCount
_BEFORE_CRC = struct.Struct(">qiibI")  # BaseOffset, Length, PartitionLeaderEpoch, Magic, CRC

# Crash points for kill -9 tests, armed only by this environment variable (``name`` or ``name@N``, comma-separated):
# after the .cleaned files are written and fsynced; after they are renamed .swap; after the old segments are
# renamed .deleted, before the swap files take their names.
FAILPOINTS_ENV = "KJBOD_CLEANER_FAILPOINTS"
FAILPOINTS = ("cleaned_written", "swap_renamed", "old_segments_deleted")
_armed: dict[str, int] = {}
_armed_lock = threading.Lock()


def _arm_from_env() -> None:
    for item in (p.strip() for p in os.environ.get(FAILPOINTS_ENV, "").split(",")):
        if not item:
            continue
        name, _, count = item.partition("@")
        if name not in FAILPOINTS:
            raise ValueError(f"unknown cleaner failpoint {name!r} in {FAILPOINTS_ENV} (known: {', '.join(FAILPOINTS)})")
        _armed[name] = int(count) if count else 1


def failpoint(name: str) -> None:
    """The cleaner passes crash point ``name``: SIGKILL this process if it is armed and due."""
    if not _armed:
        return
    with _armed_lock:
        left = _armed.get(name)
        if left is None:
            return
        _armed[name] = left - 1
        if left > 1:
            return
        del _armed[name]
    log.critical("cleaner_failpoint_fired", failpoint=name, pid=os.getpid(), effect="SIGKILL")
    os.kill(os.getpid(), signal.SIGKILL)


_arm_from_env()


@dataclass(frozen=True)
class CleanerConfig:
    """The broker's ``log.cleaner.*`` settings, Kafka's defaults."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 128 << 20
    io_buffer_load_factor: float = 0.9
    io_max_bytes_per_second: float = float("inf")
    backoff_ms: int = 15_000

    @property
    def map_capacity(self) -> int:
        """Keys one clean can map: each dir's cleaner has a thread's share of the dedupe buffer."""
        per_thread = self.dedupe_buffer_size // max(1, self.threads)
        return max(1, int(per_thread // MAP_ENTRY_BYTES * self.io_buffer_load_factor))


class CleanAborted(Exception):
    """The log being cleaned is moved, deleted or truncated: the clean stops and leaves no file behind."""


class CleanerError(Exception):
    """A log the cleaner cannot clean (named in the message); it is left alone until the next start."""


class OffsetMap:
    """Key -> offset of its last record in the dirty part, bounded to ``capacity`` keys (keys by their MD5, as
    Kafka's SkimpyOffsetMap: a collision is as unlikely as Kafka accepts it to be)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._map)

    def put(self, key: bytes, offset: int) -> None:
        self._map[hashlib.md5(key).digest()] = offset

    def get(self, key: bytes) -> int:
        return self._map.get(hashlib.md5(key).digest(), -1)

    def clear(self) -> None:
        self._map.clear()
        self.latest_offset = -1


class Throttler:
    """At most ``rate`` bytes a second over the clean (log.cleaner.io.max.bytes.per.second); sleeps in short
    steps so an abort is seen while it waits."""

    def __init__(self, rate: float, abort: Callable[[], None]) -> None:
        self.rate = rate
        self.abort = abort
        self.start = time.monotonic()
        self.total = 0

    def add(self, n: int) -> None:
        self.total += n
        if self.rate == float("inf") or self.rate <= 0:
            return
        while True:
            ahead = self.total / self.rate - (time.monotonic() - self.start)
            if ahead <= 0:
                return
            self.abort()
            time.sleep(min(ahead, 0.05))


# --------------------------------------------------------------------------------------------- choosing


@dataclass
class LogToClean:
    """What one clean of ``log`` would cover (Kafka's LogToClean)."""

    log: PartitionLog
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    cleanable_bytes: int
    need_now: bool  # max.compaction.lag.ms passed for its oldest dirty record

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def first_batch_timestamp(io: LogDirIO, seg: LogSegment) -> int:
    """The max timestamp of a closed segment's first batch (Kafka's getFirstBatchTimestamp), read through an fd of
    the cleaner's own; -1 when it has none."""
    if seg.size < RECORD_BATCH_OVERHEAD:
        return -1
    fh = io.open_or_none(seg.log_path)
    if fh is None:
        return -1
    try:
        data = fh.pread(RECORD_BATCH_OVERHEAD, 0)
    finally:
        fh.close()
    return parse_header(data).max_timestamp if len(data) == RECORD_BATCH_OVERHEAD else -1


def log_to_clean(plog: PartitionLog, checkpoint: int | None, now_ms: int) -> tuple[LogToClean, bool]:
    """The cleanable range of ``plog`` (Kafka's LogCleanerManager.cleanableOffsets and maxCompactionDelay), and
    whether the checkpoint had to be reset (below the log start, or past the log end)."""
    cfg = plog.config
    with plog.lock:
        segments = list(plog.segments)
        log_start, leo, hw = plog.log_start_offset, plog.log_end_offset, plog.high_watermark
        reset = False
        first_dirty = log_start if checkpoint is None else checkpoint
        if first_dirty < log_start or first_dirty > leo:
            first_dirty, reset = log_start, checkpoint is not None
        closed = segments[:-1]
        dirty_closed = [s for i, s in enumerate(closed) if _seg_end(segments, i) > first_dirty]
        if dirty_closed:  # something to clean: the open transactions must be known (loaded once, here)
            plog._ensure_producer_state()
            for seg in closed:
                seg.release()
        # Never past the last stable offset: an open transaction may still be aborted (Kafka's cleanableOffsets).
        uncleanable = min(hw, plog.last_stable_offset, segments[-1].base_offset)
        if cfg.min_compaction_lag_ms > 0:
            # Under the lock, as retention reads them: a closed segment's max timestamp may load its time index.
            for seg in dirty_closed:
                if seg.largest_timestamp() > now_ms - cfg.min_compaction_lag_ms:
                    uncleanable = min(uncleanable, seg.base_offset)
                    break
            for seg in closed:
                seg.release()
    uncleanable = max(first_dirty, uncleanable)
    # Whole segments only: the dirty bytes end at the segment holding the first uncleanable offset.
    bases = [s.base_offset for s in segments]
    limit_index = max((i for i, b in enumerate(bases) if b <= uncleanable), default=0)
    limit_base = bases[limit_index]
    clean = sum(s.size for i, s in enumerate(segments) if i < limit_index and _seg_end(segments, i) <= first_dirty)
    cleanable = sum(s.size for i, s in enumerate(segments)
                    if i < limit_index and _seg_end(segments, i) > first_dirty and s.base_offset < limit_base)
    need_now = False
    if cfg.max_compaction_lag_ms < LONG_MAX and cleanable > 0:
        until = now_ms - cfg.max_compaction_lag_ms
        stamps = [t for s in dirty_closed if s.base_offset < limit_base
                  if (t := first_batch_timestamp(plog.io, s)) >= 0]
        need_now = bool(stamps) and min(stamps) < until
    return LogToClean(plog, first_dirty, limit_base, clean, cleanable, need_now), reset


def _seg_end(segments: list[LogSegment], i: int) -> int:
    return segments[i + 1].base_offset if i + 1 < len(segments) else LONG_MAX


def should_clean(ltc: LogToClean) -> bool:
    """Kafka's rule: some cleanable bytes that max.compaction.lag.ms says are due, or a dirty ratio over
    min.cleanable.dirty.ratio."""
    if ltc.total_bytes <= 0:
        return False
    return (ltc.need_now and ltc.cleanable_bytes > 0) or ltc.ratio > ltc.log.config.min_cleanable_dirty_ratio


# --------------------------------------------------------------------------------------------- records


class _Rec(NamedTuple):
    offset_delta: int
    timestamp: int  # the record's own timestamp (base timestamp + delta)
    key: bytes | None
    has_value: bool
    attributes: int
    rest_start: int  # key length varint onwards (key, value, headers)
    end: int


def _records(payload: bytes | memoryview, header: BatchHeader) -> list[_Rec]:
    out: list[_Rec] = []
    pos = 0
    for _ in range(header.records_count):
        length, pos = read_varint(payload, pos)
        end = pos + length
        if length < 0 or end > len(payload):
            raise CorruptMessageError(f"record at offset delta {len(out)} extends past its batch")
        attributes = payload[pos]
        ts_delta, p = read_varint(payload, pos + 1)
        off_delta, p = read_varint(payload, p)
        rest = p
        key_len, p = read_varint(payload, p)
        key = None if key_len < 0 else bytes(payload[p : p + key_len])
        p += max(key_len, 0)
        value_len, p = read_varint(payload, p)
        out.append(_Rec(off_delta, header.base_timestamp + ts_delta, key, value_len >= 0, attributes, rest, end))
        pos = end
    return out


def _batch_bytes(header: BatchHeader, attributes: int, base_ts: int, max_ts: int, count: int,
                 body: bytes | bytearray) -> bytes:
    after_crc = _AFTER_CRC.pack(attributes, header.last_offset_delta, base_ts, max_ts, header.producer_id,
                                header.producer_epoch, header.base_sequence, count) + bytes(body)
    return _BEFORE_CRC.pack(header.base_offset, 9 + len(after_crc), header.partition_leader_epoch, 2,
                            crc32c.crc32c(after_crc)) + after_crc


def rebuild_batch(header: BatchHeader, payload: bytes | memoryview, kept: list[_Rec],
                  delete_horizon: int | None) -> bytes:
    """The batch with only ``kept`` records: same base offset, last offset delta, producer fields, leader epoch
    and codec; records re-timed against the new base timestamp (the delete horizon when set, else the first
    kept record's timestamp); CRC recomputed."""
    base_ts = delete_horizon if delete_horizon is not None else kept[0].timestamp
    max_ts = header.max_timestamp if header.is_log_append_time else max(r.timestamp for r in kept)
    body = bytearray()
    for r in kept:
        rec = bytearray((r.attributes,))
        write_varint(rec, r.timestamp - base_ts)
        write_varint(rec, r.offset_delta)
        rec += payload[r.rest_start : r.end]
        write_varint(body, len(rec))
        body += rec
    if header.compression != CODEC_NONE:
        body = bytearray(compress(header.compression, bytes(body)))
    attributes = header.attributes & ~DELETE_HORIZON_MASK
    if delete_horizon is not None:
        attributes |= DELETE_HORIZON_MASK
    return _batch_bytes(header, attributes, base_ts, max_ts, len(kept), body)


def empty_batch(header: BatchHeader) -> bytes:
    """Kafka's empty batch for a producer's last batch whose records all went: the header alone, same offsets
    and producer fields, no codec, no base timestamp, the max timestamp kept."""
    attributes = header.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK)
    return _batch_bytes(header, attributes, -1, header.max_timestamp, 0, b"")


def iter_segment_batches(fh: FileHandle, size: int) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Every batch of a closed segment's first ``size`` bytes, read through ``fh`` (closed at the end)."""
    try:
        pos = 0
        while pos + RECORD_BATCH_OVERHEAD <= size:
            view = memoryview(fh.pread(min(_READ_CHUNK, size - pos), pos))
            off = 0
            while off + RECORD_BATCH_OVERHEAD <= len(view):
                header = parse_header(view, off)
                if header.length < MIN_BATCH_LENGTH or pos + off + header.size > size:
                    raise CorruptMessageError(f"{fh.path}: invalid batch length {header.length} at byte {pos + off}")
                if off + header.size > len(view):
                    if off == 0:  # a batch bigger than the chunk
                        view = memoryview(fh.pread(header.size, pos))
                        yield header, view
                        off = header.size
                    break
                yield header, view[off : off + header.size]
                off += header.size
            if off == 0:
                break
            pos += off
    finally:
        fh.close()


def open_segment(plog: PartitionLog, seg: LogSegment) -> FileHandle:
    """An fd of the cleaner's own on a closed segment of ``plog``, opened under the log's lock while the segment is
    still the log's (retention, DeleteRecords or a truncation may have renamed it away: CleanAborted then, never
    an open of a missing file, which the fsio seam would take for a failing disk). The fd reads the data even if
    the file is renamed afterwards."""
    with plog.lock:
        if plog.closed or plog.clean_abort or not any(s is seg for s in plog.segments):
            raise CleanAborted(f"segment {seg.base_offset} of {plog.name} went while it was cleaned")
        return plog.io.open(seg.log_path, os.O_RDONLY)


# --------------------------------------------------------------------------------------------- transactions

TxnEntry = tuple[int, int, int, int]  # a .txnindex entry: producer id, first offset, last offset, last stable offset


def aborted_between(entries: list[TxnEntry], start: int, upper: int) -> list[TxnEntry]:
    """The aborted transactions with records in [start, upper): ended at or after ``start``, begun before
    ``upper`` (Kafka's collectAbortedTransactions)."""
    return [e for e in entries if e[2] >= start and e[1] < upper]


class TxnFilter:
    """What one pass over a range of batches may drop because of transactions, Kafka's CleanedTransactionMetadata
    rules: fed every batch in offset order, it says whether a data batch belongs to an aborted transaction (its
    records go, and add no key to the map) and whether a marker may go (no record of its transaction was seen in
    this pass).  ``kept`` collects the index entries of the abort markers that stay."""

    def __init__(self, aborted: Iterable[TxnEntry] = ()) -> None:
        self._pending: list[tuple[int, TxnEntry]] = []  # a heap by first offset
        self._aborted_open: dict[int, tuple[TxnEntry, list[bool]]] = {}  # producer id -> (entry, [records seen])
        self._committed_open: set[int] = set()  # producers whose transaction's records were seen, not aborted
        self.kept: list[TxnEntry] = []
        self.add(aborted)

    def add(self, aborted: Iterable[TxnEntry]) -> None:
        """More aborted transactions (those of the next segment: one filter goes over a whole clean, as Kafka's)."""
        for entry in aborted:
            heapq.heappush(self._pending, (entry[1], entry))

    def _reach(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[0][0] <= offset:
            _, entry = heapq.heappop(pending)
            self._aborted_open.setdefault(entry[0], (entry, [False]))

    def on_data(self, header: BatchHeader) -> bool:
        """A data batch: True when it belongs to an aborted transaction."""
        self._reach(header.last_offset)
        if not header.is_transactional:
            return False
        aborted = self._aborted_open.get(header.producer_id)
        if aborted is not None:
            aborted[1][0] = True
            return True
        self._committed_open.add(header.producer_id)
        return False

    def on_marker(self, header: BatchHeader, marker: int) -> bool:
        """A control batch (``marker``: 0 abort, 1 commit): True when it may go once its delete horizon passed."""
        self._reach(header.last_offset)
        if header.records_count == 0:
            return True  # emptied by an earlier clean
        pid = header.producer_id
        if marker == 0:
            aborted = self._aborted_open.pop(pid, None)
            if aborted is not None and aborted[1][0]:
                self.kept.append(aborted[0])
                return False
            return True
        if marker == 1:
            if pid in self._committed_open:
                self._committed_open.discard(pid)
                return False
            return True
        return False


# --------------------------------------------------------------------------------------------- cleaning


@dataclass
class CleanStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    segments_before: int = 0
    segments_after: int = 0


class Cleaner:
    """One dir's cleaner: its offset map is reused from clean to clean (made again at the start of a clean when a
    changed ``config`` sizes it differently)."""

    def __init__(self, config: CleanerConfig, clock: Callable[[], int]) -> None:
        self.config = config
        self.clock = clock
        self.map = OffsetMap(config.map_capacity)
        self._map_for = config  # the config the map was sized by

    def clean(self, ltc: LogToClean, stopping: Callable[[], bool] = lambda: False) -> tuple[int, CleanStats]:
        """Clean ``ltc.log`` (the caller holds its ``clean_lock``); returns the new checkpoint. Raises
        CleanAborted when the log is moved, deleted or truncated meanwhile, or ``stopping()`` says the node shuts
        down; CleanerError when even its first dirty segment does not fit the offset map."""
        plog = ltc.log
        now = self.clock()
        stats = CleanStats()
        config = self.config  # replaced whole when a dynamic log.cleaner.* key changes; this clean keeps one
        if config is not self._map_for:
            self._map_for = config
            if self.map.capacity != config.map_capacity:
                self.map = OffsetMap(config.map_capacity)

        def check_abort() -> None:
            if plog.clean_abort or plog.closed or stopping():
                raise CleanAborted(f"cleaning {plog.name} was aborted")

        throttler = Throttler(config.io_max_bytes_per_second, check_abort)
        with plog.lock:
            segments = list(plog.segments[:-1])
            version = plog.truncations
            plog._ensure_producer_state()
            last_of_producer = {pid: (e.last_offset, e.epoch) for pid, e in plog.producer_state.producers.items()}
            all_segments = list(plog.segments)
        # The aborted transactions of the whole log (a marker may sit past the cleaned range), from the .txnindex
        # files: closed segments' change only by a clean (this one holds the log's clean_lock) or a truncation
        # (which aborts it); the active one's may get an entry meanwhile, of a marker past the range.
        aborted = [e for seg in all_segments for e in seg.read_aborted()]
        end_offset = self._build_map(plog, segments, ltc.first_dirty, ltc.first_uncleanable, stats, throttler,
                                     check_abort, aborted)
        if end_offset <= ltc.first_dirty:
            return ltc.first_dirty, stats
        to_clean = [s for s in segments if s.base_offset < end_offset]
        cfg = plog.config
        txn = TxnFilter()  # carried from group to group, as Kafka's cleaner carries its transaction state
        for group in group_segments(to_clean, cfg.segment_bytes, cfg.segment_index_bytes, cfg.index_interval_bytes,
                                    end_offset):
            check_abort()
            self._clean_group(plog, group, version, now, last_of_producer, stats, throttler, check_abort, txn,
                              aborted, segments, end_offset)
        log.info("log_cleaned", partition=plog.name, log_dir=plog.log_dir, first_dirty=ltc.first_dirty,
                 checkpoint=end_offset, bytes_read=stats.bytes_read, bytes_written=stats.bytes_written,
                 records_read=stats.records_read, records_kept=stats.records_kept,
                 segments_before=stats.segments_before, segments_after=stats.segments_after)
        return end_offset, stats

    def _build_map(self, plog: PartitionLog, segments: list[LogSegment], start: int, end: int, stats: CleanStats,
                   throttler: Throttler, check_abort: Callable[[], None], aborted: list[TxnEntry]) -> int:
        """The offset map of the dirty segments from ``start`` to ``end``, whole segments while they fit (the
        records of aborted transactions left out); returns the offset after the last batch mapped."""
        omap = self.map
        omap.clear()
        dirty = [(i, s) for i, s in enumerate(segments)
                 if s.base_offset < end and _seg_end(segments, i) > start]
        txn = TxnFilter(aborted_between(aborted, dirty[0][1].base_offset if dirty else start, end))
        for n, (i, seg) in enumerate(dirty):
            upper = min(_seg_end(segments, i), end)
            span = upper - max(seg.base_offset, start)
            if len(omap) + span > omap.capacity:
                if n == 0:
                    raise CleanerError(
                        f"{plog.name}: segment {seg.base_offset} spans {span} offsets but the offset map holds "
                        f"{omap.capacity} keys; raise log.cleaner.dedupe.buffer.size or lower log.cleaner.threads")
                break
            for header, batch in iter_segment_batches(open_segment(plog, seg), seg.size):
                check_abort()
                if header.base_offset >= end:
                    break
                stats.bytes_read += header.size
                throttler.add(header.size)
                if header.is_control:
                    txn.on_marker(header, control_marker_type(batch, 0, header))
                elif txn.on_data(header):
                    pass  # an aborted transaction's records: no key of theirs counts
                elif header.last_offset >= start:
                    for r in _records(_payload(header, batch), header):
                        offset = header.base_offset + r.offset_delta
                        if r.key is not None and offset >= start:
                            omap.put(r.key, offset)
                if header.last_offset >= start:
                    omap.latest_offset = max(omap.latest_offset, header.last_offset)
        return omap.latest_offset + 1 if omap.latest_offset >= 0 else start

    def _clean_group(self, plog: PartitionLog, group: list[LogSegment], version: int, now: int,
                     last_of_producer: dict[int, tuple[int, int]], stats: CleanStats, throttler: Throttler,
                     check_abort: Callable[[], None], txn: TxnFilter, aborted: list[TxnEntry],
                     segments: list[LogSegment], end_offset: int) -> None:
        io = plog.io
        base = group[0].base_offset
        prefix = os.path.join(plog.dir, segment_name(base))
        cleaned = LogSegment(io, plog.dir, base, index_interval_bytes=plog.config.index_interval_bytes,
                             max_index_size=plog.config.segment_index_bytes)
        cleaned.log_path = prefix + LOG_SUFFIX + CLEANED_SUFFIX
        cleaned.index.path = prefix + INDEX_SUFFIX + CLEANED_SUFFIX
        cleaned.time_index.path = prefix + TIME_INDEX_SUFFIX + CLEANED_SUFFIX
        retention = plog.config.delete_retention_ms
        try:
            out = io.open(cleaned.log_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
            try:
                pending: list[bytes | memoryview] = []
                pending_bytes = 0
                txn.kept = []  # the cleaned segment's .txnindex entries
                for seg in group:
                    # The aborted transactions with records in this segment (its whole range, as Kafka's).
                    upper = next((s.base_offset for s in segments if s.base_offset > seg.base_offset), end_offset)
                    txn.add(aborted_between(aborted, seg.base_offset, upper))
                    for header, batch in iter_segment_batches(open_segment(plog, seg), seg.size):
                        check_abort()
                        stats.bytes_read += header.size
                        kept = self._filter_batch(header, batch, now, retention, last_of_producer, stats, txn)
                        if kept is None:
                            continue
                        pending.append(kept)
                        pending_bytes += len(kept)
                        throttler.add(header.size + len(kept))
                        if pending_bytes >= _WRITE_CHUNK:
                            out.writev(pending)
                            stats.bytes_written += pending_bytes
                            pending, pending_bytes = [], 0
                if pending:
                    out.writev(pending)
                    stats.bytes_written += pending_bytes
                out.fsync()
            finally:
                out.close()
            check_abort()
            cleaned.recover(check_crc=False)  # the indexes of the new segment
            cleaned.on_roll()
            for idx in (cleaned.index, cleaned.time_index):
                fh = io.open(idx.path, os.O_RDONLY)
                try:
                    fh.fsync()
                finally:
                    fh.close()
            failpoint("cleaned_written")
            check_abort()
            for path_attr in (cleaned.index, cleaned.time_index):
                path_attr.rename(path_attr.path[: -len(CLEANED_SUFFIX)] + SWAP_SUFFIX)
            swap_log = prefix + LOG_SUFFIX + SWAP_SUFFIX
            io.rename(cleaned.log_path, swap_log)
            cleaned.log_path = swap_log
            io.fsync_dir(plog.dir)
            failpoint("swap_renamed")
        except BaseException:
            cleaned.close_quietly()
            for path in (cleaned.log_path, cleaned.index.path, cleaned.time_index.path):
                if io.online:
                    io.unlink(path, missing_ok=True)
            raise
        stats.segments_before += len(group)
        stats.segments_after += 1
        plog.swap_in_cleaned(group, cleaned, version, aborted=txn.kept)

    def _filter_batch(self, header: BatchHeader, batch: memoryview, now: int, delete_retention_ms: int,
                      last_of_producer: dict[int, tuple[int, int]], stats: CleanStats,
                      txn: TxnFilter) -> bytes | memoryview | None:
        """What of one batch the cleaned segment keeps: the batch as is, a rebuilt one, an empty one, or None."""
        has_horizon = bool(header.attributes & DELETE_HORIZON_MASK)
        if header.is_control:
            if not txn.on_marker(header, control_marker_type(batch, 0, header)):
                return batch
            last = last_of_producer.get(header.producer_id)
            # Kept (emptied) when it holds the producer's last epoch and no data batch of the producer is left.
            keeps_epoch = last is not None and last[0] < 0 and last[1] == header.producer_epoch
            if header.records_count == 0:  # emptied by an earlier clean
                return batch if keeps_epoch else None
            if not has_horizon:  # no record of its transaction is left: it goes once delete.retention.ms passed
                payload = _payload(header, batch)
                return rebuild_batch(header, payload, _records(payload, header), now + delete_retention_ms)
            if now < header.base_timestamp:
                return batch
            return empty_batch(header) if keeps_epoch else None
        payload = _payload(header, batch)
        records = _records(payload, header)
        stats.records_read += len(records)
        if txn.on_data(header):  # an aborted transaction's: every record goes
            return empty_batch(header) if self._last_of_producer(header, last_of_producer) else None
        tombstones_expire = has_horizon and now >= header.base_timestamp
        kept = []
        tombstones = False
        for r in records:
            if r.key is None:
                continue  # Kafka drops records without a key from a compacted log
            if header.base_offset + r.offset_delta < self.map.get(r.key):
                continue
            if not r.has_value:
                if tombstones_expire:
                    continue
                tombstones = True
            kept.append(r)
        stats.records_kept += len(kept)
        set_horizon = tombstones and not has_horizon
        if kept and len(kept) == len(records) and not set_horizon:
            return batch
        if kept:
            horizon = now + delete_retention_ms if set_horizon else (header.base_timestamp if has_horizon else None)
            return rebuild_batch(header, payload, kept, horizon)
        if self._last_of_producer(header, last_of_producer):
            return empty_batch(header)
        return None

    @staticmethod
    def _last_of_producer(header: BatchHeader, last_of_producer: dict[int, tuple[int, int]]) -> bool:
        """Whether the batch holds the last sequence of a producer the log still tracks (kept, empty if need be)."""
        if header.producer_id == NO_PRODUCER_ID:
            return False
        last = last_of_producer.get(header.producer_id)
        return last is not None and last[0] == header.last_offset


def _payload(header: BatchHeader, batch: memoryview) -> bytes | memoryview:
    payload = batch[RECORD_BATCH_OVERHEAD : header.size]
    if header.compression != CODEC_NONE:
        return _decompress(header.compression, bytes(payload))
    return payload


def group_segments(segments: list[LogSegment], max_size: int, max_index_size: int, index_interval: int,
                   end_offset: int) -> list[list[LogSegment]]:
    """Consecutive segments cleaned into one (Kafka's groupSegmentsBySize): their sizes within segment.bytes,
    their index entries within segment.index.bytes, their offsets within one segment's int32 range."""

    def index_bytes(seg: LogSegment) -> int:
        return (seg.size // max(index_interval, 1) + 1) * 12

    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        size, idx = segments[i].size, index_bytes(segments[i])
        i += 1
        while i < len(segments):
            nxt = segments[i]
            last = (segments[i + 1].base_offset if i + 1 < len(segments) else end_offset) - 1
            if (size + nxt.size > max_size or idx + index_bytes(nxt) > max_index_size
                    or last - group[0].base_offset > 0x7FFFFFFF):
                break
            group.append(nxt)
            size += nxt.size
            idx += index_bytes(nxt)
            i += 1
        groups.append(group)
    return groups


# --------------------------------------------------------------------------------------------- recovery


def complete_swaps(io: LogDirIO, dir_path: str, names: list[str]) -> list[str]:
    """At load, before the segments are listed: finish any swap a crash interrupted (Kafka's LogLoader). Each
    ``<base>.log.swap`` replaces the segments whose base offsets fall in [base, the swap's next offset): they are
    deleted with their indexes, the swap takes the name ``<base>.log`` and its indexes are dropped to be rebuilt.
    ``.cleaned`` files are deleted. Returns the dir's names as they are now."""
    swaps = sorted(int(n[:20]) for n in names if n.endswith(LOG_SUFFIX + SWAP_SUFFIX) and n[:20].isdigit())
    changed = False
    for name in names:
        if name.endswith(CLEANED_SUFFIX) or (name.endswith(SWAP_SUFFIX) and not name.endswith(LOG_SUFFIX + SWAP_SUFFIX)):
            io.unlink(os.path.join(dir_path, name), missing_ok=True)  # swap indexes are rebuilt
            changed = True
    for base in swaps:
        changed = True
        swap_path = os.path.join(dir_path, segment_name(base) + LOG_SUFFIX + SWAP_SUFFIX)
        st = io.stat_or_none(swap_path)
        size = st.st_size if st is not None else 0
        next_offset = base
        try:
            for header, _batch in iter_segment_batches(io.open(swap_path, os.O_RDONLY), size):
                next_offset = header.next_offset
        except CorruptMessageError as e:
            log.warning("cleaner_swap_unreadable", path=swap_path, error=str(e))
        for name in names:
            if not name[:20].isdigit() or len(name) < 21:
                continue
            seg_base, suffix = int(name[:20]), name[20:]
            if suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX) and (
                    seg_base == base or base <= seg_base < next_offset):
                io.unlink(os.path.join(dir_path, name), missing_ok=True)
        io.rename(swap_path, os.path.join(dir_path, segment_name(base) + LOG_SUFFIX))
        log.info("cleaner_swap_completed", log_dir=dir_path, base_offset=base, next_offset=next_offset)
    if changed:
        io.fsync_dir(dir_path)
        return io.listdir(dir_path)
    return names
