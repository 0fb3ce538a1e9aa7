"""Share groups (KIP-932), the group coordinator's side, against a real `kjbod serve` with hand-made requests.

Strategy: one single-node server per module; each test its own topic and group.  Members join with
ShareGroupHeartbeat v1 and heartbeat until the share state of their partitions has been initialized (the persister
answers in the background) and the partitions are assigned; ShareGroupDescribe v1 shows the group; the group's
records bring it back after a restart; bad requests get Kafka's codes and messages; share.version 0 turns the APIs
off.  The share-partition side (ShareFetch) is not driven here.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic
from live import LiveServer, start_server

from kjbod.net.connection import ClientConnection
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    ApiVersionsRequest,
    ConsumerGroupHeartbeatRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    JoinGroupRequest,
    ListGroupsRequest,
    ShareGroupDescribeRequest,
    ShareGroupHeartbeatRequest,
)
from kjbod.protocol.generated.join_group_request import JoinGroupRequestProtocol

pytestmark = pytest.mark.slow

OVERRIDES = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "2",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "share.coordinator.state.topic.num.partitions": "2",
    "group.share.heartbeat.interval.ms": "300",
    "group.share.min.heartbeat.interval.ms": "100",
    "group.share.session.timeout.ms": "45000",
    "auto.create.topics.enable": "false",
}
WAIT_S = 60.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    s = start_server(tmp_path_factory.mktemp("kip932g"), log_dir_count=2, overrides=OVERRIDES)
    yield s
    s.stop()


def make_topic(server: LiveServer, partitions: int) -> tuple[str, uuid.UUID]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(30)
    topic_id = admin.describe_topics(TopicCollection([name]))[name].result(30).topic_id
    mask = (1 << 64) - 1
    return name, uuid.UUID(int=((topic_id.get_most_significant_bits() & mask) << 64)
                           | (topic_id.get_least_significant_bits() & mask))


async def coordinator(server: LiveServer, group: str) -> ClientConnection:
    conn = await ClientConnection.open(server.host, server.port, client_id="kip932g-test", connect_timeout=10.0)
    deadline = time.monotonic() + WAIT_S
    while True:
        r = await conn.request(10, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 30.0)
        if r.coordinators[0].error_code == 0:
            return conn
        assert time.monotonic() < deadline, r
        await asyncio.sleep(0.2)


async def beat(conn: ClientConnection, group: str, member: str, epoch: int, topics: list[str] | None = None,
               **kw):
    return await conn.request(76, 1, ShareGroupHeartbeatRequest(
        group_id=group, member_id=member, member_epoch=epoch, subscribed_topic_names=topics, **kw), 30.0)


async def until_assigned(conn: ClientConnection, group: str, member: str, epoch: int, want: dict) -> int:
    """Heartbeats until the member's assignment is `want` (topic id -> partitions); its epoch then."""
    deadline = time.monotonic() + WAIT_S
    while True:
        r = await beat(conn, group, member, epoch)
        assert r.error_code == 0, r
        epoch = r.member_epoch
        if r.assignment is not None:
            got = {t.topic_id: sorted(t.partitions) for t in r.assignment.topic_partitions}
            if got == want:
                return epoch
        assert time.monotonic() < deadline, r
        await asyncio.sleep(0.1)


async def describe(conn: ClientConnection, *groups: str):
    r = await conn.request(77, 1, ShareGroupDescribeRequest(group_ids=list(groups)), 30.0)
    return r.groups


def test_members_join_share_the_partitions_and_the_group_survives_a_restart(tmp_path):
    s = start_server(tmp_path / "restart", log_dir_count=2, overrides=OVERRIDES)
    try:
        topic, tid = make_topic(s, 2)
        group = f"sg-{uuid.uuid4().hex[:8]}"
        m1, m2, m3 = (str(uuid.uuid4()) for _ in range(3))

        async def before() -> dict:
            conn = await coordinator(s, group)
            try:
                versions = await conn.request(18, 3, ApiVersionsRequest(client_software_name="t",
                                                                        client_software_version="1"), 30.0)
                keys = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
                assert keys[76] == (1, 1) and keys[77] == (1, 1)
                r = await beat(conn, group, m1, 0, [topic], rack_id="r1")
                assert (r.error_code, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (0, m1, 1, 300)
                assert r.assignment is not None and r.assignment.topic_partitions == []  # not initialized yet
                e1 = await until_assigned(conn, group, m1, 1, {tid: [0, 1]})
                r = await beat(conn, group, m2, 0, [topic])
                e2 = r.member_epoch
                r = await beat(conn, group, m3, 0, [topic])
                e3 = r.member_epoch
                # three members, two partitions: each partition shared, every member given at least one
                got = {}
                for m, e in ((m1, e1), (m2, e2), (m3, e3)):
                    deadline = time.monotonic() + WAIT_S
                    while True:
                        r = await beat(conn, group, m, e)
                        assert r.error_code == 0, r
                        e = r.member_epoch
                        [g] = await describe(conn, group)
                        if g.assignment_epoch == e:
                            break
                        assert time.monotonic() < deadline
                        await asyncio.sleep(0.1)
                [g] = await describe(conn, group)
                assert (g.error_code, g.group_state, g.assignor_name) == (0, "Stable", "simple")
                assert g.group_epoch == g.assignment_epoch
                for member in g.members:
                    got[member.member_id] = sorted(p for t in member.assignment.topic_partitions
                                                   for p in t.partitions)
                    assert member.subscribed_topic_names == [topic] and member.client_id == "kip932g-test"
                assert set(got) == {m1, m2, m3} and all(got.values())
                assert sorted(p for ps in got.values() for p in ps) in ([0, 0, 1, 1], [0, 0, 1], [0, 1, 1])
                assert {m.member_id: m.rack_id for m in g.members}[m1] == "r1"
                # another kind of group may not take the id, nor a share group a consumer group's id
                r = await conn.request(68, 1, ConsumerGroupHeartbeatRequest(
                    group_id=group, member_id="c1", member_epoch=0, rebalance_timeout_ms=5000,
                    subscribed_topic_names=[topic], topic_partitions=[]), 30.0)
                assert (r.error_code, r.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                           f"Group {group} is not a consumer group.")
                return {m.member_id: (m.member_epoch, got[m.member_id]) for m in g.members} | {
                    "": (g.group_epoch, g.assignment_epoch)}
            finally:
                conn.close()

        seen = asyncio.run(before())
        s.stop()
        s.start()

        async def after() -> None:
            conn = await coordinator(s, group)
            try:
                deadline = time.monotonic() + WAIT_S
                while True:  # the partition is loaded from its log first (COORDINATOR_LOAD_IN_PROGRESS)
                    [g] = await describe(conn, group)
                    if g.error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                        break
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.1)
                assert (g.error_code, g.group_state) == (0, "Stable")
                assert (g.group_epoch, g.assignment_epoch) == seen[""]
                assert {m.member_id: (m.member_epoch, sorted(p for t in m.assignment.topic_partitions
                                                             for p in t.partitions)) for m in g.members} == {
                    k: v for k, v in seen.items() if k}
                # a member carries on with its epoch; another leaves
                epoch = seen[m1][0]
                r = await beat(conn, group, m1, epoch)
                assert (r.error_code, r.member_epoch) == (0, epoch)
                r = await beat(conn, group, m3, -1)
                assert (r.error_code, r.member_id, r.member_epoch) == (0, m3, -1)
                [g] = await describe(conn, group)
                assert {m.member_id for m in g.members} == {m1, m2} and g.group_epoch == seen[""][0] + 1
            finally:
                conn.close()

        asyncio.run(after())
    finally:
        s.stop()


def test_bad_heartbeats_get_kafkas_codes(server):
    topic, _ = make_topic(server, 1)
    group = f"sg-{uuid.uuid4().hex[:8]}"

    async def run() -> None:
        conn = await coordinator(server, group)
        try:
            m = str(uuid.uuid4())
            for args, code, message in [
                    (("", m, 0, [topic]), ErrorCode.INVALID_REQUEST, "GroupId can't be empty."),
                    ((group, "", 0, [topic]), ErrorCode.INVALID_REQUEST, "Invalid member id in the request."),
                    ((group, "x" * 37, 0, [topic]), ErrorCode.INVALID_REQUEST, "Invalid member id in the request."),
                    ((group, m, 0, []), ErrorCode.INVALID_REQUEST,
                     "SubscribedTopicNames must be set in first request."),
                    ((group, m, 0, None), ErrorCode.INVALID_REQUEST,
                     "SubscribedTopicNames must be set in first request."),
                    ((group, m, -2, None), ErrorCode.INVALID_REQUEST, "MemberEpoch is invalid."),
                    ((group, m, 5, None), ErrorCode.GROUP_ID_NOT_FOUND, f"Share group {group} not found.")]:
                r = await beat(conn, *args)
                assert (r.error_code, r.error_message) == (code, message), args
            r = await beat(conn, group, m, 0, [topic])
            assert r.error_code == 0
            r = await beat(conn, group, "someone-else", 1)
            assert (r.error_code, r.error_message) == (
                ErrorCode.UNKNOWN_MEMBER_ID, f"Member someone-else is not a member of group {group}.")
            r = await beat(conn, group, m, r.member_epoch + 7 if r.member_epoch else 9)
            assert r.error_code == ErrorCode.FENCED_MEMBER_EPOCH and "greater member epoch" in r.error_message
            # a consumer group's id is not a share group's
            cg = f"cg-{uuid.uuid4().hex[:8]}"
            cconn = await coordinator(server, cg)
            try:
                r = await cconn.request(68, 1, ConsumerGroupHeartbeatRequest(
                    group_id=cg, member_id="c1", member_epoch=0, rebalance_timeout_ms=5000,
                    subscribed_topic_names=[topic], topic_partitions=[]), 30.0)
                assert r.error_code == 0
                r = await beat(cconn, cg, m, 0, [topic])
                assert (r.error_code, r.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                           f"Group {cg} is not a share group.")
                groups = await describe(cconn, cg)
                assert (groups[0].error_code, groups[0].error_message) == (
                    ErrorCode.GROUP_ID_NOT_FOUND, f"Group {cg} is not a share group.")
            finally:
                cconn.close()
            # a classic consumer may not join a share group
            r = await conn.request(11, 9, JoinGroupRequest(
                group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
                protocol_type="consumer", protocols=[JoinGroupRequestProtocol(name="range", metadata=b"")]), 30.0)
            assert (r.error_code, r.member_id) == (ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "")
            groups = await describe(conn, "no-such-share-group", "")
            assert [(g.error_code, g.error_message) for g in groups] == [
                (ErrorCode.GROUP_ID_NOT_FOUND, "Group no-such-share-group not found."),
                (ErrorCode.INVALID_GROUP_ID, "Group ID can't be empty.")]
        finally:
            conn.close()

    asyncio.run(run())


def test_share_version_0_turns_the_share_apis_off(server):
    topic, _ = make_topic(server, 1)
    group = f"sg-{uuid.uuid4().hex[:8]}"

    def features(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "kjbod", "features", "--bootstrap-server", server.bootstrap,
                               *args], capture_output=True, text=True, timeout=120)

    async def heartbeat_and_describe() -> tuple[int, int]:
        conn = await coordinator(server, group)
        try:
            r = await beat(conn, group, str(uuid.uuid4()), 0, [topic])
            [g] = await describe(conn, group)
            # ApiVersions lists the share APIs at either level, as Kafka's does
            versions = await conn.request(18, 3, ApiVersionsRequest(client_software_name="t",
                                                                    client_software_version="1"), 30.0)
            assert {76, 77, 90, 91, 92} <= {k.api_key for k in versions.api_keys}
            return r.error_code, g.error_code
        finally:
            conn.close()

    down = features("downgrade", "--feature", "share.version=0")
    assert (down.returncode, down.stdout) == (0, "share.version was downgraded to 0.\n"), down.stderr
    try:
        deadline = time.monotonic() + WAIT_S
        while (codes := asyncio.run(heartbeat_and_describe())) != (ErrorCode.UNSUPPORTED_VERSION,) * 2:
            assert time.monotonic() < deadline, codes
            time.sleep(0.2)
    finally:
        up = features("upgrade", "--feature", "share.version=1")
        assert up.returncode == 0, up.stderr
    deadline = time.monotonic() + WAIT_S
    while (codes := asyncio.run(heartbeat_and_describe())) != (0, 0):
        assert time.monotonic() < deadline, codes
        time.sleep(0.2)


def test_confluent_share_consumers_join_and_are_assigned(server):
    """confluent-kafka's ShareConsumer joins through ShareGroupHeartbeat; only the group side is checked here (its
    ShareFetch requests are the share-partition leader's part)."""
    from confluent_kafka import ShareConsumer

    topic, tid = make_topic(server, 2)
    group = f"sg-{uuid.uuid4().hex[:8]}"
    consumers = [ShareConsumer({"bootstrap.servers": server.bootstrap, "group.id": group,
                                "client.id": f"share-{i}"}) for i in range(2)]
    try:
        for c in consumers:
            c.subscribe([topic])

        async def described():
            conn = await coordinator(server, group)
            try:
                return (await describe(conn, group))[0]
            finally:
                conn.close()

        deadline = time.monotonic() + WAIT_S
        while True:
            for c in consumers:
                try:
                    c.poll(0.2)
                except Exception:  # noqa: BLE001 - fetching is not served by this part yet
                    pass
            g = asyncio.run(described())
            held = {m.client_id: sorted(p for t in m.assignment.topic_partitions for p in t.partitions)
                    for m in g.members}
            if g.error_code == 0 and len(held) == 2 and all(held.values()) and \
                    all(m.member_epoch == g.assignment_epoch for m in g.members):
                break
            assert time.monotonic() < deadline, (g, held)
        assert set(held) == {"share-0", "share-1"} and g.group_state == "Stable"
        assert sorted(held["share-0"] + held["share-1"]) == [0, 1]  # two members, two partitions: one each
        assert all(m.subscribed_topic_names == [topic] for m in g.members)
    finally:
        for c in consumers:
            c.close()
    deadline = time.monotonic() + WAIT_S
    while (g := asyncio.run(described())).members:  # close() leaves the group (epoch -1)
        assert time.monotonic() < deadline, g
        time.sleep(0.1)
    assert g.group_state == "Empty"


def test_list_describe_and_delete_a_share_group(server):
    topic, tid = make_topic(server, 1)
    group = f"sg-{uuid.uuid4().hex[:8]}"
    m = str(uuid.uuid4())

    async def run() -> None:
        conn = await coordinator(server, group)
        try:
            r = await beat(conn, group, m, 0, [topic])
            epoch = await until_assigned(conn, group, m, r.member_epoch, {tid: [0]})
            r = await conn.request(16, 5, ListGroupsRequest(types_filter=["Share"]), 30.0)
            listed = {g.group_id: (g.protocol_type, g.group_state, g.group_type) for g in r.groups}
            assert listed[group] == ("share", "Stable", "share")
            assert all(kind == "share" for _, _, kind in listed.values())
            r = await conn.request(16, 5, ListGroupsRequest(types_filter=["share"], states_filter=["Empty"]), 30.0)
            assert group not in {g.group_id for g in r.groups}
            r = await conn.request(16, 5, ListGroupsRequest(types_filter=["consumer"]), 30.0)
            assert group not in {g.group_id for g in r.groups}
            r = await conn.request(15, 6, DescribeGroupsRequest(groups=[group]), 30.0)
            [g] = r.groups
            assert (g.error_code, g.error_message, g.group_state) == (
                ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group} is not a classic group.", "Dead")
            r = await conn.request(42, 2, DeleteGroupsRequest(groups_names=[group]), 30.0)
            assert [(x.group_id, x.error_code) for x in r.results] == [(group, ErrorCode.NON_EMPTY_GROUP)]
            r = await beat(conn, group, m, -1)
            assert r.error_code == 0 and epoch > 0
            r = await conn.request(16, 5, ListGroupsRequest(types_filter=["share"], states_filter=["empty"]), 30.0)
            assert group in {g.group_id for g in r.groups}
            r = await conn.request(42, 2, DeleteGroupsRequest(groups_names=[group]), 30.0)
            assert [(x.group_id, x.error_code) for x in r.results] == [(group, 0)]
            assert (await describe(conn, group))[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
            r = await conn.request(16, 5, ListGroupsRequest(types_filter=["share"]), 30.0)
            assert group not in {g.group_id for g in r.groups}
            r = await conn.request(42, 2, DeleteGroupsRequest(groups_names=[group]), 30.0)
            assert [(x.group_id, x.error_code) for x in r.results] == [(group, ErrorCode.GROUP_ID_NOT_FOUND)]
            # the id is free again, for a group of any kind
            r = await beat(conn, group, m, 0, [topic])
            assert (r.error_code, r.member_epoch) == (0, 1)
        finally:
            conn.close()

    asyncio.run(run())


def test_share_group_offsets_are_described_altered_and_deleted_through_the_persister(server):
    from kjbod.protocol.generated import (
        AlterShareGroupOffsetsRequest,
        DeleteShareGroupOffsetsRequest,
        DescribeShareGroupOffsetsRequest,
    )
    from kjbod.protocol.generated.alter_share_group_offsets_request import (
        AlterShareGroupOffsetsRequestPartition as AlterPartition,
    )
    from kjbod.protocol.generated.alter_share_group_offsets_request import (
        AlterShareGroupOffsetsRequestTopic as AlterTopic,
    )
    from kjbod.protocol.generated.delete_share_group_offsets_request import (
        DeleteShareGroupOffsetsRequestTopic as DeleteTopic,
    )
    from kjbod.protocol.generated.describe_share_group_offsets_request import (
        DescribeShareGroupOffsetsRequestGroup as DescribeGroup,
    )
    from kjbod.protocol.generated.describe_share_group_offsets_request import (
        DescribeShareGroupOffsetsRequestTopic as DescribeTopic,
    )

    topic, tid = make_topic(server, 2)
    other, _ = make_topic(server, 1)
    group = f"sg-{uuid.uuid4().hex[:8]}"
    m = str(uuid.uuid4())

    async def offsets(conn, topics=None, version=1):
        r = await conn.request(90, version, DescribeShareGroupOffsetsRequest(groups=[DescribeGroup(
            group_id=group, topics=topics)]), 30.0)
        [g] = r.groups
        assert g.error_code == 0, g
        return {(t.topic_name, p.partition_index): (p.start_offset, p.lag, p.error_code)
                for t in g.topics for p in t.partitions}

    async def alter(conn, name, *parts):
        return await conn.request(91, 0, AlterShareGroupOffsetsRequest(group_id=group, topics=[AlterTopic(
            topic_name=name, partitions=[AlterPartition(partition_index=p, start_offset=o) for p, o in parts])]),
            30.0)

    async def run() -> None:
        conn = await coordinator(server, group)
        try:
            versions = await conn.request(18, 3, ApiVersionsRequest(client_software_name="t",
                                                                    client_software_version="1"), 30.0)
            keys = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
            assert (keys[90], keys[91], keys[92]) == ((0, 1), (0, 0), (0, 0))
            # a member's heartbeats initialize the state of both partitions: no start offset yet
            r = await beat(conn, group, m, 0, [topic])
            await until_assigned(conn, group, m, r.member_epoch, {tid: [0, 1]})
            assert await offsets(conn) == {(topic, 0): (-1, -1, 0), (topic, 1): (-1, -1, 0)}
            asked = [DescribeTopic(topic_name=topic, partitions=[1]), DescribeTopic(topic_name="nope", partitions=[0])]
            assert await offsets(conn, asked, version=0) == {(topic, 1): (-1, -1, 0), ("nope", 0): (-1, -1, 0)}
            # only an empty group's offsets change
            r = await alter(conn, topic, (0, 5))
            assert (r.error_code, r.error_message) == (ErrorCode.NON_EMPTY_GROUP, "The group is not empty.")
            assert (await beat(conn, group, m, -1)).error_code == 0
            r = await alter(conn, topic, (0, 5), (7, 1))
            assert r.error_code == 0
            assert [(t.topic_name, t.topic_id, [(p.partition_index, p.error_code) for p in t.partitions])
                    for t in r.responses] == [(topic, tid, [(0, 0), (7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)])]
            r = await alter(conn, "nope", (0, 1))
            assert [(p.partition_index, p.error_code) for t in r.responses for p in t.partitions] == [
                (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
            assert (await offsets(conn))[(topic, 0)][0] == 5
            # deleting: a topic without state, then the topic's state
            r = await conn.request(92, 0, DeleteShareGroupOffsetsRequest(group_id=group, topics=[
                DeleteTopic(topic_name=other), DeleteTopic(topic_name=topic)]), 30.0)
            assert r.error_code == 0
            assert sorted((t.topic_name, t.error_code, t.error_message) for t in r.responses) == sorted([
                (other, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "There is no offset information to delete."),
                (topic, 0, None)])
            assert await offsets(conn) == {}
            assert await offsets(conn, [DescribeTopic(topic_name=topic, partitions=[0])]) == {(topic, 0): (-1, -1, 0)}
            r = await conn.request(92, 0, DeleteShareGroupOffsetsRequest(group_id="no-such-group", topics=[
                DeleteTopic(topic_name=topic)]), 30.0)
            assert (r.error_code, r.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group no-such-group not found.")
            # altering makes a group that did not exist, empty
            fresh = f"sg-{uuid.uuid4().hex[:8]}"
            r = await conn.request(91, 0, AlterShareGroupOffsetsRequest(group_id=fresh, topics=[AlterTopic(
                topic_name=other, partitions=[AlterPartition(partition_index=0, start_offset=0)])]), 30.0)
            assert r.error_code == 0
            [g] = await describe(conn, fresh)
            assert (g.error_code, g.group_state, g.members) == (0, "Empty", [])
        finally:
            conn.close()

    asyncio.run(run())
