"""Sparse offset and time indexes of a segment (``.index`` and ``.timeindex``), in Kafka's byte layout.

Layout (big-endian, fixed-size entries, offsets relative to the segment's base offset):

* ``<base>.index``: 8-byte entries ``int32 relative offset, int32 byte position in the .log``; both strictly
  increasing. An entry maps an offset to the position of a batch at or before it.
* ``<base>.timeindex``: 12-byte entries ``int64 timestamp, int32 relative offset``; timestamps strictly
  increasing (an entry is only added when the segment's max timestamp grows).

Strategy: Kafka mmaps these files. kjbod does not (a failing disk turns an mmap access into SIGBUS, which kills
a Python process): entries live in ``array`` objects in memory, and new entries reach the file in one ``pwrite``
when the segment is flushed, rolled or closed. That is safe because an index only has to be right on disk for
data below the recovery point: everything after it is re-read and its index rebuilt after a crash. It also
means an index holds no open file descriptor (files are opened for each write through the fsio seam), so a
node with 10,000 partitions keeps one fd per partition, its active ``.log``.

Like Kafka, a new index file is preallocated to ``segment.index.bytes`` (sparse) and trimmed to its entries on
roll and close, so after a crash an index may end in zero entries: loading cuts the entries at the first one
that breaks monotonicity, and a file that is inconsistent with its log (bad size, positions past the end) is
reported so the segment rebuilds it. Indexes are loaded lazily (on first lookup or append), so opening a log
after a clean shutdown reads only the last entry of the active segment's indexes.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_right

import structlog

from kjbod.storage.errors import LogDirFullError
from kjbod.storage.fsio import FileHandle, LogDirIO

log = structlog.get_logger("kjbod.storage.index")

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")
_LITTLE = sys.byteorder == "little"


class _Index:
    entry: struct.Struct

    def __init__(self, io: LogDirIO, path: str, base_offset: int, max_index_size: int) -> None:
        self.io = io
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // self.entry.size)
        self._max_bytes = self.max_entries * self.entry.size
        self._loaded = False
        self._written = 0  # entries already in the file
        self._preallocated = False  # the file is longer than its entries (zero tail)
        self._clear_entries()

    # subclass hooks
    def _clear_entries(self) -> None:
        raise NotImplementedError

    def _parse(self, data: bytes) -> None:
        raise NotImplementedError

    def _consistent(self, log_size: int) -> bool:
        raise NotImplementedError

    def _serialize(self, start: int) -> bytes:
        """The file bytes of entries ``start`` onwards."""
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    # -- lifecycle

    @property
    def loaded(self) -> bool:
        return self._loaded

    @property
    def dirty(self) -> bool:
        return len(self) > self._written

    def load(self, log_size: int) -> bool:
        """Read the file. False when it is missing or inconsistent: the caller rebuilds it from the log."""
        self._clear_entries()
        data = self.io.read_bytes_or_none(self.path)
        self._loaded = True
        self._written = 0
        if data is None:
            return False
        if len(data) % self.entry.size:
            return False
        self._parse(data)
        self._written = len(self)
        self._preallocated = len(data) > self._written * self.entry.size
        return self._consistent(log_size)

    def create(self) -> None:
        """A new, empty index file, preallocated to segment.index.bytes (also used to restart a rebuild)."""
        self._clear_entries()
        self._loaded = True
        fh = self.io.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        try:
            fh.truncate(self._max_bytes)
        finally:
            fh.close()
        self._written = 0
        self._preallocated = True

    reset = create

    @property
    def is_full(self) -> bool:
        return len(self) >= self.max_entries

    def sync(self) -> None:
        """Write the entries not yet in the file (one pwrite). On a full dir they stay pending in memory (tried
        again at the next sync): an index is sparse, so a file missing its newest entries still finds every
        offset, only with a longer scan, and a full disk never stops a load, a roll or a close."""
        if len(self) <= self._written:
            return
        try:
            fh = self.io.open(self.path, os.O_WRONLY | os.O_CREAT)
            try:
                fh.pwrite(self._serialize(self._written), self._written * self.entry.size)
            finally:
                fh.close()
        except LogDirFullError as e:
            log.debug("index_entries_pending_no_space", path=self.path, pending=len(self) - self._written,
                      error=str(e))
            return
        self._written = len(self)

    def trim(self) -> None:
        """Write pending entries and cut the preallocated tail, so the file holds exactly its entries (on roll
        and close, as Kafka does)."""
        if not self._loaded:
            return
        self.sync()
        if self._preallocated:
            fh = self.io.open(self.path, os.O_WRONLY | os.O_CREAT)
            try:
                fh.truncate(self._written * self.entry.size)  # the entries the file holds (all, unless full)
            finally:
                fh.close()
            self._preallocated = False

    def open_for_fsync(self) -> FileHandle | None:
        """Write pending entries and return a handle the caller fsyncs and closes (None: no file)."""
        if self._loaded:
            self.sync()
        return self.io.open_or_none(self.path)

    def close(self) -> None:
        self.trim()

    def _truncate_file(self, n: int) -> None:
        if self._written > n:
            fh = self.io.open(self.path, os.O_WRONLY | os.O_CREAT)
            try:
                fh.truncate(n * self.entry.size)
                if self._preallocated:
                    fh.truncate(self._max_bytes)
            finally:
                fh.close()
            self._written = n

    def rename(self, new_path: str) -> None:
        if self.io.exists(self.path):
            self.io.rename(self.path, new_path)
        self.path = new_path

    def delete(self) -> None:
        self.io.unlink(self.path, missing_ok=True)


class OffsetIndex(_Index):
    entry = OFFSET_ENTRY

    def _clear_entries(self) -> None:
        self._offsets = array("i")  # relative offsets
        self._positions = array("i")
        self._tail_garbage = False

    def __len__(self) -> int:
        return len(self._offsets)

    def _parse(self, data: bytes) -> None:
        flat = array("i")
        flat.frombytes(data)
        if _LITTLE:
            flat.byteswap()
        offsets, positions = flat[0::2], flat[1::2]
        # Zero tail of a preallocated, untrimmed file: a real entry never has position 0 (the first entry is
        # only written after index.interval.bytes), so stop at the first entry that does not increase.
        n = 0
        prev_off, prev_pos = -1, 0
        for off, pos in zip(offsets, positions, strict=True):
            if off <= prev_off or pos <= prev_pos:
                break
            prev_off, prev_pos = off, pos
            n += 1
        self._tail_garbage = any(offsets[n:]) or any(positions[n:])
        self._offsets = offsets[:n]
        self._positions = positions[:n]

    def _consistent(self, log_size: int) -> bool:
        if self._tail_garbage:
            return False
        return not self._positions or self._positions[-1] < log_size

    def _serialize(self, start: int) -> bytes:
        n = len(self._offsets) - start
        flat = array("i", bytes(8 * n))
        flat[0::2] = self._offsets[start:]
        flat[1::2] = self._positions[start:]
        if _LITTLE:
            flat.byteswap()
        return flat.tobytes()

    def peek_last(self, log_size: int) -> tuple[int, int] | None:
        """The last entry (absolute offset, position) reading only 8 bytes of a trimmed file; None when the file
        must be loaded in full (missing, untrimmed or suspicious)."""
        if self._loaded:
            return self.last_entry()
        st = self.io.stat_or_none(self.path)
        if st is None or st.st_size % 8 or st.st_size >= self._max_bytes:
            return None
        if st.st_size == 0:
            return (self.base_offset, 0)
        fh = self.io.open(self.path, os.O_RDONLY)
        try:
            raw = fh.pread(8, st.st_size - 8)
        finally:
            fh.close()
        off, pos = OFFSET_ENTRY.unpack(raw)
        if off <= 0 or pos <= 0 or pos >= log_size:
            return None
        return (self.base_offset + off, pos)

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if self._offsets and (rel <= self._offsets[-1] or position <= self._positions[-1]):
            return  # never out of order (a rebuild racing an append cannot happen: both run under the log lock)
        self._offsets.append(rel)
        self._positions.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """The entry with the largest offset <= ``offset``, as (absolute offset, position); (base, 0) if none."""
        i = bisect_right(self._offsets, offset - self.base_offset) - 1
        if i < 0:
            return (self.base_offset, 0)
        return (self.base_offset + self._offsets[i], self._positions[i])

    def last_entry(self) -> tuple[int, int]:
        if not self._offsets:
            return (self.base_offset, 0)
        return (self.base_offset + self._offsets[-1], self._positions[-1])

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= ``offset``."""
        n = bisect_right(self._offsets, offset - self.base_offset - 1)
        if n == len(self._offsets):
            return
        del self._offsets[n:]
        del self._positions[n:]
        self._truncate_file(n)

    def entries(self) -> list[tuple[int, int]]:
        return [(self.base_offset + o, p) for o, p in zip(self._offsets, self._positions, strict=True)]


class TimeIndex(_Index):
    entry = TIME_ENTRY

    def _clear_entries(self) -> None:
        self._timestamps = array("q")
        self._offsets = array("i")
        self._tail_garbage = False

    def __len__(self) -> int:
        return len(self._timestamps)

    def _parse(self, data: bytes) -> None:
        # An all-zero entry is the preallocated tail of an untrimmed file; anything non-monotonic before or
        # non-zero after that point means the file is damaged.
        ts_list = array("q")
        off_list = array("i")
        n = 0
        for ts, off in TIME_ENTRY.iter_unpack(data):
            if ts == 0 and off == 0:
                break
            if (ts_list and ts <= ts_list[-1]) or (off_list and off < off_list[-1]) or off < 0:
                break
            ts_list.append(ts)
            off_list.append(off)
            n += 1
        self._tail_garbage = any(memoryview(data)[n * 12 :])
        self._timestamps, self._offsets = ts_list, off_list

    def _consistent(self, log_size: int) -> bool:
        return not self._tail_garbage

    def _serialize(self, start: int) -> bytes:
        return b"".join(
            TIME_ENTRY.pack(t, o) for t, o in zip(self._timestamps[start:], self._offsets[start:], strict=True)
        )

    def peek_last(self) -> tuple[int, int] | None:
        """The last entry (timestamp, absolute offset) of a trimmed file; None when a full load is needed;
        (-1, base) for an empty file."""
        if self._loaded:
            return self.last_entry()
        st = self.io.stat_or_none(self.path)
        if st is None or st.st_size % 12 or st.st_size >= self._max_bytes:
            return None
        if st.st_size == 0:
            return (-1, self.base_offset)
        fh = self.io.open(self.path, os.O_RDONLY)
        try:
            raw = fh.pread(12, st.st_size - 12)
        finally:
            fh.close()
        ts, off = TIME_ENTRY.unpack(raw)
        if off < 0:
            return None
        return (ts, self.base_offset + off)

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add (timestamp, offset) if the timestamp is larger than the last entry's."""
        if self._timestamps and timestamp <= self._timestamps[-1]:
            return
        rel = offset - self.base_offset
        if self._offsets and rel < self._offsets[-1]:
            return
        self._timestamps.append(timestamp)
        self._offsets.append(rel)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """The entry with the largest timestamp <= ``timestamp``, as (timestamp, absolute offset);
        (-1, base) if none."""
        i = bisect_right(self._timestamps, timestamp) - 1
        if i < 0:
            return (-1, self.base_offset)
        return (self._timestamps[i], self.base_offset + self._offsets[i])

    def last_entry(self) -> tuple[int, int]:
        if not self._timestamps:
            return (-1, self.base_offset)
        return (self._timestamps[-1], self.base_offset + self._offsets[-1])

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose offset >= ``offset``."""
        rel = offset - self.base_offset
        n = len(self._offsets)
        while n and self._offsets[n - 1] >= rel:
            n -= 1
        if n == len(self._offsets):
            return
        del self._timestamps[n:]
        del self._offsets[n:]
        self._truncate_file(n)

    def entries(self) -> list[tuple[int, int]]:
        return [(t, self.base_offset + o) for t, o in zip(self._timestamps, self._offsets, strict=True)]
