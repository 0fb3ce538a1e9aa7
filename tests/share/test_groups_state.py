"""Share groups on the coordinator's side, in process: the simple assignor, member epochs, share-state
initialization before assignment, leaving and session expiry, Kafka's errors, and the records that keep a group
across a restart (written, then read back)."""

from __future__ import annotations

import uuid

import pytest

from kjbod.broker.groups.consumer import TopicMeta
from kjbod.broker.share import groups_records as srec
from kjbod.broker.share.groups import (
    ShareGroupConfig,
    ShareGroups,
    ShareGroupState,
    ShareHeartbeat,
    simple_assign,
)
from kjbod.protocol.errors import ErrorCode as E

T1 = TopicMeta(uuid.UUID(int=1), "t1", 3)
T2 = TopicMeta(uuid.UUID(int=2), "t2", 1)
TOPICS = {t.name: t for t in (T1, T2)}


def lookup(name: str) -> TopicMeta | None:
    return TOPICS.get(name)


def hb(mid: str, epoch: int, topics: tuple[str, ...] | None = None, group: str = "g", **kw) -> ShareHeartbeat:
    return ShareHeartbeat(group_id=group, member_id=mid, member_epoch=epoch, subscribed_topic_names=topics, **kw)


def book(**kw) -> ShareGroups:
    return ShareGroups(ShareGroupConfig(**kw), {})


def initialize_all(s: ShareGroups, result, group: str = "g") -> None:
    done: dict[uuid.UUID, list[int]] = {}
    for p in result.to_initialize:
        done.setdefault(p.topic_id, []).append(p.partition)
    s.initialized(group, done)


def count(assignment) -> int:
    return sum(len(ps) for ps in assignment.values())


# ------------------------------------------------------------------------------------------------ the assignor
def test_fewer_members_than_partitions_share_nothing_and_spread_evenly():
    parts = {T1.topic_id: range(5)}
    out = simple_assign({"a": [T1.topic_id], "b": [T1.topic_id]}, parts, {})
    assert sorted(count(a) for a in out.values()) == [2, 3]
    assert out["a"][T1.topic_id].isdisjoint(out["b"][T1.topic_id])
    assert out["a"][T1.topic_id] | out["b"][T1.topic_id] == set(range(5))


def test_more_members_than_partitions_share_each_partition():
    members = {m: [T2.topic_id] for m in "abc"}
    out = simple_assign(members, {T2.topic_id: [0]}, {})
    assert all(out[m] == {T2.topic_id: frozenset({0})} for m in "abc")  # one partition, fetched by all three
    out = simple_assign({m: [T1.topic_id] for m in "abcde"}, {T1.topic_id: range(3)}, {})
    holders = {p: [m for m in out if p in out[m].get(T1.topic_id, ())] for p in range(3)}
    assert all(1 <= len(ms) <= 2 for ms in holders.values())  # each partition by ceil(5 / 3) = 2 at most
    assert all(count(a) >= 1 for a in out.values())


def test_the_assignor_keeps_what_a_member_had_and_leaves_out_what_is_not_assignable():
    first = simple_assign({"a": [T1.topic_id], "b": [T1.topic_id]}, {T1.topic_id: range(4)}, {})
    again = simple_assign({"a": [T1.topic_id], "b": [T1.topic_id]}, {T1.topic_id: range(4)}, first)
    assert again == first
    only_two = simple_assign({"a": [T1.topic_id]}, {T1.topic_id: [0, 2]}, {})
    assert only_two == {"a": {T1.topic_id: frozenset({0, 2})}}
    assert simple_assign({"a": [T2.topic_id], "b": [T1.topic_id]}, {T1.topic_id: [0], T2.topic_id: [0]}, {}) == {
        "a": {T2.topic_id: frozenset({0})}, "b": {T1.topic_id: frozenset({0})}}


# ------------------------------------------------------------------------------------------------ heartbeats
def test_a_partition_is_assigned_only_once_its_share_state_is_initialized():
    s = book()
    r = s.heartbeat(1000, hb("m1", 0, ("t1",)), lookup)
    assert (r.error_code, r.member_id, r.member_epoch, r.assignment) == (0, "m1", 1, {})
    assert r.heartbeat_interval_ms == 5000
    assert [(p.topic_id, p.partition, p.state_epoch, p.start_offset) for p in r.to_initialize] == [
        (T1.topic_id, p, 1, -1) for p in range(3)]
    g = s.groups["g"]
    assert set(g.initializing) == {T1.topic_id} and not g.initialized
    again = s.heartbeat(1100, hb("m1", 1), lookup)
    assert again.to_initialize == () and again.assignment is None  # being initialized: not asked for twice
    assert s.initialized("g", {T1.topic_id: [0, 1, 2]})
    assert not g.initializing and g.initialized == {T1.topic_id: ("t1", frozenset({0, 1, 2}))}
    r = s.heartbeat(1200, hb("m1", 1), lookup)
    assert (r.member_epoch, r.assignment) == (2, {T1.topic_id: frozenset({0, 1, 2})})
    assert g.group_epoch == g.assignment_epoch == 2 and g.state is ShareGroupState.STABLE


def test_a_failed_initialization_is_asked_for_again_after_the_retry_interval():
    s = book(initialize_retry_interval_ms=500)
    r = s.heartbeat(1000, hb("m1", 0, ("t2",)), lookup)
    assert len(r.to_initialize) == 1
    assert s.heartbeat(1100, hb("m1", 1), lookup).to_initialize == ()
    assert [p.partition for p in s.heartbeat(1600, hb("m1", 1), lookup).to_initialize] == [0]
    s.initialized("g", {}, failed={T2.topic_id: [0]})
    assert not s.groups["g"].initializing
    assert [p.partition for p in s.heartbeat(1700, hb("m1", 1), lookup).to_initialize] == [0]


def test_members_join_share_partitions_and_the_previous_epoch_is_forgiven():
    s = book()
    r1 = s.heartbeat(0, hb("m1", 0, ("t2",)), lookup)
    initialize_all(s, r1)
    r1 = s.heartbeat(1, hb("m1", r1.member_epoch), lookup)
    r2 = s.heartbeat(2, hb("m2", 0, ("t2",)), lookup)
    assert r2.assignment == {T2.topic_id: frozenset({0})}  # one partition, given to both
    g = s.groups["g"]
    old = g.members["m1"].member_epoch
    r1b = s.heartbeat(3, hb("m1", old), lookup)
    # m1 takes the new epoch; its partition did not change, so the answer carries no assignment
    assert r1b.member_epoch == g.assignment_epoch == old + 1 and r1b.assignment is None
    assert g.members["m1"].assigned == {T2.topic_id: frozenset({0})}
    assert s.heartbeat(4, hb("m1", old), lookup).error_code == 0  # the previous epoch: the answer may be lost
    r = s.heartbeat(5, hb("m1", old - 1), lookup)
    assert r.error_code == E.FENCED_MEMBER_EPOCH and "smaller member epoch" in r.error_message
    r = s.heartbeat(5, hb("m1", 99), lookup)
    assert r.error_code == E.FENCED_MEMBER_EPOCH and "greater member epoch" in r.error_message


def test_subscription_changes_move_the_assignment_and_leaving_hands_partitions_over():
    s = book()
    r = s.heartbeat(0, hb("m1", 0, ("t1", "t2")), lookup)
    initialize_all(s, r)
    r = s.heartbeat(1, hb("m1", 1), lookup)
    assert r.assignment == {T1.topic_id: frozenset({0, 1, 2}), T2.topic_id: frozenset({0})}
    r = s.heartbeat(2, hb("m1", r.member_epoch, ("t2",)), lookup)
    assert r.assignment == {T2.topic_id: frozenset({0})}
    s.heartbeat(3, hb("m2", 0, ("t2",)), lookup)
    epoch = s.groups["g"].group_epoch
    left = s.heartbeat(4, hb("m2", -1), lookup)
    assert (left.error_code, left.member_id, left.member_epoch) == (0, "m2", -1)
    assert "m2" not in s.groups["g"].members and s.groups["g"].group_epoch == epoch + 1
    assert s.heartbeat(5, hb("m2", -1), lookup).error_code == E.UNKNOWN_MEMBER_ID


def test_a_silent_member_is_removed_when_its_session_ends():
    s = book(session_timeout_ms=1000)
    s.heartbeat(0, hb("m1", 0, ("t1",)), lookup)
    s.heartbeat(500, hb("m2", 0, ("t1",)), lookup)
    epoch = s.groups["g"].group_epoch
    assert s.tick(999, lookup) == []
    assert s.tick(1000, lookup) == ["g"]
    assert set(s.groups["g"].members) == {"m2"} and s.groups["g"].group_epoch == epoch + 1
    r = s.heartbeat(1001, hb("m1", 1), lookup)
    assert r.error_code == E.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize(("request_", "code", "message"), [
    (hb("", 0, ("t1",)), E.INVALID_REQUEST, "Invalid member id in the request."),
    (hb("x" * 37, 0, ("t1",)), E.INVALID_REQUEST, "Invalid member id in the request."),
    (hb("m", 0, ("t1",), group=""), E.INVALID_REQUEST, "GroupId can't be empty."),
    (hb("m", 0, ("t1",), rack_id=""), E.INVALID_REQUEST, "RackId can't be empty."),
    (hb("m", 0, ()), E.INVALID_REQUEST, "SubscribedTopicNames must be set in first request."),
    (hb("m", 0, None), E.INVALID_REQUEST, "SubscribedTopicNames must be set in first request."),
    (hb("m", -2), E.INVALID_REQUEST, "MemberEpoch is invalid."),
    (hb("m", 3), E.GROUP_ID_NOT_FOUND, "Share group g not found."),
    (hb("m", -1), E.GROUP_ID_NOT_FOUND, "Share group g not found."),
])
def test_bad_heartbeats_get_kafkas_errors(request_, code, message):
    s = book()
    r = s.heartbeat(0, request_, lookup)
    assert (r.error_code, r.error_message) == (code, message)
    assert "g" not in s.groups


def test_an_unknown_member_and_another_kinds_group_id():
    s = ShareGroups(ShareGroupConfig(), {}, other_kind=lambda gid: "consumer" if gid == "cg" else None)
    r = s.heartbeat(0, hb("m", 0, ("t1",), group="cg"), lookup)
    assert (r.error_code, r.error_message) == (E.GROUP_ID_NOT_FOUND, "Group cg is not a share group.")
    s.heartbeat(0, hb("m1", 0, ("t1",)), lookup)
    r = s.heartbeat(1, hb("m2", 1), lookup)
    assert (r.error_code, r.error_message) == (E.UNKNOWN_MEMBER_ID, "Member m2 is not a member of group g.")


def test_group_share_max_size():
    s = book(max_size=2)
    assert s.heartbeat(0, hb("m1", 0, ("t1",)), lookup).error_code == 0
    assert s.heartbeat(0, hb("m2", 0, ("t1",)), lookup).error_code == 0
    r = s.heartbeat(0, hb("m3", 0, ("t1",)), lookup)
    assert (r.error_code, r.error_message) == (
        E.GROUP_MAX_SIZE_REACHED, "The share group has reached its maximum capacity of 2 members.")
    assert s.heartbeat(1, hb("m1", 0, ("t1",)), lookup).error_code == 0  # a member may always rejoin


def test_per_group_configs_replace_the_broker_keys():
    s = ShareGroups(ShareGroupConfig(), {}, group_configs=lambda gid: {"share.heartbeat.interval.ms": 700,
                                                                       "share.session.timeout.ms": 900})
    r = s.heartbeat(100, hb("m1", 0, ("t1",)), lookup)
    assert r.heartbeat_interval_ms == 700 and s.groups["g"].members["m1"].session_deadline_ms == 1000


# ------------------------------------------------------------------------------------------------ records
def test_the_records_bring_the_group_back():
    s = book()
    r = s.heartbeat(0, hb("m1", 0, ("t1", "t2"), rack_id="r1", client_id="c1", client_host="/h"), lookup)
    s.initialized("g", {T1.topic_id: [0, 1]})  # t2 and partition 2 still initializing
    s.heartbeat(1, hb("m1", r.member_epoch), lookup)
    s.heartbeat(2, hb("m2", 0, ("t1",)), lookup)
    g = s.groups["g"]
    records = srec.share_group_records(g)
    from kjbod.broker.groups import records as rec
    values = {rec.read_key(k): v for k, v in records.items()}
    assert {k.kind for k in values} == {10, 11, 12, 13, 14, 15}
    back = srec.share_group_of("g", values, now=0)
    assert back is not None
    assert (back.group_epoch, back.metadata_hash, back.assignment_epoch) == (
        g.group_epoch, g.metadata_hash, g.assignment_epoch)
    assert back.initialized == g.initialized and back.initializing == g.initializing
    assert back.target == g.target
    for mid, m in g.members.items():
        b = back.members[mid]
        assert (b.rack_id, b.client_id, b.client_host, b.subscribed_topic_names, b.member_epoch,
                b.previous_member_epoch, b.assigned) == (m.rack_id, m.client_id, m.client_host,
                                                         m.subscribed_topic_names, m.member_epoch,
                                                         m.previous_member_epoch, m.assigned)
    # the group's epoch record, in Kafka's layout: key version 11, group id; value v0: epoch, hash, no tags
    key = srec.share_key(11, "g")
    assert key == b"\x00\x0b\x00\x01g"
    assert records[key] == b"\x00\x00" + g.group_epoch.to_bytes(4, "big") + \
        g.metadata_hash.to_bytes(8, "big", signed=True) + b"\x00"


def test_a_member_leaving_writes_tombstones_group_epoch_last():
    s = book()
    s.heartbeat(0, hb("m1", 0, ("t1",)), lookup)
    s.heartbeat(0, hb("m2", 0, ("t1",)), lookup)
    before = srec.share_group_records(s.groups["g"])
    s.heartbeat(1, hb("m2", -1), lookup)
    pairs = srec.records_between(before, srec.share_group_records(s.groups["g"]))
    tombstones = [k[:2] for k, v in pairs if v is None]
    assert tombstones == [b"\x00\x0e", b"\x00\x0d", b"\x00\x0a"]  # current, target, member metadata
    assert [k[:2] for k, v in pairs if v is not None][0] == b"\x00\x0b"  # the epoch bump
    assert srec.share_group_of("g", {}) is None


def test_a_deleted_topic_leaves_the_groups_bookkeeping_and_the_epoch_moves_on():
    s = book()
    r = s.heartbeat(0, hb("m1", 0, ("t1", "t2")), lookup)
    initialize_all(s, r)
    r = s.heartbeat(1, hb("m1", r.member_epoch), lookup)
    assert set(r.assignment) == {T1.topic_id, T2.topic_id}
    alive = {T1.topic_id}
    assert s.forget_deleted_topics(lambda t: t in alive) == ["g"]
    g = s.groups["g"]
    assert set(g.initialized) == {T1.topic_id} and set(g.members["m1"].assigned) == {T1.topic_id}
    assert s.forget_deleted_topics(lambda t: t in alive) == []
    del TOPICS["t2"]
    try:
        epoch = g.group_epoch
        r = s.heartbeat(2, hb("m1", r.member_epoch), lookup)
        assert g.group_epoch == epoch + 1 and r.member_epoch == g.group_epoch  # the metadata hash changed
    finally:
        TOPICS["t2"] = T2


def test_members_with_the_same_subscription_spread_all_the_topics_partitions_together():
    a, b = T1.topic_id, T2.topic_id
    out = simple_assign({"m1": [a, b], "m2": [a, b]}, {a: [0], b: [0]}, {})
    # two members, two partitions over two topics: one each (Kafka's homogeneous case), not both to both
    assert sorted(count(x) for x in out.values()) == [1, 1]
    assert {tp for x in out.values() for tp in x.items()} == {(a, frozenset({0})), (b, frozenset({0}))}


@pytest.mark.parametrize("members", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("partitions", [1, 2, 3, 7])
def test_every_partition_has_a_member_and_counts_stay_even_across_changes(members, partitions):
    t = T1.topic_id
    ids = [f"m{i}" for i in range(members)]
    before: dict = {}
    for step in range(3):  # members come and go; the previous assignment is carried over each time
        now = ids[: max(1, members - step)]
        out = simple_assign({m: [t] for m in now}, {t: range(partitions)}, before)
        held = {q: [m for m in now if q in out[m].get(t, ())] for q in range(partitions)}
        assert all(held.values()), held
        sizes = [count(out[m]) for m in now]
        assert max(sizes) - min(sizes) <= 1, out
        before = out
