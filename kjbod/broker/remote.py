"""process.roles=broker: a broker whose controller is another process, reached over the controller listener.

Strategy: the same broker node as the combined one (kjbod.broker.node: handlers, storage, the publisher that
applies each metadata delta to the local logs), with the in-process controller replaced by three socket channels
to `controller.quorum.voters` (or `controller.quorum.bootstrap.servers`), one per user so a heartbeat never waits
behind a long-polling metadata fetch:

* lifecycle (kjbod.broker.lifecycle): registration with the online log dir ids and this process's incarnation id,
  heartbeats every `broker.heartbeat.interval.ms` with WantFence until the logs match the metadata,
  OfflineLogDirs for every dir that failed, WantShutDown on SIGTERM (controlled shutdown: the controller moves
  leadership away before the broker stops; exit code 0);
* metadata (kjbod.broker.metadata_follower): the broker follows `__cluster_metadata` as a KRaft observer and
  replays each committed batch into a new image.  The broker keeps no copy of the metadata log: it fetches it
  (or the controller's latest snapshot and what follows) at every start;
* forwarding: the controller-owned requests clients send to any broker (CreateTopics, CreatePartitions,
  DeleteTopics, configs) and the producer id blocks InitProducerId needs (AllocateProducerIds) go to the
  controller at the client's version.

Startup, as Kafka's BrokerServer orders it: open and recover the log dirs; register and follow the metadata
until the controller says this broker has caught up with its own registration; only then make the logs match the
image (create missing partitions, rename strays: doing it on a partial image would take live partitions for
strays); then ask to be unfenced, and serve once unfenced.  After that each committed delta goes through the
node's publisher (create, delete, topic configs); the new partitions of a big delta are made before it, a
slice at a time with the event loop free in between, so that heartbeats and requests go on meanwhile.

Produce, Fetch and ListOffsets are served only for partitions this broker leads: any other partition of the image
answers NOT_LEADER_OR_FOLLOWER, so clients refresh their metadata and go to the leader.

Directory assignments (KIP-858): an AssignmentsManager (kjbod.broker.assignments) over a fourth channel of its
own reports the dir each local replica is in whenever the metadata says otherwise: at start for every replica (a
new partition placed while the metadata says UNASSIGNED, a replica moved while the broker was down), then for the
topics each delta changes.  A broker with several log dirs asks to be unfenced only once that queue is empty
(KIP-858's rule, which Kafka's code does not gate on).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import structlog

from kjbod.broker.assignments import AssignmentsManager
from kjbod.broker.lifecycle import BrokerLifecycleManager, BrokerState, LifecycleConfig
from kjbod.broker.metadata_follower import MetadataBatch, MetadataFollower
from kjbod.broker.node import BrokerNode
from kjbod.broker.storage_glue import apply_image_at_start, open_logs, reconcile, refresh_log_defaults
from kjbod.metadata import (
    EMPTY_IMAGE,
    MetadataDelta,
    MetadataImage,
    MetadataLoader,
    features,
    is_reserved_dir,
)
from kjbod.net.controller_channel import SocketControllerChannel, controller_addresses
from kjbod.net.correlator import PerVersion
from kjbod.net.errors import ClientError
from kjbod.net.sasl import client_credentials_of
from kjbod.net.tls import client_context_of
from kjbod.protocol.error_responses import error_response
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CreateAclsRequest,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kjbod.protocol.generated import alter_configs_response as acr
from kjbod.protocol.generated import incremental_alter_configs_response as iacr
from kjbod.protocol.generated.alter_user_scram_credentials_response import AlterUserScramCredentialsResult
from kjbod.protocol.generated.create_partitions_response import CreatePartitionsTopicResult
from kjbod.protocol.generated.create_topics_response import CreatableTopicResult
from kjbod.protocol.generated.delete_topics_response import DeletableTopicResult
from kjbod.storage.ids import uuid_from_str

__all__ = ["NotLeaderError", "RemoteBrokerNode"]

log = structlog.get_logger("kjbod.broker.remote")
ALTER_PARTITION = 56


class NotLeaderError(Exception):
    """A partition this broker does not lead: NOT_LEADER_OR_FOLLOWER, as Kafka answers."""

    error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER


def _no_controller(node: BrokerNode, metadata_log: Any) -> Any:
    raise RuntimeError("a broker-only node has no controller in its process")


class RemoteBrokerNode(BrokerNode):
    """A broker-only node: see the module docstring."""

    def __init__(self, config: Any) -> None:
        super().__init__(config, _no_controller)
        # ValueError naming the key when neither is usable
        self.controller_addresses = controller_addresses(
            ",".join(getattr(config, "controller_quorum_voters", ()) or ()),
            ",".join(getattr(config, "controller_quorum_bootstrap_servers", ()) or ()))
        self.lifecycle: BrokerLifecycleManager | None = None
        self.follower: MetadataFollower | None = None
        self._loaded_target: int | None = None  # the high watermark the initial load must reach (metadata_loaded)
        self.assignments: AssignmentsManager | None = None
        self._channels: dict[str, SocketControllerChannel] = {}
        # A TLS controller listener: this broker's client side of it (its ssl.* keys for that listener)
        names = getattr(config, "controller_listener_names", ()) or ()
        self._controller_ssl = client_context_of(config, names[0] if names else None)
        # A SASL controller listener: the credentials of this broker's JAAS config for it
        self._controller_sasl = client_credentials_of(config, names[0] if names else None,
                                                      "sasl.mechanism.controller.protocol")
        self._logs_ready = False
        self._loader: MetadataLoader | None = None  # the committed records read so far (KIP-868 transactions)
        self._image_changed = asyncio.Condition()
        self._controlled_shutdown: asyncio.Future[None] | None = None

    # -------------------------------------------------------------------------------- identity
    @property  # type: ignore[override]
    def broker_epoch(self) -> int:
        return self.lifecycle.broker_epoch if self.lifecycle is not None else -1

    @broker_epoch.setter
    def broker_epoch(self, value: int) -> None:
        pass  # the lifecycle manager owns it

    def _channel(self, purpose: str) -> SocketControllerChannel:
        """A connection of its own per user (see the module docstring); requests wait request.timeout.ms (Kafka's
        broker-to-controller channels' timeout)."""
        channel = SocketControllerChannel(self.controller_addresses,
                                          request_timeout=int(self.config.request_timeout_ms) / 1000,
                                          client_id=f"kjbod-broker-{self.node_id}-{purpose}",
                                          ssl_context=self._controller_ssl, sasl=self._controller_sasl)
        self._channels[purpose] = channel
        return channel

    def metadata_loaded(self) -> bool:
        """Kafka's initial load, for the authorizer: the metadata replayed up to the high watermark the first
        answer of the controller named."""
        follower = self.follower
        if follower is None or follower.high_watermark < 0:
            return False
        if self._loaded_target is None:
            self._loaded_target = follower.high_watermark
        return follower.last_applied_offset + 1 >= self._loaded_target

    # -------------------------------------------------------------------------------- startup
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        manager = open_logs(self)
        self.follower = MetadataFollower(self._channel("metadata"), node_id=self.node_id,
                                         cluster_id=self.cluster_id, on_batch=self._on_batch)
        follower = self.follower
        self.lifecycle = BrokerLifecycleManager(
            self.lifecycle_config(self._registration(), manager.clean_shutdown_broker_epoch()),
            self._channel("lifecycle"),
            lambda: follower.last_applied_offset, self._lifecycle_shutdown, incarnation_id=self.incarnation_id)
        self.lifecycle.cordoned_dirs = lambda: self.heartbeat_cordoned_dirs() if self._logs_ready else None
        self.follower.start()
        self.lifecycle.start()
        log.info("broker_starting", node_id=self.node_id, controllers=self._channels["lifecycle"].peer,
                 incarnation=str(self.incarnation_id))
        # A broker told to stop meanwhile (registration timeout, metadata it cannot apply) returns here with its
        # exit code set: the server then stops it at once, the reason logged, no traceback.
        if not await self._until(self.lifecycle.initial_catch_up):
            return
        apply_image_at_start(self, manager)
        self.assignments = AssignmentsManager(self.node_id, self._channel("assignments"), image=lambda: self.metadata,
                                              broker_epoch=lambda: self.broker_epoch)
        self.assignments.start()
        self._logs_ready = True
        self._reconcile_dirs(None)
        self._start_replication()
        self._start_mover()
        if len(self.config.log_dirs) > 1:  # KIP-858: fenced until every replica's dir is in the metadata
            # (kjbod.broker.assignments.unfence_when_assigned's rule, with the moment it is met logged)
            drained: asyncio.Future[None] = asyncio.ensure_future(self.assignments.drained())
            if not await self._until(drained):
                drained.cancel()
                return
            log.info("directory_assignments_complete", node_id=self.node_id,
                     requests=self.assignments.requests_sent, effect="asking to be unfenced")
        if not await self._until(self.lifecycle.set_ready_to_unfence()):
            return
        log.info("node_started", node_id=self.node_id, cluster_id=self.cluster_id, role="broker",
                 topics=len(self.metadata.by_name), broker_epoch=self.broker_epoch,
                 metadata_offset=self.metadata.offset)

    def cordon_changed(self) -> None:
        if self.lifecycle is not None:
            self.lifecycle.cordon_changed()

    def lifecycle_config(self, registration: Any, previous_broker_epoch: int = -1) -> LifecycleConfig:
        """What registration and heartbeats carry, and their timers, from this broker's config;
        `previous_broker_epoch` is the epoch the last run's clean-shutdown markers name (-1: none)."""
        c = self.config
        return LifecycleConfig(
            node_id=self.node_id, cluster_id=self.cluster_id, listeners=registration.listeners,
            log_dirs=registration.log_dirs, rack=registration.rack, features=dict(features.SUPPORTED),
            previous_broker_epoch=previous_broker_epoch,
            heartbeat_interval=int(c.broker_heartbeat_interval_ms) / 1000,
            session_timeout=int(c.broker_session_timeout_ms) / 1000,
            initial_registration_timeout=int(c.initial_broker_registration_timeout_ms) / 1000,
            log_dir_failure_timeout=int(c.log_dir_failure_timeout_ms) / 1000)

    async def _until(self, step: asyncio.Future[None]) -> bool:
        """Waits for a lifecycle step; False when the broker was told to stop first."""
        stop: asyncio.Future[Any] = asyncio.ensure_future(self.shutdown_requested.wait())
        waiting: list[asyncio.Future[Any]] = [step, stop]
        try:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        return step.done() and not step.cancelled()

    def _lifecycle_shutdown(self, reason: str) -> None:
        log.error("broker_shutting_down", reason=reason)
        self.exit_code = 1
        self.shutdown_requested.set()

    # -------------------------------------------------------------------------------- the metadata
    async def _on_batch(self, batch: MetadataBatch) -> None:
        try:
            await self._apply_batch(batch)
        except Exception as e:  # Kafka's broker treats a metadata it cannot apply as fatal: so does this one
            log.exception("metadata_apply_failed", node_id=self.node_id, offset=batch.base_offset)
            self._lifecycle_shutdown(f"the metadata at offset {batch.base_offset} could not be applied: {e}")
            raise
        async with self._image_changed:
            self._image_changed.notify_all()

    async def _apply_batch(self, batch: MetadataBatch) -> None:
        """Reads a committed batch; publishes what the loader lets out (nothing of a metadata transaction until
        its end: kjbod.metadata.loader).  Every record, NoOpRecords too, moves the image's offset, which the
        heartbeats report as this broker's metadata offset."""
        if batch.snapshot or self._loader is None:
            self._loader = MetadataLoader(EMPTY_IMAGE if batch.snapshot else self.metadata)
        loader = self._loader
        first = batch.last_offset - len(batch.records) + 1
        published = loader.load(zip(batch.records, range(first, first + len(batch.records)), strict=True))
        for fault in loader.faults:
            log.error("metadata_transaction_fault", node_id=self.node_id, fault=fault)
        loader.faults.clear()
        if batch.snapshot:
            self._apply_image(MetadataDelta(EMPTY_IMAGE), loader.image, snapshot=True)
        for delta, image in published if not batch.snapshot else ():
            self._apply_image(delta, image, snapshot=False)

    def _apply_image(self, delta: MetadataDelta, image: MetadataImage, *, snapshot: bool) -> None:
        if image.features_epoch != self.metadata.features_epoch:
            self.handler.forget_answers()  # ApiVersions' memoised answers carry the finalized levels
        if not self._logs_ready:
            self.metadata = image
        elif snapshot:  # far behind: the image is rebuilt whole, and the logs made to match it
            self.metadata = image
            refresh_log_defaults(self, self.logs.manager)  # the snapshot's dynamic broker defaults
            reconcile(self, self.logs.manager, on_workers=True)
            self._reconcile_dirs(None)
            if self.replication is not None:
                self.replication.sync(image)
        else:
            self._publish(delta, image)  # which also makes each replica lead or follow as the image says
            self._reconcile_dirs(delta.changed_partitions())
        self._check_registration(image)

    def _reconcile_dirs(self, changed: Mapping[uuid.UUID, Iterable[int]] | None) -> None:
        """Tells the assignments manager about the new image, and queues the replicas (the partitions a delta
        wrote, `changed`, or all) whose dir on disk is not the one the image says."""
        if self.assignments is None:
            return
        self.assignments.on_metadata(self.metadata)
        queued = self.assignments.reconcile(self.metadata, self.local_placements(changed))
        if queued:
            log.info("directory_assignments_queued", node_id=self.node_id, partitions=queued,
                     queue=self.assignments.queued)

    def _check_registration(self, image: MetadataImage) -> None:
        """Kafka's broker registers again when its metadata no longer shows its registration (unregistered)."""
        lc = self.lifecycle
        if lc is None or not lc.registered or lc.state in (BrokerState.SHUTTING_DOWN, BrokerState.STARTING):
            return
        mine = image.brokers.get(self.node_id)
        if mine is None:
            log.warning("registration_gone_from_metadata", node_id=self.node_id, effect="registering again")
            lc.resend_registration()

    async def wait_for_image(self, done: Any, timeout: float) -> bool:
        """Waits (up to `timeout` s) until `done(image)` holds; returns whether it did."""
        try:
            async with asyncio.timeout(timeout), self._image_changed:
                await self._image_changed.wait_for(lambda: done(self.metadata))
            return True
        except TimeoutError:
            return False

    async def assign_directories(self, placed: list[tuple[uuid.UUID, int, uuid.UUID]]) -> None:
        """New replicas made (on their dirs' workers, after their delta): `_reconcile_dirs` queues their dirs."""
        made: dict[uuid.UUID, list[int]] = {}
        for topic_id, partition, _ in placed:
            made.setdefault(topic_id, []).append(partition)
        self._reconcile_dirs(made)

    # -------------------------------------------------------------------------------- the controller
    async def controller_request(self, body: Any, version: int) -> Any:
        """Forwards a controller-owned request at the client's version.  Topics created, grown or deleted are
        waited for in this broker's image (briefly), so a client that asks this broker next sees them."""
        channel = self._channels.get("forward") or self._channel("forward")
        # CreateTopics and DeleteTopics say how long the client waits: no point waiting for the controller longer
        wait = getattr(body, "timeout_ms", 0) / 1000
        try:
            response = await channel.forward(body, body.API_KEY, version,
                                              timeout=min(wait, channel.request_timeout) if wait > 0 else None)
        except ClientError as e:  # the controller is away: the client hears it and retries, as from Kafka
            log.warning("controller_request_failed", api=type(body).__name__, error=str(e))
            answer = unanswered(body, f"the controller did not answer: {e}")
            if answer is None:
                raise
            return answer
        if isinstance(body, CreateTopicsRequest) and not body.validate_only:
            made = {t.name for t in response.topics if t.error_code == 0}
            if made:
                await self.wait_for_image(lambda im: all(im.topic(n) is not None for n in made), 10.0)
                await self.creates_settled(made, 10.0)  # the replicas made here, on their dirs' workers
        elif isinstance(body, CreatePartitionsRequest) and not body.validate_only:
            counts = {t.name: t.count for t in body.topics}
            grown = {r.name: counts[r.name] for r in response.results if r.error_code == 0 and r.name in counts}
            if grown:
                await self.wait_for_image(lambda im: all(
                    (t := im.topic(n)) is not None and len(t.partitions) >= c for n, c in grown.items()), 10.0)
                await self.creates_settled(grown, 10.0)
        elif isinstance(body, DeleteTopicsRequest):
            gone = {r.name for r in response.responses if r.error_code == 0 and r.name}
            if gone:
                await self.wait_for_image(lambda im: all(im.topic(n) is None for n in gone), 10.0)
                if self.logs is not None:
                    await self.logs.deletes_settled(gone, 10.0)  # its replicas here renamed on their dirs' workers
        return response

    def controller_call(self, body: Any, version: int) -> Any:
        return self.controller_request(body, version)

    async def send_alter_partition(self, build: Any) -> Any:
        """AlterPartition to the controller on a channel of its own (the replica manager keeps one in flight)."""
        channel = self._channels.get("alter-partition") or self._channel("alter-partition")
        return await channel.send(PerVersion(build), ALTER_PARTITION)

    # -------------------------------------------------------------------------------- partitions
    def partition_log(self, topic: str, partition: int) -> Any:
        state = self.metadata.topic(topic)
        p = state.partitions.get(partition) if state is not None else None
        if p is not None and p.leader != self.node_id:
            raise NotLeaderError(f"broker {self.node_id} is not the leader of {topic}-{partition} (leader: "
                                 f"{p.leader})")
        return super().partition_log(topic, partition)

    def dir_offline(self, path: str) -> None:
        super().dir_offline(path)
        ids = {p: d for d, p in self.logs.manager.directory_ids(online_only=False).items()} if self.logs else {}
        text = ids.get(path)
        if text is None or self.lifecycle is None:
            return
        dir_id = uuid.UUID(bytes=uuid_from_str(text))
        lifecycle = self.lifecycle
        with contextlib.suppress(RuntimeError):  # the loop is closed: the node is going away
            self._loop.call_soon_threadsafe(lifecycle.propagate_directory_failure, dir_id,
                                            lambda: self.leads_in_dir(dir_id, path))

    def leads_in_dir(self, dir_id: uuid.UUID, path: str) -> bool:
        """Whether this broker leads a partition whose replica the metadata places in `dir_id`, or that it had
        in `path` while the metadata had not recorded where (KIP-858's condition for shutting down)."""
        for topic in self.metadata.topics():
            for p in topic.partitions.values():
                if p.leader != self.node_id:
                    continue
                recorded = p.directory_of(self.node_id)
                if recorded == dir_id:
                    return True
                if recorded is not None and is_reserved_dir(recorded):
                    plog = self.logs.manager.find(topic.name, p.partition) if self.logs is not None else None
                    if plog is None or plog.log_dir == path:
                        return True
        return False

    # -------------------------------------------------------------------------------- shutdown
    def begin_shutdown(self) -> None:
        """SIGTERM: ask the controller to move this broker's leadership away while connections drain."""
        super().begin_shutdown()
        if self.lifecycle is not None and self._controlled_shutdown is None and self.exit_code == 0 \
                and self.config.controlled_shutdown_enable:
            self._controlled_shutdown = self.lifecycle.begin_controlled_shutdown()

    async def stop(self) -> None:
        if self.lifecycle is not None:
            if self._controlled_shutdown is None and self.exit_code == 0 and self.config.controlled_shutdown_enable:
                self._controlled_shutdown = self.lifecycle.begin_controlled_shutdown()
            if self._controlled_shutdown is not None:
                timeout = int(self.config.broker_session_timeout_ms) / 1000
                try:
                    await asyncio.wait_for(asyncio.shield(self._controlled_shutdown), timeout)
                    log.info("controlled_shutdown_complete", node_id=self.node_id)
                except (TimeoutError, asyncio.CancelledError):
                    log.warning("controlled_shutdown_incomplete", node_id=self.node_id, waited_s=timeout)
            await self.lifecycle.close()
        if self.assignments is not None:
            await self.assignments.close()
        if self.replication is not None:
            await self.replication.close()
            self.replication = None
        if self.follower is not None:
            await self.follower.close()
        for channel in self._channels.values():
            channel.close()
        await super().stop()


def unanswered(body: Any, message: str) -> Any | None:
    """The answer to a forwarded request the controller did not answer: REQUEST_TIMED_OUT for each item, as
    Kafka's forwarding answers a request whose forward timed out."""
    code = ErrorCode.REQUEST_TIMED_OUT
    if isinstance(body, CreateTopicsRequest):
        return CreateTopicsResponse(topics=[CreatableTopicResult(
            name=t.name, error_code=code, error_message=message) for t in body.topics])
    if isinstance(body, CreatePartitionsRequest):
        return CreatePartitionsResponse(results=[CreatePartitionsTopicResult(
            name=t.name, error_code=code, error_message=message) for t in body.topics])
    if isinstance(body, DeleteTopicsRequest):
        named = [(t.name, t.topic_id) for t in body.topics] or [(n, uuid.UUID(int=0)) for n in body.topic_names]
        return DeleteTopicsResponse(responses=[DeletableTopicResult(
            name=name, topic_id=tid, error_code=code, error_message=message) for name, tid in named])
    if isinstance(body, AlterConfigsRequest):
        return AlterConfigsResponse(responses=[acr.AlterConfigsResourceResponse(
            error_code=code, error_message=message, resource_type=r.resource_type, resource_name=r.resource_name)
            for r in body.resources])
    if isinstance(body, IncrementalAlterConfigsRequest):
        return IncrementalAlterConfigsResponse(responses=[iacr.AlterConfigsResourceResponse(
            error_code=code, error_message=message, resource_type=r.resource_type, resource_name=r.resource_name)
            for r in body.resources])
    if isinstance(body, AllocateProducerIdsRequest):
        return AllocateProducerIdsResponse(error_code=code)
    if isinstance(body, (CreateAclsRequest, DeleteAclsRequest)):
        return error_response(30 if isinstance(body, CreateAclsRequest) else 31, body, code, message)
    if isinstance(body, AlterUserScramCredentialsRequest):
        users = dict.fromkeys([d.name for d in body.deletions] + [u.name for u in body.upsertions])
        return AlterUserScramCredentialsResponse(results=[AlterUserScramCredentialsResult(
            user=name, error_code=code, error_message=message) for name in users])
    if getattr(body, "API_KEY", None) in (38, 39, 40):  # the delegation-token writes
        return error_response(body.API_KEY, body, code, message)
    return None
