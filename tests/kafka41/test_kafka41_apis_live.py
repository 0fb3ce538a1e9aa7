"""The versions Kafka 3.9-4.1 added that kjbod serves, against one live `kjbod serve`: DescribeGroups v6
(KIP-1043: GROUP_ID_NOT_FOUND and a message for an unknown group and for a consumer-protocol group) and
ListConfigResources v0-1 (KIP-1142), the latter through kafka-python's admin client as well as raw requests."""

from __future__ import annotations

import asyncio
import time
import uuid
import warnings

import pytest
from live import start_server

from kjbod.controller.metadata_fetch import METADATA_TOPIC_ID
from kjbod.net.connection import ClientConnection
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    ConsumerGroupHeartbeatRequest,
    DescribeGroupsRequest,
    FetchRequest,
    FindCoordinatorRequest,
    ListConfigResourcesRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    ProduceRequest,
)
from kjbod.protocol.generated.fetch_request import FetchPartition, FetchTopic, ReplicaState
from kjbod.protocol.generated.offset_commit_request import (
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kjbod.protocol.generated.offset_fetch_request import OffsetFetchRequestGroup, OffsetFetchRequestTopics
from kjbod.protocol.generated.produce_request import PartitionProduceData, TopicProduceData
from kjbod.storage.records import build_batch, iter_batches

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

WAIT_S = 60.0
OVERRIDES = {"offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "2",
             "group.initial.rebalance.delay.ms": "0"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    s = start_server(tmp_path_factory.mktemp("kafka41"), log_dir_count=2, overrides=OVERRIDES)
    yield s
    s.stop()


async def _until(make, done, what: str):
    """Sends `make()` until `done(answer)` (the coordinator may still be coming up); the last answer."""
    deadline = time.monotonic() + WAIT_S
    while True:
        answer = await make()
        if done(answer):
            return answer
        assert time.monotonic() < deadline, f"{what}: {answer}"
        await asyncio.sleep(0.2)


def test_describe_groups_v6_names_unknown_and_consumer_protocol_groups(server):
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    topic = f"t-{uuid.uuid4().hex[:6]}"
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        admin.close()
    classic, modern, unknown = (f"{k}-{uuid.uuid4().hex[:6]}" for k in ("classic", "modern", "unknown"))

    async def run():
        conn = await ClientConnection.open(server.host, server.port, client_id="kafka41", connect_timeout=10.0)
        try:
            await _until(lambda: conn.request(10, 4, FindCoordinatorRequest(
                key_type=0, coordinator_keys=[classic, modern]), 30.0),
                lambda r: all(c.error_code == 0 for c in r.coordinators), "FindCoordinator")
            # a classic group, made by a simple consumer's commit (Empty, protocol type "")
            commit = OffsetCommitRequest(group_id=classic, generation_id_or_member_epoch=-1, topics=[
                OffsetCommitRequestTopic(name=topic, partitions=[
                    OffsetCommitRequestPartition(partition_index=0, committed_offset=0)])])
            await _until(lambda: conn.request(8, 9, commit, 30.0),
                         lambda r: r.topics[0].partitions[0].error_code == 0, "OffsetCommit")
            # a consumer-protocol (KIP-848) group
            joined = await _until(lambda: conn.request(68, 1, ConsumerGroupHeartbeatRequest(
                group_id=modern, member_id="m1", member_epoch=0, rebalance_timeout_ms=5000,
                subscribed_topic_names=[topic], topic_partitions=[]), 30.0),
                lambda r: r.error_code == 0, "ConsumerGroupHeartbeat")
            assert joined.member_epoch > 0
            asked = DescribeGroupsRequest(groups=[unknown, modern, classic])
            return {v: await conn.request(15, v, asked, 30.0) for v in (5, 6)}
        finally:
            conn.close()

    answers = asyncio.run(run())
    v5 = {g.group_id: (g.error_code, g.group_state) for g in answers[5].groups}
    assert v5 == {unknown: (0, "Dead"), modern: (0, "Dead"), classic: (0, "Empty")}
    v6 = {g.group_id: (g.error_code, g.group_state, g.error_message) for g in answers[6].groups}
    assert v6 == {unknown: (ErrorCode.GROUP_ID_NOT_FOUND, "Dead", f"Group {unknown} not found."),
                  modern: (ErrorCode.GROUP_ID_NOT_FOUND, "Dead", f"Group {modern} is not a classic group."),
                  classic: (0, "Empty", None)}


def test_list_config_resources(server):
    topic = f"cfg-{uuid.uuid4().hex[:6]}"
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
        everything = admin.list_config_resources()  # v1, no types: every type kjbod has resources of
        assert topic in everything["topic"] and everything["broker"] == ["1"]
        assert everything["broker_logger"] == ["1"]
        assert admin.list_config_resources(["BROKER"]) == {"broker": ["1"]}
        assert set(admin.list_config_resources(["TOPIC"])["topic"]) >= {topic, "__consumer_offsets"}
        assert admin.list_config_resources(["GROUP"]) == {}  # kjbod keeps no group configs
    finally:
        admin.close()

    async def run():
        conn = await ClientConnection.open(server.host, server.port, client_id="kafka41", connect_timeout=10.0)
        try:
            return (await conn.request(74, 0, ListConfigResourcesRequest(), 30.0),
                    await conn.request(74, 1, ListConfigResourcesRequest(resource_types=[4, 2, 4]), 30.0),
                    await conn.request(74, 1, ListConfigResourcesRequest(resource_types=[2, 64]), 30.0))
        finally:
            conn.close()

    v0, ordered, unsupported = asyncio.run(run())
    assert (v0.error_code, v0.config_resources) == (0, [])  # v0: client-metrics resources only; none here
    types = [r.resource_type for r in ordered.config_resources]
    assert types == sorted(types, reverse=True) and set(types) == {4, 2}  # brokers first, each once
    assert [r.resource_name for r in ordered.config_resources if r.resource_type == 2] == sorted(
        r.resource_name for r in ordered.config_resources if r.resource_type == 2)
    assert (unsupported.error_code, unsupported.config_resources) == (ErrorCode.UNSUPPORTED_VERSION, [])


def _topic_ids(server, names) -> dict:
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        admin.create_topics([NewTopic(n, 2, 1) for n in names])
        return {t["name"]: uuid.UUID(str(t["topic_id"])) for t in admin.describe_topics(list(names))}
    finally:
        admin.close()


def test_offset_commit_and_fetch_v10_name_topics_by_id(server):
    kept, gone = f"ids-{uuid.uuid4().hex[:6]}", f"gone-{uuid.uuid4().hex[:6]}"
    ids = _topic_ids(server, [kept, gone])
    stranger = uuid.uuid4()
    group = f"g-{uuid.uuid4().hex[:6]}"

    def commit_topic(topic_id, offsets):
        return OffsetCommitRequestTopic(topic_id=topic_id, partitions=[
            OffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_metadata=f"m{o}")
            for p, o in offsets])

    async def run():
        conn = await ClientConnection.open(server.host, server.port, client_id="kafka41", connect_timeout=10.0)
        try:
            await _until(lambda: conn.request(10, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]),
                                              30.0), lambda r: r.coordinators[0].error_code == 0, "FindCoordinator")
            commit = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, topics=[
                commit_topic(ids[kept], [(0, 5), (1, 7)]), commit_topic(stranger, [(0, 1)]),
                commit_topic(ids[gone], [(0, 3), (9, 1)])])
            committed = await _until(lambda: conn.request(8, 10, commit, 30.0),
                                     lambda r: r.topics[0].partitions[0].error_code == 0, "OffsetCommit")

            def fetch(version, topics):
                return conn.request(9, version, OffsetFetchRequest(groups=[OffsetFetchRequestGroup(
                    group_id=group, topics=topics)]), 30.0)

            by_id = await fetch(10, [OffsetFetchRequestTopics(topic_id=ids[kept], partition_indexes=[1, 0]),
                                     OffsetFetchRequestTopics(topic_id=stranger, partition_indexes=[3])])
            every_before = await fetch(10, None)
            admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
            try:
                admin.delete_topics([gone])
            finally:
                admin.close()
            every_after = await _until(lambda: fetch(10, None), lambda r: len(r.groups[0].topics) == 1,
                                       "OffsetFetch after the delete")
            by_name = await fetch(9, None)
            return committed, by_id, every_before, every_after, by_name
        finally:
            conn.close()

    committed, by_id, every_before, every_after, by_name = asyncio.run(run())
    assert [(t.topic_id, [(p.partition_index, p.error_code) for p in t.partitions]) for t in committed.topics] == [
        (ids[kept], [(0, 0), (1, 0)]), (stranger, [(0, ErrorCode.UNKNOWN_TOPIC_ID)]),
        (ids[gone], [(0, 0), (9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)])]

    def offsets(group):
        return {(t.topic_id, p.partition_index): (p.committed_offset, p.metadata, p.error_code)
                for t in group.topics for p in t.partitions}

    assert by_id.groups[0].error_code == 0
    assert offsets(by_id.groups[0]) == {(ids[kept], 1): (7, "m7", 0), (ids[kept], 0): (5, "m5", 0),
                                        (stranger, 3): (-1, "", ErrorCode.UNKNOWN_TOPIC_ID)}
    assert by_id.groups[0].topics[-1].topic_id == stranger  # the unknown ids after the others
    assert offsets(every_before.groups[0]) == {(ids[kept], 0): (5, "m5", 0), (ids[kept], 1): (7, "m7", 0),
                                               (ids[gone], 0): (3, "m3", 0)}
    # a deleted topic has no id to answer with: left out by v10, still listed by name below it
    assert offsets(every_after.groups[0]) == {(ids[kept], 0): (5, "m5", 0), (ids[kept], 1): (7, "m7", 0)}
    assert {t.name for t in by_name.groups[0].topics} >= {kept}


def test_produce_v13_names_topics_by_id(server):
    name = f"p13-{uuid.uuid4().hex[:6]}"
    ids = _topic_ids(server, [name])
    stranger = uuid.uuid4()
    batch = build_batch([(b"k", b"by-id", [], 1_700_000_000_000), (None, b"second", [], 1_700_000_000_001)])

    async def run():
        conn = await ClientConnection.open(server.host, server.port, client_id="kafka41", connect_timeout=10.0)
        try:
            return await conn.request(0, 13, ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=[
                TopicProduceData(topic_id=ids[name], partition_data=[PartitionProduceData(index=1, records=batch),
                                                                     PartitionProduceData(index=7, records=batch)]),
                TopicProduceData(topic_id=stranger, partition_data=[PartitionProduceData(index=0, records=batch)])]),
                30.0)
        finally:
            conn.close()

    answer = asyncio.run(run())
    got = [(t.topic_id, [(p.index, p.error_code, p.base_offset) for p in t.partition_responses])
           for t in answer.responses]
    assert got == [(ids[name], [(1, 0, 0), (7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)]),
                   (stranger, [(0, ErrorCode.UNKNOWN_TOPIC_ID, -1)])]
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=10_000)
    try:
        consumer.assign([TopicPartition(name, 1)])
        assert [m.value for m in consumer][:2] == [b"by-id", b"second"]  # read back by name by a real client
    finally:
        consumer.close()


def test_fetch_v18_a_replica_behind_the_high_watermark_is_answered_at_once(server):
    """KIP-1166 on the controller listener: a metadata-log fetch at the log end that says its replica knows an
    older high watermark (or none) is answered instead of parked for its MaxWaitMs (here ten minutes, far past the
    request's own timeout)."""

    def fetch(offset: int, last_epoch: int, leader_epoch: int, wait_ms: int, hw: int | None = None):
        part = FetchPartition(partition=0, current_leader_epoch=leader_epoch, fetch_offset=offset,
                              last_fetched_epoch=last_epoch, log_start_offset=-1, partition_max_bytes=1 << 20)
        if hw is not None:
            part.high_watermark = hw
        return FetchRequest(replica_state=ReplicaState(replica_id=77, replica_epoch=-1), max_wait_ms=wait_ms,
                            min_bytes=1, max_bytes=1 << 20, topics=[FetchTopic(topic_id=METADATA_TOPIC_ID,
                                                                               partitions=[part])])

    async def run():
        conn = await ClientConnection.open(server.host, server.controller_port, client_id="kafka41",
                                           connect_timeout=10.0)
        try:
            offset, last, epoch = 0, 0, 0
            for _ in range(1000):  # catch up with the log end, following Kafka's answers
                pd = (await conn.request(1, 18, fetch(offset, last, epoch, 0), 30.0)).responses[0].partitions[0]
                if pd.current_leader.leader_epoch != epoch:
                    epoch = pd.current_leader.leader_epoch
                    last = min(last, epoch)
                    continue
                if pd.diverging_epoch.epoch != -1:
                    offset, last = pd.diverging_epoch.end_offset, pd.diverging_epoch.epoch
                    continue
                assert pd.error_code == 0 and pd.snapshot_id.end_offset == -1
                batches = [h for _, h in iter_batches(bytes(pd.records or b""))]
                if not batches:
                    break
                offset = batches[-1].last_offset + 1
                last = batches[-1].partition_leader_epoch
            answers = {}
            for hw in (-1, pd.high_watermark - 1):
                answers[hw] = (await conn.request(1, 18, fetch(offset, last, epoch, 600_000, hw), 30.0))
            return pd.high_watermark, answers
        finally:
            conn.close()

    leader_hw, answers = asyncio.run(run())
    assert leader_hw > 0
    for answer in answers.values():
        pd = answer.responses[0].partitions[0]
        assert (answer.error_code, pd.error_code) == (0, 0) and pd.high_watermark >= leader_hw
