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
