"""A move whose source grows faster than it copies says so: ``replica_move_not_converging`` in the broker's log
(at most once a minute per move), the same state in the mover's progress and in `kjbod log-dirs move`'s line.
A move that is slow but gains on its source is never flagged.

The judgement (kjbod.broker.kip113.convergence) is driven with numbers; the mover with a clock the test moves
on by a fixed step at each of the mover's passes, so no assertion depends on how fast the machine is."""

from __future__ import annotations

import itertools
import threading
from types import SimpleNamespace

from kjbod.admin.types import ReplicaLogDirInfo
from kjbod.broker.kip113.convergence import ConvergenceWatch
from kjbod.cli.log_dirs import COPYING, MoveTracker, PlannedMove
from kjbod.cli.progress import human_rate
from kjbod.metrics.collect import NodeCollector
from kjbod.metrics.counters import RequestStats
from kjbod.storage.config import LogConfig

from .conftest import TOPIC_ID, captured_logs, wait_for

MIB = 1 << 20


def drive(watch: ConvergenceWatch, passes: list[tuple[int, int]], step: float = 5.0) -> list[bool]:
    """Feed (copied, source size) per pass, ``step`` seconds apart; the future holds what was copied."""
    return [watch.observe(i * step, copied, size, copied) is not None for i, (copied, size) in enumerate(passes)]


def test_a_source_growing_faster_than_the_copy_is_not_converging():
    # 10 MiB behind at the start; the source grows 3 MiB every 5 s, the copy takes 2 MiB.
    passes = [(2 * MIB * i, 10 * MIB + 3 * MIB * i) for i in range(40)]
    flagged = drive(ConvergenceWatch(), passes)
    assert not any(flagged[:24])  # not before a whole window (120 s) has been watched
    assert all(flagged[24:])
    state = ConvergenceWatch()
    for i, (copied, size) in enumerate(passes):
        state.observe(i * 5.0, copied, size, copied)
    s = state.state
    assert s is not None and s.seconds == 120.0
    assert s.copy_rate == 2 * MIB / 5 and s.growth_rate == 3 * MIB / 5
    assert s.bytes_behind == 10 * MIB + 39 * MIB
    assert s.describe(human_rate) == "not converging: source grows 614.4 KiB/s, copy 409.6 KiB/s"


def test_a_slow_move_that_gains_is_never_flagged():
    # 200 MiB behind; the copy takes 3.6 MiB every 5 s from a source growing 3 MiB per 5 s (it gains 0.6 MiB),
    # with a burst of appends every 200 s (20 s at twice the rate) that it makes up within two minutes.
    passes, copied, size = [], 0, 200 * MIB
    for i in range(400):
        burst = 30 <= i % 40 < 34
        size += (6 if burst else 3) * MIB
        copied += int(3.6 * MIB)
        passes.append((copied, size))
    assert passes[-1][1] - passes[-1][0] < 200 * MIB  # it does converge
    assert not any(drive(ConvergenceWatch(), passes))


def test_a_move_at_the_log_end_waiting_for_its_swap_is_not_flagged():
    # Caught up but for a few hundred kB each pass (the source's appends since): under the 1 MiB floor.
    passes = [(i * 100_000, 300_000 + i * 100_000) for i in range(40)]
    assert not any(drive(ConvergenceWatch(), passes))


def test_the_warning_repeats_at_most_once_a_minute():
    watch = ConvergenceWatch()
    warned = []
    for i in range(100):
        now = i * 5.0
        watch.observe(now, 2 * MIB * i, 10 * MIB + 3 * MIB * i, 2 * MIB * i)
        if watch.should_warn(now):
            warned.append(now)
    assert warned == [120.0, 180.0, 240.0, 300.0, 360.0, 420.0, 480.0]


def test_passes_closer_than_the_spacing_are_not_samples():
    # A catch-up reads a chunk at a time: thousands of passes a second must not crowd out the window.
    watch = ConvergenceWatch()
    for i in range(10_000):
        watch.observe(i * 0.01, 2 * i, 10 * MIB + 3 * i, 2 * i)
    assert len(watch._samples) <= 32


def not_converging_gauge(rig) -> float:
    """The scrape's ``kjbod_replica_moves_not_converging`` for the rig's mover, as the endpoint builds it."""
    node = SimpleNamespace(logs=SimpleNamespace(manager=rig.manager), mover=rig.mover)
    family = next(f for f in NodeCollector(node, RequestStats(), None)._moves()
                  if f.name == "kjbod_replica_moves_not_converging")
    [sample] = family.samples
    return sample.value


def test_a_mover_whose_source_outgrows_the_throttle_warns_and_says_so_in_its_progress_and_gauge(make_rig, log_dirs):
    rig = make_rig(rate=50_000, start=False)
    ticks = itertools.count()
    rig.mover.clock = lambda: next(ticks) * 5.0  # each pass of the copy: 5 s later
    rig.manager.create_partition("nc", 0, TOPIC_ID, dir=log_dirs[0])
    stop = threading.Event()

    def append_fast() -> None:  # up to 500 kB/s: ten times what the throttle lets the copy take
        i = 0
        while not stop.wait(0.004):
            rig.append("nc", 0, [b"%08d:" % i + b"y" * 2000])
            i += 1

    appender = threading.Thread(target=append_fast, daemon=True)
    appender.start()
    try:
        wait_for(lambda: rig.manager.get("nc", 0).size_bytes > 2 * MIB, 120, what="a source over 2 MiB")
        with captured_logs() as logs:
            rig.mover.start()
            rig.mover.request_move("nc", 0, log_dirs[1])
            assert not_converging_gauge(rig) == 0  # not judged before a whole window has been watched
            wait_for(lambda: any(e["event"] == "replica_move_not_converging" for e in logs), 120,
                     what="the not-converging warning")
            progress = rig.mover.progress("nc", 0)
            gauge = not_converging_gauge(rig)
    finally:
        stop.set()
        appender.join(30)
        rig.mover.cancel("nc", 0)
    assert gauge == 1
    # A cancelled move is not counted once the mover has stopped it (cancel only asks).
    wait_for(lambda: not_converging_gauge(rig) == 0, 60, what="the cancelled move out of the gauge")
    warning = next(e for e in logs if e["event"] == "replica_move_not_converging")
    assert warning["log_level"] == "warning" and warning["partition"] == "nc-0"
    assert warning["source_dir"] == log_dirs[0] and warning["dest_dir"] == log_dirs[1]
    assert warning["bytes_behind"] > MIB and warning["throttle_bytes_per_second"] == 50_000
    assert warning["source_growth_bytes_per_second"] >= warning["copy_bytes_per_second"]
    assert "cancel the move" in warning["effect"]
    assert progress is not None and progress.not_converging is not None
    assert progress.not_converging.growth_rate >= progress.not_converging.copy_rate


def test_a_mover_copying_a_large_idle_source_is_never_flagged(make_rig, log_dirs):
    rig = make_rig(config=LogConfig(segment_bytes=64 << 10, file_delete_delay_ms=0))
    ticks = itertools.count()
    rig.mover.clock = lambda: next(ticks) * 5.0  # a very slow move: 5 s per segment copied or chunk caught up
    rig.manager.create_partition("cv", 0, TOPIC_ID, dir=log_dirs[0])
    for i in range(1500):
        rig.append("cv", 0, [b"%08d:" % i + b"z" * 2000])
    assert rig.manager.get("cv", 0).size_bytes > 2 * MIB
    gauges = []
    with captured_logs() as logs:
        rig.mover.request_move("cv", 0, log_dirs[1])
        wait_for(lambda: gauges.append(not_converging_gauge(rig)) or rig.moved("cv", 0, log_dirs[1]), what="the move")
    assert gauges and not any(gauges)
    assert next(ticks) > 2 * 24  # it was watched over more than two windows
    assert not [e for e in logs if e["event"] == "replica_move_not_converging"]


def test_the_move_commands_progress_line_says_when_a_move_is_not_converging():
    tracker = MoveTracker(1)
    entry = tracker.add(PlannedMove("t", 0, "/b"), source_dir="/a")
    for i in range(30):  # polls 5 s apart: the current replica grows 3 MiB, the future 2 MiB
        info = ReplicaLogDirInfo("/a", 0, 10 * MIB + 3 * MIB * i, "/b", 100, 2 * MIB * i)
        assert tracker.observe(info, entry, i * 5.0) is None
    assert entry.state == COPYING
    assert "t-0 not converging: source grows 614.4 KiB/s, copy 409.6 KiB/s" in tracker.snapshot().extra

    gaining = MoveTracker(1)
    entry = gaining.add(PlannedMove("t", 0, "/b"), source_dir="/a")
    for i in range(30):
        gaining.observe(ReplicaLogDirInfo("/a", 0, 100 * MIB + MIB * i, "/b", 100, 2 * MIB * i), entry, i * 5.0)
    assert "not converging" not in gaining.snapshot().extra
