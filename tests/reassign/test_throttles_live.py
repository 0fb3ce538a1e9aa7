"""KIP-179 throttles on a real cluster (`kjbod cluster up`: a controller and four brokers), through kjbod's admin
client: a throttled reassignment (ReassignPartitions) removes exactly the throttles it set when it completes,
when it is cancelled, and when the controller is killed with kill -9 in the middle and started again; a
throttle set independently before it (AlterInterbrokerThrottledRates / AlterInterbrokerThrottledReplicas
without RemoveThrottle) survives.

What the controller wrote is read back from its metadata log with `kjbod dump-log --cluster-metadata-decoder`,
batch by batch, so the tests see that the throttle goes in with the batch that starts the move and out with the
batch that ends it.  A move is held in the middle by stopping (SIGSTOP) the broker it adds.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from live import COMMAND

from kjbod.admin import SyncAdminClient
from kjbod.controller.throttles import FOLLOWER_RATE, FOLLOWER_REPLICAS, LEADER_RATE, LEADER_REPLICAS
from tests.cluster.conftest import Cluster, running_cluster, wait_for

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's import uses a deprecated importlib API
    from kafka.admin import KafkaAdminClient, NewTopic

pytestmark = pytest.mark.slow

THROTTLE = 10_000_000
TOPIC_TYPE, BROKER_TYPE = 2, 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("throttles"), brokers=4, log_dirs=1) as running:
        yield running


def admin(cluster: Cluster) -> SyncAdminClient:
    """kjbod's admin client bootstrapped on broker 1 alone (it answers Metadata naming itself the controller, so
    every call goes through it, never through a stopped broker)."""
    return SyncAdminClient(f"127.0.0.1:{cluster.broker_port(1)}", request_timeout=30)


def create(cluster: Cluster, topic: str, assignments: dict[int, list[int]]) -> None:
    kadmin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{cluster.broker_port(1)}", request_timeout_ms=20_000)
    try:
        kadmin.create_topics([NewTopic(topic, replica_assignments=assignments)])
    finally:
        kadmin.close()
    with admin(cluster) as a:
        wait_for(lambda: _in_sync(a, topic, assignments), f"{topic} in sync on its replicas")


def _in_sync(a: SyncAdminClient, topic: str, assignments: dict[int, list[int]]) -> bool:
    try:
        (t,) = a.describe_topics([topic]).values()
    except Exception:  # noqa: BLE001 - not there yet
        return False
    return all(list(p.replicas) == assignments[p.partition] and sorted(p.isr) == sorted(assignments[p.partition])
               for p in t.partitions)


def batches(cluster: Cluster) -> list[list[tuple[str, dict[str, Any]]]]:
    """The controller's metadata log, batch by batch: [(record type, data)] per batch."""
    segments = sorted((cluster.homes["controller"] / "metadata" / "__cluster_metadata-0").glob("*.log"))
    done = subprocess.run([*COMMAND, "dump-log", "--cluster-metadata-decoder", "--files",
                           ",".join(str(s) for s in segments)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out: list[list[tuple[str, dict[str, Any]]]] = []
    for line in done.stdout.splitlines():
        if line.startswith("baseOffset:"):
            out.append([])
        elif " payload: {" in line and out:
            record = json.loads(line.partition(" payload: ")[2])
            out[-1].append((record["type"], record["data"]))
    return out


def configs(log: list[list[tuple[str, dict[str, Any]]]]) -> dict[tuple[int, str], dict[str, str]]:
    """The configs the metadata log leaves, per (resource type, resource name)."""
    out: dict[tuple[int, str], dict[str, str]] = {}
    for batch in log:
        for kind, data in batch:
            if kind == "CONFIG_RECORD":
                values = out.setdefault((data["resourceType"], data["resourceName"]), {})
                if data["value"] is None:
                    values.pop(data["name"], None)
                else:
                    values[data["name"]] = data["value"]
    return out


def throttle_state(cluster: Cluster, topic: str, brokers=(1, 2, 3, 4)) -> tuple[Any, ...]:
    """(leader list, follower list, {broker: (leader rate, follower rate)}) as the metadata log has them."""
    c = configs(batches(cluster))
    t = c.get((TOPIC_TYPE, topic), {})
    return (t.get(LEADER_REPLICAS), t.get(FOLLOWER_REPLICAS),
            {b: (c.get((BROKER_TYPE, str(b)), {}).get(LEADER_RATE), c.get((BROKER_TYPE, str(b)), {}).get(FOLLOWER_RATE))
             for b in brokers})


def topic_id(log: list[list[tuple[str, dict[str, Any]]]], topic: str) -> str:
    return next(d["topicId"] for b in log for k, d in b if k == "TOPIC_RECORD" and d["name"] == topic)


def batch_of(log, topic: str, partition: int, predicate) -> list[tuple[str, dict[str, Any]]]:
    """The first batch holding a PartitionChangeRecord of the partition for which `predicate(data)` holds."""
    tid = topic_id(log, topic)
    for batch in log:
        for kind, data in batch:
            if (kind == "PARTITION_CHANGE_RECORD" and data["topicId"] == tid and data["partitionId"] == partition
                    and predicate(data)):
                return batch
    raise AssertionError(f"no such change of {topic}-{partition} in the metadata log")


def config_names(batch) -> set[tuple[str, str, Any]]:
    return {(d["resourceName"], d["name"], d["value"]) for k, d in batch if k == "CONFIG_RECORD"}


@contextlib.contextmanager
def stopped(cluster: Cluster, broker_id: int) -> Iterator[None]:
    """Broker `broker_id` stopped (SIGSTOP) inside the block, so a move adding it cannot finish."""
    pid = cluster.pid(f"broker-{broker_id}")
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def done(cluster: Cluster, topic: str, partition: int, target: list[int]) -> bool:
    try:
        with admin(cluster) as a:
            if a.list_partition_reassignments():
                return False
            (t,) = a.describe_topics([topic]).values()
    except Exception:  # noqa: BLE001 - a node restarting: ask again
        return False
    p = t.partitions[partition]
    return list(p.replicas) == target and sorted(p.isr) == sorted(target)


def test_completion_removes_exactly_its_throttles_and_one_set_before_survives(cluster: Cluster) -> None:
    topic = "thr-done"
    create(cluster, topic, {0: [1, 2], 1: [1, 2]})
    with admin(cluster) as a:
        # Independent throttles, set before and not to be removed: broker 3's rates and an entry of partition 1.
        assert a.alter_interbroker_throttled_rates({3: (111, 222)}, remove_throttle=False) == {3: (0, None)}
        assert a.alter_interbroker_throttled_replicas({(topic, 1): ([1], [2])}, remove_throttle=False) == {
            (topic, 1): (0, None)}
        assert a.reassign_partitions({(topic, 0): [3, 4]}, throttle=THROTTLE) == {(topic, 0): (0, None)}
    wait_for(lambda: done(cluster, topic, 0, [3, 4]), "the move completes")
    log = batches(cluster)
    t = str(THROTTLE)
    started = batch_of(log, topic, 0, lambda d: d.get("addingReplicas") == [3, 4])
    assert {(topic, LEADER_REPLICAS, "1:1,0:1,0:2"), (topic, FOLLOWER_REPLICAS, "1:2,0:3,0:4")} <= config_names(started)
    assert {(str(b), k, t) for b in (1, 2, 3, 4) for k in (LEADER_RATE, FOLLOWER_RATE)} <= config_names(started)
    assert {k for k, _ in started} >= {"THROTTLED_REPLICAS_INTENT_RECORD", "THROTTLED_RATE_INTENT_RECORD"}
    ended = batch_of(log, topic, 0, lambda d: d.get("replicas") == [3, 4])
    assert {(topic, LEADER_REPLICAS, "1:1"), (topic, FOLLOWER_REPLICAS, "1:2"), ("3", LEADER_RATE, "111"),
            ("3", FOLLOWER_RATE, "222")} <= config_names(ended)
    assert throttle_state(cluster, topic) == ("1:1", "1:2", {1: (None, None), 2: (None, None), 3: ("111", "222"),
                                                             4: (None, None)})


def test_cancelling_removes_its_throttles(cluster: Cluster) -> None:
    topic = "thr-cancel"
    create(cluster, topic, {0: [1, 2]})
    before = throttle_state(cluster, topic)  # rates other tests left (broker 3's independent ones) come back
    with stopped(cluster, 4), admin(cluster) as a:
        assert a.reassign_partitions({(topic, 0): [3, 4]}, throttle=THROTTLE) == {(topic, 0): (0, None)}
        t = str(THROTTLE)
        assert throttle_state(cluster, topic) == ("0:1,0:2", "0:3,0:4", {b: (t, t) for b in (1, 2, 3, 4)})
        assert a.alter_partition_reassignments({(topic, 0): None}) == {(topic, 0): (0, None)}
        assert throttle_state(cluster, topic) == before == (None, None, before[2])
    log = batches(cluster)
    reverted = batch_of(log, topic, 0, lambda d: d.get("replicas") == [1, 2] and d.get("addingReplicas") == [])
    assert (topic, FOLLOWER_REPLICAS, None) in config_names(reverted)
    wait_for(lambda: done(cluster, topic, 0, [1, 2]), "the partition is back on brokers 1 and 2, in sync")


def test_a_controller_killed_in_the_middle_removes_the_throttle_after_its_restart(cluster: Cluster) -> None:
    topic = "thr-crash"
    create(cluster, topic, {0: [1, 2]})
    wait_for(lambda: done(cluster, "thr-cancel", 0, [1, 2]), "broker 4 is back from the last test")
    with admin(cluster) as a:
        assert a.alter_interbroker_throttled_rates({1: (500, 600)}, remove_throttle=False) == {1: (0, None)}
    before = throttle_state(cluster, topic)
    assert before[2][1] == ("500", "600")
    t = str(THROTTLE)
    with stopped(cluster, 4):
        with admin(cluster) as a:
            assert a.reassign_partitions({(topic, 0): [3, 4]}, throttle=THROTTLE) == {(topic, 0): (0, None)}
        assert throttle_state(cluster, topic) == ("0:1,0:2", "0:3,0:4", {b: (t, t) for b in (1, 2, 3, 4)})
        cluster.signal("controller", signal.SIGKILL)
        cluster.start("controller")
        # The restarted controller replayed its log: the move is still on, and so is its throttle.
        with admin(cluster) as a:
            wait_for(lambda: a.list_partition_reassignments(), "the restarted controller lists the move")
        assert throttle_state(cluster, topic) == ("0:1,0:2", "0:3,0:4", {b: (t, t) for b in (1, 2, 3, 4)})
    wait_for(lambda: done(cluster, topic, 0, [3, 4]), "the move completes once broker 4 runs again")
    assert throttle_state(cluster, topic) == before == (None, None, before[2])
