"""Replication on a real cluster (`kjbod cluster up`: a controller and three brokers, two log dirs each), driven
by an idempotent acks=all confluent-kafka producer and checked record by record.

The checker: every acknowledged record is read back exactly once, in order per partition, and every record a
consumer read while the test ran is still at the same offset at the end (no consumer ever reads a record that
later disappears).  The cluster is this module's own (destructive tests: kill -9, SIGSTOP), with
min.insync.replicas=2 and short timers so fencing and ISR changes happen within seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from live import COMMAND, cluster_ports

from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import FetchRequest, OffsetForLeaderEpochRequest
from kjbod.storage.records import RECORD_BATCH_OVERHEAD, parse_header
from tests.cluster.conftest import WAIT_S, Cluster, wait_for
from tests.datapath.support import RawClient, batch, fetch, metadata, produce, write_faults

SESSION_MS = 3000
LAG_MS = 4000
PARTITIONS = 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("replication")
    command = [*COMMAND, "cluster", "up", "--detach", "--brokers", "3", "--log-dirs", "2", "--dir", str(root),
               *cluster_ports(3), "--set", "broker.heartbeat.interval.ms=300", "--set", f"broker.session.timeout.ms={SESSION_MS}",
               "--set", "min.insync.replicas=2", "--set", f"replica.lag.time.max.ms={LAG_MS}",
               "--set", "replica.fetch.wait.max.ms=200", "--set", "replica.fetch.backoff.ms=200"]
    cluster = Cluster(root, "")
    env = {**os.environ, "KJBOD_FAULTS": str(root / "faults.json")}  # the fault seam (kjbod.storage.fsio)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, f"cluster up failed:\n{done.stdout}{done.stderr}"
        cluster = Cluster(root, done.stdout)
        os.environ.setdefault("KJBOD_FAULTS", str(root / "faults.json"))  # for nodes restarted by the tests
        yield cluster
    finally:
        if os.environ.get("KJBOD_FAULTS") == str(root / "faults.json"):
            del os.environ["KJBOD_FAULTS"]
        for name in list(cluster.processes):
            cluster.processes[name].send_signal(signal.SIGCONT)
        subprocess.run([*COMMAND, "cluster", "down", "--dir", str(root)], capture_output=True, timeout=300)
        for process in cluster.processes.values():
            process.wait(WAIT_S)


def raw(cluster: Cluster, broker_id: int | None = None, avoid: frozenset[int] = frozenset()) -> RawClient:
    """A raw connection to `broker_id`, or to the first broker (not in `avoid`: a stopped broker's kernel still
    accepts connections) that answers."""
    for b in [broker_id] if broker_id is not None else [b for b in cluster.broker_ids if b not in avoid]:
        try:
            return RawClient("127.0.0.1", cluster.broker_port(b), timeout=30)
        except OSError:
            continue
    raise AssertionError("no broker answers")


def partitions(cluster: Cluster, topic: str, via: int | None = None,
               avoid: frozenset[int] = frozenset()) -> dict[int, Any]:
    with raw(cluster, via, avoid) as client:
        (t,) = metadata(client, [topic]).topics
    return {p.partition_index: p for p in t.partitions}


def create(cluster: Cluster, topic: str, count: int = PARTITIONS) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, count, 3)])[topic].result(30)
    # Every broker's view, not the first one that answers: a test's first request goes straight to the leader,
    # which must already lead (a broker that has not applied the new topic answers NOT_LEADER_OR_FOLLOWER).
    def ready(via: int) -> bool:
        parts = partitions(cluster, topic, via)
        return len(parts) == count and all(len(p.isr_nodes) == 3 and p.leader_id >= 0 for p in parts.values())

    wait_for(lambda: all(ready(b) for b in cluster.broker_ids),
             f"{topic} has {count} partitions with 3 in-sync replicas on every broker")


def broker_name(broker_id: int) -> str:
    return f"broker-{broker_id}"


class Checker:
    """An idempotent acks=all producer writing sequence numbers to every partition, and a consumer reading
    along; `verify()` checks what the module docstring says."""

    def __init__(self, cluster: Cluster, topic: str) -> None:
        self.cluster, self.topic = cluster, topic
        self.acked: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        self.read: dict[tuple[int, int], bytes] = {}  # (partition, offset) -> value, as consumers saw it
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._produce, daemon=True),
                         threading.Thread(target=self._consume, daemon=True)]

    def __enter__(self) -> Checker:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(120)

    def _produce(self) -> None:
        producer = Producer({"bootstrap.servers": self.cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5, "message.timeout.ms": 120_000, "retry.backoff.ms": 100,
                             "topic.metadata.refresh.interval.ms": 1000})

        def acked(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors.append(str(err))
            else:
                self.acked[msg.partition()].append(int(msg.value()))

        seq = 0
        while not self._stop.is_set():
            for p in range(PARTITIONS):
                producer.produce(self.topic, value=b"%d" % seq, partition=p, on_delivery=acked)
            seq += 1
            producer.poll(0.002)
        producer.flush(120)

    def _consume(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.cluster.bootstrap, "group.id": "checker",
                             "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 1000})
        consumer.assign([TopicPartition(self.topic, p, 0) for p in range(PARTITIONS)])
        try:
            while not self._stop.is_set():
                for m in consumer.consume(500, 0.2):
                    if m.error() is None:
                        self.read[(m.partition(), m.offset())] = m.value()
        finally:
            consumer.close()

    def acked_count(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def wait_for_more(self, n: int = 300) -> None:
        start = self.acked_count()
        wait_for(lambda: self.acked_count() >= start + n, f"{n} more acknowledged records")

    def verify(self) -> None:
        assert not self.errors, f"the producer failed: {self.errors[:5]}"
        final: dict[tuple[int, int], bytes] = {}
        consumer = Consumer({"bootstrap.servers": self.cluster.bootstrap, "group.id": "verify",
                             "enable.auto.commit": False})
        ends = {}
        for p in range(PARTITIONS):
            _, high = consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=30)
            ends[p] = high
        consumer.assign([TopicPartition(self.topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + WAIT_S
        while sum(1 for (p, o) in final if o < ends[p]) < sum(ends.values()) and time.monotonic() < deadline:
            for m in consumer.consume(1000, 0.5):
                if m.error() is None:
                    final[(m.partition(), m.offset())] = m.value()
        consumer.close()
        for p in range(PARTITIONS):
            at: dict[int, list[int]] = {}  # value -> the offsets holding it
            for (q, o) in sorted(final):
                if q == p:
                    at.setdefault(int(final[(q, o)]), []).append(o)
            twice = {v: offsets for v, offsets in at.items() if len(offsets) > 1}
            resent = self.resent_by_the_client(p, twice)
            if len(resent) < len(twice):
                # Where each copy sits, so the brokers' logs (replica_truncated, leader changes) can be read at it.
                kept = {v: offsets for v, offsets in twice.items() if v not in resent}
                raise AssertionError(f"partition {p}: a record was written twice: value -> offsets "
                                     f"{dict(list(kept.items())[:5])} ({len(kept)} values)")
            later = {o for offsets in resent.values() for o in offsets[1:]}
            values = [int(final[(q, o)]) for (q, o) in sorted(final) if q == p and o not in later]
            assert values == sorted(values), f"partition {p}: records out of order"
            missing = set(self.acked[p]) - set(values)
            assert not missing, f"partition {p}: {len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
        changed = [k for k, v in self.read.items() if final.get(k) != v]
        assert not changed, f"records a consumer read then disappeared or changed: {changed[:5]}"
        assert self.acked_count() > 0

    def resent_by_the_client(self, partition: int, twice: dict[int, list[int]]) -> dict[int, list[int]]:
        """Of the values written more than once, those whose every later copy is in a batch of a later producer
        epoch than the first copy's: the client itself sent them again as new records. librdkafka can do that
        (confluentinc/librdkafka#4953, open): after an error it counts as "not persisted" although the append
        happened (as NOT_ENOUGH_REPLICAS to a retry while the ISR is below min.insync.replicas: Kafka checks the
        ISR before the producer's sequence), an epoch bump that another partition's OUT_OF_ORDER_SEQUENCE_NUMBER
        started renumbers those records under the new epoch. No broker can tell them from new records (Kafka
        neither): the producer id's epoch moved on. A copy under the same epoch as the first is the broker's
        failure to deduplicate, and fails the check."""
        if not twice:
            return {}
        epochs: dict[int, tuple[int, int]] = {}  # offset -> (producer id, producer epoch) of its batch
        leader = leader_of(self.cluster, self.topic, partition)
        with raw(self.cluster, leader) as client:
            for offset in sorted({o for offsets in twice.values() for o in offsets}):
                if offset not in epochs:
                    records = fetch(client, self.topic, partition, offset).records or b""
                    pos = 0
                    while pos + RECORD_BATCH_OVERHEAD <= len(records):
                        h = parse_header(records, pos)
                        for o in range(h.base_offset, h.last_offset + 1):
                            epochs[o] = (h.producer_id, h.producer_epoch)
                        pos += h.size
        resent = client_resent(twice, epochs)
        if resent:
            print(f"partition {partition}: {len(resent)} values the client sent again under a new producer epoch "
                  f"(librdkafka#4953): value -> offsets {dict(list(resent.items())[:5])}")
        return resent


def client_resent(twice: dict[int, list[int]], epochs: dict[int, tuple[int, int]]) -> dict[int, list[int]]:
    """The values (of `twice`: value -> its offsets, in order) whose every later copy is in a batch of the
    same producer id as the first copy's and a later epoch (`epochs`: offset -> (producer id, epoch))."""
    out = {}
    for value, offsets in twice.items():
        first = epochs.get(offsets[0])
        if first is not None and all((e := epochs.get(o)) is not None and e[0] == first[0] and e[1] > first[1]
                                     for o in offsets[1:]):
            out[value] = offsets
    return out


def test_the_checker_excuses_only_copies_the_client_sent_under_a_later_epoch():
    """In process: what Checker.verify lets pass as the client's re-send (librdkafka#4953), and what not."""
    twice = {7: [10, 15], 8: [11, 16], 9: [12, 17], 10: [13, 18]}
    epochs = {10: (5, 0), 15: (5, 1),  # a later epoch of the same producer: the client's
              11: (5, 1), 16: (5, 1),  # the same epoch written twice: the broker's
              12: (5, 0), 17: (6, 1),  # another producer id
              13: (5, 1), 18: (5, 0)}  # the later copy under an older epoch
    assert client_resent(twice, epochs) == {7: [10, 15]}
    assert client_resent({7: [10, 15, 20]}, {10: (5, 0), 15: (5, 1)}) == {}  # a copy whose batch was not read


def leader_of(cluster: Cluster, topic: str, partition: int, avoid: frozenset[int] = frozenset()) -> int:
    return wait_for(lambda: (p := partitions(cluster, topic, avoid=avoid)[partition]).leader_id >= 0 and p.leader_id,
                    f"{topic}-{partition} has a leader")


def all_in_sync(cluster: Cluster, topic: str) -> bool:
    return all(len(p.isr_nodes) == 3 for p in partitions(cluster, topic).values())


@pytest.mark.parametrize("partition", [0, 1])
def test_kill_9_of_a_leaders_broker_and_its_restart_lose_nothing(cluster, partition):
    topic = f"kill-{partition}"
    create(cluster, topic)
    with Checker(cluster, topic) as checker:
        checker.wait_for_more()
        # Records acknowledged on the partition in epoch 0 (so epoch 0 ends above offset 0 on every ISR member)
        wait_for(lambda: checker.acked[partition], f"records acknowledged on {topic}-{partition}")
        victim = leader_of(cluster, topic, partition)
        cluster.signal(broker_name(victim), signal.SIGKILL)
        wait_for(lambda: leader_of(cluster, topic, partition) != victim, "a new leader is elected")
        checker.wait_for_more()
        cluster.start(broker_name(victim))
        wait_for(lambda: all_in_sync(cluster, topic), "the restarted broker is back in every ISR")
        checker.wait_for_more()
    checker.verify()
    if partition == 0:  # a follower still on the old leader epoch is fenced by the new leader
        p = partitions(cluster, topic)[0]
        assert p.leader_epoch >= 1
        assert follower_fetch(cluster, topic, victim, p.leader_epoch - 1, -1) == ErrorCode.FENCED_LEADER_EPOCH
        # OffsetForLeaderEpoch: where epoch 0 ended on the new leader, and fencing
        with raw(cluster, p.leader_id) as client:
            def ask(current: int, epoch: int) -> Any:
                req = OffsetForLeaderEpochRequest(replica_id=-2, topics=[OffsetForLeaderEpochRequest.OffsetForLeaderTopic(
                    topic=topic, partitions=[OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                        partition=0, current_leader_epoch=current, leader_epoch=epoch)])])
                return client.call(req, 4).topics[0].partitions[0]

            first = ask(p.leader_epoch, 0)
            assert (first.error_code, first.leader_epoch) == (0, 0) and first.end_offset > 0
            latest = ask(-1, p.leader_epoch)
            assert latest.leader_epoch == p.leader_epoch and latest.end_offset >= first.end_offset
            assert ask(p.leader_epoch - 1, 0).error_code == ErrorCode.FENCED_LEADER_EPOCH
            assert (ask(-1, p.leader_epoch + 5).leader_epoch, ask(-1, p.leader_epoch + 5).end_offset) == (-1, -1)


def test_a_stalled_leader_sigstop_then_sigcont_loses_nothing(cluster):
    topic = "stall"
    create(cluster, topic)
    with Checker(cluster, topic) as checker:
        checker.wait_for_more()
        victim = leader_of(cluster, topic, 0)
        name = broker_name(victim)
        pid = cluster.pid(name)
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_for(lambda: leader_of(cluster, topic, 0, frozenset({victim})) != victim,
                     "a new leader while the old one is stopped")
            checker.wait_for_more()
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_for(lambda: all_in_sync(cluster, topic), "the stalled broker is back in every ISR")
        checker.wait_for_more()
    checker.verify()


def test_a_former_leader_truncates_what_the_new_leader_never_had(cluster):
    """The followers of a partition are stopped briefly (less than the session timeout) after their last fetch
    came back; records written to the leader with acks=1 then exist only there; the leader is killed, a follower
    takes over, and the former leader, restarted, truncates them: no consumer ever sees them."""
    topic = "truncate"
    create(cluster, topic, 1)
    leader = leader_of(cluster, topic, 0)
    followers = [b for b in cluster.broker_ids if b != leader]
    with RawClient("127.0.0.1", cluster.broker_port(leader), timeout=30) as client:
        assert produce(client, topic, 0, batch([b"kept-%d" % i for i in range(10)]), acks=-1).error_code == 0
        pids = [cluster.pid(broker_name(b)) for b in followers]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(0.4)  # their long polls (replica.fetch.wait.max.ms=200) come back empty meanwhile
            assert produce(client, topic, 0, batch([b"lost-%d" % i for i in range(5)]), acks=1).error_code == 0
            cluster.signal(broker_name(leader), signal.SIGKILL)
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
    wait_for(lambda: partitions(cluster, topic, followers[0])[0].leader_id in followers, "a follower leads")
    cluster.start(broker_name(leader))
    wait_for(lambda: all_in_sync(cluster, topic), "the former leader is back in the ISR")
    assert "replica_truncated" in cluster.log(broker_name(leader))
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "t", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < 10 and time.monotonic() < deadline:
        values += [m.value() for m in consumer.consume(100, 0.5) if m.error() is None]
    values += [m.value() for m in consumer.consume(100, 1.0) if m.error() is None]
    consumer.close()
    assert values == [b"kept-%d" % i for i in range(10)]


def follower_fetch(cluster: Cluster, topic: str, replica: int, epoch: int, broker_epoch: int) -> int:
    """The error code the leader of `topic`-0 answers a follower fetch from `replica` with."""
    p = partitions(cluster, topic)[0]
    with raw(cluster, p.leader_id) as client:
        (t,) = metadata(client, [topic]).topics
        req = FetchRequest(replica_state=FetchRequest.ReplicaState(replica_id=replica, replica_epoch=broker_epoch),
                           max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=[FetchRequest.FetchTopic(
                               topic_id=t.topic_id, partitions=[FetchRequest.FetchPartition(
                                   partition=0, current_leader_epoch=epoch, fetch_offset=0, last_fetched_epoch=-1,
                                   partition_max_bytes=1 << 20)])])
        return client.call(req, 15).responses[0].partitions[0].error_code


def test_bad_follower_fetches_are_refused_as_kafka_does(cluster):
    topic = "bad-fetch"
    create(cluster, topic, 1)
    p = partitions(cluster, topic)[0]
    follower = next(b for b in p.replica_nodes if b != p.leader_id)
    epoch = p.leader_epoch
    assert follower_fetch(cluster, topic, follower, epoch, -1) == 0
    assert follower_fetch(cluster, topic, follower, epoch + 1, -1) == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert follower_fetch(cluster, topic, 99, epoch, -1) == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert follower_fetch(cluster, topic, 99, -1, -1) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert follower_fetch(cluster, topic, follower, epoch, 0) == ErrorCode.NOT_LEADER_OR_FOLLOWER  # stale epoch


def test_min_isr_with_two_brokers_down(cluster):
    """acks=all waits (REQUEST_TIMED_OUT) until the ISR has shrunk to the leader, then NOT_ENOUGH_REPLICAS;
    acks=1 still works."""
    topic = "min-isr"
    create(cluster, topic, 1)
    leader = leader_of(cluster, topic, 0)
    others = [b for b in cluster.broker_ids if b != leader]
    with RawClient("127.0.0.1", cluster.broker_port(leader), timeout=30) as client:
        assert produce(client, topic, 0, batch([b"a"]), acks=-1).error_code == 0
        for b in others:
            cluster.signal(broker_name(b), signal.SIGKILL)
        try:
            first = produce(client, topic, 0, batch([b"b"]), acks=-1)
            assert first.error_code in (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS)
            wait_for(lambda: partitions(cluster, topic, leader)[0].isr_nodes == [leader], "the ISR is the leader")
            assert produce(client, topic, 0, batch([b"c"]), acks=-1).error_code == ErrorCode.NOT_ENOUGH_REPLICAS
            assert produce(client, topic, 0, batch([b"d"]), acks=1).error_code == 0
        finally:
            for b in others:
                cluster.start(broker_name(b))
    wait_for(lambda: all_in_sync(cluster, topic), "both brokers back in the ISR")


def test_log_dirs_describe_shows_how_far_each_follower_is_behind(cluster):
    """`kjbod log-dirs describe --json`: each follower's lag behind its leader's end offset (0 once caught up;
    leaders show none).  How the lag is computed is in tests/replication/test_followers_behind.py."""
    import json

    topic = "behind"
    create(cluster, topic, 1)
    p = partitions(cluster, topic)[0]
    with RawClient("127.0.0.1", cluster.broker_port(p.leader_id), timeout=30) as client:
        assert produce(client, topic, 0, batch([b"x"] * 7), acks=-1).error_code == 0

    def behind() -> dict[int, Any]:
        done = subprocess.run([*COMMAND, "log-dirs", "describe", "--bootstrap-server", cluster.bootstrap,
                               "--topic-list", topic, "--json"], capture_output=True, text=True, timeout=120)
        document = json.loads(done.stdout)
        return {b["broker"]: r["behind_leader"] for b in document["brokers"] for d in b["log_dirs"]
                for r in d["partitions"] if r["topic"] == topic}

    wait_for(lambda: behind() == {b: (None if b == p.leader_id else 0) for b in p.replica_nodes},
             "followers 0 behind, the leader none")


def test_a_failed_log_dir_on_a_leaders_broker_moves_only_its_partitions(cluster):
    """One log dir of a leader's broker fails (the fault seam: every operation in it answers EIO) while the
    checker produces: that dir's partitions get new leaders among their in-sync followers, the broker keeps
    leading the partitions in its other dir, and no acknowledged record is lost.  The broker is then restarted
    with the disk back and catches up."""
    topic = "dir-fails"
    create(cluster, topic)
    faults = cluster.root / "faults.json"
    with Checker(cluster, topic) as checker:
        checker.wait_for_more()
        victim = leader_of(cluster, topic, 0)
        home = cluster.homes[broker_name(victim)]
        (doomed,) = [d for d in home.iterdir() if (d / f"{topic}-0").is_dir()]
        led_before = {i for i, p in partitions(cluster, topic).items() if p.leader_id == victim}
        in_doomed = {i for i in range(PARTITIONS) if (doomed / f"{topic}-{i}").is_dir()}
        write_faults(faults, [{"dir": str(doomed), "errno": "EIO"}])
        try:
            wait_for(lambda: all(partitions(cluster, topic)[i].leader_id not in (victim, -1) for i in in_doomed),
                     "the failed dir's partitions have new leaders")
            checker.wait_for_more()
            now = partitions(cluster, topic)
            kept = led_before - in_doomed
            assert all(now[i].leader_id == victim for i in kept), "the broker's other dir keeps leading"
            assert all(victim not in now[i].isr_nodes for i in in_doomed)
        finally:
            faults.unlink(missing_ok=True)
        cluster.signal(broker_name(victim), signal.SIGKILL)
        cluster.start(broker_name(victim))
        wait_for(lambda: all_in_sync(cluster, topic), "the broker is back in every ISR with its disk back")
        checker.wait_for_more()
    checker.verify()


def test_kip113_moves_on_a_follower_and_on_a_leader_while_producing(cluster):
    """AlterReplicaLogDirs moves partition 0's replica on a follower and partition 1's on its leader to the
    broker's other dir while the checker produces: both moves finish, the replicas stay in sync, nothing is lost."""
    from kjbod.protocol.generated import AlterReplicaLogDirsRequest as A

    topic = "moves"
    create(cluster, topic)
    with Checker(cluster, topic) as checker:
        checker.wait_for_more()
        now = partitions(cluster, topic)
        targets = [(next(b for b in now[0].replica_nodes if b != now[0].leader_id), 0), (now[1].leader_id, 1)]
        for broker, partition in targets:
            home = cluster.homes[broker_name(broker)]
            (source,) = [d for d in home.iterdir() if (d / f"{topic}-{partition}").is_dir()]
            (dest,) = [d for d in home.iterdir() if d.name.startswith("logs-") and d != source]
            with raw(cluster, broker) as client:
                answer = client.call(A(dirs=[A.AlterReplicaLogDir(path=str(dest), topics=[
                    A.AlterReplicaLogDirTopic(name=topic, partitions=[partition])])]), 2)
                assert answer.results[0].partitions[0].error_code == 0
            wait_for(lambda d=dest, p=partition: (d / f"{topic}-{p}").is_dir()
                     and not any(x.name.endswith("-future") for x in d.iterdir()), f"{topic}-{partition} moved")
        checker.wait_for_more()
        wait_for(lambda: all_in_sync(cluster, topic), "every replica in sync after the moves")
    checker.verify()
