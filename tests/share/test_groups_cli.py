"""`kjbod share-groups` (kafka-share-groups.sh) against a real `kjbod serve`: list, describe (offsets, members,
state), reset offsets (dry run and execute; refused while the group has members), delete offsets, delete, and the
option rules; the tables' layout is checked in process."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
import uuid

import pytest
from confluent_kafka import Producer
from live import start_server

from kjbod.cli.share_groups import assignment_text, members_table, offsets_table

from .test_groups_live import OVERRIDES, beat, coordinator, make_topic, until_assigned

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    s = start_server(tmp_path_factory.mktemp("kip932g-cli"), log_dir_count=1, overrides=OVERRIDES)
    yield s
    s.stop()


def tool(server, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kjbod", "share-groups", "--bootstrap-server", server.bootstrap,
                           *args], capture_output=True, text=True, timeout=120)


def test_the_tables_have_the_kafka_tools_columns():
    assert offsets_table("g", [], False) == "\nShare group 'g' has no offset information.\n"
    assert offsets_table("g", [("t", 1, 0, 5, 2), ("t", 0, None, None, None)], True).splitlines()[1:] == [
        "GROUP           TOPIC           PARTITION  LEADER-EPOCH  START-OFFSET  LAG",
        "g               t               0          -             -             -",
        "g               t               1          0             5             2"]
    assert assignment_text([("b", 1), ("a", 2), ("b", 0)]) == "a:2;b:0,1" and assignment_text([]) == "-"
    assert members_table("g", [("m1", "/h", "c", 3, (("t", 0),))], False).splitlines()[1:] == [
        "GROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS  ASSIGNMENT",
        "g               m1              /h              c               1            t:0"]


def test_list_describe_reset_and_delete_a_share_group(server):
    topic, tid = make_topic(server, 2)
    producer = Producer({"bootstrap.servers": server.bootstrap})
    for _ in range(3):
        producer.produce(topic, value=b"x", partition=0)
    assert producer.flush(30) == 0
    group = f"sg-{uuid.uuid4().hex[:8]}"
    m = str(uuid.uuid4())

    leaving = threading.Event()
    joined: list[int] = []  # the member's epoch once assigned
    left: list[int] = []  # the error code of its leave

    async def member() -> None:
        """Joins, then heartbeats every 300 ms (as a consumer would) until told to leave, so its session never runs
        out while the tool runs, however slow the machine; then leaves."""
        conn = await coordinator(server, group)
        try:
            r = await beat(conn, group, m, 0, [topic])
            epoch = await until_assigned(conn, group, m, r.member_epoch, {tid: [0, 1]})
            joined.append(epoch)
            while not leaving.is_set():
                await asyncio.sleep(0.3)
                r = await beat(conn, group, m, epoch)
                epoch = r.member_epoch if r.error_code == 0 else epoch
            left.append((await beat(conn, group, m, -1)).error_code)
        finally:
            conn.close()

    def leave() -> None:
        leaving.set()
        beating.join(60)
        assert left == [0], left

    beating = threading.Thread(target=asyncio.run, args=(member(),), daemon=True)
    beating.start()
    deadline = time.monotonic() + 60
    while not joined:
        assert beating.is_alive() and time.monotonic() < deadline, "the member did not get its assignment"
        time.sleep(0.05)
    done = tool(server, "--list")
    assert done.returncode == 0 and group in done.stdout.split(), done
    done = tool(server, "--list", "--state", "stable")
    assert done.returncode == 0 and [group, "Stable"] in [line.split() for line in done.stdout.splitlines()], done
    done = tool(server, "--describe", "--group", group)
    assert done.returncode == 0, done
    rows = [line.split() for line in done.stdout.splitlines() if line.strip()]
    assert rows == [["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"], [group, topic, "0", "-", "-"],
                    [group, topic, "1", "-", "-"]]
    done = tool(server, "--describe", "--group", group, "--members", "--verbose")
    rows = [line.split() for line in done.stdout.splitlines() if line.strip()]
    assert rows[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "MEMBER-EPOCH", "ASSIGNMENT"]
    assert rows[1][:2] == [group, m] and rows[1][4] == "2" and rows[1][6] == f"{topic}:0,1", done
    done = tool(server, "--describe", "--group", group, "--state", "--verbose")
    rows = [line.split() for line in done.stdout.splitlines() if line.strip()]
    assert rows[1][0] == group and rows[1][3:] == ["Stable", rows[1][4], rows[1][5], "1"], done
    # a group with members is not reset
    done = tool(server, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    assert (done.returncode, done.stdout.strip()) == (1, f"Error: Share group '{group}' is not empty."), done
    leave()
    done = tool(server, "--reset-offsets", "--group", group, "--all-topics", "--to-latest", "--dry-run")
    assert done.returncode == 0, done
    rows = [line.split() for line in done.stdout.splitlines() if line.strip()]
    assert rows == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], [group, topic, "0", "3"], [group, topic, "1", "0"]]
    assert [line.split()[3] for line in tool(server, "--describe", "--group", group).stdout.splitlines()
            if line.startswith(group)] == ["-", "-"]  # a dry run changes nothing
    done = tool(server, "--reset-offsets", "--group", group, "--topic", f"{topic}:0", "--to-latest", "--execute")
    assert done.returncode == 0, done
    assert [line.split()[3] for line in tool(server, "--describe", "--group", group).stdout.splitlines()
            if line.startswith(group)] == ["3", "-"]
    done = tool(server, "--delete-offsets", "--group", group, "--topic", topic)
    assert done.returncode == 0, done
    assert [line.split() for line in done.stdout.splitlines() if line.strip()] == [
        ["TOPIC", "STATUS"], [topic, "Successful"]]
    done = tool(server, "--describe", "--group", group)
    assert (done.returncode, done.stdout.strip()) == (0, f"Share group '{group}' has no offset information.")
    done = tool(server, "--delete", "--group", group)
    assert (done.returncode, done.stdout.strip()) == (0, f"Deletion of requested share groups ('{group}') was "
                                                         "successful."), done
    done = tool(server, "--delete", "--group", group)
    assert done.returncode == 1 and f"Group '{group}' is not a share group." in done.stdout, done
    done = tool(server, "--describe", "--group", group)
    assert done.returncode == 1 and f"Error: Share group '{group}' does not exist." in done.stdout, done


def test_option_mistakes_are_refused_before_connecting(server):
    for args, message in [
            ((), "exactly one action"),
            (("--describe",), "Option [describe] takes one of these options: [all-groups], [group]"),
            (("--describe", "--group", "g", "--members", "--state"), "at most one of these options"),
            (("--reset-offsets", "--group", "g", "--topic", "t"), "exactly one of these options: [to-earliest]"),
            (("--reset-offsets", "--group", "g", "--to-earliest"), "[all-topics], [topic]"),
            (("--delete-offsets", "--group", "g"), "[topic], [group]"),
            (("--list", "--state", "Rebalancing"), "Invalid state list")]:
        done = tool(server, *args)
        assert done.returncode == 2 and message in done.stderr, (args, done.stderr)
