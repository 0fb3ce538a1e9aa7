"""BrokerHeartbeat (key 63), versions 0-2, on the controller listener only.

Version notes: v0 baseline (epoch, metadata offset, WantFence, WantShutDown); v1 OfflineLogDirs (KIP-858,
tagged); v2 CordonedLogDirs (KIP-1066, tagged, null until the broker has caught up).  The response is the same
in every version.

Served by the controller in this process (kjbod.controller.heartbeats: Kafka's state table, fencing, controlled
shutdown, offline dirs, cordoned dirs from metadata.version 4.3-IV0; a stale epoch answers
STALE_BROKER_EPOCH).  On a broker listener the connection is
closed, as Kafka does for a controller-only API.
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.generated import BrokerHeartbeatRequest, BrokerHeartbeatResponse


@api(BrokerHeartbeatRequest)
def handle(node, request, body: BrokerHeartbeatRequest) -> BrokerHeartbeatResponse:
    return node.controller_call(body, request.api_version)
