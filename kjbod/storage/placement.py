"""Which log dir a new partition goes to.

Two policies:

* ``most-usable`` (default): the online dir with the most usable bytes (statvfs ``f_bavail * f_frsize``).
  Each partition placed during the same call is assumed to take ``estimate`` bytes
  (:meth:`LogConfig.expected_partition_bytes`: retention.bytes + one segment when retention.bytes is set, else
  one segment), charged to every dir on the same filesystem (same ``st_dev``: three dirs on one disk share
  its free space). Dirs within ``estimate`` bytes of the best are near-tied; among those the one with the fewest
  partitions wins (then more usable bytes, then configuration order). So 6 partitions over 3 equal, empty dirs
  land 2/2/2 whether the dirs share a filesystem or not, and a dir with much more room still takes the lot.
* ``fewest-partitions``: Kafka's rule (``LogManager.nextLogDirs``): the dir holding the fewest logs (current and
  future), ties broken by configuration order; partitions placed in the same call count.

Cordoned dirs (KIP-1066, ``cordoned.log.dirs``) are left out of the candidates by the caller
(``LogManager.assign_dirs``); :func:`cordoned_dirs` reads and checks the setting.

The function is pure (statvfs is done by the caller), so the rule is tested without real disks.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

MOST_USABLE = "most-usable"
FEWEST_PARTITIONS = "fewest-partitions"
POLICIES = (MOST_USABLE, FEWEST_PARTITIONS)


@dataclass(frozen=True)
class DirCandidate:
    path: str
    usable_bytes: int
    partitions: int
    device: int | None = None  # st_dev; None: assume its own filesystem


def choose_dirs(candidates: Sequence[DirCandidate], count: int, *, policy: str, estimate: int) -> list[str]:
    """The dir for each of ``count`` new partitions, in order."""
    if policy not in POLICIES:
        raise ValueError(f"unknown placement policy {policy!r}; known: {', '.join(POLICIES)}")
    if not candidates:
        raise ValueError("no online log dir to place partitions in")
    order = {c.path: i for i, c in enumerate(candidates)}
    usable = {c.path: c.usable_bytes for c in candidates}
    parts = {c.path: c.partitions for c in candidates}
    chosen: list[str] = []
    for _ in range(count):
        if policy == FEWEST_PARTITIONS:
            best = min(candidates, key=lambda c: (parts[c.path], order[c.path]))
        else:
            top = max(usable.values())
            near = [c for c in candidates if usable[c.path] >= top - estimate]
            best = min(near, key=lambda c: (parts[c.path], -usable[c.path], order[c.path]))
        chosen.append(best.path)
        parts[best.path] += 1
        for c in candidates:
            same_fs = c.path == best.path or (c.device is not None and c.device == best.device)
            if same_fs:
                usable[c.path] -= estimate
    return chosen


CORDON_ALL = "*"


def cordoned_dirs(value: str | Sequence[str] | None, log_dirs: Sequence[str]) -> list[str]:
    """The log dirs a ``cordoned.log.dirs`` value names, as absolute paths in ``log.dirs`` order.

    The value is a comma-separated list of this broker's log dirs (a list is taken as already split), or ``*``
    for all of them; empty or None cordons none. Each entry is compared with the log dirs after making both
    absolute and normal (Kafka 4.3's first release missed a cordon written as a relative path, KAFKA-20901).
    An entry that is not one of them raises ValueError naming it and the log dirs."""
    if value is None:
        return []
    entries = [e.strip() for e in (value.split(",") if isinstance(value, str) else value)]
    entries = [e for e in entries if e]
    configured = [os.path.abspath(d) for d in log_dirs]
    if CORDON_ALL in entries:
        if len(entries) > 1:
            raise ValueError(f"cordoned.log.dirs: '*' cordons every log dir and cannot be listed with others "
                             f"({', '.join(e for e in entries if e != CORDON_ALL)})")
        return list(dict.fromkeys(configured))
    wanted = []
    for entry in entries:
        path = os.path.abspath(entry)
        if path not in configured:
            raise ValueError(f"cordoned.log.dirs: {entry!r} is not one of this broker's log dirs "
                             f"(log.dirs: {', '.join(configured)})")
        wanted.append(path)
    return [d for d in dict.fromkeys(configured) if d in wanted]
