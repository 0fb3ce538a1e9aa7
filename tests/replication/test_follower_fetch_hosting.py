"""A follower's Fetch to a broker that cannot serve the partition from a log, in process: the answers of Kafka's
ReplicaManager.getPartitionOrError (asked first) and Partition.getLocalLog.

* the replica's log dir is offline: KAFKA_STORAGE_ERROR (NOT_LEADER_OR_FOLLOWER before Fetch v6);
* the image has the partition, this broker holds no log for it: NOT_LEADER_OR_FOLLOWER;
* the image does not have the partition: UNKNOWN_TOPIC_OR_PARTITION;
* this broker is a replica but not the leader: NOT_LEADER_OR_FOLLOWER;
* it led the partition and its log went away since: NOT_LEADER_OR_FOLLOWER (a Partition without a log).
"""

from __future__ import annotations

from types import SimpleNamespace

from kjbod.broker.replication import ReplicaManager, ReplicationConfig
from kjbod.broker.replication.hooks import prepare_follower_fetch
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import FetchRequest
from tests.replication.test_replica_manager import EPOCHS, AlterPartitions, Clock, FakeNode, image


def node_with(make_log, *, node_id: int = 1, img=None):
    plog = make_log("t-0")
    node = FakeNode(node_id, plog, img if img is not None else image())
    manager = ReplicaManager(node, ReplicationConfig(), alter_partition=AlterPartitions(), clock=Clock())
    manager.sync(node.metadata)
    return SimpleNamespace(node=node, manager=manager, plog=plog)


def check(n, partition: int = 0, *, replica: int = 2, epoch: int = 0) -> int:
    return n.manager.check_follower_fetch("t", partition, replica, EPOCHS[replica], epoch, 0, -1).error_code


def unhost(n) -> None:
    n.node.logs.manager.find = lambda t, p: None


async def test_the_leaders_answers_per_case(make_log):
    n = node_with(make_log)
    assert check(n) == 0
    assert check(n, partition=5) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # not in the image
    n.plog.io.mark_offline("write", n.plog.dir, OSError(5, "Input/output error"))
    assert check(n) == ErrorCode.KAFKA_STORAGE_ERROR
    # before the epoch checks, as Kafka asks where the partition is hosted first
    assert check(n, epoch=7) == ErrorCode.KAFKA_STORAGE_ERROR


async def test_a_leader_whose_log_went_away_is_not_leader_or_follower(make_log):
    """It led the partition, and the log is gone (deleted, moved away): the image still has the partition."""
    n = node_with(make_log)
    unhost(n)
    assert check(n) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert check(n, epoch=7) == ErrorCode.NOT_LEADER_OR_FOLLOWER  # hosting is asked before the epochs


async def test_a_broker_that_only_follows_or_holds_nothing_is_not_leader_or_follower(make_log):
    follower = node_with(make_log, node_id=2, img=image(leader=1))
    assert check(follower, replica=3) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    unhost(follower)
    assert check(follower, replica=3) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert check(follower, partition=5, replica=3) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_an_offline_dir_answers_old_fetch_versions_not_leader_or_follower(make_log):
    n = node_with(make_log)
    n.node.replication = n.manager
    n.plog.io.mark_offline("write", n.plog.dir, OSError(5, "Input/output error"))
    topic = FetchRequest.FetchTopic(topic="t", partitions=[FetchRequest.FetchPartition(
        partition=0, current_leader_epoch=0, fetch_offset=0, last_fetched_epoch=-1, partition_max_bytes=1024)])
    body = FetchRequest(replica_id=2, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=[topic])
    for version, code in ((5, ErrorCode.NOT_LEADER_OR_FOLLOWER), (6, ErrorCode.KAFKA_STORAGE_ERROR),
                          (12, ErrorCode.KAFKA_STORAGE_ERROR)):
        decided = prepare_follower_fetch(n.node, [("t", topic)], body, version, 2)
        assert decided[("t", 0)].error_code == code, version
