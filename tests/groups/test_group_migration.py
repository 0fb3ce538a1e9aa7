"""KIP-848's online migration in process: classic and consumer-protocol members in one group, the upgrade of a
classic group when a consumer-protocol member joins it, the downgrade when the last one leaves, and the policy.

Strategy: one `GroupBook` (classic groups and consumer groups side by side, as the coordinator holds them) is
driven with the clock passed by hand: classic members through join/sync/heartbeat/leave with the consumer
protocol's real bytes (kjbod.broker.groups.embedded), consumer members through ConsumerGroupHeartbeat.  At every
step the partitions the members hold (what their last SyncGroup or heartbeat gave them, minus what they gave up)
are checked to be disjoint.  The records the coordinator writes for a mixed group (the classic member's metadata
in tag 0) are read back.
"""

from __future__ import annotations

import uuid

import pytest

from kjbod.broker.groups import embedded
from kjbod.broker.groups import records as rec
from kjbod.broker.groups.consumer import ConsumerGroupConfig, MemberHeartbeat, TopicMeta
from kjbod.broker.groups.state import GroupBook, GroupConfig, GroupState
from kjbod.protocol.errors import ErrorCode

T = TopicMeta(uuid.UUID(int=7), "t", 4)
TOPICS = {"t": T}
CFG = GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=1000, max_session_timeout_ms=60_000)
G = "g"


def subscription(owned: dict[str, set[int]] | None = None, version: int = 1) -> bytes:
    """A ConsumerProtocolSubscription as a Java client writes it (v1: topics, user data, owned partitions)."""
    out = version.to_bytes(2, "big", signed=True) + (1).to_bytes(4, "big") + len(b"t").to_bytes(2, "big") + b"t"
    out += (-1).to_bytes(4, "big", signed=True)
    if version >= 1:
        items = sorted((owned or {}).items())
        out += len(items).to_bytes(4, "big")
        for topic, parts in items:
            out += len(topic).to_bytes(2, "big") + topic.encode() + len(parts).to_bytes(4, "big")
            out += b"".join(p.to_bytes(4, "big") for p in sorted(parts))
    return out


class Classic:
    """An eager classic consumer (kafka-python's way): gives everything up before it joins again."""

    def __init__(self, book: GroupBook) -> None:
        self.book, self.member_id, self.generation, self.held, self.code = book, "", -1, set(), -1

    def join(self, now: int) -> int:
        """Sends a JoinGroup; the code if answered at once (a classic group answers when the rebalance ends: then
        `self.code` is set by the callback)."""
        self.held = set()
        self.code = -1
        cg = self.book.consumer_groups.get(G)
        if cg is not None and cg.members:
            r = self.book.consumer.classic_join(now, G, self.member_id, None, "kp", "/h", 10_000, 5_000,
                                                "consumer", [("range", subscription())], False, TOPICS.get)
            assert r.error_code == 0, r
            self.member_id, self.generation, self.code = r.member_id, r.generation_id, 0
            return 0
        self.book.join(now, G, self.member_id, None, "kp", "/h", 10_000, 5_000, "consumer",
                       [("range", subscription())], False, self._joined)
        return self.code

    def _joined(self, r) -> None:
        self.code = r.error_code
        if r.error_code == 0:
            self.member_id, self.generation = r.member_id, r.generation_id

    def sync(self, now: int, assignments: dict[str, bytes] | None = None) -> int:
        """Sends a SyncGroup; the code if answered at once (a follower of a classic group waits for the leader's)."""
        self.code = -1
        if G in self.book.consumer_groups:
            code, data, _ = self.book.consumer.classic_sync(now, G, self.member_id, None, self.generation, "consumer",
                                                            "range")
            self._synced(code, data)
        else:
            self.book.sync(now, G, self.generation, self.member_id, None, "consumer", "range", assignments or {},
                           lambda r: self._synced(r.error_code, r.assignment))
        return self.code

    def _synced(self, code: int, data: bytes) -> None:
        self.code = code
        if code == 0:
            self.held = set(embedded.read_assignment(data).get("t", frozenset()))

    def heartbeat(self, now: int) -> int:
        if G in self.book.consumer_groups:
            return self.book.consumer.classic_heartbeat(now, G, self.member_id, None, self.generation)
        return self.book.heartbeat(now, G, self.generation, self.member_id, None)


class Modern:
    """A consumer-protocol member: holds what the coordinator assigns, gives up what it drops at once."""

    def __init__(self, book: GroupBook, member_id: str) -> None:
        self.book, self.member_id, self.epoch, self.held = book, member_id, 0, set()

    def beat(self, now: int):
        joining = self.epoch == 0
        r = self.book.consumer.heartbeat(now, MemberHeartbeat(
            G, self.member_id, self.epoch, rebalance_timeout_ms=5000 if joining else -1,
            subscribed_topic_names=("t",) if joining else None, owned={T.topic_id: frozenset(self.held)}),
            TOPICS.get)
        if r.error_code == 0:
            self.epoch = r.member_epoch
            if r.assignment is not None:
                self.held = set(r.assignment.get(T.topic_id, frozenset()))
        return r

    def leave(self, now: int):
        r = self.book.consumer.heartbeat(now, MemberHeartbeat(G, self.member_id, -1), TOPICS.get)
        self.held = set()
        return r


def classic_group(book: GroupBook, n: int = 2) -> list[Classic]:
    """A Stable classic group of n eager members, the leader assigning the partitions round robin."""
    members = [Classic(book) for _ in range(n)]
    for m in members:
        m.join(0)
    book.tick(10)  # the (zero) initial delay, extended once for the second member, ends: all are answered
    book.tick(20)
    assert all(m.code == 0 for m in members)
    leader = book.groups[G].leader_id
    ids = [m.member_id for m in members]
    plan = {mid: embedded.write_assignment([("t", [p for p in range(4) if p % n == i])]) for i, mid in enumerate(ids)}
    for m in sorted(members, key=lambda m: m.member_id == leader):
        m.sync(40, plan if m.member_id == leader else None)
    assert book.groups[G].state is GroupState.STABLE
    return members


def disjoint(*members) -> list[set[int]]:
    held = [m.held for m in members]
    flat = [p for h in held for p in h]
    assert len(flat) == len(set(flat)), f"a partition held twice: {held}"
    return held


def settle(now: int, classics: list[Classic], moderns: list[Modern]) -> int:
    """Heartbeats until every partition is held once; eager classic members rejoin when told to."""
    for _ in range(20):
        now += 100
        for m in moderns:
            m.beat(now)
            disjoint(*classics, *moderns)
        for c in classics:
            code = c.heartbeat(now)
            if code == ErrorCode.REBALANCE_IN_PROGRESS:
                assert c.join(now) == 0
                disjoint(*classics, *moderns)
                assert c.sync(now) == 0
            disjoint(*classics, *moderns)
        if sorted(p for m in (*classics, *moderns) for p in m.held) == [0, 1, 2, 3]:
            return now
    raise AssertionError(f"did not settle: {[m.held for m in (*classics, *moderns)]}")


def book_with(policy: str = "bidirectional") -> GroupBook:
    return GroupBook(CFG, consumer_config=ConsumerGroupConfig(session_timeout_ms=3000, heartbeat_interval_ms=100,
                                                              migration_policy=policy))


def test_a_consumer_member_upgrades_a_classic_group_and_the_last_one_leaving_downgrades_it():
    book = book_with()
    a, b = classic_group(book)
    assert disjoint(a, b) == [{0, 2}, {1, 3}]
    modern = Modern(book, "m1")
    r = modern.beat(100)
    assert r.error_code == 0 and G in book.consumer_groups and book.converted[G] == "upgrade"
    cg = book.consumer_groups[G]
    assert cg.members[a.member_id].classic is not None and cg.members[a.member_id].member_epoch == a.generation
    assert not book.groups[G].members  # the classic entry only holds the offsets now
    assert modern.held == set()  # nothing is free yet: the classic members still hold everything
    settle(200, [a, b], [modern])
    assert sorted(len(m.held) for m in (a, b, modern)) == [1, 1, 2]
    # the classic members' commits are checked against their member epoch, as generations
    assert book.check_commit(900, G, a.generation, a.member_id, None) == 0
    assert book.check_commit(900, G, a.generation - 1, a.member_id, None) == ErrorCode.ILLEGAL_GENERATION
    # the last consumer-protocol member leaves: back to a classic group, which rebalances at once
    book.converted.clear()
    modern.leave(1000)
    assert G not in book.consumer_groups and book.converted[G] == "downgrade"
    group = book.groups[G]
    assert set(group.members) == {a.member_id, b.member_id} and group.protocol_name == "range"
    assert group.state is GroupState.PREPARING_REBALANCE
    assert a.heartbeat(1100) == ErrorCode.REBALANCE_IN_PROGRESS
    for m in (a, b):
        m.join(1100)
    assert book.groups[G].state is GroupState.COMPLETING_REBALANCE and a.code == b.code == 0
    assert a.generation == b.generation > 0


def test_a_classic_member_joins_a_consumer_group_and_gets_the_server_assignors_partitions():
    book = book_with("disabled")  # a classic member may join a consumer group whatever the policy (Kafka's rule)
    m1, m2 = Modern(book, "m1"), Modern(book, "m2")
    m1.beat(0)
    m2.beat(0)
    settle(0, [], [m1, m2])
    c = Classic(book)
    assert c.join(500) == 0 and c.member_id and c.generation > 0
    assert c.sync(500) == 0
    settle(600, [c], [m1, m2])
    assert sorted(len(m.held) for m in (c, m1, m2)) == [1, 1, 2]
    # the member's records carry its protocols (tag 0) and come back from a load
    records = rec.consumer_group_records(book.consumer_groups[G])
    loaded = rec.consumer_group_of(G, {rec.read_key(k): v for k, v in records.items()})
    assert loaded is not None
    meta = loaded.members[c.member_id].classic
    assert meta is not None and meta.session_timeout_ms == 10_000 and meta.protocols[0][0] == "range"
    assert loaded.members["m1"].classic is None
    # with the policy disabled, the last consumer-protocol members leaving keep it a consumer group
    m1.leave(2000)
    m2.leave(2000)
    assert G in book.consumer_groups and G not in book.converted
    # a classic LeaveGroup removes the classic member
    assert book.consumer.classic_leave(2100, G, [(c.member_id, None)], TOPICS.get) == [0]
    assert not book.consumer_groups[G].members


def test_classic_requests_to_a_consumer_group_get_kafkas_codes():
    book = book_with()
    Modern(book, "m1").beat(0)
    c = Classic(book)
    c.join(10)
    consumer = book.consumer
    assert consumer.classic_heartbeat(20, G, c.member_id, None, c.generation + 5) == ErrorCode.ILLEGAL_GENERATION
    assert consumer.classic_heartbeat(20, G, "m1", None, 1) == ErrorCode.UNKNOWN_MEMBER_ID  # not a classic member
    assert consumer.classic_heartbeat(20, G, "nobody", None, 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert consumer.classic_sync(20, G, c.member_id, None, c.generation, "consumer", "roundrobin")[0] == \
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    r = consumer.classic_join(30, G, "", None, "x", "/h", 10_000, 5000, "connect", [("range", b"")], False,
                              TOPICS.get)
    assert r.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    r = consumer.classic_join(30, G, "", None, "x", "/h", 10_000, 5000, "consumer", [("sticky", subscription())],
                              False, TOPICS.get)
    assert r.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL  # no protocol in common with the classic members
    r = consumer.classic_join(30, G, "", None, "x", "/h", 10_000, 5000, "consumer", [("range", subscription())],
                              True, TOPICS.get)
    assert r.error_code == ErrorCode.MEMBER_ID_REQUIRED and r.member_id


@pytest.mark.parametrize("policy, upgrades", [("disabled", False), ("downgrade", False), ("upgrade", True),
                                              ("bidirectional", True)])
def test_the_policy_decides_whether_a_consumer_member_may_upgrade_a_classic_group(policy, upgrades):
    book = book_with(policy)
    classic_group(book)
    r = Modern(book, "m1").beat(100)
    if upgrades:
        assert r.error_code == 0 and G in book.consumer_groups
    else:
        assert r.error_code == ErrorCode.GROUP_ID_NOT_FOUND and G not in book.consumer_groups
        assert r.error_message == f"Group {G} is not a consumer group."
        assert len(book.groups[G].members) == 2


@pytest.mark.parametrize("policy, downgrades", [("disabled", False), ("upgrade", False), ("downgrade", True),
                                                ("bidirectional", True)])
def test_the_policy_decides_whether_the_last_consumer_member_leaving_downgrades(policy, downgrades):
    book = book_with(policy)
    m = Modern(book, "m1")
    m.beat(0)
    c = Classic(book)
    c.join(10)
    m.leave(20)
    assert (G in book.groups and bool(book.groups[G].members)) is downgrades
    assert (G in book.consumer_groups) is not downgrades


def test_a_timed_out_consumer_member_downgrades_too_and_a_group_of_other_protocol_type_stays():
    book = book_with()
    m = Modern(book, "m1")
    m.beat(0)
    c = Classic(book)
    c.join(10)
    book.consumer.classic_heartbeat(2900, G, c.member_id, None, c.generation)
    assert book.consumer.tick(3000) == [G]  # m1's session (3 s) ended; the classic member's (10 s) did not
    assert G not in book.consumer_groups and set(book.groups[G].members) == {c.member_id}
    # a classic group of another protocol type (Connect) is never upgraded
    other = book_with()
    other.join(0, G, "", None, "w", "/h", 10_000, 5000, "connect", [("default", b"x")], False, lambda r: None)
    r = Modern(other, "m1").beat(10)
    assert r.error_code == ErrorCode.GROUP_ID_NOT_FOUND
