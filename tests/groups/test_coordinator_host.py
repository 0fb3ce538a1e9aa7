"""The partition hosting the group and transaction coordinators share (kjbod.broker.coordinator_host), in process.

The node here is a stand-in holding a metadata image and partition logs' offsets: what the hosting reads of a
broker.  The live tests (tests/groups, tests/txn) run the same code in real brokers.
"""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

from kjbod.broker.coordinator_host import CoordinatorHost, partition_for
from kjbod.metadata.image import PartitionImage, TopicImage
from kjbod.protocol.errors import ErrorCode

TOPIC = "__test_coordinator"


class _Node:
    node_id = 1
    stopping = False

    def __init__(self) -> None:
        self.topics: dict[str, TopicImage] = {}
        self.logs: dict[int, SimpleNamespace] = {}
        self.metadata = SimpleNamespace(topic=self.topics.get)

    def lead(self, leaders: dict[int, int]) -> None:
        self.topics[TOPIC] = TopicImage(TOPIC, uuid.uuid4(), {
            p: PartitionImage(p, (leader,), (leader,), leader) for p, leader in leaders.items()})

    def partition_log(self, topic: str, p: int) -> Any:
        if p not in self.logs:
            raise KeyError(f"{topic}-{p} is not here")
        return self.logs[p]


class _Host(CoordinatorHost):
    topic = TOPIC
    kind = "test"

    def __init__(self, node: Any) -> None:
        super().__init__(node, 4, 1)
        self.unloaded: list[int] = []

    def _unload(self, p: int) -> int:
        self.unloaded.append(p)
        return 0


def _key_on(p: int, partitions: int = 4) -> str:
    return next(k for k in (f"key-{i}" for i in range(1000)) if partition_for(k, partitions) == p)


def test_what_each_partition_answers_follows_the_image():
    node = _Node()
    host = _Host(node)
    assert host.status(_key_on(0)) == ErrorCode.NOT_COORDINATOR  # no topic yet: nothing is led here
    node.lead({0: 1, 1: 1, 2: 2, 3: 1})
    node.logs[0] = SimpleNamespace(log_start_offset=0, log_end_offset=0)  # empty: served at once
    node.logs[3] = SimpleNamespace(log_start_offset=5, log_end_offset=5)  # emptied by cleaning: served at once
    assert host.status(_key_on(0)) == ErrorCode.NONE
    assert host.status(_key_on(3)) == ErrorCode.NONE
    # Led here, but its log is still being made: the client is told to retry here, not to look elsewhere.
    assert host.status(_key_on(1)) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert host.status(_key_on(2)) == ErrorCode.NOT_COORDINATOR  # broker 2 leads it
    node.logs[1] = SimpleNamespace(log_start_offset=0, log_end_offset=0)
    assert host.status(_key_on(1)) == ErrorCode.NONE
    assert host.unmade == set()

    node.lead({0: 2, 1: 1, 2: 2, 3: 1})  # partition 0 moved away: its keys are dropped here
    assert host.status(_key_on(0)) == ErrorCode.NOT_COORDINATOR
    assert host.unloaded == [0]
    assert host.owned == {1, 3}


def test_a_partition_with_records_is_loaded_before_it_is_served():
    async def scenario() -> None:
        node = _Node()
        host = _Host(node)
        node.lead({0: 1, 1: 1, 2: 1, 3: 1})
        for p in range(4):
            node.logs[p] = SimpleNamespace(log_start_offset=0, log_end_offset=0)
        node.logs[2] = SimpleNamespace(log_start_offset=0, log_end_offset=10, log_dir="d")
        loads: list[int] = []
        gate = asyncio.Event()

        async def load(p: int) -> None:  # stands in for reading the log on the dir's worker
            loads.append(p)
            await gate.wait()
            host.loading.discard(p)
            host.owned.add(p)
            host._loaded[p].set()

        host._load = load  # type: ignore[method-assign]
        key = _key_on(2)
        assert host.status(key) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert host.status(key) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS  # one load, not one per request
        await asyncio.sleep(0)
        assert loads == [2]
        waiter = asyncio.ensure_future(host.wait_loaded(key, 5.0))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        gate.set()
        await asyncio.wait_for(waiter, 5.0)
        assert host.status(key) == ErrorCode.NONE

    asyncio.run(scenario())
