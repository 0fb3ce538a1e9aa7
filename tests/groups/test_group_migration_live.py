"""KIP-848's online migration against a real `kjbod serve`: kafka-python (classic protocol) and confluent-kafka
(group.protocol=consumer) consumers in one group, rolled from one protocol to the other and back.

Strategy: one single-node server (heartbeats every 300 ms), one topic of 4 partitions, one group.  Two kafka-python
consumers start it as a classic group; confluent-kafka consumers join one by one (the first one upgrades the group)
while the kafka-python ones leave; then kafka-python consumers join the consumer group and the confluent-kafka
ones leave (the last one downgrades it back to a classic group).  Every consumer commits what it read.  All
consumers are polled at once in each step (one thread each), and after every step the partitions they hold are checked
to be disjoint and the group's committed offsets never to go back; at the end every record was read and the
committed offsets are the end of each partition.  A second server with group.consumer.migration.policy=disabled
refuses the consumer-protocol member with GROUP_ID_NOT_FOUND, as Kafka does.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka.coordinator.base import MemberState
from live import LiveServer, start_server

pytestmark = pytest.mark.slow

PARTITIONS = 4
WAIT_S = 90.0


class _Recent(logging.Handler):
    """kafka-python's last debug lines, shown when a member does not settle (a client-side stall is otherwise
    invisible: its JoinGroup/SyncGroup exchange is logged only at debug)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: collections.deque[str] = collections.deque(maxlen=400)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(f"{record.created:.3f} {record.threadName} {record.name} {record.getMessage()}")
        except Exception:  # noqa: BLE001 - a log line that does not format is left out
            pass


RECENT = _Recent()
OVERRIDES = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "2",
    "group.initial.rebalance.delay.ms": "100",
    "group.min.session.timeout.ms": "1000",
    "group.consumer.heartbeat.interval.ms": "300",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.session.timeout.ms": "20000",  # longer than a restart and librdkafka's reconnect backoff
    "group.consumer.min.session.timeout.ms": "1000",
    "auto.create.topics.enable": "false",
}


class Member:
    """One consumer of either kind: what it holds now, and one poll that reads and commits."""

    def __init__(self, server: LiveServer, group: str, topic: str, name: str, modern: bool) -> None:
        self.name, self.modern, self.topic = name, modern, topic
        self.thread = ThreadPoolExecutor(1, thread_name_prefix=f"poll-{name}")  # this member's polls, in step
        if modern:
            self.c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group,
                               "group.protocol": "consumer", "auto.offset.reset": "earliest",
                               "enable.auto.commit": False, "client.id": name})
            self.c.subscribe([topic])
        else:
            self.k = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=group, client_id=name,
                                   auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=20000,
                                   heartbeat_interval_ms=300, max_poll_records=20)
            self.k.subscribe([topic])

    def held(self) -> set[int]:
        """The partitions this consumer may read now.  An eager classic consumer (kafka-python) that must join
        again has given up its partitions (it reads nothing before its join completes), though its
        assignment() still lists them until then."""
        if self.modern:
            return {tp.partition for tp in self.c.assignment()}
        coordinator = self.k._coordinator
        if coordinator.state != MemberState.STABLE or coordinator.need_rejoin():
            return set()
        return {tp.partition for tp in self.k.assignment()}

    def poll(self, seen: list[bytes]) -> None:
        if self.modern:
            got = self.c.consume(20, 0.05)
            values = [m.value() for m in got if m.error() is None]
            if values:
                self.c.commit(asynchronous=False)
        else:
            # Longer while it (re)joins: kafka-python 3.0.12 throws away a JoinGroup/SyncGroup round that completes
            # while no poll() is waiting for it and joins again, and a leader joining again starts a new rebalance
            # for everyone. Each step polls every member at once (see Watch.until), so the round completes inside
            # this member's poll.
            coordinator = self.k._coordinator
            joining = coordinator.state != MemberState.STABLE or coordinator.need_rejoin()
            batches = self.k.poll(timeout_ms=1000 if joining else 50)
            values = [r.value for batch in batches.values() for r in batch]
            if values:
                self.k.commit()
        seen.extend(values)

    def state(self) -> str:
        """What the client itself says of its membership, for a failure's message."""
        if self.modern:
            return f"assignment {sorted(tp.partition for tp in self.c.assignment())}"
        c = self.k._coordinator
        beat, now = c.heartbeat, time.monotonic()
        loop = getattr(c, "_heartbeat_loop_future", None)
        return (f"state {c.state}, generation {c._generation.generation_id}, need_rejoin {c.need_rejoin()}, "
                f"assignment {sorted(tp.partition for tp in self.k.assignment())}, last heartbeat sent "
                f"{now - beat.last_send:.1f} s ago, answered {now - beat.last_receive:.1f} s ago, heartbeats "
                f"{'on' if getattr(c, '_heartbeat_enabled', None) else 'off'}, heartbeat loop "
                f"{'running' if loop is not None and not loop.is_done else 'not running'}")

    def close(self) -> None:
        if self.modern:
            self.c.close()
        else:
            self.k.close()
        self.thread.shutdown()


def produce(server: LiveServer, topic: str, start: int, count: int) -> None:
    p = Producer({"bootstrap.servers": server.bootstrap})
    for i in range(start, start + count):
        p.produce(topic, f"v{i}".encode(), partition=i % PARTITIONS)
    assert p.flush(30) == 0


class Watch:
    """Polls every member round-robin, checking at every step that no partition is held twice and that the
    group's committed offsets never go back."""

    def __init__(self, admin: AdminClient, group: str, topic: str) -> None:
        self.admin, self.group, self.topic = admin, group, topic
        self.seen: list[bytes] = []
        self.committed = dict.fromkeys(range(PARTITIONS), -1001)  # OFFSET_INVALID: nothing committed yet

    def check_offsets(self) -> dict[int, int]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        request = ConsumerGroupTopicPartitions(self.group, [TopicPartition(self.topic, p)
                                                            for p in range(PARTITIONS)])
        (future,) = self.admin.list_consumer_group_offsets([request]).values()
        now = {tp.partition: tp.offset for tp in future.result(30).topic_partitions}
        for p, offset in now.items():
            assert offset >= self.committed[p], f"partition {p}'s committed offset went back: {self.committed} {now}"
            self.committed[p] = max(self.committed[p], offset)
        return now

    def until(self, members: list[Member], done, what: str) -> list[set[int]]:
        deadline = time.monotonic() + WAIT_S
        step = 0
        while True:
            for polled in [m.thread.submit(m.poll, self.seen) for m in members]:  # all members at once
                polled.result()
            holdings = [m.held() for m in members]
            flat = [p for h in holdings for p in h]
            assert len(flat) == len(set(flat)), f"a partition held twice: {[(m.name, m.held()) for m in members]}"
            step += 1
            if step % 20 == 0:
                self.check_offsets()
            if done(holdings):
                return holdings
            if time.monotonic() >= deadline:
                held = [(m.name, h) for m, h in zip(members, holdings, strict=True)]
                recent = "\n".join(RECENT.lines)
                pytest.fail(f"{what}: {held}; clients: {[(m.name, m.state()) for m in members]}; "
                            f"coordinator: {self.describe()}\nkafka-python's last debug lines:\n{recent}")

    def describe(self) -> str:
        """The group as the coordinator describes it (DescribeGroups or ConsumerGroupDescribe)."""
        try:
            d = self.admin.describe_consumer_groups([self.group])[self.group].result(30)
        except Exception as e:  # noqa: BLE001 - only for a failure's message
            return f"describe failed: {e}"
        members = [(m.client_id, sorted(tp.partition for tp in m.assignment.topic_partitions)) for m in d.members]
        return f"{d.state} {d.type}, members {members}"


def group_types(admin: AdminClient) -> dict[str, str]:
    """Group id -> CLASSIC or CONSUMER, as ListGroups v5 says."""
    return {g.group_id: g.type.name for g in admin.list_consumer_groups().result(30).valid}


def member_types(server: LiveServer, group: str, version: int) -> dict[str, int]:
    """Client id -> MemberType as ConsumerGroupDescribe at `version` answers it (KIP-1099: 0 classic, 1 consumer;
    v0 has no such field, so it decodes as its default, -1)."""
    from kjbod.net.connection import ClientConnection
    from kjbod.protocol.generated import ConsumerGroupDescribeRequest

    async def ask() -> dict[str, int]:
        conn = await ClientConnection.open(server.host, server.port, client_id="migration-test", connect_timeout=10.0)
        try:
            r = await conn.request(69, version, ConsumerGroupDescribeRequest(group_ids=[group]), 30.0)
        finally:
            conn.close()
        assert r.groups[0].error_code == 0, r.groups[0]
        return {m.client_id: m.member_type for m in r.groups[0].members}

    return asyncio.run(ask())


def everything_held(holdings: list[set[int]]) -> bool:
    return sorted(p for h in holdings for p in h) == list(range(PARTITIONS)) and all(holdings)


@pytest.fixture(autouse=True)
def kafka_python_debug():
    """Keeps kafka-python's last debug lines in memory while a test runs (for a failure's message only)."""
    logger = logging.getLogger("kafka")
    level, propagate = logger.level, logger.propagate
    logger.addHandler(RECENT)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False  # not into pytest's own capture as well
    RECENT.lines.clear()
    yield
    logger.removeHandler(RECENT)
    logger.setLevel(level)
    logger.propagate = propagate


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    s = start_server(tmp_path_factory.mktemp("migration"), log_dir_count=1, overrides=OVERRIDES)
    yield s
    s.stop()


def test_a_group_rolls_from_classic_to_consumer_protocol_and_back(server):
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        f.result(30)
    produce(server, topic, 0, 40)
    watch = Watch(admin, group, topic)
    members: list[Member] = []
    try:
        # a classic group of two kafka-python consumers
        k1 = Member(server, group, topic, "k1", modern=False)
        k2 = Member(server, group, topic, "k2", modern=False)
        members += [k1, k2]
        watch.until(members, everything_held, "the classic group did not settle")
        groups = group_types(admin)
        assert groups[group] == "CLASSIC"

        # upgrade: a consumer-protocol member joins; then the classic members leave one by one
        m1 = Member(server, group, topic, "m1", modern=True)
        members.append(m1)
        watch.until(members, lambda h: everything_held(h) and h[2], "m1 got nothing")
        groups = group_types(admin)
        assert groups[group] == "CONSUMER"
        produce(server, topic, 40, 40)
        members.remove(k1)
        k1.close()
        m2 = Member(server, group, topic, "m2", modern=True)
        members.append(m2)
        watch.until(members, everything_held, "k2, m1 and m2 did not settle")
        # ConsumerGroupDescribe v1 tells the classic member from the consumer-protocol ones; v0 cannot
        assert member_types(server, group, 1) == {"k2": 0, "m1": 1, "m2": 1}
        assert member_types(server, group, 0) == {"k2": -1, "m1": -1, "m2": -1}
        members.remove(k2)
        k2.close()
        watch.until(members, everything_held, "m1 and m2 did not settle")

        # downgrade: classic members join the consumer group; the last consumer-protocol member leaving makes it
        # a classic group again
        produce(server, topic, 80, 40)
        k3 = Member(server, group, topic, "k3", modern=False)
        members.append(k3)
        watch.until(members, lambda h: everything_held(h) and h[2], "k3 got nothing")
        members.remove(m1)
        m1.close()
        k4 = Member(server, group, topic, "k4", modern=False)
        members.append(k4)
        watch.until(members, everything_held, "m2, k3 and k4 did not settle")
        members.remove(m2)
        m2.close()
        watch.until(members, everything_held, "k3 and k4 did not settle")
        deadline = time.monotonic() + WAIT_S
        while True:
            groups = group_types(admin)
            if groups[group] == "CLASSIC":
                break
            assert time.monotonic() < deadline, groups[group]
            watch.until(members, everything_held, "k3 and k4 did not settle")

        # every record was read, and the committed offsets reach the end of every partition
        want = {f"v{i}".encode() for i in range(120)}
        watch.until(members, lambda h: want <= set(watch.seen), "not every record was read")
        deadline = time.monotonic() + WAIT_S
        while watch.check_offsets() != dict.fromkeys(range(PARTITIONS), 30):
            assert time.monotonic() < deadline, watch.committed
            watch.until(members, everything_held, "k3 and k4 did not settle")
    finally:
        for m in members:
            m.close()


def test_with_the_policy_disabled_a_consumer_member_may_not_join_a_classic_group(tmp_path):
    from kjbod.net.connection import ClientConnection
    from kjbod.protocol.errors import ErrorCode
    from kjbod.protocol.generated import ConsumerGroupHeartbeatRequest, FindCoordinatorRequest

    s = start_server(tmp_path, log_dir_count=1, overrides={**OVERRIDES, "group.consumer.migration.policy": "disabled"})
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    members: list[Member] = []
    try:
        admin = AdminClient({"bootstrap.servers": s.bootstrap})
        for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
            f.result(30)
        members.append(Member(s, group, topic, "k1", modern=False))
        Watch(admin, group, topic).until(members, everything_held, "the classic group did not settle")

        async def heartbeat() -> tuple[int, str | None]:
            conn = await ClientConnection.open(s.host, s.port, client_id="migration-test", connect_timeout=10.0)
            try:
                while (await conn.request(10, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]),
                                          30.0)).coordinators[0].error_code:
                    await asyncio.sleep(0.2)
                r = await conn.request(68, 0, ConsumerGroupHeartbeatRequest(
                    group_id=group, member_id=uuid.uuid4().hex, member_epoch=0, rebalance_timeout_ms=5000,
                    subscribed_topic_names=[topic], topic_partitions=[]), 30.0)
                return r.error_code, r.error_message
            finally:
                conn.close()

        code, message = asyncio.run(heartbeat())
        assert code == ErrorCode.GROUP_ID_NOT_FOUND and message == f"Group {group} is not a consumer group."
        # the classic group is untouched: its member still holds every partition
        Watch(admin, group, topic).until(members, everything_held, "the classic member lost its partitions")
        groups = group_types(admin)
        assert groups[group] == "CLASSIC"
    finally:
        for m in members:
            m.close()
        s.stop()


def test_a_mixed_group_and_a_downgraded_group_come_back_after_a_restart(tmp_path):
    s = start_server(tmp_path, log_dir_count=1, overrides=OVERRIDES)
    topic, mixed, downgraded = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}", f"d-{uuid.uuid4().hex[:8]}"
    members: list[Member] = []
    try:
        admin = AdminClient({"bootstrap.servers": s.bootstrap})
        for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
            f.result(30)
        produce(s, topic, 0, 20)
        # one group left mixed (a consumer-protocol and a classic member), one downgraded to classic
        m1 = Member(s, mixed, topic, "m1", modern=True)
        k1 = Member(s, mixed, topic, "k1", modern=False)
        members += [m1, k1]
        Watch(admin, mixed, topic).until(members, lambda h: everything_held(h) and all(h), "the mixed group")
        m2 = Member(s, downgraded, topic, "m2", modern=True)
        k2 = Member(s, downgraded, topic, "k2", modern=False)
        Watch(admin, downgraded, topic).until([m2, k2], lambda h: everything_held(h) and all(h), "the second group")
        m2.close()
        Watch(admin, downgraded, topic).until([k2], everything_held, "k2 alone")
        members.append(k2)
        assert group_types(admin) == {mixed: "CONSUMER", downgraded: "CLASSIC"}
        classic_id = k1.k._coordinator._generation.member_id
        s.stop()
        s.start()
        # the members go on reading and committing, and the classic member keeps its id: the coordinator loaded
        # the mixed group, the classic member's protocols included, from its records (a member it did not know as
        # classic would have been refused and given a new id)
        produce(s, topic, 20, 20)
        watch = Watch(admin, mixed, topic)
        want = {f"v{i}".encode() for i in range(20, 40)}
        watch.until([m1, k1], lambda h: want <= set(watch.seen) and everything_held(h), "reading after the restart")
        deadline = time.monotonic() + WAIT_S
        while watch.check_offsets() != dict.fromkeys(range(PARTITIONS), 10):
            assert time.monotonic() < deadline, watch.committed
            watch.until([m1, k1], everything_held, "the mixed group after the restart")
        assert k1.k._coordinator._generation.member_id == classic_id
        Watch(admin, downgraded, topic).until([k2], everything_held, "k2 after the restart")
        assert group_types(admin) == {mixed: "CONSUMER", downgraded: "CLASSIC"}
    finally:
        for m in members:
            m.close()
        s.stop()
