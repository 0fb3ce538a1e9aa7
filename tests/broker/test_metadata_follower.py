"""The broker's metadata follower against an in-process controller serving real metadata batches."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kjbod.broker.metadata_follower import METADATA_TOPIC_ID, MetadataBatch, MetadataFollower
from kjbod.net.backoff import ExponentialBackoff
from kjbod.net.controller_channel import InProcessControllerChannel
from kjbod.protocol.generated import ConfigRecord, TopicRecord
from kjbod.protocol.generated.registry import APIS

from .fake_metadata_log import FakeMetadataController, leader_change_batch, metadata_batch

TOPICS = [TopicRecord(name=f"t{i}", topic_id=uuid.UUID(int=100 + i)) for i in range(5)]


class Follower:
    def __init__(self, controller: FakeMetadataController, **options: Any) -> None:
        self.batches: list[MetadataBatch] = []
        channel = InProcessControllerChannel(controller, request_timeout=1.0,
                                             backoff=ExponentialBackoff(0.01, 0.05))
        options.setdefault("backoff", ExponentialBackoff(0.01, 0.05))
        self.follower = MetadataFollower(channel, node_id=4, cluster_id="fake-cluster", on_batch=self.batches.append,
                                         **options)

    def records(self) -> list[Any]:
        return [r for b in self.batches for r in b.records]


@pytest.fixture
async def controller() -> FakeMetadataController:
    c = FakeMetadataController()
    await c.append(leader_change_batch(0, 1))
    await c.append(metadata_batch(TOPICS[:2], 1, 1))
    await c.append(metadata_batch([TOPICS[2], ConfigRecord(resource_type=2, resource_name="t2", name="a", value="b")],
                                  3, 1))
    return c


@pytest.fixture
async def follower(controller: FakeMetadataController) -> AsyncIterator[Follower]:
    f = Follower(controller)
    f.follower.start()
    yield f
    await f.follower.close()


async def test_committed_batches_are_handed_on_with_their_offsets(
        follower: Follower, controller: FakeMetadataController) -> None:
    await follower.follower.wait_for_offset(4, timeout=60)
    assert [(b.base_offset, b.last_offset, b.epoch, b.snapshot) for b in follower.batches] == [
        (1, 2, 1, False), (3, 4, 1, False)]  # the LeaderChange control batch is not handed on
    assert follower.records()[:3] == TOPICS[:3]
    assert follower.records()[3].value == "b"
    f = follower.follower
    assert (f.last_applied_offset, f.high_watermark, f.fetch_offset, f.last_fetched_epoch) == (4, 5, 5, 1)


async def test_fetch_requests_are_an_observers(follower: Follower, controller: FakeMetadataController) -> None:
    await follower.follower.wait_for_offset(4, timeout=60)
    first = controller.fetches[0]
    (topic,) = first.topics
    (p,) = topic.partitions
    assert (topic.topic_id, p.partition) == (METADATA_TOPIC_ID, 0)  # v13+ names the topic by id only
    # v15+ carries the node id in ReplicaState (the observer's id), the old ReplicaId field stays -1
    assert (first.replica_id, first.replica_state.replica_id, first.max_wait_ms, first.max_bytes) == (
        -1, 4, 500, 8 * 1024 * 1024)
    assert (p.fetch_offset, p.last_fetched_epoch) == (0, 0)  # an empty log
    assert [f.topics[0].partitions[0].fetch_offset for f in controller.fetches][-1] == 5


async def test_the_leader_epoch_is_learned_from_a_fenced_answer() -> None:
    c = FakeMetadataController(epoch=7)
    await c.append(metadata_batch(TOPICS[:1], 0, 7))
    f = Follower(c)
    f.follower.start()
    try:
        await f.follower.wait_for_offset(0, timeout=60)
        assert [r.topics[0].partitions[0].current_leader_epoch for r in c.fetches[:2]] == [0, 7]
        assert f.follower.leader_epoch == 7 and f.follower.leader_id == 3000
    finally:
        await f.follower.close()


async def test_long_poll_brings_new_batches(follower: Follower, controller: FakeMetadataController) -> None:
    await follower.follower.wait_for_offset(4, timeout=60)
    await controller.append(metadata_batch(TOPICS[3:], 5, 1))
    await follower.follower.wait_for_offset(6, timeout=60)
    assert follower.records()[-2:] == TOPICS[3:]


async def test_uncommitted_batches_wait_for_the_high_watermark(
        follower: Follower, controller: FakeMetadataController) -> None:
    f = follower.follower
    await f.wait_for_offset(4, timeout=60)
    await controller.append(metadata_batch(TOPICS[3:4], 5, 1), commit=False)
    await controller.append(metadata_batch(TOPICS[4:], 6, 1), commit=False)
    fetches = len(controller.fetches)
    while f.fetch_offset < 7 or len(controller.fetches) < fetches + 2:
        await asyncio.sleep(0.01)
    assert f.last_applied_offset == 4 and len(follower.batches) == 2  # received, not handed on
    controller.high_watermark = 6  # the first of them is committed
    await controller.notify()
    await controller.append(leader_change_batch(7, 1), commit=False)
    await f.wait_for_offset(5, timeout=60)
    assert follower.records()[-1] == TOPICS[3] and f.last_applied_offset == 5
    controller.high_watermark = 8
    await controller.append(metadata_batch(TOPICS[:1], 8, 1))
    await f.wait_for_offset(8, timeout=60)
    assert follower.records()[-2:] == [TOPICS[4], TOPICS[0]]


async def test_a_diverging_epoch_drops_what_was_received_past_it(
        follower: Follower, controller: FakeMetadataController) -> None:
    f = follower.follower
    await f.wait_for_offset(4, timeout=60)
    await controller.append(metadata_batch(TOPICS[3:4], 5, 1), commit=False)
    while f.fetch_offset < 6:
        await asyncio.sleep(0.01)
    # a new leader (epoch 2) never had offset 5: it truncates there and writes its own batch
    controller.batches.pop()
    controller.epoch = 2
    controller.diverge = (1, 5)
    await controller.append(metadata_batch(TOPICS[4:], 5, 2))
    await f.wait_for_offset(5, timeout=60)
    assert follower.records()[-1] == TOPICS[4]
    assert TOPICS[3] not in follower.records()
    assert f.last_fetched_epoch == 2


async def test_a_batch_cut_at_the_size_limit_is_fetched_again() -> None:
    c = FakeMetadataController()
    for i in range(5):
        await c.append(metadata_batch([TOPICS[i]], i, 1))
    f = Follower(c, max_bytes=150)  # room for about two batches per answer
    f.follower.start()
    try:
        await f.follower.wait_for_offset(4, timeout=60)
        assert f.records() == TOPICS
        assert len(c.fetches) >= 3
    finally:
        await f.follower.close()


async def test_a_start_offset_inside_a_batch_hands_on_only_what_follows() -> None:
    c = FakeMetadataController()
    await c.append(metadata_batch(TOPICS[:3], 0, 1))
    await c.append(metadata_batch(TOPICS[3:], 3, 1))
    f = Follower(c, start_offset=2, last_fetched_epoch=1)  # offsets 0 and 1 were applied before a restart
    f.follower.start()
    try:
        await f.follower.wait_for_offset(4, timeout=60)
        assert [(b.base_offset, b.last_offset) for b in f.batches] == [(2, 2), (3, 4)]
        assert f.records() == TOPICS[2:]
    finally:
        await f.follower.close()


async def test_a_corrupt_batch_is_refetched_not_applied(controller: FakeMetadataController) -> None:
    good = metadata_batch(TOPICS[3:4], 5, 1)
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    await controller.append(bytes(bad))
    f = Follower(controller)
    f.follower.start()
    try:
        await f.follower.wait_for_offset(4, timeout=60)
        fetches = len(controller.fetches)
        while len(controller.fetches) < fetches + 2:
            await asyncio.sleep(0.01)
        assert f.follower.last_applied_offset == 4 and f.follower.fetch_offset == 5
        controller.batches[-1] = (5, 5, good)  # the controller sends it right next time
        await f.follower.wait_for_offset(5, timeout=60)
        assert f.records()[-1] == TOPICS[3]
    finally:
        await f.follower.close()


async def test_controller_away_then_back(follower: Follower, controller: FakeMetadataController) -> None:
    f = follower.follower
    await f.wait_for_offset(4, timeout=60)
    controller.away = True
    fetches = f.fetches
    await controller.append(metadata_batch(TOPICS[3:4], 5, 1))
    await asyncio.sleep(0.1)
    controller.away = False
    await f.wait_for_offset(5, timeout=60)
    assert f.fetches > fetches


async def test_a_failing_callback_stops_the_follower_and_says_why(controller: FakeMetadataController) -> None:
    channel = InProcessControllerChannel(controller, request_timeout=1.0)

    def broken(batch: MetadataBatch) -> None:
        raise RuntimeError("publisher failed")

    f = MetadataFollower(channel, node_id=4, cluster_id="fake-cluster", on_batch=broken)
    f.start()
    with pytest.raises(RuntimeError, match="publisher failed"):
        await f.wait_for_offset(4, timeout=60)
    assert isinstance(f.failure, RuntimeError)
    await f.close()


async def test_async_callbacks_are_awaited(controller: FakeMetadataController) -> None:
    seen: list[int] = []

    async def publish(batch: MetadataBatch) -> None:
        await asyncio.sleep(0)
        seen.append(batch.last_offset)

    f = MetadataFollower(InProcessControllerChannel(controller), node_id=4, cluster_id="fake-cluster",
                         on_batch=publish)
    f.start()
    try:
        await f.wait_for_offset(4, timeout=60)
        assert seen == [2, 4]
    finally:
        await f.close()


@pytest.mark.skipif(59 not in APIS, reason="FetchSnapshot's codec comes with the metadata log work (issue 13)")
async def test_a_fetch_offset_before_the_log_start_loads_the_snapshot() -> None:
    from kjbod.storage.records import build_batch

    c = FakeMetadataController()
    snapshot = (build_batch([(b"\0\0\0\3", b"\0\0", [], 0)], base_offset=0, is_control=True)
                + metadata_batch(TOPICS[:3], 0, 1)
                + build_batch([(b"\0\0\0\4", b"\0\0", [], 0)], base_offset=3, is_control=True))
    c.snapshot = (10, 1, snapshot)
    c.log_start = 10
    await c.append(metadata_batch(TOPICS[3:], 10, 1))
    f = Follower(c, max_bytes=100)  # the snapshot comes in several chunks
    f.follower.start()
    try:
        await f.follower.wait_for_offset(11, timeout=60)
        first = f.batches[0]
        assert (first.snapshot, first.last_offset, first.records) == (True, 9, TOPICS[:3])
        assert f.records()[3:] == TOPICS[3:]
        assert len(c.snapshot_requests) >= 2
        assert [r.topics[0].partitions[0].position for r in c.snapshot_requests][0] == 0
    finally:
        await f.follower.close()
