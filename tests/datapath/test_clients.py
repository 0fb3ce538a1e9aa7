"""Real Kafka clients against a real `kjbod serve`: 100,000 keyed messages with headers, in uncompressed, gzip,
lz4 and zstd batches, to a 6-partition topic spread over 3 log dirs, read back exactly once and in order per
partition, then read again after a clean restart (SIGTERM).

Each client library runs the whole round trip with its own producer and consumer (kafka-python, pure Python;
confluent-kafka, librdkafka).  The consumers use assigned partitions (no consumer group).  Besides what the
clients see, the test checks the disk: the partition dirs are spread over the three log dirs, every `.log` is a
valid run of CRC-checked batches, and the batches really carry the four codecs.
"""

from __future__ import annotations

import time
import warnings
from collections import Counter
from collections.abc import Callable

import pytest
from live import LiveServer

from .support import RawClient, create_topic, partition_dirs, scan_log_dirs

with warnings.catch_warnings():
    # kafka-python's package import uses importlib.resources.read_text, deprecated in 3.11; only the import warns.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KafkaTopicPartition

pytestmark = pytest.mark.slow

PARTITIONS = 6
PER_CODEC = 25_000  # 100,000 messages per client across the four codecs
CODECS = ("none", "gzip", "lz4", "zstd")
CODEC_IDS = {"none": 0, "gzip": 1, "lz4": 3, "zstd": 4}
CONSUME_TIMEOUT = 120.0

# partition -> [(offset, key, value, headers)]
Consumed = dict[int, list[tuple[int, bytes, bytes, list[tuple[str, bytes]]]]]


def message(tag: str, codec: str, i: int) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    key = f"{tag}:{codec}:{i}".encode()
    value = b"%s payload %d " % (codec.encode(), i) + b"abcdefgh" * (i % 7)
    return key, value, [("codec", codec.encode()), ("seq", str(i).encode())]


def check_consumed(tag: str, consumed: Consumed, end_offsets: dict[int, int]) -> None:
    """Exactly once, in order per partition, with the right values and headers."""
    keys: Counter[bytes] = Counter()
    for p in range(PARTITIONS):
        records = consumed.get(p, [])
        offsets = [r[0] for r in records]
        assert offsets == list(range(end_offsets[p])), f"partition {p}: offsets are not 0..{end_offsets[p] - 1}"
        order = []
        for _offset, key, value, headers in records:
            keys[key] += 1
            t, codec, i = key.decode().split(":")
            assert t == tag
            expected_key, expected_value, expected_headers = message(tag, codec, int(i))
            assert value == expected_value, f"partition {p}: wrong value for {key!r}"
            assert headers == expected_headers, f"partition {p}: wrong headers for {key!r}"
            order.append((CODECS.index(codec), int(i)))
        # One producer per codec, run one after the other: within a partition the send order is the offset order.
        assert order == sorted(order), f"partition {p}: records out of send order"
        assert records, f"partition {p} received nothing: the keys should spread over every partition"
    duplicates = [k for k, n in keys.items() if n > 1]
    assert not duplicates, f"{len(duplicates)} keys consumed twice, e.g. {duplicates[:3]}"
    expected = {message(tag, c, i)[0] for c in CODECS for i in range(PER_CODEC)}
    missing = expected - set(keys)
    assert not missing, f"{len(missing)} messages missing, e.g. {sorted(missing)[:3]}"
    assert len(keys) == len(expected)


def check_disk(server: LiveServer, topic: str, codecs_expected: set[int]) -> None:
    dirs = partition_dirs(server.log_dirs)
    per_dir = Counter(str(dirs[f"{topic}-{p}"].parent) for p in range(PARTITIONS))
    assert sorted(per_dir) == sorted(str(d) for d in server.log_dirs), f"partitions not in every log dir: {per_dir}"
    assert set(per_dir.values()) == {2}, f"uneven spread over the log dirs: {per_dir}"
    scans = scan_log_dirs(server.log_dirs)
    codecs: set[int] = set()
    for p in range(PARTITIONS):
        scan = scans[f"{topic}-{p}"]
        assert not scan.problems, f"{topic}-{p}: {scan.problems}"
        codecs |= scan.codecs
    assert codecs == codecs_expected, f"codecs on disk: {sorted(codecs)}, expected {sorted(codecs_expected)}"


def round_trip(server: LiveServer, tag: str, produce: Callable[[str, str], None],
               consume: Callable[[str], tuple[Consumed, dict[int, int]]], codecs_on_disk: set[int]) -> None:
    topic = f"{tag}-events"
    with RawClient.to(server) as raw:
        created = create_topic(raw, topic, PARTITIONS)
        assert created.error_code == 0, created.error_message
    for codec in CODECS:
        produce(topic, codec)
    consumed, ends = consume(topic)
    assert sum(ends.values()) == len(CODECS) * PER_CODEC
    check_consumed(tag, consumed, ends)
    check_disk(server, topic, codecs_on_disk)

    assert server.stop() == 0, f"unclean exit after SIGTERM:\n{server.stderr()}"
    server.start()
    consumed, ends_after = consume(topic)
    assert ends_after == ends
    check_consumed(tag, consumed, ends_after)
    check_disk(server, topic, codecs_on_disk)


# ================================================================================================ kafka-python


def kafka_python_produce(server: LiveServer) -> Callable[[str, str], None]:
    def produce(topic: str, codec: str) -> None:
        producer = KafkaProducer(bootstrap_servers=server.bootstrap, acks="all", linger_ms=10,
                                 batch_size=64 * 1024, compression_type=None if codec == "none" else codec)
        try:
            futures = [producer.send(topic, key=k, value=v, headers=h)
                       for k, v, h in (message("kp", codec, i) for i in range(PER_CODEC))]
            producer.flush(60)
            for f in futures:
                f.get(timeout=0)  # raises the error of any failed send
        finally:
            producer.close(timeout=10)
    return produce


def kafka_python_consume(server: LiveServer) -> Callable[[str], tuple[Consumed, dict[int, int]]]:
    def consume(topic: str) -> tuple[Consumed, dict[int, int]]:
        consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, enable_auto_commit=False,
                                 auto_offset_reset="earliest", max_poll_records=5000)
        try:
            tps = [KafkaTopicPartition(topic, p) for p in range(PARTITIONS)]
            consumer.assign(tps)
            consumer.seek_to_beginning()
            ends = {tp.partition: n for tp, n in consumer.end_offsets(tps).items()}
            out: Consumed = {p: [] for p in range(PARTITIONS)}
            deadline = time.monotonic() + CONSUME_TIMEOUT
            while any((out[p][-1][0] + 1 if out[p] else 0) < ends[p] for p in out):
                assert time.monotonic() < deadline, "kafka-python consumer did not get every record in time"
                for tp, records in consumer.poll(timeout_ms=1000).items():
                    out[tp.partition].extend((r.offset, r.key, r.value, list(r.headers)) for r in records)
            # Nothing past the end offsets either.
            extra = consumer.poll(timeout_ms=200)
            assert not any(extra.values()), "records past the end offsets"
            return out, ends
        finally:
            consumer.close()
    return consume


def test_kafka_python_round_trip_all_codecs_and_restart(kjbod_server):
    round_trip(kjbod_server, "kp", kafka_python_produce(kjbod_server), kafka_python_consume(kjbod_server),
               set(CODEC_IDS.values()))


# ================================================================================================ confluent-kafka


def confluent_produce(server: LiveServer) -> Callable[[str, str], None]:
    from confluent_kafka import Producer

    def produce(topic: str, codec: str) -> None:
        errors: list = []
        producer = Producer({"bootstrap.servers": server.bootstrap, "compression.type": codec, "linger.ms": 10,
                             "enable.idempotence": True, "acks": "all", "log_level": 3})

        def delivered(err, msg) -> None:
            if err is not None:
                errors.append(err)

        for i in range(PER_CODEC):
            key, value, headers = message("ck", codec, i)
            while True:
                try:
                    producer.produce(topic, key=key, value=value, headers=headers, on_delivery=delivered)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.05)
            producer.poll(0)
        assert producer.flush(60) == 0, "confluent producer: messages still queued after flush"
        assert not errors, f"{len(errors)} deliveries failed, e.g. {errors[:3]}"
    return produce


def confluent_consume(server: LiveServer) -> Callable[[str], tuple[Consumed, dict[int, int]]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer
    from confluent_kafka import TopicPartition as CTopicPartition

    def consume(topic: str) -> tuple[Consumed, dict[int, int]]:
        # group.id is required by librdkafka's consumer; with assign() and no commits it never contacts a coordinator.
        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "kjbod-datapath",
                             "enable.auto.commit": False, "log_level": 3})
        try:
            ends = {}
            for p in range(PARTITIONS):
                _low, high = consumer.get_watermark_offsets(CTopicPartition(topic, p), timeout=10)
                ends[p] = high
            consumer.assign([CTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
            out: Consumed = {p: [] for p in range(PARTITIONS)}
            deadline = time.monotonic() + CONSUME_TIMEOUT
            while any((out[p][-1][0] + 1 if out[p] else 0) < ends[p] for p in out):
                assert time.monotonic() < deadline, "confluent consumer did not get every record in time"
                for m in consumer.consume(10_000, 1.0):
                    assert m.error() is None, f"consumer error: {m.error()}"
                    out[m.partition()].append((m.offset(), m.key(), m.value(), list(m.headers() or [])))
            extra = [m for m in consumer.consume(100, 0.2) if m.error() is None]
            assert not extra, "records past the end offsets"
            return out, ends
        finally:
            consumer.close()
    return consume


def test_confluent_round_trip_all_codecs_and_restart(kjbod_server):
    # librdkafka compresses with lz4 only because kjbod serves FindCoordinator (its marker for lz4 support).
    round_trip(kjbod_server, "ck", confluent_produce(kjbod_server), confluent_consume(kjbod_server),
               {CODEC_IDS["none"], CODEC_IDS["gzip"], CODEC_IDS["lz4"], CODEC_IDS["zstd"]})


def test_confluent_sends_lz4_batches(kjbod_server):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kjbod_server.bootstrap, "compression.type": "lz4",
                         "linger.ms": 10, "log_level": 3})
    for i in range(1000):
        key, value, headers = message("lz", "lz4", i)
        producer.produce("lz4-check", key=key, value=value, headers=headers)
    assert producer.flush(30) == 0
    del producer  # librdkafka's threads stop with the object, before the server does
    codecs = set().union(*(s.codecs for s in scan_log_dirs(kjbod_server.log_dirs).values()))
    assert CODEC_IDS["lz4"] in codecs, f"codecs on disk: {sorted(codecs)}"
