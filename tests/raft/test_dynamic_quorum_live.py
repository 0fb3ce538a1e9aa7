"""A KIP-853 quorum (kraft.version 1) of real `kjbod serve` processes: no controller.quorum.voters anywhere, the
voters in the metadata log from `kjbod format --initial-controllers` or `--standalone`, the controllers and brokers
finding each other through controller.quorum.bootstrap.servers.

* three controllers formatted with the same --initial-controllers elect a leader; DescribeQuorum v2 names the three
  voters with their directory ids; a fourth formatted with --no-initial-controllers observes (it follows the log
  without a vote); the leader is SIGKILLed and another takes writes, which the observer gets too;
* one controller formatted --standalone and a broker: the broker registers, a topic is created and kafka-python
  produces to it; ApiVersions reports kraft.version 1 finalized."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from datapath.support import RawClient, create_topic
from kafka import KafkaProducer
from live import COMMAND, LiveServer, free_port, new_cluster_id, read_meta_properties

from kjbod.protocol.generated import ApiVersionsRequest
from kjbod.raft.voters import parse_uuid
from kjbod.storage.ids import random_directory_id
from raft.test_controller_quorum_live import (
    FAST,
    describe,
    register,
    registered_in_log,
    wait_for_leader,
    wait_until,
)


def format_node(server: LiveServer, *flags: str) -> None:
    done = subprocess.run([*COMMAND, "format", "-c", str(server.config), f"--cluster-id={server.cluster_id}",
                           *flags], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def controller(tmp_path: Path, node_id: int, port: int, cluster_id: str, bootstrap: str) -> LiveServer:
    d = tmp_path / f"controller-{node_id}"
    d.mkdir()
    server = LiveServer(node_id=node_id, cluster_id=cluster_id, port=port, controller_port=port, directory=d,
                        config=d / "controller.properties", log_dirs=[d / "meta"], metadata_dir=d / "meta",
                        stderr_path=d / "stderr.log")
    server.config.write_text("".join(f"{k}={v}\n" for k, v in {
        "process.roles": "controller", "node.id": str(node_id), "listeners": f"CONTROLLER://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER", "controller.quorum.bootstrap.servers": bootstrap,
        "log.dirs": str(d / "meta"), "broker.session.timeout.ms": "60000", **FAST}.items()))
    return server


def test_initial_controllers_elect_an_observer_follows_and_a_failover_goes_on(tmp_path: Path) -> None:
    cluster_id = new_cluster_id()
    ports = {i: free_port() for i in (1, 2, 3, 4)}
    bootstrap = ",".join(f"127.0.0.1:{ports[i]}" for i in (1, 2, 3))
    dirs = {i: random_directory_id() for i in (1, 2, 3)}
    initial = ",".join(f"{i}@127.0.0.1:{ports[i]}:{dirs[i]}" for i in (1, 2, 3))
    servers = {i: controller(tmp_path, i, ports[i], cluster_id, bootstrap) for i in (1, 2, 3, 4)}
    for i in (1, 2, 3):
        format_node(servers[i], "--initial-controllers", initial)
        assert read_meta_properties(servers[i].metadata_dir)["directory.id"] == dirs[i]
    format_node(servers[4], "--no-initial-controllers")
    voters = {i: servers[i] for i in (1, 2, 3)}
    try:
        for s in servers.values():
            s.start()
        first = wait_for_leader(voters)
        part = describe(servers[first])
        assert sorted((v.replica_id, v.replica_directory_id) for v in part.current_voters) == [
            (i, parse_uuid(dirs[i])) for i in (1, 2, 3)]
        end = register(servers[first], 7)

        def observed() -> bool:
            p = describe(servers[first])
            return any(o.replica_id == 4 and o.log_end_offset >= end for o in p.observers)
        wait_until(observed, "controller 4 observing the leader's log")
        # the observer never takes part: it names the leader, and is not among the voters
        assert describe(servers[4]).leader_id == first
        assert 4 not in {v.replica_id for v in describe(servers[first]).current_voters}

        servers[first].process.kill()  # type: ignore[union-attr]
        servers[first].process.wait()  # type: ignore[union-attr]
        second = wait_for_leader(voters, not_=first)
        assert second != 4
        end = register(servers[second], 8)
        wait_until(lambda: describe(servers[4]).leader_id == second, "the observer following the new leader")
        wait_until(lambda: any(o.replica_id == 4 and o.log_end_offset >= end
                               for o in describe(servers[second]).observers), "the observer catching up")
    finally:
        codes = {i: s.stop() for i, s in servers.items()}
    assert all(code == 0 for i, code in codes.items() if i != first), {i: servers[i].stderr() for i in servers}
    for i in servers:
        if i != first:
            assert {7, 8} <= registered_in_log(servers[i])


def test_a_standalone_controller_serves_a_broker_and_a_producer(tmp_path: Path) -> None:
    cluster_id = new_cluster_id()
    cport = free_port()
    ctl = controller(tmp_path, 1, cport, cluster_id, f"127.0.0.1:{cport}")
    format_node(ctl, "--standalone")
    d = tmp_path / "broker-11"
    d.mkdir()
    port = free_port()
    broker = LiveServer(node_id=11, cluster_id=cluster_id, port=port, controller_port=port, directory=d,
                        config=d / "broker.properties", log_dirs=[d / "logs"], metadata_dir=d / "logs",
                        stderr_path=d / "stderr.log")
    broker.config.write_text("".join(f"{k}={v}\n" for k, v in {
        "process.roles": "broker", "node.id": "11", "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER", "controller.quorum.bootstrap.servers": f"127.0.0.1:{cport}",
        "log.dirs": str(d / "logs"), "broker.heartbeat.interval.ms": "500"}.items()))
    format_node(broker)
    producer = None
    try:
        ctl.start()
        assert wait_for_leader({1: ctl}) == 1
        broker.start()

        def made() -> bool:
            with RawClient(broker.host, broker.port, timeout=30) as c:
                return create_topic(c, "dyn", partitions=2).error_code == 0
        wait_until(made, "a topic created through the broker")
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
        for i in range(10):
            producer.send("dyn", value=b"m%d" % i).get(timeout=30)
        with RawClient(ctl.host, ctl.port, timeout=10) as c:
            av = c.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
        assert {f.name: (f.min_version, f.max_version) for f in av.supported_features}["kraft.version"] == (0, 1)
        assert {f.name: f.max_version_level for f in av.finalized_features}["kraft.version"] == 1
        assert [v.replica_id for v in describe(ctl).current_voters] == [1]
    finally:
        if producer is not None:
            producer.close(timeout=10)
        assert broker.stop() == 0, broker.stderr()
        assert ctl.stop() == 0, ctl.stderr()



def quorum_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, "metadata-quorum", *args], capture_output=True, text=True, timeout=120)


def test_controllers_join_with_add_controller_and_leave_with_remove_controller(tmp_path: Path) -> None:
    """Controller 1 formatted --standalone, 2 and 3 --no-initial-controllers (observers until added); a broker.
    add-controller makes three voters; the leader is killed and writes go on; it is removed and, restarted, no
    longer votes. Refusals: an existing voter, an unknown one, a static-style request without a directory id."""
    cluster_id = new_cluster_id()
    ports = {i: free_port() for i in (1, 2, 3)}
    boot = ",".join(f"127.0.0.1:{ports[i]}" for i in (1, 2, 3))
    servers = {i: controller(tmp_path, i, ports[i], cluster_id, boot) for i in (1, 2, 3)}
    format_node(servers[1], "--standalone")
    for i in (2, 3):
        format_node(servers[i], "--no-initial-controllers")
    dirs = {i: read_meta_properties(servers[i].metadata_dir)["directory.id"] for i in (1, 2, 3)}
    d = tmp_path / "broker-11"
    d.mkdir()
    bport = free_port()
    broker = LiveServer(node_id=11, cluster_id=cluster_id, port=bport, controller_port=bport, directory=d,
                        config=d / "broker.properties", log_dirs=[d / "logs"], metadata_dir=d / "logs",
                        stderr_path=d / "stderr.log")
    broker.config.write_text("".join(f"{k}={v}\n" for k, v in {
        "process.roles": "broker", "node.id": "11", "listeners": f"PLAINTEXT://127.0.0.1:{bport}",
        "controller.listener.names": "CONTROLLER", "controller.quorum.bootstrap.servers": boot,
        "log.dirs": str(d / "logs"), "broker.heartbeat.interval.ms": "500"}.items()))
    format_node(broker)
    everyone = {**servers, 11: broker}
    try:
        for s in servers.values():
            s.start()
        assert wait_for_leader({1: servers[1]}) == 1
        broker.start()

        def made(name: str) -> bool:
            with RawClient(broker.host, broker.port, timeout=30) as c:
                return create_topic(c, name, partitions=1).error_code in (0, 36)
        wait_until(lambda: made("one-voter"), "a topic created with one voter")

        for i in (2, 3):
            def added(i: int = i) -> bool:
                done = quorum_cli("--bootstrap-controller", boot, "add-controller", "-c", str(servers[i].config))
                assert "Traceback" not in done.stderr
                return done.returncode == 0 and done.stdout.startswith(f"Added controller {i} with directory id "
                                                                       f"{dirs[i]} and endpoints: CONTROLLER://")
            wait_until(added, f"controller {i} added (once it caught up as an observer)")
        part = describe(servers[1])
        assert sorted((v.replica_id, v.replica_directory_id) for v in part.current_voters) == [
            (i, parse_uuid(dirs[i])) for i in (1, 2, 3)]
        status = quorum_cli("--bootstrap-controller", boot, "describe", "--status")
        assert status.returncode == 0, status.stderr
        assert all(f'{{"id": {i}, "directoryId": "{dirs[i]}"' in status.stdout for i in (1, 2, 3)), status.stdout

        again = quorum_cli("--bootstrap-controller", boot, "add-controller", "-c", str(servers[2].config))
        assert again.returncode == 2 and "DUPLICATE_VOTER" in again.stderr, again.stderr
        unknown = quorum_cli("--bootstrap-controller", boot, "remove-controller", "--controller-id", "9",
                             "--controller-directory-id", dirs[2])
        assert unknown.returncode == 2 and "VOTER_NOT_FOUND" in unknown.stderr, unknown.stderr
        wrong_dir = quorum_cli("--bootstrap-controller", boot, "remove-controller", "-i", "2", "-d", dirs[3])
        assert wrong_dir.returncode == 2 and "VOTER_NOT_FOUND" in wrong_dir.stderr, wrong_dir.stderr

        servers[1].process.kill()  # type: ignore[union-attr]
        servers[1].process.wait()  # type: ignore[union-attr]
        second = wait_for_leader({2: servers[2], 3: servers[3]})
        wait_until(lambda: made("after-failover"), "a topic created after the leader was killed")

        removed = quorum_cli("--bootstrap-controller", boot, "remove-controller", "--controller-id", "1",
                             "--controller-directory-id", dirs[1])
        assert removed.returncode == 0, removed.stderr
        assert removed.stdout == f"Removed  KRaft controller 1 with directory id {dirs[1]}\n"
        assert [v.replica_id for v in describe(servers[second]).current_voters] == sorted({2, 3})

        servers[1].start()  # back from its files: an observer now, not a voter
        wait_until(lambda: describe(servers[1]).leader_id == second, "the removed controller following the leader")
        time.sleep(3)  # two election timeouts: a voter would have stood by now if it thought it was one
        part = describe(servers[second])
        assert part.leader_id == second and [v.replica_id for v in part.current_voters] == [2, 3]
        assert wait_for_leader({2: servers[2], 3: servers[3]}) == second
        wait_until(lambda: made("after-removal"), "a topic created after the removal")
    finally:
        codes = {i: s.stop() for i, s in everyone.items()}
    assert all(code == 0 for code in codes.values()), {i: everyone[i].stderr() for i in everyone}
