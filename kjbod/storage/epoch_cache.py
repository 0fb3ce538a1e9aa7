"""The leader epoch cache of one partition log: which leader epoch began at which offset.

Strategy: a short sorted list of (epoch, start offset), the first offset each epoch's leader wrote.  Followers
compare their last fetched epoch with the leader's (DivergingEpoch, OffsetForLeaderEpoch) to find where their
logs part, so the list must survive restarts: it is written whole, with :meth:`LogDirIO.write_atomic`, after
every change, by the thread that does the log's file work (epochs change at elections, not per append; an empty
log's first epoch waits for its data: kjbod.storage.log).  Byte layout, Kafka's ``leader-epoch-checkpoint``
(``LeaderEpochCheckpointFile``, version 0), in the partition's directory, UTF-8, ``\\n`` after every line::

    0              version
    2              number of entries
    0 0            epoch, start offset separated by a space
    3 1500

A missing file on a non-empty log is rebuilt from the batch headers when the log is loaded (each v2 batch
carries the epoch of the leader that wrote it); after a crash, the epochs of the batches recovery re-read
replace the file's from there on.

Threads: the event loop reads the cache (a follower's fetch, a leader's answer to LastFetchedEpoch or
OffsetForLeaderEpoch) and records a new leader's epoch in it; the dir's worker appends, truncates and writes the
file. So the list is never changed in place: a change builds a new list under a lock held for the list work
only (never for I/O), and a reader takes ``entries`` once and uses that.  ``flush`` writes the entries as they
are when it runs, one writer at a time, so the last write holds the latest list whoever asked first.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable

import structlog

from kjbod.storage.checkpoint import CHECKPOINT_VERSION, CheckpointFormatError
from kjbod.storage.errors import LogDirFullError
from kjbod.storage.fsio import LogDirIO

log = structlog.get_logger(__name__)

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1
_WS = re.compile(r"\s+")


def render_epoch_checkpoint(entries: Iterable[tuple[int, int]]) -> str:
    items = list(entries)
    lines = [str(CHECKPOINT_VERSION), str(len(items))] + [f"{epoch} {offset}" for epoch, offset in items]
    return "\n".join(lines) + "\n"


def parse_epoch_checkpoint(text: str, where: str = LEADER_EPOCH_CHECKPOINT) -> list[tuple[int, int]]:
    lines = [line for line in text.split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    try:
        version, count = int(lines[0].strip()), int(lines[1].strip())
        if version != CHECKPOINT_VERSION:
            raise CheckpointFormatError(f"{where}: unknown version {version}")
        entries = []
        for line in lines[2:]:
            epoch, offset = _WS.split(line.strip())
            entries.append((int(epoch), int(offset)))
    except (IndexError, ValueError) as e:
        raise CheckpointFormatError(f"{where}: malformed ({e})") from None
    if len(entries) != count:
        raise CheckpointFormatError(f"{where}: expected {count} entries, found {len(entries)}")
    return entries


class LeaderEpochCache:
    """(epoch, start offset) pairs, oldest first, with Kafka's LeaderEpochFileCache rules (see the docstring)."""

    def __init__(self, io: LogDirIO | None, partition_dir: str, entries: list[tuple[int, int]] | None = None) -> None:
        self.io = io
        self.partition_dir = partition_dir  # follows the log's dir (renames: -future promoted, -delete)
        self.entries: list[tuple[int, int]] = list(entries or [])  # replaced whole, never changed in place
        self.unwritten = False  # changed since the file was last written
        self._lock = threading.Lock()  # list work only
        self._flush_lock = threading.Lock()  # one file write at a time

    @classmethod
    def load(cls, io: LogDirIO, partition_dir: str) -> LeaderEpochCache | None:
        """The cache from its file, or None when there is no file (or it does not parse: it is rebuilt)."""
        data = io.read_bytes_or_none(os.path.join(partition_dir, LEADER_EPOCH_CHECKPOINT))
        if data is None:
            return None
        try:
            return cls(io, partition_dir, parse_epoch_checkpoint(data.decode("utf-8", "replace")))
        except CheckpointFormatError:
            return None

    @property
    def latest_epoch(self) -> int:
        entries = self.entries
        return entries[-1][0] if entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int, *, flush: bool = True) -> bool:
        """Records that `epoch` starts at `start_offset`; an epoch not above the latest changes nothing, and
        entries the new one supersedes (a later or equal start offset) are dropped.  Returns whether it changed."""
        with self._lock:
            entries = self.entries
            if epoch < 0 or (entries and epoch <= entries[-1][0]):
                return False
            kept = [(e, s) for e, s in entries if s < start_offset]
            kept.append((epoch, start_offset))
            self.entries = kept
            self.unwritten = True
        if flush:
            self.flush()
        return True

    def start_at(self, epoch: int, start_offset: int) -> bool:
        """`epoch`, recorded earlier with a provisional start offset, starts at `start_offset` (where the log
        ended once what was queued before it had run: see PartitionLog.settle_leader_epoch); entries it
        supersedes go.  Nothing changes when a later epoch was recorded since (its own settling places it).
        Returns whether it changed."""
        with self._lock:
            entries = self.entries
            if epoch < 0 or (entries and entries[-1][0] > epoch) or (entries and entries[-1] == (epoch, start_offset)):
                return False
            kept = [(e, s) for e, s in entries if e < epoch and s < start_offset]
            kept.append((epoch, start_offset))
            self.entries = kept
            self.unwritten = True
        return True

    def replace(self, entries: list[tuple[int, int]]) -> None:
        """The whole list, as another copy of the same log has it (a KIP-113 swap); the file is not written."""
        with self._lock:
            self.entries = list(entries)
            self.unwritten = True

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest epoch ≤ `epoch`, the start offset of the next epoch, or the LEO for the latest); (-1, -1) when
        `epoch` is above every known epoch or unknown (Kafka's `endOffsetFor`)."""
        entries = self.entries
        if epoch == UNDEFINED_EPOCH or not entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch == entries[-1][0]:
            return epoch, log_end_offset
        floor: tuple[int, int] | None = None
        for e, start in entries:
            if e > epoch:
                return (floor[0] if floor is not None else epoch), start
            floor = (e, start)
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET

    def truncate_from_end(self, end_offset: int, *, flush: bool = True) -> bool:
        """Drops the epochs that start at or after `end_offset` (the log was truncated there); whether any went."""
        with self._lock:
            entries = self.entries
            kept = [(e, s) for e, s in entries if s < end_offset]
            if len(kept) == len(entries):
                return False
            self.entries = kept
            self.unwritten = True
        if flush:
            self.flush()
        return True

    def clear(self) -> None:
        with self._lock:
            if not self.entries:
                return
            self.entries = []
            self.unwritten = True
        self.flush()

    def flush(self) -> None:
        """Writes the entries as they are now (the latest, whoever asked: see the docstring)."""
        io = self.io
        if io is None:
            return
        with self._flush_lock:
            path = os.path.join(self.partition_dir, LEADER_EPOCH_CHECKPOINT)
            self.unwritten = False  # before the entries are read: a change meanwhile sets it again
            try:
                io.write_atomic(path, render_epoch_checkpoint(self.entries).encode("utf-8"))
            except LogDirFullError:
                # A full dir keeps serving: the epochs stay in memory, and the file, which would now be stale,
                # goes (an unlink needs no space), so a restart rebuilds the cache exactly from the batches' epochs.
                io.unlink(path, missing_ok=True)
                log.warning("leader_epoch_checkpoint_not_written", partition_dir=self.partition_dir,
                            reason="the log dir is full", effect="rebuilt from the log at the next start")
