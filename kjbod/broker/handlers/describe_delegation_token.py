"""DescribeDelegationToken (key 41), versions 1-3 (Kafka 4.x dropped v0): v2 flexible, v3 each token's requester.

Answered from this node's metadata image (kjbod.metadata.tokens), as Kafka's brokers answer it from their token
cache: DELEGATION_TOKEN_REQUEST_NOT_ALLOWED where token requests are (token_checks), DELEGATION_TOKEN_AUTH_DISABLED
without delegation.token.secret.key, else the tokens of the owners asked for (null: all, empty: none) that the
client owns or may renew, may DESCRIBE as a DELEGATION_TOKEN resource, or whose owner it may DESCRIBE_TOKENS on as
a USER resource.
"""

from __future__ import annotations

from kjbod.broker.authz import allowed
from kjbod.broker.handlers.token_checks import token_requests_allowed
from kjbod.broker.router import api
from kjbod.metadata.acls import DELEGATION_TOKEN, DESCRIBE, DESCRIBE_TOKENS, USER
from kjbod.metadata.tokens import describe_tokens, split_principal, token_hmac
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import DescribeDelegationTokenRequest, DescribeDelegationTokenResponse
from kjbod.protocol.generated.describe_delegation_token_response import (
    DescribedDelegationToken,
    DescribedDelegationTokenRenewer,
)


@api(DescribeDelegationTokenRequest)
def handle(node, request, body: DescribeDelegationTokenRequest) -> DescribeDelegationTokenResponse:
    if not token_requests_allowed(request.ctx):
        return DescribeDelegationTokenResponse(error_code=ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
    secret = getattr(node.config, "delegation_token_secret_key", "")
    if not secret:
        return DescribeDelegationTokenResponse(error_code=ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED)
    owners = None if body.owners is None else [f"{o.principal_type}:{o.principal_name}" for o in body.owners]
    found = describe_tokens(
        node.metadata, request.ctx.principal, owners,
        lambda token_id: allowed(node, request, DESCRIBE, DELEGATION_TOKEN, token_id),
        lambda owner: allowed(node, request, DESCRIBE_TOKENS, USER, owner))
    out = []
    for t in found:
        owner_type, owner_name = split_principal(t.owner)
        req_type, req_name = split_principal(t.requester) if request.api_version >= 3 else ("", "")
        out.append(DescribedDelegationToken(
            principal_type=owner_type, principal_name=owner_name, token_requester_principal_type=req_type,
            token_requester_principal_name=req_name, issue_timestamp=t.issue_timestamp,
            expiry_timestamp=t.expiration_timestamp, max_timestamp=t.max_timestamp, token_id=t.token_id,
            hmac=token_hmac(secret, t.token_id),
            renewers=[DescribedDelegationTokenRenewer(principal_type=k, principal_name=n)
                      for k, n in map(split_principal, t.renewers)]))
    return DescribeDelegationTokenResponse(error_code=0, tokens=out)
