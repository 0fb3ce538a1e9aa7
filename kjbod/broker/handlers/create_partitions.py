"""CreatePartitions (key 37), versions 0-3.

Version notes: v0 and v1 are the same request (v1 answers before throttling a quota violation); v2 is flexible;
v3 may answer THROTTLING_QUOTA_EXCEEDED (never here: kjbod has no controller mutation quota).

The controller owns it, as CreateTopics (kjbod.controller.replication_control.create_partitions: Kafka's checks
and the same replica placement); this handler sends the request to it.  The answer comes once the new
partitions' records are durable and this broker has created the replicas it holds of them.
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.generated import CreatePartitionsRequest, CreatePartitionsResponse


@api(CreatePartitionsRequest)
async def handle(node, request, body: CreatePartitionsRequest) -> CreatePartitionsResponse:
    return await node.controller_request(body, request.api_version)
