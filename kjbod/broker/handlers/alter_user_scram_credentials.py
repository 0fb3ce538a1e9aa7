"""AlterUserScramCredentials (key 51), version 0 (flexible).

The controller owns it (kjbod.controller.scram: Kafka's checks, the StoredKey and ServerKey derived from the salted
password the client sends, one record per credential); a broker sends the request to it. The answer comes once
the records are durable; brokers learn the credentials from the metadata log, as every other record.
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.generated import AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse


@api(AlterUserScramCredentialsRequest)
async def handle(node, request, body: AlterUserScramCredentialsRequest) -> AlterUserScramCredentialsResponse:
    return await node.controller_request(body, request.api_version)
