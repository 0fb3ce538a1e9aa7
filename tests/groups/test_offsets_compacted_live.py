"""`__consumer_offsets` is compacted, as Kafka's is: a group that commits many times leaves its latest offset.

One real `kjbod serve`; the topic is made by the first commit (one partition here, so every commit lands in the
same log), then its segments are made small through IncrementalAlterConfigs, as an operator may change an
internal topic's configs in Kafka. After hundreds of commits the cleaner has compacted the closed segments, the
partition holds far fewer bytes than were written, and after a restart the group's committed offset is its last.
"""

from __future__ import annotations

import time
import uuid

import pytest
from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

pytestmark = pytest.mark.slow

OVERRIDES = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "100",
    "log.cleaner.backoff.ms": "200",
    "log.segment.delete.delay.ms": "0",
}
COMMITS = 400
WAIT_S = 60.0


def wait_for(predicate, what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def offsets_partition(server):
    return next(d / "__consumer_offsets-0" for d in server.log_dirs if (d / "__consumer_offsets-0").is_dir())


def log_bytes(server) -> int:
    return sum(f.stat().st_size for f in offsets_partition(server).glob("*.log"))


def committed(server, group: str, tp: TopicPartition) -> int | None:
    c = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                return c.committed(tp)
            except Exception:  # the coordinator may still be loading after a restart
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        c.close()


def test_a_group_committing_many_times_leaves_its_latest_offset_and_the_rest_is_cleaned(kjbod_server_factory):
    server = kjbod_server_factory(overrides=OVERRIDES, log_dir_count=2)
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        admin.create_topics([NewTopic("events", 1, 1)])
        tp = TopicPartition("events", 0)
        group = f"g-{uuid.uuid4().hex[:8]}"
        c = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=group, enable_auto_commit=False)
        try:
            c.assign([tp])
            c.commit({tp: OffsetAndMetadata(0, "", -1)})  # makes __consumer_offsets
            configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "__consumer_offsets")])
            shown = next(iter(next(iter(configs.values())).values()))
            assert shown["cleanup.policy"]["value"] == "compact", shown["cleanup.policy"]
            admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "__consumer_offsets",
                                                configs={"cleanup.policy": "compact", "segment.bytes": "2048"})])
            written_before = log_bytes(server)
            for n in range(1, COMMITS + 1):
                c.commit({tp: OffsetAndMetadata(n, "", -1)})
        finally:
            c.close()
        checkpoint = offsets_partition(server).parent / "cleaner-offset-checkpoint"

        def cleaned() -> bool:
            return checkpoint.exists() and "__consumer_offsets 0 " in checkpoint.read_text()

        wait_for(cleaned, "the cleaner to compact __consumer_offsets-0")
        # Every commit is a batch of about a hundred bytes: hundreds of them were written, and once compacted the
        # closed segments keep one record of this group's offset (plus empty batches' headers at most).
        written = written_before + COMMITS * 100
        wait_for(lambda: log_bytes(server) < written // 4,
                 f"__consumer_offsets-0 to shrink below {written // 4} bytes (now {log_bytes(server)})")
        assert committed(server, group, tp) == COMMITS
        server.stop()
        server.start()
        assert committed(server, group, tp) == COMMITS
    finally:
        admin.close()
