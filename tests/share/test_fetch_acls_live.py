"""ShareFetch and ShareAcknowledge under Kafka's StandardAuthorizer on a real `kjbod serve`: READ on the group,
then READ on the topic, as Kafka's KafkaApis asks (raw requests from a member logged in with SASL PLAIN)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka.admin import (
    ACL,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    NewTopic,
    ResourcePattern,
    ResourceType,
)
from live import LiveServer, format_storage, free_port, new_cluster_id

from kjbod.admin.sync import SyncAdminClient
from kjbod.net.sasl import SaslCredentials
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest

from .test_fetch_live import SINGLE_NODE, Member, part

USERS = {"admin": "admin-secret", "alice": "alice-secret"}
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" '
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, int]]:
    directory = tmp_path_factory.mktemp("share-acls")
    plain, sasl, controller = free_port(), free_port(), free_port()
    log_dirs = [directory / "logs-0"]
    server = LiveServer(node_id=1, cluster_id=new_cluster_id(), port=plain, controller_port=controller,
                        directory=directory, config=directory / "server.properties", log_dirs=log_dirs,
                        metadata_dir=directory / "metadata", stderr_path=directory / "stderr.log")
    settings = {
        "node.id": "1", "process.roles": "broker,controller", "controller.listener.names": "CONTROLLER",
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl},CONTROLLER://127.0.0.1:{controller}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT", "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin", "log.dirs": str(log_dirs[0]), "metadata.log.dir": str(server.metadata_dir),
        **SINGLE_NODE,
    }
    server.config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    format_storage(server.config, server.cluster_id)
    server.start()
    try:
        yield server, sasl
    finally:
        server.stop()


class SaslMember(Member):
    def __init__(self, server: LiveServer, port: int, group: str, user: str) -> None:
        view = type("Port", (), {"port": port})()
        super().__init__(view, group)  # type: ignore[arg-type]
        self.version = 1
        self.call(17, SaslHandshakeRequest(mechanism="PLAIN"), _Skip, flexible=False)
        self.version = 2
        answer = self.call(36, SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{USERS[user]}".encode()),
                           SaslAuthenticateResponse)
        assert answer.error_code == 0, answer


class _Skip:
    @staticmethod
    def decode(_data: bytes, _version: int) -> None:
        return None


def eventually(check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + 30
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: still failing after 30s") from None
            time.sleep(0.2)


def allow(principal: str, kind: str, name: str) -> ACL:
    return ACL(principal=principal, host="*", operation=ACLOperation.READ, permission_type=ACLPermissionType.ALLOW,
               resource_pattern=ResourcePattern(ResourceType[kind], name, ACLResourcePatternType.LITERAL))


def test_read_on_the_group_then_on_the_topic(node: tuple[LiveServer, int]) -> None:
    server, sasl = node
    bootstrap = f"127.0.0.1:{sasl}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                             sasl_plain_username="admin", sasl_plain_password="admin-secret")
    topic = f"share-{uuid.uuid4().hex[:8]}"
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
        with SyncAdminClient(bootstrap, sasl=SaslCredentials("PLAIN", "admin", "admin-secret")) as ours:
            tid = eventually(lambda: _topic_id(ours, topic), "the topic's id")
        alice = SaslMember(server, sasl, "sg", "alice")
        try:
            assert alice.fetch(tid, epoch=0).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
            assert alice.acknowledge(tid, [(0, 0, [1])], epoch=1).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
            admin.create_acls([allow("User:alice", "GROUP", "sg")])
            denied = eventually(lambda: _code(alice.fetch(tid, epoch=0), ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                                "READ on the group reaching the broker")
            assert denied == ErrorCode.TOPIC_AUTHORIZATION_FAILED
            admin.create_acls([allow("User:alice", "TOPIC", topic)])
            assert eventually(lambda: _code(alice.fetch(tid, epoch=0), 0), "READ on the topic") == 0
        finally:
            alice.close()
    finally:
        admin.close()


def _topic_id(client: SyncAdminClient, topic: str) -> uuid.UUID:
    described = client.describe_topics([topic])
    desc = described[topic]
    assert desc.topic_id is not None
    return desc.topic_id


def _code(answer: Any, want: int) -> int:
    assert answer.error_code == 0, answer
    code = part(answer).error_code
    assert code == want, code
    return code
