"""Streams groups (KIP-1071) against a real `kjbod serve`, driven with kjbod's own generated codec as the client.

No Kafka Streams client can be installed here (Kafka Streams is a Java library; no Python client speaks KIP-1071),
so the members are hand-made StreamsGroupHeartbeat v0 requests, sent the way the Streams client sends them: join
with epoch 0 and the topology, then heartbeat with the epoch given and the tasks owned.

Strategy: one single-node server for the module, each test its own topics and group.  The broker creates the
topology's internal topics; two members share the tasks (revocation before assignment); one leaves and the other
takes everything; StreamsGroupDescribe shows the group; a restart; bad inputs get Kafka's codes, statuses and
messages; streams.version 0 turns the APIs off.
"""

from __future__ import annotations

import asyncio
import json
import struct
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from live import LiveServer, start_server

from kjbod.broker.groups.coordinator import partition_for
from kjbod.net.connection import ClientConnection
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    ApiVersionsRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    StreamsGroupDescribeRequest,
    StreamsGroupHeartbeatRequest,
)
from kjbod.protocol.generated.offset_commit_request import (
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kjbod.protocol.generated.offset_fetch_request import OffsetFetchRequestGroup, OffsetFetchRequestTopics
from kjbod.protocol.generated.streams_group_heartbeat_request import (
    CopartitionGroup,
    Endpoint,
    Subtopology,
    TaskIds,
    TopicInfo,
    Topology,
)

pytestmark = pytest.mark.slow

OVERRIDES = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "2",
    "auto.create.topics.enable": "false",
}
WAIT_S = 60.0
STALE_TOPOLOGY, MISSING_SOURCE_TOPICS, MISSING_INTERNAL_TOPICS, ASSIGNMENT_DELAYED = 0, 1, 3, 5


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    s = start_server(tmp_path_factory.mktemp("kip1071"), log_dir_count=2, overrides=OVERRIDES)
    yield s
    s.stop()


def make_topic(server: LiveServer, partitions: int) -> str:
    name = f"in-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(30)
    return name


def partition_counts(server: LiveServer, *names: str) -> dict[str, int]:
    md = AdminClient({"bootstrap.servers": server.bootstrap}).list_topics(timeout=30)
    return {n: len(md.topics[n].partitions) for n in names if n in md.topics and md.topics[n].error is None}


def word_count(app: str, source: str, epoch: int = 1) -> Topology:
    """Sub-topology 0 reads the source and repartitions; sub-topology 1 reads the repartition topic into a store."""
    return Topology(epoch=epoch, subtopologies=[
        Subtopology(subtopology_id="0", source_topics=[source], repartition_sink_topics=[f"{app}-repartition"]),
        Subtopology(subtopology_id="1",
                    repartition_source_topics=[TopicInfo(name=f"{app}-repartition", partitions=0,
                                                         replication_factor=0)],
                    state_changelog_topics=[TopicInfo(name=f"{app}-store-changelog", partitions=0,
                                                      replication_factor=0)],
                    copartition_groups=[CopartitionGroup(repartition_source_topics=[0])]),
    ])


async def coordinator(server: LiveServer, group: str) -> ClientConnection:
    conn = await ClientConnection.open(server.host, server.port, client_id="kip1071-test", connect_timeout=10.0)
    deadline = time.monotonic() + WAIT_S
    while True:
        r = await conn.request(10, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 30.0)
        if r.coordinators[0].error_code == 0:
            return conn
        assert time.monotonic() < deadline, r
        await asyncio.sleep(0.2)


def ids(tasks: dict[str, set[int]]) -> list[TaskIds]:
    return [TaskIds(subtopology_id=s, partitions=sorted(ps)) for s, ps in sorted(tasks.items())]


class Member:
    """One member as the Streams client runs it: the tasks it was given are the tasks it owns next time."""

    def __init__(self, conn: ClientConnection, group: str, topology: Topology, endpoint: int | None = None) -> None:
        self.conn, self.group, self.topology = conn, group, topology
        self.member_id, self.epoch = str(uuid.uuid4()), 0
        self.active: dict[str, set[int]] = {}
        self.endpoint = endpoint
        self.last = None

    async def beat(self, **kw):
        joining = self.epoch == 0
        body = StreamsGroupHeartbeatRequest(
            group_id=self.group, member_id=self.member_id, member_epoch=self.epoch, endpoint_information_epoch=0,
            rebalance_timeout_ms=30_000 if joining else -1, topology=self.topology if joining else None,
            process_id=self.member_id if joining else None,
            user_endpoint=Endpoint(host="127.0.0.1", port=self.endpoint) if joining and self.endpoint else None,
            active_tasks=None if joining else ids(self.active), standby_tasks=None if joining else [],
            warmup_tasks=None if joining else [])
        for k, v in kw.items():
            setattr(body, k, v)
        r = await self.conn.request(88, 0, body, 30.0)
        self.last = r
        if r.error_code == 0 and r.member_epoch >= 0:
            self.epoch = r.member_epoch
            if r.active_tasks is not None:
                self.active = {t.subtopology_id: set(t.partitions) for t in r.active_tasks}
        return r

    async def leave(self):
        return await self.conn.request(88, 0, StreamsGroupHeartbeatRequest(
            group_id=self.group, member_id=self.member_id, member_epoch=-1), 30.0)

    def tasks(self) -> set[tuple[str, int]]:
        return {(s, p) for s, ps in self.active.items() for p in ps}


async def until(members: list[Member], done, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while True:
        for m in members:
            r = await m.beat()
            assert r.error_code == 0, r
        if done():
            return
        assert time.monotonic() < deadline, f"{what}: {[m.last for m in members]}"
        await asyncio.sleep(0.1)


async def describe(conn: ClientConnection, *groups: str):
    return (await conn.request(89, 0, StreamsGroupDescribeRequest(group_ids=list(groups)), 30.0)).groups


async def described_once_loaded(conn: ClientConnection, group: str):
    """The group's StreamsGroupDescribe entry once its partition has loaded (after a restart)."""
    deadline = time.monotonic() + WAIT_S
    while (g := (await describe(conn, group))[0]).error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
        assert time.monotonic() < deadline, f"the partition of {group} never loaded: {g}"
        await asyncio.sleep(0.2)
    return g


def test_two_members_share_the_tasks_and_the_broker_creates_the_internal_topics(server):
    source = make_topic(server, 4)
    app = f"app-{uuid.uuid4().hex[:6]}"
    topology = word_count(app, source)
    every = {(s, p) for s in "01" for p in range(4)}

    async def run() -> None:
        conn = await coordinator(server, app)
        try:
            versions = await conn.request(18, 3, ApiVersionsRequest(client_software_name="t",
                                                                    client_software_version="1"), 30.0)
            keys = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
            assert keys[88] == (0, 0) and keys[89] == (0, 0)
            m1 = Member(conn, app, topology, endpoint=9001)
            r = await m1.beat()
            assert (r.error_code, r.member_id, r.heartbeat_interval_ms) == (0, m1.member_id, 5000)
            statuses = {st.status_code: st.status_detail for st in r.status}
            assert statuses[MISSING_INTERNAL_TOPICS] == (f"Internal topics are missing: {app}-repartition, "
                                                         f"{app}-store-changelog")
            # the first join waits for group.streams.initial.rebalance.delay.ms (3 s) to gather other members
            assert statuses[ASSIGNMENT_DELAYED] == "Assignment delayed due to the configured initial rebalance delay."

            await until([m1], lambda: m1.tasks() == every, "the first member gets every task")
            assert m1.last.status == []
            # the broker made the internal topics, with the source's partition count
            assert partition_counts(server, f"{app}-repartition", f"{app}-store-changelog") == {
                f"{app}-repartition": 4, f"{app}-store-changelog": 4}
            ep = m1.last.partitions_by_user_endpoint
            assert ep is not None or m1.last.endpoint_information_epoch > 0

            m2 = Member(conn, app, topology)
            r = await m2.beat()
            assert r.error_code == 0 and r.status == []
            await until([m1, m2], lambda: len(m1.tasks()) == 4 and len(m2.tasks()) == 4,
                        "two members, four tasks each")
            assert m1.tasks() | m2.tasks() == every and not m1.tasks() & m2.tasks()
            assert m1.epoch == m2.epoch
            [g] = await describe(conn, app)
            assert (g.error_code, g.group_state, g.group_epoch, g.assignment_epoch) == (0, "Stable", m1.epoch,
                                                                                        m1.epoch)
            assert g.topology.epoch == 1 and [s.subtopology_id for s in g.topology.subtopologies] == ["0", "1"]
            changelog = g.topology.subtopologies[1].state_changelog_topics[0]
            assert (changelog.name, changelog.partitions) == (f"{app}-store-changelog", 4)  # as configured
            assert g.topology.subtopologies[1].repartition_source_topics[0].partitions == 4
            assert sorted(m.member_id for m in g.members) == sorted([m1.member_id, m2.member_id])
            by_id = {m.member_id: m for m in g.members}
            assert by_id[m1.member_id].user_endpoint.port == 9001 and by_id[m2.member_id].user_endpoint is None
            assert {(t.subtopology_id, p) for t in by_id[m2.member_id].assignment.active_tasks
                    for p in t.partitions} == m2.tasks()
            assert by_id[m1.member_id].client_id == "kip1071-test"

            # offsets: a member commits with its current epoch (OffsetCommit v9 or later) and fetches with it
            async def commit(version: int, member: Member, epoch: int) -> int:
                r = await conn.request(8, version, OffsetCommitRequest(
                    group_id=app, generation_id_or_member_epoch=epoch, member_id=member.member_id,
                    topics=[OffsetCommitRequestTopic(name=source, partitions=[
                        OffsetCommitRequestPartition(partition_index=0, committed_offset=42)])]), 30.0)
                return r.topics[0].partitions[0].error_code

            assert await commit(9, m1, m1.epoch) == 0
            assert await commit(9, m1, m1.epoch + 1) == ErrorCode.STALE_MEMBER_EPOCH
            assert await commit(8, m1, m1.epoch) == ErrorCode.UNSUPPORTED_VERSION
            assert await commit(9, Member(conn, app, topology), 1) == ErrorCode.UNKNOWN_MEMBER_ID
            assert await commit(9, Member(conn, app, topology), -1) == ErrorCode.UNKNOWN_MEMBER_ID  # not empty

            async def fetch(member_id: str | None, epoch: int):
                r = await conn.request(9, 9, OffsetFetchRequest(groups=[OffsetFetchRequestGroup(
                    group_id=app, member_id=member_id, member_epoch=epoch,
                    topics=[OffsetFetchRequestTopics(name=source, partition_indexes=[0])])]), 30.0)
                g = r.groups[0]
                return g.error_code, [p.committed_offset for t in g.topics for p in t.partitions]

            assert await fetch(m2.member_id, m2.epoch) == (0, [42])
            assert await fetch(None, -1) == (0, [42])  # an admin
            assert (await fetch(m2.member_id, m2.epoch - 1))[0] == ErrorCode.STALE_MEMBER_EPOCH

            # m2 leaves: m1 takes everything back
            r = await m2.leave()
            assert (r.error_code, r.member_id, r.member_epoch) == (0, m2.member_id, -1)
            await until([m1], lambda: m1.tasks() == every, "the remaining member takes every task")
            [g] = await describe(conn, app)
            assert [m.member_id for m in g.members] == [m1.member_id] and g.group_state == "Stable"

            # the other group APIs: ListGroups lists it as a streams group, DescribeGroups is for classic groups,
            # DeleteGroups refuses a group with members and deletes an empty one
            listed = await conn.request(16, 5, ListGroupsRequest(types_filter=["streams"]), 30.0)
            assert [(x.group_id, x.protocol_type, x.group_state, x.group_type) for x in listed.groups
                    if x.group_id == app] == [(app, "streams", "Stable", "streams")]
            listed = await conn.request(16, 5, ListGroupsRequest(types_filter=["consumer"]), 30.0)
            assert app not in [x.group_id for x in listed.groups]
            dg = await conn.request(15, 6, DescribeGroupsRequest(groups=[app]), 30.0)
            assert (dg.groups[0].error_code, dg.groups[0].error_message, dg.groups[0].group_state) == (
                ErrorCode.GROUP_ID_NOT_FOUND, f"Group {app} is not a classic group.", "Dead")
            deleted = await conn.request(42, 2, DeleteGroupsRequest(groups_names=[app]), 30.0)
            assert deleted.results[0].error_code == ErrorCode.NON_EMPTY_GROUP
            assert (await m1.leave()).error_code == 0
            [g] = await describe(conn, app)
            assert (g.group_state, g.members) == ("Empty", [])
            deleted = await conn.request(42, 2, DeleteGroupsRequest(groups_names=[app]), 30.0)
            assert deleted.results[0].error_code == 0
            [g] = await describe(conn, app)
            assert (g.error_code, g.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, f"Group {app} not found.")
        finally:
            conn.close()

    asyncio.run(run())


def test_bad_inputs_get_kafkas_codes_and_statuses(server):
    source = make_topic(server, 2)
    app = f"app-{uuid.uuid4().hex[:6]}"

    async def run() -> None:
        conn = await coordinator(server, app)
        try:
            # unknown source topics: the member joins, the group is not ready, nothing is created
            lost = f"app-{uuid.uuid4().hex[:6]}"
            m = Member(conn, lost, word_count(lost, "no-such-topic"))
            r = await m.beat()
            assert r.error_code == 0
            assert {s.status_code: s.status_detail for s in r.status}[MISSING_SOURCE_TOPICS] == (
                "Source topics no-such-topic are missing.")
            assert r.active_tasks == [] and partition_counts(server, f"{lost}-repartition") == {}
            [g] = await describe(conn, lost)
            assert g.group_state == "NotReady"

            # a stale topology epoch is a status; the same epoch with another topology is refused
            m1 = Member(conn, app, word_count(app, source, epoch=2))
            assert (await m1.beat()).error_code == 0
            old = Member(conn, app, word_count(app, source, epoch=1))
            r = await old.beat()
            assert r.error_code == 0 and (STALE_TOPOLOGY, "The member's topology epoch 1 is behind the group's "
                                                          "topology epoch 2.") in [(s.status_code, s.status_detail)
                                                                                   for s in r.status]
            other = Member(conn, app, Topology(epoch=2, subtopologies=[
                Subtopology(subtopology_id="0", source_topics=[source])]))
            r = await other.beat()
            assert (r.error_code, r.error_message) == (ErrorCode.INVALID_REQUEST,
                                                       "Topology updates are not supported yet.")

            # member epochs
            r = await m1.beat(member_epoch=m1.epoch + 10, topology=None, active_tasks=[], standby_tasks=[],
                              warmup_tasks=[])
            assert r.error_code == ErrorCode.FENCED_MEMBER_EPOCH and "greater member epoch" in r.error_message
            r = await Member(conn, app, None).beat(member_epoch=3, active_tasks=[], standby_tasks=[],
                                                   warmup_tasks=[])
            assert r.error_code == ErrorCode.UNKNOWN_MEMBER_ID
            r = await m1.beat(member_epoch=-3, topology=None)
            assert (r.error_code, r.error_message) == (ErrorCode.INVALID_REQUEST, "MemberEpoch is -3, but must be "
                                                                                  "greater than or equal to -2.")
            # a topology naming Kafka's own topics, or a bad name, is an invalid topology
            bad = Member(conn, app, Topology(epoch=1, subtopologies=[
                Subtopology(subtopology_id="0", source_topics=["__consumer_offsets"])]))
            r = await bad.beat()
            assert (r.error_code, r.error_message) == (
                ErrorCode.STREAMS_INVALID_TOPOLOGY,
                "Use of Kafka internal topics __consumer_offsets in a Kafka Streams topology is prohibited.")
            bad.topology = Topology(epoch=1, subtopologies=[Subtopology(subtopology_id="0", source_topics=["a b"])])
            r = await bad.beat()
            assert (r.error_code, r.error_message) == (ErrorCode.STREAMS_INVALID_TOPOLOGY,
                                                       "Topic names a b are not valid topic names.")
            bad.topology = Topology(epoch=1, subtopologies=[Subtopology(
                subtopology_id="0", source_topics=[source],
                state_changelog_topics=[TopicInfo(name="c", partitions=2, replication_factor=0)])])
            r = await bad.beat()
            assert (r.error_code, r.error_message) == (
                ErrorCode.STREAMS_INVALID_TOPOLOGY,
                "Changelog topic c must have an undefined partition count, but it is set to 2.")
            # the group of another kind, or none
            [g] = await describe(conn, "no-such-group")
            assert (g.error_code, g.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group no-such-group not found.")
        finally:
            conn.close()

        # an unsupported version: the connection is closed, as Kafka closes it, and the server goes on
        reader, writer = await asyncio.open_connection(server.host, server.port)
        body = StreamsGroupHeartbeatRequest(group_id=app, member_id="m", member_epoch=0).encode(0)
        client_id = b"raw"
        header = struct.pack(">hhih", 88, 1, 7, len(client_id)) + client_id + b"\x00"
        frame = header + body
        writer.write(struct.pack(">i", len(frame)) + frame)
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 30) == b""
        writer.close()
        conn = await coordinator(server, app)
        try:
            [g] = await describe(conn, app)
            assert g.error_code == 0
        finally:
            conn.close()

    asyncio.run(run())


def test_the_group_survives_a_restart(tmp_path):
    """The StreamsGroup* records bring the group back: after a restart the member heartbeats on with its id and
    epoch and keeps its tasks; the internal topics the broker made and the offsets committed are still there."""
    s = start_server(tmp_path / "restart", log_dir_count=1, overrides=OVERRIDES)
    try:
        source = make_topic(s, 2)
        app = f"app-{uuid.uuid4().hex[:6]}"
        every = {(t, p) for t in "01" for p in range(2)}
        topology = word_count(app, source)

        async def before() -> tuple[str, int]:
            conn = await coordinator(s, app)
            try:
                m = Member(conn, app, topology, endpoint=7000)
                await until([m], lambda: m.tasks() == every, "the member gets every task")
                r = await conn.request(8, 9, OffsetCommitRequest(
                    group_id=app, generation_id_or_member_epoch=m.epoch, member_id=m.member_id,
                    topics=[OffsetCommitRequestTopic(name=source, partitions=[
                        OffsetCommitRequestPartition(partition_index=0, committed_offset=7)])]), 30.0)
                assert r.topics[0].partitions[0].error_code == 0
                return m.member_id, m.epoch
            finally:
                conn.close()

        member_id, epoch = asyncio.run(before())
        internal = partition_counts(s, f"{app}-repartition", f"{app}-store-changelog")
        assert internal == {f"{app}-repartition": 2, f"{app}-store-changelog": 2}
        s.stop()
        s.start()

        async def after() -> None:
            conn = await coordinator(s, app)
            try:
                g = await described_once_loaded(conn, app)
                assert g.error_code == 0 and [m.member_id for m in g.members] == [member_id], g
                assert g.topology.epoch == 1 and g.members[0].user_endpoint.port == 7000
                assert {(t.subtopology_id, p) for t in g.members[0].assignment.active_tasks
                        for p in t.partitions} == every
                m = Member(conn, app, topology)
                m.member_id, m.epoch = member_id, epoch
                m.active = {"0": {0, 1}, "1": {0, 1}}
                r = await m.beat()
                assert r.error_code == 0, r  # a known member at its epoch, not UNKNOWN_MEMBER_ID
                await until([m], lambda: m.tasks() == every and not m.last.status, "the member keeps its tasks")
                fetched = await conn.request(9, 9, OffsetFetchRequest(groups=[OffsetFetchRequestGroup(
                    group_id=app, member_id=m.member_id, member_epoch=m.epoch,
                    topics=[OffsetFetchRequestTopics(name=source, partition_indexes=[0])])]), 30.0)
                assert fetched.groups[0].topics[0].partitions[0].committed_offset == 7
            finally:
                conn.close()

        asyncio.run(after())
        assert partition_counts(s, f"{app}-repartition", f"{app}-store-changelog") == internal
        # `kjbod dump-log --offsets-decoder` prints the records as Kafka's tool does
        p = partition_for(app, 2)
        [segment] = [d / f"__consumer_offsets-{p}" / "00000000000000000000.log" for d in s.log_dirs
                     if (d / f"__consumer_offsets-{p}").is_dir()]
        out = subprocess.run([sys.executable, "-m", "kjbod", "dump-log", "--offsets-decoder", "--files",
                              str(segment)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        records = [(json.loads(line.split("key: ", 1)[1].split(" payload: ")[0]), line.split(" payload: ", 1)[1])
                   for line in out.stdout.splitlines() if f'"groupId":"{app}"' in line]
        kinds = {k["type"] for k, _ in records}
        assert {"17", "19", "20", "21", "22", "23"} <= kinds, out.stdout
        topology = [json.loads(v) for k, v in records if k["type"] == "23"][0]
        assert topology["version"] == "0" and topology["data"]["epoch"] == 1
        assert [x["subtopologyId"] for x in topology["data"]["subtopologies"]] == ["0", "1"]
        member = [json.loads(v) for k, v in records if k["type"] == "19"][-1]
        assert member["data"]["userEndpoint"] == {"host": "127.0.0.1", "port": 7000}
        assert [k["data"] for k, _ in records if k["type"] == "22"][-1] == {"groupId": app, "memberId": member_id}
    finally:
        s.stop()


def test_a_deleted_group_does_not_stop_its_partition_from_loading(tmp_path):
    """A deleted streams group leaves only tombstones in its __consumer_offsets partition; after a restart that
    partition loads: the group is not found, and another group's offsets on the same partition are back."""
    s = start_server(tmp_path / "deleted", log_dir_count=1, overrides=OVERRIDES)
    try:
        source = make_topic(s, 1)
        app = f"app-{uuid.uuid4().hex[:6]}"
        other = next(g for g in (f"other-{i}" for i in range(100)) if partition_for(g, 2) == partition_for(app, 2))

        async def commit(conn: ClientConnection, group: str) -> int:
            r = await conn.request(8, 9, OffsetCommitRequest(
                group_id=group, generation_id_or_member_epoch=-1, member_id="",
                topics=[OffsetCommitRequestTopic(name=source, partitions=[
                    OffsetCommitRequestPartition(partition_index=0, committed_offset=5)])]), 30.0)
            return r.topics[0].partitions[0].error_code

        async def before() -> None:
            # a bad request is INVALID_REQUEST before anything is coordinated here (not NOT_COORDINATOR)
            raw = await ClientConnection.open(s.host, s.port, client_id="kip1071-test", connect_timeout=10.0)
            try:
                r = await raw.request(88, 0, StreamsGroupHeartbeatRequest(group_id=app, member_id="m",
                                                                          member_epoch=-3), 30.0)
                assert (r.error_code, r.error_message) == (
                    ErrorCode.INVALID_REQUEST, "MemberEpoch is -3, but must be greater than or equal to -2.")
            finally:
                raw.close()
            conn = await coordinator(s, app)
            try:
                m = Member(conn, app, word_count(app, source))
                assert (await m.beat()).error_code == 0
                assert (await m.leave()).error_code == 0
                assert await commit(conn, app) == 0  # an empty streams group's offsets go with it
                deleted = await conn.request(42, 2, DeleteGroupsRequest(groups_names=[app]), 30.0)
                assert deleted.results[0].error_code == 0
                assert await commit(conn, other) == 0
            finally:
                conn.close()

        asyncio.run(before())
        s.stop()
        s.start()

        async def after() -> None:
            conn = await coordinator(s, app)
            try:
                g = await described_once_loaded(conn, app)
                assert (g.error_code, g.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, f"Group {app} not found.")
                r = await conn.request(9, 9, OffsetFetchRequest(groups=[OffsetFetchRequestGroup(
                    group_id=other, topics=[OffsetFetchRequestTopics(name=source, partition_indexes=[0])])]), 30.0)
                assert (r.groups[0].error_code, r.groups[0].topics[0].partitions[0].committed_offset) == (0, 5)
                r = await conn.request(9, 9, OffsetFetchRequest(groups=[OffsetFetchRequestGroup(
                    group_id=app, topics=[OffsetFetchRequestTopics(name=source, partition_indexes=[0])])]), 30.0)
                assert r.groups[0].topics[0].partitions[0].committed_offset == -1
                listed = await conn.request(16, 5, ListGroupsRequest(), 30.0)
                assert listed.error_code == 0
                assert other in [x.group_id for x in listed.groups] and app not in [x.group_id for x in listed.groups]
            finally:
                conn.close()

        asyncio.run(after())
    finally:
        s.stop()


def test_a_join_during_a_delete_is_not_lost(server):
    """DeleteGroups of an empty streams group and a join sent right behind it: the join either finds the group
    deleted and makes a new one, or comes first and the delete answers NON_EMPTY_GROUP; never a member answered
    and then deleted with its group."""
    source = make_topic(server, 1)

    async def run() -> None:
        for _ in range(5):
            app = f"app-{uuid.uuid4().hex[:6]}"
            a, b = await coordinator(server, app), await coordinator(server, app)
            try:
                first = Member(a, app, word_count(app, source))
                assert (await first.beat()).error_code == 0
                assert (await first.leave()).error_code == 0
                deleting = asyncio.create_task(a.request(42, 2, DeleteGroupsRequest(groups_names=[app]), 30.0))
                await asyncio.sleep(0.001)
                joiner = Member(b, app, word_count(app, source))
                joined = await joiner.beat()
                deleted = (await deleting).results[0].error_code
                assert joined.error_code == 0 and deleted in (0, ErrorCode.NON_EMPTY_GROUP), (joined, deleted)
                [g] = await describe(a, app)
                assert (g.error_code, [m.member_id for m in g.members]) == (0, [joiner.member_id]), (deleted, g)
                assert (await joiner.beat()).error_code == 0
                assert (await joiner.leave()).error_code == 0
            finally:
                a.close()
                b.close()

    asyncio.run(run())


def test_a_failed_write_after_a_session_timeout_is_written_later(tmp_path):
    """A member times out while its group's `__consumer_offsets` partition refuses writes (a max.message.bytes no
    batch fits in): the removal is written once the partition takes writes again, without another heartbeat, so
    the member does not come back after a restart."""
    s = start_server(tmp_path / "retry", log_dir_count=1, overrides=OVERRIDES)
    try:
        source = make_topic(s, 1)
        app = f"app-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": s.bootstrap})

        def max_message_bytes(op: AlterConfigOpType, value: str) -> None:
            resource = ConfigResource(ResourceType.TOPIC, "__consumer_offsets", incremental_configs=[
                ConfigEntry("max.message.bytes", value, incremental_operation=op)])
            for f in admin.incremental_alter_configs([resource]).values():
                f.result(30)

        async def members() -> list[str] | None:
            conn = await coordinator(s, app)
            try:
                g = await described_once_loaded(conn, app)
                return None if g.error_code else [m.member_id for m in g.members]
            finally:
                conn.close()

        async def join() -> str:
            conn = await coordinator(s, app)
            try:
                m = Member(conn, app, word_count(app, source))
                assert (await m.beat()).error_code == 0
                return m.member_id
            finally:
                conn.close()

        member_id = asyncio.run(join())
        max_message_bytes(AlterConfigOpType.SET, "64")
        # the member stays silent: its session (45 s) runs out and its removal cannot be written
        deadline = time.monotonic() + 120
        while asyncio.run(members()) != []:
            assert time.monotonic() < deadline, "the member was never removed"
            time.sleep(1)
        time.sleep(2)  # the tick that removed it tried the write, refused
        max_message_bytes(AlterConfigOpType.DELETE, "")
        time.sleep(4)  # the retry comes within a second or two
        s.stop()
        s.start()
        assert asyncio.run(members()) == [], f"{member_id} came back"
    finally:
        s.stop()


def test_streams_version_0_turns_the_apis_off(server):
    app = f"app-{uuid.uuid4().hex[:6]}"
    source = make_topic(server, 1)

    def features(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "kjbod", "features", "--bootstrap-server", server.bootstrap,
                               *args], capture_output=True, text=True, timeout=120)

    async def heartbeat_and_describe() -> tuple[int, int]:
        conn = await coordinator(server, app)
        try:
            r = await Member(conn, app, word_count(app, source)).beat()
            [g] = await describe(conn, app)
            versions = await conn.request(18, 3, ApiVersionsRequest(client_software_name="t",
                                                                    client_software_version="1"), 30.0)
            assert {88, 89} <= {k.api_key for k in versions.api_keys}  # listed at either level, as Kafka's are
            return r.error_code, g.error_code
        finally:
            conn.close()

    down = features("downgrade", "--feature", "streams.version=0")
    assert (down.returncode, down.stdout) == (0, "streams.version was downgraded to 0.\n"), down.stderr
    try:
        deadline = time.monotonic() + WAIT_S
        while (codes := asyncio.run(heartbeat_and_describe())) != (ErrorCode.UNSUPPORTED_VERSION,) * 2:
            assert time.monotonic() < deadline, codes
            time.sleep(0.2)
    finally:
        up = features("upgrade", "--feature", "streams.version=1")
        assert up.returncode == 0, up.stderr
    deadline = time.monotonic() + WAIT_S
    while (codes := asyncio.run(heartbeat_and_describe())) != (0, 0):
        assert time.monotonic() < deadline, codes
        time.sleep(0.2)


def test_the_heartbeat_interval_is_the_broker_key_or_the_groups_own_config(tmp_path):
    """group.streams.heartbeat.interval.ms sets the interval a member is told; the group config
    streams.heartbeat.interval.ms, set with IncrementalAlterConfigs on the GROUP resource, overrides it for that
    group only (from the member's next heartbeat), and DescribeConfigs shows both; a value past the broker's max
    key is refused with INVALID_CONFIG."""
    s = start_server(tmp_path / "interval", log_dir_count=1,
                     overrides={**OVERRIDES, "group.streams.heartbeat.interval.ms": "6000"})
    try:
        source = make_topic(s, 1)
        app, other = f"app-{uuid.uuid4().hex[:6]}", f"app-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": s.bootstrap})

        def alter(group: str, value: str) -> None:
            resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
                ConfigEntry("streams.heartbeat.interval.ms", value, incremental_operation=AlterConfigOpType.SET)])
            for f in admin.incremental_alter_configs([resource]).values():
                f.result(30)

        def described(group: str) -> tuple[str, int]:
            resource = ConfigResource(ResourceType.GROUP, group)
            entries = next(iter(admin.describe_configs([resource]).values())).result(30)
            e = entries["streams.heartbeat.interval.ms"]
            return e.value, e.source  # Kafka's ConfigSource ids: DEFAULT_CONFIG 5, GROUP_CONFIG 8

        async def intervals(want: int) -> tuple[int, int]:
            """Heartbeats of a member of each group, until the first group's member is told `want`."""
            conn, conn2 = await coordinator(s, app), await coordinator(s, other)
            try:
                m, m2 = Member(conn, app, word_count(app, source)), Member(conn2, other, word_count(other, source))
                deadline = time.monotonic() + WAIT_S
                while True:
                    r, r2 = await m.beat(), await m2.beat()
                    assert r.error_code == 0 and r2.error_code == 0, (r, r2)
                    if r.heartbeat_interval_ms == want:
                        return r.heartbeat_interval_ms, r2.heartbeat_interval_ms
                    assert time.monotonic() < deadline, f"never told {want}: {r}"
                    await asyncio.sleep(0.2)
            finally:
                conn.close()
                conn2.close()

        assert asyncio.run(intervals(6000)) == (6000, 6000)
        assert described(app) == ("6000", 5)
        alter(app, "8000")
        assert described(app) == ("8000", 8)
        assert asyncio.run(intervals(8000)) == (8000, 6000)
        with pytest.raises(Exception) as e:
            alter(app, "16000")
        assert e.value.args[0].name() == "INVALID_CONFIG", e.value
        assert "streams.heartbeat.interval.ms must be less than or equal to group.streams.max.heartbeat.interval.ms" \
            in e.value.args[0].str()
        assert described(app) == ("8000", 8)
    finally:
        s.stop()
