"""Log compaction of a topic written by transactions, on a real `kjbod serve` (confluent-kafka's transactional
producer, kafka-python and confluent-kafka consumers at both isolation levels).

Each round commits a value for every key, then writes a newer value for every key in a transaction it aborts.
Once the cleaner has cleaned up to the active segment, a read_committed reader must still find every key's last
committed value (an aborted value must never have replaced it in the cleaner's map), no reader at any isolation
level finds an aborted value in the cleaned part (the cleaner removed them), and after a later clean, past
delete.retention.ms, the markers of transactions with no record left are gone too.
"""

from __future__ import annotations

import time
import uuid
import warnings
from pathlib import Path

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, TopicPartition
    from kafka.admin import NewTopic

from kjbod.storage.records import iter_batches

from .test_compaction_live import SERVER, active_base, admin_for, cleaned_to, partition_dir, wait_for

pytestmark = pytest.mark.slow

TOPIC = "txn-compacted"
KEYS = 8
ROUNDS = 30
TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": "8192", "min.cleanable.dirty.ratio": "0.01",
                 "delete.retention.ms": "1000"}
OVERRIDES = {**SERVER, "transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1",
             "transaction.state.log.num.partitions": "1", "offsets.topic.replication.factor": "1"}


def value(kind: str, r: int) -> bytes:
    return f"{kind}-{r:04d}-".encode().ljust(100, b"x")


def produce_rounds(server) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:6]}",
                  "batch.size": 2000})
    p.init_transactions(30)
    for r in range(ROUNDS):
        for kind, commit in (("committed", True), ("aborted", False)):
            p.begin_transaction()
            for k in range(KEYS):
                p.produce(TOPIC, value(kind, r), b"key-%d" % k, partition=0)
            if commit:
                p.commit_transaction(30)
            else:
                p.flush(30)
                p.abort_transaction(30)
    p.flush(30)


def produce_fillers(server, tag: str, n: int = 120) -> None:
    """Plain records of other keys: the transactions' segments close, and the cleaner has dirty bytes again."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "batch.size": 2000})
    failed: list = []
    for i in range(n):
        p.produce(TOPIC, value(tag, i), f"{tag}-{i % 4}".encode(), partition=0,
                  on_delivery=lambda err, _msg: failed.append(err) if err is not None else None)
    assert p.flush(30) == 0
    assert not failed


def read(server, isolation: str) -> list[tuple[int, bytes, bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", isolation_level=isolation, consumer_timeout_ms=3_000)
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        return [(r.offset, r.key, r.value) for r in consumer]
    finally:
        consumer.close()


def read_confluent(server, isolation: str) -> list[tuple[int, bytes, bytes]]:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTopicPartition

    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "isolation.level": isolation})
    consumer.assign([CTopicPartition(TOPIC, 0, 0)])
    out: list[tuple[int, bytes, bytes]] = []
    idle = 0
    deadline = time.monotonic() + 60
    try:
        while idle < 4 and time.monotonic() < deadline:
            got = consumer.consume(500, 0.5)
            idle = 0 if got else idle + 1
            out.extend((m.offset(), m.key(), m.value()) for m in got if m.error() is None)
    finally:
        consumer.close()
    return out


def markers(server) -> int:
    """Control batches with a record in the partition's segment files (an emptied one holds none)."""
    count = 0
    for path in sorted(partition_dir(server, TOPIC).glob("*.log")):
        for _pos, header in iter_batches(Path(path).read_bytes()):
            count += header.is_control and header.records_count > 0
    return count


def latest(records: list[tuple[int, bytes, bytes]]) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for _o, k, v in records:
        out[k] = v
    return out


def test_compaction_removes_aborted_records_and_then_their_markers(kjbod_server_factory):
    server = kjbod_server_factory(overrides=OVERRIDES)
    admin = admin_for(server)
    try:
        admin.create_topics([NewTopic(TOPIC, 1, 1, topic_configs=TOPIC_CONFIGS)])
    finally:
        admin.close()
    produce_rounds(server)
    produce_fillers(server, "filler")
    written_markers = markers(server)
    assert written_markers == 2 * ROUNDS
    wait_for(lambda: cleaned_to(server, TOPIC) == active_base(server, TOPIC), what="the first clean")

    last_committed = {b"key-%d" % k: value("committed", ROUNDS - 1) for k in range(KEYS)}
    cleaned = cleaned_to(server, TOPIC)
    for reader in (read, read_confluent):
        committed = reader(server, "read_committed")
        keyed = {k: v for k, v in latest(committed).items() if k.startswith(b"key-")}
        assert keyed == last_committed
        assert not any(v.startswith(b"aborted") for _o, _k, v in committed)
        uncommitted = reader(server, "read_uncommitted")
        assert not any(v.startswith(b"aborted") for o, _k, v in uncommitted if o < cleaned)

    # A later clean, past delete.retention.ms: the markers of transactions with no record left go (the last
    # committed transaction's stays with its records).
    time.sleep(1.5)
    produce_fillers(server, "later")
    first = cleaned
    wait_for(lambda: (cleaned_to(server, TOPIC) or 0) > first
             and cleaned_to(server, TOPIC) == active_base(server, TOPIC), what="a second clean")
    time.sleep(1.5)
    produce_fillers(server, "last")
    second = cleaned_to(server, TOPIC) or 0
    wait_for(lambda: (cleaned_to(server, TOPIC) or 0) > second and markers(server) < written_markers // 4,
             what="the markers to go")
    committed = read(server, "read_committed")
    assert {k: v for k, v in latest(committed).items() if k.startswith(b"key-")} == last_committed
