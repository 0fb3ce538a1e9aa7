"""An in-process controller that serves `__cluster_metadata` by Fetch (and FetchSnapshot), for the follower tests.

The log is a list of real record batches (built with the storage layer's batch writer; records framed as the
metadata log frames them).  `high_watermark` is set by the test, so batches can sit uncommitted above it.  Fetch is
answered as KRaft's leader does, in the parts the follower relies on: the leader epoch check (FENCED_LEADER_EPOCH
with the current leader), SnapshotId when the fetch offset is before the log start, records from the batch holding
the fetch offset up to the size limit (the last batch may be cut, as Kafka's reads are), a long poll that wakes on
`append()`.  `diverge` scripts one DivergingEpoch answer; `away` plays an unreachable controller.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from typing import Any

from kjbod.net.errors import BrokerConnectionError
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import FetchResponse, RequestHeader
from kjbod.protocol.generated.registry import APIS
from kjbod.storage.metadata_log import frame_record
from kjbod.storage.records import build_batch, parse_header

METADATA_TOPIC_ID = uuid.UUID(int=1)


def metadata_batch(records: list[Any], base_offset: int, epoch: int) -> bytes:
    return build_batch([(None, frame_record(r), [], 1_700_000_000_000) for r in records],
                       base_offset=base_offset, partition_leader_epoch=epoch)


def leader_change_batch(base_offset: int, epoch: int) -> bytes:
    """A control batch as KRaft writes at an election (key: version 0, type 2 = LEADER_CHANGE)."""
    return build_batch([(struct.pack(">hh", 0, 2), b"\x00\x00\x00\x01\x00\x00", [], 1_700_000_000_000)],
                       base_offset=base_offset, partition_leader_epoch=epoch, is_control=True)


class FakeMetadataController:
    def __init__(self, cluster_id: str = "fake-cluster", epoch: int = 1) -> None:
        self.cluster_id = cluster_id
        self.epoch = epoch
        self.batches: list[tuple[int, int, bytes]] = []  # (base offset, last offset, bytes)
        self.high_watermark = 0
        self.log_start = 0
        self.snapshot: tuple[int, int, bytes] | None = None  # (end offset, epoch, file bytes)
        self.diverge: tuple[int, int] | None = None  # (epoch, end offset) for the next fetch
        self.away = False
        self.fetches: list[Any] = []
        self.snapshot_requests: list[Any] = []
        self._appended = asyncio.Condition()

    @property
    def end_offset(self) -> int:
        return self.batches[-1][1] + 1 if self.batches else self.log_start

    async def append(self, data: bytes, *, commit: bool = True) -> None:
        header = parse_header(data)
        self.batches.append((header.base_offset, header.last_offset, data))
        if commit:
            self.high_watermark = header.last_offset + 1
        await self.notify()

    async def notify(self) -> None:
        async with self._appended:
            self._appended.notify_all()

    async def __call__(self, api_key: int, version: int, request: Any, header: RequestHeader) -> Any:
        if self.away:
            raise BrokerConnectionError("127.0.0.1", 9093, "connection refused")
        if api_key == 1:
            return await self._fetch(request)
        if api_key == 59:
            return self._fetch_snapshot(request)
        raise AssertionError(f"unexpected api {api_key}")

    def _response(self, **partition: Any) -> Any:
        return FetchResponse(responses=[FetchResponse.FetchableTopicResponse(
            topic="__cluster_metadata", topic_id=METADATA_TOPIC_ID, partitions=[FetchResponse.PartitionData(
                partition_index=0, high_watermark=self.high_watermark, log_start_offset=self.log_start,
                current_leader=FetchResponse.LeaderIdAndEpoch(leader_id=3000, leader_epoch=self.epoch),
                **partition)])])

    async def _fetch(self, r: Any, wait: bool = True) -> Any:
        if wait:
            self.fetches.append(r)
        assert r.cluster_id == self.cluster_id
        (topic,) = r.topics
        (p,) = topic.partitions
        if p.current_leader_epoch < self.epoch:
            return self._response(error_code=ErrorCode.FENCED_LEADER_EPOCH)
        if self.diverge is not None:
            epoch, end = self.diverge
            self.diverge = None
            return self._response(diverging_epoch=FetchResponse.EpochEndOffset(epoch=epoch, end_offset=end))
        if self.snapshot is not None and p.fetch_offset < self.log_start:
            end, epoch, _ = self.snapshot
            return self._response(snapshot_id=FetchResponse.SnapshotId(end_offset=end, epoch=epoch))
        if wait and p.fetch_offset >= self.end_offset and r.max_wait_ms > 0:
            try:
                async with asyncio.timeout(r.max_wait_ms / 1000), self._appended:
                    await self._appended.wait_for(lambda: p.fetch_offset < self.end_offset)
            except TimeoutError:
                pass
            return await self._fetch(r, wait=False)  # the log may have changed meanwhile: check it all again
        out = b""
        for _, last, data in self.batches:
            if last < p.fetch_offset:
                continue
            if out and len(out) + len(data) > p.partition_max_bytes:
                out += data[: p.partition_max_bytes - len(out)]  # a cut batch at the end, as Kafka may send
                break
            out += data
        return self._response(records=out or None)

    def _fetch_snapshot(self, r: Any) -> Any:
        self.snapshot_requests.append(r)
        cls = APIS[59].response
        assert self.snapshot is not None
        end, epoch, data = self.snapshot
        part = r.topics[0].partitions[0]
        chunk = data[part.position: part.position + r.max_bytes]
        return cls(topics=[cls.TopicSnapshot(name="__cluster_metadata", partitions=[cls.PartitionSnapshot(
            index=0, snapshot_id=cls.SnapshotId(end_offset=end, epoch=epoch), size=len(data),
            position=part.position, unaligned_records=chunk)])])

