"""The log cleaner and transactions, in process (Kafka's LogCleaner with CleanedTransactionMetadata): an aborted
transaction's records go and give no key to the offset map (so a committed value is never replaced by an aborted
one), a marker stays while its transaction still has records and goes delete.retention.ms after the first clean
that finds none, the cleaned segment's `.txnindex` keeps only the aborts whose records that clean saw, and the
cleaner never passes the last stable offset."""

from __future__ import annotations

import pytest

from kjbod.broker.txn import records as txnrec
from kjbod.storage import fsio
from kjbod.storage.cleaner import (
    DELETE_HORIZON_MASK,
    Cleaner,
    CleanerConfig,
    CleanStats,
    TxnFilter,
    empty_batch,
)
from kjbod.storage.log import PartitionLog
from kjbod.storage.producer_state import CompletedTxn
from kjbod.storage.records import build_batch, iter_batches, iter_records
from tests.storage.conftest import T0, region_bytes
from tests.storage.test_cleaner import COMPACT, TOPIC_ID, clean_once, keyed
from tests.storage.test_txn_producer_state import txn_index_files

A, B = 11, 12


@pytest.fixture
def make_log(tmp_path, clock):
    io = fsio.LogDirIO(str(tmp_path / "d"))
    io.mkdir(io.path, parents=True)
    made: list[PartitionLog] = []

    def make() -> PartitionLog:
        plog = PartitionLog.create(io, io.join("t-0"), "t", 0, TOPIC_ID, COMPACT, clock=clock)
        made.append(plog)
        return plog

    yield make
    for plog in made:
        plog.close_quietly()


def txn(pid: int, seq: int, pairs: list[tuple[bytes, bytes | None]]) -> bytes:
    return build_batch([(k, v, [], T0) for k, v in pairs], producer_id=pid, producer_epoch=0, base_sequence=seq,
                       is_transactional=True)


def end(plog: PartitionLog, pid: int, commit: bool) -> int:
    batch = build_batch([(txnrec.marker_key(commit), txnrec.marker_value(0), [], T0)], producer_id=pid,
                        producer_epoch=0, is_transactional=True, is_control=True)
    return plog.append_validated(plog.validate(batch, from_coordinator=True)).base_offset


def batches(plog: PartitionLog) -> list[tuple[int, int, bool, int, list[tuple[bytes | None, bytes | None]]]]:
    """(base offset, producer id, control, attributes, [(key, value)]) of every batch the log serves."""
    data = region_bytes(plog.read(plog.log_start_offset, 1 << 24))
    out = []
    for pos, h in iter_batches(data):
        view = memoryview(data)[pos:pos + h.size]
        recs = [(bytes(r.key) if r.key is not None else None, bytes(r.value) if r.value is not None else None)
                for r in iter_records(view)]
        out.append((h.base_offset, h.producer_id, h.is_control, h.attributes, recs))
    return out


def committed_view(plog: PartitionLog) -> dict[bytes, bytes | None]:
    """What a read_committed reader of the whole log ends up with per key (the aborted transactions' batches, as
    the log lists them, skipped)."""
    plog.ensure_producer_state()
    aborted = plog.producer_state.aborted
    out: dict[bytes, bytes | None] = {}
    for base, pid, control, _attrs, recs in batches(plog):
        if control or any(t.producer_id == pid and t.first_offset <= base <= t.last_offset for t in aborted):
            continue
        for k, v in recs:
            if k is not None:
                out[k] = v
    return out


def test_aborted_records_go_and_markers_go_after_delete_retention(make_log, clock):
    plog = make_log()
    plog.append(txn(A, 0, [(b"k", b"aborted"), (b"only-aborted", b"x")]))  # 0-1: A's, aborted below
    plog.append(txn(B, 0, [(b"k", b"committed")]))  # 2: B's, committed below
    assert end(plog, A, commit=False) == 3
    assert end(plog, B, commit=True) == 4
    plog.append(txn(A, 2, [(b"k", b"aborted-later")]))  # 5: A's next transaction, aborted: the latest k
    assert end(plog, A, commit=False) == 6
    plog.roll()
    plog.append(keyed([(b"z", b"1")]))
    assert committed_view(plog) == {b"k": b"committed", b"z": b"1"}

    clean_once(plog, clock)
    # The aborted records went (A's last batch stays empty: it holds A's sequence); their keys did not count, so
    # B's committed value stays. Both aborts' markers stay, with their .txnindex entries: this clean saw their
    # records. B's commit marker stays while B's record is there.
    got = batches(plog)
    assert [(b, p, c, r if not c else "marker") for b, p, c, _, r in got] == [
        (2, B, False, [(b"k", b"committed")]), (3, A, True, "marker"), (4, B, True, "marker"),
        (5, A, False, []), (6, A, True, "marker"), (7, -1, False, [(b"z", b"1")])]
    assert not any(a & DELETE_HORIZON_MASK for _, _, _, a, _ in got)
    assert plog.producer_state.aborted == [CompletedTxn(A, 0, 3, True), CompletedTxn(A, 5, 6, True)]
    assert len(txn_index_files(plog)["00000000000000000000.txnindex"]) == 2 * 34
    assert committed_view(plog) == {b"k": b"committed", b"z": b"1"}

    # The next clean finds no record of A's first transaction: its marker gets a delete horizon and its index
    # entry goes. A's second transaction still has a batch (empty, kept for A's sequence): its marker and entry
    # stay, as in Kafka; so does B's commit marker (its record is still there).
    def next_round(key: bytes) -> None:
        plog.append(keyed([(key, b"1")]))
        plog.roll()
        plog.append(keyed([(key + b"-active", b"1")]))
        clean_once(plog, clock)

    next_round(b"y")
    got = batches(plog)
    horizons = {b: bool(a & DELETE_HORIZON_MASK) for b, _, c, a, _ in got if c}
    assert horizons == {3: True, 4: False, 6: False}
    assert plog.producer_state.aborted == [CompletedTxn(A, 5, 6, True)]
    assert committed_view(plog)[b"k"] == b"committed"

    # delete.retention.ms later the first abort marker goes.
    clock.advance(1001)
    next_round(b"x")
    assert [(b, p) for b, p, c, _, _ in batches(plog) if c] == [(4, B), (6, A)]

    # Once A writes again its empty batch goes (the marker stays for that clean, which saw the batch); then the
    # marker follows the same steps.
    plog.append(keyed([(b"a", b"1")], producer_id=A, producer_epoch=0, base_sequence=3))
    next_round(b"w")
    assert 5 not in [b for b, *_ in batches(plog)]
    assert plog.producer_state.aborted == [CompletedTxn(A, 5, 6, True)]
    next_round(b"u")
    got = batches(plog)
    assert {b: bool(a & DELETE_HORIZON_MASK) for b, _, c, a, _ in got if c} == {4: False, 6: True}
    assert plog.producer_state.aborted == []
    clock.advance(1001)
    next_round(b"v")
    assert [(b, p) for b, p, c, _, _ in batches(plog) if c] == [(4, B)]
    assert committed_view(plog)[b"k"] == b"committed"


def test_the_cleaner_never_passes_the_last_stable_offset(make_log, clock):
    plog = make_log()
    plog.append(keyed([(b"k", b"old")]))  # 0
    plog.append(txn(A, 0, [(b"k", b"open")]))  # 1: A's transaction, still open
    for i in range(6):
        plog.append(keyed([(b"f%d" % i, b"1")]))
    plog.roll()
    plog.append(keyed([(b"z", b"1")]))
    assert plog.last_stable_offset == 1
    cleaned_to = clean_once(plog, clock)
    assert cleaned_to is None or cleaned_to <= 1
    # Nothing past the open transaction was cleaned: k's old value is there (A's may still be aborted).
    assert [r for b, _, _, _, r in batches(plog) if b == 0] == [[(b"k", b"old")]]
    end(plog, A, commit=False)
    plog.roll()
    plog.append(keyed([(b"y", b"1")]))
    assert clean_once(plog, clock) is not None
    assert committed_view(plog)[b"k"] == b"old"  # the aborted value never replaced it
    assert all(r != [(b"k", b"open")] for _, _, _, _, r in batches(plog))


def test_the_filter_follows_kafkas_rules():
    def header(base: int, pid: int, *, control: bool = False, emptied: bool = False):
        raw = build_batch([(b"k", b"v", [], T0)], base_offset=base, producer_id=pid, producer_epoch=0,
                          base_sequence=-1 if control else 0, is_transactional=True, is_control=control)
        h = next(iter_batches(raw))[1]
        return next(iter_batches(empty_batch(h)))[1] if emptied else h

    f = TxnFilter([(A, 0, 2, 3)])
    assert f.on_data(header(0, A)) is True  # aborted
    assert f.on_data(header(1, B)) is False  # not in the index: committed (or open)
    assert f.on_marker(header(2, A, control=True), 0) is False  # its records were seen: stays, entry kept
    assert f.kept == [(A, 0, 2, 3)]
    assert f.on_marker(header(3, B, control=True), 1) is False
    assert f.on_marker(header(4, B, control=True), 1) is True  # no record of this one seen
    assert f.on_marker(header(5, A, control=True, emptied=True), 0) is True  # emptied before


def test_a_marker_in_another_cleaned_group_than_its_records_stays(make_log, clock):
    # Segments too big to be cleaned into one (600 bytes each at most): B's records and B's commit marker end up
    # in different groups of one clean, whose transaction state carries over from group to group as in Kafka.
    plog = make_log()
    plog.append(txn(B, 0, [(b"k%d" % i, b"v" * 40) for i in range(6)]))  # B's records, ~400 bytes
    plog.roll()
    plog.append(keyed([(b"f%d" % i, b"w" * 40) for i in range(6)]))  # ~400 bytes
    end(plog, B, commit=True)
    plog.roll()
    plog.append(keyed([(b"z", b"1")]))
    assert len(plog.segments) == 3
    clean_once(plog, clock)
    got = batches(plog)
    [(_, marker_attrs)] = [(b, a) for b, _, c, a, _ in got if c]
    assert not marker_attrs & DELETE_HORIZON_MASK  # B's records are still there: its marker has no horizon
    assert committed_view(plog)[b"k0"] == b"v" * 40


def test_an_emptied_marker_stays_only_while_it_holds_the_producers_last_epoch(clock):
    raw = build_batch([(txnrec.marker_key(False), txnrec.marker_value(0), [], T0)], producer_id=A, producer_epoch=2,
                      is_transactional=True, is_control=True)
    emptied = empty_batch(next(iter_batches(raw))[1])
    header = next(iter_batches(emptied))[1]
    assert header.records_count == 0

    def kept(last_of_producer: dict) -> bool:
        out = Cleaner(CleanerConfig(), clock)._filter_batch(header, memoryview(emptied), clock(), 1000,
                                                            last_of_producer, CleanStats(), TxnFilter())
        return out is not None

    assert kept({A: (-1, 2)})  # no data batch of A left, and this is A's epoch: its fencing epoch stays
    assert not kept({A: (-1, 3)})  # A moved on to a newer epoch
    assert not kept({A: (7, 2)})  # A has a data batch that holds its state
    assert not kept({})  # A expired
