"""TLS listeners served by a real `kjbod serve`, driven by real clients (kafka-python, confluent-kafka, aiokafka).

One node for the module with four listeners: PLAINTEXT, SSL (no client certificates), MTLS (SSL with
`listener.name.mtls.ssl.client.auth=required`: mutual TLS) and the CONTROLLER. Each client produces and consumes
over TLS; a fetch of several MiB checks that record data read from the log dirs reaches the client intact through
the TLS transport (sendfile cannot be used there); a client with a certificate nobody trusts, or none, is refused on
the mutual TLS listener; a plaintext client on a TLS port is dropped and logged once while TLS clients on that port
keep working.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import struct
import time
from pathlib import Path

import pytest
from live import LiveServer

from .conftest import Certs, free_port, start_tls_node, tls_settings

# kafka-python 3.0 loads its schemas with importlib.resources.read_text/open_text, deprecated in Python 3.11.
pytestmark = pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning")

WAIT_S = 30.0


class Node:
    def __init__(self, server: LiveServer, plain: int, tls: int, mtls: int) -> None:
        self.server = server
        self.plain = f"127.0.0.1:{plain}"
        self.tls = f"localhost:{tls}"  # the certificate names localhost and 127.0.0.1
        self.tls_port = tls
        self.mtls = f"127.0.0.1:{mtls}"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, certs: Certs):
    plain, tls, mtls, controller = free_port(), free_port(), free_port(), free_port()
    listeners = (f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls},MTLS://127.0.0.1:{mtls},"
                 f"CONTROLLER://127.0.0.1:{controller}")
    overrides = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        **tls_settings(certs),
        "listener.name.mtls.ssl.client.auth": "required",
        "num.partitions": "1",
        "message.max.bytes": str(2 * 1024 * 1024),
    }
    server = start_tls_node(tmp_path_factory.mktemp("tls-node"), listeners=listeners, overrides=overrides,
                            broker_port=plain, controller_port=controller)
    yield Node(server, plain, tls, mtls)
    server.stop()


def kafka_python_ssl(certs: Certs, *, client_cert: bool = False) -> dict:
    options = {"security_protocol": "SSL", "ssl_cafile": str(certs.ca), "ssl_check_hostname": True}
    if client_cert:
        options |= {"ssl_certfile": str(certs.client_cert), "ssl_keyfile": str(certs.client_key)}
    return options


def produce_kafka_python(bootstrap: str, topic: str, values: list[bytes], **ssl_options) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", max_request_size=4 * 1024 * 1024,
                             **ssl_options)
    try:
        for v in values:
            producer.send(topic, v)
        producer.flush(WAIT_S)
    finally:
        producer.close()


def consume_kafka_python(bootstrap: str, topic: str, count: int, **options) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                             **options)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        out: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        while len(out) < count:
            assert time.monotonic() < deadline, f"kafka-python got {len(out)} of {count} records over TLS"
            for records in consumer.poll(timeout_ms=500).values():
                out.extend(r.value for r in records)
        return out
    finally:
        consumer.close()


def test_kafka_python_produces_and_consumes_over_tls(node: Node, certs: Certs) -> None:
    values = [f"kp-{i}".encode() for i in range(200)]
    produce_kafka_python(node.tls, "tls-kp", values, **kafka_python_ssl(certs))
    assert consume_kafka_python(node.tls, "tls-kp", 200, **kafka_python_ssl(certs)) == values
    # the same records through the PLAINTEXT listener of the same node
    assert consume_kafka_python(node.plain, "tls-kp", 200) == values


def test_a_fetch_of_several_mib_over_tls_arrives_intact(node: Node, certs: Certs) -> None:
    # 12 records of 1 MiB, consumed with fetch sizes that take several of them per Fetch: record data read from
    # the log dirs goes through the TLS transport, not sendfile
    values = [bytes([i]) * 1000 + bytes(range(256)) * 4096 for i in range(12)]
    produce_kafka_python(node.plain, "tls-big", values)
    got = consume_kafka_python(node.tls, "tls-big", len(values), fetch_max_bytes=50 * 1024 * 1024,
                               max_partition_fetch_bytes=8 * 1024 * 1024, receive_buffer_bytes=None,
                               **kafka_python_ssl(certs))
    assert got == values


def test_confluent_kafka_over_tls_and_mutual_tls(node: Node, certs: Certs) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    for bootstrap, extra in [(node.tls, {}), (node.mtls, {"ssl.certificate.location": str(certs.client_cert),
                                                           "ssl.key.location": str(certs.client_key)})]:
        common = {"bootstrap.servers": bootstrap, "security.protocol": "SSL", "ssl.ca.location": str(certs.ca),
                  "log_level": 3, **extra}
        topic = f"tls-ck-{bootstrap.rsplit(':', 1)[1]}"
        producer = Producer({**common, "linger.ms": 5, "message.max.bytes": 4 * 1024 * 1024})
        values = [f"ck-{i}".encode() * 100 for i in range(300)] + [b"m" * (3 * 1024 * 1024 // 2)]
        for v in values:
            producer.produce(topic, v)
        assert producer.flush(WAIT_S) == 0
        del producer
        consumer = Consumer({**common, "group.id": "tls", "enable.auto.commit": False,
                             "fetch.max.bytes": 8 * 1024 * 1024, "max.partition.fetch.bytes": 8 * 1024 * 1024})
        try:
            consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
            got: list[bytes] = []
            deadline = time.monotonic() + WAIT_S
            while len(got) < len(values):
                assert time.monotonic() < deadline, f"confluent-kafka got {len(got)} of {len(values)} over TLS"
                for m in consumer.consume(1000, 0.5):
                    assert m.error() is None, m.error()
                    got.append(m.value())
            assert got == values
        finally:
            consumer.close()


def test_aiokafka_over_mutual_tls(node: Node, certs: Certs) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.helpers import create_ssl_context

    async def run() -> list[bytes]:
        context = create_ssl_context(cafile=str(certs.ca), certfile=str(certs.client_cert),
                                     keyfile=str(certs.client_key))
        options = {"bootstrap_servers": node.mtls, "security_protocol": "SSL", "ssl_context": context}
        producer = AIOKafkaProducer(max_request_size=4 * 1024 * 1024, **options)
        await producer.start()
        try:
            for i in range(100):
                await producer.send("tls-aio", f"aio-{i}".encode() * 2000)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(enable_auto_commit=False, max_partition_fetch_bytes=4 * 1024 * 1024,
                                    **options)
        await consumer.start()
        try:
            tp = TopicPartition("tls-aio", 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            out: list[bytes] = []
            deadline = time.monotonic() + WAIT_S
            while len(out) < 100:
                assert time.monotonic() < deadline, f"aiokafka got {len(out)} of 100 over TLS"
                for batch in (await consumer.getmany(timeout_ms=500)).values():
                    out.extend(r.value for r in batch)
            return out
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [f"aio-{i}".encode() * 2000 for i in range(100)]


def handshake(port: int, certs: Certs, cert: Path | None, key: Path | None) -> bytes:
    """A TLS connection to the MTLS listener presenting `cert` (or none); sends ApiVersions v0 and returns what
    comes back (b"" when the server closed the connection)."""
    context = ssl.create_default_context(cafile=str(certs.ca))
    if cert is not None:
        context.load_cert_chain(str(cert), str(key))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        try:
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(api_versions_frame())
                return tls.recv(4)
        except (ssl.SSLError, ConnectionError):
            return b""


def api_versions_frame() -> bytes:
    body = struct.pack(">hhih", 18, 0, 7, 4) + b"test"
    return struct.pack(">i", len(body)) + body


def test_mutual_tls_refuses_untrusted_and_missing_client_certificates(node: Node, certs: Certs) -> None:
    port = int(node.mtls.rsplit(":", 1)[1])
    assert len(handshake(port, certs, certs.client_cert, certs.client_key)) == 4  # trusted: answered
    assert handshake(port, certs, certs.rogue_cert, certs.rogue_key) == b""
    assert handshake(port, certs, None, None) == b""
    # confluent-kafka with the untrusted certificate gets no metadata; with the trusted one it does
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    common = {"bootstrap.servers": node.mtls, "security.protocol": "SSL", "ssl.ca.location": str(certs.ca),
              "log_level": 0}
    with pytest.raises(KafkaException):
        AdminClient({**common, "ssl.certificate.location": str(certs.rogue_cert),
                     "ssl.key.location": str(certs.rogue_key)}).list_topics(timeout=3)
    trusted = AdminClient({**common, "ssl.certificate.location": str(certs.client_cert),
                           "ssl.key.location": str(certs.client_key)})
    assert 1 in trusted.list_topics(timeout=WAIT_S).brokers
    deadline = time.monotonic() + WAIT_S
    while not (refused := [e for e in log_lines(node.server) if e.get("listener") == "MTLS"
                           and "client certificate refused" in e.get("error", "")]):
        assert time.monotonic() < deadline, "no log line for the refused certificate"
        time.sleep(0.1)
    assert "certificate" in refused[0]["error"] and refused[0]["peer"].startswith("127.0.0.1:")


def log_lines(server: LiveServer) -> list[dict]:
    out = []
    for line in server.stderr_path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def test_a_plaintext_client_on_the_tls_port_is_dropped_and_tls_clients_go_on(node: Node, certs: Certs) -> None:
    from kafka import KafkaProducer

    # a client that connects and never finishes its handshake holds nothing but its own socket meanwhile
    silent = socket.create_connection(("127.0.0.1", node.tls_port), timeout=10)
    silent.sendall(b"\x16\x03\x01")  # the first bytes of a TLS record, and then nothing
    producer = KafkaProducer(bootstrap_servers=node.tls, acks="all", **kafka_python_ssl(certs))
    try:
        producer.send("tls-mixed", b"before").get(WAIT_S)
        with socket.create_connection(("127.0.0.1", node.tls_port), timeout=10) as plain:
            plain.sendall(api_versions_frame())
            client_port = plain.getsockname()[1]
            try:
                answer = plain.recv(4096)
            except ConnectionError:
                answer = b""
            # whatever comes back is no Kafka answer (at most a TLS alert), and the server closes the connection
            assert not answer.startswith(struct.pack(">i", len(answer) - 4)) or len(answer) < 8
            rest = b""
            try:
                while chunk := plain.recv(4096):
                    rest += chunk
            except ConnectionError:
                pass
        producer.send("tls-mixed", b"after").get(WAIT_S)
    finally:
        producer.close()
    assert consume_kafka_python(node.tls, "tls-mixed", 2, **kafka_python_ssl(certs)) == [b"before", b"after"]
    silent.close()
    deadline = time.monotonic() + WAIT_S
    while True:
        failed = [e for e in log_lines(node.server) if e.get("event", "").startswith("TLS handshake failed")
                  and e.get("peer") == f"127.0.0.1:{client_port}"]
        if failed or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert len(failed) == 1, failed
    assert failed[0]["listener"] == "SSL" and "not TLS" in failed[0]["error"]
    assert node.server.running


def test_kjbod_tools_connect_with_command_config(node: Node, certs: Certs, tmp_path: Path) -> None:
    """`--command-config FILE` (Kafka's client properties) takes kjbod's admin commands over mutual TLS."""
    import subprocess

    from live import COMMAND

    client = tmp_path / "client.properties"
    client.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={certs.ca}\n"
                      f"ssl.keystore.type=PEM\nssl.keystore.location={tmp_path / 'client-keystore.pem'}\n")
    (tmp_path / "client-keystore.pem").write_text(certs.client_key.read_text() + certs.client_cert.read_text())

    def describe(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*COMMAND, "log-dirs", "describe", "--bootstrap-server", node.mtls, "--json",
                               "--timeout", "5", *extra], capture_output=True, text=True, timeout=60)

    done = describe("--command-config", str(client))
    assert done.returncode == 0, done.stderr
    brokers = json.loads(done.stdout)["brokers"]
    assert [b["broker"] for b in brokers] == [1] and len(brokers[0]["log_dirs"]) == 2
    groups = subprocess.run([*COMMAND, "consumer-groups", "--bootstrap-server", node.mtls, "--command-config",
                             str(client), "--list", "--state"], capture_output=True, text=True, timeout=60)
    assert groups.returncode == 0 and groups.stdout.split()[:2] == ["GROUP", "STATE"], groups.stderr
    # without it the TLS listener gives a plaintext client nothing: one line, not a traceback
    done = describe()
    assert done.returncode != 0 and "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    # a mechanism kjbod does not serve (Kafka's default GSSAPI), and a missing trust store, are named
    bad = tmp_path / "sasl.properties"
    bad.write_text(f"security.protocol=SASL_SSL\nssl.truststore.type=PEM\nssl.truststore.location={certs.ca}\n")
    done = describe("--command-config", str(bad))
    assert done.returncode == 2 and "sasl.mechanism" in done.stderr and "GSSAPI" in done.stderr
    bad.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={tmp_path}/none.pem\n")
    done = describe("--command-config", str(bad))
    assert done.returncode == 2 and "ssl.truststore.location" in done.stderr and "none.pem" in done.stderr


def test_the_admin_client_over_tls(node: Node, certs: Certs) -> None:
    from kjbod.admin import AdminClient
    from kjbod.admin.security import ssl_context_from

    context = ssl_context_from({"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                                "ssl.truststore.location": str(certs.ca)})

    async def run():
        async with AdminClient(node.tls, ssl_context=context, request_timeout=10) as admin:
            return await admin.describe_cluster()

    cluster = asyncio.run(run())
    assert [(b.node_id, b.port) for b in cluster.brokers] == [(1, node.tls_port)]
