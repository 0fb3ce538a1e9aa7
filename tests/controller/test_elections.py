"""ElectLeaders, the preferred-leader rebalance and the unclean sweep: the managers on their own (the
tests/controller/test_managers.py context), then the QuorumController's timers with a clock the test moves."""

from __future__ import annotations

import asyncio

import pytest

from kjbod.controller import ControllerSettings, QuorumController, elections
from kjbod.metadata import RECOVERING
from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import (
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    CreateTopicsRequest,
    ElectLeadersRequest,
)
from kjbod.protocol.generated.alter_partition_request import BrokerState
from kjbod.protocol.generated.alter_partition_request import PartitionData as AlterPartitionData
from kjbod.protocol.generated.alter_partition_request import TopicData as AlterTopic
from kjbod.protocol.generated.create_topics_request import CreatableReplicaAssignment, CreatableTopic
from kjbod.protocol.generated.elect_leaders_request import TopicPartitions
from kjbod.server.config import build_config
from kjbod.server.roles import controller_settings
from kjbod.storage.metadata_log import MetadataLog

from .test_managers import CLUSTER, Policy
from .test_quorum import live_broker
from .test_replication import alter, cluster, only, part, topic_with


def elect(ctx, kind, wanted, version=2):
    req = ElectLeadersRequest(election_type=kind, timeout_ms=1000, topic_partitions=None if wanted is None else [
        TopicPartitions(topic=t, partitions=list(ps)) for t, ps in wanted.items()])
    return ctx.commit(elections.elect_leaders(ctx.image, req, version))


def codes(resp):
    return {(r.topic, p.partition_id): p.error_code for r in resp.replica_election_results for p in r.partition_result}


def moved_off_preferred(ctx, name):
    """Fences and unfences the preferred replica of `name`-0, which then catches up and rejoins the ISR:
    leadership moved away and stays away."""
    first = part(ctx, name).replicas[0]
    ctx.heartbeat(first, want_fence=True)
    ctx.heartbeat(first)
    leader = part(ctx, name).leader
    assert leader != first
    assert only(alter(ctx, leader, name, [*part(ctx, name).isr, first])).error_code == 0


def test_preferred_election_codes():
    ctx = cluster()
    topic_with(ctx, "a", [1, 2, 3])
    topic_with(ctx, "b", [2, 3])
    moved_off_preferred(ctx, "a")
    ctx.heartbeat(1, want_fence=True)  # a's preferred replica is down again
    resp = elect(ctx, 0, {"a": [0, 9], "b": [0], "nope": [0]})
    assert resp.error_code == 0
    assert codes(resp) == {("a", 0): E.PREFERRED_LEADER_NOT_AVAILABLE, ("a", 9): E.UNKNOWN_TOPIC_OR_PARTITION,
                           ("b", 0): E.ELECTION_NOT_NEEDED, ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    messages = {p.error_message for r in resp.replica_election_results for p in r.partition_result}
    assert "The preferred leader was not available." in messages and "No such topic as nope" in messages
    ctx.heartbeat(1)
    only_a = alter(ctx, part(ctx, "a").leader, "a", [2, 3, 1])  # 1 catches up and rejoins the ISR
    assert only_a.topics[0].partitions[0].error_code == 0
    epoch = part(ctx, "a").leader_epoch
    resp = elect(ctx, 0, {"a": [0]}, version=0)  # v0: always PREFERRED
    assert codes(resp) == {("a", 0): 0} and resp.replica_election_results[0].partition_result[0].error_message is None
    assert (part(ctx, "a").leader, part(ctx, "a").leader_epoch) == (1, epoch + 1)


def test_all_partitions_leave_out_those_that_need_nothing():
    ctx = cluster()
    topic_with(ctx, "a", [1, 2, 3])
    topic_with(ctx, "b", [2, 3])
    moved_off_preferred(ctx, "a")
    resp = elect(ctx, 0, None)
    assert codes(resp) == {("a", 0): 0} and part(ctx, "a").leader == 1
    assert [r.topic for r in resp.replica_election_results] == ["a", "b"]


def test_unclean_election_codes_and_recovery_state():
    ctx = cluster()
    topic_with(ctx, "t", [1, 2, 3])
    alter(ctx, 1, "t", [1])
    ctx.heartbeat(1, want_fence=True)
    assert part(ctx, "t").leader == -1  # the topic does not allow unclean elections: offline
    resp = elect(ctx, 1, {"t": [0]})
    assert codes(resp) == {("t", 0): 0}
    p = part(ctx, "t")
    assert (p.leader, p.isr, p.leader_recovery_state) == (2, (2,), RECOVERING)
    assert codes(elect(ctx, 1, {"t": [0]})) == {("t", 0): E.ELECTION_NOT_NEEDED}
    # Nobody left who may lead.
    for b in (2, 3):
        ctx.heartbeat(b, want_fence=True)
    assert codes(elect(ctx, 1, {"t": [0]})) == {("t", 0): E.ELIGIBLE_LEADERS_NOT_AVAILABLE}
    resp = elect(ctx, 7, {"t": [0]})
    assert resp.error_code == E.INVALID_REQUEST and codes(resp) == {("t", 0): E.INVALID_REQUEST}
    assert resp.replica_election_results[0].partition_result[0].error_message == "Unknown election type 7"


@pytest.mark.parametrize(("percentage", "rebalanced"), [(10, True), (49, True), (50, False)])
def test_rebalance_follows_the_imbalance_percentage(percentage, rebalanced):
    """Broker 1 is the preferred leader of two partitions and leads one: 50% imbalance, which must be above the
    percentage (Kafka compares with >)."""
    ctx = cluster()
    topic_with(ctx, "a", [1, 2])
    topic_with(ctx, "b", [1, 3])
    moved_off_preferred(ctx, "a")  # fencing 1 moved both; unfencing elected neither back
    only(alter(ctx, part(ctx, "b").leader, "b", [3, 1]))
    assert codes(elect(ctx, 0, {"b": [0]})) == {("b", 0): 0}
    settings = ControllerSettings(cluster_id=CLUSTER, leader_imbalance_per_broker_percentage=percentage)
    moved = ctx.commit(elections.rebalance_leaders(ctx.image, settings))
    assert (moved, part(ctx, "a").leader == 1) == ((1, True) if rebalanced else (0, False))


def test_the_unclean_sweep_elects_where_a_topic_allows_it():
    ctx = cluster()
    topic_with(ctx, "t", [1, 2])
    alter(ctx, 1, "t", [1])
    ctx.heartbeat(1, want_fence=True)
    assert part(ctx, "t").leader == -1
    off = ControllerSettings(cluster_id=CLUSTER)
    assert ctx.commit(elections.elect_unclean_leaders(ctx.image, off)) == 0 and part(ctx, "t").leader == -1
    on = ControllerSettings(cluster_id=CLUSTER, unclean_leader_election_enable=True)
    assert ctx.commit(elections.elect_unclean_leaders(ctx.image, on)) == 1
    assert (part(ctx, "t").leader, part(ctx, "t").leader_recovery_state) == (2, RECOVERING)


def test_the_election_keys_reach_the_controllers_settings():
    props = {"node.id": "1", "process.roles": "broker,controller", "controller.listener.names": "CONTROLLER",
             "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093", "log.dirs": "/d"}
    default = controller_settings(build_config(props), CLUSTER, 1)
    assert (default.unclean_leader_election_enable, default.auto_leader_rebalance_enable,
            default.leader_imbalance_per_broker_percentage, default.leader_imbalance_check_interval_seconds) == (
        False, True, 10, 300)
    s = controller_settings(build_config({
        **props, "unclean.leader.election.enable": "true", "auto.leader.rebalance.enable": "false",
        "leader.imbalance.per.broker.percentage": "25", "leader.imbalance.check.interval.seconds": "7"}), CLUSTER, 1)
    assert (s.unclean_leader_election_enable, s.auto_leader_rebalance_enable,
            s.leader_imbalance_per_broker_percentage, s.leader_imbalance_check_interval_seconds) == (True, False, 25, 7)


# ------------------------------------------------------------------------------------------ the timers


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


async def wait_for(predicate):
    for _ in range(2000):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


@pytest.mark.parametrize("enabled", [True, False])
def test_the_rebalance_timer_runs_every_check_interval_when_enabled(tmp_path, enabled):
    clock = Clock()
    settings = ControllerSettings(cluster_id=CLUSTER, broker_session_timeout_ms=10**9,
                                  auto_leader_rebalance_enable=enabled, leader_imbalance_check_interval_seconds=60)
    c = QuorumController(settings, MetadataLog(str(tmp_path)), Policy(), clock=clock)
    c.load()

    async def main():
        c.start()
        try:
            epochs = {b: await live_broker(c, b) for b in (1, 2)}
            await c.handle_request(19, 7, CreateTopicsRequest(timeout_ms=1, topics=[CreatableTopic(
                name="t", num_partitions=-1, replication_factor=-1,
                assignments=[CreatableReplicaAssignment(partition_index=0, broker_ids=[1, 2])])]))
            for fence in (True, False):
                await c.handle_request(63, 1, BrokerHeartbeatRequest(
                    broker_id=1, broker_epoch=epochs[1], want_fence=fence, current_metadata_offset=c.image.offset))
            p = c.image.topic("t").partitions[0]
            assert p.leader == 2
            rejoin = await c.handle_request(56, 3, AlterPartitionRequest(broker_id=2, broker_epoch=epochs[2], topics=[
                AlterTopic(topic_id=c.image.topic("t").topic_id, partitions=[AlterPartitionData(
                    partition_index=0, leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
                    new_isr_with_epochs=[BrokerState(broker_id=2, broker_epoch=epochs[2]),
                                         BrokerState(broker_id=1, broker_epoch=epochs[1])])])]))
            assert rejoin.topics[0].partitions[0].isr == [2, 1]
            clock.now += 30  # before the interval: a pass, and nothing moves
            passes = c.election_passes
            await wait_for(lambda: c.election_passes > passes)
            assert c.image.topic("t").partitions[0].leader == 2
            clock.now += 31
            passes = c.election_passes
            await wait_for(lambda: c.election_passes > passes)
            assert c.image.topic("t").partitions[0].leader == (1 if enabled else 2)
        finally:
            await c.stop()
            c.log.close()

    asyncio.run(main())
