"""Dynamic broker defaults of topic configs (Kafka's DynamicLogConfig), in process: which broker keys change at
runtime at both levels and how they are checked, the precedence topic override > dynamic per-broker > dynamic
cluster default > server.properties > Kafka's default (in the LogConfig the logs get, in DescribeConfigs, in the
leaders' min.insync.replicas and in the controller's unclean elections), and the synonyms a described topic
config lists, in Kafka's order. The same through a real server and client: tests/datapath/test_dynamic_log_config_live.py.
"""

from __future__ import annotations

import uuid

import pytest

from kjbod.broker import broker_config as bc
from kjbod.broker import topic_config
from kjbod.broker.replication.config import ReplicationConfig
from kjbod.broker.storage_glue import broker_log_config
from kjbod.controller import PolicyError
from kjbod.controller.partition_change import unclean_enabled
from kjbod.controller.reassignment import min_isr
from kjbod.metadata import BROKER_RESOURCE, EMPTY_IMAGE, MetadataDelta
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import ConfigRecord, TopicRecord
from kjbod.server.config import build_config
from kjbod.server.roles import BrokerConfigPolicy

BASE = {
    "node.id": "1",
    "process.roles": "broker,controller",
    "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
    "controller.listener.names": "CONTROLLER",
    "log.dirs": "/data/a",
}

# Kafka's DynamicLogConfig.ReconfigurableConfigs (the first broker synonym of each topic config,
# ServerTopicConfigSynonyms) restricted to the topic configs kjbod honours.
KAFKA_RECONFIGURABLE = {
    "log.segment.bytes", "log.roll.ms", "log.roll.jitter.ms", "log.index.size.max.bytes", "log.flush.interval.messages",
    "log.flush.interval.ms", "log.retention.bytes", "log.retention.ms", "message.max.bytes",
    "log.index.interval.bytes", "log.segment.delete.delay.ms", "log.cleanup.policy",
    "unclean.leader.election.enable", "min.insync.replicas", "log.message.timestamp.type",
    "log.message.timestamp.before.max.ms", "log.message.timestamp.after.max.ms",
    "log.message.timestamp.difference.max.ms",
    "log.cleaner.delete.retention.ms", "log.cleaner.min.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio", "compression.type", "compression.gzip.level", "compression.lz4.level",
    "compression.zstd.level",
}
# A valid value of each, different from its default.
GOOD = {
    "log.segment.bytes": "1048576", "log.roll.ms": "60000", "log.roll.jitter.ms": "30000",
    "log.index.size.max.bytes": "4096",
    "log.flush.interval.messages": "1000", "log.flush.interval.ms": "5000", "log.retention.bytes": "123456",
    "log.retention.ms": "86400000", "message.max.bytes": "2000", "log.index.interval.bytes": "1024",
    "log.segment.delete.delay.ms": "1000", "log.cleanup.policy": "delete",
    "unclean.leader.election.enable": "true", "min.insync.replicas": "2",
    "log.message.timestamp.type": "LogAppendTime", "log.message.timestamp.before.max.ms": "3600000",
    "log.message.timestamp.after.max.ms": "3600000", "log.message.timestamp.difference.max.ms": "7200000",
    "log.cleaner.delete.retention.ms": "1000", "log.cleaner.min.compaction.lag.ms": "1000",
    "log.cleaner.max.compaction.lag.ms": "1000", "log.cleaner.min.cleanable.ratio": "0.25",
    "compression.type": "zstd", "compression.gzip.level": "9", "compression.lz4.level": "12",
    "compression.zstd.level": "-3",
}
SET, DELETE = bc.SET, bc.DELETE


def plan(current: dict[str, str], name: str, changes, *, replace: bool = False) -> dict[str, str | None]:
    """What the controller plans, through the policy the server builds (values checked as server.properties)."""
    return BrokerConfigPolicy(1).plan_broker(current, name, changes, replace=replace)


def dynamic(per_broker: dict[str, str] | None = None, cluster: dict[str, str] | None = None) -> bc.DynamicBrokerConfigs:
    d = bc.DynamicBrokerConfigs(1)
    d.per_broker.update(per_broker or {})
    d.cluster_default.update(cluster or {})
    return d


def image_with(records: list) -> object:
    delta = MetadataDelta(EMPTY_IMAGE)
    delta.replay_all(records, first_offset=0)
    return delta.apply()


def broker_record(name: str, key: str, value: str | None) -> ConfigRecord:
    return ConfigRecord(resource_type=BROKER_RESOURCE, resource_name=name, name=key, value=value)


# ------------------------------------------------------------------------------------------------ which keys


def test_the_dynamic_log_keys_are_kafkas_reconfigurable_set():
    assert set(bc.LOG_CONFIG_KEYS) == KAFKA_RECONFIGURABLE
    for key in KAFKA_RECONFIGURABLE:
        assert bc.BROKER_KEYS[key].dynamic, key


@pytest.mark.parametrize("name", ["", "1"])
@pytest.mark.parametrize("key", sorted(KAFKA_RECONFIGURABLE))
def test_each_is_accepted_at_both_levels(key, name):
    assert plan({}, name, [(key, SET, GOOD[key])]) == {key: GOOD[key]}


@pytest.mark.parametrize("key", ["log.retention.hours", "log.retention.minutes", "log.roll.hours",
                                 "log.retention.check.interval.ms", "num.partitions"])
def test_the_other_synonyms_and_static_keys_stay_static(key):
    with pytest.raises(PolicyError) as e:
        plan({}, "", [(key, SET, "5")])
    assert e.value.code == ErrorCode.INVALID_REQUEST
    assert e.value.message == f"Cannot update these configs dynamically: {key}"


@pytest.mark.parametrize("key,value", [
    ("log.retention.ms", "a day"), ("log.segment.bytes", "13"), ("message.max.bytes", "-1"),
    ("log.cleanup.policy", "shred"), ("unclean.leader.election.enable", "yes"), ("min.insync.replicas", "0"),
    ("log.message.timestamp.type", "NoTime"), ("log.roll.ms", "0"), ("log.segment.bytes", "99999999999"),
])
def test_a_bad_value_is_invalid_request_naming_key_and_value(key, value):
    """Kafka's broker answers a bad broker config value INVALID_REQUEST (ConfigAdminManager, KAFKA-13609)."""
    with pytest.raises(PolicyError) as e:
        plan({}, "1", [(key, SET, value)])
    assert e.value.code == ErrorCode.INVALID_REQUEST
    assert key in e.value.message and repr(value) in e.value.message


def test_without_the_server_check_the_topic_configs_own_check_applies():
    with pytest.raises(bc.ConfigProblem) as e:
        bc.plan_broker_changes(dynamic(), "", [("log.segment.bytes", SET, "13")], replace=False)
    assert e.value.code == ErrorCode.INVALID_REQUEST and "'13' for log.segment.bytes" in e.value.message


def test_delete_removes_and_alter_configs_replaces_the_whole_set():
    current = {"log.retention.ms": "1000", "message.max.bytes": "2000"}
    assert plan(current, "", [("log.retention.ms", DELETE, None)]) == {"log.retention.ms": None}
    assert plan(current, "", [("log.segment.bytes", SET, "2048")], replace=True) == {
        "log.retention.ms": None, "message.max.bytes": None, "log.segment.bytes": "2048"}


# ------------------------------------------------------------------------------------------------ precedence


def test_precedence_in_the_log_config_and_the_effective_values():
    config = build_config({**BASE, "log.retention.hours": "2", "message.max.bytes": "5000"})
    assert broker_log_config(config).retention_ms == 2 * 3_600_000
    cluster = {"log.retention.ms": "60000", "message.max.bytes": "3000", "log.segment.bytes": "4096"}
    mine = {"log.retention.ms": "30000"}
    merged = dynamic(mine, cluster).merged()
    cfg = broker_log_config(config, merged)
    assert (cfg.retention_ms, cfg.max_message_bytes, cfg.segment_bytes) == (30000, 3000, 4096)
    assert broker_log_config(config, dynamic(None, cluster).merged()).retention_ms == 60000
    values = topic_config.effective({"retention.ms": "10"}, config, merged)
    assert values["retention.ms"] == (10, True)  # the topic's override first
    assert values["max.message.bytes"] == (3000, False)
    assert values["segment.ms"] == (7 * 24 * 3_600_000, False)  # nothing set: Kafka's default


def test_a_dynamic_value_that_does_not_parse_is_passed_over():
    config = build_config({**BASE, "message.max.bytes": "5000"})
    assert broker_log_config(config, {"message.max.bytes": "lots"}).max_message_bytes == 5000


def test_leaders_min_insync_replicas_order():
    rc = ReplicationConfig(min_insync_replicas=1)
    assert rc.min_isr({}, {}) == 1
    assert rc.min_isr({}, {"min.insync.replicas": "2"}) == 2
    assert rc.min_isr({"min.insync.replicas": "3"}, {"min.insync.replicas": "2"}) == 3


def test_controller_unclean_and_min_isr_follow_kafkas_controller():
    """KafkaConfigSchema.resolveEffectiveTopicConfig: topic, this controller's node, cluster default, static."""
    tid = uuid.uuid4()
    image = image_with([TopicRecord(name="t", topic_id=tid)])
    topic = image.topic("t")
    assert not unclean_enabled(image, topic, False, 1) and unclean_enabled(image, topic, True, 1)
    image = image_with([TopicRecord(name="t", topic_id=tid), broker_record("", "unclean.leader.election.enable",
                                                                           "true"),
                        broker_record("", "min.insync.replicas", "2")])
    topic = image.topic("t")
    assert unclean_enabled(image, topic, False, 1) and min_isr(image, topic, 1) == 2
    image = image_with([TopicRecord(name="t", topic_id=tid),
                        broker_record("", "unclean.leader.election.enable", "true"),
                        broker_record("1", "unclean.leader.election.enable", "false"),
                        broker_record("", "min.insync.replicas", "2"), broker_record("1", "min.insync.replicas", "3")])
    topic = image.topic("t")
    assert not unclean_enabled(image, topic, False, 1)  # this node's value over the cluster default
    assert unclean_enabled(image, topic, False, 2)  # another controller's value is not this one's
    assert (min_isr(image, topic, 1), min_isr(image, topic, 2)) == (3, 2)


# ------------------------------------------------------------------------------------------------ describe

SOURCE_ORDER = [bc.TOPIC_CONFIG, bc.DYNAMIC_BROKER_CONFIG, bc.DYNAMIC_DEFAULT_BROKER_CONFIG,
                bc.STATIC_BROKER_CONFIG, bc.DEFAULT_CONFIG]


def described(props: dict[str, str], overrides: dict[str, str], dyn: bc.DynamicBrokerConfigs) -> dict:
    config = build_config({**BASE, **props})
    return {e.name: e for e in bc.describe_topic(config, overrides, None, dyn)}


def test_topic_synonyms_list_the_dynamic_sources_in_kafkas_order():
    dyn = dynamic({"log.retention.ms": "30000", "message.max.bytes": "3000"},
                  {"log.retention.ms": "60000", "message.max.bytes": "4000", "log.segment.bytes": "4096"})
    entries = described({"log.retention.hours": "2", "message.max.bytes": "5000"}, {"max.message.bytes": "10"},
                        dyn)
    for name, entry in entries.items():
        ranks = [SOURCE_ORDER.index(s) for _, _, s in entry.synonyms]
        assert ranks == sorted(ranks), name
        assert len({(n, s) for n, _, s in entry.synonyms}) == len(entry.synonyms), name
    assert entries["retention.ms"].synonyms == [
        ("log.retention.ms", "30000", bc.DYNAMIC_BROKER_CONFIG),
        ("log.retention.ms", "60000", bc.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.hours", "2", bc.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", bc.DEFAULT_CONFIG)]
    assert (entries["retention.ms"].value, entries["retention.ms"].source) == ("30000", bc.DYNAMIC_BROKER_CONFIG)
    assert entries["max.message.bytes"].synonyms == [
        ("max.message.bytes", "10", bc.TOPIC_CONFIG),
        ("message.max.bytes", "3000", bc.DYNAMIC_BROKER_CONFIG),
        ("message.max.bytes", "4000", bc.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("message.max.bytes", "5000", bc.STATIC_BROKER_CONFIG),
        ("message.max.bytes", "1048588", bc.DEFAULT_CONFIG)]
    assert entries["max.message.bytes"].value == "10"
    segment = entries["segment.bytes"]
    assert (segment.value, segment.source) == ("4096", bc.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert segment.synonyms[0] == ("log.segment.bytes", "4096", bc.DYNAMIC_DEFAULT_BROKER_CONFIG)


def test_broker_resource_shows_the_dynamic_log_key_as_changeable():
    config = build_config({**BASE, "message.max.bytes": "5000"})
    dyn = dynamic({"message.max.bytes": "3000"}, {"message.max.bytes": "4000"})
    (entry,) = bc.describe_broker(config, dyn, "1", ["message.max.bytes"])
    assert (entry.value, entry.source, entry.read_only) == ("3000", bc.DYNAMIC_BROKER_CONFIG, False)
    assert [s for _, _, s in entry.synonyms] == [bc.DYNAMIC_BROKER_CONFIG, bc.DYNAMIC_DEFAULT_BROKER_CONFIG,
                                                  bc.STATIC_BROKER_CONFIG, bc.DEFAULT_CONFIG]
    (entry,) = bc.describe_broker(config, dyn, "", ["message.max.bytes"])
    assert (entry.value, entry.source) == ("4000", bc.DYNAMIC_DEFAULT_BROKER_CONFIG)


def test_broker_resource_lists_the_same_synonyms_as_the_topic_config():
    """Kafka's ConfigHelper gives log.retention.ms on the broker resource the synonyms retention.ms lists below
    a topic's override: the dynamic values, then log.retention.minutes/hours as server.properties and the
    defaults set them."""
    config = build_config({**BASE, "log.retention.hours": "2"})
    dyn = dynamic({"log.retention.ms": "30000"}, {"log.retention.ms": "60000"})
    (entry,) = bc.describe_broker(config, dyn, "1", ["log.retention.ms"])
    assert (entry.value, entry.source, entry.read_only) == ("30000", bc.DYNAMIC_BROKER_CONFIG, False)
    assert entry.synonyms == described({"log.retention.hours": "2"}, {}, dyn)["retention.ms"].synonyms == [
        ("log.retention.ms", "30000", bc.DYNAMIC_BROKER_CONFIG),
        ("log.retention.ms", "60000", bc.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.hours", "2", bc.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", bc.DEFAULT_CONFIG)]
    (entry,) = bc.describe_broker(config, dynamic(), "1", ["log.retention.ms"])
    # Set only in hours: Kafka lists no synonym named for log.retention.ms, and the source is the default.
    assert (entry.value, entry.source, entry.synonyms) == (str(2 * 3_600_000), bc.DEFAULT_CONFIG, [])


# ------------------------------------------------------------------------------------------------ the cleaner's keys


def test_the_cleaners_own_keys_are_dynamic_as_in_kafka_and_checked_as_their_types():
    changes = [("log.cleaner.threads", SET, "2"), ("log.cleaner.io.max.bytes.per.second", SET, " 1048576.5 "),
               ("log.cleaner.dedupe.buffer.size", SET, "1048576"), ("log.cleaner.io.buffer.load.factor", SET, "0.5"),
               ("log.cleaner.backoff.ms", SET, "250")]
    assert plan({}, "1", changes) == {"log.cleaner.threads": "2", "log.cleaner.io.max.bytes.per.second": "1048576.5",
                                      "log.cleaner.dedupe.buffer.size": "1048576",
                                      "log.cleaner.io.buffer.load.factor": "0.5", "log.cleaner.backoff.ms": "250"}
    assert plan({}, "", [("log.cleaner.backoff.ms", SET, "0")]) == {"log.cleaner.backoff.ms": "0"}


@pytest.mark.parametrize(("key", "value"), [
    ("log.cleaner.threads", "0"), ("log.cleaner.threads", "2147483648"), ("log.cleaner.threads", "1.5"),
    ("log.cleaner.io.max.bytes.per.second", "fast"), ("log.cleaner.io.max.bytes.per.second", "-1"),
    ("log.cleaner.io.max.bytes.per.second", "nan"), ("log.cleaner.dedupe.buffer.size", "-1"),
    ("log.cleaner.backoff.ms", "soon"),
])
def test_a_bad_cleaner_value_is_invalid_request_naming_key_and_value(key, value):
    with pytest.raises(PolicyError) as e:
        plan({}, "1", [(key, SET, value)])
    assert e.value.code == ErrorCode.INVALID_REQUEST
    assert key in e.value.message and repr(value) in e.value.message


def test_the_cleaner_follows_the_dynamic_values_over_the_files():
    from kjbod.broker.storage_glue import cleaner_config

    config = build_config({**BASE, "log.cleaner.backoff.ms": "100", "log.cleaner.threads": "4",
                           "log.cleaner.io.max.bytes.per.second": "1000"})
    static = cleaner_config(config)
    assert (static.backoff_ms, static.threads, static.io_max_bytes_per_second) == (100, 4, 1000.0)
    merged = dynamic({"log.cleaner.backoff.ms": "7"}, {"log.cleaner.backoff.ms": "9", "log.cleaner.threads": "2"})
    live = cleaner_config(config, merged.merged())
    assert (live.backoff_ms, live.threads, live.io_max_bytes_per_second) == (7, 2, 1000.0)
    # A value that is not one (written by another tool) leaves the file's in force rather than stopping the cleaner.
    assert cleaner_config(config, {"log.cleaner.threads": "many"}).threads == 4
