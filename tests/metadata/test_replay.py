"""Replay: records in, image out (no I/O).  Every record type kjbod writes, the epochs Kafka's merge rules give,
records naming what the image lacks, local changes for a broker, and image_records rebuilding an image exactly."""

from __future__ import annotations

import uuid

from kjbod.metadata import (
    BROKER_RESOURCE,
    DIR_MIGRATING,
    DIR_UNASSIGNED,
    EMPTY_IMAGE,
    TOPIC_RESOURCE,
    MetadataDelta,
    image_records,
    replay,
)
from kjbod.protocol.generated import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from kjbod.protocol.generated.register_broker_record import BrokerEndpoint

T1 = uuid.UUID("11111111-1111-1111-1111-111111111111")
T2 = uuid.UUID("22222222-2222-2222-2222-222222222222")
D1, D2, D3 = (uuid.UUID(int=(i << 64) + 1000) for i in (1, 2, 3))
INC = uuid.UUID("33333333-3333-3333-3333-333333333333")


def topic(tid=T1, name="alpha", partitions=2, replicas=(1,), dirs=(D1,)):
    out = [TopicRecord(name=name, topic_id=tid)]
    out += [PartitionRecord(partition_id=p, topic_id=tid, replicas=list(replicas), isr=list(replicas),
                            leader=replicas[0], leader_epoch=0, partition_epoch=0, directories=list(dirs))
            for p in range(partitions)]
    return out


def register(bid, epoch, dirs=(D1,), fenced=True):
    return RegisterBrokerRecord(broker_id=bid, incarnation_id=INC, broker_epoch=epoch, fenced=fenced,
                                end_points=[BrokerEndpoint(name="PLAINTEXT", host="h", port=9000 + bid)],
                                rack="r1", log_dirs=list(dirs))


def test_topic_and_partitions():
    image = replay(EMPTY_IMAGE, topic(partitions=3), first_offset=10)
    t = image.topic("alpha")
    assert t is image.topic_by_id(T1)
    assert sorted(t.partitions) == [0, 1, 2]
    p = t.partitions[1]
    assert (p.replicas, p.isr, p.leader, p.leader_epoch, p.partition_epoch, p.directories) == (
        (1,), (1,), 1, 0, 0, (D1,))
    assert image.offset == 13


def test_partition_change_epochs_follow_kafkas_merge():
    image = replay(EMPTY_IMAGE, topic(replicas=(1, 2), dirs=(D1, D2)))
    # ISR change only: partition epoch +1, leader epoch unchanged (Leader = -2 means no change).
    image = replay(image, [PartitionChangeRecord(topic_id=T1, partition_id=0, isr=[1])])
    p = image.topic("alpha").partitions[0]
    assert (p.isr, p.leader, p.leader_epoch, p.partition_epoch) == ((1,), 1, 0, 1)
    # No leader: leader epoch +1 too.
    image = replay(image, [PartitionChangeRecord(topic_id=T1, partition_id=0, leader=-1)])
    p = image.topic("alpha").partitions[0]
    assert (p.leader, p.leader_epoch, p.partition_epoch, p.isr) == (-1, 1, 2, (1,))
    # Directories alone.
    image = replay(image, [PartitionChangeRecord(topic_id=T1, partition_id=0, directories=[D3, D2])])
    assert image.topic("alpha").partitions[0].directories == (D3, D2)
    # Replicas without directories: every dir becomes MIGRATING, as in Kafka.
    image = replay(image, [PartitionChangeRecord(topic_id=T1, partition_id=0, replicas=[2, 1])])
    assert image.topic("alpha").partitions[0].directories == (DIR_MIGRATING, DIR_MIGRATING)
    assert image.topic("alpha").partitions[1].partition_epoch == 0
    # LeaderRecoveryState: -1 keeps it, 1 RECOVERING (an unclean election), 0 RECOVERED.
    for state, expected in ((1, 1), (-1, 1), (0, 0)):
        image = replay(image, [PartitionChangeRecord(topic_id=T1, partition_id=0, leader_recovery_state=state)])
        assert image.topic("alpha").partitions[0].leader_recovery_state == expected


def test_replay_never_changes_the_image_it_started_from():
    before = replay(EMPTY_IMAGE, topic() + [ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="alpha",
                                                         name="retention.ms", value="1")])
    after = replay(before, [PartitionChangeRecord(topic_id=T1, partition_id=0, leader=-1),
                            ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="alpha", name="retention.ms",
                                         value="2"), register(1, 5)])
    assert before.topic("alpha").partitions[0].leader == 1
    assert dict(before.topic("alpha").configs) == {"retention.ms": "1"}
    assert before.brokers == {}
    assert after.topic("alpha").partitions[0].leader == -1
    assert dict(after.topic("alpha").configs) == {"retention.ms": "2"}
    # What the records did not touch is shared, not copied.
    assert after.topic("alpha").partitions[1] is before.topic("alpha").partitions[1]


def test_configs_per_resource_and_topic_removal_drops_its_configs():
    records = topic() + [
        ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="alpha", name="retention.ms", value="5"),
        ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name="k", value="default"),
        ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="1", name="k", value="mine"),
    ]
    image = replay(EMPTY_IMAGE, records)
    assert dict(image.resource_configs(BROKER_RESOURCE, "")) == {"k": "default"}
    assert dict(image.resource_configs(BROKER_RESOURCE, "1")) == {"k": "mine"}
    image = replay(image, [ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="1", name="k", value=None)])
    assert dict(image.resource_configs(BROKER_RESOURCE, "1")) == {}
    image = replay(image, [RemoveTopicRecord(topic_id=T1)])
    assert image.topic("alpha") is None and image.topic_by_id(T1) is None
    assert dict(image.resource_configs(TOPIC_RESOURCE, "alpha")) == {}
    # The name is free again: a new topic starts without the old overrides.
    image = replay(image, topic(tid=T2))
    assert image.topic("alpha").topic_id == T2 and dict(image.topic("alpha").configs) == {}


def test_records_for_unknown_things_are_dropped_and_counted():
    delta = MetadataDelta(EMPTY_IMAGE)
    delta.replay_all([
        PartitionRecord(topic_id=T1, partition_id=0, replicas=[1], isr=[1], leader=1),
        PartitionChangeRecord(topic_id=T1, partition_id=0, leader=-1),
        RemoveTopicRecord(topic_id=T1),
        BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=3, fenced=-1),
        UnregisterBrokerRecord(broker_id=1, broker_epoch=3),
    ])
    assert delta.dropped == 5
    assert delta.apply().topics_by_id == {}


def test_broker_registrations_fencing_and_unregistration():
    image = replay(EMPTY_IMAGE, [register(1, 7, dirs=(D1, D2))], first_offset=7)
    b = image.broker(1)
    assert (b.epoch, b.fenced, b.rack, b.log_dirs, b.record_offset) == (7, True, "r1", (D1, D2), 7)
    assert b.endpoint("PLAINTEXT").port == 9001 and not b.active
    image = replay(image, [BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=7, fenced=-1)])
    assert image.broker(1).active and image.unfenced_brokers() == [image.broker(1)]
    image = replay(image, [BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=7, in_controlled_shutdown=1)])
    assert not image.broker(1).active and not image.broker(1).fenced
    # LogDirs: a list replaces the dirs; an empty list means no change.
    image = replay(image, [BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=7, log_dirs=[D2])])
    assert image.broker(1).log_dirs == (D2,)
    image = replay(image, [BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=7, log_dirs=[])])
    assert image.broker(1).log_dirs == (D2,)
    assert image.dir_owner(D2) == 1 and image.dir_owner(D1) is None
    # Old-style fence records, and a change for another epoch, which is dropped.
    image = replay(image, [FenceBrokerRecord(id=1, epoch=7)])
    assert image.broker(1).fenced
    image = replay(image, [UnfenceBrokerRecord(id=1, epoch=8)])
    assert image.broker(1).fenced
    image = replay(image, [UnregisterBrokerRecord(broker_id=1, broker_epoch=6)])
    assert image.broker(1) is not None
    image = replay(image, [UnregisterBrokerRecord(broker_id=1, broker_epoch=7)])
    assert image.broker(1) is None


def test_producer_ids_and_features():
    image = replay(EMPTY_IMAGE, [ProducerIdsRecord(broker_id=1, broker_epoch=3, next_producer_id=1000),
                                 FeatureLevelRecord(name="metadata.version", feature_level=21),
                                 FeatureLevelRecord(name="x", feature_level=1)])
    assert image.next_producer_id == 1000
    assert dict(image.features) == {"metadata.version": 21, "x": 1}
    image = replay(image, [FeatureLevelRecord(name="x", feature_level=0)])
    assert dict(image.features) == {"metadata.version": 21}


def test_image_records_rebuild_the_image_exactly():
    records = (topic(partitions=3, replicas=(1, 2), dirs=(D1, D3)) + topic(tid=T2, name="beta", dirs=(DIR_UNASSIGNED,))
               + [register(1, 4, dirs=(D1, D2)), register(2, 9, dirs=(D3,), fenced=False),
                  BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=4, in_controlled_shutdown=1),
                  PartitionChangeRecord(topic_id=T1, partition_id=2, leader=2, isr=[2], leader_recovery_state=1),
                  ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="beta", name="retention.ms", value="9"),
                  ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name="k", value="v"),
                  ProducerIdsRecord(broker_id=2, broker_epoch=9, next_producer_id=2000),
                  FeatureLevelRecord(name="metadata.version", feature_level=21)])
    image = replay(EMPTY_IMAGE, records)
    rebuilt = replay(EMPTY_IMAGE, image_records(image))
    assert rebuilt.topics_by_name == image.topics_by_name
    assert rebuilt.topics_by_id == image.topics_by_id
    assert rebuilt.brokers == image.brokers
    assert rebuilt.configs == image.configs
    assert (rebuilt.next_producer_id, dict(rebuilt.features)) == (2000, {"metadata.version": 21})
    assert rebuilt.topic("alpha").partitions[2].leader_epoch == 1
    assert [p.leader_recovery_state for _, p in sorted(rebuilt.topic("alpha").partitions.items())] == [0, 0, 1]


def test_local_changes_for_one_broker():
    base = replay(EMPTY_IMAGE, topic(partitions=2, replicas=(1, 2), dirs=(D1, D3))
                  + topic(tid=T2, name="beta", partitions=1, replicas=(2,), dirs=(D3,)))
    delta = MetadataDelta(base)
    delta.replay_all([
        PartitionChangeRecord(topic_id=T1, partition_id=0, leader=2),             # 1 now follows
        PartitionChangeRecord(topic_id=T1, partition_id=1, directories=[D2, D3]),  # 1 re-homes
        RemoveTopicRecord(topic_id=T2),                                            # not 1's
        *topic(tid=uuid.UUID(int=5 << 64), name="gamma", partitions=1, replicas=(1,)),
    ])
    new = delta.apply()
    mine = delta.local_changes(1, new)
    assert [(t.name, p.partition) for t, p in mine.creates] == [("gamma", 0)]
    assert [(t.name, p.partition) for t, p in mine.leaders] == [("alpha", 1), ("gamma", 0)]
    assert [(t.name, p.partition) for t, p in mine.followers] == [("alpha", 0)]
    assert [(t.name, p.partition) for t, p in mine.rehomed] == [("alpha", 1)]
    assert mine.deletes == []
    theirs = delta.local_changes(2, new)
    assert [(t.name, p.partition) for t, p in theirs.deletes] == [("beta", 0)]
    assert [(t.name, p.partition) for t, p in theirs.leaders] == [("alpha", 0)]
    assert [(t.name, p.partition) for t, p in theirs.followers] == [("alpha", 1)]
    assert not MetadataDelta(new).local_changes(1, new)


def test_configs_recorded_before_their_topic_still_belong_to_it():
    """The single node's older logs could hold a topic's ConfigRecords before its TopicRecord: configs are kept
    per resource, so the order does not matter."""
    image = replay(EMPTY_IMAGE, [ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="alpha",
                                              name="retention.ms", value="3")] + topic())
    assert dict(image.topic("alpha").configs) == {"retention.ms": "3"}
