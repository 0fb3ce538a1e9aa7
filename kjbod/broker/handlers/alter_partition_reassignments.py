"""AlterPartitionReassignments (key 45), versions 0-1 (KIP-455), on broker and controller listeners.

Version notes: v0 is flexible from the start: target replicas per partition, null cancelling a reassignment in
progress; v1 adds AllowReplicationFactorChange (KIP-860), echoed in the response.

The controller starts, overrides and cancels reassignments (kjbod.controller.reassignment: Kafka's per-partition
codes and messages); a broker listener passes the request to it, as Kafka's brokers forward it.  The answer comes
once the records are in the metadata log.  With `kjbod.extensions.enable` false, kjbod's TargetDirectories tag is
dropped before forwarding, as an Apache Kafka broker ignores a tag it does not know.
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.generated import AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse


@api(AlterPartitionReassignmentsRequest)
async def handle(node, request, body: AlterPartitionReassignmentsRequest) -> AlterPartitionReassignmentsResponse:
    if not getattr(node, "extensions_enabled", True):
        for topic in body.topics:
            for partition in topic.partitions:
                partition.target_directories = []
    return await node.controller_request(body, request.api_version)
