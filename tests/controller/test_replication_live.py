"""AlterPartition and ElectLeaders on a controller-only `kjbod serve`'s controller listener, as a broker-only node
sends them: raw requests from two registered brokers against a replication factor 2 topic."""

from __future__ import annotations

import uuid

from broker_features import SUPPORTED_FEATURES
from datapath.support import RawClient

from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import (
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreateTopicsRequest,
    ElectLeadersRequest,
)
from kjbod.protocol.generated.alter_partition_request import BrokerState, PartitionData, TopicData
from kjbod.protocol.generated.broker_registration_request import Listener
from kjbod.protocol.generated.create_topics_request import CreatableReplicaAssignment, CreatableTopic
from kjbod.protocol.generated.elect_leaders_request import TopicPartitions

from .test_controller_only_live import controller_only


def test_alter_partition_and_elect_leaders_on_the_controller_listener(tmp_path):
    server = controller_only(tmp_path)
    try:
        with RawClient(server.host, server.port) as ctl:
            epochs = {}
            for b in (1, 2):
                reg = ctl.call(BrokerRegistrationRequest(
                    features=SUPPORTED_FEATURES, broker_id=b, cluster_id=server.cluster_id, incarnation_id=uuid.uuid4(), log_dirs=[uuid.uuid4()],
                    listeners=[Listener(name="PLAINTEXT", host="127.0.0.1", port=9092 + b)]), 4)
                assert reg.error_code == 0
                epochs[b] = reg.broker_epoch
                hb = ctl.call(BrokerHeartbeatRequest(broker_id=b, broker_epoch=reg.broker_epoch,
                                                     current_metadata_offset=1 << 40), 1)
                assert (hb.error_code, hb.is_fenced) == (0, False)
            created = ctl.call(CreateTopicsRequest(timeout_ms=1000, topics=[CreatableTopic(
                name="t", num_partitions=-1, replication_factor=-1,
                assignments=[CreatableReplicaAssignment(partition_index=0, broker_ids=[1, 2])])]), 7)
            (t,) = created.topics
            assert t.error_code == 0 and t.replication_factor == 2

            def alter(isr, *, broker_epoch=None, leader_epoch=0, partition_epoch=0):
                return ctl.call(AlterPartitionRequest(
                    broker_id=1, broker_epoch=epochs[1] if broker_epoch is None else broker_epoch,
                    topics=[TopicData(topic_id=t.topic_id, partitions=[PartitionData(
                        partition_index=0, leader_epoch=leader_epoch, partition_epoch=partition_epoch,
                        new_isr_with_epochs=[BrokerState(broker_id=b, broker_epoch=epochs[b]) for b in isr])])]), 3)

            assert alter([1], broker_epoch=12345).error_code == E.STALE_BROKER_EPOCH
            shrunk = alter([1])
            (p,) = shrunk.topics[0].partitions
            assert (shrunk.error_code, p.error_code, p.leader_id, p.isr, p.leader_epoch, p.partition_epoch) == (
                0, 0, 1, [1], 0, 1)
            assert alter([1, 2]).topics[0].partitions[0].error_code == E.INVALID_UPDATE_VERSION  # epoch 0 is stale
            grown = alter([1, 2], partition_epoch=1).topics[0].partitions[0]
            assert (grown.error_code, grown.isr, grown.partition_epoch) == (0, [1, 2], 2)
            elected = ctl.call(ElectLeadersRequest(election_type=0, timeout_ms=1000, topic_partitions=[
                TopicPartitions(topic="t", partitions=[0])]), 2)
            assert elected.replica_election_results[0].partition_result[0].error_code == E.ELECTION_NOT_NEEDED
    finally:
        server.stop()
