"""`kjbod consumer-groups` end to end: the real command (`python -m kjbod`) against a real `kjbod serve`, with
groups made by real kafka-python consumers.

Strategy: one single-node server for the module; each test makes its own topic (records spread round-robin, so
each partition's log end offset is known) and its groups: a stopped one (committed offsets, no members: Empty,
with a lag) and an active one (a member that stays: Stable).  The tables are checked column by column against
what the consumers did; a reset is checked by what the broker then holds and by a consumer that resumes where
the reset put it; the mistakes get the Kafka tool's messages and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from group_clients import (
    GROUP_OVERRIDES,
    active_consumer,
    make_topic,
    read_values,
    stopped_group,
    unique,
)
from kafka import KafkaConsumer
from live import start_server

from kjbod.admin import SyncAdminClient

pytestmark = pytest.mark.slow

KJBOD = [sys.executable, "-m", "kjbod", "consumer-groups"]
OFFSETS_HEADER = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                  "CLIENT-ID"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    s = start_server(tmp_path_factory.mktemp("consumer-groups-cli"), log_dir_count=1, overrides=GROUP_OVERRIDES)
    yield s
    s.stop()


def tool(server, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*KJBOD, "--bootstrap-server", server.bootstrap, "--timeout", "30000", *args],
                          capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def rows(stdout: str, header: str) -> list[list[str]]:
    """The lines after the table header that starts with `header`, split on spaces."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    return [line.split() for line in lines[start + 1:] if line.strip()]


def committed(server, group: str) -> dict[tuple[str, int], int]:
    with SyncAdminClient(server.bootstrap) as admin:
        return {tp: o.offset for tp, o in admin.list_group_offsets(group)[group].offsets.items()}


def test_list_and_describe_an_active_and_a_stopped_group(server):
    topic = make_topic(server.bootstrap, 3, 30)  # 10 records per partition
    stopped = stopped_group(server.bootstrap, topic, {0: 4, 1: 10, 2: 0})
    active = unique("g")
    c = active_consumer(server.bootstrap, topic, active, 3)
    try:
        listed = tool(server, "--list")
        assert listed.returncode == 0 and {stopped, active} <= set(listed.stdout.split())

        with_state = tool(server, "--list", "--state")
        assert with_state.stdout.split()[:2] == ["GROUP", "STATE"]
        states = {r[0]: r[1] for r in rows(with_state.stdout, "GROUP")}
        assert states[stopped] == "Empty" and states[active] == "Stable"
        only_stable = tool(server, "--list", "--state", "stable", "--type")
        assert only_stable.stdout.split()[:3] == ["GROUP", "TYPE", "STATE"]
        found = {r[0]: r[1:] for r in rows(only_stable.stdout, "GROUP")}
        assert found[active] == ["Classic", "Stable"] and stopped not in found

        # The stopped group: its committed offsets, the log end offsets and the lag; nobody consumes.
        described = tool(server, "--describe", "--group", stopped)
        assert described.returncode == 0
        assert f"Consumer group '{stopped}' has no active members." in described.stderr
        assert described.stdout.splitlines()[1].split() == OFFSETS_HEADER
        assert rows(described.stdout, "GROUP") == [
            [stopped, topic, "0", "4", "10", "6", "-", "-", "-"],
            [stopped, topic, "1", "10", "10", "0", "-", "-", "-"],
            [stopped, topic, "2", "0", "10", "10", "-", "-", "-"]]

        # The active group: every partition is the member's; nothing committed yet, so no offset and no lag.
        described = tool(server, "--describe", "--group", active, "--offsets")
        table = rows(described.stdout, "GROUP")
        assert [r[:6] for r in table] == [[active, topic, str(p), "-", "10", "-"] for p in range(3)]
        assert {r[8] for r in table} == {"active-client"}
        member_id = table[0][6]

        members = tool(server, "--describe", "--group", active, "--members", "--verbose")
        assert members.stdout.splitlines()[1].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                                                          "ASSIGNMENT"]
        (row,) = rows(members.stdout, "GROUP")
        assert row[0] == active and row[1] == member_id and row[3:] == ["active-client", "3", f"{topic}(0,1,2)"]

        state = tool(server, "--describe", "--group", active, "--state")
        (row,) = rows(state.stdout, "GROUP")
        assert row == [active, f"127.0.0.1:{server.port}", "(1)", "range", "Stable", "1"]

        both = tool(server, "--describe", "--group", active, "--group", stopped, "--json")
        document = json.loads(both.stdout)
        by_group = {g["group"]: g for g in document["groups"]}
        assert by_group[stopped]["state"] == "Empty"
        assert [(p["partition"], p["current_offset"], p["lag"]) for p in by_group[stopped]["partitions"]] == [
            (0, 4, 6), (1, 10, 0), (2, 0, 10)]
        assert {p["consumer_id"] for p in by_group[active]["partitions"]} == {member_id}
    finally:
        c.close()


def test_an_unknown_group_is_reported_and_exits_1(server):
    missing = unique("nobody")
    for extra in ([], ["--members"], ["--state"]):
        done = tool(server, "--describe", "--group", missing, *extra)
        assert done.returncode == 1
        assert f"Error: Consumer group '{missing}' does not exist." in done.stdout
    deleted = tool(server, "--delete", "--group", missing)
    assert deleted.returncode == 1
    assert "Error: Deletion of some consumer groups failed:" in deleted.stdout
    assert f"* Group '{missing}' could not be deleted due to: GROUP_ID_NOT_FOUND" in deleted.stdout


def test_reset_offsets_dry_run_execute_clamping_and_a_consumer_that_resumes_there(server, tmp_path):
    topic = make_topic(server.bootstrap, 3, 30)
    group = stopped_group(server.bootstrap, topic, {0: 4, 1: 10, 2: 0})

    plan = tool(server, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest")
    assert plan.returncode == 0 and "WARN: No action will be performed as the --execute option is missing" \
        in plan.stderr
    assert plan.stdout.splitlines()[1].split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert rows(plan.stdout, "GROUP") == [[group, topic, str(p), "0"] for p in range(3)]
    assert committed(server, group) == {(topic, 0): 4, (topic, 1): 10, (topic, 2): 0}  # a dry run changes nothing

    shifted = tool(server, "--reset-offsets", "--group", group, "--all-topics", "--shift-by", "-2", "--execute")
    assert shifted.returncode == 0
    assert rows(shifted.stdout, "GROUP") == [[group, topic, "0", "2"], [group, topic, "1", "8"],
                                             [group, topic, "2", "0"]]
    assert f"New offset (-2) is lower than earliest offset for topic partition {topic}-2. Value will be set to 0" \
        in shifted.stderr
    assert committed(server, group) == {(topic, 0): 2, (topic, 1): 8, (topic, 2): 0}

    high = tool(server, "--reset-offsets", "--group", group, "--topic", f"{topic}:1", "--to-offset", "100",
                "--execute")
    assert rows(high.stdout, "GROUP") == [[group, topic, "1", "10"]]
    assert "is higher than latest offset" in high.stderr

    by_time = tool(server, "--reset-offsets", "--group", group, "--all-topics", "--by-duration", "PT1H",
                   "--dry-run")
    assert rows(by_time.stdout, "GROUP") == [[group, topic, str(p), "0"] for p in range(3)]
    future = tool(server, "--reset-offsets", "--group", group, "--topic", f"{topic}:2", "--to-datetime",
                  "2999-01-01T00:00:00.000", "--dry-run")
    assert f"Warn: Partition 2 from topic {topic} is empty. Falling back to latest known offset." in future.stdout
    assert rows(future.stdout, "GROUP")[-1] == [group, topic, "2", "10"]

    # --export prints the plan as CSV; --from-file applies such a file.
    exported = tool(server, "--reset-offsets", "--group", group, "--topic", f"{topic}:0,2", "--shift-by", "3",
                    "--export", "--dry-run")
    assert exported.stdout.splitlines() == [f"{topic},0,5", f"{topic},2,3"]
    plan_file = tmp_path / "plan.csv"
    plan_file.write_text(exported.stdout)
    applied = tool(server, "--reset-offsets", "--group", group, "--from-file", str(plan_file), "--execute")
    assert rows(applied.stdout, "GROUP") == [[group, topic, "0", "5"], [group, topic, "2", "3"]]
    assert committed(server, group) == {(topic, 0): 5, (topic, 1): 10, (topic, 2): 3}

    exact = tool(server, "--reset-offsets", "--group", group, "--topic", f"{topic}:0", "--to-offset", "7",
                 "--execute")
    assert exact.returncode == 0 and committed(server, group)[(topic, 0)] == 7
    # A consumer of the group starts where the reset put it: partition 0 holds v0, v3, ...; offset 7 is v21.
    c = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=group, enable_auto_commit=False,
                      session_timeout_ms=6000, heartbeat_interval_ms=300, auto_offset_reset="earliest")
    try:
        from kafka import TopicPartition

        c.assign([TopicPartition(topic, 0)])
        assert read_values(c, 3)[:3] == [b"v21", b"v24", b"v27"]
    finally:
        c.close()


def test_an_active_group_cannot_be_reset_or_deleted(server):
    topic = make_topic(server.bootstrap, 2, 10)
    group = unique("g")
    c = active_consumer(server.bootstrap, topic, group, 2)
    try:
        refused = tool(server, "--reset-offsets", "--group", group, "--all-topics", "--to-latest", "--execute")
        assert refused.returncode == 1
        assert (f"Error: Assignments can only be reset if the group '{group}' is inactive, but the current state "
                "is Stable.") in refused.stdout
        not_empty = tool(server, "--delete", "--group", group)
        assert not_empty.returncode == 1 and "NON_EMPTY_GROUP" in not_empty.stdout
        subscribed = tool(server, "--delete-offsets", "--group", group, "--topic", topic)
        assert subscribed.returncode == 1
        assert "Error: Encounter some partition level error, see the follow-up details:" in subscribed.stdout
        assert [r[:3] for r in rows(subscribed.stdout, "TOPIC")] == [[topic, "0", "Error:"], [topic, "1", "Error:"]]
    finally:
        c.close()


def test_delete_offsets_then_delete_the_group(server):
    topic = make_topic(server.bootstrap, 2, 10)
    group = stopped_group(server.bootstrap, topic, {0: 3, 1: 5})
    done = tool(server, "--delete-offsets", "--group", group, "--topic", f"{topic}:0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Request succeed for deleting offsets with topic {topic}:0 group {group}" in done.stdout
    assert rows(done.stdout, "TOPIC") == [[topic, "0", "Successful"]]
    assert committed(server, group) == {(topic, 1): 5}

    deleted = tool(server, "--delete", "--group", group)
    assert deleted.returncode == 0
    assert deleted.stdout.strip() == f"Deletion of requested consumer groups ('{group}') was successful."
    assert group not in tool(server, "--list").stdout.split()


def test_a_group_made_by_confluent_kafka_is_described(server):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = make_topic(server.bootstrap, 2, 6)
    group = unique("g")
    c = confluent_kafka.Consumer({"bootstrap.servers": server.bootstrap, "group.id": group,
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                  "client.id": "confluent-client", "session.timeout.ms": 6000})
    try:
        c.subscribe([topic])
        seen = 0
        for _ in range(300):
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                seen += 1
                c.commit(message=msg, asynchronous=False)
            if seen >= 6:
                break
        assert seen == 6
        members = tool(server, "--describe", "--group", group, "--members", "--verbose")
        (row,) = rows(members.stdout, "GROUP")
        assert row[3:] == ["confluent-client", "2", f"{topic}(0,1)"]
        offsets = tool(server, "--describe", "--group", group)
        assert [r[2:6] for r in rows(offsets.stdout, "GROUP")] == [["0", "3", "3", "0"], ["1", "3", "3", "0"]]
    finally:
        c.close()


