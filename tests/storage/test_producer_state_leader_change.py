"""Idempotent-producer state across truncation, a leader change and a restart (in process).

A follower replicates a leader's idempotent batches; it then truncates (below, at, above the producer's
batches), or becomes the leader, or restarts, and the producer retries what it has in flight. A retry of a
batch the log holds is a duplicate answered with its offsets; the batch after the log's last one goes in; only a
real gap is OUT_OF_ORDER_SEQUENCE_NUMBER (Kafka's ProducerStateManager after UnifiedLog.truncateTo)."""

from __future__ import annotations

import os

import pytest

from kjbod.storage.config import LogConfig
from kjbod.storage.errors import OutOfOrderSequenceError
from kjbod.storage.fsio import LogDirIO
from kjbod.storage.log import PartitionLog
from tests.storage.conftest import kp_batch

PID = 4242
CFG = LogConfig(segment_bytes=400, index_interval_bytes=100, segment_index_bytes=4096)


def idem(seq: int, n: int = 1, epoch: int = 0) -> bytes:
    return kp_batch([b"s%05d" % (seq + i) for i in range(n)], producer_id=PID, producer_epoch=epoch,
                    base_sequence=seq)


def new_log(tmp_path, name: str) -> PartitionLog:
    io = LogDirIO(str(tmp_path / name))
    io.mkdir(io.path, parents=True)
    return PartitionLog.create(io, io.join("t-0"), "t", 0, None, CFG)


def reopen(plog: PartitionLog, *, clean: bool) -> PartitionLog:
    if clean:
        plog.close()
    else:
        plog.close_quietly()
    io = LogDirIO(os.path.dirname(plog.dir))
    return PartitionLog.load(io, plog.dir, "t", 0, CFG, had_clean_shutdown=clean)


def replicate(leader: PartitionLog, follower: PartitionLog) -> None:
    while follower.log_end_offset < leader.log_end_offset:
        follower.append_as_follower(leader.read_bytes(follower.log_end_offset, 150))


@pytest.fixture
def pair(tmp_path):
    """A leader with 20 batches of 2 records from one producer (sequences 0..39) and a follower holding them
    all. The small segments give the follower several rolls (so producer snapshots exist), and it rolls once
    more at 36, inside the producer's last five batches (30..39: what it may have in flight)."""
    leader, follower = new_log(tmp_path, "leader"), new_log(tmp_path, "follower")
    for i in range(20):
        leader.append(idem(2 * i, 2))
    while follower.log_end_offset < 36:
        follower.append_as_follower(leader.read_bytes(follower.log_end_offset, 60))
    assert follower.log_end_offset == 36
    follower.roll()
    replicate(leader, follower)
    assert len(follower.segments) > 3
    yield leader, follower
    for plog in (leader, follower):
        if not plog.closed:
            plog.close_quietly()


def test_a_follower_that_becomes_leader_answers_a_retry_of_a_replicated_batch_as_a_duplicate(pair):
    leader, follower = pair
    for i in range(15, 20):  # the five in flight when the leader went
        retry = follower.append(idem(2 * i, 2), leader_epoch=1)
        assert retry.duplicate and (retry.base_offset, retry.last_offset) == (2 * i, 2 * i + 1)
    assert follower.append(idem(40, 2), leader_epoch=1).base_offset == 40
    with pytest.raises(OutOfOrderSequenceError):
        follower.append(idem(50), leader_epoch=1)


@pytest.mark.parametrize("target", [0, 2, 16, 30, 34, 36, 38, 40, 41])
def test_truncation_then_the_producer_retries_what_was_cut(pair, target):
    """Truncated to `target` (below all of the producer's batches, among them, at a snapshot, at the log end,
    above it), the log answers a retry of each of the producer's last five batches it kept as a duplicate,
    refuses a gap, and takes the producer's batches from the one after its last on. (Truncation points are
    batch boundaries, as a leader's epoch end offsets and high watermarks are.) At 38 the rebuild starts from
    the snapshot at 36, which holds only the batch at 34: the batches at 30 and 32 must still be known."""
    _leader, follower = pair
    follower.truncate_to(target)
    kept = min(target, 40) // 2
    assert follower.log_end_offset == 2 * kept
    for i in range(15, kept):  # retries of the in-flight batches it kept
        retry = follower.append(idem(2 * i, 2), leader_epoch=1)
        assert retry.duplicate and retry.base_offset == 2 * i, i
    if kept:
        with pytest.raises(OutOfOrderSequenceError):
            follower.append(idem(2 * kept + 2, 2), leader_epoch=1)  # a gap
    for i in range(kept, 21):  # the producer resends what the log lost, and goes on
        info = follower.append(idem(2 * i, 2), leader_epoch=1)
        assert not info.duplicate and info.base_offset == 2 * i, i


@pytest.mark.parametrize("clean", [True, False])
def test_truncation_after_a_restart_then_retries(pair, clean):
    """After a restart the state comes from a snapshot (the last batch of each producer, Kafka's format) and the
    batches after it: a truncation then keeps the batch before the cut known."""
    _leader, follower = pair
    follower = reopen(follower, clean=clean)
    try:
        follower.truncate_to(30)
        retry = follower.append(idem(28, 2), leader_epoch=1)
        assert retry.duplicate and retry.base_offset == 28
        assert follower.append(idem(30, 2), leader_epoch=1).base_offset == 30
    finally:
        follower.close_quietly()


@pytest.mark.parametrize("clean", [True, False])
def test_a_restarted_follower_that_becomes_leader_takes_the_retries(pair, clean):
    """Its last batch is a duplicate, the next one goes in (older batches are judged by sequence after a restart,
    as in Kafka, whose snapshot also keeps one batch per producer)."""
    _leader, follower = pair
    follower = reopen(follower, clean=clean)
    try:
        retry = follower.append(idem(38, 2), leader_epoch=1)
        assert retry.duplicate and retry.base_offset == 38
        assert follower.append(idem(40, 2), leader_epoch=1).base_offset == 40
    finally:
        follower.close_quietly()


def test_a_follower_appending_after_a_truncation_keeps_the_producer_state_of_its_log(pair):
    """Truncated into the producer's batches, then caught up from a new leader that holds other batches of the
    producer at those offsets (retries the new leader took): the state follows the log."""
    new_leader, follower = pair
    new_leader.truncate_to(20)
    new_leader.append(idem(20, 3), leader_epoch=1)  # the producer's retry landed as 3 records this time
    new_leader.append(idem(23, 1), leader_epoch=1)
    follower.truncate_to(20)
    replicate(new_leader, follower)
    assert follower.log_end_offset == 24
    retry = follower.append(idem(23, 1), leader_epoch=2)
    assert retry.duplicate and retry.base_offset == 23
    assert follower.append(idem(24, 1), leader_epoch=2).base_offset == 24


def test_a_full_truncation_forgets_the_producer(pair):
    """Truncated fully (a follower far behind its leader's log start): none of the producer's batches is in the
    log, so none is remembered and the producer is unknown, as Kafka has it (any sequence is taken)."""
    _leader, follower = pair
    follower.truncate_fully_and_start_at(50)
    info = follower.append(idem(28, 2), leader_epoch=1)
    assert not info.duplicate and info.base_offset == 50
