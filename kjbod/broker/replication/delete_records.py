"""DeleteRecords' wait for the replicas (Kafka's DelayedDeleteRecords in its purgatory), and the leader's low
watermark it waits on.

The low watermark (Kafka's Partition.lowWatermarkIfLeader) is the smallest log start offset among the leader's
own log and each follower of the replica set whose broker is alive (registered and not fenced: a follower in or
out of the ISR counts alike). Kafka counts a KIP-113 future log too, which its alter-log-dirs thread moves along
as a follower; kjbod's mover does not move a future log's start while it copies, but takes the current log's at
the swap (LogManager's swap: the larger of the two), so deleted records cannot come back through it, and
counting it would hold every DeleteRecords of a partition being moved to REQUEST_TIMED_OUT. The leader learns a
follower's log start offset from the LogStartOffset of its fetches (ReplicaManager.follower_log_start); a
follower that has not fetched in this leader epoch is at -1, which holds the low watermark down, as Kafka's.

One DelayedDeleteRecords per request that has a partition to wait for: a future and a timer, no task. Each
partition is looked at again when something it depends on moves: a follower's log start offset, a metadata
change (leadership, brokers fenced or gone). A partition answers its low watermark once that reaches the offset
the request asked for, NOT_LEADER_OR_FOLLOWER (low watermark -1) once this broker no longer leads it,
KAFKA_STORAGE_ERROR once its log dir is offline; what still waits at the request's timeout answers
REQUEST_TIMED_OUT with the low watermark it had when the records were deleted.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kjbod.broker.replication.partition import LEADER
from kjbod.protocol.errors import ErrorCode

TopicPartition = tuple[str, int]
INVALID_LOW_WATERMARK = -1


def low_watermark(node: Any, topic: str, partition: int) -> int | None:
    """The partition's low watermark on its leader, or None when this broker does not lead it with a log here.
    A node without replication (a lone combined node: no replica manager) leads its logs and has only them."""
    logs = node.logs.manager
    plog = logs.find(topic, partition)
    if plog is None or not plog.online:
        return None
    lw = plog.log_start_offset
    manager = getattr(node, "replication", None)
    if manager is not None:
        state = manager.states.get((topic, partition))
        if state is None or state.role != LEADER:
            return None
        brokers = node.metadata.brokers
        for broker_id, follower in state.followers.items():
            reg = brokers.get(broker_id)
            if reg is not None and not reg.fenced and follower.log_start_offset < lw:
                lw = follower.log_start_offset
    return lw


class DelayedDeleteRecords:
    """One request's partitions still waiting: (topic, partition, required offset, the answer to fill)."""

    __slots__ = ("waiting", "future", "timer")

    def __init__(self, waiting: list[tuple[str, int, int, Any]]) -> None:
        self.waiting = waiting
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.timer: asyncio.TimerHandle | None = None

    def try_complete(self, manager: Any) -> bool:
        """Settles what may be settled now (see the module docstring); True once nothing waits."""
        left = []
        for entry in self.waiting:
            topic, partition, required, answer = entry
            code, lw = _verdict(manager, topic, partition, required)
            if code is None:
                left.append(entry)
            else:
                answer.error_code, answer.low_watermark = code, lw
        self.waiting = left
        if left:
            return False
        self._finish()
        return True

    def expire(self) -> None:
        for _topic, _partition, _required, answer in self.waiting:
            answer.error_code = ErrorCode.REQUEST_TIMED_OUT
        self.waiting = []
        self._finish()

    def _finish(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if not self.future.done():
            self.future.set_result(None)


def _verdict(manager: Any, topic: str, partition: int, required: int) -> tuple[int | None, int]:
    """(error code, low watermark) when the partition is settled, (None, _) while it still waits."""
    logs = manager.node.logs.manager
    plog = logs.find(topic, partition)
    if plog is None:
        t = manager.node.metadata.topic(topic)
        known = t is not None and partition in t.partitions
        return (ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                INVALID_LOW_WATERMARK)
    if not plog.io.online:
        return ErrorCode.KAFKA_STORAGE_ERROR, INVALID_LOW_WATERMARK
    lw = low_watermark(manager.node, topic, partition)
    if lw is None:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER, INVALID_LOW_WATERMARK
    return (0, lw) if lw >= required else (None, lw)


class DeleteRecordsPurgatory:
    """The DelayedDeleteRecords waiting, by partition; driven by the replica manager's events."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager
        self.watched: dict[TopicPartition, list[DelayedDeleteRecords]] = {}

    def delay(self, waiting: list[tuple[str, int, int, Any]], timeout_s: float) -> asyncio.Future[None]:
        """Waits until every entry is settled or `timeout_s` passed; the entries' answers are filled in place."""
        op = DelayedDeleteRecords(waiting)
        if op.try_complete(self.manager):
            return op.future
        keys = {(topic, partition) for topic, partition, _r, _a in waiting}
        for tp in keys:
            self.watched.setdefault(tp, []).append(op)
        op.timer = asyncio.get_running_loop().call_later(max(timeout_s, 0.0), self._expire, op, keys)
        return op.future

    def check(self, tp: TopicPartition) -> None:
        """Something `tp`'s low watermark or leadership depends on moved."""
        ops = self.watched.get(tp)
        if not ops:
            return
        for op in list(ops):
            if op.try_complete(self.manager):
                self._unwatch(op)

    def check_all(self) -> None:
        for tp in list(self.watched):
            self.check(tp)

    def _expire(self, op: DelayedDeleteRecords, keys: set[TopicPartition]) -> None:
        op.expire()
        self._unwatch(op, keys)

    def _unwatch(self, op: DelayedDeleteRecords, keys: set[TopicPartition] | None = None) -> None:
        for tp in list(self.watched) if keys is None else keys:
            ops = self.watched.get(tp)
            if ops and op in ops:
                ops.remove(op)
                if not ops:
                    del self.watched[tp]
