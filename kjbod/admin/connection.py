"""One client connection to one broker: framing, correlation, pipelining and ApiVersions negotiation.

Strategy:

* An `asyncio.Protocol` over the sans-IO `FrameDecoder`: every read is fed to the decoder and each complete frame
  answers the oldest request still pending.  Kafka answers the requests of one connection in the order they were
  sent, so pending requests sit in a FIFO and the correlation id only has to be checked, never searched for; a
  mismatch means the byte stream can no longer be trusted and the connection is closed.
* Any number of requests can be in flight (pipelining): `send()` writes header + body with one `transport.write`
  and returns a future that receives the raw response frame.  The caller decodes it (`request()`), so a big
  response is decoded once, by the task that wants it, not inside the event loop's read callback.
* A request whose caller gives up (timeout, cancellation) stays in the FIFO so the correlation ids of later
  responses still line up; its response is dropped when it arrives.  A request that times out closes the
  connection anyway (as Kafka's clients do): a broker that stopped answering is not worth queueing behind.
* Failure of the connection (peer closed, reset, bad frame, undecodable response) fails every pending request at
  once with an error naming host:port, and makes every later `send()` fail the same way; the client opens a new
  connection for its retries.
* Right after connecting, `open()` runs ApiVersions: it asks with the highest version this codec knows and, when
  the broker answers UNSUPPORTED_VERSION (KIP-511: a v0 body listing the broker's own ApiVersions range), asks
  again at the highest version both sides know.  `pick_version()` then chooses, per API, the highest version
  served by both the broker and this codec.
"""

from __future__ import annotations

import asyncio
import struct
from collections import deque
from typing import Any

import structlog

from kjbod.admin.errors import (
    BrokerConnectionError,
    BrokerResponseError,
    ProtocolViolation,
    RequestTimeoutError,
    UnsupportedVersionError,
)
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated.api_versions_request import ApiVersionsRequest
from kjbod.protocol.generated.api_versions_response import ApiVersionsResponse
from kjbod.protocol.generated.registry import APIS
from kjbod.protocol.generated.request_header import RequestHeader
from kjbod.protocol.generated.response_header import ResponseHeader
from kjbod.protocol.headers import API_VERSIONS_KEY, request_header_version, response_header_version
from kjbod.protocol.runtime import DecodeError, EncodeError
from kjbod.wire.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, FrameError

__all__ = ["BrokerConnection", "CLIENT_SOFTWARE_NAME", "api_name"]

log = structlog.get_logger("kjbod.admin.connection")

CLIENT_SOFTWARE_NAME = "kjbod-admin"
_SIZE = struct.Struct(">i")
_I16_AT = struct.Struct(">h").unpack_from
_CORR_AT = struct.Struct(">i").unpack_from
_MAX_CORRELATION_ID = 0x7FFF_FFFF


def api_name(api_key: int) -> str:
    info = APIS.get(api_key)
    return info.name if info is not None else f"api {api_key}"


def _software_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kjbod")
    except PackageNotFoundError:  # running from a source tree without installing
        return "0"


class BrokerConnection(asyncio.Protocol):
    """A connected, version-negotiated link to one broker.  Build it with `await BrokerConnection.open(...)`."""

    def __init__(self, host: str, port: int, client_id: str, max_frame_size: int) -> None:
        self.host = host
        self.port = port
        self.address = f"{host}:{port}"
        self.client_id = client_id
        # api key -> (min, max) the broker serves, filled by the ApiVersions exchange.
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._loop = asyncio.get_running_loop()
        self._decoder = FrameDecoder(max_frame_size)
        self._pending: deque[tuple[int, asyncio.Future[bytes]]] = deque()
        self._next_correlation_id = 0
        self._transport: asyncio.Transport | None = None
        self._failure: Exception | None = None
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []

    # ------------------------------------------------------------------------------------------ opening

    @classmethod
    async def open(cls, host: str, port: int, *, client_id: str, connect_timeout: float,
                   max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> BrokerConnection:
        """Connects and negotiates API versions, all within `connect_timeout` seconds."""
        loop = asyncio.get_running_loop()
        conn: BrokerConnection | None = None
        try:
            async with asyncio.timeout(connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: cls(host, port, client_id, max_frame_size), host, port)
                await conn._negotiate_versions()
        except TimeoutError:
            if conn is not None:
                conn.close()
            raise BrokerConnectionError(host, port, f"no connection within {connect_timeout:g}s") from None
        except OSError as e:
            raise BrokerConnectionError(host, port, e.strerror or str(e)) from None
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        log.debug("connected", broker=conn.address, apis=len(conn.api_versions))
        return conn

    async def _negotiate_versions(self) -> None:
        version = ApiVersionsRequest.MAX_VERSION
        request = ApiVersionsRequest(client_software_name=CLIENT_SOFTWARE_NAME,
                                     client_software_version=_software_version())
        while True:
            frame = await self.send(API_VERSIONS_KEY, version, request)
            # The ApiVersions response header is always v0 (4 bytes), and ErrorCode is the body's first field at
            # every version, so the code can be read before knowing which version the body was written in.
            code = _I16_AT(frame, 4)[0] if len(frame) >= 6 else None
            if code == ErrorCode.UNSUPPORTED_VERSION:
                # KIP-511: the broker answered with a v0 body that lists the ApiVersions range it serves.
                body = self._decode_body(frame, 4, ApiVersionsResponse, 0, API_VERSIONS_KEY)
                ranges = {k.api_key: k.max_version for k in body.api_keys}
                broker_max = ranges.get(API_VERSIONS_KEY)
                if broker_max is None or broker_max >= version or broker_max < ApiVersionsRequest.MIN_VERSION:
                    raise UnsupportedVersionError(f"{self.address} refused ApiVersions v{version}")
                version = broker_max
                continue
            body = self._decode_body(frame, 4, ApiVersionsResponse, version, API_VERSIONS_KEY)
            if body.error_code:
                raise BrokerResponseError(body.error_code, api="ApiVersions", broker=self.address)
            self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
            return

    # ------------------------------------------------------------------------------------------ requests

    @property
    def closed(self) -> bool:
        return self._failure is not None

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def pick_version(self, api_key: int, min_version: int | None = None, max_version: int | None = None) -> int:
        """The highest version of `api_key` that both the broker and this codec serve (within the bounds given)."""
        info = APIS[api_key]
        lo = info.min_version if min_version is None else max(min_version, info.min_version)
        hi = info.max_version if max_version is None else min(max_version, info.max_version)
        served = self.api_versions.get(api_key)
        if served is None:
            raise UnsupportedVersionError(f"{self.address} does not serve {info.name} (api key {api_key})")
        version = min(hi, served[1])
        if version < max(lo, served[0]):
            raise UnsupportedVersionError(
                f"{self.address} serves {info.name} v{served[0]}-v{served[1]}; this client speaks v{lo}-v{hi}")
        return version

    def send(self, api_key: int, version: int, message: Any) -> asyncio.Future[bytes]:
        """Writes one request; the future receives the whole response frame (header included)."""
        if self._failure is not None:
            raise self._failure
        assert self._transport is not None
        correlation_id = self._next_correlation_id
        self._next_correlation_id = 0 if correlation_id == _MAX_CORRELATION_ID else correlation_id + 1
        parts: list = [b"", RequestHeader(api_key, version, correlation_id, self.client_id).encode(
            request_header_version(api_key, version))]
        try:
            message.encode_into(parts, version)
        except EncodeError as e:
            # A value the caller passed cannot be written at this version: the connection is still fine.
            raise ValueError(f"cannot encode {api_name(api_key)} v{version}: {e}") from None
        size = 0
        for part in parts:
            size += len(part)
        parts[0] = _SIZE.pack(size)
        future: asyncio.Future[bytes] = self._loop.create_future()
        self._pending.append((correlation_id, future))
        self._transport.write(b"".join(parts))
        return future

    async def request(self, api_key: int, version: int, message: Any, timeout: float) -> Any:
        """Sends `message` and returns the decoded response body; raises an AdminError on any failure."""
        future = self.send(api_key, version, message)
        try:
            async with asyncio.timeout(timeout):
                if self._write_paused:
                    await self._drain()
                frame = await future
        except TimeoutError:
            error = RequestTimeoutError(
                f"{api_name(api_key)} v{version} to {self.address}: no response within {timeout:.3g}s")
            self.close(BrokerConnectionError(self.host, self.port, "closed after a request timed out"))
            raise error from None
        header_version = response_header_version(api_key, version)
        if header_version == 0:
            position = 4
        else:
            try:
                _, position = ResponseHeader.decode_from(frame, 0, header_version)
            except DecodeError as e:
                raise self._violation(f"bad {api_name(api_key)} response header: {e}") from None
        return self._decode_body(frame, position, APIS[api_key].response, version, api_key)

    def _decode_body(self, frame: bytes, position: int, cls: Any, version: int, api_key: int) -> Any:
        try:
            body, end = cls.decode_from(frame, position, version)
        except DecodeError as e:
            raise self._violation(f"undecodable {api_name(api_key)} v{version} response: {e}") from None
        if end != len(frame):
            raise self._violation(
                f"{api_name(api_key)} v{version} response has {len(frame) - end} bytes after the body")
        return body

    def _violation(self, reason: str) -> ProtocolViolation:
        error = ProtocolViolation(self.host, self.port, reason)
        self.close(error)
        return error

    # ------------------------------------------------------------------------------------------ closing

    def close(self, reason: Exception | None = None) -> None:
        """Closes the connection; pending and later requests fail with `reason` (default: "connection closed")."""
        if self._failure is None:
            self._fail(reason or BrokerConnectionError(self.host, self.port, "connection closed by the client"))
        if self._transport is not None:
            self._transport.close()

    def _fail(self, error: Exception) -> None:
        self._failure = error
        pending, self._pending = self._pending, deque()
        for _, future in pending:
            if not future.done():
                future.set_exception(error)
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_exception(error)
        self._drain_waiters.clear()

    # ------------------------------------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if self._failure is None:
            reason = "connection closed by the broker"
            if self._pending:
                reason += f" with {len(self._pending)} request(s) in flight"
            if exc is not None:
                reason += f" ({exc})"
            self._fail(BrokerConnectionError(self.host, self.port, reason))
            log.debug("connection lost", broker=self.address, reason=reason)

    def data_received(self, data: bytes) -> None:
        try:
            self._decoder.feed(data)
            frames = list(self._decoder.frames())
        except FrameError as e:
            self.close(ProtocolViolation(self.host, self.port, f"bad response frame: {e}"))
            return
        pending = self._pending
        for frame in frames:
            if len(frame) < 4:
                self.close(ProtocolViolation(self.host, self.port, f"response of {len(frame)} bytes"))
                return
            if not pending:
                self.close(ProtocolViolation(self.host, self.port, "response to no request"))
                return
            expected, future = pending.popleft()
            (correlation_id,) = _CORR_AT(frame, 0)
            if correlation_id != expected:
                pending.appendleft((expected, future))
                self.close(ProtocolViolation(
                    self.host, self.port, f"response correlation id {correlation_id}, expected {expected}"))
                return
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
