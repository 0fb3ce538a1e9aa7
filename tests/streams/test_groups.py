"""Streams groups (KIP-1071) in process: topology configuration, the sticky task assignor, and the group state
machine (joining, epochs, revocation before assignment, leaving, session timeouts, bad requests).

Strategy: the pure modules of kjbod.broker.streams are driven with hand-made heartbeats and a dict of partition
counts standing for the metadata image; the cases follow those of Kafka's own tests (InternalTopicManagerTest,
StickyTaskAssignorTest, GroupMetadataManagerTest's streams cases), written anew.
"""

from __future__ import annotations

import random

import pytest

from kjbod.broker.groups.state import CommittedOffset, GroupBook, GroupConfig, GroupState
from kjbod.broker.streams import assignor as sa
from kjbod.broker.streams.groups import (
    MemberState,
    StreamsGroupConfig,
    StreamsGroups,
    StreamsGroupState,
    StreamsHeartbeat,
    Tasks,
)
from kjbod.broker.streams.topology import (
    ASSIGNMENT_DELAYED,
    INCORRECTLY_PARTITIONED_TOPICS,
    MISSING_INTERNAL_TOPICS,
    MISSING_SOURCE_TOPICS,
    SHUTDOWN_APPLICATION,
    STALE_TOPOLOGY,
    Subtopology,
    TopicInfo,
    Topology,
    configure,
)
from kjbod.protocol.errors import ErrorCode

# A word-count style topology: sub-topology 0 reads "input" and repartitions into "app-repart"; sub-topology 1
# reads it and keeps a store with a changelog.
WORDS = Topology(1, (
    Subtopology("0", source_topics=("input",), repartition_sink_topics=("app-repart",)),
    Subtopology("1", repartition_source_topics=(TopicInfo("app-repart"),),
                state_changelog_topics=(TopicInfo("app-store-changelog"),)),
))


def counts(**topics: int):
    table = {k.replace("_", "-"): v for k, v in topics.items()}
    return table.get


# ------------------------------------------------------------------------------------------------ topology
def test_internal_topics_take_their_counts_from_the_sources():
    c = configure(WORDS, counts(input=4))
    assert c.status == (MISSING_INTERNAL_TOPICS, "Internal topics are missing: app-repart, app-store-changelog")
    assert {n: t.partitions for n, t in c.to_create.items()} == {"app-repart": 4, "app-store-changelog": 4}
    assert dict(c.tasks) == {"0": 4, "1": 4}
    assert not c.ready
    done = configure(WORDS, counts(input=4, app_repart=4, app_store_changelog=4))
    assert done.ready and done.status is None and not done.to_create


def test_a_missing_source_topic_is_reported_and_nothing_is_created():
    c = configure(WORDS, counts())
    assert c.status == (MISSING_SOURCE_TOPICS, "Source topics input are missing.")
    assert not c.to_create and not c.ready


def test_an_internal_topic_with_another_partition_count_is_incorrectly_partitioned():
    c = configure(WORDS, counts(input=4, app_repart=3))
    assert c.status == (INCORRECTLY_PARTITIONED_TOPICS,
                        "Existing topic app-repart has different number of partitions: expected 4, found 3")


def test_copartitioned_sources_must_agree():
    join = Topology(1, (Subtopology("0", source_topics=("left", "right"), copartition_groups=(((0, 1), ()),)),))
    assert configure(join, counts(left=3, right=3)).ready
    bad = configure(join, counts(left=3, right=2))
    assert bad.status == (INCORRECTLY_PARTITIONED_TOPICS,
                          "Following topics do not have the same number of partitions: [left, right]")


def test_a_fixed_repartition_count_is_kept():
    fixed = Topology(1, (
        Subtopology("0", source_topics=("input",), repartition_sink_topics=("r",)),
        Subtopology("1", repartition_source_topics=(TopicInfo("r", partitions=7),)),
    ))
    c = configure(fixed, counts(input=2))
    assert c.to_create["r"].partitions == 7 and c.tasks["1"] == 7


# ------------------------------------------------------------------------------------------------ assignor
def spec(process: str, active=None, standby=None):
    return sa.MemberSpec(process, {k: frozenset(v) for k, v in (active or {}).items()},
                         {k: frozenset(v) for k, v in (standby or {}).items()})


def test_active_tasks_are_spread_evenly():
    out = sa.assign({"a": spec("p1"), "b": spec("p2")}, {"0": 3, "1": 3}, set())
    sizes = sorted(sum(len(ps) for ps in t.active.values()) for t in out.values())
    assert sizes == [3, 3]
    every = sorted((s, p) for t in out.values() for s, ps in t.active.items() for p in ps)
    assert every == [(s, p) for s in "01" for p in range(3)]


def test_tasks_stay_with_their_previous_owner():
    before = {"a": spec("p1", active={"0": {0, 1}}), "b": spec("p2", active={"0": {2, 3}})}
    out = sa.assign(before, {"0": 4}, set())
    assert out["a"].active == {"0": {0, 1}} and out["b"].active == {"0": {2, 3}}
    # a third member takes a share, from the members over quota, and the rest stay where they were
    out = sa.assign({**before, "c": spec("p3")}, {"0": 4}, set())
    assert out["a"].active["0"] <= {0, 1} and out["b"].active["0"] <= {2, 3}
    assert sum(len(t.active.get("0", ())) for t in out.values()) == 4 and out["c"].active


def test_a_previous_standby_gets_the_active_task_first():
    out = sa.assign({"a": spec("p1", standby={"0": {0}}), "b": spec("p2")}, {"0": 1}, {"0"})
    assert out["a"].active == {"0": {0}}


def test_standbys_go_to_other_processes_only():
    out = sa.assign({"a": spec("p1"), "b": spec("p2")}, {"0": 2}, {"0"}, num_standby_replicas=1)
    for m, other in (("a", "b"), ("b", "a")):
        assert out[m].standby.get("0", set()) == out[other].active.get("0", set())
    # two members of one process: no other process, so no standby at all
    out = sa.assign({"a": spec("p1"), "b": spec("p1")}, {"0": 2}, {"0"}, num_standby_replicas=1)
    assert all(not t.standby for t in out.values())
    # stateless sub-topologies get no standby
    out = sa.assign({"a": spec("p1"), "b": spec("p2")}, {"0": 2}, set(), num_standby_replicas=1)
    assert all(not t.standby for t in out.values())


def test_a_previous_owner_over_the_current_quota_gives_the_task_up():
    # 5 tasks, 4 members: the quota is 2 until m0 fills up, then 1 for the 3 tasks left among 3 members
    before = {"m0": spec("p0", active={"0": {1, 3}}), "m1": spec("p1", active={"0": {2}}),
              "m2": spec("p2", active={"0": {0, 4}}), "m3": spec("p3")}
    out = sa.assign(before, {"0": 5}, set())
    assert sorted(len(out[m].active.get("0", ())) for m in before) == [1, 1, 1, 2]
    assert out["m0"].active == {"0": {1, 3}} and out["m1"].active == {"0": {2}} and out["m3"].active


def test_assignments_stay_balanced_whatever_came_before():
    rng = random.Random(1071)
    for _ in range(300):
        n_members, tasks = rng.randint(1, 6), {"0": rng.randint(0, 9), "1": rng.randint(0, 9)}
        every = [(s, p) for s, n in tasks.items() for p in range(n)]
        specs = {}
        for i in range(n_members):
            mine = [t for t in every if rng.random() < 0.4]
            mine_sb = [t for t in every if rng.random() < 0.3]
            specs[f"m{i}"] = spec(f"p{i}", active={s: {p for x, p in mine if x == s} for s in tasks},
                                  standby={s: {p for x, p in mine_sb if x == s} for s in tasks})
        out = sa.assign(specs, tasks, {"1"}, num_standby_replicas=1)
        loads = [sum(len(ps) for ps in t.active.values()) for t in out.values()]
        assert sum(loads) == len(every) and max(loads) - min(loads) <= 1, (specs, tasks, loads)
        assigned = sorted((s, p) for t in out.values() for s, ps in t.active.items() for p in ps)
        assert assigned == sorted(every)
        for t in out.values():  # a standby never sits with its active task
            assert not any(t.standby.get(s, set()) & ps for s, ps in t.active.items())
        standbys = sorted((s, p) for t in out.values() for s, ps in t.standby.items() for p in ps)
        assert standbys == sorted(x for x in every if x[0] == "1" and n_members > 1)


def test_a_previous_standby_over_the_quota_gives_its_standby_up():
    # m0 held every standby before; with two stateful tasks and three members it keeps at most its share
    before = {"m0": spec("p0", standby={"0": {0, 1, 2}}), "m1": spec("p1", active={"0": {0, 1}}),
              "m2": spec("p2", active={"0": {2}})}
    out = sa.assign(before, {"0": 3}, {"0"}, num_standby_replicas=1)
    totals = sorted(sum(len(ps) for ps in [*t.active.values(), *t.standby.values()]) for t in out.values())
    assert totals == [2, 2, 2], out


# ------------------------------------------------------------------------------------------------ group
IMAGE = {"input": 4, "app-repart": 4, "app-store-changelog": 4}


def groups(**config) -> StreamsGroups:
    return StreamsGroups(StreamsGroupConfig(initial_rebalance_delay_ms=config.pop("delay", 0), **config), {})


def join(member: str, topology: Topology = WORDS, process: str | None = None, rebalance_timeout_ms: int = 30_000,
         **kw) -> StreamsHeartbeat:
    return StreamsHeartbeat(group_id="g", member_id=member, member_epoch=0, rebalance_timeout_ms=rebalance_timeout_ms,
                            topology=topology, process_id=process or member, **kw)


def beat(member: str, epoch: int, active=None, standby=None, warmup=None, **kw) -> StreamsHeartbeat:
    given = active is not None
    return StreamsHeartbeat(group_id="g", member_id=member, member_epoch=epoch,
                            active_tasks=active, standby_tasks=(standby or {}) if given else None,
                            warmup_tasks=(warmup or {}) if given else None, **kw)


def test_the_first_member_gets_every_task():
    sg = groups()
    r = sg.heartbeat(0, join("m1"), IMAGE.get)
    assert (r.error_code, r.member_epoch, r.heartbeat_interval_ms, r.status) == (0, 1, 5000, [])
    assert r.tasks is not None and r.tasks.active == {"0": {0, 1, 2, 3}, "1": {0, 1, 2, 3}}
    assert sg.groups["g"].state() == StreamsGroupState.STABLE


def test_missing_internal_topics_keep_the_group_not_ready_and_name_them():
    sg = groups()
    r = sg.heartbeat(0, join("m1"), {"input": 4}.get)
    assert r.status == [(MISSING_INTERNAL_TOPICS, "Internal topics are missing: app-repart, app-store-changelog")]
    assert set(r.to_create) == {"app-repart", "app-store-changelog"}
    assert r.tasks is not None and r.tasks.is_empty()
    assert sg.groups["g"].state() == StreamsGroupState.NOT_READY
    # the topics appear: the next heartbeat configures the topology and the member gets its tasks
    r = sg.heartbeat(1, beat("m1", r.member_epoch, active={}), IMAGE.get)
    assert r.status == [] and not r.to_create and r.tasks is not None and r.tasks.active["0"] == {0, 1, 2, 3}


def test_a_second_member_waits_for_the_first_to_revoke():
    sg = groups()
    r1 = sg.heartbeat(0, join("m1"), IMAGE.get)
    r2 = sg.heartbeat(0, join("m2"), IMAGE.get)
    # m2's target tasks are still m1's: it joins the new epoch with none of them yet
    assert r2.member_epoch == 2 and r2.tasks is not None and r2.tasks.active == {}
    assert sg.groups["g"].members["m2"].state == MemberState.UNRELEASED_TASKS
    # m1 is told to give up half its tasks, keeping its epoch
    full = {"0": {0, 1, 2, 3}, "1": {0, 1, 2, 3}}
    r1b = sg.heartbeat(1, beat("m1", r1.member_epoch, active=full), IMAGE.get)
    assert r1b.member_epoch == 1 and r1b.tasks is not None
    kept = r1b.tasks.active
    assert sum(len(p) for p in kept.values()) == 4
    assert sg.groups["g"].members["m1"].state == MemberState.UNREVOKED_TASKS
    assert sg.groups["g"].state() == StreamsGroupState.RECONCILING
    # still owning them: nothing moves
    again = sg.heartbeat(2, beat("m1", 1, active=full), IMAGE.get)
    assert again.member_epoch == 1 and again.tasks is None
    # revoked: m1 moves to epoch 2, and m2 gets the released tasks on its next heartbeat
    r1c = sg.heartbeat(3, beat("m1", 1, active=kept), IMAGE.get)
    assert r1c.member_epoch == 2
    r2b = sg.heartbeat(4, beat("m2", 2, active={}), IMAGE.get)
    assert r2b.tasks is not None
    assert {(s, p) for s, ps in r2b.tasks.active.items() for p in ps}.isdisjoint(
        {(s, p) for s, ps in kept.items() for p in ps})
    assert sum(len(p) for p in r2b.tasks.active.values()) == 4
    assert sg.groups["g"].state() == StreamsGroupState.STABLE


def test_leaving_hands_the_tasks_to_the_others():
    sg = groups()
    sg.heartbeat(0, join("m1"), IMAGE.get)
    sg.heartbeat(0, join("m2"), IMAGE.get)
    full = {"0": {0, 1, 2, 3}, "1": {0, 1, 2, 3}}
    r = sg.heartbeat(1, beat("m1", 1, active=full), IMAGE.get)  # told to revoke half for m2
    assert r.tasks is not None and sum(len(p) for p in r.tasks.active.values()) == 4
    left = sg.heartbeat(1, beat("m2", -1), IMAGE.get)
    assert (left.error_code, left.member_id, left.member_epoch) == (0, "m2", -1)
    g = sg.groups["g"]
    assert set(g.members) == {"m1"} and g.group_epoch == 3
    # m1's next heartbeat computes the new target: everything again, at epoch 3
    r = sg.heartbeat(2, beat("m1", 1, active=r.tasks.active), IMAGE.get)
    assert r.member_epoch == 3 and r.tasks is not None and r.tasks.active == full
    assert sg.heartbeat(2, beat("m2", 2), IMAGE.get).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_silent_member_is_removed_after_the_session_timeout():
    sg = groups(session_timeout_ms=1000)
    sg.heartbeat(0, join("m1"), IMAGE.get)
    sg.heartbeat(500, join("m2"), IMAGE.get)
    assert sg.tick(1200) == ["g"]
    assert set(sg.groups["g"].members) == {"m2"}
    r = sg.heartbeat(1300, beat("m2", 2, active={}), IMAGE.get)
    assert r.tasks is not None and r.tasks.active == {"0": {0, 1, 2, 3}, "1": {0, 1, 2, 3}}


def _revoking(rebalance_timeout_ms: int = 30_000):
    """m1 told (at t=1) to give up half its tasks to m2, which joined at t=0, both with ``rebalance_timeout_ms``."""
    sg = groups(session_timeout_ms=60_000)
    sg.heartbeat(0, join("m1", rebalance_timeout_ms=rebalance_timeout_ms), IMAGE.get)
    sg.heartbeat(0, join("m2", rebalance_timeout_ms=rebalance_timeout_ms), IMAGE.get)
    full = {"0": {0, 1, 2, 3}, "1": {0, 1, 2, 3}}
    r = sg.heartbeat(1, beat("m1", 1, active=full), IMAGE.get)
    assert sg.groups["g"].members["m1"].state == MemberState.UNREVOKED_TASKS
    return sg, full, r.tasks.active


def test_a_member_that_does_not_revoke_within_its_rebalance_timeout_is_fenced():
    sg, full, _kept = _revoking(rebalance_timeout_ms=1000)
    # heartbeats that keep the session alive but still hold the revoked tasks do not move the deadline
    assert sg.heartbeat(600, beat("m1", 1, active=full), IMAGE.get).error_code == 0
    assert sg.tick(1000) == []
    epoch = sg.groups["g"].group_epoch
    assert sg.tick(1001) == ["g"]
    g = sg.groups["g"]
    assert set(g.members) == {"m2"} and g.group_epoch == epoch + 1
    r = sg.heartbeat(1002, beat("m1", 1, active=full), IMAGE.get)
    assert r.error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_member_that_revokes_in_time_is_not_fenced():
    sg, _full, kept = _revoking(rebalance_timeout_ms=1000)
    r = sg.heartbeat(900, beat("m1", 1, active=kept), IMAGE.get)
    assert r.member_epoch == 2
    m1 = sg.groups["g"].members["m1"]
    assert m1.state != MemberState.UNREVOKED_TASKS and m1.rebalance_deadline_ms == -1
    assert sg.tick(5000) == [] and set(sg.groups["g"].members) == {"m1", "m2"}


def test_a_member_loaded_mid_revocation_gets_its_rebalance_timeout_again():
    sg, _full, _kept = _revoking(rebalance_timeout_ms=1000)
    sg.touch_all(10_000)  # as after the coordinator loads the group: the timeout counts from the load
    assert sg.tick(10_999) == []
    assert sg.tick(11_000) == ["g"] and set(sg.groups["g"].members) == {"m2"}


def test_the_initial_rebalance_delay_gathers_the_first_joins():
    sg = groups(delay=3000)
    r = sg.heartbeat(0, join("m1"), IMAGE.get)
    assert r.member_epoch == 0 and (ASSIGNMENT_DELAYED, "Assignment delayed due to the configured initial "
                                                        "rebalance delay.") in r.status
    r = sg.heartbeat(3000, join("m1"), IMAGE.get)
    assert r.member_epoch == 1 and r.status == [] and r.tasks is not None and r.tasks.active


def test_a_stale_topology_epoch_is_a_status_and_another_topology_is_refused():
    sg = groups()
    newer = Topology(2, WORDS.subtopologies)
    sg.heartbeat(0, join("m1", newer), IMAGE.get)
    r = sg.heartbeat(0, join("m2", WORDS), IMAGE.get)
    assert r.error_code == 0 and (STALE_TOPOLOGY, "The member's topology epoch 1 is behind the group's topology "
                                                  "epoch 2.") in r.status
    other = Topology(2, (Subtopology("0", source_topics=("input",)),))
    r = sg.heartbeat(0, join("m3", other), IMAGE.get)
    assert (r.error_code, r.error_message) == (ErrorCode.INVALID_REQUEST, "Topology updates are not supported yet.")


def test_member_epochs_are_checked():
    sg = groups()
    r = sg.heartbeat(0, join("m1"), IMAGE.get)
    tasks = r.tasks.active if r.tasks is not None else {}
    high = sg.heartbeat(1, beat("m1", 5, active=tasks), IMAGE.get)
    assert high.error_code == ErrorCode.FENCED_MEMBER_EPOCH and "greater member epoch (5)" in (high.error_message or "")
    sg.heartbeat(1, join("m2"), IMAGE.get)  # epoch 2 for the group; m1 stays at 1 while revoking
    assert sg.heartbeat(2, join("m1"), IMAGE.get).error_code == 0  # epoch 0 always (re)joins
    assert sg.heartbeat(3, beat("x", 1), IMAGE.get).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    missing = sg.heartbeat(3, StreamsHeartbeat("nope", "m", 3), IMAGE.get)
    assert (missing.error_code, missing.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                           "Streams group nope not found.")


def test_the_previous_epoch_is_accepted_with_a_subset_of_the_tasks():
    sg = groups()
    sg.heartbeat(0, join("m1"), IMAGE.get)
    m = sg.groups["g"].members["m1"]
    m.previous_member_epoch, m.member_epoch = 1, 3  # as if the answer with epoch 3 was lost
    assert sg.heartbeat(1, beat("m1", 1, active={"0": {0}}), IMAGE.get).error_code == 0
    r = sg.heartbeat(1, beat("m1", 2, active={"0": {0}}), IMAGE.get)
    assert r.error_code == ErrorCode.FENCED_MEMBER_EPOCH


def test_owned_tasks_outside_the_topology_are_invalid():
    sg = groups()
    sg.heartbeat(0, join("m1"), IMAGE.get)
    r = sg.heartbeat(1, beat("m1", 1, active={"9": {0}}), IMAGE.get)
    assert (r.error_code, r.error_message) == (ErrorCode.INVALID_REQUEST, "Subtopology 9 does not exist in the "
                                                                          "topology.")
    r = sg.heartbeat(1, beat("m1", 1, active={"0": {4}}), IMAGE.get)
    assert (r.error_code, r.error_message) == (
        ErrorCode.INVALID_REQUEST, "Task 4 for subtopology 0 is invalid. Number of tasks for this subtopology: 4")


@pytest.mark.parametrize(("request_", "code", "message"), [
    (StreamsHeartbeat("g", "", 0, rebalance_timeout_ms=1, topology=WORDS), ErrorCode.INVALID_REQUEST,
     "MemberId can't be empty."),
    (StreamsHeartbeat("", "m", 0, rebalance_timeout_ms=1, topology=WORDS), ErrorCode.INVALID_REQUEST,
     "GroupId can't be empty."),
    (StreamsHeartbeat("g", "m", 0, topology=WORDS), ErrorCode.INVALID_REQUEST,
     "RebalanceTimeoutMs must be provided in first request."),
    (StreamsHeartbeat("g", "m", 0, rebalance_timeout_ms=1), ErrorCode.INVALID_REQUEST,
     "Topology must be non-null when (re-)joining."),
    (StreamsHeartbeat("g", "m", 0, rebalance_timeout_ms=1, topology=WORDS, active_tasks={"0": {1}},
                      standby_tasks={}, warmup_tasks={}), ErrorCode.INVALID_REQUEST,
     "ActiveTasks must be empty when (re-)joining."),
    (StreamsHeartbeat("g", "m", 1, topology=WORDS), ErrorCode.INVALID_REQUEST,
     "Topology can only be provided when (re-)joining."),
    (StreamsHeartbeat("g", "m", -3), ErrorCode.INVALID_REQUEST,
     "MemberEpoch is -3, but must be greater than or equal to -2."),
    (StreamsHeartbeat("g", "m", -2), ErrorCode.INVALID_REQUEST, "InstanceId can't be null."),
    (StreamsHeartbeat("g", "m", -2, instance_id="i"), ErrorCode.INVALID_REQUEST,
     "Static membership is not yet supported."),
    (StreamsHeartbeat("g", "m", 1, active_tasks={}), ErrorCode.INVALID_REQUEST,
     "If one task-type is non-null, all must be non-null."),
    (StreamsHeartbeat("g", "m", 1, active_tasks={}, standby_tasks={}, warmup_tasks={"0": {1}}),
     ErrorCode.INVALID_REQUEST, "WarmupTasks are not supported yet."),
    (StreamsHeartbeat("g", "m", 1, task_offsets_given=True), ErrorCode.INVALID_REQUEST,
     "TaskOffsets are not supported yet."),
    (StreamsHeartbeat("g", "m", 0, rebalance_timeout_ms=1, topology=Topology(1, (Subtopology(
        "0", source_topics=("input",), state_changelog_topics=(TopicInfo("c", partitions=3),)),))),
     ErrorCode.STREAMS_INVALID_TOPOLOGY,
     "Changelog topic c must have an undefined partition count, but it is set to 3."),
    (StreamsHeartbeat("g", "m", 0, rebalance_timeout_ms=1, topology=Topology(1, (Subtopology(
        "0", source_topic_regex=("in.*",)),))), ErrorCode.INVALID_REQUEST,
     "Regular expressions for source topics are not supported yet."),
])
def test_bad_requests_get_kafkas_codes(request_, code, message):
    r = groups().heartbeat(0, request_, IMAGE.get)
    assert (r.error_code, r.error_message) == (code, message)


def test_a_group_of_another_kind_is_not_found():
    sg = StreamsGroups(StreamsGroupConfig(), {}, other_kind=lambda gid: "consumer")
    r = sg.heartbeat(0, join("m1"), IMAGE.get)
    assert (r.error_code, r.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group g is not a streams group.")


def test_endpoints_map_to_the_partitions_of_their_tasks():
    sg = groups()
    r = sg.heartbeat(0, join("m1", user_endpoint=("h1", 8080)), IMAGE.get)
    assert r.partitions_by_endpoint == [(("h1", 8080), {"app-repart": [0, 1, 2, 3], "input": [0, 1, 2, 3]}, {})]
    epoch = r.endpoint_information_epoch
    assert epoch > 0
    again = sg.heartbeat(1, beat("m1", r.member_epoch, endpoint_information_epoch=epoch), IMAGE.get)
    assert again.partitions_by_endpoint is None  # the member is up to date


def test_group_configs_set_the_standbys():
    sg = StreamsGroups(StreamsGroupConfig(initial_rebalance_delay_ms=0), {},
                       group_config=lambda gid: {"streams.num.standby.replicas": "1"})
    sg.heartbeat(0, join("m1"), IMAGE.get)
    sg.heartbeat(0, join("m2"), IMAGE.get)
    targets = sg.groups["g"].targets
    # sub-topology 1 is stateful: each of its tasks has a standby on the other member
    assert targets["m1"].standby.get("1", set()) == targets["m2"].active.get("1", set())
    assert "0" not in targets["m1"].standby and "0" not in targets["m2"].standby


def test_offset_commits_and_fetches_need_the_members_current_epoch():
    sg = groups()
    sg.heartbeat(0, join("m1"), IMAGE.get)
    assert sg.check_commit("g", "m1", 1, None, 9) == ErrorCode.NONE
    assert sg.check_commit("g", "m1", 2, None, 9) == ErrorCode.STALE_MEMBER_EPOCH
    assert sg.check_commit("g", "m1", 1, None, 8) == ErrorCode.UNSUPPORTED_VERSION
    assert sg.check_commit("g", "m1", 1, None, 3, transactional=True) == ErrorCode.NONE
    assert sg.check_commit("g", "", -1, None, 3, transactional=True) == ErrorCode.NONE
    assert sg.check_commit("g", "x", -1, None, 9) == ErrorCode.UNKNOWN_MEMBER_ID  # members: no outside commits
    assert sg.check_fetch("g", None, -1) == ErrorCode.NONE
    assert sg.check_fetch("g", "m1", 1) == ErrorCode.NONE
    assert sg.check_fetch("g", "m1", 0) == ErrorCode.STALE_MEMBER_EPOCH
    assert sg.check_fetch("g", "x", 1) == ErrorCode.UNKNOWN_MEMBER_ID
    sg.heartbeat(1, beat("m1", -1), IMAGE.get)
    assert sg.check_commit("g", "", -1, None, 9) == ErrorCode.NONE  # empty: an admin may commit


# ------------------------------------------------------------------------------------------------ offset expiry
def test_a_running_groups_source_offsets_do_not_expire():
    day = 24 * 3600 * 1000
    sg = groups()
    book = GroupBook(GroupConfig(offsets_retention_ms=day))
    book.streams_kept_topics = sg.offsets_kept
    assert sg.offsets_kept("g") is None  # no streams group of that id
    sg.heartbeat(0, join("m1"), IMAGE.get)
    # the offsets live in a holder without members, as the coordinator keeps them
    book.commit("g", {("input", 0): CommittedOffset(1, -1, "", 0), ("app-repart", 0): CommittedOffset(1, -1, "", 0),
                      ("elsewhere", 0): CommittedOffset(1, -1, "", 0)})
    assert book.groups["g"].is_(GroupState.EMPTY)
    assert book.expired_offsets(day - 1) == {}
    # the source and repartition source topics stay while the group has members; the others go
    assert book.expired_offsets(day) == {"g": [("elsewhere", 0)]}
    assert sg.removable(lambda gid: True) == [] and sg.removable(lambda gid: False) == []
    # once the group is empty, all of them expire a retention after their commit
    assert sg.heartbeat(1, beat("m1", -1), IMAGE.get).error_code == 0
    assert sg.offsets_kept("g") == frozenset()
    assert book.expired_offsets(day) == {"g": [("input", 0), ("app-repart", 0), ("elsewhere", 0)]}
    # and the empty group is deleted once its offsets are gone
    assert sg.removable(lambda gid: True) == [] and sg.removable(lambda gid: False) == ["g"]


# ------------------------------------------------------------------------------------------------ shutdown
def shutdown_status(r) -> list[str]:
    return [detail for code, detail in r.status if code == SHUTDOWN_APPLICATION]


def test_a_shutdown_request_outlives_its_requester_until_the_group_is_empty():
    sg = groups()
    sg.heartbeat(0, join("m1"), IMAGE.get)
    sg.heartbeat(0, join("m2"), IMAGE.get)
    sg.heartbeat(0, join("m3"), IMAGE.get)

    def again(member: str, **kw) -> StreamsHeartbeat:  # a heartbeat at the member's epoch, owning its tasks
        m = sg.groups["g"].members[member]
        return beat(member, m.member_epoch, active=m.assigned.active, standby=m.assigned.standby, **kw)

    # m1 leaves asking for the shutdown: the others are told, naming m1
    assert sg.heartbeat(1, beat("m1", -1, shutdown_application=True), IMAGE.get).error_code == 0
    told = "Streams group member m1 encountered a fatal error and requested a shutdown for the entire application."
    assert shutdown_status(sg.heartbeat(2, again("m2"), IMAGE.get)) == [told]
    # a later request keeps the first requester
    assert shutdown_status(sg.heartbeat(3, again("m2", shutdown_application=True), IMAGE.get)) == [told]
    assert shutdown_status(sg.heartbeat(3, again("m3"), IMAGE.get)) == [told]
    # the group empties: the request is over, a new member is not told
    assert sg.heartbeat(4, beat("m2", -1), IMAGE.get).error_code == 0
    assert shutdown_status(sg.heartbeat(4, again("m3"), IMAGE.get)) == [told]
    assert sg.heartbeat(5, beat("m3", -1), IMAGE.get).error_code == 0
    assert shutdown_status(sg.heartbeat(6, join("m4"), IMAGE.get)) == []


# ------------------------------------------------------------------------------------------------ refusals
def test_a_refused_heartbeat_changes_nothing():
    sg = groups()
    r = sg.heartbeat(0, join("m1"), {"input": 4}.get)  # the internal topics are missing: not ready
    g = sg.groups["g"]
    snapshot = (g.group_epoch, g.configured, g.validated_topology_epoch, g.members["m1"].process_id,
                g.members["m1"].rack_id)
    # the topics appear, but the heartbeat names a task outside the topology and moves to another process
    bad = sg.heartbeat(1, beat("m1", r.member_epoch, active={"0": {9}}, process_id="elsewhere"), IMAGE.get)
    assert bad.error_code == ErrorCode.INVALID_REQUEST
    assert (g.group_epoch, g.configured, g.validated_topology_epoch, g.members["m1"].process_id,
            g.members["m1"].rack_id) == snapshot
    # m1 rejoins with another topology of the same epoch and a rack: refused, its rack unchanged
    other = Topology(1, (Subtopology("0", source_topics=("input",)),))
    bad = sg.heartbeat(1, join("m1", other, rack_id="r1"), IMAGE.get)
    assert (bad.error_code, bad.error_message) == (ErrorCode.INVALID_REQUEST, "Topology updates are not supported "
                                                                              "yet.")
    assert (g.group_epoch, g.members["m1"].rack_id, g.members["m1"].topology_epoch) == (snapshot[0], None, 1)
    # the next good heartbeat configures the topology and bumps the epoch once
    good = sg.heartbeat(2, beat("m1", r.member_epoch, active={}), IMAGE.get)
    assert good.error_code == 0 and g.group_epoch == snapshot[0] + 1 and g.validated_topology_epoch == 1


# ------------------------------------------------------------------------------------------------ reconciliation
@pytest.mark.parametrize("other_process", [False, True])
def test_an_active_task_waits_while_its_process_still_holds_it_as_a_standby(other_process):
    sg = groups()
    sg.heartbeat(0, join("a", process="P"), IMAGE.get)
    sg.heartbeat(0, join("b", process="P"), IMAGE.get)
    # the state as after a rebalance: task 1-0 moves from a's standby to b's active; both are behind
    g = sg.groups["g"]
    g.group_epoch = g.assignment_epoch = 5
    g.targets = {"a": Tasks(), "b": Tasks(active={"1": {0}})}
    a, b = g.members["a"], g.members["b"]
    if other_process:
        a.process_id = "Q"
    for m, tasks in ((a, Tasks(standby={"1": {0}})), (b, Tasks())):
        m.assigned, m.pending_revocation, m.state, m.member_epoch = tasks, Tasks(), MemberState.STABLE, 4
    r = sg.heartbeat(1, beat("b", 4, active={}), IMAGE.get)
    if other_process:  # a standby in another process holds nothing back
        assert r.tasks is not None and r.tasks.active == {"1": {0}} and b.state == MemberState.STABLE
        return
    # the same process still keeps the task's state: b moves on without it
    assert (r.member_epoch, b.assigned.active, b.state) == (5, {}, MemberState.UNRELEASED_TASKS)
    assert sg.heartbeat(2, beat("a", 4, active={}, standby={"1": {0}}), IMAGE.get).error_code == 0
    assert a.state == MemberState.UNREVOKED_TASKS
    assert sg.heartbeat(3, beat("a", 4, active={}), IMAGE.get).member_epoch == 5
    r = sg.heartbeat(4, beat("b", 5, active={}), IMAGE.get)
    assert r.tasks is not None and r.tasks.active == {"1": {0}} and b.state == MemberState.STABLE


def test_endpoints_list_only_partitions_that_exist():
    # a join of a 4-partition and a 2-partition topic: 4 tasks, the smaller topic only in tasks 0 and 1
    join_topology = Topology(1, (Subtopology("0", source_topics=("big", "small")),))
    sg = groups()
    r = sg.heartbeat(0, join("m1", join_topology, user_endpoint=("h1", 8080)), {"big": 4, "small": 2}.get)
    assert r.tasks is not None and r.tasks.active == {"0": {0, 1, 2, 3}}
    assert r.partitions_by_endpoint == [(("h1", 8080), {"big": [0, 1, 2, 3], "small": [0, 1]}, {})]


def test_the_previous_epoch_needs_the_owned_tasks_and_each_sub_topology_assigned():
    sg = groups()
    sg.heartbeat(0, join("m1"), IMAGE.get)
    m = sg.groups["g"].members["m1"]
    m.previous_member_epoch, m.member_epoch = 1, 3  # as if the answer with epoch 3 was lost
    m.assigned.standby = {}
    assert sg.heartbeat(1, beat("m1", 1), IMAGE.get).error_code == ErrorCode.FENCED_MEMBER_EPOCH  # tasks not given
    r = sg.heartbeat(1, beat("m1", 1, active={"0": {0}}, standby={"1": set()}), IMAGE.get)
    assert r.error_code == ErrorCode.FENCED_MEMBER_EPOCH  # no standby of sub-topology 1 was assigned
    assert sg.heartbeat(1, beat("m1", 1, active={"0": {0}}), IMAGE.get).error_code == 0


# ------------------------------------------------------------------------------------------------ describe
def test_describe_shows_the_configured_counts_and_kafkas_order():
    from kjbod.broker.handlers.streams_group_describe import described_topology

    unordered = Topology(1, (
        Subtopology("1", repartition_source_topics=(TopicInfo("app-repart"),),
                    state_changelog_topics=(TopicInfo("z-changelog"), TopicInfo("a-changelog"))),
        Subtopology("0", source_topics=("input", "extra"), repartition_sink_topics=("app-repart",)),
    ))
    sg = groups()
    image = {"input": 4, "extra": 2}
    r = sg.heartbeat(0, join("m1", unordered), image.get)
    shown = described_topology(sg.groups["g"])
    assert shown is not None and [s.subtopology_id for s in shown.subtopologies] == ["0", "1"]
    assert shown.subtopologies[0].source_topics == ["extra", "input"]
    # not configured yet: the counts the members sent (none for the changelogs)
    assert [(t.name, t.partitions) for t in shown.subtopologies[1].state_changelog_topics] == [
        ("a-changelog", 0), ("z-changelog", 0)]
    image.update({"app-repart": 4, "a-changelog": 4, "z-changelog": 4})
    assert sg.heartbeat(1, beat("m1", r.member_epoch, active={}), image.get).error_code == 0
    assert sg.groups["g"].configured is not None and sg.groups["g"].configured.ready
    shown = described_topology(sg.groups["g"])
    assert shown is not None
    assert [(t.name, t.partitions) for t in shown.subtopologies[1].state_changelog_topics] == [
        ("a-changelog", 4), ("z-changelog", 4)]
    assert [(t.name, t.partitions) for t in shown.subtopologies[1].repartition_source_topics] == [("app-repart", 4)]


def test_a_new_client_id_or_host_bumps_the_group_epoch():
    sg = groups()
    r = sg.heartbeat(0, join("m1", client_id="c1", client_host="/10.0.0.1"), IMAGE.get)
    g = sg.groups["g"]
    epoch = g.group_epoch
    same = sg.heartbeat(1, beat("m1", r.member_epoch, client_id="c1", client_host="/10.0.0.1"), IMAGE.get)
    assert same.error_code == 0 and g.group_epoch == epoch
    sg.heartbeat(2, beat("m1", r.member_epoch, client_id="c2", client_host="/10.0.0.1"), IMAGE.get)
    assert g.group_epoch == epoch + 1 and g.members["m1"].client_id == "c2"
    r = sg.heartbeat(3, beat("m1", g.members["m1"].member_epoch, client_id="c2", client_host="/10.0.0.2"), IMAGE.get)
    assert r.error_code == 0 and g.group_epoch == epoch + 2
