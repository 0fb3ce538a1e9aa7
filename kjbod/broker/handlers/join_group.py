"""JoinGroup (key 11), versions 0-9.

Version notes: v1 adds the rebalance timeout (v0 uses the session timeout for both); v4 answers a member joining
without an id MEMBER_ID_REQUIRED with an id to join again with; v5 adds static membership (group instance id);
v6 flexible; v7 answers the protocol type and makes the protocol name nullable; v8 adds a reason; v9 adds
skip_assignment: set only for a static leader rejoining a stable group, which keeps the assignment it has.

A group of the consumer protocol (KIP-848) with members takes the classic member in (its subscription from the
protocol metadata, its assignment from the server assignor, the generation its member epoch: Kafka's mixed groups,
kjbod.broker.groups.consumer.ConsumerGroups.classic_join); an empty one is dropped and the join goes on as for a
new classic group.  The group logic is kjbod.broker.groups.state's; this module waits for its answer (the end of the rebalance).
"""

from __future__ import annotations

import asyncio

from kjbod.broker.authz import allowed
from kjbod.broker.groups.coordinator import coordinator_of, now_ms, resolver
from kjbod.broker.groups.state import JoinResult
from kjbod.broker.router import api
from kjbod.metadata.acls import GROUP, READ
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import JoinGroupRequest, JoinGroupResponse
from kjbod.protocol.generated.join_group_response import JoinGroupResponseMember


def _response(r: JoinResult, version: int) -> JoinGroupResponse:
    name = r.protocol_name if r.protocol_name is not None or version >= 7 else ""
    return JoinGroupResponse(
        error_code=r.error_code, generation_id=r.generation_id, protocol_type=r.protocol_type,
        protocol_name=name, leader=r.leader, member_id=r.member_id, skip_assignment=r.skip_assignment,
        members=[JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=meta)
                 for m, i, meta in r.members])


@api(JoinGroupRequest)
async def handle(node, request, body: JoinGroupRequest) -> JoinGroupResponse:
    v = request.api_version
    coordinator = coordinator_of(node)
    if not allowed(node, request, READ, GROUP, body.group_id):
        return _response(JoinResult(ErrorCode.GROUP_AUTHORIZATION_FAILED, body.member_id), v)
    if body.group_id and (code := coordinator.status(body.group_id)):
        return _response(JoinResult(code, body.member_id), v)
    cg = coordinator.book.consumer_groups.get(body.group_id)
    if cg is not None and not cg.members:
        # an empty consumer-protocol group becomes a classic one (its offsets stay), as in Kafka
        if (code := await coordinator.drop_consumer_group(body.group_id)):
            return _response(JoinResult(code, body.member_id), v)
    elif cg is not None:
        # a consumer-protocol group with members: the classic member joins it (KIP-848's mixed groups)
        book = coordinator.book
        if not book.config.min_session_timeout_ms <= body.session_timeout_ms <= book.config.max_session_timeout_ms:
            return _response(JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, body.member_id), v)
        return _response(await coordinator.classic_join(
            body.group_id, body.member_id, body.group_instance_id, request.client_id, "/" + request.ctx.peer_host,
            body.session_timeout_ms, body.rebalance_timeout_ms if v >= 1 else body.session_timeout_ms,
            body.protocol_type, [(p.name, p.metadata) for p in body.protocols], v >= 4), v)
    fut: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
    coordinator.book.join(
        now_ms(), body.group_id, body.member_id, body.group_instance_id, request.client_id,
        "/" + request.ctx.peer_host, body.session_timeout_ms, body.rebalance_timeout_ms if v >= 1 else -1,
        body.protocol_type, [(p.name, p.metadata) for p in body.protocols], v >= 4,
        resolver(fut), skip_assignment_ok=v >= 9)
    return _response(await fut, v)
