"""LeaveGroup (key 13), versions 0-5.

Version notes: v1 and v2 same as v0; v3 takes several members (by member id or group instance id) and answers
each; v4 flexible; v5 adds a reason per member.  Before v3 the one member's code is the response's.
"""

from __future__ import annotations

from kjbod.broker.authz import allowed
from kjbod.broker.groups.coordinator import coordinator_of, now_ms
from kjbod.broker.router import api
from kjbod.metadata.acls import GROUP, READ
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import LeaveGroupRequest, LeaveGroupResponse
from kjbod.protocol.generated.leave_group_response import MemberResponse


@api(LeaveGroupRequest)
async def handle(node, request, body: LeaveGroupRequest) -> LeaveGroupResponse:
    v = request.api_version
    leaving: list[tuple[str, str | None]] = [(m.member_id, m.group_instance_id) for m in body.members] if v >= 3 else [(body.member_id, None)]
    coordinator = coordinator_of(node)
    if not allowed(node, request, READ, GROUP, body.group_id):
        return LeaveGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if body.group_id and (code := coordinator.status(body.group_id)):
        return LeaveGroupResponse(error_code=code)
    if body.group_id in coordinator.book.consumer_groups:  # classic members of a consumer group (KIP-848)
        code, codes = ErrorCode.NONE, await coordinator.classic_leave(body.group_id, leaving)
    else:
        code, codes = coordinator.book.leave(now_ms(), body.group_id, leaving)
    if v < 3:
        return LeaveGroupResponse(error_code=code or codes[0])
    return LeaveGroupResponse(error_code=code, members=[
        MemberResponse(member_id=m, group_instance_id=i, error_code=c) for (m, i), c in zip(leaving, codes, strict=True)])
