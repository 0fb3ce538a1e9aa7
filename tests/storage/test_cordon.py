"""Cordoned log dirs (KIP-1066) in storage: reading cordoned.log.dirs, and placement leaving cordoned dirs out."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from kjbod.storage.manager import PartitionSpec
from kjbod.storage.placement import cordoned_dirs

DIRS = ["/data/a", "/data/b", "/data/c"]


@pytest.mark.parametrize(("value", "expected"), [
    (None, []),
    ("", []),
    ("/data/b", ["/data/b"]),
    (" /data/c , /data/a ", ["/data/a", "/data/c"]),  # log.dirs order, spaces ignored
    ("/data/b/,/data//b", ["/data/b"]),  # the same dir written twice, not normalised
    ("*", DIRS),
    (["/data/c"], ["/data/c"]),
])
def test_cordoned_dirs_reads_the_setting(value, expected):
    assert cordoned_dirs(value, DIRS) == expected


def test_relative_entries_resolve_like_the_log_dirs(tmp_path, monkeypatch):
    # KAFKA-20901: a cordon written as a relative path must still match the dir it names
    monkeypatch.chdir(tmp_path)
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    assert cordoned_dirs("./b", dirs) == [dirs[1]]


@pytest.mark.parametrize(("value", "fragment"), [
    ("/data/x", "'/data/x' is not one of this broker's log dirs (log.dirs: /data/a, /data/b, /data/c)"),
    ("/data/a,/data/nope", "'/data/nope' is not one of"),
    ("*,/data/a", "'*' cordons every log dir and cannot be listed with others (/data/a)"),
])
def test_cordoned_dirs_names_a_bad_entry(value, fragment):
    with pytest.raises(ValueError) as e:
        cordoned_dirs(value, DIRS)
    assert fragment in str(e.value)


def test_new_partitions_skip_cordoned_dirs(make_manager, log_dirs):
    lm = make_manager()
    lm.set_cordoned([log_dirs[0]])
    logs = lm.create_partitions([PartitionSpec("t", p, None) for p in range(6)])
    assert Counter(plog.log_dir for plog in logs) == {log_dirs[1]: 3, log_dirs[2]: 3}
    assert {i.path: i.cordoned for i in lm.dir_infos({})} == {log_dirs[0]: True, log_dirs[1]: False,
                                                             log_dirs[2]: False}


def test_uncordoning_opens_the_dir_again(make_manager, log_dirs):
    lm = make_manager()
    lm.set_cordoned(log_dirs[:2])
    assert {lm.create_partition("t", p, None).log_dir for p in range(3)} == {log_dirs[2]}
    lm.set_cordoned([])
    # the two empty dirs now take the next ones
    assert {lm.create_partition("t", p, None).log_dir for p in range(3, 5)} == set(log_dirs[:2])


def test_existing_replicas_in_a_cordoned_dir_keep_serving(make_manager, log_dirs):
    lm = make_manager()
    plog = lm.create_partition("kept", 0, None, dir=log_dirs[1])
    lm.set_cordoned([log_dirs[1]])
    assert lm.find("kept", 0) is plog and plog.online
    assert lm.logs_in_dir(log_dirs[1]) == [plog]


def test_every_dir_cordoned_still_places_a_replica_it_must_hold(make_manager, log_dirs):
    # The controller gives no new replica to a broker whose every dir is cordoned; one it gave before it heard of
    # the cordon still gets a dir (refusing would leave the partition without this replica).
    lm = make_manager()
    lm.set_cordoned(log_dirs)
    assert lm.create_partition("late", 0, None).log_dir in log_dirs


def test_cordon_paths_are_made_absolute(make_manager, log_dirs, monkeypatch):
    lm = make_manager()
    monkeypatch.chdir(os.path.dirname(log_dirs[0]))
    lm.set_cordoned([os.path.basename(log_dirs[2])])
    assert lm.cordoned == frozenset({log_dirs[2]})
