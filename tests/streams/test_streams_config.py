"""The group.streams.* broker keys and the streams.* group configs, in process: the keys reach the streams groups
(Kafka's defaults, types and bounds, a bad value refused at startup naming key and value), and a group's own
streams.* configs are checked against the broker's min and max keys as Kafka's GroupConfig checks them, then read by
the streams groups over the broker's keys."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kjbod.broker import broker_config as bc
from kjbod.broker.groups.coordinator import streams_config_from
from kjbod.broker.streams.groups import StreamsGroupConfig, StreamsGroups
from kjbod.controller.result import PolicyError
from kjbod.server.config import ConfigError, build_config
from kjbod.server.roles import BrokerConfigPolicy

BASE = {"node.id": "1", "process.roles": "broker,controller",
        "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "controller.listener.names": "CONTROLLER", "log.dirs": "/data/a"}
SET, DELETE = 0, 1
SESSION, INTERVAL = "streams.session.timeout.ms", "streams.heartbeat.interval.ms"
STANDBYS, DELAY = "streams.num.standby.replicas", "streams.initial.rebalance.delay.ms"


def test_the_streams_keys_reach_the_coordinator():
    cfg = build_config(BASE)
    assert streams_config_from(cfg) == StreamsGroupConfig()  # Kafka's defaults
    assert (cfg.group_streams_min_session_timeout_ms, cfg.group_streams_max_session_timeout_ms,
            cfg.group_streams_min_heartbeat_interval_ms, cfg.group_streams_max_heartbeat_interval_ms,
            cfg.group_streams_max_standby_replicas) == (45_000, 60_000, 5000, 15_000, 2)
    cfg = build_config({
        **BASE, "group.streams.session.timeout.ms": "7000", "group.streams.heartbeat.interval.ms": "700",
        "group.streams.min.session.timeout.ms": "6000", "group.streams.min.heartbeat.interval.ms": "500",
        "group.streams.max.size": "3", "group.streams.num.standby.replicas": "1",
        "group.streams.initial.rebalance.delay.ms": "0"})
    assert streams_config_from(cfg) == StreamsGroupConfig(
        session_timeout_ms=7000, heartbeat_interval_ms=700, max_size=3, num_standby_replicas=1,
        initial_rebalance_delay_ms=0)


@pytest.mark.parametrize(("overrides", "named"), [
    ({"group.streams.session.timeout.ms": "7000"}, "group.streams.min.session.timeout.ms"),
    ({"group.streams.session.timeout.ms": "70000"}, "group.streams.max.session.timeout.ms"),
    ({"group.streams.heartbeat.interval.ms": "20000"}, "group.streams.max.heartbeat.interval.ms"),
    ({"group.streams.heartbeat.interval.ms": "4000"}, "group.streams.min.heartbeat.interval.ms"),
    ({"group.streams.min.session.timeout.ms": "50000", "group.streams.max.session.timeout.ms": "46000"},
     "must be greater than or equal to group.streams.min.session.timeout.ms"),
    ({"group.streams.min.heartbeat.interval.ms": "9000", "group.streams.max.heartbeat.interval.ms": "8000"},
     "must be greater than or equal to group.streams.min.heartbeat.interval.ms"),
    ({"group.streams.session.timeout.ms": "10000", "group.streams.min.session.timeout.ms": "1000",
      "group.streams.heartbeat.interval.ms": "10000", "group.streams.max.heartbeat.interval.ms": "20000"},
     "group.streams.heartbeat.interval.ms must be less than group.streams.session.timeout.ms"),
    ({"group.streams.num.standby.replicas": "3"},
     r"group.streams.num.standby.replicas \(3\) must be less than or equal to group.streams.max.standby.replicas"),
])
def test_the_broker_keys_are_checked_against_each_other_at_startup(overrides, named):
    with pytest.raises(ConfigError, match=named):
        build_config({**BASE, **overrides})


@pytest.mark.parametrize(("key", "value"), [
    ("group.streams.session.timeout.ms", "0"), ("group.streams.heartbeat.interval.ms", "fast"),
    ("group.streams.max.size", "0"), ("group.streams.num.standby.replicas", "-1"),
    ("group.streams.max.standby.replicas", "-1"), ("group.streams.initial.rebalance.delay.ms", "-5"),
    ("group.streams.min.session.timeout.ms", "1e3"), ("group.streams.max.heartbeat.interval.ms", "99999999999"),
])
def test_a_bad_value_is_refused_naming_key_and_value(key, value):
    with pytest.raises(ConfigError) as e:
        build_config({**BASE, key: value})
    assert key in str(e.value) and value in str(e.value)


def test_the_bounds_are_met_with_kafkas_defaults_moved_together():
    cfg = build_config({**BASE, "group.streams.num.standby.replicas": "4", "group.streams.max.standby.replicas": "4",
                        "group.streams.max.size": str(2**31 - 1)})
    assert (cfg.group_streams_num_standby_replicas, cfg.group_streams_max_standby_replicas) == (4, 4)


def policy(**keys: str) -> BrokerConfigPolicy:
    return BrokerConfigPolicy(None, SimpleNamespace(**vars(build_config({**BASE, **keys}))))


def refused(p: BrokerConfigPolicy, *changes: tuple[str, str]) -> str:
    with pytest.raises(PolicyError) as e:
        p.plan_group({}, [(k, SET, v) for k, v in changes], replace=False)
    return e.value.message


def test_a_groups_streams_values_are_checked_against_the_broker_keys():
    p = policy(**{"group.streams.min.session.timeout.ms": "10000", "group.streams.max.heartbeat.interval.ms": "12000",
                  "group.streams.max.standby.replicas": "3"})
    assert p.plan_group({}, [(SESSION, SET, "20000"), (INTERVAL, SET, "11000"), (STANDBYS, SET, "3"),
                             (DELAY, SET, "0")], replace=False) == {
        SESSION: "20000", INTERVAL: "11000", STANDBYS: "3", DELAY: "0"}
    assert refused(p, (SESSION, "9000")) == f"{SESSION} must be greater than or equal to " \
                                            "group.streams.min.session.timeout.ms"
    assert refused(p, (SESSION, "61000")) == f"{SESSION} must be less than or equal to " \
                                             "group.streams.max.session.timeout.ms"
    assert refused(p, (INTERVAL, "4000")) == f"{INTERVAL} must be greater than or equal to " \
                                             "group.streams.min.heartbeat.interval.ms"
    assert refused(p, (INTERVAL, "13000")) == f"{INTERVAL} must be less than or equal to " \
                                              "group.streams.max.heartbeat.interval.ms"
    assert refused(p, (STANDBYS, "4")) == f"{STANDBYS} must be less than or equal to " \
                                          "group.streams.max.standby.replicas"
    assert refused(p, (SESSION, "10000"), (INTERVAL, "11000")) == f"{SESSION} must be greater than {INTERVAL}"
    # the rule between the two holds against the broker's value of the key the group leaves alone
    assert refused(policy(**{"group.streams.min.session.timeout.ms": "5000"}), (SESSION, "5000")) == (
        f"{SESSION} must be greater than {INTERVAL}")


def test_the_streams_group_configs_are_typed_as_kafka_types_them():
    p = policy()
    assert refused(p, (STANDBYS, "-1")) == (f"Invalid value -1 for configuration {STANDBYS}: "
                                            "Value must be an integer of at least 0")
    assert refused(p, (DELAY, "soon")) == (f"Invalid value soon for configuration {DELAY}: "
                                           "Value must be an integer of at least 0")
    assert refused(p, (SESSION, "0")).endswith("Value must be an integer of at least 1")
    assert refused(p, ("streams.max.size", "3")) == "Unknown group config name: streams.max.size"
    # a delete brings back the broker's value
    assert p.plan_group({STANDBYS: "1"}, [(STANDBYS, DELETE, None)], replace=False) == {}


def test_describe_shows_the_broker_values_then_the_groups_own():
    cfg = build_config({**BASE, "group.streams.heartbeat.interval.ms": "6000",
                        "group.streams.num.standby.replicas": "1"})
    shown = {e.name: (e.value, e.source) for e in bc.describe_group(cfg, {}, None) if e.name.startswith("streams.")}
    assert shown == {SESSION: ("45000", bc.DEFAULT_CONFIG), INTERVAL: ("6000", bc.DEFAULT_CONFIG),
                     STANDBYS: ("1", bc.DEFAULT_CONFIG), DELAY: ("3000", bc.DEFAULT_CONFIG)}
    own = {e.name: (e.value, e.source) for e in bc.describe_group(cfg, {INTERVAL: "8000"}, [INTERVAL])}
    assert own == {INTERVAL: ("8000", bc.GROUP_CONFIG)}


def test_the_streams_groups_read_a_groups_values_over_the_broker_keys():
    overrides = {"g2": {INTERVAL: "8000", SESSION: "50000"}}
    groups = StreamsGroups(streams_config_from(build_config({**BASE, "group.streams.heartbeat.interval.ms": "6000"})),
                           {}, other_kind=lambda _: None, group_config=lambda gid: overrides.get(gid, {}))
    assert (groups.heartbeat_interval_ms("g1"), groups.session_timeout_ms("g1")) == (6000, 45_000)
    assert (groups.heartbeat_interval_ms("g2"), groups.session_timeout_ms("g2")) == (8000, 50_000)
