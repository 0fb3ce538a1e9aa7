"""ShareGroupDescribe (key 77), version 1.

Version notes: v1 is KIP-932's first stable version (v0 was Kafka 4.0's early access, removed in 4.1).  Each share
group's state (Empty or Stable), group and assignment epochs, the assignor (`simple`) and its members with their
subscriptions and current partitions.  Kafka's answers: share.version 0 is UNSUPPORTED_VERSION for every group; an
empty id INVALID_GROUP_ID; DESCRIBE on the group is needed (GROUP_AUTHORIZATION_FAILED); an unknown id
GROUP_ID_NOT_FOUND ("Group X not found."), another kind of group's id GROUP_ID_NOT_FOUND ("Group X is not a share
group."); a group whose members hold a topic the client may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from kjbod.broker.authz import allowed, authorized_operations
from kjbod.broker.groups.consumer import Assignment as Partitions
from kjbod.broker.groups.coordinator import coordinator_of
from kjbod.broker.router import api
from kjbod.broker.share.groups import ASSIGNOR
from kjbod.metadata import features
from kjbod.metadata.acls import DESCRIBE, GROUP, TOPIC
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import ShareGroupDescribeRequest, ShareGroupDescribeResponse
from kjbod.protocol.generated.share_group_describe_response import (
    Assignment,
    DescribedGroup,
    Member,
    TopicPartitions,
)

NOT_ASKED = -(2**31)


def _assignment(node, partitions: Partitions) -> Assignment:
    out = []
    for tid, ps in sorted(partitions.items(), key=lambda kv: str(kv[0])):
        topic = node.metadata.topic_by_id(tid)
        if topic is None or not ps:  # a topic deleted meanwhile is left out
            continue
        out.append(TopicPartitions(topic_id=tid, topic_name=topic.name, partitions=sorted(ps)))
    return Assignment(topic_partitions=out)


@api(ShareGroupDescribeRequest)
def handle(node, request, body: ShareGroupDescribeRequest) -> ShareGroupDescribeResponse:
    if not features.share_groups_enabled(node.metadata):
        return ShareGroupDescribeResponse(groups=[
            DescribedGroup(error_code=ErrorCode.UNSUPPORTED_VERSION, group_id=gid) for gid in body.group_ids])
    coordinator = coordinator_of(node)
    out = []
    for gid in body.group_ids:
        if not allowed(node, request, DESCRIBE, GROUP, gid):
            out.append(DescribedGroup(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=gid))
            continue
        if not gid:
            out.append(DescribedGroup(error_code=ErrorCode.INVALID_GROUP_ID, group_id=gid,
                                      error_message="Group ID can't be empty."))
            continue
        if (code := coordinator.status(gid)):
            out.append(DescribedGroup(error_code=code, group_id=gid))
            continue
        g = coordinator.share_groups.get(gid)
        if g is None:
            message = f"Group {gid} is not a share group." if coordinator.other_kind(gid) is not None \
                else f"Group {gid} not found."
            out.append(DescribedGroup(error_code=ErrorCode.GROUP_ID_NOT_FOUND, group_id=gid, error_message=message))
            continue
        members = [Member(member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                          client_id=m.client_id, client_host=m.client_host,
                          subscribed_topic_names=list(m.subscribed_topic_names),
                          assignment=_assignment(node, m.assigned)) for m in g.members.values()]
        names = {t.topic_name for m in members for t in m.assignment.topic_partitions}
        if not all(allowed(node, request, DESCRIBE, TOPIC, n) for n in names):
            out.append(DescribedGroup(
                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, group_id=gid,
                error_message="The group has described topic(s) that the client is not authorized to describe."))
            continue
        ops = authorized_operations(node, request, GROUP, gid) if body.include_authorized_operations else NOT_ASKED
        out.append(DescribedGroup(group_id=gid, group_state=g.state.value, group_epoch=g.group_epoch,
                                  assignment_epoch=g.assignment_epoch, assignor_name=ASSIGNOR,
                                  authorized_operations=ops, members=members))
    return ShareGroupDescribeResponse(groups=out)
