"""The broker's follower of the metadata log: a KRaft observer that fetches `__cluster_metadata` from the controller.

Strategy (Kafka's KafkaRaftClient as an observer, with MetadataLoader's "committed only" delivery):

* One task sends Fetch (the highest version both sides serve) on the controller channel: one topic
  `__cluster_metadata` (by topic id AAAAAAAAAAAAAAAAAAAAAQ from v13, by name before), partition 0, FetchOffset = the
  end of what it has received, LastFetchedEpoch = the epoch of the last batch received (0 before any, as an empty
  Kafka log says), CurrentLeaderEpoch = the leader epoch last learned, the cluster id, and this node's id as
  ReplicaId / ReplicaState.ReplicaId (how Kafka's brokers, which are observers, fetch; an observer is any replica
  that is not a voter) with MaxWaitMs 500 and MaxBytes 8 MiB (Kafka's values): a long poll, answered at once when
  there are new records.
* Batches are read with the storage layer's batch code (`kjbod.storage.records`: CRC-checked, a partial batch at
  the end of a response ignored, as consumers do) and the metadata frame with `kjbod.storage.metadata_log`.  A
  batch is handed to `on_batch` only once it is committed (its last offset below the high watermark of a later or
  the same response); a batch received above the high watermark waits.  Control batches (LeaderChange, snapshot
  markers) move the offsets but are not handed on.  `last_applied_offset` is the last offset of the last committed
  batch (handed on or a control batch): it is what the heartbeat reports as CurrentMetadataOffset.
* The answers KRaft gives and what the follower does:
    - records: as above; `high_watermark` is updated from every answer.
    - FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH / NOT_LEADER_OR_FOLLOWER with a CurrentLeader: adopt its epoch and
      fetch again at once (how an observer learns the epoch at start).
    - DivergingEpoch: drop what was received (never handed on) from its end offset and fetch from there.
    - SnapshotId (the fetch offset is before the log start, or OFFSET_OUT_OF_RANGE with one): fetch that snapshot
      with FetchSnapshot in chunks, hand its records to `on_batch` as one batch with `snapshot=True` (the image is
      to be rebuilt from them), then fetch from its end offset.
    - any other error, a timed-out request or an unreachable controller: the next fetch after exponential backoff.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog

from kjbod.net.backoff import ExponentialBackoff
from kjbod.net.controller_channel import ControllerChannel
from kjbod.net.correlator import PerVersion
from kjbod.net.errors import ClientError, UnsupportedVersionError
from kjbod.net.tasks import cancel_and_wait
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated.fetch_request import FetchPartition, FetchRequest, FetchTopic, ReplicaState
from kjbod.protocol.generated.registry import APIS
from kjbod.protocol.runtime import DecodeError
from kjbod.storage.errors import StorageError
from kjbod.storage.metadata_log import unframe_record
from kjbod.storage.records import crc_matches, iter_batches, iter_records

__all__ = ["METADATA_TOPIC", "METADATA_TOPIC_ID", "MetadataBatch", "MetadataFollower"]

log = structlog.get_logger("kjbod.broker.metadata_follower")

METADATA_TOPIC = "__cluster_metadata"
METADATA_TOPIC_ID = uuid.UUID(int=1)  # Kafka's Uuid.METADATA_TOPIC_ID, "AAAAAAAAAAAAAAAAAAAAAQ"
FETCH = 1
FETCH_SNAPSHOT = 59
MAX_WAIT_MS = 500  # Kafka: KafkaRaftClient.MAX_FETCH_WAIT_MS
MAX_FETCH_BYTES = 8 * 1024 * 1024  # Kafka: KafkaRaftClient.MAX_FETCH_SIZE_BYTES
_EPOCH_ERRORS = frozenset({ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
                           ErrorCode.NOT_LEADER_OR_FOLLOWER})


@dataclass(frozen=True, slots=True)
class MetadataBatch:
    """Committed metadata records: offsets `base_offset`..`last_offset`, written in leader epoch `epoch`.

    With `snapshot=True` the records are a whole snapshot ending before `last_offset + 1`: the image is rebuilt
    from them rather than changed by them."""

    base_offset: int
    last_offset: int
    epoch: int
    records: list[Any]
    snapshot: bool = False


class MetadataLogError(Exception):
    """Bytes from the controller that are not a valid metadata log (bad CRC, unknown record, bad frame)."""


BatchCallback = Callable[[MetadataBatch], Awaitable[None] | None]


@dataclass(slots=True)
class _Received:
    base_offset: int
    last_offset: int
    epoch: int
    records: list[Any] | None  # None: a control batch


class MetadataFollower:
    """Follows the controller's metadata log and hands each committed batch to `on_batch` (see the docstring)."""

    def __init__(self, channel: ControllerChannel, *, node_id: int, cluster_id: str, on_batch: BatchCallback,
                 start_offset: int = 0, last_fetched_epoch: int = 0, max_wait_ms: int = MAX_WAIT_MS,
                 max_bytes: int = MAX_FETCH_BYTES, directory_id: uuid.UUID | None = None,
                 backoff: ExponentialBackoff | None = None) -> None:
        self.channel = channel
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.on_batch = on_batch
        self.max_wait_ms = max_wait_ms
        self.max_bytes = max_bytes
        self.directory_id = directory_id or uuid.UUID(int=0)
        self.fetch_offset = start_offset  # end of what has been received
        self.last_fetched_epoch = last_fetched_epoch
        self.last_applied_offset = start_offset - 1
        self.high_watermark = -1
        self.leader_epoch = 0
        self.leader_id = -1
        self.fetches = 0
        self._pending: list[_Received] = []
        self._backoff = backoff or ExponentialBackoff(0.05, 1.0)
        self._task: asyncio.Task[None] | None = None
        self._applied = asyncio.Condition()
        self._failure: BaseException | None = None

    # ------------------------------------------------------------------------------------------ control

    def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("the metadata follower is already started")
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"broker-{self.node_id}-metadata")

    @property
    def failure(self) -> BaseException | None:
        """What stopped the follower, if it stopped by itself (it is logged, and raised to waiters)."""
        return self._failure

    async def close(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def wait_for_offset(self, offset: int, timeout: float | None = None) -> None:
        """Returns once every record up to `offset` has been handed on; raises what stopped the follower."""
        async with asyncio.timeout(timeout), self._applied:
            await self._applied.wait_for(lambda: self.last_applied_offset >= offset or self._failure is not None)
        if self.last_applied_offset < offset and self._failure is not None:
            raise self._failure

    # ------------------------------------------------------------------------------------------ the task

    async def _run(self) -> None:
        try:
            while True:
                delay = await self._fetch_once()
                if delay:
                    await asyncio.sleep(delay)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the callback failed (or a snapshot was bad): stop, and say so to waiters
            log.error("the metadata follower stopped", error=f"{type(e).__name__}: {e}")
            self._failure = e
            async with self._applied:
                self._applied.notify_all()

    def _fetch_request(self, version: int) -> FetchRequest:
        partition = FetchPartition(
            partition=0, current_leader_epoch=self.leader_epoch, fetch_offset=self.fetch_offset,
            last_fetched_epoch=self.last_fetched_epoch, log_start_offset=-1, partition_max_bytes=self.max_bytes,
            replica_directory_id=self.directory_id)
        return FetchRequest(
            # the replica id moved into ReplicaState at v15
            cluster_id=self.cluster_id, replica_id=self.node_id if version < 15 else -1,
            replica_state=ReplicaState(replica_id=self.node_id if version >= 15 else -1),
            max_wait_ms=self.max_wait_ms, min_bytes=0, max_bytes=self.max_bytes,
            topics=[FetchTopic(topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID, partitions=[partition])])

    async def _fetch_once(self) -> float:
        """One Fetch and what follows from its answer; returns how long to wait before the next."""
        try:
            response = await self.channel.send(
                PerVersion(self._fetch_request), FETCH, timeout=self.channel.request_timeout + self.max_wait_ms / 1000)
        except UnsupportedVersionError:
            raise
        except ClientError as e:
            log.info("metadata fetch failed", error=str(e))
            return self._backoff.next()
        self.fetches += 1
        if response.error_code:
            log.info("metadata fetch refused", error=_name(response.error_code))
            return self._backoff.next()
        partition = _the_partition(response)
        if partition is None:
            log.warning("metadata fetch answer without __cluster_metadata-0")
            return self._backoff.next()
        self._learn_leader(partition)
        if partition.snapshot_id.end_offset >= 0:
            await self._load_snapshot(partition.snapshot_id.end_offset, partition.snapshot_id.epoch)
            self._backoff.reset()
            return 0.0
        code = partition.error_code
        if code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            # a controller of a multi-voter quorum that does not lead: try the next controller address
            self.channel.look_elsewhere()
            return self._backoff.next() if partition.current_leader.leader_id < 0 else 0.0
        if code in _EPOCH_ERRORS:
            if partition.current_leader.leader_epoch >= 0:
                return 0.0  # the epoch was learned: ask again at once
            return self._backoff.next()
        if code:
            log.info("metadata fetch error", error=_name(code), fetch_offset=self.fetch_offset)
            return self._backoff.next()
        if partition.diverging_epoch.end_offset >= 0:
            self._truncate(partition.diverging_epoch.end_offset, partition.diverging_epoch.epoch)
            return 0.0
        delay = 0.0
        if partition.records:
            try:
                self._receive(partition.records)
            except MetadataLogError as e:  # keep what was good before it and ask again for the rest
                log.error("bad metadata from the controller", error=str(e), fetch_offset=self.fetch_offset)
                delay = self._backoff.next()
        if not delay:
            self._backoff.reset()
        if partition.high_watermark >= 0:
            self.high_watermark = partition.high_watermark
        await self._deliver_committed()
        return delay

    def _learn_leader(self, partition: Any) -> None:
        leader = partition.current_leader
        if leader.leader_epoch > self.leader_epoch:
            self.leader_epoch = leader.leader_epoch
        if leader.leader_id >= 0:
            self.leader_id = leader.leader_id

    def _receive(self, data: Any) -> None:
        view = memoryview(data)
        for pos, header in iter_batches(view):
            if header.last_offset < self.fetch_offset:
                continue  # wholly before what was asked for (a log read starts at the batch holding the offset)
            if header.magic != 2 or not crc_matches(view, pos, header):
                raise MetadataLogError(f"metadata batch at offset {header.base_offset} fails its CRC")
            # A fetch offset inside a batch (a start offset given by the caller): its earlier records are not ours.
            first = max(header.base_offset, self.fetch_offset)
            records: list[Any] | None = None
            if not header.is_control:
                try:
                    records = [unframe_record(r.value or b"") for r in iter_records(view[pos:pos + header.size])
                               if r.offset >= first]
                except (DecodeError, StorageError, ValueError) as e:
                    raise MetadataLogError(f"metadata batch at offset {header.base_offset}: {e}") from None
            self._pending.append(_Received(first, header.last_offset, header.partition_leader_epoch, records))
            self.fetch_offset = header.last_offset + 1
            self.last_fetched_epoch = header.partition_leader_epoch

    async def _deliver_committed(self) -> None:
        delivered = 0
        for batch in self._pending:
            if batch.last_offset >= self.high_watermark:
                break
            if batch.records is not None:
                await self._hand_on(MetadataBatch(batch.base_offset, batch.last_offset, batch.epoch, batch.records))
            delivered += 1
            await self._applied_up_to(batch.last_offset)
        if delivered:
            del self._pending[:delivered]

    async def _hand_on(self, batch: MetadataBatch) -> None:
        result = self.on_batch(batch)
        if inspect.isawaitable(result):
            await result

    async def _applied_up_to(self, offset: int) -> None:
        self.last_applied_offset = offset
        async with self._applied:
            self._applied.notify_all()

    def _truncate(self, end_offset: int, epoch: int) -> None:
        """DivergingEpoch: what was received from `end_offset` on is not the leader's log."""
        keep = max(end_offset, self.last_applied_offset + 1)  # committed records never diverge
        log.info("metadata log diverged", end_offset=end_offset, epoch=epoch, truncated_to=keep)
        self._pending = [b for b in self._pending if b.last_offset < keep]
        self.fetch_offset = keep
        self.last_fetched_epoch = self._pending[-1].epoch if self._pending else max(epoch, 0)

    async def _load_snapshot(self, end_offset: int, epoch: int) -> None:
        """Fetches snapshot (end_offset, epoch) whole and hands it on; the next fetch starts at its end."""
        info = APIS.get(FETCH_SNAPSHOT)
        if info is None:
            raise MetadataLogError("the controller offers a snapshot but this build has no FetchSnapshot codec")
        cls: Any = info.request
        position = 0
        chunks: list[bytes] = []
        while True:
            def request(version: int, position: int = position) -> Any:
                return cls(cluster_id=self.cluster_id, replica_id=self.node_id, max_bytes=self.max_bytes, topics=[
                    cls.TopicSnapshot(name=METADATA_TOPIC, partitions=[cls.PartitionSnapshot(
                        partition=0, current_leader_epoch=self.leader_epoch,
                        snapshot_id=cls.SnapshotId(end_offset=end_offset, epoch=epoch), position=position,
                        replica_directory_id=self.directory_id if version >= 1 else uuid.UUID(int=0))])])

            response = await self.channel.send(PerVersion(request), FETCH_SNAPSHOT,
                                               timeout=self.channel.request_timeout)
            code = response.error_code or _snapshot_partition_code(response)
            if code:
                raise MetadataLogError(f"FetchSnapshot of snapshot {end_offset}-{epoch} failed: {_name(code)}")
            part = response.topics[0].partitions[0]
            chunk = bytes(part.unaligned_records or b"")
            chunks.append(chunk)
            position += len(chunk)
            if position >= part.size or not chunk:
                break
        records: list[Any] = []
        for pos, header in iter_batches(data := memoryview(b"".join(chunks))):
            if not crc_matches(data, pos, header):
                raise MetadataLogError(f"snapshot {end_offset}-{epoch}: a batch fails its CRC")
            if header.is_control:
                continue  # SnapshotHeader / SnapshotFooter
            try:
                records.extend(unframe_record(r.value or b"") for r in iter_records(data[pos:pos + header.size]))
            except (DecodeError, StorageError, ValueError) as e:
                raise MetadataLogError(f"snapshot {end_offset}-{epoch}: {e}") from None
        log.info("loaded a metadata snapshot", end_offset=end_offset, epoch=epoch, records=len(records))
        self._pending.clear()
        self.fetch_offset = end_offset
        self.last_fetched_epoch = epoch
        await self._hand_on(MetadataBatch(0, end_offset - 1, epoch, records, snapshot=True))
        await self._applied_up_to(end_offset - 1)


def _the_partition(response: Any) -> Any:
    for topic in response.responses:
        if topic.topic == METADATA_TOPIC or topic.topic_id == METADATA_TOPIC_ID:
            for partition in topic.partitions:
                if partition.partition_index == 0:
                    return partition
    return None


def _snapshot_partition_code(response: Any) -> int:
    for topic in response.topics:
        for partition in topic.partitions:
            return int(partition.error_code)
    return int(ErrorCode.UNKNOWN_SERVER_ERROR)


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
