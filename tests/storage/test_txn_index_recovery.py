"""The `.txnindex` files after a crash, in process: recovery makes them again from the batches of the segments it
re-reads, as Kafka's segment recovery does.  The marker is written before its index entry, so a crash between
the two leaves a marker without an entry (here: the entry removed before the unclean load); a torn marker that
recovery cuts off must take its entry with it; and an aborted transaction that began in a segment recovery does
not re-read gets its first offset from the producer snapshot and the batches before the range."""

from __future__ import annotations

import os

import pytest

from kjbod.storage.fsio import LogDirIO
from kjbod.storage.log import PartitionLog
from kjbod.storage.producer_state import CompletedTxn

from .test_txn_producer_state import CFG, A, B, data, end, new_log, txn_index_files


def load_after_crash(plog: PartitionLog, recovery_point: int = 0) -> PartitionLog:
    plog.close_quietly()
    io = LogDirIO(os.path.dirname(plog.dir))
    return PartitionLog.load(io, plog.dir, "t", 0, CFG, had_clean_shutdown=False, recovery_point=recovery_point)


def remove_txn_indexes(plog: PartitionLog) -> None:
    for name in txn_index_files(plog):
        os.unlink(os.path.join(plog.dir, name))


def test_recovery_writes_the_entries_a_crash_lost(tmp_path) -> None:
    plog = new_log(tmp_path)
    plog.append(data(A, 0, 2))  # 0-1: A's transaction
    plog.append(data(B, 0, 1))  # 2: B's, overlapping
    end(plog, A, commit=False)  # 3: A aborted while B is open (the entry's LSO is 2)
    end(plog, B, commit=True)  # 4
    for i in range(12):  # rolls
        plog.append(data(B, 1 + i, 1, txn=False))
    plog.append(data(A, 2, 1))
    last = end(plog, A, commit=False)
    before = txn_index_files(plog)
    assert len(before) == 2
    aborted = plog.producer_state.aborted
    remove_txn_indexes(plog)
    plog = load_after_crash(plog)
    try:
        assert txn_index_files(plog) == before  # byte for byte, the LSO of each entry too
        plog.ensure_producer_state()
        assert plog.producer_state.aborted == aborted == [CompletedTxn(A, 0, 3, True),
                                                          CompletedTxn(A, last - 1, last, True)]
        assert plog.aborted_transactions(0, 3) == [(A, 0)]
    finally:
        plog.close_quietly()


def test_a_torn_abort_marker_takes_its_entry_with_it(tmp_path) -> None:
    plog = new_log(tmp_path)
    plog.append(data(A, 0, 1))  # 0
    end(plog, A, commit=False)  # 1
    plog.append(data(B, 0, 2))  # 2-3
    end(plog, B, commit=False)  # 4: its marker is torn by the crash
    assert len(txn_index_files(plog)["00000000000000000000.txnindex"]) == 68
    seg = plog.active_segment
    path, size = seg.log_path, seg.size
    plog.close_quietly()
    os.truncate(path, size - 5)
    plog = load_after_crash(plog)
    try:
        assert plog.log_end_offset == 4
        assert len(txn_index_files(plog)["00000000000000000000.txnindex"]) == 34  # only A's entry is left
        plog.ensure_producer_state()
        assert plog.producer_state.aborted == [CompletedTxn(A, 0, 1, True)]
        assert plog.last_stable_offset == 2  # B's transaction is open again: its marker is gone
        # The coordinator writes the marker again: the entry comes back at the new offset, once.
        assert end(plog, B, commit=False) == 4
        assert plog.producer_state.aborted == [CompletedTxn(A, 0, 1, True), CompletedTxn(B, 2, 4, True)]
        assert len(txn_index_files(plog)["00000000000000000000.txnindex"]) == 68
    finally:
        plog.close_quietly()


@pytest.mark.parametrize("snapshots", [True, False])
def test_an_abort_of_a_transaction_begun_before_the_recovered_range(tmp_path, snapshots: bool) -> None:
    plog = new_log(tmp_path)
    plog.append(data(B, 0, 1, txn=False))  # 0
    plog.append(data(A, 0, 1))  # 1: A's transaction begins in the first segment
    for i in range(24):  # several rolls, each with a producer snapshot that holds A's open transaction
        plog.append(data(B, 1 + i, 1, txn=False))
    last = end(plog, A, commit=False)
    recovery_point = plog.active_segment.base_offset
    assert recovery_point > 1 and len(plog.segments) > 2
    before = txn_index_files(plog)
    remove_txn_indexes(plog)
    if not snapshots:  # then the producers' state where the range begins is replayed from the log start
        for name in os.listdir(plog.dir):
            if name.endswith(".snapshot"):
                os.unlink(os.path.join(plog.dir, name))
    plog = load_after_crash(plog, recovery_point)  # only the last segment is re-read
    try:
        assert txn_index_files(plog) == before
        plog.ensure_producer_state()
        assert plog.producer_state.aborted == [CompletedTxn(A, 1, last, True)]
    finally:
        plog.close_quietly()


def test_a_recovered_range_without_transactions_writes_no_index(tmp_path) -> None:
    plog = new_log(tmp_path)
    for i in range(12):
        plog.append(data(B, i, 1, txn=False))
    plog = load_after_crash(plog)
    try:
        assert txn_index_files(plog) == {}
    finally:
        plog.close_quietly()
