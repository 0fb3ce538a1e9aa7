"""Golden bytes from real clients (tests/golden/*.json, written by `python -m tools.make_golden record`).

Each golden file holds every frame one real client (kafka-python's KafkaAdminClient, confluent-kafka's
AdminClient) sent to kjbod while bootstrapping, and every frame kjbod answered, as recorded by the capture relay.
The tests check kjbod's codec against those bytes both ways (decode, then re-encode byte for byte), check the
readable expectation written next to each frame (api, version, correlation id, decoded message), and feed the
whole capture to the sans-IO frame decoder whole, one byte at a time and in random chunks (h11's habit).

Kafka's quirks are data here, not code: the header version table (ApiVersions answers with header v0 even to a
flexible request) and the bytes Kafka ignores after a request body (librdkafka's Metadata v13).
"""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path

import pytest

from kjbod.protocol.generated.registry import APIS
from kjbod.protocol.generated.request_header import RequestHeader
from kjbod.protocol.generated.response_header import ResponseHeader
from kjbod.protocol.runtime import DecodeError
from kjbod.wire.framing import FrameDecoder
from tools.make_golden import render

GOLDEN = Path(__file__).parent / "golden"
CLIENTS = ("kafka-python", "confluent-kafka")

# Bytes after a request body that Apache Kafka ignores, by (client, api, version).  librdkafka writes three extra
# bytes after its "all topics" Metadata v13 request; kjbod must ignore them too.  Anything else is a failure.
KNOWN_TRAILING = {("confluent-kafka", "Metadata", 13): bytes.fromhex("010000")}

# (api, request header version, response header version) for what these clients send: flexible versions use
# request header v2 / response header v1, except ApiVersions, whose response header is always v0 (KIP-511).
HEADER_VERSIONS = {
    ("ApiVersions", 4): (2, 0),
    ("ApiVersions", 3): (2, 0),
    ("Metadata", 13): (2, 1),
    ("DescribeCluster", 2): (2, 1),
}


def load(client: str) -> dict:
    return json.loads((GOLDEN / f"{client}.json").read_text(encoding="utf-8"))


def requests_of(doc: dict) -> list[dict]:
    return [f for f in doc["frames"] if f["dir"] == "request"]


def responses_of(doc: dict) -> list[dict]:
    return [f for f in doc["frames"] if f["dir"] == "response"]


def framed(frames: list[dict]) -> bytes:
    return b"".join(struct.pack(">i", len(b)) + b for b in (bytes.fromhex(f["hex"]) for f in frames))


def test_one_golden_file_per_client():
    assert sorted(p.stem for p in GOLDEN.glob("*.json")) == sorted(CLIENTS)
    for client in CLIENTS:
        doc = load(client)
        assert doc["client"] == client
        assert requests_of(doc) and len(requests_of(doc)) == len(responses_of(doc))


@pytest.mark.parametrize("client", CLIENTS)
def test_requests_decode_and_reencode_byte_for_byte(client):
    doc = load(client)
    seen_trailing = set()
    for f in requests_of(doc):
        frame = bytes.fromhex(f["hex"])
        key, version, corr = struct.unpack_from(">hhi", frame)
        info = APIS[key]
        assert (info.name, version, corr) == (f["api"], f["version"], f["correlation_id"])
        header_version, _ = HEADER_VERSIONS[(info.name, version)]
        assert f["header_version"] == header_version
        header, pos = RequestHeader.decode_from(frame, 0, header_version)
        assert header.client_id == f["client_id"] == "kjbod-golden"
        body, end = info.request.decode_from(frame, pos, version)
        trailing = frame[end:]
        assert trailing == bytes.fromhex(f.get("trailing_hex", ""))
        if trailing:
            assert KNOWN_TRAILING.get((client, info.name, version)) == trailing, (
                f"{client} {info.name} v{version} has unexpected trailing bytes {trailing.hex()}")
            seen_trailing.add((client, info.name, version))
            # The strict decoder refuses them: the router must use decode_from and ignore the rest, as Kafka does.
            with pytest.raises(DecodeError):
                info.request.decode(frame[pos:], version)
        else:
            assert info.request.decode(frame[pos:], version) == body
        assert header.encode(header_version) + body.encode(version) + trailing == frame
        assert render(body) == f["message"]
    # The quirk table is data about real captures: each entry must still be exercised by one.
    assert seen_trailing == {k for k in KNOWN_TRAILING if k[0] == client}


@pytest.mark.parametrize("client", CLIENTS)
def test_responses_decode_by_their_request_and_reencode_byte_for_byte(client):
    doc = load(client)
    asked: dict[tuple[int, int], dict] = {}
    for f in doc["frames"]:
        if f["dir"] == "request":
            asked[(f["conn"], f["correlation_id"])] = f
            continue
        frame = bytes.fromhex(f["hex"])
        (corr,) = struct.unpack_from(">i", frame)
        request = asked.pop((f["conn"], corr))  # every response answers one request on its own connection
        key, version = request["api_key"], request["version"]
        assert (f["api_key"], f["version"], f["correlation_id"]) == (key, version, corr)
        _, header_version = HEADER_VERSIONS[(request["api"], version)]
        assert f["header_version"] == header_version
        header, pos = ResponseHeader.decode_from(frame, 0, header_version)
        assert header.correlation_id == corr
        body = APIS[key].response.decode(frame[pos:], version)
        assert header.encode(header_version) + body.encode(version) == frame
        assert render(body) == f["message"]
    assert not asked, f"requests never answered: {sorted(asked)}"


@pytest.mark.parametrize("client", CLIENTS)
def test_responses_come_back_in_request_order_per_connection(client):
    doc = load(client)
    conns = {f["conn"] for f in doc["frames"]}
    for conn in conns:
        sent = [f["correlation_id"] for f in requests_of(doc) if f["conn"] == conn]
        answered = [f["correlation_id"] for f in responses_of(doc) if f["conn"] == conn]
        assert answered == sent


def _decode_stream(stream: bytes, chunks: list[bytes]) -> list[bytes]:
    decoder = FrameDecoder()
    out = []
    for chunk in chunks:
        decoder.feed(chunk)
        out.extend(decoder.frames())
    assert decoder.buffered == 0
    return out


@pytest.mark.parametrize("client", CLIENTS)
def test_frame_decoder_splits_the_capture_whole_bytewise_and_in_random_chunks(client):
    doc = load(client)
    streams = [doc["frames"]]  # the whole capture as one stream, and each connection's direction on its own
    for conn in {f["conn"] for f in doc["frames"]}:
        for direction in ("request", "response"):
            streams.append([f for f in doc["frames"] if f["conn"] == conn and f["dir"] == direction])
    rng = random.Random(7)
    for frames in streams:
        stream = framed(frames)
        expected = [bytes.fromhex(f["hex"]) for f in frames]
        assert _decode_stream(stream, [stream]) == expected
        assert _decode_stream(stream, [stream[i:i + 1] for i in range(len(stream))]) == expected
        cuts = sorted(rng.sample(range(1, len(stream)), min(20, len(stream) - 1)))
        pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        assert _decode_stream(stream, pieces) == expected


def _decoded_responses(doc: dict, api: str) -> list:
    out = []
    for f in responses_of(doc):
        if f["api"] == api:
            frame = bytes.fromhex(f["hex"])
            _, header_version = HEADER_VERSIONS[(api, f["version"])]
            _, pos = ResponseHeader.decode_from(frame, 0, header_version)
            out.append(APIS[f["api_key"]].response.decode(frame[pos:], f["version"]))
    return out


def test_kafka_python_describe_cluster_answer_names_node_1_and_the_cluster_id():
    doc = load("kafka-python")
    (answer,) = _decoded_responses(doc, "DescribeCluster")
    assert answer.error_code == 0
    assert answer.cluster_id == doc["cluster_id"]
    assert answer.controller_id == 1
    assert [(b.broker_id, b.host, b.port) for b in answer.brokers] == [(1, "127.0.0.1", doc["advertised_port"])]
    # ...and the client saw exactly that.
    result = doc["client_result"]["describe_cluster"]
    assert result["cluster_id"] == doc["cluster_id"]
    assert [b["broker_id"] for b in result["brokers"]] == [1]


@pytest.mark.parametrize("client", CLIENTS)
def test_clients_reached_the_advertised_broker_through_the_relay(client):
    doc = load(client)
    # A second connection exists: the client followed the advertised listener (the relay) to node 1.
    assert len({f["conn"] for f in doc["frames"]}) >= 2
    for answer in _decoded_responses(doc, "Metadata"):
        assert answer.error_code == 0 and answer.cluster_id == doc["cluster_id"] and answer.controller_id == 1
        assert [(b.node_id, b.host, b.port) for b in answer.brokers] == [(1, "127.0.0.1", doc["advertised_port"])]


@pytest.mark.parametrize("client", CLIENTS)
def test_api_versions_answer_lists_the_served_ranges(client):
    doc = load(client)
    for answer in _decoded_responses(doc, "ApiVersions"):
        assert answer.error_code == 0
        ranges = {a.api_key: (a.min_version, a.max_version) for a in answer.api_keys}
        assert ranges[18] == (0, 4)
        assert ranges[3][1] >= 13 and ranges[60][1] >= 2
        # Every request the client then sent is inside what was advertised.
        for f in requests_of(doc):
            lo, hi = ranges[f["api_key"]]
            assert lo <= f["version"] <= hi


def test_kjbod_header_version_rules_agree_with_the_captured_table():
    from kjbod.protocol.headers import request_header_version, response_header_version

    keys = {info.name: key for key, info in APIS.items()}
    for (api, version), (request_hv, response_hv) in HEADER_VERSIONS.items():
        assert request_header_version(keys[api], version) == request_hv
        assert response_header_version(keys[api], version) == response_hv
