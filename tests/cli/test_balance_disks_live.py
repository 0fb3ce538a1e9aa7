"""`kjbod balance-disks` and cordoned log dirs (KIP-1066) on real `kjbod serve` processes, driven by real clients.

* three dirs, every partition moved onto one of them, a dry run that changes nothing, then `--execute
  --progress --throttle`: the replica bytes end within the threshold, the throttle is gone, and a kafka-python
  consumer reads every record back;
* a dir cordoned at runtime with kafka-python's AlterConfigs: DescribeLogDirs v5 says so, new topics avoid it, a
  move into it is refused, `balance-disks` empties it, and uncordoning opens it again;
* `cordoned.log.dirs=*`: the controller places nothing on the broker (INELIGIBLE_REPLICA for an explicit
  assignment);
* bad inputs answer with a sentence: an unknown broker, an entry that is not a log dir (at runtime and in
  server.properties), and a broker that is down.

All dirs here share one filesystem, so the plan balances replica bytes (and says so), except in the test that
makes them pass for three disks of their own (the fsio seam's fault file: each dir's size, free bytes and device
id), where it balances the filesystems' used fraction; tests/cli/test_balance_plan.py covers both in process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import warnings

import pytest
from live import format_storage, free_port, new_cluster_id, write_config

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
    from kafka.errors import IneligibleReplicaError, InvalidReplicationFactorError

from kjbod.protocol.generated import DescribeLogDirsRequest
from tests.kip113.livehelp import RawClient, kafka_admin, replicas, wait_moved

pytestmark = pytest.mark.slow

KJBOD = [sys.executable, "-m", "kjbod"]
CORDON = "cordoned.log.dirs"
THROTTLE = "replica.alter.log.dirs.io.max.bytes.per.second"


def kjbod(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KJBOD, *args], capture_output=True, text=True, timeout=timeout)


def balance(server, *args: str, min_move: str = "0") -> subprocess.CompletedProcess[str]:
    """balance-disks against `server`; by default every imbalance is worth a move (these dirs hold only KBs)."""
    return kjbod("balance-disks", "--bootstrap-server", server.bootstrap, "--min-move-bytes", min_move, *args)


def produce(server, topic: str, partitions: int, per_partition: int, size: int = 2000) -> dict[int, list[bytes]]:
    sent: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, acks=-1, linger_ms=5)
    for p in range(partitions):
        for i in range(per_partition):
            value = b"%s-%d-%06d-" % (topic.encode(), p, i) + b"x" * size
            producer.send(topic, value, partition=p)
            sent[p].append(value)
    producer.flush()
    producer.close()
    return sent


def consume_all(server, topic: str, partitions: int) -> dict[int, list[bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, enable_auto_commit=False, group_id=None,
                             consumer_timeout_ms=10_000)
    parts = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    ends = consumer.end_offsets(parts)
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + 120
    while any(len(got[tp.partition]) < ends[tp] for tp in parts) and time.monotonic() < deadline:
        for tp, records in consumer.poll(timeout_ms=1000).items():
            got[tp.partition] += [r.value for r in records]
    consumer.close()
    return got


def dir_bytes(server, topic: str | None = None) -> dict[str, int]:
    """Replica bytes per log dir (current replicas), from kafka-python's DescribeLogDirs."""
    admin = kafka_admin(server)
    try:
        seen = replicas(admin)
    finally:
        admin.close()
    out = {str(d): 0 for d in server.log_dirs}
    for (t, _p, future), info in seen.items():
        if not future and (topic is None or t == topic) and not t.startswith("__"):
            out[info["dir"]] += info["size"]
    return out


def dirs_of(server, topic: str) -> dict[int, str]:
    admin = kafka_admin(server)
    try:
        return {p: info["dir"] for (t, p, future), info in replicas(admin).items() if t == topic and not future}
    finally:
        admin.close()


def put_all_in(server, topic: str, partitions: int, target: str) -> None:
    admin = kafka_admin(server)
    try:
        admin.alter_replica_log_dirs({(topic, p, 1): target for p in range(partitions)})
        for p in range(partitions):
            wait_moved(admin, topic, p, target, timeout=120, server=server)
    finally:
        admin.close()


def set_broker_config(server, configs: dict[str, str]) -> None:
    admin = kafka_admin(server)
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "1", configs=configs)])
    finally:
        admin.close()


def per_broker_value(server, key: str) -> str | None:
    """This broker's own dynamic value of `key` (DescribeConfigs, through kjbod's admin client), or None."""
    from kjbod.admin import ConfigResource as Resource
    from kjbod.admin import ConfigSource, SyncAdminClient

    with SyncAdminClient(server.bootstrap, request_timeout=30) as admin:
        entry = admin.describe_configs([Resource.broker(1)], keys=[key])[Resource.broker(1)].get(key)
    return entry.value if entry is not None and entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG else None


def spread_of(loads: dict[str, int], paths: list[str]) -> float:
    total = sum(loads[p] for p in paths) or 1
    shares = [loads[p] / total for p in paths]
    return max(shares) - min(shares)


# ================================================================================================ spreading

def test_balance_disks_spreads_replicas_and_every_record_stays_readable(kjbod_server):
    server = kjbod_server
    paths = [str(p) for p in server.log_dirs]
    admin = kafka_admin(server)
    admin.create_topics([NewTopic("spread", 6, 1), NewTopic("small", 2, 1)])
    admin.close()
    sent = produce(server, "spread", 6, 150)
    produce(server, "small", 2, 10)
    put_all_in(server, "spread", 6, paths[0])
    put_all_in(server, "small", 2, paths[0])
    before = dir_bytes(server)
    assert before[paths[1]] == before[paths[2]] == 0 and before[paths[0]] > 6 * 150 * 2000

    # With the default minimum (64 MiB), a few hundred KB out of balance is not worth moving.
    small = balance(server, "--json", min_move="64MiB")
    assert small.returncode == 0, small.stderr
    [plan] = json.loads(small.stdout)["brokers"]
    assert plan["moves"] == [] and plan["problems"] == []
    assert any("under the minimum worth moving (64.0 MiB, --min-move-bytes): left as they are" in n
               for n in plan["notes"]), plan["notes"]

    dry = balance(server, "--json")
    assert dry.returncode == 0, dry.stderr
    [plan] = json.loads(dry.stdout)["brokers"]
    assert plan["mode"] == "replica-bytes" and "share a filesystem" in plan["mode_reason"]
    assert plan["moves"] and {m["from"] for m in plan["moves"]} == {paths[0]}
    assert {m["to"] for m in plan["moves"]} == {paths[1], paths[2]}
    assert plan["bytes_to_move"] >= plan["least_bytes"] > 0 and plan["spread_after"] <= 0.10
    assert dir_bytes(server) == before  # a dry run moves nothing

    table = balance(server)
    assert table.returncode == 0, table.stderr
    assert "Broker 1: balancing replica bytes: log dirs share a filesystem" in table.stdout
    assert "Dry run: nothing was moved" in table.stdout
    for m in plan["moves"]:
        assert f"{m['topic']}-{m['partition']}" in table.stdout

    run = balance(server, "--execute", "--progress", "--report-interval", "0.2", "--throttle", "20MiB",
                  "--max-moves-per-broker", "2")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Throttle on broker 1 set to 20.0 MiB/s" in run.stdout and "Throttle removed from broker 1." in run.stdout
    assert "moves done" in run.stdout and "spread now" in run.stdout
    assert "balancing broker 1: " in run.stdout and ", ETA " in run.stdout  # progress: bytes, rate, ETA
    after = dir_bytes(server)
    assert spread_of(after, paths) <= 0.10, after
    assert sum(after.values()) == sum(before.values())
    assert per_broker_value(server, THROTTLE) is None

    assert consume_all(server, "spread", 6) == sent

    again = balance(server, "--execute")
    assert again.returncode == 0 and "0 moves" in again.stdout  # balanced: nothing more to do


def test_dirs_on_filesystems_of_their_own_balance_the_used_fraction(kjbod_server_factory, tmp_path, monkeypatch):
    faults = tmp_path / "faults.json"
    monkeypatch.setenv("KJBOD_FAULTS", str(faults))
    server = kjbod_server_factory()
    paths = [str(p) for p in server.log_dirs]
    admin = kafka_admin(server)
    admin.create_topics([NewTopic("disks", 4, 1)])
    admin.close()
    produce(server, "disks", 4, 250)  # about 0.5 MB a partition
    put_all_in(server, "disks", 4, paths[0])
    mib = 1 << 20
    # Three 8 MiB disks (devices 101-103): 4.5, 2 and 2.5 MiB used, whatever the replicas take.
    faults.write_text(json.dumps({"faults": [
        {"dir": paths[0], "total_bytes": 8 * mib, "usable_bytes": 8 * mib - 4608 * 1024, "device": 101},
        {"dir": paths[1], "total_bytes": 8 * mib, "usable_bytes": 6 * mib, "device": 102},
        {"dir": paths[2], "total_bytes": 8 * mib, "usable_bytes": int(5.5 * mib), "device": 103}]}))
    deadline = time.monotonic() + 60
    while True:
        done = balance(server, "--json")
        [plan] = json.loads(done.stdout)["brokers"]
        if [d["fraction_before"] for d in plan["dirs"]] == [0.5625, 0.25, 0.3125]:
            break
        assert time.monotonic() < deadline, plan["dirs"]
        time.sleep(0.2)
    assert done.returncode == 0, done.stderr
    assert plan["mode"] == "filesystem" and "each log dir has a filesystem of its own" in plan["mode_reason"]
    assert plan["moves"] and {m["from"] for m in plan["moves"]} == {paths[0]}
    after = [d["fraction_after"] for d in plan["dirs"]]
    assert max(after) - min(after) <= 0.10 and plan["spread_after"] <= 0.10
    # The fractions are the disks' (used over size), and the emptiest disk takes the first move.
    moved = {p: sum(m["size"] for m in plan["moves"] if m["to"] == p) - sum(
        m["size"] for m in plan["moves"] if m["from"] == p) for p in paths}
    used = [4608 * 1024, 2 * mib, int(2.5 * mib)]
    assert after == [(used[i] + moved[p]) / (8 * mib) for i, p in enumerate(paths)]
    assert plan["moves"][0]["to"] == paths[1]


def test_watch_balances_again_whenever_the_dirs_drift_and_stops_cleanly(kjbod_server, tmp_path):
    """--watch --execute: balances what it finds, then a dir cordoned while it runs is emptied in a later round;
    SIGTERM stops it (exit 143) with its throttle removed."""
    server = kjbod_server
    paths = [str(p) for p in server.log_dirs]
    admin = kafka_admin(server)
    admin.create_topics([NewTopic("drift", 6, 1)])
    admin.close()
    sent = produce(server, "drift", 6, 60)
    put_all_in(server, "drift", 6, paths[0])
    out = tmp_path / "watch.out"
    with out.open("w") as sink:
        watcher = subprocess.Popen([*KJBOD, "balance-disks", "--bootstrap-server", server.bootstrap, "--watch", "0.3",
                                    "--execute", "--min-move-bytes", "0", "--throttle", "50MiB"],
                                   stdout=sink, stderr=subprocess.STDOUT, text=True)
    try:
        def settled(check) -> None:
            deadline = time.monotonic() + 120
            while not check(dir_bytes(server, "drift")):
                assert watcher.poll() is None, out.read_text()
                assert time.monotonic() < deadline, out.read_text()
                time.sleep(0.3)

        settled(lambda loads: spread_of(loads, paths) <= 0.10)
        set_broker_config(server, {CORDON: paths[2]})  # a disk to empty, while the watcher runs
        settled(lambda loads: loads[paths[2]] == 0 and spread_of(loads, paths[:2]) <= 0.10)
    finally:
        watcher.terminate()
        code = watcher.wait(60)
    text = out.read_text()
    assert code == 143, text
    assert "Watching every 0.3 s and moving" in text and "Broker 1 is out of balance:" in text
    assert "Throttle removed from broker 1." in text and "Traceback" not in text
    assert per_broker_value(server, THROTTLE) is None
    assert consume_all(server, "drift", 6) == sent


# ================================================================================================ cordoning

def test_a_cordoned_dir_gets_no_new_replicas_and_balance_disks_empties_it(kjbod_server):
    server = kjbod_server
    paths = [str(p) for p in server.log_dirs]
    admin = kafka_admin(server)
    admin.create_topics([NewTopic("old", 6, 1)])
    admin.close()
    sent = produce(server, "old", 6, 40)
    assert set(dirs_of(server, "old").values()) == set(paths)  # spread over all three

    set_broker_config(server, {CORDON: paths[1]})
    with RawClient(server.bootstrap) as raw:
        v5 = raw.call(DescribeLogDirsRequest(topics=None), 5)
        v4 = raw.call(DescribeLogDirsRequest(topics=None), 4)
    assert {r.log_dir: r.is_cordoned for r in v5.results} == {paths[0]: False, paths[1]: True, paths[2]: False}
    assert not any(r.is_cordoned for r in v4.results)  # v4 has no such field
    described = kjbod("log-dirs", "describe", "--bootstrap-server", server.bootstrap, "--json")
    [broker] = json.loads(described.stdout)["brokers"]
    assert [d["is_cordoned"] for d in broker["log_dirs"]] == [False, True, False]
    assert "online, cordoned" in kjbod("log-dirs", "describe", "--bootstrap-server", server.bootstrap).stdout

    admin = kafka_admin(server)
    admin.create_topics([NewTopic("fresh", 8, 1)])
    admin.close()
    assert paths[1] not in set(dirs_of(server, "fresh").values())

    # A move into the cordoned dir is refused; the replicas already there keep serving.
    assignment = server.directory / "into.json"
    victim = next(p for p, d in dirs_of(server, "old").items() if d != paths[1])
    assignment.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "old", "partition": victim, "log_dir": paths[1]}]}))
    refused = kjbod("log-dirs", "move", "--bootstrap-server", server.bootstrap, "--broker", "1",
                    "--assignment", str(assignment))
    assert refused.returncode == 1
    assert f"INELIGIBLE_REPLICA: {paths[1]} is cordoned on broker 1" in refused.stderr
    assert consume_all(server, "old", 6) == sent

    dry = balance(server, "--json")
    [plan] = json.loads(dry.stdout)["brokers"]
    assert [d["state"] for d in plan["dirs"]] == ["online", "cordoned", "online"]
    assert all(m["to"] != paths[1] for m in plan["moves"])
    assert {m["from"] for m in plan["moves"]} >= {paths[1]}
    run = balance(server, "--execute", "--json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert all(m["result"] == "done" for m in result["brokers"][0]["moves"])
    assert dir_bytes(server)[paths[1]] == 0
    assert paths[1] not in set(dirs_of(server, "old").values()) | set(dirs_of(server, "fresh").values())
    assert consume_all(server, "old", 6) == sent

    set_broker_config(server, {CORDON: ""})  # an empty list uncordons
    admin = kafka_admin(server)
    admin.create_topics([NewTopic("reopened", 3, 1)])
    admin.close()
    assert paths[1] in set(dirs_of(server, "reopened").values())  # the emptiest dir takes new ones again


def test_a_broker_whose_every_dir_is_cordoned_gets_no_new_replicas(kjbod_server):
    server = kjbod_server
    admin = kafka_admin(server)
    admin.create_topics([NewTopic("before", 2, 1)])
    admin.close()
    set_broker_config(server, {CORDON: "*"})
    admin = kafka_admin(server)
    try:
        deadline = time.monotonic() + 30
        while True:  # the controller hears of the cordon with the broker's next heartbeat
            try:
                admin.create_topics([NewTopic("nowhere", 1, 1)])
            except InvalidReplicationFactorError as e:
                assert "every log dir cordoned" in str(e)
                break
            admin.delete_topics(["nowhere"])
            assert time.monotonic() < deadline, "the controller kept placing replicas on a cordoned broker"
            time.sleep(0.5)
        with pytest.raises(IneligibleReplicaError) as e:
            admin.create_topics([NewTopic("named", replica_assignments={0: [1]})])
        assert "every log dir is cordoned" in str(e.value)
    finally:
        admin.close()
    # Its replicas stay and serve; balance-disks says there is nowhere to put them.
    assert len(dirs_of(server, "before")) == 2
    dry = balance(server)
    assert dry.returncode == 1
    assert "kjbod: error: broker 1: every online log dir is cordoned (" in dry.stderr
    assert "uncordon one (cordoned.log.dirs) first" in dry.stderr


# ================================================================================================ bad inputs

def test_bad_inputs_answer_with_a_sentence(kjbod_server):
    server = kjbod_server
    unknown = balance(server, "--broker-list", "9")
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == "kjbod: error: --broker-list: broker 9 is not in the cluster (its brokers: 1)"

    usage = balance(server, "--threshold", "0")
    assert usage.returncode == 2 and "the threshold must be more than 0" in usage.stderr

    admin = kafka_admin(server)
    try:
        answer = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "1",
                                                     configs={CORDON: "/no/such/dir"})])
    finally:
        admin.close()
    [[error]] = [list(by_name.values()) for by_name in answer.values()]
    assert str(error).startswith("[Error 40] InvalidConfigurationError: cordoned.log.dirs: '/no/such/dir' is not "
                                 "one of this broker's log dirs (log.dirs: "), answer
    assert per_broker_value(server, CORDON) is None

    server.stop()
    down = balance(server, "--timeout", "5")
    assert down.returncode == 2 and "cannot reach the cluster" in down.stderr
    assert "Traceback" not in down.stderr


def test_an_unknown_cordoned_dir_in_server_properties_stops_startup(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    ports = {"port": free_port(), "controller_port": free_port()}
    config = write_config(tmp_path / "server.properties", node_id=1, log_dirs=dirs, metadata_dir=tmp_path / "meta",
                          **ports)
    format_storage(config, new_cluster_id())
    write_config(config, node_id=1, log_dirs=dirs, metadata_dir=tmp_path / "meta",
                 overrides={CORDON: f"{dirs[1]},{tmp_path / 'c'}"}, **ports)
    done = kjbod("serve", "-c", str(config), timeout=60)
    assert done.returncode != 0
    message = done.stderr.strip().splitlines()[-1]
    assert f"cordoned.log.dirs: '{tmp_path / 'c'}' is not one of this broker's log dirs" in message
    assert "Traceback" not in done.stderr
