"""kill -9 at each step of a move (KJBOD_FAILPOINTS), then restart: KIP-113's "handle failure".

For every failpoint the server dies by SIGKILL at that step (the failpoint sends it to its own process). After
a restart without the failpoint: every acknowledged batch is served byte for byte as before; the move has
finished (resumed from what was copied, or, once the source was renamed away, by promoting the future copy);
and once settled no ``-future`` or ``-delete`` dir remains. ``move_accepted`` kills the node after the request's
file work and before its answer (the client sees the connection drop; the move happens all the same);
``future_dir_created`` is reached when a mover thread takes the move, so there the move waits in the queue
behind another one (one mover thread), and the answer comes first.

A plain kill -9 with moves still queued (not started) loses none of them: an answered move has its ``-future``
dir already; after the restart DescribeLogDirs (kafka-python, kjbod's admin client, ``kjbod log-dirs describe``)
lists each of them once while they wait for the mover thread and while they run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import warnings
from collections import Counter

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaProducer
    from kafka.admin import NewTopic
    from kafka.errors import NoError

from live import COMMAND

from kjbod.broker.kip113.failpoints import POINTS
from kjbod.protocol.generated import AlterReplicaLogDirsRequest as ARD

from .livehelp import (
    RawClient,
    current_dir,
    fetch_all,
    fill_offline,
    kafka_admin,
    kjbod_replica_listing,
    partition_dirs,
    replica_listing,
    replicas,
    set_throttle,
    wait_moved,
)

pytestmark = pytest.mark.slow

RECORDS = 6000


def produce(server, topic: str, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, acks=-1, linger_ms=5)
    for i in range(count):
        producer.send(topic, b"%06d" % i + b"c" * 900, partition=0)
    producer.flush()
    producer.close()


@pytest.mark.parametrize("failpoint", POINTS)
def test_kill_at_failpoint_then_restart(failpoint, kjbod_server_factory, monkeypatch):
    queued = failpoint == "future_dir_created"  # the move waits behind "ahead": its 2nd hit is ours
    monkeypatch.setenv("KJBOD_FAILPOINTS", failpoint + ("@2" if queued else ""))
    overrides = {"log.segment.bytes": str(1 << 20), "log.segment.delete.delay.ms": "0"}
    if queued:
        overrides["num.replica.alter.log.dirs.threads"] = "1"
    server = kjbod_server_factory(overrides=overrides)
    admin = kafka_admin(server)
    admin.create_topics([NewTopic("crash", 1, 1)] + ([NewTopic("ahead", 1, 1)] if queued else []))
    produce(server, "crash", RECORDS)
    with RawClient(server.bootstrap) as raw:
        before = fetch_all(raw, "crash", 0, RECORDS)
    assert len(before) > 5 << 20  # several closed segments
    source = current_dir(admin, "crash", 0)
    dest = next(str(d) for d in server.log_dirs if str(d) != source)
    expected = {"crash-0"}
    if queued:
        produce(server, "ahead", 4000)
        set_throttle(admin, str(1 << 20))  # about 4 s for "ahead": "crash" is answered while it waits
        ahead_dest = next(str(d) for d in server.log_dirs if str(d) != current_dir(admin, "ahead", 0))
        assert list(admin.alter_replica_log_dirs({("ahead", 0, 1): ahead_dest}).values()) == [NoError]
        expected.add("ahead-0")
    if failpoint == "mid_segment_copy":
        set_throttle(admin, str(3 << 20))  # 64 KiB chunks: a segment takes several
    if failpoint == "move_accepted":
        request = ARD(dirs=[ARD.AlterReplicaLogDir(path=dest, topics=[
            ARD.AlterReplicaLogDirTopic(name="crash", partitions=[0])])])
        with RawClient(server.bootstrap) as raw, pytest.raises(ConnectionError):
            raw.call(request, 2)  # killed after the -future dir was made, before the answer
    else:
        result = admin.alter_replica_log_dirs({("crash", 0, 1): dest})
        assert list(result.values()) == [NoError]
    if queued:
        set_throttle(admin, None)  # "ahead" finishes, the thread takes "crash": the failpoint fires
    admin.close()
    code = server.process.wait(60)
    assert code == -signal.SIGKILL, f"the server should have died at {failpoint}: {server.stderr(20)}"
    assert f'"failpoint": "{failpoint}"' in server.stderr(50)

    monkeypatch.delenv("KJBOD_FAILPOINTS")
    server.start()
    admin = kafka_admin(server)
    wait_moved(admin, "crash", 0, dest, timeout=60)
    if queued:
        wait_moved(admin, "ahead", 0, ahead_dest, timeout=60)
    with RawClient(server.bootstrap) as raw:
        after = fetch_all(raw, "crash", 0, RECORDS)
    assert after == before
    # The log takes appends again, after the moved data.
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, acks=-1)
    assert producer.send("crash", b"after", partition=0).get(30).offset == RECORDS
    producer.close()
    admin.close()
    deadline = time.monotonic() + 15
    while True:
        names = [n for names in partition_dirs(server).values() for n in names]
        if sorted(names) == sorted(expected):
            break
        assert time.monotonic() < deadline, names
        time.sleep(0.2)
    assert "crash-0" in partition_dirs(server)[dest]


def cli_replica_listing(bootstrap: str, topic: str) -> list[tuple[str, int, bool, str]]:
    done = subprocess.run([*COMMAND, "log-dirs", "describe", "--bootstrap-server", bootstrap, "--topic-list", topic,
                           "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [(p["topic"], p["partition"], p["is_temporary"], d["path"])
            for b in json.loads(done.stdout)["brokers"] for d in b["log_dirs"] for p in d["partitions"]]


def test_kill_with_moves_queued_then_restart(kjbod_server_factory):
    # One mover thread and a throttle that keeps the first move busy for seconds: of the three moves one runs
    # and two wait in the queue when the node is killed. The answer said NONE for all three: after the restart
    # all three end up in their destination, every byte intact.
    server = kjbod_server_factory(overrides={"num.replica.alter.log.dirs.threads": "1",
                                             "log.segment.delete.delay.ms": "0"})
    admin = kafka_admin(server)
    admin.create_topics([NewTopic("q", 3, 1)])
    admin.close()
    fill_offline(server, "q", [0, 1, 2], 6 << 20, segment_bytes=2 << 20)
    admin = kafka_admin(server)
    with RawClient(server.bootstrap) as raw:
        before = {p: fetch_all(raw, "q", p, 10**9) for p in range(3)}
    assert all(len(data) > 4 << 20 for data in before.values())
    dests = {p: next(str(d) for d in server.log_dirs if str(d) != current_dir(admin, "q", p)) for p in range(3)}
    set_throttle(admin, str(1 << 20))  # about 6 s for the first move
    result = admin.alter_replica_log_dirs({("q", p, 1): dests[p] for p in range(3)})
    assert set(result.values()) == {NoError}
    admin.close()
    # Each move has its -future dir already; the queued ones hold nothing else yet.
    on_disk = partition_dirs(server)
    futures = {p: [n for n in on_disk[dests[p]] if n.startswith(f"q-{p}.") and n.endswith("-future")]
               for p in range(3)}
    assert all(len(names) == 1 for names in futures.values()), on_disk
    untouched = [p for p in range(3) if sorted(os.listdir(os.path.join(dests[p], futures[p][0])))
                 == ["partition.metadata"]]
    assert len(untouched) >= 2, "two moves should still be waiting for the one mover thread"
    # DescribeLogDirs shows every accepted move as a future replica in its destination, queued ones included
    # (empty, lagging by the whole log), as Kafka does once AlterReplicaLogDirs has created the future log.
    admin = kafka_admin(server)
    seen = replicas(admin, {"q": [0, 1, 2]})
    admin.close()
    for p in range(3):
        assert seen[("q", p, True)]["dir"] == dests[p] and seen[("q", p, True)]["lag"] > 0, seen
    # The two waiting for the thread are empty (the running one may have copied its first chunk by now).
    assert sum(seen[("q", p, True)]["size"] == 0 for p in range(3)) >= 2, seen
    server.process.kill()
    assert server.process.wait(30) == -signal.SIGKILL

    server.start()
    # The throttle stays (a dynamic config): the resumed moves wait for the one thread again, with the future
    # logs the loader opened. Each replica is listed once, through kafka-python and kjbod's admin client alike,
    # while they wait and while they run (faster from the fifth look on), until every move is done.
    admin = kafka_admin(server)
    looks = 0
    while True:
        listings = [replica_listing(admin, {"q": [0, 1, 2]}), kjbod_replica_listing(server.bootstrap, ["q"])]
        if looks == 0:
            listings.append(cli_replica_listing(server.bootstrap, "q"))  # `kjbod log-dirs describe --json`
        for listing in listings:
            counts = Counter((t, p, future) for t, p, future, _ in listing)
            assert all(n == 1 for n in counts.values()), listing
            assert {p for (_, p, future) in counts if not future} == {0, 1, 2}, listing
            assert all(d == dests[p] for _, p, future, d in listing if future), listing
        looks += 1
        if looks == 5:
            set_throttle(admin, str(8 << 20))
        if not any(future for (_, _, future) in counts) and all(
                d == dests[p] for _, p, future, d in listing if not future):
            break
        assert looks < 2000, listing
        time.sleep(0.05)
    set_throttle(admin, None)
    for p in range(3):
        wait_moved(admin, "q", p, dests[p], timeout=60)
    with RawClient(server.bootstrap) as raw:
        assert {p: fetch_all(raw, "q", p, 10**9) for p in range(3)} == before
    admin.close()
    deadline = time.monotonic() + 15
    while any(n.endswith(("-future", "-delete")) for names in partition_dirs(server).values() for n in names):
        assert time.monotonic() < deadline, partition_dirs(server)
        time.sleep(0.2)
