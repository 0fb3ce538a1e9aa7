"""What a broker's Metadata answer says of replicated partitions (kjbod/broker/handlers/metadata.py): ISR,
offline replicas as Kafka's KRaftMetadataCache computes them, and LEADER_NOT_AVAILABLE."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kjbod.broker.handlers.metadata import describe_topic
from kjbod.metadata import DIR_LOST, EMPTY_IMAGE, MetadataImage, replay
from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import PartitionRecord, RegisterBrokerRecord, TopicRecord
from kjbod.protocol.generated.register_broker_record import BrokerEndpoint

TID = uuid.UUID(int=1 << 100)


def dir_of(b):
    return uuid.UUID(int=(b << 64) + 500)


def image(partitions, fenced=(), listeners=None) -> MetadataImage:
    records = []
    for b in (1, 2, 3):
        records.append(RegisterBrokerRecord(
            broker_id=b, broker_epoch=b, incarnation_id=uuid.UUID(int=b), fenced=b in fenced, log_dirs=[dir_of(b)],
            end_points=[BrokerEndpoint(name=n, host="127.0.0.1", port=9000 + b)
                        for n in (listeners or {}).get(b, ["PLAINTEXT"])]))
    records.append(TopicRecord(name="t", topic_id=TID))
    for i, (replicas, isr, leader, dirs) in enumerate(partitions):
        records.append(PartitionRecord(partition_id=i, topic_id=TID, replicas=replicas, isr=isr, leader=leader,
                                       leader_epoch=3, partition_epoch=3,
                                       directories=dirs or [dir_of(r) for r in replicas]))
    return replay(EMPTY_IMAGE, records)


@dataclass
class Node:
    metadata: MetadataImage
    node_id: int = 1
    failed_here: set = field(default_factory=set)

    def partition_online(self, topic, partition):
        return (topic, partition) not in self.failed_here


def answer(node, listener="PLAINTEXT"):
    return [(p.error_code, p.leader_id, p.isr_nodes, p.offline_replicas)
            for p in describe_topic(node, node.metadata.topic("t"), listener).partitions]


def test_isr_and_offline_replicas():
    img = image([([1, 2, 3], [1, 2], 1, None),
                 ([2, 3, 1], [2, 3], 2, [dir_of(2), DIR_LOST, dir_of(1)]),
                 ([3, 2], [3], 3, None),
                 ([2, 3], [2], -1, None)], fenced={3})
    assert answer(Node(img)) == [
        (0, 1, [1, 2], [3]),  # broker 3 is fenced
        (0, 2, [2, 3], [3]),  # ... and its replica is in a lost dir
        (0, 3, [3], [3]),  # a fenced leader still shows (Kafka: the leader needs only an endpoint)
        (E.LEADER_NOT_AVAILABLE, -1, [2], [3]),
    ]


def test_this_brokers_failed_dir_takes_its_replica_and_its_leadership_offline():
    img = image([([1, 2], [1, 2], 1, None), ([2, 1], [2, 1], 2, None)])
    node = Node(img, failed_here={("t", 0), ("t", 1)})
    assert answer(node) == [(E.LEADER_NOT_AVAILABLE, -1, [1, 2], [1]),  # it leads from the failed dir
                            (0, 2, [2, 1], [1])]  # the leader is elsewhere: only the replica here is offline


def test_a_leader_without_this_listener_is_not_available():
    img = image([([2, 1], [2, 1], 2, None)], listeners={2: ["OTHER"]})
    assert answer(Node(img)) == [(E.LEADER_NOT_AVAILABLE, -1, [2, 1], [2])]
