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
                                    "None of the specified partition moves are active.\n")


def one_line_error(out: subprocess.CompletedProcess[str], words: str) -> None:
    """A refusal: exit 2, one line on stderr naming the problem, no traceback."""
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("kjbod: error: ") and words in out.stderr, out.stderr
    assert "Traceback" not in out.stdout + out.stderr


def test_generate_then_execute_with_progress_and_bad_input(cluster: Cluster, tmp_path: Path) -> None:  # noqa: F811
    from kafka import KafkaProducer
    from kafka.admin import NewTopic

    with admin_client(cluster) as admin:
        admin.create_topics([NewTopic("gen", replica_assignments={p: [1, 2] if p % 2 else [2, 1] for p in range(4)})])
    wait_for(lambda: (d := described(cluster, "gen")) and all(len(isr) == 2 for _, isr, _ in d.values()),
             "the topic is in sync")
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    for i in range(400):
        producer.send("gen", value=os.urandom(2000), partition=i % 4)
    producer.flush()
    producer.close()

    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "gen"}]}))
    out = subprocess.run([*COMMAND, "reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--generate",
                          "--topics-to-move-json-file", str(topics), "--broker-list", "3,4"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    head, current_json, blank, proposed_head, proposed_json, end = out.stdout.split("\n")
    assert (head, blank, proposed_head, end) == ("Current partition replica assignment", "",
                                                 "Proposed partition reassignment configuration", "")
    current = json.loads(current_json)
    assert [(e["topic"], e["partition"], e["replicas"], e["log_dirs"]) for e in current["partitions"]] == [
        ("gen", p, [1, 2] if p % 2 else [2, 1], ["any", "any"]) for p in range(4)]
    proposed = json.loads(proposed_json)
    assert proposed["version"] == 1 and [e["partition"] for e in proposed["partitions"]] == [0, 1, 2, 3]
    leaders = []
    for e in proposed["partitions"]:
        assert sorted(e["replicas"]) == [3, 4]
        assert all(d in log_dirs(cluster, b) for b, d in zip(e["replicas"], e["log_dirs"], strict=True)), e
        leaders.append(e["replicas"][0])
    assert sorted(leaders) == [3, 3, 4, 4]  # leadership spread evenly
    dirs_used = {(b, d) for e in proposed["partitions"] for b, d in zip(e["replicas"], e["log_dirs"], strict=True)}
    assert len(dirs_used) == 4  # both dirs of both brokers: the same data in each, so each gets two partitions
    plan = tmp_path / "proposed.json"
    plan.write_text(proposed_json)

    # Bad input: one line naming the problem, exit 2, nothing started.
    bad = tmp_path / "bad.json"
    bad.write_text('{"partitions": [')
    one_line_error(tool(cluster, "--execute", plan=bad), "not valid JSON")
    one_line_error(tool(cluster, "--execute", "--throttle", "0", plan=plan), "the throttle must be a positive")
    one_line_error(tool(cluster, "--execute", "--throttle=-1MB", plan=plan),
                   "the throttle must be a positive number of bytes/s: '-1MB'")
    grow = tmp_path / "grow.json"
    grow.write_text(json.dumps({"partitions": [{"topic": "gen", "partition": 0, "replicas": [3, 4, 1]}]}))
    one_line_error(tool(cluster, "--execute", "--disallow-replication-factor-change", plan=grow),
                   "gen-0: The replication factor is changed from 2 to 3")
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"partitions": [{"topic": "gen", "partition": 0, "replicas": []}]}))
    one_line_error(tool(cluster, "--execute", plan=empty), "Partition replica list cannot be empty: gen-0")
    nope = tmp_path / "nope.json"
    nope.write_text(json.dumps({"topics": [{"topic": "nope"}]}))
    run = [*COMMAND, "reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--generate"]
    one_line_error(subprocess.run([*run, "--topics-to-move-json-file", str(nope), "--broker-list", "3,4"],
                                  capture_output=True, text=True, timeout=120), "Topic nope not found.")
    one_line_error(subprocess.run([*run, "--topics-to-move-json-file", str(topics), "--broker-list", "3,9"],
                                  capture_output=True, text=True, timeout=120), "Unknown broker id 9")
    one_line_error(subprocess.run([*run, "--topics-to-move-json-file", str(topics), "--broker-list", "3"],
                                  capture_output=True, text=True, timeout=120),
                   "The target replication factor of 2 cannot be reached because only 1 broker(s) are listed.")
    assert tool(cluster, "--list").stdout == "No partition reassignments found.\n"
    assert described(cluster, "gen") is not None and all(
        sorted(r) == [1, 2] for r, _, _ in described(cluster, "gen").values())

    # --execute --progress: lines (not a terminal) per partition and overall, until every partition is done.
    done = tool(cluster, "--execute", "--progress", plan=plan)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "Successfully started partition reassignment(s) for gen-0,gen-1,gen-2,gen-3" in lines
    final = lines[-6:-1]
    assert [line.split(":")[0] for line in final] == ["  gen-0", "  gen-1", "  gen-2", "  gen-3", "reassigning"]
    assert lines[-1].startswith("Reassignment of 4 partition(s) finished: 1.") and " MiB copied in " in lines[-1]
    assert all("100.0%" in line for line in final), final
    assert "4/4 partitions done" in final[-1]
    # Each partition holds ~200 KB and gains two replicas: about 1.6 MB to copy in all, counted per partition.
    assert all(" KiB of " in line and line.split(" of ")[1].startswith(("3", "4")) for line in final[:4]), final
    assert " MiB of 1.5 MiB" in final[-1] or " MiB of 1.6 MiB" in final[-1], final[-1]
    verified = tool(cluster, "--verify", plan=plan)
    assert verified.stdout == "Status of partition reassignment:\n" + "".join(
        f"Reassignment of partition gen-{p} is completed.\n" for p in range(4))
    for e in proposed["partitions"]:
        for b, d in zip(e["replicas"], e["log_dirs"], strict=True):
            assert os.path.isdir(os.path.join(d, f"gen-{e['partition']}")), (b, d)


def config_records(cluster: Cluster) -> list[dict[str, object]]:  # noqa: F811
    """The ConfigRecords of the controller's metadata log, in order (`kjbod dump-log`)."""
    home = next(h for name, h in cluster.homes.items() if name.startswith("controller"))
    segments = sorted(home.rglob("__cluster_metadata-0/*.log"))
    dumped = subprocess.run([*COMMAND, "dump-log", "--cluster-metadata-decoder", "--files",
                             ",".join(str(s) for s in segments)], capture_output=True, text=True, timeout=120)
    records = [json.loads(line.partition(" payload: ")[2]) for line in dumped.stdout.splitlines()
               if " payload: {" in line]
    return [r["data"] for r in records if r["type"] == "CONFIG_RECORD"]


def test_execute_with_a_throttle_leaves_no_throttle_behind(cluster: Cluster, tmp_path: Path) -> None:  # noqa: F811
    from kafka import KafkaProducer
    from kafka.admin import NewTopic

    with admin_client(cluster) as admin:
        admin.create_topics([NewTopic("thr", replica_assignments={0: [1], 1: [1]})])
    wait_for(lambda: (d := described(cluster, "thr")) and all(leader == 1 for _, _, leader in d.values()),
             "the topic is led by broker 1")
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    for i in range(200):
        producer.send("thr", value=os.urandom(2000), partition=i % 2)
    producer.flush()
    producer.close()
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "thr", "partition": 0, "replicas": [2]}, {"topic": "thr", "partition": 1, "replicas": [2, 3]}]}))
    done = tool(cluster, "--execute", "--throttle", "10MB", "--progress", plan=plan)
    assert done.returncode == 0, done.stdout + done.stderr
    assert ("The inter-broker throttle limit was set to 10000000 B/s; the controller removes it when the "
            "reassignment completes or is cancelled") in done.stdout.splitlines()
    assert "Warning" not in done.stdout
    assert done.stdout.splitlines()[-3].startswith("reassigning: 100.0% ")
    assert done.stdout.splitlines()[-2].startswith("Reassignment of 2 partition(s) finished: ")
    # What a user checks after a throttled move, said by the tool once the brokers have dropped the throttle.
    assert done.stdout.splitlines()[-1] == "No replication throttle is left on broker(s) 1,2,3 or topic(s) thr."
    # The metadata log: the controller set the rates and the replica lists with the moves, and removed each one
    # when the moves ended; --verify has nothing left to clear.
    final: dict[tuple[object, object, object], object] = {}
    ever: dict[tuple[object, object, object], object] = {}
    for r in config_records(cluster):
        key = (r["resourceType"], r["resourceName"], r["name"])
        if "throttled" in str(r["name"]):
            final[key] = r.get("value")
            if r.get("value") is not None:
                ever[key] = r["value"]
    # the rates were set to the tool's 10 MB/s on the brokers involved (1, 2 and 3)
    assert {(n, v) for (_, n, k), v in ever.items() if k.endswith(".rate")} == {
        (str(b), "10000000") for b in (1, 2, 3)}, ever
    assert {k for _, _, k in ever} == {"leader.replication.throttled.rate", "follower.replication.throttled.rate",
                                       "leader.replication.throttled.replicas",
                                       "follower.replication.throttled.replicas"}, ever
    assert all(v is None for v in final.values()), final
    verified = tool(cluster, "--verify", plan=plan)
    assert "Clearing" not in verified.stdout and verified.stdout.endswith(
        "Reassignment of partition thr-0 is completed.\nReassignment of partition thr-1 is completed.\n")
