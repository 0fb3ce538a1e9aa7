"""The authorizer on a cluster: a controller-only node and three brokers, every listener SASL_PLAINTEXT with PLAIN,
Kafka's StandardAuthorizer on every node and `super.users=User:broker;User:admin`. The brokers log in as
User:broker, so their registrations, heartbeats, metadata fetches and replica fetches (CLUSTER_ACTION) pass; a client
user, alice, may write only once an ACL made through one broker (forwarded to the controller, replayed everywhere)
reaches the broker leading the partition, and acks=all with min.insync.replicas=3 shows the followers still copy.
Delegation tokens cross the cluster the same way: made through one broker (forwarded naming alice as the requester),
listed and used on the others."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from live import LiveServer, free_port, new_cluster_id

from .test_sasl_cluster_live import _node

WAIT_S = 60.0
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        'password="broker-secret" user_broker="broker-secret" user_admin="admin-secret" user_alice="alice-secret";')


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[LiveServer]]:
    root = tmp_path_factory.mktemp("acl-cluster")
    cluster_id = new_cluster_id()
    cport = free_port()
    common = {
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{cport}",
        "broker.heartbeat.interval.ms": "300",
        "broker.session.timeout.ms": "3000",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "delegation.token.secret.key": "cluster-token-secret",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:broker;User:admin",
    }
    nodes = [_node(root, "controller", 100, cport, {
        **common, "process.roles": "controller", "node.id": "100", "listeners": f"CONTROLLER://127.0.0.1:{cport}",
        "controller.quorum.voters": f"100@127.0.0.1:{cport}"}, cluster_id)]
    for b in (1, 2, 3):
        port = free_port()
        nodes.append(_node(root, f"broker-{b}", b, port, {
            **common, "process.roles": "broker", "node.id": str(b), "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
            "security.inter.broker.protocol": "SASL_PLAINTEXT", "min.insync.replicas": "3"}, cluster_id))
    try:
        for node in nodes:
            node.start()
        yield nodes
    finally:
        for node in reversed(nodes):
            node.stop()


def client_config(brokers: list[LiveServer], user: str) -> dict[str, object]:
    return {"bootstrap.servers": ",".join(b.bootstrap for b in brokers), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": f"{user}-secret", "log_level": 0}


def produce(config: dict[str, object], topic: str, values: list[bytes]) -> list[object]:
    from confluent_kafka import Producer

    producer = Producer({**config, "acks": "all", "linger.ms": 5, "message.timeout.ms": 10000})
    failures: list[object] = []
    for v in values:
        producer.produce(topic, v, on_delivery=lambda err, _msg: err and failures.append(err))
        producer.poll(0)
    producer.flush(WAIT_S)
    return failures


def test_brokers_as_super_users_replicate_and_acls_reach_every_broker(cluster: list[LiveServer]) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )

    brokers = cluster[1:]
    admin = AdminClient(client_config(brokers, "admin"))
    deadline = time.monotonic() + WAIT_S
    while len(admin.list_topics(timeout=10).brokers) < 3:  # every broker registered: CLUSTER_ACTION as a super user
        assert time.monotonic() < deadline, "the brokers did not all register with the authorizer on"
        time.sleep(0.2)
    admin.create_topics([NewTopic("guarded", 1, 3)])["guarded"].result(WAIT_S)

    alice = client_config(brokers, "alice")
    refused = produce(alice, "guarded", [b"early"])
    assert refused and refused[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # made through broker 1 only: the controller writes it, every broker replays it
    one = AdminClient(client_config(brokers[:1], "admin"))
    binding = AclBinding(ResourceType.TOPIC, "guarded", ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.WRITE, AclPermissionType.ALLOW)
    one.create_acls([binding])[binding].result(WAIT_S)
    for broker in brokers:
        each = AdminClient(client_config([broker], "admin"))
        any_acl = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                   AclPermissionType.ANY)
        deadline = time.monotonic() + WAIT_S
        while binding not in each.describe_acls(any_acl).result(WAIT_S):
            assert time.monotonic() < deadline, f"broker {broker.node_id} never listed the new ACL"
            time.sleep(0.2)

    values = [f"a-{i}".encode() * 50 for i in range(200)]
    assert produce(alice, "guarded", values) == []  # acks=all, min.insync.replicas=3: both followers fetched
    partition = admin.list_topics("guarded", timeout=10).topics["guarded"].partitions[0]
    assert sorted(partition.isrs) == [1, 2, 3]


def test_a_delegation_token_made_through_one_broker_is_used_on_another(cluster: list[LiveServer]) -> None:
    from kjbod.admin.errors import KafkaError
    from kjbod.admin.sync import SyncAdminClient
    from kjbod.net.sasl import SaslCredentials
    from kjbod.protocol.errors import ErrorCode

    brokers = cluster[1:]
    with SyncAdminClient(brokers[0].bootstrap, sasl=SaslCredentials("PLAIN", "alice", "alice-secret"),
                         request_timeout=10) as alice:
        token = alice.create_delegation_token()
    assert (token.owner, token.requester) == ("User:alice", "User:alice")

    def on_the_last_broker() -> list[str]:
        with SyncAdminClient(brokers[2].bootstrap, sasl=SaslCredentials(
                "SCRAM-SHA-256", token.token_id, token.hmac_base64, token=True), request_timeout=10) as tokened:
            with pytest.raises(KafkaError) as refused:  # authenticated as alice, whom token clients may not act for
                tokened.describe_delegation_tokens()
            assert refused.value.code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
        with SyncAdminClient(brokers[2].bootstrap, sasl=SaslCredentials("PLAIN", "alice", "alice-secret"),
                             request_timeout=10) as again:
            return [t.token_id for t in again.describe_delegation_tokens()]

    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            assert on_the_last_broker() == [token.token_id]
            break
        except (AssertionError, KafkaError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)
