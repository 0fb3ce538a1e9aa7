"""The share-group state persister: where a share-partition's state (its start offset and the delivery state of
the records past it) is kept between fetches, leaders and restarts.

Strategy: the shape of Kafka's persister, whose calls are the share coordinator's RPCs (InitializeShareGroupState,
ReadShareGroupState, WriteShareGroupState, DeleteShareGroupState, ReadShareGroupStateSummary); each call takes one
group's partitions and answers each partition on its own (an error code and message per partition).  The group
coordinator initializes and deletes state; the share-partition leader reads and writes it; admin requests read
summaries.  `persister_of(node)` is the node's one persister.

`MemoryPersister` keeps the state in this process only, with the share coordinator's checks on state epochs and
leader epochs.  It serves in-process tests of the callers; a broker's `persister_of` is the share coordinator's
persister (kjbod.broker.share.rpc_persister), its state in `__share_group_state`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import UUID

from kjbod.protocol.errors import ErrorCode

# DeliveryState values of a persisted batch (Kafka's RecordState ids)
AVAILABLE, ACKNOWLEDGED, ARCHIVED = 0, 2, 4

Key = tuple[UUID, int]  # (topic id, partition)


@dataclass(frozen=True)
class StateBatch:
    first_offset: int
    last_offset: int
    delivery_state: int  # AVAILABLE, ACKNOWLEDGED or ARCHIVED
    delivery_count: int


@dataclass(frozen=True)
class PartitionAnswer:
    """One partition's answer to any call: error_code 0 for success."""
    error_code: int = 0
    error_message: str | None = None


@dataclass(frozen=True)
class ReadAnswer(PartitionAnswer):
    state_epoch: int = 0
    start_offset: int = -1  # -1: initialized without a start offset yet (the leader picks one)
    batches: tuple[StateBatch, ...] = ()


@dataclass(frozen=True)
class SummaryAnswer(PartitionAnswer):
    state_epoch: int = 0
    leader_epoch: int = -1
    start_offset: int = -1
    delivery_complete_count: int = -1  # -1: not known


@dataclass(frozen=True)
class InitializeData:
    topic_id: UUID
    partition: int
    state_epoch: int
    start_offset: int  # -1: the leader decides (share.auto.offset.reset) on first read


@dataclass(frozen=True)
class WriteData:
    topic_id: UUID
    partition: int
    state_epoch: int
    leader_epoch: int  # -1: not checked
    start_offset: int  # -1: not being written
    batches: tuple[StateBatch, ...]
    delivery_complete_count: int = -1


class Persister(Protocol):
    async def initialize(self, group_id: str, partitions: list[InitializeData]) -> dict[Key, PartitionAnswer]: ...

    async def read(self, group_id: str, partitions: list[tuple[UUID, int, int]]) -> dict[Key, ReadAnswer]:
        """partitions: (topic id, partition, leader epoch); a newer leader epoch is recorded, an older one is
        FENCED_LEADER_EPOCH."""
        ...

    async def write(self, group_id: str, partitions: list[WriteData]) -> dict[Key, PartitionAnswer]: ...

    async def delete(self, group_id: str, partitions: list[Key]) -> dict[Key, PartitionAnswer]: ...

    async def read_summary(self, group_id: str, partitions: list[tuple[UUID, int, int]]
                           ) -> dict[Key, SummaryAnswer]: ...


@dataclass
class _Stored:
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: dict[int, StateBatch] = field(default_factory=dict)  # first offset -> batch
    delivery_complete_count: int = -1


class MemoryPersister:
    """Share-partition state in this process's memory (see the module's docstring)."""

    def __init__(self) -> None:
        self.state: dict[tuple[str, UUID, int], _Stored] = {}

    async def initialize(self, group_id: str, partitions: list[InitializeData]) -> dict[Key, PartitionAnswer]:
        out: dict[Key, PartitionAnswer] = {}
        for p in partitions:
            old = self.state.get((group_id, p.topic_id, p.partition))
            if old is not None and p.state_epoch < old.state_epoch:
                out[(p.topic_id, p.partition)] = PartitionAnswer(
                    ErrorCode.FENCED_STATE_EPOCH, f"state epoch {p.state_epoch} is older than {old.state_epoch}")
                continue
            self.state[(group_id, p.topic_id, p.partition)] = _Stored(p.state_epoch, -1, p.start_offset)
            out[(p.topic_id, p.partition)] = PartitionAnswer()
        return out

    async def read(self, group_id: str, partitions: list[tuple[UUID, int, int]]) -> dict[Key, ReadAnswer]:
        out: dict[Key, ReadAnswer] = {}
        for topic_id, partition, leader_epoch in partitions:
            s = self.state.get((group_id, topic_id, partition))
            if s is None:
                out[(topic_id, partition)] = ReadAnswer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                        "no state for this share-partition")
                continue
            if leader_epoch < s.leader_epoch:
                out[(topic_id, partition)] = ReadAnswer(ErrorCode.FENCED_LEADER_EPOCH,
                                                        f"leader epoch {leader_epoch} is older than {s.leader_epoch}")
                continue
            s.leader_epoch = max(s.leader_epoch, leader_epoch)
            out[(topic_id, partition)] = ReadAnswer(state_epoch=s.state_epoch, start_offset=s.start_offset,
                                                    batches=tuple(s.batches[k] for k in sorted(s.batches)))
        return out

    async def write(self, group_id: str, partitions: list[WriteData]) -> dict[Key, PartitionAnswer]:
        out: dict[Key, PartitionAnswer] = {}
        for w in partitions:
            key = (w.topic_id, w.partition)
            s = self.state.get((group_id, w.topic_id, w.partition))
            if s is None:
                out[key] = PartitionAnswer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no state for this share-partition")
            elif w.state_epoch < s.state_epoch:
                out[key] = PartitionAnswer(ErrorCode.FENCED_STATE_EPOCH,
                                           f"state epoch {w.state_epoch} is older than {s.state_epoch}")
            elif w.leader_epoch != -1 and w.leader_epoch < s.leader_epoch:
                out[key] = PartitionAnswer(ErrorCode.FENCED_LEADER_EPOCH,
                                           f"leader epoch {w.leader_epoch} is older than {s.leader_epoch}")
            else:
                s.state_epoch, s.leader_epoch = w.state_epoch, max(s.leader_epoch, w.leader_epoch)
                if w.start_offset != -1:
                    s.start_offset = w.start_offset
                    s.batches = {k: b for k, b in s.batches.items() if b.last_offset >= w.start_offset}
                for b in w.batches:  # a batch written replaces what it overlaps
                    s.batches = {k: o for k, o in s.batches.items()
                                 if o.last_offset < b.first_offset or o.first_offset > b.last_offset}
                    s.batches[b.first_offset] = b
                if w.delivery_complete_count != -1:
                    s.delivery_complete_count = w.delivery_complete_count
                out[key] = PartitionAnswer()
        return out

    async def delete(self, group_id: str, partitions: list[Key]) -> dict[Key, PartitionAnswer]:
        for topic_id, partition in partitions:
            self.state.pop((group_id, topic_id, partition), None)
        return {k: PartitionAnswer() for k in partitions}

    async def read_summary(self, group_id: str, partitions: list[tuple[UUID, int, int]]
                           ) -> dict[Key, SummaryAnswer]:
        out: dict[Key, SummaryAnswer] = {}
        for topic_id, partition, _leader_epoch in partitions:
            s = self.state.get((group_id, topic_id, partition))
            out[(topic_id, partition)] = SummaryAnswer(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no state for this share-partition") if s is None else \
                SummaryAnswer(state_epoch=s.state_epoch, leader_epoch=s.leader_epoch, start_offset=s.start_offset,
                              delivery_complete_count=s.delivery_complete_count)
        return out


def persister_of(node: Any) -> Persister:
    """The node's share-group state persister, made on first use: the share coordinator's (state in
    `__share_group_state`, kjbod.broker.share.rpc_persister) on a broker that can host it, a `MemoryPersister`
    on a stand-in node of an in-process test (one without a metadata image and logs)."""
    persister = getattr(node, "share_persister", None)
    if persister is None:
        if hasattr(node, "metadata") and hasattr(node, "partition_log") and hasattr(node, "controller_request"):
            from kjbod.broker.share.rpc_persister import RpcPersister

            persister = node.share_persister = RpcPersister(node)
        else:
            persister = node.share_persister = MemoryPersister()
    return persister
