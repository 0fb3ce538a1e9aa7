"""A real cluster: one controller and three brokers (three log dirs each) as separate `kjbod serve` processes,
started by `kjbod cluster up` from Kafka-style config files (conftest.py), driven with kafka-python,
confluent-kafka and raw requests: metadata spread over every broker, 60,000 keyed messages through each client,
a request to a broker that does not lead the partition, producer ids, a broker killed and restarted, a
controlled shutdown, and the controller killed and stopped while the brokers keep serving."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import warnings
from collections import Counter
from pathlib import Path

import pytest
from datapath.support import RawClient, batch, create_topic, fetch, fetch_all, list_offset, metadata, produce
from live import COMMAND, cluster_ports, read_meta_properties

from kjbod.cli.cluster import node_dirs, node_pid
from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import CreateTopicsRequest, DescribeClusterRequest, InitProducerIdRequest

from .conftest import Cluster, wait_for

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's import uses a deprecated importlib API
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KafkaTopicPartition

pytestmark = pytest.mark.slow

PARTITIONS = 12
MESSAGES = 60_000
CONSUME_TIMEOUT = 180.0


def raw_to(cluster: Cluster, broker_id: int) -> RawClient:
    return RawClient("127.0.0.1", cluster.broker_port(broker_id))


def leaders(cluster: Cluster, topic: str, via: int = 1) -> dict[int, int]:
    with raw_to(cluster, via) as raw:
        (t,) = metadata(raw, [topic]).topics
    assert t.error_code == 0, f"{topic}: {E(t.error_code).name}"
    return {p.partition_index: p.leader_id for p in t.partitions}


def known_everywhere(cluster: Cluster, topic: str) -> bool:
    for b in cluster.broker_ids:
        with raw_to(cluster, b) as raw:
            (t,) = metadata(raw, [topic]).topics
        if t.error_code != 0:
            return False
    return True


def new_topic(cluster: Cluster, name: str, partitions: int = PARTITIONS, via: int = 1) -> dict[int, int]:
    """Creates the topic through broker `via` and waits until every broker's metadata has it (the answer comes
    once the controller has it and `via` has applied it; the others follow the metadata log on their own)."""
    with raw_to(cluster, via) as raw:
        created = create_topic(raw, name, partitions)
    assert created.error_code == 0, created.error_message
    wait_for(lambda: known_everywhere(cluster, name), f"every broker knows {name}")
    led = leaders(cluster, name, via)
    # A broker applies the image before its dir workers have created the logs (Kafka too answers a client in that
    # moment with a retriable error): wait until each leader hosts its partitions.
    wait_for(lambda: all(hosted(cluster, name, p, b) for p, b in led.items()), f"the leaders host {name}")
    return led


def hosted(cluster: Cluster, topic: str, partition: int, broker: int) -> bool:
    with raw_to(cluster, broker) as raw:
        return list_offset(raw, topic, partition, -1).error_code == 0


def key_of(i: int) -> bytes:
    return b"key-%d" % i


def check_consumed(consumed: dict[int, list[tuple[int, bytes, bytes]]], ends: dict[int, int]) -> None:
    """Every message exactly once, offsets 0..end-1 in each partition, in send order per partition."""
    keys: Counter[bytes] = Counter()
    for p, records in consumed.items():
        assert [r[0] for r in records] == list(range(ends[p])), f"partition {p}: offsets are not 0..{ends[p] - 1}"
        sent = [int(r[1].split(b"-")[1]) for r in records]
        assert sent == sorted(sent), f"partition {p}: out of send order"
        for _offset, key, value in records:
            assert value == b"value of " + key
            keys[key] += 1
    assert sum(keys.values()) == MESSAGES and set(keys) == {key_of(i) for i in range(MESSAGES)}


def test_cluster_up_writes_kafka_configs_and_every_broker_is_unfenced(cluster):
    assert f"bootstrap.servers={cluster.bootstrap}" in cluster.up_output.splitlines()
    controller = cluster.properties("controller")
    assert controller["process.roles"] == "controller"
    for b in cluster.broker_ids:
        props = cluster.properties(f"broker-{b}")
        assert props["process.roles"] == "broker" and props["node.id"] == str(b)
        assert len(props["log.dirs"].split(",")) == 3
        assert props["controller.quorum.bootstrap.servers"] == controller["listeners"].partition("//")[2]
    assert cluster.broker_ids == [1, 2, 3]
    for b in cluster.broker_ids:
        with raw_to(cluster, b) as raw:
            md = metadata(raw, None)
            assert sorted(n.node_id for n in md.brokers) == [1, 2, 3]
            assert md.controller_id in (1, 2, 3)  # a live broker (KIP-590)
            dc = raw.call(DescribeClusterRequest(include_fenced_brokers=True), 2)
            assert sorted((n.broker_id, n.is_fenced) for n in dc.brokers) == [(1, False), (2, False), (3, False)]


def test_kafka_python_60000_keyed_messages_on_three_brokers(cluster):
    topic = "kp-keyed"
    assert set(new_topic(cluster, topic, via=2).values()) == {1, 2, 3}, "leaders are not on every broker"
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=10, batch_size=64 * 1024)
    try:
        futures = [producer.send(topic, key=key_of(i), value=b"value of " + key_of(i)) for i in range(MESSAGES)]
        producer.flush(120)
        for f in futures:
            f.get(timeout=0)
    finally:
        producer.close(timeout=10)
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", max_poll_records=5000)
    try:
        tps = [KafkaTopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        ends = {tp.partition: n for tp, n in consumer.end_offsets(tps).items()}
        out: dict[int, list[tuple[int, bytes, bytes]]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + CONSUME_TIMEOUT
        while sum(len(v) for v in out.values()) < sum(ends.values()):
            assert time.monotonic() < deadline, "kafka-python did not get every record in time"
            for tp, records in consumer.poll(timeout_ms=1000).items():
                out[tp.partition].extend((r.offset, r.key, r.value) for r in records)
        assert not any(consumer.poll(timeout_ms=200).values()), "records past the end offsets"
    finally:
        consumer.close()
    check_consumed(out, ends)


def test_confluent_kafka_60000_keyed_messages_on_three_brokers(cluster):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
    from confluent_kafka import TopicPartition as CTopicPartition

    topic = "ck-keyed"
    assert set(new_topic(cluster, topic, via=3).values()) == {1, 2, 3}
    errors: list = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 10,
                         "enable.idempotence": True, "log_level": 3})
    for i in range(MESSAGES):
        while True:
            try:
                producer.produce(topic, key=key_of(i), value=b"value of " + key_of(i),
                                 on_delivery=lambda err, _msg: err is None or errors.append(err))
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(120) == 0 and not errors, errors[:3]
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "kjbod-cluster-test",
                         "enable.auto.commit": False, "log_level": 3})
    try:
        ends = {p: consumer.get_watermark_offsets(CTopicPartition(topic, p), timeout=10)[1]
                for p in range(PARTITIONS)}
        consumer.assign([CTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        out: dict[int, list[tuple[int, bytes, bytes]]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + CONSUME_TIMEOUT
        while sum(len(v) for v in out.values()) < sum(ends.values()):
            assert time.monotonic() < deadline, "confluent-kafka did not get every record in time"
            for msg in consumer.consume(num_messages=5000, timeout=1.0):
                assert msg.error() is None, msg.error()
                out[msg.partition()].append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    check_consumed(out, ends)


def test_a_request_to_a_broker_that_does_not_lead_answers_not_leader_or_follower(cluster):
    topic = "wrong-broker"
    led = new_topic(cluster, topic, 6)
    p, leader = next((p, b) for p, b in led.items() if b == 1)
    with raw_to(cluster, 2) as raw:
        assert produce(raw, topic, p, batch([b"x"])).error_code == E.NOT_LEADER_OR_FOLLOWER
        assert fetch(raw, topic, p, 0).error_code == E.NOT_LEADER_OR_FOLLOWER
        assert list_offset(raw, topic, p, -1).error_code == E.NOT_LEADER_OR_FOLLOWER
    with raw_to(cluster, leader) as raw:
        assert produce(raw, topic, p, batch([b"x"])).error_code == 0
    # A client that knows only broker 2 finds every leader by itself.
    producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{cluster.broker_port(2)}", acks="all")
    try:
        for q in range(6):
            producer.send(topic, value=b"y", partition=q).get(timeout=60)
    finally:
        producer.close(timeout=10)


def test_producer_ids_from_two_brokers_never_collide(cluster):
    ids = []
    for b in (1, 2, 1, 2):
        with raw_to(cluster, b) as raw:
            for _ in range(3):
                resp = raw.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=-1), 4)
                assert resp.error_code == 0
                ids.append((b, resp.producer_id))
    assert len({pid for _, pid in ids}) == len(ids), ids


def test_a_killed_broker_is_fenced_then_restarts_with_a_new_incarnation_and_serves_its_data(cluster):
    topic = "fencing"
    led = new_topic(cluster, topic)
    on3 = [p for p, b in led.items() if b == 3]
    assert on3
    for p, b in led.items():
        with raw_to(cluster, b) as raw:
            assert produce(raw, topic, p, batch([b"%d-%d" % (p, i) for i in range(50)])).error_code == 0
    before = re.findall(r'"incarnation": "([0-9a-f-]+)"', cluster.log("broker-3"))
    cluster.signal("broker-3", signal.SIGKILL)
    wait_for(lambda: all(leaders(cluster, topic)[p] == -1 for p in on3), "broker 3's partitions without a leader")
    with raw_to(cluster, 1) as raw:
        assert 3 not in [n.node_id for n in metadata(raw, None).brokers]
        dc = raw.call(DescribeClusterRequest(include_fenced_brokers=True), 2)  # KIP-1073
        assert sorted((n.broker_id, n.is_fenced) for n in dc.brokers) == [(1, False), (2, False), (3, True)]
    # Fenced by the controller's session expiry (broker.session.timeout.ms from its own config), not by anything
    # the dead broker said.
    assert re.search(r'"broker_id": 3, "effect": "fenced", "event": "broker_session_expired"', cluster.log("controller"))
    with raw_to(cluster, 1) as raw:
        assert produce(raw, topic, on3[0], batch([b"z"])).error_code == E.NOT_LEADER_OR_FOLLOWER
    cluster.start("broker-3")
    after = re.findall(r'"incarnation": "([0-9a-f-]+)"', cluster.log("broker-3"))
    assert len(set(after)) == len(set(before)) + 1, "the restarted broker did not register a new incarnation"
    wait_for(lambda: all(leaders(cluster, topic)[p] == 3 for p in on3), "broker 3 leads its partitions again")
    with raw_to(cluster, 3) as raw:
        for p in on3:
            assert [r.value for r in fetch_all(raw, topic, p)] == [b"%d-%d" % (p, i) for i in range(50)]
    # SIGTERM: a controlled shutdown (leadership moved away first), exit code 0; then back again.
    assert cluster.signal("broker-3", signal.SIGTERM) == 0
    assert "controlled_shutdown_complete" in cluster.log("broker-3")
    cluster.start("broker-3")
    wait_for(lambda: all(leaders(cluster, topic)[p] == 3 for p in on3), "broker 3 leads its partitions again")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_brokers_serve_what_they_lead_while_the_controller_is_away(cluster, sig):
    topic = f"controller-away-{sig.name.lower()}"
    led = new_topic(cluster, topic, 6)
    code = cluster.signal("controller", sig)
    if sig == signal.SIGTERM and code is not None:
        assert code == 0
    for p, b in led.items():
        with raw_to(cluster, b) as raw:
            assert produce(raw, topic, p, batch([b"while away"])).error_code == 0
            assert [r.value for r in fetch_all(raw, topic, p)] == [b"while away"]
    with raw_to(cluster, 2) as raw:  # what only the controller can do is answered, with the reason
        refused = raw.call(CreateTopicsRequest(timeout_ms=500, topics=[CreateTopicsRequest.CreatableTopic(
            name=f"{topic}-refused", num_partitions=1, replication_factor=1)]), 7).topics[0]
        assert refused.error_code == E.REQUEST_TIMED_OUT and "controller" in refused.error_message
    cluster.start("controller")
    # The restarted controller replayed its log: it knows the topic, every broker is back in its session, and a
    # topic created now gets leaders on all of them.
    after = new_topic(cluster, f"{topic}-after", via=2)
    assert set(after.values()) == {1, 2, 3}
    assert leaders(cluster, topic) == led
    for b in cluster.broker_ids:
        with raw_to(cluster, b) as raw:
            assert sorted(n.node_id for n in metadata(raw, None).brokers) == [1, 2, 3]


UNASSIGNED = "AAAAAAAAAAAAAAAAAAAAAQ"  # KIP-858's reserved dir id, in Kafka's uuid text form


def dumped_directories(cluster: Cluster, topic: str) -> dict[int, list[dict[int, str]]]:
    """`kjbod dump-log --cluster-metadata-decoder` on the controller's metadata log: for each partition of `topic`,
    the Directories (broker -> dir id) each of its PartitionRecord / PartitionChangeRecord left, in log order."""
    segments = sorted((cluster.homes["controller"] / "metadata" / "__cluster_metadata-0").glob("*.log"))
    done = subprocess.run([*COMMAND, "dump-log", "--cluster-metadata-decoder", "--files",
                           ",".join(str(s) for s in segments)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    topic_id = None
    replicas: dict[int, list[int]] = {}
    history: dict[int, list[dict[int, str]]] = {}
    for line in done.stdout.splitlines():
        if " payload: {" not in line:
            continue
        record = json.loads(line.partition(" payload: ")[2])
        data = record["data"]
        if record["type"] == "TOPIC_RECORD" and data["name"] == topic:
            topic_id = data["topicId"]
        elif record["type"] in ("PARTITION_RECORD", "PARTITION_CHANGE_RECORD") and data["topicId"] == topic_id:
            p = data["partitionId"]
            replicas[p] = data.get("replicas") or replicas[p]
            if data.get("directories"):
                history.setdefault(p, []).append(dict(zip(replicas[p], data["directories"], strict=True)))
    return history


def on_disk(cluster: Cluster, topic: str) -> dict[int, dict[int, str]]:
    """For each partition of `topic`: broker -> the directory.id of the log dir its replica is in on disk."""
    out: dict[int, dict[int, str]] = {}
    for b in cluster.broker_ids:
        for path in cluster.properties(f"broker-{b}")["log.dirs"].split(","):
            dir_id = read_meta_properties(Path(path))["directory.id"]
            for d in Path(path).glob(f"{topic}-*"):
                if d.name.rpartition("-")[2].isdigit():  # not a move's -future or -delete dir
                    out.setdefault(int(d.name.rpartition("-")[2]), {})[b] = dir_id
    return out


def assigned(cluster: Cluster, topic: str, partitions: int) -> tuple[dict[int, dict[int, str]],
                                                                     dict[int, list[dict[int, str]]]]:
    """Waits until every replica of `topic` is on disk and the metadata log's last Directories of every partition
    name the dir it is in; returns (the dirs on disk, the Directories history)."""
    placed = wait_for(lambda: (d := on_disk(cluster, topic)) and len(d) == partitions and d, "every replica on disk")
    history = wait_for(lambda: (h := dumped_directories(cluster, topic)) and all(
        p in h and h[p][-1] == placed[p] for p in placed) and h, "every partition's Directories = its dir on disk")
    return placed, history


def test_new_partitions_on_3_dir_brokers_go_from_unassigned_to_the_dir_they_are_in_on_disk(cluster):
    """KIP-858: each broker places its new replicas and reports the dir with AssignReplicasToDirs; the controller's
    metadata log ends with every partition's Directories naming the dir its replica is really in."""
    topic = "assigned-dirs"
    new_topic(cluster, topic, 30)
    placed, history = assigned(cluster, topic, 30)
    assert {b for dirs in placed.values() for b in dirs} == {1, 2, 3}
    assert len({i for dirs in placed.values() for i in dirs.values()}) > 3, "the replicas are all in one dir each"
    for p, dirs in history.items():
        assert set(dirs[0].values()) == {UNASSIGNED}, f"partition {p} did not start UNASSIGNED: {dirs}"
        assert UNASSIGNED not in dirs[-1].values()
    for b in cluster.broker_ids:
        assert "directory_assignments_queued" in cluster.log(f"broker-{b}")


def test_a_replica_moved_by_hand_while_its_broker_was_down_is_reported_before_it_is_unfenced(cluster):
    topic = "moved-by-hand"
    led = new_topic(cluster, topic, 6)
    placed, _ = assigned(cluster, topic, 6)
    p = next(p for p, b in led.items() if b == 3)
    dirs = {read_meta_properties(Path(d))["directory.id"]: Path(d)
            for d in cluster.properties("broker-3")["log.dirs"].split(",")}
    source = dirs[placed[p][3]]
    target_id, target = next((i, d) for i, d in dirs.items() if d != source)
    with raw_to(cluster, 3) as raw:
        assert produce(raw, topic, p, batch([b"before the move"])).error_code == 0
    assert cluster.signal("broker-3", signal.SIGTERM) in (0, None)
    (source / f"{topic}-{p}").rename(target / f"{topic}-{p}")
    mark = len(cluster.log("broker-3"))
    cluster.start("broker-3")
    _, history = assigned(cluster, topic, 6)
    assert history[p][-1] == {3: target_id}
    restart = cluster.log("broker-3")[mark:]
    # KIP-858's gate: the assignment queued, confirmed, and only then the broker unfenced.
    queued, complete = restart.find("directory_assignments_queued"), restart.find("directory_assignments_complete")
    assert -1 < queued < complete < restart.find("unfenced: RUNNING"), restart
    wait_for(lambda: leaders(cluster, topic)[p] == 3, "broker 3 leads the moved partition again")
    with raw_to(cluster, 3) as raw:
        assert [r.value for r in fetch_all(raw, topic, p)] == [b"before the move"]


def test_cluster_down_then_up_again_keeps_the_data(cluster):
    """Last in this module: the whole cluster stopped with `kjbod cluster down` and started again on its dir."""
    topic = "kept-across-restart"
    led = new_topic(cluster, topic, 6)
    for p, b in led.items():
        with raw_to(cluster, b) as raw:
            assert produce(raw, topic, p, batch([b"kept %d" % p])).error_code == 0
    down = subprocess.run([*COMMAND, "cluster", "down", "--dir", str(cluster.root)], capture_output=True, text=True,
                          timeout=300)
    assert down.returncode == 0 and "stopped: " in down.stdout, down.stderr
    for process in cluster.processes.values():
        assert process.wait(60) == 0  # brokers first (controlled shutdown), then the controller: all exit 0
    cluster.processes.clear()
    assert all(node_pid(home) is None for home in cluster.homes.values())
    up = subprocess.run([*COMMAND, "cluster", "up", "--detach", "--dir", str(cluster.root)], capture_output=True,
                        text=True, timeout=300)
    assert up.returncode == 0, up.stderr
    assert "again with its data" in up.stdout and f"bootstrap.servers={cluster.bootstrap}" in up.stdout
    assert leaders(cluster, topic) == led
    for p, b in led.items():
        with raw_to(cluster, b) as raw:
            assert [r.value for r in fetch_all(raw, topic, p)] == [b"kept %d" % p]
    # Started twice: every node is running, so nothing is started and the running cluster is left alone.
    pids = {name: node_pid(home) for name, home in cluster.homes.items()}
    again = subprocess.run([*COMMAND, "cluster", "up", "--detach", "--dir", str(cluster.root)], capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert f"already running: {', '.join(f'{name} (pid {pid})' for name, pid in pids.items())}\n" in again.stdout
    assert "nothing to start" in again.stdout and "started: " not in again.stdout
    assert {name: node_pid(home) for name, home in cluster.homes.items()} == pids
    assert leaders(cluster, topic) == led


def test_cluster_up_in_the_foreground_stops_every_node_when_its_terminal_goes_away(tmp_path):
    up = subprocess.Popen([*COMMAND, "cluster", "up", "--brokers", "1", "--log-dirs", "2", "--dir", str(tmp_path),
                           *cluster_ports(1)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        while not lines or not lines[-1].startswith("bootstrap.servers="):
            line = up.stdout.readline()
            assert line, f"cluster up ended early: {up.stderr.read()}"
            lines.append(line.strip())
        port = int(lines[-1].rpartition(":")[2])
        with RawClient("127.0.0.1", port) as raw:
            assert [n.node_id for n in metadata(raw, None).brokers] == [1]
        pids = [node_pid(home) for home in node_dirs(tmp_path)]
        assert all(pids) and len(pids) == 2
        up.send_signal(signal.SIGHUP)
        out, err = up.communicate(timeout=120)
        assert up.returncode == 0, err
        assert "stopped: broker-1, controller" in out
        assert not any(Path(f"/proc/{pid}").exists() for pid in pids)
    finally:
        if up.poll() is None:
            up.kill()
            up.communicate()


def broker_events(cluster: Cluster, broker_id: int, since: int = 0) -> list[dict]:
    """The broker's JSON log lines from character `since` of its server.log on."""
    out = []
    for line in cluster.log(f"broker-{broker_id}")[since:].splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def test_a_kip113_move_updates_directories_before_its_swap(cluster):
    """KIP-858's order for an intra-broker move on a broker-only node: once the future replica has caught up the
    broker sends AssignReplicasToDirs, and only after the controller has confirmed it does it swap; the metadata
    log's last Directories of the partition name the dir the replica is in on disk after the move."""
    from kjbod.protocol.generated import AlterReplicaLogDirsRequest

    topic = "moved-live"
    led = new_topic(cluster, topic, 6)
    placed, _ = assigned(cluster, topic, 6)
    p = next(p for p, b in led.items() if b == 2)
    dirs = {read_meta_properties(Path(d))["directory.id"]: d
            for d in cluster.properties("broker-2")["log.dirs"].split(",")}
    target_id, target = next((i, d) for i, d in dirs.items() if i != placed[p][2])
    values = [b"record %d" % i for i in range(200)]
    mark = len(cluster.log("broker-2"))
    with raw_to(cluster, 2) as raw:
        assert produce(raw, topic, p, batch(values)).error_code == 0
        resp = raw.call(AlterReplicaLogDirsRequest(dirs=[AlterReplicaLogDirsRequest.AlterReplicaLogDir(
            path=target, topics=[AlterReplicaLogDirsRequest.AlterReplicaLogDirTopic(name=topic, partitions=[p])])]),
            2)
        assert [r.error_code for t in resp.results for r in t.partitions] == [0]
    wait_for(lambda: on_disk(cluster, topic).get(p) == {2: target_id}, "the replica in its new dir")  # (none mid-swap)
    _, history = assigned(cluster, topic, 6)
    assert history[p][-1] == {2: target_id}
    events = [(e["event"], e.get("partition")) for e in broker_events(cluster, 2, mark)]
    name = f"{topic}-{p}"
    confirmed = events.index(("replica_dir_assignment_confirmed", name))
    assert confirmed < events.index(("replica_move_completed", name)), events
    with raw_to(cluster, 2) as raw:
        assert [r.value for r in fetch_all(raw, topic, p)] == values
