"""Three controller-only `kjbod serve` processes with `controller.quorum.voters` naming all three: they elect one
leader (DescribeQuorum says which, and the others answer NOT_LEADER_OR_FOLLOWER naming it), a record written to the
active controller reaches all three logs, a SIGKILLed leader is replaced by another that takes writes, and the
killed one comes back from its files and catches up; brokers follow a failover. (test_quorum_snapshot_live.py: a
controller behind a snapshot.)"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from broker_features import SUPPORTED_FEATURES
from datapath.support import RawClient, create_topic
from kafka import KafkaProducer
from live import LiveServer, format_storage, free_port, new_cluster_id

from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import (
    BrokerRegistrationRequest,
    DescribeClusterRequest,
    DescribeQuorumRequest,
    RegisterBrokerRecord,
)
from kjbod.protocol.generated import describe_quorum_request as dq
from kjbod.storage.metadata_log import MetadataLog

IDS = (1, 2, 3)
DESCRIBE = DescribeQuorumRequest(topics=[dq.TopicData(topic_name="__cluster_metadata",
                                                      partitions=[dq.PartitionData(partition_index=0)])])


FAST = {"controller.quorum.election.timeout.ms": "500", "controller.quorum.fetch.timeout.ms": "1500"}


def controllers(tmp_path: Path, extra: dict[str, str] | None = None) -> dict[int, LiveServer]:
    ports = {i: free_port() for i in IDS}
    voters = ",".join(f"{i}@127.0.0.1:{ports[i]}" for i in IDS)
    cluster_id = new_cluster_id()
    out = {}
    for i in IDS:
        d = tmp_path / f"controller-{i}"
        d.mkdir()
        server = LiveServer(node_id=i, cluster_id=cluster_id, port=ports[i], controller_port=ports[i], directory=d,
                            config=d / "controller.properties", log_dirs=[d / "meta"], metadata_dir=d / "meta",
                            stderr_path=d / "stderr.log")
        server.config.write_text("".join(f"{k}={v}\n" for k, v in {
            "process.roles": "controller", "node.id": str(i), "listeners": f"CONTROLLER://127.0.0.1:{ports[i]}",
            "controller.listener.names": "CONTROLLER", "controller.quorum.voters": voters,
            "log.dirs": str(d / "meta"), "broker.session.timeout.ms": "60000", **FAST, **(extra or {})}.items()))
        format_storage(server.config, cluster_id)
        out[i] = server
    return out


def describe(server: LiveServer):
    with RawClient(server.host, server.port, timeout=5) as c:
        return c.call(DESCRIBE, 2).topics[0].partitions[0]


def wait_for_leader(servers: dict[int, LiveServer], *, not_: int | None = None, timeout: float = 60) -> int:
    """The leader every running controller names (the leader itself answering without error)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            parts = {i: describe(s) for i, s in servers.items() if s.running}
            leaders = {p.leader_id for p in parts.values()}
            last = {i: (p.error_code, p.leader_id, p.leader_epoch) for i, p in parts.items()}
            if len(leaders) == 1:
                leader = leaders.pop()
                if leader in parts and leader != not_ and parts[leader].error_code == 0:
                    assert all(p.error_code == E.NOT_LEADER_OR_FOLLOWER for i, p in parts.items() if i != leader)
                    return leader
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"no leader within {timeout}s: {last}")


def register(server: LiveServer, broker_id: int, timeout: float = 60) -> int:
    """Registers a broker with the active controller (retrying while it activates); its end offset."""
    deadline = time.monotonic() + timeout
    while True:
        with RawClient(server.host, server.port, timeout=10) as c:
            resp = c.call(BrokerRegistrationRequest(
                features=SUPPORTED_FEATURES, broker_id=broker_id, cluster_id=server.cluster_id, incarnation_id=uuid.uuid4(),
                log_dirs=[uuid.UUID(int=(broker_id << 70) + 1)]), 4)
        if resp.error_code == 0:
            return resp.broker_epoch + 1
        assert resp.error_code == E.NOT_CONTROLLER, resp
        if time.monotonic() > deadline:
            raise AssertionError("the leader never became the active controller")
        time.sleep(0.2)


def wait_replicated(leader: LiveServer, end: int, voters: tuple[int, ...], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        part = describe(leader)
        ends = {r.replica_id: r.log_end_offset for r in part.current_voters}
        if part.error_code == 0 and part.high_watermark >= end and all(ends.get(v, -1) >= end for v in voters):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not replicated to {voters} up to {end}: hw {part.high_watermark}, ends {ends}")
        time.sleep(0.2)


def registered_in_log(server: LiveServer) -> set[int]:
    mlog = MetadataLog(str(server.metadata_dir), node_id=server.node_id, writer=False, replicated=True)
    try:
        return {r.broker_id for r in mlog.load() if isinstance(r, RegisterBrokerRecord)}
    finally:
        mlog.close()


def test_three_controllers_elect_fail_over_and_catch_up(tmp_path: Path) -> None:
    servers = controllers(tmp_path)
    try:
        for s in servers.values():
            s.start()
        first = wait_for_leader(servers)
        end = register(servers[first], 7)
        wait_replicated(servers[first], end, IDS)

        servers[first].process.kill()  # type: ignore[union-attr]
        servers[first].process.wait()  # type: ignore[union-attr]
        second = wait_for_leader(servers, not_=first)
        end = register(servers[second], 8)
        others = tuple(i for i in IDS if i != first)
        wait_replicated(servers[second], end, others)

        servers[first].start()
        wait_replicated(servers[second], end, IDS)  # the killed controller is back and has caught up
        assert wait_for_leader(servers) == second
    finally:
        codes = {i: s.stop() for i, s in servers.items()}
    assert all(code == 0 for code in codes.values()), {i: servers[i].stderr() for i in IDS}
    for s in servers.values():
        assert {7, 8} <= registered_in_log(s)


def brokers_for(tmp_path: Path, servers: dict[int, LiveServer]) -> dict[int, LiveServer]:
    voters = ",".join(f"{i}@127.0.0.1:{s.port}" for i, s in servers.items())
    cluster_id = next(iter(servers.values())).cluster_id
    out = {}
    for b in (11, 12):
        d = tmp_path / f"broker-{b}"
        d.mkdir()
        port = free_port()
        server = LiveServer(node_id=b, cluster_id=cluster_id, port=port, controller_port=port, directory=d,
                            config=d / "broker.properties", log_dirs=[d / "logs"], metadata_dir=d / "logs",
                            stderr_path=d / "stderr.log")
        server.config.write_text("".join(f"{k}={v}\n" for k, v in {
            "process.roles": "broker", "node.id": str(b), "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER", "controller.quorum.voters": voters,
            "log.dirs": str(d / "logs"), "broker.heartbeat.interval.ms": "500",
            "broker.session.timeout.ms": "4000"}.items()))
        format_storage(server.config, cluster_id)
        out[b] = server
    return out


def unfenced(broker: LiveServer) -> list[tuple[int, bool]]:
    with RawClient(broker.host, broker.port, timeout=10) as c:
        dc = c.call(DescribeClusterRequest(include_fenced_brokers=True), 2)
    return sorted((n.broker_id, n.is_fenced) for n in dc.brokers)


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
        time.sleep(0.2)


def test_brokers_follow_a_controller_failover(tmp_path: Path) -> None:
    """3 controllers and 2 brokers: kafka-python produces; the active controller is SIGKILLed; topics can still be
    created through the brokers (forwarded to the new active controller) and the brokers stay unfenced."""
    servers = controllers(tmp_path)
    brokers = brokers_for(tmp_path, servers)
    producer = None
    try:
        for s in servers.values():
            s.start()
        first = wait_for_leader(servers)
        for b in brokers.values():
            b.start()
        wait_until(lambda: unfenced(brokers[11]) == [(11, False), (12, False)], "both brokers unfenced")
        with RawClient(brokers[11].host, brokers[11].port, timeout=30) as c:
            made = create_topic(c, "before", partitions=2)
            assert made.error_code == 0, made.error_message
        producer = KafkaProducer(bootstrap_servers=brokers[12].bootstrap, acks="all")
        for i in range(20):
            producer.send("before", value=b"m%d" % i).get(timeout=30)

        servers[first].process.kill()  # type: ignore[union-attr]
        servers[first].process.wait()  # type: ignore[union-attr]
        wait_for_leader(servers, not_=first)
        def created() -> bool:
            with RawClient(brokers[12].host, brokers[12].port, timeout=30) as c:
                return create_topic(c, "after", partitions=2).error_code in (0, E.TOPIC_ALREADY_EXISTS)
        wait_until(created, "a topic created through a broker after the failover")
        time.sleep(5)  # longer than broker.session.timeout.ms: sessions on the new controller would have expired
        assert unfenced(brokers[11]) == [(11, False), (12, False)]
        for i in range(20):
            producer.send("after", value=b"n%d" % i).get(timeout=30)
    finally:
        if producer is not None:
            producer.close(timeout=10)
        for b in brokers.values():
            b.stop()
        for s in servers.values():
            s.stop()
