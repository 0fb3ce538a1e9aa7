"""Cordoning on a real cluster (a controller and two brokers, separate processes): the controller learns a remote
broker's cordoned dirs from its heartbeats (kjbod's extension field) and places no new replica on a broker whose
every dir is cordoned; an explicit assignment or a reassignment onto it is INELIGIBLE_REPLICA; `kjbod
balance-disks` reports a broker that is down by name and still plans the others."""

from __future__ import annotations

import signal
import subprocess
import sys
import warnings
from collections.abc import Iterator

import pytest

from .conftest import Cluster, running_cluster, wait_for

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
    from kafka.errors import IneligibleReplicaError

pytestmark = pytest.mark.slow

KJBOD = [sys.executable, "-m", "kjbod"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cordon"), brokers=2, log_dirs=2) as running:
        yield running


def admin_for(cluster: Cluster) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)


def replicas_of(admin: KafkaAdminClient, topic: str) -> list[list[int]]:
    [described] = admin.describe_topics([topic])
    return [sorted(p["replica_nodes"]) for p in sorted(described["partitions"], key=lambda p: p["partition_index"])]


def test_a_fully_cordoned_remote_broker_gets_no_new_replicas(cluster):
    admin = admin_for(cluster)
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "2", configs={"cordoned.log.dirs": "*"})])
        attempt = iter(range(1000))

        def placed_on_broker_1_only() -> bool:
            name = f"probe-{next(attempt)}"
            admin.create_topics([NewTopic(name, 4, 1)])
            return all(r == [1] for r in replicas_of(admin, name))

        # The controller hears of the cordon with broker 2's next heartbeat (300 ms here).
        wait_for(placed_on_broker_1_only, "new topics avoid the cordoned broker 2")
        admin.create_topics([NewTopic("later", 6, 1)])
        assert replicas_of(admin, "later") == [[1]] * 6
        with pytest.raises(IneligibleReplicaError) as e:
            admin.create_topics([NewTopic("named", replica_assignments={0: [2]})])
        assert "Broker 2: every log dir is cordoned" in str(e.value)
    finally:
        admin.close()


def test_a_reassignment_onto_a_fully_cordoned_broker_is_refused(cluster):
    admin = admin_for(cluster)
    try:
        admin.create_topics([NewTopic("moveme", replica_assignments={0: [1]})])
        wait_for(lambda: replicas_of(admin, "moveme"), "moveme is described")
        assert replicas_of(admin, "moveme") == [[1]]
        result = admin.alter_partition_reassignments({TopicPartition("moveme", 0): [1, 2]})
    finally:
        admin.close()
    assert result == {TopicPartition("moveme", 0): IneligibleReplicaError}


def test_balance_disks_names_a_broker_that_is_down(cluster):
    cluster.signal("broker-2", signal.SIGTERM)

    def reported() -> subprocess.CompletedProcess[str] | None:
        done = subprocess.run([*KJBOD, "balance-disks", "--bootstrap-server", cluster.bootstrap, "--timeout", "10"],
                              capture_output=True, text=True, timeout=120)
        return done if "broker 2: fenced by the controller" in done.stderr else None

    done = wait_for(reported, "balance-disks reports broker 2 as fenced")
    assert done.returncode == 1
    assert "Broker 1: balancing" in done.stdout  # the broker that is up is still planned
    assert "Traceback" not in done.stderr
    only = subprocess.run([*KJBOD, "balance-disks", "--bootstrap-server", cluster.bootstrap, "--broker-list", "2"],
                          capture_output=True, text=True, timeout=120)
    assert only.returncode == 1 and "kjbod: error: broker 2: fenced by the controller" in only.stderr
