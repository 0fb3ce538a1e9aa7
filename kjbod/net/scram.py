"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka runs them: both ends of the exchange and the stored
credential. Sans-IO: messages in, messages out.

Strategy:

* A stored credential is what Kafka's UserScramCredentialRecord holds: the salt, the iteration count, StoredKey
  (H(ClientKey)) and ServerKey, never the password. `credential_from_salted` derives it from the salted password
  (PBKDF2 of the password, which clients compute themselves before AlterUserScramCredentials).
* `ScramServer` takes the client-first message (``n,[a=<authzid>],n=<user>,r=<nonce>[,<extensions>]``), answers
  ``r=<nonce+server nonce>,s=<salt>,i=<iterations>``, then checks the client-final message's channel binding (``biws``:
  no binding), nonce and proof, and answers ``v=<server signature>``. As in Kafka, extensions other than
  ``tokenauth`` are ignored; ``tokenauth=true`` makes the user name a delegation token's id, checked against the
  token's credential (`token_lookup`), and the principal the token's owner. An authorization id must equal the user
  name, and a credential with fewer than 4096 iterations is refused.
* What a failing client is told follows Kafka: a generic ``Authentication failed during authentication due to invalid
  credentials with SASL mechanism <mechanism>`` (it does not say whether the user exists), except for an
  authorization id that differs from the user name, which is named.
* `ScramClient` is kjbod's own client side (broker connections, the admin client).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from kjbod.net.sasl import SaslAuthenticationFailed

__all__ = [
    "MECHANISMS",
    "ScramClient",
    "ScramCredential",
    "ScramMechanism",
    "ScramServer",
    "credential_from_password",
    "credential_from_salted",
    "salted_password",
]


@dataclass(frozen=True)
class ScramMechanism:
    name: str
    hash_name: str
    kafka_type: int  # Kafka's ScramMechanism type byte (UserScramCredentialRecord.Mechanism)
    min_iterations: int = 4096
    max_iterations: int = 16384


MECHANISMS = {
    "SCRAM-SHA-256": ScramMechanism("SCRAM-SHA-256", "sha256", 1),
    "SCRAM-SHA-512": ScramMechanism("SCRAM-SHA-512", "sha512", 2),
}


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _hmac(mechanism: ScramMechanism, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, mechanism.hash_name).digest()


def _h(mechanism: ScramMechanism, data: bytes) -> bytes:
    return hashlib.new(mechanism.hash_name, data).digest()


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)


def credential_from_salted(mechanism: ScramMechanism, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    client_key = _hmac(mechanism, salted, b"Client Key")
    return ScramCredential(salt, _h(mechanism, client_key), _hmac(mechanism, salted, b"Server Key"), iterations)


def credential_from_password(mechanism: ScramMechanism, password: str, salt: bytes,
                             iterations: int) -> ScramCredential:
    return credential_from_salted(mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations)


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        key, equals, value = part.partition("=")
        if not key or not equals:
            raise ValueError(f"invalid attribute {part!r}")
        out.setdefault(key, value)
    return out


def _sasl_name(raw: str) -> str:
    """RFC 5802's saslname: ',' is written =2C and '=' is written =3D; any other '=' is invalid."""
    out, i = [], 0
    while i < len(raw):
        if raw[i] == "=":
            code = raw[i + 1:i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise ValueError("invalid escape in the user name")
            i += 3
        else:
            out.append(raw[i])
            i += 1
    return "".join(out)


def _escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class ScramServer:
    """The server side of one exchange: `evaluate` the client-first, then the client-final message."""

    def __init__(self, mechanism: ScramMechanism, lookup: Callable[[str], ScramCredential | None],
                 nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24), *,
                 token_lookup: Callable[[str], tuple[ScramCredential, str] | None] | None = None) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._token_lookup = token_lookup
        # A delegation token's owner (Type:name) when the client authenticated with a token, else None.
        self.token_owner: str | None = None
        self._nonce = nonce
        self.complete = False
        self.principal: str | None = None
        self._state = "first"
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._full_nonce = ""

    def _failed(self, why: str) -> SaslAuthenticationFailed:
        return SaslAuthenticationFailed(f"Authentication failed during authentication due to invalid credentials "
                                        f"with SASL mechanism {self.mechanism.name}", reason=why)

    def evaluate(self, token: bytes) -> bytes:
        try:
            message = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise self._failed("a message that is not UTF-8") from None
        if self._state == "first":
            return self._first(message)
        if self._state == "final":
            return self._final(message)
        raise self._failed("a message after the exchange ended")

    def _first(self, message: str) -> bytes:
        parts = message.split(",", 2)
        if len(parts) != 3 or parts[0] != "n" or (parts[1] and not parts[1].startswith("a=")):
            raise self._failed("an invalid client-first message (channel binding is not supported)")
        bare = parts[2]
        try:
            attributes = _attributes(bare)
            username = _sasl_name(attributes["n"])
            client_nonce = attributes["r"]
            authzid = _sasl_name(parts[1][2:]) if parts[1] else ""
        except (ValueError, KeyError) as e:
            raise self._failed(f"an invalid client-first message: {e}") from None
        if not bare.startswith("n=") or ",r=" not in bare or not client_nonce:
            raise self._failed("an invalid client-first message")
        token_owner: str | None = None
        if _extension(bare, "tokenauth") == "true":
            found = self._token_lookup(username) if self._token_lookup is not None else None
            if found is None:
                raise self._failed(f"no delegation token {username} (unknown, expired, or tokens are disabled)")
            credential, token_owner = found
        else:
            user_credential = self._lookup(username)
            if user_credential is None:
                raise self._failed(f"no {self.mechanism.name} credential for user {username}")
            credential = user_credential
        if authzid and authzid != username:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username")
        if credential.iterations < self.mechanism.min_iterations:
            raise self._failed(f"iterations {credential.iterations} below the minimum "
                               f"{self.mechanism.min_iterations}")
        self._credential = credential
        self.token_owner = token_owner
        self.principal = token_owner.partition(":")[2] if token_owner is not None else username
        self._client_first_bare = bare
        self._full_nonce = client_nonce + self._nonce()
        self._server_first = (f"r={self._full_nonce},s={base64.b64encode(credential.salt).decode()},"
                              f"i={credential.iterations}")
        self._state = "final"
        return self._server_first.encode()

    def _final(self, message: str) -> bytes:
        credential = self._credential
        assert credential is not None
        try:
            attributes = _attributes(message)
            binding, nonce, proof = attributes["c"], attributes["r"], base64.b64decode(attributes["p"], validate=True)
        except (ValueError, KeyError) as e:
            raise self._failed(f"an invalid client-final message: {e}") from None
        if nonce != self._full_nonce:
            raise self._failed("Invalid client nonce in the final client message.")
        if binding != "biws":  # base64("n,,"): what a client without channel binding and authzid sends
            gs2 = base64.b64decode(binding + "==")[:2] if binding else b""
            if gs2 != b"n,":
                raise self._failed("channel binding is not supported")
        without_proof = message[:message.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        mechanism = self.mechanism
        signature = _hmac(mechanism, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise self._failed("Invalid client credentials")
        client_key = _xor(proof, signature)
        if not hmac.compare_digest(_h(mechanism, client_key), credential.stored_key):
            raise self._failed("Invalid client credentials")
        self._state = "done"
        self.complete = True
        server_signature = _hmac(mechanism, credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)


def _extension(bare: str, name: str) -> str | None:
    """The value of a Kafka extension (``name=value`` after the nonce) in a client-first-message-bare."""
    after_nonce = bare.split(",r=", 1)[1].split(",")[1:]
    for item in after_nonce:
        key, _, value = item.partition("=")
        if key == name:
            return value
    return None


class ScramClient:
    """The client side: `first()`, then `final(server_first)`, then `verify(server_final)`."""

    def __init__(self, mechanism: ScramMechanism, username: str, password: str,
                 nonce: str | None = None, *, token: bool = False) -> None:
        """`token`: authenticate with a delegation token (`username` its id, `password` its HMAC in base64), sent
        as Kafka's ``tokenauth=true`` extension."""
        self.mechanism = mechanism
        self._password = password
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._bare = f"n={_escape(username)},r={self._nonce}" + (",tokenauth=true" if token else "")
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = bytes(server_first).decode("utf-8")
        attributes = _attributes(text)
        nonce, salt, iterations = attributes["r"], base64.b64decode(attributes["s"]), int(attributes["i"])
        if not nonce.startswith(self._nonce) or iterations < self.mechanism.min_iterations:
            raise SaslAuthenticationFailed("the server's SCRAM first message is invalid")
        mechanism = self.mechanism
        salted = salted_password(mechanism, self._password, salt, iterations)
        client_key = _hmac(mechanism, salted, b"Client Key")
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        proof = _xor(client_key, _hmac(mechanism, _h(mechanism, client_key), auth_message))
        self._server_signature = _hmac(mechanism, _hmac(mechanism, salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        attributes = _attributes(bytes(server_final).decode("utf-8"))
        if "e" in attributes:
            raise SaslAuthenticationFailed(f"the server refused: {attributes['e']}")
        if not hmac.compare_digest(base64.b64decode(attributes.get("v", "")), self._server_signature):
            raise SaslAuthenticationFailed("the server's SCRAM signature is invalid")
