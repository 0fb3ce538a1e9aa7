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
