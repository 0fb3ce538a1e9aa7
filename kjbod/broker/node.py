"""The combined broker+controller node: the broker role's state, with the controller role in the same process.

`build_node(config)` returns an object with `start()`, `stop()` and `handler` (the router) for the server
shell.  The node is the one place handlers reach shared state through: cluster identity and endpoints, the
current metadata image, the storage layer, and background upkeep (checkpoints, retention, deletes).

Metadata goes one way (kjbod.controller, kjbod.metadata): the handlers of the controller-owned requests
(CreateTopics, CreatePartitions, DeleteTopics, AlterConfigs, IncrementalAlterConfigs, and producer id blocks for
InitProducerId)
send them to the controller (`controller_request`, in process: the same entry the controller listener uses);
the controller makes the records durable in the metadata log and replays them into a new image; the node's
publisher (`_publish`) then applies the delta to the local logs (create, delete, topic configs, the dynamic
broker defaults of topic configs, the intra-broker throttle) before the request is answered. Handlers read
`node.metadata`, the image current when they ask; nothing changes an image in place. On a node with several
log dirs a new partition's dir is UNASSIGNED in the metadata until the broker has placed it; the publisher
then records the dir it chose through the controller, so the metadata always says where each replica is.

At start the node registers its broker with its controller (its online log dir ids and a fresh incarnation id)
and heartbeats every `broker.heartbeat.interval.ms`, which unfences it once it has applied its registration.

KIP-113: the node owns the replica mover (kjbod.broker.kip113), started after storage is open, stopped before
it closes. The mover's final catch-up and swap run on the source dir's worker, where every append of the
partition runs (a leader's produce, a follower's fetched batches); only with KJBOD_DIR_WORKERS=0, when every
append happens on the event loop, does the node run them there (`run_exclusive`).  Before the swap the mover has
the new dir recorded (KIP-858's order, `assign_moved_replica`) through an AssignmentsManager
(kjbod.broker.assignments): the broker-only node's speaks to the controller over a socket, the combined node's
to its in-process controller through an InProcessControllerChannel, with the same AssignReplicasToDirs checks,
batching and retries.  The combined node still records the dirs of new partitions directly (one controller
write per create, answered before the CreateTopics is); only moves go through the manager.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import uuid
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from kjbod.broker.assignments import AssignmentOutcome, AssignmentsManager
from kjbod.broker.broker_config import BROKER, CORDON_KEY, LONG_MAX, THROTTLE_KEY, DynamicBrokerConfigs
from kjbod.broker.client_metrics import ClientMetricsManager
from kjbod.broker.client_quotas import ClientQuotas
from kjbod.broker.parked_fetches import ParkedFetches
from kjbod.broker.router import Router
from kjbod.metadata import (
    DIR_LOST,
    EMPTY_IMAGE,
    MetadataDelta,
    MetadataImage,
    PartitionImage,
    TopicImage,
    features,
    is_reserved_dir,
)
from kjbod.metadata.features import cordons_supported
from kjbod.net.controller_channel import InProcessControllerChannel
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    AllocateProducerIdsRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
)
from kjbod.protocol.generated.broker_registration_request import Feature as RegFeature
from kjbod.protocol.generated.broker_registration_request import Listener as RegListener
from kjbod.protocol.generated.create_topics_request import CreatableTopic
from kjbod.storage.errors import StorageError
from kjbod.storage.ids import uuid_from_str
from kjbod.storage.placement import cordoned_dirs
from kjbod.storage.workers import workers_enabled

log = structlog.get_logger("kjbod.node")

ALTER_PARTITION_VERSION = 3
CREATES_WAIT_S = 30.0  # how long a controller request waits for the replicas it created here
SECURITY_PROTOCOLS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None = None


def registered_controllers(image: MetadataImage, listener_name: str) -> list[NodeEndpoint]:
    """DescribeCluster for controllers (KIP-919), as Kafka's ControllerRegistrationsPublisher answers it: every
    controller whose registration (RegisterControllerRecord) has a listener of the name the request came in on,
    with that listener's host and port and no rack."""
    return [NodeEndpoint(c.controller_id, e.host, e.port) for c in sorted(image.controllers.values(),
                                                                            key=lambda c: c.controller_id)
            if (e := c.endpoint(listener_name)) is not None]


class BrokerNode:
    authorizer: Any = None  # kjbod.metadata.acls.Authorizer when authorizer.class.name is set (kjbod.server.app)

    def __init__(self, config: Any, controller_factory: Callable[[BrokerNode, Any], Any]):
        self.config = config
        self._controller_factory = controller_factory
        self.node_id: int = config.node_id
        # fetch.max.bytes, read once here: every Fetch on a broker listener caps its max_bytes at it.
        self.fetch_max_bytes: int = config.fetch_max_bytes
        self.cluster_id: str = ""
        self.metadata: MetadataImage = EMPTY_IMAGE  # the current image; replaced whole by the publisher
        # Called (no arguments) after an image changed this broker's dynamic broker configs, per broker or the
        # cluster default: the server shell rebuilds its connection limits (kjbod.server.quotas).
        self.broker_config_listeners: list[Callable[[], None]] = []
        self.controller: Any = None  # kjbod.controller.QuorumController, built by the server layer
        self.metadata_log: Any = None
        self.metadata_fetch: Any = None  # serves Fetch/FetchSnapshot of the metadata log on controller listeners
        self.logs: Any = None  # kjbod.storage log manager, once opened
        self._caught_up = False  # a heartbeat answer said IsCaughtUp: heartbeats carry the cordoned dirs from then
        self.mover: Any = None  # kjbod.broker.kip113.ReplicaMover, once storage is open
        self.assignments: AssignmentsManager | None = None  # directory assignments of moved replicas (KIP-858)
        self.replication: Any = None  # kjbod.broker.replication.ReplicaManager on a broker-only node
        # Client metrics (KIP-714): the subscriptions in the image's CLIENT_METRICS resources, the client instances
        # and what they pushed; and each connection's client software (ApiVersions v3+), which subscriptions match.
        self.client_metrics = ClientMetricsManager(lambda: self.metadata.configs,
                                                   telemetry_max_bytes=getattr(config, "telemetry_max_bytes", 1 << 20))
        self.client_software: OrderedDict[int, tuple[str, str]] = OrderedDict()
        # Client quotas (producer_byte_rate, consumer_byte_rate, request_percentage), from the image's quotas.
        self.client_quotas = ClientQuotas(lambda: self.metadata.client_quotas,
                                          samples=getattr(config, "quota_window_num", 11),
                                          window_seconds=getattr(config, "quota_window_size_seconds", 1),
                                          mutation_samples=getattr(config, "controller_quota_window_num", 11),
                                          mutation_window_seconds=getattr(
                                              config, "controller_quota_window_size_seconds", 1))
        self.handler = Router(self)  # each request is logged at debug by the connection, with its latency
        self.topic_stats: Any = None  # kjbod.metrics' BrokerTopicMetrics counters, set when /metrics is served
        self._tasks: list[asyncio.Task] = []
        self._assignments: set[asyncio.Task] = set()  # directory assignments on their way to the controller
        self._creating: dict[str, set[asyncio.Task]] = {}  # topic -> its new replicas being made on dir workers
        self._stopping = asyncio.Event()
        self.shutdown_requested = asyncio.Event()
        # Long-polling fetches waiting for an append or a high watermark move, by partition (Kafka's DelayedFetch
        # purgatory): an append wakes the fetches of its partition only.
        self.parked_fetches = ParkedFetches()
        self.exit_code = 0
        self.incarnation_id = uuid.uuid4()
        self.broker_epoch = -1
        self._producer_ids = (0, 0)  # [next, end) of the block this broker holds
        self._producer_ids_lock = asyncio.Lock()

    # -------------------------------------------------------------------------------- identity and endpoints
    @property
    def config_auto_create_topics(self) -> bool:
        return bool(getattr(self.config, "auto_create_topics_enable", True))

    @property
    def extensions_enabled(self) -> bool:
        """kjbod.extensions.enable: false answers as Apache Kafka does (no extension APIs or tagged fields)."""
        return bool(getattr(self.config, "extensions_enable", True))

    @property
    def rack(self) -> str | None:
        return getattr(self.config, "broker_rack", None)

    @property
    def dynamic_configs(self) -> DynamicBrokerConfigs:
        return DynamicBrokerConfigs.from_image(self.node_id, self.metadata)

    def _listener_endpoints(self) -> dict[str, tuple[str, int]]:
        """listener name → advertised (host, port)."""
        out: dict[str, tuple[str, int]] = {}
        for ln in self.config.listeners:
            out[ln.name] = (ln.host, ln.port)
        for ln in getattr(self.config, "advertised_listeners", None) or ():
            out[ln.name] = (ln.host, ln.port)
        return out

    def cluster_nodes(self, listener_name: str, *, controllers: bool) -> list[NodeEndpoint]:
        """The brokers (unfenced, as registered with the controller) or the controllers (as registered with the
        active controller) clients may use on the listener the request came in on."""
        if controllers:
            return registered_controllers(self.metadata, listener_name)
        registered = [NodeEndpoint(b.broker_id, e.host, e.port, b.rack)
                      for b in self.metadata.unfenced_brokers()
                      if (e := b.endpoint(listener_name)) is not None]
        if registered:
            return registered
        endpoints = self._listener_endpoints()
        names = [listener_name] if listener_name in endpoints else []
        if not names:
            ctl = set(getattr(self.config, "controller_listener_names", ()) or ())
            names = [n for n in endpoints if n not in ctl][:1]
        out = []
        for name in names:
            if name in endpoints:
                host, port = endpoints[name]
                out.append(NodeEndpoint(self.node_id, host, port))
                break
        return out

    # -------------------------------------------------------------------------------- partitions
    def dir_offline(self, path: str) -> None:
        log.error("log_dir_offline", log_dir=path, effect="its partitions answer KAFKA_STORAGE_ERROR; other dirs "
                  "keep serving")

    def all_dirs_offline(self) -> None:
        log.error("all_log_dirs_offline", effect="shutting down, as Kafka does")
        self.exit_code = 1
        loop = getattr(self, "_loop", None)
        if loop is not None:
            loop.call_soon_threadsafe(self.shutdown_requested.set)

    def partition_log(self, topic: str, partition: int):
        """The local log of a partition; raises a storage error carrying the Kafka error code."""
        return self.logs.get_log(topic, partition)

    def leader_epoch(self, topic: str, partition: int) -> int:
        """The leader epoch a leader stamps on the batches it appends (the image's; 0 before any)."""
        t = self.metadata.topic(topic)
        p = t.partitions.get(partition) if t is not None else None
        return p.leader_epoch if p is not None and p.leader_epoch >= 0 else 0

    def local_log(self, topic: str, partition: int):
        """The local replica's log, leader or follower (`partition_log` is what clients may read)."""
        return self.logs.get_log(topic, partition)

    def notify_append(self, topic: str, partition: int) -> None:
        """Records were appended to a partition: the long-polling fetches parked on it (followers' and
        consumers') look again, in this call (kjbod.broker.parked_fetches)."""
        self.parked_fetches.appended((topic, partition))

    def notify_high_watermark(self, topic: str, partition: int) -> None:
        """A partition's high watermark moved: the consumers' long polls parked on it look again, never a
        follower's, which reads to the log end (Kafka completes a follower's DelayedFetch on appended bytes)."""
        self.parked_fetches.high_watermark_moved((topic, partition))

    def partition_online(self, topic: str, partition: int) -> bool:
        if self.logs is None:
            return True
        return self.logs.is_partition_online(topic, partition)

    # -------------------------------------------------------------------------------- the controller
    async def controller_request(self, body: Any, version: int) -> Any:
        """Sends a controller-owned request to the controller (in process) and returns its response."""
        if self.controller is None:
            raise RuntimeError("the controller is not running")
        response = await self.controller.request(body.API_KEY, version, body)
        if isinstance(body, CreateTopicsRequest) and self._creating:
            # The replicas it made here are served before it answers (they are made on their dirs' workers).
            await self.creates_settled([t.name for t in response.topics if t.error_code == 0], CREATES_WAIT_S)
        elif isinstance(body, CreatePartitionsRequest) and self._creating:
            await self.creates_settled([t.name for t in response.results if t.error_code == 0], CREATES_WAIT_S)
        elif isinstance(body, DeleteTopicsRequest) and self.logs is not None and self.logs.deleting:
            # Its partitions here are renamed to -delete on their dirs' workers before it answers, as before the
            # workers (bounded: a hung dir's rename does not hold the answer past the wait).
            names = [t.name for t in response.responses if t.error_code == 0 and t.name]
            await self.logs.deletes_settled(names, CREATES_WAIT_S)
        return response

    def controller_call(self, body: Any, version: int) -> Any:
        """The controller's response to `body`, or an awaitable of it when it is not ready at once (handlers
        return either; a steady heartbeat is answered without a task)."""
        if self.controller is None:
            raise RuntimeError("the controller is not running")
        if isinstance(body, DeleteTopicsRequest):
            return self.controller_request(body, version)  # answered once its renames here are done
        fut = self.controller.request(body.API_KEY, version, body)
        return fut.result() if fut.done() else fut

    async def auto_create_topic(self, name: str) -> TopicImage | None:
        resp = await self.controller_request(
            CreateTopicsRequest(topics=[CreatableTopic(name=name, num_partitions=-1, replication_factor=-1)],
                                timeout_ms=0), 7)
        if resp.topics[0].error_code != 0:
            log.warning("auto_create_failed", topic=name, error=resp.topics[0].error_message)
        return self.metadata.topic(name)

    async def next_producer_id(self) -> int:
        """A producer id from this broker's block; a new block from the controller when it runs out."""
        async with self._producer_ids_lock:
            nxt, end = self._producer_ids
            if nxt >= end:
                resp = await self.controller_request(
                    AllocateProducerIdsRequest(broker_id=self.node_id, broker_epoch=self.broker_epoch), 0)
                if resp.error_code != 0:
                    raise ProducerIdsUnavailable(resp.error_code)
                nxt, end = resp.producer_id_start, resp.producer_id_start + resp.producer_id_len
            self._producer_ids = (nxt + 1, end)
            return nxt

    def open_metadata(self, metadata_log: Any) -> None:
        """Builds the controller on the metadata log and replays it (called by storage_glue.open_storage)."""
        self.metadata_log = metadata_log
        self.controller = self._controller_factory(self, metadata_log)
        self.metadata = self.controller.load()
        self.controller.add_listener(self._publish)

    # -------------------------------------------------------------------------------- the publisher
    def _publish(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """Applies a committed delta to this broker: the new image, then its local logs."""
        old, self.metadata = self.metadata, image
        if old.features_epoch != image.features_epoch:
            self.handler.forget_answers()  # ApiVersions' memoised answers carry the finalized levels
        if self.assignments is not None:
            self.assignments.on_metadata(image)
        if self.broker_config_listeners and (
                old.resource_configs(BROKER, "") != image.resource_configs(BROKER, "")
                or old.resource_configs(BROKER, str(self.node_id)) != image.resource_configs(BROKER, str(self.node_id))):
            for listener in list(self.broker_config_listeners):
                try:
                    listener()
                except Exception as e:  # noqa: BLE001  (one listener's bug must not stop the publisher)
                    log.error("broker_config_listener_failed", error=f"{type(e).__name__}: {e}")
        if self.logs is None:
            return
        changes = delta.local_changes(self.node_id, image)
        deletes: dict[str, list[int]] = defaultdict(list)
        for topic, p in changes.deletes:
            deletes[topic.name].append(p.partition)
        for name, parts in deletes.items():
            self.logs.delete_topic_partitions(name, sorted(parts))
            log.info("partitions_deleted", topic=name, partitions=len(parts))
        creates: dict[uuid.UUID, list[int]] = defaultdict(list)
        for topic, p in changes.creates:
            if self.logs.manager.find(topic.name, p.partition) is None:  # not made ahead (see RemoteBrokerNode)
                creates[topic.topic_id].append(p.partition)
        for topic_id, parts in creates.items():
            self._start_creating(image.topics_by_id[topic_id], sorted(parts))
        for tid in delta.changed_topic_ids():
            now, before = image.topic_by_id(tid), old.topic_by_id(tid)
            if now is not None and before is not None and now.configs != before.configs:
                self.logs.apply_topic_config(now.name, dict(now.configs))
                log.info("topic_configs_changed", topic=now.name, configs=dict(now.configs))
        broker_configs_changed = (
            old.resource_configs(BROKER, "") != image.resource_configs(BROKER, "")
            or old.resource_configs(BROKER, str(self.node_id)) != image.resource_configs(BROKER, str(self.node_id)))
        if broker_configs_changed and self.logs.apply_broker_defaults():
            log.info("broker_log_defaults_changed", configs=self.dynamic_configs.merged())
        if broker_configs_changed:
            self.apply_cordon()
        if broker_configs_changed and self.logs.apply_cleaner_config():
            log.info("log_cleaner_config_changed", config=self.logs.manager.cleaner_config)
        if self.replication is not None:
            self.replication.sync(image, delta.changed_partitions(), delta.removed_topics.values(),
                                  delta.changed_topic_configs())
        if self.mover is not None and broker_configs_changed:
            rate = self.replica_alter_log_dirs_rate()
            if rate != self.mover.throttle.rate:
                self.mover.throttle.set_rate(rate)
                log.info("intra_broker_throttle_changed", bytes_per_second=None if rate >= LONG_MAX else rate)

    async def assign_directories(self, placed: list[tuple[uuid.UUID, int, uuid.UUID]]) -> None:
        """Records in the metadata the dir each of these (topic id, partition) replicas is in."""
        await self.controller.assign_directories(self.node_id, placed)

    def _assignment_done(self, task: asyncio.Task) -> None:
        self._assignments.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("directory_assignment_failed", error=str(task.exception()),
                      effect="recorded at the next start")

    def _start_creating(self, topic: TopicImage, parts: list[int]) -> None:
        """Creates this broker's new replicas of `topic` on their dirs' workers (placement by storage); the
        publisher does not wait, so a dir that hangs holds no other delta. Controller requests that create
        topics wait for it before they answer (`creates_settled`)."""
        task = asyncio.get_running_loop().create_task(self._create_partitions(topic, parts))
        tasks = self._creating.setdefault(topic.name, set())
        tasks.add(task)

        def done(task: asyncio.Task) -> None:
            tasks.discard(task)
            if not tasks and self._creating.get(topic.name) is tasks:
                del self._creating[topic.name]

        task.add_done_callback(done)

    async def creates_settled(self, topics: Iterable[str], timeout_s: float) -> None:
        """Waits (up to `timeout_s`) until the replicas of `topics` being created here are made (or failed)."""
        pending = [t for name in topics for t in self._creating.get(name, ())]
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)

    async def _create_partitions(self, topic: TopicImage, parts: list[int]) -> None:
        named = {p: d for p in parts if (d := topic.partitions[p].directory_of(self.node_id)) is not None
                 and not is_reserved_dir(d)}
        try:
            results = await self.logs.create_partitions_on_workers(topic.name, topic.topic_id, parts,
                                                                  dict(topic.configs), named)
        except Exception as e:
            results = dict.fromkeys(parts, e)
        failed = {p: r for p, r in results.items() if isinstance(r, BaseException)}
        if failed:  # a failing disk: the partitions stay offline here; the controller keeps them
            log.error("partition_create_failed", topic=topic.name, partitions=sorted(failed),
                      error=str(next(iter(failed.values()))))
        made = {p: r for p, r in results.items() if not isinstance(r, BaseException)}
        if not made:
            return
        # The image may have moved on while the dirs worked: a replica it no longer gives this broker goes again.
        now = self.metadata.topic_by_id(topic.topic_id)
        gone = [p for p in made if now is None or p not in now.partitions
                or self.node_id not in now.partitions[p].replicas]
        if gone:
            self.logs.delete_topic_partitions(topic.name, gone)
        log.info("topic_created", topic=topic.name, topic_id=str(topic.topic_id), partitions=len(made) - len(gone))
        if now is None or len(gone) == len(made):
            return
        if self.replication is not None:
            self.replication.sync(self.metadata, {topic.topic_id: [p for p in made if p not in gone]})
        placed = [(topic.topic_id, p, dir_id) for p, dir_id in made.items() if p not in gone
                  and not is_reserved_dir(dir_id) and dir_id != now.partitions[p].directory_of(self.node_id)]
        if placed:
            task = asyncio.get_running_loop().create_task(self.assign_directories(placed))
            self._assignments.add(task)
            task.add_done_callback(self._assignment_done)

    # -------------------------------------------------------------------------------- configs
    def cordoned_log_dirs(self) -> list[str]:
        """The log dirs cordoned now (KIP-1066): this broker's dynamic cordoned.log.dirs when set, else
        server.properties'. A stored entry that is no longer a log dir here (log.dirs changed since) is skipped."""
        dynamic = self.dynamic_configs.per_broker.get(CORDON_KEY)
        if dynamic is None:
            return list(getattr(self.config, "cordoned_log_dirs", ()) or ())
        log_dirs = list(self.config.log_dirs)
        try:
            return cordoned_dirs(dynamic, log_dirs)
        except ValueError as e:
            log.warning("cordoned_log_dirs_ignored", error=str(e), effect="only the entries that are log dirs count")
            return cordoned_dirs([d for d in dynamic.split(",") if d.strip() in log_dirs or d.strip() == "*"],
                                 log_dirs)

    def cordoned_dir_ids(self) -> list[uuid.UUID]:
        """The KIP-858 ids of the cordoned dirs that are online."""
        if self.logs is None:
            return []
        cordoned = set(self.logs.manager.cordoned)
        return sorted(uuid.UUID(bytes=uuid_from_str(d))
                      for d, path in self.logs.manager.directory_ids(online_only=True).items() if path in cordoned)

    def heartbeat_cordoned_dirs(self) -> list[uuid.UUID] | None:
        """What a heartbeat carries as CordonedLogDirs (v2): the online cordoned dirs' ids, or None (nothing
        sent) before the logs are open or below metadata.version 4.3-IV0, where Kafka's broker sends nothing and
        the cordon only steers this broker's own choice of dir."""
        if self.logs is None or not cordons_supported(self.metadata):
            return None
        return self.cordoned_dir_ids()

    def apply_cordon(self) -> None:
        """Gives the log manager the cordoned dirs in force, and tells the controller when they changed."""
        if self.logs is None:
            return
        before = self.logs.manager.cordoned
        self.logs.manager.set_cordoned(self.cordoned_log_dirs())
        if self.logs.manager.cordoned != before:
            self.cordon_changed()

    def cordon_changed(self) -> None:
        """The controller hears of a new cordon with the next heartbeat; sent now (in this process) rather than
        after an interval."""
        if self.broker_epoch >= 0 and not self.stopping:
            self.spawn(self._heartbeat())

    def replica_alter_log_dirs_rate(self) -> int:
        """The effective intra-broker throttle: dynamic per-broker, dynamic default, then server.properties."""
        dynamic = self.dynamic_configs.effective(THROTTLE_KEY)
        if dynamic is not None:
            return int(dynamic[0])
        return int(getattr(self.config, "replica_alter_log_dirs_io_max_bytes_per_second", LONG_MAX) or LONG_MAX)

    # -------------------------------------------------------------------------------- replica moves
    def run_exclusive(self, fn):
        """Run `fn` on the event loop and return its result (called from a mover thread when there are no dir
        workers, KJBOD_DIR_WORKERS=0): every append then runs on the loop, so none can interleave with `fn`."""
        from kjbod.broker.kip113.mover import MoverStopped

        done: concurrent.futures.Future = concurrent.futures.Future()

        def call() -> None:
            if not done.set_running_or_notify_cancel():
                return
            try:
                done.set_result(fn())
            except BaseException as e:  # handed to the mover thread, which decides
                done.set_exception(e)

        try:
            self._loop.call_soon_threadsafe(call)
        except RuntimeError:
            raise MoverStopped() from None  # the loop is closed: the node is going away
        while True:
            try:
                return done.result(timeout=0.1)
            except concurrent.futures.TimeoutError:
                if self.mover is not None and self.mover.stopping and done.cancel():
                    raise MoverStopped() from None

    def _start_mover(self) -> None:
        from kjbod.broker.kip113 import ReplicaMover, Throttle

        threads = int(getattr(self.config, "num_replica_alter_log_dirs_threads", 0) or len(self.config.log_dirs))
        self.mover = ReplicaMover(self.logs.manager, threads=threads,
                                  throttle=Throttle(self.replica_alter_log_dirs_rate()),
                                  # appends run on each dir's worker (with KJBOD_DIR_WORKERS=0 on the event
                                  # loop): the final step runs there
                                  exclusive=self.run_exclusive, by_dir_worker=workers_enabled(),
                                  assign_dir=self.assign_moved_replica if self.assignments is not None else None)
        self.mover.start()
        self.mover.resume_at_startup()

    async def send_alter_partition(self, build: Callable[[int], Any]) -> Any:
        """An AlterPartition request (built for a version) to the controller; its response."""
        return await self.controller_request(build(ALTER_PARTITION_VERSION), ALTER_PARTITION_VERSION)

    def _start_replication(self) -> None:
        """The replica manager (kjbod.broker.replication): leaders, followers and acks=all for the replicas
        this broker holds; its ISR changes go to the controller in this process."""
        from kjbod.broker.replication import ReplicaManager, ReplicationConfig

        self.replication = ReplicaManager(self, ReplicationConfig.from_config(self.config),
                                          alter_partition=self.send_alter_partition)
        self.replication.start()
        self.replication.sync(self.metadata)

    async def start(self) -> None:
        from kjbod.broker.storage_glue import open_storage

        self._loop = asyncio.get_running_loop()
        await open_storage(self)
        # Assignments queued before the controller runs wait in the manager, whose task starts after it.
        self.assignments = AssignmentsManager(
            self.node_id, InProcessControllerChannel(self._controller_handler), image=lambda: self.metadata,
            broker_epoch=lambda: self.broker_epoch)
        self._start_mover()
        self._start_replication()
        self.controller.start()
        self.assignments.start()
        await self._register()
        await self._record_local_dirs()
        self.spawn(self._heartbeats())
        log.info("node_started", node_id=self.node_id, cluster_id=self.cluster_id,
                 topics=len(self.metadata.by_name), broker_epoch=self.broker_epoch)

    async def _controller_handler(self, api_key: int, version: int, request: Any, header: Any) -> Any:
        return await self.controller.handle_request(api_key, version, request, header)

    def assign_moved_replica(self, topic: str, partition: int, log_dir: str | None) -> concurrent.futures.Future[bool]:
        """The mover's DirAssigner (called from its threads): queues `topic-partition` -> `log_dir` (None: LOST_DIR)
        with the assignments manager; the future ends True once the controller has it."""
        try:
            return asyncio.run_coroutine_threadsafe(self._assign_moved(topic, partition, log_dir), self._loop)
        except RuntimeError:  # the loop is closed: the node is going away
            gone: concurrent.futures.Future[bool] = concurrent.futures.Future()
            gone.cancel()
            return gone

    async def _assign_moved(self, topic: str, partition: int, log_dir: str | None) -> bool:
        t = self.metadata.topic(topic)
        if self.assignments is None or t is None:
            return False
        if log_dir is None:
            dir_id = DIR_LOST
        else:
            text = {path: d for d, path in self.logs.manager.directory_ids(online_only=False).items()}.get(log_dir)
            if text is None:
                return False
            dir_id = uuid.UUID(bytes=uuid_from_str(text))
        outcome = await self.assignments.assign(t.topic_id, partition, dir_id, reason="replica moved between dirs")
        return outcome == AssignmentOutcome.ASSIGNED

    # -------------------------------------------------------------------------------- registration, heartbeats
    def _registration(self) -> BrokerRegistrationRequest:
        ctl = set(getattr(self.config, "controller_listener_names", ()) or ())
        advertised = {ln.name: ln for ln in getattr(self.config, "advertised_listeners", None) or ()}
        listeners = [advertised.get(ln.name, ln) for ln in self.config.listeners if ln.name not in ctl]
        dirs = sorted(self.logs.manager.directory_ids(online_only=True))
        return BrokerRegistrationRequest(
            broker_id=self.node_id, cluster_id=self.cluster_id, incarnation_id=self.incarnation_id,
            listeners=[RegListener(name=ln.name, host=ln.host, port=ln.port,
                                   security_protocol=SECURITY_PROTOCOLS.get(ln.security_protocol, 0))
                       for ln in listeners],
            rack=self.rack, log_dirs=[uuid.UUID(bytes=uuid_from_str(d)) for d in dirs],
            features=[RegFeature(name=n, min_supported_version=lo, max_supported_version=hi)
                      for n, (lo, hi) in sorted(features.SUPPORTED.items())],
            # the epoch the last run's clean-shutdown markers name (-1: none): KIP-966's unclean-shutdown check
            previous_broker_epoch=self.logs.manager.clean_shutdown_broker_epoch())

    async def _register(self) -> None:
        """Registers this broker with the controller in this process, then heartbeats until it is unfenced."""
        resp = await self.controller_request(self._registration(), 4)
        if resp.error_code != 0:
            raise RuntimeError(f"broker registration refused: {ErrorCode(resp.error_code).name}")
        self.broker_epoch = resp.broker_epoch
        while (await self._heartbeat()).is_fenced is not False:
            await asyncio.sleep(0.01)

    async def _record_local_dirs(self) -> None:
        """Makes the metadata say where each of this broker's replicas is: dirs chosen before a crash and not yet
        recorded, replicas moved between dirs (KIP-113), and logs written before dirs were tracked."""
        placed = [(topic_id, partition, dir_id) for (topic_id, partition), dir_id in self.local_placements().items()
                  if self.metadata.topics_by_id[topic_id].partitions[partition].directory_of(self.node_id) != dir_id]
        if placed:
            await self.assign_directories(placed)
            log.info("replica_dirs_recorded", partitions=len(placed))

    def local_placements(self, changed: Mapping[uuid.UUID, Iterable[int]] | None = None
                         ) -> dict[tuple[uuid.UUID, int], uuid.UUID]:
        """(topic id, partition) -> the id of the online dir its replica is in on disk, for this broker's replicas
        in the image (of `changed` only, when given: topic id -> partition ids, what a delta wrote)."""
        ids_by_path = {path: uuid.UUID(bytes=uuid_from_str(dir_id))
                       for dir_id, path in self.logs.manager.directory_ids(online_only=True).items()}
        if changed is None:
            parts: Iterable[tuple[TopicImage, PartitionImage]] = (
                (t, p) for t in self.metadata.topics() for p in t.partitions.values())
        else:
            parts = [(t, p) for tid, pids in changed.items() if (t := self.metadata.topic_by_id(tid)) is not None
                     for pid in pids if (p := t.partitions.get(pid)) is not None]
        out: dict[tuple[uuid.UUID, int], uuid.UUID] = {}
        for topic, p in parts:
            plog = self.logs.manager.find(topic.name, p.partition) if self.node_id in p.replicas else None
            dir_id = ids_by_path.get(plog.log_dir) if plog is not None else None
            if dir_id is not None:
                out[(topic.topic_id, p.partition)] = dir_id
        # A move whose destination the controller was asked to record is about to swap into it: that dir stands
        # (pointing the metadata back at the source meanwhile would undo KIP-858's order).
        moving = self.mover.assigned_dirs() if self.mover is not None else {}
        for (name, partition), path in moving.items():
            topic_image = self.metadata.topic(name)
            moved_to = ids_by_path.get(path)
            key = (topic_image.topic_id, partition) if topic_image is not None else None
            if key in out and moved_to is not None:
                out[key] = moved_to
        return out

    async def _heartbeat(self, *, want_shut_down: bool = False) -> Any:
        resp = await self.controller_request(BrokerHeartbeatRequest(
            broker_id=self.node_id, broker_epoch=self.broker_epoch, current_metadata_offset=self.metadata.offset,
            want_fence=False, want_shut_down=want_shut_down,
            # null until caught up, as Kafka's broker sends it (the first heartbeats after registering)
            cordoned_log_dirs=self.heartbeat_cordoned_dirs() if self._caught_up else None), 2)
        if getattr(resp, "is_caught_up", False):
            self._caught_up = True
        return resp

    async def _heartbeats(self) -> None:
        interval = int(getattr(self.config, "broker_heartbeat_interval_ms", 2000)) / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                resp = await self._heartbeat()
                if resp.error_code != 0:
                    log.warning("heartbeat_failed", error=ErrorCode(resp.error_code).name)
            except Exception as e:
                log.warning("heartbeat_failed", error=str(e))

    def spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.append(task)
        return task

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def begin_shutdown(self) -> None:
        """First step of a shutdown: pending long polls answer now instead of waiting out max_wait_ms."""
        self._stopping.set()
        self.parked_fetches.wake_all()

    async def stop(self) -> None:
        self._stopping.set()
        tasks = [*self._tasks, *self._assignments, *(t for ts in self._creating.values() for t in ts)]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        verifier = getattr(self, "txn_verifier", None)  # KIP-890's questions to transaction coordinators
        if verifier is not None:
            verifier.close()
        if self.assignments is not None:
            await self.assignments.close()  # a move waiting for its assignment stops too
        if self.replication is not None:
            await self.replication.close()
            self.replication = None
        if self.mover is not None:
            # In a thread: a mover waiting for its final step on this loop must be able to give up meanwhile.
            await asyncio.get_running_loop().run_in_executor(None, self.mover.stop)
        if self.metadata_fetch is not None:
            self.metadata_fetch.close()
        if self.controller is not None:
            await self.controller.stop()
        if self.logs is not None:
            self.logs.close(broker_epoch=self.broker_epoch)
        if self.metadata_log is not None:
            try:
                self.metadata_log.close()
            except StorageError as e:  # its last snapshot could not be written: the log's batches are all synced
                log.error("metadata_log_close_failed", dir=str(self.config.metadata_log_dir), error=str(e),
                          effect="its batches were already synced; the next start recovers the log from them")
                self.exit_code = 1
        log.info("node_stopped", node_id=self.node_id)


class ProducerIdsUnavailable(Exception):
    def __init__(self, error_code: int) -> None:
        super().__init__(f"the controller gave no producer ids: {ErrorCode(error_code).name}")
        self.error_code = error_code


def build_node(config: Any, controller_factory: Callable[[BrokerNode, Any], Any]) -> BrokerNode:
    return BrokerNode(config, controller_factory)
