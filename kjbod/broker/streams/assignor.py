"""The sticky task assignor of streams groups (KIP-1071's "sticky"), without I/O.

Strategy: a task is (sub-topology id, partition).  Active tasks are spread so that no member holds more than its
quota (the tasks left divided among the members not yet full, rounded up, as it is at that moment), keeping a
task where it was: first with the member that ran it as active, then with a member that kept it as a standby (it
has the state warm), then with the least loaded member (fewest tasks in its process per member, then fewest of its
own, then its id, so the answer does not depend on dict order).  Standby tasks (`num_standby_replicas` copies of
each task of a stateful sub-topology) go to members of *other* processes than the task's active one and than each
other's, preferring the task's previous active owner, then a member that held that standby before, each only while
under the quota of all tasks, then (in a second pass) the least loaded; a copy with no such process left is not
placed, as Kafka's assignor leaves it.  Warm-up tasks are not given (Kafka 4.3's assignor gives none).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

Task = tuple[str, int]
Tasks = dict[str, set[int]]  # sub-topology id -> partitions


@dataclass(frozen=True, slots=True)
class MemberSpec:
    process_id: str
    active: Mapping[str, frozenset[int]] = field(default_factory=dict)  # what the member held before
    standby: Mapping[str, frozenset[int]] = field(default_factory=dict)


@dataclass(slots=True)
class MemberTasks:
    active: Tasks = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)
    warmup: Tasks = field(default_factory=dict)


def _flat(tasks: Mapping[str, frozenset[int] | set[int]]) -> set[Task]:
    return {(s, p) for s, ps in tasks.items() for p in ps}


def assign(members: Mapping[str, MemberSpec], tasks: Mapping[str, int], stateful: set[str],
           num_standby_replicas: int = 0) -> dict[str, MemberTasks]:
    out = {m: MemberTasks() for m in members}
    if not members:
        return out
    all_tasks = sorted(((s, p) for s, n in tasks.items() for p in range(n)), key=lambda t: (t[1], t[0]))
    load: dict[str, int] = dict.fromkeys(members, 0)  # tasks of either kind per member
    active_load: dict[str, int] = dict.fromkeys(members, 0)
    process_members: dict[str, list[str]] = {}
    for m, spec in members.items():
        process_members.setdefault(spec.process_id, []).append(m)

    def process_load(m: str) -> float:
        ms = process_members[members[m].process_id]
        return sum(load[x] for x in ms) / len(ms)

    # the quotas shrink as members fill up: what is left divided among the members that still have room; a member
    # is under a quota while it holds fewer tasks than the quota is now (Kafka's hasUnfulfilled*TaskQuota)
    stateful_tasks = [t for t in all_tasks if t[0] in stateful] if num_standby_replicas > 0 else []
    active_quota = _Quota(len(all_tasks), len(members))
    total_quota = _Quota(len(all_tasks) + num_standby_replicas * len(stateful_tasks), len(members))
    prev_active = {t: m for m, spec in sorted(members.items()) for t in _flat(spec.active)}
    prev_standby: dict[Task, list[str]] = {}
    for m, spec in sorted(members.items()):
        for t in _flat(spec.standby):
            prev_standby.setdefault(t, []).append(m)
    owner: dict[Task, str] = {}

    def give(m: str, t: Task) -> None:
        out[m].active.setdefault(t[0], set()).add(t[1])
        owner[t] = m
        load[m] += 1
        active_load[m] += 1
        active_quota.count(m, active_load[m])
        total_quota.count(m, load[m])

    rest = []
    for t in all_tasks:
        prev = prev_active.get(t)
        if prev is not None and active_quota.under(active_load[prev]):
            give(prev, t)
        else:
            rest.append(t)
    later = []
    for t in rest:
        candidates = [m for m in prev_standby.get(t, []) if active_quota.under(active_load[m])]
        if candidates:
            give(min(candidates, key=lambda m: (process_load(m), load[m], m)), t)
        else:
            later.append(t)
    for t in later:
        open_ = [m for m in members if active_quota.under(active_load[m])] or list(members)
        give(min(open_, key=lambda m: (active_load[m], process_load(m), m)), t)

    # standbys: first to previous holders (the task's active owner before, then a previous standby), each while
    # under the quota of all tasks, going through the tasks from the last partition as Kafka does; the copies left
    # go to the least loaded members afterwards
    used: dict[Task, set[str]] = {t: {members[owner[t]].process_id} for t in stateful_tasks}

    def standby(m: str, t: Task) -> None:
        out[m].standby.setdefault(t[0], set()).add(t[1])
        load[m] += 1
        total_quota.count(m, load[m])
        used[t].add(members[m].process_id)

    def free(m: str | None, t: Task) -> bool:
        return m is not None and members[m].process_id not in used[t] and total_quota.under(load[m])

    deferred: list[tuple[Task, int]] = []
    for t in reversed(stateful_tasks):
        for i in range(num_standby_replicas):
            prev = prev_active.get(t)
            if prev is not None and free(prev, t):
                standby(prev, t)
                continue
            pool = [m for m in prev_standby.get(t, []) if free(m, t)]
            if pool:
                standby(min(pool, key=lambda m: (process_load(m), load[m], m)), t)
                continue
            deferred.append((t, num_standby_replicas - i))
            break
    for t, left in sorted(deferred, reverse=True):
        for _ in range(left):
            candidates = [m for m in members if members[m].process_id not in used[t]]
            if not candidates:
                break
            standby(min(candidates, key=lambda m: (process_load(m), load[m], m)), t)
    return out


class _Quota:
    """Tasks per member, rounded up, over the members not yet full (Kafka's computeTasksPerMember and its
    updates)."""

    def __init__(self, tasks: int, members: int) -> None:
        self.tasks, self.members = tasks, members
        self.full: set[str] = set()

    def value(self) -> int:
        return -(-self.tasks // self.members) if self.members > 0 else 0

    def under(self, held: int) -> bool:
        return held < self.value()

    def count(self, member: str, held: int) -> None:
        """`member` now holds `held` tasks: once it reaches the quota, the rest is shared among the others."""
        if member not in self.full and held >= self.value():
            self.full.add(member)
            self.tasks -= held
            self.members -= 1
