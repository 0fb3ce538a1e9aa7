"""AlterClientQuotas (key 49), versions 0-1 (v1 flexible, the same fields).

The controller owns it (kjbod.controller.client_quotas: Kafka's checks, one ClientQuotaRecord per changed key); a
broker sends the request to it, as Kafka's brokers forward it. The answer comes once the records are durable;
brokers learn the quotas from the metadata log and apply them at once (kjbod.server.client_quotas). With an
authorizer the client needs ALTER_CONFIGS on the cluster (the router checks it).
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.generated import AlterClientQuotasRequest, AlterClientQuotasResponse


@api(AlterClientQuotasRequest)
async def handle(node, request, body: AlterClientQuotasRequest) -> AlterClientQuotasResponse:
    return await node.controller_request(body, request.api_version)
