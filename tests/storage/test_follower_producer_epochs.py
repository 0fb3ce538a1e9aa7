"""A follower that replicated a producer's epoch bump (and a control batch carrying the producer id) answers as
the leader it becomes would in Kafka (UnifiedLog.analyzeAndValidateProducerState): a retry of one of the new
epoch's batches is a duplicate with its original offsets and writes nothing, the old epoch is
INVALID_PRODUCER_EPOCH, a gap OUT_OF_ORDER_SEQUENCE_NUMBER; the same after a restart from snapshot plus log."""

from __future__ import annotations

import pytest

from kjbod.storage import fsio
from kjbod.storage.config import LogConfig
from kjbod.storage.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from kjbod.storage.log import PartitionLog
from kjbod.storage.records import build_batch
from tests.storage.conftest import kp_batch

PID = 515
T0 = 1_700_000_000_000


def replicated(offset: int, n: int, epoch: int, seq: int, *, control: bool = False) -> bytes:
    return build_batch([(None, b"r%d" % (offset + i), (), T0) for i in range(n)], base_offset=offset,
                       partition_leader_epoch=3, producer_id=PID, producer_epoch=epoch,
                       base_sequence=-1 if control else seq, is_control=control)


def retry(seq: int, n: int, epoch: int) -> bytes:
    return kp_batch([b"r" * 4] * n, producer_id=PID, producer_epoch=epoch, base_sequence=seq)


@pytest.fixture
def follower(tmp_path):
    io = fsio.LogDirIO(str(tmp_path / "d"))
    io.mkdir(io.path, parents=True)
    plog = PartitionLog.create(io, io.join("t-0"), "t", 0, None, LogConfig(segment_bytes=300))
    # epoch 0: sequences 0..5 at offsets 0..5; then the producer bumps to epoch 1 (a control batch of its id at
    # 6, as a marker would be), and sends sequences 0..5 again at 7..12, in two fetch answers.
    plog.append_as_follower(replicated(0, 3, 0, 0) + replicated(3, 3, 0, 3))
    plog.append_as_follower(replicated(6, 1, 1, 0, control=True) + replicated(7, 2, 1, 0) + replicated(9, 2, 1, 2))
    plog.append_as_follower(replicated(11, 2, 1, 4))
    yield plog
    if not plog.closed:
        plog.close_quietly()


def _check_as_leader(plog: PartitionLog, first_retry: int) -> None:
    end = plog.log_end_offset
    for seq, offset in [(0, 7), (2, 9), (4, 11)][first_retry:]:
        info = plog.append(retry(seq, 2, 1), leader_epoch=4)
        assert info.duplicate and (info.base_offset, info.last_offset) == (offset, offset + 1), seq
    assert plog.log_end_offset == end  # nothing written
    with pytest.raises(InvalidProducerEpochError):
        plog.append(retry(6, 1, 0), leader_epoch=4)
    with pytest.raises(OutOfOrderSequenceError):
        plog.append(retry(8, 1, 1), leader_epoch=4)
    assert plog.append(retry(6, 1, 1), leader_epoch=4).base_offset == end


def test_a_follower_that_saw_an_epoch_bump_leads_with_the_new_epochs_batches(follower):
    _check_as_leader(follower, 0)


@pytest.mark.parametrize("clean", [True, False])
def test_the_same_after_a_restart_from_snapshot_and_log(follower, clean):
    """After a restart only the batches after the newest snapshot and the snapshot's one batch per producer are
    known (as in Kafka): the last batch is still a duplicate."""
    if clean:
        follower.close()
    else:
        follower.close_quietly()
    io = fsio.LogDirIO(follower.io.path)
    plog = PartitionLog.load(io, follower.dir, "t", 0, LogConfig(segment_bytes=300), had_clean_shutdown=clean)
    try:
        assert len(plog.segments) > 1  # the snapshots of the rolls are what the state is rebuilt from
        _check_as_leader(plog, 2)
    finally:
        plog.close_quietly()
