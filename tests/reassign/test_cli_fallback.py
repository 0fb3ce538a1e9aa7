"""`kjbod reassign-partitions` against a cluster that answers as Apache Kafka does: `kjbod cluster up` with
`kjbod.extensions.enable=false` (no extension API keys, no dir ids in DescribeLogDirs, TargetDirectories
ignored).  The tool says in one line that it falls back, starts the reassignment, and puts each replica in its
named log dir with AlterReplicaLogDirs, as kafka-reassign-partitions.sh does.  The same request against a node
left at the default (extensions on) reports dir ids: the config's effect."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kjbod.admin import SyncAdminClient
from kjbod.cli.reassign_partitions import FALLBACK
from tests.cluster.conftest import Cluster, running_cluster, wait_for
from tests.live import COMMAND, LiveServer, kjbod_server, kjbod_server_factory  # noqa: F401 (fixtures)
from tests.reassign.test_reassign_live import log_dirs, replica_dirs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def kafka_like(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("fallback"), {"kjbod.extensions.enable": "false"}, brokers=2,
                         log_dirs=2) as running:
        yield running


def dir_ids(bootstrap: str) -> set[bool]:
    """Whether each log dir the nodes describe comes with its dir id."""
    with SyncAdminClient(bootstrap) as admin:
        return {info.directory_id is not None for infos in admin.describe_log_dirs(topics=[]).values()
                for info in infos}


def test_without_the_extensions_the_tool_moves_dirs_the_kafka_way(kafka_like: Cluster, tmp_path: Path) -> None:
    assert dir_ids(kafka_like.bootstrap) == {False}  # DescribeLogDirs answers no dir ids, as Kafka's would
    with SyncAdminClient(kafka_like.bootstrap) as admin:
        from kjbod.admin.types import NewTopic

        admin.create_topics([NewTopic("fb", assignments={0: [1], 1: [1]})])
    wait_for(lambda: replica_dirs(kafka_like, 1, "fb") == {"fb-0", "fb-1"}, "the topic is on broker 1")
    target = log_dirs(kafka_like, 2)[1]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "fb", "partition": 0, "replicas": [2], "log_dirs": [target]},
        {"topic": "fb", "partition": 1, "replicas": [2]}]}))
    run = [*COMMAND, "reassign-partitions", "--bootstrap-server", kafka_like.bootstrap, "--reassignment-json-file",
           str(plan)]
    done = subprocess.run([*run, "--execute", "--timeout", "60000"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == FALLBACK
    assert "Successfully started partition reassignment(s) for fb-0,fb-1" in lines
    assert lines[-1] == f"Successfully started moving log directory to {target} for replica fb-0 with broker 2 "

    def verified() -> bool:
        out = subprocess.run([*run, "--verify"], capture_output=True, text=True, timeout=120)
        return out.stdout == ("Status of partition reassignment:\n"
                              "Reassignment of partition fb-0 is completed.\n"
                              "Reassignment of partition fb-1 is completed.\n")

    wait_for(verified, "--verify reports both partitions completed")
    wait_for(lambda: os.path.isdir(os.path.join(target, "fb-0")), "fb-0 is in its named dir on broker 2")
    wait_for(lambda: replica_dirs(kafka_like, 1, "fb") == set(), "broker 1 deleted its replicas")


def test_with_the_extensions_dir_ids_are_reported(kjbod_server: LiveServer) -> None:  # noqa: F811
    assert dir_ids(kjbod_server.bootstrap) == {True}
