"""CreateDelegationToken (key 38), versions 1-3 (Kafka 4.x dropped v0): v2 flexible, v3 the owner (a token made for
another principal) and, in the answer, the requester.

The controller makes the token (kjbod.controller.tokens); the broker first checks what Kafka's broker checks: the
client may ask for tokens at all (token_checks), a token for another owner needs CREATE_TOKENS on that owner as a
USER resource (DELEGATION_TOKEN_AUTHORIZATION_FAILED), and renewers are User principals (INVALID_PRINCIPAL_TYPE).
"""

from __future__ import annotations

from kjbod.broker.authz import allowed
from kjbod.broker.handlers.token_checks import forward, forwarded, token_requests_allowed
from kjbod.broker.router import api
from kjbod.metadata.acls import CREATE_TOKENS, USER
from kjbod.metadata.tokens import split_principal
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import CreateDelegationTokenRequest, CreateDelegationTokenResponse

LATEST = 3


@api(CreateDelegationTokenRequest)
async def handle(node, request, body: CreateDelegationTokenRequest) -> CreateDelegationTokenResponse:
    return _for_version(await _answer(node, request, body), request.api_version)


async def _answer(node, request, body: CreateDelegationTokenRequest) -> CreateDelegationTokenResponse:
    if forwarded(node, request, body):
        return await node.controller_request(body, LATEST)
    requester = request.ctx.principal
    owner = f"{body.owner_principal_type or 'User'}:{body.owner_principal_name}" if body.owner_principal_name \
        else requester
    if not token_requests_allowed(request.ctx):
        return _refused(ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, owner, requester)
    if owner != requester and not allowed(node, request, CREATE_TOKENS, USER, owner):
        return _refused(ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED, owner, requester)
    if any(r.principal_type != "User" for r in body.renewers):
        return _refused(ErrorCode.INVALID_PRINCIPAL_TYPE, owner, requester)
    return await forward(node, request, body, LATEST)


def _for_version(response: CreateDelegationTokenResponse, version: int) -> CreateDelegationTokenResponse:
    """Before v3 the answer has no requester."""
    if version < 3:
        response.token_requester_principal_type = response.token_requester_principal_name = ""
    return response


def _refused(code: int, owner: str, requester: str) -> CreateDelegationTokenResponse:
    owner_type, owner_name = split_principal(owner)
    req_type, req_name = split_principal(requester)
    return CreateDelegationTokenResponse(
        error_code=code, principal_type=owner_type, principal_name=owner_name,
        token_requester_principal_type=req_type, token_requester_principal_name=req_name, issue_timestamp_ms=-1,
        expiry_timestamp_ms=-1, max_timestamp_ms=-1, token_id="", hmac=b"")
