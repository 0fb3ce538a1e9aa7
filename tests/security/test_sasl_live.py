"""SASL listeners served by a real `kjbod serve`, driven by real clients (kafka-python, confluent-kafka, aiokafka) and
by raw sockets where the bytes matter.

One node for the module with four listeners: PLAINTEXT, SASL_PLAINTEXT and SASL_SSL (PLAIN, users admin and alice)
and the CONTROLLER. Each client produces and consumes with PLAIN; a wrong password is answered
SASL_AUTHENTICATION_FAILED with Kafka's message and closes that connection only; a Produce before authenticating
closes its connection, logged naming the peer, while authenticated clients on the same port go on; the records
cross between the PLAINTEXT and the SASL listeners; kjbod's own tools and admin client authenticate.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import struct
import subprocess
import time
from pathlib import Path

import pytest
from live import COMMAND, LiveServer

from kjbod.protocol.generated import (
    ProduceRequest,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from .conftest import Certs, free_port, start_tls_node, tls_settings

pytestmark = pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning")

WAIT_S = 30.0
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" '
        'user_admin="admin-secret" user_alice="alice-secret";')


class Node:
    def __init__(self, server: LiveServer, plain: int, sasl: int, sasl_ssl: int) -> None:
        self.server = server
        self.plain = f"127.0.0.1:{plain}"
        self.sasl = f"127.0.0.1:{sasl}"
        self.sasl_port = sasl
        self.sasl_ssl = f"localhost:{sasl_ssl}"

    def log(self) -> str:
        return (self.server.directory / "stderr.log").read_text()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, certs: Certs):
    plain, sasl, sasl_ssl, controller = free_port(), free_port(), free_port(), free_port()
    listeners = (f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl},"
                 f"SASL_SSL://127.0.0.1:{sasl_ssl},CONTROLLER://127.0.0.1:{controller}")
    overrides = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,"
                                          "CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        **tls_settings(certs),
        "num.partitions": "1",
    }
    server = start_tls_node(tmp_path_factory.mktemp("sasl-node"), listeners=listeners, overrides=overrides,
                            broker_port=plain, controller_port=controller)
    yield Node(server, plain, sasl, sasl_ssl)
    server.stop()


def kafka_python_sasl(user: str = "alice", password: str = "alice-secret", **extra: object) -> dict:
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": user,
            "sasl_plain_password": password, **extra}


def produce_kafka_python(bootstrap: str, topic: str, values: list[bytes], **options: object) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **options)
    try:
        for v in values:
            producer.send(topic, v)
        producer.flush(WAIT_S)
    finally:
        producer.close()


def consume_kafka_python(bootstrap: str, topic: str, count: int, **options: object) -> list[bytes]:
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
            assert time.monotonic() < deadline, f"kafka-python got {len(out)} of {count} records over SASL"
            for records in consumer.poll(timeout_ms=500).values():
                out.extend(r.value for r in records)
        return out
    finally:
        consumer.close()


def test_kafka_python_plain_produces_and_consumes_and_plaintext_sees_the_same(node: Node) -> None:
    values = [f"kp-{i}".encode() for i in range(200)]
    produce_kafka_python(node.sasl, "sasl-kp", values, **kafka_python_sasl())
    assert consume_kafka_python(node.sasl, "sasl-kp", 200, **kafka_python_sasl("admin", "admin-secret")) == values
    # the PLAINTEXT listener of the same node serves side by side, without authentication
    assert consume_kafka_python(node.plain, "sasl-kp", 200) == values


def test_kafka_python_over_sasl_ssl(node: Node, certs: Certs) -> None:
    options = kafka_python_sasl(security_protocol="SASL_SSL", ssl_cafile=str(certs.ca), ssl_check_hostname=True)
    values = [f"ssl-{i}".encode() for i in range(50)]
    produce_kafka_python(node.sasl_ssl, "sasl-ssl-kp", values, **options)
    assert consume_kafka_python(node.sasl_ssl, "sasl-ssl-kp", 50, **options) == values


def test_confluent_kafka_plain(node: Node) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    common = {"bootstrap.servers": node.sasl, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
              "sasl.username": "alice", "sasl.password": "alice-secret", "log_level": 3}
    producer = Producer({**common, "linger.ms": 5})
    values = [f"ck-{i}".encode() for i in range(300)]
    for v in values:
        producer.produce("sasl-ck", v)
    assert producer.flush(WAIT_S) == 0
    del producer
    consumer = Consumer({**common, "group.id": "sasl", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("sasl-ck", 0, OFFSET_BEGINNING)])
        got: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < len(values):
            assert time.monotonic() < deadline, f"confluent-kafka got {len(got)} of {len(values)} over SASL"
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
        assert got == values
    finally:
        consumer.close()


def test_confluent_kafka_wrong_password_is_refused(node: Node) -> None:
    from confluent_kafka import KafkaError, Producer

    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": node.sasl, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "wrong",
                         "log_level": 0, "error_cb": errors.append})
    deadline = time.monotonic() + WAIT_S
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors):
        assert time.monotonic() < deadline, f"no authentication error reported: {errors}"
        producer.poll(0.2)
    message = next(e for e in errors if e.code() == KafkaError._AUTHENTICATION).str()
    assert "Authentication failed: Invalid username or password" in message
    del producer


def test_aiokafka_plain(node: Node) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def run() -> list[bytes]:
        options = {"bootstrap_servers": node.sasl, "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                   "sasl_plain_username": "alice", "sasl_plain_password": "alice-secret"}
        producer = AIOKafkaProducer(**options)
        await producer.start()
        try:
            for i in range(100):
                await producer.send("sasl-aio", f"aio-{i}".encode())
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(enable_auto_commit=False, **options)
        await consumer.start()
        try:
            tp = TopicPartition("sasl-aio", 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            out: list[bytes] = []
            deadline = time.monotonic() + WAIT_S
            while len(out) < 100:
                assert time.monotonic() < deadline, f"aiokafka got {len(out)} of 100 over SASL"
                for batch in (await consumer.getmany(timeout_ms=500)).values():
                    out.extend(r.value for r in batch)
            return out
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [f"aio-{i}".encode() for i in range(100)]


# -- raw sockets ------------------------------------------------------------------------------------------------------


def request(key: int, version: int, corr: int, body: object) -> bytes:
    header = struct.pack(">hhih", key, version, corr, 4) + b"test"
    if key == 36 and version >= 2:
        header += b"\x00"
    data = header + body.encode(version)  # type: ignore[attr-defined]
    return struct.pack(">i", len(data)) + data


def read_frame(sock: socket.socket) -> bytes:
    """One size-prefixed frame, or b"" when the server closed the connection."""
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return b""
        head += chunk
    (size,) = struct.unpack(">i", head)
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return b""
        data += chunk
    return data


def authenticate(sock: socket.socket, user: str, password: str) -> SaslAuthenticateResponse:
    sock.sendall(request(17, 1, 1, SaslHandshakeRequest(mechanism="PLAIN")))
    handshake = SaslHandshakeResponse.decode(read_frame(sock)[4:], 1)
    assert handshake.error_code == 0 and "PLAIN" in handshake.mechanisms
    token = b"\x00" + user.encode() + b"\x00" + password.encode()
    sock.sendall(request(36, 1, 2, SaslAuthenticateRequest(auth_bytes=token)))
    return SaslAuthenticateResponse.decode(read_frame(sock)[4:], 1)


def test_wrong_password_answers_sasl_authentication_failed_and_closes_that_connection_only(node: Node) -> None:
    with socket.create_connection(("127.0.0.1", node.sasl_port), timeout=10) as good:
        assert authenticate(good, "alice", "alice-secret").error_code == 0
        with socket.create_connection(("127.0.0.1", node.sasl_port), timeout=10) as bad:
            answer = authenticate(bad, "alice", "not-her-password")
            assert answer.error_code == 58  # SASL_AUTHENTICATION_FAILED
            assert answer.error_message == "Authentication failed: Invalid username or password"
            assert read_frame(bad) == b""  # then the server closes it
        # the authenticated connection goes on
        values = [b"after-a-bad-client"]
        produce_kafka_python(node.sasl, "sasl-after-bad", values, **kafka_python_sasl())
    assert consume_kafka_python(node.sasl, "sasl-after-bad", 1, **kafka_python_sasl()) == values


def test_unsupported_mechanism_lists_the_enabled_ones(node: Node) -> None:
    with socket.create_connection(("127.0.0.1", node.sasl_port), timeout=10) as sock:
        sock.sendall(request(17, 1, 1, SaslHandshakeRequest(mechanism="GSSAPI")))
        answer = SaslHandshakeResponse.decode(read_frame(sock)[4:], 1)
        assert (answer.error_code, answer.mechanisms) == (33, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
        assert read_frame(sock) == b""


def test_an_unauthenticated_produce_closes_that_connection_only(node: Node) -> None:
    with socket.create_connection(("127.0.0.1", node.sasl_port), timeout=10) as good:
        assert authenticate(good, "admin", "admin-secret").error_code == 0
        with socket.create_connection(("127.0.0.1", node.sasl_port), timeout=10) as rogue:
            rogue.sendall(request(0, 9, 5, ProduceRequest(acks=1, timeout_ms=1000, topic_data=[])))
            assert read_frame(rogue) == b""
            peer = f"127.0.0.1:{rogue.getsockname()[1]}"
        # the authenticated connection is served: ApiVersions v0 answered
        good.sendall(struct.pack(">ihhih", 12, 18, 0, 9, 2) + b"ok")
        answer = read_frame(good)
        assert struct.unpack(">ih", answer[:6]) == (9, 0)
    deadline = time.monotonic() + WAIT_S
    while not any(peer in line and "unexpected request Produce v9 during SASL handshake" in line
                  for line in node.log().splitlines()):
        assert time.monotonic() < deadline, "the refused Produce was not logged with its peer"
        time.sleep(0.1)


def test_a_v0_handshake_then_a_raw_token(node: Node) -> None:
    with socket.create_connection(("127.0.0.1", node.sasl_port), timeout=10) as sock:
        sock.sendall(request(17, 0, 1, SaslHandshakeRequest(mechanism="PLAIN")))
        assert SaslHandshakeResponse.decode(read_frame(sock)[4:], 0).error_code == 0
        token = b"\x00alice\x00alice-secret"
        sock.sendall(struct.pack(">i", len(token)) + token)
        assert sock.recv(4) == b"\x00\x00\x00\x00"  # PLAIN's empty answer, framed by its size
        sock.sendall(struct.pack(">ihhih", 12, 18, 0, 3, 2) + b"ok")
        assert struct.unpack(">ih", read_frame(sock)[:6]) == (3, 0)


# -- kjbod's own clients ----------------------------------------------------------------------------------------------


def test_kjbod_tools_and_admin_client_authenticate(node: Node, tmp_path: Path) -> None:
    client = tmp_path / "client.properties"
    client.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                      "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                      "username=\"alice\" password=\"alice-secret\";\n")

    def describe(config: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*COMMAND, "log-dirs", "describe", "--bootstrap-server", node.sasl, "--json",
                               "--timeout", "5", "--command-config", str(config)],
                              capture_output=True, text=True, timeout=60)

    done = describe(client)
    assert done.returncode == 0, done.stderr
    assert [b["broker"] for b in json.loads(done.stdout)["brokers"]] == [1]
    wrong = tmp_path / "wrong.properties"
    wrong.write_text(client.read_text().replace("alice-secret", "guess"))
    done = describe(wrong)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "Invalid username or password" in done.stderr

    from kjbod.admin import AdminClient
    from kjbod.net.sasl import SaslCredentials

    async def run():
        async with AdminClient(node.sasl, sasl=SaslCredentials("PLAIN", "admin", "admin-secret"),
                               request_timeout=10) as admin:
            return await admin.describe_cluster()

    cluster = asyncio.run(run())
    assert [(b.node_id, b.port) for b in cluster.brokers] == [(1, node.sasl_port)]


def test_ssl_context_is_not_needed_for_sasl_plaintext() -> None:
    from kjbod.admin.security import connection_options_from

    options = connection_options_from({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                       "sasl.jaas.config": 'x.Y required username="u" password="p";'})
    assert options["ssl_context"] is None and options["sasl"].username == "u"
    assert isinstance(connection_options_from({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                               "sasl.jaas.config": 'x.Y required username="u" password="p";'})
                      ["ssl_context"], ssl.SSLContext)


# -- SCRAM ------------------------------------------------------------------------------------------------------------


def test_scram_users_created_used_described_and_deleted(node: Node) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": node.sasl, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-secret",
                         "log_level": 0})
    upserts = [UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                                            b"carol-256"),
               UserScramCredentialUpsertion("dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                            b"dave-512")]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(WAIT_S)
    # too few iterations: Kafka's error and message
    weak = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000), b"pw")])["erin"]
    with pytest.raises(Exception, match="Too few iterations"):
        weak.result(WAIT_S)

    described = {user: f.result(WAIT_S) for user, f in admin.describe_user_scram_credentials(["carol", "dave"]).items()}
    assert [(i.mechanism, i.iterations) for i in described["carol"].scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 8192)]
    assert [(i.mechanism, i.iterations) for i in described["dave"].scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 4096)]

    def scram(user: str, password: str, mechanism: str) -> dict:
        return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism, "sasl_plain_username": user,
                "sasl_plain_password": password}

    values = [b"scram-1", b"scram-2"]
    deadline = time.monotonic() + WAIT_S
    while scram_login(node.sasl_port, "SCRAM-SHA-256", "carol", "carol-256")[0] != 0:  # the broker's image has it
        assert time.monotonic() < deadline, "carol could not log in with SCRAM-SHA-256"
        time.sleep(0.2)
    produce_kafka_python(node.sasl, "sasl-scram", values, **scram("carol", "carol-256", "SCRAM-SHA-256"))
    assert consume_kafka_python(node.sasl, "sasl-scram", 2, **scram("dave", "dave-512", "SCRAM-SHA-512")) == values

    # a wrong SCRAM password: Kafka's generic message, then the connection closes
    assert scram_login(node.sasl_port, "SCRAM-SHA-256", "carol", "not-carols") == (
        58, "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256")

    # kjbod's admin client logs in with SCRAM too
    from kjbod.admin import AdminClient as KjbodAdmin
    from kjbod.net.sasl import SaslCredentials

    async def run():
        async with KjbodAdmin(node.sasl, sasl=SaslCredentials("SCRAM-SHA-512", "dave", "dave-512"),
                              request_timeout=10) as kjbod_admin:
            return await kjbod_admin.describe_cluster()

    assert [b.node_id for b in asyncio.run(run()).brokers] == [1]

    # deleted: described as not found, and the user can no longer log in
    deletion = admin.alter_user_scram_credentials([UserScramCredentialDeletion("carol",
                                                                               ScramMechanism.SCRAM_SHA_256)])
    deletion["carol"].result(WAIT_S)
    with pytest.raises(Exception, match="does not exist"):
        admin.describe_user_scram_credentials(["carol"])["carol"].result(WAIT_S)
    assert scram_login(node.sasl_port, "SCRAM-SHA-256", "carol", "carol-256")[0] == 58
    assert scram_login(node.sasl_port, "SCRAM-SHA-512", "dave", "dave-512") == (0, None)


def test_kafka_python_admin_manages_scram_users(node: Node) -> None:
    from kafka.admin import (
        KafkaAdminClient,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = KafkaAdminClient(bootstrap_servers=node.sasl, **kafka_python_sasl("admin", "admin-secret"))
    try:
        done = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "frank", ScramMechanism.SCRAM_SHA_512, "frank-pw", iterations=5000)])
        assert done == {"frank": None}
        described = admin.describe_user_scram_credentials(["frank"])
        assert described["frank"]["error"] is None
        assert [(i["mechanism"], i["iterations"]) for i in described["frank"]["credential_infos"]] == [
            (ScramMechanism.SCRAM_SHA_512, 5000)]
        deadline = time.monotonic() + WAIT_S
        while scram_login(node.sasl_port, "SCRAM-SHA-512", "frank", "frank-pw") != (0, None):
            assert time.monotonic() < deadline, "frank could not log in"
            time.sleep(0.2)
        assert admin.alter_user_scram_credentials([UserScramCredentialDeletion(
            "frank", ScramMechanism.SCRAM_SHA_512)]) == {"frank": None}
        described = admin.describe_user_scram_credentials(["frank"])
        assert "does not exist" in (described["frank"]["error"] or "")
    finally:
        admin.close()


def scram_login(port: int, mechanism: str, user: str, password: str) -> tuple[int, str | None]:
    """A SCRAM exchange on a raw socket: (0, None) when it succeeded, else the error code and message of the
    SaslAuthenticate answer that refused it (the server then closes the connection)."""
    from kjbod.net.scram import MECHANISMS, ScramClient

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request(17, 1, 1, SaslHandshakeRequest(mechanism=mechanism)))
        assert SaslHandshakeResponse.decode(read_frame(sock)[4:], 1).error_code == 0
        client = ScramClient(MECHANISMS[mechanism], user, password)
        token = client.first()
        for step in range(2):
            sock.sendall(request(36, 1, 2 + step, SaslAuthenticateRequest(auth_bytes=token)))
            answer = SaslAuthenticateResponse.decode(read_frame(sock)[4:], 1)
            if answer.error_code != 0:
                assert read_frame(sock) == b""
                return answer.error_code, answer.error_message
            if step == 0:
                token = client.final(answer.auth_bytes)
        client.verify(answer.auth_bytes)
        return 0, None


def test_aiokafka_scram_sha_256(node: Node) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": node.sasl, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-secret",
                         "log_level": 0})
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "heidi", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"heidi-pw")])["heidi"].result(WAIT_S)
    deadline = time.monotonic() + WAIT_S
    while scram_login(node.sasl_port, "SCRAM-SHA-256", "heidi", "heidi-pw") != (0, None):
        assert time.monotonic() < deadline, "heidi could not log in"
        time.sleep(0.2)

    async def run() -> list[bytes]:
        options = {"bootstrap_servers": node.sasl, "security_protocol": "SASL_PLAINTEXT",
                   "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "heidi", "sasl_plain_password": "heidi-pw"}
        producer = AIOKafkaProducer(**options)
        await producer.start()
        try:
            for i in range(50):
                await producer.send("sasl-aio-scram", f"h-{i}".encode())
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(enable_auto_commit=False, **options)
        await consumer.start()
        try:
            tp = TopicPartition("sasl-aio-scram", 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            out: list[bytes] = []
            while len(out) < 50:
                assert time.monotonic() < deadline, f"aiokafka got {len(out)} of 50 over SCRAM"
                for batch in (await consumer.getmany(timeout_ms=500)).values():
                    out.extend(r.value for r in batch)
            return out
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [f"h-{i}".encode() for i in range(50)]


def test_big_requests_wait_for_authentication(node: Node) -> None:
    """Before authenticating, a size prefix over Kafka's sasl.server.max.receive.size (512 KiB) closes the connection
    before any body is read; once authenticated, requests up to socket.request.max.bytes are served."""
    with socket.create_connection(("127.0.0.1", node.sasl_port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", 600 * 1024))
        assert read_frame(sock) == b""
    big = [bytes(range(256)) * 3000]  # 768000 bytes: a Produce request bigger than the pre-authentication limit
    produce_kafka_python(node.sasl, "sasl-big", big, max_request_size=2 * 1024 * 1024, **kafka_python_sasl())
    assert consume_kafka_python(node.sasl, "sasl-big", 1, **kafka_python_sasl()) == big
