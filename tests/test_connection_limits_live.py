"""Kafka's connection limits on real `kjbod serve` processes, with real sockets and kafka-python's admin client.

* max.connections.per.ip: a connection over its IP's limit is closed at once (logged), the others keep being
  answered; max.connections.per.ip.overrides raises it for 127.0.0.1 while 127.0.0.2 keeps the default (Linux
  routes all of 127/8 to the loopback, so a test can connect from two addresses).
* listener.name.<listener>.max.connections and max.connections: a listener at its limit stops accepting; a new
  client waits, unanswered, until one connection closes, then is served.
* The inter-broker listener is protected: at max.connections it is still served, and the least recently used
  connection of the client listener is closed to make room.
* A dynamic change through AlterConfigs (kafka-python) takes effect on the next connection; bad values are
  refused naming key and value.
* connections.max.idle.ms closes a connection that sends nothing; connection.failed.authentication.delay.ms
  holds back the answer to a failed SASL authentication (and the close behind it) while other clients are served.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import struct
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from live import LiveServer, format_storage, free_port, new_cluster_id, start_server, write_config

from kjbod.protocol.generated import SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python loads its schemas with importlib's old API
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

pytestmark = [pytest.mark.slow,
              pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning")]

WAIT_S = 30.0
# How long a test watches a connection that must not be answered (it never is, so this cannot fail falsely).
QUIET_S = 1.5
OTHER_IP = "127.0.0.2"


# -- raw connections ---------------------------------------------------------------------------------------------------


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(WAIT_S)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def api_versions_request(corr: int) -> bytes:
    body = struct.pack(">hhih", 18, 0, corr, 4) + b"test"  # ApiVersions v0: a header, no body
    return struct.pack(">i", len(body)) + body


def read_frame(sock: socket.socket) -> bytes:
    """One size-prefixed frame; b"" when the server closed the connection (or reset it)."""
    data = b""
    try:
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = sock.recv(65536)
            if not chunk:
                return b""
            data += chunk
    except ConnectionResetError:
        return b""
    return data[4:]


def answered(sock: socket.socket, corr: int = 1) -> bool:
    """Sends ApiVersions and reads its answer: True when it came, False when the server closed the connection."""
    try:
        sock.sendall(api_versions_request(corr))
    except (BrokenPipeError, ConnectionResetError):
        return False
    frame = read_frame(sock)
    if not frame:
        return False
    assert struct.unpack(">i", frame[:4])[0] == corr
    return True


def quiet(sock: socket.socket, seconds: float = QUIET_S) -> bool:
    """Nothing arrives (no answer, no close) for `seconds`."""
    readable, _, _ = select.select([sock], [], [], seconds)
    return not readable


# -- the server's log ------------------------------------------------------------------------------------------------


def events(server: LiveServer) -> list[dict]:
    out = []
    for line in server.stderr_path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def open_connections(server: LiveServer, listener: str = "PLAINTEXT") -> int | None:
    """Connections of `listener` the server has opened and not closed yet, as its log says; None before its log
    shows the first one (the readiness probe's)."""
    log = [e for e in events(server) if e.get("listener") == listener]
    opened = sum(e.get("event") == "connection opened" for e in log)
    if not opened:
        return None
    return opened - sum(e.get("event") == "connection closed" for e in log)


def wait_for(check: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def settled(server: LiveServer, count: int = 0, listener: str = "PLAINTEXT") -> None:
    """Waits until the server holds `count` connections of `listener` (its readiness probes and earlier clients
    are gone)."""
    wait_for(lambda: open_connections(server, listener) == count, f"{count} open {listener} connections")


@contextlib.contextmanager
def held(port: int, count: int, source: str = "127.0.0.1") -> Iterator[list[socket.socket]]:
    socks = []
    try:
        for _ in range(count):
            socks.append(connect(port, source))
        yield socks
    finally:
        for s in socks:
            s.close()


def node(tmp_path: Path, **overrides: str) -> LiveServer:
    return start_server(tmp_path / "node", log_dir_count=1, overrides=overrides)


def node_with_listeners(tmp_path: Path, port: int, controller_port: int, overrides: dict[str, str]) -> LiveServer:
    """A combined node whose `overrides` set its listeners: `port` is the client one, waited for with the
    controller's before the test goes on."""
    directory = tmp_path / "node"
    directory.mkdir(parents=True)
    server = LiveServer(node_id=1, cluster_id=new_cluster_id(), port=port, controller_port=controller_port,
                        directory=directory, config=directory / "server.properties", log_dirs=[directory / "logs-0"],
                        metadata_dir=directory / "metadata", stderr_path=directory / "stderr.log")
    write_config(server.config, node_id=1, port=port, controller_port=controller_port, log_dirs=server.log_dirs,
                 metadata_dir=server.metadata_dir, overrides=overrides)
    format_storage(server.config, server.cluster_id)
    server.start()
    return server


# -- per IP ----------------------------------------------------------------------------------------------------------


def test_a_connection_over_its_ips_limit_is_closed_at_once_and_an_override_raises_it_for_127_0_0_1(tmp_path):
    server = node(tmp_path, **{"max.connections.per.ip": "2", "max.connections.per.ip.overrides": "127.0.0.1:4"})
    try:
        settled(server)
        with held(server.port, 2, OTHER_IP) as others:
            assert all(answered(s) for s in others)
            with connect(server.port, OTHER_IP) as extra:
                assert not answered(extra), "a third connection from 127.0.0.2 was served"
            assert all(answered(s, corr=2) for s in others), "the connections within the limit stopped working"
            with held(server.port, 4) as local:  # 127.0.0.1 has 4 by its override
                assert all(answered(s) for s in local)
                with connect(server.port) as fifth:
                    assert not answered(fifth)
                assert all(answered(s, corr=2) for s in local)
        rejected = [e for e in events(server) if e.get("event", "").startswith("Rejected connection")]
        assert {(e["ip"], e["max_connections"]) for e in rejected} == {(OTHER_IP, 2), ("127.0.0.1", 4)}
        assert all(e["level"] == "info" for e in rejected)
    finally:
        server.stop()


# -- a listener's limit and the broker's ------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["listener.name.plaintext.max.connections", "max.connections"],
                         ids=["listener", "max.connections"])
def test_a_listener_at_its_limit_makes_a_new_connection_wait_until_one_closes(tmp_path, key):
    server = node(tmp_path, **{key: "2"})
    try:
        settled(server)
        first, second = connect(server.port), connect(server.port)
        try:
            assert answered(first) and answered(second)
            settled(server, 2)
            with connect(server.port) as third:  # the kernel completes the connect; the broker does not accept it
                third.sendall(api_versions_request(7))
                assert quiet(third), "a connection over the listener's limit was answered"
                assert answered(first, corr=2)  # the two within the limit are served meanwhile
                first.close()
                frame = read_frame(third)  # accepted and answered once one closed
                assert frame and struct.unpack(">i", frame[:4])[0] == 7
        finally:
            first.close()
            second.close()
    finally:
        server.stop()


def test_the_inter_broker_listener_is_served_at_max_connections_and_the_oldest_client_connection_makes_room(
        tmp_path):
    client, internal, controller = free_port(), free_port(), free_port()
    server = node_with_listeners(tmp_path, client, controller, {
        "listeners": f"PLAINTEXT://127.0.0.1:{client},INTERNAL://127.0.0.1:{internal},"
                     f"CONTROLLER://127.0.0.1:{controller}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL", "max.connections": "2"})
    try:
        settled(server)
        with held(client, 2) as (older, newer):
            assert answered(older)
            assert answered(newer)  # used last: the older one is the least recently used
            settled(server, 2)
            with connect(internal) as peer:
                assert answered(peer), "the inter-broker listener was held back by max.connections"
                assert read_frame(older) == b"", "the least recently used client connection was not closed"
                assert answered(newer, corr=2)
        closing = [e for e in events(server) if e.get("event", "").startswith("closing the least recently used")]
        assert [e["listener"] for e in closing] == ["PLAINTEXT"]
    finally:
        server.stop()


# -- dynamic ---------------------------------------------------------------------------------------------------------


def alter(server: LiveServer, configs: dict[str, str], *, reset: bool = False) -> str:
    """AlterConfigs on the broker resource through kafka-python's admin client (`reset`: an AlterConfigs with no
    keys, which drops every dynamic one); 'OK' or the error it reports."""
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        resource = ConfigResource(ConfigResourceType.BROKER, str(server.node_id), configs=configs)
        if reset:
            result = admin.reset_configs([resource], raise_on_unknown=False, incremental=False)
        else:
            result = admin.alter_configs([resource], raise_on_unknown=False, incremental=False)
    finally:
        admin.close()
    return str(result["broker"][str(server.node_id)])


def test_a_dynamic_change_through_alter_configs_takes_effect_and_bad_values_are_refused(tmp_path):
    server = node(tmp_path)
    try:
        settled(server)
        with held(server.port, 3, OTHER_IP) as socks:
            assert all(answered(s) for s in socks)
        assert alter(server, {"max.connections.per.ip": "1", "max.connections.per.ip.overrides": "127.0.0.1:10"}) \
            == "OK"
        settled(server)
        wait_for(lambda: any(e.get("event") == "connection limits changed" for e in events(server)),
                 "the broker applying the new limits")
        with held(server.port, 1, OTHER_IP) as (one,):
            assert answered(one)
            with connect(server.port, OTHER_IP) as two:
                assert not answered(two), "the per-IP limit set through AlterConfigs was not applied"
            assert answered(one, corr=2)

        for key, value in [("max.connections.per.ip", "-1"), ("max.connections.per.ip.overrides", "127.0.0.1"),
                           ("listener.name.PLAINTEXT.max.connections", "0"), ("max.connections", "lots")]:
            refused = alter(server, {key: value})
            assert "InvalidRequestError" in refused and key in refused and repr(value) in refused, refused

        assert alter(server, {}, reset=True) == "OK"  # AlterConfigs replaces the set: nothing dynamic is left
        settled(server)
        wait_for(lambda: sum(e.get("event") == "connection limits changed" for e in events(server)) >= 2,
                 "the broker dropping the limits")
        with held(server.port, 3, OTHER_IP) as socks:
            assert all(answered(s) for s in socks)
    finally:
        server.stop()


# -- idle connections -------------------------------------------------------------------------------------------------


def test_a_connection_that_sends_nothing_for_connections_max_idle_ms_is_closed(tmp_path):
    server = node(tmp_path, **{"connections.max.idle.ms": "1000"})
    try:
        with connect(server.port) as sock:
            assert answered(sock)
            assert read_frame(sock) == b"", "the idle connection was not closed"
        idle = [e for e in events(server) if e.get("event") == "closing an idle connection"]
        assert idle and idle[0]["connections_max_idle_ms"] == 1000
    finally:
        server.stop()


# -- a failed SASL authentication ----------------------------------------------------------------------------------------


JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'


def sasl_request(key: int, version: int, corr: int, body: object) -> bytes:
    header = struct.pack(">hhih", key, version, corr, 4) + b"test"
    if key == 36 and version >= 2:
        header += b"\x00"
    data = header + body.encode(version)  # type: ignore[attr-defined]
    return struct.pack(">i", len(data)) + data


def start_plain(sock: socket.socket, user: str, password: str) -> None:
    sock.sendall(sasl_request(17, 1, 1, SaslHandshakeRequest(mechanism="PLAIN")))
    assert read_frame(sock)
    token = b"\x00" + user.encode() + b"\x00" + password.encode()
    sock.sendall(sasl_request(36, 1, 2, SaslAuthenticateRequest(auth_bytes=token)))


def test_the_answer_to_a_failed_authentication_and_the_close_wait_the_delay_while_others_are_served(tmp_path):
    plain, sasl, controller = free_port(), free_port(), free_port()
    delay_ms = 8000
    server = node_with_listeners(tmp_path, plain, controller, {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl},"
                     f"CONTROLLER://127.0.0.1:{controller}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT", "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "connection.failed.authentication.delay.ms": str(delay_ms)})
    try:
        with connect(sasl) as bad:
            start_plain(bad, "alice", "wrong")
            wait_for(lambda: any(e.get("event", "").startswith("SASL authentication failed") for e in events(server)),
                     "the server refusing the password")
            failure = next(e for e in events(server) if e.get("event", "").startswith("SASL authentication failed"))
            assert failure["answer_delay_ms"] == delay_ms
            assert quiet(bad), "the failure was answered (or the connection closed) before the delay"
            with connect(sasl) as good:  # another client is served meanwhile
                start_plain(good, "alice", "alice-secret")
                assert SaslAuthenticateResponse.decode(read_frame(good)[4:], 1).error_code == 0
                assert answered(good, corr=3)
            answer = SaslAuthenticateResponse.decode(read_frame(bad)[4:], 1)
            assert answer.error_code == 58  # SASL_AUTHENTICATION_FAILED, after the delay
            assert read_frame(bad) == b""  # and then the close
    finally:
        server.stop()


# -- metrics ---------------------------------------------------------------------------------------------------------


def test_the_metrics_endpoint_shows_each_listeners_open_connections_and_creation(tmp_path):
    from tests.metrics.scrape import scrape, value

    port = free_port()
    server = node(tmp_path, **{"kjbod.metrics.listener": f"127.0.0.1:{port}"})
    name = "kafka_server_socket_server_metrics_connection_"
    try:
        settled(server)
        before = value(scrape(port), f"{name}creation_total", listener="PLAINTEXT", networkProcessor="0")
        with held(server.port, 3) as socks:
            assert all(answered(s) for s in socks)
            settled(server, 3)
            samples = scrape(port)
            labels = {"listener": "PLAINTEXT", "networkProcessor": "0"}
            assert value(samples, f"{name}count", **labels) == 3
            assert value(samples, f"{name}creation_total", **labels) == before + 3
            assert value(samples, f"{name}creation_rate", **labels) > 0
            assert value(samples, f"{name}count", listener="CONTROLLER", networkProcessor="0") == 0
        settled(server)
        assert value(scrape(port), f"{name}count", listener="PLAINTEXT", networkProcessor="0") == 0
    finally:
        server.stop()
