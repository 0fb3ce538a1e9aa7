"""Log compaction on a real `kjbod serve`, driven by real clients.

Many updates to a few keys go to a compacted topic with small segments (confluent-kafka's producer); the dir's
cleaner compacts the closed segments; a consumer reading from the start (kafka-python, assigned, no group) then
sees each key once below the active segment, every key's latest value, offsets only rising, and DescribeLogDirs
reports the partition smaller. The produce-side rules of compacted topics answer as Kafka's: a record without a
key is INVALID_RECORD, DeleteRecords POLICY_VIOLATION. And a kill -9 at each step of a segment swap
(KJBOD_CLEANER_FAILPOINTS) loses and duplicates nothing: after a restart every key's latest value is served once,
and the interrupted clean is completed or dropped.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
    from kafka.errors import InvalidRecordError, PolicyViolationError

from kjbod.protocol.errors import ErrorCode
from kjbod.storage.cleaner import FAILPOINTS, FAILPOINTS_ENV
from tests.datapath.support import RawClient, fetch_all

pytestmark = pytest.mark.slow

KEYS = 8
UPDATES = 1500
TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": "8192", "min.cleanable.dirty.ratio": "0.01"}
SERVER = {"log.cleaner.backoff.ms": "200", "log.segment.delete.delay.ms": "0", "num.partitions": "1"}


def admin_for(server) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=30_000)


def produce_updates(server, topic: str, rounds: int = UPDATES, linger_ms: int = 0) -> dict[bytes, bytes]:
    """Updates of KEYS keys by an idempotent confluent-kafka producer; ``linger_ms`` above 0 puts several keys in
    a batch (so the cleaner keeps some of a batch's records and drops others)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "linger.ms": linger_ms,
                         "enable.idempotence": True, "batch.size": 2000})
    latest: dict[bytes, bytes] = {}
    failed: list = []
    for i in range(rounds):
        key = b"key-%d" % (i % KEYS)
        value = (b"value-%06d-" % i).ljust(120, b"x")
        producer.produce(topic, value, key, partition=0,
                         on_delivery=lambda err, msg: failed.append(err) if err is not None else None)
        latest[key] = value
        if i % 100 == 99:
            producer.flush(30)
    assert producer.flush(30) == 0
    assert not failed
    return latest


def consume_all(server, topic: str) -> list[tuple[int, bytes, bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=5_000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    end = consumer.end_offsets([tp])[tp]
    out = []
    deadline = time.monotonic() + 60
    while (not out or out[-1][0] < end - 1) and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=1_000).values():
            out.extend((r.offset, r.key, r.value) for r in records)
    consumer.close()
    return out


def consume_all_confluent(server, topic: str) -> list[tuple[int, bytes, bytes]]:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTopicPartition

    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "unused-assign-only",
                         "enable.auto.commit": False})
    _low, high = consumer.get_watermark_offsets(CTopicPartition(topic, 0), timeout=30)
    consumer.assign([CTopicPartition(topic, 0, 0)])
    out: list[tuple[int, bytes, bytes]] = []
    deadline = time.monotonic() + 60
    try:
        while (not out or out[-1][0] < high - 1) and time.monotonic() < deadline:
            for m in consumer.consume(500, 1.0):
                if m.error() is None:
                    out.append((m.offset(), m.key(), m.value()))
    finally:
        consumer.close()
    return out


def partition_size(admin: KafkaAdminClient, topic: str) -> int:
    return sum(p["partition_size"] for broker in admin.describe_log_dirs() for d in broker["log_dirs"]
               for t in d["topics"] if t["name"] == topic for p in t["partitions"] if not p["is_future_key"])


def partition_dir(server, topic: str) -> Path:
    (found,) = [p for d in server.log_dirs for p in d.glob(f"{topic}-0")]
    return found


def active_base(server, topic: str) -> int:
    return max(int(p.name[:20]) for p in partition_dir(server, topic).glob("*.log"))


def cleaned_to(server, topic: str) -> int | None:
    """The cleaner's checkpoint of `topic`-0 in its dir's cleaner-offset-checkpoint (None before the first)."""
    path = partition_dir(server, topic).parent / "cleaner-offset-checkpoint"
    try:
        lines = path.read_text().split("\n")
    except FileNotFoundError:
        return None
    found = [int(line.split()[2]) for line in lines[2:] if line.startswith(f"{topic} 0 ")]
    return found[0] if found else None


def wait_for(predicate, timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def check_compacted(records: list[tuple[int, bytes, bytes]], latest: dict[bytes, bytes], active: int) -> None:
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets)), "an offset served twice or out of order"
    below = [k for o, k, _ in records if o < active]
    assert len(below) == len(set(below)), "a key twice below the active segment"
    seen: dict[bytes, bytes] = {}
    for _o, k, v in records:
        seen[k] = v
    assert seen == latest, "not every key's latest value"


def test_a_compacted_topic_keeps_the_latest_value_of_each_key(kjbod_server_factory):
    server = kjbod_server_factory(overrides=SERVER)
    admin = admin_for(server)
    admin.create_topics([NewTopic("compacted", 1, 1, topic_configs=TOPIC_CONFIGS)])
    latest = produce_updates(server, "compacted")
    produced_bytes = UPDATES * 120
    # The cleaner may run while the updates still arrive: wait until it has cleaned up to the active segment.
    wait_for(lambda: cleaned_to(server, "compacted") == active_base(server, "compacted"),
             what="the cleaner to reach the active segment")
    assert partition_size(admin, "compacted") < produced_bytes / 4  # DescribeLogDirs sees the log shrink
    records = consume_all(server, "compacted")
    check_compacted(records, latest, active_base(server, "compacted"))
    assert len(records) < UPDATES / 4
    assert consume_all_confluent(server, "compacted") == records  # librdkafka reads the gaps the same way
    checkpoint = (partition_dir(server, "compacted").parent / "cleaner-offset-checkpoint").read_text().split("\n")
    assert checkpoint[:2] == ["0", "1"] and checkpoint[2].startswith("compacted 0 ")

    # The topic's configs as Kafka shows them.
    got = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "compacted")], config_filter="all")
    configs = {name: entry["value"] for name, entry in got["topic"]["compacted"].items()}
    assert (configs["cleanup.policy"], configs["min.cleanable.dirty.ratio"]) == ("compact", "0.01")
    assert (configs["delete.retention.ms"], configs["min.compaction.lag.ms"]) == ("86400000", "0")

    # A record without a key is refused with Kafka's error; the producer's other records go on.
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, retries=0)
    with pytest.raises(InvalidRecordError):
        producer.send("compacted", value=b"no key", partition=0).get(30)
    producer.send("compacted", key=b"key-0", value=b"after", partition=0).get(30)
    producer.close()

    # DeleteRecords: compact only is POLICY_VIOLATION; compact,delete allows it.
    with pytest.raises(PolicyViolationError):
        admin.delete_records({TopicPartition("compacted", 0): 1})
    admin.create_topics([NewTopic("both", 1, 1, topic_configs={**TOPIC_CONFIGS, "cleanup.policy": "compact,delete"})])
    produce_updates(server, "both", 200)
    answer = admin.delete_records({TopicPartition("both", 0): 5})
    assert answer[TopicPartition("both", 0)]["error_code"] == ErrorCode.NONE
    admin.close()


@pytest.mark.parametrize("point", FAILPOINTS)
def test_kill_9_at_each_step_of_a_swap_then_restart(kjbod_server_factory, monkeypatch, point):
    monkeypatch.setenv(FAILPOINTS_ENV, point)
    server = kjbod_server_factory(overrides=SERVER)
    admin = admin_for(server)
    # Written while the topic is delete-only (the cleaner leaves it alone), then compacted once it is all there.
    admin.create_topics([NewTopic("crashy", 1, 1, topic_configs={**TOPIC_CONFIGS, "cleanup.policy": "delete"})])
    latest = produce_updates(server, "crashy")
    with RawClient.to(server) as raw:
        before = [(r.offset, r.key, r.value) for r in fetch_all(raw, "crashy", 0)]
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "crashy", configs=TOPIC_CONFIGS)])
    admin.close()
    wait_for(lambda: not server.running, what=f"the failpoint {point} to kill the node")
    assert server.process.returncode == -9
    monkeypatch.delenv(FAILPOINTS_ENV)
    server.start()
    with RawClient.to(server) as raw:
        records = [(r.offset, r.key, r.value) for r in fetch_all(raw, "crashy", 0)]
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets)), "an offset served twice after the restart"
    assert set(records) <= set(before)  # nothing that was not written, each record at its own offset
    last: dict[bytes, bytes] = {}
    for _o, k, v in records:
        last[k] = v
    assert last == latest  # no key's latest value lost
    # The restarted node completes the compaction, and nothing of the interrupted clean is left.
    wait_for(lambda: len(fetch_all_keys(server, "crashy")) == KEYS, what="the log compacted after the restart")
    left = [p.name for p in partition_dir(server, "crashy").iterdir() if p.name.endswith((".cleaned", ".swap"))]
    assert not left


def fetch_all_keys(server, topic: str) -> list[bytes]:
    with RawClient.to(server) as raw:
        records = fetch_all(raw, topic, 0)
    active = active_base(server, topic)
    return [r.key for r in records if r.offset < active]


def test_the_cleaners_keys_change_at_runtime_as_in_kafka(kjbod_server_factory):
    """log.cleaner.io.max.bytes.per.second (and the other cleaner keys) set through a real client's AlterConfigs
    reach the running cleaners, are shown as dynamic, and a bad value is refused naming it."""
    from kafka.admin import ConfigResource, ConfigResourceType

    server = kjbod_server_factory(overrides=SERVER)
    admin = admin_for(server)
    try:
        rate = "log.cleaner.io.max.bytes.per.second"
        result = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "1", configs={rate: "2048"})])
        assert result == {"broker": {"1": "OK"}}, result
        wait_for(lambda: "log_cleaner_config_changed" in server.stderr(400)
                 and "io_max_bytes_per_second=2048.0" in server.stderr(400), what="the node to apply the rate")
        shown = next(iter(next(iter(admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, "1", configs=[rate])]).values())).values()))
        assert shown[rate]["value"] == "2048" and not shown[rate].get("read_only", False), shown[rate]
        refused = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "1",
                                                      configs={"log.cleaner.threads": "0"})])
        assert refused == {"broker": {"1": "[Error 42] InvalidRequestError: invalid value '0' for "
                                           "log.cleaner.threads: expected an integer between 1 and 2147483647"}}
    finally:
        admin.close()
