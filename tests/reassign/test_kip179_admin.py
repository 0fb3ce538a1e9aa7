"""kjbod's admin client for KIP-179's APIs against a fake broker: what goes on the wire, what comes back.

The fake broker serves the three extension APIs only when a test adds them to its ApiVersions, as a kjbod
node does; without them (an Apache Kafka broker) the client says the broker lacks the API before sending.
"""

from __future__ import annotations

import uuid

import pytest

from kjbod.admin import NO_THROTTLE, AdminClient, ThrottledRate, ThrottledReplicas, UnsupportedVersionError
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    AlterInterbrokerThrottledRatesResponse,
    AlterInterbrokerThrottledReplicasResponse,
    ReassignPartitionsResponse,
)
from kjbod.protocol.generated import alter_interbroker_throttled_rates_response as rates_out
from kjbod.protocol.generated import alter_interbroker_throttled_replicas_response as replicas_out
from kjbod.protocol.generated import reassign_partitions_response as reassign_out
from tests.admin.fake_broker import FakeCluster

REASSIGN, RATES, REPLICAS = 10000, 10001, 10002


@pytest.fixture
async def cluster():
    c = FakeCluster()
    (broker,) = await c.start(1)
    c.add_topic("t", 2)
    for key in (REASSIGN, RATES, REPLICAS):
        broker.api_versions[key] = (0, 0)
    yield c
    await c.stop()


def _address(c: FakeCluster) -> str:
    return f"127.0.0.1:{c.brokers[1].port}"


async def test_reassign_partitions_sends_the_throttle_and_reads_per_partition_results(cluster):
    dir_id = uuid.uuid4()

    def answer(m, _v):
        return ReassignPartitionsResponse(reassign_partition_results=[reassign_out.ReassignPartitionResult(
            topic=t.topic, partition_errors=[reassign_out.PartitionError(
                partition_id=p.partition_id, error_code=ErrorCode.REASSIGNMENT_IN_PROGRESS if p.partition_id
                else 0, error_message="busy" if p.partition_id else None) for p in t.partition_reassignments])
            for t in m.topic_reassignments])

    cluster.brokers[1].add_script(REASSIGN, answer)
    async with AdminClient(_address(cluster)) as admin:
        out = await admin.reassign_partitions({("t", 0): [1, 2], ("t", 1): [2, 1]}, throttle=10_000_000,
                                              directories={("t", 0): [dir_id, uuid.UUID(int=0)]},
                                              allow_replication_factor_change=False, additional=True)
    assert out == {("t", 0): (0, None), ("t", 1): (ErrorCode.REASSIGNMENT_IN_PROGRESS, "busy")}
    (sent,) = cluster.requests(REASSIGN)
    m = sent.message
    assert (m.throttle, m.remove_throttle, m.validate_only) == (10_000_000, True, False)
    assert (m.allow_replication_factor_change, m.additional) == (False, True)
    (topic,) = m.topic_reassignments
    assert [(p.partition_id, p.brokers, p.target_directories) for p in topic.partition_reassignments] == [
        (0, [1, 2], [dir_id, uuid.UUID(int=0)]), (1, [2, 1], [])]


async def test_reassign_partitions_without_throttle_sends_kips_no_throttle(cluster):
    cluster.brokers[1].add_script(REASSIGN, lambda m, _v: ReassignPartitionsResponse())
    async with AdminClient(_address(cluster)) as admin:
        assert await admin.reassign_partitions({("t", 0): [1]}, validate_only=True, remove_throttle=False) == {}
    m = cluster.requests(REASSIGN)[0].message
    assert (m.throttle, m.validate_only, m.remove_throttle) == (NO_THROTTLE, True, False)


async def test_alter_throttled_rates_and_replicas(cluster):
    cluster.brokers[1].add_script(RATES, lambda m, _v: AlterInterbrokerThrottledRatesResponse(broker_errors=[
        rates_out.BrokerError(broker_id=b.broker_id, error_code=ErrorCode.INVALID_CONFIG if b.leader_rate <= 0
                              else 0, error_message=None) for b in m.broker_throttles]))
    cluster.brokers[1].add_script(REPLICAS, lambda m, _v: AlterInterbrokerThrottledReplicasResponse(topic_errors=[
        replicas_out.TopicError(topic=t.topic, partition_errors=[replicas_out.PartitionError(
            partition_id=p.partition_id, error_code=0, error_message=None) for p in t.partition_throttles])
        for t in m.topic_throttles]))
    async with AdminClient(_address(cluster)) as admin:
        rates = await admin.alter_interbroker_throttled_rates({1: ThrottledRate(100, 200), 2: (0, 5)},
                                                              remove_throttle=False)
        replicas = await admin.alter_interbroker_throttled_replicas({("t", 1): ThrottledReplicas([1], [2, 3])})
    assert rates == {1: (0, None), 2: (ErrorCode.INVALID_CONFIG, None)}
    assert replicas == {("t", 1): (0, None)}
    m = cluster.requests(RATES)[0].message
    assert [(b.broker_id, b.leader_rate, b.follower_rate) for b in m.broker_throttles] == [(1, 100, 200), (2, 0, 5)]
    assert m.remove_throttle is False
    m = cluster.requests(REPLICAS)[0].message
    (topic,) = m.topic_throttles
    assert [(p.partition_id, p.leaders, p.followers) for p in topic.partition_throttles] == [(1, [1], [2, 3])]
    assert m.remove_throttle is True


async def test_a_broker_without_the_extension_is_told_apart(cluster):
    for key in (REASSIGN, RATES, REPLICAS):
        del cluster.brokers[1].api_versions[key]
    async with AdminClient(_address(cluster)) as admin:
        with pytest.raises(UnsupportedVersionError):
            await admin.reassign_partitions({("t", 0): [1]}, throttle=1000)
        with pytest.raises(UnsupportedVersionError):
            await admin.alter_interbroker_throttled_rates({1: (1, 1)})
    assert cluster.requests(REASSIGN) == []
