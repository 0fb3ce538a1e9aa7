"""DescribeShareGroupOffsets (key 90), versions 0-1.

Version notes: v0 (KIP-932) each share-partition's start offset and leader epoch, per group; v1 (KIP-1226) the lag
too.  Topics null asks for every partition the group has share state for.  Kafka's answers: share.version 0 is
UNSUPPORTED_VERSION per group; DESCRIBE on the group is needed (GROUP_AUTHORIZATION_FAILED), and DESCRIBE on each
topic (its partitions TOPIC_AUTHORIZATION_FAILED; with topics null an undescribable topic is left out); a topic
that does not exist, or a partition without share state, answers start offset -1 without an error.  The reading is
kjbod.broker.share.groups_offsets.describe's.
"""

from __future__ import annotations

from kjbod.broker.authz import allowed
from kjbod.broker.groups.coordinator import coordinator_of
from kjbod.broker.router import api
from kjbod.broker.share import groups_offsets
from kjbod.metadata import features
from kjbod.metadata.acls import DESCRIBE, GROUP, TOPIC
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse
from kjbod.protocol.generated.describe_share_group_offsets_response import (
    DescribeShareGroupOffsetsResponseGroup as Group,
)
from kjbod.protocol.generated.describe_share_group_offsets_response import (
    DescribeShareGroupOffsetsResponsePartition as Partition,
)
from kjbod.protocol.generated.describe_share_group_offsets_response import (
    DescribeShareGroupOffsetsResponseTopic as Topic,
)

TOPIC_NOT_AUTHORIZED = "Topic authorization failed."


def _topic(t: groups_offsets.TopicResult) -> Topic:
    return Topic(topic_name=t.name, topic_id=t.topic_id, partitions=[Partition(
        partition_index=p.partition, start_offset=p.start_offset, leader_epoch=p.leader_epoch, lag=p.lag,
        error_code=p.error_code, error_message=p.error_message) for p in t.partitions])


@api(DescribeShareGroupOffsetsRequest)
async def handle(node, request, body: DescribeShareGroupOffsetsRequest) -> DescribeShareGroupOffsetsResponse:
    if not features.share_groups_enabled(node.metadata):
        return DescribeShareGroupOffsetsResponse(groups=[
            Group(group_id=g.group_id, error_code=ErrorCode.UNSUPPORTED_VERSION) for g in body.groups])
    coordinator = coordinator_of(node)
    out = []
    for g in body.groups:
        gid = g.group_id
        if not allowed(node, request, DESCRIBE, GROUP, gid):
            out.append(Group(group_id=gid, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        if not gid:
            out.append(Group(group_id=gid, error_code=ErrorCode.INVALID_GROUP_ID))
            continue
        if (code := coordinator.status(gid)):
            out.append(Group(group_id=gid, error_code=code))
            continue
        if g.topics is None:
            result = await groups_offsets.describe(coordinator, gid, None)
            out.append(Group(group_id=gid, topics=[_topic(t) for t in result.topics
                                                   if allowed(node, request, DESCRIBE, TOPIC, t.name)]))
            continue
        mine = [t for t in g.topics if allowed(node, request, DESCRIBE, TOPIC, t.topic_name)]
        result = await groups_offsets.describe(coordinator, gid, [(t.topic_name, list(t.partitions)) for t in mine]) \
            if mine else groups_offsets.Result()
        topics = [_topic(t) for t in result.topics] + [
            Topic(topic_name=t.topic_name, partitions=[Partition(
                partition_index=p, start_offset=-1, lag=-1, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                error_message=TOPIC_NOT_AUTHORIZED) for p in t.partitions])
            for t in g.topics if t not in mine]
        out.append(Group(group_id=gid, topics=topics))
    return DescribeShareGroupOffsetsResponse(groups=out)
