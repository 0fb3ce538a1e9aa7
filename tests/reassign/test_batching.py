"""KIP-435 batching: the step computation on its own (the KIP's example), the batch picker, and the controller
moving partitions step by step under the three limits, in the managers' style (records in the context's log are
what the metadata log would hold), with an audit of that log on a 200-partition reassignment."""

from __future__ import annotations

import random

import pytest

from kjbod.controller import ControllerResult, reassignment
from kjbod.controller.reassignment_steps import INT_MAX, Limits, next_step, pick
from kjbod.metadata import BROKER_RESOURCE, EMPTY_IMAGE, replay
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
from tests.controller.test_replication import alter, cluster, part, topic_with, write
from tests.reassign.test_reassignment import reassign


def test_the_kips_example_step_by_step():
    steps, current = [], [0, 1, 2, 3, 4]
    while current != [5, 6, 7, 8, 9]:
        current = next_step(current, [5, 6, 7, 8, 9], isr=current, min_isr=1, replica_count=2)
        steps.append(current)
    assert steps == [[5, 0, 1, 2, 3, 4], [5, 6, 2, 3, 4], [5, 6, 7, 8, 4], [5, 6, 7, 8, 9]]


@pytest.mark.parametrize(("current", "final", "kw", "step"), [
    ([1, 2, 3], [3, 1, 2], {}, [3, 1, 2]),  # the same replicas: the last step, in the target's order
    ([1, 2], [1, 2, 3, 4, 5], {"replica_count": 1}, [1, 2, 3]),  # growing: one at a time
    ([1, 2, 3, 4], [1], {"replica_count": 2}, [1, 4]),  # shrinking: two dropped at a time
    ([1, 2, 3], [4, 5, 6], {"replica_count": 1, "min_isr": 3, "isr": [1]}, [4, 5, 1, 2, 3]),  # below min ISR
    ([1, 2, 3], [1, 5, 6], {"replica_count": 1, "min_isr": 3, "isr": [1, 2]}, [1, 5, 3, 6]),  # refill to min ISR
    ([1, 2], [3, 4], {}, [3, 1, 2]),  # unlimited: the new leader first, then the rest
    ([3, 1, 2], [3, 4], {}, [3, 4]),
])
def test_steps(current, final, kw, step):
    assert next_step(current, final, **kw) == step


def test_pick_fills_with_leader_movements_first_within_both_limits():
    waiting = [("a", False), ("b", True), ("c", True), ("d", False), ("e", True)]
    limits = Limits(partitions=3, leader_movements=1)
    assert pick(waiting, stepping=0, moving_leaders=0, limits=limits) == ["b", "a", "d"]
    assert pick(waiting, stepping=1, moving_leaders=1, limits=limits) == ["a", "d"]
    assert pick(waiting, stepping=3, moving_leaders=0, limits=limits) == []
    assert pick(waiting, stepping=0, moving_leaders=0, limits=Limits()) == ["b", "c", "e", "a", "d"]
    assert Limits.from_configs({"reassignment.parallel.partition.count": "4"}) == Limits(INT_MAX, 4, INT_MAX)
    assert not Limits.from_configs({}).batching


def set_limits(ctx, **values):
    names = {"replicas": "replica", "partitions": "partition", "leaders": "leader"}
    for k, v in values.items():
        key = f"reassignment.parallel.{names[k]}.{'movements' if k == 'leaders' else 'count'}"
        write(ctx, ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name=key, value=str(v)))


def request(ctx, wanted, plans):
    resp = reassign(ctx, wanted, plans=plans)
    settle(ctx, plans)
    return resp


def settle(ctx, plans):
    """What the QuorumController does after each commit: start the next steps until a round writes nothing."""
    while plans:
        records = reassignment.advance(ctx.image, plans)
        if not records:
            return
        ctx.commit(ControllerResult(records, None))


def catch_up(ctx, plans, name, index):
    """The partition's leader reports every replica in sync (the new ones caught up)."""
    p = part(ctx, name, index)
    resp = alter(ctx, p.leader, name, list(p.replicas), index=index)
    assert resp.topics[0].partitions[0].error_code in (0, 108)
    settle(ctx, plans)


def test_the_kips_example_through_the_controller():
    ctx = cluster(10)
    topic_with(ctx, "t", [10, 1, 2, 3, 4])  # broker 10 stands for the KIP's broker 0
    set_limits(ctx, replicas=2)
    plans: reassignment.Plans = {}
    start = len(ctx.log)
    assert request(ctx, {("t", 0): [5, 6, 7, 8, 9]}, plans).responses[0].partitions[0].error_code == 0
    while plans:
        catch_up(ctx, plans, "t", 0)
    # The metadata log, record by record: the replica list each time no step is in progress is the KIP's.
    image, settled = replay(EMPTY_IMAGE, ctx.log[:start]), []
    for rec in ctx.log[start:]:
        image = replay(image, [rec])
        p = image.topic("t").partitions[0]
        if isinstance(rec, PartitionChangeRecord) and not p.reassigning:
            settled.append(list(p.replicas))
    assert settled == [[5, 10, 1, 2, 3, 4], [5, 6, 2, 3, 4], [5, 6, 7, 8, 4], [5, 6, 7, 8, 9]]
    # each step starts as the step's target followed by the replicas it drops (Kafka's Replicas while moving)
    starts = [r.replicas for r in ctx.log[start:] if isinstance(r, PartitionChangeRecord) and r.adding_replicas]
    assert starts == [[5, 10, 1, 2, 3, 4], [5, 6, 2, 3, 4, 1, 10], [5, 6, 7, 8, 4, 2, 3], [5, 6, 7, 8, 9, 4]]
    assert part(ctx, "t").leader == 5 and list(part(ctx, "t").isr) == [5, 6, 7, 8, 9]


def test_list_shows_the_final_target_and_the_current_batch():
    ctx = cluster(4)
    topic_with(ctx, "t", [1, 2])
    set_limits(ctx, replicas=1)
    plans: reassignment.Plans = {}
    request(ctx, {("t", 0): [3, 4]}, plans)
    resp = reassignment.list_partition_reassignments(
        ctx.image, ListPartitionReassignmentsRequest(include_batches=True), plans).response
    (p,) = resp.topics[0].partitions
    assert (p.replicas, p.adding_replicas, p.removing_replicas) == ([3, 1, 2], [3, 4], [1, 2])
    assert (p.batch_current_replicas, p.batch_target_replicas) == ([1, 2], [3, 1, 2])
    plain = reassignment.list_partition_reassignments(ctx.image, ListPartitionReassignmentsRequest(), plans).response
    assert plain.topics[0].partitions[0].batch_target_replicas == []  # only when asked for
    # cancelling drops the plan and reverts the step in progress
    resp = request(ctx, {("t", 0): None}, plans)
    assert resp.responses[0].partitions[0].error_code == 0 and not plans
    assert list(part(ctx, "t").replicas) == [1, 2] and not part(ctx, "t").reassigning


def test_a_changed_limit_applies_from_the_next_step():
    ctx = cluster(6)
    ctx.create("t", -1, assignments=[[1, 2]] * 4)
    set_limits(ctx, partitions=1)
    plans: reassignment.Plans = {}
    request(ctx, {("t", i): [3, 4] for i in range(4)}, plans)
    assert sum(p.reassigning for p in ctx.image.topic("t").partitions.values()) == 1
    set_limits(ctx, partitions=3)
    settle(ctx, plans)  # the config change is a commit: the controller advances after it
    assert sum(p.reassigning for p in ctx.image.topic("t").partitions.values()) == 3


def audit(log, limits):
    """Replays the metadata log one record at a time; at every moment no more partitions are stepping, no more
    of them moving a leader, and no step adds more replicas, than the limits allow."""
    image, worst = EMPTY_IMAGE, (0, 0, 0)
    for rec in log:
        image = replay(image, [rec])
        stepping = [p for t in image.topics_by_id.values() for p in t.partitions.values() if p.reassigning]
        moving = [p for p in stepping if p.replicas[0] != p.leader]
        adding = max((len(p.adding) for p in stepping), default=0)
        worst = tuple(max(a, b) for a, b in zip(worst, (len(stepping), len(moving), adding), strict=True))
        assert len(stepping) <= limits.partitions and len(moving) <= limits.leader_movements
        assert adding <= limits.replicas
    return worst


def test_audit_of_a_200_partition_reassignment_with_small_limits():
    ctx = cluster(6)
    rng = random.Random(435)
    assignment = [rng.sample([1, 2, 3], 2) for _ in range(200)]
    ctx.create("big", -1, assignments=assignment)
    set_limits(ctx, replicas=1, partitions=7, leaders=3)
    plans: reassignment.Plans = {}
    targets = {("big", i): rng.sample([4, 5, 6], 2) for i in range(200)}
    request(ctx, targets, plans)
    rounds = 0
    while plans:
        rounds += 1
        stepping = [i for i, p in ctx.image.topic("big").partitions.items() if p.reassigning]
        assert stepping, "plans left but nothing stepping"
        for i in rng.sample(stepping, max(1, len(stepping) // 2)):  # some catch up before others
            catch_up(ctx, plans, "big", i)
    for (name, i), target in targets.items():
        assert list(part(ctx, name, i).replicas) == target
    worst = audit(ctx.log, Limits(replicas=1, partitions=7, leader_movements=3))
    assert worst[0] == 7 and worst[1] >= 1 and worst[2] == 1  # the limits were reached, never passed
    assert rounds > 200 // 7


def test_the_limits_are_dynamic_broker_configs_of_positive_integers():
    from kjbod.broker.broker_config import ConfigProblem, DynamicBrokerConfigs, plan_broker_changes

    dynamic = DynamicBrokerConfigs(1)
    for key in ("reassignment.parallel.replica.count", "reassignment.parallel.partition.count",
                "reassignment.parallel.leader.movements"):
        assert plan_broker_changes(dynamic, "", [(key, 0, "5")], replace=False) == {key: "5"}
        with pytest.raises(ConfigProblem, match=key):
            plan_broker_changes(dynamic, "", [(key, 0, "0")], replace=False)
        with pytest.raises(ConfigProblem, match=key):
            plan_broker_changes(dynamic, "", [(key, 0, "many")], replace=False)


def test_named_dirs_hold_through_every_step():
    from tests.controller.test_replication import two_dir_broker
    from tests.reassign.test_reassignment import reassign_into

    ctx = cluster(2)
    dirs3, dirs4 = two_dir_broker(ctx, 3), two_dir_broker(ctx, 4)
    topic_with(ctx, "t", [1, 2])
    set_limits(ctx, replicas=1)
    plans: reassignment.Plans = {}
    assert reassign_into(ctx, "t", [3, 4], [dirs3[1], dirs4[1]], plans).responses[0].partitions[0].error_code == 0
    settle(ctx, plans)
    assert part(ctx, "t").directory_of(3) == dirs3[1] and 4 not in part(ctx, "t").replicas
    while plans:
        catch_up(ctx, plans, "t", 0)
    p = part(ctx, "t")
    assert list(p.replicas) == [3, 4] and (p.directory_of(3), p.directory_of(4)) == (dirs3[1], dirs4[1])


def test_a_restarted_controller_goes_on_with_a_batched_reassignment(tmp_path):
    """Through the QuorumController on a real metadata log: the plan is in the log (ReassignmentIntentRecord),
    so a controller loaded from it after the first step started takes the reassignment to its end."""
    import asyncio

    from kjbod.controller import ControllerSettings, QuorumController
    from kjbod.protocol.generated import AlterPartitionRequest, CreateTopicsRequest
    from kjbod.protocol.generated.alter_partition_request import BrokerState
    from kjbod.protocol.generated.alter_partition_request import PartitionData as AlterData
    from kjbod.protocol.generated.alter_partition_request import TopicData as AlterTopic
    from kjbod.protocol.generated.create_topics_request import CreatableReplicaAssignment, CreatableTopic
    from kjbod.storage.metadata_log import MetadataLog
    from tests.controller.test_managers import CLUSTER, Policy
    from tests.controller.test_quorum import live_broker

    def make():
        settings = ControllerSettings(cluster_id=CLUSTER, broker_session_timeout_ms=600_000)
        c = QuorumController(settings, MetadataLog(str(tmp_path)), Policy())
        c.load()
        return c

    async def catch_up(c):
        t = c.image.topic("t")
        p = t.partitions[0]
        await c.handle_request(56, 3, AlterPartitionRequest(broker_id=p.leader, broker_epoch=c.image.broker(p.leader).epoch,
                               topics=[AlterTopic(topic_id=t.topic_id, partitions=[AlterData(
                                   partition_index=0, leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
                                   new_isr_with_epochs=[BrokerState(broker_id=b, broker_epoch=c.image.broker(b).epoch)
                                                        for b in p.replicas])])]))

    async def first():
        c = make()
        c.start()
        try:
            for b in (1, 2, 3, 4):
                await live_broker(c, b)
            await c.handle_request(19, 7, CreateTopicsRequest(timeout_ms=1000, topics=[CreatableTopic(
                name="t", num_partitions=-1, replication_factor=-1,
                assignments=[CreatableReplicaAssignment(partition_index=0, broker_ids=[1, 2])])]))
            await c.submit(lambda image, _o: ControllerResult([ConfigRecord(
                resource_type=BROKER_RESOURCE, resource_name="", name="reassignment.parallel.replica.count",
                value="1")]))
            req = AlterPartitionReassignmentsRequest(topics=[ReassignableTopic(name="t", partitions=[
                ReassignablePartition(partition_index=0, replicas=[3, 4])])])
            assert (await c.handle_request(45, 1, req)).responses[0].partitions[0].error_code == 0
            p = c.image.topic("t").partitions[0]
            assert p.intent == (3, 4) and p.adding == (3,)
        finally:
            await c.stop()
            c.log.close()

    async def second():
        c = make()
        assert list(c.reassignment_plans.values()) == [reassignment.Plan([3, 4], {})]
        c.start()
        try:
            while c.reassignment_plans:
                await catch_up(c)
            p = c.image.topic("t").partitions[0]
            assert list(p.replicas) == [3, 4] and p.intent is None and not p.reassigning
        finally:
            await c.stop()
            c.log.close()

    asyncio.run(first())
    asyncio.run(second())
