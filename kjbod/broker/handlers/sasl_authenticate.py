"""SaslAuthenticate (key 36), versions 0-2.

Version notes: v1 adds session_lifetime_ms to the response, v2 is flexible. Before authentication the connection's
SASL gate (kjbod.server.sasl_gate) answers it; a request that reaches this module came on a listener without SASL or
after authentication, and is answered ILLEGAL_SASL_STATE with Kafka's message.
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import SaslAuthenticateRequest, SaslAuthenticateResponse


@api(SaslAuthenticateRequest)
def handle(node, request, body: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                    error_message="SaslAuthenticate request received after successful authentication")
