"""Consumer groups made by real clients, for the tests of the group admin calls and `kjbod consumer-groups`.

`make_topic` creates a topic and writes records round-robin over its partitions (kafka-python); `stopped_group`
commits chosen offsets as a real group member that then leaves (the group is Empty with a lag);
`active_consumer` joins a group and stays in it (kafka-python heartbeats from its own thread) until closed.
"""

from __future__ import annotations

import time
import uuid

from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

WAIT_S = 60.0

# Server overrides that make groups settle fast on one broker.
GROUP_OVERRIDES = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "5",
    "group.initial.rebalance.delay.ms": "100",
    "group.min.session.timeout.ms": "1000",
    "auto.create.topics.enable": "false",
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def make_topic(bootstrap: str, partitions: int, records: int, *, replication: int = 1) -> str:
    name = unique("t")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, replication)])
    finally:
        admin.close()
    if records:
        producer = KafkaProducer(bootstrap_servers=bootstrap)
        try:
            for i in range(records):
                producer.send(name, value=f"v{i}".encode(), partition=i % partitions)
            producer.flush()
        finally:
            producer.close()
    return name


def stopped_group(bootstrap: str, topic: str, offsets: dict[int, int], group: str | None = None) -> str:
    """A group that committed `offsets` ({partition: offset}) for `topic` as a member, then left: Empty."""
    group = group or unique("g")
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                      session_timeout_ms=6000, heartbeat_interval_ms=300)
    try:
        c.subscribe([topic])
        wait_assigned(c, len(offsets))
        c.commit({TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()})
    finally:
        c.close()
    return group


def active_consumer(bootstrap: str, topic: str, group: str, partitions: int, **extra: object) -> KafkaConsumer:
    """A member of `group` subscribed to `topic`, once it holds all `partitions` (the group is Stable)."""
    options: dict[str, object] = dict(
        bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
        session_timeout_ms=6000, heartbeat_interval_ms=300, client_id="active-client")
    options.update(extra)
    c = KafkaConsumer(**options)
    c.subscribe([topic])
    wait_assigned(c, partitions)
    return c


def wait_assigned(c: KafkaConsumer, partitions: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while len(c.assignment()) < partitions:
        assert time.monotonic() < deadline, f"the consumer was not assigned {partitions} partitions"
        c.poll(timeout_ms=100, max_records=1)  # what it reads is never committed (no auto commit)


def read_values(c: KafkaConsumer, want: int) -> list[bytes]:
    seen: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    while len(seen) < want and time.monotonic() < deadline:
        for batch in c.poll(timeout_ms=200).values():
            seen.extend(r.value for r in batch)
    return seen
