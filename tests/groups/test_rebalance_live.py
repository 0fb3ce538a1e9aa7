"""Rebalances with real clients against a real `kjbod serve`: confluent-kafka (librdkafka) consumers joining one
by one, and a kafka-python consumer in its own process killed with SIGKILL, whose partitions move to the member
left once its session timeout passes.  The server makes `__consumer_offsets` with one replica and waits 100 ms for
a new group's members (group.initial.rebalance.delay.ms)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from live import LiveServer, start_server

pytestmark = pytest.mark.slow

OVERRIDES = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "group.initial.rebalance.delay.ms": "100",
    "group.min.session.timeout.ms": "1000",
}
WAIT_S = 60.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    s = start_server(tmp_path_factory.mktemp("rebalance"), log_dir_count=1, overrides=OVERRIDES)
    yield s
    s.stop()


def make_topic(server: LiveServer, partitions: int) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()
    return name


def until(condition, what: str, step=None):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if step is not None:
            step()
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_confluent_consumers_share_the_partitions_and_a_third_one_rebalances_the_group(server):
    topic = make_topic(server, 6)
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumers: list[Consumer] = []
    assigned: list[set[int]] = []

    def add() -> None:
        c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group, "session.timeout.ms": 6000,
                      "heartbeat.interval.ms": 300, "auto.offset.reset": "earliest",
                      "partition.assignment.strategy": "range"})
        slot = len(consumers)
        assigned.append(set())

        def on_assign(_c, partitions, slot=slot):
            assigned[slot] = {p.partition for p in partitions}

        def on_revoke(_c, partitions, slot=slot):
            assigned[slot] = set()

        c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        consumers.append(c)

    def poll_all() -> None:
        for c in consumers:
            c.poll(0.05)

    def split_evenly(n: int) -> bool:
        return (len(assigned) == n and all(len(a) == 6 // n for a in assigned)
                and set().union(*assigned) == set(range(6)))

    try:
        add()
        add()
        until(lambda: split_evenly(2), "two consumers with three partitions each", poll_all)
        add()
        until(lambda: split_evenly(3), "three consumers with two partitions each", poll_all)
    finally:
        for c in consumers:
            c.close()


CHILD = """
import json, sys, time
from kafka import KafkaConsumer
c = KafkaConsumer(bootstrap_servers=sys.argv[1], group_id=sys.argv[2], session_timeout_ms=3000,
                  heartbeat_interval_ms=300, consumer_timeout_ms=100)
c.subscribe([sys.argv[3]])
last = None
while True:
    c.poll(timeout_ms=100)
    now = sorted(tp.partition for tp in c.assignment())
    if now != last:
        print(json.dumps(now), flush=True)
        last = now
"""


def test_a_killed_consumers_partitions_move_after_its_session_timeout(server):
    topic = make_topic(server, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=server.bootstrap)
    for p in range(4):
        producer.send(topic, value=b"x", partition=p)
    producer.flush()
    producer.close()
    child = subprocess.Popen([sys.executable, "-c", CHILD, server.bootstrap, group, topic], stdout=subprocess.PIPE,
                             text=True)
    me = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=group, session_timeout_ms=3000,
                       heartbeat_interval_ms=300, auto_offset_reset="earliest")
    try:
        me.subscribe([topic])
        until(lambda: len(me.assignment()) == 2, "the two consumers to split four partitions",
              lambda: me.poll(timeout_ms=50))
        mine = {tp.partition for tp in me.assignment()}
        child_view: list[int] = []
        while sorted(set(range(4)) - mine) != child_view:  # the child reports what it has
            line = child.stdout.readline()
            assert line, "the child consumer exited"
            child_view = json.loads(line)
        child.send_signal(signal.SIGKILL)  # no LeaveGroup: only the session timeout tells the coordinator
        child.wait()
        until(lambda: {tp.partition for tp in me.assignment()} == set(range(4)),
              "the survivor to own every partition", lambda: me.poll(timeout_ms=50))
    finally:
        me.close()
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()


def test_a_static_member_restarting_gets_its_partitions_back_without_moving_the_others(server):
    """confluent-kafka consumers with group.instance.id (static membership): one closes (a static member does not
    leave the group) and a new consumer with the same instance id takes its place within the session timeout; it
    gets the same partitions, and the other member's assignment never changed (no rebalance revoked it)."""
    topic = make_topic(server, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    revoked: list[str] = []

    def static(instance: str):
        assigned: set[int] = set()
        c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group, "group.instance.id": instance,
                      "session.timeout.ms": 30000, "heartbeat.interval.ms": 300,
                      "partition.assignment.strategy": "range"})

        def on_assign(_c, partitions):
            assigned.clear()
            assigned.update(p.partition for p in partitions)

        def on_revoke(_c, partitions):
            if partitions:
                revoked.append(instance)

        c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        return c, assigned

    a, a_parts = static("a")
    b, b_parts = static("b")
    try:
        until(lambda: len(a_parts) == 2 and len(b_parts) == 2, "two static members with two partitions each",
              lambda: (a.poll(0.05), b.poll(0.05)))
        before_b = set(b_parts)
        b.close()  # revokes its partitions locally; sends no LeaveGroup
        revoked.clear()
        b, b_parts = static("b")
        until(lambda: b_parts == before_b, "the restarted static member to get its partitions back",
              lambda: (a.poll(0.05), b.poll(0.05)))
        for _ in range(20):  # a little longer: nothing else happens to the group
            a.poll(0.05)
            b.poll(0.05)
        assert revoked == [] and len(a_parts) == 2 and b_parts == before_b
    finally:
        a.close()
        b.close()
