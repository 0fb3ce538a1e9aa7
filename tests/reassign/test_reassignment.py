"""AlterPartitionReassignments and ListPartitionReassignments on the controller (Kafka's ReplicationControlManager
and PartitionChangeBuilder rules), in the managers' style of tests/controller: requests in, records and responses
out, no sockets and no disk."""

from __future__ import annotations

import uuid

import pytest

from kjbod.controller import reassignment
from kjbod.controller.errors import error_response
from kjbod.metadata import BROKER_RESOURCE, DIR_UNASSIGNED, EMPTY_IMAGE, image_records, replay
from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import (
    AlterPartitionReassignmentsRequest,
    ConfigRecord,
    ListPartitionReassignmentsRequest,
    PartitionChangeRecord,
)
from kjbod.protocol.generated.alter_partition_reassignments_request import (
    ReassignablePartition,
    ReassignableTopic,
)
from kjbod.protocol.generated.list_partition_reassignments_request import ListPartitionReassignmentsTopics
from tests.controller.test_replication import alter, cluster, part, topic_with, two_dir_broker, write


def reassign(ctx, wanted, *, version=1, allow=True, plans=None):
    """`wanted`: {(topic, partition): target replicas or None to cancel}; `plans`: the controller's batched
    reassignments."""
    by_topic: dict[str, list] = {}
    for (name, index), replicas in wanted.items():
        by_topic.setdefault(name, []).append(ReassignablePartition(partition_index=index, replicas=replicas))
    req = AlterPartitionReassignmentsRequest(
        allow_replication_factor_change=allow,
        topics=[ReassignableTopic(name=n, partitions=ps) for n, ps in by_topic.items()])
    return ctx.commit(reassignment.alter_partition_reassignments(ctx.image, req, version, ctx.settings, plans))


def answers(resp):
    return {(t.name, p.partition_index): (p.error_code, p.error_message) for t in resp.responses for p in t.partitions}


def listed(ctx, topics=None):
    req = ListPartitionReassignmentsRequest(topics=None if topics is None else [
        ListPartitionReassignmentsTopics(name=n, partition_indexes=list(ps)) for n, ps in topics.items()])
    resp = reassignment.list_partition_reassignments(ctx.image, req).response
    assert (resp.error_code, resp.error_message) == (0, None)
    return {(t.name, p.partition_index): (p.replicas, p.adding_replicas, p.removing_replicas)
            for t in resp.topics for p in t.partitions}


def state(p):
    return list(p.replicas), list(p.adding), list(p.removing), list(p.isr), p.leader


def test_start_adds_then_completion_removes_once_every_target_is_in_sync():
    ctx = cluster(4)
    topic_with(ctx, "t", [1, 2])
    before = part(ctx, "t")
    resp = reassign(ctx, {("t", 0): [3, 4]})
    assert answers(resp) == {("t", 0): (0, None)} and resp.error_message is None
    p = part(ctx, "t")
    assert state(p) == ([3, 4, 1, 2], [3, 4], [1, 2], [1, 2], 1)
    assert p.leader_epoch == before.leader_epoch  # the replica list only grew: no leader epoch bump
    assert p.partition_epoch == before.partition_epoch + 1
    assert len(p.directories) == 4
    assert listed(ctx) == {("t", 0): ([3, 4, 1, 2], [3, 4], [1, 2])}
    # 3 catches up: not done while 4 is out of the ISR
    assert alter(ctx, 1, "t", [1, 2, 3]).topics[0].partitions[0].error_code == 0
    assert part(ctx, "t").reassigning and listed(ctx) == {("t", 0): ([3, 4, 1, 2], [3, 4], [1, 2])}
    # 4 catches up: the AlterPartition that completes it moves leadership off 1 and is told so
    epoch = part(ctx, "t").leader_epoch
    resp = alter(ctx, 1, "t", [1, 2, 3, 4])
    assert resp.topics[0].partitions[0].error_code == E.NEW_LEADER_ELECTED
    assert state(part(ctx, "t")) == ([3, 4], [], [], [3, 4], 3)
    assert part(ctx, "t").leader_epoch == epoch + 1
    assert listed(ctx) == {}
    rec = ctx.log[-1]
    assert isinstance(rec, PartitionChangeRecord) and (rec.replicas, rec.adding_replicas, rec.removing_replicas) == (
        [3, 4], [], [])


def test_a_v2_alter_partition_is_told_new_leader_elected():
    # v2 (the ISR without broker epochs), the oldest version Kafka 4.x serves: told NEW_LEADER_ELECTED as v3 is
    ctx = cluster(3)
    topic_with(ctx, "t", [1, 2])
    reassign(ctx, {("t", 0): [3, 2]})
    assert alter(ctx, 1, "t", [1, 2, 3], version=2).topics[0].partitions[0].error_code == E.NEW_LEADER_ELECTED
    assert state(part(ctx, "t")) == ([3, 2], [], [], [2, 3], 3)  # the first target replica in the ISR


def test_an_out_of_sync_old_target_replica_blocks_completion():
    ctx = cluster(3)
    topic_with(ctx, "t", [1, 2])
    assert alter(ctx, 1, "t", [1]).topics[0].partitions[0].error_code == 0  # 2 falls behind
    reassign(ctx, {("t", 0): [1, 2, 3]})
    alter(ctx, 1, "t", [1, 3])
    assert part(ctx, "t").adding == (3,)  # 2 (kept by the target) is not in sync yet
    alter(ctx, 1, "t", [1, 2, 3])
    assert state(part(ctx, "t")) == ([1, 2, 3], [], [], [1, 2, 3], 1)


def test_a_reordering_completes_at_once_and_a_pure_removal_bumps_the_leader_epoch():
    ctx = cluster(3)
    topic_with(ctx, "t", [1, 2, 3])
    epoch = part(ctx, "t").leader_epoch
    reassign(ctx, {("t", 0): [3, 1, 2]})
    assert state(part(ctx, "t")) == ([3, 1, 2], [], [], [1, 2, 3], 1)
    assert part(ctx, "t").leader_epoch == epoch
    reassign(ctx, {("t", 0): [3, 1]})  # a removal whose ISR already holds the target completes in one record
    assert state(part(ctx, "t")) == ([3, 1], [], [], [1, 3], 1)
    assert part(ctx, "t").leader_epoch == epoch + 1
    reassign(ctx, {("t", 0): [3]})  # the leader itself removed: the first target replica in the ISR leads
    assert state(part(ctx, "t")) == ([3], [], [], [3], 3)


def test_overriding_turns_an_adding_replica_the_new_target_drops_into_a_removing_one():
    ctx = cluster(4)
    topic_with(ctx, "t", [1, 2])
    reassign(ctx, {("t", 0): [1, 3]})
    assert state(part(ctx, "t")) == ([1, 3, 2], [3], [2], [1, 2], 1)
    reassign(ctx, {("t", 0): [1, 4]})
    assert state(part(ctx, "t")) == ([1, 4, 2, 3], [4], [2, 3], [1, 2], 1)
    alter(ctx, 1, "t", [1, 2, 4])
    assert state(part(ctx, "t")) == ([1, 4], [], [], [1, 4], 1)


def test_cancel_reverts_and_needs_one_in_progress():
    ctx = cluster(4)
    topic_with(ctx, "t", [1, 2])
    resp = reassign(ctx, {("t", 0): None})
    assert answers(resp) == {("t", 0): (E.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress.")}
    reassign(ctx, {("t", 0): [3, 4]})
    alter(ctx, 1, "t", [1, 2, 3])
    epoch = part(ctx, "t").leader_epoch
    assert answers(reassign(ctx, {("t", 0): None})) == {("t", 0): (0, None)}
    assert state(part(ctx, "t")) == ([1, 2], [], [], [1, 2], 1)
    assert part(ctx, "t").leader_epoch == epoch + 1  # 3 and 4 leave the replica set
    assert listed(ctx) == {}


def test_cancel_that_needs_an_unclean_election_is_refused_unless_the_topic_allows_it():
    ctx = cluster(3)
    topic_with(ctx, "t", [1])
    reassign(ctx, {("t", 0): [2]})
    alter(ctx, 1, "t", [1, 2])  # completes: 2 alone
    reassign(ctx, {("t", 0): [3]})
    ctx.heartbeat(2, want_fence=True)  # the only ISR member goes; the ISR keeps it, leaderless
    assert state(part(ctx, "t"))[:3] == ([3, 2], [3], [2])
    # Only the replica being added is in sync (as after an unclean election on it): reverting leaves no ISR member.
    write(ctx, PartitionChangeRecord(topic_id=ctx.image.topic("t").topic_id, partition_id=0, isr=[3]))
    resp = reassign(ctx, {("t", 0): None})  # 2 would have to be put back in the ISR alone
    assert answers(resp) == {("t", 0): (E.INVALID_REPLICA_ASSIGNMENT, "Unable to revert partition assignment for "
                                         "t:0 because it would require an unclean leader election.")}
    write(ctx, ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name="unclean.leader.election.enable",
                            value="true"))
    assert answers(reassign(ctx, {("t", 0): None})) == {("t", 0): (0, None)}
    assert state(part(ctx, "t")) == ([2], [], [], [2], -1)  # 2 is still fenced: it leads once it is back
    ctx.heartbeat(2)
    assert state(part(ctx, "t")) == ([2], [], [], [2], 2)


@pytest.mark.parametrize(("target", "code", "message"), [
    ([], E.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."),
    ([1, 9], E.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes broker 9, but no such broker is registered."),
    ([2, 1, 2], E.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes the broker 2 more than once."),
])
def test_bad_targets(target, code, message):
    ctx = cluster(3)
    topic_with(ctx, "t", [1, 2])
    n = len(ctx.log)
    assert answers(reassign(ctx, {("t", 0): target})) == {("t", 0): (code, message)}
    assert len(ctx.log) == n


def test_unknown_topics_and_partitions_and_per_partition_independence():
    ctx = cluster(3)
    topic_with(ctx, "t", [1, 2])
    resp = reassign(ctx, {("nope", 0): [1], ("t", 5): [1], ("t", 0): [2, 3]})
    assert answers(resp) == {("nope", 0): (E.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named nope."),
                             ("t", 5): (E.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition t:5."),
                             ("t", 0): (0, None)}
    assert resp.error_code == 0 and part(ctx, "t").adding == (3,)


def test_replication_factor_change_refused_only_when_disallowed_in_v1():
    ctx = cluster(4)
    topic_with(ctx, "t", [1, 2])
    resp = reassign(ctx, {("t", 0): [1, 2, 3]}, allow=False)
    assert resp.allow_replication_factor_change is False
    assert answers(resp) == {("t", 0): (E.INVALID_REPLICATION_FACTOR, "The replication factor is changed from 2 to 3")}
    assert answers(reassign(ctx, {("t", 0): [1, 2, 3]}, allow=False, version=0)) == {("t", 0): (0, None)}
    # reassigning: the size is that of the set the partition is headed for (replicas + adding - removing)
    assert answers(reassign(ctx, {("t", 0): [3, 4]}, allow=False)) == {
        ("t", 0): (E.INVALID_REPLICATION_FACTOR, "The replication factor is changed from 3 to 2")}
    assert answers(reassign(ctx, {("t", 0): [3, 4, 1]}, allow=False)) == {("t", 0): (0, None)}
    assert answers(reassign(ctx, {("t", 0): None}, allow=False)) == {("t", 0): (0, None)}  # cancelling is exempt


def test_list_named_partitions_leaves_out_unknown_and_idle_ones():
    ctx = cluster(3)
    topic_with(ctx, "t", [1, 2])
    assert ctx.create("u", -1, assignments=[[1, 2], [1, 2]]).error_code == 0
    reassign(ctx, {("u", 1): [3, 1]})
    assert listed(ctx, {"t": [0], "u": [0, 1, 7], "nope": [0]}) == {("u", 1): ([3, 1, 2], [3], [2])}
    assert listed(ctx, {}) == {}
    assert set(listed(ctx)) == {("u", 1)}


def test_new_replicas_start_in_their_brokers_only_dir_or_unassigned():
    ctx = cluster(2)
    dirs = two_dir_broker(ctx, 3)
    assert len(dirs) == 2
    topic_with(ctx, "t", [1])
    reassign(ctx, {("t", 0): [2, 3]})
    p = part(ctx, "t")
    assert p.directory_of(2) == ctx.image.broker(2).log_dirs[0]
    assert p.directory_of(3) == DIR_UNASSIGNED
    assert p.directory_of(1) == ctx.image.broker(1).log_dirs[0]


def test_adding_and_removing_survive_a_snapshot():
    ctx = cluster(3)
    topic_with(ctx, "t", [1, 2])
    reassign(ctx, {("t", 0): [3, 2]})
    again = replay(EMPTY_IMAGE, image_records(ctx.image))
    assert state(again.topic("t").partitions[0]) == state(part(ctx, "t"))


def test_whole_request_errors_fill_every_partition():
    req = AlterPartitionReassignmentsRequest(topics=[ReassignableTopic(name="t", partitions=[
        ReassignablePartition(partition_index=0, replicas=[1]), ReassignablePartition(partition_index=1)])])
    resp = error_response(45, req, E.REQUEST_TIMED_OUT, "timed out")
    assert resp.error_code == E.REQUEST_TIMED_OUT
    assert answers(resp) == {("t", 0): (E.REQUEST_TIMED_OUT, "timed out"), ("t", 1): (E.REQUEST_TIMED_OUT, "timed out")}


def reassign_into(ctx, name, target, dirs, plans=None):
    req = AlterPartitionReassignmentsRequest(topics=[ReassignableTopic(name=name, partitions=[
        ReassignablePartition(partition_index=0, replicas=target, target_directories=dirs)])])
    return ctx.commit(reassignment.alter_partition_reassignments(ctx.image, req, 1, ctx.settings, plans))


def test_moves_into_named_dirs_in_one_step():
    ctx = cluster(2)
    dirs3 = two_dir_broker(ctx, 3)
    topic_with(ctx, "t", [1, 2])
    before = part(ctx, "t").directory_of(1)
    resp = reassign_into(ctx, "t", [1, 3], [uuid.UUID(int=0), dirs3[1]])
    assert answers(resp) == {("t", 0): (0, None)}
    p = part(ctx, "t")
    assert p.directory_of(3) == dirs3[1] and p.directory_of(1) == before  # a kept replica stays where it is
    alter(ctx, 1, "t", [1, 2, 3])
    assert part(ctx, "t").directory_of(3) == dirs3[1] and list(part(ctx, "t").replicas) == [1, 3]


@pytest.mark.parametrize(("which", "code", "words"), [
    ("unknown", E.LOG_DIR_NOT_FOUND, "is not an online log dir of broker 3"),
    ("other broker's", E.LOG_DIR_NOT_FOUND, "is not an online log dir of broker 3"),
    ("short", E.INVALID_REQUEST, "TargetDirectories has 1 entries for 2 replicas"),
])
def test_a_bad_named_dir_is_refused_before_anything_starts(which, code, words):
    ctx = cluster(2)
    dirs3 = two_dir_broker(ctx, 3)
    topic_with(ctx, "t", [1, 2])
    bad = {"unknown": [uuid.UUID(int=0), uuid.UUID(int=77)],
           "other broker's": [uuid.UUID(int=0), ctx.image.broker(2).log_dirs[0]],
           "short": [dirs3[0]]}[which]
    ((got, message),) = answers(reassign_into(ctx, "t", [1, 3], bad)).values()
    assert got == code and words in message
    write(ctx, ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", value="1",
                            name="reassignment.parallel.partition.count"))
    n = len(ctx.log)
    plans: reassignment.Plans = {}
    ((got, message),) = answers(reassign_into(ctx, "t", [1, 3], bad, plans)).values()  # batched
    assert got == code and words in message
    assert len(ctx.log) == n and not plans and not part(ctx, "t").reassigning


def test_a_dir_that_went_offline_is_refused():
    ctx = cluster(2)
    dirs3 = two_dir_broker(ctx, 3)
    topic_with(ctx, "t", [1])
    ctx.heartbeat(3, offline=[dirs3[1]])
    assert ctx.image.broker(3).log_dirs == (dirs3[0],)
    ((code, _),) = answers(reassign_into(ctx, "t", [3], [dirs3[1]])).values()
    assert code == E.LOG_DIR_NOT_FOUND
