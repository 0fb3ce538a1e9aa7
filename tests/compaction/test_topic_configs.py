"""The compaction topic configs as CreateTopics and AlterConfigs check them, and what storage gets from them."""

from __future__ import annotations

import pytest

from kjbod.broker import topic_config
from kjbod.broker.storage_glue import broker_log_config
from kjbod.server.config import build_config

BASE = {
    "node.id": "1",
    "process.roles": "broker,controller",
    "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
    "controller.listener.names": "CONTROLLER",
    "log.dirs": "/d",
}


def test_the_compaction_configs_parse_with_kafkas_types_and_bounds():
    assert topic_config.validate({"cleanup.policy": "compact, delete", "min.cleanable.dirty.ratio": "0.25",
                                  "delete.retention.ms": "0", "min.compaction.lag.ms": "5",
                                  "max.compaction.lag.ms": "5"}) == {
        "cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": 0.25, "delete.retention.ms": 0,
        "min.compaction.lag.ms": 5, "max.compaction.lag.ms": 5}
    for key, bad in [("cleanup.policy", "shred"), ("cleanup.policy", ""), ("min.cleanable.dirty.ratio", "1.5"),
                     ("min.cleanable.dirty.ratio", "half"), ("delete.retention.ms", "-1"),
                     ("max.compaction.lag.ms", "0")]:
        with pytest.raises(topic_config.TopicConfigError, match=key.replace(".", r"\.")):
            topic_config.validate({key: bad})


def test_min_compaction_lag_above_max_is_kafkas_conflict():
    with pytest.raises(topic_config.TopicConfigError) as e:
        topic_config.validate({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    assert str(e.value) == "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"


def test_the_broker_defaults_reach_every_topics_log_config():
    config = build_config({**BASE, "log.cleanup.policy": "compact", "log.cleaner.min.cleanable.ratio": "0.1",
                           "log.cleaner.delete.retention.ms": "5000", "log.cleaner.min.compaction.lag.ms": "7",
                           "log.cleaner.max.compaction.lag.ms": "9000"})
    cfg = broker_log_config(config)
    assert (cfg.cleanup_policy, cfg.min_cleanable_dirty_ratio, cfg.delete_retention_ms, cfg.min_compaction_lag_ms,
            cfg.max_compaction_lag_ms) == ("compact", 0.1, 5000, 7, 9000)
    assert cfg.compact and not cfg.delete
    topic = cfg.with_topic_configs(topic_config.validate({"cleanup.policy": "delete"}))
    assert topic.delete and not topic.compact


def test_doubles_are_shown_as_java_writes_them():
    from kjbod.broker.broker_config import java_double

    assert [java_double(v) for v in (0.5, 0.01, 1.0, 0.0, 1.7976931348623157e308, 1e-4, 1e7, 12345678.0)] == [
        "0.5", "0.01", "1.0", "0.0", "1.7976931348623157E308", "1.0E-4", "1.0E7", "1.2345678E7"]


def test_describe_configs_shows_the_cleaner_keys_with_kafkas_defaults():
    from kjbod.broker import broker_config as bc

    config = build_config(BASE)
    topic = {e.name: (e.value, e.type) for e in bc.describe_topic(config, {}, None)}
    assert topic["min.cleanable.dirty.ratio"] == ("0.5", bc.DOUBLE)
    assert topic["cleanup.policy"] == ("delete", bc.LIST)
    assert topic["delete.retention.ms"] == ("86400000", bc.LONG)
    assert topic["max.compaction.lag.ms"] == ("9223372036854775807", bc.LONG)


def test_describe_configs_shows_the_brokers_cleaner_keys_with_kafkas_defaults():
    from kjbod.broker import broker_config as bc

    keys = ["log.cleaner.enable", "log.cleaner.threads", "log.cleaner.io.max.bytes.per.second",
            "log.cleaner.io.buffer.load.factor", "log.cleaner.dedupe.buffer.size", "log.cleaner.backoff.ms"]
    got = {e.name: (e.value, e.type) for e in bc.describe_broker(build_config(BASE), bc.DynamicBrokerConfigs(1),
                                                                  "1", keys)}
    assert got == {"log.cleaner.enable": ("true", bc.BOOLEAN), "log.cleaner.threads": ("1", bc.INT),
                   "log.cleaner.io.max.bytes.per.second": ("1.7976931348623157E308", bc.DOUBLE),
                   "log.cleaner.io.buffer.load.factor": ("0.9", bc.DOUBLE),
                   "log.cleaner.dedupe.buffer.size": ("134217728", bc.LONG),
                   "log.cleaner.backoff.ms": ("15000", bc.LONG)}
