"""The combined broker+controller node: owns the metadata image, the log manager and the request router.

`build_node(config)` returns an object with `start()`, `stop()` and `handler` (the router) for the server
shell.  The node is the one place handlers reach shared state through: cluster identity and endpoints, the
metadata image and its durable log, the storage layer, and background upkeep (checkpoints, retention, deletes).

KIP-113: the node owns the replica mover (kjbod.broker.kip113), started after storage is open, stopped before
it closes, and runs the mover's final catch-up and swap on the event loop (`run_exclusive`): every append
happens on that loop, so while the swap runs no produce can hold the old log.  Dynamic broker configs (the
intra-broker throttle) and topic config changes are written to the metadata log as ConfigRecords first and
applied after, like topic creation.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import time
import uuid
from dataclasses import dataclass
from typing import Any

import structlog

from kjbod.broker.broker_config import BROKER, LONG_MAX, THROTTLE_KEY, DynamicBrokerConfigs
from kjbod.broker.metadata_image import MetadataImage, PartitionState, TopicState
from kjbod.broker.router import Router
from kjbod.protocol.generated import ConfigRecord, PartitionRecord, RemoveTopicRecord, TopicRecord

log = structlog.get_logger("kjbod.node")

TOPIC_RESOURCE = 2


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None = None


class BrokerNode:
    def __init__(self, config: Any):
        self.config = config
        self.node_id: int = config.node_id
        self.cluster_id: str = ""
        self.metadata = MetadataImage()
        self.metadata_log: Any = None
        self.logs: Any = None  # kjbod.storage log manager, once opened
        self.mover: Any = None  # kjbod.broker.kip113.ReplicaMover, once storage is open
        self.dynamic_configs = DynamicBrokerConfigs(self.node_id)
        self.handler = Router(self)  # each request is logged at debug by the connection, with its latency
        self._tasks: list[asyncio.Task] = []
        self._stopping = asyncio.Event()
        self.shutdown_requested = asyncio.Event()
        self._appended = asyncio.Event()
        self.exit_code = 0
        self._producer_ids = itertools.count(int(time.time() * 1000) * 1000)

    # -------------------------------------------------------------------------------- identity and endpoints
    @property
    def config_auto_create_topics(self) -> bool:
        return bool(getattr(self.config, "auto_create_topics_enable", True))

    def _listener_endpoints(self) -> dict[str, tuple[str, int]]:
        """listener name → advertised (host, port)."""
        out: dict[str, tuple[str, int]] = {}
        for ln in self.config.listeners:
            out[ln.name] = (ln.host, ln.port)
        for ln in getattr(self.config, "advertised_listeners", None) or ():
            out[ln.name] = (ln.host, ln.port)
        return out

    def cluster_nodes(self, listener_name: str, *, controllers: bool) -> list[NodeEndpoint]:
        endpoints = self._listener_endpoints()
        if controllers:
            names = list(getattr(self.config, "controller_listener_names", ()) or ())
        else:
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

    def notify_append(self) -> None:
        """Wakes every long-polling Fetch: new records may satisfy them."""
        self._appended.set()
        self._appended = asyncio.Event()

    def append_event(self) -> asyncio.Event:
        return self._appended

    def next_producer_id(self) -> int:
        return next(self._producer_ids)

    def partition_online(self, topic: str, partition: int) -> bool:
        if self.logs is None:
            return True
        return self.logs.is_partition_online(topic, partition)

    async def auto_create_topic(self, name: str) -> TopicState | None:
        num = int(getattr(self.config, "num_partitions", 1))
        topic = self.create_topic(name, num, {})
        return topic

    def create_topic(self, name: str, num_partitions: int, configs: dict[str, str],
                     topic_id: uuid.UUID | None = None) -> TopicState:
        """Creates the topic: partition logs on disk first (placement decides each one's directory id, which the
        PartitionRecords carry), then one fsynced metadata-log batch, then the image.  A crash between the two
        leaves partition dirs the metadata does not know; the next startup renames them ``-stray``, as Kafka
        does (storage_glue.reconcile), and the name can be created again."""
        topic_id = topic_id or uuid.uuid4()
        while topic_id.int >> 64 == 0 and (topic_id.int & ((1 << 64) - 1)) < 100:
            topic_id = uuid.uuid4()
        records: list = [TopicRecord(name=name, topic_id=topic_id)]
        for key, value in sorted(configs.items()):
            records.append(ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=name, name=key, value=value))
        state = TopicState(name=name, topic_id=topic_id, configs=dict(configs))
        dir_ids = self.place_partitions(name, topic_id, num_partitions, configs)
        for p in range(num_partitions):
            directories = [dir_ids[p]] if dir_ids else []
            records.append(PartitionRecord(partition_id=p, topic_id=topic_id, replicas=[self.node_id],
                                           isr=[self.node_id], leader=self.node_id, leader_epoch=0,
                                           partition_epoch=0, directories=directories))
            state.partitions[p] = PartitionState(partition=p, replicas=[self.node_id], isr=[self.node_id],
                                                 leader=self.node_id, directories=directories)
        if self.metadata_log is not None:
            self.metadata_log.append(records)
        self.metadata.apply_topic(state)
        log.info("topic_created", topic=name, topic_id=str(topic_id), partitions=num_partitions)
        return state

    def place_partitions(self, name: str, topic_id: uuid.UUID, count: int, configs: dict[str, str]) -> list:
        """Creates the partitions' logs; returns each partition's directory id (storage decides placement)."""
        if self.logs is None:
            return []
        return self.logs.create_topic_partitions(name, topic_id, count, configs)

    def delete_topic(self, topic: TopicState) -> None:
        if self.metadata_log is not None:
            self.metadata_log.append([RemoveTopicRecord(topic_id=topic.topic_id)])
        self.metadata.apply_remove_topic(topic.topic_id)
        if self.logs is not None:
            self.logs.delete_topic_partitions(topic.name, list(topic.partitions))
        log.info("topic_deleted", topic=topic.name, topic_id=str(topic.topic_id))

    # -------------------------------------------------------------------------------- lifecycle
    def _replay(self, records: list) -> None:
        pending_configs: dict[str, dict[str, str]] = {}
        for rec in records:
            if isinstance(rec, TopicRecord):
                self.metadata.apply_topic(TopicState(name=rec.name, topic_id=rec.topic_id,
                                                     configs=pending_configs.pop(rec.name, {})))
            elif isinstance(rec, PartitionRecord):
                topic = self.metadata.topic_by_id(rec.topic_id)
                if topic is not None:
                    topic.partitions[rec.partition_id] = PartitionState(
                        partition=rec.partition_id, replicas=list(rec.replicas), isr=list(rec.isr),
                        leader=rec.leader, leader_epoch=max(rec.leader_epoch, 0),
                        partition_epoch=max(rec.partition_epoch, 0), directories=list(rec.directories))
            elif isinstance(rec, ConfigRecord) and rec.resource_type == TOPIC_RESOURCE:
                topic = self.metadata.topic(rec.resource_name)
                target = topic.configs if topic is not None else pending_configs.setdefault(rec.resource_name, {})
                if rec.value is None:
                    target.pop(rec.name, None)
                else:
                    target[rec.name] = rec.value
            elif isinstance(rec, ConfigRecord) and rec.resource_type == BROKER:
                self.dynamic_configs.apply(rec.resource_name, rec.name, rec.value)
            elif isinstance(rec, RemoveTopicRecord):
                self.metadata.apply_remove_topic(rec.topic_id)

    # -------------------------------------------------------------------------------- configs
    def replica_alter_log_dirs_rate(self) -> int:
        """The effective intra-broker throttle: dynamic per-broker, dynamic default, then server.properties."""
        dynamic = self.dynamic_configs.effective(THROTTLE_KEY)
        if dynamic is not None:
            return int(dynamic[0])
        return int(getattr(self.config, "replica_alter_log_dirs_io_max_bytes_per_second", LONG_MAX) or LONG_MAX)

    def set_broker_configs(self, resource_name: str, changes: dict[str, str | None]) -> None:
        """Dynamic broker configs of this node ("<id>") or the cluster default (""): durable, then applied."""
        if not changes:
            return
        records = [ConfigRecord(resource_type=BROKER, resource_name=resource_name, name=k, value=v)
                   for k, v in sorted(changes.items())]
        if self.metadata_log is not None:
            self.metadata_log.append(records)
        for rec in records:
            self.dynamic_configs.apply(rec.resource_name, rec.name, rec.value)
        log.info("broker_configs_changed", resource=resource_name or "<default>", changes=changes)
        if self.mover is not None:
            rate = self.replica_alter_log_dirs_rate()
            if rate != self.mover.throttle.rate:
                self.mover.throttle.set_rate(rate)
                log.info("intra_broker_throttle_changed", bytes_per_second=None if rate >= LONG_MAX else rate)

    def set_topic_configs(self, topic: TopicState, overrides: dict[str, str]) -> None:
        """Replace the topic's config overrides: records for what changed, then the image and the logs."""
        old = topic.configs
        records = [ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=topic.name, name=k, value=None)
                   for k in sorted(old) if k not in overrides]
        records += [ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=topic.name, name=k, value=v)
                    for k, v in sorted(overrides.items()) if old.get(k) != v]
        if not records:
            return
        if self.metadata_log is not None:
            self.metadata_log.append(records)
        topic.configs = dict(overrides)
        if self.logs is not None:
            self.logs.apply_topic_config(topic.name, topic.configs)
        log.info("topic_configs_changed", topic=topic.name, configs=topic.configs)

    # -------------------------------------------------------------------------------- replica moves
    def run_exclusive(self, fn):
        """Run `fn` on the event loop and return its result (called from a mover thread): appends happen only
        on the loop, so none can interleave with `fn`."""
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
                                  exclusive=self.run_exclusive)
        self.mover.start()
        self.mover.resume_at_startup()

    async def start(self) -> None:
        from kjbod.broker.storage_glue import open_storage

        self._loop = asyncio.get_running_loop()
        await open_storage(self)
        self._start_mover()
        log.info("node_started", node_id=self.node_id, cluster_id=self.cluster_id,
                 topics=len(self.metadata.by_name))

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
        self.notify_append()

    async def stop(self) -> None:
        self._stopping.set()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.mover is not None:
            # In a thread: a mover waiting for its final step on this loop must be able to give up meanwhile.
            await asyncio.get_running_loop().run_in_executor(None, self.mover.stop)
        if self.logs is not None:
            self.logs.close()
        if self.metadata_log is not None:
            self.metadata_log.close()
        log.info("node_stopped", node_id=self.node_id)


def build_node(config: Any) -> BrokerNode:
    return BrokerNode(config)
