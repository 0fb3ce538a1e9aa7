"""ControllerRegistration (key 70), version 0, on the controller listener only (KIP-919).

Version notes: v0 baseline (controller id, incarnation id, ZkMigrationReady, listeners, supported features).

Served by the controller in this process (kjbod.controller.cluster_control.register_controller): the active
controller writes one RegisterControllerRecord and answers once it is committed; another voter answers
NOT_CONTROLLER.  On a broker listener the connection is closed, as Kafka does for a controller-only API.
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.generated import ControllerRegistrationRequest, ControllerRegistrationResponse


@api(ControllerRegistrationRequest)
def handle(node, request, body: ControllerRegistrationRequest) -> ControllerRegistrationResponse:
    return node.controller_call(body, request.api_version)
