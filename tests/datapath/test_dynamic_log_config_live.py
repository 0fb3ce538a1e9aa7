"""Dynamic broker defaults of topic configs in a real `kjbod serve` (Kafka's DynamicLogConfig), driven as an
operator would: IncrementalAlterConfigs on the broker ("1") from confluent-kafka and on the cluster default
(BROKER "") from kjbod's admin client (neither Python Kafka client can name it), kafka-python's alter_configs,
its DescribeConfigs (with synonyms, in the order Kafka gives them) and its producer.

What is checked is the effect on running partitions: a topic without overrides refuses a batch it accepted
before once message.max.bytes is lowered, a topic overriding max.message.bytes does not; the per-broker value
wins over the cluster default and a DELETE brings the level below back; a small log.segment.bytes with a
log.retention.bytes set dynamically makes retention delete the oldest segments of the topic without overrides
only; a log.roll.ms set dynamically rolls segments by age; a restart keeps every dynamic value (replayed from
the metadata log). In-process checks of the same rules: tests/test_dynamic_log_config.py.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry
from confluent_kafka.admin import ConfigResource as Resource

from kjbod.admin import SyncAdminClient
from kjbod.admin.types import ConfigResource, ConfigResourceType

from .support import RawClient, list_offset

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's import uses a deprecated importlib API
    from kafka import KafkaProducer
    from kafka.admin import ConfigResource as KafkaResource
    from kafka.admin import ConfigResourceType as KafkaResourceType
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import MessageSizeTooLargeError

TOPIC_CONFIG, DYNAMIC_BROKER, DYNAMIC_DEFAULT, DEFAULT = (
    "DYNAMIC_TOPIC_CONFIG", "DYNAMIC_BROKER_CONFIG", "DYNAMIC_DEFAULT_BROKER_CONFIG", "DEFAULT_CONFIG")
EARLIEST = -2
BIG = b"b" * 5000  # over the 3000 / 4000 set below, under the 8000 and Kafka's default
SMALL = b"s" * 400


def wait_until(cond: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    """Polls until `cond()`; the timeout only ends a hung test (retention runs every half second here)."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.1)


def alter(admin: AdminClient, op: AlterConfigOpType, **configs: str | None) -> None:
    """confluent-kafka's IncrementalAlterConfigs on this broker ("1"); keys given with _ for ."""
    resource = Resource("BROKER", "1", incremental_configs=[
        ConfigEntry(key.replace("_", "."), value, incremental_operation=op) for key, value in configs.items()])
    admin.incremental_alter_configs([resource])[resource].result(30)


def alter_default(kjbod: SyncAdminClient, **configs: str | None) -> None:
    """IncrementalAlterConfigs on the cluster default (BROKER ""), through kjbod's admin client: librdkafka
    refuses an empty resource name and kafka-python an unnumbered broker, so neither can send it. SET each key
    given a value, DELETE each given None."""
    kjbod.incremental_alter_configs({ConfigResource(ConfigResourceType.BROKER, ""): {
        key.replace("_", "."): value for key, value in configs.items()}})


def refused(admin: AdminClient, name: str, key: str, value: str) -> tuple[str, str]:
    resource = Resource("BROKER", name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as e:
        admin.incremental_alter_configs([resource])[resource].result(30)
    return e.value.args[0].name(), e.value.args[0].str()


def accepts(producer: KafkaProducer, topic: str, value: bytes) -> bool:
    """Whether the broker appends one batch holding `value` (MESSAGE_TOO_LARGE otherwise)."""
    try:
        producer.send(topic, value, partition=0).get(30)
        return True
    except MessageSizeTooLargeError:
        return False


def described(legacy: KafkaAdminClient, topic: str, key: str) -> tuple[str, str, list[tuple[str, str, str]]]:
    """(value, source, synonyms as (name, value, source)) of one config of `topic`, as Kafka orders them."""
    result = legacy.describe_configs([KafkaResource(KafkaResourceType.TOPIC, topic, [key])],
                                     include_synonyms=True, config_filter="all")
    entry = result["topic"][topic][key]
    return (entry["value"], entry["config_source"],
            [(s["name"], s["value"], s["source"]) for s in entry["synonyms"]])


def segment_files(server, topic: str) -> int:
    """How many segments partition 0 of `topic` has on disk (the server has one log dir)."""
    return len(list((server.log_dirs[0] / f"{topic}-0").glob("*.log")))


def log_start(server, topic: str) -> int:
    """The partition's log start offset (ListOffsets EARLIEST), which retention moves."""
    with RawClient.to(server) as raw:
        return list_offset(raw, topic, 0, EARLIEST).offset


def test_broker_defaults_change_at_runtime_per_level_and_survive_a_restart(kjbod_server_factory):
    server = kjbod_server_factory(log_dir_count=1, overrides={
        "log.retention.check.interval.ms": "500", "log.initial.task.delay.ms": "0",
        "log.segment.delete.delay.ms": "0"})
    legacy = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=30000)
    legacy.create_topics([NewTopic("plain", 1, 1),
                          NewTopic("own", 1, 1, topic_configs={"max.message.bytes": "100000",
                                                               "retention.bytes": "-1", "segment.bytes": "100000"})])
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    kjbod = SyncAdminClient(server.bootstrap, request_timeout=30)
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, acks=1, linger_ms=0, retries=0)
    assert accepts(producer, "plain", BIG) and accepts(producer, "own", BIG)

    # The cluster default: at once on the topic without an override, not on the one with.
    alter_default(kjbod, message_max_bytes="3000")
    assert not accepts(producer, "plain", BIG)
    assert accepts(producer, "own", BIG)
    assert described(legacy, "plain", "max.message.bytes") == ("3000", DYNAMIC_DEFAULT, [
        ("message.max.bytes", "3000", DYNAMIC_DEFAULT), ("message.max.bytes", "1048588", DEFAULT)])
    assert described(legacy, "own", "max.message.bytes")[:2] == ("100000", TOPIC_CONFIG)

    # This broker's own value wins over the cluster default; its DELETE brings the cluster default back.
    alter(admin, AlterConfigOpType.SET, message_max_bytes="8000")
    assert accepts(producer, "plain", BIG)
    assert described(legacy, "plain", "max.message.bytes") == ("8000", DYNAMIC_BROKER, [
        ("message.max.bytes", "8000", DYNAMIC_BROKER), ("message.max.bytes", "3000", DYNAMIC_DEFAULT),
        ("message.max.bytes", "1048588", DEFAULT)])
    alter(admin, AlterConfigOpType.DELETE, message_max_bytes=None)
    assert not accepts(producer, "plain", BIG)
    assert described(legacy, "plain", "max.message.bytes")[:2] == ("3000", DYNAMIC_DEFAULT)

    # Refusals: a bad value names key and value; a synonym Kafka keeps static is INVALID_REQUEST.
    code, message = refused(admin, "1", "log.segment.bytes", "13")
    assert code == "INVALID_REQUEST" and "log.segment.bytes" in message and "'13'" in message
    code, message = refused(admin, "1", "log.retention.hours", "1")
    assert (code, message) == ("INVALID_REQUEST", "Cannot update these configs dynamically: log.retention.hours")

    # Retention driven by dynamic values: small segments, a size limit; the topic overriding retention.bytes
    # keeps everything.
    alter_default(kjbod, log_segment_bytes="1000", log_retention_bytes="3000")
    for _ in range(20):
        assert accepts(producer, "plain", SMALL) and accepts(producer, "own", SMALL)
    wait_until(lambda: log_start(server, "plain") > 10, "retention deletes the oldest segments of plain")
    assert log_start(server, "own") == 0
    assert described(legacy, "plain", "segment.bytes")[:2] == ("1000", DYNAMIC_DEFAULT)

    # Segments roll by age too: log.roll.ms set on this broker reaches "own" (no segment.ms of its own; its
    # segment.bytes override keeps size from rolling it), whose one segment then rolls at the next append.
    assert segment_files(server, "own") == 1
    alter(admin, AlterConfigOpType.SET, log_roll_ms="100")
    assert described(legacy, "own", "segment.ms")[:2] == ("100", DYNAMIC_BROKER)
    wait_until(lambda: accepts(producer, "own", SMALL) and segment_files(server, "own") > 2,
               "appends to own roll its segments by age")

    # A restart keeps every dynamic value: they are replayed from the metadata log.
    producer.close()
    legacy.close()
    kjbod.close()
    server.stop()
    server.start()
    kjbod = SyncAdminClient(server.bootstrap, request_timeout=30)
    legacy = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=30000)
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, acks=1, linger_ms=0, retries=0)
    assert described(legacy, "plain", "max.message.bytes")[:2] == ("3000", DYNAMIC_DEFAULT)
    assert described(legacy, "plain", "retention.bytes")[:2] == ("3000", DYNAMIC_DEFAULT)
    assert not accepts(producer, "plain", BIG)
    assert accepts(producer, "own", BIG)
    # kafka-python's alter_configs finds the key among the broker's dynamic ones and changes it.
    legacy.alter_configs([KafkaResource(KafkaResourceType.BROKER, "1", configs={"log.retention.ms": "86400000"})])
    assert described(legacy, "plain", "retention.ms")[:2] == ("86400000", DYNAMIC_BROKER)

    # Deleting the cluster defaults leaves Kafka's defaults again (a 5000-byte batch is over segment.bytes 1000).
    alter_default(kjbod, message_max_bytes=None, log_segment_bytes=None)
    assert accepts(producer, "plain", BIG)
    assert described(legacy, "plain", "max.message.bytes") == ("1048588", DEFAULT, [
        ("message.max.bytes", "1048588", DEFAULT)])
    producer.close()
    legacy.close()
    kjbod.close()
