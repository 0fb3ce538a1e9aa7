"""ElectLeaders (key 43), versions 0-2, on broker and controller listeners.

Version notes: v0 baseline (KIP-183): preferred-leader elections for the named partitions, or every partition
when TopicPartitions is null; v1 adds ElectionType (KIP-460: 0 PREFERRED, 1 UNCLEAN) and a top-level error code;
v2 is flexible.

The controller runs the elections (kjbod.controller.elections: Kafka's error codes per partition); a broker
listener passes the request to it, as Kafka's brokers forward it.  The answer comes once the new leaders are
in the metadata log.
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.generated import ElectLeadersRequest, ElectLeadersResponse


@api(ElectLeadersRequest)
async def handle(node, request, body: ElectLeadersRequest) -> ElectLeadersResponse:
    return await node.controller_request(body, request.api_version)
