"""Idempotent-producer state of one partition: the last five batches of every producer id.

Strategy, following Kafka's ``ProducerStateManager`` for appends from clients:

* a batch without a producer id is not checked;
* an epoch older than the producer's current one -> INVALID_PRODUCER_EPOCH (47);
* a batch whose (epoch, first sequence, last sequence) equals one of the producer's last five batches is a
  duplicate (a retry): the append writes nothing and answers with the earlier offsets, as Kafka does;
* a new epoch must start at sequence 0 (unless the producer had no epoch yet); within an epoch the first
  sequence must follow the last one (wrapping at int32 max), else OUT_OF_ORDER_SEQUENCE_NUMBER (45); a producer
  the partition does not know (never seen, or expired) may start at any sequence.

Appends validate against a scratch copy (:class:`AppendPlan`) and commit only after the bytes are written.
State survives restarts through snapshots in Kafka's format (``<20-digit offset>.snapshot``, written on roll
and on clean shutdown) plus a replay of the batches after the snapshot. Snapshot layout (big-endian)::

    int16 version (1) | uint32 CRC-32C of everything after this field | int32 entry count |
    entries of: int64 producer id, int16 epoch, int32 last sequence, int64 last offset,
                int32 offset delta, int64 timestamp, int32 coordinator epoch, int64 txn first offset

Only the last batch of each producer is in a snapshot (as in Kafka), so after a restart a retry of an older
in-flight batch is judged by sequence alone. A truncation rebuilds from a snapshot too, then gives back the
batches the state held before it that the log still has (:meth:`ProducerStateManager.restore_older_batches`).
A KIP-113 move's future replica is built from copied segments and snapshots: at the swap it takes the current
replica's state whole (PartitionLog.take_producer_state), as Kafka's future replica, which replays every batch,
ends up with it.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

import crc32c

from kjbod.storage.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from kjbod.storage.records import NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader

NUM_BATCHES_TO_RETAIN = 5
SNAPSHOT_VERSION = 1
_SNAP_HEAD = struct.Struct(">hI")
_SNAP_COUNT = struct.Struct(">i")
_SNAP_ENTRY = struct.Struct(">qhiqiqiq")
NO_EPOCH = -1


class SnapshotFormatError(ValueError):
    pass


class CompletedTxn(NamedTuple):
    """A transaction a marker ended on this partition: Kafka's aborted-transaction index holds the aborted ones
    (producer id, first offset, last offset: the marker's, and the last stable offset once it ended)."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


class BatchMetadata(NamedTuple):  # a tuple: made for every idempotent batch appended, on the dir's worker
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass
class ProducerEntry:
    producer_id: int
    epoch: int = NO_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    txn_first_offset: int = -1  # the first offset of the producer's ongoing transaction here, -1 when none

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def copy(self) -> ProducerEntry:
        return ProducerEntry(
            self.producer_id, self.epoch, deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN), self.last_timestamp,
            self.coordinator_epoch, self.txn_first_offset,
        )

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        if header.producer_epoch != self.epoch:
            return None
        first, last = header.base_sequence, header.last_sequence
        for b in self.batches:
            if b.first_seq == first and b.last_seq == last:
                return b
        return None

    def add(self, header: BatchHeader, base_offset: int) -> None:
        if header.producer_epoch != self.epoch:
            self.batches.clear()
            self.epoch = header.producer_epoch
        if header.base_sequence != NO_SEQUENCE:
            self.batches.append(
                BatchMetadata(
                    header.base_sequence, header.last_sequence, base_offset, base_offset + header.last_offset_delta,
                    header.max_timestamp,
                )
            )
        self.last_timestamp = max(self.last_timestamp, header.max_timestamp)
        if header.is_transactional:  # a marker ends the producer's transaction, its first data batch starts one
            if header.is_control:
                self.txn_first_offset = -1
            elif self.txn_first_offset < 0:
                self.txn_first_offset = base_offset


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == 0x7FFFFFFF)


class VerificationEntry:
    """KIP-890: a producer whose transactional batch this leader is having its transaction coordinator verify
    (Kafka's VerificationStateEntry). ``guard`` is a fresh object per entry: an append carrying it may start the
    producer's transaction here; one carrying another (or none) may not (kjbod.broker.handlers.produce). The
    lowest sequence seen since keeps a later batch from starting the transaction before an earlier one.
    ``supports_epoch_bump``: made for a transaction.version 2 producer (Produce v12+), whose first batch here must
    then start at sequence 0 when the partition knows nothing of it (Kafka's check for TV2 producers)."""

    __slots__ = ("timestamp", "guard", "lowest_sequence", "epoch", "supports_epoch_bump")

    def __init__(self, timestamp: int, sequence: int, epoch: int, supports_epoch_bump: bool = False) -> None:
        self.timestamp = timestamp
        self.guard = object()
        self.lowest_sequence = sequence
        self.epoch = epoch
        self.supports_epoch_bump = supports_epoch_bump

    def update(self, sequence: int, epoch: int) -> None:
        if epoch == self.epoch and sequence < self.lowest_sequence:
            self.lowest_sequence = sequence
        if epoch > self.epoch:
            self.epoch = epoch
            self.lowest_sequence = sequence


class AppendPlan:
    """Producer-state changes of one append, validated batch by batch; committed after the write.

    A plan may sit on another (``over``: a group commit's, holding what the appends before this one in the
    group changed, not yet written): this one then checks against the state as those appends left it, and its
    changes go into the other with :meth:`merge_into` only when its append is kept, so an append refused
    inside a group leaves the others' state as if it had never come."""

    __slots__ = ("_manager", "_over", "completed", "updated")

    def __init__(self, manager: ProducerStateManager, over: AppendPlan | None = None) -> None:
        self._manager = manager
        self._over = over
        self.updated: dict[int, ProducerEntry] = {}
        self.completed: list[CompletedTxn] = []

    def _latest(self, pid: int) -> ProducerEntry | None:
        """The producer's entry before this plan: the plan below's if it has one, else the committed one."""
        over = self._over
        if over is not None:
            entry = over.updated.get(pid)
            if entry is not None:
                return entry
        return self._manager.producers.get(pid)

    def stacked(self) -> AppendPlan:
        """A plan for the next append of a group, on this one."""
        return AppendPlan(self._manager, self)

    def merge_into(self, other: AppendPlan) -> None:
        """Keep this append's changes in ``other`` (the group's plan: the entries are this plan's own copies)."""
        if self.updated:
            other.updated.update(self.updated)
        if self.completed:
            other.completed.extend(self.completed)

    def check(self, header: BatchHeader, base_offset: int, *, from_client: bool = True,
              marker: int = -1, coordinator_epoch: int = -1) -> BatchMetadata | None:
        """Validate one batch that would get ``base_offset``. Returns the earlier batch if it is a duplicate.
        ``marker``: a control batch's marker type (0 abort, 1 commit; records.control_marker_type);
        ``coordinator_epoch``: the epoch its marker carries (records.marker_coordinator_epoch), kept as the
        producer's (what DescribeProducers shows)."""
        pid = header.producer_id
        if pid <= NO_PRODUCER_ID:  # Kafka's hasProducerId: any id above -1
            return None
        current = self._latest(pid)
        entry = self.updated.get(pid)
        if entry is None:
            if from_client and current is not None:
                duplicate = current.find_duplicate(header)
                if duplicate is not None:
                    return duplicate
            entry = current.copy() if current is not None else ProducerEntry(pid)
        if from_client:
            epoch = header.producer_epoch
            if epoch < entry.epoch:
                raise InvalidProducerEpochError(
                    f"producer {pid} epoch {epoch} is older than the current epoch {entry.epoch}"
                )
            first_seq = header.base_sequence
            verifying = self._manager.verifying
            if verifying:
                ver = verifying.get(pid)
                if ver is not None and ver.supports_epoch_bump and first_seq != 0 and \
                        (current is None or not current.batches):
                    raise OutOfOrderSequenceError(
                        f"producer {pid}: sequence {first_seq} for a transaction.version 2 producer this partition "
                        "has no state for (expected sequence 0)")
                if ver is not None and first_seq > ver.lowest_sequence:
                    raise OutOfOrderSequenceError(
                        f"producer {pid}: sequence {first_seq} is above the earliest seen {ver.lowest_sequence} "
                        "of its transaction's verification")
                if header.is_transactional:  # a transaction starts or ends with it: the guard has done its job
                    verifying.pop(pid, None)
            if first_seq == NO_SEQUENCE:  # a coordinator's append (a marker, a transactional offset commit):
                if header.is_control and entry.txn_first_offset >= 0:  # its epoch is checked, not its sequence
                    self.completed.append(CompletedTxn(pid, entry.txn_first_offset, base_offset, marker == 0))
                if header.is_control and coordinator_epoch >= 0:
                    entry.coordinator_epoch = coordinator_epoch
                entry.add(header, base_offset)
                self.updated[pid] = entry
                return None
            if epoch != entry.epoch:
                if first_seq != 0 and entry.epoch != NO_EPOCH:
                    raise OutOfOrderSequenceError(
                        f"producer {pid}: new epoch {epoch} must start at sequence 0, not {first_seq}"
                    )
            elif entry.batches and not _in_sequence(entry.last_seq, first_seq):
                raise OutOfOrderSequenceError(
                    f"producer {pid} epoch {epoch}: sequence {first_seq} does not follow {entry.last_seq}"
                )
        if header.is_control:
            if entry.txn_first_offset >= 0:
                self.completed.append(CompletedTxn(pid, entry.txn_first_offset, base_offset, marker == 0))
            if coordinator_epoch >= 0:
                entry.coordinator_epoch = coordinator_epoch
        entry.add(header, base_offset)
        self.updated[pid] = entry
        return None

    def commit(self, end_offset: int) -> None:
        manager = self._manager
        manager.producers.update(self.updated)
        manager.map_end_offset = end_offset
        if self.completed:
            manager.aborted.extend(t for t in self.completed if t.aborted)


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self.map_end_offset = 0
        # The aborted transactions appended since this state was made (in memory only: Kafka's .txnindex files,
        # which keep them across restarts, are not written yet).
        self.aborted: list[CompletedTxn] = []
        # KIP-890: producers being verified with their transaction coordinator (set on the event loop, read and
        # cleared on the dir's worker: single dict operations).
        self.verifying: dict[int, VerificationEntry] = {}

    def has_ongoing_txn(self, pid: int, epoch: int | None = None) -> bool:
        """Whether the producer has a transaction open here (at `epoch`, when given: Kafka's
        hasOngoingTransaction, so a transaction.version 2 producer's next transaction, one epoch up, is not taken
        for the one whose marker has not arrived yet)."""
        entry = self.producers.get(pid)
        return entry is not None and entry.txn_first_offset >= 0 and (epoch is None or entry.epoch == epoch)

    def start_verification(self, pid: int, sequence: int, epoch: int, now_ms: int,
                           supports_epoch_bump: bool = False) -> object:
        """The producer's verification guard, its entry made or updated (Kafka's
        maybeCreateVerificationStateEntry)."""
        entry = self.verifying.get(pid)
        if entry is None:
            entry = self.verifying[pid] = VerificationEntry(now_ms, sequence, epoch, supports_epoch_bump)
        entry.update(sequence, epoch)
        return entry.guard

    def verification_guard(self, pid: int) -> object | None:
        entry = self.verifying.get(pid)
        return entry.guard if entry is not None else None

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction still open here (what bounds the last stable offset), or
        None when no producer has one open."""
        firsts = [e.txn_first_offset for e in self.producers.values() if e.txn_first_offset >= 0]
        return min(firsts) if firsts else None

    def plan(self) -> AppendPlan:
        return AppendPlan(self)

    def replay(self, batches: Iterable[BatchHeader]) -> None:
        """Apply already-written batches (recovery): no validation, like Kafka's replication origin."""
        producers = self.producers
        for header in batches:
            if header.producer_id > NO_PRODUCER_ID:
                entry = producers.get(header.producer_id)
                if entry is None:
                    entry = producers[header.producer_id] = ProducerEntry(header.producer_id)
                entry.add(header, header.base_offset)
            self.map_end_offset = header.next_offset

    def restore_older_batches(self, before: dict[int, ProducerEntry], end_offset: int) -> None:
        """After a truncation to ``end_offset`` rebuilt this state from a snapshot (which holds only each
        producer's last batch) and the batches after it: give each producer back the batches of ``before``
        (the state just before the truncation) that the log still holds and that the rebuild could not see,
        up to the five newest. A follower that truncated and then leads would otherwise judge a retry of one of
        those in-flight batches by its sequence alone (OUT_OF_ORDER_SEQUENCE_NUMBER, fatal to the producer)
        instead of answering it as a duplicate. Kafka rebuilds from its snapshot only; what is added here was
        in the log, so the answers agree with Kafka's wherever Kafka's state still had the batch."""
        for pid, entry in self.producers.items():
            old = before.get(pid)
            if old is None or old.epoch != entry.epoch or len(entry.batches) >= NUM_BATCHES_TO_RETAIN:
                continue
            oldest = entry.batches[0].first_offset if entry.batches else end_offset
            older = [b for b in old.batches if b.last_offset < oldest and b.last_offset < end_offset]
            if older:
                entry.batches = deque([*older, *entry.batches], maxlen=NUM_BATCHES_TO_RETAIN)

    def clear(self, offset: int = 0) -> None:
        self.producers.clear()
        self.map_end_offset = offset

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        # A producer with a transaction open here stays (as Kafka's): its marker must find where the transaction began.
        expired = [pid for pid, e in self.producers.items()
                   if now_ms - e.last_timestamp > expiration_ms and e.txn_first_offset < 0]
        for pid in expired:
            del self.producers[pid]
        for pid in [pid for pid, v in self.verifying.items() if now_ms - v.timestamp >= expiration_ms]:
            self.verifying.pop(pid, None)
        return len(expired)

    # -- snapshots

    def snapshot_bytes(self) -> bytes:
        body = bytearray(_SNAP_COUNT.pack(len(self.producers)))
        for pid, e in sorted(self.producers.items()):
            last = e.batches[-1] if e.batches else None
            body += _SNAP_ENTRY.pack(
                pid,
                e.epoch,
                last.last_seq if last else NO_SEQUENCE,
                last.last_offset if last else -1,
                (last.last_offset - last.first_offset) if last else 0,
                e.last_timestamp,
                e.coordinator_epoch,
                e.txn_first_offset,
            )
        return _SNAP_HEAD.pack(SNAPSHOT_VERSION, crc32c.crc32c(body)) + bytes(body)

    @staticmethod
    def parse_snapshot(data: bytes) -> dict[int, ProducerEntry]:
        if len(data) < _SNAP_HEAD.size + _SNAP_COUNT.size:
            raise SnapshotFormatError("producer snapshot too short")
        version, crc = _SNAP_HEAD.unpack_from(data, 0)
        if version != SNAPSHOT_VERSION:
            raise SnapshotFormatError(f"producer snapshot version {version}")
        body = memoryview(data)[_SNAP_HEAD.size :]
        if crc32c.crc32c(body) != crc:
            raise SnapshotFormatError("producer snapshot CRC mismatch")
        (count,) = _SNAP_COUNT.unpack_from(body, 0)
        if count < 0 or len(body) != _SNAP_COUNT.size + count * _SNAP_ENTRY.size:
            raise SnapshotFormatError("producer snapshot size does not match its entry count")
        producers: dict[int, ProducerEntry] = {}
        for pid, epoch, last_seq, last_offset, delta, ts, coord_epoch, txn_first in _SNAP_ENTRY.iter_unpack(
            body[_SNAP_COUNT.size :]
        ):
            entry = ProducerEntry(pid, epoch, last_timestamp=ts, coordinator_epoch=coord_epoch,
                                  txn_first_offset=txn_first if txn_first >= 0 else -1)
            if last_seq != NO_SEQUENCE and last_offset >= 0:
                first_seq = (last_seq - delta) % 0x80000000
                entry.batches.append(BatchMetadata(first_seq, last_seq, last_offset - delta, last_offset, ts))
            producers[pid] = entry
        return producers

    def load_snapshot(self, data: bytes, offset: int) -> None:
        self.producers = self.parse_snapshot(data)
        self.map_end_offset = offset
