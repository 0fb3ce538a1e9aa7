"""AssignReplicasToDirs (key 73), version 0, on the controller listener only.

Version notes: v0 baseline (KIP-858, flexible): the broker's id and epoch, then directory → topic id →
partitions; the response answers each partition, with a top-level code for the whole request.

Served by the controller in this process (kjbod.controller.directories: Kafka's checks in Kafka's order, a
Directories change per placed replica, leader/ISR changes for replicas placed in an offline dir).  On a broker
listener the connection is closed, as Kafka does for a controller-only API.
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.generated import AssignReplicasToDirsRequest, AssignReplicasToDirsResponse


@api(AssignReplicasToDirsRequest)
def handle(node, request, body: AssignReplicasToDirsRequest) -> AssignReplicasToDirsResponse:
    return node.controller_call(body, request.api_version)
