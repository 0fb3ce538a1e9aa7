"""A cluster where every listener is SASL_PLAINTEXT with PLAIN: a controller-only node whose CONTROLLER listener asks
for authentication, and three brokers whose only listener does too. The brokers log in to the controller
(registration, heartbeats, the metadata log) with `sasl.mechanism.controller.protocol` and to each other (replica
fetchers) with `sasl.mechanism.inter.broker.protocol`, using the username and password of their own JAAS
configuration for that listener, as Kafka's brokers do. A topic with three replicas and min.insync.replicas=3 takes
acks=all writes only when both followers copied them over authenticated connections."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from live import LiveServer, format_storage, free_port, new_cluster_id

WAIT_S = 60.0
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        'password="broker-secret" user_broker="broker-secret" user_alice="alice-secret";')


def _node(root, name: str, node_id: int, port: int, settings: dict[str, str], cluster_id: str) -> LiveServer:
    home = root / name
    home.mkdir(parents=True)
    log_dirs = [home / "logs-0"]
    server = LiveServer(node_id=node_id, cluster_id=cluster_id, port=port, controller_port=port, directory=home,
                        config=home / "server.properties", log_dirs=log_dirs, metadata_dir=home / "logs-0",
                        stderr_path=home / "stderr.log")
    server.config.write_text("".join(f"{k}={v}\n" for k, v in {**settings,
                                                                "log.dirs": str(log_dirs[0])}.items()))
    format_storage(server.config, cluster_id)
    return server


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[LiveServer]]:
    root = tmp_path_factory.mktemp("sasl-cluster")
    cluster_id = new_cluster_id()
    cport = free_port()
    common = {
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{cport}",
        "broker.heartbeat.interval.ms": "300",
        "broker.session.timeout.ms": "3000",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
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


def test_replication_with_every_listener_sasl(cluster: list[LiveServer]) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    brokers = cluster[1:]
    config = {"bootstrap.servers": ",".join(b.bootstrap for b in brokers), "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret", "log_level": 0}
    admin = AdminClient(config)
    deadline = time.monotonic() + WAIT_S
    while len(admin.list_topics(timeout=10).brokers) < 3:  # every broker registered, authenticated
        assert time.monotonic() < deadline, "the brokers did not all register over SASL"
        time.sleep(0.2)
    admin.create_topics([NewTopic("sasl-replicated", 1, 3)])["sasl-replicated"].result(WAIT_S)

    producer = Producer({**config, "acks": "all", "linger.ms": 5})
    values = [f"r-{i}".encode() * 100 for i in range(300)]
    failures: list = []
    for v in values:  # acks=all with min.insync.replicas=3: acknowledged once both followers fetched it
        producer.produce("sasl-replicated", v, on_delivery=lambda err, _msg: err and failures.append(err))
        producer.poll(0)
    assert producer.flush(WAIT_S) == 0
    assert not failures, failures[:3]
    del producer

    partition = admin.list_topics("sasl-replicated", timeout=10).topics["sasl-replicated"].partitions[0]
    assert sorted(partition.isrs) == [1, 2, 3] and sorted(partition.replicas) == [1, 2, 3]
    consumer = Consumer({**config, "group.id": "sasl-cluster", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("sasl-replicated", 0, OFFSET_BEGINNING)])
        got: list[bytes] = []
        while len(got) < len(values):
            assert time.monotonic() < deadline, f"got {len(got)} of {len(values)} records over SASL"
            for m in consumer.consume(1000, 0.5):
                assert m.error() is None, m.error()
                got.append(m.value())
        assert got == values
    finally:
        consumer.close()
    # the controller saw each broker log in as "broker"
    log = (cluster[0].directory / "stderr.log").read_text()
    assert "SASL authentication succeeded" in log and '"principal": "broker"' in log


def test_a_scram_user_made_through_one_broker_logs_in_on_the_others(cluster: list[LiveServer]) -> None:
    """AlterUserScramCredentials sent to broker 1 is forwarded to the controller; the record reaches every broker's
    image through the metadata log, and each then takes the user's SCRAM-SHA-512 login."""
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    brokers = cluster[1:]
    admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret",
                         "log_level": 0})
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "grace", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"grace-pw")])
    futures["grace"].result(WAIT_S)
    for broker in brokers[1:]:
        deadline = time.monotonic() + WAIT_S
        while True:
            producer = Producer({"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                                 "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "grace",
                                 "sasl.password": "grace-pw", "log_level": 0})
            try:
                metadata = producer.list_topics(timeout=5)
                if metadata.brokers:
                    break
            except KafkaException:
                pass
            finally:
                del producer
            assert time.monotonic() < deadline, f"grace could not log in on broker {broker.node_id}"
            time.sleep(0.3)
