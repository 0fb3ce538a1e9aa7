"""AlterPartition (key 56), versions 0-3, on the controller listener only.

Version notes: v0 baseline (flexible): per partition the leader and partition epochs and the new ISR; v1 adds
LeaderRecoveryState (KIP-704); v2 names topics by id (KIP-841) and may answer INELIGIBLE_REPLICA and
NEW_LEADER_ELECTED; v3 gives each ISR member's broker epoch (KIP-903).

Served by the controller in this process (kjbod.controller.alter_partition: Kafka's checks in Kafka's order).
On a broker listener the connection is closed, as Kafka does for a controller-only API.
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.generated import AlterPartitionRequest, AlterPartitionResponse


@api(AlterPartitionRequest)
def handle(node, request, body: AlterPartitionRequest) -> AlterPartitionResponse:
    return node.controller_call(body, request.api_version)
