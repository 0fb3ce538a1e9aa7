"""RenewDelegationToken (key 39), versions 1-2 (Kafka 4.x dropped v0): v2 flexible.

The controller renews the token (kjbod.controller.tokens: found by its HMAC, not expired, asked by its owner or a
renewer); the broker first checks that the client may ask for tokens at all (token_checks).
"""

from __future__ import annotations

from kjbod.broker.handlers.token_checks import forward, forwarded, token_requests_allowed
from kjbod.broker.router import api
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import RenewDelegationTokenRequest, RenewDelegationTokenResponse

LATEST = 2


@api(RenewDelegationTokenRequest)
def handle(node, request, body: RenewDelegationTokenRequest):
    if not forwarded(node, request, body) and not token_requests_allowed(request.ctx):
        return RenewDelegationTokenResponse(error_code=ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED,
                                            expiry_timestamp_ms=-1)
    return forward(node, request, body, LATEST)
