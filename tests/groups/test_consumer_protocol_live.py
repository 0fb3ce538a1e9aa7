"""KIP-848 consumer groups against a real `kjbod serve`, driven by confluent-kafka with group.protocol=consumer.

Strategy: one single-node server per module (a heartbeat interval of 300 ms and a session timeout of 6 s, so
hand-overs take seconds), every test with its own topic and group.  The consumers are polled round-robin from
the test's thread, and at every step the partitions they hold (librdkafka's own assignment) are checked to be
disjoint: the property the member epochs and the revoke-first reconciliation exist for.  What else is checked:
a consumer leaving or killed (SIGKILL of its process) hands its partitions over, `kjbod consumer-groups` shows
the group, committed offsets and the group's own records come back after a broker restart, a kafka-python
(classic) group works beside it, and hand-made requests get Kafka's error codes.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from live import LiveServer, start_server

from kjbod.net.connection import ClientConnection
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    DeleteGroupsRequest,
    FindCoordinatorRequest,
    JoinGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
)
from kjbod.protocol.generated.join_group_request import JoinGroupRequestProtocol
from kjbod.protocol.generated.offset_commit_request import (
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kjbod.protocol.generated.offset_delete_request import (
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)

pytestmark = pytest.mark.slow

OVERRIDES = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "100",
    "group.min.session.timeout.ms": "1000",
    "group.consumer.heartbeat.interval.ms": "300",
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.min.session.timeout.ms": "1000",
    "auto.create.topics.enable": "false",
}
WAIT_S = 60.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    s = start_server(tmp_path_factory.mktemp("kip848"), log_dir_count=2, overrides=OVERRIDES)
    yield s
    s.stop()


def make_topic(server: LiveServer, partitions: int, records: int = 0) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(30)
    produce(server, name, partitions, records)
    return name


def produce(server: LiveServer, topic: str, partitions: int, records: int, start: int = 0) -> None:
    if not records:
        return
    p = Producer({"bootstrap.servers": server.bootstrap})
    for i in range(start, start + records):
        p.produce(topic, f"v{i}".encode(), partition=i % partitions)
    assert p.flush(30) == 0


def new_consumer(server: LiveServer, group: str, topic: str, name: str, **extra) -> Consumer:
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group, "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "client.id": name, **extra})
    c.subscribe([topic])
    return c


def held(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def settle(consumers: list[Consumer], partitions: int, seen: list | None = None) -> list[set[int]]:
    """Polls every consumer until together they hold each partition once; checks at every step that no
    partition is held twice."""
    deadline = time.monotonic() + WAIT_S
    while True:
        for c in consumers:
            m = c.poll(0.05)
            if m is not None and m.error() is None and seen is not None:
                seen.append(m.value())
        holdings = [held(c) for c in consumers]
        flat = [p for h in holdings for p in h]
        assert len(flat) == len(set(flat)), f"a partition held twice: {holdings}"
        if sorted(flat) == list(range(partitions)) and all(holdings):
            return holdings
        assert time.monotonic() < deadline, f"the consumers did not settle: {holdings}"


def close_all(consumers: list[Consumer]) -> None:
    for c in consumers:
        c.close()


def test_two_then_three_consumers_share_the_partitions_and_a_leaver_hands_over(server):
    topic = make_topic(server, 6)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a, b = new_consumer(server, group, topic, "a"), new_consumer(server, group, topic, "b")
    c = None
    try:
        two = settle([a, b], 6)
        assert sorted(len(h) for h in two) == [3, 3]
        c = new_consumer(server, group, topic, "c")
        three = settle([a, b, c], 6)
        assert sorted(len(h) for h in three) == [2, 2, 2]
        produce(server, topic, 6, 60)
        seen: list[bytes] = []
        a.close()
        after = settle([b, c], 6, seen)
        assert sorted(len(h) for h in after) == [3, 3]
        deadline = time.monotonic() + WAIT_S
        while len(seen) < 60 and time.monotonic() < deadline:
            for x in (b, c):
                m = x.poll(0.05)
                if m is not None and m.error() is None:
                    seen.append(m.value())
        assert sorted(seen) == sorted(f"v{i}".encode() for i in range(60))  # every record, none twice
    finally:
        close_all([x for x in (b, c) if x is not None])


KILLED = textwrap.dedent("""
    import sys, time
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "client.id": "doomed"})
    c.subscribe([sys.argv[3]])
    while True:
        c.poll(0.1)
        if c.assignment():
            print("ASSIGNED", ",".join(str(tp.partition) for tp in c.assignment()), flush=True)
""")


def test_a_killed_consumer_hands_its_partitions_over_after_the_session_timeout(server):
    topic = make_topic(server, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    doomed = subprocess.Popen([sys.executable, "-c", KILLED, server.bootstrap, group, topic],
                              stdout=subprocess.PIPE, text=True)
    survivor = None
    try:
        assert doomed.stdout is not None
        line = doomed.stdout.readline()
        assert line.startswith("ASSIGNED"), line
        survivor = new_consumer(server, group, topic, "survivor")
        deadline = time.monotonic() + WAIT_S
        while not held(survivor) and time.monotonic() < deadline:
            survivor.poll(0.1)
        assert held(survivor) and len(held(survivor)) == 2
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)
        # nothing leaves the group: the coordinator removes the member when its session ends
        assert settle([survivor], 4) == [{0, 1, 2, 3}]
    finally:
        if doomed.poll() is None:
            doomed.kill()
            doomed.wait(10)
        if doomed.stdout is not None:
            doomed.stdout.close()
        if survivor is not None:
            survivor.close()


def test_a_static_member_gets_its_partitions_back_without_a_rebalance(server):
    topic = make_topic(server, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a = new_consumer(server, group, topic, "static-a", **{"group.instance.id": "inst-a"})
    b = new_consumer(server, group, topic, "static-b", **{"group.instance.id": "inst-b"})
    again = None
    try:
        first = settle([a, b], 4)

        async def epoch() -> int:
            conn = await _coordinator_connection(server, group)
            try:
                r = await conn.request(69, 0, ConsumerGroupDescribeRequest(group_ids=[group]), 30.0)
                return r.groups[0].group_epoch
            finally:
                conn.close()

        before = asyncio.run(epoch())
        a.close()  # a static member leaves with epoch -2: its place and partitions are kept
        for _ in range(10):
            b.poll(0.1)
        assert held(b) == first[1]  # b was not given a's partitions
        again = new_consumer(server, group, topic, "static-a2", **{"group.instance.id": "inst-a"})
        assert settle([again, b], 4) == first
        assert asyncio.run(epoch()) == before  # no rebalance: the group epoch did not move
    finally:
        close_all([x for x in (b, again) if x is not None])


def test_a_regex_subscription_takes_new_matching_topics(server):
    prefix = f"rx{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for f in admin.create_topics([NewTopic(f"{prefix}-a", 2, 1), NewTopic(f"other{prefix}", 2, 1)]).values():
        f.result(30)
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"g-{prefix}", "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 1000})
    c.subscribe([f"^{prefix}-.*"])
    try:
        deadline = time.monotonic() + WAIT_S
        while {(tp.topic, tp.partition) for tp in c.assignment()} != {(f"{prefix}-a", 0), (f"{prefix}-a", 1)}:
            c.poll(0.1)
            assert time.monotonic() < deadline, c.assignment()
        for f in admin.create_topics([NewTopic(f"{prefix}-b", 1, 1)]).values():
            f.result(30)
        produce(server, f"{prefix}-b", 1, 3)
        got: list[bytes] = []
        while len(got) < 3:  # the new topic matches: it is assigned and read
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                assert m.topic() == f"{prefix}-b"
                got.append(m.value())
            assert time.monotonic() < deadline, c.assignment()
        assert f"other{prefix}" not in {tp.topic for tp in c.assignment()}
    finally:
        c.close()


def cli(server: LiveServer, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kjbod", "consumer-groups", "--bootstrap-server", server.bootstrap,
                           "--timeout", "30000", *args], capture_output=True, text=True, timeout=120)


def test_consumer_groups_cli_and_admin_calls_describe_the_group(server):
    topic = make_topic(server, 4, 8)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a, b = new_consumer(server, group, topic, "cli-a"), new_consumer(server, group, topic, "cli-b")
    try:
        settle([a, b], 4)
        for c in (a, b):  # every heartbeat has reconciled: the group is Stable
            for _ in range(10):
                c.poll(0.05)
        a.commit(offsets=[TopicPartition(topic, p, 1) for p in held(a)], asynchronous=False)
        deadline = time.monotonic() + WAIT_S
        while True:
            out = cli(server, "--describe", "--group", group, "--members", "--verbose", "--json")
            assert out.returncode == 0, out.stderr
            doc = json.loads(out.stdout)
            text = json.dumps(doc)
            if "Stable" in cli(server, "--describe", "--group", group, "--state").stdout:
                break
            assert time.monotonic() < deadline, out.stdout
            a.poll(0.2)
            b.poll(0.2)
        assert "cli-a" in text and "cli-b" in text and topic in text
        state = cli(server, "--describe", "--group", group, "--state").stdout
        assert "uniform" in state and "Stable" in state and " 2" in state
        offsets = cli(server, "--describe", "--group", group).stdout
        assert topic in offsets and "cli-a" in offsets
        listed = cli(server, "--list", "--type").stdout
        assert any(group in line and "Consumer" in line for line in listed.splitlines()), listed
        # confluent-kafka's own admin calls (ConsumerGroupDescribe, ListGroups v5)
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        d = admin.describe_consumer_groups([group])[group].result(30)
        assert d.partition_assignor == "uniform" and len(d.members) == 2
        assert sorted(tp.partition for m in d.members for tp in m.assignment.topic_partitions) == [0, 1, 2, 3]
    finally:
        close_all([a, b])


def test_a_classic_kafka_python_group_works_beside_it(server):
    topic = make_topic(server, 2, 10)
    modern = new_consumer(server, f"m-{uuid.uuid4().hex[:8]}", topic, "modern")
    classic_group = f"c-{uuid.uuid4().hex[:8]}"
    classic = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=classic_group,
                            auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=300)
    classic.subscribe([topic])
    try:
        got_modern: list[bytes] = []
        got_classic: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        while (len(got_modern) < 10 or len(got_classic) < 10) and time.monotonic() < deadline:
            m = modern.poll(0.1)
            if m is not None and m.error() is None:
                got_modern.append(m.value())
            for batch in classic.poll(timeout_ms=100).values():
                got_classic.extend(r.value for r in batch)
        assert sorted(got_modern) == sorted(got_classic) == sorted(f"v{i}".encode() for i in range(10))

        async def describe_classic():
            conn = await _coordinator_connection(server, classic_group)
            try:
                return await conn.request(69, 1, ConsumerGroupDescribeRequest(group_ids=[classic_group]), 30.0)
            finally:
                conn.close()

        (g,) = asyncio.run(describe_classic()).groups
        assert (g.error_code, g.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                   f"Group {classic_group} is not a consumer group.")
    finally:
        modern.close()
        classic.close()


async def _coordinator_connection(server: LiveServer, group: str) -> ClientConnection:
    conn = await ClientConnection.open(server.host, server.port, client_id="kip848-test", connect_timeout=10.0)
    deadline = time.monotonic() + WAIT_S
    while True:
        r = await conn.request(10, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 30.0)
        if r.coordinators[0].error_code == 0:
            return conn
        assert time.monotonic() < deadline
        await asyncio.sleep(0.2)


def test_bad_requests_get_kafkas_codes(server):
    topic = make_topic(server, 2)
    group = f"g-{uuid.uuid4().hex[:8]}"

    async def run() -> None:
        conn = await _coordinator_connection(server, group)
        try:
            async def beat(**kw):
                body = ConsumerGroupHeartbeatRequest(group_id=group, **kw)
                return await conn.request(68, 1, body, 30.0)

            joining = dict(member_epoch=0, rebalance_timeout_ms=5000, subscribed_topic_names=[topic],
                           topic_partitions=[])
            r = await beat(member_id="m1", server_assignor="sticky", **joining)
            assert r.error_code == ErrorCode.UNSUPPORTED_ASSIGNOR and "sticky" in r.error_message
            r = await beat(member_id="m1", member_epoch=0, rebalance_timeout_ms=5000, subscribed_topic_names=None,
                           subscribed_topic_regex=None, topic_partitions=[])
            assert r.error_code == ErrorCode.INVALID_REQUEST and "SubscribedTopicNames" in r.error_message
            # v1 (KIP-1082): a joining consumer must bring its own member id
            r = await beat(member_id="", **joining)
            assert (r.error_code, r.error_message) == (ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
            r = await beat(member_id="x" * 300, **joining)
            assert r.error_code == ErrorCode.INVALID_REQUEST
            r = await beat(member_id="m1", member_epoch=-7)
            assert r.error_code == ErrorCode.INVALID_REQUEST
            r = await beat(member_id="m1", member_epoch=4, topic_partitions=[])
            assert r.error_code == ErrorCode.GROUP_ID_NOT_FOUND
            r = await beat(member_id="m1", **joining)
            assert (r.error_code, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (0, "m1", 1, 300)
            assert sorted(p for t in r.assignment.topic_partitions for p in t.partitions) == [0, 1]
            r = await beat(member_id="m1", member_epoch=9, topic_partitions=[])
            assert r.error_code == ErrorCode.FENCED_MEMBER_EPOCH
            r = await beat(member_id="nobody", member_epoch=1)
            assert r.error_code == ErrorCode.UNKNOWN_MEMBER_ID
            r = await beat(member_id="m1", member_epoch=0, rebalance_timeout_ms=5000, subscribed_topic_names=[topic],
                           topic_partitions=[], subscribed_topic_regex="t-(")
            assert r.error_code == ErrorCode.INVALID_REGULAR_EXPRESSION and "t-(" in r.error_message
            # a classic member of another protocol type may not join it; a consumer one is asked for a member id,
            # and its subscription must decode (tests/groups/test_group_migration*.py: classic members that join)
            connect = JoinGroupRequest(group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                       member_id="", protocol_type="connect",
                                       protocols=[JoinGroupRequestProtocol(name="range", metadata=b"")])
            r = await conn.request(11, 9, connect, 30.0)
            assert r.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
            join = JoinGroupRequest(group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                    member_id="", protocol_type="consumer",
                                    protocols=[JoinGroupRequestProtocol(name="range", metadata=b"")])
            r = await conn.request(11, 9, join, 30.0)
            assert r.error_code == ErrorCode.MEMBER_ID_REQUIRED and r.member_id
            known = JoinGroupRequest(group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                     member_id=r.member_id, protocol_type="consumer",
                                     protocols=[JoinGroupRequestProtocol(name="range", metadata=b"")])
            r = await conn.request(11, 9, known, 30.0)
            assert r.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
            # OffsetCommit v9 with the member's epoch, then a stale one
            def commit(epoch: int, version: int = 9) -> OffsetCommitRequest:
                return OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=epoch, member_id="m1",
                                           topics=[OffsetCommitRequestTopic(name=topic, partitions=[
                                               OffsetCommitRequestPartition(partition_index=0, committed_offset=3,
                                                                            committed_metadata="")])])
            r = await conn.request(8, 9, commit(1), 30.0)
            assert r.topics[0].partitions[0].error_code == 0
            r = await conn.request(8, 9, commit(0), 30.0)
            assert r.topics[0].partitions[0].error_code == ErrorCode.STALE_MEMBER_EPOCH
            r = await conn.request(8, 8, commit(1, 8), 30.0)
            assert r.topics[0].partitions[0].error_code == ErrorCode.UNSUPPORTED_VERSION
            # ListGroups v5 with a types filter; ConsumerGroupDescribe of a missing group
            r = await conn.request(16, 5, ListGroupsRequest(types_filter=["consumer"]), 30.0)
            assert [(g.group_id, g.group_type, g.protocol_type) for g in r.groups if g.group_id == group] == [
                (group, "consumer", "consumer")]
            r = await conn.request(16, 5, ListGroupsRequest(types_filter=["classic"]), 30.0)
            assert group not in [g.group_id for g in r.groups]
            r = await conn.request(69, 1, ConsumerGroupDescribeRequest(group_ids=[group, "no-such-group", ""]), 30.0)
            found, missing, empty = r.groups
            assert (found.error_code, found.group_state, found.group_epoch, found.assignor_name) == (
                0, "Stable", 1, "uniform")
            assert [(m.member_id, m.member_type) for m in found.members] == [("m1", 1)]  # v1: a consumer member
            assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND
            assert empty.error_code == ErrorCode.INVALID_GROUP_ID
            # while it has members: its subscribed topic's offsets stay, the group stays
            r = await conn.request(47, 0, OffsetDeleteRequest(group_id=group, topics=[OffsetDeleteRequestTopic(
                name=topic, partitions=[OffsetDeleteRequestPartition(partition_index=0)])]), 30.0)
            assert r.topics[0].partitions[0].error_code == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            r = await conn.request(42, 2, DeleteGroupsRequest(groups_names=[group]), 30.0)
            assert r.results[0].error_code == ErrorCode.NON_EMPTY_GROUP
            # leave: the group is empty, and a classic join may take the id
            r = await beat(member_id="m1", member_epoch=-1)
            assert (r.error_code, r.member_epoch) == (0, -1)
            r = await conn.request(11, 9, join, 30.0)
            assert r.error_code == ErrorCode.MEMBER_ID_REQUIRED
        finally:
            conn.close()
        # an empty KIP-848 group is deleted with its records
        other = f"g-{uuid.uuid4().hex[:8]}"
        conn = await _coordinator_connection(server, other)
        try:
            r = await conn.request(68, 1, ConsumerGroupHeartbeatRequest(
                group_id=other, member_id="m2", member_epoch=0, rebalance_timeout_ms=5000,
                subscribed_topic_names=[topic], topic_partitions=[]), 30.0)
            assert r.error_code == 0
            r = await conn.request(68, 1, ConsumerGroupHeartbeatRequest(group_id=other, member_id="m2",
                                                                        member_epoch=-1), 30.0)
            assert r.error_code == 0
            r = await conn.request(42, 2, DeleteGroupsRequest(groups_names=[other]), 30.0)
            assert r.results[0].error_code == 0
            r = await conn.request(69, 0, ConsumerGroupDescribeRequest(group_ids=[other]), 30.0)
            assert r.groups[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
        finally:
            conn.close()

    asyncio.run(run())


def test_an_empty_group_without_offsets_is_removed_at_the_retention_check(tmp_path):
    s = start_server(tmp_path / "expiry", log_dir_count=1,
                     overrides={**OVERRIDES, "offsets.retention.check.interval.ms": "500"})
    try:
        topic = make_topic(s, 1)
        group = f"g-{uuid.uuid4().hex[:8]}"

        async def run() -> None:
            conn = await _coordinator_connection(s, group)
            try:
                r = await conn.request(68, 1, ConsumerGroupHeartbeatRequest(
                    group_id=group, member_id="m", member_epoch=0, rebalance_timeout_ms=5000,
                    subscribed_topic_names=[topic], topic_partitions=[]), 30.0)
                assert r.error_code == 0
                r = await conn.request(68, 1, ConsumerGroupHeartbeatRequest(group_id=group, member_id="m",
                                                                            member_epoch=-1), 30.0)
                assert r.error_code == 0
                deadline = time.monotonic() + WAIT_S
                while True:
                    r = await conn.request(69, 0, ConsumerGroupDescribeRequest(group_ids=[group]), 30.0)
                    if r.groups[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND:
                        break
                    assert r.groups[0].group_state == "Empty" and time.monotonic() < deadline
                    await asyncio.sleep(0.2)
            finally:
                conn.close()

        asyncio.run(run())
        # the tombstones are what a restarted broker reads: the group stays gone
        s.stop()
        s.start()

        async def gone() -> None:
            conn = await _coordinator_connection(s, group)
            try:
                deadline = time.monotonic() + WAIT_S
                while True:
                    r = await conn.request(69, 0, ConsumerGroupDescribeRequest(group_ids=[group]), 30.0)
                    if r.groups[0].error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.1)
                assert r.groups[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
            finally:
                conn.close()

        asyncio.run(gone())
    finally:
        s.stop()


def test_offsets_and_the_group_come_back_after_a_restart(tmp_path):
    s = start_server(tmp_path / "restart", log_dir_count=2, overrides=OVERRIDES)
    try:
        topic = make_topic(s, 3, 30)
        group = f"g-{uuid.uuid4().hex[:8]}"
        a = new_consumer(s, group, topic, "before")
        seen: list[bytes] = []
        settle([a], 3, seen)
        deadline = time.monotonic() + WAIT_S
        while len(seen) < 30 and time.monotonic() < deadline:
            m = a.poll(0.1)
            if m is not None and m.error() is None:
                seen.append(m.value())
        assert len(seen) == 30
        a.commit(asynchronous=False)
        a.close()  # left: group epoch 2

        async def joined_then_described() -> tuple:
            conn = await _coordinator_connection(s, group)
            try:
                r = await conn.request(68, 1, ConsumerGroupHeartbeatRequest(
                    group_id=group, member_id="m1", member_epoch=0, rebalance_timeout_ms=5000,
                    subscribed_topic_names=[topic], topic_partitions=[], server_assignor="range"), 30.0)
                assert (r.error_code, r.member_epoch) == (0, 3)
                return r, await describe(conn)
            finally:
                conn.close()

        async def describe(conn: ClientConnection):
            deadline = time.monotonic() + WAIT_S
            while True:  # the restarted coordinator may still be loading its partition
                r = await conn.request(69, 0, ConsumerGroupDescribeRequest(group_ids=[group]), 30.0)
                g = r.groups[0]
                if g.error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
            assert g.error_code == 0
            return (g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name,
                    [(m.member_id, m.member_epoch, m.client_id, m.subscribed_topic_names,
                      [(t.topic_name, sorted(t.partitions)) for t in m.assignment.topic_partitions])
                     for m in g.members])

        joined, before = asyncio.run(joined_then_described())
        assert before == ("Stable", 3, 3, "range", [("m1", 3, "kip848-test", [topic], [(topic, [0, 1, 2])])])
        # the broker stops with the member in the group: its records are all the restarted broker knows of it
        s.stop()
        s.start()

        async def after_restart() -> None:
            conn = await _coordinator_connection(s, group)
            try:
                assert await describe(conn) == before
                # the member goes on with its epoch and partitions (not fenced), then leaves
                owned = [t for t in joined.assignment.topic_partitions]
                r = await conn.request(68, 1, ConsumerGroupHeartbeatRequest(
                    group_id=group, member_id="m1", member_epoch=3, topic_partitions=[
                        type(o)(topic_id=o.topic_id, partitions=o.partitions) for o in owned]), 30.0)
                assert (r.error_code, r.member_epoch) == (0, 3)
                r = await conn.request(68, 1, ConsumerGroupHeartbeatRequest(
                    group_id=group, member_id="m1", member_epoch=-1), 30.0)
                assert r.error_code == 0
            finally:
                conn.close()

        asyncio.run(after_restart())
        produce(s, topic, 3, 6, start=30)
        b = new_consumer(s, group, topic, "after")
        try:
            fresh: list[bytes] = []
            deadline = time.monotonic() + WAIT_S
            while len(fresh) < 6 and time.monotonic() < deadline:
                m = b.poll(0.1)
                if m is not None and m.error() is None:
                    fresh.append(m.value())
            assert sorted(fresh) == sorted(f"v{i}".encode() for i in range(30, 36))  # resumed after the commit
        finally:
            b.close()
    finally:
        s.stop()
