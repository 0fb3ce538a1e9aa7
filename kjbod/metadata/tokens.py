"""Delegation tokens (KIP-48) as every node sees them: the HMAC and who may see a token.

Strategy:

* A token is its DelegationTokenRecord in the image (`TokenEntry`, keyed by id). Its HMAC is never stored: it is
  HMAC-SHA512 of the token id (UTF-8) keyed with ``delegation.token.secret.key`` (UTF-8), as Kafka computes it, so
  every node with the same secret derives the same one.
* A client authenticates with a token over SASL/SCRAM (either mechanism): user name the token id, password the
  HMAC in base64, and the ``tokenauth=true`` extension (kjbod.broker.tokens makes the SCRAM credential).
* DescribeDelegationToken (`describe_tokens`) follows Kafka's filter: a null owner list means every token the
  requester may see, an empty one none; a token is listed when it belongs to (or is renewable by) one of the
  owners asked for, and the requester owns or may renew it, may DESCRIBE it as a DELEGATION_TOKEN resource, or
  may DESCRIBE_TOKENS on its owner as a USER resource.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Sequence
from typing import Any

from kjbod.metadata.image import MetadataImage, TokenEntry

__all__ = ["describe_tokens", "owner_or_renewer", "renewer_principals", "split_principal", "token_by_hmac", "token_hmac",
           "token_visible"]


def token_hmac(secret: str, token_id: str) -> bytes:
    """Kafka's HMAC of a token: HMAC-SHA512 over the id, keyed with the secret (both UTF-8)."""
    return hmac.new(secret.encode(), token_id.encode(), hashlib.sha512).digest()


def split_principal(principal: str) -> tuple[str, str]:
    """("User", "alice") for "User:alice"; a principal without a colon is a User."""
    kind, sep, name = principal.partition(":")
    return (kind, name) if sep else ("User", principal)


def token_by_hmac(image: MetadataImage, secret: str, mac: bytes) -> TokenEntry | None:
    """The token whose HMAC is `mac`, or None (compared in constant time per token)."""
    for token in image.tokens.values():
        if hmac.compare_digest(token_hmac(secret, token.token_id), mac):
            return token
    return None


def owner_or_renewer(token: TokenEntry, principal: str) -> bool:
    return principal == token.owner or principal in token.renewers


def token_visible(token: TokenEntry, requester: str, owners: Sequence[str] | None,
                  may_describe_token: Callable[[str], bool], may_describe_owner: Callable[[str], bool]) -> bool:
    if owners is not None and not any(owner_or_renewer(token, o) for o in owners):
        return False
    if owner_or_renewer(token, requester):
        return True
    return may_describe_token(token.token_id) or may_describe_owner(token.owner)


def describe_tokens(image: MetadataImage, requester: str, owners: Sequence[str] | None,
                    may_describe_token: Callable[[str], bool],
                    may_describe_owner: Callable[[str], bool]) -> list[TokenEntry]:
    if owners is not None and not owners:
        return []
    return [t for _, t in sorted(image.tokens.items())
            if token_visible(t, requester, owners, may_describe_token, may_describe_owner)]


def renewer_principals(renewers: Sequence[Any]) -> list[str]:
    return [f"{r.principal_type}:{r.principal_name}" for r in renewers]
