"""Request and response headers: which version goes with which API version, and known frames byte for byte.

Strategy: the header-version rule is checked for every API and version against the schema model (the
message's own flexibleVersions), not against the registry the code reads, so a registry that drifted from the
schemas fails here.  Then frames taken from Kafka's documentation of the wire format (the ApiVersions v3
exchange of KIP-511 and the log-dir examples, each verified with kafka-python) are decoded through the same
calls the server and the admin client use, compared field by field with the expected message, and encoded
back to the same bytes.
"""

from __future__ import annotations

import struct
import uuid

import pytest

from kjbod.protocol.generated.alter_replica_log_dirs_request import AlterReplicaLogDirsRequest
from kjbod.protocol.generated.api_versions_request import ApiVersionsRequest
from kjbod.protocol.generated.api_versions_response import ApiVersionsResponse
from kjbod.protocol.generated.describe_log_dirs_request import DescribeLogDirsRequest
from kjbod.protocol.generated.describe_log_dirs_response import DescribeLogDirsResponse
from kjbod.protocol.generated.registry import APIS
from kjbod.protocol.generated.request_header import RequestHeader
from kjbod.protocol.generated.response_header import ResponseHeader
from kjbod.protocol.headers import (
    decode_request_header,
    encode_response,
    peek_api,
    request_header_version,
    response_header,
    response_header_version,
)
from kjbod.protocol.runtime import DecodeError

from .schema_values import specs

API_VERSIONS = 18


def api_versions():
    out = []
    for info in APIS.values():
        spec = specs()[info.request.__name__]
        out += [(info.name, info.api_key, v, v in spec.flexible) for v in range(spec.valid.lo, spec.valid.hi + 1)]
    return out


@pytest.mark.parametrize("name,api_key,version,flexible", api_versions(),
                         ids=[f"{n}-v{v}" for n, _, v, _ in api_versions()])
def test_header_version_follows_flexible_versions(name, api_key, version, flexible):
    assert request_header_version(api_key, version) == (2 if flexible else 1)
    if api_key == API_VERSIONS:
        # KIP-511: the ApiVersions response header is v0 at every version, so that a client can read the
        # answer before it knows which versions the broker speaks.
        assert response_header_version(api_key, version) == 0
    else:
        assert response_header_version(api_key, version) == (1 if flexible else 0)


def test_header_versions_cover_every_api():
    assert {name for name, *_ in api_versions()} == {info.name for info in APIS.values()}
    assert any(flex for *_, flex in api_versions()) and not all(flex for *_, flex in api_versions())


def test_future_api_versions_request_still_parses():
    # A client probing with an ApiVersions version newer than ours sends header v2; the server must still read
    # it (to answer UNSUPPORTED_VERSION with the v0 body).
    assert request_header_version(API_VERSIONS, 99) == 2
    frame = RequestHeader(API_VERSIONS, 99, 5, "probe").encode(2) + b"\x07future body"
    header, pos = decode_request_header(frame, *peek_api(frame)[:2])
    assert (header.request_api_version, header.client_id, frame[pos:]) == (99, "probe", b"\x07future body")


def test_null_client_id_becomes_empty():
    frame = RequestHeader(3, 1, 9, None).encode(1)
    header, pos = decode_request_header(frame, 3, 1)
    assert header.client_id == "" and pos == len(frame)


def test_client_id_keeps_int16_length_in_header_v2():
    # ClientId overrides flexibleVersions with "none": a broker that cannot parse the rest can still read it.
    assert RequestHeader(18, 3, 1, "cli").encode(2) == bytes.fromhex("0012 0003 00000001 0003636c69 00")
    assert RequestHeader(18, 3, 1, None).encode(2) == bytes.fromhex("0012 0003 00000001 ffff 00")


def test_peek_needs_eight_bytes():
    assert peek_api(bytes.fromhex("0023 0004 00000007")) == (35, 4, 7)
    with pytest.raises(DecodeError):
        peek_api(b"\x00\x23\x00\x04\x00\x00\x00")


def test_response_headers():
    assert response_header(7, 0) == b"\x00\x00\x00\x07"
    assert response_header(7, 1) == b"\x00\x00\x00\x07\x00"
    assert ResponseHeader.decode(b"\x00\x00\x00\x07\x00", 1) == ResponseHeader(correlation_id=7)
    assert ResponseHeader(correlation_id=-1).encode(0) == b"\xff\xff\xff\xff"


# ---------------------------------------------------------------------------------------------- known frames

def unframe(hexstr: str) -> bytes:
    frame = bytes.fromhex(hexstr)
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    return frame[4:]


def check_request(hexstr: str, expected_header: RequestHeader, expected_body) -> None:
    frame = unframe(hexstr)
    key, version, corr = peek_api(frame)
    assert (key, version, corr) == (type(expected_body).API_KEY, expected_header.request_api_version,
                                    expected_header.correlation_id)
    header, pos = decode_request_header(frame, key, version)
    assert header == expected_header
    body = type(expected_body).decode(frame[pos:], version)
    assert body == expected_body
    assert header.encode(request_header_version(key, version)) + body.encode(version) == frame


def check_response(hexstr: str, api_key: int, version: int, correlation_id: int, expected_body) -> None:
    frame = unframe(hexstr)
    hv = response_header_version(api_key, version)
    header, pos = ResponseHeader.decode_from(frame, 0, hv)
    assert header.correlation_id == correlation_id
    body = type(expected_body).decode(frame[pos:], version)
    assert body == expected_body
    assert b"".join(encode_response(api_key, version, correlation_id, body)) == frame


def test_api_versions_v3_request_example():
    check_request(
        "00000017 0012 0003 00000001 0003636c69 00 046b7079 04302e31 00",
        RequestHeader(request_api_key=18, request_api_version=3, correlation_id=1, client_id="cli"),
        ApiVersionsRequest(client_software_name="kpy", client_software_version="0.1"),
    )


def test_api_versions_v3_response_example():
    # Response header v0 (no tagged-field byte after the correlation id) even though the body is flexible.
    check_response(
        "00000013 00000001 0000 02 0012 0000 0004 00 00000000 00",
        API_VERSIONS, 3, 1,
        ApiVersionsResponse(error_code=0, throttle_time_ms=0, api_keys=[
            ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=4)]),
    )


def test_describe_log_dirs_requests_example():
    header = RequestHeader(request_api_key=35, request_api_version=4, correlation_id=7, client_id="cli")
    check_request("00000010 0023 0004 00000007 0003636c69 00 00 00", header, DescribeLogDirsRequest(topics=None))
    header.request_api_version = 1
    check_request("00000011 0023 0001 00000007 0003636c69 ffffffff", header, DescribeLogDirsRequest(topics=None))


def test_alter_replica_log_dirs_request_example():
    check_request(
        "0000001e 0022 0002 00000008 0003636c69 00"
        "02 042f6432 02 0274 0200000000 00 00 00",
        RequestHeader(request_api_key=34, request_api_version=2, correlation_id=8, client_id="cli"),
        AlterReplicaLogDirsRequest(dirs=[AlterReplicaLogDirsRequest.AlterReplicaLogDir(
            path="/d2", topics=[AlterReplicaLogDirsRequest.AlterReplicaLogDirTopic(name="t", partitions=[0])])]),
    )


DESCRIBE_LOG_DIRS_V4_RESPONSE = (
    "0000003f 00000007 00"
    "00000000 0000 02"
    "0000 042f6431 02"
    "0274 02 00000000 0000000000000400 0000000000000000 00 00 00"
    "000000003b9aca00 000000001dcd6500 00"
    "00"
)


def log_dirs_v4_body() -> DescribeLogDirsResponse:
    R = DescribeLogDirsResponse
    return R(throttle_time_ms=0, error_code=0, results=[R.DescribeLogDirsResult(
        error_code=0, log_dir="/d1", total_bytes=10**9, usable_bytes=5 * 10**8,
        topics=[R.DescribeLogDirsTopic(name="t", partitions=[R.DescribeLogDirsPartition(
            partition_index=0, partition_size=1024, offset_lag=0, is_future_key=False)])])])


def test_describe_log_dirs_v4_response_example():
    check_response(DESCRIBE_LOG_DIRS_V4_RESPONSE, 35, 4, 7, log_dirs_v4_body())


def test_directory_id_extension_is_one_more_tag_in_that_frame():
    # kjbod's DirectoryId (tag 10000 = varint 90 4e, 16 bytes) goes into the log dir's tagged section only,
    # so a client that skips unknown tags reads the frame above.
    msg = log_dirs_v4_body()
    dir_id = uuid.UUID(int=0x0102030405060708090A0B0C0D0E0F10)
    msg.results[0].directory_id = dir_id
    plain = unframe(DESCRIBE_LOG_DIRS_V4_RESPONSE)[5:]
    result_tags = plain.index(bytes.fromhex("000000001dcd6500")) + 8
    extended = plain[:result_tags] + b"\x01\x90\x4e\x10" + dir_id.bytes + plain[result_tags + 1:]
    assert msg.encode(4) == extended
    assert DescribeLogDirsResponse.decode(extended, 4) == msg
