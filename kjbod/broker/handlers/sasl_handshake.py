"""SaslHandshake (key 17), versions 0-1.

Version notes: v0 is followed by bare SASL tokens, v1 by SaslAuthenticate requests. On a SASL listener the
connection's SASL gate (kjbod.server.sasl_gate) answers it before the client has authenticated; a request that
reaches this module came on a listener without SASL, or after authentication without re-authentication enabled,
and is answered ILLEGAL_SASL_STATE, as Kafka does.
"""

from __future__ import annotations

from kjbod.broker.router import api
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import SaslHandshakeRequest, SaslHandshakeResponse


@api(SaslHandshakeRequest)
def handle(node, request, body: SaslHandshakeRequest) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE)
