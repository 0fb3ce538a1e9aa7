"""A delta costs what it changed: a batch touching k partitions of an n-partition topic makes its consumers (the
delta's local changes, the replica manager's sync) look at O(k) partitions, not n.  Work is counted (partition
reads through a counting mapping, replica state updates), never timed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import replace
from types import SimpleNamespace

from kjbod.broker.replication import ReplicaManager, ReplicationConfig
from kjbod.metadata import EMPTY_IMAGE, TOPIC_RESOURCE, MetadataDelta, MetadataImage, PartitionImage, replay
from kjbod.protocol.generated import ConfigRecord, PartitionChangeRecord, RemoveTopicRecord
from tests.metadata.test_replay import T1, T2, topic

N = 2000  # partitions of the big topic
CHANGED = (3, 700, 1999)  # the k partitions a batch changes


class CountingPartitions(Mapping[int, PartitionImage]):
    """A topic's partitions that count every partition read (lookups and iteration)."""

    def __init__(self, parts: Mapping[int, PartitionImage]) -> None:
        self._parts = dict(parts)
        self.reads = 0

    def __getitem__(self, pid: int) -> PartitionImage:
        self.reads += 1
        return self._parts[pid]

    def __iter__(self) -> Iterator[int]:
        for pid in self._parts:
            self.reads += 1
            yield pid

    def __len__(self) -> int:
        return len(self._parts)


def counted(image: MetadataImage, tid: uuid.UUID = T1) -> tuple[MetadataImage, CountingPartitions]:
    """`image` with topic `tid`'s partitions behind a counter."""
    t = image.topics_by_id[tid]
    parts = CountingPartitions(t.partitions)
    t = replace(t, partitions=parts)
    return replace(image, topics_by_id={**image.topics_by_id, tid: t},
                   topics_by_name={**image.topics_by_name, t.name: t}), parts


def leader_moves(pids: tuple[int, ...], leader: int) -> list[PartitionChangeRecord]:
    return [PartitionChangeRecord(partition_id=p, topic_id=T1, leader=leader) for p in pids]


def big_image(replicas: tuple[int, ...] = (1, 2)) -> MetadataImage:
    return replay(EMPTY_IMAGE, [*topic(partitions=N, replicas=replicas, dirs=()),
                                *topic(tid=T2, name="beta", partitions=4, replicas=replicas, dirs=())])


def test_the_delta_says_which_partitions_it_wrote():
    base = big_image()
    delta = MetadataDelta(base)
    delta.replay_all([*leader_moves(CHANGED, 2), ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="beta",
                                                             name="retention.ms", value="1000")])
    assert delta.changed_partitions() == {T1: set(CHANGED)}  # a config change writes no partition
    created = MetadataDelta(EMPTY_IMAGE)
    created.replay_all(topic(partitions=5))
    assert created.changed_partitions() == {T1: {0, 1, 2, 3, 4}}
    removed = MetadataDelta(base)
    removed.replay_all([*leader_moves((1,), 2), RemoveTopicRecord(topic_id=T1)])
    assert removed.changed_partitions() == {} and set(removed.removed_topics) == {T1}


def test_local_changes_look_at_the_changed_partitions_only():
    base, base_parts = counted(big_image())
    delta = MetadataDelta(base)
    delta.replay_all(leader_moves(CHANGED, 2))
    new, new_parts = counted(delta.apply())
    base_parts.reads = 0  # the one copy of the topic's partitions per delta is not what is measured
    changes = delta.local_changes(2, new)
    assert sorted(p.partition for _, p in changes.leaders) == list(CHANGED)
    assert not changes.creates and not changes.deletes and not changes.followers
    assert base_parts.reads + new_parts.reads <= 2 * len(CHANGED)


class FakeLog(SimpleNamespace):
    def assign_leader_epoch(self, epoch: int, start: int) -> None:
        self.epochs.append((epoch, start))


class FakeNode:
    """What the replica manager reads of a broker: its id, config, metadata and local logs (all online)."""

    def __init__(self, node_id: int, image: MetadataImage) -> None:
        self.node_id = node_id
        self.broker_epoch = 1
        self.metadata = image
        self.config = SimpleNamespace(listeners=[], controller_listener_names=())
        self.finds = 0
        logs: dict[tuple[str, int], FakeLog] = {}

        def find(name: str, pid: int) -> FakeLog:
            self.finds += 1
            return logs.setdefault((name, pid), FakeLog(online=True, auto_high_watermark=True,
                                                       checkpoint_high_watermark=None, high_watermark=0,
                                                       log_end_offset=0, epochs=[]))

        self.logs = SimpleNamespace(manager=SimpleNamespace(find=find))

    def notify_append(self, topic: str, partition: int) -> None:
        pass


async def test_the_replica_manager_syncs_the_changed_partitions_only():
    node = FakeNode(1, big_image())
    manager = ReplicaManager(node, ReplicationConfig())
    try:
        manager.sync(node.metadata)  # at start: every local replica
        assert len(manager.states) == N + 4
        assert node.finds >= N
        base, _ = counted(node.metadata)
        delta = MetadataDelta(base)
        delta.replay_all(leader_moves(CHANGED, 2))  # broker 1 follows these now
        new, parts = counted(delta.apply())
        node.metadata, node.finds = new, 0
        manager.sync(new, delta.changed_partitions(), delta.removed_topics.values())
        assert {tp[1] for tp, s in manager.states.items() if tp[0] == "alpha" and s.role == "follower"} == set(CHANGED)
        assert parts.reads <= 2 * len(CHANGED)
        assert node.finds <= 3 * len(CHANGED)
        # a removed topic: its replicas, and only those, are forgotten
        gone = MetadataDelta(new)
        gone.replay_all([RemoveTopicRecord(topic_id=T2)])
        after = gone.apply()
        manager.sync(after, gone.changed_partitions(), gone.removed_topics.values())
        assert len(manager.states) == N and all(tp[0] == "alpha" for tp in manager.states)
    finally:
        await manager.close()


class CountingConfigs(Mapping[str, str]):
    """A topic's configs that count every read, shared by all the topics of one image (one counter)."""

    def __init__(self, configs: Mapping[str, str], counter: list[int]) -> None:
        self._configs = dict(configs)
        self.counter = counter

    def __getitem__(self, key: str) -> str:
        self.counter[0] += 1
        return self._configs[key]

    def __iter__(self) -> Iterator[str]:
        self.counter[0] += 1
        return iter(self._configs)

    def __len__(self) -> int:
        return len(self._configs)


def test_a_config_change_refreshes_the_throttles_of_that_topic_only():
    """The replica manager's throttle lists: every topic's at the first sync, then per delta only the topics
    whose configs it changed (or that it removed), however many topics there are."""
    from kjbod.broker.replication.throttle import LEADER_REPLICAS

    tids = [uuid.UUID(int=100 + i) for i in range(200)]
    image = replay(EMPTY_IMAGE, [r for i, tid in enumerate(tids) for r in (
        *topic(tid=tid, name=f"t{i}", partitions=1, replicas=(1, 2), dirs=()),
        ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=f"t{i}", name="retention.ms", value="1000"))])
    reads = [0]
    by_name = {n: replace(t, configs=CountingConfigs(t.configs, reads)) for n, t in image.topics_by_name.items()}
    image = replace(image, topics_by_name=by_name, topics_by_id={t.topic_id: t for t in by_name.values()})
    node = FakeNode(1, image)
    manager = ReplicaManager(node, ReplicationConfig())
    manager.sync(image)  # at start: every topic's lists
    assert reads[0] >= len(tids)

    def publish(records) -> None:
        delta = MetadataDelta(node.metadata)
        delta.replay_all(records)
        node.metadata = delta.apply()
        reads[0] = 0
        manager.sync(node.metadata, delta.changed_partitions(), delta.removed_topics.values(),
                     delta.changed_topic_configs())
        assert reads[0] == 0  # the untouched topics' configs were not read (the changed one's are a new dict)

    publish([ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="t7", name=LEADER_REPLICAS, value="*")])
    assert manager.throttles.leader.throttled == {"t7": "*"}
    publish([ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="t9", name=LEADER_REPLICAS, value="0:1")])
    assert manager.throttles.leader.throttled == {"t7": "*", "t9": frozenset({0})}
    publish([RemoveTopicRecord(topic_id=tids[7])])
    assert manager.throttles.leader.throttled == {"t9": frozenset({0})}
