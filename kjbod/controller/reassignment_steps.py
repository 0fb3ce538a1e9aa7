"""KIP-435 reassignment batching, as pure functions: the next step of one partition, and which partitions start
a step now.  No image, no records: kjbod.controller.reassignment turns the answers into partition changes.

A step moves a partition from its current replicas (CR) towards its final target (FTR), as the KIP's
"Calculating a Reassignment Step" describes it:

* when the target's first replica (its preferred leader) is not a replica yet, the first step adds it alone,
  in front, so it can take over leadership early (plus, when fewer than `min.insync.replicas` replicas are in
  sync, enough further new replicas to reach it at once, whatever the replica limit);
* otherwise it drops up to `reassignment.parallel.replica.count` of the replicas the target leaves out (in
  their current order) and adds as many new ones as keep the partition at the target's size, at most that
  limit (more when the remaining in-sync replicas fall below min ISR), each new replica taking the slot of a
  dropped one (extra ones go last);
* a step whose replica set is the target's is the last one, in the target's order.

So (0, 1, 2, 3, 4) → (5, 6, 7, 8, 9) with two replicas at a time goes (5, 0, 1, 2, 3, 4), (5, 6, 2, 3, 4),
(5, 6, 7, 8, 4), (5, 6, 7, 8, 9), the KIP's example.  A step "moves the leader" when its first replica is not
the current leader.

A batch (`pick`): at most `reassignment.parallel.partition.count` partitions stepping at once and at most
`reassignment.parallel.leader.movements` of them moving their leader; free places go to leader movements
first, then to the others, each group in the order given.  The defaults (Kafka's: everything at once) turn
batching off altogether.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

INT_MAX = (1 << 31) - 1
REPLICA_COUNT = "reassignment.parallel.replica.count"
PARTITION_COUNT = "reassignment.parallel.partition.count"
LEADER_MOVEMENTS = "reassignment.parallel.leader.movements"
KEYS = (REPLICA_COUNT, PARTITION_COUNT, LEADER_MOVEMENTS)

K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class Limits:
    replicas: int = INT_MAX
    partitions: int = INT_MAX
    leader_movements: int = INT_MAX

    @property
    def batching(self) -> bool:
        return (self.replicas, self.partitions, self.leader_movements) != (INT_MAX, INT_MAX, INT_MAX)

    @classmethod
    def from_configs(cls, configs: Mapping[str, str]) -> Limits:
        """The limits from the cluster-wide dynamic broker configs (unset or unreadable: unlimited)."""
        def value(key: str) -> int:
            try:
                return max(1, min(INT_MAX, int(configs.get(key, INT_MAX))))
            except ValueError:
                return INT_MAX

        return cls(value(REPLICA_COUNT), value(PARTITION_COUNT), value(LEADER_MOVEMENTS))


def next_step(current: Sequence[int], final: Sequence[int], *, isr: Sequence[int] = (), min_isr: int = 1,
              replica_count: int = INT_MAX) -> list[int]:
    """The replica list the partition goes to next (the final target itself on the last step)."""
    cur, fin = list(current), list(final)
    if set(cur) == set(fin):
        return fin
    new = [r for r in fin if r not in cur]
    if fin[0] not in cur:
        in_sync = sum(1 for r in cur if r in isr)
        added = [fin[0], *[r for r in new if r != fin[0]][:max(0, min_isr - in_sync - 1)]]
        step = [*added, *cur]
    else:
        dropped = [r for r in cur if r not in fin][:replica_count]
        kept = [r for r in cur if r not in dropped]
        in_sync_kept = sum(1 for r in kept if r in isr)
        count = max(min(len(fin) - len(kept), replica_count), min_isr - in_sync_kept)
        added_iter = iter(new[:max(0, count)])
        step = []
        for r in cur:
            if r in dropped:
                step += [n for n in (next(added_iter, None),) if n is not None]
            else:
                step.append(r)
        step += list(added_iter)
    return fin if set(step) == set(fin) else step


def moves_leader(step: Sequence[int], leader: int) -> bool:
    return bool(step) and step[0] != leader


def pick(waiting: Sequence[tuple[K, bool]], *, stepping: int, moving_leaders: int, limits: Limits) -> list[K]:
    """Which of the waiting partitions ((key, moves its leader)) start their next step now, given how many are
    stepping and how many of those move a leader."""
    free = limits.partitions - stepping
    leader_free = limits.leader_movements - moving_leaders
    out: list[K] = []
    for key, moving in waiting:
        if len(out) >= free:
            return out
        if moving and leader_free > 0:
            out.append(key)
            leader_free -= 1
    for key, moving in waiting:
        if len(out) >= free:
            break
        if not moving:
            out.append(key)
    return out
