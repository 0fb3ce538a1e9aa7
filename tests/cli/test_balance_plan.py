"""`kjbod balance-disks`'s plan (kjbod.cli.balance_plan), in process: what is balanced, how little moves, and the
cases no plan can solve (a sentence each, never a traceback)."""

from __future__ import annotations

import itertools
import random

import pytest

from kjbod.cli.balance_plan import (
    CORDONED,
    FILESYSTEM,
    OFFLINE,
    REPLICA_BYTES,
    DirState,
    Replica,
    plan_broker,
    spread,
)

GIB = 1 << 30


def shared(path: str, *sizes: int, topic: str = "t", first: int = 0, cordoned: bool = False,
           usable: int = 500 * GIB) -> DirState:
    """A dir on the broker's one shared filesystem (id 7), holding replicas of `sizes` bytes."""
    return DirState(path, cordoned=cordoned, total_bytes=1000 * GIB, usable_bytes=usable, filesystem_id=7,
                    replicas=tuple(Replica(topic, first + i, s) for i, s in enumerate(sizes)))


def own(path: str, fs: int, total: int, used: int, *sizes: int, topic: str = "t", first: int = 0,
        cordoned: bool = False, reserved: int = 0) -> DirState:
    """A dir on a filesystem of its own."""
    return DirState(path, cordoned=cordoned, total_bytes=total, usable_bytes=total - used, filesystem_id=fs,
                    reserved_bytes=reserved, replicas=tuple(Replica(topic, first + i, s) for i, s in enumerate(sizes)))


def after_loads(plan) -> dict[str, int]:
    return {d.path: d.after for d in plan.dirs}


# ================================================================================================ what is balanced

def test_dirs_on_one_filesystem_balance_replica_bytes():
    plan = plan_broker(1, [shared("/a", 10, 10, 10, 10, 10, 10), shared("/b"), shared("/c")])
    assert plan.mode == REPLICA_BYTES and "share a filesystem (/a, /b, /c)" in plan.mode_reason
    assert after_loads(plan) == {"/a": 20, "/b": 20, "/c": 20}
    # 36 bytes would do if replicas could be split; in 10-byte replicas 40 is the least
    assert (plan.bytes_to_move, plan.least_bytes) == (40, 36)
    assert plan.spread_before == pytest.approx(1.0) and plan.spread_after == pytest.approx(0.0)
    assert plan.reaches_goal and all(m.source == "/a" for m in plan.moves)


def test_an_imbalance_smaller_than_the_minimum_is_left_alone_but_cordoned_dirs_still_empty():
    dirs = [shared("/a", 10, 10, 10, 10, 10, 10), shared("/b"), shared("/c")]
    assert plan_broker(1, dirs, min_move_bytes=36).moves  # 36 bytes at least must move: worth it at 36
    plan = plan_broker(1, dirs, min_move_bytes=37)
    assert plan.moves == [] and plan.reaches_goal
    assert any("would move about 36 B, under the minimum worth moving (37 B" in n for n in plan.notes)
    # Emptying a cordoned dir is asked for by the operator: it happens whatever its size.
    plan = plan_broker(1, [shared("/a", 5, cordoned=True), shared("/b", 40, first=1), shared("/c", first=2)],
                       min_move_bytes=1 << 30)
    assert [(m.source, m.size) for m in plan.moves] == [("/a", 5)] and plan.reaches_goal


def test_dirs_on_their_own_filesystems_balance_the_used_fraction():
    # /a is 90% used by other data and one replica; /b is 10% used: the filesystems are balanced, not the replicas
    plan = plan_broker(1, [own("/a", 1, 1000, 900, 50, 100, 250, first=0), own("/b", 2, 1000, 100, 300, first=3)])
    assert plan.mode == FILESYSTEM and "its own" in plan.mode_reason
    used = after_loads(plan)
    assert abs(used["/a"] - used["/b"]) <= 100  # within 10 points of a 1000-byte disk
    assert plan.bytes_to_move == 350 and plan.least_bytes == 350
    # balancing replica bytes instead would have moved the other way: /b holds as much replica data as /a
    assert all(m.source == "/a" and m.target == "/b" for m in plan.moves)


def test_different_sized_volumes_balance_by_fraction_not_bytes():
    plan = plan_broker(1, [own("/small", 1, 1000, 800, 400, 200, 100, 50), own("/big", 2, 4000, 800)])
    fractions = {d.path: d.fraction_after for d in plan.dirs}
    assert abs(fractions["/small"] - fractions["/big"]) <= 0.10 + 1e-9
    assert plan.reaches_goal


def test_without_filesystem_ids_equal_sizes_are_not_proof_of_separate_disks():
    dirs = [DirState("/a", total_bytes=1000, usable_bytes=400, replicas=(Replica("t", 0, 300), Replica("t", 1, 300))),
            DirState("/b", total_bytes=1000, usable_bytes=400)]
    plan = plan_broker(1, dirs)
    assert plan.mode == REPLICA_BYTES and "do not tell them apart" in plan.mode_reason
    dirs = [DirState("/a", total_bytes=1000, usable_bytes=400, replicas=(Replica("t", 0, 300),)),
            DirState("/b", total_bytes=2000, usable_bytes=1900)]
    assert plan_broker(1, dirs).mode == FILESYSTEM


def test_mixed_shared_and_own_filesystems_balance_replica_bytes_and_say_which_share():
    dirs = [own("/a", 1, 1000, 500, 100, 100), own("/b", 1, 1000, 500), own("/c", 2, 2000, 100)]
    plan = plan_broker(1, dirs)
    assert plan.mode == REPLICA_BYTES and "(/a, /b)" in plan.mode_reason


def test_within_threshold_moves_nothing():
    plan = plan_broker(1, [shared("/a", 52), shared("/b", 48)])
    assert plan.moves == [] and plan.reaches_goal and plan.least_bytes == 0


# ================================================================================================ how little moves

def test_the_greedy_pass_takes_the_replica_that_fits_the_need_not_the_largest():
    # /a 145 of 200 bytes, /b 55: 35 bytes must go; moving the largest replica (100) would only swap the imbalance
    plan = plan_broker(1, [shared("/a", 100, 15, 30), shared("/b", 55, first=5)])
    assert [(m.name, m.size) for m in plan.moves] == [("t-2", 30), ("t-1", 15)]
    assert after_loads(plan) == {"/a": 100, "/b": 100} and plan.reaches_goal


def test_threshold_wide_enough_moves_only_what_the_band_needs():
    # 60/20/20 with a 20-point threshold: only the bytes above the band's top move, not down to the mean
    plan = plan_broker(1, [shared("/a", *([1] * 60)), shared("/b", *([1] * 20), first=60),
                           shared("/c", *([1] * 20), first=80)], threshold=0.20)
    assert plan.reaches_goal
    # the least: 13.3 bytes rounded, so 14 whole ones; evening out to a third each would move 27
    assert (plan.least_bytes, plan.bytes_to_move) == (13, 14)
    assert spread(d.fraction_after for d in plan.dirs) <= 0.20 + 1e-9


def _optimum(sizes: list[int], homes: list[int], dirs: int, threshold: float) -> int | None:
    """The fewest bytes any assignment moves to bring the dirs' shares within the threshold (None: impossible)."""
    total = sum(sizes)
    best = None
    for assignment in itertools.product(range(dirs), repeat=len(sizes)):
        loads = [0] * dirs
        for size, d in zip(sizes, assignment, strict=True):
            loads[d] += size
        if spread(load / total for load in loads) <= threshold + 1e-9:
            moved = sum(s for s, d, h in zip(sizes, assignment, homes, strict=True) if d != h)
            best = moved if best is None else min(best, moved)
    return best


def test_against_an_exhaustive_search_on_small_brokers():
    """The greedy plan, on 300 random small brokers (2-4 dirs, 2-7 replicas), against the best any assignment can
    do. Measured when written: it reaches the goal in all 70 cases that have a solution (and in none that has
    not), moves the least possible in 64 of them, and 1,159 bytes in all against the optimum's 1,117 (+4%); no
    plan moves more than the largest replica above the optimum, nor less than the bound it reports. (Without
    its finishing move, the smallest single move that ends the job, it moved 15% more.)"""
    rng = random.Random(7)
    solvable = reached = worse = moved = least = 0
    for _ in range(300):
        n_dirs, threshold = rng.choice([2, 3, 4]), rng.choice([0.05, 0.1, 0.2, 0.3])
        sizes = [rng.choice([1, 2, 3, 5, 8, 13, 20, 40, 100]) for _ in range(rng.randint(2, 7))]
        homes = [rng.randrange(n_dirs) for _ in sizes]
        dirs = [DirState(f"/d{i}", total_bytes=1000 * GIB, usable_bytes=500 * GIB, filesystem_id=7,
                         replicas=tuple(Replica("t", j, s) for j, (s, h) in enumerate(zip(sizes, homes, strict=True))
                                        if h == i)) for i in range(n_dirs)]
        plan = plan_broker(1, dirs, threshold)
        best = _optimum(sizes, homes, n_dirs, threshold)
        if best is None:
            assert not plan.reaches_goal
            continue
        solvable += 1
        if not plan.reaches_goal:
            continue
        reached += 1
        assert plan.least_bytes - 1 <= best <= plan.bytes_to_move <= best + max(sizes)
        worse += plan.bytes_to_move > best
        moved += plan.bytes_to_move
        least += best
    assert solvable >= 60 and reached == solvable
    assert worse <= solvable // 10 and moved <= 1.05 * least


def test_each_replica_moves_at_most_once_and_never_to_where_it_is():
    plan = plan_broker(1, [shared("/a", 7, 5, 3, 2, 2, 1), shared("/b"), shared("/c", 1, first=9)])
    names = [m.name for m in plan.moves]
    assert len(names) == len(set(names)) and all(m.source != m.target for m in plan.moves)


# ================================================================================================ cordoned dirs

def test_a_cordoned_dir_is_drained_completely_and_never_a_target():
    plan = plan_broker(1, [shared("/a", 10, 10, 10, 10, cordoned=True), shared("/b", 20, first=10),
                           shared("/c", first=20)])
    assert after_loads(plan) == {"/a": 0, "/b": 30, "/c": 30}
    assert after_loads(plan)["/a"] == 0
    assert {m.target for m in plan.moves} <= {"/b", "/c"}
    assert {d.path: d.replicas_after for d in plan.dirs}["/a"] == 0
    assert [d.state for d in plan.dirs] == [CORDONED, "online", "online"]
    assert plan.reaches_goal


def test_balanced_dirs_still_drain_a_cordoned_one():
    plan = plan_broker(1, [shared("/a", 3, cordoned=True), shared("/b", 50, first=1), shared("/c", 50, first=2)])
    assert [(m.name, m.source) for m in plan.moves] == [("t-0", "/a")]


def test_every_dir_cordoned_is_a_clear_problem():
    plan = plan_broker(4, [shared("/a", 1, cordoned=True), shared("/b", 2, first=1, cordoned=True)])
    assert plan.moves == []
    assert plan.problems == ["broker 4: every online log dir is cordoned (/a, /b): there is nowhere to move its "
                             "replicas to; uncordon one (cordoned.log.dirs) first"]


def test_a_replica_bigger_than_any_targets_free_space_is_named():
    dirs = [own("/a", 1, 1000, 900, 600, 20, cordoned=True), own("/b", 2, 1000, 700), own("/c", 3, 1000, 750)]
    plan = plan_broker(1, dirs)
    assert [m.name for m in plan.moves] == ["t-1"]
    [problem] = plan.problems
    assert problem.startswith("t-0 (600 B) in cordoned /a fits in no other log dir: the most room is 300 B in /b")


def test_the_reserve_counts_against_free_space():
    dirs = [own("/a", 1, 1000, 500, 250, cordoned=True), own("/b", 2, 1000, 700, reserved=100)]
    plan = plan_broker(1, dirs)
    assert plan.moves == [] and "fits in no other log dir: the most room is 200 B in /b" in plan.problems[0]


def test_a_move_within_one_filesystem_needs_room_for_the_copy():
    plan = plan_broker(1, [shared("/a", 100, 100, usable=50), shared("/b", usable=50)])
    assert plan.moves == [] and plan.problems  # the copy of either replica would not fit while both exist


# ================================================================================================ other impossible cases

def test_one_dir_has_nothing_to_balance():
    plan = plan_broker(2, [shared("/only", 5, 5)])
    assert plan.moves == [] and plan.reaches_goal
    assert plan.notes == ["broker 2 has one online log dir: nothing to balance"]


def test_one_online_dir_that_is_cordoned_is_a_problem():
    plan = plan_broker(2, [shared("/only", 5, cordoned=True), DirState("/gone", online=False)])
    assert plan.problems == ["broker 2: its only online log dir /only is cordoned: there is no other dir to move "
                             "its replicas to"]


def test_offline_dirs_are_never_a_source_or_a_target():
    dirs = [shared("/a", 10, 10, 10), DirState("/dead", online=False), shared("/b")]
    plan = plan_broker(1, dirs)
    assert {m.target for m in plan.moves} == {"/b"}
    assert [d.state for d in plan.dirs][1] == OFFLINE and "left out, offline: /dead" in plan.notes


def test_whole_replicas_that_cannot_reach_the_threshold_are_reported_with_the_spread_reached():
    plan = plan_broker(1, [shared("/a", 100), shared("/b")])
    assert plan.moves == []
    assert plan.problems == ["broker 1: the share of replica bytes of its dirs cannot be brought within 10 points by "
                             "moving whole replicas (each move must bring two dirs closer); the plan reaches a "
                             "spread of 100.0 points"]


def test_replicas_already_moving_stay_put():
    plan = plan_broker(1, [shared("/a", 10, 10, 10), shared("/b")], pinned=[("t", 0), ("t", 1)])
    assert [m.name for m in plan.moves] == ["t-2"]
    assert "2 replicas already moving" in plan.notes[0]


def test_an_empty_broker_has_nothing_to_do():
    plan = plan_broker(1, [shared("/a"), shared("/b")])
    assert plan.moves == [] and plan.reaches_goal and "no replica bytes" in plan.notes[0]
