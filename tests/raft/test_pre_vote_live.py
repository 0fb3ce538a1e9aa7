"""Kafka 4.3's quorum changes on real `kjbod serve` controller processes:

* KIP-996 pre-vote: a follower stopped with SIGSTOP for longer than its fetch timeout, then let go with SIGCONT,
  asks a pre-vote the others refuse (they hear from the leader) and follows the same leader in the same epoch
  again, instead of standing in a new epoch and unseating it;
* AddRaftVoter v1: with AckWhenCommitted false the leader answers as soon as the new voter set is in its own log,
  even though the followers it needs to commit it are stopped (the change then blocks the next one until it
  commits); with v1's default (true) it answers once committed, so the next change is taken at once."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from datapath.support import RawClient
from live import COMMAND, LiveServer, free_port, new_cluster_id

from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import AddRaftVoterRequest, RemoveRaftVoterRequest
from kjbod.protocol.generated import add_raft_voter_request as arv
from kjbod.raft.voters import parse_uuid
from kjbod.storage.ids import random_directory_id
from raft.test_controller_quorum_live import (
    FAST,
    controllers,
    describe,
    register,
    wait_for_leader,
    wait_replicated,
    wait_until,
)


def pause(server: LiveServer) -> int:
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGSTOP)
    return server.process.pid


def resume(pid: int) -> None:
    os.kill(pid, signal.SIGCONT)


def test_a_follower_stopped_past_its_fetch_timeout_rejoins_without_an_election(tmp_path: Path) -> None:
    servers = controllers(tmp_path)
    paused: int | None = None
    try:
        for s in servers.values():
            s.start()
        leader = wait_for_leader(servers)
        end = register(servers[leader], 7)
        wait_replicated(servers[leader], end, tuple(servers))
        epoch = describe(servers[leader]).leader_epoch
        follower = next(i for i in servers if i != leader)
        paused = pause(servers[follower])
        time.sleep(3 * int(FAST["controller.quorum.fetch.timeout.ms"]) / 1000)  # well past its fetch timeout
        end = register(servers[leader], 8)  # the leader and the other follower go on meanwhile
        resume(paused)
        paused = None
        wait_replicated(servers[leader], end, tuple(servers))  # the stopped one caught up ...
        # ... under the same leader in the same epoch: its pre-vote was refused, nobody stood for election
        assert wait_for_leader(servers) == leader
        for i, s in servers.items():
            part = describe(s)
            assert (part.leader_id, part.leader_epoch) == (leader, epoch), (i, part)
    finally:
        if paused is not None:
            resume(paused)
        codes = {i: s.stop() for i, s in servers.items()}
    assert all(code == 0 for code in codes.values()), {i: servers[i].stderr() for i in servers}


# ------------------------------------------------------------------------------------------ AddRaftVoter v1

SLOW_FETCH = {**FAST, "controller.quorum.fetch.timeout.ms": "15000"}  # no check-quorum resignation mid-test


def dynamic_controller(tmp_path: Path, node_id: int, port: int, cluster_id: str, bootstrap: str) -> LiveServer:
    d = tmp_path / f"controller-{node_id}"
    d.mkdir()
    server = LiveServer(node_id=node_id, cluster_id=cluster_id, port=port, controller_port=port, directory=d,
                        config=d / "controller.properties", log_dirs=[d / "meta"], metadata_dir=d / "meta",
                        stderr_path=d / "stderr.log")
    server.config.write_text("".join(f"{k}={v}\n" for k, v in {
        "process.roles": "controller", "node.id": str(node_id), "listeners": f"CONTROLLER://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER", "controller.quorum.bootstrap.servers": bootstrap,
        "log.dirs": str(d / "meta"), "broker.session.timeout.ms": "60000", **SLOW_FETCH}.items()))
    return server


def format_node(server: LiveServer, *flags: str) -> None:
    done = subprocess.run([*COMMAND, "format", "-c", str(server.config), f"--cluster-id={server.cluster_id}",
                           *flags], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def add_voter(leader: LiveServer, new: LiveServer, directory: str, *, ack_when_committed: bool | None,
              version: int = 1):
    """AddRaftVoter for `new` sent to `leader` at `version` (AckWhenCommitted left at its default when None)."""
    body = AddRaftVoterRequest(cluster_id=leader.cluster_id, timeout_ms=10_000, voter_id=new.node_id,
                               voter_directory_id=parse_uuid(directory),
                               listeners=[arv.Listener(name="CONTROLLER", host=new.host, port=new.controller_port)])
    if ack_when_committed is not None:
        body.ack_when_committed = ack_when_committed
    with RawClient(leader.host, leader.port, timeout=30) as c:
        return c.call(body, version)


def remove_voter(server: LiveServer, node_id: int, directory: str):
    with RawClient(server.host, server.port, timeout=30) as c:
        return c.call(RemoveRaftVoterRequest(cluster_id=server.cluster_id, voter_id=node_id,
                                             voter_directory_id=parse_uuid(directory)), 0)


def test_add_raft_voter_v1_answers_on_append_or_on_commit_as_asked(tmp_path: Path) -> None:
    cluster_id = new_cluster_id()
    ports = {i: free_port() for i in (1, 2, 3, 4, 5)}
    bootstrap = ",".join(f"127.0.0.1:{ports[i]}" for i in (1, 2, 3))
    dirs = {i: random_directory_id() for i in ports}
    initial = ",".join(f"{i}@127.0.0.1:{ports[i]}:{dirs[i]}" for i in (1, 2, 3))
    servers = {i: dynamic_controller(tmp_path, i, ports[i], cluster_id, bootstrap) for i in ports}
    for i in (1, 2, 3):
        format_node(servers[i], "--initial-controllers", initial)
    for i in (4, 5):
        format_node(servers[i], "--no-initial-controllers")
    voters = {i: servers[i] for i in (1, 2, 3)}
    paused: list[int] = []
    try:
        for s in servers.values():
            s.start()
        leader = wait_for_leader(voters)
        epoch = describe(servers[leader]).leader_epoch
        register(servers[leader], 7)

        def caught_up(i: int) -> bool:
            part = describe(servers[leader])
            return any(o.replica_id == i and o.log_end_offset >= part.high_watermark for o in part.observers)
        wait_until(lambda: caught_up(4) and caught_up(5), "controllers 4 and 5 observing the leader's log")

        # the two other voters stop: a voter set of four cannot be committed by the leader and 4 alone
        for i in voters:
            if i != leader:
                paused.append(pause(servers[i]))
        added = add_voter(servers[leader], servers[4], dirs[4], ack_when_committed=False)
        assert (added.error_code, added.error_message) == (E.NONE, None)
        part = describe(servers[leader])
        assert sorted(v.replica_id for v in part.current_voters) == [1, 2, 3, 4]  # in force from the append
        voters_end = max(v.log_end_offset for v in part.current_voters)
        assert part.high_watermark < voters_end  # answered, yet not committed
        refused = remove_voter(servers[leader], 4, dirs[4])
        assert (refused.error_code, refused.error_message) == (
            E.REQUEST_TIMED_OUT, "Request timed out waiting for leader to handle previous voter change request")

        for pid in paused:
            resume(pid)
        paused.clear()
        wait_until(lambda: describe(servers[leader]).high_watermark >= voters_end, "the new voter set committed")
        assert describe(servers[leader]).leader_epoch == epoch  # the stopped voters came back without an election

        # v1's default: the answer comes once the set is committed, so the next change is taken at once
        wait_until(lambda: caught_up(5), "controller 5 caught up")
        added = add_voter(servers[leader], servers[5], dirs[5], ack_when_committed=None)
        assert (added.error_code, added.error_message) == (E.NONE, None)
        removed = remove_voter(servers[leader], 5, dirs[5])
        assert (removed.error_code, removed.error_message) == (E.NONE, None)
        assert sorted(v.replica_id for v in describe(servers[leader]).current_voters) == [1, 2, 3, 4]
        # a v0 request has no AckWhenCommitted: it is answered on commit too
        v0 = add_voter(servers[leader], servers[5], dirs[5], ack_when_committed=None, version=0)
        assert v0.error_code == E.NONE
        assert remove_voter(servers[leader], 5, dirs[5]).error_code == E.NONE
    finally:
        for pid in paused:
            resume(pid)
        codes = {i: s.stop() for i, s in servers.items()}
    assert all(code == 0 for code in codes.values()), {i: servers[i].stderr() for i in servers}
