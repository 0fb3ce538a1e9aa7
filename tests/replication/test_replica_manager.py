"""The replica manager in process: a leader's checks on follower fetches, the HW rule, acks=all, ISR changes
through AlterPartition, and a follower's handling of its leader's answers (truncation included).  Images are
built from records directly (RF 3 on brokers 1, 2, 3), logs are real PartitionLogs."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from kjbod.broker.replication import ReplicaManager, ReplicationConfig
from kjbod.broker.replication.fetcher import Fetcher, FetchState
from kjbod.metadata import MetadataImage
from kjbod.metadata.image import BrokerRegistration, PartitionImage, TopicImage
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated.alter_partition_response import AlterPartitionResponse
from kjbod.protocol.generated.alter_partition_response import PartitionData as AltPart
from kjbod.protocol.generated.alter_partition_response import TopicData as AltTopic
from kjbod.protocol.generated.fetch_response import EpochEndOffset
from kjbod.protocol.generated.fetch_response import PartitionData as FetchPart
from tests.replication.conftest import batch

TOPIC_ID = uuid.UUID(int=77)
EPOCHS = {1: 101, 2: 102, 3: 103}


def image(*, leader: int = 1, leader_epoch: int = 0, partition_epoch: int = 0, isr=(1, 2, 3), configs=None,
          fenced: frozenset[int] = frozenset()) -> MetadataImage:
    p = PartitionImage(0, (1, 2, 3), tuple(isr), leader, leader_epoch, partition_epoch)
    topic = TopicImage("t", TOPIC_ID, {0: p}, configs if configs is not None else {"min.insync.replicas": "2"})
    brokers = {b: BrokerRegistration(b, e, uuid.uuid4(), fenced=b in fenced) for b, e in EPOCHS.items()}
    return MetadataImage(topics_by_name={"t": topic}, topics_by_id={TOPIC_ID: topic}, brokers=brokers)


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


class FakeNode:
    def __init__(self, node_id: int, plog: Any, img: MetadataImage) -> None:
        self.node_id = node_id
        self.broker_epoch = EPOCHS[node_id]
        self.metadata = img
        self.config = SimpleNamespace(listeners=[], controller_listener_names=())
        self.logs = SimpleNamespace(manager=SimpleNamespace(find=lambda t, p: plog if (t, p) == ("t", 0) else None,
                                                            get_future=lambda t, p: None,
                                                            worker=lambda path: None))  # no dir workers
        self.appends = 0
        self.hw_moves = 0

    def notify_append(self, topic: str, partition: int) -> None:
        self.appends += 1

    def notify_high_watermark(self, topic: str, partition: int) -> None:
        self.hw_moves += 1


class AlterPartitions:
    """The controller's side of AlterPartition, as a list of requests and a scripted answer."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.answer: Any = None

    async def __call__(self, build):
        self.requests.append(build(3))
        return self.answer(self.requests[-1]) if self.answer else AlterPartitionResponse(error_code=0)


@pytest.fixture
def leader(make_log):
    clock = Clock()
    plog = make_log("t-0")
    node = FakeNode(1, plog, image())
    alter = AlterPartitions()
    manager = ReplicaManager(node, ReplicationConfig(lag_time_max_ms=30_000), alter_partition=alter, clock=clock)
    manager.sync(node.metadata)
    return SimpleNamespace(manager=manager, plog=plog, node=node, clock=clock, alter=alter)


def fetch(lead, replica: int, offset: int, *, epoch: int = 0, last_epoch: int = -1, broker_epoch: int | None = None):
    """A follower's fetch as the Fetch handler passes it to the leader (ReplicaManager.follower_fetch: the checks,
    then the follower's position when they pass); the verdict, which check_follower_fetch gives too."""
    be = EPOCHS.get(replica, -1) if broker_epoch is None else broker_epoch
    check = lead.manager.check_follower_fetch("t", 0, replica, be, epoch, offset, last_epoch)
    passed = lead.manager.follower_fetch("t", 0, replica, be, epoch, offset, last_epoch)
    assert (passed.error_code, passed.diverging) == (check.error_code, check.diverging)
    return passed


async def test_a_new_leader_starts_its_epoch_and_owns_the_hw(leader):
    assert leader.plog.auto_high_watermark is False
    leader.plog.append(batch(3), leader_epoch=0)
    leader.manager.leader_appended("t", 0)
    assert leader.plog.high_watermark == 0  # the followers have not fetched it
    assert leader.plog.leader_epochs.entries == [(0, 0)]


async def test_the_hw_is_the_smallest_isr_end_offset_and_never_goes_back(leader):
    leader.plog.append(batch(5), leader_epoch=0)
    assert fetch(leader, 2, 5).error_code == 0
    assert leader.plog.high_watermark == 0
    fetch(leader, 3, 3)
    assert leader.plog.high_watermark == 3
    fetch(leader, 3, 5)
    assert leader.plog.high_watermark == 5
    assert leader.node.hw_moves == 2  # consumers waiting at the old HW are woken, at each move


async def test_bad_follower_fetches_get_kafkas_errors(leader):
    leader.manager.sync(image(leader_epoch=4, partition_epoch=4))
    assert fetch(leader, 2, 0, epoch=3).error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert fetch(leader, 2, 0, epoch=5).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert fetch(leader, 9, 0, epoch=4).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert fetch(leader, 9, 0, epoch=-1).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert fetch(leader, 2, 0, epoch=4, broker_epoch=50).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert fetch(leader, 2, 7, epoch=4).error_code == ErrorCode.OFFSET_OUT_OF_RANGE


async def test_a_follower_ahead_of_the_leaders_epoch_is_told_where_to_truncate(leader):
    leader.plog.append(batch(4), leader_epoch=0)  # epoch 0: offsets 0-3
    leader.manager.sync(image(leader_epoch=2, partition_epoch=2))
    leader.plog.append(batch(2), leader_epoch=2)  # epoch 2: offsets 4-5
    # The follower has epoch 1 up to offset 7, which this leader never saw: keep up to where epoch 0 ended.
    check = fetch(leader, 2, 7, epoch=2, last_epoch=1)
    assert check.diverging == (0, 4)
    # A follower whose last epoch is this leader's but who claims more than the LEO
    assert fetch(leader, 3, 9, epoch=2, last_epoch=2).diverging == (2, 6)
    assert fetch(leader, 3, 6, epoch=2, last_epoch=2).diverging is None


async def test_acks_all_waits_for_the_hw_then_answers(leader):
    leader.plog.append(batch(2), leader_epoch=0)
    waiting = asyncio.ensure_future(leader.manager.wait_for_replicas("t", 0, 2, 30))
    await asyncio.sleep(0)
    assert not waiting.done()
    fetch(leader, 2, 2)
    await asyncio.sleep(0)
    assert not waiting.done()  # broker 3 is in the ISR and has not fetched
    fetch(leader, 3, 2)
    assert await waiting == 0


async def test_acks_all_times_out_and_leadership_loss_answers_not_leader(leader):
    leader.plog.append(batch(1), leader_epoch=0)
    assert await leader.manager.wait_for_replicas("t", 0, 1, 0.01) == ErrorCode.REQUEST_TIMED_OUT
    waiting = asyncio.ensure_future(leader.manager.wait_for_replicas("t", 0, 1, 30))
    await asyncio.sleep(0)
    leader.manager.sync(image(leader=2, leader_epoch=1, partition_epoch=1))
    assert await waiting == ErrorCode.NOT_LEADER_OR_FOLLOWER
    await leader.manager.close()


async def test_min_isr_refuses_before_the_append_and_freezes_the_hw(leader):
    leader.manager.sync(image(isr=(1,), partition_epoch=1))
    assert leader.manager.check_acks_all("t", 0) == ErrorCode.NOT_ENOUGH_REPLICAS
    leader.plog.append(batch(1), leader_epoch=0)
    leader.manager.leader_appended("t", 0)
    assert leader.plog.high_watermark == 0  # below min ISR the HW does not move
    leader.manager.sync(image(isr=(1, 2), partition_epoch=2))
    assert leader.manager.check_acks_all("t", 0) == 0


async def test_a_new_images_min_isr_rules_the_hw_at_the_next_fetch(leader):
    """The HW rule's min.insync.replicas, kept per image, is looked up again once the node has a new image: a
    raise to 3 with two replicas in the ISR stops the HW at the next follower fetch, a return to 2 lets it on."""
    leader.node.metadata = image(isr=(1, 2), partition_epoch=1)
    leader.manager.sync(leader.node.metadata)
    leader.plog.append(batch(2), leader_epoch=0)
    fetch(leader, 3, 2)  # caught up, outside the ISR: it still holds the HW until it fetches
    fetch(leader, 2, 2)
    assert leader.plog.high_watermark == 2
    leader.plog.append(batch(2), leader_epoch=0)
    fetch(leader, 3, 4)
    leader.node.metadata = image(isr=(1, 2), partition_epoch=1, configs={"min.insync.replicas": "3"})
    leader.manager.sync(leader.node.metadata, configs_changed=["t"])
    fetch(leader, 2, 3)
    assert leader.plog.high_watermark == 2  # below min ISR the HW does not move
    leader.node.metadata = image(isr=(1, 2), partition_epoch=1)
    leader.manager.sync(leader.node.metadata, configs_changed=["t"])
    fetch(leader, 2, 4)
    assert leader.plog.high_watermark == 4


async def test_a_lagging_follower_is_shrunk_out_and_a_caught_up_one_expanded_in(leader):
    leader.manager.start()
    leader.plog.append(batch(3), leader_epoch=0)
    fetch(leader, 2, 3)
    leader.clock.ms += 31_000  # broker 3 has not fetched for longer than replica.lag.time.max.ms
    fetch(leader, 2, 3)

    def grant(request):
        part = request.topics[0].partitions[0]
        isr = [b.broker_id for b in part.new_isr_with_epochs]
        return AlterPartitionResponse(topics=[AltTopic(topic_id=TOPIC_ID, partitions=[AltPart(
            partition_index=0, leader_id=1, leader_epoch=0, isr=isr, partition_epoch=part.partition_epoch + 1)])])

    leader.alter.answer = grant
    leader.manager.shrink_isrs()
    for _ in range(100):
        await asyncio.sleep(0)
        if leader.manager.states[("t", 0)].isr == (1, 2):
            break
    sent = leader.alter.requests[0]
    assert (sent.broker_id, sent.broker_epoch) == (1, 101)
    assert [(b.broker_id, b.broker_epoch) for b in sent.topics[0].partitions[0].new_isr_with_epochs] == [
        (1, 101), (2, 102)]
    assert leader.manager.states[("t", 0)].isr == (1, 2)
    assert leader.plog.high_watermark == 3
    assert (leader.manager.isr_shrinks, leader.manager.isr_expands) == (1, 0)  # the metrics endpoint's counters
    # broker 3 comes back and catches up: it is proposed for the ISR again
    fetch(leader, 3, 3)
    for _ in range(100):
        await asyncio.sleep(0)
        if leader.manager.states[("t", 0)].isr == (1, 2, 3):
            break
    assert leader.manager.states[("t", 0)].isr == (1, 2, 3)
    assert (leader.manager.isr_shrinks, leader.manager.isr_expands) == (1, 1)
    await leader.manager.close()


async def test_an_isr_change_refused_as_ineligible_is_rolled_back(leader):
    leader.manager.start()
    leader.clock.ms += 31_000
    leader.alter.answer = lambda request: AlterPartitionResponse(topics=[AltTopic(
        topic_id=TOPIC_ID, partitions=[AltPart(partition_index=0, error_code=ErrorCode.INELIGIBLE_REPLICA)])])
    leader.manager.shrink_isrs()
    for _ in range(100):
        await asyncio.sleep(0)
        if leader.alter.requests and leader.manager.states[("t", 0)].pending is None:
            break
    assert leader.manager.states[("t", 0)].pending is None
    assert leader.manager.states[("t", 0)].isr == (1, 2, 3)
    assert (leader.manager.isr_shrinks, leader.manager.isr_expands) == (0, 0)  # refused: nothing counted
    await leader.manager.close()


@pytest.fixture
async def follower(make_log):
    plog = make_log("t-0")
    node = FakeNode(2, plog, image())
    manager = ReplicaManager(node, ReplicationConfig(), clock=Clock())
    manager.sync(node.metadata)
    assert set(manager.fetchers.fetchers) == {(1, 0)}  # a fetcher for leader 1 (it cannot connect: no endpoint)
    fetcher = Fetcher(manager, 1, 0)
    state = FetchState("t", 0, 0)
    yield SimpleNamespace(manager=manager, plog=plog, fetcher=fetcher, state=state, node=node)
    await manager.close()


def leader_answer(records: bytes = b"", *, hw: int = 0, code: int = 0, diverging=None, lso: int = 0) -> FetchPart:
    part = FetchPart(partition_index=0, error_code=code, high_watermark=hw, log_start_offset=lso, records=records)
    if diverging is not None:
        part.diverging_epoch = EpochEndOffset(epoch=diverging[0], end_offset=diverging[1])
    return part


async def test_a_follower_appends_as_it_arrived_and_takes_the_leaders_hw(follower):
    assert follower.manager.states[("t", 0)].role == "follower"
    follower.fetcher._partition_answer(follower.state, follower.plog, leader_answer(
        batch(3, epoch=0), hw=2), 0.0, 1.0)
    assert (follower.plog.log_end_offset, follower.plog.high_watermark) == (3, 2)
    follower.fetcher._partition_answer(follower.state, follower.plog, leader_answer(
        batch(2, epoch=1, base_offset=3), hw=9), 0.0, 1.0)
    assert (follower.plog.log_end_offset, follower.plog.high_watermark) == (5, 5)  # capped at the LEO
    assert follower.plog.leader_epochs.entries == [(0, 0), (1, 3)]


async def test_a_followers_high_watermark_move_wakes_consumers_long_polling_it(follower):
    """A consumer's Fetch v11+ may read a follower up to its HW: an answer that only moves the HW wakes the long
    polls parked on the partition (Kafka's fetcher completes their delayed fetches); one that moves nothing does
    not, and one with records wakes them as an append."""
    follower.fetcher._partition_answer(follower.state, follower.plog, leader_answer(batch(3, epoch=0), hw=1),
                                       0.0, 1.0)
    assert (follower.node.appends, follower.node.hw_moves) == (1, 0)
    follower.fetcher._partition_answer(follower.state, follower.plog, leader_answer(hw=1), 0.0, 1.0)
    assert (follower.node.appends, follower.node.hw_moves) == (1, 0)  # nothing moved
    follower.fetcher._partition_answer(follower.state, follower.plog, leader_answer(hw=3), 0.0, 1.0)
    assert follower.plog.high_watermark == 3 and (follower.node.appends, follower.node.hw_moves) == (1, 1)


async def test_a_former_leader_truncates_what_the_new_leader_never_had(follower):
    plog = follower.plog
    plog.append_as_follower(batch(3, epoch=0))
    plog.append_as_follower(batch(4, epoch=1, base_offset=3))  # written as leader of epoch 1, never replicated
    plog.high_watermark = 3
    # The new leader (epoch 2) says: you share epoch 0 with me, which ended at offset 3.
    follower.fetcher._partition_answer(follower.state, plog, leader_answer(diverging=(0, 3), hw=3), 0.0, 1.0)
    assert plog.log_end_offset == 3
    assert plog.leader_epochs.entries == [(0, 0)]


async def test_out_of_range_and_fenced_answers(follower):
    plog = follower.plog
    plog.append_as_follower(batch(5, epoch=0))
    follower.fetcher._partition_answer(follower.state, plog, leader_answer(
        code=ErrorCode.OFFSET_OUT_OF_RANGE, hw=2, lso=0), 0.0, 1.0)
    assert plog.log_end_offset == 2  # the leader's log is shorter
    follower.fetcher._partition_answer(follower.state, plog, leader_answer(
        code=ErrorCode.OFFSET_OUT_OF_RANGE, hw=50, lso=40), 0.0, 1.0)
    assert (plog.log_start_offset, plog.log_end_offset) == (40, 40)  # behind the leader's log start
    follower.fetcher._partition_answer(follower.state, plog, leader_answer(
        code=ErrorCode.FENCED_LEADER_EPOCH), 0.0, 1.0)
    assert follower.state.dropped


async def test_a_truncated_follower_truncates_its_future_log_too(follower, make_log):
    """A KIP-113 move of a follower in progress: the future log loses what the current log lost."""
    plog, future = follower.plog, make_log("t-0")
    future.auto_high_watermark = False
    plog.append_as_follower(batch(3, epoch=0))
    plog.append_as_follower(batch(4, epoch=1, base_offset=3))
    future.append_as_follower(batch(3, epoch=0))
    future.append_as_follower(batch(4, epoch=1, base_offset=3))
    follower.manager.node.logs.manager.get_future = lambda t, p: future if (t, p) == ("t", 0) else None
    follower.fetcher._partition_answer(follower.state, plog, leader_answer(diverging=(0, 3), hw=3), 0.0, 1.0)
    assert (plog.log_end_offset, future.log_end_offset) == (3, 3)


async def test_min_isr_above_the_replication_factor_counts_as_the_replication_factor(make_log):
    """Kafka's effectiveMinIsr: min.insync.replicas=3 on a partition with 2 replicas asks for both, no more."""
    plog = make_log("t-0")
    two = PartitionImage(0, (1, 2), (1, 2), 1, 0, 0)
    topic = TopicImage("t", TOPIC_ID, {0: two}, {"min.insync.replicas": "3"})
    img = MetadataImage(topics_by_name={"t": topic}, topics_by_id={TOPIC_ID: topic},
                        brokers={b: BrokerRegistration(b, e, uuid.uuid4(), fenced=False) for b, e in EPOCHS.items()})
    node = FakeNode(1, plog, img)
    manager = ReplicaManager(node, ReplicationConfig(), clock=Clock())
    manager.sync(img)
    assert manager.check_acks_all("t", 0) == 0
    plog.append(batch(2), leader_epoch=0)
    manager.follower_fetched("t", 0, 2, 102, 2)
    assert plog.high_watermark == 2
    assert await manager.wait_for_replicas("t", 0, 2, 1) == 0
