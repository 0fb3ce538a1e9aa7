"""Produce, Fetch and ListOffsets for a partition the metadata image has but this broker holds no log for, in
process, over a real LogManager behind the node's StorageAdapter.

Kafka's ReplicaManager (getPartitionOrError) answers such a partition NOT_LEADER_OR_FOLLOWER: the client refreshes
its metadata and retries. It happens just after CreateTopics, before the broker has applied the record and made
the log, and after a reassignment moved the replica away. A topic or partition the image does not have answers
UNKNOWN_TOPIC_OR_PARTITION; a partition whose log dir is offline answers KAFKA_STORAGE_ERROR (the versions before
Produce v4 and Fetch v6 get NOT_LEADER_OR_FOLLOWER instead, as Kafka maps it).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from kjbod.broker.handlers import fetch, list_offsets, produce
from kjbod.broker.node import BrokerNode
from kjbod.broker.storage_glue import StorageAdapter
from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import ListOffsetsRequest as L
from kjbod.protocol.generated import ProduceRequest as P
from tests.storage.test_dir_workers import _answers, _fetch_body, _Node, _request

HOSTED, NOT_HOSTED, OFFLINE = ("a", 0), ("a", 1), ("c", 1)


class _ImageNode(_Node):
    """The handlers' node with the broker's own partition lookup (BrokerNode.partition_log over a StorageAdapter)
    and an image that also has a-1 and c-1, which no dir holds."""

    partition_log = BrokerNode.partition_log
    local_log = BrokerNode.local_log

    def __init__(self, lm, log_dirs) -> None:
        super().__init__(lm)
        self.config = SimpleNamespace(log_dirs=log_dirs)
        self.logs = StorageAdapter(self, lm)
        topics = {name: SimpleNamespace(partitions={0: None, 1: None}) for name in "abc"}
        self.metadata = SimpleNamespace(topic=topics.get)


@pytest.fixture
def node(spread, log_dirs):
    return _ImageNode(spread, log_dirs)


def _fail_dir(lm, path: str) -> None:
    lm.dir_io(path).mark_offline("write", path, OSError(5, "Input/output error"))


def _produce_codes(node, version: int, parts) -> dict[tuple[str, int], int]:
    body = P(acks=1, timeout_ms=600_000, topic_data=[
        P.TopicProduceData(name=t, partition_data=[
            P.PartitionProduceData(index=p, records=b"\0" * 70)]) for t, p in parts])
    # The records are never looked at: each partition is refused before any validation.
    resp = produce.handle(node, _request(version), body)
    return {k: code for k, (code, _) in _answers(resp).items()}


def _fetch_codes(node, version: int, parts) -> dict[tuple[str, int], int]:
    by_topic: dict[str, list[int]] = {}
    for t, p in parts:
        by_topic.setdefault(t, []).append(p)
    resp = asyncio.run(fetch.handle(node, _request(version), _fetch_body(by_topic, max_wait_ms=0)))
    return {(t.topic, p.partition_index): p.error_code for t in resp.responses for p in t.partitions}


def _list_offsets_codes(node, replica_id: int, parts) -> dict[tuple[str, int], int]:
    body = L(replica_id=replica_id, topics=[L.ListOffsetsTopic(name=t, partitions=[
        L.ListOffsetsPartition(partition_index=p, timestamp=-1)]) for t, p in parts])
    resp = list_offsets.handle(node, _request(7), body)
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def test_produce_to_a_partition_of_the_image_without_a_log_here_is_not_leader_or_follower(node):
    parts = [NOT_HOSTED, ("a", 7), ("nope", 0)]
    for version in (3, 9):
        assert _produce_codes(node, version, parts) == {
            NOT_HOSTED: E.NOT_LEADER_OR_FOLLOWER, ("a", 7): E.UNKNOWN_TOPIC_OR_PARTITION,
            ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}


def test_fetch_from_a_partition_of_the_image_without_a_log_here_is_not_leader_or_follower(node):
    parts = [HOSTED, NOT_HOSTED, ("a", 7), ("nope", 0)]
    for version in (4, 12):
        assert _fetch_codes(node, version, parts) == {
            HOSTED: 0, NOT_HOSTED: E.NOT_LEADER_OR_FOLLOWER, ("a", 7): E.UNKNOWN_TOPIC_OR_PARTITION,
            ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}


def test_list_offsets_of_a_partition_of_the_image_without_a_log_here_is_not_leader_or_follower(node):
    parts = [HOSTED, NOT_HOSTED, ("a", 7), ("nope", 0)]
    for replica_id in (list_offsets.CONSUMER, list_offsets.DEBUGGING):
        assert _list_offsets_codes(node, replica_id, parts) == {
            HOSTED: 0, NOT_HOSTED: E.NOT_LEADER_OR_FOLLOWER, ("a", 7): E.UNKNOWN_TOPIC_OR_PARTITION,
            ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}


def test_list_offsets_of_a_closed_log_the_image_still_has_is_not_leader_or_follower(node, spread):
    """The replica closed as it moves away while the image still has the partition; once the image drops the
    topic (a deletion), the same closed log answers UNKNOWN_TOPIC_OR_PARTITION."""
    plog = spread.get("a", 0)
    plog.close()
    assert not plog.online and plog.io.online
    assert _list_offsets_codes(node, -1, [HOSTED]) == {HOSTED: E.NOT_LEADER_OR_FOLLOWER}
    assert list_offsets._lookup(SimpleNamespace(metadata=SimpleNamespace(topic={}.get), partition_log=lambda *_: plog),
                                "a", 0, -1, 7).error_code == E.UNKNOWN_TOPIC_OR_PARTITION


def test_with_a_dir_offline_a_partition_without_a_log_is_offline_not_unhosted(node, spread, log_dirs):
    """c-1 may have been in the failed dir: Kafka's HostedPartition.Offline, KAFKA_STORAGE_ERROR (NOT_LEADER_OR_FOLLOWER
    before Produce v4 and Fetch v6); c-0's own log is in it."""
    _fail_dir(spread, log_dirs[2])
    parts = [OFFLINE, ("c", 0), ("nope", 0)]
    storage = {OFFLINE: E.KAFKA_STORAGE_ERROR, ("c", 0): E.KAFKA_STORAGE_ERROR, ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    old = {**storage, OFFLINE: E.NOT_LEADER_OR_FOLLOWER, ("c", 0): E.NOT_LEADER_OR_FOLLOWER}
    assert _produce_codes(node, 9, [OFFLINE, ("nope", 0)]) == {k: storage[k] for k in (OFFLINE, ("nope", 0))}
    assert _produce_codes(node, 3, [OFFLINE, ("nope", 0)]) == {k: old[k] for k in (OFFLINE, ("nope", 0))}
    assert _fetch_codes(node, 12, parts) == storage
    assert _fetch_codes(node, 4, parts) == old
    assert _list_offsets_codes(node, -1, parts) == storage


def _answered_without_waiting(coro):
    """The handler coroutine's answer when it completes without suspending once; fails if it would wait."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise AssertionError("the fetch waited (a long poll, or its dir's worker) instead of answering at once")


def test_a_fetch_from_an_offline_dir_answers_at_once_not_after_its_worker_or_the_long_poll(node, spread, log_dirs):
    """Found under load: a fetch at the log end of a partition whose dir had just failed answered 0 with no
    records, because its read was handed to the dir's worker and the worker did not run within the fetch's wait.
    Nothing is read in an offline dir: the fetch answers KAFKA_STORAGE_ERROR on the loop, and a long poll does
    not wait for appends that cannot come."""
    _fail_dir(spread, log_dirs[2])
    for max_wait_ms in (0, 60_000):
        resp = _answered_without_waiting(fetch.handle(node, _request(12), _fetch_body({"c": [0]},
                                                                                      max_wait_ms=max_wait_ms)))
        assert [p.error_code for t in resp.responses for p in t.partitions] == [E.KAFKA_STORAGE_ERROR]
