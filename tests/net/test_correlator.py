"""The sans-IO client half: requests encoded with the right header, responses matched and decoded, fed whole and
one byte at a time; version negotiation and backoff."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kjbod.net.backoff import ExponentialBackoff
from kjbod.net.correlator import Correlator, VersionNegotiation, decode_response, pick_version
from kjbod.net.errors import ProtocolViolation, UnsupportedVersionError
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    MetadataRequest,
    MetadataResponse,
)
from kjbod.protocol.headers import decode_request_header, encode_response, peek_api
from kjbod.protocol.runtime import ZERO_UUID
from kjbod.wire.framing import FrameDecoder, encode_frame_size

# (api key, version, request, response, request header version): a flexible API, a non-flexible one, ApiVersions.
CASES = [
    (63, 1, BrokerHeartbeatRequest(broker_id=3, broker_epoch=7, current_metadata_offset=40, want_fence=True,
                                   offline_log_dirs=[ZERO_UUID]),
     BrokerHeartbeatResponse(is_caught_up=True, is_fenced=False), 2),
    (3, 1, MetadataRequest(topics=[]), MetadataResponse(controller_id=1), 1),
    (18, 3, ApiVersionsRequest(client_software_name="x", client_software_version="1"),
     ApiVersionsResponse(api_keys=[ApiVersionsResponse.ApiVersion(api_key=63, min_version=0, max_version=1)]), 2),
]


def _answers(frames: list[bytes]) -> list[bytes]:
    """What a server answers: each request decoded with the server's own header code, then a response."""
    out = []
    decoder = FrameDecoder()
    decoder.feed(b"".join(frames))
    for frame, (key, version, _, response, _) in zip(decoder.frames(), CASES, strict=True):
        got_key, got_version, correlation_id = peek_api(frame)
        assert (got_key, got_version) == (key, version)
        header, _ = decode_request_header(frame, key, version)
        assert header.client_id == "me"
        reply = b"".join(encode_response(key, version, correlation_id, response))
        out.append(encode_frame_size(len(reply)) + reply)
    return out


@pytest.mark.parametrize("split", ["whole", "bytewise"])
def test_requests_out_responses_back_in_order(split: str) -> None:
    c: Correlator[str] = Correlator("h", 1, "me")
    frames = [c.encode_request(key, version, request, f"token-{i}")
              for i, (key, version, request, _, _) in enumerate(CASES)]
    assert c.in_flight == len(CASES)
    stream = b"".join(_answers(frames))
    got = []
    if split == "whole":
        got = c.receive_data(stream)
    else:
        for i in range(len(stream)):
            got.extend(c.receive_data(stream[i:i + 1]))
    assert [token for token, _ in got] == ["token-0", "token-1", "token-2"]
    assert c.in_flight == 0
    for (_, frame), (key, version, _, response, _) in zip(got, CASES, strict=True):
        assert decode_response(frame, key, version, "h", 1) == response


def test_request_header_versions_and_correlation_ids() -> None:
    c: Correlator[None] = Correlator("h", 1, "me")
    for key, version, request, _, header_version in CASES:
        frame = c.encode_request(key, version, request, None, client_id="other")[4:]
        header, pos = decode_request_header(frame, key, version)
        assert header.client_id == "other"
        # header v2 ends with an empty tagged-field section, v1 does not
        assert pos == 8 + 2 + len("other") + (1 if header_version == 2 else 0)
    assert [cid for cid, _ in c._pending] == [0, 1, 2]


def test_correlation_ids_wrap_to_zero() -> None:
    c: Correlator[None] = Correlator("h", 1, "me")
    c._next_correlation_id = 0x7FFF_FFFF
    c.encode_request(3, 1, MetadataRequest(topics=[]), None)
    c.encode_request(3, 1, MetadataRequest(topics=[]), None)
    assert [cid for cid, _ in c._pending] == [0x7FFF_FFFF, 0]


def test_unencodable_request_leaves_nothing_pending() -> None:
    c: Correlator[None] = Correlator("h", 1, "me")
    with pytest.raises(ValueError, match="BrokerHeartbeat v0"):
        c.encode_request(63, 0, BrokerHeartbeatRequest(broker_id=1 << 40), None)
    assert c.in_flight == 0


@pytest.mark.parametrize(("data", "reason"), [
    (struct.pack(">ii", 4, 99), "correlation id 99, expected 0"),
    (struct.pack(">iH", 2, 0), "response of 2 bytes"),
    (struct.pack(">i", -5), "bad response frame"),
])
def test_stream_errors_name_the_peer(data: bytes, reason: str) -> None:
    c: Correlator[None] = Correlator("peer.example", 9093, "me")
    c.encode_request(3, 1, MetadataRequest(topics=[]), None)
    with pytest.raises(ProtocolViolation, match=f"peer.example:9093: .*{reason}"):
        c.receive_data(data)


def test_response_to_nothing() -> None:
    c: Correlator[None] = Correlator("h", 1, "me")
    with pytest.raises(ProtocolViolation, match="response to no request"):
        c.receive_data(struct.pack(">ii", 4, 0))


def test_trailing_bytes_after_a_body_are_a_violation() -> None:
    frame = b"".join(encode_response(3, 1, 0, MetadataResponse())) + b"\0"
    with pytest.raises(ProtocolViolation, match="1 bytes after the body"):
        decode_response(frame, 3, 1, "h", 1)


def test_take_pending_returns_every_token() -> None:
    c: Correlator[int] = Correlator("h", 1, "me")
    for i in range(3):
        c.encode_request(3, 1, MetadataRequest(topics=[]), i)
    assert c.take_pending() == [0, 1, 2]
    assert c.in_flight == 0


def _api_versions_frame(version: int, response: ApiVersionsResponse) -> bytes:
    return b"".join(encode_response(18, version, 0, response))


def test_negotiation_retries_at_the_peers_highest_apiversions() -> None:
    n = VersionNegotiation("h", 1, "kjbod", "1")
    assert n.version == ApiVersionsRequest.MAX_VERSION
    refusal = ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=[
        ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=2)])
    assert n.receive(_api_versions_frame(0, refusal)) is False
    assert n.version == 2
    answer = ApiVersionsResponse(api_keys=[ApiVersionsResponse.ApiVersion(api_key=62, min_version=0, max_version=2)])
    assert n.receive(_api_versions_frame(2, answer)) is True
    assert n.api_versions == {62: (0, 2)}


def test_negotiation_gives_up_when_the_peer_offers_nothing_lower() -> None:
    n = VersionNegotiation("h", 1, "kjbod", "1")
    refusal = ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=[
        ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=n.version)])
    with pytest.raises(UnsupportedVersionError, match="h:1 refused ApiVersions"):
        n.receive(_api_versions_frame(0, refusal))


def test_pick_version() -> None:
    assert pick_version({62: (0, 9)}, 62, "p") == 4  # capped by this codec
    assert pick_version({62: (0, 2)}, 62, "p") == 2  # capped by the peer
    assert pick_version({62: (0, 9)}, 62, "p", max_version=1) == 1
    with pytest.raises(UnsupportedVersionError, match="p does not serve BrokerRegistration"):
        pick_version({}, 62, "p")
    with pytest.raises(UnsupportedVersionError, match="p serves BrokerRegistration v5-v9"):
        pick_version({62: (5, 9)}, 62, "p")


def test_backoff_grows_caps_and_jitters() -> None:
    plain = ExponentialBackoff(0.1, 1.0, jitter=0)
    assert [plain.delay(n) for n in range(6)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert plain.delay(10_000) == 1.0
    jittered = ExponentialBackoff(0.1, 1.0, jitter=0.2, rng=random.Random(7))
    delays = [jittered.next() for _ in range(200)]
    assert jittered.attempts == 200
    assert all(0.08 <= d <= 1.0 for d in delays)
    assert len({round(d, 6) for d in delays[:3]}) == 3  # jittered, not fixed steps
    assert 0.08 <= delays[0] <= 0.12 and 0.16 <= delays[1] <= 0.24
    jittered.reset()
    assert jittered.next() <= 0.12
    with pytest.raises(ValueError):
        ExponentialBackoff(0.1, 1.0, jitter=1.5)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=64), max_size=40), st.integers(min_value=1, max_value=20))
def test_any_split_of_pipelined_responses_gives_the_same_answers(cuts: list[int], rounds: int) -> None:
    c: Correlator[int] = Correlator("h", 1, "me")
    frames = []
    for i in range(rounds):
        key, version, request, _, _ = CASES[i % len(CASES)]
        frames.append(c.encode_request(key, version, request, i))
    answers = []
    for i in range(0, rounds, len(CASES)):
        answers += _answers(frames[i:i + len(CASES)]) if rounds - i >= len(CASES) else []
    stream = b"".join(answers)
    got: list[tuple[int, bytes]] = []
    pos = 0
    for cut in cuts:
        got += c.receive_data(stream[pos:pos + cut])
        pos += cut
    got += c.receive_data(stream[pos:])
    assert [token for token, _ in got] == list(range(len(answers)))
    for token, frame in got:
        key, version, _, response, _ = CASES[token % len(CASES)]
        assert decode_response(frame, key, version, "h", 1) == response


@pytest.mark.parametrize("client_id", ["me", "", None])
def test_a_kept_header_writes_the_generated_headers_bytes(client_id: str | None) -> None:
    """The header's bytes around the correlation id are kept per (api, version, client id): every frame, the
    first and the later ones, is byte for byte the generated RequestHeader's, with its own correlation id."""
    from kjbod.protocol.generated.request_header import RequestHeader
    from kjbod.protocol.headers import request_header_version

    c: Correlator[None] = Correlator("h", 1, client_id)
    for round_ in range(2):
        for i, (key, version, request, _, _) in enumerate(CASES):
            frame = c.encode_request(key, version, request, None)
            cid = round_ * len(CASES) + i
            header = RequestHeader(key, version, cid, client_id).encode(request_header_version(key, version))
            body = request.encode(version)
            assert frame == struct.pack(">i", len(header) + len(body)) + header + body


def test_a_written_body_gets_the_same_frame_as_the_message() -> None:
    a: Correlator[str] = Correlator("h", 1, "me")
    b: Correlator[str] = Correlator("h", 1, "me")
    for key, version, request, _, _ in CASES:
        body = request.encode(version)
        assert b.encode_body(key, version, body, "x") == a.encode_request(key, version, request, "x")
    assert b.in_flight == a.in_flight == len(CASES)


@pytest.mark.parametrize("how", ["one frame a read", "two frames in one read", "split"])
def test_a_whole_frame_read_at_once_is_taken_as_the_decoder_takes_it(how: str) -> None:
    answers = []
    for short in (True, False):
        c: Correlator[str] = Correlator("h", 1, "me")
        if not short:  # every read through the frame decoder
            c._decoder = _NeverIdle()
        frames = _answers([c.encode_request(key, version, request, f"t{i}")
                           for i, (key, version, request, _, _) in enumerate(CASES)])
        data = b"".join(frames)
        reads = {"one frame a read": frames, "two frames in one read": [frames[0] + frames[1], frames[2]],
                 "split": [data[:7], data[7:]]}[how]
        got = [answer for read in reads for answer in c.receive_data(read)]
        assert c.in_flight == 0
        answers.append(got)
    assert answers[0] == answers[1] and [t for t, _ in answers[0]] == ["t0", "t1", "t2"]


class _NeverIdle(FrameDecoder):
    __slots__ = ()

    @property
    def idle(self) -> bool:
        return False


def test_a_whole_frame_with_the_wrong_correlation_id_is_the_same_violation() -> None:
    c: Correlator[str] = Correlator("h", 1, "me")
    c.encode_request(*CASES[0][:3], "t")
    key, version, _, response, _ = CASES[0]
    reply = b"".join(encode_response(key, version, 1, response))  # answers correlation id 1, expected 0
    frame = encode_frame_size(len(reply)) + reply
    with pytest.raises(ProtocolViolation, match="correlation id 1, expected 0"):
        c.receive_data(frame)
