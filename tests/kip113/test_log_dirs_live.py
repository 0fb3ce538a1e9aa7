"""DescribeLogDirs and AlterReplicaLogDirs against a real `kjbod serve`, through kafka-python's admin client
(and a raw client for exact versions and requests no admin client builds).

Every error of the issue: LOG_DIR_NOT_FOUND (not a log dir, relative, with `..`, with a trailing slash, a file),
KAFKA_STORAGE_ERROR (offline destination), REPLICA_NOT_AVAILABLE (a known partition this node does not host),
UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION (future dir name over 255 characters); cancel, redirect,
"any", a remembered dir honoured at creation, duplicates, and a 10,000-partition request.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path

import pytest
from live import kafka_uuid, read_meta_properties

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaProducer
    from kafka.admin import NewTopic
    from kafka.errors import (
        InvalidTopicError,
        KafkaStorageError,
        LogDirNotFoundError,
        NoError,
        ReplicaNotAvailableError,
        UnknownTopicOrPartitionError,
    )

from kjbod.protocol.generated import (
    AlterReplicaLogDirsRequest,
    DescribeLogDirsRequest,
)
from kjbod.protocol.runtime import ZERO_UUID

from .livehelp import (
    RawClient,
    current_dir,
    fill_offline,
    kafka_admin,
    log_file_bytes,
    partition_dirs,
    replicas,
    seed_foreign_partition,
    set_throttle,
    wait_moved,
)

pytestmark = pytest.mark.slow

ARD = AlterReplicaLogDirsRequest
DLD = DescribeLogDirsRequest


def produce(server, topic: str, count: int, partition: int | None = None, size: int = 1000) -> None:
    p = KafkaProducer(bootstrap_servers=server.bootstrap, acks=-1, linger_ms=2)
    for i in range(count):
        p.send(topic, b"%06d" % i + b"v" * size, partition=partition if partition is not None else i % 3)
    p.flush()
    p.close()


def test_describe_log_dirs_reports_sizes_lags_and_volumes(kjbod_server):
    admin = kafka_admin(kjbod_server)
    admin.create_topics([NewTopic("d", 3, 1)])
    produce(kjbod_server, "d", 300)
    answer = admin.describe_log_dirs()
    [broker] = answer
    assert broker["broker"] == 1
    dirs = {d["log_dir"]: d for d in broker["log_dirs"]}
    assert sorted(dirs) == sorted(str(p) for p in kjbod_server.log_dirs)
    seen = 0
    for path, d in dirs.items():
        assert d["error_code"] == 0
        st = os.statvfs(path)
        assert d["total_bytes"] == st.f_blocks * st.f_frsize
        assert abs(d["usable_bytes"] - st.f_bavail * st.f_frsize) < 64 << 20
        for t in d["topics"]:
            for p in t["partitions"]:
                seen += 1
                assert p["offset_lag"] == 0 and p["is_future_key"] is False
                # size = the bytes of the replica's .log files on disk
                assert p["partition_size"] == log_file_bytes(Path(path, f"d-{p['partition_index']}"))
    assert seen == 3
    # Only the asked partitions; a partition this node lacks is simply absent.
    some = replicas(admin, {"d": [0, 7]})
    assert list(some) == [("d", 0, False)]
    admin.close()


def test_describe_log_dirs_every_version_and_the_directory_id_tag(kjbod_server):
    ids = {str(p): kafka_uuid(read_meta_properties(p)["directory.id"]) for p in kjbod_server.log_dirs}
    with RawClient(kjbod_server.bootstrap) as raw:
        for version in (1, 2, 3, 4):
            for asked in (False, True):
                r = raw.call(DLD(topics=None, include_directory_ids=asked), version)
                assert sorted(x.log_dir for x in r.results) == sorted(ids)
                for x in r.results:
                    assert x.error_code == 0
                    # v1 is not flexible: no tagged fields, so no id; v2+ carry it under tag 10000 when asked.
                    assert x.directory_id == (ids[x.log_dir] if asked and version >= 2 else ZERO_UUID)
                    assert (x.total_bytes > 0) == (version >= 4)
        empty = raw.call(DLD(topics=[]), 4)
    assert all(x.topics == [] for x in empty.results)


def test_move_with_kafka_python_and_watch_the_future_replica(kjbod_server):
    admin = kafka_admin(kjbod_server)
    admin.create_topics([NewTopic("m", 1, 1)])
    admin.close()
    fill_offline(kjbod_server, "m", [0], 24 << 20, segment_bytes=4 << 20)
    admin = kafka_admin(kjbod_server)
    source = current_dir(admin, "m", 0)
    dest = next(str(p) for p in kjbod_server.log_dirs if str(p) != source)
    size = replicas(admin, {"m": [0]})[("m", 0, False)]["size"]
    set_throttle(admin, str(8 << 20))  # ~3 s: long enough to watch
    result = admin.alter_replica_log_dirs({("m", 0, 1): dest})
    assert list(result.values()) == [NoError]
    sizes, lags = [], []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        seen = replicas(admin, {"m": [0]})
        fut = seen.get(("m", 0, True))
        if fut is None:
            if seen[("m", 0, False)]["dir"] == dest:
                break
        else:
            assert fut["dir"] == dest and seen[("m", 0, False)]["dir"] == source
            sizes.append(fut["size"])
            lags.append(fut["lag"])
        time.sleep(0.1)
    wait_moved(admin, "m", 0, dest, timeout=5)
    assert len(sizes) >= 5, "the future replica was visible during the move"
    assert sizes == sorted(sizes) and 0 < sizes[-1] <= size
    assert lags == sorted(lags, reverse=True) and lags[0] > 0
    assert replicas(admin, {"m": [0]})[("m", 0, False)]["size"] == size
    admin.close()


def test_alter_replica_log_dirs_errors(kjbod_server):
    admin = kafka_admin(kjbod_server)
    long_topic = "l" * 220  # legal (<= 249), but "<topic>-0.<32 hex>-future" is longer than 255
    admin.create_topics([NewTopic("e", 2, 1), NewTopic(long_topic, 1, 1)])
    d0, d1 = (str(p) for p in kjbod_server.log_dirs[:2])
    src = current_dir(admin, "e", 0)
    other = d1 if src != d1 else d0
    (Path(other) / "a-file").write_text("not a dir")
    cases = {
        "/not/a/log/dir": LogDirNotFoundError,
        os.path.relpath(other): LogDirNotFoundError,  # relative
        other + "/": LogDirNotFoundError,  # not normalised
        os.path.join(other, "..", os.path.basename(other)): LogDirNotFoundError,  # with ..
        os.path.join(other, "a-file"): LogDirNotFoundError,  # a file
    }
    for path, error in cases.items():
        got = admin.alter_replica_log_dirs({("e", 0, 1): path})
        assert list(got.values()) == [error], path
    got = admin.alter_replica_log_dirs({
        ("no-such-topic", 0, 1): d0,
        ("e", 5, 1): d0,  # a partition the topic does not have
        (long_topic, 0, 1): d0,
    })
    assert got[("no-such-topic", 0, 1)] is UnknownTopicOrPartitionError
    assert got[("e", 5, 1)] is UnknownTopicOrPartitionError
    assert got[(long_topic, 0, 1)] is InvalidTopicError
    # Nothing moved.
    assert current_dir(admin, "e", 0) == src
    admin.close()


def test_replica_not_available_for_a_partition_hosted_elsewhere(kjbod_server):
    seed_foreign_partition(kjbod_server, "elsewhere", 2)
    admin = kafka_admin(kjbod_server)
    got = admin.alter_replica_log_dirs({("elsewhere", 0, 1): str(kjbod_server.log_dirs[1])})
    assert list(got.values()) == [ReplicaNotAvailableError]
    assert partition_dirs(kjbod_server) == {str(d): [] for d in kjbod_server.log_dirs}
    admin.close()


def test_offline_destination_is_a_storage_error(kjbod_server_factory, tmp_path, monkeypatch):
    faults = tmp_path / "faults.json"
    monkeypatch.setenv("KJBOD_FAULTS", str(faults))
    server = kjbod_server_factory()
    admin = kafka_admin(server)
    bad = str(server.log_dirs[2])
    admin.create_topics([NewTopic("o", 1, 1)])
    produce(server, "o", 10, partition=0)
    src = current_dir(admin, "o", 0)
    good = next(str(d) for d in server.log_dirs if str(d) not in (src, bad))
    if src == bad:
        pytest.skip("placement put the partition in the dir this test fails")
    faults.write_text(json.dumps({"faults": [{"dir": bad, "errno": "EIO"}]}))
    # DescribeLogDirs touches the dir (statvfs): the seam sees the error and takes it offline.
    dirs = {d["log_dir"]: d for d in admin.describe_log_dirs()[0]["log_dirs"]}
    assert dirs[bad]["error_code"] == KafkaStorageError.errno and dirs[bad]["topics"] == []
    assert dirs[bad]["total_bytes"] == -1 and dirs[bad]["usable_bytes"] == -1
    got = admin.alter_replica_log_dirs({("o", 0, 1): bad})
    assert list(got.values()) == [KafkaStorageError]
    got = admin.alter_replica_log_dirs({("o", 0, 1): good})  # the good dirs still take moves
    assert list(got.values()) == [NoError]
    wait_moved(admin, "o", 0, good)
    admin.close()


def test_cancel_redirect_and_any(kjbod_server):
    admin = kafka_admin(kjbod_server)
    admin.create_topics([NewTopic("c", 3, 1)])
    admin.close()
    fill_offline(kjbod_server, "c", [0, 1, 2], 16 << 20, segment_bytes=2 << 20)
    admin = kafka_admin(kjbod_server)
    set_throttle(admin, str(2 << 20))
    dirs = [str(p) for p in kjbod_server.log_dirs]
    src = {p: current_dir(admin, "c", p) for p in range(3)}

    def others(p: int) -> list[str]:
        return [d for d in dirs if d != src[p]]

    def future_of(p: int):
        return replicas(admin, {"c": [p]}).get(("c", p, True))

    # c-0: destination = current dir cancels the move in progress (and deletes the future replica).
    assert list(admin.alter_replica_log_dirs({("c", 0, 1): others(0)[0]}).values()) == [NoError]
    _wait(lambda: future_of(0) is not None)
    assert list(admin.alter_replica_log_dirs({("c", 0, 1): src[0]}).values()) == [NoError]
    _wait(lambda: future_of(0) is None)
    assert current_dir(admin, "c", 0) == src[0]
    # c-1: "any" cancels too (KIP-113's extension).
    admin.alter_replica_log_dirs({("c", 1, 1): others(1)[0]})
    _wait(lambda: future_of(1) is not None)
    assert list(admin.alter_replica_log_dirs({("c", 1, 1): "any"}).values()) == [NoError]
    _wait(lambda: future_of(1) is None)
    assert current_dir(admin, "c", 1) == src[1]
    # c-2: a new destination during the move restarts it toward that dir.
    first, second = others(2)
    admin.alter_replica_log_dirs({("c", 2, 1): first})
    _wait(lambda: (f := future_of(2)) is not None and f["dir"] == first)
    admin.alter_replica_log_dirs({("c", 2, 1): second})
    _wait(lambda: (f := future_of(2)) is not None and f["dir"] == second)
    set_throttle(admin, None)
    wait_moved(admin, "c", 2, second)
    # A cancel for a partition that is not moving: accepted, nothing happens.
    assert list(admin.alter_replica_log_dirs({("c", 0, 1): src[0]}).values()) == [NoError]
    time.sleep(0.3)
    assert future_of(0) is None and current_dir(admin, "c", 0) == src[0]
    on_disk = partition_dirs(kjbod_server)
    assert not any(n.endswith("-future") for names in on_disk.values() for n in names)
    admin.close()


def _wait(cond, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_remembered_dir_is_used_when_the_partition_arrives(kjbod_server):
    admin = kafka_admin(kjbod_server)
    target = str(kjbod_server.log_dirs[1])
    got = admin.alter_replica_log_dirs({("later", p, 1): target for p in range(3)})
    # Kafka's answer for an unknown topic, and Kafka's behaviour: the dir is remembered all the same.
    assert set(got.values()) == {UnknownTopicOrPartitionError}
    admin.create_topics([NewTopic("later", 3, 1), NewTopic("spread", 3, 1)])
    assert {current_dir(admin, "later", p) for p in range(3)} == {target}
    # Without a remembered dir, placement spreads partitions over the three empty-ish dirs.
    assert len({current_dir(admin, "spread", p) for p in range(3)}) > 1
    admin.close()


def test_duplicates_and_ten_thousand_partitions_in_one_request(kjbod_server):
    admin = kafka_admin(kjbod_server)
    admin.create_topics([NewTopic("dup", 1, 1), NewTopic("many", 10, 1)])
    admin.close()
    dirs = [str(p) for p in kjbod_server.log_dirs]
    with RawClient(kjbod_server.bootstrap) as raw:
        src = raw.call(DLD(topics=[DLD.DescribableLogDirTopic(topic="dup", partitions=[0])]), 4)
        cur = next(r.log_dir for r in src.results if r.topics)
        first, last = [d for d in dirs if d != cur]
        # dup-0 named under two dirs: one answer, the last path wins (Kafka flattens to a map).
        req = ARD(dirs=[ARD.AlterReplicaLogDir(path=first, topics=[ARD.AlterReplicaLogDirTopic(name="dup", partitions=[0])]),
                        ARD.AlterReplicaLogDir(path=last, topics=[ARD.AlterReplicaLogDirTopic(name="dup", partitions=[0, 0])])])
        for version in (1, 2):
            resp = raw.call(req, version)
            assert [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions])
                    for t in resp.results] == [("dup", [(0, 0)])]
        _wait(lambda: any(r.log_dir == last and r.topics for r in
                          raw.call(DLD(topics=[DLD.DescribableLogDirTopic(topic="dup", partitions=[0])]), 4).results))
        # 10,000 partitions: 10 real ones (moved to where they are: nothing to do) and 9,990 unknown ones.
        big = ARD(dirs=[ARD.AlterReplicaLogDir(path=dirs[0], topics=[
            ARD.AlterReplicaLogDirTopic(name="many", partitions=list(range(10_000)))])])
        started = time.monotonic()
        resp = raw.call(big, 2)
        elapsed = time.monotonic() - started
        [topic] = resp.results
        codes = {p.partition_index: p.error_code for p in topic.partitions}
        assert len(topic.partitions) == 10_000 and sorted(codes) == list(range(10_000))
        assert {codes[p] for p in range(10)} == {0}
        assert {codes[p] for p in range(10, 10_000)} == {UnknownTopicOrPartitionError.errno}
        assert elapsed < 10
        # The server is fine afterwards, and the real partitions end up in dirs[0].
        _wait(lambda: all(r.log_dir == dirs[0] for r in raw.call(
            DLD(topics=[DLD.DescribableLogDirTopic(topic="many", partitions=list(range(10)))]), 4).results
            if r.topics), timeout=30)


def test_deleting_a_topic_while_it_moves_leaves_no_future_dir(kjbod_server):
    admin = kafka_admin(kjbod_server)
    admin.create_topics([NewTopic("gone", 1, 1)])
    admin.close()
    fill_offline(kjbod_server, "gone", [0], 16 << 20, segment_bytes=2 << 20)
    admin = kafka_admin(kjbod_server)
    set_throttle(admin, str(2 << 20))
    source = current_dir(admin, "gone", 0)
    dest = next(str(d) for d in kjbod_server.log_dirs if str(d) != source)
    admin.alter_replica_log_dirs({("gone", 0, 1): dest})
    _wait(lambda: ("gone", 0, True) in replicas(admin, {"gone": [0]}))
    admin.delete_topics(["gone"])
    _wait(lambda: not any(n.startswith("gone-0") and not n.endswith("-delete")
                          for names in partition_dirs(kjbod_server).values() for n in names))
    assert replicas(admin) == {}
    # The node is fine: a new topic of the same name can be created and moved.
    admin.create_topics([NewTopic("gone", 1, 1)])
    set_throttle(admin, None)
    now = current_dir(admin, "gone", 0)
    target = next(str(d) for d in kjbod_server.log_dirs if str(d) != now)
    admin.alter_replica_log_dirs({("gone", 0, 1): target})
    wait_moved(admin, "gone", 0, target)
    admin.close()


def test_a_move_on_the_combined_node_records_the_new_dir_before_its_swap(kjbod_server):
    """KIP-858's order on the combined node too: its in-process controller records the destination (the
    metadata log's last Directories of the partition name it) before the swap."""
    import subprocess

    from live import COMMAND

    admin = kafka_admin(kjbod_server)
    admin.create_topics([NewTopic("ordered", 1, 1)])
    produce(kjbod_server, "ordered", 50, partition=0)
    source = current_dir(admin, "ordered", 0)
    dest = next(str(p) for p in kjbod_server.log_dirs if str(p) != source)
    assert list(admin.alter_replica_log_dirs({("ordered", 0, 1): dest}).values()) == [NoError]
    wait_moved(admin, "ordered", 0, dest)
    admin.close()
    lines = [json.loads(line) for line in Path(kjbod_server.stderr_path).read_text().splitlines()
             if line.startswith("{") and '"ordered-0"' in line]
    order = [e["event"] for e in lines if e["event"] in ("replica_dir_assignment_confirmed", "replica_move_completed")]
    assert order == ["replica_dir_assignment_confirmed", "replica_move_completed"]
    segments = sorted((kjbod_server.metadata_dir / "__cluster_metadata-0").glob("*.log"))
    dumped = subprocess.run([*COMMAND, "dump-log", "--cluster-metadata-decoder", "--files",
                             ",".join(str(s) for s in segments)], capture_output=True, text=True, timeout=120)
    topic_id, last = None, None
    for line in dumped.stdout.splitlines():
        if " payload: {" not in line:
            continue
        record = json.loads(line.partition(" payload: ")[2])
        data = record["data"]
        if record["type"] == "TOPIC_RECORD" and data["name"] == "ordered":
            topic_id = data["topicId"]
        elif data.get("topicId") == topic_id and data.get("directories"):
            last = data["directories"]
    assert last == [read_meta_properties(Path(dest))["directory.id"]]
