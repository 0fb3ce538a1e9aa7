"""KIP-932 share groups end to end: confluent-kafka's ShareConsumer against a real `kjbod serve`.

Strategy: one single-node server for the module (short share sessions and record locks, so that expiry and
redelivery happen within a test), a topic and a group per test.  The group reads from the earliest offset
(share.auto.offset.reset=earliest, a group config set through IncrementalAlterConfigs as an operator would),
records are produced with confluent-kafka's Producer, and share consumers poll until they have what the test
waits for.  Each test checks what a share group promises: every record delivered, none to two consumers at once,
accepted ones never again, released ones again with a higher delivery count, rejected ones never, a consumer's
unacknowledged records going to another consumer when its lock runs out or it closes, and the group's progress
surviving a broker restart.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from live import LiveServer, start_server

pytestmark = pytest.mark.slow

WAIT_S = 60.0
LOCK_MS = 2000  # the groups' record lock duration in these tests
OVERRIDES = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "2",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.num.partitions": "2",
    "share.coordinator.state.topic.min.isr": "1",
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.heartbeat.interval.ms": "500",
    "group.share.min.heartbeat.interval.ms": "100",
    "group.share.session.timeout.ms": "20000",
    "group.share.min.session.timeout.ms": "1000",
    "auto.create.topics.enable": "false",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    s = start_server(tmp_path_factory.mktemp("share"), log_dir_count=2, overrides=OVERRIDES)
    yield s
    s.stop()


def new_topic(server: LiveServer, partitions: int) -> str:
    topic = f"s-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(30)
    return topic


def new_group(server: LiveServer, **configs: str) -> str:
    """A group id whose share.* configs are set before any member joins (earliest, and the test's lock)."""
    group = f"sg-{uuid.uuid4().hex[:8]}"
    settings = {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": str(LOCK_MS), **configs}
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in settings.items()])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(30)
    return group


def produce(server: LiveServer, topic: str, values: list[str], partitions: int) -> None:
    p = Producer({"bootstrap.servers": server.bootstrap})
    for i, v in enumerate(values):
        p.produce(topic, v.encode(), partition=i % partitions)
    assert p.flush(30) == 0


def consumer(server: LiveServer, group: str, topic: str, explicit: bool = False) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": server.bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit" if explicit else "implicit"})
    c.subscribe([topic])
    return c


def poll_until(consumers: list[ShareConsumer], done: Callable[[], bool], on_message, what: str) -> None:
    """Polls each consumer in turn, handing every record to on_message(consumer index, message), until done()."""
    deadline = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < deadline, what
        for i, c in enumerate(consumers):
            for m in c.poll(0.2):
                assert m.error() is None, f"consumer {i}: {m.error()}"
                on_message(i, m)


def test_two_share_consumers_split_a_topic_and_every_record_is_delivered_once(server):
    topic = new_topic(server, 3)
    group = new_group(server)
    values = [f"r{i}" for i in range(300)]
    produce(server, topic, values, 3)
    got: dict[str, int] = {}
    by: list[set[str]] = [set(), set()]

    def take(i: int, m) -> None:
        v = m.value().decode()
        assert v not in got, f"{v} delivered twice (delivery count {m.delivery_count()})"
        got[v] = i
        by[i].add(v)

    consumers = [consumer(server, group, topic), consumer(server, group, topic)]
    try:
        poll_until(consumers, lambda: len(got) == len(values), take,
                   "the share group did not deliver every record")
    finally:
        for c in consumers:
            c.close()
    assert set(got) == set(values)


def test_released_records_come_back_rejected_ones_never(server):
    topic = new_topic(server, 1)
    group = new_group(server)
    produce(server, topic, [f"r{i}" for i in range(10)], 1)
    c = consumer(server, group, topic, explicit=True)
    deliveries: list[tuple[str, int]] = []
    try:
        def first(_i: int, m) -> None:
            v = m.value().decode()
            deliveries.append((v, m.delivery_count()))
            kind = {"r0": AcknowledgeType.REJECT, "r1": AcknowledgeType.RELEASE}.get(v, AcknowledgeType.ACCEPT)
            c.acknowledge(m, kind)

        poll_until([c], lambda: any(v == "r1" and n == 2 for v, n in deliveries) and len(
            {v for v, _ in deliveries}) == 10 and len(deliveries) >= 11, first,
                   f"r1 was not redelivered: {deliveries}")
        c.commit_sync()
        # a while longer: nothing else comes back (r1 released again each time is the only redelivery)
        end = time.monotonic() + 2 * LOCK_MS / 1000
        while time.monotonic() < end:
            for m in c.poll(0.2):
                assert m.value() == b"r1", f"{m.value()} delivered again after it was acknowledged"
                c.acknowledge(m, AcknowledgeType.ACCEPT)
        c.commit_sync()
    finally:
        c.close()
    assert [n for v, n in deliveries if v == "r0"] == [1], deliveries
    assert [n for v, n in deliveries if v == "r1"][:2] == [1, 2], deliveries
    assert all(n == 1 for v, n in deliveries if v not in ("r0", "r1")), deliveries


def test_a_silent_consumers_records_go_to_another_when_its_lock_runs_out(server):
    topic = new_topic(server, 1)
    group = new_group(server)
    produce(server, topic, [f"r{i}" for i in range(5)], 1)
    quiet = consumer(server, group, topic)
    other = consumer(server, group, topic)
    try:
        # `quiet` polls once and then neither polls nor acknowledges (implicit mode acknowledges on the next poll,
        # which never comes): its locks run out and `other` gets those records, delivered for the second time
        deadline = time.monotonic() + WAIT_S
        held: list[str] = []
        while not held:
            assert time.monotonic() < deadline, "the first consumer got nothing"
            held = [m.value().decode() for m in quiet.poll(0.2) if m.error() is None]
        counts: dict[str, int] = {}
        poll_until([other], lambda: len(counts) == 5,
                   lambda _i, m: counts.__setitem__(m.value().decode(), m.delivery_count()),
                   "the records of a consumer whose locks ran out were not redelivered")
        assert sorted(counts) == [f"r{i}" for i in range(5)]
        assert {v: n for v, n in counts.items() if v in held} == dict.fromkeys(held, 2)
        assert {v: n for v, n in counts.items() if v not in held} == {v: 1 for v in counts if v not in held}
    finally:
        other.close()
        quiet.close()


def test_accepted_records_stay_accepted_across_a_broker_restart(server):
    topic = new_topic(server, 2)
    group = new_group(server)
    produce(server, topic, [f"a{i}" for i in range(20)], 2)
    c = consumer(server, group, topic)
    seen: list[str] = []
    try:
        poll_until([c], lambda: len(seen) == 20, lambda _i, m: seen.append(m.value().decode()),
                   "the first 20 records were not delivered")
        c.commit_sync()
    finally:
        c.close()
    server.stop()
    server.start()
    produce(server, topic, [f"b{i}" for i in range(10)], 2)
    c = consumer(server, group, topic)
    after: list[str] = []
    try:
        poll_until([c], lambda: len(after) >= 10, lambda _i, m: after.append(m.value().decode()),
                   "records produced after the restart were not delivered")
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            after.extend(m.value().decode() for m in c.poll(0.2) if m.error() is None)
    finally:
        c.close()
    assert sorted(after) == sorted(f"b{i}" for i in range(10)), after
