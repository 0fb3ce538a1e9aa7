"""The leader epoch cache of one partition log: which leader epoch began at which offset.

Strategy: a short sorted list of (epoch, start offset), the first offset each epoch's leader wrote.  Followers
compare their last fetched epoch with the leader's (DivergingEpoch, OffsetForLeaderEpoch) to find where their
logs part, so the list must survive restarts: it is written whole, with :meth:`LogDirIO.write_atomic`, after
every change (epochs change at elections, not per append).  Byte layout, Kafka's ``leader-epoch-checkpoint``
(``LeaderEpochCheckpointFile``, version 0), in the partition's directory, UTF-8, ``\\n`` after every line::

    0              version
    2              number of entries
    0 0            epoch, start offset separated by a space
    3 1500

A missing file on a non-empty log is rebuilt from the batch headers (each v2 batch carries the epoch of the
leader that wrote it).
"""

from __future__ import annotations

import os
import re
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
        self.partition_dir = partition_dir
        self.entries: list[tuple[int, int]] = list(entries or [])

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
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int, *, flush: bool = True) -> bool:
        """Records that `epoch` starts at `start_offset`; an epoch not above the latest changes nothing, and
        entries the new one supersedes (a later or equal start offset) are dropped.  Returns whether it changed."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return False
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        if flush:
            self.flush()
        return True

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest epoch ≤ `epoch`, the start offset of the next epoch, or the LEO for the latest); (-1, -1) when
        `epoch` is above every known epoch or unknown (Kafka's `endOffsetFor`)."""
        if epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch == self.entries[-1][0]:
            return epoch, log_end_offset
        floor: tuple[int, int] | None = None
        for e, start in self.entries:
            if e > epoch:
                return (floor[0] if floor is not None else epoch), start
            floor = (e, start)
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET

    def truncate_from_end(self, end_offset: int) -> None:
        """Drops the epochs that start at or after `end_offset` (the log was truncated there)."""
        before = len(self.entries)
        self.entries = [(e, s) for e, s in self.entries if s < end_offset]
        if len(self.entries) != before:
            self.flush()

    def clear(self) -> None:
        if self.entries:
            self.entries = []
            self.flush()

    def flush(self) -> None:
        if self.io is None:
            return
        path = os.path.join(self.partition_dir, LEADER_EPOCH_CHECKPOINT)
        try:
            self.io.write_atomic(path, render_epoch_checkpoint(self.entries).encode("utf-8"))
        except LogDirFullError:
            # A full dir keeps serving: the epochs stay in memory, and the file, which would now be stale, goes
            # (an unlink needs no space), so a restart rebuilds the cache exactly from the batches' epochs.
            self.io.unlink(path, missing_ok=True)
            log.warning("leader_epoch_checkpoint_not_written", partition_dir=self.partition_dir,
                        reason="the log dir is full", effect="rebuilt from the log at the next start")
