"""Opening and closing the node's storage: meta.properties, the metadata log, and the partition logs.

Startup order: the log manager verifies every dir's meta.properties (KIP-858 directory ids), locks and recovers
every partition; then the metadata log is replayed into the image; then future logs left by replica moves are
settled (KIP-113: a ``-future`` log whose current log is gone is promoted when every dir is online, left alone
otherwise; one of a deleted topic is removed); then the image and the dirs are reconciled: a partition the image
knows, replicated on this node, but held by no dir (a crash between the metadata record and the directory) is
created now, unless some dir is offline or a future log exists for it (its log may be in the offline dir: the
partition stays offline, as Kafka refuses to create a log then). A partition log the image does not give this
node is a stray replica, as Kafka (KRaft) defines it: its topic is not in the image, the topic's id differs (a
topic deleted and created again while the dir was offline), its log has no topic id at all (partition.metadata
is written before any data, so such a log never held any), or the partition is not in the topic or not assigned
to this node. Kafka renames strays to ``<topic>-<partition>.<32 hex>-stray`` and keeps them for the operator;
so does kjbod, and the name is free again for a new topic.

AlterReplicaLogDirs for a partition this node does not host yet remembers the requested dir
(``StorageAdapter.preferred_dirs``, in memory, as Kafka's LogManager does); the partition is created there
when it arrives.
"""

from __future__ import annotations

import asyncio
import functools
import os
import uuid
from collections.abc import Mapping
from typing import Any

import structlog

from kjbod.broker import topic_config
from kjbod.broker.broker_config import ConfigProblem, check_cleaner_value
from kjbod.broker.dir_work import DirWork
from kjbod.protocol.errors import ErrorCode
from kjbod.storage.cleaner import CleanerConfig
from kjbod.storage.config import LogConfig
from kjbod.storage.errors import KafkaStorageError, LogDirFullError, StorageError
from kjbod.storage.fsio import LogDirIO
from kjbod.storage.ids import uuid_to_str
from kjbod.storage.manager import LogManager, PartitionSpec
from kjbod.storage.meta import read_meta_properties
from kjbod.storage.metadata_log import MetadataLog, metadata_log_options

log = structlog.get_logger("kjbod.storage_glue")


def broker_log_config(config: Any, dynamic: Mapping[str, str] | None = None) -> LogConfig:
    """Topic defaults from the broker config (log.segment.bytes, log.retention.ms, ...), each one's dynamic value
    (``dynamic``: broker key -> value, this broker's over the cluster default) first."""
    values = {}
    for d in topic_config.DEFS.values():
        values[d.name] = topic_config.broker_default(d, config, dynamic)
    return LogConfig().with_topic_configs(values)


def cleaner_config(config: Any, dynamic: dict[str, str] | None = None) -> CleanerConfig:
    """The log.cleaner.* settings the storage's cleaners follow: server.properties', each overridden by its
    dynamic value in force (`dynamic`: this broker's over the cluster default), as Kafka reconfigures its cleaner."""
    def get(key: str, static: Any) -> Any:
        raw = (dynamic or {}).get(key)
        if raw is not None:
            try:
                return check_cleaner_value(key, raw)
            except ConfigProblem:
                pass  # refused when it was set; a value written by another tool falls back to the file's
        return static

    return CleanerConfig(
        enable=config.log_cleaner_enable,
        threads=max(1, get("log.cleaner.threads", config.log_cleaner_threads)),
        dedupe_buffer_size=get("log.cleaner.dedupe.buffer.size", config.log_cleaner_dedupe_buffer_size),
        io_buffer_load_factor=get("log.cleaner.io.buffer.load.factor", config.log_cleaner_io_buffer_load_factor),
        io_max_bytes_per_second=get("log.cleaner.io.max.bytes.per.second",
                                    config.log_cleaner_io_max_bytes_per_second),
        backoff_ms=get("log.cleaner.backoff.ms", config.log_cleaner_backoff_ms),
    )


def refresh_log_defaults(node: Any, manager: LogManager) -> bool:
    """`node.log_defaults` made to match the dynamic broker configs of `node.metadata`; True when they changed."""
    new = broker_log_config(node.config, node.dynamic_configs.merged())
    if new == node.log_defaults:
        return False
    node.log_defaults = manager.defaults = new
    return True


def topic_log_config(node: Any, overrides: dict[str, str]) -> LogConfig:
    return node.log_defaults.with_topic_configs(topic_config.validate(overrides))


class NotHostedError(StorageError):
    """A partition of the metadata image that has no log on this node."""

    error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class StorageAdapter:
    """What the node needs from storage, in the node's terms (topic ids as UUIDs, dir ids as text)."""

    def __init__(self, node: Any, manager: LogManager):
        self.node = node
        self.manager = manager
        self.preferred_dirs: dict[tuple[str, int], str] = {}
        # topic -> the renames to -delete its deletion left on dir workers (awaited by a local DeleteTopics)
        self.deleting: dict[str, list[asyncio.Future[None]]] = {}

    def get_log(self, topic: str, partition: int):
        """The partition's current log, else the error Kafka's ReplicaManager answers (getPartitionOrError):
        KAFKA_STORAGE_ERROR when it is offline here, NOT_LEADER_OR_FOLLOWER when the image has it but this node
        holds no log for it (not made yet after CreateTopics, or moved away: the client refreshes its metadata
        and retries), UNKNOWN_TOPIC_OR_PARTITION when the image does not have it."""
        plog = self.manager.find(topic, partition)
        if plog is not None:
            return plog
        if self.partition_offline(topic, partition):
            raise KafkaStorageError(f"{topic}-{partition} is offline: its log dir is offline or its log is only a "
                                    "-future copy waiting for that dir")
        if self.in_image(topic, partition):
            raise NotHostedError(f"this broker has no log for {topic}-{partition} (not made yet, or moved away)")
        return self.manager.get(topic, partition)  # raises UNKNOWN_TOPIC_OR_PARTITION

    def in_image(self, topic: str, partition: int) -> bool:
        topic_state = self.node.metadata.topic(topic)
        return topic_state is not None and partition in topic_state.partitions

    def partition_offline(self, topic: str, partition: int) -> bool:
        """A partition of the image, replicated here, whose current log is missing while a dir is offline or
        only its future log exists."""
        if not self.in_image(topic, partition):
            return False
        if self.manager.find(topic, partition) is not None:
            return False
        return self.manager.get_future(topic, partition) is not None or len(self.manager.online_dirs) < len(
            self.node.config.log_dirs)

    def dir_states(self) -> list[tuple[str, bool]]:
        """(path, online) of every configured log dir, paths exactly as DescribeLogDirs reports them."""
        online = set(self.manager.online_dirs)
        return [(info.path, info.path in online) for info in self.manager.dir_infos({})]

    def apply_topic_config(self, topic: str, overrides: dict[str, str]) -> None:
        self.manager.set_config(topic, topic_log_config(self.node, overrides))

    def apply_broker_defaults(self) -> bool:
        """A dynamic broker default changed (Kafka's DynamicLogConfig.reconfigure): every topic's logs get their
        config again from the new defaults and their own overrides, so a key a topic overrides keeps its value.
        False when the defaults in force did not change."""
        if not refresh_log_defaults(self.node, self.manager):
            return False
        self.manager.set_configs({topic.name: topic_log_config(self.node, dict(topic.configs))
                                  for topic in self.node.metadata.topics()})
        return True

    def apply_cleaner_config(self) -> bool:
        """A dynamic log.cleaner.* key changed (Kafka's LogCleaner.reconfigure): the dirs' cleaners take the new
        values at their next clean. False when the values in force did not change."""
        return self.manager.set_cleaner_config(cleaner_config(self.node.config, self.node.dynamic_configs.merged()))

    def is_partition_online(self, topic: str, partition: int) -> bool:
        plog = self.manager.find(topic, partition)
        return plog is not None and plog.online

    def _specs(self, name: str, topic_id: uuid.UUID, partitions: list[int], configs: dict[str, str],
               named: dict[int, uuid.UUID] | None) -> list[PartitionSpec]:
        """`named`: the dir the metadata already gives some of them (a reassignment into a named dir), used when
        it is an online dir here; else a dir AlterReplicaLogDirs asked for before the partition arrived."""
        cfg = topic_log_config(self.node, configs)
        tid = uuid_to_str(topic_id.bytes)
        online = set(self.manager.online_dirs)
        by_id = {uuid.UUID(bytes=_dir_uuid_bytes(d)): path for d, path in self.manager.directory_ids().items()}
        specs = []
        for p in partitions:
            named_dir = (named or {}).get(p)
            preferred = self.preferred_dirs.get((name, p)) or (by_id.get(named_dir) if named_dir else None)
            if preferred is not None and preferred not in online:
                log.warning("preferred_log_dir_offline", partition=f"{name}-{p}", log_dir=preferred,
                            effect="placed by the placement policy instead")
                preferred = None
            specs.append(PartitionSpec(name, p, tid, cfg, preferred))
        return specs

    def _dir_id(self, plog: Any) -> uuid.UUID:
        ids = {path: dir_id for dir_id, path in self.manager.directory_ids(online_only=False).items()}
        return uuid.UUID(bytes=_dir_uuid_bytes(ids.get(plog.log_dir)))

    def create_topic_partitions(self, name: str, topic_id: uuid.UUID, partitions: list[int],
                                configs: dict[str, str], named: dict[int, uuid.UUID] | None = None) -> list:
        """Creates the partition logs here and now; returns the directory id each one got."""
        logs = self.manager.create_partitions(self._specs(name, topic_id, partitions, configs, named))
        for p in partitions:
            self.preferred_dirs.pop((name, p), None)
        return [self._dir_id(plog) for plog in logs]

    async def create_partitions_on_workers(self, name: str, topic_id: uuid.UUID, partitions: list[int],
                                           configs: dict[str, str], named: dict[int, uuid.UUID] | None = None
                                           ) -> dict[int, uuid.UUID | BaseException]:
        """Creates the partition logs, each one's file work on its dir's worker (placement, bounded, on the
        loop); returns each partition's directory id, or why it could not be made. A dir that hangs holds only
        its own partitions (failed with the dir by the stall detection); the others are served once made."""
        mgr = self.manager
        specs = self._specs(name, topic_id, partitions, configs, named)
        out: dict[int, uuid.UUID | BaseException] = {}
        try:
            dirs = mgr.place(specs)
        except StorageError as e:
            return {p: e for p in partitions}
        todo: list[tuple[PartitionSpec, str, list[str]]] = [
            (spec, path, []) for spec, path in zip(specs, dirs, strict=True)]
        while todo:
            made: list[tuple[PartitionSpec, str, list[str], Any]] = []

            def answered(item: tuple[PartitionSpec, str, list[str]], result: Any,
                         made: list[tuple[PartitionSpec, str, list[str], Any]] = made) -> None:
                made.append((*item, result if result is not None else TimeoutError("no answer")))

            work = DirWork(self.node, answered, answered)
            for spec, path, tried in todo:
                work.add(path, (spec, path, tried))
            waiting = work.run(lambda items: [_create_placed(mgr, spec, path) for spec, path, _ in items], None)
            if waiting is not None:
                await waiting
            todo = []
            for spec, path, tried, result in made:
                if isinstance(result, LogDirFullError):
                    try:
                        todo.append((spec, mgr.place_again(spec, path, tried, result), tried))
                    except StorageError as e:
                        out[spec.partition] = e
                elif isinstance(result, BaseException):
                    out[spec.partition] = result
                else:
                    mgr.register_created(result)
                    self.preferred_dirs.pop((name, spec.partition), None)
                    out[spec.partition] = self._dir_id(result)
        return out

    def delete_topic_partitions(self, name: str, partitions: list[int]) -> None:
        """Takes every partition out of service at once and renames its dir to -delete on that dir's worker.
        The topic is already gone from the metadata, so one partition whose log dir is offline must not stop
        the others: it is left where it is (its dir cannot be touched) and reported; the next start finds it as
        a partition the metadata does not know."""
        mover = getattr(self.node, "mover", None)
        mgr = self.manager
        for p in partitions:
            self.preferred_dirs.pop((name, p), None)
            if mover is not None:
                mover.cancel(name, p)  # its thread deletes a future dir the manager does not know yet
            plog = mgr.find(name, p) or mgr.get_future(name, p)
            worker = mgr.worker(plog.log_dir) if plog is not None and plog.io.online else None
            if worker is None:
                self._delete_partition(name, p)  # no workers, an offline dir (nothing to touch), or nothing here
                continue
            current = mgr.find(name, p)
            if current is not None and not current.lock.acquire(blocking=False):
                # The dir's worker holds the log in a file operation (a slow or hung disk): the event loop
                # does not wait for it; the delete runs on that worker, after what it is doing.
                worker.post(functools.partial(self._delete_partition, name, p), f"delete {name}-{p}")
                continue
            if current is not None:
                current.lock.release()
            detached = mgr.detach_partition(name, p)
            if detached is None:  # the manager is busy in another dir's file work: this dir's worker waits
                worker.post(functools.partial(self._delete_partition, name, p), f"delete {name}-{p}")
                continue
            self._retire_on_workers(name, detached)

    def _retire_on_workers(self, name: str, logs: list[Any]) -> None:
        """Each log's rename to -delete on its own dir's worker; the renames are kept in `deleting` until they
        are done, so a DeleteTopics answered by this node can wait for them (bounded: `deletes_settled`)."""
        futures = _on_their_workers(self.manager, logs, self.manager.retire_detached, "delete")
        if not futures:
            return
        pending = self.deleting.setdefault(name, [])
        pending.extend(futures)

        def settled(fut: asyncio.Future[None]) -> None:
            pending.remove(fut)
            if not pending and self.deleting.get(name) is pending:
                del self.deleting[name]

        for fut in futures:
            fut.add_done_callback(settled)

    async def deletes_settled(self, topics: Any, timeout_s: float) -> None:
        """Waits (up to `timeout_s`) until the renames of `topics`' deleted partitions are done (or failed)."""
        pending = [f for name in topics for f in self.deleting.get(name, ())]
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)

    def _delete_partition(self, name: str, p: int) -> None:
        try:
            if self.manager.find(name, p) is not None:
                self.manager.delete_partition(name, p)
            elif self.manager.get_future(name, p) is not None:
                self.manager.delete_future_log(name, p)
        except KafkaStorageError as e:
            log.warning("deleted_partition_left_in_offline_dir", partition=f"{name}-{p}", error=str(e),
                        effect="its directory stays until the dir is back; remove it then")

    def close(self, broker_epoch: int = -1) -> None:
        """Stops the logs; `broker_epoch` goes into each dir's clean-shutdown marker (the next run's
        PreviousBrokerEpoch, KIP-966)."""
        self.manager.stop_background()
        self.manager.close(broker_epoch=broker_epoch)


def _create_placed(mgr: LogManager, spec: PartitionSpec, path: str) -> Any:
    """On the dir's worker: the new log, or the exception that stopped it (one partition's failure is its own)."""
    try:
        return mgr.create_placed(spec, path)
    except Exception as e:
        return e


def _dir_uuid_bytes(text: str | None) -> bytes:
    if not text:
        return bytes(16)
    from kjbod.storage.ids import uuid_from_str

    return uuid_from_str(text)


async def open_storage(node: Any) -> None:
    manager = open_logs(node)
    node.open_metadata(MetadataLog(metadata_dir(node.config), node_id=node.node_id,
                                   **metadata_log_options(node.config)))
    apply_image_at_start(node, manager)


def metadata_dir(config: Any) -> str:
    return os.path.abspath(config.metadata_log_dir or config.log_dirs[0])


def open_logs(node: Any) -> LogManager:
    """The log manager opened (dirs verified, locked, recovered) and `node.cluster_id` / `node.logs` set; the
    image is not applied to the logs yet (`apply_image_at_start`)."""
    config = node.config
    log_dirs = [os.path.abspath(d) for d in config.log_dirs]
    meta_dir = metadata_dir(config)
    node.log_defaults = broker_log_config(config)
    manager = LogManager(
        log_dirs, metadata_log_dir=meta_dir, node_id=node.node_id, defaults=node.log_defaults,
        placement_policy=getattr(config, "log_dir_placement_policy", "most-usable"),
        on_all_dirs_offline=node.all_dirs_offline, on_dir_offline=node.dir_offline,
        retention_check_interval_ms=config.log_retention_check_interval_ms,
        checkpoint_interval_ms=config.log_flush_offset_checkpoint_interval_ms,
        hw_checkpoint_interval_ms=config.replica_high_watermark_checkpoint_interval_ms,
        start_checkpoint_interval_ms=config.log_flush_start_offset_checkpoint_interval_ms,
        producer_id_expiration_ms=config.producer_id_expiration_ms,
        producer_id_expiration_check_interval_ms=config.producer_id_expiration_check_interval_ms,
        initial_task_delay_ms=config.log_initial_task_delay_ms,
        stall_timeout_ms=config.log_dir_stall_timeout_ms,
        slow_threshold_ms=config.log_dir_slow_threshold_ms,
        reserved_bytes=config.log_dir_reserved_bytes,
        space_check_interval_ms=config.log_dir_space_check_interval_ms,
        cleaner=cleaner_config(config),
    )
    manager.open()
    manager.set_cordoned(getattr(config, "cordoned_log_dirs", ()) or ())
    meta = read_meta_properties(LogDirIO(meta_dir))
    node.cluster_id = meta.cluster_id if meta is not None else ""
    node.logs = StorageAdapter(node, manager)
    return manager


def apply_image_at_start(node: Any, manager: LogManager) -> None:
    """Makes the logs match `node.metadata` (see the module docstring), then starts the background upkeep."""
    refresh_log_defaults(node, manager)  # the dynamic broker defaults the metadata log holds
    manager.set_cordoned(node.cordoned_log_dirs())  # server.properties', or the metadata log's dynamic value
    manager.set_cleaner_config(cleaner_config(node.config, node.dynamic_configs.merged()))
    settle_future_logs(node, manager)
    reconcile(node, manager)
    manager.start_background()


def settle_future_logs(node: Any, manager: LogManager) -> None:
    """KIP-113 recovery of the future logs the loader found, before anything is created (see the docstring)."""
    offline = manager.offline_dirs
    for future in manager.future_logs():
        topic = node.metadata.topic(future.topic)
        if topic is None or future.partition not in topic.partitions:
            log.warning("future_log_of_unknown_partition_deleted", partition=future.name, future_dir=future.dir)
            manager.delete_future_log(future.topic, future.partition)
            continue
        future.config = topic_log_config(node, topic.configs)
        if manager.find(future.topic, future.partition) is not None:
            continue  # the replica mover resumes it once the node runs
        if offline:
            log.warning("future_log_left_offline", partition=future.name, future_dir=future.dir,
                        offline_dirs=offline, effect="the partition stays offline: its current log may be there")
        else:
            manager.promote_future_log(future.topic, future.partition)


def reconcile(node: Any, manager: LogManager, *, on_workers: bool = False) -> None:
    """``on_workers``: a running node's (a broker far behind, given a snapshot): missing replicas are made and
    strays renamed by their dirs' workers, the event loop does none of the file work. At startup, before
    anything is served, it is done here."""
    known: dict[tuple[str, int], str] = {}  # the partitions assigned to this node -> their topic's id
    missing = []
    offline = manager.offline_dirs
    held_back = []
    for topic in node.metadata.topics():
        cfg = topic_log_config(node, topic.configs)
        tid = uuid_to_str(topic.topic_id.bytes)
        for p, state in topic.partitions.items():
            if not state.replicas or node.node_id in state.replicas:
                known[(topic.name, p)] = tid
            plog = manager.find(topic.name, p)
            if plog is not None:
                plog.config = cfg
            elif state.replicas and node.node_id not in state.replicas:
                continue  # another broker's replica
            elif offline or manager.get_future(topic.name, p) is not None:
                held_back.append(f"{topic.name}-{p}")
            else:
                missing.append(PartitionSpec(topic.name, p, tid, cfg))
    if held_back:
        log.warning("partitions_offline", partitions=held_back, offline_dirs=offline,
                    effect="not recreated: their logs may be in an offline dir")
    if missing:
        log.warning("recreating_missing_partitions", partitions=[f"{s.topic}-{s.partition}" for s in missing])
        if on_workers:
            by_topic: dict[str, list[int]] = {}
            for spec in missing:
                by_topic.setdefault(spec.topic, []).append(spec.partition)
            for name, parts in by_topic.items():
                node._start_creating(node.metadata.topic(name), parts)
        else:
            manager.create_partitions(missing)
    strays = [plog for plog in manager.partitions() if known.get((plog.topic, plog.partition)) is None
              or plog.topic_id != known[(plog.topic, plog.partition)]]
    if strays:
        renamed = []
        for plog in strays:
            if on_workers:
                _mark_stray_on_worker(manager, plog)
            else:
                renamed += manager.mark_stray(plog.topic, plog.partition)
        log.warning("partitions_not_in_metadata", partitions=[plog.name for plog in strays],
                    renamed_to=renamed or "-stray, by each dir's worker",
                    hint="kept as -stray dirs for inspection; delete them when not needed")


def _mark_stray_on_worker(manager: LogManager, plog: Any) -> None:
    """A stray replica out of service now (its name free), its dirs renamed ``-stray`` by their dirs' workers."""
    worker = manager.worker(plog.log_dir)
    detached = manager.detach_partition(plog.topic, plog.partition) if worker is not None else None
    if detached is None:  # no workers, or the manager's lock is busy: all of it on the dir's worker, or here
        if worker is None:
            manager.mark_stray(plog.topic, plog.partition)
        else:
            worker.post(functools.partial(manager.mark_stray, plog.topic, plog.partition), f"stray {plog.name}")
        return
    _on_their_workers(manager, detached, manager.retire_stray, "stray")


def _on_their_workers(manager: LogManager, logs: list[Any], fn: Any, what: str) -> list[asyncio.Future[None]]:
    """``fn(log)`` for each log taken out of service, on its own dir's worker (a future log's dir is not always
    the current one's), or here for a dir without one. On the event loop, each job handed to a worker has a
    future, returned, done once the job has run or failed (a failure is logged, never raised: the log is out of
    service either way); off it (startup) the jobs are posted and nothing is returned."""
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    futures: list[asyncio.Future[None]] = []
    for plog in logs:
        worker = manager.worker(plog.log_dir)
        if worker is None:
            fn(plog)
        elif loop is None:
            worker.post(functools.partial(fn, plog), f"{what} {plog.name}")
        else:
            fut: asyncio.Future[None] = loop.create_future()
            worker.submit(functools.partial(fn, plog), functools.partial(_job_settled, fut, plog, what), loop)
            futures.append(fut)
    return futures


def _job_settled(fut: asyncio.Future[None], plog: Any, what: str, ok: bool, value: Any) -> None:
    if not ok:
        log.warning("dir_worker_job_failed", log_dir=plog.log_dir, what=f"{what} {plog.name}", error=str(value))
    if not fut.done():
        fut.set_result(None)
