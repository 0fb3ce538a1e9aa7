"""Config keys taking effect in a running node (real `kjbod serve` processes, kafka-python as the client).

Retention follows `log.retention.check.interval.ms` from the first minutes of a node's life, also when the node
is killed and restarted every few seconds (it used to wait 300 s from every start, so such a node never applied
retention and its disks filled); the checkpoints follow `log.flush.offset.checkpoint.interval.ms`. The cluster
keys show in what clients see: node id, advertised address, default partition count, which APIs the controller
listener serves; `delete.topic.enable=false` and `default.replication.factor` answer as Kafka does; keys accepted
only for compatibility are logged at start; a process.roles kjbod cannot run is refused; `fetch.max.bytes` caps
what one Fetch answer gives a consumer.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from live import LiveServer, write_config

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import InvalidReplicationFactorError, TopicDeletionDisabledError

from kjbod.protocol.generated import ApiVersionsRequest
from tests.kip113.livehelp import RawClient

RECORD = b"r" * 1000


def admin_for(server: LiveServer) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=30000)


def produce(server: LiveServer, topic: str, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, acks=-1, linger_ms=5, batch_size=4096)
    for _ in range(count):
        producer.send(topic, RECORD, partition=0)
    producer.flush()
    producer.close()


def log_start(server: LiveServer, topic: str) -> int:
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        return consumer.beginning_offsets([tp])[tp]
    finally:
        consumer.close()


def wait_until(cond: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    """Polls until `cond()`; the timeout only ends a hung test (the behaviour itself takes a second or two)."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.1)


def test_retention_follows_a_short_check_interval_also_on_a_node_restarted_every_few_seconds(kjbod_server_factory):
    server = kjbod_server_factory(overrides={"log.retention.check.interval.ms": "1000",
                                             "log.segment.delete.delay.ms": "0"})
    admin = admin_for(server)
    admin.create_topics([NewTopic("shrinks", 1, 1, topic_configs={"retention.bytes": "20000",
                                                                   "segment.bytes": "10000"})])
    admin.close()
    produce(server, "shrinks", 100)  # about 100 kB: 90 kB over retention.bytes
    wait_until(lambda: log_start(server, "shrinks") > 0, "retention deletes the oldest segments")
    # Killed and started again, each life a few seconds long: every life applies retention to what it received.
    for _life in range(3):
        server.process.kill()
        server.process.wait(30)
        server.start()
        before = log_start(server, "shrinks")
        produce(server, "shrinks", 100)
        wait_until(lambda before=before: log_start(server, "shrinks") > before + 50,
                   "retention runs in this life of the node")
    partition_dir = next(Path(d, "shrinks-0") for d in server.log_dirs if Path(d, "shrinks-0").exists())
    held = sum(f.stat().st_size for f in partition_dir.iterdir() if f.name.endswith(".log"))
    assert held <= 20000 + 10000 + 2000  # retention.bytes plus the active segment (and one batch's slack)


def test_checkpoints_are_rewritten_at_their_interval(kjbod_server_factory):
    server = kjbod_server_factory(overrides={"log.flush.offset.checkpoint.interval.ms": "200"})
    admin = admin_for(server)
    admin.create_topics([NewTopic("cp", 1, 1)])
    admin.close()
    produce(server, "cp", 10)
    files = [Path(d, "recovery-point-offset-checkpoint") for d in server.log_dirs]
    # Each write is a new file renamed into place (a new inode, a new mtime). Kafka's default (60 s, the first
    # after 30 s) would take minutes to rewrite the files five times.
    seen: list[set[tuple[int, int]]] = [set() for _ in files]

    def rewritten_five_times() -> bool:
        for inodes, f in zip(seen, files, strict=True):
            if f.exists():
                st = os.stat(f)
                inodes.add((st.st_ino, st.st_mtime_ns))
        return all(len(inodes) >= 5 for inodes in seen)

    wait_until(rewritten_five_times, "the checkpoint files are rewritten five times")


def test_cluster_keys_show_in_what_clients_see(kjbod_server_factory):
    server = kjbod_server_factory(node_id=7)
    server.stop()  # its ports are known now: advertise the broker listener under another name
    overrides = {"advertised.listeners": f"PLAINTEXT://localhost:{server.port}", "num.partitions": "3",
                 "broker.rack": "rack-a"}
    write_config(server.config, node_id=7, port=server.port, controller_port=server.controller_port,
                 log_dirs=server.log_dirs, metadata_dir=server.metadata_dir, overrides=overrides)
    server.start()
    admin = admin_for(server)
    cluster = admin.describe_cluster()
    assert [(b["broker_id"], b["host"], b["port"], b["rack"]) for b in cluster["brokers"]] == [
        (7, "localhost", server.port, "rack-a")]
    admin.close()
    producer = KafkaProducer(bootstrap_servers=server.bootstrap)
    producer.send("auto", b"x").get(30)  # created on first use, with num.partitions partitions
    assert producer.partitions_for("auto") == {0, 1, 2}
    producer.close()
    # The listener named in controller.listener.names serves the controller's APIs, not Produce.
    served = {}
    for kind, port in (("broker", server.port), ("controller", server.controller_port)):
        with RawClient(f"127.0.0.1:{port}") as raw:
            served[kind] = {k.api_key for k in raw.call(ApiVersionsRequest(), 2).api_keys}
    assert 0 in served["broker"] and 0 not in served["controller"]


def test_topic_deletion_disabled_default_replication_factor_and_compatibility_keys(kjbod_server_factory):
    server = kjbod_server_factory(overrides={
        "delete.topic.enable": "false",
        "default.replication.factor": "2",
        "num.network.threads": "3",
        "num.io.threads": "4",
    })
    admin = admin_for(server)
    with pytest.raises(InvalidReplicationFactorError):
        admin.create_topics([NewTopic("two", 1, -1)])  # the default: 2, and there is one broker
    admin.create_topics([NewTopic("kept", 1, 1)])
    with pytest.raises(TopicDeletionDisabledError):
        admin.delete_topics(["kept"])
    assert "kept" in admin.list_topics()
    admin.close()
    logged = [line for line in server.stderr(200).splitlines() if "accepted with no effect" in line]
    assert len(logged) == 1 and "num.network.threads" in logged[0]
    assert "num.io.threads" in logged[0]


def test_fetch_max_bytes_caps_what_one_fetch_gives_a_consumer(kjbod_server_factory):
    """fetch.max.bytes=1024 (the least Kafka allows): a kafka-python consumer asking for 50 MiB per fetch gets
    no more than 1024 record bytes in any one answer (its own fetch-size-max metric: the record bytes of its
    largest fetch response), so three partitions of about 1.1 kB each, which one uncapped fetch would carry
    whole, take several fetches, and every record arrives in order; a single batch over the cap still comes back
    whole (KIP-74). DescribeConfigs (confluent-kafka's admin) shows the key as Kafka does: static, read-only."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType

    server = kjbod_server_factory(overrides={"fetch.max.bytes": "1024"})
    admin = admin_for(server)
    admin.create_topics([NewTopic("capped", 3, 1)])
    admin.close()
    value = b"c" * 300  # a batch of one such record is about 370 bytes
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, linger_ms=0)
    for i in range(9):
        producer.send("capped", value, partition=i % 3).get(30)  # one batch each
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, fetch_max_bytes=50 * 1024 * 1024,
                             enable_auto_commit=False, group_id=None)
    parts = [TopicPartition("capped", p) for p in range(3)]
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)

    def consume(count: int) -> dict[int, list[tuple[int, int]]]:
        got: dict[int, list[tuple[int, int]]] = {}
        deadline = time.monotonic() + 60
        while sum(map(len, got.values())) < count:
            assert time.monotonic() < deadline, f"consumed {got} of {count} records"
            for tp, records in consumer.poll(timeout_ms=500).items():
                got.setdefault(tp.partition, []).extend((r.offset, len(r.value)) for r in records)
        return got

    def largest_fetch() -> float:
        return consumer.metrics()["consumer-fetch-manager-metrics"]["fetch-size-max"]

    try:
        assert consume(9) == {p: [(0, 300), (1, 300), (2, 300)] for p in range(3)}
        assert 300 < largest_fetch() <= 1024
        big = b"B" * 3000
        producer = KafkaProducer(bootstrap_servers=server.bootstrap, linger_ms=0)
        producer.send("capped", big, partition=1).get(30)
        producer.send("capped", value, partition=2).get(30)
        producer.close()
        assert consume(2) == {1: [(3, 3000)], 2: [(3, 300)]}
        assert largest_fetch() >= 3000
    finally:
        consumer.close()

    client = AdminClient({"bootstrap.servers": server.bootstrap})  # kept: its futures fail once it is collected
    (future,) = client.describe_configs([ConfigResource(ResourceType.BROKER, "1")]).values()
    entry = future.result(30)["fetch.max.bytes"]
    assert (entry.value, entry.is_read_only, entry.source) == ("1024", True, ConfigSource.STATIC_BROKER_CONFIG.value)


def listen_backlog(port: int) -> int | None:
    """The accept queue size of the socket listening on ``port`` (ss prints it as Send-Q of a listener)."""
    import shutil
    import subprocess

    ss = shutil.which("ss")
    if ss is None:
        pytest.skip("ss (iproute2) is not installed: the listen backlog cannot be read")
    out = subprocess.run([ss, "-Hltn", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout
    sizes = {int(line.split()[2]) for line in out.splitlines() if line.split()}
    assert len(sizes) <= 1, out
    return sizes.pop() if sizes else None


def test_the_listen_backlog_is_the_configured_one(kjbod_server_factory):
    server = kjbod_server_factory(log_dir_count=1, overrides={"socket.listen.backlog.size": "37"})
    assert listen_backlog(server.port) == 37 and listen_backlog(server.controller_port) == 37
    server.stop()
    default = kjbod_server_factory(log_dir_count=1)
    assert listen_backlog(default.port) == 1024  # kjbod's default (Kafka's is 50; see the README)
