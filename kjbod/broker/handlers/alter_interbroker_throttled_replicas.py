"""AlterInterbrokerThrottledReplicas (key 10002, a kjbod extension: KIP-179's API), version 0, on broker and
controller listeners.

Version notes: v0 (flexible) is the KIP's request, with leaders and followers per partition as the KIP's
ThrottledReplicas has them, remove_throttle, validate_only.

The controller merges the entries into the topics' `leader/follower.replication.throttled.replicas` and, with
remove_throttle, removes the ones it added when the partition's reassignment ends (kjbod.controller.throttles);
a broker listener passes the request to it.
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.generated import (
    AlterInterbrokerThrottledReplicasRequest,
    AlterInterbrokerThrottledReplicasResponse,
)


@api(AlterInterbrokerThrottledReplicasRequest)
async def handle(node, request,
                 body: AlterInterbrokerThrottledReplicasRequest) -> AlterInterbrokerThrottledReplicasResponse:
    return await node.controller_request(body, request.api_version)
