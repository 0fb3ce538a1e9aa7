"""DescribeCluster (key 60), versions 0-2.

Version notes: v0 lists the brokers; v1 adds endpoint_type (1 brokers, 2 controllers; KIP-919): a broker
listener asked for controllers, or a controller listener asked for brokers, answers MISMATCHED_ENDPOINT_TYPE,
and an unknown type UNSUPPORTED_ENDPOINT_TYPE; v2 adds include_fenced_brokers and the is_fenced flag (KIP-1073).

Brokers are the ones registered with the controller: the unfenced ones, and with include_fenced_brokers the
fenced ones too, marked is_fenced.  The controller id is a live broker (this one), as KRaft brokers answer; on a
controller listener it is the active controller (the quorum's leader) and the controllers listed are the voters.
"""

from __future__ import annotations

from kjbod.broker.authz import authorized_operations
from kjbod.broker.router import api
from kjbod.metadata.acls import CLUSTER, CLUSTER_NAME
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import DescribeClusterRequest, DescribeClusterResponse
from kjbod.protocol.generated.describe_cluster_response import DescribeClusterBroker

BROKERS, CONTROLLERS = 1, 2


@api(DescribeClusterRequest)
def handle(node, request, body: DescribeClusterRequest) -> DescribeClusterResponse:
    kind = request.ctx.listener_kind
    etype = body.endpoint_type if request.api_version >= 1 else BROKERS
    if etype not in (BROKERS, CONTROLLERS):
        return DescribeClusterResponse(error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                                       error_message=f"unknown endpoint type {etype}",
                                       endpoint_type=etype, cluster_id=node.cluster_id)
    if (etype == BROKERS) != (kind == "broker"):
        wanted = "brokers" if etype == BROKERS else "controllers"
        return DescribeClusterResponse(error_code=ErrorCode.MISMATCHED_ENDPOINT_TYPE,
                                       error_message=f"this {kind} listener cannot list {wanted}",
                                       endpoint_type=etype, cluster_id=node.cluster_id)
    nodes = node.cluster_nodes(request.ctx.listener_name, controllers=(etype == CONTROLLERS))
    brokers = [DescribeClusterBroker(broker_id=n.node_id, host=n.host, port=n.port, rack=n.rack, is_fenced=False)
               for n in nodes]
    if etype == BROKERS and request.api_version >= 2 and body.include_fenced_brokers:
        for b in sorted(node.metadata.brokers.values(), key=lambda b: b.broker_id):
            e = b.endpoint(request.ctx.listener_name)
            if b.fenced and e is not None:
                brokers.append(DescribeClusterBroker(broker_id=b.broker_id, host=e.host, port=e.port, rack=b.rack,
                                                     is_fenced=True))
        brokers.sort(key=lambda b: b.broker_id)
    response = DescribeClusterResponse(
        error_code=0, endpoint_type=etype, cluster_id=node.cluster_id,
        controller_id=getattr(node, "active_controller_id", node.node_id), brokers=brokers,
    )
    if body.include_cluster_authorized_operations:
        response.cluster_authorized_operations = authorized_operations(node, request, CLUSTER, CLUSTER_NAME)
    return response
