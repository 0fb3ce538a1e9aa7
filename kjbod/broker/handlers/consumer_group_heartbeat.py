"""ConsumerGroupHeartbeat (key 68), versions 0-1.

Version notes: v0 the KIP-848 consumer protocol; v1 adds a regex subscription (an empty one clears it;
INVALID_REGULAR_EXPRESSION for one that does not compile) and (KIP-1082) the consumer makes its own member id: an
empty one is INVALID_REQUEST even in a joining heartbeat, where v0 has the coordinator make one.  A joining member
may subscribe to nothing (an empty list or regex); leaving both null is INVALID_REQUEST, as in Kafka 4.  Every
field but the group id, member id and epoch may be left null when unchanged since the last heartbeat.

The group logic is kjbod.broker.groups.consumer's; the coordinator writes the group's changed records to its
`__consumer_offsets` partition and answers once they are committed.  READ on the group is needed
(GROUP_AUTHORIZATION_FAILED otherwise), as in Kafka.  While the cluster's group.version is 0 the protocol is off
and every heartbeat answers UNSUPPORTED_VERSION, as Kafka 4.0's broker answers it.
"""

from __future__ import annotations

from kjbod.broker.authz import allowed
from kjbod.broker.groups.consumer import MemberHeartbeat
from kjbod.broker.groups.coordinator import coordinator_of
from kjbod.broker.router import api
from kjbod.metadata import features
from kjbod.metadata.acls import GROUP, READ
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
from kjbod.protocol.generated.consumer_group_heartbeat_response import Assignment, TopicPartitions


@api(ConsumerGroupHeartbeatRequest)
async def handle(node, request, body: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
    if not features.consumer_protocol_enabled(node.metadata):
        return ConsumerGroupHeartbeatResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, error_message=(
            "The consumer group protocol is off: the cluster's group.version is 0 (kjbod features upgrade "
            "--feature group.version=1 turns it on)"))
    coordinator = coordinator_of(node)
    if not allowed(node, request, READ, GROUP, body.group_id):
        return ConsumerGroupHeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if body.group_id and (code := coordinator.status(body.group_id)):
        return ConsumerGroupHeartbeatResponse(error_code=code)
    owned = None if body.topic_partitions is None else {
        t.topic_id: frozenset(t.partitions) for t in body.topic_partitions}
    ctx = getattr(request, "ctx", None)
    result = await coordinator.consumer_heartbeat(MemberHeartbeat(
        group_id=body.group_id, member_id=body.member_id, member_epoch=body.member_epoch,
        instance_id=body.instance_id, rack_id=body.rack_id, rebalance_timeout_ms=body.rebalance_timeout_ms,
        subscribed_topic_names=None if body.subscribed_topic_names is None else tuple(body.subscribed_topic_names),
        subscribed_topic_regex=body.subscribed_topic_regex,
        server_assignor=body.server_assignor, owned=owned, client_id=request.client_id or "",
        client_host="/" + ctx.peer_host if ctx is not None else "", member_id_required=request.api_version >= 1))
    if result.error_code:
        return ConsumerGroupHeartbeatResponse(error_code=result.error_code, error_message=result.error_message)
    assignment = None if result.assignment is None else Assignment(topic_partitions=[
        TopicPartitions(topic_id=tid, partitions=sorted(ps)) for tid, ps in result.assignment.items() if ps])
    return ConsumerGroupHeartbeatResponse(member_id=result.member_id, member_epoch=result.member_epoch,
                                          heartbeat_interval_ms=result.heartbeat_interval_ms, assignment=assignment)
