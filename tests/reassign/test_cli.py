"""`kjbod reassign-partitions`: the JSON checks on their own (each bad entry one line, nothing started), then the
command end to end against the live cluster of test_reassign_live.py: --execute (with a log dir named), --verify,
--list, --cancel, Kafka's messages, and refusals (unknown broker, a reassignment in progress without
--additional) as one line with a non-zero exit and no traceback."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from kjbod.cli.main import UserError
from kjbod.cli.reassign_partitions import parse_moves
from tests.cluster.conftest import Cluster, wait_for
from tests.live import COMMAND
from tests.reassign.test_reassign_live import (  # noqa: F401 (cluster: a fixture)
    admin_client,
    cluster,
    described,
    log_dirs,
    stopped,
)


@pytest.mark.parametrize(("data", "words"), [
    ("{", "not valid JSON"),
    ('{"version": 1}', 'needs a "partitions" list'),
    ('{"partitions": []}', "Partition reassignment list cannot be empty"),
    ('{"partitions": [{"topic": "t", "partition": 0, "replicas": []}]}', "Partition replica list cannot be empty: t-0"),
    ('{"partitions": [{"topic": "t", "partition": "0", "replicas": [1]}]}', "partitions[0] needs"),
    ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1]}, {"topic": "t", "partition": 0, '
     '"replicas": [2]}]}', "Reassignment JSON file contains duplicate topic partitions: t-0"),
    ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2, 1]}]}',
     "Partition replica lists may not contain duplicate entries: t-0 contains 1"),
    ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["any"]}]}',
     "t-0: log_dirs must list one dir"),
])
def test_bad_files(data, words):
    with pytest.raises(UserError, match=words.replace("[", r"\[")):
        parse_moves(data)


def test_a_good_file():
    moves = parse_moves('{"version": 1, "partitions": [{"topic": "t", "partition": 1, "replicas": [3, 4], '
                        '"log_dirs": ["any", "/d"]}]}')
    assert moves == {("t", 1): ([3, 4], ["any", "/d"])}


def tool(on: Cluster, *args: str, plan: Path | None = None) -> subprocess.CompletedProcess[str]:
    extra = ["--reassignment-json-file", str(plan)] if plan is not None else []
    return subprocess.run([*COMMAND, "reassign-partitions", "--bootstrap-server", on.bootstrap, *args, *extra],
                          capture_output=True, text=True, timeout=120)


def test_the_command_end_to_end(cluster: Cluster, tmp_path: Path) -> None:  # noqa: F811
    from kafka import TopicPartition
    from kafka.admin import NewTopic

    with admin_client(cluster) as admin:
        admin.create_topics([NewTopic("cli", replica_assignments={0: [1, 2], 1: [2, 1]})])
    wait_for(lambda: (d := described(cluster, "cli")) and all(len(isr) == 2 for _, isr, _ in d.values()),
             "the topic is in sync")
    target_dir = log_dirs(cluster, 4)[1]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "cli", "partition": 0, "replicas": [3, 4], "log_dirs": ["any", target_dir]},
        {"topic": "cli", "partition": 1, "replicas": [4, 3]}]}))
    done = tool(cluster, "--execute", plan=plan)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Current partition replica assignment\n\n")
    rollback = json.loads(done.stdout.split("\n\n")[1])
    assert {(e["topic"], e["partition"]): e["replicas"] for e in rollback["partitions"]} == {
        ("cli", 0): [1, 2], ("cli", 1): [2, 1]}
    assert "Save this to use as the --reassignment-json-file option during rollback" in done.stdout
    assert done.stdout.rstrip().endswith("Successfully started partition reassignment(s) for cli-0,cli-1")

    def verified() -> bool:
        out = tool(cluster, "--verify", plan=plan)
        return out.returncode == 0 and out.stdout == ("Status of partition reassignment:\n"
                                                      "Reassignment of partition cli-0 is completed.\n"
                                                      "Reassignment of partition cli-1 is completed.\n")

    wait_for(verified, "--verify reports both partitions completed")
    assert os.path.isdir(os.path.join(target_dir, "cli-0"))
    assert tool(cluster, "--list").stdout == "No partition reassignments found.\n"

    # Refusals: one line, non-zero exit, nothing started.
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"partitions": [{"topic": "cli", "partition": 0, "replicas": [3, 9]}]}))
    out = tool(cluster, "--execute", plan=unknown)
    assert (out.returncode, out.stderr) == (2, "kjbod: error: Unknown broker id 9\n") and "Traceback" not in out.stdout
    missing = tmp_path / "missing.json"
    missing.write_text(json.dumps({"partitions": [{"topic": "nope", "partition": 0, "replicas": [3]}]}))
    out = tool(cluster, "--execute", plan=missing)
    assert (out.returncode, out.stderr) == (2, "kjbod: error: Unable to find partition nope:0.\n")

    # A move that cannot finish (its new broker is stopped): listed, --execute refused without --additional,
    # then cancelled with the tool.  (Started through the API: with broker 1 fenced, the tool refuses it as
    # Kafka's does, "Unknown broker id 1".)
    stuck = tmp_path / "stuck.json"
    stuck.write_text(json.dumps({"partitions": [{"topic": "cli", "partition": 1, "replicas": [4, 3, 1]}]}))
    with stopped(cluster, 1, ask=3) as admin:
        assert admin.alter_partition_reassignments({TopicPartition("cli", 1): [4, 3, 1]}) == {
            TopicPartition("cli", 1): None}
        bootstrap = f"127.0.0.1:{cluster.broker_port(3)}"
        run = [*COMMAND, "reassign-partitions", "--bootstrap-server", bootstrap]
        listed = subprocess.run([*run, "--list"], capture_output=True, text=True, timeout=120)
        assert listed.stdout == ("Current partition reassignments:\n"
                                 "cli-1: replicas: 4,3,1. adding: 1. removing: .\n")
        again = subprocess.run([*run, "--execute", "--reassignment-json-file", str(plan)], capture_output=True,
                               text=True, timeout=120)
        assert again.returncode == 2 and again.stderr.startswith("kjbod: error: Cannot execute because there is an "
                                                                 "existing partition assignment.")
        cancelled = subprocess.run([*run, "--cancel", "--reassignment-json-file", str(stuck)], capture_output=True,
                                   text=True, timeout=120)
        assert cancelled.stdout == ("Successfully cancelled partition reassignment(s) for: cli-1\n"
                                    "None of the specified partition moves are active.")
