"""Transactions on the log side, in process: each producer's open transaction (its first offset), the last stable
offset it bounds, and the transactions markers end (the aborted ones kept for read_committed), on the leader's
and the follower's append paths, across a roll, a restart and a truncation (Kafka's ProducerStateManager:
ongoing transactions, lastStableOffset; ProducerAppendInfo.appendEndTxnMarker)."""

from __future__ import annotations

import os

import pytest

from kjbod.broker.txn import records as txnrec
from kjbod.storage.config import LogConfig
from kjbod.storage.errors import InvalidProducerEpochError, InvalidRecordError
from kjbod.storage.fsio import LogDirIO
from kjbod.storage.log import PartitionLog
from kjbod.storage.producer_state import CompletedTxn, ProducerStateManager
from kjbod.storage.records import build_batch, control_marker_type, iter_batches

CFG = LogConfig(segment_bytes=600, index_interval_bytes=100, segment_index_bytes=4096)
A, B = 11, 12


def data(pid: int, seq: int, n: int = 1, epoch: int = 0, txn: bool = True) -> bytes:
    return build_batch([(b"k", b"v%05d" % (seq + i), [], 1000) for i in range(n)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, is_transactional=txn)


def marker(pid: int, commit: bool, epoch: int = 0) -> bytes:
    return build_batch([(txnrec.marker_key(commit), txnrec.marker_value(3), [], 1000)], producer_id=pid,
                       producer_epoch=epoch, is_transactional=True, is_control=True)


def end(plog: PartitionLog, pid: int, commit: bool, epoch: int = 0) -> int:
    return plog.append_validated(plog.validate(marker(pid, commit, epoch), from_coordinator=True)).base_offset


def new_log(tmp_path, name: str = "leader") -> PartitionLog:
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


def test_the_marker_type_is_read_from_the_control_record() -> None:
    for commit in (True, False):
        raw = marker(A, commit)
        [(pos, header)] = list(iter_batches(raw))
        assert control_marker_type(raw, pos, header) == (1 if commit else 0)


def test_clients_may_not_write_markers(tmp_path) -> None:
    plog = new_log(tmp_path)
    with pytest.raises(InvalidRecordError):
        plog.append(marker(A, True))


def test_an_open_transaction_bounds_the_last_stable_offset(tmp_path) -> None:
    plog = new_log(tmp_path)
    plog.append(data(B, 0, 2, txn=False))  # offsets 0-1: not transactional
    assert plog.last_stable_offset == plog.high_watermark == 2
    plog.append(data(A, 0, 2))  # 2-3: A's transaction opens at 2
    plog.append(data(B, 2, 1, txn=False))  # 4
    assert plog.high_watermark == 5 and plog.last_stable_offset == 2
    plog.append(data(A, 2, 1))  # 5: still A's transaction
    assert plog.last_stable_offset == 2
    assert end(plog, A, commit=True) == 6
    assert plog.last_stable_offset == plog.high_watermark == 7
    assert plog.producer_state.aborted == []  # a commit is not an aborted transaction


def test_an_abort_is_kept_with_its_first_and_last_offset(tmp_path) -> None:
    plog = new_log(tmp_path)
    plog.append(data(A, 0, 2))  # 0-1
    plog.append(data(B, 0, 1))  # 2: B's transaction
    assert end(plog, A, commit=False) == 3
    assert plog.last_stable_offset == 2  # B's is still open
    assert plog.producer_state.aborted == [CompletedTxn(A, 0, 3, True)]
    end(plog, B, commit=True)
    assert plog.last_stable_offset == plog.high_watermark == 5


def test_a_marker_with_an_older_epoch_is_refused(tmp_path) -> None:
    plog = new_log(tmp_path)
    plog.append(data(A, 0, 1, epoch=2))
    with pytest.raises(InvalidProducerEpochError):
        end(plog, A, commit=True, epoch=1)
    # The coordinator's fencing abort carries a bumped epoch: it ends the transaction.
    end(plog, A, commit=False, epoch=3)
    assert plog.last_stable_offset == plog.high_watermark


def test_a_follower_tracks_the_same_transactions(tmp_path) -> None:
    leader, follower = new_log(tmp_path, "leader"), new_log(tmp_path, "follower")
    leader.append(data(A, 0, 2))
    leader.append(data(B, 0, 1))
    end(leader, A, commit=False)
    follower.append_as_follower(leader.read_bytes(0, 10_000))
    assert follower.producer_state.first_unstable_offset() == 2
    assert follower.producer_state.aborted == [CompletedTxn(A, 0, 3, True)]


@pytest.mark.parametrize("clean", [True, False])
def test_an_open_transaction_survives_a_restart_and_rolls(tmp_path, clean: bool) -> None:
    plog = new_log(tmp_path)
    plog.append(data(B, 0, 1, txn=False))  # 0
    plog.append(data(A, 0, 1))  # 1: A's transaction opens
    for i in range(12):  # several rolls (600-byte segments): snapshots hold A's open transaction
        plog.append(data(B, 1 + i, 1, txn=False))
    assert len(plog.segments) > 1
    plog = reopen(plog, clean=clean)
    try:
        plog.append(data(B, 13, 1, txn=False))  # loads the producer state
        assert plog.producer_state.first_unstable_offset() == 1
        assert plog.last_stable_offset == 1
        end(plog, A, commit=True)
        assert plog.last_stable_offset == plog.high_watermark
    finally:
        plog.close_quietly()


def test_the_snapshot_keeps_the_first_offset_of_an_open_transaction() -> None:
    state = ProducerStateManager()
    plan = state.plan()
    [(_, header)] = list(iter_batches(data(A, 0, 3)))
    plan.check(header._replace(base_offset=40), 40)
    plan.commit(43)
    restored = ProducerStateManager.parse_snapshot(state.snapshot_bytes())
    assert restored[A].txn_first_offset == 40


def test_a_truncation_below_a_transaction_forgets_it(tmp_path) -> None:
    plog = new_log(tmp_path)
    plog.append(data(B, 0, 2, txn=False))  # 0-1
    plog.append(data(A, 0, 2))  # 2-3
    plog.truncate_to(2)
    assert plog.producer_state.first_unstable_offset() is None


# ------------------------------------------------------------------------------------------------ .txnindex
def txn_index_files(plog: PartitionLog) -> dict[str, bytes]:
    from pathlib import Path

    return {n: Path(plog.dir, n).read_bytes() for n in sorted(os.listdir(plog.dir)) if n.endswith(".txnindex")}


def test_an_abort_is_written_to_the_segments_txnindex_in_kafkas_layout(tmp_path) -> None:
    import struct

    plog = new_log(tmp_path)
    plog.append(data(A, 0, 2))  # 0-1
    plog.append(data(B, 0, 1))  # 2: B's stays open
    end(plog, A, commit=False)  # 3
    files = txn_index_files(plog)
    assert list(files) == ["00000000000000000000.txnindex"]
    # version, producer id, first offset, last offset, last stable offset (B's open transaction at 2)
    assert files["00000000000000000000.txnindex"] == struct.pack(">hqqqq", 0, A, 0, 3, 2)
    end(plog, B, commit=True)
    assert len(txn_index_files(plog)["00000000000000000000.txnindex"]) == 34  # commits are not indexed


@pytest.mark.parametrize("clean", [True, False])
def test_aborted_transactions_are_read_back_after_a_restart(tmp_path, clean: bool) -> None:
    plog = new_log(tmp_path)
    plog.append(data(A, 0, 2))  # 0-1
    end(plog, A, commit=False)  # 2
    for i in range(12):  # rolls: the entry stays with its segment
        plog.append(data(B, i, 1, txn=False))
    plog.append(data(A, 2, 1))  # A's next transaction
    last = end(plog, A, commit=False)
    assert len(txn_index_files(plog)) == 2
    plog = reopen(plog, clean=clean)
    try:
        assert plog.aborted_transactions(0, 1000) == []  # not loaded yet: a read_committed read loads it first
        plog.ensure_producer_state()
        assert plog.producer_state.aborted == [CompletedTxn(A, 0, 2, True), CompletedTxn(A, last - 1, last, True)]
        assert plog.aborted_transactions(3, last) == [(A, last - 1)]
        assert plog.aborted_transactions(0, 1) == [(A, 0)]
    finally:
        plog.close_quietly()


def test_a_truncation_drops_the_entries_of_markers_it_cut(tmp_path) -> None:
    plog = new_log(tmp_path)
    plog.append(data(A, 0, 1))  # 0
    end(plog, A, commit=False)  # 1
    plog.append(data(B, 0, 1))  # 2
    end(plog, B, commit=False)  # 3
    plog.truncate_to(3)
    assert plog.producer_state.aborted == [CompletedTxn(A, 0, 1, True)]
    assert len(txn_index_files(plog)["00000000000000000000.txnindex"]) == 34
    assert plog.producer_state.first_unstable_offset() == 2  # B's transaction is open again


def test_a_follower_writes_the_same_txnindex(tmp_path) -> None:
    leader, follower = new_log(tmp_path, "leader"), new_log(tmp_path, "follower")
    leader.append(data(A, 0, 2))
    end(leader, A, commit=False)
    follower.append_as_follower(leader.read_bytes(0, 10_000))
    assert txn_index_files(follower) == txn_index_files(leader)


def test_deleting_a_segment_deletes_its_txnindex(tmp_path) -> None:
    plog = new_log(tmp_path)
    plog.append(data(A, 0, 1))
    end(plog, A, commit=False)
    for i in range(12):
        plog.append(data(B, i, 1, txn=False))
    plog.advance_log_start_offset(plog.segments[1].base_offset)
    plog.delete_old_segments()
    assert not any(n.startswith("00000000000000000000.txnindex") and not n.endswith(".deleted")
                   for n in os.listdir(plog.dir))


def test_a_producer_with_an_open_transaction_does_not_expire() -> None:
    state = ProducerStateManager()
    plan = state.plan()
    for pid, txn in ((A, True), (B, False)):
        [(_, header)] = list(iter_batches(data(pid, 0, 1, txn=txn)))
        plan.check(header, 0)
    plan.commit(2)
    assert state.remove_expired(now_ms=10**9, expiration_ms=1000) == 1
    assert list(state.producers) == [A]


def test_a_marker_sets_the_producers_coordinator_epoch(tmp_path) -> None:
    plog = new_log(tmp_path)
    plog.append(data(A, 0, 2))  # 0-1
    plog.append(data(B, 0, 1))  # 2: left open
    [a, b] = plog.active_producers()
    assert (a.coordinator_epoch, a.txn_first_offset, b.txn_first_offset) == (-1, 0, 2)
    end(plog, A, commit=True)  # its marker carries coordinator epoch 3
    [a, b] = plog.active_producers()
    assert (a.producer_id, a.coordinator_epoch, a.txn_first_offset, a.last_seq) == (A, 3, -1, 1)
    assert (b.producer_id, b.coordinator_epoch, b.txn_first_offset) == (B, -1, 2)


# ------------------------------------------------------------------------------------------------ KIP-890
def test_a_transaction_opens_only_with_the_verification_guard(tmp_path) -> None:
    """PartitionLog.check_transaction_guard (the leader's check on the dir's worker) and the verification entries
    of the producer state (Kafka's VerificationStateEntry): a guard of another verification, or none, cannot
    open a transaction; the producer's transactional append uses the guard up; an open transaction needs none."""
    from kjbod.storage.errors import InvalidTxnStateError, OutOfOrderSequenceError

    plog = new_log(tmp_path)
    with pytest.raises(InvalidTxnStateError):
        plog.check_transaction_guard(A, None)  # never verified
    state = plog.producer_state
    guard = state.start_verification(A, 0, 0, now_ms=1000)
    assert state.start_verification(A, 0, 0, now_ms=1001) is guard  # the same entry while it is out
    with pytest.raises(InvalidTxnStateError):
        plog.check_transaction_guard(A, object())
    plog.check_transaction_guard(A, guard)
    plog.append(data(A, 0))
    assert state.verification_guard(A) is None  # used up by the append
    plog.check_transaction_guard(A, None)  # open here now
    end(plog, A, True)
    with pytest.raises(InvalidTxnStateError):
        plog.check_transaction_guard(A, guard)  # ended: the old guard opens nothing

    # The lowest sequence seen while verifying: a later batch cannot open the transaction before it.
    state.start_verification(A, 1, 0, now_ms=2000)
    state.start_verification(A, 0, 0, now_ms=2001)  # an earlier batch of the producer's is being verified too
    with pytest.raises(OutOfOrderSequenceError):
        plog.append(data(A, 1))  # follows the last sequence, but not before the earliest being verified
    state.verifying.pop(A)
    assert plog.append(data(A, 1)).base_offset > 0
    # Entries expire with the producers (producer.id.expiration.ms).
    state.start_verification(B, 0, 0, now_ms=2000)
    plog.expire_producers(2000 + 10, 10)
    assert state.verification_guard(B) is None


def test_a_tv2_producer_unknown_here_must_start_at_sequence_0(tmp_path) -> None:
    """Kafka's check for transaction.version 2 producers (a verification made for Produce v12+): with no state
    for the producer on the partition, a first batch not at sequence 0 is out of order; a TV0/1 one is taken."""
    from kjbod.storage.errors import OutOfOrderSequenceError

    plog = new_log(tmp_path)
    state = plog.producer_state
    state.start_verification(A, 5, 0, now_ms=1000, supports_epoch_bump=True)
    with pytest.raises(OutOfOrderSequenceError):
        plog.append(data(A, 5))
    state.verifying.pop(A)
    state.start_verification(B, 5, 0, now_ms=1000)  # transaction.version 0/1: as before
    assert plog.append(data(B, 5)).base_offset == 0
    state.start_verification(A, 0, 0, now_ms=1001, supports_epoch_bump=True)
    assert plog.append(data(A, 0)).base_offset == 1
