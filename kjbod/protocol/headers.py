"""Request and response headers: which header version goes with which API version, and fast (de)serialisation.

Kafka picks the header version from the API's flexible versions: request header v2 and response header v1 for
flexible API versions, v1 and v0 otherwise.  The one exception is ApiVersions, whose response header is always
v0 so that a client can read the broker's answer before it knows which versions the broker speaks (KIP-511).
The request header's ClientId stays an int16-length string even in v2, so any broker can parse any header.
"""

from __future__ import annotations

import struct

from kjbod.protocol.generated.registry import APIS
from kjbod.protocol.generated.request_header import RequestHeader
from kjbod.protocol.runtime import DecodeError

API_VERSIONS_KEY = 18

_KEY_VERSION = struct.Struct(">hh")
_CORR = struct.Struct(">i")
_CORR_TAGS = struct.Struct(">iB")
_I16 = struct.Struct(">h")


def request_header_version(api_key: int, api_version: int) -> int:
    info = APIS.get(api_key)
    if info is not None and info.first_flexible is not None and api_version >= info.first_flexible:
        return 2
    return 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == API_VERSIONS_KEY:
        return 0
    info = APIS.get(api_key)
    if info is not None and info.first_flexible is not None and api_version >= info.first_flexible:
        return 1
    return 0


def peek_api(frame) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the first 8 bytes, before knowing the header version."""
    if len(frame) < 8:
        raise DecodeError(f"request of {len(frame)} bytes is too short for a request header")
    key, version = _KEY_VERSION.unpack_from(frame, 0)
    (corr,) = _CORR.unpack_from(frame, 4)
    return key, version, corr


def peek_client_id(frame) -> str | None:
    """The request's client id, read without knowing the API (every header version keeps it an int16-length
    string right after the correlation id); None when absent, null or unreadable.  For logs about requests
    that are refused before their header is decoded."""
    if len(frame) < 10:
        return None
    (n,) = _I16.unpack_from(frame, 8)
    if n < 0 or len(frame) < 10 + n:
        return None
    return bytes(frame[10:10 + n]).decode("utf-8", "replace")


def decode_request_header(frame, api_key: int, api_version: int) -> tuple[RequestHeader, int]:
    """Decodes the header; returns it and the offset where the body starts.  A null client id becomes ""."""
    header, pos = RequestHeader.decode_from(frame, 0, request_header_version(api_key, api_version))
    if header.client_id is None:
        header.client_id = ""
    return header, pos


def read_request_header(frame, header_version: int) -> tuple[str, int]:
    """(client id, offset of the body) for a request whose header version is known: the router's fast path.

    Reads the client id in place and, in header v2, expects the usual empty tagged-field section; anything
    else (null or odd client id bytes, header tags, a frame too short) goes through the generated decoder, so
    the result and the errors are those of `decode_request_header`.  A null client id becomes "".
    """
    if header_version >= 1 and len(frame) >= 10:
        (n,) = _I16.unpack_from(frame, 8)
        end = 10 + n
        if n >= 0 and len(frame) > end:
            try:
                client_id = str(frame[10:end], "utf-8")
            except UnicodeDecodeError:
                pass
            else:
                if header_version == 1:
                    return client_id, end
                if frame[end] == 0:
                    return client_id, end + 1
    header, pos = RequestHeader.decode_from(frame, 0, header_version)
    return ("" if header.client_id is None else header.client_id), pos


def response_header(correlation_id: int, header_version: int) -> bytes:
    if header_version == 0:
        return _CORR.pack(correlation_id)
    return _CORR_TAGS.pack(correlation_id, 0)


def encode_response(api_key: int, api_version: int, correlation_id: int, msg) -> list:
    """Response header + body as a list of parts (bytes, or file regions inside records fields)."""
    out = [response_header(correlation_id, response_header_version(api_key, api_version))]
    msg.encode_into(out, api_version)
    return out
