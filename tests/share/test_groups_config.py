"""The group.share.* broker keys and the share.* group configs of the group coordinator's side, in process: the keys
reach the share groups (Kafka's defaults and bounds), and a group's own share.session.timeout.ms and
share.heartbeat.interval.ms are checked against the broker's min and max keys as Kafka's GroupConfig checks them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kjbod.broker.groups.coordinator import share_config_from
from kjbod.broker.share.groups import ShareGroupConfig
from kjbod.server.config import ConfigError, build_config
from kjbod.server.roles import BrokerConfigPolicy

BASE = {"node.id": "1", "process.roles": "broker,controller",
        "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "controller.listener.names": "CONTROLLER", "log.dirs": "/data/a"}
SET = 0
SESSION, INTERVAL = "share.session.timeout.ms", "share.heartbeat.interval.ms"


def test_the_share_keys_reach_the_coordinator():
    assert share_config_from(build_config(BASE)) == ShareGroupConfig()  # Kafka's defaults
    cfg = share_config_from(build_config({
        **BASE, "group.share.session.timeout.ms": "7000", "group.share.heartbeat.interval.ms": "700",
        "group.share.min.session.timeout.ms": "6000", "group.share.min.heartbeat.interval.ms": "500",
        "group.share.max.size": "3", "group.share.initialize.retry.interval.ms": "1234"}))
    assert cfg == ShareGroupConfig(session_timeout_ms=7000, heartbeat_interval_ms=700, max_size=3,
                                   initialize_retry_interval_ms=1234)
    # Kafka's bounds: within the min and max keys, a heartbeat more often than the session lasts, at most 1000
    with pytest.raises(ConfigError, match="group.share.min.session.timeout.ms"):
        build_config({**BASE, "group.share.session.timeout.ms": "7000"})
    with pytest.raises(ConfigError, match="group.share.max.session.timeout.ms"):
        build_config({**BASE, "group.share.session.timeout.ms": "70000"})
    with pytest.raises(ConfigError, match="group.share.max.heartbeat.interval.ms"):
        build_config({**BASE, "group.share.heartbeat.interval.ms": "20000"})
    with pytest.raises(ConfigError, match="group.share.min.heartbeat.interval.ms"):
        build_config({**BASE, "group.share.heartbeat.interval.ms": "4000"})
    with pytest.raises(ConfigError, match="must be less than group.share.session.timeout.ms"):
        build_config({**BASE, "group.share.session.timeout.ms": "6000", "group.share.heartbeat.interval.ms": "6000",
                      "group.share.min.session.timeout.ms": "1000", "group.share.max.heartbeat.interval.ms": "9000"})
    with pytest.raises(ConfigError, match="group.share.max.size"):
        build_config({**BASE, "group.share.max.size": "1001"})


def test_a_groups_share_values_are_checked_against_the_broker_keys():
    from kjbod.controller.result import PolicyError

    broker = SimpleNamespace(**vars(build_config({**BASE, "group.share.min.session.timeout.ms": "10000",
                                                  "group.share.max.heartbeat.interval.ms": "12000"})))
    policy = BrokerConfigPolicy(None, broker)
    assert policy.plan_group({}, [(SESSION, SET, "20000"), (INTERVAL, SET, "11000")], replace=False) == {
        SESSION: "20000", INTERVAL: "11000"}
    for changes, message in [
            ([(SESSION, SET, "9000")], f"{SESSION} must be greater than or equal to group.share.min.session.timeout.ms"),
            ([(SESSION, SET, "61000")], f"{SESSION} must be less than or equal to group.share.max.session.timeout.ms"),
            ([(INTERVAL, SET, "4000")],
             f"{INTERVAL} must be greater than or equal to group.share.min.heartbeat.interval.ms"),
            ([(INTERVAL, SET, "13000")], f"{INTERVAL} must be less than or equal to group.share.max.heartbeat.interval.ms"),
            ([(SESSION, SET, "10000"), (INTERVAL, SET, "11000")],
             f"{SESSION} must be greater than {INTERVAL}")]:
        with pytest.raises(PolicyError) as e:
            policy.plan_group({}, changes, replace=False)
        assert e.value.message == message


def test_the_share_group_configs_are_checked_as_kafka_checks_them():
    from kjbod.controller.result import PolicyError

    policy = BrokerConfigPolicy(None, build_config(BASE))

    def plan(*changes):
        return policy.plan_group({}, [(k, SET, v) for k, v in changes], replace=False)

    def refused(key, value) -> str:
        with pytest.raises(PolicyError) as e:
            plan((key, value))
        return e.value.message

    good = [("share.auto.offset.reset", "earliest"), ("share.auto.offset.reset", "LATEST"),
            ("share.auto.offset.reset", "by_duration:PT1H30M"), ("share.auto.offset.reset", "by_duration:P2DT0.5S"),
            ("share.isolation.level", "read_committed"), ("share.renew.acknowledge.enable", "false"),
            ("share.record.lock.duration.ms", "15000"), ("share.delivery.count.limit", "10"),
            ("share.partition.max.record.locks", "100")]
    for key, value in good:
        assert plan((key, value)) == {key: value}
    for value in ("none", "by_duration:", "by_duration:1h", "by_duration:-PT1H", "by_duration:P1DT"):
        assert refused("share.auto.offset.reset", value) == (
            f"Invalid value {value} for configuration share.auto.offset.reset: The value must be either 'earliest', "
            "'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.")
    assert refused("share.isolation.level", "serializable") == (
        "Invalid value serializable for configuration share.isolation.level: String must be one of: "
        "read_committed, read_uncommitted")
    assert refused("share.renew.acknowledge.enable", "yes").endswith("Expected value to be either true or false")
    assert refused("share.record.lock.duration.ms", "999").endswith("Value must be an integer of at least 1000")
    assert refused("share.record.lock.duration.ms", "14000") == (
        "share.record.lock.duration.ms must be greater than or equal to group.share.min.record.lock.duration.ms")
    assert refused("share.record.lock.duration.ms", "61000") == (
        "share.record.lock.duration.ms must be less than or equal to group.share.max.record.lock.duration.ms")
    assert refused("share.delivery.count.limit", "1").endswith("Value must be an integer of at least 2")
    assert refused("share.delivery.count.limit", "11") == (
        "share.delivery.count.limit must be less than or equal to group.share.max.delivery.count.limit")
    assert refused("share.partition.max.record.locks", "4001") == (
        "share.partition.max.record.locks must be less than or equal to group.share.max.partition.max.record.locks")
    assert refused("share.assignment.interval.ms", "1") == "Unknown group config name: share.assignment.interval.ms"


def test_share_group_config_reads_a_groups_values_over_the_broker_keys():
    from kjbod.broker.share.group_config import auto_offset_reset, share_group_config
    from kjbod.controller import configs as controller_configs
    from kjbod.metadata import EMPTY_IMAGE, GROUP_RESOURCE, MetadataDelta

    config = build_config({
        **BASE, "group.share.record.lock.duration.ms": "20000", "group.share.min.record.lock.duration.ms": "10000",
        "group.share.max.record.lock.duration.ms": "50000", "group.share.delivery.count.limit": "3",
        "group.share.min.delivery.count.limit": "3", "group.share.max.delivery.count.limit": "4",
        "group.share.partition.max.record.locks": "500", "group.share.min.partition.max.record.locks": "400",
        "group.share.max.partition.max.record.locks": "600"})
    node = SimpleNamespace(config=config, metadata=EMPTY_IMAGE)
    assert share_group_config(node, "g1") == {
        "share.session.timeout.ms": 45_000, "share.heartbeat.interval.ms": 5000,
        "share.record.lock.duration.ms": 20_000, "share.delivery.count.limit": 3,
        "share.partition.max.record.locks": 500, "share.auto.offset.reset": "latest",
        "share.isolation.level": "read_uncommitted", "share.renew.acknowledge.enable": True}
    result = controller_configs.alter_configs(EMPTY_IMAGE, [(GROUP_RESOURCE, "g1", [
        ("share.auto.offset.reset", SET, "Earliest"), ("share.record.lock.duration.ms", SET, "45000"),
        ("share.delivery.count.limit", SET, "4"), ("share.isolation.level", SET, "read_committed"),
        ("share.renew.acknowledge.enable", SET, "false"), ("share.partition.max.record.locks", SET, "450")])],
        BrokerConfigPolicy(None, config), replace=False, validate_only=False)
    assert [code for code, _ in result.response] == [0]
    delta = MetadataDelta(EMPTY_IMAGE)
    for r in result.records:
        delta.replay(r)
    node.metadata = delta.apply()
    assert share_group_config(node, "g1") == {
        "share.session.timeout.ms": 45_000, "share.heartbeat.interval.ms": 5000,
        "share.record.lock.duration.ms": 45_000, "share.delivery.count.limit": 4,
        "share.partition.max.record.locks": 450, "share.auto.offset.reset": "earliest",
        "share.isolation.level": "read_committed", "share.renew.acknowledge.enable": False}
    assert share_group_config(node, "g2")["share.record.lock.duration.ms"] == 20_000  # another group: the broker's
    # the broker keys lie within their own bounds
    with pytest.raises(ConfigError, match="group.share.min.delivery.count.limit"):
        build_config({**BASE, "group.share.delivery.count.limit": "3", "group.share.min.delivery.count.limit": "4"})
    with pytest.raises(ConfigError, match="group.share.max.record.lock.duration.ms"):
        build_config({**BASE, "group.share.record.lock.duration.ms": "70000"})
    with pytest.raises(ConfigError, match="group.share.max.partition.max.record.locks"):
        build_config({**BASE, "group.share.partition.max.record.locks": "5000"})
    assert auto_offset_reset("by_duration:P1DT2H3M4.5S") == ("by_duration", ((24 + 2) * 60 + 3) * 60_000 + 4500)
    assert auto_offset_reset("Earliest") == ("earliest", None)
