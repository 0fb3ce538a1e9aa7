"""BrokerRegistration (key 62), versions 0-4, on the controller listener only.

Version notes: v0 baseline (id, cluster id, incarnation, listeners, features, rack); v1 the ZooKeeper migration
flag; v2 LogDirs (KIP-858); v3 PreviousBrokerEpoch; v4 only changes which features a broker sends.

Served by the controller in this process (kjbod.controller.cluster_control: Kafka's checks in Kafka's order,
the epoch is the offset of the registration record); answered once the record is durable.  On a broker
listener the connection is closed, as Kafka does for a controller-only API.
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.generated import BrokerRegistrationRequest, BrokerRegistrationResponse


@api(BrokerRegistrationRequest)
def handle(node, request, body: BrokerRegistrationRequest) -> BrokerRegistrationResponse:
    return node.controller_call(body, request.api_version)
