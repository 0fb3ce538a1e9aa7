"""AlterShareGroupOffsets (key 91), version 0.

Version notes: v0 (KIP-932) sets the start offsets of an empty share group's partitions (a group that does not exist
yet is made).  Kafka's answers: share.version 0 is UNSUPPORTED_VERSION; READ on the group is needed
(GROUP_AUTHORIZATION_FAILED); a group with members is NON_EMPTY_GROUP, another kind of group's id
GROUP_ID_NOT_FOUND, an empty id INVALID_GROUP_ID (top-level errors); READ on each topic
(TOPIC_AUTHORIZATION_FAILED) and an existing topic and partition (UNKNOWN_TOPIC_OR_PARTITION) per partition.
The work is kjbod.broker.share.groups_offsets.alter's, through the share-state persister.
"""

from __future__ import annotations

from kjbod.broker.authz import allowed
from kjbod.broker.groups.coordinator import coordinator_of
from kjbod.broker.router import api
from kjbod.broker.share import groups_offsets
from kjbod.metadata.acls import READ, TOPIC
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse
from kjbod.protocol.generated.alter_share_group_offsets_response import (
    AlterShareGroupOffsetsResponsePartition as Partition,
)
from kjbod.protocol.generated.alter_share_group_offsets_response import (
    AlterShareGroupOffsetsResponseTopic as Topic,
)


@api(AlterShareGroupOffsetsRequest)
async def handle(node, request, body: AlterShareGroupOffsetsRequest) -> AlterShareGroupOffsetsResponse:
    gid = body.group_id
    if (code := groups_offsets.refusal(node, request, gid, READ)):
        return AlterShareGroupOffsetsResponse(error_code=code)
    coordinator = coordinator_of(node)
    refused = []
    wanted = []
    for t in body.topics:
        error = ErrorCode.TOPIC_AUTHORIZATION_FAILED if not allowed(node, request, READ, TOPIC, t.topic_name) \
            else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if node.metadata.topic(t.topic_name) is None else 0
        if error:
            topic = node.metadata.topic(t.topic_name)
            refused.append(Topic(topic_name=t.topic_name, topic_id=topic.topic_id if topic is not None else
                                 groups_offsets.ZERO_UUID, partitions=[
                                     Partition(partition_index=p.partition_index, error_code=error)
                                     for p in t.partitions]))
        else:
            wanted.append((t.topic_name, [(p.partition_index, p.start_offset) for p in t.partitions]))
    result = await groups_offsets.alter(coordinator, gid, wanted)
    if result.error_code:
        return AlterShareGroupOffsetsResponse(error_code=result.error_code, error_message=result.error_message)
    return AlterShareGroupOffsetsResponse(responses=refused + [
        Topic(topic_name=t.name, topic_id=t.topic_id, partitions=[Partition(
            partition_index=p.partition, error_code=p.error_code, error_message=p.error_message)
            for p in t.partitions]) for t in result.topics])
