"""`kjbod log-dirs describe`'s BEHIND LEADER column: each follower's log end offset against its leader's, both
asked of the brokers themselves (ListOffsets with the debugging replica id)."""

from __future__ import annotations

from kjbod.admin import LogDirInfo, LogDirsByBroker, ReplicaInfo
from kjbod.admin.types import PartitionDescription, TopicDescription
from kjbod.cli.log_dirs import followers_behind


class FakeAdmin:
    def __init__(self, ends: dict[int, dict[tuple[str, int], int]]) -> None:
        self.ends = ends
        self.asked: list[tuple[int, list[tuple[str, int]]]] = []

    async def describe_topics(self, topics):
        return {"t": TopicDescription("t", None, False, (
            PartitionDescription(0, 1, 3, (1, 2, 3), (1, 2, 3), ()),
            PartitionDescription(1, 2, 0, (2,), (2,), ())))}

    async def replica_end_offsets(self, broker_id, partitions):
        self.asked.append((broker_id, list(partitions)))
        return {tp: e for tp, e in self.ends.get(broker_id, {}).items() if tp in partitions}


def replica(topic: str, partition: int) -> ReplicaInfo:
    return ReplicaInfo(topic, partition, 0, 0, False)


async def test_followers_are_measured_against_their_leaders_end_offset():
    result = LogDirsByBroker()
    for b in (1, 2, 3):
        result[b] = [LogDirInfo(b, "/d", None, None, 1, 1, [replica("t", 0)] + ([replica("t", 1)] if b == 2 else []))]
    admin = FakeAdmin({1: {("t", 0): 100}, 2: {("t", 0): 90}})  # broker 3 does not answer for t-0
    assert await followers_behind(admin, result) == {(2, "t", 0): 10}
    assert {b for b, _ in admin.asked} == {1, 2, 3}
    assert all(("t", 1) not in parts for _, parts in admin.asked)  # RF 1: nothing to compare
