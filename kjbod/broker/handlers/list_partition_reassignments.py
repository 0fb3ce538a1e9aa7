"""ListPartitionReassignments (key 46), version 0 (KIP-455), on broker and controller listeners.

Version notes: v0 is flexible: the named partitions, or every reassignment in progress when Topics is null.

The controller answers from its image (kjbod.controller.reassignment: unknown or idle partitions left out without
an error); a broker listener passes the request to it, as Kafka's brokers forward it.
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.generated import ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse


@api(ListPartitionReassignmentsRequest)
async def handle(node, request, body: ListPartitionReassignmentsRequest) -> ListPartitionReassignmentsResponse:
    return await node.controller_request(body, request.api_version)
