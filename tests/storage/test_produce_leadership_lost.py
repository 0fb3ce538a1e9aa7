"""A Produce whose append ran after this broker stopped leading the partition (the metadata moved the leadership
while the append waited for its dir's worker) is answered NOT_LEADER_OR_FOLLOWER, in process.

Found through a fatal OUT_OF_ORDER_SEQUENCE_NUMBER in the SIGSTOP live test: the stopped leader, resumed, took a
queued Produce as leader; the new metadata made it a follower before its dir's worker appended the batch, and
the answer, with no leader left to wait for replication (acks=all), was a success. The batch was only in the
former leader's log (its fetcher truncates it away), and the idempotent producer's next batch went to the new
leader, which had never seen this one: a sequence gap at the head of the producer's queue, fatal to librdkafka.
Kafka checks the leadership under the partition's lock as it appends; its answer is NOT_LEADER_OR_FOLLOWER."""

from __future__ import annotations

from kjbod.broker.replication import ReplicaManager, ReplicationConfig
from kjbod.protocol.errors import ErrorCode
from tests.replication.test_replica_manager import AlterPartitions, Clock, FakeNode, image
from tests.storage.test_dir_workers import _answers, _Node, _produce


class _Replication:
    """The replica manager's side of a Produce, leading t-0 until told otherwise."""

    def __init__(self) -> None:
        self.leading = True

    def check_acks_all(self, topic: str, partition: int) -> int:
        return 0

    def leader_appended(self, topic: str, partition: int) -> None:
        pass

    def must_wait(self, topic: str, partition: int, required_offset: int) -> bool:
        return False

    def lost_leadership(self, topic: str, partition: int) -> bool:
        return not self.leading


async def test_an_append_that_ran_after_the_leadership_moved_is_not_leader_or_follower(make_manager):
    lm = make_manager()
    lm.create_partition("t", 0, "3uI2M2AbQVO0J2cYw2xvOA")
    node = _Node(lm)
    node.replication = _Replication()
    assert _answers(await _produce(node, {"t": [0]})) == {("t", 0): (0, 0)}
    pending = _produce(node, {"t": [0]})  # checked as the leader's; appended on the dir's worker later
    node.replication.leading = False  # the metadata made this broker a follower meanwhile
    code, _offset = _answers(await pending)[("t", 0)]
    assert code == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_the_replica_manager_says_when_the_leadership_of_an_epoch_was_lost(plog):
    node = FakeNode(1, plog, image(leader_epoch=2))
    manager = ReplicaManager(node, ReplicationConfig(), alter_partition=AlterPartitions(), clock=Clock())
    manager.sync(node.metadata)
    assert not manager.lost_leadership("t", 0)
    assert not manager.lost_leadership("u", 0)  # not replicated here: a lone node's partition
    node.metadata = image(leader_epoch=3, partition_epoch=1)  # re-elected (a reassignment): still the leader
    manager.sync(node.metadata)
    assert not manager.lost_leadership("t", 0)
    node.metadata = image(leader=2, leader_epoch=4, partition_epoch=2)
    manager.sync(node.metadata)
    assert manager.lost_leadership("t", 0)
