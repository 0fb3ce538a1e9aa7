"""ExpireDelegationToken (key 40), versions 1-2 (Kafka 4.x dropped v0): v2 flexible.

The controller expires the token (kjbod.controller.tokens: a negative period removes it at once, another brings
its expiry nearer); the broker first checks that the client may ask for tokens at all (token_checks).
"""

from __future__ import annotations

from kjbod.broker.handlers.token_checks import forward, forwarded, token_requests_allowed
from kjbod.broker.router import api
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import ExpireDelegationTokenRequest, ExpireDelegationTokenResponse

LATEST = 2


@api(ExpireDelegationTokenRequest)
def handle(node, request, body: ExpireDelegationTokenRequest):
    if not forwarded(node, request, body) and not token_requests_allowed(request.ctx):
        return ExpireDelegationTokenResponse(error_code=ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED,
                                             expiry_timestamp_ms=-1)
    return forward(node, request, body, LATEST)
