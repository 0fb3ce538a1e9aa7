"""DescribeLogDirs lists each replica once, current and future, while moves wait, copy, resume and finish.

In-process: a LogManager and a ReplicaMover (the rig) behind the DescribeLogDirs handler's ``collect``. One mover
thread and a tight throttle keep moves queued behind the one that copies; a kill (no clean shutdown) and a new rig
on the same dirs resume them: the loader opens each ``-future`` dir as a future log, and a resumed move that
waits for the thread is reported from that log only, not a second time from the mover's progress.
"""

from __future__ import annotations

import time
from collections import Counter
from types import SimpleNamespace

from kjbod.broker.handlers.describe_log_dirs import collect
from kjbod.storage.config import LogConfig

from .conftest import TOPIC_ID, Rig, wait_for

CONFIG = LogConfig(segment_bytes=64 << 10, file_delete_delay_ms=0)
PARTITIONS = range(4)


def listing(rig: Rig, wanted: dict[str, set[int]] | None = None) -> Counter[tuple[str, int, bool, str]]:
    """(topic, partition, is_future, dir) -> how often collect() lists it."""
    node = SimpleNamespace(logs=SimpleNamespace(manager=rig.manager), mover=rig.mover)
    seen: Counter[tuple[str, int, bool, str]] = Counter()
    for path, topics in collect(node, wanted).items():
        for topic, parts in topics.items():
            for p in parts:
                seen[(topic, p.partition_index, p.is_future_key, path)] += 1
    return seen


def in_place(rig: Rig, dests: dict[int, str]) -> set[int]:
    """The partitions whose current log is in their destination (the swap is done)."""
    return {p for p in PARTITIONS if (plog := rig.manager.find("once", p)) is not None and plog.log_dir == dests[p]}


def check_once(rig: Rig, dests: dict[int, str]) -> set[int]:
    """Every replica once (in both forms of the request), and a future replica in its destination for exactly
    the moves not swapped yet; returns the partitions swapped by the end of the check."""
    for wanted in (None, {"once": set(PARTITIONS)}):
        done_before = in_place(rig, dests)
        seen = listing(rig, wanted)
        done_after = in_place(rig, dests)
        per_replica: Counter[tuple[str, int, bool]] = Counter()
        for (t, p, f, _d), n in seen.items():
            per_replica[(t, p, f)] += n
        assert all(n == 1 for n in per_replica.values()), seen
        assert {p for t, p, f in per_replica if not f} == set(PARTITIONS), seen  # every current replica
        futures = {p: d for t, p, f, d in seen if f}
        assert all(d == dests[p] for p, d in futures.items()), seen  # a future replica is in its destination
        assert not set(futures) & done_before, seen  # none for a move already swapped
        assert set(PARTITIONS) - done_after <= set(futures), seen  # one for every move not swapped yet
    return done_after


def test_moves_resumed_while_queued_are_listed_once(make_rig, log_dirs):
    rig = make_rig(config=CONFIG, threads=1, rate=50_000)
    dests = {}
    for p in PARTITIONS:
        rig.manager.create_partition("once", p, TOPIC_ID, dir=log_dirs[p % 2])
        for i in range(600):
            rig.append("once", p, [b"%06d" % i + b"v" * 500])
        dests[p] = log_dirs[2]
    assert rig.mover.request_moves([("once", p, dests[p]) for p in PARTITIONS]) == {}
    assert check_once(rig, dests) == set()  # accepted: queued or copying, each listed once
    rig.kill()

    rig = make_rig(config=CONFIG, threads=1, rate=50_000, start=False)
    assert {f.partition for f in rig.manager.future_logs()} == set(PARTITIONS)
    rig.mover.start()
    rig.mover.resume_at_startup()
    # One thread: at least three moves wait, each with the future log the loader opened.
    queued = [m for m in rig.mover.all_progress() if m.state == "queued"]
    assert len(queued) >= 3 and all(m.registered for m in queued), queued
    assert check_once(rig, dests) == set()
    rig.mover.throttle.set_rate(20_000_000)
    # Until every move is done, through every step (adopted, copying, catching up, swapped), each once.
    deadline = time.monotonic() + 120
    while check_once(rig, dests) != set(PARTITIONS):
        assert time.monotonic() < deadline, rig.mover.all_progress()
        time.sleep(0.002)
    wait_for(lambda: all(rig.moved("once", p, dests[p]) for p in PARTITIONS), timeout=60)
    assert check_once(rig, dests) == set(PARTITIONS)
