"""The client half of the Kafka protocol, sans-IO: requests out as bytes, bytes in as responses matched to them.

Strategy (h11's shape: no socket, no event loop, the caller moves the bytes):

* `Correlator.encode_request()` writes one request frame (size, request header v1 or v2 by the API's flexible
  versions, body) and remembers (correlation id, api key, version, token).  The token is whatever the I/O layer
  wants back with the response (an asyncio future); the correlator never looks at it.
* `Correlator.receive_data()` takes bytes as they arrive, in any split, and returns (token, frame) for each
  complete response.  Kafka answers the requests of one connection in the order they were sent, so the pending
  requests form a FIFO and a response's correlation id only has to be checked against the oldest one; a mismatch,
  a response to nothing or a bad frame raises `ProtocolViolation`: the stream can no longer be trusted, and the
  I/O layer closes the connection.  Correlation ids wrap at 2**31 - 1 back to 0.  A read that is exactly one
  whole frame answering the oldest request (a replica fetcher's answers, one a read) skips the frame decoder;
  `encode_body()` frames a request already written (the replica fetcher's next fetch, patched from its last).
* `decode_response()` reads the response header (v0 or v1; always v0 for ApiVersions, KIP-511) and the body at the
  request's version, checking that the body ends where the frame does.  It is separate from `receive_data()` so a
  big response is decoded by the task that wants it, not in the read callback.
* Version negotiation is `VersionNegotiation` (ask ApiVersions at the highest version this codec knows; on
  UNSUPPORTED_VERSION the peer's v0 answer names its highest, ask again at that) and `pick_version()` (per API, the
  highest version both sides serve).
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from kjbod.net.errors import BrokerResponseError, ProtocolViolation, UnsupportedVersionError
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated.api_versions_request import ApiVersionsRequest
from kjbod.protocol.generated.api_versions_response import ApiVersionsResponse
from kjbod.protocol.generated.registry import APIS
from kjbod.protocol.generated.request_header import RequestHeader
from kjbod.protocol.generated.response_header import ResponseHeader
from kjbod.protocol.headers import API_VERSIONS_KEY, request_header_version, response_header_version
from kjbod.protocol.runtime import DecodeError, EncodeError
from kjbod.wire.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, FrameError

__all__ = ["Correlator", "PerVersion", "VersionNegotiation", "api_name", "decode_response", "pick_version"]

T = TypeVar("T")
ApiRanges = Mapping[int, tuple[int, int]]

_SIZE = struct.Struct(">i")
_I16_AT = struct.Struct(">h").unpack_from
_CORR_AT = struct.Struct(">i").unpack_from
_TWO_AT = struct.Struct(">ii").unpack_from  # a frame's size and correlation id
_MAX_CORRELATION_ID = 0x7FFF_FFFF


def api_name(api_key: int) -> str:
    info = APIS.get(api_key)
    return info.name if info is not None else f"api {api_key}"


class PerVersion:
    """A request whose content depends on the version it goes out at (chosen later, by negotiation): `build(v)`
    makes the message for version v.  It encodes like a message, so it can be sent wherever one can; `version`
    says which version it last went out at (None before it was sent)."""

    __slots__ = ("build", "version")

    def __init__(self, build: Callable[[int], Any]) -> None:
        self.build = build
        self.version: int | None = None

    def encode(self, version: int) -> bytes:
        data: bytes = self.build(version).encode(version)
        self.version = version
        return data

    def encode_into(self, out: list[Any], version: int) -> None:
        self.build(version).encode_into(out, version)
        self.version = version


class Correlator(Generic[T]):
    """Requests and responses of one connection to `host:port` (used only to name the peer in errors)."""

    __slots__ = ("client_id", "host", "port", "_decoder", "_next_correlation_id", "_pending", "_headers")

    def __init__(self, host: str, port: int, client_id: str | None,
                 max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self._decoder = FrameDecoder(max_frame_size)
        self._pending: deque[tuple[int, T]] = deque()
        self._next_correlation_id = 0
        # (api key, version, client id) -> the request header's bytes before and after the correlation id
        self._headers: dict[tuple[int, int, str | None], tuple[bytes, bytes]] = {}

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def encode_request(self, api_key: int, version: int, message: Any, token: T,
                       client_id: str | None = None) -> bytes:
        """One request frame; `token` comes back with its response.  `client_id` overrides the connection's.

        A message that cannot be written at `version` raises ValueError and leaves nothing pending.
        """
        correlation_id = self._next_correlation_id
        if client_id is None:
            client_id = self.client_id
        header = self._headers.get((api_key, version, client_id))
        if header is None:
            header = self._header(api_key, version, client_id)
        parts: list[Any] = [b"", header[0], _SIZE.pack(correlation_id), header[1]]
        try:
            message.encode_into(parts, version)
        except EncodeError as e:
            raise ValueError(f"cannot encode {api_name(api_key)} v{version}: {e}") from None
        size = 0
        for part in parts:
            size += len(part)
        parts[0] = _SIZE.pack(size)
        self._next_correlation_id = 0 if correlation_id == _MAX_CORRELATION_ID else correlation_id + 1
        self._pending.append((correlation_id, token))
        return b"".join(parts)

    def encode_body(self, api_key: int, version: int, body: bytes, token: T) -> bytes:
        """One request frame around `body`, a request already written at `version` (a replica fetcher's next
        fetch, patched from the last one's bytes: kjbod.net.fetch_fast); otherwise as `encode_request`."""
        correlation_id = self._next_correlation_id
        key = (api_key, version, self.client_id)
        header = self._headers.get(key)
        if header is None:
            header = self._header(*key)
        before, after = header
        self._next_correlation_id = 0 if correlation_id == _MAX_CORRELATION_ID else correlation_id + 1
        self._pending.append((correlation_id, token))
        return b"".join((_SIZE.pack(len(before) + 4 + len(after) + len(body)), before, _SIZE.pack(correlation_id),
                         after, body))

    def _header(self, api_key: int, version: int, client_id: str | None) -> tuple[bytes, bytes]:
        """The generated header's bytes around its correlation id (api key and version before, the client id and
        tagged fields after), kept: a replica fetcher sends the same header but for that id once per batch."""
        whole = RequestHeader(api_key, version, 0, client_id).encode(request_header_version(api_key, version))
        header = self._headers[(api_key, version, client_id)] = (whole[:4], whole[8:])
        return header

    def receive_data(self, data: bytes) -> list[tuple[T, bytes]]:
        """(token, response frame) for every response completed by `data`; raises ProtocolViolation.

        `data` that is one whole frame answering the oldest request, with nothing buffered before it (a
        follower's fetch answer, read at once), is taken here without the frame decoder."""
        pending = self._pending
        if len(data) >= 8 and pending and self._decoder.idle:
            size, correlation_id = _TWO_AT(data, 0)
            if size + 4 == len(data) and size <= self._decoder.max_size and correlation_id == pending[0][0]:
                return [(pending.popleft()[1], data[4:])]
        try:
            self._decoder.feed(data)
            frames = self._decoder.next_frames()
        except FrameError as e:
            raise ProtocolViolation(self.host, self.port, f"bad response frame: {e}") from None
        out: list[tuple[T, bytes]] = []
        for frame in frames:
            if len(frame) < 4:
                raise ProtocolViolation(self.host, self.port, f"response of {len(frame)} bytes")
            if not pending:
                raise ProtocolViolation(self.host, self.port, "response to no request")
            expected, token = pending[0]
            (correlation_id,) = _CORR_AT(frame, 0)
            if correlation_id != expected:
                raise ProtocolViolation(
                    self.host, self.port, f"response correlation id {correlation_id}, expected {expected}")
            pending.popleft()
            out.append((token, frame))
        return out

    def take_pending(self) -> list[T]:
        """Forgets every pending request (the connection is gone) and returns their tokens, oldest first."""
        tokens = [token for _, token in self._pending]
        self._pending.clear()
        return tokens


def decode_response(frame: bytes, api_key: int, version: int, host: str, port: int) -> Any:
    """The response body in `frame` (header included) for a request of `api_key` at `version`."""
    header_version = response_header_version(api_key, version)
    if header_version == 0:
        position = 4
    else:
        try:
            _, position = ResponseHeader.decode_from(frame, 0, header_version)
        except DecodeError as e:
            raise ProtocolViolation(host, port, f"bad {api_name(api_key)} response header: {e}") from None
    return decode_body(frame, position, APIS[api_key].response, version, api_key, host, port)


def decode_body(frame: bytes, position: int, cls: Any, version: int, api_key: int, host: str, port: int) -> Any:
    try:
        body, end = cls.decode_from(frame, position, version)
    except DecodeError as e:
        raise ProtocolViolation(host, port, f"undecodable {api_name(api_key)} v{version} response: {e}") from None
    if end != len(frame):
        raise ProtocolViolation(
            host, port, f"{api_name(api_key)} v{version} response has {len(frame) - end} bytes after the body")
    return body


class VersionNegotiation:
    """The ApiVersions exchange: send `request` at `version`; feed the answer to `receive()` until it is done."""

    def __init__(self, host: str, port: int, software_name: str, software_version: str) -> None:
        self.host = host
        self.port = port
        self.version = ApiVersionsRequest.MAX_VERSION
        self.request = ApiVersionsRequest(client_software_name=software_name,
                                          client_software_version=software_version)
        # api key -> (min, max) the peer serves, once done.
        self.api_versions: dict[int, tuple[int, int]] | None = None

    def receive(self, frame: bytes) -> bool:
        """Reads the answer to the request last sent; True when the ranges are known, False to ask again."""
        # The ApiVersions response header is always v0 (4 bytes) and ErrorCode is the body's first field at every
        # version, so the code can be read before knowing which version the body was written in.
        code = _I16_AT(frame, 4)[0] if len(frame) >= 6 else None
        if code == ErrorCode.UNSUPPORTED_VERSION:
            # KIP-511: the peer answered with a v0 body listing the ApiVersions range it serves.
            body = decode_body(frame, 4, ApiVersionsResponse, 0, API_VERSIONS_KEY, self.host, self.port)
            ranges = {k.api_key: k.max_version for k in body.api_keys}
            peer_max = ranges.get(API_VERSIONS_KEY)
            if peer_max is None or peer_max >= self.version or peer_max < ApiVersionsRequest.MIN_VERSION:
                raise UnsupportedVersionError(f"{self.host}:{self.port} refused ApiVersions v{self.version}")
            self.version = peer_max
            return False
        body = decode_body(frame, 4, ApiVersionsResponse, self.version, API_VERSIONS_KEY, self.host, self.port)
        if body.error_code:
            raise BrokerResponseError(body.error_code, api="ApiVersions", broker=f"{self.host}:{self.port}")
        self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
        return True


def pick_version(api_versions: ApiRanges, api_key: int, peer: str,
                 min_version: int | None = None, max_version: int | None = None) -> int:
    """The highest version of `api_key` served by both `peer` (its ApiVersions ranges) and this codec."""
    info = APIS[api_key]
    lo = info.min_version if min_version is None else max(min_version, info.min_version)
    hi = info.max_version if max_version is None else min(max_version, info.max_version)
    served = api_versions.get(api_key)
    if served is None:
        raise UnsupportedVersionError(f"{peer} does not serve {info.name} (api key {api_key})")
    version = min(hi, served[1])
    if version < max(lo, served[0]):
        raise UnsupportedVersionError(
            f"{peer} serves {info.name} v{served[0]}-v{served[1]}; this client speaks v{lo}-v{hi}")
    return version
