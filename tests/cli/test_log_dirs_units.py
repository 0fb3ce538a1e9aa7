"""kjbod.cli.log_dirs without a server: the assignment file's checks, argument parsing, the describe document and
its table, and how DescribeLogDirs answers move a move through its states."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
from pathlib import Path
from uuid import UUID

import pytest

from kjbod.admin import ErrorCode, KafkaError, LogDirInfo, LogDirsByBroker, ReplicaInfo, ReplicaLogDirInfo
from kjbod.cli.log_dirs import (
    COPYING,
    DONE,
    STOPPED,
    THROTTLE_KEY,
    WAITING,
    MoveTracker,
    PlannedMove,
    ThrottleGuard,
    _describe,
    _explain,
    describe_document,
    parse_assignment,
    parse_id_list,
    parse_rate,
    render_table,
)
from kjbod.cli.main import UserError, main
from tests.admin.conftest import cluster3  # noqa: F401  (a fixture)

# ================================================================================================ assignment files


def test_a_good_file():
    text = json.dumps({"version": 1, "partitions": [
        {"topic": "events", "partition": 0, "log_dir": "/data/b"},
        {"log_dir": "/data/c", "partition": 12, "topic": "a.b_c-D"},
    ]})
    assert parse_assignment(text) == [PlannedMove("events", 0, "/data/b"), PlannedMove("a.b_c-D", 12, "/data/c")]
    # "version" may be left out (Kafka's tools read such files too).
    assert parse_assignment('{"partitions": [{"topic": "t", "partition": 1, "log_dir": "/d"}]}') == [
        PlannedMove("t", 1, "/d")]


def entry(**changes):
    value = {"topic": "events", "partition": 3, "log_dir": "/data/b"}
    value.update(changes)
    return {k: v for k, v in value.items() if v is not ...}


def doc(*entries, **top):
    return json.dumps({"version": 1, "partitions": list(entries), **top})


BAD_FILES = [
    ("", "not valid JSON"),
    ("{\"version\": 1,\n \"partitions\": [}", "not valid JSON: Expecting value at line 2 column 17"),
    ("[]", "expected a JSON object"),
    (json.dumps({"version": 2, "partitions": [entry()]}), '"version" must be 1, not the number 2'),
    (json.dumps({"version": "1", "partitions": [entry()]}), '"version" must be 1, not the string "1"'),
    (json.dumps({"version": True, "partitions": [entry()]}), '"version" must be 1, not a boolean'),
    (json.dumps({"version": 1}), 'missing key "partitions"'),
    (json.dumps({"version": 1, "partitions": {}}), '"partitions" must be a list, not an object'),
    (json.dumps({"version": 1, "partitions": []}), '"partitions" is empty'),
    (doc(entry(), extra=1), 'unknown key "extra" at the top level'),
    (doc(entry(), "events-0"), 'partitions[1] must be an object with topic, partition, log_dir, not the string'),
    (doc(entry(topic=...)), 'partitions[0]: missing key "topic"'),
    (doc(entry(), entry(partition=..., topic="t")), 'partitions[1]: missing key "partition"'),
    (doc(entry(log_dir=...)), 'partitions[0] (events-3): missing key "log_dir"'),
    (doc(entry(log_dirs=["/a"])), 'partitions[0] (events-3): unknown key "log_dirs" (this command moves replicas '
                                  'within one broker: one log_dir per partition)'),
    (doc(entry(topic=7)), 'partitions[0]: "topic" must be a string, not the number 7'),
    (doc(entry(topic="bad topic")), '"topic" "bad topic" is not a Kafka topic name'),
    (doc(entry(topic="")), '"topic" "" is not a Kafka topic name'),
    (doc(entry(topic="x" * 250)), "is not a Kafka topic name"),
    (doc(entry(topic="..")), '"topic" ".." is not a Kafka topic name'),
    (doc(entry(partition="3")), 'partitions[0]: "partition" must be an integer, not the string "3"'),
    (doc(entry(partition=1.5)), '"partition" must be an integer, not the number 1.5'),
    (doc(entry(partition=True)), '"partition" must be an integer, not a boolean'),
    (doc(entry(partition=-1)), 'partitions[0] (events--1): "partition" must be between 0 and 2147483647, not -1'),
    (doc(entry(partition=2**31)), "must be between 0 and 2147483647"),
    (doc(entry(log_dir=None)), '"log_dir" must be a string, not null'),
    (doc(entry(log_dir=["/a"])), '"log_dir" must be a string, not a list'),
    (doc(entry(log_dir="data/b")), '"log_dir" must be an absolute path (starting with "/"), not "data/b", a '
                                   "relative path"),
    (doc(entry(log_dir="")), '"log_dir" must be an absolute path (starting with "/"), not empty'),
    (doc(entry(log_dir="any")), 'not "any", which names no dir'),
    (doc(entry(log_dir="/a\0b")), "contains a NUL character"),
    (doc(entry(), entry(partition=4), entry(log_dir="/data/c")),
     "partitions[2] (events-3) repeats partitions[0]: events-3 is listed twice"),
]


@pytest.mark.parametrize(("text", "message"), BAD_FILES)
def test_bad_files_name_the_problem(text, message):
    with pytest.raises(UserError) as info:
        parse_assignment(text, "moves.json")
    assert str(info.value).startswith("moves.json: ")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("text", "message"), BAD_FILES)
def test_bad_files_exit_2_with_one_line_before_connecting(tmp_path, capsys, text, message):
    # Nothing listens on port 1: the file is rejected before any connection is tried.
    path = tmp_path / "moves.json"
    path.write_text(text)
    code = main(["log-dirs", "move", "--bootstrap-server", "127.0.0.1:1", "--broker", "1",
                 "--assignment", str(path)])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.endswith("\n")
    assert err.startswith(f"kjbod: error: {path}: ") and message in err


def test_bad_file_through_the_real_command(tmp_path):
    path = tmp_path / "moves.json"
    path.write_text(doc(entry(log_dir="relative/dir")))
    done = subprocess.run([sys.executable, "-m", "kjbod", "log-dirs", "move", "--bootstrap-server",
                           "127.0.0.1:1", "--broker", "1", "--assignment", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f'kjbod: error: {path}: partitions[0] (events-3): "log_dir" must be an absolute path '
                           '(starting with "/"), not "relative/dir", a relative path\n')


def test_missing_file_and_stdin(tmp_path, capsys, monkeypatch):
    code = main(["log-dirs", "move", "--bootstrap-server", "127.0.0.1:1", "--broker", "1",
                 "--assignment", str(tmp_path / "nope.json")])
    assert code == 2
    assert capsys.readouterr().err == f"kjbod: error: No such file or directory: {tmp_path / 'nope.json'}\n"
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO('{"partitions": 5}'))
    code = main(["log-dirs", "move", "--bootstrap-server", "127.0.0.1:1", "--broker", "1", "--assignment", "-"])
    assert code == 2
    assert capsys.readouterr().err == 'kjbod: error: <stdin>: "partitions" must be a list, not the number 5\n'


# ================================================================================================ arguments


@pytest.mark.parametrize(("text", "value"), [
    ("1048576", 1048576), ("10MB", 10_000_000), ("10M", 10_000_000), ("10mb/s", 10_000_000),
    ("64MiB", 64 * 2**20), ("1.5GiB", int(1.5 * 2**30)), ("500k", 500_000), ("2KiB/s", 2048), ("100B", 100),
    (" 7 ", 7), ("1T", 10**12),
])
def test_parse_rate(text, value):
    assert parse_rate(text) == value


@pytest.mark.parametrize("text", ["", "fast", "0", "0.2", "10 MBit", "-5", "5iB", "1e6", "10000000000000T"])
def test_parse_rate_rejects(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_rate(text)


def test_parse_id_list():
    assert parse_id_list("1") == [1]
    assert parse_id_list(" 3, 1,3,,2 ") == [3, 1, 2]
    for bad in ("", ",", "a", "1,b", "-1", "1.0"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_id_list(bad)


@pytest.mark.parametrize(("argv", "fragment"), [
    (["log-dirs"], "ACTION"),
    (["log-dirs", "describe"], "--bootstrap-server"),
    (["log-dirs", "describe", "--bootstrap-server", "h:1", "--broker-list", "1,x"],
     "argument --broker-list: 'x' is not a broker id"),
    (["log-dirs", "describe", "--bootstrap-server", "h:1", "--topic-list", "a b"],
     "argument --topic-list: 'a b' is not a Kafka topic name"),
    (["log-dirs", "move", "--bootstrap-server", "h:1", "--assignment", "f"], "--broker"),
    (["log-dirs", "move", "--bootstrap-server", "h:1", "--broker", "1", "--assignment", "f", "--throttle", "x"],
     "argument --throttle: 'x' is not a rate"),
    (["log-dirs", "move", "--bootstrap-server", "h:1", "--broker", "1", "--assignment", "f", "--report-interval",
      "0"], "argument --report-interval: '0' is not a positive number"),
    (["log-dirs", "describe", "--bootstrap-server", "h:99999"], "--bootstrap-server: bad bootstrap server"),
])
def test_usage_errors_are_one_line(capsys, argv, fragment):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kjbod: error: ") and fragment in err


def test_help_lists_both_actions(capsys):
    assert main(["log-dirs", "--help"]) == 0
    out = capsys.readouterr().out
    assert "describe" in out and "move" in out


# ================================================================================================ describe output

DIR_A = UUID("0f6f3d2c-8f0a-4a55-9d4b-1d2e3f405162")


def sample() -> LogDirsByBroker:
    result = LogDirsByBroker()
    result[1] = [
        LogDirInfo(1, "/data/a", DIR_A, None, 1000 * 2**30, 250 * 2**30, [
            ReplicaInfo("events", 1, 3 * 2**20, 0, False),
            ReplicaInfo("events", 0, 5 * 2**20, 0, False),
            ReplicaInfo("audit", 0, 512, None, False),
        ], reserved_bytes=2**30, is_cordoned=True, filesystem_id=2049),
        LogDirInfo(1, "/data/b", None, None, None, None, [ReplicaInfo("events", 0, 2**20, 1234, True)]),
        LogDirInfo(1, "/data/c", None, ErrorCode.KAFKA_STORAGE_ERROR, None, None, [], "offline", None,
                   1_795_622_400_000),
    ]
    result[3] = [LogDirInfo(3, "/d3", None, None, 100, 100, [])]
    result.errors[2] = KafkaError(ErrorCode.NETWORK_EXCEPTION, "127.0.0.1:9: connection refused")
    return result


def test_describe_document():
    document = describe_document(sample(), {(1, "events", 1): 42})
    assert document == {"version": 1, "brokers": [
        {"broker": 1, "error": None, "fenced": False, "log_dirs": [
            {"path": "/data/a", "is_live": True, "error": None, "directory_id": "D289LI8KSlWdSx0uP0BRYg",
             "total_bytes": 1000 * 2**30, "usable_bytes": 250 * 2**30, "state": None, "recent_latency_ms": None,
             "failed_at": None, "reserved_bytes": 2**30, "state_reason": None,
             "is_cordoned": True, "filesystem_id": 2049, "partitions": [
                 {"topic": "audit", "partition": 0, "size": 512, "offset_lag": None, "behind_leader": None,
                  "is_temporary": False},
                 {"topic": "events", "partition": 0, "size": 5 * 2**20, "offset_lag": 0, "behind_leader": None,
                  "is_temporary": False},
                 {"topic": "events", "partition": 1, "size": 3 * 2**20, "offset_lag": 0, "behind_leader": 42,
                  "is_temporary": False},
             ]},
            {"path": "/data/b", "is_live": True, "error": None, "directory_id": None, "total_bytes": None,
             "usable_bytes": None, "state": None, "recent_latency_ms": None, "failed_at": None, "reserved_bytes": None,
             "state_reason": None, "is_cordoned": None, "filesystem_id": None, "partitions": [
                 {"topic": "events", "partition": 0, "size": 2**20, "offset_lag": 1234, "behind_leader": None,
                  "is_temporary": True}]},
            {"path": "/data/c", "is_live": False, "error": "KAFKA_STORAGE_ERROR", "directory_id": None,
             "total_bytes": None, "usable_bytes": None, "state": "offline", "recent_latency_ms": None,
             "failed_at": "2026-11-25T16:00:00Z", "reserved_bytes": None, "state_reason": None,
             "is_cordoned": None, "filesystem_id": None, "partitions": []},
        ]},
        {"broker": 2, "error": "NETWORK_EXCEPTION: 127.0.0.1:9: connection refused", "fenced": False,
         "log_dirs": []},
        {"broker": 3, "error": None, "fenced": False, "log_dirs": [
            {"path": "/d3", "is_live": True, "error": None, "directory_id": None, "total_bytes": 100,
             "usable_bytes": 100, "state": None, "recent_latency_ms": None, "failed_at": None, "reserved_bytes": None,
             "state_reason": None, "is_cordoned": None, "filesystem_id": None, "partitions": []}]},
    ]}
    json.dumps(document)  # plain JSON types only


def test_slow_and_silent_dirs_show_their_state():
    result = LogDirsByBroker()
    result[1] = [
        LogDirInfo(1, "/ok", None, None, 100, 50, [], "online", 3),
        LogDirInfo(1, "/slow", None, None, 100, 50, [], "degraded", 2345),
        LogDirInfo(1, "/hung", None, ErrorCode.KAFKA_STORAGE_ERROR, None, None, [], "not-answering", 0),
        LogDirInfo(1, "/dead", None, ErrorCode.KAFKA_STORAGE_ERROR, None, None, [], "offline", 0),
    ]
    document = describe_document(result)
    assert [(d["state"], d["recent_latency_ms"]) for d in document["brokers"][0]["log_dirs"]] == [
        ("online", 3), ("degraded", 2345), ("not-answering", 0), ("offline", 0)]
    rows = [line.split()[:4] for line in render_table(document).splitlines()[2:6]]
    assert rows == [["/ok", "online", "0", "0"], ["/slow", "degraded", "(2.3", "s/op)"],
                    ["/hung", "NOT", "ANSWERING", "(KAFKA_STORAGE_ERROR)"],
                    ["/dead", "OFFLINE", "(KAFKA_STORAGE_ERROR)", "-"]]


def test_the_table_says_why_a_dir_is_not_online():
    """kjbod's StateReason, under the dirs' table: the stall or I/O error that took a dir offline, what a dir that
    does not answer is stuck in; nothing for a dir without one (online, or a broker that does not report it)."""
    stalled = "stalled: fsync /a/t-0/00000000000000000000.log did not return for 30.0 s (log.dir.stall.timeout.ms)"
    broken = "write /b/t-1/00000000000000000000.log failed: [Errno 5] Input/output error"
    hung = "no answer for 7.2 s: statvfs /c has not returned (a hung disk, or one slower than 5 s per operation)"
    result = LogDirsByBroker()
    result[1] = [
        LogDirInfo(1, "/a", None, ErrorCode.KAFKA_STORAGE_ERROR, None, None, [], "offline", 0, 1_795_622_400_000,
                   state_reason=stalled),
        LogDirInfo(1, "/b", None, ErrorCode.KAFKA_STORAGE_ERROR, None, None, [], "offline", 0, state_reason=broken),
        LogDirInfo(1, "/c", None, ErrorCode.KAFKA_STORAGE_ERROR, None, None, [], "not-answering", 7200,
                   state_reason=hung),
        LogDirInfo(1, "/d", None, None, 100, 50, [], "online", 3),
        LogDirInfo(1, "/e", None, ErrorCode.KAFKA_STORAGE_ERROR, None, None, []),  # Apache Kafka: no reason
    ]
    document = describe_document(result)
    assert [d["state_reason"] for d in document["brokers"][0]["log_dirs"]] == [stalled, broken, hung, None, None]
    lines = render_table(document).splitlines()
    blank = lines.index("", 2)
    assert lines[blank + 1:blank + 4] == [f"  /a (offline): {stalled}", f"  /b (offline): {broken}",
                                          f"  /c (not-answering): {hung}"]
    assert lines[blank + 4] == ""  # then the replicas


def test_render_table():
    text = render_table(describe_document(sample(), {(1, "events", 1): 42}))
    lines = text.splitlines()
    assert lines[0] == "Broker 1: 3 log dirs"
    header = lines[1].split()
    assert header == ["LOG", "DIR", "STATE", "REPLICAS", "DATA", "SIZE", "USED", "FREE", "RESERVE", "USE%",
                      "DIRECTORY", "ID"]
    assert lines[2].split() == ["/data/a", "online,", "cordoned", "3", "8.0", "MiB", "1000.0", "GiB", "750.0", "GiB", "250.0",
                                "GiB", "1.0", "GiB", "75.0%", "D289LI8KSlWdSx0uP0BRYg"]
    # A dir receiving a move counts the future replica apart; unknown sizes show "-".
    assert lines[3].split() == ["/data/b", "online", "0", "+1", "1.0", "MiB", "-", "-", "-", "-", "-", "-"]
    assert lines[4].split() == ["/data/c", "OFFLINE", "(KAFKA_STORAGE_ERROR)", "since", "2026-11-25T16:00:00Z",
                                "-", "-", "-", "-", "-", "-", "-", "-"]
    # Columns line up: every dir row starts its STATE column under the header's.
    column = lines[1].index("STATE")
    assert all(line[column - 2:column] == "  " and line[column] != " " for line in lines[2:5])
    replicas = lines[6:10]
    assert replicas[0].split() == ["PARTITION", "LOG", "DIR", "SIZE", "OFFSET", "LAG", "BEHIND", "LEADER", "NOTE"]
    assert replicas[1].split() == ["audit-0", "/data/a", "512", "B", "-", "-"]
    assert replicas[2].split() == ["events-0", "/data/a", "5.0", "MiB", "0", "-"]
    assert replicas[3].split() == ["events-0", "/data/b", "1.0", "MiB", "1234", "-", "future:", "moving", "here"]
    assert lines[10:] == [
        "  events-1   /data/a  3.0 MiB           0             42",
        "",
        "Broker 2: could not describe its log dirs: NETWORK_EXCEPTION: 127.0.0.1:9: connection refused",
        "",
        "Broker 3: 1 log dir",
        "  LOG DIR  STATE   REPLICAS  DATA   SIZE  USED   FREE  RESERVE  USE%  DIRECTORY ID",
        "  /d3      online         0   0 B  100 B   0 B  100 B        -  0.0%  -",
        "",
        "  (no replicas)",
    ]
    assert text.endswith("\n")


def test_render_table_right_aligns_numbers():
    lines = render_table(describe_document(sample())).splitlines()
    # Sizes end at the same column whatever their width.
    size_end = lines[6].index("SIZE") + len("SIZE")
    for line in lines[7:11]:
        assert line[size_end - 1] == "B" and line[size_end] == " "


# ================================================================================================ move states


def info(current=None, current_size=None, future=None, future_size=None, future_lag=None):
    return ReplicaLogDirInfo(current, 0 if current else None, current_size, future, future_lag, future_size)


def test_a_move_from_waiting_to_done():
    tracker = MoveTracker(1)
    entry = tracker.add(PlannedMove("t", 0, "/b"), source_dir="/a", now=0)
    assert tracker.replicas() == [("t", 0, 1)]
    assert tracker.observe(info("/a", 1000), entry, 1) is None
    assert entry.state == WAITING and entry.size == 1000 and entry.copied == 0
    assert tracker.snapshot().extra == "1 not started"
    assert tracker.observe(info("/a", 1000, "/b", 400, 17), entry, 2) is None
    assert (entry.state, entry.copied, entry.offset_lag) == (COPYING, 400, 17)
    snap = tracker.snapshot()
    assert (snap.done_bytes, snap.total_bytes, snap.done_items, snap.total_items) == (400, 1000, 0, 1)
    assert snap.extra == "offset lag 17"
    # The source grew while it was copied, and the future is bigger than the old size: copied never exceeds size.
    tracker.observe(info("/a", 1200, "/b", 1100, 3), entry, 3)
    assert (entry.size, entry.copied) == (1200, 1100)
    assert tracker.observe(info("/b", 1200), entry, 4) == DONE
    assert (entry.state, entry.copied, entry.finished_at) == (DONE, 1200, 4)
    assert tracker.replicas() == [] and tracker.active == []
    snap = tracker.snapshot()
    assert (snap.done_bytes, snap.total_bytes, snap.done_items, snap.extra) == (1200, 1200, 1, "")


def test_a_future_that_vanishes_stops_the_move_only_after_several_polls():
    tracker = MoveTracker(1)
    entry = tracker.add(PlannedMove("t", 0, "/b"), now=0)
    tracker.observe(info("/a", 10, "/b", 5), entry, 1)
    # One poll without the future (the mover hands it to the log manager) is not a failure...
    assert tracker.observe(info("/a", 10), entry, 2) is None
    assert tracker.observe(info("/a", 10, "/b", 6), entry, 3) is None
    assert entry.state == COPYING and entry.missing_polls == 0
    # ...but three in a row are.
    assert tracker.observe(info("/a", 10), entry, 4) is None
    assert tracker.observe(info("/a", 10), entry, 5) is None
    assert tracker.observe(info("/a", 10), entry, 6) == STOPPED
    assert "stopped this move" in entry.error and "/a" in entry.error
    # A stopped move no longer counts toward the progress.
    assert tracker.snapshot().total_items == 0


def test_a_move_that_never_showed_a_future_keeps_waiting():
    tracker = MoveTracker(1)
    entry = tracker.add(PlannedMove("t", 0, "/b"), now=0)
    for t in range(20):
        assert tracker.observe(info("/a", 10), entry, t) is None
    assert entry.state == WAITING


def test_redirected_and_vanished_replicas_stop_at_once():
    tracker = MoveTracker(4)
    redirected = tracker.add(PlannedMove("t", 0, "/b"), now=0)
    assert tracker.observe(info("/a", 10, "/c", 1), redirected, 1) == STOPPED
    assert "now moving it to /c" in redirected.error
    gone = tracker.add(PlannedMove("t", 1, "/b"), now=0)
    assert tracker.observe(info(), gone, 1) == STOPPED
    assert "broker 4 no longer reports this replica" in gone.error


def test_readme_documents_the_commands():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert "## Moving replicas between disks" in readme
    section = readme.split("## Moving replicas between disks", 1)[1].split("\n## ", 1)[0]
    for needle in ("kjbod log-dirs describe", "kjbod log-dirs move", '"log_dir"', "--throttle", "--wait",
                   '"is_temporary"', '"directory_id"', '"usable_bytes"'):
        assert needle in section


# ================================================================================================ throttle guard


class FakeConfigAdmin:
    """Just the two config calls ThrottleGuard makes, over a dict of per-broker dynamic values."""

    def __init__(self, value: str | None = None, fail_alter: bool = False) -> None:
        self.value = value
        self.fail_alter = fail_alter
        self.calls: list[tuple[str, object]] = []

    async def describe_configs(self, resources, keys=None):
        from kjbod.admin import ConfigEntry, ConfigSource

        (resource,) = resources
        self.calls.append(("describe", keys))
        if self.value is None:
            entry = ConfigEntry(THROTTLE_KEY, str((1 << 63) - 1), ConfigSource.DEFAULT_CONFIG, False, False)
        else:
            entry = ConfigEntry(THROTTLE_KEY, self.value, ConfigSource.DYNAMIC_BROKER_CONFIG, False, False)
        return {resource: {THROTTLE_KEY: entry}}

    async def incremental_alter_configs(self, changes):
        ((resource, change),) = changes.items()
        assert resource.name == "3"
        self.calls.append(("alter", dict(change)))
        if self.fail_alter:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "no answer")
        self.value = change[THROTTLE_KEY]


async def test_throttle_guard_removes_what_it_set():
    fake = FakeConfigAdmin()
    guard = ThrottleGuard(fake, 3, 1000)
    await guard.install()
    assert fake.value == "1000" and guard.describe_previous() == "no per-broker throttle was set"
    assert await guard.release() == "Throttle removed from broker 3."
    assert fake.value is None and fake.calls[-1] == ("alter", {THROTTLE_KEY: None})
    assert await guard.release() == ""  # once only


async def test_throttle_guard_restores_the_previous_value():
    fake = FakeConfigAdmin("5000")
    guard = ThrottleGuard(fake, 3, 1000)
    await guard.install()
    assert guard.describe_previous() == "the per-broker throttle was 4.9 KiB/s (5000 bytes/s)"
    assert await guard.release() == "Throttle on broker 3 restored to 4.9 KiB/s (5000 bytes/s)."
    assert fake.value == "5000"
    assert "--add-config replica.alter.log.dirs.io.max.bytes.per.second=5000" in guard.manual_fix("h:1")


async def test_throttle_guard_leaves_a_value_someone_else_set():
    fake = FakeConfigAdmin()
    guard = ThrottleGuard(fake, 3, 1000)
    await guard.install()
    fake.value = "777"  # an operator changed it while the moves ran
    message = await guard.release()
    assert message == ("The throttle on broker 3 was changed to 777 B/s (777 bytes/s) while the moves ran; "
                       "left as it is.")
    assert fake.value == "777" and fake.calls[-1][0] == "describe"


async def test_throttle_guard_after_an_unanswered_change_checks_the_broker():
    fake = FakeConfigAdmin(fail_alter=True)
    guard = ThrottleGuard(fake, 3, 1000)
    with pytest.raises(KafkaError):
        await guard.install()
    assert guard.installed and not guard.confirmed
    # The change did not apply: nothing to undo, nothing said.
    assert await guard.release() == ""
    assert [c[0] for c in fake.calls] == ["describe", "alter", "describe"]
    assert "--delete-config replica.alter.log.dirs.io.max.bytes.per.second" in guard.manual_fix("h:1")


# ================================================================================================ fenced brokers


def _describe_args(c, broker_list=None, as_json=True) -> argparse.Namespace:
    return argparse.Namespace(bootstrap_server=c.bootstrap, timeout=10.0, broker_list=broker_list, topic_list=None,
                              json=as_json)


async def test_a_fenced_broker_is_listed_as_fenced_not_left_out(cluster3):  # noqa: F811
    """Metadata, where "every broker" comes from, has no fenced broker (Kafka leaves them out): found through
    DescribeCluster's include_fenced_brokers and listed, with why, and the command exits 1."""
    cluster3.fenced = {3}
    out = io.StringIO()
    assert await _describe(_describe_args(cluster3), out) == 1
    brokers = {b["broker"]: b for b in json.loads(out.getvalue())["brokers"]}
    assert sorted(brokers) == [1, 2, 3]
    assert brokers[3]["fenced"] is True and brokers[3]["log_dirs"] == []
    assert brokers[3]["error"].startswith("fenced by the controller: registered at 127.0.0.1:")
    assert [d["path"] for d in brokers[1]["log_dirs"]] == ["/b1/d0"] and brokers[1]["fenced"] is False
    # Not asked for its log dirs: the cluster has no address for it
    assert all(r.api_key != 35 for r in cluster3.brokers[3].received)

    table = io.StringIO()
    assert await _describe(_describe_args(cluster3, [1, 3], as_json=False), table) == 1
    text = table.getvalue()
    assert "Broker 3: FENCED, its log dirs not described: fenced by the controller" in text
    assert "Broker 1: 1 log dir" in text and "Broker 2" not in text


async def test_without_fenced_brokers_nothing_changes(cluster3):  # noqa: F811
    out = io.StringIO()
    assert await _describe(_describe_args(cluster3), out) == 0
    assert [(b["broker"], b["fenced"], b["error"]) for b in json.loads(out.getvalue())["brokers"]] == [
        (1, False, None), (2, False, None), (3, False, None)]


def test_a_storage_error_on_a_move_names_both_ways_a_dir_can_refuse_it():
    # The broker answers KAFKA_STORAGE_ERROR for an offline dir and for a target dir that does not answer (a hung
    # disk): the message must not send the operator looking for an offline dir only.
    error = KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "")
    text = _explain(error, PlannedMove("events", 1, "/data/hung"), 1, ["/data/ok", "/data/hung"])
    assert text.startswith("KAFKA_STORAGE_ERROR: ")
    assert "is offline" in text and "does not answer" in text and "kjbod log-dirs describe" in text
