"""OffsetCommit (key 8), versions 2-10.

Version notes: v2-v4 carry a retention time (kept as the offset's expire timestamp); v5 drops it; v6 adds the
committed leader epoch; v7 the group instance id; v8 flexible; v9 same as v8 (the consumer protocol's); v10 names
topics by id instead of name (KIP-848), answered by id: an id the metadata does not know is UNKNOWN_TOPIC_ID for
each of its partitions.  v0 and v1 are not served, as in Kafka 4.

The commit is checked against the group (a member of the current generation, or generation -1 into an empty
group: a consumer managing its own partitions), written to the group's `__consumer_offsets` partition with
acks=all, and answered once committed.  A partition of a topic that does not exist answers
UNKNOWN_TOPIC_OR_PARTITION; metadata longer than offset.metadata.max.bytes OFFSET_METADATA_TOO_LARGE.
"""

from __future__ import annotations

from kjbod.broker.authz import allowed
from kjbod.broker.groups import records as rec
from kjbod.broker.groups.coordinator import coordinator_of, now_ms
from kjbod.broker.groups.state import CommittedOffset
from kjbod.broker.router import api
from kjbod.metadata.acls import GROUP, READ, TOPIC
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import OffsetCommitRequest, OffsetCommitResponse
from kjbod.protocol.generated.offset_commit_response import OffsetCommitResponsePartition as PartResp
from kjbod.protocol.generated.offset_commit_response import OffsetCommitResponseTopic as TopicResp


def _all(body: OffsetCommitRequest, code: int) -> OffsetCommitResponse:
    return OffsetCommitResponse(topics=[TopicResp(name=t.name, topic_id=t.topic_id, partitions=[
        PartResp(partition_index=p.partition_index, error_code=code) for p in t.partitions]) for t in body.topics])


def topic_names(node, v: int, topics) -> list[str | None]:
    """Each request topic's name: as sent below v10; from v10 its id's name in the metadata, None when unknown."""
    if v < 10:
        return [t.name for t in topics]
    image = node.metadata
    return [found.name if (found := image.topic_by_id(t.topic_id)) is not None else None for t in topics]


@api(OffsetCommitRequest)
async def handle(node, request, body: OffsetCommitRequest) -> OffsetCommitResponse:
    v = request.api_version
    if not body.group_id:
        return _all(body, ErrorCode.INVALID_GROUP_ID)
    if not allowed(node, request, READ, GROUP, body.group_id):
        return _all(body, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    coordinator = coordinator_of(node)
    if (code := coordinator.status(body.group_id)):
        return _all(body, code)
    now = now_ms()
    retention = body.retention_time_ms if 2 <= v <= 4 else -1
    offsets: dict[tuple[str, int], CommittedOffset] = {}
    answers: dict[tuple[str, int], int] = {}
    names = topic_names(node, v, body.topics)
    for t, name in zip(body.topics, names, strict=True):
        # as Kafka: partitions of unknown topics are answered before the group is asked
        if name is None:
            continue  # an unknown topic id: UNKNOWN_TOPIC_ID, below
        topic = node.metadata.topic(name)
        for p in t.partitions:
            tp = (name, p.partition_index)
            metadata = p.committed_metadata or ""
            if not allowed(node, request, READ, TOPIC, name):
                answers[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif topic is None or p.partition_index not in topic.partitions:
                answers[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif len(metadata.encode("utf-8")) > coordinator.config.offset_metadata_max_bytes:
                answers[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                offsets[tp] = CommittedOffset(p.committed_offset, p.committed_leader_epoch if v >= 6 else -1,
                                              metadata, now, now + retention if retention >= 0 else -1)
    if offsets:
        if body.group_id in coordinator.streams_groups:  # KIP-1071: the streams member's epoch
            code = coordinator.streams.check_commit(body.group_id, body.member_id, body.generation_id_or_member_epoch,
                                                    body.group_instance_id, v)
        else:
            code = coordinator.book.check_commit(now, body.group_id, body.generation_id_or_member_epoch,
                                                 body.member_id, body.group_instance_id, v9=v >= 9)
        if code:
            answers.update(dict.fromkeys(offsets, code))
            offsets = {}
    if offsets:
        code = await coordinator.append(body.group_id, [
            (rec.offset_key(body.group_id, t, p), rec.offset_value(c)) for (t, p), c in offsets.items()],
            too_large=ErrorCode.INVALID_COMMIT_OFFSET_SIZE)
        if code == 0:
            coordinator.book.commit(body.group_id, offsets)
        answers.update(dict.fromkeys(offsets, code))
    return OffsetCommitResponse(topics=[TopicResp(name=t.name, topic_id=t.topic_id, partitions=[
        PartResp(partition_index=p.partition_index, error_code=ErrorCode.UNKNOWN_TOPIC_ID if name is None
                 else answers[(name, p.partition_index)])
        for p in t.partitions]) for t, name in zip(body.topics, names, strict=True)])
