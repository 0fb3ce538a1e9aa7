"""ReassignPartitions (key 10000, a kjbod extension: KIP-179's API), version 0, on broker and controller listeners.

Version notes: v0 (flexible) is the KIP's request: target replicas per partition, validate_only, a throttle in
bytes/s and remove_throttle; kjbod's tagged AllowReplicationFactorChange, Additional and TargetDirectories.

The controller sets the throttle and starts the reassignment in one metadata batch, and removes the throttle as
each partition's reassignment ends (kjbod.controller.throttles); a broker listener passes the request to it, as
for AlterPartitionReassignments.
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.generated import ReassignPartitionsRequest, ReassignPartitionsResponse


@api(ReassignPartitionsRequest)
async def handle(node, request, body: ReassignPartitionsRequest) -> ReassignPartitionsResponse:
    return await node.controller_request(body, request.api_version)
