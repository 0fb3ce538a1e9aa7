"""Compaction on a real cluster (`kjbod cluster up`: a controller and three brokers with three log dirs each): a
compacted partition on one broker is compacted there, then reassigned to three replicas; the new followers fetch
the compacted log from its start, with its offset gaps and the empty batch an idempotent producer's last batch
leaves, and join the ISR; every replica then serves each key's latest value, each offset once."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from kjbod.storage.records import iter_all_records
from tests.cluster.conftest import running_cluster, wait_for
from tests.cluster.test_create_partitions_live import in_sync
from tests.cluster.test_replication_live import admin_client
from tests.compaction.test_compaction_live import TOPIC_CONFIGS, produce_updates

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import TopicPartition
    from kafka.admin import NewTopic

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning"),
]


def replica_dirs(cluster, topic: str) -> dict[str, Path]:
    """broker home name -> its partition dir of `topic`-0."""
    return {home.name: d for home in cluster.homes.values() for d in home.rglob(f"{topic}-0") if d.is_dir()}


def on_disk(partition_dir: Path) -> list:
    """The records of a replica's segment files, read from disk in offset order."""
    out = []
    for log in sorted(partition_dir.glob("*.log")):
        out.extend(iter_all_records(log.read_bytes()))
    return out


def test_followers_fetch_a_compacted_log_and_join_the_isr(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("compaction"),
                         {"log.cleaner.backoff.ms": "200", "log.segment.delete.delay.ms": "0"}) as cluster:
        with admin_client(cluster) as admin:
            admin.create_topics([NewTopic("compact3", 1, 1, topic_configs=TOPIC_CONFIGS)])
        (p,) = in_sync(cluster, "compact3", 1, 1).values()
        leader = p["leader"]

        class Server:
            bootstrap = cluster.bootstrap

        latest = produce_updates(Server, "compact3", linger_ms=20)
        (only,) = replica_dirs(cluster, "compact3").values()
        wait_for(lambda: (only.parent / "cleaner-offset-checkpoint").exists(),
                 "the leader's cleaner compacting the partition")
        others = [b for b in cluster.broker_ids if b != leader]
        with admin_client(cluster) as admin:
            admin.alter_partition_reassignments({TopicPartition("compact3", 0): [leader, *others]})
        in_sync(cluster, "compact3", 1, 3)
        copies = replica_dirs(cluster, "compact3")
        assert len(copies) == 3
    # Read once the cluster is down: the files no longer change under the reader.
    for name, d in copies.items():
        records = on_disk(d)
        offsets = [r.offset for r in records]
        assert offsets == sorted(set(offsets)), f"{name}: an offset twice"
        assert {r.key: r.value for r in records} == latest, f"{name}: not every key's latest value"
