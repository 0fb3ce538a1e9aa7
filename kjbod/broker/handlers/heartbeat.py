"""Heartbeat (key 12), versions 0-4.

Version notes: v1 and v2 same as v0; v3 adds the group instance id; v4 flexible.  A heartbeat keeps the member's
session alive; REBALANCE_IN_PROGRESS tells it to join again.
"""

from __future__ import annotations

from kjbod.broker.authz import allowed
from kjbod.broker.groups.coordinator import coordinator_of, now_ms
from kjbod.broker.router import api
from kjbod.metadata.acls import GROUP, READ
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import HeartbeatRequest, HeartbeatResponse


@api(HeartbeatRequest)
def handle(node, request, body: HeartbeatRequest) -> HeartbeatResponse:
    coordinator = coordinator_of(node)
    if not allowed(node, request, READ, GROUP, body.group_id):
        return HeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if body.group_id and (code := coordinator.status(body.group_id)):
        return HeartbeatResponse(error_code=code)
    if body.group_id in coordinator.book.consumer_groups:  # a classic member of a consumer group (KIP-848)
        return HeartbeatResponse(error_code=coordinator.book.consumer.classic_heartbeat(
            now_ms(), body.group_id, body.member_id, body.group_instance_id, body.generation_id))
    return HeartbeatResponse(error_code=coordinator.book.heartbeat(
        now_ms(), body.group_id, body.generation_id, body.member_id, body.group_instance_id))
