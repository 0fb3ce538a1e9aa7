"""The cluster metadata image: an immutable snapshot of everything the metadata log says.

Strategy (Kafka's `MetadataImage`): one frozen value per replayed offset.  Readers (handlers, the broker's
publisher, the controller's managers) hold whichever image was current when they started and never see it
change under them; a new image comes only from `MetadataDelta.apply()` (kjbod.metadata.delta), which copies
the parts a batch of records touched and shares the rest.  The mappings inside an image are plain dicts for
speed of reading; nothing in kjbod writes to them once the image is built (the delta builds fresh ones).

What it holds: topics by name and by id with their partitions (replicas, ISR, leader, epochs, the log dir of
each replica, KIP-966's eligible leader replicas and last known ELR), configs per resource (topics, brokers by id, the cluster default broker resource ""), broker
registrations (epoch, incarnation, listeners, rack, fenced, in controlled shutdown, online log dirs), the next
free producer id, finalized feature levels, SCRAM credentials, ACLs, client quotas per entity, kjbod's KIP-179 throttle intents, and the offset of the last record
replayed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from uuid import UUID

from kjbod.metadata.acls import AclEntry

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
GROUP_RESOURCE = 32  # KIP-848's per-group configs (consumer.session.timeout.ms, ...)

NO_LEADER = -1
# LeaderRecoveryState (KIP-704): a leader chosen by an unclean election is RECOVERING until it tells the
# controller (AlterPartition) that it has made its log whole.
RECOVERED, RECOVERING = 0, 1
# Kafka's reserved directory ids (DirectoryId): a replica whose dir the controller does not know yet, one in a
# dir that failed, and one written before directories were tracked.
DIR_UNASSIGNED = UUID(int=1)
DIR_LOST = UUID(int=2)
DIR_MIGRATING = UUID(int=0)
RESERVED_DIR_LIMIT = 100


def is_reserved_dir(dir_id: UUID) -> bool:
    return dir_id.int < RESERVED_DIR_LIMIT


_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class PartitionImage:
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    directories: tuple[UUID, ...] = ()
    leader_recovery_state: int = RECOVERED
    # A reassignment in progress (KIP-455): `replicas` holds the target followed by the replicas being removed.
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()
    # kjbod's ReassignmentIntentRecord: the final target of a batched (KIP-435) reassignment, and the log dirs
    # named for some of its replicas; None when there is none.
    intent: tuple[int, ...] | None = None
    intent_dirs: Mapping[int, UUID] = field(default_factory=dict)
    # KIP-966: replicas that left the ISR while it was below min.insync.replicas and so hold every committed
    # record (they may be elected when the ISR is empty), and the last known leader kept while there is none
    # (Kafka 4.3 keeps the last leader in LastKnownElr).
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    def directory_of(self, broker_id: int) -> UUID | None:
        """The log dir the metadata gives `broker_id`'s replica, or None when it is not a replica."""
        try:
            i = self.replicas.index(broker_id)
        except ValueError:
            return None
        return self.directories[i] if i < len(self.directories) else DIR_MIGRATING


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: UUID
    partitions: Mapping[int, PartitionImage] = field(default_factory=dict)
    configs: Mapping[str, str] = field(default_factory=dict)  # this topic's config overrides (the image's TOPIC resource entry)


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    host: str
    port: int
    security_protocol: int = 0


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    epoch: int
    incarnation_id: UUID
    listeners: tuple[Endpoint, ...] = ()
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    log_dirs: tuple[UUID, ...] = ()
    features: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    # Dirs this broker registered that have left its registration since (failed: KIP-858's
    # BrokerRegistrationChangeRecord), so that its heartbeats, which resend every failed dir, still name a dir
    # the controller knows, even when the dir held no replica and a snapshot replaced the records (see
    # kjbod.metadata.snapshot).  Kafka keeps no such memory (it ignores offline dirs it does not know).
    offline_dirs: tuple[UUID, ...] = ()
    # KIP-1066: the ids of its cordoned log dirs (they take no new replicas), as its heartbeats reported them and
    # the controller recorded them (RegisterBrokerRecord v4, BrokerRegistrationChangeRecord v3, from
    # metadata.version 4.3-IV0); None until a heartbeat has reported them (Kafka's "not known yet").
    cordoned_dirs: tuple[UUID, ...] | None = None
    # Offset of the RegisterBrokerRecord replayed last for it: the broker is caught up (and may be unfenced)
    # once it has applied this offset.  Not part of the record, so not part of equality.
    record_offset: int = field(default=-1, compare=False)

    @property
    def active(self) -> bool:
        """Kafka's `isActive`: registered, unfenced and not shutting down: may lead partitions."""
        return not self.fenced and not self.in_controlled_shutdown

    @property
    def has_uncordoned_dirs(self) -> bool:
        """Kafka's hasUncordonedDirs: some online dir is not cordoned (a broker with no dirs listed, or whose
        cordons are not known yet, counts as having one).  A broker without one takes no new replicas."""
        if not self.log_dirs or self.cordoned_dirs is None:
            return True
        return not set(self.log_dirs) <= set(self.cordoned_dirs)

    def has_online_dir(self, dir_id: UUID | None) -> bool:
        """Whether a replica the metadata places in `dir_id` is on a dir this broker has online (Kafka's
        DirectoryId.isOnline): a dir not yet known (UNASSIGNED, MIGRATING, a broker without dirs) counts as
        online, LOST never does."""
        if not self.log_dirs or dir_id is None or dir_id in (DIR_UNASSIGNED, DIR_MIGRATING):
            return True
        return dir_id != DIR_LOST and dir_id in self.log_dirs

    def endpoint(self, listener_name: str) -> Endpoint | None:
        for e in self.listeners:
            if e.name == listener_name:
                return e
        return None


@dataclass(frozen=True, slots=True)
class ControllerRegistration:
    """A controller's registration (RegisterControllerRecord, KIP-919): kept per controller id; a newer record of
    the same id replaces it, whatever its incarnation (as Kafka's ClusterDelta keeps the last one)."""

    controller_id: int
    incarnation_id: UUID
    zk_migration_ready: bool = False
    listeners: tuple[Endpoint, ...] = ()
    features: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    def endpoint(self, listener_name: str) -> Endpoint | None:
        for e in self.listeners:
            if e.name == listener_name:
                return e
        return None


@dataclass(frozen=True, slots=True)
class RateIntent:
    """kjbod's ThrottledRateIntentRecord: the inter-broker throttled rates the controller set on a broker for a
    KIP-179 throttle (None: not set by it) and the values to put back when it removes them (None: delete)."""

    leader_rate: str | None = None
    leader_restore: str | None = None
    follower_rate: str | None = None
    follower_restore: str | None = None


@dataclass(frozen=True, slots=True)
class ScramEntry:
    """One user's SCRAM credential for one mechanism (UserScramCredentialRecord), keyed by (user, mechanism type)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclass(frozen=True, slots=True)
class TokenEntry:
    """One delegation token (DelegationTokenRecord), keyed by its id. Principals are written Type:name. The HMAC is
    not kept: whoever holds delegation.token.secret.key derives it from the id (kjbod.metadata.tokens)."""

    token_id: str
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_timestamp: int
    max_timestamp: int
    expiration_timestamp: int


@dataclass(frozen=True, slots=True)
class MetadataImage:
    topics_by_name: Mapping[str, TopicImage] = field(default_factory=dict)
    topics_by_id: Mapping[UUID, TopicImage] = field(default_factory=dict)
    configs: Mapping[tuple[int, str], Mapping[str, str]] = field(default_factory=dict)
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=dict)
    next_producer_id: int = 0
    features: Mapping[str, int] = field(default_factory=dict)
    features_epoch: int = -1  # offset of the last FeatureLevelRecord replayed (ApiVersions' finalized epoch)
    offset: int = -1  # offset of the last record replayed into this image; -1 for the empty image
    # kjbod's KIP-179 throttle intents: per partition (topic id, partition), the (leader, follower) brokers whose
    # throttled-replica entries the controller added (ThrottledReplicasIntentRecord); per broker, the rates it set
    # (ThrottledRateIntentRecord).  The controller removes them as reassignments end.
    throttled_replicas: Mapping[tuple[UUID, int], tuple[tuple[int, ...], tuple[int, ...]]] = field(
        default_factory=dict)
    throttled_rates: Mapping[int, RateIntent] = field(default_factory=dict)
    scram: Mapping[tuple[str, int], ScramEntry] = field(default_factory=dict)  # (user, mechanism type) -> credential
    acls: Mapping[UUID, AclEntry] = field(default_factory=dict)  # ACL id -> entry (AccessControlEntryRecord)
    tokens: Mapping[str, TokenEntry] = field(default_factory=dict)  # token id -> delegation token
    # ClientQuotaRecord: entity (kjbod.metadata.client_quotas.Entity) -> quota key -> value; no empty entities
    client_quotas: Mapping[tuple[tuple[str, str | None], ...], Mapping[str, float]] = field(default_factory=dict)
    controllers: Mapping[int, ControllerRegistration] = field(default_factory=dict)  # RegisterControllerRecord

    # The reading interface handlers used on the old mutable image.
    @property
    def by_name(self) -> Mapping[str, TopicImage]:
        return self.topics_by_name

    def topic(self, name: str) -> TopicImage | None:
        return self.topics_by_name.get(name)

    def topic_by_id(self, topic_id: UUID) -> TopicImage | None:
        return self.topics_by_id.get(topic_id)

    def topics(self) -> list[TopicImage]:
        return list(self.topics_by_name.values())

    def resource_configs(self, resource_type: int, name: str) -> Mapping[str, str]:
        return self.configs.get((resource_type, name), _EMPTY)

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return self.brokers.get(broker_id)

    def unfenced_brokers(self) -> list[BrokerRegistration]:
        return [b for _, b in sorted(self.brokers.items()) if not b.fenced]

    def dir_owner(self, dir_id: UUID) -> int | None:
        """The broker that registered log dir `dir_id`, if any."""
        for b in self.brokers.values():
            if dir_id in b.log_dirs:
                return b.broker_id
        return None


EMPTY_IMAGE = MetadataImage()
