"""ShareAcknowledge (key 79), versions 1-2 (KIP-932).

Version notes: v1 is the first Kafka serves; v2 (KIP-1222) adds IsRenewAck (Renew acknowledgements, type 4,
restart the records' acquisition locks) and AcquisitionLockTimeoutMs in the response.

Acknowledgements without a fetch, on the member's share session (kjbod.broker.share.sessions): epoch 0 is
INVALID_SHARE_SESSION_EPOCH (a ShareAcknowledge cannot open a session), -1 applies the acknowledgements and closes
the session (the member's other acquired records released), any other epoch must be the session's next.  The
checks before it are ShareFetch's (kjbod.broker.handlers.share_fetch): group id, READ on the group, member id;
then READ on each topic, and each partition's outcome: UNKNOWN_TOPIC_ID, NOT_LEADER_OR_FOLLOWER with the leader,
INVALID_REQUEST for malformed batches, INVALID_RECORD_STATE for records not acquired by this member.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from kjbod.broker.authz import allowed
from kjbod.broker.handlers.share_fetch import ack_batches, acknowledge, leader_of, member_id_valid, resolve
from kjbod.broker.router import api
from kjbod.broker.share.fetch import share_leader_of
from kjbod.broker.share.sessions import FINAL_EPOCH, SessionError
from kjbod.metadata.acls import GROUP, READ
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import ShareAcknowledgeRequest, ShareAcknowledgeResponse
from kjbod.protocol.generated.share_acknowledge_response import (
    LeaderIdAndEpoch,
    NodeEndpoint,
    PartitionData,
    ShareAcknowledgeTopicResponse,
)


@api(ShareAcknowledgeRequest)
async def handle(node: Any, request: Any, body: ShareAcknowledgeRequest) -> ShareAcknowledgeResponse:
    version = request.api_version
    leader = share_leader_of(node)
    leader.prune()
    group_id, member_id, epoch = body.group_id, body.member_id, body.share_session_epoch
    if group_id is None:
        return ShareAcknowledgeResponse(error_code=ErrorCode.INVALID_REQUEST,
                                        error_message="Invalid group id in the request.")
    if not allowed(node, request, READ, GROUP, group_id):
        return ShareAcknowledgeResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if not member_id_valid(member_id):
        return ShareAcknowledgeResponse(error_code=ErrorCode.INVALID_REQUEST,
                                        error_message="Invalid member id in the request.")
    assert member_id is not None
    try:
        leader.sessions.for_acknowledge(group_id, member_id, epoch)
    except SessionError as e:
        return ShareAcknowledgeResponse(error_code=e.code, error_message=e.message)
    renew = version >= 2 and body.is_renew_ack
    lock_ms = int(leader.settings(group_id)["share.record.lock.duration.ms"])
    ctx = getattr(request, "ctx", None)
    listener = ctx.listener_name if ctx is not None else ""
    denied: dict[UUID, bool] = {}
    endpoints: dict[int, NodeEndpoint] = {}
    topics = []
    for t in body.topics:
        parts = []
        for p in t.partitions:
            target = resolve(node, request, t.topic_id, p.partition_index, denied)
            target.acks = ack_batches(p.acknowledgement_batches)
            code, message = await acknowledge(leader, group_id, member_id, target, renew=renew)
            part = PartitionData(partition_index=p.partition_index, error_code=code, error_message=message)
            target.error = code
            current = leader_of(node, target, listener, endpoints, NodeEndpoint)
            if current is not None:
                part.current_leader = LeaderIdAndEpoch(leader_id=current[0], leader_epoch=current[1])
            parts.append(part)
        topics.append(ShareAcknowledgeTopicResponse(topic_id=t.topic_id, partitions=parts))
    if epoch == FINAL_EPOCH:
        await leader.close_session(group_id, member_id)
    return ShareAcknowledgeResponse(acquisition_lock_timeout_ms=lock_ms, responses=topics,
                                    node_endpoints=list(endpoints.values()))
