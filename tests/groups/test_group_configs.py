"""KIP-848's per-group configs: ConfigResource GROUP (32) in DescribeConfigs, IncrementalAlterConfigs and AlterConfigs.

Strategy: the checks (Kafka's GroupConfig rules: known names, integers, the broker's group.consumer.min/max.*
bounds, a session longer than the heartbeat interval) and the records the controller writes are driven in process;
the coordinator's use of a group's values is shown on `ConsumerGroups` with the time passed in.  Then one real
`kjbod serve` is configured through kafka-python's and confluent-kafka's admin clients and `kjbod configs`, and a
hand-made ConsumerGroupHeartbeat shows the group's own heartbeat interval coming back; a restart keeps the values
(they are ConfigRecords of the metadata log).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from types import SimpleNamespace

import pytest
from live import LiveServer, start_server

from kjbod.broker import broker_config as bc
from kjbod.broker.groups.consumer import ConsumerGroupConfig, ConsumerGroups, MemberHeartbeat, TopicMeta
from kjbod.controller import configs as controller_configs
from kjbod.metadata import EMPTY_IMAGE, GROUP_RESOURCE
from kjbod.protocol.errors import ErrorCode
from kjbod.server.roles import BrokerConfigPolicy

SET, DELETE, APPEND = 0, 1, 2
SESSION, INTERVAL = "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"
BROKER = SimpleNamespace(group_consumer_session_timeout_ms=45_000, group_consumer_heartbeat_interval_ms=5000,
                         group_consumer_min_session_timeout_ms=45_000, group_consumer_max_session_timeout_ms=60_000,
                         group_consumer_min_heartbeat_interval_ms=5000, group_consumer_max_heartbeat_interval_ms=15_000,
                         group_share_session_timeout_ms=45_000, group_share_heartbeat_interval_ms=5000,
                         group_share_min_session_timeout_ms=45_000, group_share_max_session_timeout_ms=60_000,
                         group_share_min_heartbeat_interval_ms=5000, group_share_max_heartbeat_interval_ms=15_000,
                         group_share_record_lock_duration_ms=30_000, group_share_min_record_lock_duration_ms=15_000,
                         group_share_max_record_lock_duration_ms=60_000, group_share_delivery_count_limit=5,
                         group_share_min_delivery_count_limit=2, group_share_max_delivery_count_limit=10,
                         group_share_partition_max_record_locks=2000, group_share_min_partition_max_record_locks=100,
                         group_share_max_partition_max_record_locks=4000,
                         group_streams_session_timeout_ms=45_000, group_streams_heartbeat_interval_ms=5000,
                         group_streams_min_session_timeout_ms=45_000, group_streams_max_session_timeout_ms=60_000,
                         group_streams_min_heartbeat_interval_ms=5000, group_streams_max_heartbeat_interval_ms=15_000,
                         group_streams_num_standby_replicas=0, group_streams_max_standby_replicas=2,
                         group_streams_initial_rebalance_delay_ms=3000)


def plan(changes, overrides=None, replace=False):
    return BrokerConfigPolicy(None, BROKER).plan_group(dict(overrides or {}), changes, replace=replace)


def alter(image, resources, replace=False, validate_only=False):
    return controller_configs.alter_configs(image, resources, BrokerConfigPolicy(None, BROKER), replace=replace,
                                            validate_only=validate_only)


def refused(changes, overrides=None, replace=False) -> tuple[int, str]:
    from kjbod.controller.result import PolicyError

    with pytest.raises(PolicyError) as e:
        plan(changes, overrides, replace)
    return e.value.code, e.value.message


def test_group_values_are_checked_as_kafka_checks_them():
    assert plan([(SESSION, SET, "50000")]) == {SESSION: "50000"}
    assert plan([(INTERVAL, SET, "6000")], {SESSION: "50000"}) == {SESSION: "50000", INTERVAL: "6000"}
    assert plan([(SESSION, DELETE, None)], {SESSION: "50000", INTERVAL: "6000"}) == {INTERVAL: "6000"}
    assert plan([(INTERVAL, SET, "7000")], {SESSION: "50000"}, replace=True) == {INTERVAL: "7000"}
    assert refused([("consumer.rebalance.ms", SET, "1")]) == (
        ErrorCode.INVALID_CONFIG, "Unknown group config name: consumer.rebalance.ms")
    assert refused([(SESSION, SET, "soon")])[0] == ErrorCode.INVALID_CONFIG
    assert refused([(SESSION, SET, "0")])[0] == ErrorCode.INVALID_CONFIG
    assert refused([(SESSION, SET, "40000")]) == (
        ErrorCode.INVALID_CONFIG, f"{SESSION} must be greater than or equal to group.consumer.min.session.timeout.ms")
    assert refused([(SESSION, SET, "70000")]) == (
        ErrorCode.INVALID_CONFIG, f"{SESSION} must be less than or equal to group.consumer.max.session.timeout.ms")
    assert refused([(INTERVAL, SET, "4000")])[1].endswith("group.consumer.min.heartbeat.interval.ms")
    assert refused([(INTERVAL, SET, "16000")])[1].endswith("group.consumer.max.heartbeat.interval.ms")
    assert refused([(INTERVAL, APPEND, "1")])[0] == ErrorCode.INVALID_REQUEST
    # the session must outlast the heartbeat interval, defaults counted
    wide = SimpleNamespace(**{**vars(BROKER), "group_consumer_min_session_timeout_ms": 1000})
    from kjbod.controller.result import PolicyError

    with pytest.raises(PolicyError, match=f"{SESSION} must be greater than {INTERVAL}"):
        BrokerConfigPolicy(None, wide).plan_group({}, [(SESSION, SET, "5000")], replace=False)


def test_the_controller_writes_config_records_of_type_32_and_refuses_the_default_group():
    result = alter(EMPTY_IMAGE, [(GROUP_RESOURCE, "g1", [(SESSION, SET, "50000"), (INTERVAL, SET, "6000")]),
                                 (GROUP_RESOURCE, "", [(SESSION, SET, "50000")]),
                                 (GROUP_RESOURCE, "g2", [("nope", SET, "1")])])
    assert [(r.resource_type, r.resource_name, r.name, r.value) for r in result.records] == [
        (32, "g1", INTERVAL, "6000"), (32, "g1", SESSION, "50000")]
    assert result.response == [(0, None), (ErrorCode.INVALID_REQUEST, "Default group resources are not allowed."),
                               (ErrorCode.INVALID_CONFIG, "Unknown group config name: nope")]
    assert alter(EMPTY_IMAGE, [(GROUP_RESOURCE, "g1", [(SESSION, SET, "50000")])], validate_only=True).records == []
    # a replay makes them the group's configs in the image; a delete writes a null value
    from kjbod.metadata import MetadataDelta

    delta = MetadataDelta(EMPTY_IMAGE)
    for r in result.records:
        delta.replay(r)
    image = delta.apply()
    assert dict(image.resource_configs(GROUP_RESOURCE, "g1")) == {SESSION: "50000", INTERVAL: "6000"}
    gone = alter(image, [(GROUP_RESOURCE, "g1", [(SESSION, DELETE, None)])]).records
    assert [(r.name, r.value) for r in gone] == [(SESSION, None)]
    # AlterConfigs replaces the whole set
    replaced = alter(image, [(GROUP_RESOURCE, "g1", [(INTERVAL, SET, "7000")])], replace=True).records
    assert [(r.name, r.value) for r in replaced] == [(SESSION, None), (INTERVAL, "7000")]


def test_describe_shows_the_groups_values_and_the_brokers_defaults():
    entries = {e.name: e for e in bc.describe_group(BROKER, {SESSION: "50000"}, None)}
    assert (entries[SESSION].value, entries[SESSION].source, entries[SESSION].type) == ("50000", bc.GROUP_CONFIG,
                                                                                          bc.INT)
    assert (entries[INTERVAL].value, entries[INTERVAL].source) == ("5000", bc.DEFAULT_CONFIG)
    assert [e.name for e in bc.describe_group(BROKER, {}, [INTERVAL])] == [INTERVAL]


def test_the_coordinator_uses_a_groups_own_session_timeout_and_heartbeat_interval():
    topic = TopicMeta(uuid.UUID(int=1), "t", 2)
    own = {"slow": {SESSION: 3000, INTERVAL: 700}}
    groups = ConsumerGroups(ConsumerGroupConfig(session_timeout_ms=1000, heartbeat_interval_ms=100), {},
                            group_configs=lambda gid: own.get(gid, {}))

    def join(gid: str) -> int:
        r = groups.heartbeat(0, MemberHeartbeat(gid, "m", 0, rebalance_timeout_ms=500, subscribed_topic_names=("t",),
                                                owned={}), {"t": topic}.get)
        assert r.error_code == 0
        return r.heartbeat_interval_ms

    assert join("slow") == 700 and join("fast") == 100
    assert groups.tick(1000) == ["fast"]  # the broker's session timeout for the group without its own
    assert groups.tick(2999) == [] and groups.tick(3000) == ["slow"]


# ------------------------------------------------------------------------------------------------ live
@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    s = start_server(tmp_path_factory.mktemp("groupcfg"), log_dir_count=1, overrides={
        "offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "2",
        "group.consumer.min.session.timeout.ms": "2000", "group.consumer.min.heartbeat.interval.ms": "100"})
    yield s
    s.stop()


def configs_cli(server: LiveServer, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kjbod", "configs", "--bootstrap-server", server.bootstrap,
                           "--entity-type", "groups", *args], capture_output=True, text=True, timeout=60)


async def _heartbeat_interval(server: LiveServer, group: str, topic: str) -> int:
    from kjbod.net.connection import ClientConnection
    from kjbod.protocol.generated import ConsumerGroupHeartbeatRequest, FindCoordinatorRequest

    conn = await ClientConnection.open(server.host, server.port, client_id="groupcfg-test", connect_timeout=10.0)
    try:
        deadline = time.monotonic() + 60
        while (await conn.request(10, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]),
                                  30.0)).coordinators[0].error_code:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.2)
        r = await conn.request(68, 0, ConsumerGroupHeartbeatRequest(
            group_id=group, member_id=uuid.uuid4().hex, member_epoch=0, rebalance_timeout_ms=5000,
            subscribed_topic_names=[topic], topic_partitions=[]), 30.0)
        assert r.error_code == 0, r.error_message
        await conn.request(68, 0, ConsumerGroupHeartbeatRequest(group_id=group, member_id=r.member_id,
                                                                member_epoch=-1), 30.0)
        return r.heartbeat_interval_ms
    finally:
        conn.close()


@pytest.mark.slow
def test_kafka_python_and_confluent_admins_set_and_read_group_configs(server):
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )
    from kafka.admin import ConfigResource as KPResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    group = f"g-{uuid.uuid4().hex[:8]}"
    kp = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        kp.alter_configs([KPResource(ConfigResourceType.GROUP, group, configs={INTERVAL: "800"})])
        described = kp.describe_configs([KPResource(ConfigResourceType.GROUP, group)], config_filter="all")
        rows = described["group"][group]
        assert (rows[INTERVAL]["value"], rows[INTERVAL]["config_source"]) == ("800", "DYNAMIC_GROUP_CONFIG")
        assert (rows[SESSION]["value"], rows[SESSION]["config_source"]) == ("45000", "DEFAULT_CONFIG")
    finally:
        kp.close()
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(SESSION, "9000", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(30)
    got = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)])
    (entries,) = [f.result(30) for f in got.values()]
    assert entries[SESSION].value == "9000" and entries[INTERVAL].value == "800"
    # out of bounds: Kafka's INVALID_CONFIG naming the broker key
    bad = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(SESSION, "100", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception, match="group.consumer.min.session.timeout.ms"):
        for f in admin.incremental_alter_configs([bad]).values():
            f.result(30)


@pytest.mark.slow
def test_kjbod_configs_alters_and_describes_a_group_and_the_coordinator_obeys(server):
    from confluent_kafka.admin import AdminClient, NewTopic

    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for f in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        f.result(30)
    assert asyncio.run(_heartbeat_interval(server, group, topic)) == 5000  # the broker's key
    out = configs_cli(server, "--entity-name", group, "--alter", "--add-config", f"{INTERVAL}=250,{SESSION}=4000")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"Completed updating config for group {group}."
    out = configs_cli(server, "--entity-name", group, "--describe")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"Dynamic configs for group {group} are:",
        f"  {INTERVAL}=250 sensitive=false synonyms={{DYNAMIC_GROUP_CONFIG:{INTERVAL}=250}}",
        f"  {SESSION}=4000 sensitive=false synonyms={{DYNAMIC_GROUP_CONFIG:{SESSION}=4000}}"]
    # without a name: every group of the cluster (the heartbeats above made this one)
    out = configs_cli(server, "--describe")
    assert out.returncode == 0 and f"Dynamic configs for group {group} are:" in out.stdout.splitlines(), out
    # the coordinator reads the group's value from the metadata image
    deadline = time.monotonic() + 30
    while (interval := asyncio.run(_heartbeat_interval(server, group, topic))) != 250:
        assert time.monotonic() < deadline, interval
        time.sleep(0.2)
    # the group's session (4000) would not outlast the broker's interval (5000): Kafka's INVALID_CONFIG
    out = configs_cli(server, "--entity-name", group, "--alter", "--delete-config", INTERVAL)
    assert out.returncode == 1 and f"{SESSION} must be greater than {INTERVAL}" in out.stderr
    out = configs_cli(server, "--entity-name", group, "--alter", "--delete-config", f"{INTERVAL},{SESSION}")
    assert out.returncode == 0, out.stderr
    out = configs_cli(server, "--entity-name", group, "--describe", "--all")
    assert f"  {INTERVAL}=5000 sensitive=false synonyms={{DEFAULT_CONFIG:{INTERVAL}=5000}}" in out.stdout.splitlines()
    # mistakes: a key the group does not have, an unknown key, a bad bound
    out = configs_cli(server, "--entity-name", group, "--alter", "--delete-config", INTERVAL)
    assert out.returncode == 1 and f"Invalid config(s): {INTERVAL}" in out.stderr
    out = configs_cli(server, "--entity-name", group, "--alter", "--add-config", "consumer.nope.ms=5")
    assert out.returncode == 1 and "INVALID_CONFIG" in out.stderr and "consumer.nope.ms" in out.stderr
    out = configs_cli(server, "--entity-name", group, "--alter", "--add-config", f"{SESSION}=900000")
    assert out.returncode == 1 and "group.consumer.max.session.timeout.ms" in out.stderr
    out = configs_cli(server, "--alter", "--add-config", f"{SESSION}=5000")
    assert out.returncode == 2


@pytest.mark.slow
def test_group_configs_survive_a_restart(tmp_path):
    s = start_server(tmp_path, log_dir_count=1, overrides={"offsets.topic.replication.factor": "1",
                                                           "group.consumer.min.heartbeat.interval.ms": "100"})
    try:
        assert configs_cli(s, "--entity-name", "kept", "--alter", "--add-config", f"{INTERVAL}=300").returncode == 0
        s.stop()
        s.start()
        out = configs_cli(s, "--entity-name", "kept", "--describe")
        assert f"  {INTERVAL}=300 sensitive=false synonyms={{DYNAMIC_GROUP_CONFIG:{INTERVAL}=300}}" in out.stdout
    finally:
        s.stop()
