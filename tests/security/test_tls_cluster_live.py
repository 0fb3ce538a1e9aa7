"""A cluster where every listener is TLS with mutual authentication: a controller-only node whose CONTROLLER
listener is SSL, and three brokers whose only listener is SSL (`ssl.client.auth=required` everywhere). The brokers
reach the controller (registration, heartbeats, the metadata log) and each other (replica fetchers) with the client
side of the same ssl.* keys, as Kafka's brokers do. A topic with three replicas and min.insync.replicas=3 takes
acks=all writes only when both followers copied them over TLS; then each broker is asked for the records."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from live import LiveServer, format_storage, free_port, new_cluster_id

from .conftest import Certs, tls_settings

WAIT_S = 60.0


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
def cluster(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[list[LiveServer]]:
    root = tmp_path_factory.mktemp("tls-cluster")
    cluster_id = new_cluster_id()
    cport = free_port()
    common = {
        "listener.security.protocol.map": "SSL:SSL,CONTROLLER:SSL",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{cport}",
        "broker.heartbeat.interval.ms": "300",
        "broker.session.timeout.ms": "3000",
        **tls_settings(certs, client_auth="required"),
    }
    nodes = [_node(root, "controller", 100, cport, {
        **common, "process.roles": "controller", "node.id": "100", "listeners": f"CONTROLLER://127.0.0.1:{cport}",
        "controller.quorum.voters": f"100@127.0.0.1:{cport}"}, cluster_id)]
    for b in (1, 2, 3):
        port = free_port()
        nodes.append(_node(root, f"broker-{b}", b, port, {
            **common, "process.roles": "broker", "node.id": str(b), "listeners": f"SSL://127.0.0.1:{port}",
            "security.inter.broker.protocol": "SSL", "min.insync.replicas": "3"}, cluster_id))
    try:
        for node in nodes:
            node.start()
        yield nodes
    finally:
        for node in reversed(nodes):
            node.stop()


def client_config(brokers: list[LiveServer], certs: Certs) -> dict:
    return {"bootstrap.servers": ",".join(b.bootstrap for b in brokers), "security.protocol": "SSL",
            "ssl.ca.location": str(certs.ca), "ssl.certificate.location": str(certs.client_cert),
            "ssl.key.location": str(certs.client_key), "log_level": 0}


def test_replication_over_tls_with_every_listener_ssl(cluster: list[LiveServer], certs: Certs) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    brokers = cluster[1:]
    config = client_config(brokers, certs)
    admin = AdminClient(config)
    deadline = time.monotonic() + WAIT_S
    while len(admin.list_topics(timeout=10).brokers) < 3:  # every broker registered with the controller over TLS
        assert time.monotonic() < deadline, "the brokers did not all register over TLS"
        time.sleep(0.2)
    admin.create_topics([NewTopic("tls-replicated", 1, 3)])["tls-replicated"].result(WAIT_S)

    producer = Producer({**config, "acks": "all", "linger.ms": 5, "message.max.bytes": 2 * 1024 * 1024})
    values = [f"r-{i}".encode() * 500 for i in range(400)]
    failures: list = []
    deadline = time.monotonic() + WAIT_S
    for v in values:  # acks=all with min.insync.replicas=3: acknowledged once both followers fetched it over TLS
        producer.produce("tls-replicated", v, on_delivery=lambda err, _msg: err and failures.append(err))
        producer.poll(0)
    assert producer.flush(WAIT_S) == 0
    assert not failures, failures[:3]
    del producer

    partition = admin.list_topics("tls-replicated", timeout=10).topics["tls-replicated"].partitions[0]
    assert sorted(partition.isrs) == [1, 2, 3] and sorted(partition.replicas) == [1, 2, 3]

    # the leader serves the records; each follower's copy is checked through its log files' sizes
    consumer = Consumer({**config, "group.id": "tls-cluster", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("tls-replicated", 0, OFFSET_BEGINNING)])
        got: list[bytes] = []
        while len(got) < len(values):
            assert time.monotonic() < deadline, f"got {len(got)} of {len(values)} records over TLS"
            for m in consumer.consume(1000, 0.5):
                assert m.error() is None, m.error()
                got.append(m.value())
        assert got == values
    finally:
        consumer.close()
    sizes = {b.node_id: sum(p.stat().st_size for p in b.log_dirs[0].glob("tls-replicated-0/*.log")) for b in brokers}
    assert len(set(sizes.values())) == 1 and min(sizes.values()) > sum(map(len, values)), sizes
