"""One log segment: ``<20-digit base offset>.log`` with its ``.index``, ``.timeindex`` and, once a transaction
aborted in it, ``.txnindex``.

The transaction index is Kafka's: one 34-byte entry per transaction whose abort marker lies in the segment,
appended when the marker is, big-endian::

    int16 version (0) | int64 producer id | int64 first offset | int64 last offset (the marker's) |
    int64 last stable offset (once the transaction ended)

Strategy: the ``.log`` holds record batches back to back exactly as they travel on the wire; the segment keeps
its byte size, its largest timestamp and the offset of that timestamp in memory, and writes an index entry
after every ``index.interval.bytes`` of appended data (Kafka's per-batch rule: the entry maps the batch's last
offset to the batch's start position; the time index gets the segment's max timestamp so far at the same time).

Two ways to open an existing segment:

* after a clean shutdown nothing is validated: the active segment reads the last index entry and walks batch
  headers from there to find its next offset (a few KiB at most);
* after a crash, :meth:`LogSegment.recover` re-reads every batch, checks length, magic, CRC and offset order,
  rebuilds both indexes and reports where the valid bytes end; the log copies the rest aside and truncates.
  Besides length, magic, CRC and offsets, it walks each batch's records (decompressing compressed ones) with
  the rules Produce applies (records.stored_records_problem), so a batch a consumer could not read is never
  served after a crash.

File descriptors: only the active segment keeps its ``.log`` open. A closed segment opens its file for a read
and the log releases it afterwards (the region a read returns owns a dup), and indexes open their files only to
write them. So a node holds about one fd per partition, and a clean startup of many partitions costs a
directory listing and a stat per segment. Every file operation goes through the fsio seam.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from kjbod.storage.errors import CorruptMessageError, LogDirFullError
from kjbod.storage.fsio import FileHandle, LogDirIO
from kjbod.storage.index import OffsetIndex, TimeIndex
from kjbod.storage.records import (
    MIN_BATCH_LENGTH,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    crc_matches,
    parse_header,
    stored_records_problem,
)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CORRUPT_SUFFIX = ".corrupt"
INT32_MAX = 0x7FFFFFFF

_SCAN_FIRST = 4 << 10
_SCAN_CHUNK = 64 << 10
_RECOVER_CHUNK = 4 << 20


TXN_ENTRY = struct.Struct(">hqqqq")


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


@dataclass(frozen=True)
class RecoveryResult:
    valid_bytes: int
    truncated_bytes: int
    next_offset: int | None  # None: no valid batch
    reason: str | None  # why the tail is invalid (None when the whole file is valid)
    first_bad_offset: int | None  # base offset the bad batch claimed, when readable


class LogSegment:
    def __init__(
        self,
        io: LogDirIO,
        dir_path: str,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        size: int = 0,
        created_ms: int = 0,
        roll_jitter_ms: int = 0,
    ) -> None:
        self.io = io
        self.dir_path = dir_path
        self.base_offset = base_offset
        prefix = f"{dir_path}/{base_offset:020d}"
        self.log_path = prefix + LOG_SUFFIX
        self.index = OffsetIndex(io, prefix + INDEX_SUFFIX, base_offset, max_index_size)
        self.time_index = TimeIndex(io, prefix + TIME_INDEX_SUFFIX, base_offset, max_index_size)
        self.txn_index_path = prefix + TXN_INDEX_SUFFIX
        self.index_interval_bytes = index_interval_bytes
        self.size = size
        self.created_ms = created_ms
        self.roll_jitter_ms = roll_jitter_ms  # rolls by time this much before segment.ms (segment.jitter.ms)
        self.bytes_since_last_index_entry = 0
        self._fh: FileHandle | None = None
        self._max_ts: tuple[int, int] | None = None  # (max timestamp, offset of it); None until known
        self._rolling_ts: int | None = None  # max timestamp of the first batch (time-based roll)
        self._rolling_ts_known = False
        self.deleted = False

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path!r}, size={self.size})"

    # -- files

    @property
    def fh(self) -> FileHandle:
        fh = self._fh
        if fh is None:
            fh = self._fh = self.io.open(self.log_path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        return fh

    def release(self) -> None:
        """Close the log fd of a segment that is not active (reopened on the next read)."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def create(self) -> None:
        """Create empty files for a new segment (the log file and preallocated indexes)."""
        fh = self.io.open(self.log_path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC)
        self._fh = fh
        self.size = 0
        self.index.create()
        self.time_index.create()
        self._max_ts = (-1, self.base_offset)
        self._rolling_ts = None
        self._rolling_ts_known = True

    def ensure_indexes_loaded(self) -> None:
        """Load both indexes, rebuilding them from the log if missing or inconsistent."""
        ok = True
        if not self.index.loaded:
            ok = self.index.load(self.size) and ok
        if not self.time_index.loaded:
            ok = self.time_index.load(self.size) and ok
        if not ok:
            self.rebuild_indexes()

    def rebuild_indexes(self) -> None:
        result = self.recover(check_crc=False)
        if result.truncated_bytes:
            raise CorruptMessageError(
                f"{self.log_path}: invalid batch at byte {result.valid_bytes} while rebuilding indexes "
                f"({result.reason})"
            )
        # Trimmed like any closed index; an active segment preallocates again on its next index write.
        self.index.trim()
        self.time_index.trim()

    # -- timestamps

    @property
    def max_timestamp_and_offset(self) -> tuple[int, int]:
        if self._max_ts is None:
            last = self.time_index.peek_last()
            if last is None:
                self.ensure_indexes_loaded()
                last = self.time_index.last_entry()
            self._max_ts = last
        return self._max_ts

    @property
    def max_timestamp(self) -> int:
        return self.max_timestamp_and_offset[0]

    def largest_timestamp(self) -> int:
        """Kafka's ``LogSegment.largestTimestamp``: the max record timestamp, or the file's mtime if none."""
        ts = self.max_timestamp
        if ts >= 0:
            return ts
        st = self.io.stat_or_none(self.log_path)
        return int(st.st_mtime * 1000) if st is not None else 0

    def rolling_based_timestamp(self) -> int | None:
        """The max timestamp of the segment's first batch (Kafka measures segment.ms from it)."""
        if not self._rolling_ts_known:
            self._rolling_ts_known = True
            if self.size >= RECORD_BATCH_OVERHEAD:
                header = parse_header(self.fh.pread(RECORD_BATCH_OVERHEAD, 0))
                self._rolling_ts = header.max_timestamp if header.max_timestamp >= 0 else None
        return self._rolling_ts

    # -- append

    def append(self, buffers: list, batches: list[tuple[int, int, int, int]], total: int) -> None:
        """Write ``buffers`` (``total`` bytes) and index them. ``batches``: (position within the append, last
        offset, max timestamp, size) per batch, in order."""
        if not self.index.loaded or not self.time_index.loaded:
            self.ensure_indexes_loaded()
        start = self.size
        try:
            self.fh.writev(buffers)
        except LogDirFullError:
            self.fh.truncate(start)  # a partial write (ENOSPC midway) leaves nothing behind
            raise
        self.appended(start, total, batches)

    def appended(self, start: int, total: int, batches: list[tuple[int, int, int, int]]) -> None:
        """After ``total`` bytes of ``batches`` were written at ``start`` (by :meth:`append`, or by a dir's
        native writer: PartitionLog.append_native): the size and the indexes, in memory."""
        self.size = start + total
        if start == 0:
            self._rolling_ts = batches[0][2] if batches[0][2] >= 0 else None
            self._rolling_ts_known = True
        self._index_batches(start, batches)

    def _index_batches(self, start: int, batches: list[tuple[int, int, int, int]]) -> None:
        max_ts, max_ts_offset = self.max_timestamp_and_offset
        interval = self.index_interval_bytes
        since = self.bytes_since_last_index_entry
        for rel_pos, last_offset, batch_max_ts, size in batches:
            if batch_max_ts > max_ts:
                max_ts, max_ts_offset = batch_max_ts, last_offset
            if since > interval:
                self.index.append(last_offset, start + rel_pos)
                self.time_index.maybe_append(max_ts, max_ts_offset)
                since = 0
            since += size
        self.bytes_since_last_index_entry = since
        self._max_ts = (max_ts, max_ts_offset)

    def index_full(self) -> bool:
        return self.index.is_full or self.time_index.is_full

    # -- reading

    def iter_headers(self, start: int, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from byte ``start``; stops at ``end`` (default: the segment's size).
        Raises CorruptMessageError on a header whose length cannot be right."""
        end = self.size if end is None else end
        pos = start
        buf = b""
        buf_start = pos
        fh = self.fh
        # Reads start small and double while one read holds several headers: a scan over 1 MiB batches (the
        # Fetch path) then reads a few KiB per header instead of 64 KiB, and a scan over small batches still
        # gets big reads.
        chunk = _SCAN_FIRST
        in_buf = 0
        while pos + RECORD_BATCH_OVERHEAD <= end:
            off = pos - buf_start
            if off + RECORD_BATCH_OVERHEAD > len(buf):
                chunk = min(chunk * 2, _SCAN_CHUNK) if in_buf > 1 else _SCAN_FIRST
                buf = fh.pread(min(chunk, end - pos), pos)
                buf_start, off, in_buf = pos, 0, 0
                if len(buf) < RECORD_BATCH_OVERHEAD:
                    return
            in_buf += 1
            header = parse_header(buf, off)
            if header.length < MIN_BATCH_LENGTH or pos + header.size > end:
                raise CorruptMessageError(
                    f"{self.log_path}: invalid batch length {header.length} at byte {pos} (segment size {end})"
                )
            yield pos, header
            pos += header.size

    def find_batch(self, offset: int) -> tuple[int, BatchHeader] | None:
        """The first batch whose last offset >= ``offset`` (position, header), or None."""
        if not self.index.loaded:
            self.ensure_indexes_loaded()
        _, start = self.index.lookup(offset)
        for pos, header in self.iter_headers(start):
            if header.last_offset >= offset:
                return pos, header
        return None

    def read_bytes(self, position: int, size: int) -> bytes:
        return self.fh.pread(size, position)

    def region(self, position: int, size: int) -> object:
        return self.fh.region(position, size)

    # -- recovery

    def load_tail(self) -> int | None:
        """After a clean shutdown: the next offset after the last batch, reading only the tail past the last
        index entry; None when the segment is empty."""
        if self.size == 0:
            return None
        last = self.index.peek_last(self.size)
        if last is None:
            self.ensure_indexes_loaded()
            last = self.index.last_entry()
        _, start = last
        next_offset = None
        for _pos, header in self.iter_headers(start):
            next_offset = header.next_offset
        return next_offset

    def recover(
        self, *, check_crc: bool = True, on_batch: Callable[[BatchHeader], None] | None = None
    ) -> RecoveryResult:
        """Re-read every batch, rebuild both indexes, and find where valid data ends (nothing is truncated
        here). A batch is valid when its length is sane and complete, its magic is 2, its CRC matches (with
        ``check_crc``), its offsets are ascending, and its last offset fits the index's int32 range."""
        self.index.reset()
        self.time_index.reset()
        self.bytes_since_last_index_entry = 0
        self._max_ts = (-1, self.base_offset)
        self._rolling_ts = None
        self._rolling_ts_known = True
        size = self.fh.size()
        self.size = size
        pos = 0
        next_offset: int | None = None
        expected_min = self.base_offset
        buf = b""
        buf_start = 0
        reason: str | None = None
        bad_offset: int | None = None
        batches: list[tuple[int, int, int, int]] = []
        while pos < size:
            off = pos - buf_start
            if off + RECORD_BATCH_OVERHEAD > len(buf):
                buf = self.fh.pread(min(_RECOVER_CHUNK, size - pos), pos)
                buf_start, off = pos, 0
            if len(buf) - off < RECORD_BATCH_OVERHEAD:
                reason = f"{size - pos} bytes left, less than a batch header"
                break
            header = parse_header(buf, off)
            bad_offset = header.base_offset
            if header.length < MIN_BATCH_LENGTH:
                reason = f"batch length {header.length} is too small"
                break
            if pos + header.size > size:
                reason = f"batch of {header.size} bytes is cut off after {size - pos} bytes"
                break
            if header.magic != 2:
                reason = f"magic {header.magic}"
                break
            if off + header.size > len(buf):
                buf = self.fh.pread(max(min(_RECOVER_CHUNK, size - pos), header.size), pos)
                buf_start, off = pos, 0
            if check_crc and not crc_matches(buf, off, header):
                reason = "CRC mismatch"
                break
            if check_crc:
                reason = stored_records_problem(buf, off, header)
                if reason is not None:
                    break
            if header.base_offset < expected_min or header.last_offset_delta < 0:
                reason = f"offset {header.base_offset} out of order (expected >= {expected_min})"
                break
            if header.last_offset - self.base_offset > INT32_MAX:
                reason = f"offset {header.last_offset} does not fit segment {self.base_offset}"
                break
            if pos == 0:
                self._rolling_ts = header.max_timestamp if header.max_timestamp >= 0 else None
            batches.append((pos, header.last_offset, header.max_timestamp, header.size))
            if len(batches) >= 4096:
                self._index_batches(0, batches)
                batches = []
            if on_batch is not None:
                on_batch(header)
            next_offset = header.next_offset
            expected_min = next_offset
            pos += header.size
            bad_offset = None
        if batches:
            self._index_batches(0, batches)
        return RecoveryResult(pos, size - pos, next_offset, reason, bad_offset)

    def copy_range_to(self, dest_path: str, start: int, end: int) -> None:
        """Copy bytes [start, end) of the log into a new file (to keep a corrupt tail aside)."""
        dst = self.io.open(dest_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            self.fh.copy_to(dst, start, end - start)
            dst.fsync()
        finally:
            dst.close()

    def truncate_bytes(self, size: int) -> None:
        """Cut the log at byte ``size`` (a batch boundary); indexes must be truncated by offset separately."""
        self.fh.truncate(size)
        self.size = size
        self._rolling_ts_known = size > 0 and self._rolling_ts_known

    def truncate_to_offset(self, offset: int) -> int:
        """Drop batches whose last offset >= ``offset``; returns the bytes removed."""
        self.ensure_indexes_loaded()
        found = self.find_batch(offset)
        if found is None:
            return 0
        pos, _ = found
        removed = self.size - pos
        self.truncate_bytes(pos)
        self.index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        # The max timestamp may have been in the removed part: recompute from what is left.
        self.recover(check_crc=False)
        return removed

    # -- lifecycle

    def flush(self) -> None:
        for fh in self.handles_for_flush():
            try:
                fh.fsync()
            finally:
                fh.close()

    def handles_for_flush(self) -> list[FileHandle]:
        """Handles on this segment's files for a background thread to fsync outside the log lock (the caller
        closes them). Pending index entries are written first; the log fd is duplicated when open, otherwise
        the file is opened: fsync flushes the file's dirty pages whichever fd it is called on."""
        out: list[FileHandle] = []
        try:
            fh = self._fh
            if fh is not None and fh.fd >= 0:
                out.append(FileHandle(fh.dup(), fh.path, fh.io))
            else:
                opened = self.io.open_or_none(self.log_path)
                if opened is not None:
                    out.append(opened)
            for idx in (self.index, self.time_index):
                opened = idx.open_for_fsync()
                if opened is not None:
                    out.append(opened)
        except BaseException:
            for h in out:
                h.close()
            raise
        return out

    def on_roll(self) -> None:
        """This segment stops being active: record its final max timestamp, trim the indexes, release the fd."""
        if not self.index.loaded or not self.time_index.loaded:
            self.ensure_indexes_loaded()
        ts, off = self.max_timestamp_and_offset
        if ts >= 0:
            self.time_index.maybe_append(ts, off)
        self.index.trim()
        self.time_index.trim()
        self.release()

    def add_final_time_entry(self) -> None:
        """Record the segment's max timestamp in the time index (Kafka does it on roll and close), so a reopened
        segment knows it without reading its data."""
        if self.index.loaded and self.time_index.loaded and self._max_ts is not None:
            ts, off = self._max_ts
            if ts >= 0:
                self.time_index.maybe_append(ts, off)

    def close(self) -> None:
        self.add_final_time_entry()
        try:
            self.index.close()
            self.time_index.close()
        finally:
            self.release()

    def close_quietly(self) -> None:
        """Release the fd without touching the disk (the dir is offline, the files are going away, or a test
        simulates a crash: index entries not yet written are lost, as they would be)."""
        self.release()

    def paths(self) -> list[str]:
        return [self.log_path, self.index.path, self.time_index.path, self.txn_index_path]

    def rename_for_deletion(self) -> None:
        """Kafka's first step of deleting a segment: add ``.deleted`` to each file name."""
        new_log = self.log_path + DELETED_SUFFIX
        self.io.rename(self.log_path, new_log)
        self.log_path = new_log
        self.index.rename(self.index.path + DELETED_SUFFIX)
        self.time_index.rename(self.time_index.path + DELETED_SUFFIX)
        if self.io.stat_or_none(self.txn_index_path) is not None:
            self.io.rename(self.txn_index_path, self.txn_index_path + DELETED_SUFFIX)
        self.txn_index_path += DELETED_SUFFIX
        self.deleted = True

    # -- the transaction index

    def append_aborted(self, entries: list[tuple[int, int, int, int]]) -> None:
        """Adds (producer id, first offset, last offset, last stable offset) entries to the ``.txnindex``."""
        fh = self.io.open(self.txn_index_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            fh.write(b"".join(TXN_ENTRY.pack(0, *e) for e in entries))
        finally:
            fh.close()

    def read_aborted(self) -> list[tuple[int, int, int, int]]:
        """The ``.txnindex`` entries (none when there is no file; a torn last entry is left out)."""
        data = self.io.read_bytes_or_none(self.txn_index_path)
        if not data:
            return []
        usable = len(data) - len(data) % TXN_ENTRY.size
        return [(pid, first, last, lso) for version, pid, first, last, lso in TXN_ENTRY.iter_unpack(data[:usable])
                if version == 0]

    def truncate_aborted(self, offset: int) -> None:
        """Drops the entries of transactions whose marker is at or above ``offset`` (a truncated log)."""
        entries = self.read_aborted()
        kept = [e for e in entries if e[2] < offset]
        if len(kept) == len(entries):
            return
        if kept:
            self.io.write_atomic(self.txn_index_path, b"".join(TXN_ENTRY.pack(0, *e) for e in kept))
        else:
            self.io.unlink(self.txn_index_path, missing_ok=True)

    def delete_files(self) -> None:
        self.release()
        for path in self.paths():
            self.io.unlink(path, missing_ok=True)


def parse_segment_file(name: str) -> tuple[int, str] | None:
    """(base offset, suffix) for ``<20 digits><suffix>`` names, else None."""
    if len(name) < 21 or not name[:20].isdigit():
        return None
    return int(name[:20]), name[20:]

