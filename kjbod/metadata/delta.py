"""Replay: metadata records in, a new image out.

Strategy (Kafka's `MetadataDelta`): a delta starts from an image, takes records one at a time through a table
keyed by record type (`REPLAY`, one method per type), and `apply()` builds the next image, copying only the
topics, configs and registrations the records touched.  Replay never fails on a record that names something
the image does not have (a partition of an unknown topic, a change for a broker epoch that is gone): such a
record is dropped and counted, as the log is the truth and the image follows it.

The delta also remembers what it changed, down to the partition (`changed_partitions()`), so a broker can ask
what it must do locally (`local_changes(node_id)`: create, delete, lead, follow or re-home replicas) and every
consumer of a delta walks the partitions the records wrote, never every partition of a topic they touched: a
batch of k records costs O(k) however large the topic (a topic's partition dict is copied once per delta, in C).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar
from uuid import UUID

from kjbod.metadata.acls import AclEntry
from kjbod.metadata.features import LEGACY_LEVELS
from kjbod.metadata.image import (
    DIR_MIGRATING,
    TOPIC_RESOURCE,
    BrokerRegistration,
    ControllerRegistration,
    Endpoint,
    MetadataImage,
    PartitionImage,
    RateIntent,
    ScramEntry,
    TokenEntry,
    TopicImage,
)
from kjbod.protocol.generated import (
    AbortTransactionRecord,
    AccessControlEntryRecord,
    BeginTransactionRecord,
    BrokerRegistrationChangeRecord,
    ClearElrRecord,
    ClientQuotaRecord,
    ConfigRecord,
    DelegationTokenRecord,
    EndTransactionRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    ReassignmentIntentRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    RemoveAccessControlEntryRecord,
    RemoveDelegationTokenRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    ThrottledRateIntentRecord,
    ThrottledReplicasIntentRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
    ZkMigrationStateRecord,
)

NO_CHANGE_LEADER = -2


def replay_partition(old: PartitionImage, rec: PartitionChangeRecord) -> PartitionImage:
    """`old` after `rec` (Kafka's PartitionRegistration.merge): the partition epoch always goes up by one, the
    leader epoch when the record sets a leader."""
    replicas = old.replicas if rec.replicas is None else tuple(rec.replicas)
    if rec.directories is not None:
        directories = tuple(rec.directories)
    elif rec.replicas is not None:
        directories = (DIR_MIGRATING,) * len(replicas)  # Kafka: a replica change without dirs
    else:
        directories = old.directories
    leader, leader_epoch = old.leader, old.leader_epoch
    if rec.leader != NO_CHANGE_LEADER:
        leader, leader_epoch = rec.leader, old.leader_epoch + 1
    return PartitionImage(
        partition=old.partition, replicas=replicas, isr=old.isr if rec.isr is None else tuple(rec.isr),
        leader=leader, leader_epoch=leader_epoch, partition_epoch=old.partition_epoch + 1, directories=directories,
        leader_recovery_state=old.leader_recovery_state if rec.leader_recovery_state == -1
        else rec.leader_recovery_state,
        adding=old.adding if rec.adding_replicas is None else tuple(rec.adding_replicas),
        removing=old.removing if rec.removing_replicas is None else tuple(rec.removing_replicas),
        intent=old.intent, intent_dirs=old.intent_dirs,
        elr=old.elr if rec.eligible_leader_replicas is None else tuple(rec.eligible_leader_replicas),
        last_known_elr=old.last_known_elr if rec.last_known_elr is None else tuple(rec.last_known_elr))


@dataclass(slots=True)
class _TopicWork:
    """A topic being changed by the delta: its partitions copied on first write, and the ids written since."""

    name: str
    topic_id: UUID
    partitions: dict[int, PartitionImage]
    new: bool
    changed: set[int] = field(default_factory=set)


class MetadataDelta:
    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.offset = image.offset
        self._topics: dict[UUID, _TopicWork] = {}
        self.removed_topics: dict[UUID, TopicImage] = {}  # topics of the base image that are gone
        self._configs: dict[tuple[int, str], dict[str, str] | None] = {}  # None: resource removed
        self._brokers: dict[int, BrokerRegistration | None] = {}
        self._next_producer_id: int | None = None
        self._features: dict[str, int] | None = None
        self._features_epoch: int | None = None
        # KIP-179 throttle intents changed by this delta (None: ended)
        self._throttled_replicas: dict[tuple[UUID, int], tuple[tuple[int, ...], tuple[int, ...]] | None] = {}
        self._throttled_rates: dict[int, RateIntent | None] = {}
        self._scram: dict[tuple[str, int], ScramEntry | None] = {}  # None: deleted
        self._acls: dict[UUID, AclEntry | None] = {}  # None: removed
        self._tokens: dict[str, TokenEntry | None] = {}  # None: removed
        self._client_quotas: dict[tuple[tuple[str, str | None], ...], dict[str, float] | None] = {}  # None: gone
        self._controllers: dict[int, ControllerRegistration] = {}
        self.dropped = 0  # records naming something the image does not have

    # ------------------------------------------------------------------------------------------ reading
    def topic(self, topic_id: UUID) -> TopicImage | _TopicWork | None:
        work = self._topics.get(topic_id)
        if work is not None:
            return work
        if topic_id in self.removed_topics:
            return None
        return self.image.topics_by_id.get(topic_id)

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        if broker_id in self._brokers:
            return self._brokers[broker_id]
        return self.image.brokers.get(broker_id)

    def _writable_topic(self, topic_id: UUID) -> _TopicWork | None:
        work = self._topics.get(topic_id)
        if work is None:
            base = None if topic_id in self.removed_topics else self.image.topics_by_id.get(topic_id)
            if base is None:
                return None
            work = self._topics[topic_id] = _TopicWork(base.name, topic_id, dict(base.partitions), new=False)
        return work

    def _writable_configs(self, key: tuple[int, str]) -> dict[str, str]:
        if key in self._configs:
            current = self._configs[key]
            if current is None:  # removed earlier in this delta: starts empty again
                current = self._configs[key] = {}
            return current
        current = self._configs[key] = dict(self.image.configs.get(key, {}))
        return current

    def changed_topic_ids(self) -> list[UUID]:
        """Topics of the new image that records of this delta created or changed (configs included)."""
        names = self.changed_topic_configs()
        ids = set(self._topics)
        ids.update(t.topic_id for n in names if (t := self.image.topics_by_name.get(n)) is not None)
        return sorted(ids - set(self.removed_topics) | set(self._topics))

    def changed_topic_configs(self) -> set[str]:
        """Names of the topics whose configs records of this delta changed, topics it removed included (their
        configs go with them): what a consumer of topic configs (the replication throttles) must look at again."""
        return {name for (rtype, name) in self._configs if rtype == TOPIC_RESOURCE}

    def changed_partitions(self) -> dict[UUID, set[int]]:
        """Topic id -> the partitions records of this delta wrote (all of a topic it created), for every topic of
        the new image whose partitions changed; topics whose configs alone changed are not in it."""
        return {tid: work.changed for tid, work in self._topics.items()}

    # ------------------------------------------------------------------------------------------ replay
    def replay(self, record: Any, offset: int | None = None) -> None:
        fn = REPLAY.get(type(record))
        if fn is None:
            raise ValueError(f"no replay for metadata record {type(record).__name__}")
        self.offset = self.offset + 1 if offset is None else offset
        fn(self, record)

    def replay_all(self, records: Iterable[Any], first_offset: int | None = None) -> None:
        offset = first_offset
        for rec in records:
            self.replay(rec, offset)
            if offset is not None:
                offset += 1

    def _topic_record(self, rec: TopicRecord) -> None:
        self._topics[rec.topic_id] = _TopicWork(rec.name, rec.topic_id, {}, new=True)

    def _partition_record(self, rec: PartitionRecord) -> None:
        work = self._writable_topic(rec.topic_id)
        if work is None:
            self.dropped += 1
            return
        work.changed.add(rec.partition_id)
        work.partitions[rec.partition_id] = PartitionImage(
            partition=rec.partition_id, replicas=tuple(rec.replicas), isr=tuple(rec.isr), leader=rec.leader,
            leader_epoch=max(rec.leader_epoch, 0), partition_epoch=max(rec.partition_epoch, 0),
            directories=tuple(rec.directories), leader_recovery_state=rec.leader_recovery_state,
            adding=tuple(rec.adding_replicas), removing=tuple(rec.removing_replicas),
            elr=tuple(rec.eligible_leader_replicas or ()), last_known_elr=tuple(rec.last_known_elr or ()))

    def _partition_change_record(self, rec: PartitionChangeRecord) -> None:
        work = self._writable_topic(rec.topic_id)
        old = work.partitions.get(rec.partition_id) if work is not None else None
        if work is None or old is None:
            self.dropped += 1
            return
        work.changed.add(rec.partition_id)
        work.partitions[rec.partition_id] = replay_partition(old, rec)

    def _clear_elr_record(self, rec: ClearElrRecord) -> None:
        """KIP-966: the partitions of one topic (of every topic when the name is empty) lose their ELR and last
        known ELR; each one that had any gets a new partition epoch, as a change record would give it."""
        if rec.topic_name:
            ids = [w.topic_id for w in self._topics.values() if w.name == rec.topic_name]
            base = self.image.topics_by_name.get(rec.topic_name)
            if not ids and base is not None and base.topic_id not in self.removed_topics:
                ids = [base.topic_id]
            if not ids:
                self.dropped += 1
                return
        else:
            ids = [t for t in self.image.topics_by_id if t not in self.removed_topics and t not in self._topics]
            ids += list(self._topics)
        for topic_id in ids:
            topic = self.topic(topic_id)
            if topic is None or not any(p.elr or p.last_known_elr for p in topic.partitions.values()):
                continue
            work = self._writable_topic(topic_id)
            assert work is not None
            for pid, p in list(work.partitions.items()):
                if p.elr or p.last_known_elr:
                    work.changed.add(pid)
                    work.partitions[pid] = replace(p, elr=(), last_known_elr=(),
                                                   partition_epoch=p.partition_epoch + 1)

    def _reassignment_intent_record(self, rec: ReassignmentIntentRecord) -> None:
        work = self._writable_topic(rec.topic_id)
        old = work.partitions.get(rec.partition_id) if work is not None else None
        if work is None or old is None:
            self.dropped += 1
            return
        target = None if rec.target_replicas is None else tuple(rec.target_replicas)
        dirs = dict(zip(rec.target_directory_brokers, rec.target_directories, strict=False)) if target else {}
        work.changed.add(rec.partition_id)
        work.partitions[rec.partition_id] = replace(old, intent=target, intent_dirs=dirs)

    def _throttled_replicas_intent_record(self, rec: ThrottledReplicasIntentRecord) -> None:
        owned = (tuple(rec.leaders), tuple(rec.followers))
        self._throttled_replicas[(rec.topic_id, rec.partition_id)] = owned if owned != ((), ()) else None

    def _throttled_rate_intent_record(self, rec: ThrottledRateIntentRecord) -> None:
        intent = RateIntent(rec.leader_rate, rec.leader_restore, rec.follower_rate, rec.follower_restore)
        ended = rec.leader_rate is None and rec.follower_rate is None
        self._throttled_rates[rec.broker_id] = None if ended else intent

    def _remove_topic_record(self, rec: RemoveTopicRecord) -> None:
        work = self._topics.pop(rec.topic_id, None)
        base = self.image.topics_by_id.get(rec.topic_id)
        name = work.name if work is not None else base.name if base is not None else None
        if name is None:
            self.dropped += 1
            return
        if base is not None:
            self.removed_topics[rec.topic_id] = base
        self._configs[(TOPIC_RESOURCE, name)] = None

    def _config_record(self, rec: ConfigRecord) -> None:
        target = self._writable_configs((rec.resource_type, rec.resource_name))
        if rec.value is None:
            target.pop(rec.name, None)
        else:
            target[rec.name] = rec.value

    def _register_broker_record(self, rec: RegisterBrokerRecord) -> None:
        before = self.broker(rec.broker_id)
        self._brokers[rec.broker_id] = BrokerRegistration(
            broker_id=rec.broker_id, epoch=rec.broker_epoch, incarnation_id=rec.incarnation_id,
            listeners=tuple(Endpoint(e.name, e.host, e.port, e.security_protocol) for e in rec.end_points),
            rack=rec.rack, fenced=rec.fenced, in_controlled_shutdown=rec.in_controlled_shutdown,
            log_dirs=tuple(rec.log_dirs),
            features={f.name: (f.min_supported_version, f.max_supported_version) for f in rec.features},
            offline_dirs=_left(before, rec.log_dirs), record_offset=self.offset,
            # v4 (4.3-IV0); null in a new registration, and in every record of a log written before it
            cordoned_dirs=None if rec.cordoned_log_dirs is None else tuple(rec.cordoned_log_dirs))

    def _register_controller_record(self, rec: RegisterControllerRecord) -> None:
        self._controllers[rec.controller_id] = ControllerRegistration(
            controller_id=rec.controller_id, incarnation_id=rec.incarnation_id,
            zk_migration_ready=rec.zk_migration_ready,
            listeners=tuple(Endpoint(e.name, e.host, e.port, e.security_protocol) for e in rec.end_points),
            features={f.name: (f.min_supported_version, f.max_supported_version) for f in rec.features})

    def changed_controllers(self) -> Mapping[int, ControllerRegistration]:
        """The controller registrations this delta wrote (Kafka's ClusterDelta.changedControllers)."""
        return self._controllers

    def _no_op_record(self, rec: Any) -> None:
        """NoOpRecord (and a ZooKeeper migration's ZkMigrationStateRecord, which a KRaft-only image has no use
        for): nothing changes but the offset, which `replay` has moved.  The metadata transaction markers come
        here too when records are replayed one by one; `MetadataLoader` is what gives them their meaning."""

    def _unregister_broker_record(self, rec: UnregisterBrokerRecord) -> None:
        current = self.broker(rec.broker_id)
        if current is None or current.epoch != rec.broker_epoch:
            self.dropped += 1
            return
        self._brokers[rec.broker_id] = None

    def _change_broker(self, broker_id: int, epoch: int, **changes: Any) -> None:
        current = self.broker(broker_id)
        if current is None or current.epoch != epoch:
            self.dropped += 1
            return
        self._brokers[broker_id] = replace(current, **changes)

    def _broker_registration_change_record(self, rec: BrokerRegistrationChangeRecord) -> None:
        changes: dict[str, Any] = {}
        if rec.fenced == 1:
            changes["fenced"] = True
        elif rec.fenced == -1:
            changes["fenced"] = False
        if rec.in_controlled_shutdown == 1:
            changes["in_controlled_shutdown"] = True
        if rec.log_dirs:  # an empty list means "no change" (Kafka's replay)
            changes["log_dirs"] = tuple(rec.log_dirs)
            changes["offline_dirs"] = _left(self.broker(rec.broker_id), rec.log_dirs)
        if rec.cordoned_log_dirs is not None:  # v3 (4.3-IV0); null means "no change", an empty list "none"
            changes["cordoned_dirs"] = tuple(rec.cordoned_log_dirs)
        self._change_broker(rec.broker_id, rec.broker_epoch, **changes)

    def _fence_broker_record(self, rec: FenceBrokerRecord) -> None:
        self._change_broker(rec.id, rec.epoch, fenced=True)

    def _unfence_broker_record(self, rec: UnfenceBrokerRecord) -> None:
        self._change_broker(rec.id, rec.epoch, fenced=False)

    def _producer_ids_record(self, rec: ProducerIdsRecord) -> None:
        self._next_producer_id = rec.next_producer_id

    def _user_scram_credential_record(self, rec: UserScramCredentialRecord) -> None:
        self._scram[(rec.name, rec.mechanism)] = ScramEntry(bytes(rec.salt), bytes(rec.stored_key),
                                                            bytes(rec.server_key), rec.iterations)

    def _remove_user_scram_credential_record(self, rec: RemoveUserScramCredentialRecord) -> None:
        self._scram[(rec.name, rec.mechanism)] = None

    def _access_control_entry_record(self, rec: AccessControlEntryRecord) -> None:
        self._acls[rec.id] = AclEntry(rec.resource_type, rec.resource_name, rec.pattern_type, rec.principal,
                                      rec.host, rec.operation, rec.permission_type)

    def _remove_access_control_entry_record(self, rec: RemoveAccessControlEntryRecord) -> None:
        if rec.id in self._acls or rec.id in self.image.acls:
            self._acls[rec.id] = None
        else:
            self.dropped += 1

    def _delegation_token_record(self, rec: DelegationTokenRecord) -> None:
        self._tokens[rec.token_id] = TokenEntry(rec.token_id, rec.owner, rec.requester, tuple(rec.renewers),
                                                rec.issue_timestamp, rec.max_timestamp, rec.expiration_timestamp)

    def _remove_delegation_token_record(self, rec: RemoveDelegationTokenRecord) -> None:
        if rec.token_id in self._tokens or rec.token_id in self.image.tokens:
            self._tokens[rec.token_id] = None
        # else: already gone (an expiry sweep and an expire request crossing), nothing to drop
    def _client_quota_record(self, rec: ClientQuotaRecord) -> None:
        entity = tuple(sorted((e.entity_type, e.entity_name) for e in rec.entity))
        if entity in self._client_quotas:
            values = dict(self._client_quotas[entity] or {})
        else:
            values = dict(self.image.client_quotas.get(entity, {}))
        if rec.remove:
            values.pop(rec.key, None)
        else:
            values[rec.key] = rec.value
        self._client_quotas[entity] = values or None

    def _feature_level_record(self, rec: FeatureLevelRecord) -> None:
        self._features_epoch = self.offset
        if self._features is None:
            self._features = dict(self.image.features)
        # A feature an old log without a metadata.version reads above 0 (features.LEGACY_LEVELS) keeps its 0,
        # which would otherwise read as that level again; any other feature at 0 is simply not finalized.
        if rec.feature_level == 0 and not LEGACY_LEVELS.get(rec.name):
            self._features.pop(rec.name, None)
        else:
            self._features[rec.name] = rec.feature_level

    # ------------------------------------------------------------------------------------------ the new image
    def apply(self) -> MetadataImage:
        image = self.image
        configs: Mapping[tuple[int, str], Mapping[str, str]] = image.configs
        if self._configs:
            merged = dict(image.configs)
            for key, value in self._configs.items():
                if value:
                    merged[key] = value
                else:
                    merged.pop(key, None)
            configs = merged
        by_name, by_id = image.topics_by_name, image.topics_by_id
        touched_configs = {name for (rtype, name) in self._configs if rtype == TOPIC_RESOURCE}
        if self._topics or self.removed_topics or touched_configs:
            by_name, by_id = dict(by_name), dict(by_id)
            for tid, gone in self.removed_topics.items():
                by_id.pop(tid, None)
                if by_name.get(gone.name) is gone:
                    by_name.pop(gone.name)
            for tid, work in self._topics.items():
                topic = TopicImage(work.name, tid, work.partitions, configs.get((TOPIC_RESOURCE, work.name), {}))
                by_id[tid] = by_name[work.name] = topic
            for name in touched_configs:
                t = by_name.get(name)
                if t is not None and t.topic_id not in self._topics:
                    by_id[t.topic_id] = by_name[name] = replace(t, configs=configs.get((TOPIC_RESOURCE, name), {}))
        brokers: Mapping[int, BrokerRegistration] = image.brokers
        if self._brokers:
            changed = dict(image.brokers)
            for bid, reg in self._brokers.items():
                if reg is None:
                    changed.pop(bid, None)
                else:
                    changed[bid] = reg
            brokers = changed
        return MetadataImage(
            topics_by_name=by_name, topics_by_id=by_id, configs=configs, brokers=brokers,
            next_producer_id=image.next_producer_id if self._next_producer_id is None else self._next_producer_id,
            features=image.features if self._features is None else self._features, offset=self.offset,
            features_epoch=image.features_epoch if self._features_epoch is None else self._features_epoch,
            throttled_replicas=_merged(image.throttled_replicas, self._throttled_replicas),
            throttled_rates=_merged(image.throttled_rates, self._throttled_rates),
            scram=_merged(image.scram, self._scram), acls=_merged(image.acls, self._acls),
            tokens=_merged(image.tokens, self._tokens),
            client_quotas=_merged(image.client_quotas, self._client_quotas),
            controllers=_merged(image.controllers, self._controllers))

    # ------------------------------------------------------------------------------------------ local changes
    def local_changes(self, node_id: int, new_image: MetadataImage) -> LocalChanges:
        """What broker `node_id` must do to match `new_image` (the result of `apply()`), as Kafka's
        `TopicDelta.localChanges`: delete replicas it no longer has, create the ones it gains, and lead or
        follow each partition whose partition epoch changed."""
        out = LocalChanges()
        for gone in self.removed_topics.values():
            for p in gone.partitions.values():
                if node_id in p.replicas:
                    out.deletes.append((gone, p))
        for tid, work in self._topics.items():
            topic = new_image.topics_by_id[tid]
            base = None if tid in self.removed_topics else self.image.topics_by_id.get(tid)
            for pid in sorted(work.changed):
                p = topic.partitions[pid]
                old = base.partitions.get(pid) if base is not None else None
                if old is p:
                    continue
                mine = node_id in p.replicas
                was_mine = old is not None and node_id in old.replicas
                if not mine:
                    if was_mine and base is not None and old is not None:
                        out.deletes.append((base, old))
                    continue
                if not was_mine:
                    out.creates.append((topic, p))
                if old is None or old.partition_epoch != p.partition_epoch or not was_mine:
                    (out.leaders if p.leader == node_id else out.followers).append((topic, p))
                if was_mine and old is not None and old.directory_of(node_id) != p.directory_of(node_id):
                    out.rehomed.append((topic, p))
        return out


@dataclass(slots=True)
class LocalChanges:
    """Replica changes for one broker; each entry is (topic, partition) from the image that holds them."""

    creates: list[tuple[TopicImage, PartitionImage]] = field(default_factory=list)
    deletes: list[tuple[TopicImage, PartitionImage]] = field(default_factory=list)
    leaders: list[tuple[TopicImage, PartitionImage]] = field(default_factory=list)
    followers: list[tuple[TopicImage, PartitionImage]] = field(default_factory=list)
    rehomed: list[tuple[TopicImage, PartitionImage]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.creates or self.deletes or self.leaders or self.followers or self.rehomed)


REPLAY: dict[type, Callable[[MetadataDelta, Any], None]] = {
    TopicRecord: MetadataDelta._topic_record,
    PartitionRecord: MetadataDelta._partition_record,
    PartitionChangeRecord: MetadataDelta._partition_change_record,
    RemoveTopicRecord: MetadataDelta._remove_topic_record,
    ReassignmentIntentRecord: MetadataDelta._reassignment_intent_record,
    ConfigRecord: MetadataDelta._config_record,
    RegisterBrokerRecord: MetadataDelta._register_broker_record,
    UnregisterBrokerRecord: MetadataDelta._unregister_broker_record,
    BrokerRegistrationChangeRecord: MetadataDelta._broker_registration_change_record,
    FenceBrokerRecord: MetadataDelta._fence_broker_record,
    UnfenceBrokerRecord: MetadataDelta._unfence_broker_record,
    ProducerIdsRecord: MetadataDelta._producer_ids_record,
    FeatureLevelRecord: MetadataDelta._feature_level_record,
    ThrottledReplicasIntentRecord: MetadataDelta._throttled_replicas_intent_record,
    ThrottledRateIntentRecord: MetadataDelta._throttled_rate_intent_record,
    UserScramCredentialRecord: MetadataDelta._user_scram_credential_record,
    RemoveUserScramCredentialRecord: MetadataDelta._remove_user_scram_credential_record,
    DelegationTokenRecord: MetadataDelta._delegation_token_record,
    RemoveDelegationTokenRecord: MetadataDelta._remove_delegation_token_record,
    AccessControlEntryRecord: MetadataDelta._access_control_entry_record,
    RemoveAccessControlEntryRecord: MetadataDelta._remove_access_control_entry_record,
    ClientQuotaRecord: MetadataDelta._client_quota_record,
    ClearElrRecord: MetadataDelta._clear_elr_record,
    RegisterControllerRecord: MetadataDelta._register_controller_record,
    NoOpRecord: MetadataDelta._no_op_record,
    ZkMigrationStateRecord: MetadataDelta._no_op_record,
    BeginTransactionRecord: MetadataDelta._no_op_record,
    EndTransactionRecord: MetadataDelta._no_op_record,
    AbortTransactionRecord: MetadataDelta._no_op_record,
}


def replay(image: MetadataImage, records: Iterable[Any], first_offset: int | None = None) -> MetadataImage:
    """The image after `records`."""
    delta = MetadataDelta(image)
    delta.replay_all(records, first_offset)
    return delta.apply()


K = TypeVar("K")
V = TypeVar("V")


def _merged(base: Mapping[K, V], changes: Mapping[K, V | None]) -> Mapping[K, V]:
    """`base` with `changes` applied (None removes a key); `base` itself when nothing changed."""
    if not changes:
        return base
    out = dict(base)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def _left(before: BrokerRegistration | None, log_dirs: list[UUID]) -> tuple[UUID, ...]:
    """The dirs `before` had (online or failed) that `log_dirs`, a broker's new list, leaves out."""
    if before is None:
        return ()
    now = set(log_dirs)
    return tuple(d for d in dict.fromkeys((*before.log_dirs, *before.offline_dirs)) if d not in now)
