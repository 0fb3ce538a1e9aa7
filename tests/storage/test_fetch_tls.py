"""A consumer's Fetch on a TLS connection, in process: the Fetch handler over a real LogManager (partitions a-0,
b-0 and c-0 in three dirs). Over TLS the record data cannot leave as file regions (sendfile would bypass the
encryption), so the handler reads the bytes where it reads the batches, on each dir's worker or from the page cache
on the loop, and the answer carries bytes: the same bytes the regions of a plaintext fetch would send."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kjbod.broker.handlers import fetch
from kjbod.protocol.generated import FetchRequest
from tests.storage.conftest import kp_batch
from tests.storage.test_dir_workers import FV, _fetched, _Node

VALUE = b"t" * 100_000


def _ask(node, security_protocol: str):
    body = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=50 << 20, topics=[
        FetchRequest.FetchTopic(topic=name, partitions=[
            FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=8 << 20)])
        for name in "abc"])
    request = SimpleNamespace(api_version=FV, ctx=SimpleNamespace(listener_kind="broker",
                                                                   security_protocol=security_protocol))
    return fetch.handle(node, request, body)


def test_a_fetch_over_tls_answers_bytes_equal_to_the_regions(spread):
    for name in "abc":
        for i in range(20):  # about 2 MB a partition, in several batches
            spread.get(name, 0).append(kp_batch([VALUE + bytes([i])]))
    node = _Node(spread)

    async def scenario():
        plain = await _ask(node, "PLAINTEXT")
        assert all(isinstance(p.records, list) for t in plain.responses for p in t.partitions)
        over_tls = await _ask(node, "SSL")
        for t in over_tls.responses:
            (p,) = t.partitions
            assert p.records.__class__ is bytes and len(p.records) > 2_000_000, t.topic
        return _fetched(plain), _fetched(over_tls)

    plain, over_tls = asyncio.run(scenario())
    assert plain == over_tls
    assert plain[("a", 0)] == (0, [VALUE + bytes([i]) for i in range(20)])
