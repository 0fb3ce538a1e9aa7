"""Named crash points in a replica move, for kill -9 tests; inert unless armed.

Strategy: the mover calls :func:`hit` at each step of KIP-113's move where a crash leaves a distinct state on
disk, from the request that accepts the move to the removal of the old copy. Nothing happens unless the point
is armed, and arming only happens through the ``KJBOD_FAILPOINTS`` environment variable read at import (``name``
or ``name@N``, comma-separated: fire at the N-th hit, default the first) or through :func:`arm` in-process. A fired point logs one line and sends SIGKILL to its own process, so
what the test sees is exactly a ``kill -9`` at that step: no finally blocks, no clean shutdown, no flush.

The points, in the order a move passes them:

* ``move_accepted``: AlterReplicaLogDirs' file work is done (the moves' ``-future`` dirs made and their entries
  fsynced, the dirs of cancelled or redirected moves removed), the answer is *not* sent yet: the client sees
  the connection drop, and the restarted node must carry on the moves all the same;
* ``future_dir_created``: a mover thread has taken the move and its ``-future`` dir (made when the move was
  accepted, so this comes after the answer unless the thread was idle: a kill -9 test that wants the answer
  first queues the move behind another one), partition.metadata durable, nothing copied yet;
* ``mid_segment_copy``: part of a closed segment copied (into its ``.tmp`` file);
* ``caught_up_before_lock``: the future log has caught up, the final step has not started;
* ``source_renamed_to_delete``: the current dir is now ``-delete``, the future not yet renamed;
* ``future_renamed_to_current``: the future dir is the partition dir, nothing checkpointed yet;
* ``before_old_copy_deleted``: the ``-delete`` dir is about to be removed.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable

import structlog

log = structlog.get_logger("kjbod.failpoints")

ENV = "KJBOD_FAILPOINTS"
POINTS = (
    "move_accepted",
    "future_dir_created",
    "mid_segment_copy",
    "caught_up_before_lock",
    "source_renamed_to_delete",
    "future_renamed_to_current",
    "before_old_copy_deleted",
)

_lock = threading.Lock()
_armed: dict[str, list] = {}  # name -> [hits left before firing, action]


def _kill(name: str) -> None:
    log.critical("failpoint_fired", failpoint=name, pid=os.getpid(), effect="SIGKILL")
    os.kill(os.getpid(), signal.SIGKILL)


def parse(spec: str) -> dict[str, int]:
    """``"a,b@3"`` -> {"a": 1, "b": 3}; unknown names raise ValueError naming them."""
    out: dict[str, int] = {}
    for item in (p.strip() for p in spec.split(",")):
        if not item:
            continue
        name, _, count = item.partition("@")
        if name not in POINTS:
            raise ValueError(f"unknown failpoint {name!r} in {ENV} (known: {', '.join(POINTS)})")
        try:
            n = int(count) if count else 1
        except ValueError:
            raise ValueError(f"invalid hit count {count!r} for failpoint {name} in {ENV}") from None
        out[name] = max(n, 1)
    return out


def arm(name: str, *, after: int = 1, action: Callable[[str], None] | None = None) -> None:
    """Fire ``name`` at its ``after``-th hit; ``action`` (default: SIGKILL this process) gets the name."""
    if name not in POINTS:
        raise ValueError(f"unknown failpoint {name!r} (known: {', '.join(POINTS)})")
    with _lock:
        _armed[name] = [after, action or _kill]


def disarm_all() -> None:
    with _lock:
        _armed.clear()


def hit(name: str) -> None:
    """The mover passes failpoint ``name``; fires it if armed and due (in whichever thread passes it)."""
    if not _armed:
        return
    with _lock:
        entry = _armed.get(name)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] > 0:
            return
        del _armed[name]
        action = entry[1]
    action(name)


def _from_env() -> None:
    spec = os.environ.get(ENV)
    if spec:
        for name, n in parse(spec).items():
            arm(name, after=n)


_from_env()
