"""The transaction coordinator's rules in-process (kjbod.broker.txn.state) and the records of
`__transaction_state` (kjbod.broker.txn.records): requests in, changes and error codes out, as Kafka's
TransactionCoordinator answers them; each written change applied only once `complete` says it is committed."""

from __future__ import annotations

import struct

import pytest

from kjbod.broker.txn import records as rec
from kjbod.broker.txn.records import TxnState, TxnValue
from kjbod.broker.txn.state import MAX_EPOCH, Transit, TxnBook, TxnConfig
from kjbod.protocol.errors import ErrorCode

T = "app-1"


def done(book: TxnBook, t: int | Transit | None) -> Transit:
    assert isinstance(t, Transit), t
    book.complete(t)
    return t


def started(book: TxnBook, now: int = 1000) -> TxnBook:
    done(book, book.init_producer_id(T, 60_000, -1, -1, now, fresh_pid=7))
    done(book, book.add_partitions(T, 7, 0, [("orders", 0)], now))
    return book


# ------------------------------------------------------------------------------------------------ records
def test_key_and_value_are_kafkas_version_0_layout() -> None:
    assert rec.txn_key("ab") == b"\x00\x00\x00\x02ab"
    v = TxnValue(5, 3, 60_000, TxnState.ONGOING, (("t", 0), ("t", 2), ("u", 1)), 111, 100)
    raw = rec.txn_value(v)
    expected = (struct.pack(">hqhib", 0, 5, 3, 60_000, 1) + struct.pack(">i", 2)
                + struct.pack(">h", 1) + b"t" + struct.pack(">iii", 2, 0, 2)
                + struct.pack(">h", 1) + b"u" + struct.pack(">ii", 1, 1) + struct.pack(">qq", 111, 100))
    assert raw == expected
    assert rec.read_value(raw) == v
    assert rec.read_key(rec.txn_key("ab")) == "ab"


def test_value_version_1_is_written_in_the_flexible_layout() -> None:
    """transaction.version 1 (Kafka's TV_1): compact strings and arrays (length + 1), a tag buffer after each
    partition entry and at the end, and no tagged fields (all at their defaults below transaction.version 2)."""
    v = TxnValue(5, 3, 60_000, TxnState.ONGOING, (("t", 0), ("t", 2)), 111, 100)
    raw = rec.txn_value(v, 1)
    assert raw == (struct.pack(">hqhib", 1, 5, 3, 60_000, 1) + bytes([2]) + bytes([2]) + b"t" + bytes([3])
                   + struct.pack(">ii", 0, 2) + b"\x00" + struct.pack(">qq", 111, 100) + b"\x00")
    assert rec.read_value(raw) == v
    done_ = TxnValue(5, 4, 60_000, TxnState.COMPLETE_ABORT, (), 112, 100)
    assert rec.txn_value(done_, 1)[2 + 8 + 2 + 4 + 1] == 1  # an empty compact array (length + 1)
    assert rec.read_value(rec.txn_value(done_, 1)) == done_
    empty = TxnValue(5, 4, 60_000, TxnState.EMPTY, (), 112, -1)
    assert rec.txn_value(empty, 1)[2 + 8 + 2 + 4 + 1] == 0  # a null compact array
    assert rec.read_value(rec.txn_value(empty, 1)) == empty


def test_only_an_empty_transaction_is_written_with_null_partitions() -> None:
    """Kafka's TransactionLog: null for Empty, an array (empty here) for every other state."""
    v = TxnValue(5, 3, 60_000, TxnState.COMPLETE_COMMIT, (), 111, 100)
    raw = rec.txn_value(v)
    assert raw[2 + 8 + 2 + 4 + 1:2 + 8 + 2 + 4 + 1 + 4] == b"\x00\x00\x00\x00"
    assert rec.read_value(raw) == v
    e = TxnValue(5, 3, 60_000, TxnState.EMPTY, (), 111, -1)
    raw = rec.txn_value(e)
    assert raw[2 + 8 + 2 + 4 + 1:2 + 8 + 2 + 4 + 1 + 4] == b"\xff\xff\xff\xff"
    assert rec.read_value(raw) == e


def test_value_version_1_tagged_fields_in_kafkas_layout() -> None:
    """Tags 0 PreviousProducerId (int64), 1 NextProducerId (int64), 2 ClientTransactionVersion (int16), each
    written only when not its default, in tag order: count, then (tag, size, bytes) each."""
    v = TxnValue(5, 32767, 60_000, TxnState.PREPARE_COMMIT, (("t", 0),), 111, 100, prev_producer_id=5,
                 next_producer_id=9, client_txn_version=2)
    raw = rec.txn_value(v, 1)
    head = struct.pack(">hqhib", 1, 5, 32767, 60_000, 2) + bytes([2, 2]) + b"t" + bytes([2]) \
        + struct.pack(">i", 0) + b"\x00" + struct.pack(">qq", 111, 100)
    assert raw == head + bytes([3, 0, 8]) + struct.pack(">q", 5) + bytes([1, 8]) + struct.pack(">q", 9) \
        + bytes([2, 2]) + struct.pack(">h", 2)
    assert rec.read_value(raw) == v
    # Version 0 has no tagged fields: they are left out and read back at their defaults.
    assert rec.read_value(rec.txn_value(v, 0)) == TxnValue(5, 32767, 60_000, TxnState.PREPARE_COMMIT,
                                                           (("t", 0),), 111, 100)
    with pytest.raises(rec.TxnRecordError):  # a tag of the wrong size is named, not a traceback
        rec.read_value(head + bytes([1, 2, 4]) + b"\x00" * 4)


def test_value_version_1_flexible_is_read() -> None:
    # compact topic "t" with partitions [4], then tagged fields (one unknown tag skipped), timestamps, tags.
    body = (struct.pack(">hqhib", 1, 9, 2, 1000, 2) + bytes([2]) + bytes([2]) + b"t" + bytes([2])
            + struct.pack(">i", 4) + bytes([0]) + struct.pack(">qq", 5, 4) + bytes([1, 5, 8]) + b"\x00" * 8)
    assert rec.read_value(body) == TxnValue(9, 2, 1000, TxnState.PREPARE_COMMIT, (("t", 4),), 5, 4)


def test_bad_records_are_named_errors() -> None:
    with pytest.raises(rec.TxnRecordError):
        rec.read_value(b"\x00\x07")
    with pytest.raises(rec.TxnRecordError):
        rec.read_key(b"\x00\x01\x00\x00")
    with pytest.raises(rec.TxnRecordError):
        rec.read_value(struct.pack(">hqhib", 0, 1, 1, 1, 42) + b"\xff\xff\xff\xff" + b"\x00" * 16)


def test_markers_are_kafkas_end_transaction_marker() -> None:
    assert rec.marker_key(True) == b"\x00\x00\x00\x01"
    assert rec.marker_key(False) == b"\x00\x00\x00\x00"
    assert rec.marker_value(4) == b"\x00\x00\x00\x00\x00\x04"
    assert rec.read_marker(rec.marker_key(True), rec.marker_value(4)) == (True, 4)


# ------------------------------------------------------------------------------------------------ InitProducerId
def test_a_new_transactional_id_gets_the_fresh_id_at_epoch_0() -> None:
    book = TxnBook()
    assert book.needs_producer_id(T)
    t = book.init_producer_id(T, 60_000, -1, -1, 1000, fresh_pid=7)
    assert isinstance(t, Transit) and (t.value.producer_id, t.value.producer_epoch) == (7, 0)
    assert t.state == TxnState.EMPTY
    # Pending until written: a second request waits.
    assert book.init_producer_id(T, 60_000, -1, -1, 1000) == ErrorCode.CONCURRENT_TRANSACTIONS
    book.complete(t)
    assert book.txns[T].producer_epoch == 0 and not book.needs_producer_id(T)


def test_a_failed_write_forgets_a_new_id() -> None:
    book = TxnBook()
    t = book.init_producer_id(T, 60_000, -1, -1, 1000, fresh_pid=7)
    assert isinstance(t, Transit)
    book.fail(t)
    assert T not in book.txns


def test_the_timeout_is_checked_against_the_maximum() -> None:
    book = TxnBook(TxnConfig(max_timeout_ms=10_000))
    assert book.init_producer_id(T, 10_001, -1, -1, 0, fresh_pid=1) == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert book.init_producer_id(T, 0, -1, -1, 0, fresh_pid=1) == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert isinstance(book.init_producer_id(T, 10_000, -1, -1, 0, fresh_pid=1), Transit)


def test_a_second_instance_bumps_the_epoch_and_fences_the_first() -> None:
    book = TxnBook()
    done(book, book.init_producer_id(T, 60_000, -1, -1, 1000, fresh_pid=7))
    t = done(book, book.init_producer_id(T, 60_000, -1, -1, 2000))
    assert (t.value.producer_id, t.value.producer_epoch) == (7, 1)
    assert book.add_partitions(T, 7, 0, [("orders", 0)], 2001) == ErrorCode.PRODUCER_FENCED
    assert book.end_txn(T, 7, 0, True, 2001) == ErrorCode.PRODUCER_FENCED
    assert isinstance(book.add_partitions(T, 7, 1, [("orders", 0)], 2001), Transit)


def test_an_exhausted_epoch_takes_a_new_producer_id() -> None:
    book = TxnBook()
    done(book, book.init_producer_id(T, 60_000, -1, -1, 0, fresh_pid=7))
    book.txns[T].producer_epoch = MAX_EPOCH - 1
    assert book.needs_producer_id(T)
    t = done(book, book.init_producer_id(T, 60_000, -1, -1, 0, fresh_pid=8))
    assert (t.value.producer_id, t.value.producer_epoch) == (8, 0)


def test_an_unknown_or_stale_producer_resuming_is_refused() -> None:
    book = TxnBook()
    assert book.init_producer_id(T, 60_000, 3, 0, 0, fresh_pid=7) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    done(book, book.init_producer_id(T, 60_000, -1, -1, 0, fresh_pid=7))
    done(book, book.init_producer_id(T, 60_000, -1, -1, 0))  # epoch 1 now
    assert book.init_producer_id(T, 60_000, 99, 1, 0) == ErrorCode.PRODUCER_FENCED
    assert book.init_producer_id(T, 60_000, 7, 5, 0) == ErrorCode.PRODUCER_FENCED
    t = done(book, book.init_producer_id(T, 60_000, 7, 1, 0))  # KIP-360: the current epoch bumps
    assert t.value.producer_epoch == 2


def test_init_on_an_ongoing_transaction_aborts_it_with_the_epoch_bumped() -> None:
    book = started(TxnBook())
    t = book.init_producer_id(T, 60_000, -1, -1, 3000)
    assert isinstance(t, Transit) and t.fenced_abort
    assert t.state == TxnState.PREPARE_ABORT and t.value.producer_epoch == 1
    assert t.value.partitions == (("orders", 0),)
    book.complete(t)
    assert book.init_producer_id(T, 60_000, -1, -1, 3001) == ErrorCode.CONCURRENT_TRANSACTIONS
    # The fenced producer waits while the abort's markers go out (Kafka checks its pending transition first),
    # then hears it is fenced.
    assert book.add_partitions(T, 7, 0, [("orders", 1)], 3001) == ErrorCode.CONCURRENT_TRANSACTIONS
    done(book, book.complete_markers(T, 3002))
    assert book.add_partitions(T, 7, 0, [("orders", 1)], 3002) == ErrorCode.PRODUCER_FENCED
    assert book.txns[T].state == TxnState.COMPLETE_ABORT and not book.txns[T].partitions
    t2 = done(book, book.init_producer_id(T, 60_000, -1, -1, 3003))
    assert t2.value.producer_epoch == 2 and t2.state == TxnState.EMPTY


# ------------------------------------------------------------------------------------------------ partitions
def test_adding_partitions_starts_and_grows_the_transaction() -> None:
    book = started(TxnBook(), now=1000)
    m = book.txns[T]
    assert m.state == TxnState.ONGOING and m.start_ms == 1000
    assert book.add_partitions(T, 7, 0, [("orders", 0)], 1500) is None  # nothing new: nothing written
    t = done(book, book.add_partitions(T, 7, 0, [("orders", 1)], 1500))
    assert t.value.partitions == (("orders", 0), ("orders", 1)) and t.value.start_ms == 1000


def test_requests_for_another_producer_id_are_invalid_mappings() -> None:
    book = started(TxnBook())
    assert book.add_partitions(T, 8, 0, [("x", 0)], 0) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert book.add_partitions("other", 7, 0, [("x", 0)], 0) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert book.end_txn(T, 8, 0, True, 0) == ErrorCode.INVALID_PRODUCER_ID_MAPPING


# ------------------------------------------------------------------------------------------------ EndTxn
@pytest.mark.parametrize("commit", [True, False])
def test_end_prepares_then_completes(commit: bool) -> None:
    book = started(TxnBook())
    t = done(book, book.end_txn(T, 7, 0, commit, 2000))
    assert t.state == (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
    assert [m.transactional_id for m in book.preparing()] == [T]
    # While the markers are out: the same outcome waits, the other is invalid, new partitions wait.
    assert book.end_txn(T, 7, 0, commit, 2001) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert book.end_txn(T, 7, 0, not commit, 2001) == ErrorCode.INVALID_TXN_STATE
    assert book.add_partitions(T, 7, 0, [("orders", 2)], 2001) == ErrorCode.CONCURRENT_TRANSACTIONS
    c = done(book, book.complete_markers(T, 2002))
    assert c.state == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT) and c.value.partitions == ()
    assert book.end_txn(T, 7, 0, commit, 2003) == ErrorCode.NONE  # a retry of what is done
    assert book.end_txn(T, 7, 0, not commit, 2003) == ErrorCode.INVALID_TXN_STATE
    # The next transaction starts from Complete*.
    n = done(book, book.add_partitions(T, 7, 0, [("orders", 3)], 3000))
    assert n.state == TxnState.ONGOING and n.value.start_ms == 3000 and n.value.partitions == (("orders", 3),)


def test_ending_an_empty_transaction_is_invalid() -> None:
    book = TxnBook()
    done(book, book.init_producer_id(T, 60_000, -1, -1, 0, fresh_pid=7))
    assert book.end_txn(T, 7, 0, True, 0) == ErrorCode.INVALID_TXN_STATE
    assert book.end_txn(T, 7, 0, False, 0) == ErrorCode.INVALID_TXN_STATE


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced() -> None:
    book = TxnBook()
    done(book, book.init_producer_id(T, 5_000, -1, -1, 0, fresh_pid=7))
    done(book, book.add_partitions(T, 7, 0, [("orders", 0)], 1000))
    assert book.timed_out(6000) == []
    [t] = book.timed_out(6001)
    assert t.state == TxnState.PREPARE_ABORT and t.value.producer_epoch == 1
    assert book.timed_out(7000) == []  # pending: not aborted twice
    book.complete(t)
    assert book.end_txn(T, 7, 0, True, 7000) == ErrorCode.PRODUCER_FENCED


def test_load_replays_the_latest_record_and_a_tombstone_forgets() -> None:
    book = TxnBook()
    book.load(T, TxnValue(7, 3, 60_000, TxnState.PREPARE_COMMIT, (("orders", 0),), 10, 5))
    assert [m.transactional_id for m in book.preparing()] == [T]
    assert book.txns[T].producer_epoch == 3
    book.load(T, None)
    assert T not in book.txns


def test_idle_ids_expire_with_a_tombstone_and_come_back_with_a_new_producer_id() -> None:
    book = TxnBook()
    done(book, book.init_producer_id("idle", 60_000, -1, -1, 1000, fresh_pid=7))  # Empty, last changed at 1000
    started(book, now=1000)  # T: Ongoing since 1000
    done(book, book.init_producer_id("ended", 60_000, -1, -1, 1000, fresh_pid=9))
    done(book, book.add_partitions("ended", 9, 0, [("orders", 1)], 1000))
    done(book, book.end_txn("ended", 9, 0, True, 2000))
    done(book, book.complete_markers("ended", 2000))  # CompleteCommit, last changed at 2000
    assert book.expired(now=1999, expiration_ms=1000) == []  # not idle long enough yet
    [gone] = book.expired(now=2000, expiration_ms=1000)  # only the Empty one: T is Ongoing, "ended" too recent
    assert (gone.transactional_id, gone.state) == ("idle", TxnState.DEAD)
    assert book.init_producer_id("idle", 60_000, 7, 0, 2000) == ErrorCode.CONCURRENT_TRANSACTIONS  # being removed
    assert book.expired(now=2000, expiration_ms=1000) == []  # pending: asked once
    book.complete(gone)
    assert "idle" not in book.txns and set(book.txns) == {T, "ended"}
    assert book.needs_producer_id("idle")
    [ended] = book.expired(now=3000, expiration_ms=1000)
    book.fail(ended)  # the tombstone was not written: the id stays as it was
    assert book.txns["ended"].state == TxnState.COMPLETE_COMMIT and book.txns["ended"].pending is None


# ------------------------------------------------------------------------------------------------ KIP-890
def test_verify_only_answers_per_partition_and_adds_nothing() -> None:
    book = started(TxnBook())
    asked = [("orders", 0), ("orders", 1)]
    assert book.verify_partitions(T, 7, 0, asked) == {("orders", 0): 0,
                                                      ("orders", 1): ErrorCode.TRANSACTION_ABORTABLE}
    assert book.txns[T].partitions == {("orders", 0)}  # only checked
    assert book.verify_partitions(T, 8, 0, asked) == dict.fromkeys(asked, ErrorCode.INVALID_PRODUCER_ID_MAPPING)
    assert book.verify_partitions("other", 7, 0, asked) == dict.fromkeys(asked,
                                                                         ErrorCode.INVALID_PRODUCER_ID_MAPPING)
    assert book.verify_partitions(T, 7, 1, asked) == dict.fromkeys(asked, ErrorCode.PRODUCER_FENCED)
    # A partition being added counts once its record is committed.
    pending = book.add_partitions(T, 7, 0, [("orders", 1)], 2000)
    assert isinstance(pending, Transit)
    assert book.verify_partitions(T, 7, 0, [("orders", 1)]) == {("orders", 1): ErrorCode.TRANSACTION_ABORTABLE}
    book.complete(pending)
    assert book.verify_partitions(T, 7, 0, asked) == dict.fromkeys(asked, 0)
    # Being prepared: CONCURRENT_TRANSACTIONS; complete: nothing is in a transaction any more.
    prepare = done(book, book.end_txn(T, 7, 0, True, 3000))
    assert prepare.state == TxnState.PREPARE_COMMIT
    assert book.verify_partitions(T, 7, 0, asked) == dict.fromkeys(asked, ErrorCode.CONCURRENT_TRANSACTIONS)
    done(book, book.complete_markers(T, 4000))
    assert book.verify_partitions(T, 7, 0, asked) == dict.fromkeys(asked, ErrorCode.TRANSACTION_ABORTABLE)


# ------------------------------------------------------------------------------------------------ transaction.version 2
def test_v2_end_bumps_the_epoch_and_answers_what_the_producer_goes_on_with() -> None:
    book = started(TxnBook())
    t = done(book, book.end_txn(T, 7, 0, True, 2000, client_tv=2))
    assert (t.state, t.value.producer_epoch, t.last_producer_epoch) == (TxnState.PREPARE_COMMIT, 1, 0)
    assert t.continues_as == (7, 1)
    assert (t.value.client_txn_version, t.value.prev_producer_id, t.value.next_producer_id) == (2, 7, -1)
    c = done(book, book.complete_markers(T, 2001))
    assert (c.state, c.value.producer_id, c.value.producer_epoch) == (TxnState.COMPLETE_COMMIT, 7, 1)
    assert c.value.client_txn_version == 2  # kept from the Prepare*
    # The next transaction runs at the bumped epoch; the old one is fenced.
    assert book.add_partitions(T, 7, 0, [("orders", 0)], 2002, client_tv=2) == ErrorCode.PRODUCER_FENCED
    done(book, book.add_partitions(T, 7, 1, [("orders", 0)], 2002, client_tv=2))
    assert book.txns[T].state == TxnState.ONGOING


def test_v2_retries_and_refusals_follow_kafkas_table() -> None:
    book = started(TxnBook())
    done(book, book.end_txn(T, 7, 0, False, 2000, client_tv=2))
    # While Prepare* (Kafka's pending Complete*, the markers going out) every EndTxn waits.
    for pid, epoch, commit in ((7, 0, False), (7, 0, True), (7, 1, False), (8, 5, True)):
        assert book.end_txn(T, pid, epoch, commit, 2000, client_tv=2) == ErrorCode.CONCURRENT_TRANSACTIONS
    done(book, book.complete_markers(T, 2001))  # CompleteAbort at epoch 1
    assert book.end_txn(T, 7, 0, False, 2002, client_tv=2) == ErrorCode.NONE  # the retry: success
    assert book.end_txn(T, 7, 0, True, 2002, client_tv=2) == ErrorCode.INVALID_TXN_STATE
    assert book.end_txn(T, 7, 1, True, 2002, client_tv=2) == ErrorCode.INVALID_TXN_STATE  # nothing to commit
    assert book.end_txn(T, 7, 5, False, 2002, client_tv=2) == ErrorCode.PRODUCER_FENCED
    assert book.end_txn(T, 8, 1, False, 2002, client_tv=2) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    # An abort at the current epoch with nothing added: an empty transaction aborted, the epoch bumped.
    t = done(book, book.end_txn(T, 7, 1, False, 2003, client_tv=2))
    assert (t.state, t.value.producer_epoch, t.value.partitions, t.value.start_ms) == \
        (TxnState.PREPARE_ABORT, 2, (), 2003)
    assert done(book, book.complete_markers(T, 2004)).value.producer_epoch == 2


def test_v2_empty_transaction_abort_and_commit() -> None:
    book = TxnBook()
    done(book, book.init_producer_id(T, 60_000, -1, -1, 1000, fresh_pid=7))
    assert book.end_txn(T, 7, 0, True, 1001, client_tv=2) == ErrorCode.INVALID_TXN_STATE
    t = done(book, book.end_txn(T, 7, 0, False, 1001, client_tv=2))
    assert (t.state, t.continues_as) == (TxnState.PREPARE_ABORT, (7, 1))
    # The same request at transaction.version 0/1 (EndTxn v4) keeps Kafka's older rules.
    book2 = TxnBook()
    done(book2, book2.init_producer_id(T, 60_000, -1, -1, 1000, fresh_pid=7))
    assert book2.end_txn(T, 7, 0, False, 1001) == ErrorCode.INVALID_TXN_STATE


def test_v2_epoch_overflow_rolls_to_the_next_producer_id() -> None:
    book = started(TxnBook())
    m = book.txns[T]
    m.producer_epoch = MAX_EPOCH - 1  # 32766: the last epoch a producer may hold
    assert book.needs_producer_id_to_end(T)
    assert book.end_txn(T, 7, MAX_EPOCH - 1, True, 2000, client_tv=2) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    t = done(book, book.end_txn(T, 7, MAX_EPOCH - 1, True, 2000, client_tv=2, fresh_pid=40))
    # Prepare*: the old id at 32767 (the markers' epoch), the next id recorded; the producer goes on as (40, 0).
    assert (t.value.producer_id, t.value.producer_epoch, t.value.next_producer_id) == (7, MAX_EPOCH, 40)
    assert t.continues_as == (40, 0)
    assert rec.read_value(rec.txn_value(t.value, 1)) == t.value  # kept across a coordinator move
    # The producer, on (40, 0) already, waits while the markers go out (the transaction is still on id 7).
    assert book.add_partitions(T, 40, 0, [("orders", 1)], 2000, client_tv=2) == ErrorCode.CONCURRENT_TRANSACTIONS
    c = done(book, book.complete_markers(T, 2001))
    assert (c.value.producer_id, c.value.producer_epoch, c.value.next_producer_id, c.value.prev_producer_id) \
        == (40, 0, -1, 7)
    # A retry with the old id at 32766 is recognised (Kafka's retryOnOverflow) and answered success.
    assert book.end_txn(T, 7, MAX_EPOCH - 1, True, 2002, client_tv=2) == ErrorCode.NONE
    assert book.end_txn(T, 7, MAX_EPOCH - 1, False, 2002, client_tv=2) == ErrorCode.INVALID_TXN_STATE
    done(book, book.add_partitions(T, 40, 0, [("orders", 1)], 2003, client_tv=2))


def test_v2_overflow_survives_a_load_between_prepare_and_complete() -> None:
    """A coordinator that loads a Prepare* with a NextProducerId completes it onto that id."""
    value = TxnValue(7, MAX_EPOCH, 60_000, TxnState.PREPARE_COMMIT, (("orders", 0),), 10, 5,
                     prev_producer_id=7, next_producer_id=40, client_txn_version=2)
    book = TxnBook()
    book.load(T, rec.read_value(rec.txn_value(value, 1)))
    c = done(book, book.complete_markers(T, 11))
    assert (c.value.producer_id, c.value.producer_epoch) == (40, 0)


def test_coordinator_aborts_use_the_finalized_level() -> None:
    book = started(TxnBook())
    book.server_tv = 2
    (t,) = book.timed_out(1000 + 60_001)
    assert (t.value.producer_epoch, t.value.client_txn_version) == (1, 2)


def test_an_end_by_the_older_rules_sets_client_version_0() -> None:
    """A transaction a TV2 leader added to, ended with EndTxn v4: its markers carry transaction version 0 (not
    checked against the bumped epoch), as Kafka's endTransactionWithTV1 sets it."""
    book = TxnBook()
    done(book, book.init_producer_id(T, 60_000, -1, -1, 1000, fresh_pid=7))
    done(book, book.add_partitions(T, 7, 0, [("orders", 0)], 1001, client_tv=2))
    assert book.txns[T].client_txn_version == 2
    t = done(book, book.end_txn(T, 7, 0, True, 1002))
    assert (t.value.producer_epoch, t.value.client_txn_version) == (0, 0)


def test_a_coordinator_abort_at_level_2_bumps_the_last_epoch_too() -> None:
    """At transaction.version 2 the markers must be above the producer's epoch: a producer at 32766 timed out is
    aborted at 32767 (at level 0/1 it stays, as before), and its next InitProducerId takes a new id."""
    for level, want in ((2, MAX_EPOCH), (1, MAX_EPOCH - 1)):
        book = started(TxnBook())
        book.server_tv = level
        book.txns[T].producer_epoch = MAX_EPOCH - 1
        (t,) = book.timed_out(1000 + 60_001)
        assert t.value.producer_epoch == want
        book.complete(t)
        done(book, book.complete_markers(T, 70_000))
        assert book.needs_producer_id(T)


def test_a_coordinator_abort_at_level_2_moves_an_epoch_run_out_to_the_next_producer_id() -> None:
    """Kafka's TV2 fence (TransactionCoordinator's epoch-fence path): an Ongoing transaction whose epoch ran out
    is aborted above it and handed over to a fresh producer id, which its Complete* moves to at epoch 0.  The
    same for a timeout and for InitProducerId fencing it."""
    book = started(TxnBook())
    book.server_tv = 2
    book.txns[T].producer_epoch = MAX_EPOCH - 1
    (m,) = book.timing_out(1000 + 60_001)
    assert book.fence_needs_producer_id(m)
    (t,) = book.timed_out(1000 + 60_001, {T: 41})
    assert (t.value.producer_epoch, t.value.next_producer_id) == (MAX_EPOCH, 41)
    book.complete(t)
    c = done(book, book.complete_markers(T, 70_000))
    assert (c.value.producer_id, c.value.producer_epoch, c.value.state) == (41, 0, TxnState.COMPLETE_ABORT)

    book = started(TxnBook())
    book.server_tv = 2
    book.txns[T].producer_epoch = MAX_EPOCH - 1
    assert book.needs_producer_id(T)
    t = book.init_producer_id(T, 60_000, -1, -1, 70_000, fresh_pid=42)
    assert isinstance(t, Transit) and t.fenced_abort
    assert (t.value.producer_epoch, t.value.next_producer_id) == (MAX_EPOCH, 42)
    book.complete(t)
    c = done(book, book.complete_markers(T, 70_001))
    assert (c.value.producer_id, c.value.producer_epoch) == (42, 0)
    # At level 1 nothing moves: the epoch stays below the limit and the next InitProducerId takes a new id.
    book = started(TxnBook())
    book.server_tv = 1
    book.txns[T].producer_epoch = MAX_EPOCH - 1
    (m,) = book.timing_out(1000 + 60_001)
    assert not book.fence_needs_producer_id(m)
