"""A follower's Fetch on the leader, in process, on both of the ways `_FollowerFetch` answers it (the polling
fixture: the general way, where dirs have no workers, and the short way, `_answer_single`, where the partition's
dir has an idle worker): the answer limits Kafka's KafkaApis.handleFetchRequest sets for a follower as for a
consumer, and KIP-951's leader hints.

* fetch.max.bytes caps the request's max_bytes (the first batch still comes back whole, KIP-74), and min_bytes is
  cut to the capped max_bytes: min_bytes of 0 or less answers at once, a log end or not.
* From Fetch v16 a partition answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH names the leader and its
  epoch (CurrentLeader), and the response carries the leader's endpoint on the listener asked (NodeEndpoints):
  kjbod once sent these to consumers only, and to followers answered by the `_serve` coroutine.

A fetch that should be answered at once is checked to be a FetchResponse (not a Later): nothing here waits.
"""

from __future__ import annotations

import dataclasses
import os
from types import SimpleNamespace

import pytest

from kjbod.broker.handlers import fetch as fetch_handler
from kjbod.metadata import MetadataImage
from kjbod.metadata.image import Endpoint
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import FetchRequest, FetchResponse
from kjbod.wire.handler import Later
from tests.replication.conftest import batch
from tests.replication.test_purgatory import IDLE_WORKER, polling, short_way_answers  # noqa: F401  (the fixture)
from tests.replication.test_replica_manager import TOPIC_ID, image, leader  # noqa: F401  (the fixture)

CAP = 1024  # the smallest fetch.max.bytes Kafka allows
VALUE = b"x" * 300  # a batch of one such record is about 370 bytes: two fit under CAP, three do not
LISTENER = "PLAINTEXT"


def ask(lead, *, offset: int = 0, max_bytes: int = 1 << 20, min_bytes: int = 1, version: int = 12,
        current_leader_epoch: int = 0):
    """The handler's own answer to broker 2's fetch of t-0 (the response, or a Later when it parks)."""
    part = FetchRequest.FetchPartition(partition=0, current_leader_epoch=current_leader_epoch, fetch_offset=offset,
                                       last_fetched_epoch=-1, log_start_offset=0, partition_max_bytes=1 << 20)
    if version >= 13:
        topic = FetchRequest.FetchTopic(topic_id=TOPIC_ID, partitions=[part])
    else:
        topic = FetchRequest.FetchTopic(topic="t", partitions=[part])
    body = FetchRequest(max_wait_ms=3_600_000, min_bytes=min_bytes, max_bytes=max_bytes, topics=[topic])
    if version >= 15:
        body.replica_state = FetchRequest.ReplicaState(replica_id=2, replica_epoch=-1)
    else:
        body.replica_id = 2
    request = SimpleNamespace(api_version=version, ctx=SimpleNamespace(listener_kind="broker", listener_name=LISTENER))
    return fetch_handler.handle(lead.node, request, body)


def short_way(lead) -> bool:
    return lead.node.logs.manager.worker("d") is IDLE_WORKER


@pytest.fixture
def taken(polling, monkeypatch):  # noqa: F811
    """Which answers the short way gave (True) or handed to the general way (False)."""
    return short_way_answers(monkeypatch)


def sent(resp: FetchResponse) -> bytes:
    """The record bytes of t-0's answer (bytes, or file regions read and closed)."""
    (part,) = resp.responses[0].partitions
    assert part.error_code == 0
    records = part.records
    if isinstance(records, list):
        data = b"".join(os.pread(r.fd, r.count, r.offset) for r in records)
        fetch_handler.close_regions(resp)
        return data
    return bytes(records or b"")


async def test_a_followers_fetch_carries_no_more_than_fetch_max_bytes(polling, taken):  # noqa: F811
    plog = polling.plog
    for _ in range(4):
        plog.append(batch(1, tag=VALUE), leader_epoch=0)
    one = len(plog.read_bytes(0, 1))  # a read gives at least one whole batch
    assert 2 * one <= CAP < 3 * one
    everything = ask(polling)
    assert everything.__class__ is FetchResponse and sent(everything) == plog.read_bytes(0, 1 << 20)
    polling.node.fetch_max_bytes = CAP
    capped = ask(polling)
    assert capped.__class__ is FetchResponse and sent(capped) == plog.read_bytes(0, 1 << 20)[:2 * one]
    assert taken == ([True, True] if short_way(polling) else [])


async def test_a_first_batch_over_fetch_max_bytes_reaches_the_follower_whole(polling, taken):  # noqa: F811
    plog = polling.plog
    plog.append(batch(1, tag=b"y" * (3 * CAP)), leader_epoch=0)
    plog.append(batch(1, tag=VALUE), leader_epoch=0)
    first = len(plog.read_bytes(0, 1))
    assert first > CAP
    polling.node.fetch_max_bytes = CAP
    resp = ask(polling)
    assert resp.__class__ is FetchResponse and sent(resp) == plog.read_bytes(0, 1 << 20)[:first]
    assert taken == ([True] if short_way(polling) else [])


async def test_a_followers_min_bytes_is_cut_to_the_capped_max_bytes(polling, taken):  # noqa: F811
    """Asking for more than fetch.max.bytes is answered once the cap's worth is there (here one batch over it),
    at once, not at the fetch's max_wait_ms (an hour); kjbod's follower paths once compared the request's own
    min_bytes."""
    plog = polling.plog
    plog.append(batch(1, tag=b"z" * (2 * CAP)), leader_epoch=0)
    polling.node.fetch_max_bytes = CAP
    resp = ask(polling, min_bytes=1 << 20)
    assert resp.__class__ is FetchResponse, "parked for min_bytes above fetch.max.bytes"
    assert sent(resp) == plog.read_bytes(0, 1 << 20)
    assert taken == ([True] if short_way(polling) else [])


async def test_a_followers_min_bytes_of_0_is_answered_at_once_at_the_log_end(polling, taken):  # noqa: F811
    """Kafka's ReplicaManager.fetchMessages answers at once when the bytes readable reach fetchMinBytes: with 0,
    always; a max_bytes of 0 makes it 0 too. kjbod's follower paths once parked such a fetch at the log end."""
    plog = polling.plog
    plog.append(batch(2), leader_epoch=0)
    for fields in ({"min_bytes": 0}, {"max_bytes": 0}, {"min_bytes": -1}):
        resp = ask(polling, offset=plog.log_end_offset, **fields)
        assert resp.__class__ is FetchResponse, fields
        assert sent(resp) == b""
    assert polling.node.parked_fetches.count() == 0
    waiting = ask(polling, offset=plog.log_end_offset)  # min_bytes 1: parks as before
    assert waiting.__class__ is Later
    waiting.cancel()


def with_listeners(img: MetadataImage) -> MetadataImage:
    """The image with every broker registered on LISTENER at 127.0.0.1:9000 + its id, broker 3 fenced."""
    brokers = {b: dataclasses.replace(r, listeners=(Endpoint(LISTENER, "127.0.0.1", 9000 + b),), fenced=b == 3)
               for b, r in img.brokers.items()}
    return dataclasses.replace(img, brokers=brokers)


@pytest.mark.parametrize("version", [16, 17])
async def test_a_followers_fetch_v16_names_the_leader_when_it_is_fenced_or_not_the_leader(polling, taken,  # noqa: F811
                                                                                       version):
    """The leader moved on (epoch 1 here while the follower asks with 0): FENCED_LEADER_EPOCH, with this
    broker named as leader at epoch 1 and its endpoint; then broker 2 leads: NOT_LEADER_OR_FOLLOWER naming
    broker 2. Before v16 neither is named."""
    plog = polling.plog
    plog.append(batch(2), leader_epoch=0)
    moved = with_listeners(image(leader_epoch=1, partition_epoch=1))
    polling.node.metadata = moved
    polling.manager.sync(moved)
    resp = ask(polling, version=version, current_leader_epoch=0)
    assert resp.__class__ is FetchResponse
    (part,) = resp.responses[0].partitions
    assert part.error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (1, 1)
    assert [(n.node_id, n.host, n.port) for n in resp.node_endpoints] == [(1, "127.0.0.1", 9001)]

    elsewhere = with_listeners(image(leader=2, leader_epoch=2, partition_epoch=2))
    polling.node.metadata = elsewhere
    polling.manager.sync(elsewhere)
    resp = ask(polling, version=version, current_leader_epoch=2)
    (part,) = resp.responses[0].partitions
    assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (2, 2)
    assert [(n.node_id, n.port) for n in resp.node_endpoints] == [(2, 9002)]

    older = ask(polling, version=15, current_leader_epoch=2)
    (part,) = older.responses[0].partitions
    assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and part.current_leader.leader_id == -1
    assert older.node_endpoints == []
    assert taken == []  # answers decided before any read never take the short way


async def test_a_fenced_leader_is_named_without_an_endpoint(polling):  # noqa: F811
    """As Kafka's getCurrentLeader: a leader the image has fenced is still named, but it has no endpoint to
    send (NodeEndpoints stays empty)."""
    elsewhere = with_listeners(image(leader=3, leader_epoch=1, partition_epoch=1))
    polling.node.metadata = elsewhere
    polling.manager.sync(elsewhere)
    resp = ask(polling, version=17, current_leader_epoch=1)
    (part,) = resp.responses[0].partitions
    assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (3, 1)
    assert resp.node_endpoints == []
