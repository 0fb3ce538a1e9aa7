"""KIP-179 on the controller (kjbod.controller.throttles): ReassignPartitions with a throttle, the two throttle
APIs, and the removal of exactly the controller's own throttles in the batch that ends a reassignment.

Managers' style (tests/controller): requests in, records and responses out, no sockets.  The context's commit
runs every batch through `throttles.finish` first, as the QuorumController does, so each test sees the batches
the controller would write; one test goes through the QuorumController on a real metadata log and restarts it.
"""

from __future__ import annotations

import asyncio

import pytest

from kjbod.controller import reassignment, throttles
from kjbod.controller.result import ControllerResult
from kjbod.controller.throttles import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    NO_THROTTLE,
)
from kjbod.metadata import BROKER_RESOURCE, EMPTY_IMAGE, TOPIC_RESOURCE, RateIntent, image_records, replay
from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import (
    AlterInterbrokerThrottledRatesRequest,
    AlterInterbrokerThrottledReplicasRequest,
    ConfigRecord,
    DeleteTopicsRequest,
    PartitionChangeRecord,
    ReassignPartitionsRequest,
    ThrottledRateIntentRecord,
    ThrottledReplicasIntentRecord,
)
from kjbod.protocol.generated import alter_interbroker_throttled_rates_request as rates_in
from kjbod.protocol.generated import alter_interbroker_throttled_replicas_request as replicas_in
from kjbod.protocol.generated import reassign_partitions_request as reassign_in
from kjbod.protocol.generated.delete_topics_request import DeleteTopicState
from tests.controller.test_replication import alter, cluster, part, write
from tests.reassign.test_batching import set_limits, settle
from tests.reassign.test_reassignment import reassign

RATES = (LEADER_RATE, FOLLOWER_RATE)


def finishing(ctx):
    """`ctx` whose commits pass through throttles.finish, as the QuorumController's do; remembers each batch."""
    plain = ctx.commit
    ctx.batches = []

    def commit(result):
        if result.records:
            result.records = throttles.finish(ctx.image, result.records)
            ctx.batches.append(list(result.records))
        return plain(result)

    ctx.commit = commit
    return ctx


def setup(n=4, replicas=(1, 2), partitions=1, configs=None):
    ctx = finishing(cluster(n))
    ctx.create("t", -1, assignments=[list(replicas)] * partitions, configs=configs)
    ctx.batches.clear()
    return ctx


def rp(ctx, wanted, *, throttle=NO_THROTTLE, remove=True, additional=False, validate_only=False, allow=True,
       plans=None):
    """ReassignPartitions: `wanted` {(topic, partition): brokers}; returns {(topic, partition): (code, msg)}."""
    by_topic: dict[str, list] = {}
    for (name, index), brokers in wanted.items():
        by_topic.setdefault(name, []).append(reassign_in.PartitionReassignment(partition_id=index, brokers=brokers))
    req = ReassignPartitionsRequest(
        topic_reassignments=[reassign_in.TopicReassignment(topic=n, partition_reassignments=ps)
                             for n, ps in by_topic.items()],
        throttle=throttle, remove_throttle=remove, additional=additional, validate_only=validate_only,
        allow_replication_factor_change=allow)
    resp = ctx.commit(throttles.reassign_partitions(ctx.image, req, ctx.settings, plans))
    return {(t.topic, p.partition_id): (p.error_code, p.error_message)
            for t in resp.reassign_partition_results for p in t.partition_errors}


def rates_req(ctx, rates, *, remove=True, validate_only=False):
    req = AlterInterbrokerThrottledRatesRequest(remove_throttle=remove, validate_only=validate_only, broker_throttles=[
        rates_in.BrokerThrottle(broker_id=b, leader_rate=lr, follower_rate=fr) for b, (lr, fr) in rates])
    resp = ctx.commit(throttles.alter_throttled_rates(ctx.image, req))
    return {e.broker_id: (e.error_code, e.error_message) for e in resp.broker_errors}


def replicas_req(ctx, wanted, *, remove=True):
    """`wanted`: [((topic, partition), leaders, followers)]."""
    by_topic: dict[str, list] = {}
    for (name, index), leaders, followers in wanted:
        by_topic.setdefault(name, []).append(replicas_in.PartitionThrottle(partition_id=index, leaders=leaders,
                                                                           followers=followers))
    req = AlterInterbrokerThrottledReplicasRequest(remove_throttle=remove, topic_throttles=[
        replicas_in.TopicThrottle(topic=n, partition_throttles=ps) for n, ps in by_topic.items()])
    resp = ctx.commit(throttles.alter_throttled_replicas(ctx.image, req))
    return {(t.topic, p.partition_id): (p.error_code, p.error_message)
            for t in resp.topic_errors for p in t.partition_errors}


def lists(ctx, topic="t"):
    c = ctx.image.topic(topic).configs
    return c.get(LEADER_REPLICAS), c.get(FOLLOWER_REPLICAS)


def rates(ctx, *brokers):
    return {b: tuple(ctx.image.resource_configs(BROKER_RESOURCE, str(b)).get(k) for k in RATES) for b in brokers}


def set_topic(ctx, key, value, topic="t"):
    write(ctx, ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=topic, name=key, value=value))


def set_rate(ctx, broker, key, value):
    write(ctx, ConfigRecord(resource_type=BROKER_RESOURCE, resource_name=str(broker), name=key, value=value))


def in_sync(ctx, index=0, topic="t"):
    """The leader reports every replica of the partition in sync (completing a reassignment step)."""
    p = part(ctx, topic, index)
    resp = alter(ctx, p.leader, topic, list(p.replicas), index=index)
    assert resp.topics[0].partitions[0].error_code in (0, E.NEW_LEADER_ELECTED)


def config_changes(batch):
    return {(r.resource_name, r.name): r.value for r in batch if isinstance(r, ConfigRecord)}


# ------------------------------------------------------------------------------------------ setting and removing


def test_throttle_is_set_with_the_reassignment_and_removed_by_the_batch_that_completes_it():
    ctx = setup()
    assert rp(ctx, {("t", 0): [3, 4]}, throttle=1000) == {("t", 0): (0, None)}
    (start,) = ctx.batches
    # One batch: Kafka's rule for which replicas (leaders: current, followers: new), rates on every broker of
    # the move, the controller's intents, and the reassignment itself.
    assert config_changes(start) == {
        ("t", LEADER_REPLICAS): "0:1,0:2", ("t", FOLLOWER_REPLICAS): "0:3,0:4",
        **{(str(b), k): "1000" for b in (1, 2, 3, 4) for k in RATES}}
    assert any(isinstance(r, PartitionChangeRecord) for r in start)
    assert any(isinstance(r, ThrottledReplicasIntentRecord) for r in start)
    assert sum(isinstance(r, ThrottledRateIntentRecord) for r in start) == 4
    key = (ctx.image.topic("t").topic_id, 0)
    assert ctx.image.throttled_replicas == {key: ((1, 2), (3, 4))}
    assert ctx.image.throttled_rates[3] == RateIntent("1000", None, "1000", None)
    alter(ctx, 1, "t", [1, 2, 3])  # 4 still out of sync: nothing removed
    assert lists(ctx) == ("0:1,0:2", "0:3,0:4") and part(ctx, "t").reassigning
    ctx.batches.clear()
    in_sync(ctx)
    (done,) = ctx.batches
    assert not part(ctx, "t").reassigning
    assert config_changes(done) == {("t", LEADER_REPLICAS): None, ("t", FOLLOWER_REPLICAS): None,
                                    **{(str(b), k): None for b in (1, 2, 3, 4) for k in RATES}}
    assert lists(ctx) == (None, None) and rates(ctx, 1, 2, 3, 4) == {b: (None, None) for b in (1, 2, 3, 4)}
    assert ctx.image.throttled_replicas == {} and ctx.image.throttled_rates == {}


def test_cancelling_removes_the_throttle_in_the_cancelling_batch():
    ctx = setup()
    rp(ctx, {("t", 0): [3, 4]}, throttle=1000)
    ctx.batches.clear()
    assert reassign(ctx, {("t", 0): None}).responses[0].partitions[0].error_code == 0
    (cancel,) = ctx.batches
    assert list(part(ctx, "t").replicas) == [1, 2] and not part(ctx, "t").reassigning
    assert config_changes(cancel)[("t", FOLLOWER_REPLICAS)] is None
    assert lists(ctx) == (None, None) and rates(ctx, 1, 3) == {1: (None, None), 3: (None, None)}
    assert ctx.image.throttled_replicas == {} and ctx.image.throttled_rates == {}


def test_entries_merge_into_lists_others_set_and_only_the_controllers_own_go():
    ctx = setup(partitions=3)
    set_topic(ctx, LEADER_REPLICAS, "0:1, 1:2")  # someone's, one of them the same entry the move needs
    set_topic(ctx, FOLLOWER_REPLICAS, "1:3")
    rp(ctx, {("t", 0): [3, 4]}, throttle=1000)
    assert lists(ctx) == ("0:1,1:2,0:2", "1:3,0:3,0:4")
    set_topic(ctx, LEADER_REPLICAS, "0:1,1:2,0:2,2:1")  # someone adds an entry meanwhile
    in_sync(ctx)
    assert lists(ctx) == ("0:1,1:2,2:1", "1:3")  # 0:1 was theirs before; 2:1 theirs since


def test_a_wildcard_list_is_left_alone():
    ctx = setup()
    set_topic(ctx, FOLLOWER_REPLICAS, "*")
    rp(ctx, {("t", 0): [3, 4]}, throttle=1000)
    assert lists(ctx) == ("0:1,0:2", "*")
    assert ctx.image.throttled_replicas[(ctx.image.topic("t").topic_id, 0)] == ((1, 2), ())
    in_sync(ctx)
    assert lists(ctx) == (None, "*")


def test_rates_set_before_come_back_and_rates_changed_meanwhile_stay():
    ctx = setup()
    set_rate(ctx, 1, LEADER_RATE, "500")  # an independent throttle, set before
    rp(ctx, {("t", 0): [3, 4]}, throttle=1000)
    assert rates(ctx, 1)[1] == ("1000", "1000")
    set_rate(ctx, 3, FOLLOWER_RATE, "777")  # someone else's change meanwhile
    in_sync(ctx)
    assert rates(ctx, 1, 2, 3, 4) == {1: ("500", None), 2: (None, None), 3: (None, "777"), 4: (None, None)}
    assert ctx.image.throttled_rates == {}


def test_a_rate_stays_while_another_reassignment_still_involves_the_broker():
    ctx = setup(partitions=2)
    rp(ctx, {("t", 0): [3, 4]}, throttle=1000)
    assert rp(ctx, {("t", 1): [3, 1]}, throttle=2000, additional=True) == {("t", 1): (0, None)}
    assert rates(ctx, 1, 3)[3] == ("2000", "2000")
    assert ctx.image.throttled_rates[3].leader_restore is None  # the first throttle's value is not "theirs"
    in_sync(ctx, 0)
    # Partition 0's entries are gone; brokers 1, 2 and 3 still move partition 1: their rates stay, 4's go.
    assert lists(ctx) == ("1:1,1:2", "1:3")
    assert rates(ctx, 1, 2, 3, 4) == {1: ("2000", "2000"), 2: ("2000", "2000"), 3: ("2000", "2000"),
                                      4: (None, None)}
    in_sync(ctx, 1)
    assert lists(ctx) == (None, None)
    assert rates(ctx, 1, 2, 3) == {1: (None, None), 2: (None, None), 3: (None, None)}
    assert ctx.image.throttled_replicas == {} and ctx.image.throttled_rates == {}


def test_without_remove_throttle_the_throttle_stays():
    ctx = setup()
    rp(ctx, {("t", 0): [3, 4]}, throttle=1000, remove=False)
    assert ctx.image.throttled_replicas == {} and ctx.image.throttled_rates == {}
    in_sync(ctx)
    assert lists(ctx) == ("0:1,0:2", "0:3,0:4") and rates(ctx, 4)[4] == ("1000", "1000")


def test_a_batched_reassignment_keeps_its_throttle_until_the_last_step():
    ctx = setup(replicas=(1, 2, 3), n=6)
    set_limits(ctx, replicas=1)
    plans: reassignment.Plans = {}
    assert rp(ctx, {("t", 0): [4, 5, 6]}, throttle=1000, plans=plans) == {("t", 0): (0, None)}
    settle(ctx, plans)
    assert lists(ctx) == ("0:1,0:2,0:3", "0:4,0:5,0:6")
    steps = 0
    while plans:
        assert lists(ctx) == ("0:1,0:2,0:3", "0:4,0:5,0:6") and rates(ctx, 6)[6] == ("1000", "1000")
        in_sync(ctx)
        settle(ctx, plans)
        steps += 1
    assert steps > 1 and list(part(ctx, "t").replicas) == [4, 5, 6]
    assert lists(ctx) == (None, None) and rates(ctx, 1, 6) == {1: (None, None), 6: (None, None)}
    assert ctx.image.throttled_replicas == {} and ctx.image.throttled_rates == {}


def test_deleting_the_topic_ends_its_throttle():
    ctx = setup()
    rp(ctx, {("t", 0): [3, 4]}, throttle=1000)
    from kjbod.controller import replication_control

    resp = ctx.commit(replication_control.delete_topics(
        ctx.image, DeleteTopicsRequest(topics=[DeleteTopicState(name="t")]), 6, enabled=True))
    assert resp.responses[0].error_code == 0
    assert ctx.image.throttled_replicas == {} and ctx.image.throttled_rates == {}
    assert rates(ctx, 1, 3) == {1: (None, None), 3: (None, None)}


def test_a_move_that_ends_at_once_leaves_nothing_behind():
    ctx = setup(replicas=(1, 2, 3))
    assert rp(ctx, {("t", 0): [1, 2]}, throttle=1000) == {("t", 0): (0, None)}  # a pure removal completes at once
    assert list(part(ctx, "t").replicas) == [1, 2]
    assert lists(ctx) == (None, None) and rates(ctx, 1, 3) == {1: (None, None), 3: (None, None)}
    assert ctx.image.throttled_replicas == {} and ctx.image.throttled_rates == {}


# ------------------------------------------------------------------------------------------ replay and restart


def test_the_intents_survive_replay_and_snapshots_and_a_rebuilt_image_finishes_the_job():
    ctx = setup()
    set_rate(ctx, 1, LEADER_RATE, "500")
    rp(ctx, {("t", 0): [3, 4]}, throttle=1000)
    from_log = replay(EMPTY_IMAGE, ctx.log)
    from_snapshot = replay(EMPTY_IMAGE, image_records(ctx.image))
    for image in (from_log, from_snapshot):
        assert image.throttled_replicas == ctx.image.throttled_replicas
        assert image.throttled_rates == ctx.image.throttled_rates and len(image.throttled_rates) == 4
    ctx.image = from_snapshot  # a controller that starts from the snapshot
    in_sync(ctx)
    assert lists(ctx) == (None, None)
    assert rates(ctx, 1, 2) == {1: ("500", None), 2: (None, None)}


def quorum(tmp_path):
    """A QuorumController on a real metadata log in `tmp_path`, loaded from it (not started)."""
    from kjbod.controller import ControllerSettings, QuorumController
    from kjbod.storage.metadata_log import MetadataLog
    from tests.controller.test_managers import CLUSTER, Policy

    c = QuorumController(ControllerSettings(cluster_id=CLUSTER, broker_session_timeout_ms=600_000),
                         MetadataLog(str(tmp_path)), Policy())
    c.load()
    return c


async def started(c, brokers, partitions):
    """`c` started with live `brokers` and topic "t" of `partitions` (replica lists)."""
    from kjbod.protocol.generated import CreateTopicsRequest
    from kjbod.protocol.generated.create_topics_request import CreatableReplicaAssignment, CreatableTopic
    from tests.controller.test_quorum import live_broker

    c.start()
    for b in brokers:
        await live_broker(c, b)
    await c.handle_request(19, 7, CreateTopicsRequest(timeout_ms=1000, topics=[CreatableTopic(
        name="t", num_partitions=-1, replication_factor=-1, assignments=[
            CreatableReplicaAssignment(partition_index=i, broker_ids=r) for i, r in enumerate(partitions)])]))


def test_a_step_that_ends_at_once_makes_room_for_the_next_in_the_same_go(tmp_path):
    """The QuorumController's advance loop goes on after a round whose step completed at once (a reordering):
    with one partition at a time, two reorderings and then a real move all start from one request."""

    async def main():
        c = quorum(tmp_path)
        try:
            await started(c, (1, 2, 3, 4), [[1, 2], [1, 2], [1, 2]])
            await c.submit(lambda image, _o: ControllerResult([ConfigRecord(
                resource_type=BROKER_RESOURCE, resource_name="", name="reassignment.parallel.partition.count",
                value="1")]))
            resp = await c.handle_request(10000, 0, ReassignPartitionsRequest(topic_reassignments=[
                reassign_in.TopicReassignment(topic="t", partition_reassignments=[
                    reassign_in.PartitionReassignment(partition_id=0, brokers=[2, 1]),
                    reassign_in.PartitionReassignment(partition_id=1, brokers=[2, 1]),
                    reassign_in.PartitionReassignment(partition_id=2, brokers=[3, 4])])]))
            assert [e.error_code for e in resp.reassign_partition_results[0].partition_errors] == [0, 0, 0]
            t = c.image.topic("t")
            for i in (0, 1):
                assert list(t.partitions[i].replicas) == [2, 1] and not t.partitions[i].reassigning
            assert t.partitions[2].reassigning and set(t.partitions[2].adding) & {3, 4}
        finally:
            await c.stop()
            c.log.close()

    asyncio.run(main())


def test_a_restarted_quorum_controller_removes_the_throttle_it_set_before(tmp_path):
    """Through the QuorumController on a real metadata log: throttled reassignment started, controller stopped
    and loaded again from the log, the move completes, and the new controller removes exactly the throttle."""
    from kjbod.protocol.generated import AlterPartitionRequest
    from kjbod.protocol.generated.alter_partition_request import BrokerState
    from kjbod.protocol.generated.alter_partition_request import PartitionData as AlterData
    from kjbod.protocol.generated.alter_partition_request import TopicData as AlterTopic

    async def first():
        c = quorum(tmp_path)
        try:
            await started(c, (1, 2, 3, 4), [[1, 2]])
            await c.submit(lambda image, _o: ControllerResult([ConfigRecord(
                resource_type=BROKER_RESOURCE, resource_name="2", name=FOLLOWER_RATE, value="300")]))
            resp = await c.handle_request(10000, 0, ReassignPartitionsRequest(throttle=5000, topic_reassignments=[
                reassign_in.TopicReassignment(topic="t", partition_reassignments=[
                    reassign_in.PartitionReassignment(partition_id=0, brokers=[3, 4])])]))
            assert resp.reassign_partition_results[0].partition_errors[0].error_code == 0
            assert c.image.topic("t").configs[FOLLOWER_REPLICAS] == "0:3,0:4"
        finally:
            await c.stop()
            c.log.close()

    async def second():
        c = quorum(tmp_path)
        assert len(c.image.throttled_rates) == 4 and len(c.image.throttled_replicas) == 1
        c.start()
        try:
            t = c.image.topic("t")
            p = t.partitions[0]
            await c.handle_request(56, 3, AlterPartitionRequest(
                broker_id=p.leader, broker_epoch=c.image.broker(p.leader).epoch, topics=[AlterTopic(
                    topic_id=t.topic_id, partitions=[AlterData(
                        partition_index=0, leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
                        new_isr_with_epochs=[BrokerState(broker_id=b, broker_epoch=c.image.broker(b).epoch)
                                             for b in p.replicas])])]))
            image = c.image
            assert not image.topic("t").partitions[0].reassigning
            assert LEADER_REPLICAS not in image.topic("t").configs
            assert FOLLOWER_REPLICAS not in image.topic("t").configs
            assert {b: dict(image.resource_configs(BROKER_RESOURCE, str(b))) for b in (1, 2, 3, 4)} == {
                1: {}, 2: {FOLLOWER_RATE: "300"}, 3: {}, 4: {}}
            assert image.throttled_rates == {} and image.throttled_replicas == {}
        finally:
            await c.stop()
            c.log.close()

    asyncio.run(first())
    asyncio.run(second())


# ------------------------------------------------------------------------------------------ bad input


def test_reassign_partitions_bad_input_gets_kafkas_codes_and_starts_nothing():
    ctx = setup(partitions=2)
    start = len(ctx.log)
    for throttle in (0, -5):
        assert rp(ctx, {("t", 0): [3, 4]}, throttle=throttle)[("t", 0)][0] == E.INVALID_CONFIG
    out = rp(ctx, {("t", 0): [], ("t", 1): [3, 3], ("nope", 0): [1], ("t", 7): [1]}, throttle=1000)
    assert out == {
        ("t", 0): (E.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."),
        ("t", 1): (E.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes the broker 3 more than "
                                                 "once."),
        ("nope", 0): (E.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named nope."),
        ("t", 7): (E.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition t:7.")}
    assert rp(ctx, {("t", 0): [9, 1]}, throttle=1000)[("t", 0)] == (
        E.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes broker 9, but no such broker is "
                                      "registered.")
    assert rp(ctx, {("t", 0): [1, 2, 3]}, throttle=1000, allow=False)[("t", 0)] == (
        E.INVALID_REPLICATION_FACTOR, "The replication factor is changed from 2 to 3")
    assert len(ctx.log) == start  # nothing written for any of them
    assert rp(ctx, {("t", 0): [3, 4]}, throttle=1000, validate_only=True) == {("t", 0): (0, None)}
    assert len(ctx.log) == start and not part(ctx, "t").reassigning
    assert rp(ctx, {("t", 0): [3, 4]}, throttle=1000) == {("t", 0): (0, None)}
    busy = rp(ctx, {("t", 1): [3, 4]}, throttle=1000)
    assert busy[("t", 1)][0] == E.REASSIGNMENT_IN_PROGRESS and not part(ctx, "t", 1).reassigning
    assert rp(ctx, {("t", 1): [3, 4]}, throttle=1000, additional=True) == {("t", 1): (0, None)}


def test_a_partition_named_twice_is_refused():
    ctx = setup()
    req = ReassignPartitionsRequest(throttle=1000, topic_reassignments=[
        reassign_in.TopicReassignment(topic="t", partition_reassignments=[
            reassign_in.PartitionReassignment(partition_id=0, brokers=[3, 4])]),
        reassign_in.TopicReassignment(topic="t", partition_reassignments=[
            reassign_in.PartitionReassignment(partition_id=0, brokers=[2, 4])])])
    result = throttles.reassign_partitions(ctx.image, req, ctx.settings)
    assert result.records == []
    (topic,) = result.response.reassign_partition_results
    assert [(p.partition_id, p.error_code) for p in topic.partition_errors] == [(0, E.INVALID_REQUEST)]


def test_throttled_rates_api():
    ctx = setup()
    assert rates_req(ctx, [(1, (100, 200))])[1][0] == E.NO_REASSIGNMENT_IN_PROGRESS  # nothing would remove it
    assert rates_req(ctx, [(1, (100, 200))], remove=False) == {1: (0, None)}
    assert rates(ctx, 1)[1] == ("100", "200") and ctx.image.throttled_rates == {}
    rp(ctx, {("t", 0): [3, 4]})  # no throttle of its own
    out = rates_req(ctx, [(3, (0, 5)), (9, (5, 5)), (2, (5, 5)), (2, (6, 6)), (4, (7000, 8000))])
    assert out == {3: (E.INVALID_CONFIG, "The throttled rates must be positive numbers of bytes per second, not "
                                         "leader 0 and follower 5."),
                   9: (E.BROKER_NOT_AVAILABLE, "Broker 9 is not registered."),
                   2: (E.INVALID_REQUEST, "Broker 2 appears more than once."),
                   4: (0, None)}
    assert rates_req(ctx, [(1, (300, 300))], validate_only=True) == {1: (0, None)}
    assert rates(ctx, 1, 4) == {1: ("100", "200"), 4: ("7000", "8000")}
    in_sync(ctx)  # the reassignment ends: broker 4's rates go, broker 1's (not to be removed) stay
    assert rates(ctx, 1, 4) == {1: ("100", "200"), 4: (None, None)}


def test_throttled_replicas_api():
    ctx = setup(partitions=2)
    set_topic(ctx, LEADER_REPLICAS, "1:2")
    out = replicas_req(ctx, [(("t", 1), [1], [2])])
    assert out[("t", 1)][0] == E.NO_REASSIGNMENT_IN_PROGRESS
    assert replicas_req(ctx, [(("t", 1), [1], [2])], remove=False) == {("t", 1): (0, None)}
    assert lists(ctx) == ("1:2,1:1", "1:2")
    rp(ctx, {("t", 0): [3, 4]})
    out = replicas_req(ctx, [(("t", 0), [1, 2], [3, 4]), (("nope", 0), [1], []), (("t", 5), [1], []),
                             (("t", 1), [], []), (("t", 1), [9], [])])
    assert out[("t", 0)] == (0, None)
    assert out[("nope", 0)] == (E.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named nope.")
    assert out[("t", 5)] == (E.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition t:5.")
    assert out[("t", 1)][0] == E.INVALID_REQUEST  # named twice
    assert replicas_req(ctx, [(("t", 1), [9], [])], remove=False)[("t", 1)][0] == E.INVALID_REPLICA_ASSIGNMENT
    assert replicas_req(ctx, [(("t", 1), [2, 2], [])], remove=False)[("t", 1)][0] == E.INVALID_REPLICA_ASSIGNMENT
    assert replicas_req(ctx, [(("t", 1), [], [])], remove=False)[("t", 1)][0] == E.INVALID_REQUEST
    assert lists(ctx) == ("1:2,1:1,0:1,0:2", "1:2,0:3,0:4")
    in_sync(ctx)
    assert lists(ctx) == ("1:2,1:1", "1:2")


@pytest.mark.parametrize("api", [10000, 10001, 10002])
def test_whole_request_errors_fill_every_item(api):
    from kjbod.controller.errors import error_response

    reqs = {
        10000: ReassignPartitionsRequest(topic_reassignments=[reassign_in.TopicReassignment(
            topic="t", partition_reassignments=[reassign_in.PartitionReassignment(partition_id=0, brokers=[1])])]),
        10001: AlterInterbrokerThrottledRatesRequest(broker_throttles=[rates_in.BrokerThrottle(broker_id=1)]),
        10002: AlterInterbrokerThrottledReplicasRequest(topic_throttles=[replicas_in.TopicThrottle(
            topic="t", partition_throttles=[replicas_in.PartitionThrottle(partition_id=0, leaders=[1])])]),
    }
    resp = error_response(api, reqs[api], E.REQUEST_TIMED_OUT, "slow")
    codes = ([p.error_code for t in resp.reassign_partition_results for p in t.partition_errors] if api == 10000
             else [b.error_code for b in resp.broker_errors] if api == 10001
             else [p.error_code for t in resp.topic_errors for p in t.partition_errors])
    assert codes == [E.REQUEST_TIMED_OUT]
