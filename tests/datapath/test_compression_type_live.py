"""compression.type on a real `kjbod serve`, with real clients: the broker key sets the codec topics store their
batches in, a topic's own config overrides it and can be changed at runtime, and consumers read every record
of the recompressed batches (confluent-kafka, whose librdkafka reads every codec, and kafka-python).
"""

from __future__ import annotations

import time
import warnings

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

from kjbod.protocol.errors import ErrorCode
from kjbod.storage.records import CODEC_NAMES, iter_batches
from tests.datapath.support import RawClient, create_topic, fetch, new_topic

COUNT = 60


def records(n: int = COUNT) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [(b"key-%d" % i, (b"value-%05d " % i) * (1 + i % 7), [("seq", b"%d" % i)] if i % 3 else [])
            for i in range(n)]


def produce(server, topic: str, codec: str, batch: list) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "linger.ms": 20,
                         "compression.type": codec})
    failed: list = []
    for key, value, headers in batch:
        producer.produce(topic, value, key, partition=0, headers=headers,
                         on_delivery=lambda err, msg: failed.append(err) if err is not None else None)
    assert producer.flush(30) == 0 and not failed


def stored_codecs(server, topic: str) -> list[str]:
    """The codec of every batch the partition holds, as a Fetch returns them."""
    out: list[str] = []
    offset = 0
    with RawClient.to(server) as raw:
        while True:
            p = fetch(raw, topic, 0, offset)
            assert p.error_code == 0
            batches = list(iter_batches(p.records or b""))
            out += [CODEC_NAMES[h.compression] for _, h in batches]
            if not batches or batches[-1][1].last_offset + 1 >= p.high_watermark:
                return out
            offset = batches[-1][1].last_offset + 1


def consume_confluent(server, topic: str) -> list[tuple[bytes, bytes, list]]:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTP

    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"g-{topic}-{time.monotonic_ns()}",
                         "enable.auto.commit": False})
    consumer.assign([CTP(topic, 0, 0)])
    out: list = []
    deadline = time.monotonic() + 60
    try:
        while len(out) < COUNT and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append((msg.key(), msg.value(), msg.headers() or []))
    finally:
        consumer.close()
    return out


def consume_kafka_python(server, topic: str) -> list[tuple[bytes, bytes, list]]:
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=5_000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    out: list = []
    deadline = time.monotonic() + 60
    try:
        while len(out) < COUNT and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=1_000).values():
                out += [(r.key, r.value, [(k, v) for k, v in r.headers]) for r in batch]
    finally:
        consumer.close()
    return out


def described_codec(admin: KafkaAdminClient, resource: ConfigResource) -> str:
    """compression.type of a topic as kafka-python's DescribeConfigs gives it."""
    (by_name,) = admin.describe_configs([resource], config_filter="all").values()
    return by_name[resource.name]["compression.type"]["value"]


@pytest.fixture
def server(kjbod_server_factory):
    return kjbod_server_factory(overrides={"compression.type": "lz4", "num.partitions": "1"})


def test_topics_store_batches_in_the_configured_codec_and_consumers_read_them(server) -> None:
    sent = records()
    expected = [(k, v, h) for k, v, h in sent]
    with RawClient.to(server) as raw:
        new_topic(raw, "from-broker")  # takes the broker's compression.type=lz4
        new_topic(raw, "zstd-topic", configs={"compression.type": "zstd", "compression.zstd.level": "7"})
        new_topic(raw, "as-sent", configs={"compression.type": "producer"})
        bad = create_topic(raw, "bad-codec", configs={"compression.type": "zip"})
        assert bad.error_code == ErrorCode.INVALID_CONFIG and "compression.type" in bad.error_message
        bad = create_topic(raw, "bad-level", configs={"compression.lz4.level": "18"})
        assert bad.error_code == ErrorCode.INVALID_CONFIG and "compression.lz4.level" in bad.error_message

    for topic in ("from-broker", "zstd-topic", "as-sent"):
        produce(server, topic, "gzip", sent)
    assert set(stored_codecs(server, "from-broker")) == {"lz4"}
    assert set(stored_codecs(server, "zstd-topic")) == {"zstd"}
    assert set(stored_codecs(server, "as-sent")) == {"gzip"}
    for topic in ("from-broker", "zstd-topic", "as-sent"):
        assert consume_confluent(server, topic) == expected, topic
        assert consume_kafka_python(server, topic) == expected, topic


def test_a_topics_codec_changes_at_runtime_and_describe_configs_shows_it(server) -> None:
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=30_000)
    try:
        with RawClient.to(server) as raw:
            new_topic(raw, "changing")
        resource = ConfigResource(ConfigResourceType.TOPIC, "changing")
        assert described_codec(admin, resource) == "lz4"  # the broker's, from server.properties
        produce(server, "changing", "none", records(COUNT // 2))
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "changing",
                                            configs={"compression.type": "snappy"})])
        assert described_codec(admin, resource) == "snappy"
        produce(server, "changing", "none", records(COUNT)[COUNT // 2:])
    finally:
        admin.close()
    codecs = stored_codecs(server, "changing")
    assert codecs[0] == "lz4" and codecs[-1] == "snappy" and set(codecs) == {"lz4", "snappy"}
    assert consume_confluent(server, "changing") == list(records())
