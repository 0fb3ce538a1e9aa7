"""`kjbod reassign-partitions --generate`'s proposal: where each partition of the chosen topics should live, by
brokers and by log dirs, from what the cluster reports (pure: no I/O, so tests feed it plain values).

Strategy (disk-aware, unlike Kafka's tool, which spreads replicas by count and names no dirs):

* Every replica of the chosen topics is placed again, so each listed broker starts with its dirs' usable bytes
  plus what those replicas occupy there now (they may leave).  Partitions are placed largest first; each takes
  the `replication factor` brokers with the most room left, compared in steps of 1% of the roomiest broker's
  (ties: the fewest replicas placed; then a broker that already holds the partition, so nothing moves
  needlessly; then the lowest id), and its size is taken off them.
* The leader (first replica) is the chosen broker that leads the fewest proposed partitions so far, so
  leadership spreads too.
* Within a broker, a replica that stays keeps its dir (no intra-broker move); a new one goes to the online dir
  with the most room left, and its size is taken off that dir.  The proposal's `log_dirs` name those dirs, so
  `--execute` creates each new replica in place.
* Without sizes (a broker that reports none), room counts as 0 and the tie-breaks spread replicas by count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(slots=True)
class DirRoom:
    path: str
    usable: int  # bytes free now, plus the chosen topics' replicas here (they are placed again)


@dataclass(slots=True)
class BrokerRoom:
    broker_id: int
    dirs: list[DirRoom] = field(default_factory=list)
    placed: int = 0
    leaders: int = 0

    @property
    def usable(self) -> int:
        return sum(d.usable for d in self.dirs)


Key = tuple[str, int]


def propose(partitions: Mapping[Key, Sequence[int]], sizes: Mapping[Key, int],
            brokers: Mapping[int, Sequence[tuple[str, int]]],
            current_dirs: Mapping[tuple[str, int, int], str]) -> dict[Key, tuple[list[int], list[str]]]:
    """(topic, partition) -> (replicas, log dirs).

    `partitions`: the current replicas of every partition to place; `sizes`: each partition's size (its largest
    replica); `brokers`: each listed broker's online dirs as (path, usable bytes); `current_dirs`: (topic,
    partition, broker) -> the dir holding that replica now.  Raises ValueError when a replication factor exceeds
    the listed brokers."""
    rooms = {b: BrokerRoom(b, [DirRoom(path, max(usable, 0)) for path, usable in dirs])
             for b, dirs in brokers.items()}
    for (topic, partition), replicas in partitions.items():
        for b in replicas:
            path = current_dirs.get((topic, partition, b))
            room = rooms.get(b)
            if room is None or path is None:
                continue
            for d in room.dirs:
                if d.path == path:
                    d.usable += sizes.get((topic, partition), 0)
    # Room is compared in steps of 1% of the roomiest broker's, so a few bytes' difference (dirs on one
    # filesystem, measured moments apart) does not outweigh an even spread.
    quantum = max(max((r.usable for r in rooms.values()), default=0) // 100, 1)
    out: dict[Key, tuple[list[int], list[str]]] = {}
    order = sorted(partitions, key=lambda k: (-sizes.get(k, 0), k))
    for key in order:
        current = list(partitions[key])
        factor = len(current)
        if factor > len(rooms):
            raise ValueError(f"The target replication factor of {factor} cannot be reached because only "
                             f"{len(rooms)} broker(s) are listed.")
        size = sizes.get(key, 0)
        chosen = sorted(rooms.values(), key=lambda r: (-(r.usable // quantum), r.placed,
                                                       r.broker_id not in current, r.broker_id))[:factor]
        chosen.sort(key=lambda r: (r.leaders, r.broker_id not in current[:1], r.broker_id))
        chosen[0].leaders += 1
        replicas, dirs = [], []
        for room in chosen:
            room.placed += 1
            path = current_dirs.get((key[0], key[1], room.broker_id)) if room.broker_id in current else None
            target = next((d for d in room.dirs if d.path == path), None)
            if target is None and room.dirs:
                target = max(room.dirs, key=lambda d: (d.usable, -room.dirs.index(d)))
            if target is not None:
                target.usable -= size
            replicas.append(room.broker_id)
            dirs.append(target.path if target is not None else "any")
        out[key] = (replicas, dirs)
    return dict(sorted(out.items()))
