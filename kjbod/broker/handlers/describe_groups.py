"""DescribeGroups (key 15), versions 0-6.

Version notes: v1 throttle time; v3 authorized operations (the group's operations the client may do: every one
without an authorizer, as Kafka); v4 the group instance id; v5 flexible; v6 (KIP-1043) an error message, and a
group this coordinator does not know is GROUP_ID_NOT_FOUND ("Group G not found."), still described as Dead.
Below v6 such a group is Dead with no members and no error, as Kafka answers it.  Member metadata and
assignments are answered while the group is Stable, its protocol name then too.  A group of the consumer protocol
(KIP-848), a share group (KIP-932) or a streams group (KIP-1071) is no classic group: Dead as an unknown one (v6:
GROUP_ID_NOT_FOUND, "Group G is not a classic group."); ConsumerGroupDescribe, ShareGroupDescribe and
StreamsGroupDescribe are their APIs.
"""

from __future__ import annotations

from kjbod.broker.authz import allowed, authorized_operations
from kjbod.broker.groups.coordinator import coordinator_of
from kjbod.broker.groups.state import GroupState
from kjbod.broker.router import api
from kjbod.metadata.acls import DESCRIBE, GROUP
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import DescribeGroupsRequest, DescribeGroupsResponse
from kjbod.protocol.generated.describe_groups_response import DescribedGroup, DescribedGroupMember

NOT_ASKED = -(2**31)


@api(DescribeGroupsRequest)
def handle(node, request, body: DescribeGroupsRequest) -> DescribeGroupsResponse:
    coordinator = coordinator_of(node)
    asked = body.include_authorized_operations
    out = []
    for gid in body.groups:
        ops = authorized_operations(node, request, GROUP, gid) if asked else NOT_ASKED
        code: int
        if not allowed(node, request, DESCRIBE, GROUP, gid):
            code = ErrorCode.GROUP_AUTHORIZATION_FAILED
        else:
            code = coordinator.status(gid) if gid else ErrorCode.INVALID_GROUP_ID
        # a consumer-protocol (KIP-848) group is no classic group: Dead, as an unknown one
        modern = not code and (gid in coordinator.book.consumer_groups or gid in coordinator.share_groups
                               or gid in coordinator.streams_groups)
        g = coordinator.book.groups.get(gid) if not code and not modern else None
        if code or g is None:
            message = None
            if not code and request.api_version >= 6:
                code = ErrorCode.GROUP_ID_NOT_FOUND
                message = f"Group {gid} is not a classic group." if modern else f"Group {gid} not found."
            out.append(DescribedGroup(error_code=code, error_message=message, group_id=gid,
                                      group_state=GroupState.DEAD.value, authorized_operations=ops))
            continue
        stable = g.is_(GroupState.STABLE)
        members = [DescribedGroupMember(
            member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
            client_host=m.client_host,
            member_metadata=m.metadata_for(g.protocol_name) if stable and g.protocol_name else b"",
            member_assignment=m.assignment if stable else b"") for m in g.members.values()]
        out.append(DescribedGroup(error_code=0, group_id=gid, group_state=g.state.value,
                                  protocol_type=g.protocol_type or "",
                                  protocol_data=(g.protocol_name or "") if stable else "", members=members,
                                  authorized_operations=ops))
    return DescribeGroupsResponse(groups=out)
