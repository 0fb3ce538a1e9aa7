"""The plan of `kjbod balance-disks`: which replicas to move between one broker's log dirs. Pure: no I/O.

What is balanced, per broker (`plan_broker`):

* **Each dir on its own filesystem** (every online dir reports a different filesystem id, the kjbod
  DescribeLogDirs extension, or, from a broker that does not report ids, different volume sizes): the
  filesystems' used fraction, (total - usable) / total, what `df` shows. Moving a replica of `s` bytes takes `s`
  from its source filesystem and puts it on the target's.
* **Dirs sharing a filesystem** (two or more online dirs with one filesystem id, or equal volume sizes from a
  broker that does not report ids: equal sizes alone do not prove two disks): the filesystem's used fraction is
  the same for all of them whatever kjbod holds, so the plan balances the bytes kjbod's replicas take in each dir
  instead, as each dir's share of the broker's replica bytes. The plan says which case applied and why
  (`BrokerPlan.mode`, `mode_reason`).

The goal: every online dir that is not cordoned within `threshold` of the others (the spread, the largest used
fraction minus the smallest, at most `threshold`: 0.10 is ten percentage points), and every cordoned dir empty
(that is how an operator empties a disk before replacing it). Offline dirs are left out: nothing can be read
from them or written to them. Nothing is ever planned into a cordoned or offline dir, nor into a filesystem
without room for the copy (its usable bytes less the dir's reserve), and a replica already being moved
(`pinned`) stays where it is.

How little it moves: first the least any plan could move is worked out, ignoring replica boundaries: the band
[a, a + threshold] is placed where the bytes above it (plus everything in cordoned dirs) equal the room below it,
and those bytes are `BrokerPlan.least_bytes`. Then a greedy pass with whole replicas:

1. each cordoned dir's replicas, largest first, go to the dir with the most room below the band's top that has
   space for them;
2. while the spread is over the threshold: the smallest single move that brings every dir within it, if there
   is one; else from the fullest dir to the emptiest one (else the next pair,
   fullest sources and emptiest targets first), the largest replica no bigger than what has to move (what the
   source is over the band's top, or what the target is under its bottom, whichever is more) goes; when every
   replica is bigger than that, the smallest one does. When no single replica can go, two are swapped (one each
   way, the fewest bytes first). A move or swap is taken only if it brings the two dirs' fractions closer than
   before (it lowers the sum of squares of the fractions, so the pass ends), and each replica moves at most
   once.

Greedy is not optimal: replica sizes can make it move more than the least, or stop short of the threshold when
no single move brings two dirs closer (then the plan says so, with the spread it reaches). The tests compare it
with an exhaustive search on small brokers.

Impossible cases are reported in `BrokerPlan.problems`, one sentence each, never raised: one online dir, every
online dir cordoned, a cordoned dir's replica that fits nowhere, a spread the moves cannot bring within the
threshold.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

FILESYSTEM = "filesystem"
REPLICA_BYTES = "replica-bytes"
ONLINE, CORDONED, OFFLINE = "online", "cordoned", "offline"
EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class Replica:
    topic: str
    partition: int
    size: int

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class DirState:
    """One log dir as DescribeLogDirs reports it (sizes None when unknown)."""

    path: str
    online: bool = True
    cordoned: bool = False
    total_bytes: int | None = None
    usable_bytes: int | None = None
    reserved_bytes: int = 0
    filesystem_id: int | None = None
    replicas: tuple[Replica, ...] = ()


@dataclass(frozen=True, slots=True)
class Move:
    topic: str
    partition: int
    source: str
    target: str
    size: int

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(slots=True)
class DirUsage:
    """A dir's load before and after the plan, in the unit the plan balances (see the module docstring)."""

    path: str
    state: str  # online, cordoned or offline
    capacity: int  # the filesystem's size, or the broker's replica bytes (REPLICA_BYTES); 0 for an offline dir
    before: int  # used bytes (FILESYSTEM) or replica bytes in the dir (REPLICA_BYTES)
    after: int
    replicas_before: int = 0
    replicas_after: int = 0

    @property
    def fraction_before(self) -> float | None:
        return self.before / self.capacity if self.capacity > 0 else None

    @property
    def fraction_after(self) -> float | None:
        return self.after / self.capacity if self.capacity > 0 else None


@dataclass
class BrokerPlan:
    broker: int
    threshold: float
    mode: str = REPLICA_BYTES
    mode_reason: str = ""
    dirs: list[DirUsage] = field(default_factory=list)
    moves: list[Move] = field(default_factory=list)
    spread_before: float = 0.0
    spread_after: float = 0.0
    least_bytes: int = 0  # what any plan must move at least (replica boundaries ignored)
    problems: list[str] = field(default_factory=list)  # why the goal is not (fully) reached
    notes: list[str] = field(default_factory=list)  # worth saying, not wrong

    @property
    def bytes_to_move(self) -> int:
        return sum(m.size for m in self.moves)

    @property
    def reaches_goal(self) -> bool:
        return not self.problems


def spread(fractions: Iterable[float]) -> float:
    values = list(fractions)
    return max(values) - min(values) if len(values) > 1 else 0.0


def _bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def _mode(online: Sequence[DirState]) -> tuple[str, str]:
    """(mode, reason): balance the filesystems' used fraction, or the replica bytes of dirs sharing one."""
    ids = [d.filesystem_id for d in online]
    sizes_known = all(d.total_bytes and d.total_bytes > 0 and d.usable_bytes is not None for d in online)
    if all(i is not None for i in ids):
        groups: dict[int | None, list[str]] = {}
        for d in online:
            groups.setdefault(d.filesystem_id, []).append(d.path)
        shared = [paths for paths in groups.values() if len(paths) > 1]
        if shared:
            which = "; ".join(", ".join(paths) for paths in shared)
            return REPLICA_BYTES, (f"log dirs share a filesystem ({which}): its used fraction is the same for each "
                                   "whatever kjbod holds, so the bytes of kjbod's replicas in each dir are balanced")
        if sizes_known:
            return FILESYSTEM, "each log dir has a filesystem of its own: their used fractions are balanced"
        return REPLICA_BYTES, ("the broker does not report its filesystems' sizes: the bytes of kjbod's replicas in "
                               "each dir are balanced")
    if sizes_known and len({d.total_bytes for d in online}) == len(online):
        return FILESYSTEM, ("the broker does not say which dirs share a filesystem, but every volume has a different "
                            "size, so each is its own: their used fractions are balanced")
    return REPLICA_BYTES, ("the broker does not say which dirs share a filesystem and the volume sizes do not tell "
                           "them apart: the bytes of kjbod's replicas in each dir are balanced")


class _State:
    """Loads, capacities and free room as the plan's moves change them."""

    def __init__(self, mode: str, online: Sequence[DirState]) -> None:
        self.mode = mode
        self.replica_bytes = {d.path: sum(r.size for r in d.replicas) for d in online}
        total = sum(self.replica_bytes.values())
        if mode == FILESYSTEM:
            self.load = {d.path: (d.total_bytes or 0) - (d.usable_bytes or 0) for d in online}
            self.capacity = {d.path: d.total_bytes or 0 for d in online}
        else:
            self.load = dict(self.replica_bytes)
            self.capacity = {d.path: total for d in online}
        self.fs = {d.path: d.filesystem_id if d.filesystem_id is not None else ("path", d.path) for d in online}
        self.free: dict[object, int | None] = {}
        for d in online:
            room = None if d.usable_bytes is None else d.usable_bytes - max(0, d.reserved_bytes)
            key = self.fs[d.path]
            known = self.free.get(key, room)
            self.free[key] = room if known is None or room is None else min(known, room)

    def fraction(self, path: str) -> float:
        c = self.capacity[path]
        return self.load[path] / c if c > 0 else 0.0

    def room(self, path: str) -> int | None:
        return self.free[self.fs[path]]

    def fits(self, path: str, size: int) -> bool:
        room = self.room(path)
        return room is None or room >= size

    def move(self, source: str, target: str, size: int) -> None:
        self.load[source] -= size
        self.load[target] += size
        self.replica_bytes[source] -= size
        self.replica_bytes[target] += size
        if self.fs[source] != self.fs[target]:
            for key, delta in ((self.fs[target], -size), (self.fs[source], size)):
                if self.free[key] is not None:
                    self.free[key] = self.free[key] + delta  # type: ignore[operator]


def _band(state: _State, eligible: Sequence[str], drained: int, threshold: float) -> tuple[float, int]:
    """(a, bytes): the band [a, a + threshold] where the bytes over it (plus `drained`, all of the cordoned
    dirs') equal the room under it, and those bytes: the least any plan moves."""
    def over(a: float) -> float:
        return drained + sum(max(0.0, state.load[p] - (a + threshold) * state.capacity[p]) for p in eligible)

    def under(a: float) -> float:
        return sum(max(0.0, a * state.capacity[p] - state.load[p]) for p in eligible)

    lo = min(state.fraction(p) for p in eligible) - threshold - 1.0
    hi = max(state.fraction(p) for p in eligible) + 1.0 + drained / max(1, min(state.capacity[p] for p in eligible))
    for _ in range(200):
        mid = (lo + hi) / 2
        if over(mid) > under(mid):
            lo = mid
        else:
            hi = mid
    a = (lo + hi) / 2
    return a, round(max(over(a), under(a)))


def plan_broker(broker: int, dirs: Sequence[DirState], threshold: float = 0.10,
                pinned: Iterable[tuple[str, int]] = (), min_move_bytes: int = 0) -> BrokerPlan:
    """The moves that balance one broker's log dirs (see the module docstring).  When evening out the dirs
    that are not cordoned would move fewer than `min_move_bytes` at least, they are left as they are (a note
    says so); cordoned dirs are emptied whatever their size."""
    plan = BrokerPlan(broker, threshold)
    online = [d for d in dirs if d.online]
    eligible = [d.path for d in online if not d.cordoned]
    cordoned = [d for d in online if d.cordoned]
    frozen = set(pinned)
    offline = [d.path for d in dirs if not d.online]
    if offline:
        plan.notes.append(f"left out, offline: {', '.join(offline)}")
    if frozen:
        plan.notes.append(f"{len(frozen)} replica{'s' if len(frozen) != 1 else ''} already moving, left where "
                          f"{'they are' if len(frozen) != 1 else 'it is'}: "
                          f"{', '.join(f'{t}-{p}' for t, p in sorted(frozen))}")
    mode, reason = _mode(online) if online else (REPLICA_BYTES, "no online log dir")
    plan.mode, plan.mode_reason = mode, reason
    state = _State(mode, online)

    def usage() -> list[DirUsage]:
        out = []
        for d in dirs:
            if not d.online:
                out.append(DirUsage(d.path, OFFLINE, 0, 0, 0))
                continue
            n = len(d.replicas)
            out.append(DirUsage(d.path, CORDONED if d.cordoned else ONLINE, state.capacity[d.path],
                                state.load[d.path], state.load[d.path], n, n))
        return out

    plan.dirs = usage()
    movable_in_cordoned = [r for d in cordoned for r in d.replicas if (r.topic, r.partition) not in frozen]
    if len(online) < 2:
        if len(online) == 1 and online[0].cordoned and online[0].replicas:
            plan.problems.append(f"broker {broker}: its only online log dir {online[0].path} is cordoned: there is "
                                 "no other dir to move its replicas to")
        else:
            plan.notes.append(f"broker {broker} has {'one online log dir' if online else 'no online log dir'}: "
                              "nothing to balance")
        return plan
    if not eligible:
        if movable_in_cordoned:
            paths = ", ".join(d.path for d in cordoned)
            plan.problems.append(f"broker {broker}: every online log dir is cordoned ({paths}): there is nowhere "
                                 "to move its replicas to; uncordon one (cordoned.log.dirs) first")
        else:
            plan.notes.append(f"broker {broker}: every online log dir is cordoned and empty: nothing to move")
        return plan
    if mode == REPLICA_BYTES and not any(state.replica_bytes.values()):
        plan.notes.append(f"broker {broker} holds no replica bytes: nothing to balance")
        return plan

    plan.spread_before = spread(state.fraction(p) for p in eligible)
    drained = sum(r.size for r in movable_in_cordoned)
    small = False
    if min_move_bytes > 0 and plan.spread_before > threshold + EPSILON:
        evening = _band(state, eligible, 0, threshold)[1]
        if evening < min_move_bytes:
            small = True
            plan.notes.append(
                f"broker {broker}: its dirs are {plan.spread_before * 100:.1f} points apart, but evening them out "
                f"would move about {_bytes(evening)}, under the minimum worth moving ({_bytes(min_move_bytes)}, "
                "--min-move-bytes): left as they are")
    a, plan.least_bytes = _band(state, eligible, drained, threshold)
    top = a + threshold
    moved: set[tuple[str, int]] = set()
    contents: dict[str, list[Replica]] = {d.path: [r for r in d.replicas if (r.topic, r.partition) not in frozen]
                                          for d in online}

    def take(r: Replica, source: str, target: str) -> None:
        plan.moves.append(Move(r.topic, r.partition, source, target, r.size))
        state.move(source, target, r.size)
        contents[source].remove(r)
        moved.add((r.topic, r.partition))

    # 1. Empty the cordoned dirs, largest replica first, each into the dir with most room under the band's top.
    for d in cordoned:
        for r in sorted(contents[d.path], key=lambda r: (-r.size, r.topic, r.partition)):
            targets = [p for p in eligible if state.fits(p, r.size)]
            if not targets:
                roomiest = max(eligible, key=lambda p: state.room(p) or 0)
                plan.problems.append(
                    f"{r.name} ({_bytes(r.size)}) in cordoned {d.path} fits in no other log dir: the most room is "
                    f"{_bytes(state.room(roomiest) or 0)} in {roomiest}")
                continue
            target = max(targets, key=lambda p: (top * state.capacity[p] - state.load[p], -eligible.index(p)))
            take(r, d.path, target)

    # 2. Bring the others within the threshold.
    def bound(source: str, target: str) -> float:
        """Moving fewer bytes than this from `source` to `target` brings their fractions closer."""
        gap = state.fraction(source) - state.fraction(target)
        cs, ct = state.capacity[source], state.capacity[target]
        return 2 * gap / (1 / cs + 1 / ct) if gap > EPSILON and cs > 0 and ct > 0 else 0.0

    def need(source: str, target: str) -> float:
        return max(state.load[source] - top * state.capacity[source], a * state.capacity[target] - state.load[target],
                   1.0)

    def free(path: str) -> list[Replica]:
        return [r for r in contents[path] if (r.topic, r.partition) not in moved and r.size > 0]

    def spread_after(r: Replica, source: str, target: str) -> float:
        load = dict(state.load)
        load[source] -= r.size
        load[target] += r.size
        return spread(load[p] / state.capacity[p] if state.capacity[p] > 0 else 0.0 for p in eligible)

    def finishing_move() -> tuple[Replica, str, str] | None:
        """The smallest single move that brings every dir within the threshold, if one does."""
        best: tuple[Replica, str, str] | None = None
        for source in eligible:
            for target in eligible:
                if bound(source, target) <= 0:
                    continue
                for r in free(source):
                    if (best is None or r.size < best[0].size) and state.fits(target, r.size) \
                            and spread_after(r, source, target) <= threshold + EPSILON:
                        best = (r, source, target)
        return best

    def one_move() -> tuple[Replica, str, str] | None:
        finishing = finishing_move()
        if finishing is not None:
            return finishing
        order = sorted(eligible, key=lambda p: (state.fraction(p), eligible.index(p)))
        for source in reversed(order):
            for target in order:
                limit = bound(source, target)
                if limit <= 0:
                    break
                fits = [r for r in free(source) if r.size < limit - EPSILON and state.fits(target, r.size)]
                if not fits:
                    continue
                wanted = need(source, target)
                under = [r for r in fits if r.size <= wanted]
                pick = max(under, key=lambda r: (r.size, r.topic, r.partition)) if under \
                    else min(fits, key=lambda r: (r.size, r.topic, r.partition))
                return pick, source, target
        return None

    def one_swap() -> tuple[Replica, Replica, str, str] | None:
        """When no single move helps: a replica each way whose difference does (the fewest bytes first)."""
        order = sorted(eligible, key=lambda p: (state.fraction(p), eligible.index(p)))
        for source in reversed(order):
            for target in order:
                limit = bound(source, target)
                if limit <= 0:
                    break
                wanted = need(source, target)
                swaps = [(r, q) for r in free(source) for q in free(target)
                         if 0 < r.size - q.size < limit - EPSILON and state.fits(target, r.size)
                         and state.fits(source, q.size)]
                if swaps:
                    r, q = min(swaps, key=lambda rq: (rq[0].size - rq[1].size > wanted, rq[0].size + rq[1].size,
                                                      rq[0].topic, rq[0].partition, rq[1].topic, rq[1].partition))
                    return r, q, source, target
        return None

    for _ in range(0 if small else sum(len(c) for c in contents.values()) + 1):
        if spread(state.fraction(p) for p in eligible) <= threshold + EPSILON:
            break
        found = one_move()
        if found is not None:
            take(found[0], found[1], found[2])
            continue
        swap = one_swap()
        if swap is None:
            break
        r, q, source, target = swap
        take(r, source, target)
        take(q, target, source)

    plan.spread_after = spread(state.fraction(p) for p in eligible)
    if plan.spread_after > threshold + EPSILON and not small:
        unit = "used fraction" if mode == FILESYSTEM else "share of replica bytes"
        plan.problems.append(
            f"broker {broker}: the {unit} of its dirs cannot be brought within {threshold * 100:g} points by moving "
            f"whole replicas (each move must bring two dirs closer); the plan reaches a spread of "
            f"{plan.spread_after * 100:.1f} points")
    counts = {d.path: len(d.replicas) for d in online}
    for m in plan.moves:
        counts[m.source] -= 1
        counts[m.target] += 1
    after = {d.path: d for d in usage()}
    for u in plan.dirs:
        if u.state != OFFLINE:
            u.after = after[u.path].before
            u.replicas_after = counts[u.path]
    return plan
