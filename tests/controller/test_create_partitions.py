"""CreatePartitions on the controller (kjbod.controller.replication_control.create_partitions), in the managers'
style (tests/controller/test_managers.py's context): Kafka's checks in its order with its codes and messages, the
records of the new partitions (placement, ISR, leader, directories), validate_only, and the batch bound."""

from __future__ import annotations

import random
import uuid

import pytest

from kjbod.controller import cluster_control, replication_control
from kjbod.metadata import DIR_UNASSIGNED
from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import CreatePartitionsRequest, PartitionRecord
from kjbod.protocol.generated.create_partitions_request import (
    CreatePartitionsAssignment,
    CreatePartitionsTopic,
)

from .test_managers import Ctx


def cluster(n=3, racks=None):
    ctx = Ctx()
    for b in range(1, n + 1):
        ctx.live_broker(b, rack=(racks or {}).get(b))
    return ctx


def topic(name, count, assignments=None):
    return CreatePartitionsTopic(name=name, count=count, assignments=None if assignments is None else [
        CreatePartitionsAssignment(broker_ids=list(b)) for b in assignments])


def grow(ctx, *topics, validate_only=False, seed=None):
    """Commits a CreatePartitions of `topics`; returns (results, the records it wrote)."""
    before = len(ctx.log)
    body = CreatePartitionsRequest(topics=list(topics), timeout_ms=1000, validate_only=validate_only)
    rng = random.Random(seed) if seed is not None else None
    response = ctx.commit(replication_control.create_partitions(ctx.image, body, rng))
    assert response.throttle_time_ms == 0
    return response.results, ctx.log[before:]


def one(ctx, t, **kw):
    (result,), records = grow(ctx, t, **kw)
    return result, records


def with_topic(ctx, name="t", partitions=2, rf=2, assignments=None):
    r = ctx.create(name, -1 if assignments else partitions, -1 if assignments else rf, assignments=assignments)
    assert r.error_code == 0, r.error_message
    return ctx.image.topic(name)


def test_adds_partitions_placed_over_the_brokers_at_the_topics_replication_factor():
    ctx = cluster(3)
    before = with_topic(ctx, partitions=2, rf=2)
    result, records = one(ctx, topic("t", 5))
    assert (result.name, result.error_code, result.error_message) == ("t", 0, None)
    assert [type(r) for r in records] == [PartitionRecord] * 3
    assert [r.partition_id for r in records] == [2, 3, 4]
    after = ctx.image.topic("t")
    assert after.topic_id == before.topic_id and sorted(after.partitions) == [0, 1, 2, 3, 4]
    assert after.partitions[0] is before.partitions[0]  # the old partitions are untouched
    for r in records:
        assert r.topic_id == before.topic_id
        assert len(r.replicas) == 2 and len(set(r.replicas)) == 2
        assert r.isr == r.replicas and r.leader == r.replicas[0]
        assert (r.leader_epoch, r.partition_epoch) == (0, 0)
        # one log dir per broker: the replica's dir is that one (KIP-858), as for a new topic
        assert r.directories == [ctx.image.broker(b).log_dirs[0] for b in r.replicas]
    # Kafka's striped placer: as many partitions as unfenced brokers get a leader each.
    assert sorted(r.leader for r in records) == [1, 2, 3]


def test_placement_spans_the_racks():
    ctx = cluster(4, racks={1: "a", 2: "a", 3: "b", 4: "b"})
    for seed in range(20):
        name = f"t{seed}"
        with_topic(ctx, name, partitions=1, rf=2)
        result, records = one(ctx, topic(name, 9), seed=seed)
        assert result.error_code == 0
        for r in records:
            assert {ctx.image.broker(b).rack for b in r.replicas} == {"a", "b"}, r.replicas


def test_explicit_assignments_are_taken_as_given_and_the_isr_is_their_active_brokers():
    ctx = cluster(3)
    with_topic(ctx, partitions=1, rf=2)
    ctx.heartbeat(2, want_fence=True)
    assert ctx.image.broker(2).fenced
    result, records = one(ctx, topic("t", 3, [[2, 3], [3, 1]]))
    assert result.error_code == 0, result.error_message
    assert [(r.partition_id, r.replicas, r.isr, r.leader) for r in records] == [
        (1, [2, 3], [3], 3), (2, [3, 1], [3, 1], 3)]


def test_a_broker_with_several_dirs_gets_its_new_replicas_unassigned():
    ctx = Ctx()
    ctx.live_broker(1, dirs=[uuid.UUID(int=(1 << 64) + 1), uuid.UUID(int=(1 << 64) + 2)])
    with_topic(ctx, partitions=1, rf=1)
    result, (record,) = one(ctx, topic("t", 2))
    assert result.error_code == 0 and record.directories == [DIR_UNASSIGNED]


@pytest.mark.parametrize(("count", "message"), [
    (2, "Topic already has 2 partition(s)."),
    (1, "The topic t currently has 2 partition(s); 1 would not be an increase."),
    (0, "The topic t currently has 2 partition(s); 0 would not be an increase."),
    (-1, "The topic t currently has 2 partition(s); -1 would not be an increase."),
])
def test_a_count_that_is_not_an_increase_is_invalid_partitions(count, message):
    ctx = cluster(3)
    with_topic(ctx)
    result, records = one(ctx, topic("t", count))
    assert (result.error_code, result.error_message, records) == (E.INVALID_PARTITIONS, message, [])


def test_an_unknown_topic_is_unknown_topic_or_partition_without_a_message_as_kafka_answers():
    ctx = cluster(1)
    result, records = one(ctx, topic("nope", 3))
    assert (result.name, result.error_code, result.error_message, records) == (
        "nope", E.UNKNOWN_TOPIC_OR_PARTITION, None, [])


def test_a_topic_named_twice_is_refused_once_first_and_the_others_go_on():
    ctx = cluster(3)
    with_topic(ctx, "t")
    with_topic(ctx, "u")
    results, records = grow(ctx, topic("t", 4), topic("u", 3), topic("t", 5))
    assert [(r.name, r.error_code, r.error_message) for r in results] == [
        ("t", E.INVALID_REQUEST, "Duplicate topic name."), ("u", 0, None)]
    assert len(ctx.image.topic("t").partitions) == 2 and len(ctx.image.topic("u").partitions) == 3
    assert [r.partition_id for r in records] == [2]


@pytest.mark.parametrize(("assignments", "message"), [
    ([[1, 2]], "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."),
    ([], "Attempted to add 2 additional partition(s), but only 0 assignment(s) were specified."),
    ([[1, 2], [1, 2], [2, 3]], "Attempted to add 2 additional partition(s), but only 3 assignment(s) were "
                               "specified."),
    ([[1, 2], [1, 9]], "The manual partition assignment includes broker 9, but no such broker is registered."),
    ([[1, 2], [3, 3]], "The manual partition assignment includes the broker 3 more than once."),
    ([[1, 2], []], "The manual partition assignment includes an empty replica list."),
    ([[1, 2], [1, 2, 3]], "The manual partition assignment includes a partition with 3 replica(s), but this is "
                          "not consistent with previous partitions, which have 2 replica(s)."),
    ([[1], [2]], "The manual partition assignment includes a partition with 1 replica(s), but this is not "
                 "consistent with previous partitions, which have 2 replica(s)."),
    ([[1, 2], [3, 4]], "All brokers specified in the manual partition assignment for partition 3 are fenced or "
                       "in controlled shutdown."),
])
def test_bad_assignments_are_invalid_replica_assignment_with_kafkas_messages(assignments, message):
    ctx = cluster(3)
    ctx.register(4)  # registered, never unfenced
    ctx.heartbeat(3, want_fence=True)
    with_topic(ctx, partitions=2, rf=2, assignments=[[1, 2], [2, 1]])
    result, records = one(ctx, topic("t", 4, assignments))
    assert (result.error_code, result.error_message, records) == (E.INVALID_REPLICA_ASSIGNMENT, message, [])
    assert len(ctx.image.topic("t").partitions) == 2


def test_placement_refusals_are_invalid_replication_factor_with_the_placers_messages():
    ctx = cluster(3)
    with_topic(ctx, partitions=1, rf=3)
    assert ctx.commit(cluster_control.unregister_broker(ctx.image, 3)).error_code == 0
    result, _ = one(ctx, topic("t", 2))
    assert (result.error_code, result.error_message) == (
        E.INVALID_REPLICATION_FACTOR,
        "The target replication factor of 3 cannot be reached because only 2 broker(s) are registered.")
    for b in (1, 2):
        ctx.heartbeat(b, want_fence=True)
    result, records = one(ctx, topic("t", 2))
    assert (result.error_code, result.error_message, records) == (
        E.INVALID_REPLICATION_FACTOR, "All brokers are currently fenced.", [])


def test_validate_only_answers_as_it_would_and_writes_nothing():
    ctx = cluster(3)
    with_topic(ctx, "t")
    with_topic(ctx, "u")
    results, records = grow(ctx, topic("t", 6), topic("u", 2), topic("v", 2), topic("t", 3, [[1, 2], [2]]),
                            validate_only=True)
    assert [(r.name, r.error_code) for r in results] == [
        ("t", E.INVALID_REQUEST), ("u", E.INVALID_PARTITIONS), ("v", E.UNKNOWN_TOPIC_OR_PARTITION)]
    results, records = grow(ctx, topic("t", 6), topic("u", 4, [[1, 2], [2, 3]]), validate_only=True)
    assert [(r.name, r.error_code, r.error_message) for r in results] == [("t", 0, None), ("u", 0, None)]
    assert records == []
    assert len(ctx.image.topic("t").partitions) == 2 and len(ctx.image.topic("u").partitions) == 2


def test_a_request_past_kafkas_batch_bound_fails_the_topic_that_crosses_it():
    # Kafka's controller writes at most 10,000 records for one request; the topic whose partitions cross it
    # answers UNKNOWN_SERVER_ERROR (no message), before any placement, and adds nothing.
    ctx = cluster(1)
    for name in ("a", "b", "c"):
        with_topic(ctx, name, partitions=1, rf=1)
    results, records = grow(ctx, topic("a", 6001), topic("b", 4002), topic("c", 2))
    assert [(r.name, r.error_code, r.error_message) for r in results] == [
        ("a", 0, None), ("b", E.UNKNOWN_SERVER_ERROR, None), ("c", 0, None)]
    assert len(records) == 6001 and [len(ctx.image.topic(n).partitions) for n in "abc"] == [6001, 1, 2]
    result, records = one(ctx, topic("c", 2**31 - 1))
    assert (result.error_code, records) == (E.UNKNOWN_SERVER_ERROR, [])


def test_a_request_the_controller_could_not_complete_answers_every_topic_with_the_code():
    # The controller's failed write (kjbod.controller.errors) and a forwarded request it never answered
    # (kjbod.broker.remote): each topic of the request gets the code and the message.
    from kjbod.broker.remote import unanswered
    from kjbod.controller.errors import error_response

    body = CreatePartitionsRequest(topics=[topic("a", 2), topic("b", 3)], timeout_ms=1000)
    failed = error_response(37, body, E.KAFKA_STORAGE_ERROR, "the disk")
    assert [(r.name, r.error_code, r.error_message) for r in failed.results] == [
        ("a", E.KAFKA_STORAGE_ERROR, "the disk"), ("b", E.KAFKA_STORAGE_ERROR, "the disk")]
    late = unanswered(body, "gone")
    assert [(r.name, r.error_code, r.error_message) for r in late.results] == [
        ("a", E.REQUEST_TIMED_OUT, "gone"), ("b", E.REQUEST_TIMED_OUT, "gone")]


def test_a_topic_under_reassignment_still_grows_as_kafkas_controller_lets_it():
    # Kafka's KRaft controller has no reassignment check in createPartitions (its ZooKeeper controller had one).
    from kjbod.controller import reassignment
    from kjbod.protocol.generated import AlterPartitionReassignmentsRequest
    from kjbod.protocol.generated.alter_partition_reassignments_request import (
        ReassignablePartition,
        ReassignableTopic,
    )

    ctx = cluster(4)
    with_topic(ctx, partitions=2, rf=2, assignments=[[1, 2], [2, 1]])
    req = AlterPartitionReassignmentsRequest(topics=[ReassignableTopic(
        name="t", partitions=[ReassignablePartition(partition_index=1, replicas=[3, 4])])])
    ctx.commit(reassignment.alter_partition_reassignments(ctx.image, req, 0, ctx.settings, None))
    assert ctx.image.topic("t").partitions[1].reassigning
    result, (record,) = one(ctx, topic("t", 3))
    assert result.error_code == 0 and record.partition_id == 2 and len(record.replicas) == 2
