"""The records of `__share_group_state` and the sans-IO book of share-partition states they make.

Strategy: one share-partition's state (group, topic id, partition) lives in the partition of `__share_group_state`
that its key "group:topicId:partition" hashes to.  It is written as a ShareSnapshot record (the whole state), then
ShareUpdate records (what each write changed) between snapshots; every
share.coordinator.snapshot.update.records.per.snapshot updates the next write is a snapshot again, so a load
replays at most that many updates per key.  A ShareSnapshot key with a null value deletes the state.  The topic
is not compacted (the updates of a key are deltas: keeping only the latest would lose the others): as Kafka's, it
has cleanup.policy=delete with retention.ms=-1, and the coordinator deletes the records below the oldest latest
snapshot of the keys of a partition itself (`PruneOffsets`), since no load needs them.

Byte layouts (Kafka's, schemas/share/):

  key    int16 record type (0 ShareSnapshot, 1 ShareUpdate), then ShareSnapshotKey / ShareUpdateKey v0:
         group id (int16-length string), topic id (16 bytes), partition (int32)
  value  int16 version (0), then ShareSnapshotValue / ShareUpdateValue v0 in the flexible encoding
         (DeliveryCompleteCount as tag 0)

Combining batches (an update onto a state, or a write's own batches): offsets below the start offset are dropped
(a run that straddles it is cut), then each offset takes the batch with the highest delivery count, and of equal
counts the highest delivery state (0 available < 2 acknowledged < 4 archived); runs next to each other with the
same state and count are joined.  The result is sorted and has no overlaps.

`ShareStateBook` holds the states of the partitions this broker coordinates and decides, as Kafka's share
coordinator does, which record a request writes and what it answers; `replay` applies a record, whether it was
just written or read back while loading, so both take one path.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any
from uuid import UUID

from kjbod.broker.share.persister import StateBatch
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import ShareSnapshotKey, ShareSnapshotValue, ShareUpdateKey, ShareUpdateValue
from kjbod.protocol.generated import share_snapshot_value as _snap
from kjbod.protocol.generated import share_update_value as _upd
from kjbod.protocol.runtime import DecodeError

SNAPSHOT, UPDATE = 0, 1  # record types (the key's leading int16)
VALUE_VERSION = 0
_H = struct.Struct(">h")

StateKey = tuple[str, UUID, int]  # (group id, topic id, partition)


class ShareRecordError(ValueError):
    """A key or value of `__share_group_state` that does not decode."""


def coordinator_key(group_id: str, topic_id: UUID, partition: int) -> str:
    """The string whose hash picks the key's partition of `__share_group_state` (Kafka's "group:topicId:partition",
    the topic id in Kafka's base64 form)."""
    tid = base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")
    return f"{group_id}:{tid}:{partition}"


@dataclass(frozen=True)
class ShareState:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    create_ms: int
    write_ms: int
    batches: tuple[StateBatch, ...] = ()


@dataclass(frozen=True)
class ShareUpdate:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int  # -1: unchanged
    delivery_complete_count: int
    batches: tuple[StateBatch, ...] = ()


# ----------------------------------------------------------------------------------------------- batches
def _rank(b: StateBatch) -> tuple[int, int]:
    return (b.delivery_count, b.delivery_state)


def combine(so_far: Iterable[StateBatch], new: Iterable[StateBatch], start_offset: int) -> tuple[StateBatch, ...]:
    """`so_far` and `new` as one sorted list of runs without overlaps (see the module's text)."""
    runs = [b for b in (*so_far, *new) if start_offset == -1 or b.last_offset >= start_offset]
    if start_offset != -1:
        runs = [b if b.first_offset >= start_offset else replace(b, first_offset=start_offset) for b in runs]
    if not runs:
        return ()
    # Sweep the boundaries: between two neighbouring boundaries the same runs cover every offset.
    edges = sorted({b.first_offset for b in runs} | {b.last_offset + 1 for b in runs})
    out: list[StateBatch] = []
    active: list[StateBatch] = []
    starts = sorted(runs, key=lambda b: b.first_offset)
    i = 0
    for lo, hi in zip(edges, edges[1:], strict=False):
        while i < len(starts) and starts[i].first_offset == lo:
            active.append(starts[i])
            i += 1
        active = [b for b in active if b.last_offset >= lo]
        if not active:
            continue
        best = max(active, key=_rank)
        last = out[-1] if out else None
        if last is not None and last.last_offset + 1 == lo and _rank(last) == _rank(best):
            out[-1] = replace(last, last_offset=hi - 1)
        else:
            out.append(StateBatch(lo, hi - 1, best.delivery_state, best.delivery_count))
    return tuple(out)


# ----------------------------------------------------------------------------------------------- codecs
def encode_key(kind: int, key: StateKey) -> bytes:
    group_id, topic_id, partition = key
    body = (ShareSnapshotKey(group_id, topic_id, partition) if kind == SNAPSHOT
            else ShareUpdateKey(group_id, topic_id, partition)).encode(0)
    return _H.pack(kind) + body


def decode_key(raw: bytes) -> tuple[int, StateKey]:
    if len(raw) < 2:
        raise ShareRecordError("key shorter than its type")
    (kind,) = _H.unpack_from(raw, 0)
    if kind not in (SNAPSHOT, UPDATE):
        raise ShareRecordError(f"unknown record type {kind}")
    try:
        k = (ShareSnapshotKey if kind == SNAPSHOT else ShareUpdateKey).decode(memoryview(raw)[2:], 0)
    except (DecodeError, UnicodeDecodeError, struct.error) as e:
        raise ShareRecordError(f"bad key: {e}") from e
    return kind, (k.group_id, k.topic_id, k.partition)


def snapshot_value(s: ShareState) -> bytes:
    return _H.pack(VALUE_VERSION) + ShareSnapshotValue(
        snapshot_epoch=s.snapshot_epoch, state_epoch=s.state_epoch, leader_epoch=s.leader_epoch,
        start_offset=s.start_offset, delivery_complete_count=s.delivery_complete_count,
        create_timestamp=s.create_ms, write_timestamp=s.write_ms,
        state_batches=[_snap.StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                       for b in s.batches]).encode(0)


def update_value(u: ShareUpdate) -> bytes:
    return _H.pack(VALUE_VERSION) + ShareUpdateValue(
        snapshot_epoch=u.snapshot_epoch, leader_epoch=u.leader_epoch, start_offset=u.start_offset,
        delivery_complete_count=u.delivery_complete_count,
        state_batches=[_upd.StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                       for b in u.batches]).encode(0)


def decode_value(kind: int, raw: bytes) -> ShareState | ShareUpdate:
    if len(raw) < 2:
        raise ShareRecordError("value shorter than its version")
    (version,) = _H.unpack_from(raw, 0)
    if version != VALUE_VERSION:
        raise ShareRecordError(f"unknown value version {version}")
    try:
        if kind == SNAPSHOT:
            v = ShareSnapshotValue.decode(memoryview(raw)[2:], 0)
            return ShareState(v.snapshot_epoch, v.state_epoch, v.leader_epoch, v.start_offset,
                              v.delivery_complete_count, v.create_timestamp, v.write_timestamp,
                              tuple(StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                    for b in v.state_batches))
        u = ShareUpdateValue.decode(memoryview(raw)[2:], 0)
    except (DecodeError, struct.error) as e:
        raise ShareRecordError(f"bad value: {e}") from e
    return ShareUpdate(u.snapshot_epoch, u.leader_epoch, u.start_offset, u.delivery_complete_count,
                       tuple(StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                             for b in u.state_batches))


# ----------------------------------------------------------------------------------------------- the book
@dataclass(frozen=True)
class Record:
    """A record to append: the key's type, the key, the value (None: the state's tombstone)."""
    kind: int
    key: StateKey
    value: ShareState | ShareUpdate | None

    def key_bytes(self) -> bytes:
        return encode_key(self.kind, self.key)

    def value_bytes(self) -> bytes | None:
        if self.value is None:
            return None
        return snapshot_value(self.value) if isinstance(self.value, ShareState) else update_value(self.value)


Refusal = tuple[int, str | None]


class PruneOffsets:
    """Where each partition of `__share_group_state` may start: the records below the oldest of its live keys'
    latest ShareSnapshot are needed by no load (every key's state is rebuilt from its latest snapshot on), as
    Kafka's share coordinator's offsets manager works it out.  With no live key, everything before the last record
    (a tombstone, typically) is redundant."""

    def __init__(self) -> None:
        self.snapshots: dict[int, dict[StateKey, int]] = {}  # partition -> key -> offset of its latest snapshot
        self.last: dict[int, int] = {}  # partition -> offset of the last record applied

    def note(self, p: int, kind: int, key: StateKey, value: Any, offset: int) -> None:
        """A record applied (written or loaded) at `offset` of partition `p`."""
        self.last[p] = max(self.last.get(p, -1), offset)
        if kind != SNAPSHOT:
            return
        keys = self.snapshots.setdefault(p, {})
        if value is None:
            keys.pop(key, None)
        else:
            keys[key] = offset

    def redundant_below(self, p: int) -> int | None:
        """The offset the partition's log may start at (records below it deleted), or None."""
        keys = self.snapshots.get(p)
        if keys:
            return min(keys.values())
        return self.last.get(p)

    def forget(self, p: int) -> None:
        self.snapshots.pop(p, None)
        self.last.pop(p, None)


class ShareStateBook:
    """Share-partition states of the partitions loaded here, and Kafka's rules for changing them."""

    def __init__(self, updates_per_snapshot: int) -> None:
        self.updates_per_snapshot = updates_per_snapshot
        self.states: dict[StateKey, ShareState] = {}
        self.leader_epochs: dict[StateKey, int] = {}
        self.state_epochs: dict[StateKey, int] = {}
        self.update_counts: dict[StateKey, int] = {}

    # ------------------------------------------------------------------------------------------- replay
    def replay(self, kind: int, key: StateKey, value: ShareState | ShareUpdate | None) -> None:
        """Applies one record.  A ShareSnapshot key with a null value deletes the state; a ShareUpdate key with a
        null value means nothing (Kafka never writes one) and is passed over."""
        if kind == SNAPSHOT:
            if value is None:
                self.forget(key)
                return
            if not isinstance(value, ShareState):
                raise ShareRecordError("a ShareSnapshot key with a ShareUpdate value")
            self._raise_epoch(self.leader_epochs, key, value.leader_epoch)
            self._raise_epoch(self.state_epochs, key, value.state_epoch)
            self.states[key] = value
            if self.update_counts.get(key, 0) >= self.updates_per_snapshot:
                self.update_counts[key] = 0
            return
        if value is None:
            return
        if not isinstance(value, ShareUpdate):
            raise ShareRecordError("a ShareUpdate key with a ShareSnapshot value")
        self._raise_epoch(self.leader_epochs, key, value.leader_epoch)
        old = self.states.get(key)
        if old is None:  # an update with no snapshot before it (compacted away): taken as the state
            self.states[key] = ShareState(value.snapshot_epoch, 0, value.leader_epoch, value.start_offset,
                                          value.delivery_complete_count, -1, -1, value.batches)
        else:
            start = old.start_offset if value.start_offset == -1 else value.start_offset
            self.states[key] = replace(
                old, start_offset=start, delivery_complete_count=value.delivery_complete_count,
                leader_epoch=old.leader_epoch if value.leader_epoch == -1 else value.leader_epoch,
                batches=combine(old.batches, value.batches, start))
        self.update_counts[key] = self.update_counts.get(key, 0) + 1

    @staticmethod
    def _raise_epoch(epochs: dict[StateKey, int], key: StateKey, epoch: int) -> None:
        if key not in epochs or epochs[key] < epoch:
            epochs[key] = epoch

    def forget(self, key: StateKey) -> None:
        self.states.pop(key, None)
        for d in (self.leader_epochs, self.state_epochs, self.update_counts):
            d.pop(key, None)

    # ------------------------------------------------------------------------------------------- checks
    def check_write(self, key: StateKey, state_epoch: int, leader_epoch: int) -> Refusal | None:
        if key not in self.states:
            return ErrorCode.INVALID_REQUEST, "Write operation on uninitialized share partition not allowed."
        known = self.leader_epochs.get(key)
        if leader_epoch != -1 and known is not None and known > leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH, f"leader epoch {leader_epoch} is older than {known}"
        known = self.state_epochs.get(key)
        if state_epoch != -1 and known is not None and known > state_epoch:
            return ErrorCode.FENCED_STATE_EPOCH, f"state epoch {state_epoch} is older than {known}"
        return None

    def check_read(self, key: StateKey, leader_epoch: int) -> Refusal | None:
        if key not in self.states:
            return ErrorCode.INVALID_REQUEST, "Read operation on uninitialized share partition not allowed."
        known = self.leader_epochs.get(key)
        if leader_epoch != -1 and known is not None and known > leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH, f"leader epoch {leader_epoch} is older than {known}"
        return None

    def check_initialize(self, key: StateKey, state_epoch: int) -> Refusal | None:
        known = self.state_epochs.get(key)
        if state_epoch != -1 and known is not None and known > state_epoch:
            return ErrorCode.FENCED_STATE_EPOCH, f"state epoch {state_epoch} is older than {known}"
        return None

    # ------------------------------------------------------------------------------------------- records
    def initialize_record(self, key: StateKey, state_epoch: int, start_offset: int, now: int) -> Record:
        """A new snapshot: the state starts over (no batches, leader epoch unknown)."""
        old = self.states.get(key)
        return Record(SNAPSHOT, key, ShareState(
            snapshot_epoch=old.snapshot_epoch + 1 if old is not None else 0, state_epoch=state_epoch,
            leader_epoch=-1, start_offset=start_offset, delivery_complete_count=-1 if start_offset == -1 else 0,
            create_ms=now, write_ms=now))

    def write_record(self, key: StateKey, leader_epoch: int, start_offset: int, delivery_complete_count: int,
                     batches: tuple[StateBatch, ...], now: int, take_leader_epoch: bool = False) -> Record:
        """A write (after `check_write`): an update, or a snapshot of the combined state every
        updates_per_snapshot updates."""
        cur = self.states[key]
        epoch = cur.leader_epoch
        if take_leader_epoch and leader_epoch != -1:
            epoch = leader_epoch
        if self.update_counts.get(key, 0) >= self.updates_per_snapshot:
            start = cur.start_offset if start_offset == -1 else start_offset
            return Record(SNAPSHOT, key, ShareState(
                snapshot_epoch=cur.snapshot_epoch + 1, state_epoch=cur.state_epoch, leader_epoch=epoch,
                start_offset=start, delivery_complete_count=delivery_complete_count, create_ms=now, write_ms=now,
                batches=combine(cur.batches, batches, start)))
        return Record(UPDATE, key, ShareUpdate(
            snapshot_epoch=cur.snapshot_epoch, leader_epoch=epoch, start_offset=start_offset,
            delivery_complete_count=delivery_complete_count, batches=combine((), batches, start_offset)))

    def read_record(self, key: StateKey, leader_epoch: int, now: int) -> Record | None:
        """What a read with a new leader epoch writes to record it (None: nothing to record)."""
        if leader_epoch == -1 or self.leader_epochs.get(key) == leader_epoch:
            return None
        cur = self.states[key]
        return self.write_record(key, leader_epoch, cur.start_offset, cur.delivery_complete_count, (), now,
                                 take_leader_epoch=True)

    def delete_record(self, key: StateKey) -> Record | None:
        return Record(SNAPSHOT, key, None) if key in self.states else None
