"""The SASL gate of one connection on a SASL_PLAINTEXT or SASL_SSL listener: it stands between the connection and the
router and lets nothing but the authentication exchange through until the client has authenticated.

Strategy (the states of Kafka's server authenticator, without its GSSAPI fallback for 0.9 clients):

* HANDSHAKE_OR_VERSIONS: ApiVersions (once, answered by the router as on any listener) or SaslHandshake.
  HANDSHAKE: SaslHandshake only. Anything else closes the connection, logged once with the peer and the API.
* SaslHandshake names a mechanism. Not enabled on this listener: UNSUPPORTED_SASL_MECHANISM with the enabled list,
  then the connection closes. Enabled: v1 moves to AUTHENTICATE, where the tokens come in SaslAuthenticate requests;
  v0 moves to RAW_TOKENS, where each frame is a bare token and the answer a bare token (old clients).
* A token that fails answers SASL_AUTHENTICATION_FAILED with the mechanism's message (v0: no answer), then the
  connection closes: the answer goes out first, the close is asked on the next pass of the loop (`close_later`).
  As in Kafka, the answer (and so the close behind it) waits ``connection.failed.authentication.delay.ms``
  (100 ms by default) first, which slows down a client guessing passwords; other connections go on meanwhile.
* AUTHENTICATED: every frame goes to the router. With ``connections.max.reauth.ms`` set, the session lifetime is
  reported in SaslAuthenticate v1+; a client re-authenticates by sending SaslHandshake again (as the same user), and
  a request that arrives after the session expired closes the connection, as Kafka does. Without it, a SaslHandshake
  or SaslAuthenticate goes to the router, whose handlers answer ILLEGAL_SASL_STATE.
* Frames before authentication are limited to ``sasl.server.max.receive.size`` bytes (Kafka's 512 KiB default).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kjbod.net.sasl import PLAIN, PlainServer, SaslAuthenticationFailed, SaslSettings
from kjbod.net.scram import MECHANISMS, ScramCredential, ScramServer
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from kjbod.protocol.generated.registry import APIS
from kjbod.protocol.headers import (
    API_VERSIONS_KEY,
    peek_api,
    read_request_header,
    request_header_version,
    response_header,
    response_header_version,
)
from kjbod.protocol.runtime import DecodeError
from kjbod.server.handler import CloseConnection, RequestContext
from kjbod.server.logging import get_logger

__all__ = ["MAX_RECEIVE_SIZE", "SaslGate"]

log = get_logger("kjbod.server.sasl")

SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
MAX_RECEIVE_SIZE = 524288  # Kafka's sasl.server.max.receive.size default (the key sets a node's own)

HANDSHAKE_OR_VERSIONS, HANDSHAKE, AUTHENTICATE, RAW_TOKENS, AUTHENTICATED, FAILED = (
    "HANDSHAKE_OR_VERSIONS", "HANDSHAKE", "AUTHENTICATE", "RAW_TOKENS", "AUTHENTICATED", "FAILED")


class SaslGate:
    """One connection's authentication state; `handle` has the router's signature and delegates to it once the
    client has authenticated. `on_authenticated` is called each time an exchange succeeds; `close_later(reason)`
    closes the connection after the replies already given are written."""

    def __init__(self, handle: Callable[[Any, RequestContext], Any], settings: SaslSettings, *,
                 close_later: Callable[[str], None], on_authenticated: Callable[[], None] | None = None,
                 scram_credential: Callable[[str, int], ScramCredential | None] | None = None,
                 token_credential: Callable[[str, int], tuple[ScramCredential, str] | None] | None = None,
                 clock: Callable[[], float] = time.monotonic, failure_delay_ms: int = 0,
                 max_receive_size: int = MAX_RECEIVE_SIZE) -> None:
        self._handle = handle
        self.max_receive_size = max_receive_size  # sasl.server.max.receive.size
        self.failure_delay_ms = failure_delay_ms
        self.settings = settings
        self._close_later = close_later
        self._on_authenticated = on_authenticated
        self._clock = clock
        self._scram_credential = scram_credential
        self._token_credential = token_credential
        self.state = HANDSHAKE_OR_VERSIONS
        self.mechanism: str | None = None
        self.principal: str | None = None
        self._ctx: RequestContext | None = None  # the connection's context with the authenticated principal
        self._server: PlainServer | ScramServer | None = None
        self._expires_at: float | None = None  # monotonic seconds; None: never

    @property
    def authenticated(self) -> bool:
        return self.state == AUTHENTICATED

    def handle(self, frame: Any, ctx: RequestContext) -> Any:
        state = self.state
        if state == AUTHENTICATED:
            if self._expires_at is not None:
                return self._authenticated_with_expiry(frame, self._ctx or ctx)
            return self._handle(frame, self._ctx or ctx)
        if len(frame) > self.max_receive_size:
            self._refuse(ctx, f"a {len(frame)}-byte request during SASL authentication (at most "
                              f"{self.max_receive_size} bytes until the client has authenticated: "
                              "sasl.server.max.receive.size)")
        if state == RAW_TOKENS:
            return self._raw_token(bytes(frame), ctx)
        if state == FAILED:
            raise CloseConnection("SASL authentication failed")
        try:
            key, version, corr = peek_api(frame)
        except DecodeError as e:
            self._refuse(ctx, f"undecodable request during SASL authentication: {e}")
        if key == API_VERSIONS_KEY and state == HANDSHAKE_OR_VERSIONS:
            self.state = HANDSHAKE
            return self._handle(frame, ctx)
        if key == SASL_HANDSHAKE_KEY and state in (HANDSHAKE_OR_VERSIONS, HANDSHAKE):
            return self._handshake(frame, version, corr, ctx)
        if key == SASL_AUTHENTICATE_KEY and state == AUTHENTICATE:
            return self._authenticate(frame, version, corr, ctx)
        phase = "SASL authentication" if state == AUTHENTICATE else "SASL handshake"
        self._refuse(ctx, f"unexpected request {_api_name(key)} v{version} during {phase}")

    # -- the exchange ----------------------------------------------------------------------------------------------

    def _body(self, frame: Any, key: int, version: int, cls: Any, ctx: RequestContext) -> Any:
        info = APIS[key]
        if not info.min_version <= version <= info.max_version:
            self._refuse(ctx, f"unsupported version {version} of {info.name} (served: "
                              f"{info.min_version}-{info.max_version})")
        try:
            _, pos = read_request_header(frame, request_header_version(key, version))
            body, _ = cls.decode_from(frame, pos, version)
        except DecodeError as e:
            self._refuse(ctx, f"undecodable {info.name} request: {e}")
        return body

    def _handshake(self, frame: Any, version: int, corr: int, ctx: RequestContext) -> list[bytes]:
        body = self._body(frame, SASL_HANDSHAKE_KEY, version, SaslHandshakeRequest, ctx)
        enabled = list(self.settings.mechanisms)
        mechanism = body.mechanism
        if mechanism not in enabled:
            log.warning("SASL mechanism not enabled; closing the connection", peer=ctx.peer,
                        listener=ctx.listener_name, mechanism=mechanism, enabled=",".join(enabled))
            self._fail("unsupported SASL mechanism")
            return _reply(SASL_HANDSHAKE_KEY, version, corr, SaslHandshakeResponse(
                error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled))
        if self.principal is not None and mechanism != self.mechanism:  # a re-authentication must keep it
            self._fail("SASL mechanism changed during re-authentication")
            return _reply(SASL_HANDSHAKE_KEY, version, corr, SaslHandshakeResponse(
                error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=[self.mechanism or ""]))
        self.mechanism = mechanism
        self._server = self._new_server(mechanism)
        self.state = AUTHENTICATE if version >= 1 else RAW_TOKENS
        return _reply(SASL_HANDSHAKE_KEY, version, corr, SaslHandshakeResponse(error_code=0, mechanisms=enabled))

    def _new_server(self, mechanism: str) -> PlainServer | ScramServer:
        if mechanism == PLAIN:
            return PlainServer(self.settings.users(PLAIN))
        scram = MECHANISMS.get(mechanism)
        if scram is not None:
            lookup, tokens = self._scram_credential, self._token_credential
            return ScramServer(scram, lambda user: lookup(user, scram.kafka_type) if lookup is not None else None,
                               token_lookup=(lambda token_id: tokens(token_id, scram.kafka_type))
                               if tokens is not None else None)
        raise AssertionError(f"mechanism {mechanism} is enabled but not served")  # refused when the config is read

    def _evaluate(self, token: bytes) -> bytes:
        server = self._server
        assert server is not None
        response = server.evaluate(token)
        if server.complete and self.principal is not None and server.principal != self.principal:
            raise SaslAuthenticationFailed(
                f"Cannot change principals during re-authentication from User:{self.principal} to "
                f"User:{server.principal}")
        return response

    def _authenticate(self, frame: Any, version: int, corr: int, ctx: RequestContext) -> Any:
        body = self._body(frame, SASL_AUTHENTICATE_KEY, version, SaslAuthenticateRequest, ctx)
        try:
            token = self._evaluate(bytes(body.auth_bytes))
        except SaslAuthenticationFailed as e:
            log.warning("SASL authentication failed; closing the connection", peer=ctx.peer,
                        listener=ctx.listener_name, mechanism=self.mechanism, error=e.reason,
                        answer_delay_ms=self.failure_delay_ms)
            self._fail("SASL authentication failed")
            return self._delayed(_reply(SASL_AUTHENTICATE_KEY, version, corr, SaslAuthenticateResponse(
                error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(e))))
        lifetime_ms = 0
        assert self._server is not None
        if self._server.complete:
            lifetime_ms = self._complete(ctx)
        return _reply(SASL_AUTHENTICATE_KEY, version, corr, SaslAuthenticateResponse(
            error_code=0, error_message=None, auth_bytes=token, session_lifetime_ms=lifetime_ms))

    def _raw_token(self, token: bytes, ctx: RequestContext) -> bytes:
        try:
            response = self._evaluate(token)
        except SaslAuthenticationFailed as e:
            log.warning("SASL authentication failed; closing the connection", peer=ctx.peer,
                        listener=ctx.listener_name, mechanism=self.mechanism, error=e.reason)
            self.state = FAILED
            raise CloseConnection("SASL authentication failed") from None
        assert self._server is not None
        if self._server.complete:
            self._complete(ctx)
        return response  # written with its 4-byte size, as the raw exchange frames tokens

    def _complete(self, ctx: RequestContext) -> int:
        server = self._server
        assert server is not None
        first = self.principal is None
        self.principal = server.principal
        owner = server.token_owner if isinstance(server, ScramServer) else None
        token = owner is not None
        self._ctx = replace(ctx, principal=owner if owner is not None else f"User:{server.principal}",
                            token_authenticated=token)
        self._server = None
        self.state = AUTHENTICATED
        lifetime_ms = self.settings.max_reauth_ms
        self._expires_at = self._clock() + lifetime_ms / 1000 if lifetime_ms > 0 else None
        log.info("SASL authentication succeeded" if first else "SASL re-authentication succeeded",
                 peer=ctx.peer, listener=ctx.listener_name, mechanism=self.mechanism, principal=self.principal,
                 delegation_token=token)
        if self._on_authenticated is not None:
            self._on_authenticated()
        return lifetime_ms

    def _authenticated_with_expiry(self, frame: Any, ctx: RequestContext) -> Any:
        try:
            key, version, corr = peek_api(frame)
        except DecodeError:
            return self._handle(frame, ctx)  # the router refuses it
        if key == SASL_HANDSHAKE_KEY:  # KIP-368: re-authentication
            self.state = HANDSHAKE
            return self._handshake(frame, version, corr, ctx)
        if self._expires_at is not None and self._clock() >= self._expires_at:
            log.warning("SASL session expired; closing the connection", peer=ctx.peer, listener=ctx.listener_name,
                        principal=self.principal)
            raise CloseConnection("SASL session expired")
        return self._handle(frame, ctx)

    # -- failing -----------------------------------------------------------------------------------------------------

    def _delayed(self, reply: list[bytes]) -> list[bytes] | asyncio.Future[list[bytes]]:
        """`reply`, given failure_delay_ms later (the connection writes replies in order and closes after)."""
        if self.failure_delay_ms <= 0:
            return reply
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[list[bytes]] = loop.create_future()

        def give() -> None:
            if not answer.done():
                answer.set_result(reply)

        timer = loop.call_later(self.failure_delay_ms / 1000, give)
        answer.add_done_callback(lambda _: timer.cancel())  # also when the connection drops it first
        return answer

    def _fail(self, reason: str) -> None:
        self.state = FAILED
        self._close_later(reason)

    def _refuse(self, ctx: RequestContext, reason: str) -> Any:
        self.state = FAILED
        log.warning("closing the connection: not authenticated", reason=reason, peer=ctx.peer,
                    listener=ctx.listener_name)
        raise CloseConnection(reason)


def _api_name(key: int) -> str:
    info = APIS.get(key)
    return info.name if info is not None else f"api key {key}"


def _reply(key: int, version: int, corr: int, response: Any) -> list[bytes]:
    out = [response_header(corr, response_header_version(key, version))]
    response.encode_into(out, version)
    return out
