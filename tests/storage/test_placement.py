"""Placement of new partitions across log dirs: most-usable (default) and Kafka's fewest-partitions."""

from __future__ import annotations

from collections import Counter

import pytest

from kjbod.storage.config import LogConfig
from kjbod.storage.errors import LogDirNotFoundError
from kjbod.storage.manager import PartitionSpec
from kjbod.storage.placement import DirCandidate, choose_dirs

GIB = 1 << 30


@pytest.mark.parametrize("shared_fs", [False, True])
@pytest.mark.parametrize("policy", ["most-usable", "fewest-partitions"])
def test_six_partitions_over_three_equal_empty_dirs_land_2_2_2(shared_fs, policy):
    dirs = [DirCandidate(p, 100 * GIB, 0, 7 if shared_fs else i) for i, p in enumerate("abc")]
    chosen = choose_dirs(dirs, 6, policy=policy, estimate=GIB)
    assert Counter(chosen) == {"a": 2, "b": 2, "c": 2}
    assert chosen[:3] == ["a", "b", "c"]


def test_most_usable_prefers_room_until_near_tie():
    dirs = [DirCandidate("small", 10 * GIB, 0, 1), DirCandidate("big", 13 * GIB, 5, 2)]
    chosen = choose_dirs(dirs, 6, policy="most-usable", estimate=GIB)
    # big is 3 GiB ahead: it takes partitions until small is within one estimate, then fewest partitions wins.
    assert chosen[:2] == ["big", "big"]
    assert Counter(chosen)["small"] >= 2


def test_fewest_partitions_ignores_space():
    dirs = [DirCandidate("full", 1, 0), DirCandidate("empty", 1000 * GIB, 3)]
    picks = choose_dirs(dirs, 5, policy="fewest-partitions", estimate=GIB)
    assert picks == ["full", "full", "full", "full", "empty"]  # 3/3 is a tie: configuration order decides
    assert choose_dirs(dirs, 2, policy="most-usable", estimate=GIB) == ["empty", "empty"]


def test_near_tie_breaks_by_partition_count_then_order():
    dirs = [DirCandidate("a", 100 * GIB + 5, 4), DirCandidate("b", 100 * GIB, 1), DirCandidate("c", 100 * GIB, 1)]
    assert choose_dirs(dirs, 1, policy="most-usable", estimate=GIB) == ["b"]


def test_unknown_policy_and_no_dirs():
    with pytest.raises(ValueError):
        choose_dirs([DirCandidate("a", 1, 0)], 1, policy="random", estimate=1)
    with pytest.raises(ValueError):
        choose_dirs([], 1, policy="most-usable", estimate=1)


def test_expected_partition_bytes():
    assert LogConfig().expected_partition_bytes() == GIB
    assert LogConfig(retention_bytes=5 * GIB, segment_bytes=GIB // 2).expected_partition_bytes() == 5 * GIB + GIB // 2


@pytest.mark.parametrize("policy", ["most-usable", "fewest-partitions"])
def test_manager_spreads_one_create_call_2_2_2(make_manager, log_dirs, policy):
    lm = make_manager(placement_policy=policy)
    logs = lm.create_partitions([PartitionSpec("six", p, "3uI2M2AbQVO0J2cYw2xvOA") for p in range(6)])
    assert Counter(plog.log_dir for plog in logs) == {d: 2 for d in log_dirs}


def test_manager_spreads_separate_calls_too(make_manager, log_dirs):
    lm = make_manager()
    for p in range(6):
        lm.create_partition("one-by-one", p, None)
    assert Counter(plog.log_dir for plog in lm.partitions()) == {d: 2 for d in log_dirs}


def test_manager_explicit_dir_by_path_or_id(make_manager, log_dirs):
    lm = make_manager()
    by_path = lm.create_partition("x", 0, None, dir=log_dirs[2])
    dir_id = {i.path: i.directory_id for i in lm.dirs}[log_dirs[1]]
    by_id = lm.create_partition("x", 1, None, dir=dir_id)
    assert (by_path.log_dir, by_id.log_dir) == (log_dirs[2], log_dirs[1])
    with pytest.raises(LogDirNotFoundError) as e:
        lm.create_partition("x", 2, None, dir="/nowhere")
    assert e.value.error_code == 57
