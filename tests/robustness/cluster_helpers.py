"""What the live tests here share: raw clients to one broker of a running cluster (tests/cluster/conftest.py),
a partition as one broker's metadata shows it, and topics placed and led where a test needs them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kjbod.protocol.generated import (
    AlterPartitionReassignmentsRequest,
    CreateTopicsRequest,
    ElectLeadersRequest,
)
from tests.cluster.conftest import Cluster, running_cluster, wait_for
from tests.datapath.support import RawClient, metadata


def raw(cluster: Cluster, broker_id: int) -> RawClient:
    return RawClient("127.0.0.1", cluster.broker_port(broker_id), timeout=30)


def partition(cluster: Cluster, topic: str, via: int, index: int = 0) -> Any | None:
    with raw(cluster, via) as client:
        (t,) = metadata(client, [topic]).topics
    return next((p for p in t.partitions if p.partition_index == index), None)


def create_assigned(cluster: Cluster, topic: str, replicas: list[int], configs: dict[str, str] | None = None) -> None:
    """One partition on `replicas` (the first leads), created and in sync on every broker's metadata."""
    req = CreateTopicsRequest(timeout_ms=30_000, topics=[CreateTopicsRequest.CreatableTopic(
        name=topic, num_partitions=-1, replication_factor=-1,
        assignments=[CreateTopicsRequest.CreatableReplicaAssignment(partition_index=0, broker_ids=replicas)],
        configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])])
    with raw(cluster, replicas[0]) as client:
        (result,) = client.call(req, 7).topics
    assert result.error_code == 0, result.error_message
    for b in cluster.broker_ids:
        wait_for(lambda b=b: (p := partition(cluster, topic, b)) is not None and p.leader_id == replicas[0]
                 and sorted(p.isr_nodes) == sorted(replicas), f"broker {b} sees {topic}-0 led by {replicas[0]}, "
                 "every replica in sync")


def lead_from(cluster: Cluster, topic: str, replicas: list[int], running: tuple[int, ...] = (1, 2, 3)) -> None:
    """Leadership of `topic`-0 to replicas[0], nothing stopped: the replicas reordered (a reordering completes at
    once), then a preferred election; returns once the metadata of the `running` brokers says so."""
    reassign = AlterPartitionReassignmentsRequest(timeout_ms=30_000, topics=[
        AlterPartitionReassignmentsRequest.ReassignableTopic(name=topic, partitions=[
            AlterPartitionReassignmentsRequest.ReassignablePartition(partition_index=0, replicas=replicas)])])
    elect = ElectLeadersRequest(election_type=0, timeout_ms=30_000, topic_partitions=[
        ElectLeadersRequest.TopicPartitions(topic=topic, partitions=[0])])
    via = replicas[1]
    with raw(cluster, via) as client:
        assert client.call(reassign, 0).responses[0].partitions[0].error_code == 0
        wait_for(lambda: list(partition(cluster, topic, via).replica_nodes) == replicas, "the replicas reordered")
        elected = client.call(elect, 2).replica_election_results[0].partition_result[0]
        assert elected.error_code == 0, elected.error_message
    for b in running:
        wait_for(lambda b=b: partition(cluster, topic, b).leader_id == replicas[0],
                 f"broker {b} sees broker {replicas[0]} lead {topic}-0")


@contextlib.contextmanager
def three_brokers(root: Path) -> Iterator[Cluster]:
    """A module's cluster: a controller and three brokers with two log dirs each; when the module is done, no
    node's log may hold a traceback (bad input is answered, never a handler's crash)."""
    with running_cluster(root, brokers=3, log_dirs=2) as running:
        yield running
        for home in running.homes:
            assert "Traceback" not in running.log(home), f"{home} logged a traceback:\n{running.log(home)[-3000:]}"
