"""KIP-848 consumer groups, in process: the heartbeat's three steps, reconciliation, fencing, timers, assignors.

Strategy: `ConsumerGroups` is driven as a client would drive it (a `Client` keeps what it owns, gives up what the
coordinator's assignment drops at once, and reports what it owns on every heartbeat), with the time passed in.
Beside the hand-made cases, a seeded random walk of joins, heartbeats, leaves and timeouts checks the invariant
that matters: no partition is ever owned by two clients at once, and a quiet group ends with every partition
owned once and the counts balanced.
"""

from __future__ import annotations

import random
import uuid

import pytest

from kjbod.broker.groups.consumer import (
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroups,
    ConsumerGroupState,
    MemberHeartbeat,
    MemberState,
    TopicMeta,
    range_assign,
    uniform_assign,
)
from kjbod.protocol.errors import ErrorCode

T1 = TopicMeta(uuid.UUID(int=1), "t1", 6)
T2 = TopicMeta(uuid.UUID(int=2), "t2", 3)
CFG = ConsumerGroupConfig(session_timeout_ms=1000, heartbeat_interval_ms=100)


class Cluster:
    def __init__(self, *topics: TopicMeta) -> None:
        self.topics = {t.name: t for t in topics}

    def lookup(self, name: str) -> TopicMeta | None:
        return self.topics.get(name)


class Client:
    """A consumer: what it owns, its epoch, and the heartbeat it sends."""

    def __init__(self, groups: ConsumerGroups, cluster: Cluster, gid: str, member_id: str,
                 topics: tuple[str, ...] = ("t1",), instance_id: str | None = None, assignor: str | None = None):
        self.groups, self.cluster, self.gid = groups, cluster, gid
        self.member_id, self.topics, self.instance_id, self.assignor = member_id, topics, instance_id, assignor
        self.epoch = 0
        self.owned: dict[uuid.UUID, frozenset[int]] = {}
        self.last = None

    def beat(self, now: int, *, full: bool = False, epoch: int | None = None, **kw):
        joining = self.epoch == 0
        req = MemberHeartbeat(
            self.gid, self.member_id, self.epoch if epoch is None else epoch, instance_id=self.instance_id,
            rebalance_timeout_ms=kw.pop("rebalance_timeout_ms", 500 if joining or full else -1),
            subscribed_topic_names=self.topics if joining or full else None,
            server_assignor=self.assignor if joining else None,
            owned=dict(self.owned), client_id="c", client_host="/127.0.0.1", **kw)
        res = self.groups.heartbeat(now, req, self.cluster.lookup)
        self.last = res
        if res.error_code == 0:
            self.member_id = res.member_id or self.member_id
            self.epoch = res.member_epoch
            if res.assignment is not None:
                self.owned = {t: ps for t, ps in res.assignment.items() if ps}
        elif res.error_code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
            self.owned, self.epoch = {}, 0
        return res

    def parts(self) -> set[tuple[uuid.UUID, int]]:
        return {(t, p) for t, ps in self.owned.items() for p in ps}


def setup(*topics: TopicMeta, cfg: ConsumerGroupConfig = CFG):
    table: dict[str, ConsumerGroup] = {}
    return ConsumerGroups(cfg, table), table, Cluster(*(topics or (T1,)))


def assert_disjoint(clients: list[Client]) -> None:
    seen: set[tuple[uuid.UUID, int]] = set()
    for c in clients:
        assert not (c.parts() & seen), "a partition owned by two consumers"
        seen |= c.parts()


def test_one_member_gets_every_partition_with_epoch_one():
    groups, table, cluster = setup()
    a = Client(groups, cluster, "g", "a")
    res = a.beat(0)
    assert (res.error_code, res.member_id, res.member_epoch, res.heartbeat_interval_ms) == (0, "a", 1, 100)
    assert a.owned == {T1.topic_id: frozenset(range(6))}
    g = table["g"]
    assert (g.group_epoch, g.assignment_epoch, g.state) == (1, 1, ConsumerGroupState.STABLE)
    # a plain heartbeat carries no assignment when nothing changed
    assert a.beat(10).assignment is None and a.epoch == 1


def test_a_member_revokes_before_the_other_gets_its_partitions():
    groups, table, cluster = setup()
    a, b = Client(groups, cluster, "g", "a"), Client(groups, cluster, "g", "b")
    a.beat(0)
    b.beat(1)
    g = table["g"]
    assert g.group_epoch == 2 and g.state is ConsumerGroupState.RECONCILING
    # b has the new epoch but its target partitions are still a's
    assert b.epoch == 2 and b.owned == {} and g.members["b"].state is MemberState.UNRELEASED_PARTITIONS
    a_target = g.target["a"][T1.topic_id]
    b_target = g.target["b"][T1.topic_id]
    assert len(a_target) == len(b_target) == 3 and not a_target & b_target
    # a is told to give up b's partitions and keeps epoch 1 until it has
    a.owned = {T1.topic_id: frozenset(range(6))}
    res = groups.heartbeat(2, MemberHeartbeat("g", "a", 1, owned=dict(a.owned)), cluster.lookup)
    assert res.member_epoch == 1 and res.assignment == {T1.topic_id: a_target}
    assert g.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert g.members["a"].pending_revocation == {T1.topic_id: b_target}
    # still owning them: no progress, and b still waits
    assert groups.heartbeat(3, MemberHeartbeat("g", "a", 1, owned=dict(a.owned)), cluster.lookup).member_epoch == 1
    b.beat(4)
    assert b.owned == {} and b.epoch == 2
    # revoked: a moves to epoch 2, then b gets them
    a.owned = {T1.topic_id: a_target}
    assert a.beat(5).member_epoch == 2
    b.beat(6)
    assert b.owned == {T1.topic_id: b_target}
    assert g.state is ConsumerGroupState.STABLE


def test_stale_and_future_epochs_are_fenced_and_the_previous_epoch_forgiven():
    groups, _, cluster = setup()
    a = Client(groups, cluster, "g", "a")
    a.beat(0)
    b = Client(groups, cluster, "g", "b")
    b.beat(1)
    res = groups.heartbeat(2, MemberHeartbeat("g", "a", 5, owned={}), cluster.lookup)
    assert res.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    # b got epoch 2 (previous 0 would be a rejoin): epoch 1 is neither current nor previous
    res = groups.heartbeat(3, MemberHeartbeat("g", "b", 1, owned={}), cluster.lookup)
    assert res.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    # a revokes and moves to epoch 2; its answer is "lost" and it comes back with epoch 1 and a subset: accepted
    a.beat(4)
    a.beat(5)
    assert a.epoch == 2
    res = groups.heartbeat(6, MemberHeartbeat("g", "a", 1, owned=dict(a.owned)), cluster.lookup)
    assert res.error_code == 0 and res.member_epoch == 2
    # ... but not while owning more than it has now
    res = groups.heartbeat(7, MemberHeartbeat("g", "a", 1, owned={T1.topic_id: frozenset(range(6))}),
                           cluster.lookup)
    assert res.error_code == ErrorCode.FENCED_MEMBER_EPOCH


def test_unknown_member_and_unknown_group():
    groups, _, cluster = setup()
    res = groups.heartbeat(0, MemberHeartbeat("nope", "m", 3, owned={}), cluster.lookup)
    assert res.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    Client(groups, cluster, "g", "a").beat(0)
    res = groups.heartbeat(1, MemberHeartbeat("g", "zzz", 1, owned={}), cluster.lookup)
    assert res.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    res = groups.heartbeat(1, MemberHeartbeat("g", "zzz", -1), cluster.lookup)
    assert res.error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_fenced_member_rejoins_with_epoch_zero_under_its_id():
    groups, table, cluster = setup()
    a = Client(groups, cluster, "g", "a")
    a.beat(0)
    assert a.beat(1, epoch=9).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert a.epoch == 0 and a.owned == {}
    res = a.beat(2)
    assert res.error_code == 0 and a.owned == {T1.topic_id: frozenset(range(6))}
    assert list(table["g"].members) == ["a"]


@pytest.mark.parametrize("req, code, words", [
    (MemberHeartbeat("g", "m", 0, rebalance_timeout_ms=100, subscribed_topic_names=("t1",), owned={},
                      server_assignor="sticky"), ErrorCode.UNSUPPORTED_ASSIGNOR, "sticky"),
    (MemberHeartbeat("g", "m", 0, rebalance_timeout_ms=100, subscribed_topic_names=None, owned={}),
     ErrorCode.INVALID_REQUEST, "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null"),
    # v1 (KIP-1082): the consumer makes its member id; an empty one is refused when joining too, first of all
    (MemberHeartbeat("g", "", 0, rebalance_timeout_ms=100, subscribed_topic_names=("t1",), owned={},
                      member_id_required=True), ErrorCode.INVALID_REQUEST, "MemberId can't be empty."),
    (MemberHeartbeat("", "", 0, member_id_required=True), ErrorCode.INVALID_REQUEST, "MemberId can't be empty."),
    (MemberHeartbeat("g", "m" * 256, 0, rebalance_timeout_ms=100, subscribed_topic_names=("t1",), owned={}),
     ErrorCode.INVALID_REQUEST, "255"),
    (MemberHeartbeat("g", "m", -3), ErrorCode.INVALID_REQUEST, "MemberEpoch"),
    (MemberHeartbeat("g", "", 4), ErrorCode.INVALID_REQUEST, "MemberId"),
    (MemberHeartbeat("", "m", 0, rebalance_timeout_ms=100, subscribed_topic_names=("t1",), owned={}),
     ErrorCode.INVALID_REQUEST, "GroupId"),
    (MemberHeartbeat("g", "m", 0, subscribed_topic_names=("t1",), owned={}),
     ErrorCode.INVALID_REQUEST, "RebalanceTimeoutMs"),
    (MemberHeartbeat("g", "m", 0, rebalance_timeout_ms=100, subscribed_topic_names=("t1",),
                      owned={T1.topic_id: frozenset({1})}), ErrorCode.INVALID_REQUEST, "TopicPartitions"),
    (MemberHeartbeat("g", "m", 0, rebalance_timeout_ms=100, subscribed_topic_names=("t1",), owned={},
                      subscribed_topic_regex="t(.*"), ErrorCode.INVALID_REGULAR_EXPRESSION, "t(.*"),
    (MemberHeartbeat("g", "m", -2), ErrorCode.INVALID_REQUEST, "InstanceId"),
])
def test_bad_requests_get_kafkas_codes(req, code, words):
    groups, table, cluster = setup()
    res = groups.heartbeat(0, req, cluster.lookup)
    assert res.error_code == code and words in (res.error_message or "")
    assert not table  # nothing was created


@pytest.mark.parametrize("names, regex", [((), None), (None, ""), ((), "")])
def test_a_member_may_join_subscribed_to_nothing(names, regex):
    # Kafka 4 accepts an empty list of names or an empty regex when joining: a member of the group with nothing
    # assigned; a second member subscribed to t1 then gets every partition.
    groups, table, cluster = setup()
    res = groups.heartbeat(0, MemberHeartbeat("g", "idle", 0, rebalance_timeout_ms=100, subscribed_topic_names=names,
                                              subscribed_topic_regex=regex, owned={}), cluster.lookup)
    assert res.error_code == 0, res.error_message
    assert res.member_id == "idle" and res.member_epoch >= 1 and not any((res.assignment or {}).values())
    b = Client(groups, cluster, "g", "b")
    b.beat(1)
    b.beat(2)
    assert b.owned == {T1.topic_id: frozenset(range(6))}
    assert set(table["g"].members) == {"idle", "b"}


def test_v0_gives_a_joining_member_an_id_and_v1_takes_the_members_own():
    groups, table, cluster = setup()
    join = {"rebalance_timeout_ms": 100, "subscribed_topic_names": ("t1",), "owned": {}}
    made = groups.heartbeat(0, MemberHeartbeat("g", "", 0, **join), cluster.lookup)
    assert made.error_code == 0 and made.member_id
    own = groups.heartbeat(1, MemberHeartbeat("g", "mine", 0, member_id_required=True, **join), cluster.lookup)
    assert own.error_code == 0 and own.member_id == "mine"
    assert set(table["g"].members) == {made.member_id, "mine"}


def test_leaving_frees_the_partitions_and_bumps_the_epoch():
    groups, table, cluster = setup()
    a, b = Client(groups, cluster, "g", "a"), Client(groups, cluster, "g", "b")
    a.beat(0)
    b.beat(1)
    res = a.beat(2, epoch=-1)
    assert (res.error_code, res.member_epoch) == (0, -1)
    g = table["g"]
    assert list(g.members) == ["b"] and g.group_epoch == 3
    b.beat(3)
    assert b.owned == {T1.topic_id: frozenset(range(6))} and b.epoch == 3
    b.beat(4, epoch=-1)
    assert g.state is ConsumerGroupState.EMPTY and "g" in table  # an empty group stays (its offsets)


def test_a_static_member_keeps_its_partitions_while_away():
    groups, table, cluster = setup()
    a = Client(groups, cluster, "g", "a1", instance_id="i-a")
    b = Client(groups, cluster, "g", "b")
    a.beat(0)
    b.beat(1)
    a.beat(2)
    a.beat(3)
    b.beat(4)
    before = a.parts()
    assert before and b.parts()
    res = a.beat(5, epoch=-2)
    assert (res.error_code, res.member_epoch) == (0, -2)
    g = table["g"]
    epoch = g.group_epoch
    # a second instance with the same id while it is there: refused
    other = Client(groups, cluster, "g", "zz", instance_id="i-b")
    other.beat(5)
    dup = Client(groups, cluster, "g", "a3", instance_id="i-b")
    assert dup.beat(6).error_code == ErrorCode.UNRELEASED_INSTANCE_ID
    other.beat(6, epoch=-1)
    # it comes back under a new member id and finds its partitions; no rebalance for it
    a2 = Client(groups, cluster, "g", "a2", instance_id="i-a")
    res = a2.beat(7)
    assert res.error_code == 0 and a2.parts() == before and "a1" not in g.members
    assert g.group_epoch == epoch + 2  # the other instance's join and leave only
    # the old member id is fenced
    stale = groups.heartbeat(8, MemberHeartbeat("g", "a1", 3, instance_id="i-a", owned={}), cluster.lookup)
    assert stale.error_code == ErrorCode.FENCED_INSTANCE_ID


def test_session_timeout_and_rebalance_timeout_remove_members():
    groups, table, cluster = setup()
    a, b = Client(groups, cluster, "g", "a"), Client(groups, cluster, "g", "b")
    a.beat(0)
    b.beat(0)
    assert groups.tick(999) == []
    b.beat(500)
    assert groups.tick(1000) == ["g"]  # a was last heard at 0
    g = table["g"]
    assert list(g.members) == ["b"]
    assert b.beat(1001).member_epoch == g.group_epoch
    # a member that never revokes is removed after its rebalance timeout (500 ms here)
    c = Client(groups, cluster, "g", "c")
    c.beat(1100)
    stuck = dict(b.owned)
    res = groups.heartbeat(1200, MemberHeartbeat("g", "b", b.epoch, owned=stuck), cluster.lookup)
    assert g.members["b"].state is MemberState.UNREVOKED_PARTITIONS and res.error_code == 0
    groups.heartbeat(1500, MemberHeartbeat("g", "b", b.epoch, owned=stuck), cluster.lookup)
    c.beat(1500)
    assert groups.tick(1699) == []
    assert groups.tick(1700) == ["g"] and "b" not in g.members
    c.beat(1701)
    assert c.owned == {T1.topic_id: frozenset(range(6))}


def test_new_topics_and_partitions_bump_the_group_epoch():
    groups, table, cluster = setup()
    a = Client(groups, cluster, "g", "a", topics=("t1", "t2"))
    a.beat(0)
    assert a.owned == {T1.topic_id: frozenset(range(6))}
    cluster.topics["t2"] = T2
    a.beat(1)
    assert table["g"].group_epoch == 2 and a.owned[T2.topic_id] == frozenset(range(3))
    cluster.topics["t2"] = TopicMeta(T2.topic_id, "t2", 5)
    a.beat(2)
    assert a.owned[T2.topic_id] == frozenset(range(5))


def test_the_member_chooses_the_assignor():
    groups, table, cluster = setup()
    a = Client(groups, cluster, "g", "a", assignor="range")
    b = Client(groups, cluster, "g", "b", assignor="range")
    for now, c in enumerate([a, b, a, a, b]):
        c.beat(now)
    assert a.owned == {T1.topic_id: frozenset({0, 1, 2})} and b.owned == {T1.topic_id: frozenset({3, 4, 5})}


def test_uniform_is_balanced_and_sticky():
    topics = {"t1": T1, "t2": T2}
    first = uniform_assign({"a": ["t1", "t2"], "b": ["t1", "t2"]}, topics, {})
    counts = sorted(sum(len(ps) for ps in a.values()) for a in first.values())
    assert counts == [4, 5]
    second = uniform_assign({"a": ["t1", "t2"], "b": ["t1", "t2"], "c": ["t1", "t2"]}, topics, first)
    assert sorted(sum(len(ps) for ps in a.values()) for a in second.values()) == [3, 3, 3]
    for m in ("a", "b"):  # each keeps three of what it had
        kept = sum(len(second[m].get(t, frozenset()) & first[m].get(t, frozenset())) for t in (T1.topic_id,
                                                                                              T2.topic_id))
        assert kept == 3
    # heterogeneous: only a reads t2
    het = uniform_assign({"a": ["t1", "t2"], "b": ["t1"]}, topics, {})
    assert het["b"].get(T2.topic_id) is None
    assert sorted(sum(len(ps) for ps in a.values()) for a in het.values()) in ([4, 5], [5, 4])


def test_range_gives_contiguous_ranges():
    out = range_assign({"b": ["t1"], "a": ["t1"], "c": ["t1"], "d": ["t1"]}, {"t1": T1}, {})
    assert [sorted(out[m].get(T1.topic_id, ())) for m in "abcd"] == [[0, 1], [2, 3], [4], [5]]


@pytest.mark.parametrize("seed", range(6))
def test_random_walk_never_owns_a_partition_twice(seed):
    rnd = random.Random(seed)
    groups, table, cluster = setup(T1, T2)
    clients: list[Client] = []
    now = 0
    for _ in range(400):
        now += rnd.randint(1, 60)
        action = rnd.random()
        if action < 0.12 and len(clients) < 6:
            c = Client(groups, cluster, "g", f"m{len(clients)}-{now}", topics=rnd.choice([("t1",), ("t1", "t2")]),
                       assignor=rnd.choice([None, "uniform", "range"]))
            clients.append(c)
            c.beat(now)
        elif action < 0.17 and clients:
            c = clients.pop(rnd.randrange(len(clients)))
            c.beat(now, epoch=-1)
        elif clients:
            c = rnd.choice(clients)
            if rnd.random() < 0.1:  # the client lost an answer: it beats again with what it has, fully
                c.beat(now, full=True)
            else:
                c.beat(now)
        # a member the coordinator timed out is gone: its client has given its partitions up by then (a real
        # client's own timer), and rejoins on its next beat
        if groups.tick(now):
            for c in clients:
                if c.member_id not in table["g"].members:
                    c.owned, c.epoch = {}, 0
        assert_disjoint(clients)
    for _ in range(12):  # quiet: everyone heartbeats until reconciled
        now += 10
        for c in clients:
            c.beat(now)
        assert_disjoint(clients)
    g = table["g"]
    assert g.state is ConsumerGroupState.STABLE
    owned = set().union(*(c.parts() for c in clients)) if clients else set()
    wanted = {(T1.topic_id, p) for p in range(6)}
    if any("t2" in c.topics for c in clients):
        wanted |= {(T2.topic_id, p) for p in range(3)}
    assert owned == (wanted if clients else set())


def test_the_consumer_keys_reach_the_coordinator():
    from types import SimpleNamespace

    from kjbod.broker.groups.coordinator import consumer_config_from
    from kjbod.server.config import ConfigError, build_config

    base = {"node.id": "1", "process.roles": "broker,controller",
            "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
            "controller.listener.names": "CONTROLLER", "log.dirs": "/data/a"}
    assert consumer_config_from(build_config(base)) == ConsumerGroupConfig()  # Kafka's defaults
    cfg = consumer_config_from(SimpleNamespace(**vars(build_config({
        **base, "group.consumer.session.timeout.ms": "7000", "group.consumer.heartbeat.interval.ms": "700",
        "group.consumer.min.session.timeout.ms": "6000", "group.consumer.min.heartbeat.interval.ms": "500",
        "group.consumer.max.size": "3", "group.consumer.migration.policy": "Upgrade",
        "group.consumer.assignors": "org.apache.kafka.coordinator.group.assignor.RangeAssignor,uniform"}))))
    assert cfg == ConsumerGroupConfig(session_timeout_ms=7000, heartbeat_interval_ms=700,
                                      assignors=("range", "uniform"), max_size=3, migration_policy="upgrade")
    with pytest.raises(ConfigError, match="group.consumer.migration.policy"):
        build_config({**base, "group.consumer.migration.policy": "sideways"})
    with pytest.raises(ConfigError, match="group.consumer.assignors"):
        build_config({**base, "group.consumer.assignors": "sticky"})
    # Kafka's bounds: the session timeout and heartbeat interval within their min and max keys
    with pytest.raises(ConfigError, match="group.consumer.min.session.timeout.ms"):
        build_config({**base, "group.consumer.session.timeout.ms": "7000"})
    with pytest.raises(ConfigError, match="group.consumer.max.heartbeat.interval.ms"):
        build_config({**base, "group.consumer.heartbeat.interval.ms": "20000"})
    with pytest.raises(ConfigError, match="must be less than group.consumer.session.timeout.ms"):
        build_config({**base, "group.consumer.session.timeout.ms": "6000", "group.consumer.heartbeat.interval.ms": "6000",
                      "group.consumer.min.session.timeout.ms": "1000", "group.consumer.max.heartbeat.interval.ms": "9000"})


def test_the_heartbeat_interval_and_session_timeout_are_the_keys():
    groups, table, cluster = setup(cfg=ConsumerGroupConfig(session_timeout_ms=300, heartbeat_interval_ms=77))
    a = Client(groups, cluster, "g", "a")
    assert a.beat(0).heartbeat_interval_ms == 77
    assert groups.tick(299) == [] and groups.tick(300) == ["g"] and not table["g"].members


def test_group_consumer_max_size():
    groups, table, cluster = setup(cfg=ConsumerGroupConfig(max_size=2))
    Client(groups, cluster, "g", "a").beat(0)
    Client(groups, cluster, "g", "b").beat(0)
    res = Client(groups, cluster, "g", "c").beat(0)
    assert res.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED and set(table["g"].members) == {"a", "b"}


def test_the_first_configured_assignor_is_the_default():
    groups, _, cluster = setup(cfg=ConsumerGroupConfig(assignors=("range",)))
    assert Client(groups, cluster, "g", "x", assignor="uniform").beat(0).error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
    a, b = Client(groups, cluster, "g", "a"), Client(groups, cluster, "g", "b")
    for now, c in enumerate([a, b, a, a, b]):
        c.beat(now)
    assert a.owned == {T1.topic_id: frozenset({0, 1, 2})} and b.owned == {T1.topic_id: frozenset({3, 4, 5})}


def test_a_classic_group_with_members_keeps_its_id_and_offsets_follow_the_subscriptions():
    from kjbod.broker.groups.state import CommittedOffset, Group, GroupBook, GroupConfig, Member

    book = GroupBook(GroupConfig(), consumer_config=CFG)
    classic = book.groups.setdefault("busy", Group("busy"))
    classic.members["x"] = Member("x", None, "c", "/h", 10_000, 10_000, "consumer", [("range", b"")], 10**12)
    cluster = Cluster(T1)
    res = book.consumer.heartbeat(0, MemberHeartbeat("busy", "m", 0, rebalance_timeout_ms=100,
                                                      subscribed_topic_names=("t1",), owned={}), cluster.lookup)
    assert res.error_code == ErrorCode.GROUP_ID_NOT_FOUND and "busy" not in book.consumer_groups
    # a KIP-848 group: its commits are checked against member epochs, its subscribed topics' offsets kept
    a = Client(book.consumer, cluster, "g", "a")
    a.beat(0)
    assert book.check_commit(1, "g", 1, "a", None, v9=True) == 0
    assert book.check_commit(1, "g", 0, "a", None, v9=True) == ErrorCode.STALE_MEMBER_EPOCH
    assert book.check_commit(1, "g", 1, "zz", None, v9=True) == ErrorCode.UNKNOWN_MEMBER_ID
    assert book.check_commit(1, "g", 1, "a", None, v9=False) == ErrorCode.UNSUPPORTED_VERSION
    assert book.check_commit(1, "g", -1, "", None, v9=True) == ErrorCode.UNKNOWN_MEMBER_ID  # not while it has members
    # TxnOffsetCommit (any version) checks the epoch too, and answers ILLEGAL_GENERATION for a stale one
    assert book.check_commit(1, "g", 1, "a", None, transactional=True) == 0
    assert book.check_commit(1, "g", 0, "a", None, transactional=True) == ErrorCode.ILLEGAL_GENERATION
    assert book.consumer.check_fetch("g", "a", 1) == 0 and book.consumer.check_fetch("g", None, -1) == 0
    assert book.consumer.check_fetch("g", "a", 0) == ErrorCode.STALE_MEMBER_EPOCH
    assert book.consumer.check_fetch("g", "zz", 1) == ErrorCode.UNKNOWN_MEMBER_ID
    book.commit("g", {("t1", 0): CommittedOffset(5, -1, "", 0), ("old", 0): CommittedOffset(5, -1, "", 0)})
    week = 7 * 24 * 3600 * 1000
    assert book.expired_offsets(week + 1) == {"g": [("old", 0)]}
    assert book.subscribed_topics(book.groups["g"]) == {"t1"}
    # the classic group machinery does not take a JoinGroup to it (the JoinGroup handler hands a classic member of
    # a consumer group to ConsumerGroups.classic_join: tests/groups/test_group_migration.py)
    answers = []
    book.join(2, "g", "", None, "c", "/h", 10_000, 10_000, "consumer", [("range", b"")], True, answers.append)
    assert answers[0].error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_a_regex_subscription_follows_the_topics_that_match():
    groups, table, cluster = setup(T1)
    names = lambda: list(cluster.topics) + ["__consumer_offsets"]  # noqa: E731
    req = MemberHeartbeat("g", "a", 0, rebalance_timeout_ms=100, subscribed_topic_names=(),
                           subscribed_topic_regex="t[0-9]", owned={})
    res = groups.heartbeat(0, req, cluster.lookup, names)
    assert res.error_code == 0 and res.assignment == {T1.topic_id: frozenset(range(6))}
    g = table["g"]
    assert set(g.topics) == {"t1"} and g.group_epoch == 1
    # a matching topic is created: the next heartbeat of the group takes it in
    cluster.topics["t2"] = T2
    cluster.topics["t22"] = TopicMeta(uuid.UUID(int=3), "t22", 1)  # the whole name must match
    res = groups.heartbeat(1, MemberHeartbeat("g", "a", 1, owned=res.assignment), cluster.lookup, names)
    assert res.member_epoch == 2 and res.assignment == {T1.topic_id: frozenset(range(6)),
                                                        T2.topic_id: frozenset(range(3))}
    assert set(g.topics) == {"t1", "t2"}
    # "" clears the regex; the names given then are the subscription
    res = groups.heartbeat(2, MemberHeartbeat("g", "a", 2, subscribed_topic_names=("t2",), subscribed_topic_regex="",
                                               owned=res.assignment), cluster.lookup, names)
    assert g.members["a"].subscribed_topic_regex is None and set(g.topics) == {"t2"}


def test_a_heartbeat_says_whether_the_records_must_change():
    groups, table, cluster = setup()
    a = Client(groups, cluster, "g", "a")
    assert a.beat(0).changed  # a new member
    assert not a.beat(1).changed  # steady: only its session moved on
    assert not a.beat(2, full=True).changed  # a full heartbeat with nothing new
    b = Client(groups, cluster, "g", "b")
    assert b.beat(3).changed
    assert a.beat(4).changed  # a's revocation starts
    assert a.beat(5).changed  # revoked: its new epoch
    assert b.beat(6).changed  # b gets the partitions
    assert not b.beat(7).changed
    assert a.beat(8, rack_id="r1").changed  # a field the records hold
    assert a.beat(9, epoch=-1).changed  # leaving
