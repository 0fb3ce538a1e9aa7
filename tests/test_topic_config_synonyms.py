"""DescribeConfigs of a topic: every config's synonyms list each (name, source) once, in Kafka's order (the topic
override, then the broker's static values, then the defaults), with and without broker-level values set, and with
Kafka's synonyms of the broker keys that have several (log.retention.ms/minutes/hours, log.roll.ms/hours,
log.flush.interval.ms/log.flush.scheduler.interval.ms)."""

from __future__ import annotations

from kjbod.broker import topic_config
from kjbod.broker.broker_config import DEFAULT_CONFIG, STATIC_BROKER_CONFIG, TOPIC_CONFIG, describe_topic
from kjbod.server.config import build_config

BASE = {
    "node.id": "1",
    "process.roles": "broker,controller",
    "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
    "controller.listener.names": "CONTROLLER",
    "log.dirs": "/data/a,/data/b",
}
# Kafka's order of synonym sources for a topic config (ConfigHelper.configSynonyms).
SOURCE_ORDER = [TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG]


def synonyms_by_config(broker_props: dict[str, str], overrides: dict[str, str]) -> dict[str, list]:
    config = build_config({**BASE, **broker_props})
    return {e.name: e for e in describe_topic(config, overrides, None)}


def assert_each_once_in_order(entries: dict) -> None:
    for name, entry in entries.items():
        pairs = [(s[0], s[2]) for s in entry.synonyms]
        assert len(pairs) == len(set(pairs)), f"{name} lists a synonym twice: {entry.synonyms}"
        ranks = [SOURCE_ORDER.index(source) for _, source in pairs]
        assert ranks == sorted(ranks), f"{name}: synonyms out of Kafka's order: {entry.synonyms}"
        assert entry.source == (entry.synonyms[0][2] if entry.synonyms else DEFAULT_CONFIG)


# Topic configs whose broker key has synonyms with no default of its own in Kafka (log.retention.ms,
# log.roll.ms, log.flush.interval.ms: the default is log.retention.hours' 168 and so on), and those no broker key
# stands for: Kafka lists no synonym for them when nothing is set (ConfigHelper drops the synonyms before the
# first named for the broker key, and log.retention.hours=168 comes before none).
NO_DEFAULT_SYNONYM = {"retention.ms", "segment.ms", "segment.jitter.ms", "flush.ms", "leader.replication.throttled.replicas",
                      "follower.replication.throttled.replicas"}
WEEK_MS = str(7 * 24 * 3600 * 1000)


def test_without_broker_values_each_config_has_kafkas_default_synonyms():
    entries = synonyms_by_config({}, {})
    assert set(entries) == set(topic_config.DEFS)
    assert_each_once_in_order(entries)
    for name, entry in entries.items():
        d = topic_config.DEFS[name]
        expected = [] if name in NO_DEFAULT_SYNONYM or d.compat else [(d.broker_key, entry.value, DEFAULT_CONFIG)]
        assert entry.synonyms == expected, name
        assert entry.source == DEFAULT_CONFIG, name
    assert (entries["retention.ms"].value, entries["segment.ms"].value) == (WEEK_MS, WEEK_MS)


def test_retention_set_in_hours_or_minutes_has_no_synonym_as_in_kafka():
    """Kafka lists a topic config's broker synonyms from the first one named for its broker key on: a retention
    set as log.retention.hours (or minutes) alone gives retention.ms no synonym and the default as its source,
    though its value is the one in force."""
    for props, value in (({"log.retention.hours": "24"}, str(24 * 3600 * 1000)),
                         ({"log.retention.minutes": "5", "log.retention.hours": "24"}, str(5 * 60 * 1000))):
        entry = synonyms_by_config(props, {})["retention.ms"]
        assert (entry.value, entry.source, entry.synonyms) == (value, DEFAULT_CONFIG, []), props
    entry = synonyms_by_config({"log.roll.hours": "2"}, {})["segment.ms"]
    assert (entry.value, entry.source, entry.synonyms) == (str(2 * 3600 * 1000), DEFAULT_CONFIG, [])


def test_retention_set_in_ms_lists_every_synonym_set_then_the_hours_default():
    entry = synonyms_by_config({"log.retention.ms": "60000", "log.retention.minutes": "5"}, {})["retention.ms"]
    assert (entry.value, entry.source) == ("60000", STATIC_BROKER_CONFIG)
    assert entry.synonyms == [("log.retention.ms", "60000", STATIC_BROKER_CONFIG),
                              ("log.retention.minutes", "5", STATIC_BROKER_CONFIG),
                              ("log.retention.hours", "168", DEFAULT_CONFIG)]
    entry = synonyms_by_config({"log.roll.ms": "1000", "log.roll.hours": "3"}, {"segment.ms": "500"})["segment.ms"]
    assert (entry.value, entry.source) == ("500", TOPIC_CONFIG)
    assert entry.synonyms == [("segment.ms", "500", TOPIC_CONFIG), ("log.roll.ms", "1000", STATIC_BROKER_CONFIG),
                              ("log.roll.hours", "3", STATIC_BROKER_CONFIG), ("log.roll.hours", "168", DEFAULT_CONFIG)]
    entry = synonyms_by_config({"log.flush.interval.ms": "100"}, {})["flush.ms"]
    assert entry.synonyms == [("log.flush.interval.ms", "100", STATIC_BROKER_CONFIG),
                              ("log.flush.scheduler.interval.ms", str((1 << 63) - 1), DEFAULT_CONFIG)]


def test_broker_values_and_topic_overrides_come_first_once_each():
    entries = synonyms_by_config({"log.segment.bytes": "2000000", "log.retention.ms": "60000"},
                                 {"segment.bytes": "100000", "max.message.bytes": "5000"})
    assert_each_once_in_order(entries)
    assert entries["segment.bytes"].synonyms == [
        ("segment.bytes", "100000", TOPIC_CONFIG),
        ("log.segment.bytes", "2000000", STATIC_BROKER_CONFIG),
        ("log.segment.bytes", str(1 << 30), DEFAULT_CONFIG),
    ]
    assert entries["retention.ms"].synonyms == [
        ("log.retention.ms", "60000", STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", DEFAULT_CONFIG),
    ]
    assert entries["retention.ms"].source == STATIC_BROKER_CONFIG
    assert entries["max.message.bytes"].synonyms == [
        ("max.message.bytes", "5000", TOPIC_CONFIG),
        ("message.max.bytes", "1048588", DEFAULT_CONFIG),
    ]


def test_min_insync_replicas_is_a_topic_config_defaulting_to_the_brokers():
    """Kafka's topic config: accepted in CreateTopics and IncrementalAlterConfigs, at least 1, and the broker's
    min.insync.replicas is its default (the leader and the controller read the topic's value from the image)."""
    assert topic_config.validate({"min.insync.replicas": "2"}) == {"min.insync.replicas": 2}
    for bad in ("0", "-1", "two"):
        try:
            topic_config.validate({"min.insync.replicas": bad})
        except topic_config.TopicConfigError as e:
            assert "min.insync.replicas" in str(e)
        else:
            raise AssertionError(f"min.insync.replicas={bad} was accepted")
    entries = synonyms_by_config({"min.insync.replicas": "2"}, {})
    assert (entries["min.insync.replicas"].value, entries["min.insync.replicas"].source) == ("2", STATIC_BROKER_CONFIG)
    entries = synonyms_by_config({"min.insync.replicas": "2"}, {"min.insync.replicas": "3"})
    assert (entries["min.insync.replicas"].value, entries["min.insync.replicas"].source) == ("3", TOPIC_CONFIG)
