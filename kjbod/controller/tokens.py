"""Delegation tokens (KIP-48) on the controller: CreateDelegationToken (38), RenewDelegationToken (39) and
ExpireDelegationToken (40) become DelegationTokenRecord and RemoveDelegationTokenRecord records, and a sweep removes
tokens past their expiry (Kafka's DelegationTokenControlManager, as facts).

Rules:

* Without ``delegation.token.secret.key`` every request answers DELEGATION_TOKEN_AUTH_DISABLED.
* Create: the owner is the request's owner (v3) or the requester; renewers must be User principals
  (INVALID_PRINCIPAL_TYPE). The token lives until now + min(``delegation.token.max.lifetime.ms``, the request's
  max lifetime when positive) at the latest, and expires at now + ``delegation.token.expiry.time.ms`` unless
  renewed (never past its max). Its id is a random UUID; its HMAC is derived from the id (kjbod.metadata.tokens).
* Renew: the token named by its HMAC (DELEGATION_TOKEN_NOT_FOUND), not expired (DELEGATION_TOKEN_EXPIRED), asked
  by its owner or a renewer (DELEGATION_TOKEN_OWNER_MISMATCH); the new expiry is now + min(expiry time, the
  request's period when positive), never past the max.
* Expire: the same checks but expiry; a negative period removes the token at once, another sets its expiry to now
  + period (never past the max).
* Who asks is the requester principal the broker forwarded (kjbod's extension fields); the broker already checked
  what only it can (the connection's authentication, the ACLs).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from kjbod.controller.result import ControllerResult, ControllerSettings
from kjbod.metadata.image import MetadataImage, TokenEntry
from kjbod.metadata.tokens import owner_or_renewer, token_by_hmac, token_hmac
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    CreateDelegationTokenRequest,
    CreateDelegationTokenResponse,
    DelegationTokenRecord,
    ExpireDelegationTokenRequest,
    ExpireDelegationTokenResponse,
    RemoveDelegationTokenRecord,
    RenewDelegationTokenRequest,
    RenewDelegationTokenResponse,
)

__all__ = ["ERROR_TIMESTAMP", "create_token", "expire_token", "expired_tokens", "renew_token", "requester_of",
           "wall_clock_ms"]

ERROR_TIMESTAMP = -1
LONG_MAX = (1 << 63) - 1


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def _plus(now: int, period: int) -> int:
    return LONG_MAX if now > LONG_MAX - period else now + period


def requester_of(req: Any) -> str:
    """The principal a broker forwarded the request for (Type:name); ANONYMOUS when none was given."""
    kind, name = getattr(req, "requester_principal_type", None), getattr(req, "requester_principal_name", None)
    return f"{kind or 'User'}:{name}" if name else "User:ANONYMOUS"


def _record(token: TokenEntry, expiration: int) -> DelegationTokenRecord:
    return DelegationTokenRecord(owner=token.owner, requester=token.requester, renewers=list(token.renewers),
                                 issue_timestamp=token.issue_timestamp, max_timestamp=token.max_timestamp,
                                 expiration_timestamp=expiration, token_id=token.token_id)


def create_token(image: MetadataImage, req: CreateDelegationTokenRequest, settings: ControllerSettings,
                 now: int, new_id: Callable[[], str] = lambda: str(uuid.uuid4())) -> ControllerResult:
    requester = requester_of(req)
    owner = f"{req.owner_principal_type or 'User'}:{req.owner_principal_name}" if req.owner_principal_name \
        else requester
    owner_type, _, owner_name = owner.partition(":")
    req_type, _, req_name = requester.partition(":")
    response = CreateDelegationTokenResponse(
        error_code=0, principal_type=owner_type, principal_name=owner_name, token_requester_principal_type=req_type,
        token_requester_principal_name=req_name, issue_timestamp_ms=ERROR_TIMESTAMP,
        expiry_timestamp_ms=ERROR_TIMESTAMP, max_timestamp_ms=ERROR_TIMESTAMP, token_id="", hmac=b"",
        throttle_time_ms=0)
    secret = settings.delegation_token_secret_key
    if not secret:
        response.error_code = ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
        return ControllerResult([], response)
    if any(r.principal_type != "User" for r in req.renewers):
        response.error_code = ErrorCode.INVALID_PRINCIPAL_TYPE
        return ControllerResult([], response)
    max_life = settings.delegation_token_max_lifetime_ms
    if req.max_lifetime_ms > 0:
        max_life = min(max_life, req.max_lifetime_ms)
    max_ts = _plus(now, max_life)
    expiry = min(max_ts, _plus(now, settings.delegation_token_expiry_time_ms))
    token_id = new_id()
    while token_id in image.tokens:
        token_id = new_id()
    renewers = [f"{r.principal_type}:{r.principal_name}" for r in req.renewers]
    record = DelegationTokenRecord(owner=owner, requester=requester, renewers=renewers, issue_timestamp=now,
                                   max_timestamp=max_ts, expiration_timestamp=expiry, token_id=token_id)
    response.issue_timestamp_ms, response.expiry_timestamp_ms, response.max_timestamp_ms = now, expiry, max_ts
    response.token_id, response.hmac = token_id, token_hmac(secret, token_id)
    return ControllerResult([record], response)


def _token_of(image: MetadataImage, settings: ControllerSettings, req: Any) -> TokenEntry | int:
    """The token a Renew or Expire request names by its HMAC, or the error code: tokens off (no secret), or
    none with that HMAC."""
    secret = settings.delegation_token_secret_key
    if not secret:
        return ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
    token = token_by_hmac(image, secret, bytes(req.hmac))
    return ErrorCode.DELEGATION_TOKEN_NOT_FOUND if token is None else token


def renew_token(image: MetadataImage, req: RenewDelegationTokenRequest, settings: ControllerSettings,
                now: int) -> ControllerResult:
    def answer(code: int, expiry: int = ERROR_TIMESTAMP) -> RenewDelegationTokenResponse:
        return RenewDelegationTokenResponse(error_code=code, expiry_timestamp_ms=expiry, throttle_time_ms=0)

    token = _token_of(image, settings, req)
    if isinstance(token, int):
        return ControllerResult([], answer(token))
    if token.max_timestamp < now or token.expiration_timestamp < now:
        return ControllerResult([], answer(ErrorCode.DELEGATION_TOKEN_EXPIRED))
    if not owner_or_renewer(token, requester_of(req)):
        return ControllerResult([], answer(ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH))
    period = settings.delegation_token_expiry_time_ms
    if req.renew_period_ms > 0:
        period = min(period, req.renew_period_ms)
    expiry = min(token.max_timestamp, _plus(now, period))
    return ControllerResult([_record(token, expiry)], answer(0, expiry))


def expire_token(image: MetadataImage, req: ExpireDelegationTokenRequest, settings: ControllerSettings,
                 now: int) -> ControllerResult:
    def answer(code: int, expiry: int = ERROR_TIMESTAMP) -> ExpireDelegationTokenResponse:
        return ExpireDelegationTokenResponse(error_code=code, expiry_timestamp_ms=expiry, throttle_time_ms=0)

    token = _token_of(image, settings, req)
    if isinstance(token, int):
        return ControllerResult([], answer(token))
    if not owner_or_renewer(token, requester_of(req)):
        return ControllerResult([], answer(ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH))
    if req.expiry_time_period_ms < 0:
        return ControllerResult([RemoveDelegationTokenRecord(token_id=token.token_id)], answer(0, now))
    if token.max_timestamp < now or token.expiration_timestamp < now:
        return ControllerResult([], answer(ErrorCode.DELEGATION_TOKEN_EXPIRED))
    expiry = min(token.max_timestamp, _plus(now, req.expiry_time_period_ms))
    return ControllerResult([_record(token, expiry)], answer(0, expiry))


def expired_tokens(image: MetadataImage, now: int) -> ControllerResult:
    """The sweep: a RemoveDelegationTokenRecord for each token past its expiry or its max."""
    records = [RemoveDelegationTokenRecord(token_id=t.token_id) for _, t in sorted(image.tokens.items())
               if t.max_timestamp < now or t.expiration_timestamp < now]
    return ControllerResult(records, [r.token_id for r in records])
