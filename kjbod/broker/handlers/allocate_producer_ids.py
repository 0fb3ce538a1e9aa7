"""AllocateProducerIds (key 67), version 0, on the controller listener only.

Version notes: v0 only (flexible).  The controller in this process hands the asking broker the next block of
producer ids and records it durably first (kjbod.controller.producer_ids); a stale broker epoch answers
STALE_BROKER_EPOCH.
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.generated import AllocateProducerIdsRequest, AllocateProducerIdsResponse


@api(AllocateProducerIdsRequest)
def handle(node, request, body: AllocateProducerIdsRequest) -> AllocateProducerIdsResponse:
    return node.controller_call(body, request.api_version)
