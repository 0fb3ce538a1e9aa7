"""kjbod's AdminClient.create_partitions and delete_records, and `kjbod delete-records`, on a real cluster
(conftest.py: `kjbod cluster up`, a controller and three brokers with three log dirs each).

What the cluster adds over one node: CreatePartitions reaches the controller through whichever broker the client
knows; DeleteRecords must reach each partition's leader (a follower answers NOT_LEADER_OR_FOLLOWER), so a topic
whose partitions are led by three brokers is answered only if the client groups them per leader; and when a
leader is killed the client looks the partition up again and sends it to the new leader."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import warnings
from typing import Any

import pytest
from live import COMMAND

from kjbod.admin import AdminClient, ErrorCode, NewPartitions, NewTopic
from tests.datapath.support import RawClient, list_offset

from .conftest import Cluster, wait_for
from .test_replication_live import partitions

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's import uses a deprecated importlib API
    from kafka import KafkaProducer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning"),
]

RECORDS = 20


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _admin_call(cluster: Cluster, method: str, *args: Any, **kwargs: Any) -> Any:
    async with AdminClient(cluster.bootstrap, request_timeout=30) as admin:
        return await getattr(admin, method)(*args, **kwargs)


def in_sync(cluster: Cluster, topic: str, count: int) -> dict[int, dict[str, Any]]:
    def ready() -> dict[int, dict[str, Any]] | None:
        parts = partitions(cluster, topic)
        ok = parts is not None and sorted(parts) == list(range(count)) and all(
            len(p["replicas"]) == 3 and sorted(p["isr"]) == sorted(p["replicas"]) and p["leader"] >= 0
            for p in parts.values())
        return parts if ok else None

    return wait_for(ready, f"{topic}: {count} partitions with 3 replicas in sync")


def fill(cluster: Cluster, topic: str, count: int) -> None:
    """RECORDS records in each partition, acks=all."""
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=5)
    try:
        futures = [producer.send(topic, b"r%d" % i, partition=p) for p in range(count) for i in range(RECORDS)]
        producer.flush(60)
        for f in futures:
            f.get(60)
    finally:
        producer.close(timeout=30)


def test_create_partitions_through_the_controller_then_delete_records_at_three_leaders(cluster):
    run(_admin_call(cluster, "create_topics", [NewTopic("admin-trim", 1, 3)]))
    in_sync(cluster, "admin-trim", 1)
    grown = run(_admin_call(cluster, "create_partitions", {"admin-trim": NewPartitions(4)}))
    assert grown["admin-trim"].error is None
    parts = in_sync(cluster, "admin-trim", 4)
    # Kafka's striped placement: each of the three new partitions is led by another broker.
    assert sorted(parts[p]["leader"] for p in (1, 2, 3)) == sorted(cluster.broker_ids)
    fill(cluster, "admin-trim", 4)

    offsets = {("admin-trim", 1): 5, ("admin-trim", 2): -1, ("admin-trim", 3): RECORDS + 1, ("admin-trim", 0): 1}
    result = run(_admin_call(cluster, "delete_records", offsets, raise_on_error=False))
    assert [(tp, r.low_watermark, r.error) for tp, r in result.items() if tp[1] != 3] == [
        (("admin-trim", 1), 5, None), (("admin-trim", 2), RECORDS, None), (("admin-trim", 0), 1, None)]
    assert result[("admin-trim", 3)].error.code == ErrorCode.OFFSET_OUT_OF_RANGE

    # The leader answered once every replica's log start reached the offset: the followers' copies start there too
    # (ListOffsets earliest with Kafka's debugging replica id: any local replica answers).
    for broker in cluster.broker_ids:
        with RawClient("127.0.0.1", cluster.broker_port(broker), timeout=30) as raw:
            p = list_offset(raw, "admin-trim", 1, -2, replica_id=-2)
        assert (broker, p.error_code, p.offset) == (broker, 0, 5)


def test_delete_records_follows_a_new_leader_after_a_kill(cluster):
    run(_admin_call(cluster, "create_topics", [NewTopic("admin-failover", 1, 3)]))
    before = in_sync(cluster, "admin-failover", 1)
    # Twice: a follower learns the high watermark from the leader's next fetch answer, so after one acks=all round
    # it may still know 0, and a new leader answers OFFSET_OUT_OF_RANGE above what it knows (as Kafka's does).
    # The second round's records were appended after the first was acknowledged (high watermark RECORDS), so the
    # answer that carried them to each follower told it RECORDS.
    fill(cluster, "admin-failover", 1)
    fill(cluster, "admin-failover", 1)
    victim = before[0]["leader"]
    cluster.signal(f"broker-{victim}", signal.SIGKILL)
    try:
        # The first Metadata may still name the dead broker as leader: the client must look again, not give up.
        result = run(_admin_call(cluster, "delete_records", {("admin-failover", 0): 7}, timeout=60))
        assert result[("admin-failover", 0)].error is None
        assert result[("admin-failover", 0)].low_watermark == 7
        after = partitions(cluster, "admin-failover", avoid=victim)
        assert after is not None and after[0]["leader"] not in (-1, victim)
    finally:
        cluster.start(f"broker-{victim}")
    in_sync(cluster, "admin-failover", 1)


def test_the_delete_records_command_reads_kafkas_offset_file_and_prints_kafkas_lines(cluster, tmp_path):
    run(_admin_call(cluster, "create_topics", [NewTopic("cli-trim", 2, 3)]))
    in_sync(cluster, "cli-trim", 2)
    fill(cluster, "cli-trim", 2)
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps({"partitions": [{"topic": "cli-trim", "partition": 1, "offset": 3},
                                                  {"topic": "cli-trim", "partition": 0, "offset": -1}],
                                   "version": 1}))
    done = subprocess.run([*COMMAND, "delete-records", "--bootstrap-server", cluster.bootstrap,
                           "--offset-json-file", str(offsets)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "Executing records delete operation", "Records delete operation completed:",
        "partition: cli-trim-1\tlow_watermark: 3", f"partition: cli-trim-0\tlow_watermark: {RECORDS}"]

    offsets.write_text(json.dumps({"partitions": [{"topic": "cli-trim", "partition": 1, "offset": 999}]}))
    failed = subprocess.run([*COMMAND, "delete-records", "--bootstrap-server", cluster.bootstrap,
                             "--offset-json-file", str(offsets)], capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1, failed.stderr
    (line,) = [x for x in failed.stdout.splitlines() if x.startswith("partition:")]
    assert line.startswith("partition: cli-trim-1\terror: OFFSET_OUT_OF_RANGE")
