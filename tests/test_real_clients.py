"""Real Kafka clients, and hand-made requests a server must refuse, against a real `kjbod serve` process.

Strategy: one server per module (tests/live.py starts it on free ports and captures its stderr, where it logs JSON
lines).  kafka-python and confluent-kafka bootstrap against it as any user would.  Then raw sockets send what a
confused or hostile client might: ApiVersions at a version from the future (answered per KIP-511 with a v0 body,
UNSUPPORTED_VERSION and ApiVersions' own range, under a v0 response header), an unknown API key, a version out
of range, and a broker API on the CONTROLLER listener.  The last three close the connection without an answer,
and the server logs one warning that names the client (its address and client id), the API and the version:
the test finds that line by the client's own port.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from pathlib import Path

import pytest
from live import LiveServer, start_server

from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import ApiVersionsResponse, MetadataRequest, ProduceRequest

CLIENT_ID = "kjbod-real-clients"

# kafka-python 3.0 loads its schemas with importlib.resources.read_text/open_text, deprecated in Python 3.11.
pytestmark = pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning")


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> LiveServer:
    s = start_server(tmp_path_factory.mktemp("real-clients"))
    yield s
    s.stop()


def request_frame(api_key: int, version: int, correlation_id: int, body: bytes = b"", *, flexible: bool = False,
                  client_id: str = CLIENT_ID) -> bytes:
    """A size-prefixed request: header v1 (v2 adds an empty tagged-field section) + body."""
    cid = client_id.encode()
    frame = struct.pack(">hhih", api_key, version, correlation_id, len(cid)) + cid + (b"\0" if flexible else b"")
    frame += body
    return struct.pack(">i", len(frame)) + frame


def exchange(port: int, data: bytes, timeout: float = 5.0) -> tuple[bytes, bool, int]:
    """Send `data`, read until one whole response or EOF.  Returns (bytes read, closed by peer, local port)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        local_port = s.getsockname()[1]
        s.sendall(data)
        got = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                return got, True, local_port
            got += chunk
            if len(got) >= 4 and len(got) >= 4 + struct.unpack_from(">i", got)[0]:
                return got, False, local_port
        return got, False, local_port


def warnings_for(server: LiveServer, local_port: int, timeout: float = 5.0) -> list[dict]:
    """The server's warning log lines about the connection from 127.0.0.1:`local_port`."""
    peer = f"127.0.0.1:{local_port}"
    deadline = time.monotonic() + timeout
    while True:
        found = []
        for line in Path(server.stderr_path).read_text(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("level") == "warning" and event.get("peer") == peer:
                found.append(event)
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_kafka_python_admin_client_describes_the_cluster(server):
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, client_id=CLIENT_ID)
    try:
        cluster = admin.describe_cluster()
    finally:
        admin.close()
    assert cluster["cluster_id"] == server.cluster_id
    assert cluster["controller_id"] == 1
    assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [(1, "127.0.0.1", server.port)]


def test_confluent_kafka_admin_client_lists_the_broker(server):
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": server.bootstrap, "client.id": CLIENT_ID})
    md = admin.list_topics(timeout=10)
    assert md.cluster_id == server.cluster_id
    assert md.controller_id == 1
    assert {k: (b.host, b.port) for k, b in md.brokers.items()} == {1: ("127.0.0.1", server.port)}


@pytest.mark.parametrize("version", [5, 9, 32767])
def test_api_versions_at_an_unsupported_version_gets_the_kip_511_answer(server, version):
    # A client from the future sends its newest ApiVersions with a v2 header and a body we cannot know.
    data, closed, _ = exchange(server.port, request_frame(18, version, 4242, b"\x07future\x031.0\x00",
                                                          flexible=True))
    assert not closed
    (size,) = struct.unpack_from(">i", data)
    assert len(data) == 4 + size
    (correlation_id,) = struct.unpack_from(">i", data, 4)
    assert correlation_id == 4242
    # Header v0 (just the correlation id), then a v0 body: the only one every client can read.
    answer = ApiVersionsResponse.decode(data[8:], 0)
    assert answer.error_code == ErrorCode.UNSUPPORTED_VERSION == 35
    assert [(a.api_key, a.min_version, a.max_version) for a in answer.api_keys] == [(18, 0, 4)]


def read_frames(sock: socket.socket, count: int) -> list[bytes]:
    """`count` whole response frames (size prefix removed); fails if the peer closes first."""
    got = b""
    frames = []
    while len(frames) < count:
        while len(got) < 4 or len(got) < 4 + struct.unpack_from(">i", got)[0]:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed after {len(frames)} of {count} responses"
            got += chunk
        (size,) = struct.unpack_from(">i", got)
        frames.append(got[4:4 + size])
        got = got[4 + size:]
    return frames


def test_api_versions_connection_stays_usable_after_the_kip_511_answer(server):
    # The client is expected to retry on the same connection with a version from the answer.
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(request_frame(18, 9, 1, flexible=True)
                  + request_frame(18, 3, 2, b"\x06kjbod\x041.0\x00", flexible=True))
        frames = read_frames(s, 2)
    assert [struct.unpack_from(">i", f)[0] for f in frames] == [1, 2]
    assert ApiVersionsResponse.decode(frames[0][4:], 0).error_code == 35
    full = ApiVersionsResponse.decode(frames[1][4:], 3)
    assert full.error_code == 0 and {a.api_key for a in full.api_keys} >= {3, 18, 60}


REFUSED = [
    # (case, listener, api key, version, api name in the log, body)
    ("unknown api key", "broker", 9999, 0, None, b""),
    ("unsupported Metadata version", "broker", 3, 99, "Metadata", b""),
    ("unsupported Produce version", "broker", 0, 1, "Produce", b""),
    ("Produce on the CONTROLLER listener", "controller", 0, 9, "Produce",
     ProduceRequest(acks=-1, timeout_ms=1000).encode(9)),
    ("Metadata on the CONTROLLER listener", "controller", 3, 12, "Metadata", MetadataRequest().encode(12)),
]


@pytest.mark.parametrize(("case", "listener", "api_key", "version", "api", "body"), REFUSED,
                         ids=[r[0] for r in REFUSED])
def test_refused_requests_close_the_connection_with_a_warning(server, case, listener, api_key, version, api, body):
    port = server.port if listener == "broker" else server.controller_port
    flexible = (api_key == 0 and version >= 9) or (api_key == 3 and version >= 9)
    data, closed, local_port = exchange(port, request_frame(api_key, version, 77, body, flexible=flexible))
    assert closed, f"{case}: the connection stayed open"
    assert data == b"", f"{case}: got an answer {data.hex()}"
    lines = warnings_for(server, local_port)
    named = [e for e in lines if e.get("api_key") == api_key and e.get("version") == version]
    assert named, f"{case}: no warning naming API {api_key} v{version} for 127.0.0.1:{local_port}; got {lines}"
    line = named[0]
    assert line.get("api") == api
    assert line.get("client_id") == CLIENT_ID
    assert line.get("listener") == ("PLAINTEXT" if listener == "broker" else "CONTROLLER")
    assert server.running


def test_server_keeps_serving_real_clients_after_refusals(server):
    from kafka import KafkaAdminClient

    for _case, listener, api_key, version, _api, body in REFUSED:
        port = server.port if listener == "broker" else server.controller_port
        exchange(port, request_frame(api_key, version, 1, body))
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, client_id=CLIENT_ID)
    try:
        assert admin.describe_cluster()["cluster_id"] == server.cluster_id
    finally:
        admin.close()


def test_api_versions_answers_follow_each_request_not_the_previous_one(server):
    # The router memoises ApiVersions answers per request bytes (as Kafka computes them once per listener):
    # a repeat must still carry its own correlation id, and a different body must get its own answer.
    good = b"\x06kjbod\x041.0\x00"
    bad = b"\x06kj!od\x041.0\x00"  # '!' is not allowed in a client software name: INVALID_REQUEST
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(request_frame(18, 3, 11, good, flexible=True) + request_frame(18, 3, 12, good, flexible=True)
                  + request_frame(18, 3, 13, bad, flexible=True) + request_frame(18, 3, 14, good, flexible=True))
        frames = read_frames(s, 4)
    with socket.create_connection(("127.0.0.1", server.controller_port), timeout=5) as s:
        s.sendall(request_frame(18, 3, 15, good, flexible=True))
        (controller,) = read_frames(s, 1)
    assert [struct.unpack_from(">i", f)[0] for f in frames] == [11, 12, 13, 14]
    answers = [ApiVersionsResponse.decode(f[4:], 3) for f in frames]
    assert [a.error_code for a in answers] == [0, 0, ErrorCode.INVALID_REQUEST, 0]
    assert answers[0] == answers[1] == answers[3] and answers[2].api_keys == []
    # The controller listener's answer lists its own APIs, not the broker listener's.
    on_controller = {a.api_key for a in ApiVersionsResponse.decode(controller[4:], 3).api_keys}
    on_broker = {a.api_key for a in answers[0].api_keys}
    assert 0 in on_broker and 0 not in on_controller and 18 in on_controller
