"""`kjbod balance-disks` in process: its arguments, DescribeLogDirs' answer turned into the plan's input, and the
plan printed for people and for programs (the live tests run it against real servers)."""

from __future__ import annotations

import json
from uuid import UUID

import pytest

from kjbod.admin import ErrorCode, LogDirInfo, ReplicaInfo
from kjbod.admin.types import PartitionDescription, TopicDescription
from kjbod.cli.balance_disks import broker_dirs, broker_holds, cluster_holds, plan_document, render_plan
from kjbod.cli.balance_plan import plan_broker
from kjbod.cli.main import main

MIB = 1 << 20


@pytest.mark.parametrize(("argv", "fragment"), [
    (["balance-disks"], "--bootstrap-server"),
    (["balance-disks", "--bootstrap-server", "h:1", "--threshold", "0"],
     "argument --threshold: the threshold must be more than 0 and less than 100 percentage points, not 0"),
    (["balance-disks", "--bootstrap-server", "h:1", "--threshold", "ten"],
     "argument --threshold: 'ten' is not a number of percentage points"),
    (["balance-disks", "--bootstrap-server", "h:1", "--max-moves-per-broker", "0"],
     "argument --max-moves-per-broker: '0' is not a positive whole number"),
    (["balance-disks", "--bootstrap-server", "h:1", "--throttle", "fast"], "argument --throttle: 'fast' is not a rate"),
    (["balance-disks", "--bootstrap-server", "h:1", "--broker-list", "1,x"], "'x' is not a broker id"),
])
def test_usage_errors_are_one_line(capsys, argv, fragment):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("kjbod: error: ") and fragment in err
    assert "Traceback" not in err


def test_help_names_every_flag(capsys):
    assert main(["balance-disks", "--help"]) == 0
    out = capsys.readouterr().out
    for flag in ("--bootstrap-server", "--command-config", "--broker-list", "--threshold", "--max-moves-per-broker",
                 "--throttle", "--execute", "--json", "--progress"):
        assert flag in out


def answer() -> list[LogDirInfo]:
    return [
        LogDirInfo(1, "/data/a", UUID(int=1), None, 100 * MIB, 20 * MIB, [
            ReplicaInfo("t", 0, 20 * MIB, 0, False), ReplicaInfo("t", 1, 10 * MIB, 0, False),
            ReplicaInfo("t", 2, 5 * MIB, 0, False)], "online", 0, None, MIB, None, False, 101),
        LogDirInfo(1, "/data/b", UUID(int=2), None, 100 * MIB, 90 * MIB, [
            ReplicaInfo("t", 3, MIB, 0, False), ReplicaInfo("t", 2, MIB, 0, True)], "online", 0, None, MIB, None,
            True, 102),
        LogDirInfo(1, "/data/c", UUID(int=3), None, 100 * MIB, 60 * MIB, [], "online", 0, None, MIB, None, False, 103),
        LogDirInfo(1, "/data/d", UUID(int=4), ErrorCode.KAFKA_STORAGE_ERROR, None, None, [], "offline", None, 5, None,
                   "write failed", False, None),
    ]


def test_describe_log_dirs_becomes_the_plans_input():
    dirs, moving = broker_dirs(answer())
    assert moving == {("t", 2)}  # a future replica: already moving
    assert [(d.path, d.online, d.cordoned, d.filesystem_id, d.reserved_bytes, len(d.replicas)) for d in dirs] == [
        ("/data/a", True, False, 101, MIB, 3), ("/data/b", True, True, 102, MIB, 1),
        ("/data/c", True, False, 103, MIB, 0), ("/data/d", False, False, None, 0, 0)]


def test_the_plan_for_people_and_for_programs():
    dirs, moving = broker_dirs(answer())
    plan = plan_broker(1, dirs, 0.10, moving)
    assert plan.mode == "filesystem" and plan.reaches_goal
    text = render_plan(plan)
    assert text.startswith("Broker 1: balancing filesystem use: each log dir has a filesystem of its own")
    assert "/data/b  cordoned" in text and "/data/d  offline" in text
    assert "USE% BEFORE" in text and "80.0%" in text
    assert [m.name for m in plan.moves] == ["t-3", "t-0"]  # the cordoned dir's replica, then 20 MiB from /data/a
    for m in plan.moves:
        [line] = [ln for ln in text.splitlines() if ln.strip().startswith(m.name + " ")]
        assert line.split() == [m.name, m.source, m.target, *f"{m.size / MIB:.1f} MiB".split()]
    assert "Note: left out, offline: /data/d." in text and "Note: 1 replica already moving" in text
    document = plan_document([plan], {2: "broker 2: fenced by the controller"}, threshold=0.10, execute=False)
    json.dumps(document)
    one, two = document["brokers"]
    assert one["mode"] == "filesystem"
    assert [(m["topic"], m["partition"], m["from"], m["to"], m["size"]) for m in one["moves"]] == [
        ("t", 3, "/data/b", "/data/c", MIB), ("t", 0, "/data/a", "/data/c", 20 * MIB)]
    assert [(d["path"], d["state"], d["fraction_before"], d["fraction_after"]) for d in one["dirs"]] == [
        ("/data/a", "online", 0.8, 0.6), ("/data/b", "cordoned", 0.1, 0.09), ("/data/c", "online", 0.4, 0.61),
        ("/data/d", "offline", None, None)]
    assert two == {"broker": 2, "error": "broker 2: fenced by the controller", "mode": None, "mode_reason": None,
                   "spread_before": None, "spread_after": None, "least_bytes": 0, "bytes_to_move": 0, "dirs": [],
                   "moves": [], "problems": ["broker 2: fenced by the controller"], "notes": []}


def test_watch_waits_for_under_replicated_partitions_and_reassignments_and_skips_sick_brokers():
    def topic(name: str, *isrs: tuple[int, ...]) -> TopicDescription:
        return TopicDescription(name, None, False, tuple(
            PartitionDescription(i, 1, 0, (1, 2, 3), isr, ()) for i, isr in enumerate(isrs)))

    healthy = {"a": topic("a", (1, 2, 3), (2, 3, 1))}
    assert cluster_holds(healthy, {}) == []
    short = {**healthy, "b": topic("b", (1, 2, 3), (1, 2), (1,), (3,), (2,))}
    assert cluster_holds(short, {("a", 0): object()}) == [
        "4 partitions are under-replicated (b-1, b-2, b-3, ...)", "1 partition reassignment is in progress"]

    def d(path: str, state: str | None, error: ErrorCode | None = None) -> LogDirInfo:
        return LogDirInfo(1, path, None, error, 100, 50, [], state=state)

    assert broker_holds([d("/a", "online"), d("/b", "full"), d("/c", None)]) == []  # a full dir is balancing's job
    assert broker_holds([d("/a", "degraded"), d("/b", "not-answering"),
                         d("/c", None, ErrorCode.KAFKA_STORAGE_ERROR)]) == [
        "/a is degraded", "/b is not-answering", "/c is offline"]


def test_watch_does_not_take_json(capsys):
    assert main(["balance-disks", "--bootstrap-server", "h:1", "--watch", "1", "--json"]) == 2
    assert "--watch prints as it goes: it does not take --json" in capsys.readouterr().err
