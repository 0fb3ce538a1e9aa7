"""UnregisterBroker (key 64), version 0, on broker and controller listeners.

Version notes: v0 only (flexible).  The controller in this process removes the registration (unknown id:
BROKER_ID_NOT_REGISTERED), taking the broker out of every ISR first; a broker listener passes the request to
it, as Kafka's brokers forward it.
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.generated import UnregisterBrokerRequest, UnregisterBrokerResponse


@api(UnregisterBrokerRequest)
def handle(node, request, body: UnregisterBrokerRequest) -> UnregisterBrokerResponse:
    return node.controller_call(body, request.api_version)
