"""Serving the metadata log on the controller listener: Fetch (key 1) of `__cluster_metadata` and FetchSnapshot
(key 59), as a KRaft leader answers its observers (brokers).

Version notes: Fetch v12+ carries the KRaft fields (CurrentLeader, DivergingEpoch, SnapshotId; tagged), v13+ names
the topic by id (`AAAAAAAAAAAAAAAAAAAAAQ`, Kafka's METADATA_TOPIC_ID), v17 adds the leader's endpoint; below v12 the
KRaft fields cannot be sent and are left out. FetchSnapshot v0-1 (v1: the leader's endpoint).

What a fetch gets (KafkaRaftClient.handleFetchRequest, in Kafka's order of checks):

* a ClusterId other than ours: top-level INCONSISTENT_CLUSTER_ID; not exactly `__cluster_metadata` partition 0:
  top-level INVALID_REQUEST; MaxWaitMs, FetchOffset or LastFetchedEpoch negative, or LastFetchedEpoch above
  CurrentLeaderEpoch: INVALID_REQUEST for the partition;
* CurrentLeaderEpoch below the controller's epoch: FENCED_LEADER_EPOCH, above it: UNKNOWN_LEADER_EPOCH; a service
  that is closed (the controller is shutting down): BROKER_NOT_AVAILABLE, also for fetches waiting then; all carry
  CurrentLeader {LeaderId, LeaderEpoch}, from which the fetcher learns the epoch (each controller start is a new
  epoch, so a broker sees this once after every controller restart);
* a fetch from offset 0 while a snapshot exists, or below the log start: SnapshotId {EndOffset, Epoch} of the
  latest snapshot and no records (the fetcher then uses FetchSnapshot); below the log start with no snapshot:
  OFFSET_OUT_OF_RANGE;
* a LastFetchedEpoch whose end offset in this log is below FetchOffset (or an epoch this log does not have):
  DivergingEpoch {Epoch, EndOffset}, where the fetcher truncates to;
* otherwise committed batches from FetchOffset, about MaxBytes (at most 8 MiB, Kafka's metadata fetch size, and at
  least one batch). With nothing new the request waits up to MaxWaitMs for a commit (the long poll) and then
  answers with whatever is committed, possibly nothing. Every answer carries HighWatermark and LogStartOffset.

On a voter of a KRaft quorum (`leadership` given: kjbod.controller.raft_driver.RaftDriver), the leader and epoch
are the quorum's: a controller that does not lead answers NOT_LEADER_OR_FOLLOWER with CurrentLeader (and, v17+,
the leader's endpoint from `endpoints`), so an observer finds the leader; only committed batches are served.

Functions here are transport-free: the controller's handlers call `MetadataFetchService.fetch` (a coroutine) and
`MetadataFetchService.fetch_snapshot` with the decoded request and its version.
"""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import FetchRequest, FetchResponse, FetchSnapshotRequest, FetchSnapshotResponse
from kjbod.protocol.generated import fetch_response as fr
from kjbod.protocol.generated import fetch_snapshot_response as fsr
from kjbod.storage.errors import OffsetOutOfRangeError
from kjbod.storage.metadata_log import TOPIC, MetadataLog
from kjbod.storage.metadata_snapshot import SnapshotId

METADATA_TOPIC_ID = UUID(int=1)  # Kafka's Uuid.METADATA_TOPIC_ID, text AAAAAAAAAAAAAAAAAAAAAQ
MAX_FETCH_BYTES = 8 << 20  # Kafka's metadata log fetch size (MAX_FETCH_SIZE_BYTES)
FIRST_KRAFT_FETCH_VERSION = 12


# Fetch v18's HighWatermark when the replica does not say (the field's default): never behind.
HW_NOT_SAID = 2**63 - 1


def hw_behind(part: Any, version: int, leader_hw: int) -> bool:
    """KIP-1166 (Fetch v18): whether the fetching replica's known high watermark (-1: none) is behind the leader's,
    so the fetch is answered without waiting and the replica learns the new one at once."""
    return version >= 18 and part.high_watermark != HW_NOT_SAID and leader_hw >= 0 and part.high_watermark < leader_hw


class MetadataFetchService:
    """Answers observers' Fetch and FetchSnapshot from one MetadataLog; wakes long polls on each commit."""

    def __init__(self, mlog: MetadataLog, *, cluster_id: str, node_id: int,
                 endpoint: tuple[str, int] | None = None, leadership: Any = None,
                 endpoints: dict[int, tuple[str, int]] | None = None) -> None:
        self.mlog = mlog
        self.cluster_id = cluster_id
        self.node_id = node_id
        self.endpoint = endpoint
        self.leadership = leadership  # the quorum (leader_id, epoch, is_leader), or None: this node leads alone
        self.endpoints = endpoints or {}  # the voters' controller endpoints, for the leader's NodeEndpoint
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: set[asyncio.Future[None]] = set()
        self._closed = False
        mlog.add_commit_listener(self._on_commit)

    def close(self) -> None:
        """Stop serving (the controller shuts down): waiting fetches answer BROKER_NOT_AVAILABLE, as Kafka's do."""
        self._closed = True
        self.mlog.remove_commit_listener(self._on_commit)
        self._wake()

    # -------------------------------------------------------------------------------- long poll

    def _on_commit(self, _hw: int) -> None:
        """Called on the appending thread: wake the waiting fetches on the event loop."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._wake)
        except RuntimeError:  # the loop closed in between
            pass

    def _wake(self) -> None:
        for fut in list(self._waiters):
            if not fut.done():
                fut.set_result(None)

    # -------------------------------------------------------------------------------- Fetch

    async def fetch(self, body: FetchRequest, version: int) -> FetchResponse:
        top = self._check_fetch_request(body, version)
        if top is not None:
            return top
        part = body.topics[0].partitions[0]
        if (body.max_wait_ms < 0 or part.fetch_offset < 0 or part.last_fetched_epoch < 0
                or part.last_fetched_epoch > part.current_leader_epoch):
            return self._fetch_response(version, ErrorCode.INVALID_REQUEST)
        replica = body.replica_state.replica_id if version >= 15 else body.replica_id
        if self.leadership is not None and hasattr(self.leadership, "observer_fetched"):
            self.leadership.observer_fetched(replica, part.fetch_offset)  # DescribeQuorum lists the observers
        response = self._try_complete(part, body.max_bytes, version)
        pd = response.responses[0].partitions[0]
        if (pd.error_code or pd.records or body.max_wait_ms == 0 or pd.diverging_epoch.epoch != -1
                or pd.snapshot_id.end_offset != -1 or hw_behind(part, version, pd.high_watermark)):
            return response
        loop = asyncio.get_running_loop()
        self._loop = loop
        deadline = loop.time() + body.max_wait_ms / 1000
        while self.mlog.high_watermark <= part.fetch_offset and not self._closed:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return response
            fut: asyncio.Future[None] = loop.create_future()
            self._waiters.add(fut)
            try:
                await asyncio.wait_for(fut, remaining)
            except TimeoutError:
                return response
            finally:
                self._waiters.discard(fut)
        return self._try_complete(part, body.max_bytes, version)

    def _check_fetch_request(self, body: FetchRequest, version: int) -> FetchResponse | None:
        if body.cluster_id is not None and body.cluster_id != self.cluster_id:
            return FetchResponse(error_code=ErrorCode.INCONSISTENT_CLUSTER_ID)
        if len(body.topics) != 1 or len(body.topics[0].partitions) != 1:
            return FetchResponse(error_code=ErrorCode.INVALID_REQUEST)
        t = body.topics[0]
        named = t.topic_id == METADATA_TOPIC_ID if version >= 13 else t.topic == TOPIC
        if not named or t.partitions[0].partition != 0:
            return FetchResponse(error_code=ErrorCode.INVALID_REQUEST)
        return None

    def _leader(self) -> tuple[int, int, bool]:
        """(leader id, epoch, whether this node leads)."""
        q = self.leadership
        if q is None:
            return self.node_id, self.mlog.epoch, True
        return q.leader_id, q.epoch, q.is_leader

    def _leader_error(self, current_leader_epoch: int) -> int:
        _leader, epoch, leads = self._leader()
        if current_leader_epoch < epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if current_leader_epoch > epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        if not leads:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self._closed or not self.mlog.is_open:
            return ErrorCode.BROKER_NOT_AVAILABLE
        return ErrorCode.NONE

    def _try_complete(self, part: Any, max_bytes: int, version: int) -> FetchResponse:
        error = self._leader_error(part.current_leader_epoch)
        if error:
            return self._fetch_response(version, error)
        kind, at = self._validate_offset(part.fetch_offset, part.last_fetched_epoch)
        if kind == "snapshot":
            return self._fetch_response(version, snapshot=at)
        if kind == "diverging":
            return self._fetch_response(version, diverging=at)
        try:
            records = self.mlog.read(part.fetch_offset, max(1, min(max_bytes, MAX_FETCH_BYTES)))
        except OffsetOutOfRangeError:
            return self._fetch_response(version, ErrorCode.OFFSET_OUT_OF_RANGE)
        return self._fetch_response(version, records=records)

    def _validate_offset(self, offset: int, last_epoch: int) -> tuple[str, SnapshotId | tuple[int, int] | None]:
        """Kafka's ReplicatedLog.validateOffsetAndEpoch, for a log whose start is a segment boundary at or
        below its oldest kept snapshot: ("valid" | "snapshot" | "diverging", where)."""
        mlog = self.mlog
        latest = mlog.latest_snapshot()
        if offset == 0 and latest is not None:
            return "snapshot", latest
        if offset == 0 and mlog.log_start_offset == 0:
            return "valid", None
        if offset < mlog.log_start_offset:
            return ("snapshot", latest) if latest is not None else ("valid", None)  # the read says out of range
        end = mlog.end_offset_for_epoch(last_epoch)
        if end is None:
            if latest is not None:
                return "snapshot", latest
            return "diverging", (mlog.log_start_offset, -1)
        end_offset, epoch = end
        if epoch != last_epoch or end_offset < offset:
            return "diverging", (end_offset, epoch)
        return "valid", None

    def _fetch_response(self, version: int, error: int = ErrorCode.NONE, *, records: bytes = b"",
                        snapshot: Any = None, diverging: Any = None) -> FetchResponse:
        mlog = self.mlog
        pd = fr.PartitionData(partition_index=0, error_code=error, high_watermark=mlog.high_watermark,
                              log_start_offset=mlog.log_start_offset, records=records)
        leader, epoch, _leads = self._leader()
        if version >= FIRST_KRAFT_FETCH_VERSION:
            pd.current_leader = fr.LeaderIdAndEpoch(leader_id=leader, leader_epoch=epoch)
            if snapshot is not None:
                pd.snapshot_id = fr.SnapshotId(end_offset=snapshot.end_offset, epoch=snapshot.epoch)
            if diverging is not None:
                pd.diverging_epoch = fr.EpochEndOffset(epoch=diverging[1], end_offset=diverging[0])
        elif snapshot is not None or diverging is not None:
            pd.error_code = ErrorCode.OFFSET_OUT_OF_RANGE  # no field to say where: the fetcher starts over
        topic = (fr.FetchableTopicResponse(topic_id=METADATA_TOPIC_ID, partitions=[pd]) if version >= 13
                 else fr.FetchableTopicResponse(topic=TOPIC, partitions=[pd]))
        response = FetchResponse(responses=[topic])
        where = self.endpoint if leader == self.node_id else self.endpoints.get(leader)
        if version >= 17 and where is not None and leader >= 0:
            host, port = where
            response.node_endpoints = [fr.NodeEndpoint(node_id=leader, host=host, port=port)]
        return response

    # -------------------------------------------------------------------------------- FetchSnapshot

    def fetch_snapshot(self, body: FetchSnapshotRequest, version: int) -> FetchSnapshotResponse:
        """KafkaRaftClient.handleFetchSnapshotRequest: a chunk of a snapshot from `Position`."""
        if body.cluster_id is not None and body.cluster_id != self.cluster_id:
            return FetchSnapshotResponse(error_code=ErrorCode.INCONSISTENT_CLUSTER_ID)
        if len(body.topics) != 1 or len(body.topics[0].partitions) != 1:
            return FetchSnapshotResponse(error_code=ErrorCode.INVALID_REQUEST)
        t, p = body.topics[0], body.topics[0].partitions[0]
        if t.name != TOPIC or p.partition != 0:
            return self._snapshot_response(version, t.name, p.partition,
                                           fsr.PartitionSnapshot(index=p.partition,
                                                                 error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
        leader_id, epoch, _leads = self._leader()
        leader = fsr.LeaderIdAndEpoch(leader_id=leader_id, leader_epoch=epoch)
        error = self._leader_error(p.current_leader_epoch)
        if error:
            return self._snapshot_response(version, TOPIC, 0, fsr.PartitionSnapshot(error_code=error,
                                                                                     current_leader=leader))
        sid = SnapshotId(p.snapshot_id.end_offset, p.snapshot_id.epoch)
        whole = self.mlog.read_snapshot(sid, 0, 0)
        if whole is None:
            return self._snapshot_response(version, TOPIC, 0, fsr.PartitionSnapshot(
                error_code=ErrorCode.SNAPSHOT_NOT_FOUND, current_leader=leader))
        size = whole[0]
        if p.position < 0 or p.position >= size:
            return self._snapshot_response(version, TOPIC, 0, fsr.PartitionSnapshot(
                error_code=ErrorCode.POSITION_OUT_OF_RANGE, current_leader=leader))
        if self.leadership is not None and hasattr(self.leadership, "snapshot_fetched"):
            self.leadership.snapshot_fetched(body.replica_id)  # a voter catching up counts as fetching
        chunk = self.mlog.read_snapshot(sid, p.position, max(1, min(body.max_bytes, size)))
        data = chunk[1] if chunk is not None else b""
        return self._snapshot_response(version, TOPIC, 0, fsr.PartitionSnapshot(
            snapshot_id=fsr.SnapshotId(end_offset=sid.end_offset, epoch=sid.epoch), current_leader=leader,
            size=size, position=p.position, unaligned_records=data))

    def _snapshot_response(self, version: int, name: str, partition: int,
                           ps: fsr.PartitionSnapshot) -> FetchSnapshotResponse:
        ps.index = partition
        response = FetchSnapshotResponse(topics=[fsr.TopicSnapshot(name=name, partitions=[ps])])
        if version >= 1 and self.endpoint is not None:
            host, port = self.endpoint
            response.node_endpoints = [fsr.NodeEndpoint(node_id=self.node_id, host=host, port=port)]
        return response
