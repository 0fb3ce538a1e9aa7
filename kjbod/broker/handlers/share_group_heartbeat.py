"""ShareGroupHeartbeat (key 76), version 1.

Version notes: v1 is KIP-932's first stable version (v0 was Kafka 4.0's early access, removed in 4.1).  A member
joins with epoch 0 and its subscription, heartbeats with the epoch it was given (subscription and rack null when
unchanged) and leaves with -1; the answer carries its epoch, the heartbeat interval and, when it changed (or the
request was a full one), the partitions it may fetch from.

The group logic is kjbod.broker.share.groups's; the coordinator writes the group's changed records to its
`__consumer_offsets` partition and answers once they are committed, then initializes the share state of newly
subscribed partitions through the persister.  Kafka's checks, in its order: share.version 0 answers
UNSUPPORTED_VERSION; READ on the group is needed (GROUP_AUTHORIZATION_FAILED); an empty or over-long member id is
INVALID_REQUEST; DESCRIBE on every subscribed topic is needed (TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from kjbod.broker.authz import allowed
from kjbod.broker.groups.coordinator import coordinator_of
from kjbod.broker.router import api
from kjbod.broker.share.groups import MEMBER_ID_MAX_LENGTH, ShareHeartbeat
from kjbod.metadata import features
from kjbod.metadata.acls import DESCRIBE, GROUP, READ, TOPIC
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse
from kjbod.protocol.generated.share_group_heartbeat_response import Assignment, TopicPartitions


@api(ShareGroupHeartbeatRequest)
async def handle(node, request, body: ShareGroupHeartbeatRequest) -> ShareGroupHeartbeatResponse:
    if not features.share_groups_enabled(node.metadata):
        return ShareGroupHeartbeatResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, error_message=(
            "Share groups are off: the cluster's share.version is 0 (kjbod features upgrade --feature "
            "share.version=1 turns them on)"))
    if not allowed(node, request, READ, GROUP, body.group_id):
        return ShareGroupHeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if not body.member_id or len(body.member_id) > MEMBER_ID_MAX_LENGTH:
        return ShareGroupHeartbeatResponse(error_code=ErrorCode.INVALID_REQUEST,
                                           error_message="Invalid member id in the request.")
    if body.subscribed_topic_names and not all(allowed(node, request, DESCRIBE, TOPIC, t)
                                               for t in set(body.subscribed_topic_names)):
        return ShareGroupHeartbeatResponse(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    coordinator = coordinator_of(node)
    if body.group_id and (code := coordinator.status(body.group_id)):
        return ShareGroupHeartbeatResponse(error_code=code)
    ctx = getattr(request, "ctx", None)
    result = await coordinator.share_heartbeat(ShareHeartbeat(
        group_id=body.group_id, member_id=body.member_id, member_epoch=body.member_epoch, rack_id=body.rack_id,
        subscribed_topic_names=None if body.subscribed_topic_names is None else tuple(body.subscribed_topic_names),
        client_id=request.client_id or "", client_host="/" + ctx.peer_host if ctx is not None else ""))
    if result.error_code:
        return ShareGroupHeartbeatResponse(error_code=result.error_code, error_message=result.error_message)
    assignment = None if result.assignment is None else Assignment(topic_partitions=[
        TopicPartitions(topic_id=tid, partitions=sorted(ps))
        for tid, ps in sorted(result.assignment.items(), key=lambda kv: str(kv[0])) if ps])
    return ShareGroupHeartbeatResponse(member_id=result.member_id, member_epoch=result.member_epoch,
                                       heartbeat_interval_ms=result.heartbeat_interval_ms, assignment=assignment)
