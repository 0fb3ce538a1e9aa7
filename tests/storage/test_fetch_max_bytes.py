"""fetch.max.bytes on a consumer's Fetch, in process: the Fetch handler over a real LogManager whose three
partitions a-0, b-0 and c-0 sit in three dirs (read in parallel, then kept in request order).

As Kafka's KafkaApis.handleFetchRequest, the request's max_bytes is cut to the broker's fetch.max.bytes before
anything is read, and min_bytes is cut to that; the first partition with data still gets one whole batch over it
(KIP-74).  Each test asks for far more than the cap and checks what came back against the batches' own sizes.
"""

from __future__ import annotations

import asyncio

from kjbod.broker.handlers import fetch
from kjbod.protocol.generated import FetchRequest
from tests.storage.conftest import kp_batch
from tests.storage.test_dir_workers import FV, _fetched, _Node, _request

LONG_S = 60.0
CAP = 1024  # the smallest fetch.max.bytes Kafka allows
VALUE = b"x" * 300  # one record of it makes a batch of about 370 bytes: two fit under CAP, three do not


def _fill(spread, batches: int, value: bytes = VALUE) -> int:
    """`batches` one-record batches in each of a-0, b-0 and c-0; the size of one batch."""
    for name in "abc":
        for _ in range(batches):
            spread.get(name, 0).append(kp_batch([value]))
    return len(kp_batch([value]))


def _ask(node, *, max_bytes: int = 1 << 20, min_bytes: int = 1, max_wait_ms: int = 0):
    body = FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes, topics=[
        FetchRequest.FetchTopic(topic=name, partitions=[
            FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])
        for name in "abc"])
    return fetch.handle(node, _request(FV), body)


def _record_bytes(resp) -> dict[str, int]:
    """Record bytes answered per topic (regions or bytes), before _fetched reads and closes them."""
    out = {}
    for t in resp.responses:
        (p,) = t.partitions
        out[t.topic] = sum(len(r) for r in p.records) if isinstance(p.records, list) else len(p.records or b"")
    return out


def test_a_consumers_fetch_carries_no_more_than_fetch_max_bytes(spread):
    """Two batches in each partition: with Kafka's default cap every one comes back; with a cap of 1024 bytes
    a-0 gives both (about 740 bytes), and b-0's, which would pass the cap, wait for another fetch; a request's
    own max_bytes under the cap still rules."""
    size = _fill(spread, 2)
    node = _Node(spread)

    async def scenario():
        everything = await _ask(node)
        assert _record_bytes(everything) == {"a": 2 * size, "b": 2 * size, "c": 2 * size}
        fetch.close_regions(everything)

        node.fetch_max_bytes = CAP
        capped = await _ask(node)
        assert _record_bytes(capped) == {"a": 2 * size, "b": 0, "c": 0}
        got = _fetched(capped)
        assert got[("a", 0)] == (0, [VALUE, VALUE])
        assert got[("b", 0)] == got[("c", 0)] == (0, [])

        smaller = await _ask(node, max_bytes=size + 10)  # the request's own limit, under the cap: one batch
        assert _record_bytes(smaller) == {"a": size, "b": 0, "c": 0}
        fetch.close_regions(smaller)

    asyncio.run(scenario())


def test_the_first_batch_over_fetch_max_bytes_still_comes_back_whole(spread):
    """KIP-74: a batch larger than the cap is sent whole when its partition is the first with data; the
    partitions after it get nothing in that answer."""
    big = b"y" * (3 * CAP)
    size = _fill(spread, 1, big)
    assert size > CAP
    node = _Node(spread)
    node.fetch_max_bytes = CAP

    async def scenario():
        resp = await _ask(node)
        assert _record_bytes(resp) == {"a": size, "b": 0, "c": 0}
        assert _fetched(resp)[("a", 0)] == (0, [big])

    asyncio.run(scenario())


def test_min_bytes_is_cut_to_the_capped_max_bytes(spread):
    """Kafka's fetchMinBytes is min(min_bytes, the capped max_bytes): a long poll asking for more than the cap
    is answered as soon as the cap's worth is there (here a first batch over it), not at its max_wait_ms (an
    hour: a fetch that waits for it fails by the test's own bound, LONG_S)."""
    big = b"z" * (2 * CAP)
    size = _fill(spread, 1, big)
    node = _Node(spread)
    node.fetch_max_bytes = CAP

    async def scenario():
        resp = await asyncio.wait_for(_ask(node, min_bytes=1 << 20, max_wait_ms=3_600_000), LONG_S)
        assert _record_bytes(resp) == {"a": size, "b": 0, "c": 0}
        fetch.close_regions(resp)

    asyncio.run(scenario())
