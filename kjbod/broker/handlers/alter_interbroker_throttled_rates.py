"""AlterInterbrokerThrottledRates (key 10001, a kjbod extension: KIP-179's API), version 0, on broker and
controller listeners.

Version notes: v0 (flexible) is the KIP's request: leader and follower throttled rates per broker,
remove_throttle, validate_only.

The controller writes the brokers' `leader/follower.replication.throttled.rate` and, with remove_throttle,
removes them once no reassignment involves the broker (kjbod.controller.throttles); a broker listener passes
the request to it.
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.generated import (
    AlterInterbrokerThrottledRatesRequest,
    AlterInterbrokerThrottledRatesResponse,
)


@api(AlterInterbrokerThrottledRatesRequest)
async def handle(node, request, body: AlterInterbrokerThrottledRatesRequest) -> AlterInterbrokerThrottledRatesResponse:
    return await node.controller_request(body, request.api_version)
