"""Transactions end to end with real clients against a real `kjbod serve`: confluent-kafka's transactional
producer (librdkafka) committing and aborting, read by confluent-kafka and kafka-python consumers of both isolation
levels; consume-transform-produce with send_offsets_to_transaction (the group's offsets visible only once the
transaction commits); a producer fenced by a second instance with the same transactional.id; a transaction left
open past its timeout aborted by the coordinator.

Strategy: one single-node server for the module (`__transaction_state` with one replica); each test has its own
topics, group and transactional id, so tests do not see each other's records.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from live import LiveServer, start_server

pytestmark = pytest.mark.slow

OVERRIDES = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "3",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
}
WAIT_S = 60.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    s = start_server(tmp_path_factory.mktemp("txn-clients"), log_dir_count=2, overrides=OVERRIDES)
    yield s
    s.stop()


def make_topic(server: LiveServer, partitions: int = 1) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()
    return name


def producer(server: LiveServer, tid: str, **extra) -> Producer:
    p = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": tid, **extra})
    p.init_transactions(WAIT_S)
    return p


def confluent_read(server: LiveServer, topic: str, isolation: str, want: int, partitions: int = 1) -> list[bytes]:
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                  "isolation.level": isolation, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        idle = 0
        while time.monotonic() < deadline and (len(out) < want or idle < 4):
            m = c.poll(0.5)
            if m is None:
                idle += 1
                continue
            idle = 0
            if m.error() is None:
                out.append(m.value())
        return out
    finally:
        c.close()


def kafka_python_read(server: LiveServer, topic: str, isolation: str) -> list[bytes]:
    c = KafkaConsumer(bootstrap_servers=server.bootstrap, isolation_level=isolation, enable_auto_commit=False,
                      auto_offset_reset="earliest", consumer_timeout_ms=2000)
    try:
        tp = KpTopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        return [r.value for r in c]
    finally:
        c.close()


def test_commit_and_abort_seen_by_both_isolation_levels(server):
    topic = make_topic(server)
    p = producer(server, f"tx-{uuid.uuid4().hex[:6]}")
    for values, commit in (([b"c1", b"c2"], True), ([b"a1", b"a2"], False), ([b"c3"], True)):
        p.begin_transaction()
        for v in values:
            p.produce(topic, v, partition=0)
        if commit:
            p.commit_transaction(WAIT_S)
        else:
            p.flush(WAIT_S)
            p.abort_transaction(WAIT_S)
    everything = [b"c1", b"c2", b"a1", b"a2", b"c3"]
    assert confluent_read(server, topic, "read_committed", 3) == [b"c1", b"c2", b"c3"]
    assert confluent_read(server, topic, "read_uncommitted", 5) == everything
    assert kafka_python_read(server, topic, "read_committed") == [b"c1", b"c2", b"c3"]
    assert kafka_python_read(server, topic, "read_uncommitted") == everything


def test_an_open_transaction_holds_read_committed_readers_back(server):
    topic = make_topic(server)
    p = producer(server, f"tx-{uuid.uuid4().hex[:6]}")
    p.begin_transaction()
    p.produce(topic, b"before", partition=0)
    p.commit_transaction(WAIT_S)
    p.begin_transaction()
    p.produce(topic, b"pending", partition=0)
    p.flush(WAIT_S)
    assert kafka_python_read(server, topic, "read_committed") == [b"before"]
    assert kafka_python_read(server, topic, "read_uncommitted") == [b"before", b"pending"]
    p.commit_transaction(WAIT_S)
    assert kafka_python_read(server, topic, "read_committed") == [b"before", b"pending"]


def test_consume_transform_produce_commits_offsets_with_the_transaction(server):
    source, sink = make_topic(server), make_topic(server)
    group = f"g-{uuid.uuid4().hex[:6]}"
    feed = Producer({"bootstrap.servers": server.bootstrap})
    for i in range(6):
        feed.produce(source, b"in%d" % i, partition=0)
    feed.flush(WAIT_S)

    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    p = producer(server, f"tx-{uuid.uuid4().hex[:6]}")
    try:
        c.subscribe([source])
        got = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < 3 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m)
        got = got[:3]
        # First transaction: aborted, so its offsets must never show.
        p.begin_transaction()
        for m in got:
            p.produce(sink, m.value().replace(b"in", b"out"), partition=0)
        p.send_offsets_to_transaction([TopicPartition(source, 0, got[-1].offset() + 1)],
                                      c.consumer_group_metadata(), WAIT_S)
        p.abort_transaction(WAIT_S)
        assert committed(server, group, source) == -1001
        # Second: committed, the offsets with it.
        p.begin_transaction()
        for m in got:
            p.produce(sink, m.value().replace(b"in", b"out"), partition=0)
        p.send_offsets_to_transaction([TopicPartition(source, 0, got[-1].offset() + 1)],
                                      c.consumer_group_metadata(), WAIT_S)
        p.commit_transaction(WAIT_S)
    finally:
        c.close()
    assert committed(server, group, source) == 3
    assert confluent_read(server, sink, "read_committed", 3) == [b"out0", b"out1", b"out2"]


def committed(server: LiveServer, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        [tp] = c.committed([TopicPartition(topic, 0)], timeout=WAIT_S)
        return tp.offset
    finally:
        c.close()


def test_a_second_instance_fences_the_first(server):
    topic = make_topic(server)
    tid = f"tx-{uuid.uuid4().hex[:6]}"
    first = producer(server, tid)
    first.begin_transaction()
    first.produce(topic, b"zombie", partition=0)
    first.flush(WAIT_S)
    second = producer(server, tid)  # aborts the first's open transaction, bumps the epoch
    second.begin_transaction()
    second.produce(topic, b"live", partition=0)
    second.commit_transaction(WAIT_S)
    with pytest.raises(KafkaException) as raised:  # the zombie's transaction was aborted under it
        first.produce(topic, b"zombie2", partition=0)
        first.commit_transaction(WAIT_S)
    error = raised.value.args[0]
    assert error.fatal() or error.txn_requires_abort(), error
    assert "fenced" in str(error).lower() or "epoch" in str(error).lower(), error
    assert confluent_read(server, topic, "read_committed", 1) == [b"live"]


def test_a_transaction_past_its_timeout_is_aborted(server):
    topic = make_topic(server)
    p = producer(server, f"tx-{uuid.uuid4().hex[:6]}", **{"transaction.timeout.ms": 2000})
    p.begin_transaction()
    p.produce(topic, b"abandoned", partition=0)
    p.flush(WAIT_S)
    after = Producer({"bootstrap.servers": server.bootstrap})
    after.produce(topic, b"after", partition=0)
    after.flush(WAIT_S)
    # The coordinator aborts it: read_committed readers get past it, without its record.
    assert confluent_read(server, topic, "read_committed", 1) == [b"after"]
    with pytest.raises(KafkaException):
        p.commit_transaction(WAIT_S)
