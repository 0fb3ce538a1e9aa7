"""One asyncio client connection to one Kafka peer, over the sans-IO `Correlator`.

Strategy:

* An `asyncio.Protocol`: every read goes to the correlator, and each completed response resolves the future that
  `send()` handed out.  Any number of requests may be in flight (pipelining); `send()` writes header and body with
  one `transport.write`.
* `request()` bounds one exchange by a timeout.  A caller that gives up leaves its entry in the FIFO (the correlation
  ids of later responses must still line up; its response is dropped), but a timeout also closes the connection,
  as Kafka's clients do: a peer that stopped answering is not worth queueing behind.
* Any failure of the connection (peer closed, reset, bad frame, undecodable response) fails every pending request
  at once with an error naming host:port, and every later `send()` the same way; callers open a new connection.
* `open()` connects and runs the ApiVersions exchange within `connect_timeout`; `pick_version()` then answers, per
  API, the highest version both sides serve.  Given an `ssl_context` (kjbod.net.tls.client_context: a TLS
  listener of the peer), the connection is TLS, its handshake part of the same timeout; a refused handshake is a
  connection error that says why (a certificate not trusted, a host name that does not match, ...).  Given `sasl`
  credentials (a SASL listener), SaslHandshake v1 and SaslAuthenticate follow the ApiVersions exchange, within the
  same timeout; refused credentials raise `SaslAuthenticationError` (Kafka's code, the peer's message).
* `ReconnectingConnection` keeps one live connection to the first reachable of a list of addresses, opening a new
  one after a failure with exponential backoff and jitter.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import Sequence
from typing import Any, cast

import structlog

from kjbod.net.backoff import ExponentialBackoff
from kjbod.net.correlator import Correlator, VersionNegotiation, api_name, decode_response, pick_version
from kjbod.net.errors import (
    BrokerConnectionError,
    ClientError,
    ProtocolViolation,
    RequestTimeoutError,
    SaslAuthenticationError,
)
from kjbod.net.sasl import SaslAuthenticationFailed, SaslCredentials, plain_client_token
from kjbod.net.scram import MECHANISMS, ScramClient
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import SaslAuthenticateRequest, SaslHandshakeRequest
from kjbod.protocol.headers import API_VERSIONS_KEY
from kjbod.wire.framing import DEFAULT_MAX_FRAME_SIZE

_SASL_HANDSHAKE = 17
_SASL_AUTHENTICATE = 36

__all__ = ["ClientConnection", "ReconnectingConnection", "software_version"]

log = structlog.get_logger("kjbod.net")


def software_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kjbod")
    except PackageNotFoundError:  # running from a source tree without installing
        return "0"


class ClientConnection(asyncio.Protocol):
    """A connected, version-negotiated link to one peer.  Build it with `await ClientConnection.open(...)`."""

    def __init__(self, host: str, port: int, client_id: str, max_frame_size: int, peer_kind: str = "broker",
                 ) -> None:
        self.host = host
        self.peer_kind = peer_kind  # what the peer is, for error messages: "broker" or "controller"
        self.port = port
        self.address = f"{host}:{port}"
        self.client_id = client_id
        # api key -> (min, max) the peer serves, filled by the ApiVersions exchange.
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._loop = asyncio.get_running_loop()
        self._correlator: Correlator[asyncio.Future[bytes]] = Correlator(host, port, client_id, max_frame_size)
        self._transport: asyncio.Transport | None = None
        self._failure: ClientError | None = None
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []

    # ------------------------------------------------------------------------------------------ opening

    @classmethod
    async def open(cls, host: str, port: int, *, client_id: str, connect_timeout: float,
                   software_name: str = "kjbod", max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                   peer_kind: str = "broker", ssl_context: ssl.SSLContext | None = None,
                   sasl: SaslCredentials | None = None) -> ClientConnection:
        """Connects and negotiates API versions, all within `connect_timeout` seconds."""
        loop = asyncio.get_running_loop()
        conn: ClientConnection | None = None
        try:
            async with asyncio.timeout(connect_timeout):
                if ssl_context is None:
                    _, conn = await loop.create_connection(
                        lambda: cls(host, port, client_id, max_frame_size, peer_kind), host, port)
                else:
                    _, conn = await loop.create_connection(
                        lambda: cls(host, port, client_id, max_frame_size, peer_kind), host, port, ssl=ssl_context,
                        server_hostname=host, ssl_handshake_timeout=connect_timeout)
                await conn._negotiate_versions(software_name)
                if sasl is not None:
                    await conn._authenticate(sasl, connect_timeout)
        except TimeoutError:
            if conn is not None:
                conn.close()
            raise BrokerConnectionError(host, port, f"no connection within {connect_timeout:g}s") from None
        except ssl.SSLError as e:
            if conn is not None:
                conn.close()
            raise BrokerConnectionError(host, port, f"TLS handshake failed: {_tls_reason(e)}") from None
        except ssl.CertificateError as e:  # a host name check that failed outside the handshake
            if conn is not None:
                conn.close()
            raise BrokerConnectionError(host, port, f"TLS handshake failed: {e}") from None
        except OSError as e:
            # asyncio words a refused connect "Connect call failed (addr)": the errno says more.
            # A name that does not resolve (socket.gaierror) carries a resolver code, not an errno.
            if isinstance(e, socket.gaierror):
                reason = f"cannot resolve {host!r}: {e.strerror or e}"
            else:
                reason = os.strerror(e.errno) if e.errno else (e.strerror or str(e))
            raise BrokerConnectionError(host, port, reason) from None
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        log.debug("connected", peer=conn.address, apis=len(conn.api_versions))
        return conn

    async def _negotiate_versions(self, software_name: str) -> None:
        negotiation = VersionNegotiation(self.host, self.port, software_name, software_version())
        try:
            while not negotiation.receive(
                    await self.send(API_VERSIONS_KEY, negotiation.version, negotiation.request)):
                pass
        except ProtocolViolation as e:
            self.close(e)
            raise
        assert negotiation.api_versions is not None
        self.api_versions = negotiation.api_versions

    async def _authenticate(self, credentials: SaslCredentials, timeout: float) -> None:
        """SaslHandshake v1 then SaslAuthenticate with the mechanism's tokens (a SASL listener of the peer)."""
        version = self.pick_version(_SASL_HANDSHAKE, min_version=1)
        answer = await self.request(_SASL_HANDSHAKE, version,
                                    SaslHandshakeRequest(mechanism=credentials.mechanism), timeout)
        if answer.error_code != 0:
            error = SaslAuthenticationError(
                self.host, self.port, ErrorCode(answer.error_code),
                f"SASL mechanism {credentials.mechanism} refused (the {self.peer_kind} enables "
                f"{', '.join(answer.mechanisms) or 'none'})")
            self.close(error)
            raise error
        version = self.pick_version(_SASL_AUTHENTICATE)
        scram = MECHANISMS.get(credentials.mechanism)
        client = ScramClient(scram, credentials.username, credentials.password, token=credentials.token) \
            if scram is not None else None
        token = client.first() if client is not None else plain_client_token(credentials.username, credentials.password)
        for step in range(2 if client is not None else 1):
            result = await self.request(_SASL_AUTHENTICATE, version, SaslAuthenticateRequest(auth_bytes=token),
                                        timeout)
            if result.error_code != 0:
                error = SaslAuthenticationError(self.host, self.port, ErrorCode(result.error_code),
                                                result.error_message or ErrorCode(result.error_code).name)
                self.close(error)
                raise error
            if client is not None:
                try:
                    if step == 0:
                        token = client.final(result.auth_bytes)
                    else:
                        client.verify(result.auth_bytes)
                except (SaslAuthenticationFailed, ValueError, KeyError) as e:
                    error = SaslAuthenticationError(self.host, self.port, ErrorCode.SASL_AUTHENTICATION_FAILED,
                                                    f"SCRAM exchange failed: {e}")
                    self.close(error)
                    raise error from None

    # ------------------------------------------------------------------------------------------ requests

    @property
    def closed(self) -> bool:
        return self._failure is not None

    @property
    def in_flight(self) -> int:
        return self._correlator.in_flight

    def pick_version(self, api_key: int, min_version: int | None = None, max_version: int | None = None) -> int:
        """The highest version of `api_key` that both the peer and this codec serve (within the bounds given)."""
        return pick_version(self.api_versions, api_key, self.address, min_version, max_version)

    @property
    def write_paused(self) -> bool:
        """Whether the transport's buffer is full (`request()` then waits for it to drain before its answer)."""
        return self._write_paused

    def send(self, api_key: int, version: int, message: Any, client_id: str | None = None,
             ) -> asyncio.Future[bytes]:
        """Writes one request; the future receives the whole response frame (header included)."""
        future: asyncio.Future[bytes] = self._loop.create_future()
        self.send_to(api_key, version, message, future, client_id)
        return future

    def send_to(self, api_key: int, version: int, message: Any, token: Any, client_id: str | None = None) -> None:
        """`send` with a token of the caller's in place of the future: anything with a future's `done()`,
        `set_result(frame)` and `set_exception(error)`, called in the read callback that completes the response
        (or when the connection fails): the replica fetchers' answers go on from there with no loop pass."""
        if self._failure is not None:
            raise self._failure
        assert self._transport is not None
        self._transport.write(self._correlator.encode_request(api_key, version, message, token, client_id))

    def send_body(self, api_key: int, version: int, body: bytes, token: Any) -> None:
        """`send_to` with the request already written at `version` (Correlator.encode_body)."""
        if self._failure is not None:
            raise self._failure
        assert self._transport is not None
        self._transport.write(self._correlator.encode_body(api_key, version, body, token))

    async def request(self, api_key: int, version: int, message: Any, timeout: float,
                      client_id: str | None = None) -> Any:
        """Sends `message` and returns the decoded response body; raises a ClientError on any failure."""
        future = self.send(api_key, version, message, client_id)
        try:
            if self._write_paused:
                async with asyncio.timeout(timeout):
                    await self._drain()
                    frame = await future
            else:
                # The bound is a timer that fails the future, not a timeout scope: the replica fetchers ask once
                # per replicated batch, and a scope's enter, reschedule and exit cost more than a timer.
                timer = self._loop.call_later(timeout, _time_up, future)
                try:
                    frame = await future
                finally:
                    timer.cancel()
        except TimeoutError:
            error = RequestTimeoutError(
                f"{api_name(api_key)} v{version} to {self.address}: no response within {timeout:.3g}s")
            self.close(BrokerConnectionError(self.host, self.port, "closed after a request timed out"))
            raise error from None
        try:
            return decode_response(frame, api_key, version, self.host, self.port)
        except ProtocolViolation as e:
            self.close(e)
            raise

    # ------------------------------------------------------------------------------------------ closing

    def close(self, reason: ClientError | None = None) -> None:
        """Closes the connection; pending and later requests fail with `reason` (default: "connection closed")."""
        if self._failure is None:
            self._fail(reason or BrokerConnectionError(self.host, self.port, "connection closed by the client"))
        if self._transport is not None:
            self._transport.close()

    def _fail(self, error: ClientError) -> None:
        self._failure = error
        for future in self._correlator.take_pending():
            if not future.done():
                future.set_exception(error)
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_exception(error)
        self._drain_waiters.clear()

    # ------------------------------------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not derive from asyncio's classes (they implement the same methods)
        self._transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._failure is None:
            reason = f"connection closed by the {self.peer_kind}"
            if self.in_flight:
                reason += f" with {self.in_flight} request(s) in flight"
            if exc is not None:
                reason += f" ({exc})"
            self._fail(BrokerConnectionError(self.host, self.port, reason))
            log.debug("connection lost", peer=self.address, reason=reason)

    def data_received(self, data: bytes) -> None:
        try:
            answers = self._correlator.receive_data(data)
        except ProtocolViolation as e:
            self.close(e)
            return
        for future, frame in answers:
            if not future.done():  # a caller that gave up has cancelled its future
                future.set_result(frame)

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost fails what is pending

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def _drain(self) -> None:
        if self._failure is not None:
            raise self._failure
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._drain_waiters.append(waiter)
        await waiter


class ReconnectingConnection:
    """One live `ClientConnection` to the first reachable of `addresses`, reopened with backoff after a failure.

    `get(deadline)` returns the live connection or opens one, trying every address in turn and waiting between
    rounds with exponential backoff and jitter (`backoff`), until the loop time `deadline`; then it raises the
    last connection error, naming every address tried.  A success resets the backoff.
    """

    def __init__(self, addresses: Sequence[tuple[str, int]], *, client_id: str, connect_timeout: float,
                 backoff: ExponentialBackoff, software_name: str = "kjbod",
                 max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, peer_kind: str = "broker",
                 ssl_context: ssl.SSLContext | None = None, sasl: SaslCredentials | None = None) -> None:
        if not addresses:
            raise ValueError("no addresses to connect to")
        self.addresses = list(addresses)
        self.client_id = client_id
        self.connect_timeout = connect_timeout
        self.backoff = backoff
        self.software_name = software_name
        self.max_frame_size = max_frame_size
        self.peer_kind = peer_kind
        self.ssl_context = ssl_context
        self.sasl = sasl
        self._conn: ClientConnection | None = None
        self._next = 0  # index of the address to try first
        self._lock = asyncio.Lock()
        self._closed = False

    @property
    def connection(self) -> ClientConnection | None:
        """The live connection, if there is one."""
        conn = self._conn
        return conn if conn is not None and not conn.closed else None

    def rotate(self) -> None:
        """Drops the live connection and starts the next `get()` at the next address (the peer is not the one
        wanted: NOT_CONTROLLER)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._next = (self._next + 1) % len(self.addresses)

    async def get(self, deadline: float) -> ClientConnection:
        conn = self.connection
        if conn is not None:
            return conn
        loop = asyncio.get_running_loop()
        try:  # another caller may be connecting: wait for it, but not past our own deadline
            async with asyncio.timeout_at(deadline):
                await self._lock.acquire()
        except TimeoutError:
            host, port = self.addresses[self._next]
            raise BrokerConnectionError(host, port, "no connection within the time left") from None
        try:
            while True:
                if self._closed:
                    raise RuntimeError("the connection is closed")
                conn = self.connection
                if conn is not None:
                    return conn
                failures: list[BrokerConnectionError] = []
                for i in range(len(self.addresses)):
                    index = (self._next + i) % len(self.addresses)
                    host, port = self.addresses[index]
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        break
                    try:
                        self._conn = await ClientConnection.open(
                            host, port, client_id=self.client_id,
                            connect_timeout=min(self.connect_timeout, remaining),
                            software_name=self.software_name, max_frame_size=self.max_frame_size,
                            peer_kind=self.peer_kind, ssl_context=self.ssl_context, sasl=self.sasl)
                    except BrokerConnectionError as e:
                        failures.append(e)
                        continue
                    self._next = index
                    self.backoff.reset()
                    return self._conn
                delay = self.backoff.next()
                if loop.time() + delay >= deadline:
                    raise _unreachable(self.addresses, failures)
                log.debug("reconnecting", peers=len(self.addresses), delay=round(delay, 3))
                await asyncio.sleep(delay)
        finally:
            self._lock.release()

    def close(self) -> None:
        self._closed = True
        if self._conn is not None:
            self._conn.close()
            self._conn = None


NO_TIME_LEFT = "no time left to connect"  # an attempt that tried no address: the caller's time ran out first


def _time_up(future: asyncio.Future[bytes]) -> None:
    """A request's timeout (ClientConnection.request): its wait ends with TimeoutError."""
    if not future.done():
        future.set_exception(TimeoutError())


def _unreachable(addresses: Sequence[tuple[str, int]], failures: Sequence[BrokerConnectionError],
                 ) -> BrokerConnectionError:
    if len(failures) == 1:
        return failures[0]
    host, port = addresses[0]
    if not failures:
        return BrokerConnectionError(host, port, NO_TIME_LEFT)
    return BrokerConnectionError(host, port, "no peer reachable; tried " + "; ".join(
        f"{e.host}:{e.port} ({e.reason})" for e in failures))


def _tls_reason(e: ssl.SSLError) -> str:
    if isinstance(e, ssl.SSLCertVerificationError):
        return f"the peer's certificate was refused: {e.verify_message}"
    return str(e.reason or e)
