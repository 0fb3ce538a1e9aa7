"""QuorumController: the one writer of cluster metadata.

Strategy (Kafka's QuorumController with a single voter): every write is an event on one queue, drained by one
task.  An event computes a `ControllerResult` (records and a response) from the current image without changing
anything; the records are appended to the metadata log as one batch and fsynced off the event loop; then they
are replayed into the next image, the listeners (the broker role's publisher in a combined node) see the delta,
and only then does the caller get the response.  So nothing is answered that a crash could undo, and every
reader sees whole changes.

`handle_request(api_key, version, request, header)` is the one entry for requests (the in-process controller
channel and the controller listener both call it).  A session timer fences one expired broker at a time.  When
the log has grown by `max_bytes_between_snapshots` since the last snapshot, or `max_snapshot_interval_ms` has passed
since it and something was written, the writer writes one (off the loop), as Kafka's SnapshotGenerator does.

As one voter of a KRaft quorum (`attach_quorum`, kjbod.controller.raft_driver): the image holds only committed
records. Every voter replays the committed log as its high watermark moves (the leader its own writes too, read
back once committed), so nothing a failover undoes is ever applied. The controller is active only on the
quorum's leader, and only once its own LeaderChangeMessage is committed and replayed (so it has every record an
earlier leader committed); a write appends through the quorum and is answered once it is committed and replayed.
Elsewhere, and when leadership is lost with writes in flight or queued, requests get NOT_CONTROLLER. Broker
sessions start afresh on activation, as Kafka's do. Every voter writes its own snapshots of what it has replayed
(the committed image at `applied_end`), on the same trigger as a single controller; a voter that installs a
snapshot fetched from the leader (FetchSnapshot) replaces its image with the snapshot's (`load_snapshot`).

What is read from the log goes through a MetadataLoader (kjbod.metadata.loader): the image and the listeners see a
KIP-868 metadata transaction only once its EndTransactionRecord is read, and no snapshot is written while one is
open.  On activation the controller first aborts a transaction an earlier controller left open, and writes the
bootstrap records inside one ("Bootstrap records"), as Kafka's ActivationRecordsGenerator does.  While active it
appends a NoOpRecord every `max_idle_interval_ms` (metadata.max.idle.interval.ms), and a registration manager
(kjbod.controller.registration, `attach_registration`) registers this controller with the active one (KIP-919).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import time
from collections.abc import Callable
from typing import Any

import structlog

from kjbod.controller import (
    acls,
    alter_partition,
    client_quotas,
    cluster_control,
    configs,
    directories,
    elections,
    features,
    producer_ids,
    reassignment,
    replication_control,
    scram,
    throttles,
    tokens,
)
from kjbod.controller.errors import error_response
from kjbod.controller.heartbeats import BrokerHeartbeatManager
from kjbod.controller.partition_change import UNCLEAN_KEY
from kjbod.controller.registration import ControllerRegistrationManager
from kjbod.controller.result import ConfigPolicy, ControllerResult, ControllerSettings
from kjbod.metadata import (
    EMPTY_IMAGE,
    MetadataDelta,
    MetadataImage,
    MetadataLoader,
    image_records,
    replay,
)
from kjbod.metadata import features as ft
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    AbortTransactionRecord,
    AllocateProducerIdsRequest,
    AlterClientQuotasRequest,
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterInterbrokerThrottledRatesRequest,
    AlterInterbrokerThrottledReplicasRequest,
    AlterPartitionReassignmentsRequest,
    AlterPartitionRequest,
    AlterUserScramCredentialsRequest,
    AssignReplicasToDirsRequest,
    BeginTransactionRecord,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    ControllerRegistrationRequest,
    CreateAclsRequest,
    CreateDelegationTokenRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    DeleteTopicsRequest,
    ElectLeadersRequest,
    EndTransactionRecord,
    ExpireDelegationTokenRequest,
    FeatureLevelRecord,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListPartitionReassignmentsRequest,
    NoOpRecord,
    ReassignPartitionsRequest,
    RenewDelegationTokenRequest,
    UnregisterBrokerRequest,
    UpdateFeaturesRequest,
)
from kjbod.protocol.generated.alter_configs_response import AlterConfigsResourceResponse as AlterResp
from kjbod.protocol.generated.incremental_alter_configs_response import (
    AlterConfigsResourceResponse as IncrementalResp,
)
from kjbod.storage.errors import OffsetOutOfRangeError
from kjbod.storage.metadata_log import unframe_record
from kjbod.storage.records import iter_batches, iter_records

log = structlog.get_logger("kjbod.controller")


class NotControllerError(Exception):
    """This controller is not the quorum's active controller (or stopped being it before a write committed)."""

Operation = Callable[[MetadataImage, int], ControllerResult]
Listener = Callable[[MetadataDelta, MetadataImage], None]
SET, DELETE = 0, 1


UNCLEAN_SWEEP_S = 300  # Kafka's uncleanLeaderElectionCheckIntervalMs


def _per_resource(response_cls: Any, item_cls: Any, resources: list[Any]
                  ) -> Callable[[list[tuple[int, str | None]]], Any]:
    """Builds an (Incremental)AlterConfigs response from one (error code, message) per resource."""
    return lambda answers: response_cls(throttle_time_ms=0, responses=[
        item_cls(error_code=code, error_message=msg, resource_type=r.resource_type, resource_name=r.resource_name)
        for r, (code, msg) in zip(resources, answers, strict=True)])


def _finishing(op: Operation) -> Operation:
    """`op` whose records, when they end reassignments, also remove the KIP-179 throttles the controller set for
    them, in the same batch (kjbod.controller.throttles.finish)."""
    def finished(image: MetadataImage, offset: int) -> ControllerResult:
        result = op(image, offset)
        if result.records:
            result.records = throttles.finish(image, result.records)
        return result

    return finished


def _key(message: Any) -> int:
    key = message.API_KEY
    assert isinstance(key, int)
    return key


class QuorumController:
    def __init__(self, settings: ControllerSettings, metadata_log: Any, policy: ConfigPolicy, *,
                 clock: Callable[[], float] = time.monotonic,
                 config_aliases: dict[str, str] | None = None) -> None:
        self.settings = settings
        self.log = metadata_log
        self.policy = policy
        self.clock = clock
        self.config_aliases = config_aliases or {}
        self._image: MetadataImage = EMPTY_IMAGE
        # what the log holds, read as KIP-868 transactions allow: `image` is its last published image
        self.loader = MetadataLoader(EMPTY_IMAGE)
        self.heartbeats = BrokerHeartbeatManager(settings)
        self._listeners: list[Listener] = []
        self._queue: asyncio.Queue[tuple[Operation, asyncio.Future[Any]]] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._busy = False  # the writer is between taking an event and finishing it
        self.election_passes = 0  # passes of the election timers (tests wait on it)
        self.reassignment_plans: reassignment.Plans = {}  # KIP-435 batched reassignments (final targets)
        self._io = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kjbod-metadata-log")
        # KRaft quorum mode (attach_quorum): the driver, the end of what is replayed, and whether this controller
        # is the active one
        self.raft: Any = None
        self.applied_end = 0
        self.active = True
        self._applied_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._catching_up: asyncio.Task[None] | None = None
        self._last_snapshot_at = clock()  # the time trigger counts from the start, as Kafka's does
        # KIP-919: this controller's own registration with the active one (attach_registration)
        self.registration: ControllerRegistrationManager | None = None
        self._registration_closers: list[Callable[[], None]] = []
        self._log_has_records = False  # some metadata record was replayed (an activation then keeps its levels)
        # api key -> (version, request) -> the operation that answers it
        self._handlers: dict[int, Callable[[int, Any], Operation]] = {
            _key(BrokerRegistrationRequest): self._register,
            _key(ControllerRegistrationRequest): self._register_controller,
            _key(BrokerHeartbeatRequest): self._heartbeat,
            _key(UnregisterBrokerRequest): self._unregister,
            _key(CreateTopicsRequest): self._create_topics,
            _key(CreatePartitionsRequest): self._create_partitions,
            _key(DeleteTopicsRequest): self._delete_topics,
            _key(AlterConfigsRequest): self._alter_configs,
            _key(IncrementalAlterConfigsRequest): self._incremental_alter_configs,
            _key(AllocateProducerIdsRequest): self._allocate_producer_ids,
            _key(AssignReplicasToDirsRequest): self._assign_replicas_to_dirs,
            _key(AlterPartitionRequest): self._alter_partition,
            _key(ElectLeadersRequest): self._elect_leaders,
            _key(AlterPartitionReassignmentsRequest): self._alter_partition_reassignments,
            _key(ListPartitionReassignmentsRequest): self._list_partition_reassignments,
            _key(ReassignPartitionsRequest): self._reassign_partitions,
            _key(AlterInterbrokerThrottledRatesRequest): self._alter_throttled_rates,
            _key(AlterInterbrokerThrottledReplicasRequest): self._alter_throttled_replicas,
            _key(AlterUserScramCredentialsRequest): self._alter_user_scram_credentials,
            _key(AlterClientQuotasRequest): self._alter_client_quotas,
            _key(CreateAclsRequest): self._create_acls,
            _key(DeleteAclsRequest): self._delete_acls,
            _key(UpdateFeaturesRequest): self._update_features,
            _key(CreateDelegationTokenRequest): self._create_delegation_token,
            _key(RenewDelegationTokenRequest): self._renew_delegation_token,
            _key(ExpireDelegationTokenRequest): self._expire_delegation_token,
        }

    @property
    def image(self) -> MetadataImage:
        return self._image

    @image.setter
    def image(self, image: MetadataImage) -> None:
        # The partition records' version follows the replayed metadata.version (kjbod.storage.metadata_records).
        self._image = image
        mlog = self.raft.mlog if self.raft is not None else self.log
        if hasattr(mlog, "metadata_version"):
            mlog.metadata_version = image.features.get(ft.METADATA_VERSION)

    def _bootstrap_levels(self) -> Any:
        mlog = self.raft.mlog if self.raft is not None else self.log
        return getattr(mlog, "bootstrap_levels", None)

    def _activation_levels(self, image: MetadataImage) -> dict[str, int] | None:
        return ft.activation_levels(image, self._bootstrap_levels(), log_has_records=self._log_has_records)

    def _activation_due(self) -> bool:
        return self.loader.in_transaction or self._activation_levels(self.image) is not None

    def _activation(self, image: MetadataImage, _offset: int) -> ControllerResult:
        """Kafka's activation records (its ActivationRecordsGenerator): an AbortTransactionRecord when the log
        ends inside a metadata transaction an earlier controller left open; then, for a log without a
        metadata.version, the feature levels it starts at (kjbod.metadata.features.activation_levels;
        `bootstrap.checkpoint` names them) and, with eligible.leader.replicas.version above 0, the cluster-wide
        min.insync.replicas the ELR is kept against (and no broker's own value), inside a metadata transaction
        named "Bootstrap records" (KIP-868: every metadata.version kjbod runs has them)."""
        records: list[Any] = []
        if self.loader.in_transaction:
            log.warning("metadata_transaction_aborted", start_offset=self.loader.transaction_start,
                        reason="Controller failover")
            records.append(AbortTransactionRecord(reason="Controller failover"))
        levels = self._activation_levels(image)
        if levels is None:
            return ControllerResult(records, None)
        in_txn = levels.get(ft.METADATA_VERSION, ft.LATEST_METADATA_VERSION) >= ft.TRANSACTIONS_METADATA_VERSION
        if in_txn:
            records.append(BeginTransactionRecord(name="Bootstrap records"))
        records += [FeatureLevelRecord(name=n, feature_level=v) for n, v in
                    sorted(levels.items(), key=lambda kv: (kv[0] != ft.METADATA_VERSION, kv[0]))]
        if levels.get(ft.ELR_VERSION, 0) > 0:  # an old log may hold brokers' own min.insync.replicas
            records += configs.elr_safety_records(image, self.settings.min_insync_replicas)
        if in_txn:
            records.append(EndTransactionRecord())
        log.info("metadata_levels_bootstrapped", levels=levels)
        return ControllerResult(records, None)

    def _submit_activation(self) -> None:
        """Writes the activation records as the first batch; no other write goes before them (`_run` writes them
        first if they are still missing), and a failed attempt is logged as an error and retried."""
        def done(f: asyncio.Future[Any]) -> None:
            if f.cancelled() or f.exception() is None:
                return
            log.error("metadata_levels_not_written", error=str(f.exception()), retry_in_s=1)
            if self._tasks:
                asyncio.get_running_loop().call_later(1.0, self._retry_activation)

        self.submit(self._activation).add_done_callback(done)

    def _retry_activation(self) -> None:
        if self._tasks and self.active and self._activation_due():
            self._submit_activation()

    # ------------------------------------------------------------------------------------------ lifecycle
    def load(self) -> MetadataImage:
        """Replays the metadata log (a snapshot's records first when the log has one) into the image."""
        records = self.log.load()
        self.loader = MetadataLoader(EMPTY_IMAGE)
        self._log_has_records = bool(records)
        # Each record's own offset (control records take offsets too; a snapshot's records carry its end).
        published = self.loader.load(zip(records, self.log.loaded_offsets, strict=True))
        self._note_faults()
        self.image = self.loader.image
        self.reassignment_plans = reassignment.plans_from(self.image)  # batched reassignments go on
        self.heartbeats.dirs.note_records(records)
        dropped = sum(delta.dropped for delta, _ in published)
        if dropped:
            log.warning("metadata_records_dropped", count=dropped,
                        reason="they name topics, partitions or broker epochs the log does not have")
        return self.image

    def _note_faults(self) -> None:
        for fault in self.loader.faults:
            log.error("metadata_transaction_fault", fault=fault)
        self.loader.faults.clear()

    def _publish(self, published: list[tuple[MetadataDelta, MetadataImage]]) -> None:
        """The images the loader let out, one by one, to this controller and its listeners."""
        self._note_faults()
        for delta, image in published:
            self.image = image
            for listener in self._listeners:
                try:
                    listener(delta, image)
                except Exception:
                    log.exception("metadata_listener_failed")

    def attach_quorum(self, driver: Any, records: list[Any]) -> MetadataImage:
        """Run as one voter of a KRaft quorum (see the module docstring), on `driver`'s metadata log (opened
        `replicated=True`; `records` is what its load() returned, instead of calling `load` here). Replays what
        is known committed (a snapshot) and returns that image; the rest follows as the quorum commits it."""
        self.raft = driver
        self.active = False
        mlog = driver.mlog
        self.applied_end = mlog.high_watermark
        kept = [(rec, off) for rec, off in zip(records, mlog.loaded_offsets, strict=True) if off < self.applied_end]
        self.loader = MetadataLoader(EMPTY_IMAGE)
        self.loader.load(kept)
        self._note_faults()
        self.image = self.loader.image
        self._log_has_records = bool(kept)
        self.heartbeats.dirs.note_records([r for r, _ in kept])
        mlog.add_commit_listener(self._on_commit)
        driver.add_leader_listener(self._on_leader_change)
        if hasattr(driver, "add_snapshot_listener"):
            driver.add_snapshot_listener(self.load_snapshot)
        return self.image

    def _on_commit(self, _hw: int) -> None:
        if self._catching_up is None or self._catching_up.done():
            self._catching_up = asyncio.get_running_loop().create_task(self._catch_up(), name="kjbod-controller-replay")

    async def _catch_up(self) -> None:
        """Replay the committed log from `applied_end` to the high watermark, batch by batch."""
        mlog = self.raft.mlog
        while self.applied_end < mlog.high_watermark:
            start = self.applied_end
            try:
                data = await self.raft.run_on_worker(mlog.read, start, 8 << 20)
            except OffsetOutOfRangeError:
                return  # a snapshot fetched from the leader replaced the log under us (load_snapshot follows)
            if not data or self.applied_end != start:
                return
            view = memoryview(data)
            records: list[tuple[Any, int]] = []
            end = start
            for pos, header in iter_batches(view):
                if header.next_offset <= start:
                    continue
                if not header.is_control:
                    for rec in iter_records(view[pos:pos + header.size]):
                        if rec.offset >= start and rec.value is not None:
                            records.append((unframe_record(rec.value), rec.offset))
                end = header.next_offset
            if end == start:
                return
            if records:
                self._log_has_records = True
                self._publish(self.loader.load(records))
                self.heartbeats.dirs.note_records([r for r, _ in records])
            self.applied_end = end
            self._wake_applied()
            self._maybe_activate()
            await self._maybe_snapshot_replicated()

    async def _maybe_snapshot_replicated(self) -> None:
        """A voter's snapshot of the committed image it has replayed, once enough bytes were written since the
        last one (on the quorum's file worker, so it never runs beside an append or a truncation)."""
        mlog = self.raft.mlog
        end = self.applied_end
        if self.loader.in_transaction:  # never a snapshot inside a metadata transaction (KIP-868)
            return
        if not self._snapshot_due(mlog.bytes_since_snapshot) or end <= mlog.log_start_offset:
            return
        latest = mlog.latest_snapshot()
        if latest is not None and latest.end_offset >= end:
            return
        await self.raft.run_on_worker(mlog.write_snapshot, image_records(self.image), end)
        self._last_snapshot_at = self.clock()
        log.info("metadata_snapshot_written", end_offset=end, node_id=self.settings.node_id)

    def _snapshot_due(self, bytes_since: int) -> bool:
        """metadata.log.max.record.bytes.between.snapshots reached, or metadata.log.max.snapshot.interval.ms
        passed since the last snapshot with something written since."""
        if bytes_since >= self.settings.max_bytes_between_snapshots:
            return True
        interval = self.settings.max_snapshot_interval_ms
        return interval > 0 and bytes_since > 0 and (self.clock() - self._last_snapshot_at) * 1000 >= interval

    def load_snapshot(self, records: list[Any], end_offset: int) -> None:
        """This voter installed a snapshot fetched from the leader: its records are the image up to
        `end_offset` (exclusive); replay them onto an empty image and go on from there."""
        self._log_has_records = self._log_has_records or bool(records)
        self.loader.reset(EMPTY_IMAGE)
        published = self.loader.load((rec, end_offset - 1) for rec in records)
        self._note_faults()
        delta, image = published[-1] if published else (MetadataDelta(EMPTY_IMAGE), EMPTY_IMAGE)
        self.image = image
        self.heartbeats.dirs.note_records(records)
        self.reassignment_plans = reassignment.plans_from(image)
        self.applied_end = end_offset
        log.info("metadata_snapshot_loaded", end_offset=end_offset, records=len(records),
                 node_id=self.settings.node_id)
        for listener in self._listeners:
            try:
                listener(delta, image)
            except Exception:
                log.exception("metadata_listener_failed")
        self._wake_applied()
        self._maybe_activate()

    def _wake_applied(self) -> None:
        still = []
        for offset, fut in self._applied_waiters:
            if fut.done():
                continue
            if self.applied_end >= offset:
                fut.set_result(None)
            else:
                still.append((offset, fut))
        self._applied_waiters = still

    def _maybe_activate(self) -> None:
        raft = self.raft
        start = getattr(raft, "leader_epoch_start", None)
        if self.active or not raft.is_leader or start is None or self.applied_end <= start:
            return
        self.active = True
        self.heartbeats.sessions.clear()  # every broker's session starts now (Kafka's activation)
        self.reassignment_plans = reassignment.plans_from(self.image)
        if self._tasks and self._activation_due():
            self._submit_activation()
        log.info("controller_activated", node_id=self.settings.node_id, epoch=raft.epoch,
                 offset=self.applied_end)

    def _on_leader_change(self, epoch: int, leader_id: int, local: bool) -> None:
        if self.active:
            log.info("controller_deactivated", node_id=self.settings.node_id, epoch=epoch, leader=leader_id)
        self.active = False
        for _offset, fut in self._applied_waiters:  # writes in flight: their leadership is gone
            if not fut.done():
                fut.set_exception(NotControllerError(f"leadership moved to {leader_id} in epoch {epoch}"))
        self._applied_waiters = []
        while not self._queue.empty():
            _, fut = self._queue.get_nowait()
            if not fut.done():
                fut.set_exception(NotControllerError(f"leadership moved to {leader_id} in epoch {epoch}"))

    async def _commit_replicated(self, records: list[Any]) -> None:
        try:
            _base, end = await self.raft.append(records)
        except Exception as e:
            if type(e).__name__ == "NotLeaderError":
                raise NotControllerError(str(e)) from None
            raise
        if self.applied_end >= end:
            return
        if not self.active:  # leadership went while the batch was being written
            raise NotControllerError("this controller stopped being the active controller")
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._applied_waiters.append((end, fut))
        await fut

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def attach_registration(self, manager: ControllerRegistrationManager, close: Callable[[], None]) -> None:
        """This controller registers itself through `manager` (KIP-919), which sees every image this controller
        publishes; it runs from start() to stop(), which calls `close` (its channel) after it."""
        self.registration = manager
        self._registration_closers.append(close)
        self._listeners.append(lambda _delta, image: manager.on_metadata(image))
        manager.on_metadata(self.image)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._run(), name="kjbod-controller"))
        if self.active and self._activation_due():
            self._submit_activation()
        self._tasks.append(loop.create_task(self._expire_sessions(), name="kjbod-controller-sessions"))
        self._tasks.append(loop.create_task(self._elections(), name="kjbod-controller-elections"))
        if self.settings.delegation_token_secret_key:
            self._tasks.append(loop.create_task(self._expire_tokens(), name="kjbod-controller-token-expiry"))
        if self.registration is not None:
            self.registration.start()
        if self.settings.max_idle_interval_ms > 0:
            self._tasks.append(loop.create_task(self._write_no_ops(), name="kjbod-controller-no-ops"))

    async def stop(self) -> None:
        if self.registration is not None:
            await self.registration.stop()
        for close in self._registration_closers:
            close()
        self._registration_closers.clear()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        while not self._queue.empty():
            _, fut = self._queue.get_nowait()
            if not fut.done():
                fut.set_exception(ConnectionError("the controller stopped"))
        self._io.shutdown(wait=True)

    # ------------------------------------------------------------------------------------------ the writer
    def submit(self, op: Operation) -> asyncio.Future[Any]:
        """Queues a write; the future completes with the response once its records are durable and applied.

        When the writer is idle the operation runs at once: one that writes nothing (a steady heartbeat) is
        answered without a trip through the queue, and one that writes goes first in the queue with its result
        computed on the image it will be committed on (nothing can commit in between: the queue was empty)."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if not self.active:
            fut.set_exception(NotControllerError("this controller is not the active controller"))
            return fut
        op = _finishing(op)
        if (self._busy or not self._queue.empty() or not self._tasks
                or self._activation_due()):
            self._queue.put_nowait((op, fut))
            return fut
        try:
            result = op(self.image, self.log.next_offset)
        except Exception as e:
            log.exception("controller_operation_failed")
            fut.set_exception(e)
            return fut
        if not result.records:
            fut.set_result(result.response)
        else:
            self._queue.put_nowait((lambda _image, _offset: result, fut))
        return fut

    async def _run(self) -> None:
        while True:
            op, fut = await self._queue.get()
            if fut.cancelled():
                continue
            self._busy = True
            try:
                if not self.active:
                    raise NotControllerError("this controller is not the active controller")
                if self._activation_due():  # the activation records go first, whatever comes
                    activation = self._activation(self.image, self.log.next_offset)
                    await self._commit(activation.records)
                result = op(self.image, self.log.next_offset)
                if result.records:
                    await self._commit(result.records)
                    await self._advance_reassignments()
            except Exception as e:  # the caller answers with an error; the controller keeps running
                if not isinstance(e, NotControllerError):
                    log.exception("controller_operation_failed")
                if not fut.done():
                    fut.set_exception(e)
                continue
            finally:
                self._busy = False
            if not fut.done():
                fut.set_result(result.response)

    async def _commit(self, records: list[Any]) -> None:
        if self.raft is not None:
            await self._commit_replicated(records)
            return
        loop = asyncio.get_running_loop()
        first = self.log.next_offset
        await loop.run_in_executor(self._io, self.log.append, records)
        self._publish(self.loader.load(zip(records, range(first, first + len(records)), strict=True)))
        await self._maybe_snapshot()

    async def _advance_reassignments(self) -> None:
        """Starts the next KIP-435 steps that the last commit made room for (a round's records may complete a
        step at once, freeing its place, so it goes on while that happens)."""
        while self.reassignment_plans:
            steps = reassignment.advance(self.image, self.reassignment_plans, node_id=self.settings.node_id,
                                         min_isr_default=self.settings.min_insync_replicas)
            records = throttles.finish(self.image, steps)
            if not records:
                return
            await self._commit(records)
            if not reassignment.started_steps_ended(self.image, records):
                return

    async def _maybe_snapshot(self) -> None:
        since = getattr(self.log, "bytes_since_snapshot", None)
        write = getattr(self.log, "write_snapshot", None)
        if since is None or write is None or self.loader.in_transaction or not self._snapshot_due(since):
            return
        image = self.image
        await asyncio.get_running_loop().run_in_executor(self._io, write, image_records(image), image.offset + 1)
        self._last_snapshot_at = self.clock()
        log.info("metadata_snapshot_written", end_offset=image.offset + 1)

    async def _expire_sessions(self) -> None:
        period = max(0.05, min(self.settings.broker_heartbeat_interval_ms / 2,
                               self.settings.broker_session_timeout_ms / 4) / 1000)
        while True:
            await asyncio.sleep(period)
            if not self.active or self.heartbeats.stale_broker(self.image, self.clock()) is None:
                continue
            fenced = await self.submit(lambda image, _o: self.heartbeats.fence_stale(image, self.clock()))
            if fenced is not None:
                log.warning("broker_session_expired", broker_id=fenced.broker_id, effect="fenced")

    async def _write_no_ops(self) -> None:
        """Kafka's writeNoOpRecord task: every metadata.max.idle.interval.ms the active controller appends a
        NoOpRecord, so the log's end moves even when nothing changes and every reader (brokers, observers, the
        other voters) can tell how far behind it is.  Every metadata.version kjbod runs has the record (3.3-IV1 on)."""
        period = self.settings.max_idle_interval_ms / 1000
        while True:
            await asyncio.sleep(period)
            if not self.active or ft.finalized(self.image).get(ft.METADATA_VERSION, 0) < ft.NO_OP_METADATA_VERSION:
                continue
            with contextlib.suppress(Exception):  # not the controller any more, or the write failed: next time
                await self.submit(lambda _image, _o: ControllerResult([NoOpRecord()], None))

    async def _elections(self) -> None:
        """The timers of Kafka's controller: the preferred-leader rebalance every
        `leader.imbalance.check.interval.seconds` (when `auto.leader.rebalance.enable`), and the unclean-election
        sweep of leaderless partitions every UNCLEAN_SWEEP_S."""
        rebalance_s = self.settings.leader_imbalance_check_interval_seconds
        next_rebalance = self.clock() + rebalance_s
        next_sweep = self.clock() + UNCLEAN_SWEEP_S
        while True:
            # Short naps: the clock may be a test's, and a due timer is noticed within a second.
            await asyncio.sleep(min(1.0, max(0.05, min(next_rebalance, next_sweep) - self.clock())))
            now = self.clock()
            if not self.active:
                continue
            if now >= next_rebalance:
                next_rebalance = now + rebalance_s
                if self.settings.auto_leader_rebalance_enable:
                    moved = await self.submit(lambda image, _o: elections.rebalance_leaders(image, self.settings))
                    if moved:
                        log.info("preferred_leaders_elected", partitions=moved, reason="leader imbalance")
            if now >= next_sweep:
                next_sweep = now + UNCLEAN_SWEEP_S
                elected = await self.submit(lambda image, _o: elections.elect_unclean_leaders(image, self.settings))
                if elected:
                    log.warning("unclean_leaders_elected", partitions=elected)
            self.election_passes += 1

    # ------------------------------------------------------------------------------------------ requests
    def request(self, api_key: int, version: int, request: Any) -> asyncio.Future[Any]:
        """The response to one controller request, as a future: already done when the writer was idle and the
        request wrote nothing (a steady heartbeat), so a caller can answer without awaiting.  A write the
        metadata log could not make durable answers KAFKA_STORAGE_ERROR (anything else unexpected
        UNKNOWN_SERVER_ERROR) in the request's own error fields."""
        make = self._handlers.get(api_key)
        if make is None:
            raise ValueError(f"the controller does not serve api key {api_key}")
        inner = self.submit(make(version, request))
        if inner.done() and not inner.cancelled() and inner.exception() is None:
            return inner
        out: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def finish(f: asyncio.Future[Any]) -> None:
            if out.done():
                return
            if f.cancelled():
                out.cancel()
                return
            e = f.exception()
            if e is None:
                out.set_result(f.result())
            elif isinstance(e, ConnectionError):  # the controller stopped
                out.set_exception(e)
            elif isinstance(e, NotControllerError):
                out.set_result(error_response(api_key, request, ErrorCode.NOT_CONTROLLER, str(e)))
            else:
                code = ErrorCode.KAFKA_STORAGE_ERROR if isinstance(e, OSError) else ErrorCode.UNKNOWN_SERVER_ERROR
                out.set_result(error_response(api_key, request, code,
                                              f"the controller could not complete the request: {e}"))

        inner.add_done_callback(finish)
        return out

    async def handle_request(self, api_key: int, version: int, request: Any, header: Any = None) -> Any:
        """The one async entry for requests (the in-process controller channel and the controller listener)."""
        return await self.request(api_key, version, request)

    def _register(self, version: int, req: BrokerRegistrationRequest) -> Operation:
        return lambda image, offset: cluster_control.register_broker(image, req, self.settings, self.heartbeats,
                                                                     self.clock(), offset)

    def _register_controller(self, version: int, req: ControllerRegistrationRequest) -> Operation:
        return lambda image, _o: cluster_control.register_controller(image, req)

    def _heartbeat(self, version: int, req: BrokerHeartbeatRequest) -> Operation:
        return lambda image, offset: self.heartbeats.heartbeat(image, req, self.clock(), offset)

    def _unregister(self, version: int, req: UnregisterBrokerRequest) -> Operation:
        return lambda image, _o: cluster_control.unregister_broker(
            image, req.broker_id, min_isr_default=self.settings.min_insync_replicas, node_id=self.settings.node_id)

    def _update_features(self, version: int, req: UpdateFeaturesRequest) -> Operation:
        return lambda image, _o: features.update_features(image, req, version, self.settings.node_id or 0,
                                                          self._quorum_ids(), self.settings.min_insync_replicas)

    def _quorum_ids(self) -> tuple[int, ...]:
        """The voters of the controller quorum (this controller alone without one)."""
        voters = getattr(self.raft, "voters", None) if self.raft is not None else None
        if voters:
            return tuple(sorted(voters))
        return (self.settings.node_id,) if self.settings.node_id is not None else ()

    def _alter_user_scram_credentials(self, version: int, req: AlterUserScramCredentialsRequest) -> Operation:
        return lambda image, _o: scram.alter_user_scram_credentials(image, req)

    def _alter_client_quotas(self, version: int, req: AlterClientQuotasRequest) -> Operation:
        return lambda image, _o: client_quotas.alter_client_quotas(image, req)

    def _create_acls(self, version: int, req: CreateAclsRequest) -> Operation:
        return lambda image, _o: acls.create_acls(image, req)

    def _delete_acls(self, version: int, req: DeleteAclsRequest) -> Operation:
        return lambda image, _o: acls.delete_acls(image, req)

    def _create_delegation_token(self, version: int, req: CreateDelegationTokenRequest) -> Operation:
        return lambda image, _o: tokens.create_token(image, req, self.settings, tokens.wall_clock_ms())

    def _renew_delegation_token(self, version: int, req: RenewDelegationTokenRequest) -> Operation:
        return lambda image, _o: tokens.renew_token(image, req, self.settings, tokens.wall_clock_ms())

    def _expire_delegation_token(self, version: int, req: ExpireDelegationTokenRequest) -> Operation:
        return lambda image, _o: tokens.expire_token(image, req, self.settings, tokens.wall_clock_ms())

    async def _expire_tokens(self) -> None:
        """Kafka's sweep: every delegation.token.expiry.check.interval.ms, the tokens past their expiry go."""
        period = self.settings.delegation_token_expiry_check_interval_ms / 1000
        while True:
            await asyncio.sleep(period)
            if not self.active or not self.image.tokens:
                continue
            try:
                removed = await self.submit(lambda image, _o: tokens.expired_tokens(image, tokens.wall_clock_ms()))
            except Exception:  # not the controller any more, or the write failed: the next pass tries again
                continue
            if removed:
                log.info("delegation_tokens_expired", token_ids=removed)

    def _create_topics(self, version: int, req: CreateTopicsRequest) -> Operation:
        return lambda image, _o: replication_control.create_topics(
            image, req, self.settings, self.policy, cordoned=self.heartbeats.fully_cordoned(image))

    def _create_partitions(self, version: int, req: CreatePartitionsRequest) -> Operation:
        return lambda image, _o: replication_control.create_partitions(
            image, req, cordoned=self.heartbeats.fully_cordoned(image))

    def _delete_topics(self, version: int, req: DeleteTopicsRequest) -> Operation:
        return lambda image, _o: replication_control.delete_topics(image, req, version,
                                                                       enabled=self.settings.delete_topic_enable)

    def _alter(self, resources: list[tuple[int, str, list[configs.Change]]], *, replace: bool, validate_only: bool,
               respond: Callable[[list[tuple[int, str | None]]], Any]) -> Operation:
        def op(image: MetadataImage, _offset: int) -> ControllerResult:
            result = configs.alter_configs(image, resources, self.policy, replace=replace,
                                           validate_only=validate_only, canonical=self.config_aliases)
            records = result.records
            if any(getattr(r, "name", None) == UNCLEAN_KEY for r in records):
                # Turning unclean elections on elects at once where a partition has waited for it.
                records = records + elections.elect_unclean_leaders(replay(image, records), self.settings).records
            return ControllerResult(records, respond(result.response))

        return op

    def _alter_configs(self, version: int, req: AlterConfigsRequest) -> Operation:
        resources = [(r.resource_type, r.resource_name,
                      [(c.name, SET if c.value is not None else DELETE, c.value) for c in r.configs])
                     for r in req.resources]
        return self._alter(resources, replace=True, validate_only=req.validate_only,
                           respond=_per_resource(AlterConfigsResponse, AlterResp, req.resources))

    def _incremental_alter_configs(self, version: int, req: IncrementalAlterConfigsRequest) -> Operation:
        resources = [(r.resource_type, r.resource_name, [(c.name, c.config_operation, c.value) for c in r.configs])
                     for r in req.resources]
        return self._alter(resources, replace=False, validate_only=req.validate_only,
                           respond=_per_resource(IncrementalAlterConfigsResponse, IncrementalResp, req.resources))

    def _allocate_producer_ids(self, version: int, req: AllocateProducerIdsRequest) -> Operation:
        return lambda image, _o: producer_ids.allocate_producer_ids(image, req)

    def _assign_replicas_to_dirs(self, version: int, req: AssignReplicasToDirsRequest) -> Operation:
        return lambda image, _o: directories.assign_replicas_to_dirs(
            image, req, self.heartbeats.dirs, min_isr_default=self.settings.min_insync_replicas,
            node_id=self.settings.node_id)

    def _alter_partition(self, version: int, req: AlterPartitionRequest) -> Operation:
        return lambda image, _o: alter_partition.alter_partition(image, req, version, self.settings)

    def _elect_leaders(self, version: int, req: ElectLeadersRequest) -> Operation:
        return lambda image, _o: elections.elect_leaders(image, req, version,
                                                         min_isr_default=self.settings.min_insync_replicas,
                                                         node_id=self.settings.node_id)

    def _alter_partition_reassignments(self, version: int, req: AlterPartitionReassignmentsRequest) -> Operation:
        return lambda image, _o: reassignment.alter_partition_reassignments(
            image, req, version, self.settings, self.reassignment_plans,
            cordoned=self.heartbeats.fully_cordoned(image))

    def _list_partition_reassignments(self, version: int, req: ListPartitionReassignmentsRequest) -> Operation:
        return lambda image, _o: reassignment.list_partition_reassignments(image, req, self.reassignment_plans)

    def _reassign_partitions(self, version: int, req: ReassignPartitionsRequest) -> Operation:
        return lambda image, _o: throttles.reassign_partitions(image, req, self.settings, self.reassignment_plans)

    def _alter_throttled_rates(self, version: int, req: AlterInterbrokerThrottledRatesRequest) -> Operation:
        return lambda image, _o: throttles.alter_throttled_rates(image, req)

    def _alter_throttled_replicas(self, version: int, req: AlterInterbrokerThrottledReplicasRequest) -> Operation:
        return lambda image, _o: throttles.alter_throttled_replicas(image, req)

    async def assign_directories(self, broker_id: int, assignments: list[Any]) -> None:
        """Records where `broker_id` placed its replicas: [(topic id, partition, dir id)]."""
        await self.submit(lambda image, _o: replication_control.assign_directories(image, broker_id, assignments))

