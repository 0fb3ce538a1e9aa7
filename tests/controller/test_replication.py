"""Replication on the controller, in the managers' style (tests/controller/test_managers.py's context): topics
with several replicas, AlterPartition's checks in Kafka's order, elections when brokers are fenced, shut down or
lose a dir, unclean elections, and LeaderRecoveryState."""

from __future__ import annotations

import uuid

import pytest

from kjbod.controller import ControllerResult, alter_partition
from kjbod.controller.replication_control import assign_directories
from kjbod.metadata import BROKER_RESOURCE, DIR_LOST, RECOVERED, RECOVERING, TOPIC_RESOURCE
from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import AlterPartitionRequest, ConfigRecord, PartitionChangeRecord
from kjbod.protocol.generated.alter_partition_request import BrokerState, PartitionData, TopicData
from kjbod.protocol.runtime import ZERO_UUID

from .test_managers import Ctx


def cluster(n=3, **settings):
    ctx = Ctx(**settings)
    for b in range(1, n + 1):
        ctx.live_broker(b)
    return ctx


def topic_with(ctx, name, replicas, configs=None):
    r = ctx.create(name, -1, assignments=[replicas], configs=configs)
    assert r.error_code == 0, r.error_message
    return ctx.image.topic(name)


def two_dir_broker(ctx, bid):
    """Registers and unfences broker `bid` with two log dirs; returns them."""
    dirs = [uuid.UUID(int=(bid << 64) + 1), uuid.UUID(int=(bid << 64) + 2)]
    ctx.register(bid, dirs=dirs)
    ctx.heartbeat(bid)
    return dirs


def place(ctx, bid, name, dir_id):
    ctx.commit(assign_directories(ctx.image, bid, [(ctx.image.topic(name).topic_id, 0, dir_id)]))


def write(ctx, *records):
    ctx.commit(ControllerResult(list(records), None))


def part(ctx, name, index=0):
    return ctx.image.topic(name).partitions[index]


def alter(ctx, sender, name, isr, *, version=3, leader_epoch=None, partition_epoch=None, epochs=None,
          recovery=RECOVERED, broker_epoch=None, topic_id=None, index=0):
    p = ctx.image.topic(name).partitions.get(index) if ctx.image.topic(name) else None
    data = PartitionData(
        partition_index=index, leader_epoch=p.leader_epoch if leader_epoch is None else leader_epoch,
        partition_epoch=p.partition_epoch if partition_epoch is None else partition_epoch,
        leader_recovery_state=recovery)
    if version >= 3:
        data.new_isr_with_epochs = [BrokerState(broker_id=b, broker_epoch=(epochs or {}).get(b, ctx.image.broker(b).epoch
                                                if ctx.image.broker(b) else -1)) for b in isr]
    else:
        data.new_isr = list(isr)
    t = ctx.image.topic(name)
    req = AlterPartitionRequest(
        broker_id=sender, broker_epoch=ctx.image.broker(sender).epoch if broker_epoch is None else broker_epoch,
        topics=[TopicData(topic_id=(t.topic_id if t else ZERO_UUID) if topic_id is None else topic_id,
                          partitions=[data])])
    resp = ctx.commit(alter_partition.alter_partition(ctx.image, req, version, ctx.settings))
    return resp


def only(resp):
    assert resp.error_code == 0
    (t,) = resp.topics
    (p,) = t.partitions
    return p


# ------------------------------------------------------------------------------------------ AlterPartition


def test_alter_partition_shrinks_and_expands_the_isr_with_epoch_bumps():
    ctx = cluster()
    topic_with(ctx, "t", [1, 2, 3])
    before = part(ctx, "t")
    r = only(alter(ctx, 1, "t", [1, 2]))
    after = part(ctx, "t")
    assert (r.error_code, r.leader_id, r.isr, r.leader_epoch, r.partition_epoch) == (
        0, 1, [1, 2], before.leader_epoch, before.partition_epoch + 1)
    assert after.isr == (1, 2) and after.leader_epoch == before.leader_epoch  # an ISR change keeps the leader epoch
    r = only(alter(ctx, 1, "t", [1, 2, 3], version=2))  # v2: the ISR without broker epochs
    assert (r.isr, r.partition_epoch) == ([1, 2, 3], before.partition_epoch + 2)
    # The same ISR again: no record, the current state answered.
    n = len(ctx.log)
    r = only(alter(ctx, 1, "t", [1, 2, 3]))
    assert (r.error_code, r.isr, r.partition_epoch) == (0, [1, 2, 3], before.partition_epoch + 2) and len(ctx.log) == n


def test_alter_partition_stale_broker_epoch_and_unknown_topics():
    ctx = cluster()
    topic_with(ctx, "t", [1, 2, 3])
    assert alter(ctx, 1, "t", [1, 2], broker_epoch=999).error_code == E.STALE_BROKER_EPOCH
    resp = alter(ctx, 1, "t", [1, 2], topic_id=uuid.uuid4())
    assert resp.topics[0].partitions[0].error_code == E.UNKNOWN_TOPIC_ID
    resp = alter(ctx, 1, "t", [1, 2], version=2, topic_id=ZERO_UUID)  # no id at all
    assert resp.topics[0].partitions[0].error_code == E.UNKNOWN_TOPIC_ID
    ctx2 = cluster()
    topic_with(ctx2, "u", [1, 2])
    resp = alter(ctx2, 1, "u", [1], index=7, leader_epoch=0, partition_epoch=0)
    assert resp.topics[0].partitions[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize(("kwargs", "code"), [
    ({"leader_epoch": 5}, E.NOT_CONTROLLER),
    ({"partition_epoch": 5}, E.NOT_CONTROLLER),
    ({"leader_epoch": -1}, E.FENCED_LEADER_EPOCH),
    ({"sender": 2}, E.INVALID_REQUEST),
    ({"partition_epoch": -1}, E.INVALID_UPDATE_VERSION),
    ({"isr": [1, 1, 2]}, E.INVALID_REQUEST),
    ({"isr": [1, 4]}, E.INVALID_REQUEST),  # 4 is registered but not a replica
    ({"isr": [2, 3]}, E.INVALID_REQUEST),  # without the leader
    ({"isr": [1, 2], "recovery": RECOVERING}, E.INVALID_REQUEST),  # RECOVERED -> RECOVERING
    ({"isr": [1, 2], "recovery": 7}, E.INVALID_REQUEST),
    ({"isr": [1, 2], "epochs": {2: 12345}}, E.INELIGIBLE_REPLICA),
    ({"isr": [1, 3]}, E.INELIGIBLE_REPLICA),  # 3 is fenced
    ({"isr": [1, 3], "version": 2}, E.INELIGIBLE_REPLICA),
    ({"isr": [1, 5]}, E.INELIGIBLE_REPLICA),  # 5 is shutting down
])
def test_alter_partition_refusals_in_kafkas_order(kwargs, code):
    ctx = cluster(5)
    topic_with(ctx, "t", [1, 2, 3, 5])
    topic_with(ctx, "w", [5, 4])
    ctx.heartbeat(3, want_fence=True)  # fenced: out of the ISR
    ctx.heartbeat(5, want_shut_down=True, offset=0)  # it leads w: in controlled shutdown, out of the ISRs
    assert ctx.image.broker(5).in_controlled_shutdown
    p = part(ctx, "t")
    assert p.leader == 1 and p.isr == (1, 2)
    n = len(ctx.log)
    sender = kwargs.pop("sender", 1)
    isr = kwargs.pop("isr", [1, 2])
    resp = alter(ctx, sender, "t", isr, **kwargs)
    assert resp.topics[0].partitions[0].error_code == code
    assert len(ctx.log) == n and part(ctx, "t") == p


def test_alter_partition_refuses_a_member_shutting_down_and_one_whose_dir_failed():
    ctx = cluster(3)
    d2, _ = two_dir_broker(ctx, 4)
    topic_with(ctx, "t", [1, 2, 4])
    topic_with(ctx, "u", [1, 2])
    place(ctx, 4, "t", d2)
    ctx.heartbeat(4, offline=[d2])  # its replica of t is in the failed dir: out of the ISR
    assert part(ctx, "t").isr == (1, 2)
    r = alter(ctx, 1, "t", [1, 2, 4])
    assert r.topics[0].partitions[0].error_code == E.INELIGIBLE_REPLICA
    # Broker 2 in controlled shutdown (it leads v): it leaves the ISRs and cannot come back.
    ctx.live_broker(5)
    topic_with(ctx, "v", [2, 5])
    ctx.heartbeat(2, want_shut_down=True, offset=0)
    assert ctx.image.broker(2).in_controlled_shutdown
    assert alter(ctx, 1, "u", [1, 2]).topics[0].partitions[0].error_code == E.INELIGIBLE_REPLICA


def test_alter_partition_recovery_state_goes_forward_only():
    ctx = cluster()
    topic_with(ctx, "t", [1, 2, 3], configs=None)
    t = ctx.image.topic("t")
    # Put the partition in RECOVERING as an unclean election would.
    write(ctx, PartitionChangeRecord(topic_id=t.topic_id, partition_id=0, isr=[1],
                                      leader_recovery_state=RECOVERING))
    assert part(ctx, "t").leader_recovery_state == RECOVERING
    assert alter(ctx, 1, "t", [1, 2], recovery=RECOVERING).topics[0].partitions[0].error_code == E.INVALID_REQUEST
    r = only(alter(ctx, 1, "t", [1], recovery=RECOVERING))  # still recovering, alone: nothing changes
    assert r.leader_recovery_state == RECOVERING
    r = only(alter(ctx, 1, "t", [1], recovery=RECOVERED))
    assert r.leader_recovery_state == RECOVERED and part(ctx, "t").leader_recovery_state == RECOVERED
    assert only(alter(ctx, 1, "t", [1, 2])).isr == [1, 2]


def test_alter_partition_from_a_leader_whose_own_replica_is_in_a_lost_dir():
    """The leader's own replica recorded in a lost dir (before the election that follows): it may not name
    itself in the ISR, and leaving itself out is refused first."""
    ctx = cluster()
    topic_with(ctx, "t", [1, 2, 3])
    t = ctx.image.topic("t")
    # Broker 1's replica recorded in a lost dir, without the election that would normally follow.
    write(ctx, PartitionChangeRecord(
        topic_id=t.topic_id, partition_id=0, directories=[DIR_LOST, *part(ctx, "t").directories[1:]]))
    resp = alter(ctx, 1, "t", [1, 2, 3])
    assert resp.topics[0].partitions[0].error_code == E.INELIGIBLE_REPLICA  # 1's own replica is offline
    # Without 1 in the request the ISR is refused (the leader must be in it): the order holds.
    assert alter(ctx, 1, "t", [2, 3]).topics[0].partitions[0].error_code == E.INVALID_REQUEST


# ------------------------------------------------------------------------------------------ elections


def test_fencing_the_leader_elects_from_the_isr_and_shrinks_it():
    ctx = cluster(elr=False)  # the ELR's version of this story: tests/controller/test_elr.py
    topic_with(ctx, "t", [1, 2, 3])
    epoch = part(ctx, "t").leader_epoch
    ctx.heartbeat(1, want_fence=True)
    p = part(ctx, "t")
    assert (p.leader, p.isr, p.leader_epoch) == (2, (2, 3), epoch + 1)
    ctx.heartbeat(2, want_fence=True)
    ctx.heartbeat(3, want_fence=True)
    p = part(ctx, "t")
    assert (p.leader, p.isr) == (-1, (3,))  # the last member stays in the ISR; the partition is offline
    ctx.heartbeat(1)  # 1 comes back, but is not in the ISR: no clean election
    assert part(ctx, "t").leader == -1
    ctx.heartbeat(3)  # the last ISR member comes back: it leads
    assert (part(ctx, "t").leader, part(ctx, "t").isr) == (3, (3,))


def test_controlled_shutdown_moves_leadership_to_an_isr_member_before_the_broker_goes():
    ctx = cluster()
    topic_with(ctx, "t", [1, 2, 3])
    r = ctx.heartbeat(1, want_shut_down=True, offset=0)
    assert not r.should_shut_down
    p = part(ctx, "t")
    assert (p.leader, p.isr) == (2, (2, 3)) and ctx.image.broker(1).in_controlled_shutdown
    ctx.heartbeat(2)
    ctx.heartbeat(3)
    assert ctx.heartbeat(1, want_shut_down=True).should_shut_down


def test_unclean_election_only_where_enabled():
    ctx = cluster(elr=False)
    topic_with(ctx, "clean", [1, 2, 3])
    topic_with(ctx, "dirty", [1, 2, 3], configs={"unclean.leader.election.enable": "true"})
    for name in ("clean", "dirty"):
        only(alter(ctx, 1, name, [1]))  # the followers fell behind
    ctx.heartbeat(1, want_fence=True)
    assert (part(ctx, "clean").leader, part(ctx, "clean").isr) == (-1, (1,))
    p = part(ctx, "dirty")
    assert (p.leader, p.isr, p.leader_recovery_state) == (2, (2,), RECOVERING)
    # The new leader recovers, then grows the ISR.
    r = only(alter(ctx, 2, "dirty", [2], recovery=RECOVERED))
    assert r.leader_recovery_state == RECOVERED
    # The cluster-wide dynamic default turns it on for "clean" too; the next unfencing elects there.
    write(ctx, ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="",
                            name="unclean.leader.election.enable", value="true"))
    ctx.heartbeat(2, want_fence=True)  # dirty's leader: 3, its only other live replica, takes over uncleanly
    assert (part(ctx, "dirty").leader, part(ctx, "dirty").isr) == (3, (3,))
    ctx.heartbeat(2)
    p = part(ctx, "clean")
    assert (p.leader, p.isr, p.leader_recovery_state) == (2, (2,), RECOVERING)
    # A topic override of false wins over the default.
    write(ctx, ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="dirty",
                            name="unclean.leader.election.enable", value="false"))
    ctx.heartbeat(3, want_fence=True)
    assert (part(ctx, "dirty").leader, part(ctx, "dirty").isr) == (-1, (3,))


def test_static_unclean_default_from_the_controllers_config():
    ctx = cluster(unclean_leader_election_enable=True)
    topic_with(ctx, "t", [1, 2])
    only(alter(ctx, 1, "t", [1]))
    ctx.heartbeat(1, want_fence=True)
    assert (part(ctx, "t").leader, part(ctx, "t").leader_recovery_state) == (2, RECOVERING)


def test_a_failed_dir_moves_leadership_to_an_isr_member_on_another_broker():
    ctx = cluster(2)
    d1, d2 = two_dir_broker(ctx, 3)
    topic_with(ctx, "a", [3, 1, 2])
    topic_with(ctx, "b", [3, 2, 1])
    place(ctx, 3, "a", d1)
    place(ctx, 3, "b", d2)
    ctx.heartbeat(3, offline=[d1])
    a, b = part(ctx, "a"), part(ctx, "b")
    assert (a.leader, a.isr) == (1, (1, 2))  # leadership moved to the next ISR member
    assert (b.leader, b.isr) == (3, (3, 2, 1))  # the broker's other dir keeps leading
    assert not ctx.image.broker(3).fenced


def test_a_failed_dir_holding_the_last_isr_member_elects_uncleanly_only_where_allowed():
    for unclean, leader in ((False, -1), (True, 1)):
        ctx = cluster(2, elr=False, unclean_leader_election_enable=unclean)
        d1, _ = two_dir_broker(ctx, 3)
        topic_with(ctx, "a", [3, 1])
        place(ctx, 3, "a", d1)
        only(alter(ctx, 3, "a", [3]))
        ctx.heartbeat(3, offline=[d1])
        assert (part(ctx, "a").leader, part(ctx, "a").isr) == (leader, (3,) if leader == -1 else (1,))
