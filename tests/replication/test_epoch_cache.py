"""The leader epoch cache: Kafka's leader-epoch-checkpoint text, its lookup rules, and the log keeping it."""

from __future__ import annotations

import os
from pathlib import Path

from kjbod.storage.config import LogConfig
from kjbod.storage.epoch_cache import (
    LEADER_EPOCH_CHECKPOINT,
    LeaderEpochCache,
    parse_epoch_checkpoint,
    render_epoch_checkpoint,
)
from kjbod.storage.log import PartitionLog
from tests.replication.conftest import batch


def test_checkpoint_text_is_kafkas():
    text = "0\n2\n0 0\n3 1500\n"
    assert render_epoch_checkpoint([(0, 0), (3, 1500)]) == text
    assert parse_epoch_checkpoint(text) == [(0, 0), (3, 1500)]


def test_end_offset_for_follows_kafkas_rules():
    cache = LeaderEpochCache(None, "", [(1, 0), (3, 10), (5, 20)])
    assert cache.end_offset_for(5, 25) == (5, 25)  # the latest epoch ends at the LEO
    assert cache.end_offset_for(3, 25) == (3, 20)
    assert cache.end_offset_for(4, 25) == (3, 20)  # an epoch this log never had: the largest below it
    assert cache.end_offset_for(0, 25) == (0, 0)  # below every epoch: the first epoch's start
    assert cache.end_offset_for(6, 25) == (-1, -1)
    assert cache.end_offset_for(-1, 25) == (-1, -1)


def test_assign_ignores_old_epochs_and_drops_superseded_entries():
    cache = LeaderEpochCache(None, "", [(1, 0), (3, 10)])
    assert not cache.assign(2, 12)
    assert cache.assign(4, 10)
    assert cache.entries == [(1, 0), (4, 10)]
    cache.truncate_from_end(5)
    assert cache.entries == [(1, 0)]


def _batch(epoch: int, n: int = 1) -> bytes:  # noqa: ARG001 (the log stamps the epoch)
    return batch(n)


def test_a_replica_log_keeps_and_truncates_its_cache(make_log):
    plog = make_log()
    plog.auto_high_watermark = False
    plog.append(_batch(0, 3), leader_epoch=2)
    path = os.path.join(plog.dir, LEADER_EPOCH_CHECKPOINT)
    assert plog.assign_leader_epoch(5, plog.log_end_offset)  # in memory at once: the file is to be written
    assert plog.leader_epochs.entries == [(2, 0), (5, 3)] and Path(path).read_text() == "0\n1\n2 0\n"
    plog.settle_leader_epoch(5)  # (the replica manager has the log's dir worker do it)
    plog.append(_batch(0, 2), leader_epoch=5)
    assert Path(path).read_text() == "0\n2\n2 0\n5 3\n"
    plog.truncate_to(3)
    assert plog.leader_epochs.entries == [(2, 0)]
    assert Path(path).read_text() == "0\n1\n2 0\n"


def test_a_lone_log_rebuilds_its_cache_from_the_batches(make_log):
    plog = make_log()
    plog.append(_batch(0, 2), leader_epoch=0)
    plog.append(_batch(0, 2), leader_epoch=4)
    assert not os.path.exists(os.path.join(plog.dir, LEADER_EPOCH_CHECKPOINT))
    assert plog.leader_epochs.entries == [(0, 0), (4, 2)]


def test_a_new_replica_keeps_its_first_epoch_in_memory_until_a_second_one(make_log):
    plog = make_log("t-0")
    plog.auto_high_watermark = False
    path = os.path.join(plog.dir, LEADER_EPOCH_CHECKPOINT)
    assert plog.assign_leader_epoch(3, 0)
    plog.settle_leader_epoch(3)  # a new partition led here: no checkpoint write (nor its fsyncs)
    assert not os.path.exists(path) and plog.leader_epochs.entries == [(3, 0)]
    plog.append(_batch(0, 2), leader_epoch=3)
    assert not os.path.exists(path)
    plog.close()
    reopened = PartitionLog.load(plog.io, plog.dir, "t", 0, LogConfig(), had_clean_shutdown=False, recovery_point=0)
    try:
        assert reopened.leader_epochs.entries == [(3, 0)]  # rebuilt from the batches: the same
        assert reopened.assign_leader_epoch(4, reopened.log_end_offset)  # a second epoch is written, with the first
        reopened.settle_leader_epoch(4)
        assert Path(path).read_text() == "0\n2\n3 0\n4 2\n"
    finally:
        reopened.close_quietly()


def test_a_new_epoch_starts_where_the_log_ends_once_the_appends_queued_before_it_ran(make_log):
    """The event loop records the epoch at the LEO it knows; a follower's append already on the dir's worker
    lands first, so settling (on the worker, after it) moves the epoch's start to the log's end."""
    plog = make_log()
    plog.auto_high_watermark = False
    plog.append_as_follower(batch(3, epoch=2))
    assert plog.assign_leader_epoch(5, plog.log_end_offset)  # provisional: at 3
    assert plog.leader_epochs.latest_epoch == 5
    plog.append_as_follower(batch(2, epoch=2, base_offset=3))  # queued before the epoch: an epoch-2 batch
    plog.settle_leader_epoch(5)
    assert plog.leader_epochs.entries == [(2, 0), (5, 5)]
    path = os.path.join(plog.dir, LEADER_EPOCH_CHECKPOINT)
    assert Path(path).read_text() == "0\n2\n2 0\n5 5\n"
    assert plog.assign_leader_epoch(6, plog.log_end_offset) and plog.assign_leader_epoch(7, plog.log_end_offset)
    plog.settle_leader_epoch(6)  # a later epoch was recorded since: its own settling places it
    assert plog.leader_epochs.entries == [(2, 0), (7, 5)]  # (6 and 5 started at 5 too: superseded)
    plog.settle_leader_epoch(7)
    assert Path(path).read_text() == "0\n2\n2 0\n7 5\n"


def test_a_crash_recovery_mends_a_stale_epoch_file_from_the_batches_it_rereads(make_log):
    """Kafka's LogLoader: after an unclean shutdown the recovered batches' epochs go into the cache, and epochs at
    or past the log's end go out, whatever the file said (it is written apart from the batches)."""
    plog = make_log("t-0")
    plog.auto_high_watermark = False
    plog.append_as_follower(batch(2, epoch=0))
    plog.append_as_follower(batch(2, epoch=3, base_offset=2))
    path = Path(plog.dir, LEADER_EPOCH_CHECKPOINT)
    assert path.read_text() == "0\n2\n0 0\n3 2\n"
    plog.close_quietly()
    path.write_text("0\n2\n0 0\n9 100\n")  # missed epoch 3 (a crash), and names one the log never got to
    reopened = PartitionLog.load(plog.io, plog.dir, "t", 0, LogConfig(), had_clean_shutdown=False, recovery_point=0)
    try:
        assert reopened.leader_epochs.entries == [(0, 0), (3, 2)]
        assert path.read_text() == "0\n2\n0 0\n3 2\n"
        assert reopened.leader_epochs.end_offset_for(0, reopened.log_end_offset) == (0, 2)
    finally:
        reopened.close_quietly()
