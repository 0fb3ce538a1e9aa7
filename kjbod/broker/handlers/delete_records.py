"""DeleteRecords (key 21), versions 0-2.

Version notes: v0 and v1 share a body (v1 is answered before a quota throttles); v2 flexible.

Each partition, as Kafka's ReplicaManager.deleteRecords: a partition the metadata lacks is
UNKNOWN_TOPIC_OR_PARTITION; then where it is hosted (KAFKA_STORAGE_ERROR for an offline log dir,
NOT_LEADER_OR_FOLLOWER when this broker holds no log for it or does not lead it); offset -1 means the high
watermark; an offset below -1, or above the high watermark, is OFFSET_OUT_OF_RANGE. A topic whose
cleanup.policy does not name delete (compact only) is POLICY_VIOLATION, checked on the leader's log as Kafka's
Partition.deleteRecordsOnLeader does; internal topics (INVALID_TOPIC_EXCEPTION in Kafka) do not arise. A partition named twice is answered once, for the offset
named last, as Kafka's map of them does.

The log start offset moves and the segments wholly below it are deleted on the partition's log dir worker
(PartitionLog.advance_log_start_offset), which then writes the dir's log-start-offset checkpoint, so the new
start survives a restart, even an unclean one; each dir is handed its partitions at once, so a slow dir holds
only its own. Consumers below the new start then get OFFSET_OUT_OF_RANGE and ListOffsets' earliest answers it.

A partition's answer is its low watermark (kjbod.broker.replication.delete_records): once every live replica's
log start offset has reached the requested offset. Until then the request waits, up to its timeout_ms, in a
DelayedDeleteRecords; a partition still short of it then answers REQUEST_TIMED_OUT. Followers move their log
start from the leader's fetch answers (kjbod.broker.replication.fetcher) and tell it in their next fetch.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import structlog

from kjbod.broker.authz import allowed
from kjbod.broker.dir_work import DirWork
from kjbod.broker.handlers.leader_epoch_check import checked_log
from kjbod.broker.replication.delete_records import INVALID_LOW_WATERMARK, low_watermark
from kjbod.broker.router import api
from kjbod.metadata.acls import DELETE, TOPIC
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import DeleteRecordsRequest, DeleteRecordsResponse
from kjbod.protocol.generated.delete_records_response import DeleteRecordsPartitionResult as PartResult
from kjbod.protocol.generated.delete_records_response import DeleteRecordsTopicResult as TopicResult

HIGH_WATERMARK = -1

# How long the file work may wait for a busy dir when the request gives no time of its own (timeout_ms 0 still
# deletes, as Kafka's does before its purgatory answers REQUEST_TIMED_OUT): a client's default request.timeout.ms.
DEFAULT_DISK_WAIT_S = 30.0

log = structlog.get_logger("kjbod.delete_records")


def _answer(partition: int, code: int) -> PartResult:
    """A partition's answer before its low watermark is known (-1, Kafka's value with an error)."""
    return PartResult(partition_index=partition, low_watermark=INVALID_LOW_WATERMARK, error_code=code)


def _leader_log(node: Any, topic: str, partition: int) -> Any:
    """The partition's log on its leader, or the failed answer (Kafka's getPartitionOrException order)."""
    try:
        plog = checked_log(node, topic, partition, -1)
    except Exception as e:
        return _answer(partition, getattr(e, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR))
    if not plog.online:
        # A log closed under us (deleted, or swapped by a KIP-113 move) or in a dir that just failed.
        return _answer(partition, ErrorCode.KAFKA_STORAGE_ERROR if not plog.io.online
                       else ErrorCode.NOT_LEADER_OR_FOLLOWER)
    if not plog.config.delete:
        return _answer(partition, ErrorCode.POLICY_VIOLATION)  # compacted only: records are not deleted
    return plog


def _delete(node: Any, items: list[Any]) -> list[tuple[int, int]]:
    """On the dir's worker: move each log's start, then write the dir's checkpoint once. One (error code,
    requested offset) per item; the offset -1 is resolved to the high watermark here, under the same lock
    order as the move, as Kafka resolves it on the leader's log."""
    out: list[tuple[int, int]] = []
    moved = None
    for _slot, plog, offset in items:
        target = plog.high_watermark if offset == HIGH_WATERMARK else offset
        if target < 0:
            out.append((ErrorCode.OFFSET_OUT_OF_RANGE, target))
            continue
        try:
            before = plog.log_start_offset
            plog.advance_log_start_offset(target)
        except Exception as e:
            out.append((getattr(e, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR), target))
            continue
        if plog.log_start_offset != before:
            moved = plog
        out.append((0, target))
    if moved is not None:
        node.logs.manager.checkpoint_dir(moved.log_dir)
    return out


@api(DeleteRecordsRequest)
def handle(node: Any, request: Any, body: DeleteRecordsRequest) -> Any:
    started = time.monotonic()
    requested: list[tuple[str, int, Any]] = []  # (topic, partition, answer) of the partitions deleted from

    def fill(item: Any, result: tuple[int, int]) -> None:
        answer, plog, _offset = item
        code, target = result
        answer.error_code = code
        if code == 0:
            requested.append((plog.topic, plog.partition, (target, answer)))

    def fail(item: Any, e: BaseException | None) -> None:
        code = ErrorCode.REQUEST_TIMED_OUT if e is None else getattr(e, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR)
        item[0].error_code = code

    work = DirWork(node, fill, fail)
    topics: dict[str, list[PartResult]] = {}
    for (name, partition), offset in _offsets(body).items():
        parts = topics.setdefault(name, [])
        known = node.metadata.topic(name)
        if not allowed(node, request, DELETE, TOPIC, name):
            parts.append(_answer(partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            continue
        if known is None or partition not in known.partitions:
            parts.append(_answer(partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            continue
        plog = _leader_log(node, name, partition)
        if plog.__class__ is PartResult:
            parts.append(plog)
            continue
        answer = _answer(partition, 0)
        parts.append(answer)
        work.add(plog.log_dir, (answer, plog, offset))
    response = DeleteRecordsResponse(topics=[TopicResult(name=name, partitions=parts)
                                             for name, parts in topics.items()])
    if not work:
        return response
    timeout_s = max(body.timeout_ms, 0) / 1000
    pending = work.run(functools.partial(_delete, node), timeout_s if timeout_s > 0 else DEFAULT_DISK_WAIT_S)
    if pending is None:
        return _wait_for_replicas(node, requested, response, timeout_s, started)
    return _after_disk(pending, node, requested, response, timeout_s, started)


def _offsets(body: DeleteRecordsRequest) -> dict[tuple[str, int], int]:
    """Each partition's offset, in the order partitions are first named: Kafka keeps them in a map, so a
    partition named twice is answered once, with the offset named last, and a topic named twice answers once."""
    out: dict[tuple[str, int], int] = {}
    for t in body.topics:
        for p in t.partitions:
            out[(t.name, p.partition_index)] = p.offset
    return out


async def _after_disk(pending: Any, node: Any, requested: list, response: DeleteRecordsResponse,
                      timeout_s: float, started: float) -> DeleteRecordsResponse:
    await pending
    answer = _wait_for_replicas(node, requested, response, timeout_s, started)
    if answer is response:
        return response
    return await answer


def _wait_for_replicas(node: Any, requested: list, response: DeleteRecordsResponse, timeout_s: float,
                       started: float) -> Any:
    """Each deleted-from partition's low watermark now; the response when every one has reached its offset,
    else a wait for the rest (the request's time left) that ends with the response."""
    waiting = []
    for topic, partition, (target, answer) in requested:
        lw = low_watermark(node, topic, partition)
        if lw is None:  # leadership went while its dir worked: Kafka's lowWatermarkIfLeader throws
            answer.error_code, answer.low_watermark = ErrorCode.NOT_LEADER_OR_FOLLOWER, INVALID_LOW_WATERMARK
            continue
        answer.low_watermark = lw
        if lw < target:
            waiting.append((topic, partition, target, answer))
    if not waiting:
        return response
    manager = getattr(node, "replication", None)
    if manager is None:  # a lone node's low watermark is its own log start, which the move above took there
        for _topic, _partition, _target, answer in waiting:
            answer.error_code = ErrorCode.REQUEST_TIMED_OUT
        return response
    left = timeout_s - (time.monotonic() - started)
    return _answer_when(manager.delete_records.delay(waiting, left), response)


async def _answer_when(done: Any, response: DeleteRecordsResponse) -> DeleteRecordsResponse:
    await done
    return response
