"""The share-partition state machine (kjbod.broker.share.partition), in process: acquisition, locks, delivery
counts, acknowledgements and the persisted form."""

from __future__ import annotations

import pytest

from kjbod.broker.share.partition import (
    ACCEPT,
    ACQUIRED,
    GAP,
    REJECT,
    RELEASE,
    RENEW,
    AckBatch,
    AckError,
    SharePartition,
)
from kjbod.broker.share.persister import ACKNOWLEDGED, ARCHIVED, AVAILABLE, ReadAnswer, StateBatch
from kjbod.protocol.errors import ErrorCode

BATCHES = [(0, 4), (5, 9), (10, 14)]


def test_acquire_whole_batches_up_to_max_records():
    sp = SharePartition(0)
    assert sp.acquire("a", BATCHES, 7, now=0) == [(0, 9, 1)]  # the batch reaching 7 goes whole
    assert sp.end_offset == 10 and sp.next_fetch_offset() == 10
    assert sp.acquire("b", BATCHES, 100, now=0) == [(10, 14, 1)]  # a second member gets only what is free


def test_accept_moves_the_start_offset_and_is_never_redelivered():
    sp = SharePartition(0)
    sp.acquire("a", BATCHES[:1], 10, now=0)
    sp.acknowledge("a", [AckBatch(0, 4, (ACCEPT,))], now=1)
    assert sp.start_offset == 5 and sp.records == {}
    assert sp.acquire("a", BATCHES[:1], 10, now=2) == []


def test_release_redelivers_with_a_higher_count_and_archives_past_the_limit():
    sp = SharePartition(0, delivery_count_limit=2)
    sp.acquire("a", [(0, 1)], 10, now=0)
    sp.acknowledge("a", [AckBatch(0, 1, (RELEASE,))], now=0)
    assert sp.next_fetch_offset() == 0
    assert sp.acquire("b", [(0, 1)], 10, now=0) == [(0, 1, 2)]
    sp.acknowledge("b", [AckBatch(0, 1, (RELEASE,))], now=0)  # count 2 reached the limit: archived
    assert sp.start_offset == 2 and sp.acquire("a", [(0, 1)], 10, now=0) == []


def test_reject_and_gap_archive_per_offset_types():
    sp = SharePartition(0)
    sp.acquire("a", [(0, 3)], 10, now=0)
    sp.acknowledge("a", [AckBatch(0, 3, (ACCEPT, GAP, REJECT, RELEASE))], now=0)
    assert sp.start_offset == 3 and sp.records[3].state == AVAILABLE
    assert sp.acquire("a", [(0, 3)], 10, now=0) == [(3, 3, 2)]


def test_lock_timeout_releases_and_renew_extends():
    sp = SharePartition(0, lock_ms=1000)
    sp.acquire("a", [(0, 1)], 10, now=0)
    sp.acknowledge("a", [AckBatch(1, 1, (RENEW,))], now=0.9, renew_allowed=True)
    assert sp.expire_locks(1.0) and sp.records[0].state == AVAILABLE and sp.records[1].state == ACQUIRED
    assert not sp.expire_locks(1.5)
    assert sp.expire_locks(1.9) and sp.records[1].state == AVAILABLE
    assert sp.acquire("b", [(0, 1)], 10, now=2) == [(0, 1, 2)]


def test_release_member_and_untouched_others():
    sp = SharePartition(0)
    sp.acquire("a", [(0, 1)], 10, now=0)
    sp.acquire("b", [(2, 3)], 10, now=0)
    assert sp.release_member("a") and not sp.release_member("nobody")
    assert sp.records[0].state == AVAILABLE and sp.records[2].state == ACQUIRED


@pytest.mark.parametrize("batches, code", [
    ([AckBatch(0, 2, (ACCEPT,)), AckBatch(1, 1, (ACCEPT,))], ErrorCode.INVALID_REQUEST),  # before the last end
    # one offset shared with the batch before (Kafka's request check allows it): no longer acquired the 2nd time
    ([AckBatch(0, 1, (ACCEPT,)), AckBatch(1, 2, (ACCEPT,))], ErrorCode.INVALID_RECORD_STATE),
    ([AckBatch(2, 1, (ACCEPT,))], ErrorCode.INVALID_REQUEST),  # last before first
    ([AckBatch(0, 2, (ACCEPT, ACCEPT))], ErrorCode.INVALID_REQUEST),  # neither one type nor one per offset
    ([AckBatch(0, 0, (9,))], ErrorCode.INVALID_REQUEST),  # unknown type
    ([AckBatch(0, 0, (RENEW,))], ErrorCode.INVALID_REQUEST),  # renew without IsRenewAck
    ([AckBatch(0, 50, (ACCEPT,))], ErrorCode.INVALID_REQUEST),  # past the acquired records
    ([AckBatch(4, 4, (ACCEPT,))], ErrorCode.INVALID_RECORD_STATE),  # acquired by another member
    ([AckBatch(5, 5, (ACCEPT,))], ErrorCode.INVALID_RECORD_STATE),  # available, not acquired
])
def test_bad_acknowledgements_change_nothing(batches, code):
    sp = SharePartition(0)
    sp.acquire("a", [(0, 3)], 10, now=0)
    sp.acquire("b", [(4, 4)], 10, now=0)
    sp.acquire("b", [(5, 5)], 10, now=0)
    sp.release_member("b")
    sp.acquire("b", [(4, 4)], 10, now=0)
    before = {o: (r.state, r.delivery_count, r.member) for o, r in sp.records.items()}
    with pytest.raises(AckError) as e:
        sp.acknowledge("a", [AckBatch(0, 0, (ACCEPT,)), *batches] if batches[0].first_offset > 0 else batches,
                       now=0)
    assert e.value.code == code
    assert {o: (r.state, r.delivery_count, r.member) for o, r in sp.records.items()} == before


def test_record_lock_limit_stops_new_acquisition():
    sp = SharePartition(0, max_record_locks=5)
    assert sp.acquire("a", BATCHES, 100, now=0) == [(0, 4, 1)]
    assert sp.acquire("a", BATCHES, 100, now=0) == []
    sp.acknowledge("a", [AckBatch(0, 4, (ACCEPT,))], now=0)
    assert sp.acquire("a", BATCHES, 100, now=0) == [(5, 9, 1)]


def test_log_start_archives_below_it():
    sp = SharePartition(0)
    sp.acquire("a", [(0, 4)], 10, now=0)
    assert sp.update_log_start(3)
    assert sp.start_offset == 3 and set(sp.records) == {3, 4}
    assert not sp.update_log_start(2)
    sp2 = SharePartition(0)
    sp2.update_log_start(10)
    assert sp2.start_offset == sp2.end_offset == sp2.next_fetch_offset() == 10


def test_state_batches_round_trip_through_loaded():
    sp = SharePartition(0, delivery_count_limit=3)
    sp.acquire("a", [(0, 9)], 100, now=0)
    sp.acknowledge("a", [AckBatch(0, 9, (ACCEPT, RELEASE, REJECT, ACCEPT, ACCEPT, RELEASE, RELEASE, ACCEPT,
                                         ACCEPT, ACCEPT))], now=0)
    batches = sp.state_batches()
    assert sp.start_offset == 1
    assert batches == (StateBatch(1, 1, AVAILABLE, 1), StateBatch(2, 2, ARCHIVED, 1), StateBatch(3, 4, ACKNOWLEDGED, 1),
                       StateBatch(5, 6, AVAILABLE, 1), StateBatch(7, 9, ACKNOWLEDGED, 1))
    again = SharePartition.loaded(ReadAnswer(state_epoch=3, start_offset=1, batches=batches), 1)
    assert again.state_batches() == batches and again.end_offset == 10 and again.state_epoch == 3
    assert again.acquire("b", [(0, 9)], 100, now=0) == [(1, 1, 2), (5, 6, 2)]
    assert again.records[1].state == ACQUIRED


def test_loaded_start_past_batches_and_missing_offsets_are_new():
    answer = ReadAnswer(start_offset=4, batches=(StateBatch(2, 5, ACKNOWLEDGED, 1), StateBatch(8, 8, ARCHIVED, 1)))
    sp = SharePartition.loaded(answer, 4)
    assert sp.start_offset == 6 and sp.end_offset == 9
    assert sp.acquire("a", [(6, 9)], 100, now=0) == [(6, 7, 1), (9, 9, 1)]


def test_aborted_batches_are_archived_not_acquired():
    sp = SharePartition(0)
    assert sp.acquire("a", [(0, 2, True), (3, 4, False), (5, 5, True)], 100, now=0) == [(3, 4, 1)]
    assert sp.start_offset == 3 and sp.end_offset == 6
    sp.acknowledge("a", [AckBatch(3, 4, (ACCEPT,))], now=0)
    assert sp.start_offset == 6 and sp.records == {}


def test_held_acknowledgement_waits_for_its_write():
    sp = SharePartition(0)
    sp.acquire("a", BATCHES[:2], 10, now=0)
    undo = sp.acknowledge("a", [AckBatch(0, 4, (RELEASE,))], now=1, hold=True)
    # pending: not acquirable again, the start offset stays before it
    assert sp.acquire("b", BATCHES[:1], 10, now=1) == [] and sp.next_fetch_offset() == 10
    sp.rollback(undo, now=1)
    assert sp.records[0].state == ACQUIRED and sp.records[0].member == "a" and sp.records[0].delivery_count == 1
    undo = sp.acknowledge("a", [AckBatch(0, 4, (ACCEPT,))], now=1, hold=True)
    assert sp.start_offset == 0
    sp.confirm(undo)
    assert sp.start_offset == 5 and not sp.pending


@pytest.mark.parametrize("ack", [ACCEPT, RELEASE, REJECT])
def test_a_rollback_after_the_lock_ran_out_releases_instead_of_locking_again(ack):
    """Kafka 4.3: a record whose lock runs out while its acknowledgement's write is under way is not the member's
    again when that write fails, but available at once (its expiry was only held off by the transition)."""
    sp = SharePartition(0, lock_ms=1000)
    sp.acquire("a", [(0, 1)], 10, now=0)  # locked until 1.0
    undo = sp.acknowledge("a", [AckBatch(0, 1, (ack,))], now=0.5, hold=True)
    sp.rollback(undo, now=1.0)
    assert [(sp.records[o].state, sp.records[o].member, sp.records[o].delivery_count) for o in (0, 1)] == \
        [(AVAILABLE, None, 1)] * 2
    assert not sp.pending and sp.start_offset == 0 and sp.next_fetch_offset() == 0
    assert sp.acquire("b", [(0, 1)], 10, now=1.0) == [(0, 1, 2)]


def test_a_rollback_after_the_lock_ran_out_archives_at_the_delivery_count_limit():
    sp = SharePartition(0, lock_ms=1000, delivery_count_limit=1)
    sp.acquire("a", [(0, 1)], 10, now=0)
    undo = sp.acknowledge("a", [AckBatch(0, 1, (ACCEPT,))], now=0.5, hold=True)
    sp.rollback(undo, now=2.0)
    assert sp.start_offset == 2 and sp.records == {} and not sp.pending


def test_a_rollback_before_the_lock_ran_out_gives_the_records_back_with_their_lock():
    sp = SharePartition(0, lock_ms=1000)
    sp.acquire("a", [(0, 1)], 10, now=0)
    undo = sp.acknowledge("a", [AckBatch(0, 1, (RELEASE,))], now=0.5, hold=True)
    sp.rollback(undo, now=0.9)
    assert [(sp.records[o].state, sp.records[o].member) for o in (0, 1)] == [(ACQUIRED, "a")] * 2
    assert sp.acquire("b", [(0, 1)], 10, now=0.9) == []
    assert sp.expire_locks(1.0)  # the lock it had still runs out when it did
    assert sp.acquire("b", [(0, 1)], 10, now=1.0) == [(0, 1, 2)]


def test_a_member_s_held_release_waits_for_its_write_and_rolls_back():
    """Kafka 4.3's release of a leaving member's records is a transition like an acknowledgement's: pending
    until its state write answers, back to the member when it fails."""
    sp = SharePartition(0, lock_ms=1000)
    sp.acquire("a", [(0, 1)], 10, now=0)
    sp.acquire("b", [(2, 3)], 10, now=0)
    undo = sp.release_member("a", hold=True)
    assert undo and not sp.release_member("nobody", hold=True)
    assert sp.pending == {0, 1} and sp.records[0].state == AVAILABLE and sp.records[2].state == ACQUIRED
    assert sp.next_fetch_offset() == 4 and sp.acquire("b", [(0, 1)], 10, now=0.5) == []  # not while pending
    sp.rollback(undo, now=0.5)
    assert [(sp.records[o].state, sp.records[o].member) for o in (0, 1)] == [(ACQUIRED, "a")] * 2
    assert not sp.pending and sp.acquire("b", [(0, 1)], 10, now=0.5) == []
    undo = sp.release_member("a", hold=True)  # released again, and this time the write holds
    sp.confirm(undo)
    assert not sp.pending and sp.acquire("b", [(0, 1)], 10, now=0.5) == [(0, 1, 2)]


def test_a_member_s_held_release_past_the_limit_rolls_back_to_acquired():
    sp = SharePartition(0, lock_ms=1000, delivery_count_limit=1)
    sp.acquire("a", [(0, 1)], 10, now=0)
    undo = sp.release_member("a", hold=True)
    assert sp.records[0].state == ARCHIVED and sp.start_offset == 0  # not past a pending offset
    sp.rollback(undo, now=0.5)
    assert sp.records[0].state == ACQUIRED and sp.start_offset == 0
    assert sp.expire_locks(1.0) and sp.start_offset == 2  # its lock running out archives it


def test_gaps_between_batches_are_acquired_with_the_batch_after_them():
    """Offsets the log lacks (compaction): Kafka acquires the whole range, the client acknowledges them as GAP,
    and the start offset passes them."""
    sp = SharePartition(0)
    assert sp.acquire("a", [(0, 4), (10, 14)], 100, now=0, read_from=0) == [(0, 14, 1)]
    sp.acknowledge("a", [AckBatch(0, 4, (ACCEPT,)), AckBatch(5, 9, (GAP,)), AckBatch(10, 14, (ACCEPT,))], now=1)
    assert sp.start_offset == 15 and sp.records == {}


def test_a_gap_before_the_first_batch_moves_an_idle_start_and_is_archived_otherwise():
    sp = SharePartition(0)
    assert sp.acquire("a", [(5, 9)], 100, now=0, read_from=0) == [(5, 9, 1)]
    assert sp.start_offset == 5
    sp.acknowledge("a", [AckBatch(5, 9, (RELEASE,))], now=1)  # 5-9 available again, in flight
    assert sp.acquire("a", [(5, 9)], 2, now=1, read_from=5) == [(5, 9, 2)]
    # in flight: 5-9; the next read begins at 10 and the log's next batch is at 20
    assert sp.acquire("b", [(20, 24)], 100, now=1, read_from=10) == [(20, 24, 1)]
    assert all(sp.records[o].state == ARCHIVED for o in range(10, 20))
    sp.acknowledge("a", [AckBatch(5, 9, (ACCEPT,))], now=2)
    sp.acknowledge("b", [AckBatch(20, 24, (ACCEPT,))], now=2)
    assert sp.start_offset == 25 and sp.records == {}


def test_renew_is_refused_when_the_group_disables_it():
    sp = SharePartition(0)
    sp.acquire("a", BATCHES[:1], 10, now=0)
    with pytest.raises(AckError) as e:  # the whole request refused: the ACCEPT before it did not happen either
        sp.acknowledge("a", [AckBatch(0, 0, (ACCEPT,)), AckBatch(1, 1, (RENEW,))], now=0.5, renew_allowed=True,
                       renew_enabled=False)
    assert e.value.code == ErrorCode.INVALID_RECORD_STATE
    assert sp.records[0].state == ACQUIRED and sp.records[1].deadline == 30
    sp.acknowledge("a", [AckBatch(1, 1, (RENEW,))], now=0.5, renew_allowed=True)
    assert sp.records[1].deadline == 30.5


def test_record_limit_splits_the_batch_reaching_max_records():
    sp = SharePartition(0)
    assert sp.acquire("a", BATCHES, 7, now=0, record_limit=True) == [(0, 6, 1)]
    assert sp.next_fetch_offset() == 7  # the rest of the batch is available
    assert sp.acquire("b", BATCHES[1:], 100, now=0, record_limit=True) == [(7, 14, 1)]
    assert sp.acquire("b", BATCHES, 0, now=0, record_limit=True) == []


def test_acknowledgement_batches_are_checked_as_kafka_does():
    """Kafka refuses a batch only when it starts before the previous one's end: one shared offset is fine after a
    renewal; the first batch may start at -1 (Kafka's previous end before any batch), not below it."""
    sp = SharePartition(0)
    sp.acquire("a", [(0, 3)], 10, now=0)
    with pytest.raises(AckError) as e:
        sp.acknowledge("a", [AckBatch(-2, 0, (ACCEPT,))], now=1)
    assert e.value.code == ErrorCode.INVALID_REQUEST
    sp.acknowledge("a", [AckBatch(-1, 0, (ACCEPT,)), AckBatch(1, 1, (RENEW,)), AckBatch(1, 3, (ACCEPT,))], now=1,
                   renew_allowed=True)
    assert sp.start_offset == 4 and sp.records == {}
