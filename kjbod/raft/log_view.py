"""What the quorum state machine needs to know about the local copy of the metadata log, and an in-memory one.

Strategy: elections and fetch validation only look at the log's epochs, never its bytes: the end offset, the
epoch of the last batch, and where each epoch ended (Kafka's `endOffsetForEpoch`). `LogView` is that interface;
the asyncio shell adapts the real metadata log (its leader epoch cache) to it. `EpochHistory` keeps the same facts
in memory, as (epoch, start offset) pairs plus the end offset, for the pure tests and for a shell that mirrors the
log's epochs.
"""

from __future__ import annotations

from typing import Any, Protocol


class LogView(Protocol):
    def end_offset(self) -> int:
        """The offset the next appended record gets."""
        ...

    def last_epoch(self) -> int:
        """The epoch of the last batch in the log (0 for an empty log)."""
        ...

    def start_offset(self) -> int:
        """The first offset the log still holds (above 0 once a snapshot replaced the records below it)."""
        ...

    def snapshot_id(self) -> tuple[int, int] | None:
        """(end offset, epoch) of the snapshot the log starts from, or None when it starts at offset 0 with none."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(end offset, epoch) as Kafka's `endOffsetForEpoch`: for the largest epoch ≤ `epoch` in the log, the
        offset where the next epoch begins (the log end for the last epoch); for an epoch above every epoch in
        the log or below the first, (log end offset, last epoch) and (first epoch's start, `epoch`)."""
        ...


class EpochHistory:
    """The epochs of a log in memory: sorted (epoch, start offset) pairs and the end offset."""

    def __init__(self, entries: list[tuple[int, int]] | None = None, end: int = 0, start: int = 0,
                 snapshot: tuple[int, int] | None = None) -> None:
        self.entries: list[tuple[int, int]] = list(entries or [])
        self.end = end
        self.start = start
        self.snapshot = snapshot

    def end_offset(self) -> int:
        return self.end

    def last_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else 0

    def start_offset(self) -> int:
        return self.start

    def snapshot_id(self) -> tuple[int, int] | None:
        return self.snapshot

    def append(self, epoch: int, count: int) -> None:
        """`count` records appended in `epoch` (which must not be below the last epoch)."""
        if count <= 0:
            raise ValueError(f"append of {count} records")
        if self.entries and epoch < self.entries[-1][0]:
            raise ValueError(f"epoch {epoch} appended after epoch {self.entries[-1][0]}")
        if not self.entries or epoch > self.entries[-1][0]:
            self.entries.append((epoch, self.end))
        self.end += count

    def truncate_to(self, offset: int) -> None:
        """Drop every record at `offset` and after."""
        if offset < self.end:
            self.end = max(offset, self.start)
            self.entries = [(e, s) for e, s in self.entries if s < self.end]

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        if not self.entries:
            return self.end, self.last_epoch()
        if epoch >= self.entries[-1][0]:
            if epoch == self.entries[-1][0]:
                return self.end, epoch
            return self.end, self.entries[-1][0]
        floor: int | None = None
        for e, s in self.entries:
            if e > epoch:
                return s, (floor if floor is not None else epoch)
            floor = e
        return self.end, self.last_epoch()  # not reached: the last entry is above `epoch`


class MetadataLogView:
    """`LogView` over kjbod.storage.metadata_log.MetadataLog (its in-memory state only: no file is read)."""

    def __init__(self, mlog: Any) -> None:
        self.mlog = mlog

    def _history(self) -> EpochHistory:
        return EpochHistory(self.mlog.epochs, end=self.mlog.next_offset, start=self.mlog.log_start_offset)

    def end_offset(self) -> int:
        return int(self.mlog.next_offset)

    def last_epoch(self) -> int:
        epochs = self.mlog.epochs
        if epochs:
            return int(epochs[-1][0])
        snapshot = self.mlog.latest_snapshot()
        return int(snapshot.epoch) if snapshot is not None else 0

    def start_offset(self) -> int:
        return int(self.mlog.log_start_offset)

    def snapshot_id(self) -> tuple[int, int] | None:
        snapshot = self.mlog.latest_snapshot()
        if snapshot is None:
            return None
        return int(snapshot.end_offset), int(snapshot.epoch)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        history = self._history()
        if not history.entries:
            return history.end, self.last_epoch()
        return history.end_offset_for_epoch(epoch)
