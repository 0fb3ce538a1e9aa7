"""A share group's offsets: where its share-partitions start (DescribeShareGroupOffsets, AlterShareGroupOffsets,
DeleteShareGroupOffsets), read and changed through the share-state persister as Kafka's group coordinator does.

Strategy: the persister holds each share-partition's start offset; the group's ShareGroupStatePartitionMetadata
record says which partitions have state.  Describing reads the persister's summaries (a partition without state,
or of a topic that does not exist, answers start offset -1, not an error) and, where this broker has the
partition's log, the lag: the high watermark less the start offset less the records already delivered for good.
Altering (only an empty group; a missing one is made) records the partitions as initializing, initializes their
state with the given start offsets at the group's epoch, and records those the persister took as initialized.
Deleting (only an empty group) moves a topic's partitions to deleting, deletes their state, and then forgets them.
Each function takes the group coordinator (kjbod.broker.groups.coordinator) and returns plain results for the
handler to encode.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import structlog

from kjbod.broker.coordinator_host import now_ms
from kjbod.broker.share.groups import ShareGroup
from kjbod.broker.share.persister import InitializeData, persister_of
from kjbod.protocol.errors import ErrorCode

log = structlog.get_logger("kjbod.groups")

ZERO_UUID = UUID(int=0)
NOT_EMPTY = "The group is not empty."
NO_TOPIC = "This server does not host this topic-partition."


@dataclass
class PartitionOffset:
    partition: int
    start_offset: int = -1
    leader_epoch: int = 0
    lag: int = -1
    error_code: int = 0
    error_message: str | None = None


@dataclass
class TopicResult:
    name: str
    topic_id: UUID = ZERO_UUID
    partitions: list[PartitionOffset] = field(default_factory=list)
    error_code: int = 0
    error_message: str | None = None


@dataclass
class Result:
    error_code: int = 0
    error_message: str | None = None
    topics: list[TopicResult] = field(default_factory=list)


def refusal(node: Any, request: Any, group_id: str, operation: int) -> int:
    """What AlterShareGroupOffsets and DeleteShareGroupOffsets answer for the whole request before looking at its
    topics, in Kafka's order: UNSUPPORTED_VERSION while share groups are off, GROUP_AUTHORIZATION_FAILED without
    `operation` on the group, INVALID_GROUP_ID for an empty id, then the coordinator's own status (loading, not
    the coordinator); 0 to go on."""
    from kjbod.broker.authz import allowed
    from kjbod.broker.groups.coordinator import coordinator_of
    from kjbod.metadata import features
    from kjbod.metadata.acls import GROUP

    if not features.share_groups_enabled(node.metadata):
        return ErrorCode.UNSUPPORTED_VERSION
    if not allowed(node, request, operation, GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    if not group_id:
        return ErrorCode.INVALID_GROUP_ID
    return int(coordinator_of(node).status(group_id))


def _group_error(coordinator: Any, group_id: str, create: bool) -> tuple[ShareGroup | None, Result | None]:
    sg = coordinator.share_groups.get(group_id)
    if sg is None:
        if coordinator.other_kind(group_id) is not None:
            return None, Result(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        if not create:
            return None, Result(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        sg = coordinator.share_groups[group_id] = ShareGroup(group_id)
    if sg.members:
        return None, Result(ErrorCode.NON_EMPTY_GROUP, NOT_EMPTY)
    return sg, None


def _end_offset(node: Any, topic: str, partition: int) -> int | None:
    """The partition's high watermark when this broker leads it, else None (the lag is then not known)."""
    from kjbod.broker.handlers.leader_epoch_check import checked_log

    try:
        plog = checked_log(node, topic, partition, -1, leader_only=True)
    except Exception:  # noqa: BLE001 - not led here (or not here at all): no lag to report
        return None
    return plog.high_watermark if plog.online else None


async def describe(coordinator: Any, group_id: str, topics: list[tuple[str, list[int]]] | None) -> Result:
    """DescribeShareGroupOffsets for one group: `topics` None asks for every partition with share state."""
    node = coordinator.node
    out = Result()
    wanted: list[tuple[UUID, str, list[int]]] = []
    if topics is None:
        sg = coordinator.share_groups.get(group_id)
        if sg is not None:
            for tid, (_, parts) in sorted(sg.initialized.items(), key=lambda kv: kv[1][0]):
                topic = node.metadata.topic_by_id(tid)
                if topic is not None:
                    wanted.append((tid, topic.name, sorted(parts)))
    else:
        for name, parts in topics:
            meta = coordinator.topic_meta(name)
            if meta is None:  # no such topic: no state, not an error
                out.topics.append(TopicResult(name, partitions=[PartitionOffset(p) for p in parts]))
            else:
                wanted.append((meta.topic_id, name, list(parts)))
    if not wanted:
        return out
    answers = await persister_of(node).read_summary(group_id, [(tid, p, 0) for tid, _, ps in wanted for p in ps])
    results = []
    for tid, name, parts in wanted:
        t = TopicResult(name, tid)
        for p in parts:
            a = answers.get((tid, p))
            if a is None or a.error_code:
                t.partitions.append(PartitionOffset(p))
                continue
            lag = -1
            if a.start_offset != -1 and a.delivery_complete_count != -1:
                end = _end_offset(node, name, p)
                if end is not None:
                    lag = max(end - a.start_offset - a.delivery_complete_count, 0)
            t.partitions.append(PartitionOffset(p, a.start_offset, a.leader_epoch, lag))
        results.append(t)
    out.topics = results + out.topics
    return out


async def alter(coordinator: Any, group_id: str, topics: list[tuple[str, list[tuple[int, int]]]]) -> Result:
    """AlterShareGroupOffsets: new start offsets for an empty (or new) share group's partitions."""
    sg, refused = _group_error(coordinator, group_id, create=True)
    if refused is not None:
        return refused
    assert sg is not None
    out = Result()
    now = now_ms()
    to_initialize: list[InitializeData] = []
    by_key: dict[tuple[UUID, int], PartitionOffset] = {}
    for name, parts in topics:
        meta = coordinator.topic_meta(name)
        if meta is None:
            out.topics.append(TopicResult(name, partitions=[
                PartitionOffset(p, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error_message=NO_TOPIC)
                for p, _ in parts]))
            continue
        t = TopicResult(name, meta.topic_id)
        valid = set()
        for p, offset in parts:
            if 0 <= p < meta.num_partitions:
                r = PartitionOffset(p)
                valid.add(p)
                by_key[(meta.topic_id, p)] = r
                to_initialize.append(InitializeData(meta.topic_id, p, sg.group_epoch, offset))
            else:
                r = PartitionOffset(p, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error_message=NO_TOPIC)
            t.partitions.append(r)
        if valid:
            sg.initializing[meta.topic_id] = (name, frozenset(valid), now)
        out.topics.append(t)
    code = await coordinator.persist_share(group_id)
    if code:
        return Result(code)
    if not to_initialize:
        return out
    try:
        answers = await persister_of(coordinator.node).initialize(group_id, to_initialize)
    except Exception:
        log.exception("share_state_alter_failed", group=group_id)
        return Result(ErrorCode.UNKNOWN_SERVER_ERROR)
    done: dict[UUID, list[int]] = {}
    failed: dict[UUID, list[int]] = {}
    for key, r in by_key.items():
        a = answers.get(key)
        if a is not None and a.error_code == 0:
            done.setdefault(key[0], []).append(key[1])
        else:
            failed.setdefault(key[0], []).append(key[1])
            r.error_code = a.error_code if a is not None else ErrorCode.UNKNOWN_SERVER_ERROR
            r.error_message = a.error_message if a is not None else None
    if coordinator.share.initialized(group_id, done, failed):
        code = await coordinator.persist_share(group_id)
        if code:
            return Result(code)
    return out


async def delete(coordinator: Any, group_id: str, names: list[str]) -> Result:
    """DeleteShareGroupOffsets: an empty share group forgets the share state of these topics."""
    sg, refused = _group_error(coordinator, group_id, create=False)
    if refused is not None:
        return refused
    assert sg is not None
    out = Result()
    doomed: dict[UUID, tuple[str, list[int]]] = {}
    for name in names:
        meta = coordinator.topic_meta(name)
        if meta is None:
            out.topics.append(TopicResult(name, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error_message=NO_TOPIC))
        elif meta.topic_id in sg.initialized:
            _, had = sg.initialized.pop(meta.topic_id)
            sg.deleting[meta.topic_id] = name
            doomed[meta.topic_id] = (name, sorted(had))
        elif meta.topic_id in sg.deleting:  # a delete that did not finish: every partition again
            doomed[meta.topic_id] = (name, list(range(meta.num_partitions)))
        else:
            out.topics.append(TopicResult(name, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                          error_message="There is no offset information to delete."))
    if not doomed:
        return out
    code = await coordinator.persist_share(group_id)
    if code:
        return Result(code)
    try:
        answers = await persister_of(coordinator.node).delete(
            group_id, [(tid, p) for tid, (_, ps) in doomed.items() for p in ps])
    except Exception:
        log.exception("share_state_delete_failed", group=group_id)
        return Result(ErrorCode.UNKNOWN_SERVER_ERROR)
    deleted = []
    for tid, (name, parts) in doomed.items():
        errors = [a for p in parts if (a := answers.get((tid, p))) is not None and a.error_code]
        if errors:
            out.topics.append(TopicResult(name, tid, error_code=errors[0].error_code,
                                          error_message=errors[0].error_message))
        else:
            deleted.append(TopicResult(name, tid))
            sg.deleting.pop(tid, None)
    if deleted:
        code = await coordinator.persist_share(group_id)
        if code:
            return Result(code)
    out.topics = deleted + out.topics
    return out
