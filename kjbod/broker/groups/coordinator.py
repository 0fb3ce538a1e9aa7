"""The group coordinator's asyncio shell: which groups this broker hosts, timers, and `__consumer_offsets`.

Strategy: a group belongs to one partition of `__consumer_offsets` (Kafka's choice: the group id's Java
String.hashCode, made non-negative, modulo offsets.topic.num.partitions), and the broker leading that partition
is its coordinator.  This shell owns the sans-IO `GroupBook` (kjbod.broker.groups.state) and

* creates the topic on the first FindCoordinator for a group, as Kafka does (offsets.topic.num.partitions,
  offsets.topic.replication.factor, compacted as Kafka's: OFFSETS_TOPIC_CONFIGS); with fewer live brokers than
  the replication factor
  the controller refuses and clients hear COORDINATOR_NOT_AVAILABLE until enough have registered;
* every 50 ms runs the book's timers and compares the partitions it leads with the metadata image: a partition
  newly led here is loaded (its log read from the start on its dir's worker; COORDINATOR_LOAD_IN_PROGRESS
  meanwhile), a partition led elsewhere now has its groups dropped (NOT_COORDINATOR from then on);
* writes offset commits and group metadata as records of that partition through the Produce path with acks=all
  (the dir's worker appends, the followers replicate), answering a commit once its records are committed.

The coordinator is made on the first group request a broker gets, so a broker never asked about groups runs
none of this.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from kjbod.broker import broker_config as bc
from kjbod.broker.coordinator_host import CoordinatorHost
from kjbod.broker.coordinator_host import InternalRequest as _InternalRequest
from kjbod.broker.coordinator_host import java_string_hash as java_string_hash
from kjbod.broker.coordinator_host import now_ms as now_ms
from kjbod.broker.coordinator_host import partition_for as partition_for
from kjbod.broker.coordinator_host import read_chunk as read_chunk
from kjbod.broker.coordinator_host import resolver as resolver
from kjbod.broker.coordinator_host import settle as settle
from kjbod.broker.groups import records as rec
from kjbod.broker.groups.consumer import (
    ASSIGNOR_CLASSES,
    ConsumerGroupConfig,
    MemberHeartbeat,
    MemberHeartbeatResult,
    TopicMeta,
)
from kjbod.broker.groups.state import (
    CommittedOffset,
    Group,
    GroupBook,
    GroupConfig,
    GroupState,
    JoinResult,
    Member,
)
from kjbod.broker.share import groups_records as share_rec
from kjbod.broker.share.groups import (
    HeartbeatResult,
    ShareGroup,
    ShareGroupConfig,
    ShareGroups,
    ShareHeartbeat,
)
from kjbod.broker.share.persister import persister_of
from kjbod.broker.streams import records as streams_rec
from kjbod.broker.streams.groups import (
    StreamsGroup,
    StreamsGroupConfig,
    StreamsGroups,
    StreamsHeartbeat,
    StreamsHeartbeatResult,
)
from kjbod.protocol.errors import ErrorCode
from kjbod.storage.records import build_batch

log = structlog.get_logger("kjbod.groups")

OFFSETS_TOPIC = "__consumer_offsets"
# The topic's configs as Kafka sets them: compacted (each group's latest offsets and metadata kept, the rest
# cleaned away) in segments of offsets.topic.segment.bytes, and compression.type=producer, so a broker-wide
# compression.type never recompresses the coordinator's writes (which offsets.topic.compression.codec compresses).
OFFSETS_TOPIC_CONFIGS = (("cleanup.policy", "compact"), ("compression.type", "producer"))


@dataclass(frozen=True)
class OffsetsTopicSettings:
    """The broker keys of __consumer_offsets itself (Kafka's names and defaults)."""

    segment_bytes: int = 104_857_600  # offsets.topic.segment.bytes
    commit_timeout_ms: int = 5000  # offsets.commit.timeout.ms: how long a write waits for the partition's replicas
    load_buffer_size: int = 5 * 1024 * 1024  # offsets.load.buffer.size: bytes read at a time while loading
    compression_codec: int = 0  # offsets.topic.compression.codec

    @classmethod
    def of(cls, config: Any) -> OffsetsTopicSettings:
        return cls(config.offsets_topic_segment_bytes, config.offsets_commit_timeout_ms,
                   config.offsets_load_buffer_size, config.offsets_topic_compression_codec)


class _GroupRequest(_InternalRequest):
    client_id = "kjbod-group-coordinator"


class _TransactionalRequest(_GroupRequest):
    """A TxnOffsetCommit's append: a transactional batch without a sequence, as Kafka's coordinator writes."""

    coordinator_origin = True


def _marker_kind(key: bytes | None, value: bytes | None) -> int:
    """1 for a commit marker, 0 for an abort marker, -1 for another control record."""
    if key is None or len(key) < 4 or key[0:2] != b"\x00\x00":
        return -1
    kind = int.from_bytes(key[2:4], "big", signed=True)
    return kind if kind in (0, 1) else -1


def config_from(node: Any) -> tuple[GroupConfig, int, int]:
    c = node.config
    cfg = GroupConfig(
        initial_rebalance_delay_ms=c.group_initial_rebalance_delay_ms,
        min_session_timeout_ms=c.group_min_session_timeout_ms,
        max_session_timeout_ms=c.group_max_session_timeout_ms,
        max_size=c.group_max_size,
        offset_metadata_max_bytes=c.offset_metadata_max_bytes,
        offsets_retention_ms=c.offsets_retention_ms,
    )
    return cfg, c.offsets_topic_num_partitions, c.offsets_topic_replication_factor


def consumer_config_from(config: Any) -> ConsumerGroupConfig:
    """The group.consumer.* keys (an assignor may be named by Kafka's class name too)."""
    return ConsumerGroupConfig(
        session_timeout_ms=config.group_consumer_session_timeout_ms,
        heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
        assignors=tuple(ASSIGNOR_CLASSES.get(a, a) for a in config.group_consumer_assignors),
        max_size=config.group_consumer_max_size,
        migration_policy=config.group_consumer_migration_policy,
        classic_max_size=config.group_max_size)


def streams_config_from(config: Any) -> StreamsGroupConfig:
    """The group.streams.* keys of the group coordinator."""
    return StreamsGroupConfig(
        session_timeout_ms=config.group_streams_session_timeout_ms,
        heartbeat_interval_ms=config.group_streams_heartbeat_interval_ms,
        max_size=config.group_streams_max_size,
        num_standby_replicas=config.group_streams_num_standby_replicas,
        initial_rebalance_delay_ms=config.group_streams_initial_rebalance_delay_ms)


def share_config_from(config: Any) -> ShareGroupConfig:
    """The group.share.* keys of the group coordinator."""
    return ShareGroupConfig(
        session_timeout_ms=config.group_share_session_timeout_ms,
        heartbeat_interval_ms=config.group_share_heartbeat_interval_ms,
        max_size=config.group_share_max_size,
        initialize_retry_interval_ms=config.group_share_initialize_retry_interval_ms)


def coordinator_of(node: Any) -> GroupCoordinator:
    """The node's group coordinator, made and started on first use."""
    coordinator = getattr(node, "group_coordinator", None)
    if coordinator is None:
        cfg, partitions, rf = config_from(node)
        coordinator = node.group_coordinator = GroupCoordinator(
            node, cfg, partitions, rf, node.config.offsets_retention_check_interval_ms)
        coordinator.start()
    return coordinator


class GroupCoordinator(CoordinatorHost):
    topic = OFFSETS_TOPIC
    kind = "group"

    def __init__(self, node: Any, config: GroupConfig, num_partitions: int, replication_factor: int,
                 expiry_interval_ms: int = 600_000) -> None:
        super().__init__(node, num_partitions, replication_factor)
        self.expiry_interval_ms = expiry_interval_ms  # offsets.retention.check.interval.ms
        self.config = config
        self.book = GroupBook(config, persist=self._store_group, consumer_config=consumer_config_from(node.config),
                              group_configs=self.group_configs)
        # consumer group id -> the records last written for it (key -> value): what the next write is a diff of
        self._consumer_records: dict[str, dict[bytes, bytes]] = {}
        self._unwritten: set[str] = set()  # consumer groups whose last write failed: the next heartbeat writes
        # KIP-932 share groups (kjbod.broker.share.groups), in the same id space as the others
        self.share_groups: dict[str, ShareGroup] = {}
        self.share = ShareGroups(share_config_from(node.config), self.share_groups, other_kind=self.other_kind,
                                 group_configs=self.group_configs)
        self._share_records: dict[str, dict[bytes, bytes]] = {}  # share group id -> the records last written
        self._next_topic_check = 0  # when share groups are next checked for deleted topics (once a second)
        # KIP-1071 streams groups (kjbod.broker.streams.groups), in the same id space too; their StreamsGroup* records
        # (kjbod.broker.streams.records) are written after each change and replayed on load
        self.streams_groups: dict[str, StreamsGroup] = {}
        self.streams = StreamsGroups(streams_config_from(node.config), self.streams_groups,
                                     other_kind=self.other_kind_than_streams,
                                     group_config=lambda gid: self.node.metadata.resource_configs(bc.GROUP, gid))
        self._streams_records: dict[str, dict[bytes, bytes]] = {}  # streams group id -> the records last written
        # streams groups being deleted: a heartbeat to one waits until the deletion is written, so a member never
        # joins a group whose deletion was decided (Kafka runs both in one serial order per partition)
        self._streams_deleting: dict[str, asyncio.Future[None]] = {}
        # streams groups whose last write failed: written again on a later tick (a group whose members all timed out
        # gets no heartbeat that would write it), at most once a second
        self._streams_unwritten: set[str] = set()
        self._streams_retrying: set[str] = set()
        self._next_streams_retry = 0
        self.book.consumer.taken_by_share = lambda gid: gid in self.share_groups or gid in self.streams_groups
        self.book.streams_kept_topics = self.streams.offsets_kept
        self.settings = OffsetsTopicSettings.of(node.config)
        self.load_chunk = self.settings.load_buffer_size
        self._next_expiry = now_ms() + expiry_interval_ms

    # ------------------------------------------------------------------------------------------- hosting
    def _topic_configs(self) -> list[tuple[str, str]]:
        return [*OFFSETS_TOPIC_CONFIGS, ("segment.bytes", str(self.settings.segment_bytes))]

    def _unload(self, p: int) -> int:
        gone = [g for g in set(self.book.groups) | set(self.book.consumer_groups) | set(self.share_groups)
                | set(self.streams_groups) if self.partition_of(g) == p]
        self.book.unload(gone)
        for g in gone:
            self.streams_groups.pop(g, None)
            self._streams_records.pop(g, None)
            self._streams_unwritten.discard(g)
            self.share_groups.pop(g, None)
            self._share_records.pop(g, None)
            self._consumer_records.pop(g, None)
            self._unwritten.discard(g)
        return len(gone)

    async def _tick(self, now: int) -> None:
        self.book.tick(now)
        for gid in self.book.consumer.tick(now):
            self._spawn(self.persist_consumer(gid))
        for gid in self.share.tick(now, self.topic_meta):
            self._spawn(self.persist_share(gid))
        for gid in self.streams.tick(now):
            self._spawn(self.persist_streams(gid))
        if self._streams_unwritten and now >= self._next_streams_retry:
            self._next_streams_retry = now + 1000
            for gid in self._streams_unwritten - self._streams_retrying:
                self._spawn(self._retry_streams_write(gid))
        if self.share_groups and now >= self._next_topic_check:
            self._next_topic_check = now + 1000
            exists = lambda tid: self.node.metadata.topic_by_id(tid) is not None  # noqa: E731
            for gid in self.share.forget_deleted_topics(exists):
                self._spawn(self.persist_share(gid))
        if now >= self._next_expiry:
            self._next_expiry = now + self.expiry_interval_ms
            await self._expire(now)

    async def _expire(self, now: int) -> None:
        """Writes tombstones for the offsets past offsets.retention.ms; an empty group left without offsets goes
        too (its metadata tombstoned; a KIP-848 group's records all), as Kafka's cleanup does."""
        for gid, partitions in self.book.expired_offsets(now).items():
            if self.partition_of(gid) not in self.owned:
                continue
            group = self.book.groups.get(gid)
            pairs: list[tuple[bytes, bytes | None]] = [(rec.offset_key(gid, t, p), None) for t, p in partitions]
            cg = self.book.consumer_groups.get(gid)
            stg = self.streams_groups.get(gid)
            drop_group = group is not None and group.is_(GroupState.EMPTY) and \
                len(group.offsets) == len(partitions) and not group.pending and \
                not (cg is not None and cg.members) and not (stg is not None and stg.members)
            if drop_group:
                pairs.append((rec.group_key(gid), None))
                pairs += [(k, None) for k in self._consumer_records.get(gid, {})]
            if await self.append(gid, pairs):
                continue  # tried again at the next check
            group = self.book.groups.get(gid)
            if group is None:
                continue
            for tp in partitions:
                group.offsets.pop(tp, None)
            if drop_group and group.is_(GroupState.EMPTY) and not group.offsets:
                del self.book.groups[gid]
                self._forget_consumer_group(gid)
            log.info("offsets_expired", group=gid, partitions=len(partitions), group_removed=drop_group)
        for gid, cg in list(self.book.consumer_groups.items()):
            # a KIP-848 group left empty and without offsets is removed, as Kafka's cleanup does
            holder = self.book.groups.get(gid)
            if cg.members or (holder is not None and holder.offsets) or self.partition_of(gid) not in self.owned:
                continue
            if not await self.drop_consumer_group(gid):
                log.info("consumer_group_removed", group=gid)
        # so is an empty streams group without offsets (none pending in a transaction either)
        def has_offsets(g: str) -> bool:
            return bool((g in self.book.groups and self.book.groups[g].offsets) or self.book.pending_txn_partitions(g))

        for gid in self.streams.removable(has_offsets):
            # checked again: an earlier write of this loop let heartbeats and commits in
            if self.partition_of(gid) not in self.owned or gid in self._streams_deleting or has_offsets(gid):
                continue
            if not await self.delete_streams_group(gid, with_offsets=False):
                log.info("streams_group_removed", group=gid)

    # ------------------------------------------------------------------------------------------- loading
    # A load keeps (key, value, producer id, marker) per record: a transactional batch's records wait for their
    # producer's marker (a control batch).
    def _new_load(self) -> list[tuple[bytes | None, bytes | None, int, int]]:
        return []

    def _take(self, acc: Any, p: int, header: Any, record: Any) -> None:
        pid = header.producer_id if header.is_transactional else -1
        if header.is_control:
            acc.append((None, None, pid, _marker_kind(record.key, record.value)))
        else:
            acc.append((record.key, record.value, pid, -1))

    def _loaded_records(self, p: int, acc: Any) -> int:
        self._replay(acc)
        return len(acc)

    def _replay(self, records: list[tuple[bytes | None, bytes | None, int, int]]) -> None:
        """Rebuilds the groups of a partition from its records in log order.  A transactional offset commit
        counts once its producer's commit marker follows, is dropped by an abort marker, and stays pending when
        no marker has come yet."""
        offsets: dict[str, dict[tuple[str, int], CommittedOffset | None]] = {}
        groups: dict[str, rec.GroupRecord | None] = {}
        consumer: dict[str, dict[rec.ConsumerKey, tuple[bytes, bytes | None]]] = {}
        share: dict[str, dict[rec.ConsumerKey, tuple[bytes, bytes | None]]] = {}
        streams: dict[str, dict[tuple[int, str | None], tuple[bytes, bytes | None]]] = {}
        pending: dict[int, list[tuple[bytes, bytes | None]]] = {}
        pairs: list[tuple[bytes | None, bytes | None]] = []
        for key, value, pid, marker in records:
            if marker >= 0:
                held = pending.pop(pid, [])
                if marker == 1:
                    pairs += held
            elif pid >= 0 and key is not None:
                pending.setdefault(pid, []).append((key, value))
            else:
                pairs.append((key, value))
        for pid, held in pending.items():
            for key, value in held:
                with contextlib.suppress(rec.RecordFormatError, UnicodeDecodeError):
                    k = rec.read_key(bytes(key))
                    if isinstance(k, rec.OffsetKey) and value is not None:
                        self.book.add_txn_offsets(pid, k.group, {
                            (k.topic, k.partition): rec.read_offset_value(bytes(value))})
        for key, value in pairs:
            if key is None:
                continue
            try:
                if len(key) >= 2 and int.from_bytes(bytes(key[:2]), "big", signed=True) in streams_rec.STREAMS_KINDS:
                    kind, gid, member = streams_rec.read_streams_key(bytes(key))
                    streams.setdefault(gid, {})[(kind, member)] = (bytes(key), None if value is None else bytes(value))
                    continue
                k = rec.read_key(bytes(key))
                if isinstance(k, rec.OffsetKey):
                    offsets.setdefault(k.group, {})[(k.topic, k.partition)] = (
                        None if value is None else rec.read_offset_value(bytes(value)))
                elif isinstance(k, rec.ConsumerKey):
                    into = share if k.kind in share_rec.SHARE_KINDS else consumer
                    into.setdefault(k.group, {})[k] = (bytes(key), None if value is None else bytes(value))
                else:
                    groups[k.group] = None if value is None else rec.read_group_value(bytes(value))
            except (rec.RecordFormatError, UnicodeDecodeError) as e:
                log.warning("offsets_record_skipped", reason=str(e))
        now = now_ms()
        for gid, values in consumer.items():
            try:
                cg = rec.consumer_group_of(gid, {k: v for k, (_, v) in values.items() if v is not None})
            except (rec.RecordFormatError, UnicodeDecodeError, ValueError) as e:
                log.warning("consumer_group_record_skipped", group=gid, reason=str(e))
                continue
            if cg is None:
                continue
            self.book.consumer_groups[gid] = cg
            self._consumer_records[gid] = {raw: v for raw, v in values.values() if v is not None}
        self.book.consumer.touch_all(now)
        for gid, values in share.items():
            try:
                sg = share_rec.share_group_of(gid, {k: v for k, (_, v) in values.items() if v is not None}, now)
            except (rec.RecordFormatError, UnicodeDecodeError, ValueError) as e:
                log.warning("share_group_record_skipped", group=gid, reason=str(e))
                continue
            if sg is None:
                continue
            self.share_groups[gid] = sg
            self._share_records[gid] = {raw: v for raw, v in values.values() if v is not None}
        self.share.touch_all(now)
        for gid, svalues in streams.items():
            try:
                stg = streams_rec.streams_group_of(gid, {k: v for k, (_, v) in svalues.items() if v is not None})
            except (rec.RecordFormatError, UnicodeDecodeError, ValueError) as e:
                log.warning("streams_group_record_skipped", group=gid, reason=str(e))
                continue
            if stg is None:
                continue
            self.streams_groups[gid] = stg
            self._streams_records[gid] = {raw: v for raw, v in svalues.values() if v is not None}
        self.streams.touch_all(now, list(streams))
        for gid in set(offsets) | set(groups):
            kept = {tp: c for tp, c in offsets.get(gid, {}).items() if c is not None}
            meta = groups.get(gid)
            if meta is None and not kept:
                continue
            group = Group(gid, state_since_ms=now, offsets=kept)
            if meta is not None:
                if meta.current_state_timestamp >= 0:
                    group.state_since_ms = meta.current_state_timestamp
                group.generation_id = meta.generation
                group.protocol_type = meta.protocol_type or None
                group.protocol_name = meta.protocol
                group.leader_id = meta.leader
                for m in meta.members:
                    group.members[m.member_id] = Member(
                        m.member_id, m.group_instance_id, m.client_id, m.client_host, m.session_timeout_ms,
                        m.rebalance_timeout_ms if m.rebalance_timeout_ms >= 0 else m.session_timeout_ms,
                        meta.protocol_type, [(meta.protocol or "", m.subscription)],
                        now + m.session_timeout_ms, assignment=m.assignment)
                    if m.group_instance_id is not None:
                        group.static[m.group_instance_id] = m.member_id
                group.state = GroupState.STABLE if group.members else GroupState.EMPTY
            self.book.groups[gid] = group

    # ------------------------------------------------------------------------------------------- writing
    async def append(self, group_id: str, pairs: list[tuple[bytes, bytes | None]],
                     too_large: int = ErrorCode.UNKNOWN_SERVER_ERROR, producer_id: int = -1,
                     producer_epoch: int = -1) -> int:
        """Appends records to the group's partition, acks=all; the partition's error code (0: committed).  With
        a producer id the batch is transactional (TxnOffsetCommit), its epoch checked against the partition's."""
        p = self.partition_of(group_id)
        now = now_ms()
        batch = build_batch([(k, v, [], now) for k, v in pairs], producer_id=producer_id,
                            producer_epoch=producer_epoch, is_transactional=producer_id >= 0,
                            compression=self.settings.compression_codec)
        request: Any = _TransactionalRequest() if producer_id >= 0 else _GroupRequest()
        code = await self._produce(p, batch, request, self.settings.commit_timeout_ms, group_id)
        if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
            return too_large  # OffsetCommit: INVALID_COMMIT_OFFSET_SIZE; group metadata: UNKNOWN_SERVER_ERROR
        return code

    def _store_group(self, group: Group, done: Callable[[int, int], None]) -> None:
        """A generation's assignment (or the group's emptiness) is written; `done(now, code)` once committed, as
        Kafka answers the SyncGroups only then."""
        record: list[tuple[bytes, bytes | None]] = [(rec.group_key(group.group_id), rec.group_value(snapshot(group)))]

        async def write() -> None:
            try:
                code = await self.append(group.group_id, record)
            except Exception:
                log.exception("group_metadata_write_failed", group=group.group_id)
                code = ErrorCode.UNKNOWN_SERVER_ERROR
            done(now_ms(), code)

        self._spawn(write())

    # ------------------------------------------------------------------------------------------- consumer groups
    def group_configs(self, group_id: str) -> dict[str, Any]:
        """The group's own configs (KIP-848, ConfigRecords of resource type 32 in the metadata image)."""
        overrides = self.node.metadata.resource_configs(bc.GROUP, group_id)
        return {k: v for k, v in bc.group_values(self.node.config, overrides).items() if k in overrides}

    def topic_meta(self, name: str) -> TopicMeta | None:
        topic = self.node.metadata.topic(name)
        if topic is None:
            return None
        return TopicMeta(topic.topic_id, name, len(topic.partitions))

    def topic_names(self) -> list[str]:
        return list(self.node.metadata.by_name)

    async def consumer_heartbeat(self, request: MemberHeartbeat) -> MemberHeartbeatResult:
        """A ConsumerGroupHeartbeat: the group moves on, its changed records are written (acks=all), and the
        answer goes out once they are committed (else the write's error code)."""
        result = self.book.consumer.heartbeat(now_ms(), request, self.topic_meta, self.topic_names)
        gid = request.group_id
        if gid not in self.book.converted and (result.error_code or gid not in self.book.consumer_groups or
                                               (not result.changed and gid not in self._unwritten)):
            return result  # a steady heartbeat changes nothing the records hold: nothing to write
        code = await self.persist_consumer(request.group_id)
        if code:
            return MemberHeartbeatResult(error_code=code)
        return result

    async def persist_consumer(self, group_id: str) -> int:
        """Writes what changed in a consumer group since its last write; the partition's error code.  A group
        just converted between the protocols is written as Kafka writes the conversion, in one batch: an upgrade
        tombstones the classic group's metadata and writes every record of the consumer group; a downgrade
        tombstones every consumer group record and writes the classic group's metadata."""
        conversion = self.book.converted.pop(group_id, None)
        cg = self.book.consumer_groups.get(group_id)
        if conversion == "downgrade" or (cg is None and group_id in self._consumer_records):
            group = self.book.groups.get(group_id)
            pairs: list[tuple[bytes, bytes | None]] = rec.records_between(self._consumer_records.pop(group_id, {}), {})
            self._unwritten.discard(group_id)
            if group is not None and group.members:
                pairs.append((rec.group_key(group_id), rec.group_value(snapshot(group))))
            log.info("consumer_group_downgraded", group=group_id)
            return await self.append(group_id, pairs) if pairs else ErrorCode.NONE
        if cg is None:
            return ErrorCode.NONE
        after = rec.consumer_group_records(cg)
        pairs = rec.records_between(self._consumer_records.get(group_id, {}), after)
        if conversion == "upgrade":
            pairs.insert(0, (rec.group_key(group_id), None))
            log.info("classic_group_upgraded", group=group_id, members=len(cg.members))
        if not pairs:
            return ErrorCode.NONE
        try:
            code = await self.append(group_id, pairs)
        except Exception:
            log.exception("consumer_group_write_failed", group=group_id)
            self._unwritten.add(group_id)
            return ErrorCode.UNKNOWN_SERVER_ERROR
        if code == 0 and self.book.consumer_groups.get(group_id) is cg:
            self._consumer_records[group_id] = after
            self._unwritten.discard(group_id)
        elif code:
            self._unwritten.add(group_id)
        return code

    # ------------------------------------------------------------------------------------------- share groups
    def other_kind(self, group_id: str) -> str | None:
        """The kind of a group of this id that is not a share group, or None."""
        if group_id in self.streams_groups:
            return "streams"
        if group_id in self.book.consumer_groups:
            return "consumer"
        return "classic" if group_id in self.book.groups else None

    def other_kind_than_streams(self, group_id: str) -> str | None:
        """The kind of a group of this id that is not a streams group, or None."""
        if group_id in self.share_groups:
            return "share"
        if group_id in self.book.consumer_groups:
            return "consumer"
        classic = self.book.groups.get(group_id)
        # an empty classic group (offsets committed from outside a group) may become a streams group, as in Kafka
        return "classic" if classic is not None and classic.members else None

    # ------------------------------------------------------------------------------------------- streams groups
    def partition_count(self, name: str) -> int | None:
        topic = self.node.metadata.topic(name)
        return None if topic is None else len(topic.partitions)

    async def streams_heartbeat(self, request: StreamsHeartbeat) -> StreamsHeartbeatResult:
        """A StreamsGroupHeartbeat: the group moves on, its changed records are written (acks=all) and the answer
        goes out once they are committed; the handler creates missing internal topics."""
        while (deleting := self._streams_deleting.get(request.group_id)) is not None:
            await asyncio.shield(deleting)
        result = self.streams.heartbeat(now_ms(), request, self.partition_count)
        if result.error_code:
            return result
        code = await self.persist_streams(request.group_id)
        if code:
            return StreamsHeartbeatResult(error_code=code)
        return result

    async def persist_streams(self, group_id: str) -> int:
        """Writes what changed in a streams group since its last write; the partition's error code."""
        return await self._write_changes(group_id, self.streams_groups, self._streams_records,
                                         streams_rec.streams_group_records, streams_rec.records_between, "streams",
                                         self._streams_unwritten)

    async def _retry_streams_write(self, group_id: str) -> None:
        self._streams_retrying.add(group_id)
        try:
            if not await self.persist_streams(group_id):
                log.info("streams_group_written_after_failure", group=group_id)
        finally:
            self._streams_retrying.discard(group_id)

    async def _write_changes(self, group_id: str, groups: dict[str, Any], written: dict[str, Any],
                             records_of: Callable[[Any], Any], between: Callable[[Any, Any], list[Any]],
                             kind: str, unwritten: set[str] | None = None) -> int:
        """Writes the records of group `group_id` of `groups` that changed since `written` (its records as last
        written; every record tombstoned once the group is gone); the partition's error code.  `unwritten`: the
        ids of groups whose last write failed, kept up to date."""
        group = groups.get(group_id)
        after = records_of(group) if group is not None else {}
        pairs = between(written.get(group_id, {}), after)
        if not pairs:
            if unwritten is not None:
                unwritten.discard(group_id)
            return ErrorCode.NONE
        try:
            code = await self.append(group_id, pairs)
        except Exception:
            log.exception("group_write_failed", kind=kind, group=group_id)
            code = ErrorCode.UNKNOWN_SERVER_ERROR
        if code == 0 and groups.get(group_id) is group:
            if group is None:
                written.pop(group_id, None)
            else:
                written[group_id] = after
            if unwritten is not None:
                unwritten.discard(group_id)
        elif code and unwritten is not None:
            unwritten.add(group_id)
        return code

    async def delete_streams_group(self, group_id: str, with_offsets: bool = True) -> int:
        """Deletes an empty streams group (NON_EMPTY_GROUP when it has members): the offsets committed under its id
        (unless `with_offsets` is false), then the group itself.  Checked and marked in one step, heartbeats to it
        waiting meanwhile (so does a second delete); when a write fails the group stays."""
        while (deleting := self._streams_deleting.get(group_id)) is not None:
            await asyncio.shield(deleting)
        stg = self.streams_groups.get(group_id)
        if stg is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if stg.members:
            return ErrorCode.NON_EMPTY_GROUP
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._streams_deleting[group_id] = done
        try:
            code = await self.delete_group(group_id) if with_offsets else ErrorCode.NONE
            if code == 0:
                self.streams_groups.pop(group_id, None)
                code = await self.persist_streams(group_id)
                if code:
                    self.streams_groups[group_id] = stg
        finally:
            del self._streams_deleting[group_id]
            done.set_result(None)
        return code

    async def share_heartbeat(self, request: ShareHeartbeat) -> HeartbeatResult:
        """A ShareGroupHeartbeat: the group moves on, its changed records are written (acks=all), and the answer
        goes out once they are committed.  Partitions newly subscribed are then initialized through the persister
        in the background, as Kafka does after answering."""
        result = self.share.heartbeat(now_ms(), request, self.topic_meta)
        gid = request.group_id
        if result.error_code or not (result.changed or gid in self._unwritten):
            return result
        code = await self.persist_share(gid)
        if code:
            return HeartbeatResult(error_code=code)
        if result.to_initialize:
            self._spawn(self.initialize_share_state(gid, result.to_initialize))
        return result

    async def initialize_share_state(self, group_id: str, partitions: Any) -> None:
        """Asks the persister to initialize the share state of these partitions; those it answers without an error
        become assignable (a record), the others are asked for again by a later heartbeat."""
        try:
            answers = await persister_of(self.node).initialize(group_id, list(partitions))
        except Exception:
            log.exception("share_state_initialize_failed", group=group_id)
            answers = {}
        done: dict[Any, list[int]] = {}
        failed: dict[Any, list[int]] = {}
        for p in partitions:
            answer = answers.get((p.topic_id, p.partition))
            ok = answer is not None and answer.error_code == 0
            (done if ok else failed).setdefault(p.topic_id, []).append(p.partition)
            if not ok:
                log.warning("share_state_not_initialized", group=group_id, topic_id=str(p.topic_id),
                            partition=p.partition, error=None if answer is None else answer.error_code)
        if self.share.initialized(group_id, done, failed):
            await self.persist_share(group_id)

    async def persist_share(self, group_id: str) -> int:
        """Writes what changed in a share group since its last write; the partition's error code."""
        return await self._write_changes(group_id, self.share_groups, self._share_records,
                                         share_rec.share_group_records, share_rec.records_between, "share",
                                         self._unwritten)

    async def delete_share_group(self, group_id: str) -> int:
        """Deletes an empty share group: the share state of its partitions through the persister (those partitions
        recorded as deleting meanwhile), then every record of the group.  0, or the first error code."""
        sg = self.share_groups.get(group_id)
        if sg is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        keys = sorted({(tid, p) for tid, (_, ps) in sg.initialized.items() for p in ps}
                      | {(tid, p) for tid, (_, ps, _) in sg.initializing.items() for p in ps}, key=str)
        if keys:
            sg.deleting.update({tid: name for tid, (name, _) in sg.initialized.items()})
            sg.deleting.update({tid: name for tid, (name, _, _) in sg.initializing.items()})
            sg.initialized, sg.initializing = {}, {}
            code = await self.persist_share(group_id)
            if code:
                return code
            try:
                answers = await persister_of(self.node).delete(group_id, keys)
            except Exception:
                log.exception("share_state_delete_failed", group=group_id)
                return ErrorCode.UNKNOWN_SERVER_ERROR
            failed = [a.error_code for a in answers.values() if a.error_code]
            if failed:
                return failed[0]
        if self.share_groups.get(group_id) is sg:
            del self.share_groups[group_id]
        return await self.persist_share(group_id)

    async def classic_join(self, group_id: str, member_id: str, instance_id: str | None, client_id: str,
                           client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                           protocols: list[tuple[str, bytes]], require_known_member_id: bool) -> JoinResult:
        """A classic JoinGroup to a consumer group with members (KIP-848's mixed groups): the group moves on, its
        records are written, then the member is answered (its generation is its member epoch)."""
        r = self.book.consumer.classic_join(now_ms(), group_id, member_id, instance_id, client_id, client_host,
                                            session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols,
                                            require_known_member_id, self.topic_meta, self.topic_names)
        if r.error_code:
            return JoinResult(r.error_code, r.member_id)
        if r.changed or group_id in self._unwritten or group_id in self.book.converted:
            code = await self.persist_consumer(group_id)
            if code:
                return JoinResult(code, r.member_id)
        return JoinResult(ErrorCode.NONE, r.member_id, r.generation_id, "consumer", r.protocol_name, "")

    async def classic_leave(self, group_id: str, leaving: list[tuple[str, str | None]]) -> list[int]:
        codes = self.book.consumer.classic_leave(now_ms(), group_id, leaving, self.topic_meta)
        if any(c == 0 for c in codes):
            code = await self.persist_consumer(group_id)
            if code:
                return [code if c == 0 else c for c in codes]
        return codes

    async def drop_consumer_group(self, group_id: str) -> int:
        """Tombstones every record of an (empty) consumer group and forgets it; its offsets stay.  Forgotten before
        the write is queued, so a member joining meanwhile makes a new group whose records follow the tombstones."""
        pairs: list[tuple[bytes, bytes | None]] = [(k, None) for k in self._consumer_records.get(group_id, {})]
        self._forget_consumer_group(group_id)
        return await self.append(group_id, pairs) if pairs else ErrorCode.NONE

    def _forget_consumer_group(self, group_id: str) -> None:
        self.book.consumer_groups.pop(group_id, None)
        self._consumer_records.pop(group_id, None)
        self._unwritten.discard(group_id)

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> int:
        """Tombstones for some of a group's offsets; the partition's error code (0: deleted)."""
        code = await self.append(group_id, [(rec.offset_key(group_id, t, p), None) for t, p in partitions])
        group = self.book.groups.get(group_id)
        if code == 0 and group is not None:
            for tp in partitions:
                group.offsets.pop(tp, None)
        return code

    async def delete_group(self, group_id: str) -> int:
        group = self.book.groups.get(group_id)
        pairs: list[tuple[bytes, bytes | None]] = [(rec.group_key(group_id), None)]
        if group is not None:
            pairs += [(rec.offset_key(group_id, t, p), None) for t, p in group.offsets]
        pairs += [(k, None) for k in self._consumer_records.get(group_id, {})]
        code = await self.append(group_id, pairs)
        if code == 0:
            self.book.groups.pop(group_id, None)
            self._forget_consumer_group(group_id)
        return code


def snapshot(group: Group) -> rec.GroupRecord:
    protocol = group.protocol_name
    return rec.GroupRecord(
        group.protocol_type or "", group.generation_id, protocol, group.leader_id, group.state_since_ms,
        tuple(rec.MemberRecord(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                               m.rebalance_timeout_ms, m.session_timeout_ms,
                               m.metadata_for(protocol) if protocol else b"", m.assignment)
              for m in group.members.values()))

