"""A deterministic in-process run of several RaftQuorum voters: a clock, a lossless network that can cut nodes off,
and per node a log (the epoch of every record) and a "disk" that holds what Persist effects wrote.

The effects are carried out in the order they come, and a request's answer is only delivered after the effects its
handling produced, as the real shell must do. Every step checks Raft's safety: no two leaders in one epoch, and
no record a leader reported committed is ever lost from a later leader's log or changed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from kjbod.raft.log_view import EpochHistory
from kjbod.raft.quorum import (
    BecomeLeader,
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchAction,
    FetchRequest,
    FetchResult,
    HighWatermark,
    LeaderChanged,
    Persist,
    RaftConfig,
    RaftQuorum,
    Send,
    State,
    Truncate,
    VoteRequest,
)
from kjbod.storage.quorum_state import ElectionState


class SimLog(EpochHistory):
    """EpochHistory that also keeps each record's epoch, so logs can be compared."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[int] = []

    def add(self, epoch: int, n: int = 1) -> None:
        self.append(epoch, n)
        self.records.extend([epoch] * n)

    def cut(self, offset: int) -> None:
        self.truncate_to(offset)
        del self.records[offset:]


@dataclass
class SimNode:
    node_id: int
    quorum: RaftQuorum
    log: SimLog
    up: bool = True
    disk: ElectionState | None = None
    persisted: list[ElectionState] = field(default_factory=list)
    hw: int = 0
    leader_changes: list[LeaderChanged] = field(default_factory=list)


class Sim:
    def __init__(self, voters: tuple[int, ...] = (1, 2, 3), seed: int = 0, config: RaftConfig | None = None) -> None:
        self.voters = voters
        self.config = config or RaftConfig()
        self.seed = seed
        self.now = 0
        self.nodes: dict[int, SimNode] = {}
        self.committed: list[int] = []  # the longest committed prefix any leader reported (epochs of records)
        self.leaders: dict[int, int] = {}  # epoch -> the node that led it
        self.cut_off: set[int] = set()
        for v in voters:
            self.start(v)

    def start(self, node_id: int, log: SimLog | None = None, disk: ElectionState | None = None) -> SimNode:
        log = log if log is not None else SimLog()
        q = RaftQuorum(node_id, self.voters, log, stored=disk, now_ms=self.now, config=self.config,
                       rng=random.Random(self.seed * 1000 + node_id + len(self.nodes) * 7 + self.now))
        node = SimNode(node_id, q, log, disk=disk)
        self.nodes[node_id] = node
        self.effects(node)
        return node

    def kill(self, node_id: int) -> SimNode:
        node = self.nodes[node_id]
        node.up = False
        return node

    def restart(self, node_id: int) -> SimNode:
        old = self.nodes[node_id]
        return self.start(node_id, old.log, old.disk)

    # -------------------------------------------------------------------------------------- effects

    def effects(self, node: SimNode) -> None:
        for e in node.quorum.take_effects():
            if isinstance(e, Persist):
                node.disk = e.election
                node.persisted.append(e.election)
            elif isinstance(e, Send):
                self.deliver(node, e)
            elif isinstance(e, Truncate):
                node.log.cut(e.offset)
            elif isinstance(e, BecomeLeader):
                assert self.leaders.setdefault(e.epoch, node.node_id) == node.node_id, "two leaders in one epoch"
                assert e.epoch_start_offset == node.log.end_offset()
                node.log.add(e.epoch)
                node.quorum.leader_flushed(node.log.end_offset(), self.now)
                self.effects(node)
            elif isinstance(e, HighWatermark):
                node.hw = e.offset
                if node.quorum.is_leader:
                    self.check_committed(node)
            elif isinstance(e, LeaderChanged):
                node.leader_changes.append(e)

    def check_committed(self, leader: SimNode) -> None:
        prefix = leader.log.records[:leader.hw]
        common = min(len(prefix), len(self.committed))
        assert prefix[:common] == self.committed[:common], "a committed record changed"
        assert len(prefix) >= len(self.committed), "the committed prefix shrank"
        self.committed = prefix

    def reachable(self, a: SimNode, b: SimNode) -> bool:
        return a.up and b.up and a.node_id not in self.cut_off and b.node_id not in self.cut_off

    def deliver(self, src: SimNode, send: Send) -> None:
        dst = self.nodes[send.destination]
        if not self.reachable(src, dst):
            src.quorum.request_failed(dst.node_id, send.correlation_id, self.now)
            self.effects(src)
            return
        req, q, now = send.request, dst.quorum, self.now
        if isinstance(req, VoteRequest):
            vote = q.handle_vote(req, now)
            self.effects(dst)
            src.quorum.handle_vote_response(dst.node_id, send.correlation_id, vote, now)
        elif isinstance(req, BeginQuorumEpochRequest):
            resp = q.handle_begin_quorum_epoch(req, now)
            self.effects(dst)
            src.quorum.handle_begin_quorum_epoch_response(dst.node_id, send.correlation_id, resp, now)
        elif isinstance(req, EndQuorumEpochRequest):
            resp = q.handle_end_quorum_epoch(req, now)
            self.effects(dst)
            src.quorum.handle_end_quorum_epoch_response(dst.node_id, send.correlation_id, resp, now)
        elif isinstance(req, FetchRequest):
            answer = q.handle_fetch(req, now)
            self.effects(dst)
            records = dst.log.records[answer.read_from:] if answer.read_from is not None else []
            outcome = src.quorum.handle_fetch_response(dst.node_id, send.correlation_id, FetchResult(
                answer.error_code, answer.leader_id, answer.leader_epoch, answer.high_watermark, answer.diverging),
                now)
            if outcome.action is FetchAction.APPEND:
                for epoch in records:
                    src.log.add(epoch)
                src.quorum.follower_appended(outcome.high_watermark, now)
        self.effects(src)

    # ----------------------------------------------------------------------------------------- time

    def step(self, ms: int = 10) -> None:
        self.now += ms
        for node in list(self.nodes.values()):
            if node.up:
                node.quorum.poll(self.now)
                self.effects(node)

    def run(self, ms: int, step: int = 10) -> None:
        for _ in range(ms // step):
            self.step(step)

    def leader(self) -> SimNode | None:
        live = [n for n in self.nodes.values() if n.up and n.quorum.state is State.LEADER]
        assert len(live) <= 1 or len({n.quorum.epoch for n in live}) == len(live)
        return max(live, key=lambda n: n.quorum.epoch) if live else None

    def run_until_leader(self, limit_ms: int = 20_000) -> SimNode:
        for _ in range(limit_ms // 10):
            self.step()
            leader = self.leader()
            if leader is not None and leader.hw > 0 and all(
                    n.quorum.leader_id == leader.node_id for n in self.nodes.values()
                    if n.up and n.node_id not in self.cut_off):
                return leader
        raise AssertionError(f"no settled leader after {limit_ms} ms: {[n.quorum for n in self.nodes.values()]}")

    def write(self, leader: SimNode, n: int = 1) -> None:
        """The active controller appends n records in its epoch."""
        leader.log.add(leader.quorum.epoch, n)
        leader.quorum.leader_flushed(leader.log.end_offset(), self.now)
        self.effects(leader)
