"""Opening and closing the node's storage: meta.properties, the metadata log, and the partition logs.

Startup order: the log manager verifies every dir's meta.properties (KIP-858 directory ids), locks and recovers
every partition; then the metadata log is replayed into the image; then the two are reconciled: a partition the
image knows but no dir holds (a crash between the metadata record and the directory) is created now, and a
partition directory the image does not know is left alone and reported (Kafka would call it stray).
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import structlog

from kjbod.broker import topic_config
from kjbod.storage.config import LogConfig
from kjbod.storage.fsio import LogDirIO
from kjbod.storage.ids import uuid_to_str
from kjbod.storage.manager import LogManager, PartitionSpec
from kjbod.storage.meta import read_meta_properties
from kjbod.storage.metadata_log import MetadataLog

log = structlog.get_logger("kjbod.storage_glue")


def broker_log_config(config: Any) -> LogConfig:
    """Topic defaults from the broker config (log.segment.bytes, log.retention.ms, ...)."""
    values = {}
    for d in topic_config.DEFS.values():
        if d.name == "cleanup.policy":
            continue
        values[d.name] = topic_config.broker_default(d, config)
    return LogConfig().with_topic_configs(values)


def topic_log_config(node: Any, overrides: dict[str, str]) -> LogConfig:
    return node.log_defaults.with_topic_configs(topic_config.validate(overrides))


class StorageAdapter:
    """What the node needs from storage, in the node's terms (topic ids as UUIDs, dir ids as text)."""

    def __init__(self, node: Any, manager: LogManager):
        self.node = node
        self.manager = manager

    def get_log(self, topic: str, partition: int):
        return self.manager.get(topic, partition)

    def is_partition_online(self, topic: str, partition: int) -> bool:
        plog = self.manager.find(topic, partition)
        return plog is not None and plog.online

    def create_topic_partitions(self, name: str, topic_id: uuid.UUID, count: int, configs: dict[str, str]) -> list:
        cfg = topic_log_config(self.node, configs)
        tid = uuid_to_str(topic_id.bytes)
        logs = self.manager.create_partitions([PartitionSpec(name, p, tid, cfg) for p in range(count)])
        ids = self.manager.directory_ids(online_only=False)
        return [uuid.UUID(bytes=_dir_uuid_bytes(ids.get(plog.log_dir))) for plog in logs]

    def delete_topic_partitions(self, name: str, partitions: list[int]) -> None:
        for p in partitions:
            if self.manager.find(name, p) is not None:
                self.manager.delete_partition(name, p)

    def close(self) -> None:
        self.manager.stop_background()
        self.manager.close()


def _dir_uuid_bytes(text: str | None) -> bytes:
    if not text:
        return bytes(16)
    from kjbod.storage.ids import uuid_from_str

    return uuid_from_str(text)


async def open_storage(node: Any) -> None:
    config = node.config
    log_dirs = [os.path.abspath(d) for d in config.log_dirs]
    meta_dir = os.path.abspath(config.metadata_log_dir) if config.metadata_log_dir else log_dirs[0]
    node.log_defaults = broker_log_config(config)
    manager = LogManager(
        log_dirs, metadata_log_dir=meta_dir, node_id=node.node_id, defaults=node.log_defaults,
        placement_policy=getattr(config, "log_dir_placement_policy", "most-usable"),
        on_all_dirs_offline=node.all_dirs_offline, on_dir_offline=node.dir_offline,
    )
    manager.open()
    meta = read_meta_properties(LogDirIO(meta_dir))
    node.cluster_id = meta.cluster_id if meta is not None else ""
    node.logs = StorageAdapter(node, manager)
    node.metadata_log = MetadataLog(meta_dir)
    node._replay(node.metadata_log.load())
    reconcile(node, manager)
    manager.start_background()


def reconcile(node: Any, manager: LogManager) -> None:
    known = set()
    missing = []
    for topic in node.metadata.topics():
        cfg = topic_log_config(node, topic.configs)
        tid = uuid_to_str(topic.topic_id.bytes)
        for p in topic.partitions:
            known.add((topic.name, p))
            plog = manager.find(topic.name, p)
            if plog is None:
                missing.append(PartitionSpec(topic.name, p, tid, cfg))
            else:
                plog.config = cfg
    if missing:
        log.warning("recreating_missing_partitions", partitions=[f"{s.topic}-{s.partition}" for s in missing])
        manager.create_partitions(missing)
    strays = [plog.name for plog in manager.partitions() if (plog.topic, plog.partition) not in known]
    if strays:
        log.warning("partitions_not_in_metadata", partitions=strays,
                    hint="left in place; delete the directories if the topic is gone")
