"""The share coordinator: share-partition states kept in `__share_group_state` (KIP-932).

Strategy, the group and transaction coordinators' (kjbod.broker.coordinator_host) applied to share state:

* a share-partition (group, topic id, partition) belongs to one partition of `__share_group_state`: the Java
  String.hashCode of "group:topicId:partition", made non-negative, modulo the topic's partition count, as Kafka's;
  the broker leading that partition is its share coordinator.  The topic is made on the first FindCoordinator for
  a share key with Kafka's keys (share.coordinator.state.topic.num.partitions, .replication.factor, .min.isr as its
  min.insync.replicas, .segment.bytes; cleanup.policy=delete and retention.ms=-1, as Kafka's: the updates of one
  key are deltas, so compaction would lose them); with fewer live brokers than the replication factor the
  controller refuses and callers hear COORDINATOR_NOT_AVAILABLE until enough have registered;
* a partition newly led here is loaded from its log on its dir's worker (COORDINATOR_LOAD_IN_PROGRESS meanwhile),
  its ShareSnapshot and ShareUpdate records replayed into the sans-IO `ShareStateBook`
  (kjbod.broker.share.state_records); a partition led elsewhere now has its states dropped (NOT_COORDINATOR);
* each request is answered per share-partition with Kafka's checks (INVALID_REQUEST for a negative partition, an
  empty group id or a read or write of a state never initialized; FENCED_STATE_EPOCH, FENCED_LEADER_EPOCH;
  UNKNOWN_TOPIC_OR_PARTITION for a topic id or partition the metadata lacks); a change is one record appended
  through the Produce path with acks=all and applied (the same replay as a load) once it is committed.  Changes to
  one partition of the topic are made one at a time, so each is decided on the state the one before it left;
* every share.coordinator.state.topic.prune.interval.ms each partition led here has the records below the oldest
  latest snapshot of its keys deleted (a DeleteRecords of its own, `state_records.PruneOffsets`), as Kafka's
  coordinator prunes the topic, since nothing else ever deletes them;
* a topic deleted from the metadata has the state of its share-partitions deleted (a tombstone each), as Kafka's.

An empty group id is answered INVALID_REQUEST for each partition; Kafka 4.3 answers an empty response instead,
which leaves the caller nothing to act on.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from typing import Any
from uuid import UUID

import structlog

from kjbod.broker.coordinator_host import CoordinatorHost, InternalRequest, now_ms, settle
from kjbod.broker.share import state_records as rec
from kjbod.broker.share.persister import PartitionAnswer, ReadAnswer, StateBatch, SummaryAnswer
from kjbod.broker.share.state_records import (
    PruneOffsets,
    Record,
    Refusal,
    ShareStateBook,
    StateKey,
    coordinator_key,
)
from kjbod.protocol.errors import ErrorCode
from kjbod.storage.records import build_batch

log = structlog.get_logger("kjbod.share")

SHARE_STATE_TOPIC = "__share_group_state"
WRITE_TIMEOUT_MS = 5000  # Kafka's share.coordinator.write.timeout.ms default
METRICS_WINDOW_S = 30.0  # Kafka's metrics sample window (2 samples of 30 s; kjbod keeps the last 30 s)


class _ShareLogRequest(InternalRequest):
    client_id = "kjbod-share-coordinator"


def coordinator_of(node: Any) -> ShareCoordinator:
    """The node's share coordinator, made and started on first use."""
    coordinator = getattr(node, "share_coordinator", None)
    if coordinator is None:
        coordinator = node.share_coordinator = ShareCoordinator(node)
        coordinator.start()
    return coordinator


class ShareCoordinator(CoordinatorHost):
    topic = SHARE_STATE_TOPIC
    kind = "share"

    def __init__(self, node: Any) -> None:
        c = node.config
        super().__init__(node, c.share_coordinator_state_topic_num_partitions,
                         c.share_coordinator_state_topic_replication_factor)
        self.min_isr = c.share_coordinator_state_topic_min_isr
        self.segment_bytes = c.share_coordinator_state_topic_segment_bytes
        self.book = ShareStateBook(c.share_coordinator_snapshot_update_records_per_snapshot)
        self._locks: dict[int, asyncio.Lock] = {}
        self.writes = 0  # records appended
        self.write_calls = 0  # WriteShareGroupState partitions served here (Kafka's write-total)
        self._recent_writes: collections.deque[tuple[float, float]] = collections.deque()  # (when, ms taken)
        self._image: Any = None  # the metadata image the last tick saw, and its topic ids
        self.prune_offsets = PruneOffsets()
        self.prune_interval_ms = c.share_coordinator_state_topic_prune_interval_ms
        self._next_prune = 0  # now_ms() of the next pruning
        self._pruned: dict[int, int] = {}  # partition -> the offset its log was last pruned to
        self._topic_ids: frozenset[UUID] = frozenset()

    # ------------------------------------------------------------------------------------------- hosting
    def _topic_configs(self) -> list[tuple[str, str]]:
        return [("cleanup.policy", "delete"), ("retention.ms", "-1"), ("compression.type", "producer"),
                ("segment.bytes", str(self.segment_bytes)), ("min.insync.replicas", str(self.min_isr))]

    def _unload(self, p: int) -> int:
        gone = [k for k in self.book.states if self.partition_of(coordinator_key(*k)) == p]
        for k in gone:
            self.book.forget(k)
        self.prune_offsets.forget(p)
        self._pruned.pop(p, None)
        return len(gone)

    async def _tick(self, now: int) -> None:
        """A topic deleted from the metadata has its share-partitions' state deleted (tombstones), as Kafka's
        coordinator does on a metadata change that removes topics; the topic is pruned when it is time."""
        if now >= self._next_prune:
            self._next_prune = now + self.prune_interval_ms
            for p in sorted(self.owned):
                self._spawn(self._prune(p))
        image = self.node.metadata
        if image is self._image:
            return
        ids = frozenset(image.topics_by_id)
        gone = self._topic_ids - ids if self._image is not None else frozenset()
        self._image, self._topic_ids = image, ids
        if gone:
            for key in [k for k in self.book.states if k[1] in gone]:
                self._spawn(self._drop_deleted(key))

    async def _drop_deleted(self, key: StateKey) -> None:
        ck = coordinator_key(*key)
        p = self.partition_of(ck)
        async with self._lock(p):
            if self.status(ck) or (record := self.book.delete_record(key)) is None:
                return
            code = await self._append(p, record, ck)
        log.info("share_state_of_deleted_topic_removed", key=ck, error_code=code)

    async def _prune(self, p: int) -> None:
        """Deletes the records of partition `p` that no state needs (below `PruneOffsets.redundant_below`)."""
        from kjbod.broker.handlers import delete_records  # the handler package imports the coordinators
        from kjbod.protocol.generated import DeleteRecordsRequest
        from kjbod.protocol.generated.delete_records_request import DeleteRecordsPartition, DeleteRecordsTopic

        # Only grows while `p` stays led here (a later write's snapshot is past it), so no lock is held: records
        # below it stay unneeded whatever is written meanwhile.
        offset = self.prune_offsets.redundant_below(p)
        if p not in self.owned or offset is None or offset <= self._pruned.get(p, 0):
            return
        body = DeleteRecordsRequest(timeout_ms=WRITE_TIMEOUT_MS, topics=[DeleteRecordsTopic(
            name=SHARE_STATE_TOPIC, partitions=[DeleteRecordsPartition(partition_index=p, offset=offset)])])
        request: Any = _ShareLogRequest()
        try:
            resp = await settle(delete_records.handle(self.node, request, body))
            code = int(resp.topics[0].partitions[0].error_code)
        except Exception:
            log.exception("share_state_prune_failed", partition=p, offset=offset)
            return
        if code:
            log.info("share_state_prune_refused", partition=p, offset=offset, error_code=code)
        else:
            self._pruned[p] = offset
            log.debug("share_state_pruned", partition=p, offset=offset)

    def _stopped(self) -> None:
        persister = getattr(self.node, "share_persister", None)  # its connections to other coordinators
        close = getattr(persister, "close", None)
        if close is not None:
            close()

    def status(self, key: str) -> int:
        """As the host's, but COORDINATOR_NOT_AVAILABLE before the topic exists (no FindCoordinator made it)."""
        if self.node.metadata.topic(SHARE_STATE_TOPIC) is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return super().status(key)

    # A load replays every record of the partition in log order.
    def _new_load(self) -> list[tuple[int, StateKey, Any, int]]:
        return []

    def _take(self, acc: Any, p: int, header: Any, record: Any) -> None:
        if record.key is None:
            return
        try:
            kind, key = rec.decode_key(bytes(record.key))
            value = None if record.value is None else rec.decode_value(kind, bytes(record.value))
        except rec.ShareRecordError as e:
            log.warning("share_state_record_skipped", partition=p, offset=record.offset, reason=str(e))
            return
        acc.append((kind, key, value, record.offset))

    def _loaded_records(self, p: int, acc: Any) -> int:
        for kind, key, value, offset in acc:
            try:
                self.book.replay(kind, key, value)
            except rec.ShareRecordError as e:  # one odd record costs its own change, not the partition's load
                log.warning("share_state_record_skipped", partition=p, key=coordinator_key(*key), reason=str(e))
                continue
            self.prune_offsets.note(p, kind, key, value, offset)
        return len({key for _k, key, _v, _o in acc})

    # ------------------------------------------------------------------------------------------- requests
    def _where(self, group_id: str, topic_id: UUID, partition: int) -> tuple[StateKey, str, PartitionAnswer | None]:
        """The state's key, its coordinator key, and the answer when it cannot be served here."""
        key = (group_id, topic_id, partition)
        ck = coordinator_key(group_id, topic_id, partition)
        if not group_id:
            return key, ck, PartitionAnswer(ErrorCode.INVALID_REQUEST, "the group id must not be empty")
        code = self.status(ck)
        if code:
            return key, ck, PartitionAnswer(code, _status_text(code, ck))
        if partition < 0:
            return key, ck, PartitionAnswer(ErrorCode.INVALID_REQUEST, "The partition id cannot be a negative number.")
        return key, ck, None

    def _topic_problem(self, topic_id: UUID, partition: int) -> PartitionAnswer | None:
        topic = self.node.metadata.topic_by_id(topic_id)
        if topic is None or partition not in topic.partitions:
            return PartitionAnswer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                   f"no partition {partition} of a topic with id {topic_id} in the metadata")
        return None

    def _lock(self, p: int) -> asyncio.Lock:
        lock = self._locks.get(p)
        if lock is None:
            lock = self._locks[p] = asyncio.Lock()
        return lock

    async def _append(self, p: int, record: Record, ck: str) -> int:
        """Appends `record` (acks=all) and applies it once committed; the error code."""
        batch = build_batch([(record.key_bytes(), record.value_bytes(), [], now_ms())])
        try:
            code = await self._produce(p, batch, _ShareLogRequest(), WRITE_TIMEOUT_MS, ck)
        except Exception:
            log.exception("share_state_write_failed", key=ck)
            return ErrorCode.UNKNOWN_SERVER_ERROR
        if code == 0 and p not in self.owned:  # led elsewhere meanwhile: the new coordinator reads it back
            return ErrorCode.NOT_COORDINATOR
        if code == 0:
            self.book.replay(record.kind, record.key, record.value)
            self.writes += 1
            # the record's offset: the partition's last, as its writes are made one at a time under its lock
            # (and only this coordinator writes to the topic)
            try:
                end = self.node.partition_log(self.topic, p).log_end_offset
            except Exception:  # the log went away meanwhile: nothing to prune here until it is loaded again
                return code
            self.prune_offsets.note(p, record.kind, record.key, record.value, end - 1)
        return code

    async def initialize(self, group_id: str, topic_id: UUID, partition: int, state_epoch: int,
                         start_offset: int) -> PartitionAnswer:
        key, ck, refused = self._where(group_id, topic_id, partition)
        if refused is not None:
            return refused
        return await self._append_checked(
            key, ck, lambda: self.book.check_initialize(key, state_epoch),
            lambda: self.book.initialize_record(key, state_epoch, start_offset, now_ms()))

    async def write(self, group_id: str, topic_id: UUID, partition: int, state_epoch: int, leader_epoch: int,
                    start_offset: int, delivery_complete_count: int, batches: tuple[StateBatch, ...]
                    ) -> PartitionAnswer:
        key, ck, refused = self._where(group_id, topic_id, partition)
        if refused is not None:
            return refused
        started = time.monotonic()
        try:
            return await self._write(key, ck, state_epoch, leader_epoch, start_offset, delivery_complete_count,
                                     batches)
        finally:
            self._record_write(started)

    def _record_write(self, started: float) -> None:
        now = time.monotonic()
        self.write_calls += 1
        self._recent_writes.append((now, (now - started) * 1000.0))
        while self._recent_writes and self._recent_writes[0][0] < now - METRICS_WINDOW_S:
            self._recent_writes.popleft()

    def write_figures(self) -> tuple[int, float, float, float]:
        """(write-total, write-rate a second, write-latency-avg and write-latency-max in ms) over the last
        METRICS_WINDOW_S, as Kafka's share-coordinator-metrics; NaN latencies when nothing was written."""
        now = time.monotonic()
        recent = [ms for when, ms in self._recent_writes if when >= now - METRICS_WINDOW_S]
        avg = sum(recent) / len(recent) if recent else float("nan")
        return self.write_calls, len(recent) / METRICS_WINDOW_S, avg, max(recent) if recent else float("nan")

    async def _write(self, key: StateKey, ck: str, state_epoch: int, leader_epoch: int, start_offset: int,
                     delivery_complete_count: int, batches: tuple[StateBatch, ...]) -> PartitionAnswer:
        return await self._append_checked(
            key, ck, lambda: self.book.check_write(key, state_epoch, leader_epoch),
            lambda: self.book.write_record(key, leader_epoch, start_offset, delivery_complete_count, batches,
                                           now_ms()))

    async def _append_checked(self, key: StateKey, ck: str, check: Callable[[], Refusal | None],
                              record: Callable[[], Record]) -> PartitionAnswer:
        """Under the lock of the state partition of `ck`: its status, then `check` (the book's epoch rules: a
        (code, message) refuses), then the topic; then `record()` is built and written."""
        p = self.partition_of(ck)
        async with self._lock(p):
            if (code := self.status(ck)):
                return PartitionAnswer(code, _status_text(code, ck))
            why = check()
            if why is not None:
                return PartitionAnswer(*why)
            if (problem := self._topic_problem(key[1], key[2])) is not None:
                return problem
            code = await self._append(p, record(), ck)
        return PartitionAnswer(code, _status_text(code, ck) if code else None)

    async def read(self, group_id: str, topic_id: UUID, partition: int, leader_epoch: int) -> ReadAnswer:
        key, ck, refused = self._where(group_id, topic_id, partition)
        if refused is not None:
            return ReadAnswer(refused.error_code, refused.error_message)
        p = self.partition_of(ck)
        async with self._lock(p):
            if (code := self.status(ck)):
                return ReadAnswer(code, _status_text(code, ck))
            why = self.book.check_read(key, leader_epoch)
            if why is not None:
                return ReadAnswer(*why)
            if (problem := self._topic_problem(topic_id, partition)) is not None:
                return ReadAnswer(problem.error_code, problem.error_message)
            s = self.book.states[key]
            answer = ReadAnswer(state_epoch=s.state_epoch, start_offset=s.start_offset, batches=s.batches)
            record = self.book.read_record(key, leader_epoch, now_ms())  # a new leader epoch is recorded first
            if record is not None and (code := await self._append(p, record, ck)):
                return ReadAnswer(code, _status_text(code, ck))
        return answer

    async def read_summary(self, group_id: str, topic_id: UUID, partition: int) -> SummaryAnswer:
        key, ck, refused = self._where(group_id, topic_id, partition)
        if refused is not None:
            return SummaryAnswer(refused.error_code, refused.error_message)
        if (problem := self._topic_problem(topic_id, partition)) is not None:
            return SummaryAnswer(problem.error_code, problem.error_message)
        s = self.book.states.get(key)
        if s is None:  # never initialized: Kafka answers the defaults, not an error
            return SummaryAnswer(state_epoch=0, leader_epoch=0, start_offset=-1, delivery_complete_count=-1)
        return SummaryAnswer(state_epoch=s.state_epoch, leader_epoch=s.leader_epoch, start_offset=s.start_offset,
                             delivery_complete_count=s.delivery_complete_count)

    async def delete(self, group_id: str, topic_id: UUID, partition: int) -> PartitionAnswer:
        key, ck, refused = self._where(group_id, topic_id, partition)
        if refused is not None:
            return refused
        p = self.partition_of(ck)
        async with self._lock(p):
            if (code := self.status(ck)):
                return PartitionAnswer(code, _status_text(code, ck))
            if (problem := self._topic_problem(topic_id, partition)) is not None:
                return problem
            record = self.book.delete_record(key)
            code = 0 if record is None else await self._append(p, record, ck)
        return PartitionAnswer(code, _status_text(code, ck) if code else None)


def _status_text(code: int, ck: str) -> str:
    if code == ErrorCode.NOT_COORDINATOR:
        return f"this broker is not the share coordinator of {ck}"
    if code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
        return f"the share coordinator of {ck} is loading its state"
    if code == ErrorCode.COORDINATOR_NOT_AVAILABLE:
        return f"the share coordinator of {ck} is not available ({SHARE_STATE_TOPIC} not ready)"
    return f"the write of {ck} to {SHARE_STATE_TOPIC} failed (error {code})"
