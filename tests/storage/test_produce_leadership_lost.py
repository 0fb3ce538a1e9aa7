"""A Produce whose append ran after this broker stopped leading the partition (the metadata moved the leadership
while the append waited for its dir's worker) is answered NOT_LEADER_OR_FOLLOWER, in process.

Found through a fatal OUT_OF_ORDER_SEQUENCE_NUMBER in the SIGSTOP live test: the stopped leader, resumed, took a
queued Produce as leader; the new metadata made it a follower before its dir's worker appended the batch, and
the answer, with no leader left to wait for replication (acks=all), was a success. The batch was only in the
former leader's log (its fetcher truncates it away), and the idempotent producer's next batch went to the new
leader, which had never seen this one: a sequence gap at the head of the producer's queue, fatal to librdkafka.
Kafka checks the leadership under the partition's lock as it appends; its answer is NOT_LEADER_OR_FOLLOWER.

The same answer when the replica itself went meanwhile (a completed reassignment moved the partition off this
broker): the replica manager forgets such a partition, and the answer took "no replication state" for a lone
node's partition and acknowledged an acks=all record that only the leaving replica had (the live reassignment
test once read 488 of 489 acknowledged values back). The state is now taken at the hand-off and looked at after."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kjbod.broker.replication import ReplicaManager, ReplicationConfig
from kjbod.broker.replication.hooks import lost_leadership
from kjbod.broker.replication.partition import FOLLOWER, LEADER
from kjbod.metadata import MetadataImage
from kjbod.metadata.image import PartitionImage, TopicImage
from kjbod.protocol.errors import ErrorCode
from tests.replication.test_replica_manager import EPOCHS, TOPIC_ID, AlterPartitions, Clock, FakeNode, image
from tests.storage.test_dir_workers import _answers, _Node, _produce


class _Replication:
    """The replica manager's side of a Produce, leading t-0 until told otherwise."""

    def __init__(self) -> None:
        self.state = SimpleNamespace(role=LEADER)

    def check_acks_all(self, topic: str, partition: int) -> int:
        return 0

    def leader_appended(self, topic: str, partition: int) -> None:
        pass

    def must_wait(self, topic: str, partition: int, required_offset: int) -> bool:
        return False

    def leader_state(self, topic: str, partition: int) -> SimpleNamespace:
        return self.state


async def test_an_append_that_ran_after_the_leadership_moved_is_not_leader_or_follower(make_manager):
    lm = make_manager()
    lm.create_partition("t", 0, "3uI2M2AbQVO0J2cYw2xvOA")
    node = _Node(lm)
    node.replication = _Replication()
    assert _answers(await _produce(node, {"t": [0]})) == {("t", 0): (0, 0)}
    pending = _produce(node, {"t": [0]})  # checked as the leader's; appended on the dir's worker later
    node.replication.state.role = FOLLOWER  # the metadata made this broker a follower meanwhile
    code, _offset = _answers(await pending)[("t", 0)]
    assert code == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_the_replica_manager_says_when_the_leadership_of_an_epoch_was_lost(plog):
    node = FakeNode(1, plog, image(leader_epoch=2))
    manager = ReplicaManager(node, ReplicationConfig(), alter_partition=AlterPartitions(), clock=Clock())
    manager.sync(node.metadata)
    taken = manager.leader_state("t", 0)  # as a Produce hands its append over
    assert not lost_leadership(taken)
    assert not lost_leadership(manager.leader_state("u", 0))  # not replicated here: a lone node's partition
    node.metadata = image(leader_epoch=3, partition_epoch=1)  # re-elected (a reassignment): still the leader
    manager.sync(node.metadata)
    assert not lost_leadership(taken)
    node.metadata = image(leader=2, leader_epoch=4, partition_epoch=2)
    manager.sync(node.metadata)
    assert lost_leadership(taken)
    node.metadata = image(leader=1, leader_epoch=5, partition_epoch=3)  # leading again, in a new epoch
    manager.sync(node.metadata)
    assert not lost_leadership(manager.leader_state("t", 0))
    taken = manager.leader_state("t", 0)
    node.metadata = _moved_away()  # the replica moved off this broker: forgotten
    manager.sync(node.metadata)
    assert manager.leader_state("t", 0) is None
    assert lost_leadership(taken)


class _ReplicatedNode(_Node):
    """A broker of a cluster (node 1) over a real LogManager, with the real replica manager."""

    node_id = 1
    broker_epoch = EPOCHS[1]
    config = SimpleNamespace(listeners=[], controller_listener_names=())

    def notify_high_watermark(self, topic: str, partition: int) -> None:
        pass


def _moved_away(leader: int = 2) -> MetadataImage:
    """t-0 reassigned to brokers 2 and 3 (the reassignment completed): broker 1 no longer a replica."""
    p = PartitionImage(0, (2, 3), (2, 3), leader, 1, 5)
    topic = TopicImage("t", TOPIC_ID, {0: p}, {"min.insync.replicas": "2"})
    return MetadataImage(topics_by_name={"t": topic}, topics_by_id={TOPIC_ID: topic}, brokers=image().brokers)


@pytest.mark.parametrize("acks", [-1, 1])
async def test_an_append_that_ran_after_the_replica_was_reassigned_away_is_not_acknowledged(make_manager, acks):
    """Found by the live reassignment test (one acks=all value of 489 never read back): the metadata that
    completed a reassignment removed this broker's replica while a Produce's append waited for the dir's worker.
    The replica manager forgot the partition, so the answer saw no replication state (as on a lone node's
    partition): no leadership lost, nothing to wait for, a success for a record only the leaving replica had,
    deleted moments later.  Kafka refuses it (the partition is gone when its append or DelayedProduce looks)."""
    lm = make_manager()
    lm.create_partition("t", 0, "3uI2M2AbQVO0J2cYw2xvOA")
    node = _ReplicatedNode(lm)
    node.metadata = image(isr=(1, 2, 3))
    node.replication = ReplicaManager(node, ReplicationConfig(), alter_partition=AlterPartitions(), clock=Clock())
    node.replication.sync(node.metadata)
    pending = _produce(node, {"t": [0]}, acks=acks)  # checked as the leader's; appended on the dir's worker later
    node.metadata = _moved_away()
    node.replication.sync(node.metadata)  # the replica is no longer this broker's: forgotten
    code, _offset = _answers(await pending)[("t", 0)]
    assert code == ErrorCode.NOT_LEADER_OR_FOLLOWER
