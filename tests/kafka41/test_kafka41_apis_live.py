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

from kjbod.net.connection import ClientConnection
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    ConsumerGroupHeartbeatRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    ListConfigResourcesRequest,
    OffsetCommitRequest,
)
from kjbod.protocol.generated.offset_commit_request import (
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
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
