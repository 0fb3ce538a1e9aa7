"""Hand-made bad requests against a replicated cluster (a controller and three brokers, two log dirs each), on
the brokers' listener and on the controller's, each answered with the code Apache Kafka answers it with; raw
requests encoded by kjbod's own codecs, so each test sees the exact code a client would. At the end no node's
log may hold a traceback (three_brokers checks).

What these pin, which the in-process tests of the same logic do not reach through a real listener:

* CreateTopics: a replication factor above the registered brokers, 0 or -2 is INVALID_REPLICATION_FACTOR with
  Kafka's message; explicit assignments naming an unknown, a negative or a repeated broker, or none, are
  INVALID_REPLICA_ASSIGNMENT (ReplicationControlManager's checks), on either listener;
* OffsetForLeaderEpoch with negative epochs: -1 (UNDEFINED_EPOCH) answers (-1, -1); an epoch below every epoch
  the leader knows answers that epoch and the start offset of the first known one (LeaderEpochFileCache's
  endOffsetFor); a negative current leader epoch other than -1 is below the leader's: FENCED_LEADER_EPOCH;
* a follower Fetch whose replica id is no replica of the partition (a registered broker, or no broker) is
  NOT_LEADER_OR_FOLLOWER with no records and high watermark -1, at v12 (replica id in the body) and v15
  (ReplicaState), as Kafka's Partition.fetchRecords answers a follower it does not know;
* AlterPartition sent by hand on the controller listener from a broker that is not registered is
  STALE_BROKER_EPOCH (ClusterControlManager.checkBrokerEpoch), with no partition answered.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import AlterPartitionRequest, CreateTopicsRequest, FetchRequest
from tests.cluster.conftest import Cluster
from tests.datapath.support import RawClient, batch, metadata, offset_for_leader_epoch, produce
from tests.robustness.cluster_helpers import create_assigned, raw, three_brokers

pytestmark = pytest.mark.slow

NOT_SET = -1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with three_brokers(tmp_path_factory.mktemp("hostile")) as running:
        yield running


def controller(cluster: Cluster) -> RawClient:
    return RawClient("127.0.0.1", cluster.port("controller"), timeout=30)


def create(client: RawClient, name: str, rf: int = NOT_SET, assignments: list[list[int]] | None = None) -> Any:
    req = CreateTopicsRequest(timeout_ms=10_000, topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=NOT_SET if assignments else 1, replication_factor=rf,
        assignments=[CreateTopicsRequest.CreatableReplicaAssignment(partition_index=i, broker_ids=b)
                     for i, b in enumerate(assignments or [])])])
    (result,) = client.call(req, 7).topics
    return result.error_code, result.error_message


@pytest.mark.parametrize("listener", ["broker", "controller"])
def test_create_topics_with_impossible_replication_is_refused_as_kafka(cluster, listener):
    rf_message = "Replication factor must be larger than 0, or -1 to use the default value."
    with (raw(cluster, 1) if listener == "broker" else controller(cluster)) as client:
        assert create(client, f"rf4-{listener}", rf=4) == (
            E.INVALID_REPLICATION_FACTOR, "Unable to replicate the partition 4 time(s): The target replication "
            "factor of 4 cannot be reached because only 3 broker(s) are registered.")
        assert create(client, f"rf0-{listener}", rf=0) == (E.INVALID_REPLICATION_FACTOR, rf_message)
        assert create(client, f"rfm2-{listener}", rf=-2) == (E.INVALID_REPLICATION_FACTOR, rf_message)
        for replicas, message in (
                ([1, 99], "The manual partition assignment includes broker 99, but no such broker is registered."),
                ([-1, 2], "The manual partition assignment includes broker -1, but no such broker is registered."),
                ([1, 1], "The manual partition assignment includes the broker 1 more than once."),
                ([], "The manual partition assignment includes an empty replica list.")):
            assert create(client, f"asg-{listener}", assignments=[replicas]) == (
                E.INVALID_REPLICA_ASSIGNMENT, message), replicas
    with raw(cluster, 1) as client:  # none of them was created
        names = {t.name for t in metadata(client, None).topics}
    assert not {n for n in names if n.startswith(("rf", "asg-"))}, names


def test_offset_for_leader_epoch_with_negative_epochs_answers_as_kafkas_epoch_cache(cluster):
    create_assigned(cluster, "negepoch", [1, 2, 3])
    with raw(cluster, 1) as client:
        assert produce(client, "negepoch", 0, batch([b"a", b"b"]), acks=-1).error_code == 0
        undefined = offset_for_leader_epoch(client, "negepoch", 0, -1)
        assert (undefined.error_code, undefined.leader_epoch, undefined.end_offset) == (E.NONE, -1, -1)
        below = offset_for_leader_epoch(client, "negepoch", 0, -5)
        assert (below.error_code, below.leader_epoch, below.end_offset) == (E.NONE, -5, 0)
        fenced = offset_for_leader_epoch(client, "negepoch", 0, 0, current_leader_epoch=-5)
        assert fenced.error_code == E.FENCED_LEADER_EPOCH
        assert offset_for_leader_epoch(client, "negepoch", 7, 0).error_code == E.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("version", [12, 15])
@pytest.mark.parametrize("replica_id", [3, 99])
def test_a_follower_fetch_from_no_replica_of_the_partition_is_not_leader_or_follower(cluster, version, replica_id):
    topic = f"nonreplica-{version}-{replica_id}"
    create_assigned(cluster, topic, [1, 2])
    with raw(cluster, 1) as client:
        assert produce(client, topic, 0, batch([b"x"]), acks=-1).error_code == 0
        (described,) = metadata(client, [topic]).topics  # from v13 a Fetch names topics by id
        who = (dict(replica_id=replica_id) if version < 15 else
               dict(replica_id=-1, replica_state=FetchRequest.ReplicaState(replica_id=replica_id, replica_epoch=-1)))
        req = FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, topics=[
            FetchRequest.FetchTopic(topic=topic, topic_id=described.topic_id, partitions=[FetchRequest.FetchPartition(
                partition=0, fetch_offset=0, current_leader_epoch=-1, partition_max_bytes=1 << 20)])], **who)
        resp = client.call(req, version)
    assert resp.error_code == E.NONE
    [[answer]] = [t.partitions for t in resp.responses]
    assert (answer.error_code, answer.high_watermark, answer.records or b"") == (E.NOT_LEADER_OR_FOLLOWER, -1, b"")


def test_alter_partition_from_a_broker_that_is_not_registered_is_a_stale_broker_epoch(cluster):
    create_assigned(cluster, "byhand", [1, 2])
    with raw(cluster, 1) as client:
        (t,) = metadata(client, ["byhand"]).topics
    req = AlterPartitionRequest(broker_id=77, broker_epoch=1, topics=[AlterPartitionRequest.TopicData(
        topic_id=t.topic_id or uuid.UUID(int=0), partitions=[AlterPartitionRequest.PartitionData(
            partition_index=0, leader_epoch=0, new_isr_with_epochs=[AlterPartitionRequest.BrokerState(broker_id=77)],
            partition_epoch=0)])])
    with controller(cluster) as client:
        resp = client.call(req, 3)
    assert (resp.error_code, resp.topics) == (E.STALE_BROKER_EPOCH, [])
