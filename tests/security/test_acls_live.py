"""The ACL authorizer on a real `kjbod serve`, driven by kafka-python and confluent-kafka over SASL PLAIN.

One node for the module with Kafka's StandardAuthorizer, `super.users=User:admin` and three PLAIN users (admin,
alice, bob) on a SASL_PLAINTEXT listener. alice may do nothing until ACLs are added (kafka-python and
confluent-kafka see Kafka's TOPIC_AUTHORIZATION_FAILED and GROUP_AUTHORIZATION_FAILED); DENY beats ALLOW; a
prefixed ACL covers every topic it starts; a group consumer needs READ on its group; the admin calls of both
clients create, describe and delete ACLs; ACLs survive a restart; requests Kafka cannot parse close their
connection. A second node without an authorizer answers the ACL APIs SECURITY_DISABLED.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from live import COMMAND, start_server

from kjbod.protocol.generated import (
    CreateAclsRequest,
    CreateAclsResponse,
    MetadataResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
)
from kjbod.protocol.generated.create_acls_request import AclCreation
from kjbod.protocol.headers import request_header_version, response_header_version

from .conftest import Certs, free_port, start_tls_node, tls_settings

WAIT_S = 30.0
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" '
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


class Node:
    def __init__(self, server: Any, sasl: int) -> None:
        self.server = server
        self.sasl_port = sasl
        self.bootstrap = f"127.0.0.1:{sasl}"

    def log(self) -> str:
        return (self.server.directory / "stderr.log").read_text()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory):
    plain, sasl, controller = free_port(), free_port(), free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl},CONTROLLER://127.0.0.1:{controller}"
    overrides = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": STANDARD,
        "super.users": "User:admin",
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
    }
    server = start_tls_node(tmp_path_factory.mktemp("acl-node"), listeners=listeners, overrides=overrides,
                            broker_port=plain, controller_port=controller)
    yield Node(server, sasl)
    server.stop()


def sasl(user: str) -> dict[str, Any]:
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": user,
            "sasl_plain_password": USERS[user]}


def confluent_sasl(user: str) -> dict[str, Any]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": USERS[user]}


def admin(node: Node, user: str = "admin") -> Any:
    from kafka import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=node.bootstrap, **sasl(user))


def acl(principal: str, op: str, name: str, *, kind: str = "TOPIC", permission: str = "ALLOW",
        pattern: str = "LITERAL") -> Any:
    from kafka.admin import (
        ACL,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourceType,
    )

    return ACL(principal=principal, host="*", operation=ACLOperation[op],
               permission_type=ACLPermissionType[permission],
               resource_pattern=ResourcePattern(ResourceType[kind], name, ACLResourcePatternType[pattern]))


def add_acls(node: Node, *acls: Any) -> None:
    client = admin(node)
    try:
        result = client.create_acls(list(acls))
    finally:
        client.close()
    assert not result["failed"], result


def create_topic(node: Node, name: str) -> None:
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    client = admin(node)
    try:
        client.create_topics([NewTopic(name, 1, 1)])
    except TopicAlreadyExistsError:
        pass
    finally:
        client.close()


def eventually(check: Callable[[], Any], what: str) -> Any:
    """ACLs reach the node's image a moment after the controller answered: ask again until `check` passes."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            return check()
        except Exception as e:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: still failing after {WAIT_S}s: {e!r}") from e
            time.sleep(0.3)


def produce(node: Node, user: str, topic: str, value: bytes = b"v") -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=node.bootstrap, acks="all", max_block_ms=5000, **sasl(user))
    try:
        producer.send(topic, value).get(timeout=10)
    finally:
        producer.close()


def consume_one(node: Node, user: str, topic: str, wait_s: float = 10) -> bytes | None:
    """The first record `user` reads from partition 0 of `topic` with kafka-python, or None if nothing came
    within `wait_s` (kafka-python's consumer logs a topic it may not describe and goes on waiting)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=node.bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", **sasl(user))
    try:
        consumer.assign([TopicPartition(topic, 0)])
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                return bytes(records[0].value)
        return None
    finally:
        consumer.close()


def read_some(node: Node, user: str, topic: str) -> bytes:
    value = consume_one(node, user, topic)
    assert value is not None, f"{user} read nothing from {topic}"
    return value


def test_alice_needs_acls_to_produce_and_consume(node: Node) -> None:
    from kafka.errors import KafkaTimeoutError, TopicAuthorizationFailedError

    create_topic(node, "orders")
    with pytest.raises((TopicAuthorizationFailedError, KafkaTimeoutError)) as refused:
        produce(node, "alice", "orders")
    assert "orders" in str(refused.value) or isinstance(refused.value, KafkaTimeoutError)
    produce(node, "admin", "orders", b"from-admin")  # a super user needs no ACL
    assert consume_one(node, "alice", "orders", wait_s=3) is None

    add_acls(node, acl("User:alice", "WRITE", "orders"), acl("User:alice", "READ", "orders"))
    eventually(lambda: produce(node, "alice", "orders", b"from-alice"), "alice producing after WRITE was allowed")
    assert eventually(lambda: read_some(node, "alice", "orders"), "alice reading") == b"from-admin"
    # bob still may not
    with pytest.raises((TopicAuthorizationFailedError, KafkaTimeoutError)):
        produce(node, "bob", "orders")


def test_confluent_kafka_sees_kafkas_authorization_errors(node: Node) -> None:
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

    create_topic(node, "payments")
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": node.bootstrap, **confluent_sasl("alice"), "message.timeout.ms": 5000})
    producer.produce("payments", b"x", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(15)
    del producer
    assert errors and errors[0] is not None
    assert errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    produce(node, "admin", "payments", b"p1")
    consumer = Consumer({"bootstrap.servers": node.bootstrap, **confluent_sasl("alice"), "group.id": "pay",
                         "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition("payments", 0, 0)])
        seen = None
        deadline = time.monotonic() + 15
        while seen is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                seen = msg.error().code() if msg.error() else "a record"
        assert seen == KafkaError.GROUP_AUTHORIZATION_FAILED  # librdkafka asks for its group before reading
    finally:
        consumer.close()

    add_acls(node, acl("User:alice", "WRITE", "payments"))

    def delivered() -> None:
        outcome: list[Any] = []
        p = Producer({"bootstrap.servers": node.bootstrap, **confluent_sasl("alice"), "message.timeout.ms": 5000})
        p.produce("payments", b"y", on_delivery=lambda err, msg: outcome.append(err))
        p.flush(15)
        assert outcome == [None], outcome

    eventually(delivered, "confluent-kafka producing after WRITE was allowed")


def test_deny_beats_allow_and_prefixed_acls(node: Node) -> None:
    from kafka.errors import KafkaTimeoutError, TopicAuthorizationFailedError

    for t in ("open", "secret", "logs-app", "other"):
        create_topic(node, t)
    add_acls(node, acl("User:bob", "ALL", "*"), acl("User:bob", "WRITE", "secret", permission="DENY"),
             acl("User:alice", "WRITE", "logs-", pattern="PREFIXED"))
    eventually(lambda: produce(node, "bob", "open"), "bob writing under ALL on *")
    with pytest.raises((TopicAuthorizationFailedError, KafkaTimeoutError)):
        produce(node, "bob", "secret")
    eventually(lambda: produce(node, "alice", "logs-app"), "alice writing under the prefixed ACL")
    with pytest.raises((TopicAuthorizationFailedError, KafkaTimeoutError)):
        produce(node, "alice", "other")


def test_a_group_consumer_needs_read_on_its_group(node: Node) -> None:
    from kafka import KafkaConsumer
    from kafka.errors import GroupAuthorizationFailedError

    create_topic(node, "grouped")
    produce(node, "admin", "grouped", b"g1")
    add_acls(node, acl("User:alice", "READ", "grouped"))

    def read_in_group() -> bytes:
        consumer = KafkaConsumer("grouped", bootstrap_servers=node.bootstrap, group_id="alice-group",
                                 auto_offset_reset="earliest", enable_auto_commit=False, **sasl("alice"))
        try:
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=500).values():
                    return bytes(records[0].value)
            raise AssertionError("nothing read in the group")
        finally:
            consumer.close()

    with pytest.raises(GroupAuthorizationFailedError):
        read_in_group()
    add_acls(node, acl("User:alice", "READ", "alice-group", kind="GROUP"))
    assert eventually(read_in_group, "alice consuming in her group") == b"g1"


def test_admin_calls_describe_and_delete_and_acls_survive_a_restart(node: Node) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KResourceType

    confluent = AdminClient({"bootstrap.servers": node.bootstrap, **confluent_sasl("admin")})
    binding = AclBinding(ResourceType.TOPIC, "audit", ResourcePatternType.LITERAL, "User:carol", "*",
                         AclOperation.DESCRIBE, AclPermissionType.ALLOW)
    for f in confluent.create_acls([binding]).values():
        assert f.result(timeout=15) is None
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY)
    listed = confluent.describe_acls(everything).result(timeout=15)
    assert binding in listed
    assert any(b.name == "logs-" and b.resource_pattern_type == ResourcePatternType.PREFIXED for b in listed)

    node.server.stop()
    node.server.start()

    client = admin(node)
    try:
        carol = ACLFilter(principal="User:carol", host=None, operation=ACLOperation.ANY,
                          permission_type=ACLPermissionType.ANY,
                          resource_pattern=ResourcePatternFilter(KResourceType.ANY, None,
                                                                 ACLResourcePatternType.ANY))
        found, error = eventually(lambda: client.describe_acls(carol), "describing after the restart")
        assert [(a.resource_pattern.resource_name, a.operation) for a in found] == [("audit", ACLOperation.DESCRIBE)]
        ((_, removed, error),) = client.delete_acls([carol])
        assert error.errno == 0 and [a.resource_pattern.resource_name for a in removed] == ["audit"]
        found, _ = client.describe_acls(carol)
        assert found == []
    finally:
        client.close()
    # alice's ACLs from the other tests came back with the node
    eventually(lambda: produce(node, "alice", "orders", b"after-restart"), "alice producing after the restart")


def test_only_the_cluster_alter_right_may_change_acls(node: Node) -> None:
    from kafka.errors import ClusterAuthorizationFailedError

    client = admin(node, "bob")
    try:
        result = client.create_acls([acl("User:bob", "ALL", "kafka-cluster", kind="CLUSTER")])
        assert result["failed"] == [ClusterAuthorizationFailedError]
    finally:
        client.close()


# -- requests Kafka refuses ------------------------------------------------------------------------------------------


def frame(key: int, version: int, corr: int, body: Any) -> bytes:
    client = b"acl-test"
    header = struct.pack(">hhih", key, version, corr, len(client)) + client
    if request_header_version(key, version) >= 2:
        header += b"\x00"
    payload = header + body.encode(version)
    return struct.pack(">i", len(payload)) + payload


def read(sock: socket.socket, key: int, version: int) -> bytes:
    def exactly(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return out

    (size,) = struct.unpack(">i", exactly(4))
    data = exactly(size)
    return data[5:] if response_header_version(key, version) >= 1 else data[4:]


def logged_in(node: Node, user: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", node.sasl_port), timeout=10)
    sock.sendall(frame(17, 1, 1, SaslHandshakeRequest(mechanism="PLAIN")))
    read(sock, 17, 1)
    token = f"\0{user}\0{USERS[user]}".encode()
    sock.sendall(frame(36, 2, 2, SaslAuthenticateRequest(auth_bytes=token)))
    assert SaslAuthenticateResponse.decode(read(sock, 36, 2), 2).error_code == 0
    return sock


def creation(**kw: Any) -> AclCreation:
    fields = {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3, "principal": "User:x",
              "host": "*", "operation": 3, "permission_type": 3, **kw}
    return AclCreation(**fields)


def test_any_and_malformed_principals_answer_invalid_request(node: Node) -> None:
    with logged_in(node, "admin") as sock:
        sock.sendall(frame(30, 3, 3, CreateAclsRequest(creations=[
            creation(resource_type=1), creation(operation=1), creation(principal="nobody"), creation()])))
        results = CreateAclsResponse.decode(read(sock, 30, 3), 3).results
    assert [(r.error_code, r.error_message) for r in results] == [
        (42, "Invalid resourceType ANY"), (42, "Invalid operation ANY"),
        (42, "expected a string in format principalType:principalName but got nobody"), (0, None)]


def test_an_unknown_operation_closes_that_connection_only(node: Node) -> None:
    with logged_in(node, "admin") as sock:
        sock.sendall(frame(30, 3, 4, CreateAclsRequest(creations=[creation(operation=0)])))
        with pytest.raises(ConnectionError):
            read(sock, 30, 3)
    assert "CreateAcls entry has an unknown operation" in node.log()
    produce(node, "admin", "orders")  # the node serves the others


def test_acl_apis_without_an_authorizer(tmp_path: Path) -> None:
    from kafka import KafkaAdminClient
    from kafka.errors import SecurityDisabledError

    server = start_server(tmp_path / "plain", log_dir_count=1)
    try:
        client = KafkaAdminClient(bootstrap_servers=server.bootstrap)
        try:
            with pytest.raises(SecurityDisabledError):
                from kafka.admin import (
                    ACLFilter,
                    ACLOperation,
                    ACLPermissionType,
                    ACLResourcePatternType,
                    ResourcePatternFilter,
                    ResourceType,
                )

                client.describe_acls(ACLFilter(principal=None, host=None, operation=ACLOperation.ANY,
                                               permission_type=ACLPermissionType.ANY,
                                               resource_pattern=ResourcePatternFilter(
                                                   ResourceType.ANY, None, ACLResourcePatternType.ANY)))
            result = client.create_acls([acl("User:x", "READ", "t")])
            assert result["failed"] == [SecurityDisabledError]
        finally:
            client.close()
    finally:
        server.stop()


# -- kjbod acls -----------------------------------------------------------------------------------------------------


def kjbod_acls(node: Node, config: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, "acls", "--bootstrap-server", node.bootstrap, "--command-config", str(config),
                           *args], capture_output=True, text=True, timeout=60, input=stdin)


def test_kjbod_acls_adds_lists_and_removes_as_kafka_acls(node: Node, tmp_path: Path) -> None:
    config = tmp_path / "admin.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
                      "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"admin\" "
                      "password=\"admin-secret\";\n")
    resource = "`ResourcePattern(resourceType=TOPIC, name=cli-topic, patternType=LITERAL)`"
    added = kjbod_acls(node, config, "--add", "--allow-principal", "User:dave", "--operation", "Read",
                       "--operation", "Write", "--topic", "cli-topic")
    assert added.returncode == 0, added.stderr
    assert added.stdout == (f"Adding ACLs for resource {resource}: \n"
                            " \t(principal=User:dave, host=*, operation=READ, permissionType=ALLOW)\n"
                            "\t(principal=User:dave, host=*, operation=WRITE, permissionType=ALLOW) \n\n")

    def listed() -> str:
        out = kjbod_acls(node, config, "--list", "--topic", "cli-topic")
        assert out.returncode == 0, out.stderr
        assert "User:dave" in out.stdout
        return out.stdout

    assert eventually(listed, "listing the new ACLs") == (
        f"Current ACLs for resource {resource}: \n"
        " \t(principal=User:dave, host=*, operation=READ, permissionType=ALLOW)\n"
        "\t(principal=User:dave, host=*, operation=WRITE, permissionType=ALLOW) \n\n")
    by_principal = kjbod_acls(node, config, "--list", "--principal", "User:dave")
    assert by_principal.stdout.startswith("ACLs for principal `User:dave`\nCurrent ACLs for resource")

    declined = kjbod_acls(node, config, "--remove", "--topic", "cli-topic", stdin="n\n")
    assert declined.returncode == 0 and "Are you sure you want to delete all ACLs for resource filter" in declined.stdout
    assert "User:dave" in kjbod_acls(node, config, "--list", "--topic", "cli-topic").stdout
    removed = kjbod_acls(node, config, "--remove", "--force", "--allow-principal", "User:dave", "--operation",
                         "Read", "--topic", "cli-topic")
    assert removed.returncode == 0, removed.stderr

    def only_write_left() -> None:
        out = kjbod_acls(node, config, "--list", "--topic", "cli-topic").stdout
        assert "operation=READ" not in out and "operation=WRITE" in out, out

    eventually(only_write_left, "listing after the removal")


def test_kjbod_acls_for_a_transactional_producer_and_other_resources(node: Node, tmp_path: Path) -> None:
    config = tmp_path / "admin.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
                      "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"admin\" "
                      "password=\"admin-secret\";\n")
    added = kjbod_acls(node, config, "--add", "--producer", "--topic", "txn-out", "--transactional-id", "txn-app",
                       "--allow-principal", "User:erin")
    assert added.returncode == 0, added.stderr
    tid = "`ResourcePattern(resourceType=TRANSACTIONAL_ID, name=txn-app, patternType=LITERAL)`"
    assert (f"Adding ACLs for resource {tid}: \n"
            " \t(principal=User:erin, host=*, operation=WRITE, permissionType=ALLOW)\n"
            "\t(principal=User:erin, host=*, operation=DESCRIBE, permissionType=ALLOW) \n\n") in added.stdout, (
        added.stdout)
    assert "resourceType=TOPIC, name=txn-out" in added.stdout
    added = kjbod_acls(node, config, "--add", "--user-principal", "erin", "--operation", "DescribeTokens",
                       "--allow-principal", "User:frank")
    assert added.returncode == 0 and "resourceType=USER, name=erin" in added.stdout, added.stdout + added.stderr

    def listed() -> str:
        out = kjbod_acls(node, config, "--list", "--transactional-id", "txn-app")
        assert "User:erin" in out.stdout, out.stdout + out.stderr
        return out.stdout

    assert eventually(listed, "listing the transactional id's ACLs").startswith(
        f"Current ACLs for resource {tid}: \n")
    mixed = kjbod_acls(node, config, "--add", "--consumer", "--topic", "t", "--group", "g", "--transactional-id",
                       "x", "--allow-principal", "User:erin")
    assert mixed.returncode == 2 and "no --cluster or --transactional-id option should be specified" in mixed.stderr


@pytest.mark.parametrize("args, says", [
    (["--list", "--add", "--topic", "t"], "exactly one action"),
    (["--add", "--topic", "t", "--resource-pattern-type", "any", "--allow-principal", "User:x"],
     "'--resource-pattern-type' value of 'ANY' is not valid when adding acls"),
    (["--add", "--topic", "t"], "You must specify one of: --allow-principal, --deny-principal"),
    (["--add", "--group", "g", "--operation", "Write", "--allow-principal", "User:x"],
     "ResourceType GROUP only supports operations"),
    (["--add", "--topic", "t", "--allow-principal", "alice"], "principalType:principalName"),
    (["--add", "--topic", "t", "--operation", "Fly", "--allow-principal", "User:x"], "unknown operation 'Fly'"),
])
def test_kjbod_acls_option_mistakes_are_one_line_and_exit_2(node: Node, tmp_path: Path, args: list[str],
                                                           says: str) -> None:
    config = tmp_path / "none.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
                      "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"bob\" "
                      "password=\"bob-secret\";\n")
    out = kjbod_acls(node, config, *args)
    assert out.returncode == 2 and says in out.stderr, (out.returncode, out.stderr)


def test_kjbod_acls_reports_a_refusal(node: Node, tmp_path: Path) -> None:
    config = tmp_path / "bob.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
                      "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"bob\" "
                      "password=\"bob-secret\";\n")
    out = kjbod_acls(node, config, "--add", "--allow-principal", "User:bob", "--cluster")
    assert out.returncode == 1
    assert "Error while executing ACL command: CLUSTER_AUTHORIZATION_FAILED" in out.stdout


# -- a TLS client certificate names its principal --------------------------------------------------------------------


def test_a_tls_client_certificate_is_its_principal(tmp_path: Path, certs: Certs) -> None:
    """Kafka's default ssl.principal.mapping.rules: User:<the certificate's subject, RFC 2253>. The test client
    certificate's subject is CN=kjbod-test-client, made a super user here; a PLAINTEXT client is User:ANONYMOUS."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaTimeoutError, TopicAuthorizationFailedError

    plain, ssl_port, controller = free_port(), free_port(), free_port()
    server = start_tls_node(tmp_path / "tls-acl", listeners=(
        f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{ssl_port},CONTROLLER://127.0.0.1:{controller}"),
        overrides={"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,CONTROLLER:PLAINTEXT",
                   "inter.broker.listener.name": "PLAINTEXT", **tls_settings(certs, client_auth="required"),
                   "authorizer.class.name": STANDARD, "super.users": "User:CN=kjbod-test-client",
                   "num.partitions": "1"},
        broker_port=plain, controller_port=controller)
    tls = {"security_protocol": "SSL", "ssl_cafile": str(certs.ca), "ssl_check_hostname": True,
           "ssl_certfile": str(certs.client_cert), "ssl_keyfile": str(certs.client_key)}
    try:
        from kafka import KafkaProducer

        def send(bootstrap: str, **options: Any) -> None:
            producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", max_block_ms=5000, **options)
            try:
                producer.send("certified", b"v").get(timeout=10)
            finally:
                producer.close()

        tls_bootstrap = f"localhost:{ssl_port}"
        client = KafkaAdminClient(bootstrap_servers=tls_bootstrap, **tls)
        try:
            from kafka.admin import NewTopic

            client.create_topics([NewTopic("certified", 1, 1)])
            send(tls_bootstrap, **tls)  # the certificate's principal is a super user
            with pytest.raises((TopicAuthorizationFailedError, KafkaTimeoutError)):
                send(f"127.0.0.1:{plain}")
            assert client.create_acls([acl("User:ANONYMOUS", "WRITE", "certified")])["failed"] == []
        finally:
            client.close()
        eventually(lambda: send(f"127.0.0.1:{plain}"), "the anonymous client writing after its ACL")
    finally:
        server.stop()


def test_topic_admin_needs_create_delete_and_auto_creation_create(node: Node) -> None:
    from kafka.admin import NewTopic
    from kafka.errors import KafkaTimeoutError, TopicAuthorizationFailedError

    client = admin(node, "alice")
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            client.create_topics([NewTopic("alice-made", 1, 1)])
        add_acls(node, acl("User:alice", "CREATE", "alice-", pattern="PREFIXED"),
                 acl("User:alice", "WRITE", "alice-auto"), acl("User:alice", "WRITE", "unmade"))
        eventually(lambda: client.create_topics([NewTopic("alice-made", 1, 1)]), "alice creating under CREATE")
        with pytest.raises(TopicAuthorizationFailedError):
            client.delete_topics(["alice-made"])
    finally:
        client.close()
    # Metadata's auto-creation: WRITE is not enough, CREATE (here by the prefix) is needed too
    eventually(lambda: produce(node, "alice", "alice-auto"), "alice auto-creating a topic she may create")
    with pytest.raises((TopicAuthorizationFailedError, KafkaTimeoutError)):
        produce(node, "alice", "unmade")


def test_committed_offsets_of_topics_one_may_not_describe_are_hidden(node: Node) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import GroupAuthorizationFailedError
    from kafka.structs import OffsetAndMetadata

    for t in ("audit-open", "audit-hidden"):
        create_topic(node, t)
    committer = KafkaConsumer(bootstrap_servers=node.bootstrap, group_id="audit-g", enable_auto_commit=False,
                              **sasl("admin"))
    try:
        committer.commit({TopicPartition(t, 0): OffsetAndMetadata(0, "", -1) for t in ("audit-open", "audit-hidden")})
    finally:
        committer.close()
    client = admin(node, "alice")
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            client.list_group_offsets("audit-g")
        add_acls(node, acl("User:alice", "DESCRIBE", "audit-g", kind="GROUP"),
                 acl("User:alice", "DESCRIBE", "audit-open"))
        offsets = eventually(lambda: client.list_group_offsets("audit-g")["audit-g"], "alice listing the offsets")
        assert {tp.topic for tp in offsets} == {"audit-open"}
    finally:
        client.close()


def test_authorized_operations_follow_the_acls(node: Node) -> None:
    from confluent_kafka.admin import AclOperation, AdminClient

    add_acls(node, acl("User:alice", "READ", "ops-group", kind="GROUP"))

    def group_ops(user: str) -> set[AclOperation]:
        client = AdminClient({"bootstrap.servers": node.bootstrap, **confluent_sasl(user)})
        (future,) = client.describe_consumer_groups(["ops-group"], include_authorized_operations=True).values()
        return set(future.result(timeout=15).authorized_operations or ())

    # READ allows DESCRIBE too; DELETE stays refused
    assert eventually(lambda: _equal(group_ops("alice"), {AclOperation.READ, AclOperation.DESCRIBE}),
                      "alice's group operations") == {AclOperation.READ, AclOperation.DESCRIBE}
    assert group_ops("admin") == {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
                                  AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
    admin_client = AdminClient({"bootstrap.servers": node.bootstrap, **confluent_sasl("admin")})
    cluster = admin_client.describe_cluster(include_authorized_operations=True).result(timeout=15)
    assert AclOperation.ALTER in set(cluster.authorized_operations or ())
    bob = AdminClient({"bootstrap.servers": node.bootstrap, **confluent_sasl("bob")})
    assert not bob.describe_cluster(include_authorized_operations=True).result(timeout=15).authorized_operations


def _equal(got: set, want: set) -> set:
    assert got == want, got
    return got


def test_offset_fetch_v1_carries_the_group_refusal_in_each_partition(node: Node) -> None:
    from kjbod.protocol.generated import OffsetFetchRequest, OffsetFetchResponse
    from kjbod.protocol.generated.offset_fetch_request import OffsetFetchRequestTopic

    body = OffsetFetchRequest(group_id="nobody-s-group", topics=[
        OffsetFetchRequestTopic(name="orders", partition_indexes=[0, 1])])
    with logged_in(node, "bob") as sock:
        sock.sendall(frame(9, 1, 9, body))
        v1 = OffsetFetchResponse.decode(read(sock, 9, 1), 1)
        sock.sendall(frame(9, 5, 10, body))
        v5 = OffsetFetchResponse.decode(read(sock, 9, 5), 5)
    assert [(p.partition_index, p.error_code) for t in v1.topics for p in t.partitions] == [(0, 30), (1, 30)]
    assert (v5.error_code, v5.topics) == (30, [])


def test_a_transactional_producer_needs_write_on_its_transactional_id(node: Node) -> None:
    # As Kafka: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit with a
    # transactional id need WRITE on it (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, fatal for the producer).
    from confluent_kafka import KafkaError, KafkaException, Producer

    topic = "txn-acl"
    create_topic(node, topic)
    add_acls(node, acl("User:alice", "WRITE", topic))

    def producer(transactional_id: str) -> Any:
        return Producer({"bootstrap.servers": node.bootstrap, "transactional.id": transactional_id,
                         **confluent_sasl("alice")})

    refused = producer("alice-txn-1")
    with pytest.raises(KafkaException) as e:
        refused.init_transactions(30)
    assert e.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    add_acls(node, acl("User:alice", "WRITE", "alice-txn-", kind="TRANSACTIONAL_ID", pattern="PREFIXED"))

    def committed() -> None:
        p = producer(f"alice-txn-{time.monotonic_ns()}")
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(topic, b"in a transaction", partition=0)
        p.commit_transaction(30)

    eventually(committed, "alice commits a transaction once her transactional ids may be written")
    assert read_some(node, "admin", topic) == b"in a transaction"


def test_transactions_are_described_and_listed_only_with_describe_on_their_id(node: Node) -> None:
    # As Kafka: FindCoordinator and DescribeTransactions answer TRANSACTIONAL_ID_AUTHORIZATION_FAILED for an id the
    # caller may not DESCRIBE, ListTransactions leaves such ids out, and DescribeTransactions leaves out the
    # partitions of topics the caller may not DESCRIBE. DescribeProducers needs READ on the topic.
    from confluent_kafka import Producer

    from kjbod.protocol.generated import (
        DescribeProducersRequest,
        DescribeProducersResponse,
        DescribeTransactionsRequest,
        DescribeTransactionsResponse,
        FindCoordinatorRequest,
        FindCoordinatorResponse,
        ListTransactionsRequest,
        ListTransactionsResponse,
    )
    from kjbod.protocol.generated.describe_producers_request import TopicRequest

    topic, tid = "txn-describe-acl", f"admin-txn-{time.monotonic_ns()}"
    create_topic(node, topic)
    p = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": tid, **confluent_sasl("admin")})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"open", partition=0)
    assert p.flush(30) == 0  # the transaction stays open: its partition is in it

    def ask(user: str, message: Any, version: int, response: Any) -> Any:
        sock = logged_in(node, user)
        try:
            sock.sendall(frame(message.API_KEY, version, 3, message))
            return response.decode(read(sock, message.API_KEY, version), version)
        finally:
            sock.close()

    def described(user: str) -> Any:
        [state] = ask(user, DescribeTransactionsRequest(transactional_ids=[tid]), 0,
                      DescribeTransactionsResponse).transaction_states
        return state

    def listed(user: str) -> list[str]:
        r = ask(user, ListTransactionsRequest(state_filters=[], producer_id_filters=[]), 1, ListTransactionsResponse)
        return [s.transactional_id for s in r.transaction_states]

    def producers(user: str) -> int:
        r = ask(user, DescribeProducersRequest(topics=[TopicRequest(name=topic, partition_indexes=[0])]), 0,
                DescribeProducersResponse)
        return r.topics[0].partitions[0].error_code

    try:
        mine = described("admin")
        assert (mine.error_code, mine.transaction_state) == (0, "Ongoing")
        assert [(t.topic, t.partitions) for t in mine.topics] == [(topic, [0])]
        assert tid in listed("admin")
        assert producers("admin") == 0

        theirs = described("alice")
        assert (theirs.error_code, theirs.producer_id, theirs.topics) == (53, 0, [])  # TRANSACTIONAL_ID_AUTH...
        assert tid not in listed("alice")
        found = ask("alice", FindCoordinatorRequest(key_type=1, coordinator_keys=[tid]), 4, FindCoordinatorResponse)
        assert [(c.key, c.error_code) for c in found.coordinators] == [(tid, 53)]
        assert producers("alice") == 29  # TOPIC_AUTHORIZATION_FAILED

        add_acls(node, acl("User:alice", "DESCRIBE", tid, kind="TRANSACTIONAL_ID"))

        def alice_describes() -> Any:
            state = described("alice")
            assert state.error_code == 0, state
            return state

        state = eventually(alice_describes, "alice describes the id once she may")
        assert (state.transaction_state, state.topics) == ("Ongoing", [])  # the topic is not hers to describe
        assert tid in listed("alice")
    finally:
        p.abort_transaction(30)


def test_client_quotas_need_the_cluster_config_rights_and_a_user_quota_follows_the_sasl_principal(
        node: Node) -> None:
    """DescribeClientQuotas needs DESCRIBE_CONFIGS and AlterClientQuotas ALTER_CONFIGS on the cluster (Kafka's
    KafkaApis); a quota of user bob applies to the connections that logged in as bob, and to no one else."""
    from kjbod.admin import BrokerResponseError, SyncAdminClient
    from kjbod.net.sasl import SaslCredentials
    from kjbod.protocol.generated import MetadataRequest

    def client(user: str) -> SyncAdminClient:
        return SyncAdminClient(node.bootstrap, request_timeout=10, sasl=SaslCredentials("PLAIN", user, USERS[user]))

    with client("bob") as bob:
        with pytest.raises(BrokerResponseError) as refused:
            bob.describe_client_quotas()
        assert refused.value.code == 31  # CLUSTER_AUTHORIZATION_FAILED
        assert [code for code, _ in bob.alter_client_quotas([({"user": "bob"}, {"producer_byte_rate": 1})])] == [31]
    with client("admin") as root:
        assert root.alter_client_quotas([({"user": "bob"}, {"request_percentage": 0.0001})]) == [(0, None)]

    def throttle_of(user: str) -> int:
        sock = logged_in(node, user)
        try:
            sock.sendall(frame(3, 12, 3, MetadataRequest(topics=[], allow_auto_topic_creation=False)))
            return MetadataResponse.decode(read(sock, 3, 12), 12).throttle_time_ms
        finally:
            sock.close()

    try:
        eventually(lambda: _assert(throttle_of("bob") > 0), "bob's requests are throttled")
        assert throttle_of("alice") == 0
    finally:
        with client("admin") as root:
            assert root.alter_client_quotas([({"user": "bob"}, {"request_percentage": None})]) == [(0, None)]


def _assert(condition: bool) -> None:
    assert condition


def test_group_configs_need_the_config_rights_on_the_group(node: Node) -> None:
    """A group's configs (KIP-848, config resource GROUP) need DESCRIBE_CONFIGS / ALTER_CONFIGS on that group, as in
    Kafka's ConfigHelper and ConfigAdminManager; a refusal is GROUP_AUTHORIZATION_FAILED for that resource only."""
    from kjbod.admin import BrokerResponseError, SyncAdminClient
    from kjbod.admin.types import ConfigResource
    from kjbod.net.sasl import SaslCredentials

    add_acls(node, acl("User:alice", "ALTER_CONFIGS", "cfg-mine", kind="GROUP"))

    def client(user: str) -> SyncAdminClient:
        return SyncAdminClient(node.bootstrap, request_timeout=10, sasl=SaslCredentials("PLAIN", user, USERS[user]))

    interval = "consumer.heartbeat.interval.ms"
    with client("alice") as alice:
        # ALTER_CONFIGS implies DESCRIBE_CONFIGS
        eventually(lambda: alice.incremental_alter_configs({ConfigResource.group("cfg-mine"): {interval: "6000"}}),
                   "alice altering her group's configs")
        mine = alice.describe_configs([ConfigResource.group("cfg-mine")])[ConfigResource.group("cfg-mine")]
        assert mine[interval].value == "6000"
        results = alice.incremental_alter_configs({ConfigResource.group("cfg-other"): {interval: "6000"}},
                                                  raise_on_error=False)
        (result,) = results.values()
        assert result.error is not None and result.error.code == 30  # GROUP_AUTHORIZATION_FAILED
        with pytest.raises(BrokerResponseError) as refused:
            alice.describe_configs([ConfigResource.group("cfg-other")])
        assert refused.value.code == 30


def test_add_partitions_to_txn_v4_is_for_brokers_only(node: Node) -> None:
    """KIP-890's broker-to-broker form (AddPartitionsToTxn v4 and later) needs CLUSTER_ACTION on the cluster, as in
    Kafka: bob, without it, gets CLUSTER_AUTHORIZATION_FAILED for the whole request; admin (a super user) gets an
    answer per transaction (an unknown transactional id here)."""
    from kjbod.protocol.generated import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse
    from kjbod.protocol.generated.add_partitions_to_txn_request import (
        AddPartitionsToTxnTopic,
        AddPartitionsToTxnTransaction,
    )

    create_topic(node, "verify-acl")
    body = AddPartitionsToTxnRequest(transactions=[AddPartitionsToTxnTransaction(
        transactional_id="nobody-tx", producer_id=1, producer_epoch=0, verify_only=True,
        topics=[AddPartitionsToTxnTopic(name="verify-acl", partitions=[0])])])
    answers = {}
    for user in ("bob", "admin"):
        with logged_in(node, user) as sock:
            sock.sendall(frame(24, 4, 3, body))
            answers[user] = AddPartitionsToTxnResponse.decode(read(sock, 24, 4), 4)
    assert (answers["bob"].error_code, answers["bob"].results_by_transaction) == (31, [])
    admin_answer = answers["admin"]
    assert admin_answer.error_code == 0
    [result] = admin_answer.results_by_transaction
    codes = [p.partition_error_code for t in result.topic_results for p in t.results_by_partition]
    # the transaction topic not made or loaded yet (COORDINATOR_NOT_AVAILABLE, _LOAD_IN_PROGRESS), or the id unknown
    assert result.transactional_id == "nobody-tx" and codes[0] in (14, 15, 49)
