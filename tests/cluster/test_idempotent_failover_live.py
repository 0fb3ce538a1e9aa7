"""An idempotent kafka-python producer with five requests in flight through a leader's kill -9 (3 brokers).

The producer keeps up to five Produce requests in flight per connection and retries, so when the leader dies
some of its batches may have been written and replicated without an answer: it resends them, with the same
producer id, epoch and sequences, to the new leader, which must know them from the replicated producer state
and answer them as duplicates (Kafka's ProducerStateManager on the follower side), and must refuse nothing that
follows in sequence.  Checked: every record acknowledged, each stored exactly once and in the order sent.
"""

from __future__ import annotations

import signal
import threading
import warnings
from collections.abc import Iterator

import pytest

from tests.cluster.conftest import Cluster, running_cluster, wait_for
from tests.datapath.support import RawClient, fetch_all, metadata

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's import uses a deprecated importlib API
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

pytestmark = pytest.mark.slow

TOPIC = "idem-failover"
RECORDS = 30_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("idem-failover"), {"min.insync.replicas": "2"},
                         log_dirs=2) as running:
        yield running


def partition_state(cluster: Cluster, avoid: int | None = None):
    """The topic's partition 0 as a live broker (not `avoid`) sees it in Metadata."""
    for b in cluster.broker_ids:
        if b == avoid:
            continue
        try:
            with RawClient("127.0.0.1", cluster.broker_port(b), timeout=30) as raw:
                (t,) = metadata(raw, [TOPIC]).topics
                return {p.partition_index: p for p in t.partitions}.get(0)
        except OSError:
            continue
    return None


def test_kafka_python_idempotent_five_in_flight_through_a_leader_kill_stores_each_record_once(cluster):
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.create_topics([NewTopic(TOPIC, 1, 3)])
    finally:
        admin.close()  # a client left open keeps reconnecting (with random jitter) after the cluster is gone
    wait_for(lambda: (p := partition_state(cluster)) is not None and p.leader_id >= 0 and len(p.isr_nodes) == 3,
             f"{TOPIC}-0 has a leader and 3 in-sync replicas")
    victim = partition_state(cluster).leader_id

    acked: list[int] = []
    failed: list[str] = []
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", enable_idempotence=True,
                             max_in_flight_requests_per_connection=5, retries=2**31 - 1, linger_ms=1,
                             batch_size=4096, request_timeout_ms=10_000, delivery_timeout_ms=180_000)

    def send_all() -> None:
        for i in range(RECORDS):
            future = producer.send(TOPIC, b"%08d" % i, partition=0)
            future.add_callback(lambda _md, i=i: acked.append(i))
            future.add_errback(lambda e: failed.append(repr(e)))

    sender = threading.Thread(target=send_all, daemon=True)
    try:
        sender.start()
        wait_for(lambda: len(acked) >= RECORDS // 10, "a tenth of the records acknowledged")
        cluster.signal(f"broker-{victim}", signal.SIGKILL)
        wait_for(lambda: (p := partition_state(cluster, avoid=victim)) is not None
                 and p.leader_id not in (-1, victim), "a new leader")
        sender.join(120)
        producer.flush(180)
    finally:
        producer.close(timeout=30)
    cluster.start(f"broker-{victim}")
    assert failed == [] and len(acked) == RECORDS
    leader = partition_state(cluster).leader_id
    with RawClient("127.0.0.1", cluster.broker_port(leader), timeout=30) as raw:
        stored = [int(r.value) for r in fetch_all(raw, TOPIC, 0)]
    assert len(stored) == len(set(stored)), "a record was stored twice"
    assert stored == list(range(RECORDS)), "every record once, in the order sent"
