"""`kjbod log-dirs describe|move` end to end: the real command against a real `kjbod serve`, data from kafka-python.

One server (three log dirs) serves the whole module; each test works on topics of its own, and every test that
touches the broker's throttle puts it back. The commands run as subprocesses (`python -m kjbod`), without a
terminal, so their progress comes as plain lines, which is what a CI log or a pipe gets.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from live import LiveServer, read_meta_properties, start_server

from kjbod.admin import ConfigResource, ConfigSource, NewTopic, SyncAdminClient
from kjbod.cli.log_dirs import THROTTLE_KEY
from kjbod.cli.progress import human_bytes

pytestmark = [
    pytest.mark.slow,
    # kafka-python loads its schemas with importlib.resources' legacy API (its own warning, not ours).
    pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning"),
]

KJBOD = [sys.executable, "-m", "kjbod"]
RECORD = 1000
THROTTLE_DEFAULT = str((1 << 63) - 1)


# ================================================================================================ helpers


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = start_server(tmp_path_factory.mktemp("log-dirs-cli"))
    try:
        yield live
    finally:
        live.stop()


def kjbod(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KJBOD, *args], capture_output=True, text=True, timeout=timeout)


def admin(server: LiveServer) -> SyncAdminClient:
    return SyncAdminClient(server.bootstrap, request_timeout=15)


def create_and_fill(server: LiveServer, topic: str, partitions: int, records: int) -> None:
    """A topic with `partitions` partitions, each holding `records` records of RECORD bytes (via kafka-python)."""
    from kafka import KafkaProducer

    with admin(server) as a:
        a.create_topics([NewTopic(topic, partitions, 1)])
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, linger_ms=5, acks=1)
    try:
        for _ in range(records):
            for p in range(partitions):
                producer.send(topic, os.urandom(RECORD // 2).hex().encode(), partition=p)
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=10)


def count_records(server: LiveServer, topic: str, partition: int) -> int:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, enable_auto_commit=False, group_id=None,
                             consumer_timeout_ms=3000)
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        return sum(1 for _ in consumer)
    finally:
        consumer.close()


def placement(server: LiveServer, topic: str, partition: int) -> Any:
    with admin(server) as a:
        return a.describe_replica_log_dirs([(topic, partition, server.node_id)])[(topic, partition, server.node_id)]


def throttle_entry(server: LiveServer) -> Any:
    with admin(server) as a:
        resource = ConfigResource.broker(server.node_id)
        return a.describe_configs([resource], keys=[THROTTLE_KEY])[resource][THROTTLE_KEY]


def assert_no_throttle(server: LiveServer) -> None:
    entry = throttle_entry(server)
    assert entry.source != ConfigSource.DYNAMIC_BROKER_CONFIG, entry
    assert entry.value == THROTTLE_DEFAULT


def other_dir(server: LiveServer, current: str, step: int = 1) -> str:
    dirs = [str(d) for d in server.log_dirs]
    return dirs[(dirs.index(current) + step) % len(dirs)]


def write_plan(tmp_path: Path, moves: list[tuple[str, int, str]]) -> Path:
    path = tmp_path / "moves.json"
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "log_dir": d} for t, p, d in moves]}, indent=2))
    return path


def move_args(server: LiveServer, plan: Path, *extra: str) -> list[str]:
    return ["log-dirs", "move", "--bootstrap-server", server.bootstrap, "--broker", str(server.node_id),
            "--assignment", str(plan), *extra]


def wait_until_placed(server: LiveServer, topic: str, partition: int, target: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        info = placement(server, topic, partition)
        if info.current_dir == target and info.future_dir is None:
            return
        assert time.monotonic() < deadline, f"{topic}-{partition} not in {target} after {timeout}s: {info}"
        time.sleep(0.2)


def segment_bytes(partition_dir: Path) -> int:
    return sum(f.stat().st_size for f in partition_dir.glob("*.log"))


# ================================================================================================ the JSON format

# KIP-113's document (its field names, kafka-log-dirs.sh's grouping by broker) with kjbod's additions, written
# down as types: a tuple means any of these; a dict is an object with exactly these keys; a list, a list of that.
INT, NULLABLE_INT, NULLABLE_STR = ("int",), ("int", None), (str, None)
PARTITION_SCHEMA = {"topic": str, "partition": INT, "size": INT, "offset_lag": NULLABLE_INT,
                    "behind_leader": NULLABLE_INT, "is_temporary": bool}
LOG_DIR_SCHEMA = {"path": str, "is_live": bool, "error": NULLABLE_STR, "directory_id": NULLABLE_STR,
                  "total_bytes": NULLABLE_INT, "usable_bytes": NULLABLE_INT, "state": NULLABLE_STR,
                  "recent_latency_ms": NULLABLE_INT, "failed_at": NULLABLE_STR, "reserved_bytes": NULLABLE_INT,
                  "state_reason": NULLABLE_STR, "is_cordoned": (bool, None), "filesystem_id": NULLABLE_INT,
                  "partitions": [PARTITION_SCHEMA]}
DOCUMENT_SCHEMA = {"version": INT, "brokers": [{"broker": INT, "error": NULLABLE_STR, "fenced": bool,
                                                "log_dirs": [LOG_DIR_SCHEMA]}]}


def check(value: Any, schema: Any, where: str = "$") -> None:
    if isinstance(schema, dict):
        assert isinstance(value, dict), f"{where}: expected an object, got {value!r}"
        assert set(value) == set(schema), f"{where}: keys {sorted(value)} != {sorted(schema)}"
        for key, sub in schema.items():
            check(value[key], sub, f"{where}.{key}")
    elif isinstance(schema, list):
        assert isinstance(value, list), f"{where}: expected a list, got {value!r}"
        for i, item in enumerate(value):
            check(item, schema[0], f"{where}[{i}]")
    elif isinstance(schema, tuple):
        ok = any((s is None and value is None)
                 or (s == "int" and isinstance(value, int) and not isinstance(value, bool))
                 or (isinstance(s, type) and isinstance(value, s)) for s in schema)
        assert ok, f"{where}: {value!r} is not one of {schema}"
    else:
        assert isinstance(value, schema), f"{where}: {value!r} is not {schema.__name__}"


def test_the_schema_check_itself_rejects_what_it_should():
    good = {"version": 1, "brokers": [{"broker": 1, "error": None, "fenced": False, "log_dirs": []}]}
    check(good, DOCUMENT_SCHEMA)
    for bad in ({"version": 1}, {"version": True, "brokers": []}, {"version": 1, "brokers": [{"broker": "1"}]},
                {"version": 1, "brokers": [], "extra": 0}):
        with pytest.raises(AssertionError):
            check(bad, DOCUMENT_SCHEMA)


# ================================================================================================ describe


def test_describe_json(server):
    create_and_fill(server, "described", 3, 300)
    done = kjbod("log-dirs", "describe", "--bootstrap-server", server.bootstrap, "--json")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    document = json.loads(done.stdout)
    check(document, DOCUMENT_SCHEMA)
    assert document["version"] == 1
    (broker,) = document["brokers"]
    assert broker["broker"] == server.node_id and broker["error"] is None
    dirs = broker["log_dirs"]
    assert [d["path"] for d in dirs] == [str(d) for d in server.log_dirs]
    seen = {}
    for d in dirs:
        path = Path(d["path"])
        assert d["is_live"] is True and d["error"] is None
        # KIP-858's id is the one `kjbod format` wrote; KIP-827's sizes are the volume's.
        assert d["directory_id"] == read_meta_properties(path)["directory.id"]
        vfs = os.statvfs(path)
        assert d["total_bytes"] == vfs.f_blocks * vfs.f_frsize
        assert 0 <= d["usable_bytes"] <= d["total_bytes"]
        assert abs(d["usable_bytes"] - vfs.f_bavail * vfs.f_frsize) < max(d["total_bytes"] // 100, 256 << 20)
        for p in d["partitions"]:
            if p["topic"] != "described":
                continue
            assert p["is_temporary"] is False and p["offset_lag"] == 0
            # The size is what the partition's segment files hold on disk.
            assert p["size"] == segment_bytes(path / f"described-{p['partition']}")
            assert p["size"] > 300 * RECORD
            seen[p["partition"]] = d["path"]
    assert sorted(seen) == [0, 1, 2]


def test_describe_table(server):
    create_and_fill(server, "tabled", 2, 200)
    table = kjbod("log-dirs", "describe", "--bootstrap-server", server.bootstrap, "--topic-list", "tabled")
    document = json.loads(kjbod("log-dirs", "describe", "--bootstrap-server", server.bootstrap,
                                "--topic-list", "tabled", "--json").stdout)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0] == f"Broker {server.node_id}: 3 log dirs"
    header = lines[1]
    for column in ("LOG DIR", "STATE", "REPLICAS", "DATA", "SIZE", "USED", "FREE", "RESERVE", "USE%", "DIRECTORY ID"):
        assert column in header
    for d in document["brokers"][0]["log_dirs"]:
        (row,) = [line for line in lines if line.strip().startswith(d["path"] + " ")]
        cells = row.split()
        assert cells[1] == "online"
        assert cells[-1] == d["directory_id"]
        use = float(cells[-2].rstrip("%"))
        expected = (d["total_bytes"] - d["usable_bytes"]) / d["total_bytes"] * 100
        assert abs(use - expected) < 0.5  # the two commands ran a moment apart on a shared disk
        assert human_bytes(d["total_bytes"]) in row
        count = len(d["partitions"])
        assert cells[2] == str(count)
        for p in d["partitions"]:
            (replica_row,) = [line for line in lines if line.split()[:2] == [f"tabled-{p['partition']}", d["path"]]]
            assert human_bytes(p["size"]) in replica_row
    assert sum(line.split()[0].startswith("tabled-") for line in lines if line.strip()) == 2
    assert not any("described-" in line for line in lines)  # --topic-list filters


def test_describe_with_an_unknown_broker_reports_it_and_exits_1(server):
    done = kjbod("log-dirs", "describe", "--bootstrap-server", server.bootstrap, "--broker-list",
                 f"{server.node_id},7", "--topic-list", "described", "--json")
    assert done.returncode == 1
    document = json.loads(done.stdout)
    check(document, DOCUMENT_SCHEMA)
    by_id = {b["broker"]: b for b in document["brokers"]}
    assert by_id[server.node_id]["error"] is None and len(by_id[server.node_id]["log_dirs"]) == 3
    assert "BROKER_NOT_AVAILABLE" in by_id[7]["error"] and by_id[7]["log_dirs"] == []


def test_describe_errors_are_one_line(server):
    done = kjbod("log-dirs", "describe", "--bootstrap-server", server.bootstrap, "--topic-list", "no-such-topic")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in done.stderr
    assert "no-such-topic" in done.stderr


# ================================================================================================ move


def test_move_with_wait_and_throttle(server, tmp_path):
    create_and_fill(server, "moved", 2, 1200)
    before = {p: placement(server, "moved", p) for p in (0, 1)}
    targets = {p: other_dir(server, before[p].current_dir, p + 1) for p in (0, 1)}
    total = sum(before[p].current_size for p in (0, 1))
    plan = write_plan(tmp_path, [("moved", p, targets[p]) for p in (0, 1)])

    started = time.monotonic()
    done = kjbod(*move_args(server, plan, "--wait", "--throttle", "1MB", "--report-interval", "0.3"))
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""
    out = done.stdout.splitlines()
    assert out[0].startswith(f"Throttle on broker {server.node_id} set to 976.6 KiB/s (1000000 bytes/s)")
    assert f"  moved-0: {before[0].current_dir} -> {targets[0]} ({human_bytes(before[0].current_size)})" in out
    # Plain progress lines (no terminal): percent, bytes, rate, ETA, moves.
    progress = [line for line in out if line.startswith("moving: ")]
    assert len(progress) >= 3, done.stdout
    percents = [float(line.split()[1].rstrip("%")) for line in progress]
    assert percents == sorted(percents) and percents[-1] == 100.0
    assert all(" of " in line and "ETA" in line and "moves done" in line for line in progress)
    assert any("KiB/s" in line or "MiB/s" in line for line in progress[1:])
    assert progress[-1].split(",")[0].endswith(f"of {human_bytes(total)}")
    for p in (0, 1):
        assert any(line.startswith(f"  done: moved-{p} is in {targets[p]}") for line in out)
    assert f"Throttle removed from broker {server.node_id}." in out
    assert out[-1].startswith("Summary: 2 of 2 in place; moved ")
    # The throttle did hold the copy back: ~2.4 MB at 1 MB/s cannot take much less than 2.4 s.
    assert elapsed > 0.7 * total / 1_000_000

    # Moved for real, nothing lost, and the throttle is gone.
    for p in (0, 1):
        info = placement(server, "moved", p)
        assert info.current_dir == targets[p] and info.future_dir is None
        assert (Path(targets[p]) / f"moved-{p}").is_dir()
        assert not (Path(before[p].current_dir) / f"moved-{p}").exists()
        assert count_records(server, "moved", p) == 1200
    assert_no_throttle(server)


def test_move_restores_a_throttle_that_was_set_before(server, tmp_path):
    create_and_fill(server, "restored", 1, 300)
    resource = ConfigResource.broker(server.node_id)
    with admin(server) as a:
        a.incremental_alter_configs({resource: {THROTTLE_KEY: "5000000"}})
    try:
        target = other_dir(server, placement(server, "restored", 0).current_dir)
        done = kjbod(*move_args(server, write_plan(tmp_path, [("restored", 0, target)]), "--throttle", "2MiB",
                                "--report-interval", "0.3"))
        assert done.returncode == 0, done.stdout + done.stderr
        assert "the per-broker throttle was 4.8 MiB/s (5000000 bytes/s)" in done.stdout
        assert f"Throttle on broker {server.node_id} restored to 4.8 MiB/s (5000000 bytes/s)." in done.stdout
        entry = throttle_entry(server)
        assert (entry.value, entry.source) == ("5000000", ConfigSource.DYNAMIC_BROKER_CONFIG)
        assert placement(server, "restored", 0).current_dir == target
    finally:
        with admin(server) as a:
            a.incremental_alter_configs({resource: {THROTTLE_KEY: None}})
    assert_no_throttle(server)


def sigint_at_default() -> None:
    """(In the child, before exec.) SIGINT at its default disposition, as a command started in a terminal has it.
    A test run from a shell that ignores SIGINT (a background job) would otherwise hand the command an ignored
    SIGINT, and a Python process that inherits an ignored SIGINT never sees Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["SIGINT", "SIGTERM"])
def test_interrupted_move_removes_its_throttle(server, tmp_path, signum, code):
    topic = f"interrupted-{signum.name.lower()}"
    create_and_fill(server, topic, 1, 2500)
    target = other_dir(server, placement(server, topic, 0).current_dir)
    plan = write_plan(tmp_path, [(topic, 0, target)])
    process = subprocess.Popen([*KJBOD, *move_args(server, plan, "--throttle", "200KB", "--report-interval",
                                                   "0.2")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=sigint_at_default)
    try:
        lines = []
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if line.startswith("moving: ") and " 0.0%" not in line:
                break
        assert any(line.startswith("moving: ") for line in lines), "".join(lines) + process.stderr.read()
        # While it runs, the broker has the command's throttle...
        entry = throttle_entry(server)
        assert (entry.value, entry.source) == ("200000", ConfigSource.DYNAMIC_BROKER_CONFIG)
        process.send_signal(signum)
        rest, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == code, rest + err
    assert err == ""
    assert f"Interrupted: 1 move still running on broker {server.node_id}" in rest
    assert f"Throttle removed from broker {server.node_id}." in rest
    # ...and after it, none; the move itself goes on (now at full speed) and completes.
    assert_no_throttle(server)
    wait_until_placed(server, topic, 0, target)
    assert count_records(server, topic, 0) == 2500


def test_failed_partitions_are_reported_and_exit_1(server, tmp_path):
    create_and_fill(server, "mixed", 2, 100)
    current = placement(server, "mixed", 0).current_dir
    target = other_dir(server, current)
    plan = write_plan(tmp_path, [
        ("mixed", 0, target),
        ("ghost", 0, target),
        ("mixed", 1, "/not/a/log/dir"),
        ("mixed", 9, target),
    ])
    done = kjbod(*move_args(server, plan, "--wait", "--report-interval", "0.3"))
    assert done.returncode == 1, done.stdout + done.stderr
    errors = done.stderr.splitlines()
    dirs = ", ".join(str(d) for d in server.log_dirs)
    assert errors == [
        f"kjbod: error: ghost-0 -> {target}: UNKNOWN_TOPIC_OR_PARTITION: broker 1 knows no partition ghost-0",
        "kjbod: error: mixed-1 -> /not/a/log/dir: LOG_DIR_NOT_FOUND: /not/a/log/dir is not a log dir of broker 1 "
        f"(its log dirs: {dirs})",
        f"kjbod: error: mixed-9 -> {target}: UNKNOWN_TOPIC_OR_PARTITION: broker 1 knows no partition mixed-9",
    ]
    out = done.stdout.splitlines()
    assert out[-2].startswith("Summary: 1 of 4 in place; 3 failed; moved ")
    assert out[-1] == "Failed: ghost-0, mixed-1, mixed-9 (errors above)."
    # The good move was made all the same.
    assert placement(server, "mixed", 0).current_dir == target
    assert placement(server, "mixed", 1).current_dir != "/not/a/log/dir"


def test_move_without_wait_returns_at_once(server, tmp_path):
    create_and_fill(server, "background", 1, 200)
    target = other_dir(server, placement(server, "background", 0).current_dir)
    done = kjbod(*move_args(server, write_plan(tmp_path, [("background", 0, target)])))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "The moves run in the background." in done.stdout
    assert "moving: " not in done.stdout and "Throttle" not in done.stdout
    wait_until_placed(server, "background", 0, target)
    assert_no_throttle(server)


def test_move_to_where_it_already_is(server, tmp_path):
    create_and_fill(server, "stay", 1, 10)
    current = placement(server, "stay", 0).current_dir
    done = kjbod(*move_args(server, write_plan(tmp_path, [("stay", 0, current)]), "--wait"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"  stay-0: already in {current}" in done.stdout.splitlines()
    assert done.stdout.splitlines()[-1] == "Summary: 1 of 1 in place."


def test_move_on_an_unknown_broker_is_a_user_error(server, tmp_path):
    plan = write_plan(tmp_path, [("stay", 0, str(server.log_dirs[0]))])
    done = kjbod("log-dirs", "move", "--bootstrap-server", server.bootstrap, "--broker", "7",
                 "--assignment", str(plan), "--timeout", "5")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("kjbod: error: broker 7: BROKER_NOT_AVAILABLE")
    assert done.stderr.count("\n") == 1


def test_a_move_cancelled_on_the_broker_is_reported_and_exits_1(server, tmp_path):
    create_and_fill(server, "cancelled", 1, 2500)
    current = placement(server, "cancelled", 0).current_dir
    target = other_dir(server, current)
    process = subprocess.Popen([*KJBOD, *move_args(server, write_plan(tmp_path, [("cancelled", 0, target)]),
                                                   "--throttle", "200KB", "--report-interval", "0.2")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("moving: ") and " 0.0%" not in line:
                break
        # Someone else cancels the move (KIP-113: point the replica at the dir it is in).
        with admin(server) as a:
            assert a.alter_replica_log_dirs({("cancelled", 0, server.node_id): current}).errors() == {}
        rest, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 1, rest + err
    assert err.splitlines() == [
        f"kjbod: error: cancelled-0 -> {target}: the broker stopped this move; the replica stays in {current} "
        "(cancelled by another request, or the copy failed: see the broker's log)"]
    assert f"Throttle removed from broker {server.node_id}." in rest
    assert rest.splitlines()[-2].startswith("Summary: 0 of 1 in place; 1 failed")
    assert placement(server, "cancelled", 0).current_dir == current
    assert_no_throttle(server)


def test_progress_on_a_terminal_is_one_bar_redrawn(server, tmp_path):
    import pty

    create_and_fill(server, "on-a-tty", 1, 1500)
    target = other_dir(server, placement(server, "on-a-tty", 0).current_dir)
    plan = write_plan(tmp_path, [("on-a-tty", 0, target)])
    leader, follower = pty.openpty()
    process = subprocess.Popen([*KJBOD, *move_args(server, plan, "--throttle", "1MB")], stdout=follower,
                               stderr=follower, stdin=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "100"})
    os.close(follower)
    output = b""
    try:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the command exited and closed the terminal
                break
            if not chunk:
                break
            output += chunk
        assert process.wait(timeout=60) == 0
    finally:
        os.close(leader)
        if process.poll() is None:
            process.kill()
            process.wait()
    text = output.decode()
    # rich's bar, redrawn in place (cursor movements and line erases), within the terminal, ending at 100 %.
    assert "\x1b[2K" in text and "\u2501" in text
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    bars = [line for chunk in screen.split("\r") for line in chunk.split("\n") if line.startswith("moving ")]
    assert len(bars) >= 3, text
    assert all(len(b) <= 100 for b in bars)
    assert "100%" in bars[-1] and "1/1 moves" in bars[-1]
    assert "moving: " not in text  # no plain lines on a terminal
    assert "  done: on-a-tty-0 is in" in text and "Throttle removed from broker 1." in text
