"""Kafka's topic configs that a topic copied from a Kafka cluster carries (MirrorMaker's config sync sets every
non-default one): accepted by a real `kjbod serve`, shown by kafka-python's DescribeConfigs, and where they mean
something here, applied: segment.jitter.ms and the deprecated message.timestamp.difference.max.ms."""

from __future__ import annotations

import time
import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
    from kafka.errors import InvalidConfigurationError

import pytest

from kjbod.protocol.errors import ErrorCode
from kjbod.storage.records import build_batch
from tests.datapath.support import RawClient, produce

MIRRORED = {"preallocate": "true", "message.downconversion.enable": "false", "message.format.version": "2.8-IV1",
            "local.retention.ms": "-2", "remote.storage.enable": "false", "segment.jitter.ms": "60000",
            "message.timestamp.difference.max.ms": "3600000"}


def test_a_topic_with_kafkas_other_configs_is_made_and_described(kjbod_server):
    admin = KafkaAdminClient(bootstrap_servers=kjbod_server.bootstrap)
    try:
        admin.create_topics([NewTopic("mirrored", 1, 1, topic_configs=MIRRORED)])
        resource = ConfigResource(ConfigResourceType.TOPIC, "mirrored")
        (described,) = admin.describe_configs([resource], config_filter="all").values()
        entries = described["mirrored"]
        assert {k: entries[k]["value"] for k in MIRRORED} == MIRRORED
        with pytest.raises(InvalidConfigurationError, match="no tiered storage"):
            admin.create_topics([NewTopic("tiered", 1, 1, topic_configs={"remote.storage.enable": "true"})])
    finally:
        admin.close()

    # message.timestamp.difference.max.ms holds both ways where before/after.max.ms are not set.
    now = int(time.time() * 1000)
    with RawClient.to(kjbod_server) as raw:
        old = produce(raw, "mirrored", 0, build_batch([(b"k", b"two hours old", [], now - 2 * 3_600_000)]))
        fresh = produce(raw, "mirrored", 0, build_batch([(b"k", b"now", [], now)]))
    assert (old.error_code, fresh.error_code) == (ErrorCode.INVALID_TIMESTAMP, 0)
