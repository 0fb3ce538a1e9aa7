"""OffsetDelete (key 47), version 0.

Removes a group's committed offsets for some partitions (tombstones in `__consumer_offsets`).  As Kafka: an unknown
group is GROUP_ID_NOT_FOUND; a group with members that is not a consumer group is NON_EMPTY_GROUP; in a consumer
group with members the partitions of topics a member subscribes to answer GROUP_SUBSCRIBED_TO_TOPIC and the others
go; an empty group's offsets all go.  A partition of a topic that does not exist answers
UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from kjbod.broker.authz import allowed
from kjbod.broker.groups.coordinator import coordinator_of
from kjbod.broker.groups.state import GroupState
from kjbod.broker.router import api
from kjbod.metadata.acls import DELETE, GROUP
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import OffsetDeleteRequest, OffsetDeleteResponse
from kjbod.protocol.generated.offset_delete_response import OffsetDeleteResponsePartition as PartResp
from kjbod.protocol.generated.offset_delete_response import OffsetDeleteResponseTopic as TopicResp


@api(OffsetDeleteRequest)
async def handle(node, request, body: OffsetDeleteRequest) -> OffsetDeleteResponse:
    coordinator = coordinator_of(node)
    if not allowed(node, request, DELETE, GROUP, body.group_id):
        return OffsetDeleteResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    code = coordinator.status(body.group_id) if body.group_id else ErrorCode.INVALID_GROUP_ID
    group = coordinator.book.groups.get(body.group_id) if not code else None
    if not code and (group is None or group.is_(GroupState.DEAD)):
        code = ErrorCode.GROUP_ID_NOT_FOUND
    subscribed: set[str] | None = set()
    # a KIP-848 group's offsets holder is never in a classic state: its members' subscriptions decide
    if not code and group is not None and (not group.is_(GroupState.EMPTY)
                                           or body.group_id in coordinator.book.consumer_groups):
        subscribed = coordinator.book.subscribed_topics(group)
        if subscribed is None:
            code = ErrorCode.NON_EMPTY_GROUP
    if code or group is None or subscribed is None:
        return OffsetDeleteResponse(error_code=code)
    answers: dict[tuple[str, int], int] = {}
    going: list[tuple[str, int]] = []
    for t in body.topics:
        topic = node.metadata.topic(t.name)
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if topic is None or p.partition_index not in topic.partitions:
                answers[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif t.name in subscribed:
                answers[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                answers[tp] = 0
                if tp in group.offsets:
                    going.append(tp)
    if going:
        written = await coordinator.delete_offsets(body.group_id, going)
        answers.update(dict.fromkeys(going, written))
    return OffsetDeleteResponse(error_code=0, topics=[TopicResp(name=t.name, partitions=[
        PartResp(partition_index=p.partition_index, error_code=answers[(t.name, p.partition_index)])
        for p in t.partitions]) for t in body.topics])
