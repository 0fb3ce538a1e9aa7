"""Consumer groups against a real `kjbod serve`: kafka-python, confluent-kafka and aiokafka group consumers.

Strategy: one single-node server per module with `offsets.topic.replication.factor=1` (one broker), a short
`group.initial.rebalance.delay.ms` and a low `group.min.session.timeout.ms`, so rebalances take under seconds.
Every test makes its own topic and group.  What is checked: two consumers of one group split the partitions
between them; committed offsets are what OffsetFetch answers and survive a restart of the broker (they are
records of `__consumer_offsets`, loaded back when the broker leads the partition again); a consumer restarting
resumes after its last commit and sees no record twice; bad requests get Kafka's codes.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from live import LiveServer, start_server

from kjbod.broker.groups.coordinator import partition_for
from kjbod.net.connection import ClientConnection
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    DeleteGroupsRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    FetchRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    ProduceRequest,
    SyncGroupRequest,
)
from kjbod.protocol.generated.describe_configs_request import DescribeConfigsResource
from kjbod.protocol.generated.join_group_request import JoinGroupRequestProtocol
from kjbod.protocol.generated.leave_group_request import MemberIdentity
from kjbod.protocol.generated.offset_commit_request import (
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kjbod.protocol.generated.offset_delete_request import (
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from kjbod.protocol.generated.offset_fetch_request import OffsetFetchRequestGroup
from kjbod.protocol.generated.produce_request import PartitionProduceData, TopicProduceData
from kjbod.storage.records import build_batch, iter_batches

pytestmark = pytest.mark.slow

OVERRIDES = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "5",
    "group.initial.rebalance.delay.ms": "100",
    "group.min.session.timeout.ms": "1000",
    "auto.create.topics.enable": "false",
    "offset.metadata.max.bytes": "100",
}
WAIT_S = 60.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    s = start_server(tmp_path_factory.mktemp("groups"), log_dir_count=2, overrides=OVERRIDES)
    yield s
    s.stop()


class Conn:
    """A plain Kafka connection for hand-made requests."""

    def __init__(self, conn: ClientConnection) -> None:
        self.conn = conn

    def request(self, message, version: int):
        return self.conn.request(message.API_KEY, version, message, 30.0)

    async def close(self) -> None:
        self.conn.close()


async def open_connection(host: str, port: int) -> Conn:
    return Conn(await ClientConnection.open(host, port, client_id="groups-test", connect_timeout=10.0))


def make_topic(server: LiveServer, partitions: int, records: int) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=server.bootstrap)
    try:
        for i in range(records):
            producer.send(name, value=f"v{i}".encode(), partition=i % partitions)
        producer.flush()
    finally:
        producer.close()
    return name


def consumer(server: LiveServer, topic: str, group: str, **extra) -> KafkaConsumer:
    options = dict(bootstrap_servers=server.bootstrap, group_id=group, auto_offset_reset="earliest",
                   enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=300,
                   consumer_timeout_ms=200)
    options.update(extra)
    c = KafkaConsumer(**options)
    c.subscribe([topic])
    return c


def drain(c: KafkaConsumer, want: int, seen: list) -> None:
    deadline = time.monotonic() + WAIT_S
    while len(seen) < want and time.monotonic() < deadline:
        for batch in c.poll(timeout_ms=200).values():
            seen.extend(r.value for r in batch)


def test_two_kafka_python_consumers_split_the_partitions_and_a_restart_resumes_after_the_commit(server):
    topic = make_topic(server, 4, 0)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a, b = consumer(server, topic, group), consumer(server, topic, group)
    try:
        # The split first (nothing to read yet, so no record is read before the group settles) ...
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and not (len(a.assignment()) == 2 and len(b.assignment()) == 2):
            a.poll(timeout_ms=100)
            b.poll(timeout_ms=100)
        mine, theirs = {tp.partition for tp in a.assignment()}, {tp.partition for tp in b.assignment()}
        assert (mine | theirs, mine & theirs) == ({0, 1, 2, 3}, set()), (mine, theirs)
        # ... then forty records, each read once by the consumer owning its partition.
        producer = KafkaProducer(bootstrap_servers=server.bootstrap)
        for i in range(40):
            producer.send(topic, value=f"v{i}".encode(), partition=i % 4)
        producer.flush()
        producer.close()
        seen_a: list = []
        seen_b: list = []
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and len(seen_a) + len(seen_b) < 40:
            for c, seen in ((a, seen_a), (b, seen_b)):
                for tp, batch in c.poll(timeout_ms=100).items():
                    assert tp.partition in (mine if c is a else theirs)
                    seen.extend(r.value for r in batch)
        assert sorted(seen_a + seen_b) == sorted(f"v{i}".encode() for i in range(40))
        a.commit()
        b.commit()
        committed = {p: a.committed(TopicPartition(topic, p)) for p in range(4)}
        assert committed == dict.fromkeys(range(4), 10)
    finally:
        a.close()
        b.close()
    # Ten more records; a new consumer of the group reads those only.
    producer = KafkaProducer(bootstrap_servers=server.bootstrap)
    for i in range(40, 50):
        producer.send(topic, value=f"v{i}".encode(), partition=i % 4)
    producer.flush()
    producer.close()
    c = consumer(server, topic, group)
    try:
        seen: list = []
        drain(c, 10, seen)
        assert sorted(seen) == sorted(f"v{i}".encode() for i in range(40, 50))
    finally:
        c.close()


def test_committed_offsets_survive_a_broker_restart(server):
    topic = make_topic(server, 2, 6)
    group = f"g-{uuid.uuid4().hex[:8]}"
    c = consumer(server, topic, group)
    try:
        seen: list = []
        drain(c, 6, seen)
        c.commit()
    finally:
        c.close()
    server.stop()
    server.start()
    c = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        deadline = time.monotonic() + WAIT_S
        got = None
        while time.monotonic() < deadline:
            try:
                got = {p: c.committed(TopicPartition(topic, p)) for p in range(2)}
            except Exception:  # the coordinator may still be loading
                time.sleep(0.2)
                continue
            if None not in got.values():
                break
            time.sleep(0.2)
        assert got == {0: 3, 1: 3}
    finally:
        c.close()


def test_the_offsets_topic_is_internal_in_metadata(server):
    make_topic(server, 1, 0)
    c = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=f"g-{uuid.uuid4().hex[:8]}")
    try:
        c.committed(TopicPartition("x", 0))  # finds the coordinator: the topic is made
    except Exception:
        pass
    finally:
        c.close()

    async def ask():
        conn = await open_connection("127.0.0.1", server.port)
        try:
            return await conn.request(MetadataRequest(topics=None), 12)
        finally:
            await conn.close()

    resp = asyncio.run(ask())
    offsets = [t for t in resp.topics if t.name == "__consumer_offsets"]
    assert len(offsets) == 1 and offsets[0].is_internal and len(offsets[0].partitions) == 5
    assert all(not t.is_internal for t in resp.topics if t.name != "__consumer_offsets")

    async def produce():  # only the coordinator writes it, as in Kafka
        conn = await open_connection("127.0.0.1", server.port)
        try:
            return await conn.request(ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[TopicProduceData(
                name="__consumer_offsets", partition_data=[PartitionProduceData(
                    index=0, records=build_batch([(b"k", b"v", [], 0)]))])]), 9)
        finally:
            await conn.close()

    part = asyncio.run(produce()).responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert part.error_message == "Cannot append to internal topic __consumer_offsets"


def test_describe_configs_shows_the_group_keys(server):
    async def describe():
        conn = await open_connection("127.0.0.1", server.port)
        try:
            return await conn.request(DescribeConfigsRequest(resources=[DescribeConfigsResource(
                resource_type=4, resource_name=str(server.node_id), configuration_keys=None)]), 4)
        finally:
            await conn.close()

    configs = {c.name: c.value for c in asyncio.run(describe()).results[0].configs}
    assert configs["offsets.topic.replication.factor"] == "1" and configs["offsets.topic.num.partitions"] == "5"
    assert configs["group.initial.rebalance.delay.ms"] == "100" and configs["group.min.session.timeout.ms"] == "1000"
    assert configs["group.max.session.timeout.ms"] == "1800000" and configs["offset.metadata.max.bytes"] == "100"


def test_bad_group_requests_get_kafkas_codes(server):
    topic = make_topic(server, 1, 0)

    async def run():
        conn = await open_connection("127.0.0.1", server.port)
        try:
            group = f"g-{uuid.uuid4().hex[:8]}"
            found = await conn.request(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 4)
            assert found.coordinators[0].error_code == 0
            assert found.coordinators[0].node_id == server.node_id
            for _ in range(300):  # the coordinator loads its partition of __consumer_offsets first
                hb = await conn.request(HeartbeatRequest(group_id=group, generation_id=0, member_id="m"), 4)
                if hb.error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                    break
                await asyncio.sleep(0.1)
            assert hb.error_code == ErrorCode.UNKNOWN_MEMBER_ID

            def join(**kw):
                args = dict(group_id=group, session_timeout_ms=6000, rebalance_timeout_ms=6000, member_id="",
                            protocol_type="consumer",
                            protocols=[JoinGroupRequestProtocol(name="range", metadata=b"x")])
                args.update(kw)
                return conn.request(JoinGroupRequest(**args), 9)

            assert (await join(group_id="")).error_code == ErrorCode.INVALID_GROUP_ID
            assert (await join(session_timeout_ms=10)).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
            assert (await join(protocols=[])).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
            assert (await join(member_id="nobody")).error_code == ErrorCode.UNKNOWN_MEMBER_ID
            first = await join()
            assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED and first.member_id
            joined = await join(member_id=first.member_id)
            assert joined.error_code == 0 and joined.leader == first.member_id and joined.generation_id == 1
            assert (await join(protocol_type="connect")).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
            member, gen = first.member_id, joined.generation_id
            sync = await conn.request(SyncGroupRequest(group_id=group, generation_id=gen + 1, member_id=member), 5)
            assert sync.error_code == ErrorCode.ILLEGAL_GENERATION
            sync = await conn.request(SyncGroupRequest(group_id=group, generation_id=gen, member_id="x"), 5)
            assert sync.error_code == ErrorCode.UNKNOWN_MEMBER_ID
            hb = await conn.request(HeartbeatRequest(group_id=group, generation_id=gen, member_id=member), 4)
            assert hb.error_code == 0
            hb = await conn.request(HeartbeatRequest(group_id=group, generation_id=gen + 5, member_id=member), 4)
            assert hb.error_code == ErrorCode.ILLEGAL_GENERATION

            def commit(topic_name, **kw):
                args = dict(group_id=group, generation_id_or_member_epoch=gen, member_id=member, topics=[
                    OffsetCommitRequestTopic(name=topic_name, partitions=[
                        OffsetCommitRequestPartition(partition_index=0, committed_offset=0)])])
                args.update(kw)
                return conn.request(OffsetCommitRequest(**args), 9)

            code = lambda r: r.topics[0].partitions[0].error_code  # noqa: E731
            assert code(await commit("no-such-topic")) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert code(await commit(topic, group_id="")) == ErrorCode.INVALID_GROUP_ID
            assert code(await commit(topic, member_id="other")) == ErrorCode.UNKNOWN_MEMBER_ID
            assert code(await commit(topic, generation_id_or_member_epoch=gen + 1)) == ErrorCode.ILLEGAL_GENERATION
            assert code(await commit(topic)) == ErrorCode.REBALANCE_IN_PROGRESS  # no SyncGroup yet
            await conn.request(SyncGroupRequest(group_id=group, generation_id=gen, member_id=member), 5)
            assert code(await commit(topic)) == 0
            too_long = OffsetCommitRequestTopic(name=topic, partitions=[OffsetCommitRequestPartition(
                partition_index=0, committed_offset=0, committed_metadata="x" * 101)])
            assert code(await commit(topic, topics=[too_long])) == ErrorCode.OFFSET_METADATA_TOO_LARGE
        finally:
            await conn.close()

    asyncio.run(run())


def test_the_offsets_topic_waits_for_as_many_brokers_as_its_replication_factor(kjbod_server_factory):
    """Kafka's default offsets.topic.replication.factor is 3: one broker cannot make the topic, and a group's
    FindCoordinator answers COORDINATOR_NOT_AVAILABLE naming why (clients retry it)."""
    lone = kjbod_server_factory(log_dir_count=1)

    async def run():
        conn = await open_connection("127.0.0.1", lone.port)
        try:
            return await conn.request(FindCoordinatorRequest(key_type=0, coordinator_keys=["g"]), 4)
        finally:
            await conn.close()

    found = asyncio.run(run()).coordinators[0]
    assert found.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE and found.node_id == -1
    assert "__consumer_offsets" in found.error_message


def test_delete_groups_and_offset_delete(server):
    """DeleteGroups refuses a group with members (NON_EMPTY_GROUP) and an unknown one (GROUP_ID_NOT_FOUND);
    OffsetDelete keeps the offsets of topics a member subscribes to (GROUP_SUBSCRIBED_TO_TOPIC) and removes the
    others; once the group is empty both go, and OffsetFetch then answers no offsets."""
    subscribed, other = make_topic(server, 1, 0), make_topic(server, 1, 0)
    group = f"g-{uuid.uuid4().hex[:8]}"
    # A kafka-python consumer subscribed to one topic, whose group also committed an offset for another.
    c = consumer(server, subscribed, group)
    try:
        drain(c, 0, [])
        deadline = time.monotonic() + WAIT_S
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(timeout_ms=100)
        c.commit({TopicPartition(subscribed, 0): OffsetAndMetadata(1, "", -1),
                  TopicPartition(other, 0): OffsetAndMetadata(2, "", -1)})

        async def while_member():
            conn = await open_connection("127.0.0.1", server.port)
            try:
                deleted = await conn.request(DeleteGroupsRequest(groups_names=[group, "no-such-group"]), 2)
                assert [(r.group_id, r.error_code) for r in deleted.results] == [
                    (group, ErrorCode.NON_EMPTY_GROUP), ("no-such-group", ErrorCode.GROUP_ID_NOT_FOUND)]
                described = await conn.request(DescribeGroupsRequest(groups=[group]), 5)
                g = described.groups[0]
                assert (g.error_code, g.group_state, g.protocol_type, len(g.members)) == (0, "Stable", "consumer", 1)
                gone = await conn.request(OffsetDeleteRequest(group_id=group, topics=[
                    OffsetDeleteRequestTopic(name=subscribed, partitions=[OffsetDeleteRequestPartition(0)]),
                    OffsetDeleteRequestTopic(name=other, partitions=[OffsetDeleteRequestPartition(0)]),
                    OffsetDeleteRequestTopic(name="no-such-topic", partitions=[OffsetDeleteRequestPartition(0)])]), 0)
                assert gone.error_code == 0
                assert [(t.name, t.partitions[0].error_code) for t in gone.topics] == [
                    (subscribed, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC), (other, 0),
                    ("no-such-topic", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
                missing = await conn.request(OffsetDeleteRequest(group_id="no-such-group"), 0)
                assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND
            finally:
                await conn.close()

        asyncio.run(while_member())
        assert c.committed(TopicPartition(subscribed, 0)) == 1
        assert c.committed(TopicPartition(other, 0)) is None
    finally:
        c.close()  # leaves the group: it is empty now

    async def once_empty():
        conn = await open_connection("127.0.0.1", server.port)
        try:
            deleted = await conn.request(DeleteGroupsRequest(groups_names=[group]), 2)
            assert [(r.group_id, r.error_code) for r in deleted.results] == [(group, 0)]
            fetched = await conn.request(OffsetFetchRequest(groups=[OffsetFetchRequestGroup(group_id=group,
                                                                                            topics=None)]), 8)
            assert fetched.groups[0].error_code == 0 and fetched.groups[0].topics == []
            again = await conn.request(DeleteGroupsRequest(groups_names=[group]), 2)
            assert again.results[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
            left = await conn.request(LeaveGroupRequest(group_id=group, members=[MemberIdentity(member_id="x")]), 5)
            assert (left.error_code, [m.error_code for m in left.members]) == (0, [ErrorCode.UNKNOWN_MEMBER_ID])
        finally:
            await conn.close()

    asyncio.run(once_empty())


def test_expired_offsets_are_removed(kjbod_server_factory):
    """An offset committed with its own retention (OffsetCommit v2-v4) expires at the next check
    (offsets.retention.check.interval.ms); the empty group left without offsets goes too, and the tombstones
    keep both gone after a restart."""
    s = kjbod_server_factory(log_dir_count=1, overrides={
        **OVERRIDES, "offsets.retention.check.interval.ms": "200"})
    topic = make_topic(s, 1, 0)

    async def run(after_restart: bool):
        conn = await open_connection("127.0.0.1", s.port)
        try:
            group = "expiring"
            found = await conn.request(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 4)
            assert found.coordinators[0].error_code == 0  # the first one makes __consumer_offsets
            for _ in range(300):  # a restarted coordinator loads its partitions first
                fetched = await conn.request(OffsetFetchRequest(
                    groups=[OffsetFetchRequestGroup(group_id=group, topics=None)]), 8)
                if fetched.groups[0].error_code not in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                                        ErrorCode.NOT_COORDINATOR):
                    break
                await asyncio.sleep(0.1)
            if not after_restart:
                committed = await conn.request(OffsetCommitRequest(
                    group_id=group, generation_id_or_member_epoch=-1, retention_time_ms=1, topics=[
                        OffsetCommitRequestTopic(name=topic, partitions=[
                            OffsetCommitRequestPartition(partition_index=0, committed_offset=7)])]), 2)
                assert committed.topics[0].partitions[0].error_code == 0
            for _ in range(300):
                fetched = await conn.request(OffsetFetchRequest(
                    groups=[OffsetFetchRequestGroup(group_id=group, topics=None)]), 8)
                if fetched.groups[0].topics == []:
                    break
                await asyncio.sleep(0.1)
            assert fetched.groups[0].error_code == 0 and fetched.groups[0].topics == []
            described = await conn.request(DescribeGroupsRequest(groups=[group]), 5)
            assert described.groups[0].group_state == "Dead"
        finally:
            await conn.close()

    asyncio.run(run(False))
    s.stop()
    s.start()
    asyncio.run(run(True))


def test_dump_log_decodes_the_offsets_topic(server):
    """The commits are records of the group's `__consumer_offsets` partition in Kafka's format: `kjbod dump-log
    --offsets-decoder` (Kafka's kafka-dump-log.sh flag) reads them back."""
    topic = make_topic(server, 1, 3)
    group = f"g-{uuid.uuid4().hex[:8]}"
    c = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        c.assign([TopicPartition(topic, 0)])
        c.commit({TopicPartition(topic, 0): OffsetAndMetadata(3, "note", -1)})
    finally:
        c.close()
    p = partition_for(group, 5)
    [segment] = [d / f"__consumer_offsets-{p}" / "00000000000000000000.log" for d in server.log_dirs
                 if (d / f"__consumer_offsets-{p}").is_dir()]
    out = subprocess.run([sys.executable, "-m", "kjbod", "dump-log", "--offsets-decoder", "--files", str(segment)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if group in line]
    assert lines, out.stdout
    key = json.loads(lines[-1].split("key: ", 1)[1].split(" payload: ")[0])
    payload = json.loads(lines[-1].split(" payload: ", 1)[1])
    assert key == {"type": "1", "data": {"group": group, "topic": topic, "partition": 0}}
    assert payload["version"] == "3" and payload["data"]["offset"] == 3 and payload["data"]["metadata"] == "note"


def test_the_offsets_topic_follows_its_broker_keys(kjbod_server_factory):
    # offsets.topic.segment.bytes sizes the topic's segments, offsets.topic.compression.codec compresses the
    # coordinator's writes (gzip here), and a load buffer far smaller than one batch still loads every batch
    # after a restart (offsets.load.buffer.size: a read gives at least one whole batch, as Kafka grows its buffer).
    s = kjbod_server_factory(log_dir_count=1, overrides={
        **OVERRIDES, "offsets.topic.num.partitions": "1", "offsets.topic.segment.bytes": "1048576",
        "offsets.topic.compression.codec": "1", "offsets.load.buffer.size": "64"})
    topic = make_topic(s, 1, 5)
    group = f"g-{uuid.uuid4().hex[:8]}"
    c = KafkaConsumer(bootstrap_servers=s.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        for offset in (1, 3, 5):  # three commits, three batches in the offsets topic
            c.commit({TopicPartition(topic, 0): OffsetAndMetadata(offset, "m" * 20, -1)})
    finally:
        c.close()

    async def ask(request, version: int):
        conn = await open_connection("127.0.0.1", s.port)
        try:
            return await conn.request(request, version)
        finally:
            await conn.close()

    described = asyncio.run(ask(DescribeConfigsRequest(resources=[DescribeConfigsResource(
        resource_type=2, resource_name="__consumer_offsets", configuration_keys=None)]), 4))
    configs = {c.name: c.value for c in described.results[0].configs}
    assert configs["segment.bytes"] == "1048576" and configs["compression.type"] == "producer"
    assert configs["cleanup.policy"] == "compact"
    fetched = asyncio.run(ask(FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=[
        FetchRequest.FetchTopic(topic="__consumer_offsets", partitions=[FetchRequest.FetchPartition(
            partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]), 12))
    data = fetched.responses[0].partitions[0].records
    codecs = [h.compression for _, h in iter_batches(data)]
    assert len(codecs) >= 3 and set(codecs) == {1}, codecs

    s.stop()
    s.start()
    c = KafkaConsumer(bootstrap_servers=s.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        deadline = time.monotonic() + WAIT_S
        got = None
        while got != 5 and time.monotonic() < deadline:
            try:
                got = c.committed(TopicPartition(topic, 0))
            except Exception:  # the coordinator may still be loading
                time.sleep(0.2)
        assert got == 5
    finally:
        c.close()
