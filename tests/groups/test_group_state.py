"""The classic group state machine in process (kjbod.broker.groups.state): requests and timer ticks in, states,
codes and answers out, with the clock passed by hand.  Tables of (state, event) → (state, code) first, then the
flows a consumer goes through, then the limits set by the broker keys."""

from __future__ import annotations

import pytest

from kjbod.broker.groups.coordinator import java_string_hash, partition_for
from kjbod.broker.groups.state import (
    CommittedOffset,
    GroupBook,
    GroupConfig,
    GroupState,
    JoinResult,
    SyncResult,
)
from kjbod.protocol.errors import ErrorCode

CFG = GroupConfig(initial_rebalance_delay_ms=100, min_session_timeout_ms=1000, max_session_timeout_ms=60_000)
PROTOCOLS = [("range", b"sub-range"), ("roundrobin", b"sub-rr")]
G = "g"


class Answers:
    """Collects what the book answers through callbacks."""

    def __init__(self) -> None:
        self.got: list = []

    def __call__(self, result) -> None:
        self.got.append(result)

    @property
    def last(self):
        return self.got[-1] if self.got else None


def join(book, now, member_id="", *, protocols=PROTOCOLS, session=10_000, rebalance=5_000, instance=None,
         protocol_type="consumer", v4=True, group=G):
    a = Answers()
    book.join(now, group, member_id, instance, "client", "/127.0.0.1", session, rebalance, protocol_type,
              protocols, v4, a)
    return a


def sync(book, now, member_id, generation, assignments=None, group=G):
    a = Answers()
    book.sync(now, group, generation, member_id, None, None, None, assignments or {}, a)
    return a


def stable_group(book, now=0, members=2):
    """A Stable group of `members` members; returns their ids, leader first."""
    answers = [join(book, now, v4=False) for _ in range(members)]
    book.tick(now + CFG.initial_rebalance_delay_ms)  # members joined during the delay: it is extended once
    book.tick(now + 2 * CFG.initial_rebalance_delay_ms)
    results = [a.last for a in answers]
    assert all(r.error_code == 0 for r in results)
    ids = [r.member_id for r in results]
    leader = results[0].leader
    ids.sort(key=lambda m: m != leader)
    gen = results[0].generation_id
    for m in ids[1:]:
        sync(book, now + 200, m, gen)
    sync(book, now + 200, leader, gen, {m: m.encode() for m in ids})
    assert book.groups[G].state is GroupState.STABLE
    return ids, gen


def test_java_string_hash_and_partition_match_kafkas():
    # Known String.hashCode values: "" 0, "a" 97, "hello" 99162322, and one that overflows.
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("consumer-group") == -1738392088  # wraps around 32 bits
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("polygenelubricants", 50) == 0  # hashCode is Integer.MIN_VALUE: Kafka's abs gives 0
    assert java_string_hash("polygenelubricants") == -(2**31)


def test_first_join_from_v4_needs_a_member_id_and_the_rejoin_starts_the_group():
    book = GroupBook(CFG)
    first = join(book, 0)
    assert first.last.error_code == ErrorCode.MEMBER_ID_REQUIRED and first.last.member_id.startswith("client-")
    assert book.groups[G].state is GroupState.EMPTY and book.groups[G].size == 1
    again = join(book, 10, first.last.member_id)
    assert again.last is None  # waits for the initial delay
    assert book.groups[G].state is GroupState.PREPARING_REBALANCE
    book.tick(10 + CFG.initial_rebalance_delay_ms)
    r = again.last
    assert r.error_code == 0 and r.generation_id == 1 and r.leader == r.member_id == first.last.member_id
    assert r.protocol_name == "range" and r.members == ((r.member_id, None, b"sub-range"),)
    assert book.groups[G].state is GroupState.COMPLETING_REBALANCE


def test_the_initial_delay_waits_while_members_keep_arriving():
    book = GroupBook(CFG)
    a = join(book, 0, v4=False)
    book.tick(50)
    b = join(book, 60, v4=False)  # joins during the delay: the wait is extended once more
    book.tick(100)
    assert a.last is None and b.last is None
    book.tick(200)
    assert a.last.error_code == 0 and b.last.error_code == 0
    assert a.last.generation_id == b.last.generation_id == 1
    leader = a.last.leader
    assert {a.last.member_id, b.last.member_id} >= {leader}
    assert len((a.last if a.last.member_id == leader else b.last).members) == 2
    assert (b.last if a.last.member_id == leader else a.last).members == ()


def test_sync_hands_each_member_the_leaders_assignment():
    book = GroupBook(CFG)
    ids, gen = stable_group(book)
    for m in ids:
        assert sync(book, 300, m, gen).last == SyncResult(0, m.encode(), "consumer", "range")


SYNC_CASES = [
    # (what is wrong, change to the request, expected code)
    ("unknown member", dict(member_id="nobody"), ErrorCode.UNKNOWN_MEMBER_ID),
    ("older generation", dict(generation=0), ErrorCode.ILLEGAL_GENERATION),
    ("newer generation", dict(generation=7), ErrorCode.ILLEGAL_GENERATION),
    ("unknown group", dict(group="other"), ErrorCode.UNKNOWN_MEMBER_ID),
    ("empty group id", dict(group=""), ErrorCode.INVALID_GROUP_ID),
]


@pytest.mark.parametrize(("what", "change", "code"), SYNC_CASES, ids=[c[0] for c in SYNC_CASES])
def test_bad_syncs(what, change, code):
    book = GroupBook(CFG)
    ids, gen = stable_group(book)
    args = dict(member_id=ids[0], generation=gen, group=G)
    args.update(change)
    assert sync(book, 300, args["member_id"], args["generation"], group=args["group"]).last.error_code == code


HEARTBEAT_TABLE = [
    # (state reached, member, generation delta, expected code, state after)
    ("Stable", "member", 0, ErrorCode.NONE, GroupState.STABLE),
    ("Stable", "member", 1, ErrorCode.ILLEGAL_GENERATION, GroupState.STABLE),
    ("Stable", "unknown", 0, ErrorCode.UNKNOWN_MEMBER_ID, GroupState.STABLE),
    ("PreparingRebalance", "member", 0, ErrorCode.REBALANCE_IN_PROGRESS, GroupState.PREPARING_REBALANCE),
    ("CompletingRebalance", "member", 0, ErrorCode.NONE, GroupState.COMPLETING_REBALANCE),
    ("Empty", "unknown", 0, ErrorCode.UNKNOWN_MEMBER_ID, GroupState.EMPTY),
]


@pytest.mark.parametrize(("state", "who", "delta", "code", "after"), HEARTBEAT_TABLE)
def test_heartbeat_table(state, who, delta, code, after):
    book = GroupBook(CFG)
    if state == "Empty":
        book.check_commit(0, G, -1, "", None)  # a group made by a simple commit
        member, gen = "x", 0
    elif state == "CompletingRebalance":
        a = join(book, 0, v4=False)
        book.tick(CFG.initial_rebalance_delay_ms)
        member, gen = a.last.member_id, a.last.generation_id
    else:
        ids, gen = stable_group(book)
        member = ids[0]
        if state == "PreparingRebalance":
            join(book, 400, v4=False)  # a third member: the group rebalances
    assert book.groups[G].state.value == state
    m = member if who == "member" else "unknown"
    assert book.heartbeat(500, G, gen + delta, m, None) == code
    assert book.groups[G].state is after


def test_a_new_member_rebalances_a_stable_group_and_pending_syncs_hear_rebalance_in_progress():
    book = GroupBook(CFG)
    ids, gen = stable_group(book)
    c = join(book, 1000, v4=False)
    assert book.groups[G].state is GroupState.PREPARING_REBALANCE
    assert c.last is None
    # The old members rejoin (after their heartbeat said REBALANCE_IN_PROGRESS); the join completes at once.
    rejoins = [join(book, 1100, m, v4=False) for m in ids]
    assert all(r.last.error_code == 0 and r.last.generation_id == gen + 1 for r in rejoins + [c])
    assert book.groups[G].state is GroupState.COMPLETING_REBALANCE
    # A follower's sync waits for the leader's; a member joining meanwhile answers it REBALANCE_IN_PROGRESS.
    follower = next(m for m in ids + [c.last.member_id] if m != rejoins[0].last.leader)
    waiting = sync(book, 1200, follower, gen + 1)
    assert waiting.last is None
    join(book, 1300, v4=False)
    assert waiting.last.error_code == ErrorCode.REBALANCE_IN_PROGRESS


def test_a_second_sync_of_one_member_answers_the_first_one():
    """A follower whose SyncGroup timed out on its side syncs again: the first request is answered (NOT_COORDINATOR,
    as Kafka since KAFKA-20938), never left waiting, and the second one gets the assignment."""
    book = GroupBook(CFG)
    ids, gen = stable_group(book)
    c = join(book, 1000, v4=False)
    rejoins = [join(book, 1100, m, v4=False) for m in ids]
    leader = rejoins[0].last.leader
    follower = next(m for m in ids + [c.last.member_id] if m != leader)
    first = sync(book, 1200, follower, gen + 1)
    second = sync(book, 1250, follower, gen + 1)
    assert first.last == SyncResult(ErrorCode.NOT_COORDINATOR) and second.last is None
    sync(book, 1300, leader, gen + 1)
    assert second.last.error_code == 0
    assert len(first.got) == 1


def test_a_missed_session_timeout_removes_the_member_and_rebalances():
    book = GroupBook(CFG)
    ids, gen = stable_group(book)
    book.heartbeat(5000, G, gen, ids[0], None)
    book.tick(10_300)  # ids[1] last heard at 200 (its sync), session 10 s
    group = book.groups[G]
    assert ids[1] not in group.members and group.state is GroupState.PREPARING_REBALANCE
    # The one left rejoins: a new generation without the dead member.
    r = join(book, 10_400, ids[0], v4=False)
    assert r.last.error_code == 0 and r.last.generation_id == gen + 1 and len(r.last.members) == 1


def test_a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_dropped():
    book = GroupBook(CFG)
    ids, gen = stable_group(book)
    r = join(book, 1000, ids[0], v4=False)  # the leader rejoins: a rebalance; the other never does
    assert r.last is None
    book.tick(1000 + 4_999)
    assert r.last is None
    book.tick(1000 + 5_000)
    assert r.last.error_code == 0 and [m for m, _, _ in r.last.members] == [ids[0]]


def test_leave_group_batched_and_codes():
    book = GroupBook(CFG)
    ids, gen = stable_group(book)
    code, codes = book.leave(500, G, [(ids[1], None), ("nobody", None), ("", "no-such-instance")])
    assert code == 0 and codes == [0, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.UNKNOWN_MEMBER_ID]
    assert book.groups[G].state is GroupState.PREPARING_REBALANCE
    assert book.leave(500, "other", [(ids[0], None)]) == (0, [ErrorCode.UNKNOWN_MEMBER_ID])
    assert book.leave(600, G, [(ids[0], None)]) == (0, [0])
    assert book.groups[G].state is GroupState.EMPTY and book.groups[G].generation_id == gen + 1


def test_join_refusals():
    book = GroupBook(CFG)
    stable_group(book)
    assert join(book, 0, group="").last.error_code == ErrorCode.INVALID_GROUP_ID
    assert join(book, 0, session=999).last.error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    assert join(book, 0, session=60_001).last.error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    assert join(book, 0, protocol_type="connect").last.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert join(book, 0, protocols=[("sticky", b"")]).last.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert join(book, 0, protocols=[]).last.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert join(book, 0, "never-given").last.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert join(book, 0, "x", group="new-group").last.error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_protocol_vote_picks_what_most_members_prefer_among_the_common_ones():
    book = GroupBook(CFG)
    a = join(book, 0, protocols=[("roundrobin", b"1"), ("range", b"1")], v4=False)
    b = join(book, 0, protocols=[("range", b"2"), ("roundrobin", b"2")], v4=False)
    c = join(book, 0, protocols=[("sticky", b"3"), ("range", b"3"), ("roundrobin", b"3")], v4=False)
    book.tick(100)
    book.tick(200)
    assert {x.last.protocol_name for x in (a, b, c)} == {"range"}


def test_group_max_size():
    book = GroupBook(GroupConfig(initial_rebalance_delay_ms=100, min_session_timeout_ms=1000, max_size=2))
    join(book, 0)  # pending (MEMBER_ID_REQUIRED) members count too
    join(book, 0)
    assert join(book, 0).last.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED


def test_pending_member_ids_expire_after_the_session_timeout():
    book = GroupBook(CFG)
    first = join(book, 0)
    assert book.groups[G].pending
    book.tick(10_000)
    assert not book.groups[G].pending
    assert join(book, 10_001, first.last.member_id).last.error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_static_member_rejoining_with_a_new_id_keeps_its_assignment_without_a_rebalance():
    book = GroupBook(CFG)
    lead = join(book, 0, instance="i-0", v4=True)  # static members get their ids at once
    a = join(book, 0, instance="i-1", v4=True)
    book.tick(100)
    book.tick(200)
    old = a.last.member_id
    assert a.last.error_code == 0 and old.startswith("i-1-") and lead.last.leader == lead.last.member_id
    sync(book, 200, old, 1)
    sync(book, 200, lead.last.member_id, 1, {old: b"work"})
    back = join(book, 300, instance="i-1")
    r = back.last
    assert r.error_code == 0 and r.member_id != old and r.generation_id == 1
    assert book.groups[G].state is GroupState.STABLE
    assert sync(book, 400, r.member_id, 1).last.assignment == b"work"
    # The old incarnation is fenced.
    assert book.heartbeat(500, G, 1, old, "i-1") == ErrorCode.FENCED_INSTANCE_ID
    assert join(book, 500, old, instance="i-1").last.error_code == ErrorCode.FENCED_INSTANCE_ID
    assert book.leave(600, G, [("", "i-1")]) == (0, [0])


COMMIT_TABLE = [
    # (group, generation, member, expected)
    ("missing", -1, "", ErrorCode.NONE),  # a simple commit makes an empty group
    ("missing", 3, "m", ErrorCode.ILLEGAL_GENERATION),
    ("stable", -1, "", ErrorCode.UNKNOWN_MEMBER_ID),
    ("stable", 1, "member", ErrorCode.NONE),
    ("stable", 2, "member", ErrorCode.ILLEGAL_GENERATION),
    ("stable", 1, "nobody", ErrorCode.UNKNOWN_MEMBER_ID),
    ("completing", 1, "member", ErrorCode.REBALANCE_IN_PROGRESS),
    ("", -1, "", ErrorCode.INVALID_GROUP_ID),
]


@pytest.mark.parametrize(("group", "generation", "member", "code"), COMMIT_TABLE)
def test_commit_checks(group, generation, member, code):
    book = GroupBook(CFG)
    gid = G
    if group == "stable":
        ids, _ = stable_group(book)
        member = ids[0] if member == "member" else member
    elif group == "completing":
        a = join(book, 0, v4=False)
        book.tick(100)
        member = a.last.member_id
    elif group == "":
        gid = ""
    else:
        gid = "missing"
    assert book.check_commit(500, gid, generation, member, None) == code


def test_a_commit_with_a_generation_to_a_missing_group_is_group_id_not_found_from_v9():
    book = GroupBook(CFG)
    assert book.check_commit(0, G, 3, "m", None, v9=True) == ErrorCode.GROUP_ID_NOT_FOUND
    assert book.check_commit(0, G, 3, "m", None) == ErrorCode.ILLEGAL_GENERATION
    assert G not in book.groups


def test_committed_offsets_are_read_back_and_unknown_ones_are_none():
    book = GroupBook(CFG)
    book.check_commit(0, G, -1, "", None)
    book.commit(G, {("t", 0): CommittedOffset(5, 2, "meta", 0)})
    assert book.committed(G, [("t", 0), ("t", 1)]) == {("t", 0): CommittedOffset(5, 2, "meta", 0), ("t", 1): None}
    assert book.committed(G, None) == {("t", 0): CommittedOffset(5, 2, "meta", 0)}
    assert book.committed("nobody", None) == {}


def test_unloading_answers_waiting_requests_not_coordinator():
    book = GroupBook(CFG)
    a = join(book, 0, v4=False)
    book.unload([G])
    assert a.last == JoinResult(ErrorCode.NOT_COORDINATOR, a.last.member_id)
    assert G not in book.groups


def test_the_broker_keys_reach_the_coordinator():
    from types import SimpleNamespace

    from kjbod.broker.groups.coordinator import config_from
    from kjbod.server.config import build_config

    base = {"node.id": "1", "process.roles": "broker,controller",
            "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
            "controller.listener.names": "CONTROLLER", "log.dirs": "/data/a"}
    cfg, partitions, rf = config_from(SimpleNamespace(config=build_config(base)))
    assert (cfg, partitions, rf) == (GroupConfig(), 50, 3)  # Kafka's defaults
    cfg, partitions, rf = config_from(SimpleNamespace(config=build_config({
        **base, "group.initial.rebalance.delay.ms": "7", "group.min.session.timeout.ms": "11",
        "group.max.session.timeout.ms": "13", "group.max.size": "17", "offset.metadata.max.bytes": "19",
        "offsets.topic.num.partitions": "23", "offsets.topic.replication.factor": "1",
        "offsets.retention.minutes": "29"})))
    assert cfg == GroupConfig(initial_rebalance_delay_ms=7, min_session_timeout_ms=11, max_session_timeout_ms=13,
                              max_size=17, offset_metadata_max_bytes=19, offsets_retention_ms=29 * 60_000)
    assert (partitions, rf) == (23, 1)


def test_members_that_never_sync_are_dropped_after_the_rebalance_timeout():
    book = GroupBook(CFG)
    a = join(book, 0, v4=False)
    b = join(book, 0, v4=False)
    book.tick(100)
    book.tick(200)
    leader = a.last.leader
    follower = b.last.member_id if a.last.member_id == leader else a.last.member_id
    waiting = sync(book, 300, follower, 1)  # the leader never sends the assignment
    book.heartbeat(3000, G, 1, leader, None)
    book.tick(200 + 5_000)  # the rebalance timeout since the join completed
    group = book.groups[G]
    assert leader not in group.members and group.state is GroupState.PREPARING_REBALANCE
    assert waiting.last.error_code == ErrorCode.REBALANCE_IN_PROGRESS


def test_offset_expiry_follows_kafkas_conditions():
    day = 24 * 3600 * 1000
    book = GroupBook(GroupConfig(initial_rebalance_delay_ms=100, min_session_timeout_ms=1000,
                                 offsets_retention_ms=day))
    # An empty group (simple commits): its offsets go a retention after the later of emptiness and the commit.
    book.check_commit(0, "simple", -1, "", None)
    book.commit("simple", {("t", 0): CommittedOffset(1, -1, "", 10), ("t", 1): CommittedOffset(1, -1, "", 500)})
    assert book.expired_offsets(day + 9) == {}
    assert book.expired_offsets(day + 10) == {"simple": [("t", 0)]}
    assert book.expired_offsets(day + 500) == {"simple": [("t", 0), ("t", 1)]}
    # An offset committed with its own retention (v2-v4) goes at its expire timestamp.
    book.commit("simple", {("t", 2): CommittedOffset(1, -1, "", 0, expire_timestamp_ms=50)})
    assert book.expired_offsets(50) == {"simple": [("t", 2)]} and book.expired_offsets(49) == {}
    # A consumer group with members keeps the offsets of topics it subscribes to, however old.
    subscription = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x03sub" + b"\xff\xff\xff\xff"
    a = join(book, 0, protocols=[("range", subscription)], v4=False, group="live")
    book.tick(100)
    sync(book, 150, a.last.member_id, 1, {a.last.member_id: b""}, group="live")
    book.commit("live", {("sub", 0): CommittedOffset(1, -1, "", 0), ("old", 0): CommittedOffset(1, -1, "", 0)})
    assert book.expired_offsets(day)["live"] == [("old", 0)]
    assert book.expired_offsets(day - 1).get("live") is None


def test_a_static_leader_rejoining_keeps_the_generation_and_is_told_not_to_assign():
    book = GroupBook(CFG)
    lead = join(book, 0, instance="i-0", v4=True)
    book.tick(100)
    sync(book, 150, lead.last.member_id, 1, {lead.last.member_id: b"all"})
    # v9+: the leader gets the members and skip_assignment, and keeps its assignment.
    a = Answers()
    book.join(300, G, "", "i-0", "client", "/127.0.0.1", 10_000, 5_000, "consumer", PROTOCOLS, True, a,
              skip_assignment_ok=True)
    r = a.last
    assert (r.error_code, r.generation_id, r.leader, r.skip_assignment) == (0, 1, r.member_id, True)
    assert r.members == ((r.member_id, "i-0", b"sub-range"),)
    assert book.groups[G].state is GroupState.STABLE
    assert sync(book, 310, r.member_id, 1).last.assignment == b"all"
    # Before v9: the answer names the old leader id, so the client does not assign again.
    again = join(book, 400, instance="i-0")
    assert (again.last.generation_id, again.last.leader, again.last.members) == (1, r.member_id, ())
    assert again.last.member_id != r.member_id and book.groups[G].state is GroupState.STABLE


def test_a_static_rejoin_changing_the_groups_protocol_rebalances():
    book = GroupBook(CFG)
    lead = join(book, 0, instance="i-0", v4=True)
    book.tick(100)
    sync(book, 150, lead.last.member_id, 1, {lead.last.member_id: b"all"})
    back = join(book, 300, instance="i-0", protocols=[("roundrobin", b"rr")])
    assert back.last.error_code == 0 and back.last.generation_id == 2 and back.last.protocol_name == "roundrobin"



def test_syncs_are_answered_once_the_assignment_is_stored_and_a_failed_write_rebalances():
    writes: list = []
    book = GroupBook(CFG, persist=lambda group, done: writes.append(done))
    a = join(book, 0, v4=False)
    b = join(book, 0, v4=False)
    book.tick(100)
    book.tick(200)
    leader = a.last.leader
    follower = b.last.member_id if a.last.member_id == leader else a.last.member_id
    waiting = sync(book, 300, follower, 1)
    led = sync(book, 310, leader, 1, {leader: b"L", follower: b"F"})
    assert waiting.last is None and led.last is None and len(writes) == 1  # the write is under way
    writes.pop()(320, 0)
    assert (waiting.last.assignment, led.last.assignment) == (b"F", b"L")
    assert book.groups[G].state is GroupState.STABLE
    # The next generation's write fails: both syncs hear the code, and the group rebalances.
    again = [join(book, 400, m, v4=False) for m in (leader, follower)]
    gen = again[0].last.generation_id
    waiting = sync(book, 500, follower, gen)
    led = sync(book, 510, leader, gen, {leader: b"L2", follower: b"F2"})
    writes.pop()(520, ErrorCode.NOT_COORDINATOR)
    assert waiting.last.error_code == led.last.error_code == ErrorCode.NOT_COORDINATOR
    assert book.groups[G].state is GroupState.PREPARING_REBALANCE


def test_the_offsets_topic_settings_come_from_the_keys():
    # What the coordinator uses for __consumer_offsets: the segment size it creates the topic with, how long its
    # writes wait for the partition's replicas (the Produce timeout of every commit and group write), the bytes it
    # reads at a time while loading, the codec of its writes; Kafka's defaults when unset.
    from kjbod.broker.groups.coordinator import OffsetsTopicSettings
    from kjbod.server.config import build_config

    base = {"node.id": "1", "process.roles": "broker,controller", "controller.listener.names": "CONTROLLER",
            "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093", "log.dirs": "/d"}
    assert OffsetsTopicSettings.of(build_config(base)) == OffsetsTopicSettings(104_857_600, 5000, 5 << 20, 0)
    assert OffsetsTopicSettings.of(build_config({
        **base, "offsets.topic.segment.bytes": "1000000", "offsets.commit.timeout.ms": "1234",
        "offsets.load.buffer.size": "4096", "offsets.topic.compression.codec": "4"})) == OffsetsTopicSettings(
            1_000_000, 1234, 4096, 4)
