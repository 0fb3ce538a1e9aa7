"""The SCRAM credentials of delegation tokens, for the SASL gate: a client that authenticates with the
``tokenauth=true`` extension names a token id as its user and gives the token's HMAC (base64) as its password.

Strategy: the credential is derived from that password, with a fresh salt and Kafka's minimum iterations (4096),
the first time a token is used on this node, and kept while the token's record stays the same (a renewal makes a
new record, and so a new credential). An expired token has no credential, whether or not the controller's sweep
has removed it yet.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable

from kjbod.metadata.image import MetadataImage, TokenEntry
from kjbod.metadata.tokens import token_hmac
from kjbod.net.scram import MECHANISMS, ScramCredential, credential_from_salted, salted_password

__all__ = ["TokenCredentials"]

_CACHE_LIMIT = 10_000


class TokenCredentials:
    """SCRAM credentials of the tokens in a node's image, made on first use: `lookup(token_id, mechanism_type)`
    gives (credential, owner principal) or None for a token that does not exist, has expired or when tokens are
    off. `image` and `clock_ms` are read at each call."""

    def __init__(self, image: Callable[[], MetadataImage | None], secret: str,
                 clock_ms: Callable[[], int]) -> None:
        self._image = image
        self._secret = secret
        self._clock_ms = clock_ms
        self._cache: dict[tuple[str, int], tuple[TokenEntry, ScramCredential]] = {}

    def lookup(self, token_id: str, mechanism_type: int) -> tuple[ScramCredential, str] | None:
        if not self._secret:
            return None
        image = self._image()
        token = image.tokens.get(token_id) if image is not None else None
        if token is None:
            self._cache.pop((token_id, mechanism_type), None)
            return None
        now = self._clock_ms()
        if token.expiration_timestamp < now or token.max_timestamp < now:
            return None
        cached = self._cache.get((token_id, mechanism_type))
        if cached is not None and cached[0] == token:
            return cached[1], token.owner
        mechanism = next((m for m in MECHANISMS.values() if m.kafka_type == mechanism_type), None)
        if mechanism is None:
            return None
        password = base64.b64encode(token_hmac(self._secret, token_id)).decode()
        salt = os.urandom(16)
        salted = salted_password(mechanism, password, salt, mechanism.min_iterations)
        credential = credential_from_salted(mechanism, salted, salt, mechanism.min_iterations)
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[(token_id, mechanism_type)] = (token, credential)
        return credential, token.owner
