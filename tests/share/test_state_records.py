"""The share coordinator's sans-IO part: combining state batches, the records of `__share_group_state` (bytes both
ways), the book's checks on epochs, snapshots every N updates, and replay giving back the state that was written."""

from __future__ import annotations

import random
import struct
import uuid

import pytest

from kjbod.broker.coordinator_host import partition_for
from kjbod.broker.share.persister import ACKNOWLEDGED, ARCHIVED, AVAILABLE, StateBatch
from kjbod.broker.share.state_records import (
    SNAPSHOT,
    UPDATE,
    PruneOffsets,
    ShareRecordError,
    ShareState,
    ShareStateBook,
    ShareUpdate,
    combine,
    coordinator_key,
    decode_key,
    decode_value,
    encode_key,
    snapshot_value,
    update_value,
)
from kjbod.protocol.errors import ErrorCode

TOPIC = uuid.UUID("6f1c0e3a-2b9d-4e57-8a11-0c3d5e7f9a21")
KEY = ("g1", TOPIC, 0)


def B(first: int, last: int, state: int = AVAILABLE, count: int = 1) -> StateBatch:
    return StateBatch(first, last, state, count)


# ----------------------------------------------------------------------------------------------- combining
def test_a_later_delivery_wins_where_batches_overlap():
    assert combine([B(0, 9, AVAILABLE, 1)], [B(3, 5, AVAILABLE, 2)], -1) == (
        B(0, 2, AVAILABLE, 1), B(3, 5, AVAILABLE, 2), B(6, 9, AVAILABLE, 1))


def test_of_equal_counts_the_higher_state_wins_and_a_lower_one_cannot_undo_it():
    assert combine([B(0, 9, ACKNOWLEDGED, 1)], [B(0, 9, AVAILABLE, 1)], -1) == (B(0, 9, ACKNOWLEDGED, 1),)
    assert combine([B(0, 4, AVAILABLE, 1)], [B(2, 8, ARCHIVED, 1)], -1) == (B(0, 1, AVAILABLE, 1),
                                                                           B(2, 8, ARCHIVED, 1))


def test_neighbouring_runs_of_one_state_are_joined_and_the_start_offset_cuts():
    assert combine([B(0, 4, ACKNOWLEDGED, 1)], [B(5, 9, ACKNOWLEDGED, 1), B(20, 25)], -1) == (
        B(0, 9, ACKNOWLEDGED, 1), B(20, 25))
    assert combine([B(0, 4), B(5, 9, ACKNOWLEDGED, 1), B(12, 14, ARCHIVED, 2)], [], 7) == (
        B(7, 9, ACKNOWLEDGED, 1), B(12, 14, ARCHIVED, 2))
    assert combine([B(0, 4)], [], 5) == ()


def test_combining_matches_a_per_offset_reference():
    rng = random.Random(932)
    for _ in range(300):
        batches = []
        for _ in range(rng.randint(0, 6)):
            first = rng.randint(0, 40)
            batches.append(B(first, first + rng.randint(0, 10), rng.choice([AVAILABLE, ACKNOWLEDGED, ARCHIVED]),
                             rng.randint(1, 3)))
        start = rng.choice([-1, rng.randint(0, 30)])
        cut = rng.randint(0, len(batches))
        got = combine(batches[:cut], batches[cut:], start)
        best: dict[int, tuple[int, int]] = {}
        for b in batches:
            for o in range(max(b.first_offset, start), b.last_offset + 1):
                best[o] = max(best.get(o, (0, -1)), (b.delivery_count, b.delivery_state))
        seen = {o: (b.delivery_count, b.delivery_state) for b in got for o in range(b.first_offset,
                                                                                      b.last_offset + 1)}
        assert seen == best
        assert all(a.last_offset < b.first_offset for a, b in zip(got, got[1:], strict=False))
        assert not any(a.last_offset + 1 == b.first_offset and (a.delivery_state, a.delivery_count)
                       == (b.delivery_state, b.delivery_count) for a, b in zip(got, got[1:], strict=False))


# ----------------------------------------------------------------------------------------------- bytes
def test_keys_in_kafkas_layout_both_ways():
    raw = encode_key(SNAPSHOT, KEY)
    assert raw == struct.pack(">hh", 0, 2) + b"g1" + TOPIC.bytes + struct.pack(">i", 0)
    assert decode_key(raw) == (SNAPSHOT, KEY)
    assert decode_key(encode_key(UPDATE, ("grp", TOPIC, 7))) == (UPDATE, ("grp", TOPIC, 7))
    for bad in (b"", b"\x00", struct.pack(">h", 5) + b"xx", struct.pack(">hh", 0, 40) + b"g"):
        with pytest.raises(ShareRecordError):
            decode_key(bad)


def test_values_both_ways_with_the_delivery_complete_count_tagged():
    s = ShareState(3, 2, 7, 100, 4, 1111, 2222, (B(100, 104, ACKNOWLEDGED, 1), B(105, 110, AVAILABLE, 2)))
    raw = snapshot_value(s)
    assert raw[:2] == b"\x00\x00"
    assert decode_value(SNAPSHOT, raw) == s
    u = ShareUpdate(3, 7, -1, -1, (B(1, 2),))
    assert decode_value(UPDATE, update_value(u)) == u
    # -1 (the default) is left out: the tag section is empty, as Kafka writes it
    assert update_value(u)[-1:] == b"\x00"
    with pytest.raises(ShareRecordError):
        decode_value(SNAPSHOT, b"\x00\x01" + raw[2:])
    with pytest.raises(ShareRecordError):
        decode_value(SNAPSHOT, raw[:9])


def test_the_coordinator_key_is_kafkas_text_and_hashes_onto_a_partition():
    ck = coordinator_key("g1", TOPIC, 3)
    assert ck == "g1:bxwOOiudTleKEQw9Xn-aIQ:3"
    # partitions of 50 as Java computes them (String.hashCode, Utils.abs, modulo), worked out with a JVM
    assert partition_for(ck, 50) == 20
    assert partition_for(coordinator_key("share-group-é", uuid.UUID(int=0), 0), 50) == 41


# ----------------------------------------------------------------------------------------------- the book
def _apply(book: ShareStateBook, record) -> None:
    """What the coordinator does once a record is committed: replay it, through its bytes."""
    kind, key = decode_key(record.key_bytes())
    raw = record.value_bytes()
    book.replay(kind, key, None if raw is None else decode_value(kind, raw))


def test_writes_are_updates_then_a_snapshot_every_n_and_replay_rebuilds_the_state():
    book = ShareStateBook(updates_per_snapshot=3)
    records = [book.initialize_record(KEY, state_epoch=0, start_offset=-1, now=1)]
    assert records[0].kind == SNAPSHOT and records[0].value.delivery_complete_count == -1
    _apply(book, records[0])
    kinds = []
    for i in range(8):
        assert book.check_write(KEY, 0, 1) is None
        r = book.write_record(KEY, leader_epoch=1, start_offset=i * 10 if i % 2 else -1,
                              delivery_complete_count=i, batches=(B(i * 10, i * 10 + 4, ACKNOWLEDGED, 1),), now=2)
        kinds.append(r.kind)
        records.append(r)
        _apply(book, r)
    assert kinds == [UPDATE, UPDATE, UPDATE, SNAPSHOT, UPDATE, UPDATE, UPDATE, SNAPSHOT]
    assert [r.value.snapshot_epoch for r in records] == [0, 0, 0, 0, 1, 1, 1, 1, 2]
    state = book.states[KEY]
    assert state.start_offset == 70 and state.delivery_complete_count == 7
    assert state.batches == (B(70, 74, ACKNOWLEDGED, 1),)
    # a load from the log (every record, in order) rebuilds the same state, and so does one from the last
    # snapshot on (what pruning leaves)
    for start in (0, 4, 8):
        fresh = ShareStateBook(updates_per_snapshot=3)
        for r in records[start:]:
            _apply(fresh, r)
        assert fresh.states[KEY] == state
        assert fresh.leader_epochs == book.leader_epochs
    # a write's leader epoch is checked but not recorded (only a read records a new one), as in Kafka
    assert book.leader_epochs[KEY] == -1


def test_a_snapshot_holds_the_combined_batches():
    book = ShareStateBook(updates_per_snapshot=1)
    _apply(book, book.initialize_record(KEY, 0, 0, 1))
    _apply(book, book.write_record(KEY, 1, -1, -1, (B(0, 9, AVAILABLE, 1),), 2))
    snap = book.write_record(KEY, 1, 5, -1, (B(8, 12, ACKNOWLEDGED, 1),), 3)
    assert snap.kind == SNAPSHOT
    assert snap.value.batches == (B(5, 7, AVAILABLE, 1), B(8, 12, ACKNOWLEDGED, 1))
    assert snap.value.start_offset == 5


def test_epoch_checks_are_kafkas():
    book = ShareStateBook(updates_per_snapshot=500)
    assert book.check_write(KEY, 0, 0)[0] == ErrorCode.INVALID_REQUEST  # never initialized
    assert book.check_read(KEY, 0)[0] == ErrorCode.INVALID_REQUEST
    _apply(book, book.initialize_record(KEY, state_epoch=2, start_offset=-1, now=1))
    assert book.check_initialize(KEY, 1)[0] == ErrorCode.FENCED_STATE_EPOCH
    assert book.check_initialize(KEY, 2) is None and book.check_initialize(KEY, -1) is None
    assert book.check_write(KEY, 1, 0)[0] == ErrorCode.FENCED_STATE_EPOCH
    # a read with a new leader epoch records it; older ones are fenced from then on, -1 is never checked
    r = book.read_record(KEY, leader_epoch=4, now=2)
    assert r is not None and r.kind == UPDATE and r.value.leader_epoch == 4
    _apply(book, r)
    assert book.read_record(KEY, leader_epoch=4, now=3) is None
    assert book.read_record(KEY, leader_epoch=-1, now=3) is None
    assert book.check_read(KEY, 3)[0] == ErrorCode.FENCED_LEADER_EPOCH
    assert book.check_write(KEY, 2, 3)[0] == ErrorCode.FENCED_LEADER_EPOCH
    assert book.check_write(KEY, 2, -1) is None and book.check_write(KEY, 3, 5) is None
    # a new initialization (a higher state epoch) starts over, keeping the leader epoch seen
    _apply(book, book.initialize_record(KEY, state_epoch=3, start_offset=50, now=4))
    assert book.states[KEY].batches == () and book.states[KEY].snapshot_epoch == 1
    assert book.states[KEY].delivery_complete_count == 0
    assert book.check_read(KEY, 3)[0] == ErrorCode.FENCED_LEADER_EPOCH


def test_delete_writes_a_tombstone_only_for_state_that_exists():
    book = ShareStateBook(updates_per_snapshot=500)
    assert book.delete_record(KEY) is None
    _apply(book, book.initialize_record(KEY, 0, -1, 1))
    r = book.delete_record(KEY)
    assert r is not None and r.kind == SNAPSHOT and r.value_bytes() is None
    _apply(book, r)
    assert KEY not in book.states and KEY not in book.state_epochs and KEY not in book.leader_epochs


def test_a_request_refused_as_a_whole_answers_the_code_for_every_partition():
    # what the router sends when a client without CLUSTER_ACTION asks (Kafka's getErrorResponse)
    from kjbod.protocol.error_responses import error_response
    from kjbod.protocol.generated import WriteShareGroupStateRequest
    from kjbod.protocol.generated import write_share_group_state_request as wreq
    from kjbod.protocol.generated.registry import APIS

    body = WriteShareGroupStateRequest(group_id="g", topics=[wreq.WriteStateData(
        topic_id=TOPIC, partitions=[wreq.PartitionData(partition=p) for p in (0, 3)])])
    for api_key in (83, 84, 85, 86, 87):
        resp = error_response(api_key, body, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "no")
        assert isinstance(resp, APIS[api_key].response)
        assert [(t.topic_id, [(p.partition, p.error_code) for p in t.partitions]) for t in resp.results] == [
            (TOPIC, [(0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED), (3, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)])]
        assert type(resp).decode(resp.encode(APIS[api_key].max_version), APIS[api_key].max_version) == resp


def test_odd_records_are_passed_over_or_refused_without_breaking_the_book():
    book = ShareStateBook(updates_per_snapshot=500)
    book.replay(UPDATE, KEY, None)  # an update key with a null value: nothing
    assert KEY not in book.states
    with pytest.raises(ShareRecordError):
        book.replay(SNAPSHOT, KEY, ShareUpdate(0, 0, 0, -1))
    with pytest.raises(ShareRecordError):
        book.replay(UPDATE, KEY, ShareState(0, 0, 0, 0, -1, 0, 0))
    # a batch whose last offset is before its first covers nothing
    assert combine([B(10, 5)], [B(0, 1)], -1) == (B(0, 1),)


def test_prune_offsets_keep_every_key_s_latest_snapshot():
    """Kafka's redundant offset: below the oldest of the keys' latest snapshots no load needs a record; a deleted
    key holds nothing back."""
    other = ("g", KEY[1], 1)
    prune = PruneOffsets()
    assert prune.redundant_below(0) is None
    prune.note(0, SNAPSHOT, KEY, "state", 0)
    prune.note(0, SNAPSHOT, other, "state", 1)
    prune.note(0, UPDATE, KEY, "update", 2)
    prune.note(0, SNAPSHOT, KEY, "state", 3)
    assert prune.redundant_below(0) == 1  # `other` still needs its snapshot at 1
    prune.note(0, UPDATE, other, "update", 4)
    assert prune.redundant_below(0) == 1  # and the updates after it
    prune.note(0, SNAPSHOT, other, "state", 5)
    assert prune.redundant_below(0) == 3
    prune.note(0, SNAPSHOT, KEY, None, 6)  # KEY deleted
    assert prune.redundant_below(0) == 5
    prune.note(0, SNAPSHOT, other, None, 7)
    assert prune.redundant_below(0) == 7  # no state left: all but the last record
    assert prune.redundant_below(1) is None
    prune.forget(0)
    assert prune.redundant_below(0) is None
