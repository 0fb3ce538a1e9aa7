"""The sticky task assignor of streams groups (KIP-1071's "sticky"), without I/O.

Strategy: a task is (sub-topology id, partition).  Active tasks are spread so that no member holds more than its
quota (the total divided among the members, rounded up), keeping a task where it was: first with the member that
ran it as active, then with a member that kept it as a standby (it has the state warm), then with the least
loaded member (fewest tasks in its process per member, then fewest of its own, then its id, so the answer does
not depend on dict order).  Standby tasks (`num_standby_replicas` copies of each task of a stateful
sub-topology) go to members of *other* processes than the task's active one and than each other's, again
preferring a member that held that standby before, then the least loaded; a copy with no such process left is
not placed, as Kafka's assignor leaves it.  Warm-up tasks are not given (Kafka 4.3's assignor gives none).
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

    # the quota shrinks as members fill up: what is left divided among the members that still have room
    room = {"tasks": len(all_tasks), "members": len(members)}

    def quota() -> int:
        return -(-room["tasks"] // room["members"]) if room["members"] else 0

    full: set[str] = set()
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
        if m not in full and active_load[m] >= quota():
            full.add(m)
            room["tasks"] -= active_load[m]
            room["members"] -= 1

    rest = []
    for t in all_tasks:
        prev = prev_active.get(t)
        if prev is not None and prev not in full:
            give(prev, t)
        else:
            rest.append(t)
    later = []
    for t in rest:
        candidates = [m for m in prev_standby.get(t, []) if m not in full]
        if candidates:
            give(min(candidates, key=lambda m: (process_load(m), load[m], m)), t)
        else:
            later.append(t)
    for t in later:
        open_ = [m for m in members if m not in full] or list(members)
        give(min(open_, key=lambda m: (active_load[m], process_load(m), m)), t)

    if num_standby_replicas > 0:
        for t in all_tasks:
            if t[0] not in stateful:
                continue
            used = {members[owner[t]].process_id}
            for _ in range(num_standby_replicas):
                candidates = [m for m in members if members[m].process_id not in used]
                if not candidates:
                    break
                before = [m for m in prev_standby.get(t, []) if m in candidates]
                pool = before or candidates
                m = min(pool, key=lambda m: (process_load(m), load[m], m))
                out[m].standby.setdefault(t[0], set()).add(t[1])
                load[m] += 1
                used.add(members[m].process_id)
    return out
