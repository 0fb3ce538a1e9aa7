"""One local replica's replication state: leader or follower, epochs, ISR, and (on the leader) each follower's
fetch state, the high watermark rule, and which ISR change to ask the controller for.

Sans-IO: no asyncio, no sockets; the time comes in as milliseconds.  The replica manager (manager.py) drives it
from metadata deltas, follower fetches and its ISR-expiration timer, and sends the AlterPartition requests this
class proposes.  Rules, as Kafka's Partition (kraft-notes C.1, C.2, C.6):

* HW = min(leader LEO, LEO of every follower in the maximal ISR (committed ISR plus a pending expansion) or
  caught up and eligible to join); never backwards; frozen while the committed ISR is below
  min(`min.insync.replicas`, replication factor).
* A follower is caught up when its LEO equals the leader's, or it was at the leader's LEO within
  `replica.lag.time.max.ms`.  It joins the ISR when its LEO reaches the HW and the epoch start offset; it leaves
  the ISR once no longer caught up.  One change in flight per partition.
* A new leader epoch starts at the LEO (recorded in the leader epoch cache); followers in the ISR count as caught
  up from then, the others from never; their LEOs are unknown until they fetch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

LEADER, FOLLOWER = "leader", "follower"


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower replica (Kafka's Replica)."""

    broker_id: int
    log_end_offset: int = -1  # -1: unknown (no fetch in this leader epoch yet)
    last_caught_up_ms: int = 0
    last_fetch_leader_leo: int = -1
    last_fetch_ms: int = 0
    broker_epoch: int = -1
    log_start_offset: int = -1  # -1: unknown; from its fetches' LogStartOffset (DeleteRecords' low watermark)


@dataclass(slots=True)
class PendingIsr:
    isr: tuple[int, ...]
    expanding: bool
    sent: bool = False


@dataclass(slots=True)
class PartitionState:
    topic: str
    partition: int
    node_id: int
    topic_id: Any = None
    role: str | None = None
    leader_id: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    leader_epoch_start_offset: int = 0
    followers: dict[int, FollowerState] = field(default_factory=dict)
    pending: PendingIsr | None = None

    # ------------------------------------------------------------------------------------------ transitions

    def make_leader(self, p: Any, leo: int, now_ms: int) -> bool:
        """Leads `p` (a PartitionImage); returns whether the leader epoch is new (the log then starts it)."""
        new_epoch = self.role != LEADER or p.leader_epoch != self.leader_epoch
        self.role, self.leader_id = LEADER, self.node_id
        self.leader_epoch, self.partition_epoch = p.leader_epoch, p.partition_epoch
        self.replicas, self.isr = tuple(p.replicas), tuple(p.isr)
        self.pending = None
        others = [r for r in self.replicas if r != self.node_id]
        if new_epoch:
            self.leader_epoch_start_offset = leo
            self.followers = {r: FollowerState(r, last_caught_up_ms=now_ms if r in self.isr else 0) for r in others}
        else:
            self.followers = {r: self.followers.get(r) or FollowerState(r) for r in others}
        return new_epoch

    def make_follower(self, p: Any) -> bool:
        """Follows `p`'s leader; returns whether the fetcher must (re)start: a new leader or leader epoch."""
        changed = self.role != FOLLOWER or p.leader_epoch != self.leader_epoch or p.leader != self.leader_id
        self.role, self.leader_id = FOLLOWER, p.leader
        self.leader_epoch, self.partition_epoch = p.leader_epoch, p.partition_epoch
        self.replicas, self.isr = tuple(p.replicas), tuple(p.isr)
        self.followers, self.pending = {}, None
        return changed

    # ------------------------------------------------------------------------------------------ leader side

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        if self.pending is not None and self.pending.expanding:
            return self.pending.isr
        return self.isr

    def effective_min_isr(self, min_isr: int) -> int:
        return min(min_isr, len(self.replicas)) if self.replicas else min_isr

    def under_min_isr(self, min_isr: int) -> bool:
        return len(self.isr) < self.effective_min_isr(min_isr)

    def caught_up(self, f: FollowerState, leader_leo: int, now_ms: int, lag_ms: int) -> bool:
        return f.log_end_offset == leader_leo or now_ms - f.last_caught_up_ms <= lag_ms

    def eligible(self, broker_id: int, image: Any) -> bool:
        """Kafka's isReplicaIsrEligible: registered, not fenced, not shutting down, the fetch's broker epoch
        current (or unknown)."""
        reg = image.brokers.get(broker_id) if image is not None else None
        if reg is None or reg.fenced or reg.in_controlled_shutdown:
            return False
        f = self.followers.get(broker_id)
        return f is None or f.broker_epoch in (-1, reg.epoch)

    def update_follower(self, broker_id: int, fetch_offset: int, broker_epoch: int, leader_leo: int,
                        now_ms: int) -> bool:
        """A follower fetched at `fetch_offset`: its LEO and caught-up time; returns whether its LEO moved."""
        f = self.followers[broker_id]
        if fetch_offset >= leader_leo:
            f.last_caught_up_ms = max(f.last_caught_up_ms, now_ms)
        elif fetch_offset >= f.last_fetch_leader_leo:
            f.last_caught_up_ms = max(f.last_caught_up_ms, f.last_fetch_ms)
        moved = f.log_end_offset != fetch_offset
        f.log_end_offset, f.last_fetch_leader_leo, f.last_fetch_ms = fetch_offset, leader_leo, now_ms
        f.broker_epoch = broker_epoch
        return moved

    def new_high_watermark(self, old_hw: int, leader_leo: int, now_ms: int, lag_ms: int, min_isr: int,
                           image: Any) -> int | None:
        """The HW the rule gives, or None when it must not move (below min ISR, or not higher)."""
        replicas = self.replicas
        # under_min_isr and maximal_isr, inline: this runs at every follower fetch that moves a follower
        if self.role != LEADER or len(self.isr) < (min(min_isr, len(replicas)) if replicas else min_isr):
            return None
        hw = leader_leo
        pending = self.pending
        maximal = pending.isr if pending is not None and pending.expanding else self.isr
        for r, f in self.followers.items():
            if f.log_end_offset < hw and (r in maximal or (self.caught_up(f, leader_leo, now_ms, lag_ms)
                                                           and self.eligible(r, image))):
                hw = f.log_end_offset
        return hw if hw > old_hw else None

    def expansion(self, broker_id: int, hw: int, image: Any) -> tuple[int, ...] | None:
        """The ISR with `broker_id` added, when it may join now (Kafka's maybeExpandIsr)."""
        f = self.followers.get(broker_id)
        if (self.role != LEADER or self.pending is not None or f is None or broker_id in self.isr
                or f.log_end_offset < hw or f.log_end_offset < self.leader_epoch_start_offset
                or not self.eligible(broker_id, image)):
            return None
        return tuple(r for r in self.replicas if r in self.isr or r == broker_id)

    def shrink(self, leader_leo: int, now_ms: int, lag_ms: int) -> tuple[int, ...] | None:
        """The ISR without the followers that are no longer caught up, when there are some."""
        if self.role != LEADER or self.pending is not None:
            return None
        out = [r for r in self.isr if r != self.node_id and (f := self.followers.get(r)) is not None
               and not self.caught_up(f, leader_leo, now_ms, lag_ms)]
        if not out:
            return None
        return tuple(r for r in self.isr if r not in out)

    def committed(self, leader_epoch: int, partition_epoch: int, isr: tuple[int, ...]) -> bool:
        """An AlterPartition success: takes the ISR unless it is stale; returns whether it was taken."""
        self.pending = None
        if leader_epoch != self.leader_epoch or partition_epoch < self.partition_epoch:
            return False
        self.isr, self.partition_epoch = isr, partition_epoch
        return True
