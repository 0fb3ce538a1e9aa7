"""DeleteRecords on a real cluster (conftest.py: `kjbod cluster up`, a controller and three brokers with three
log dirs each), a replication factor 3 partition: kafka-python's delete_records goes to the leader, whose answer
waits until both followers have moved their log start (Kafka's low watermark), so each replica starts at the new
offset as soon as it is answered; a follower that does not fetch holds the answer back to REQUEST_TIMED_OUT, and
once it fetches again a waiting request is answered; a follower asked is NOT_LEADER_OR_FOLLOWER.

The brokers' session timeout is long here (a stopped follower stays alive, so it counts for the low watermark
until it fetches again, instead of being fenced, which would take it out)."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import warnings

import pytest
from datapath.support import RawClient, batch, list_offset, produce

from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import DeleteRecordsRequest
from kjbod.protocol.generated.delete_records_request import DeleteRecordsPartition, DeleteRecordsTopic

from .conftest import Cluster, running_cluster
from .test_create_partitions_live import in_sync
from .test_replication_live import admin_client

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's import uses a deprecated importlib API
    from kafka import TopicPartition
    from kafka.admin import NewTopic

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning"),
]

EARLIEST = -2
DEBUGGING = -2  # ListOffsets' replica id that may read a follower's own replica
LONG_MS = 60_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    with running_cluster(tmp_path_factory.mktemp("delete-records"),
                         {"broker.session.timeout.ms": "60000"}) as running:
        yield running


def rf3_with_records(cluster: Cluster, topic: str, count: int) -> tuple[int, list[int]]:
    """A one-partition replication factor 3 topic of small segments with `count` records, all replicas in sync;
    returns (leader, followers)."""
    with admin_client(cluster) as admin:
        admin.create_topics([NewTopic(topic, 1, 3, topic_configs={"segment.bytes": "200"})])
    p = in_sync(cluster, topic, 1, 3)[0]
    with to_broker(cluster, p["leader"]) as raw:
        for i in range(count):
            assert produce(raw, topic, 0, batch([b"r%d" % i]), acks=-1).error_code == 0
    return p["leader"], [r for r in p["replicas"] if r != p["leader"]]


def to_broker(cluster: Cluster, broker: int) -> RawClient:
    return RawClient("127.0.0.1", cluster.broker_port(broker), timeout=LONG_MS / 1000 + 30)


def log_start(cluster: Cluster, broker: int, topic: str) -> int:
    """Where the broker's own replica of `topic`-0 starts (ListOffsets earliest with the debugging replica id)."""
    with to_broker(cluster, broker) as raw:
        answer = list_offset(raw, topic, 0, EARLIEST, replica_id=DEBUGGING)
    assert answer.error_code == 0
    return answer.offset


def delete(cluster: Cluster, broker: int, topic: str, offset: int, timeout_ms: int) -> tuple[int, int]:
    """DeleteRecords v2 of `topic`-0 sent to `broker`: (low watermark, error code)."""
    req = DeleteRecordsRequest(timeout_ms=timeout_ms, topics=[DeleteRecordsTopic(name=topic, partitions=[
        DeleteRecordsPartition(partition_index=0, offset=offset)])])
    with to_broker(cluster, broker) as raw:
        ((p,),) = [t.partitions for t in raw.call(req, 2).topics]
    return p.low_watermark, p.error_code


def test_the_answer_waits_until_every_replica_has_moved_its_log_start(cluster):
    leader, followers = rf3_with_records(cluster, "cut3", 10)
    with admin_client(cluster) as admin:
        answer = admin.delete_records({TopicPartition("cut3", 0): 6}, timeout_ms=LONG_MS)
    assert answer[TopicPartition("cut3", 0)]["low_watermark"] == 6
    # Answered, so every replica already starts there: nothing to wait for.
    assert {b: log_start(cluster, b, "cut3") for b in (leader, *followers)} == {b: 6 for b in (leader, *followers)}


def test_a_follower_asked_is_not_leader_or_follower(cluster):
    leader, followers = rf3_with_records(cluster, "asked-wrong", 3)
    assert delete(cluster, followers[0], "asked-wrong", 2, LONG_MS) == (-1, E.NOT_LEADER_OR_FOLLOWER)
    assert log_start(cluster, followers[0], "asked-wrong") == 0
    assert log_start(cluster, leader, "asked-wrong") == 0


def test_a_follower_that_does_not_fetch_holds_the_answer_until_it_fetches_again(cluster):
    leader, followers = rf3_with_records(cluster, "held", 10)
    stopped = followers[0]
    pid = cluster.pid(f"broker-{stopped}")
    os.kill(pid, signal.SIGSTOP)
    try:
        # The leader deletes at once; its answer cannot reach 6 while the stopped follower's log starts at 0.
        assert delete(cluster, leader, "held", 6, 500) == (0, E.REQUEST_TIMED_OUT)
        assert log_start(cluster, leader, "held") == 6
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(delete, cluster, leader, "held", 8, LONG_MS)
            os.kill(pid, signal.SIGCONT)
            assert waiting.result(LONG_MS / 1000 + 30) == (8, 0)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert log_start(cluster, stopped, "held") == 8
