"""Cordoning on a real cluster (a controller and two brokers, separate processes, formatted at Kafka 4.3's
metadata.version 4.3-IV0): a cordon set the way kafka-configs.sh sets it (IncrementalAlterConfigs) reaches the
controller in the broker's BrokerHeartbeat v2 and is kept in a BrokerRegistrationChangeRecord v3 (read back from
the controller's metadata log with `kjbod dump-log`); the broker puts new replicas in its other dir; the controller
places no new replica on a broker whose every dir is cordoned; an explicit assignment or a reassignment onto it is
INELIGIBLE_REPLICA; `kjbod balance-disks` reports a broker that is down by name and still plans the others."""

from __future__ import annotations

import signal
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from live import kafka_uuid, read_meta_properties

from kjbod.cli.record_json import uuid_text

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


def cordon_records(cluster: Cluster) -> list[str]:
    """The BrokerRegistrationChangeRecord payloads in the controller's metadata log, as `kjbod dump-log` prints
    them."""
    segments = sorted(cluster.homes["controller"].glob("metadata/__cluster_metadata-0/*.log"))
    done = subprocess.run([*KJBOD, "dump-log", "--cluster-metadata-decoder", "--files",
                           ",".join(map(str, segments))], capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr  # 1: a batch being written
    return [line.split("payload: ", 1)[1] for line in done.stdout.splitlines()
            if '"type":"BROKER_REGISTRATION_CHANGE_RECORD"' in line and "cordonedLogDirs" in line]


def test_a_cordoned_dir_reaches_the_controller_and_new_replicas_avoid_it(cluster):
    dirs = cluster.properties("broker-1")["log.dirs"].split(",")
    ids = [kafka_uuid(read_meta_properties(Path(d))["directory.id"]) for d in dirs]
    admin = admin_for(cluster)
    try:
        result = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "1",
                                                     configs={"cordoned.log.dirs": dirs[0]})], incremental=True)
        assert result == {"broker": {"1": "OK"}}, result
        # Broker 1's next heartbeat (v2) carries the cordon; the controller keeps it in the metadata log.
        wanted = ('{"type":"BROKER_REGISTRATION_CHANGE_RECORD","version":3,"data":{"brokerId":1,'
                  '"brokerEpoch":')
        cordoned = f'"cordonedLogDirs":["{uuid_text(ids[0])}"]}}}}'
        wait_for(lambda: any(r.startswith(wanted) and r.endswith(cordoned) for r in cordon_records(cluster)),
                 "the controller records broker 1's cordoned dir")

        # Broker 1 still takes new replicas (one dir is left), all in its other dir.
        admin.create_topics([NewTopic("spread", replica_assignments={i: [1] for i in range(6)})])
        wait_for(lambda: len(list(Path(dirs[1]).glob("spread-*"))) == 6, "broker 1 creates the six replicas")
        assert list(Path(dirs[0]).glob("spread-*")) == []

        # Uncordoned (kafka-configs.sh --delete-config): an empty list is recorded, and the dir takes replicas again.
        admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "1",
                                            configs={"cordoned.log.dirs": ("DELETE", None)})], incremental=True)
        wait_for(lambda: any(r.startswith(wanted) and r.endswith('"cordonedLogDirs":[]}}')
                             for r in cordon_records(cluster)), "the controller records the uncordon")
        admin.create_topics([NewTopic("spread-again", replica_assignments={i: [1] for i in range(6)})])
        wait_for(lambda: len(list(Path(dirs[0]).glob("spread-again-*"))) > 0, "the uncordoned dir takes replicas")
    finally:
        admin.close()


def test_a_fully_cordoned_remote_broker_gets_no_new_replicas(cluster):
    admin = admin_for(cluster)
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "2", configs={"cordoned.log.dirs": "*"})],
                            incremental=True)
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
