"""ConsumerGroupDescribe (key 69), versions 0-1.

Version notes: v0 describes KIP-848 consumer groups: state, group and assignment epochs, the assignor in use, and
each member with its subscription, its current assignment and its target.  A group this coordinator does not
know ("Group G not found."), or a classic group ("Group G is not a consumer group."), answers
GROUP_ID_NOT_FOUND; an empty id INVALID_GROUP_ID; DESCRIBE on the group is
needed (GROUP_AUTHORIZATION_FAILED), as in Kafka.  While the cluster's group.version is 0 every group answers
UNSUPPORTED_VERSION, as Kafka 4.0's broker answers it.  v1 (KIP-1099) adds each member's MemberType: 0 for a
member that joined with the classic protocol (a JoinGroup member of a consumer group, during an upgrade from
classic), 1 for one that joined with ConsumerGroupHeartbeat; v0 leaves it out.
"""

from __future__ import annotations

from kjbod.broker.authz import allowed, authorized_operations
from kjbod.broker.groups.consumer import Assignment as Partitions
from kjbod.broker.groups.coordinator import coordinator_of
from kjbod.broker.router import api
from kjbod.metadata import features
from kjbod.metadata.acls import DESCRIBE, GROUP
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse
from kjbod.protocol.generated.consumer_group_describe_response import (
    Assignment,
    DescribedGroup,
    Member,
    TopicPartitions,
)

NOT_ASKED = -(2**31)
CLASSIC_MEMBER, CONSUMER_MEMBER = 0, 1


def _assignment(node, partitions: Partitions) -> Assignment:
    out = []
    for tid, ps in sorted(partitions.items(), key=lambda kv: str(kv[0])):
        topic = node.metadata.topic_by_id(tid)
        if topic is None or not ps:  # a topic deleted meanwhile is left out, as Kafka does
            continue
        out.append(TopicPartitions(topic_id=tid, topic_name=topic.name, partitions=sorted(ps)))
    return Assignment(topic_partitions=out)


@api(ConsumerGroupDescribeRequest)
def handle(node, request, body: ConsumerGroupDescribeRequest) -> ConsumerGroupDescribeResponse:
    if not features.consumer_protocol_enabled(node.metadata):
        return ConsumerGroupDescribeResponse(groups=[
            DescribedGroup(error_code=ErrorCode.UNSUPPORTED_VERSION, group_id=gid) for gid in body.group_ids])
    coordinator = coordinator_of(node)
    out = []
    for gid in body.group_ids:
        if not gid:
            out.append(DescribedGroup(error_code=ErrorCode.INVALID_GROUP_ID, group_id=gid))
            continue
        if not allowed(node, request, DESCRIBE, GROUP, gid):
            out.append(DescribedGroup(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=gid))
            continue
        if (code := coordinator.status(gid)):
            out.append(DescribedGroup(error_code=code, group_id=gid))
            continue
        g = coordinator.book.consumer_groups.get(gid)
        if g is None:
            classic = gid in coordinator.book.groups
            out.append(DescribedGroup(error_code=ErrorCode.GROUP_ID_NOT_FOUND, group_id=gid, error_message=(
                f"Group {gid} is not a consumer group." if classic else f"Group {gid} not found.")))
            continue
        ops = authorized_operations(node, request, GROUP, gid) if body.include_authorized_operations else NOT_ASKED
        out.append(DescribedGroup(
            group_id=gid, group_state=g.state.value, group_epoch=g.group_epoch, assignment_epoch=g.assignment_epoch,
            assignor_name=g.preferred_assignor(coordinator.book.consumer.default_assignor),
            authorized_operations=ops, members=[Member(
                member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=list(m.subscribed_topic_names),
                subscribed_topic_regex=m.subscribed_topic_regex, assignment=_assignment(node, m.assigned),
                target_assignment=_assignment(node, g.target.get(m.member_id, {})),
                member_type=CLASSIC_MEMBER if m.classic is not None else CONSUMER_MEMBER)
                for m in g.members.values()]))
    return ConsumerGroupDescribeResponse(groups=out)
