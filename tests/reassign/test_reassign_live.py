"""Partition reassignment on a real cluster (tests/cluster/conftest.py's `kjbod cluster up`: a controller and four
brokers), driven by kafka-python's admin client as an operator's tool would: every partition of a replication
factor 2 topic moves from brokers (1, 2) to (3, 4) while an acks=all producer runs, and nothing it was told is
written goes missing or comes twice; the old brokers delete their replicas.  Then a reassignment that cannot
finish (its new replica's broker is stopped) is listed as in progress and cancelled, and reverts.  And moves
into named log dirs (kjbod's TargetDirectories extension, through kjbod's admin client): each new replica is
created in its dir from the start, with no AlterReplicaLogDirs; a dir the broker does not have is refused."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from kjbod.admin import SyncAdminClient
from tests.cluster.conftest import Cluster, running_cluster, wait_for
from tests.live import kafka_uuid, read_meta_properties

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's import uses a deprecated importlib API
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

pytestmark = pytest.mark.slow

TOPIC = "moving"
PARTITIONS = 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("reassign"), brokers=4, log_dirs=2) as running:
        yield running


@contextlib.contextmanager
def admin_client(cluster: Cluster, *, only: int | None = None) -> Iterator[Any]:
    """kafka-python's admin client on the cluster, or on broker `only` alone (another broker is stopped)."""
    bootstrap = cluster.bootstrap if only is None else f"127.0.0.1:{cluster.broker_port(only)}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000)
    try:
        yield admin
    finally:
        admin.close()


@contextlib.contextmanager
def stopped(cluster: Cluster, broker_id: int, *, ask: int) -> Iterator[Any]:
    """SIGSTOPs the broker, waits until broker `ask` no longer lists it (fenced), and yields kafka-python's admin
    client bootstrapped there; SIGCONT at the end.

    kafka-python sends every request without a fixed node (the Metadata that finds the controller among them) to
    a random broker of its cached cluster view, preferring one it already holds a connection to: a client that
    learnt the cluster while the broker ran may pick the stopped broker and time out after request_timeout_ms.
    A client bootstrapped after the fencing never knows the stopped broker (Metadata lists unfenced brokers).
    The broker is unfenced again before this returns, so the next test finds every broker usable (under load its
    first heartbeats after SIGCONT can take a while)."""
    pid = cluster.pid(f"broker-{broker_id}")
    os.kill(pid, signal.SIGSTOP)
    try:
        with SyncAdminClient(f"127.0.0.1:{cluster.broker_port(ask)}") as kjbod_admin:
            wait_for(lambda: broker_id not in {b.node_id for b in kjbod_admin.describe_cluster().brokers},
                     f"broker {broker_id} is fenced")
        with admin_client(cluster, only=ask) as admin:
            yield admin
    finally:
        os.kill(pid, signal.SIGCONT)
    with SyncAdminClient(f"127.0.0.1:{cluster.broker_port(ask)}") as kjbod_admin:
        wait_for(lambda: broker_id in {b.node_id for b in kjbod_admin.describe_cluster().brokers},
                 f"broker {broker_id} is unfenced again")


def described(cluster: Cluster, topic: str) -> dict[int, tuple[list[int], list[int], int]] | None:
    """partition → (replicas, isr, leader), or None while the cluster cannot answer."""
    try:
        with admin_client(cluster) as admin:
            (t,) = admin.describe_topics([topic])
    except Exception:  # noqa: BLE001 - a broker restarting: ask again
        return None
    return {p["partition_index"]: (p["replica_nodes"], sorted(p["isr_nodes"]), p["leader_id"]) for p in t["partitions"]}


def log_dirs(cluster: Cluster, broker_id: int) -> list[str]:
    home = cluster.homes[f"broker-{broker_id}"]
    return [d if os.path.isabs(d) else str(home / d)
            for d in cluster.properties(f"broker-{broker_id}")["log.dirs"].split(",")]


def replica_dirs(cluster: Cluster, broker_id: int, topic: str) -> set[str]:
    """The partition directories of `topic` in the broker's log dirs."""
    out = set()
    for path in log_dirs(cluster, broker_id):
        if os.path.isdir(path):
            out |= {name for name in os.listdir(path) if name.startswith(f"{topic}-") and "-delete" not in name
                    and "-future" not in name and "-stray" not in name}
    return out


class Producer(threading.Thread):
    """Sends numbered values with acks=all and no retries (so a value is either acknowledged once or failed)."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=0, linger_ms=5,
                                      request_timeout_ms=15_000, max_in_flight_requests_per_connection=1)
        self.acked: list[bytes] = []
        self.failed = 0
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            value = str(n).encode()
            n += 1
            future = self.producer.send(TOPIC, value=value, partition=n % PARTITIONS)
            try:
                future.get(timeout=20)
            except Exception:  # noqa: BLE001 - a leader moving: this value was not acknowledged
                self.failed += 1
                continue
            with self.lock:
                self.acked.append(value)

    def count(self) -> int:
        with self.lock:
            return len(self.acked)

    def finish(self) -> list[bytes]:
        self.stop.set()
        self.join(60)
        self.producer.close(10)
        return self.acked


def consume_all(cluster: Cluster, acked: list[bytes]) -> list[bytes]:
    """Every value in the topic, once at least as many as were acknowledged are read; a shortfall names the
    acknowledged values missing, their partitions (the producer sends value n to partition (n + 1) % PARTITIONS)
    and each partition's offsets read, so a lost acknowledged record can be traced in the brokers' logs."""
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=5000)
    try:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        seen: list[bytes] = []
        ends: dict[int, int] = {}

        def more() -> bool:
            for m in consumer:
                seen.append(m.value)
                ends[m.partition] = m.offset
            return len(seen) >= len(acked)

        try:
            wait_for(more, f"{len(acked)} values read back")
        except AssertionError as e:
            missing = sorted(set(acked) - set(seen), key=int)
            raise AssertionError(f"{e}: read {len(seen)}; acknowledged and missing: "
                                 f"{[(v.decode(), (int(v) + 1) % PARTITIONS) for v in missing]}; last offset read "
                                 f"per partition: {dict(sorted(ends.items()))}; cluster at {cluster.root}") from None
        return seen
    finally:
        consumer.close()


def test_moving_every_partition_while_producing_loses_nothing_and_a_cancel_reverts(cluster: Cluster) -> None:
    with admin_client(cluster) as admin:
        admin.create_topics([NewTopic(TOPIC, replica_assignments={p: [1 + p % 2, 2 - p % 2]
                                                                  for p in range(PARTITIONS)})])
    wait_for(lambda: (d := described(cluster, TOPIC)) and all(len(isr) == 2 for _, isr, _ in d.values()),
             "the topic is in sync on brokers 1 and 2")
    producer = Producer(cluster.bootstrap)
    producer.start()
    try:
        wait_for(lambda: producer.count() >= 200, "the producer gets going")
        targets = {TopicPartition(TOPIC, p): [3 + p % 2, 4 - p % 2] for p in range(PARTITIONS)}
        with admin_client(cluster) as admin:
            assert admin.alter_partition_reassignments(targets) == {tp: None for tp in targets}
        wait_for(lambda: (d := described(cluster, TOPIC)) and all(
            d[tp.partition] == (target, sorted(target), target[0]) for tp, target in targets.items()),
            "every partition on brokers 3 and 4, in sync, led by its first replica")
        with admin_client(cluster) as admin:
            assert admin.list_partition_reassignments() == {}
        mark = producer.count()
        wait_for(lambda: producer.count() >= mark + 200, "the producer goes on after the move")
    finally:
        acked = producer.finish()
    values = consume_all(cluster, acked)
    assert len(values) == len(set(values)), "a value was written twice"
    missing = set(acked) - set(values)
    assert not missing, f"{len(missing)} acknowledged values lost"
    wait_for(lambda: not replica_dirs(cluster, 1, TOPIC) and not replica_dirs(cluster, 2, TOPIC),
             "brokers 1 and 2 deleted their replicas")
    assert len(replica_dirs(cluster, 3, TOPIC)) == len(replica_dirs(cluster, 4, TOPIC)) == PARTITIONS

    # A reassignment that cannot finish: its new replica's broker is stopped.  Listed, then cancelled: reverts.
    tp = TopicPartition(TOPIC, 0)
    before = described(cluster, TOPIC)
    assert before is not None
    with stopped(cluster, 1, ask=3) as admin:
        assert admin.alter_partition_reassignments({tp: [3, 4, 1]}) == {tp: None}
        listed = admin.list_partition_reassignments()
        assert listed == {tp: {"replicas": [3, 4, 1], "adding_replicas": [1], "removing_replicas": []}}
        assert admin.alter_partition_reassignments({tp: None}) == {tp: None}
        assert admin.list_partition_reassignments() == {}
        errors = admin.alter_partition_reassignments({tp: None, TopicPartition("nope", 0): [3]})
        assert {t.topic: e.errno for t, e in errors.items()} == {TOPIC: 85, "nope": 3}
    wait_for(lambda: (d := described(cluster, TOPIC)) and d[0][0] == before[0][0] and d[0][1] == before[0][1],
             "partition 0 is back on its replicas")


def test_a_reassignment_with_named_dirs_puts_each_new_replica_in_its_dir(cluster: Cluster) -> None:
    with admin_client(cluster) as admin:
        admin.create_topics([NewTopic("named", replica_assignments={0: [1], 1: [1]})])
    wait_for(lambda: (d := described(cluster, "named")) and all(leader == 1 for _, _, leader in d.values()),
             "the topic is led by broker 1")
    paths = log_dirs(cluster, 3)
    ids = [kafka_uuid(read_meta_properties(path)["directory.id"]) for path in paths]
    with SyncAdminClient(cluster.bootstrap, request_timeout=20) as admin:
        bad = admin.alter_partition_reassignments({("named", 0): [3]}, directories={("named", 0): [uuid.UUID(int=99)]})
        assert bad[("named", 0)][0] == 57  # LOG_DIR_NOT_FOUND, before anything starts
        assert admin.list_partition_reassignments() == {}
        # partition 0 into broker 3's second dir, partition 1 into its first: each the other way from placement
        done = admin.alter_partition_reassignments({("named", 0): [3], ("named", 1): [3]},
                                                   directories={("named", 0): [ids[1]], ("named", 1): [ids[0]]})
        assert done == {("named", 0): (0, None), ("named", 1): (0, None)}
    wait_for(lambda: (d := described(cluster, "named")) and all(r == [3] for r, _, _ in d.values()),
             "both partitions moved to broker 3")
    assert os.path.isdir(os.path.join(paths[1], "named-0")) and os.path.isdir(os.path.join(paths[0], "named-1"))
    assert not os.path.exists(os.path.join(paths[0], "named-0")) and not os.path.exists(
        os.path.join(paths[1], "named-1"))
