"""BrokerHeartbeat (key 63), versions 0-1, on the controller listener only.

Version notes: v0 baseline (epoch, metadata offset, WantFence, WantShutDown); v1 OfflineLogDirs (KIP-858,
tagged).

Served by the controller in this process (kjbod.controller.heartbeats: Kafka's state table, fencing, controlled
shutdown, offline dirs; a stale epoch answers STALE_BROKER_EPOCH).  On a broker listener the connection is
closed, as Kafka does for a controller-only API.
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.generated import BrokerHeartbeatRequest, BrokerHeartbeatResponse


@api(BrokerHeartbeatRequest)
def handle(node, request, body: BrokerHeartbeatRequest) -> BrokerHeartbeatResponse:
    return node.controller_call(body, request.api_version)
