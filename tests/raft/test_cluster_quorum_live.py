"""`kjbod cluster up --controllers 3`: three controller processes forming a KRaft quorum plus the brokers;
`cluster status` lists them and names the quorum's leader, `kjbod metadata-quorum describe` prints Kafka's
tool's view of it, the brokers keep serving and topics can still be created when the leading controller is
killed, and `cluster down` stops every process."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from datapath.support import RawClient, create_topic
from kafka import KafkaConsumer, KafkaProducer
from live import COMMAND, free_ports

from kjbod.cli.cluster import node_dirs, node_pid, read_properties
from kjbod.protocol.errors import ErrorCode as E


def kjbod(*args: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=timeout)


def wait_until(check, what: str, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = check()
            if got:
                return got
        except (OSError, AssertionError):
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.3)


def leader_line(root: Path) -> str:
    status = kjbod("cluster", "status", "--dir", str(root), timeout=60)
    assert status.returncode == 0, status.stderr
    return next(line for line in status.stdout.splitlines() if line.startswith("quorum:"))


def test_cluster_up_with_three_controllers_survives_the_leader_and_comes_down(tmp_path: Path) -> None:
    root = tmp_path / "c"
    up = kjbod("cluster", "up", "--detach", "--controllers", "3", "--brokers", "2", "--log-dirs", "1",
               "--dir", str(root), "--base-port", str(free_ports(10)),
               "--set", "controller.quorum.election.timeout.ms=500", "--set", "controller.quorum.fetch.timeout.ms=1500")
    try:
        assert up.returncode == 0, up.stderr + up.stdout
        assert "3 controllers (a quorum) and 2 brokers" in up.stdout
        homes = {h.name: h for h in node_dirs(root)}
        assert list(homes) == ["controller-1", "controller-2", "controller-3", "broker-1", "broker-2"]
        voters = read_properties(homes["controller-1"] / "server.properties")["controller.quorum.voters"]
        assert [v.partition("@")[0] for v in voters.split(",")] == ["1001", "1002", "1003"]
        assert read_properties(homes["broker-1"] / "server.properties")["controller.quorum.voters"] == voters
        bootstrap = next(line for line in up.stdout.splitlines() if line.startswith("bootstrap.servers="))
        bootstrap = bootstrap.partition("=")[2]

        status = kjbod("cluster", "status", "--dir", str(root), timeout=60)
        assert status.returncode == 0, status.stderr
        rows = {line.split()[0]: line.split() for line in status.stdout.splitlines()[1:6]}
        assert all(rows[name][4].isdigit() for name in homes)  # every node runs (its pid)
        line = leader_line(root)
        leader_name = line.split()[2]
        assert leader_name in ("controller-1", "controller-2", "controller-3"), line

        controllers = ",".join(read_properties(homes[n] / "server.properties")["listeners"].partition("//")[2]
                               for n in ("controller-1", "controller-2", "controller-3"))
        described = kjbod("metadata-quorum", "--bootstrap-controller", controllers, "describe", "--status")
        assert described.returncode == 0, described.stderr
        fields = dict(line.split(":", 1) for line in described.stdout.splitlines())
        assert fields["LeaderId"].strip() == read_properties(homes[leader_name] / "server.properties")["node.id"]
        assert fields["ClusterId"].strip() and '"id": 1001' in fields["CurrentVoters"]
        # one controller that does not lead is enough: it names the leader, and its address (DescribeCluster)
        follower = next(n for n in ("controller-1", "controller-2", "controller-3") if n != leader_name)
        one = read_properties(homes[follower] / "server.properties")["listeners"].partition("//")[2]
        replication = kjbod("metadata-quorum", "--bootstrap-controller", one, "describe", "--replication")
        assert replication.returncode == 0, replication.stderr
        table = replication.stdout.splitlines()
        assert table[0].split() == ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                                    "LastCaughtUpTimestamp", "Status"]
        assert sorted(r.split()[-1] for r in table[1:]) == ["Follower", "Follower", "Leader", "Observer", "Observer"]

        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
        try:
            producer.send("before", b"a").get(timeout=60)  # auto-created
            # the leading controller dies: the brokers keep serving, a new leader takes the writes
            pid = node_pid(homes[leader_name])
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            producer.send("before", b"b").get(timeout=60)
            host, _, port = bootstrap.split(",")[0].rpartition(":")

            def created() -> bool:
                with RawClient(host, int(port), timeout=30) as c:
                    return create_topic(c, "after", partitions=2).error_code in (0, E.TOPIC_ALREADY_EXISTS)
            wait_until(created, "a topic created through a broker after the controller failover")
            producer.send("after", b"c").get(timeout=60)
        finally:
            producer.close(timeout=10)
        consumer = KafkaConsumer("before", bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                 consumer_timeout_ms=10_000)
        try:
            assert sorted(m.value for m in consumer) == [b"a", b"b"]
        finally:
            consumer.close()
        new_leader = leader_line(root).split()[2]
        assert new_leader != leader_name

        # `up` starts the killed controller again; it follows
        again = kjbod("cluster", "up", "--detach", "--dir", str(root))
        assert again.returncode == 0 and f"started: {leader_name}" in again.stdout, again.stdout + again.stderr
    finally:
        down = kjbod("cluster", "down", "--dir", str(root))
    assert down.returncode == 0, down.stderr
    assert all(node_pid(h) is None for h in node_dirs(root))
    assert all(r.split()[4] == "stopped"
               for r in kjbod("cluster", "status", "--dir", str(root)).stdout.splitlines()[1:6])
    assert "no controller is running" in leader_line(root)
