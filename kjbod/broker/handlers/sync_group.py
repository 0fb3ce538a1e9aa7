"""SyncGroup (key 14), versions 0-5.

Version notes: v3 adds the group instance id; v4 flexible; v5 adds the protocol type and name, checked against
the group's (INCONSISTENT_GROUP_PROTOCOL) and answered back.

The leader's request carries every member's assignment; each member's request waits until the leader's came.
"""

from __future__ import annotations

import asyncio

from kjbod.broker.authz import allowed
from kjbod.broker.groups.coordinator import coordinator_of, now_ms, resolver
from kjbod.broker.groups.state import SyncResult
from kjbod.broker.router import api
from kjbod.metadata.acls import GROUP, READ
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import SyncGroupRequest, SyncGroupResponse


@api(SyncGroupRequest)
async def handle(node, request, body: SyncGroupRequest) -> SyncGroupResponse:
    coordinator = coordinator_of(node)
    if not allowed(node, request, READ, GROUP, body.group_id):
        return SyncGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if body.group_id and (code := coordinator.status(body.group_id)):
        return SyncGroupResponse(error_code=code)
    if body.group_id in coordinator.book.consumer_groups:  # a classic member of a consumer group (KIP-848)
        code, assignment, name = coordinator.book.consumer.classic_sync(
            now_ms(), body.group_id, body.member_id, body.group_instance_id, body.generation_id, body.protocol_type,
            body.protocol_name)
        if code:
            return SyncGroupResponse(error_code=code, assignment=b"")
        return SyncGroupResponse(error_code=0, assignment=assignment, protocol_type="consumer", protocol_name=name)
    fut: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
    coordinator.book.sync(now_ms(), body.group_id, body.generation_id, body.member_id, body.group_instance_id,
                          body.protocol_type, body.protocol_name,
                          {a.member_id: a.assignment for a in body.assignments},
                          resolver(fut))
    r = await fut
    return SyncGroupResponse(error_code=r.error_code, assignment=r.assignment, protocol_type=r.protocol_type,
                             protocol_name=r.protocol_name)
