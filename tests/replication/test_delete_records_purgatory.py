"""DeleteRecords' wait on the leader, in process: the low watermark (Kafka's lowWatermarkIfLeader: the smallest
log start offset over the leader's log and every live follower, learnt from their fetches), and the
DelayedDeleteRecords it completes, answers at its timeout or fails when the leadership goes. Leader of "t"-0 on
broker 1, followers 2 and 3 (tests.replication.test_replica_manager's fixture); waits are bounded far beyond
any test's run, so a wake-up that never comes fails the test by its timeout."""

from __future__ import annotations

import asyncio

from kjbod.broker.replication import hooks
from kjbod.broker.replication.delete_records import low_watermark
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import FetchRequest
from kjbod.protocol.generated.delete_records_response import DeleteRecordsPartitionResult
from kjbod.protocol.generated.fetch_request import FetchPartition, FetchTopic
from tests.replication.conftest import batch
from tests.replication.test_replica_manager import fetch, image, leader  # noqa: F401  (the fixture)

LONG_S = 60.0


def committed(lead, n: int) -> None:
    """`n` records on the leader, fetched by both followers, so the HW is at `n`; the node's replica manager
    is the fixture's (a broker-only node's, which the low watermark asks for the followers)."""
    lead.node.replication = lead.manager
    lead.plog.append(batch(n), leader_epoch=0)
    fetch(lead, 2, n)
    fetch(lead, 3, n)
    assert lead.plog.high_watermark == n


def answer() -> DeleteRecordsPartitionResult:
    return DeleteRecordsPartitionResult(partition_index=0, low_watermark=-1, error_code=0)


async def test_the_low_watermark_is_the_smallest_log_start_of_the_live_replicas(leader):  # noqa: F811
    committed(leader, 10)
    leader.plog.advance_log_start_offset(6)
    # Followers that have not said where their logs start (-1) hold it down, as Kafka's unknown offset does.
    assert low_watermark(leader.node, "t", 0) == -1
    leader.manager.follower_log_start("t", 0, 2, 6)
    leader.manager.follower_log_start("t", 0, 3, 4)
    assert low_watermark(leader.node, "t", 0) == 4
    leader.manager.follower_log_start("t", 0, 3, 8)  # past the leader's own: the leader's counts
    assert low_watermark(leader.node, "t", 0) == 6
    # A fenced broker is not alive (Kafka's metadataCache.hasAliveBroker): its replica does not count.
    leader.manager.follower_log_start("t", 0, 3, 0)
    leader.node.metadata = image(fenced=frozenset({3}))
    assert low_watermark(leader.node, "t", 0) == 6


async def test_a_followers_fetch_tells_the_leader_its_log_start(leader):  # noqa: F811
    committed(leader, 4)
    body = FetchRequest(replica_id=2, topics=[FetchTopic(topic="t", partitions=[FetchPartition(
        partition=0, current_leader_epoch=0, fetch_offset=4, last_fetched_epoch=-1, log_start_offset=3)])])
    resolved = [("t", body.topics[0])]
    assert hooks.prepare_follower_fetch(leader.node, resolved, body, 12, 2) == {}
    assert leader.manager.states[("t", 0)].followers[2].log_start_offset == 3


async def test_a_wait_completes_once_every_follower_has_moved_its_log_start(leader):  # noqa: F811
    committed(leader, 10)
    leader.plog.advance_log_start_offset(5)
    result = answer()
    done = leader.manager.delete_records.delay([("t", 0, 5, result)], LONG_S)
    leader.manager.follower_log_start("t", 0, 2, 5)
    await asyncio.sleep(0)
    assert not done.done()
    leader.manager.follower_log_start("t", 0, 3, 7)
    await asyncio.wait_for(done, LONG_S)
    assert (result.error_code, result.low_watermark) == (0, 5)
    assert not leader.manager.delete_records.watched


async def test_the_request_timeout_answers_request_timed_out_with_the_low_watermark_it_had(leader):  # noqa: F811
    committed(leader, 10)
    leader.plog.advance_log_start_offset(5)
    leader.manager.follower_log_start("t", 0, 2, 2)
    leader.manager.follower_log_start("t", 0, 3, 2)
    result = answer()
    result.low_watermark = 2
    await asyncio.wait_for(leader.manager.delete_records.delay([("t", 0, 5, result)], 0.0), LONG_S)
    assert (result.error_code, result.low_watermark) == (ErrorCode.REQUEST_TIMED_OUT, 2)
    assert not leader.manager.delete_records.watched


async def test_losing_the_leadership_answers_not_leader_or_follower(leader):  # noqa: F811
    committed(leader, 10)
    leader.plog.advance_log_start_offset(5)
    result = answer()
    done = leader.manager.delete_records.delay([("t", 0, 5, result)], LONG_S)
    leader.node.metadata = image(leader=2, leader_epoch=1)
    leader.manager.sync(leader.node.metadata)
    await asyncio.wait_for(done, LONG_S)
    assert (result.error_code, result.low_watermark) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
    await leader.manager.close()
