"""What the admin client takes and returns: small immutable values, independent of the wire codecs.

Strategy: results are frozen dataclasses (slots) built straight from the decoded response, one object per thing a
person cares about (a log dir, a replica, a topic, a config entry), so callers never see protocol structs or
version differences.  Values Kafka marks as unknown with -1 (volume sizes before DescribeLogDirs v4, offset lag of
a replica with no current log) become None.  Calls that act on many items at once (create topics, move replicas,
alter configs) return a `Results` dict of per-item results, each with an `error` that is None on success, so one bad
item never hides what happened to the others; `raise_first()` turns that into an exception when the caller wants
all-or-nothing.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Generic, NamedTuple, TypeVar
from uuid import UUID

from kjbod.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "DelegationToken",
    "AlterConfigOp",
    "AlterConfigOpType",
    "AlterConfigsResult",
    "AlterReplicaLogDirResult",
    "BrokerNode",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigSource",
    "ConfigSynonym",
    "CreatePartitionsResult",
    "CreateTopicResult",
    "DeleteGroupResult",
    "DeleteRecordsResult",
    "DeleteTopicResult",
    "GroupDescription",
    "GroupListing",
    "GroupOffsets",
    "GroupOffsetsChangeResult",
    "ListOffsetsResult",
    "LogDirInfo",
    "LogDirsByBroker",
    "MemberDescription",
    "NewPartitions",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetSpec",
    "PartitionDescription",
    "ReplicaInfo",
    "ReplicaLogDirInfo",
    "Results",
    "TopicDescription",
    "TopicPartitionReplica",
]


# ------------------------------------------------------------------------------------------------- cluster

@dataclass(frozen=True, slots=True)
class DelegationToken:
    """A delegation token as CreateDelegationToken and DescribeDelegationToken tell it (principals as Type:name,
    times in ms since the epoch). A client authenticates with it over SASL/SCRAM: user `token_id`, password
    `hmac_base64`, and Kafka's ``tokenauth=true`` extension."""

    token_id: str
    hmac: bytes
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_timestamp: int
    expiry_timestamp: int
    max_timestamp: int

    @property
    def hmac_base64(self) -> str:
        return base64.b64encode(self.hmac).decode()


@dataclass(frozen=True, slots=True)
class BrokerNode:
    node_id: int
    host: str
    port: int
    rack: str | None = None
    is_fenced: bool = False


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int | None  # None when the broker did not name one (-1 on the wire)
    brokers: tuple[BrokerNode, ...]


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    partition: int
    leader: int | None
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    error: ErrorCode | None = None
    # KIP-966, from DescribeTopicPartitions only (None when the partition came from Metadata)
    elr: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: UUID | None
    is_internal: bool
    partitions: tuple[PartitionDescription, ...]


# ------------------------------------------------------------------------------------------------- log dirs

class TopicPartitionReplica(NamedTuple):
    """One replica: a partition on one broker (Kafka's TopicPartitionReplica).  Plain tuples compare equal."""

    topic: str
    partition: int
    broker_id: int


# ------------------------------------------------------------------------------------------------- throttles (KIP-179)

NO_THROTTLE = (1 << 63) - 1  # Long.MAX_VALUE: KIP-179's "not throttled"


class ThrottledRate(NamedTuple):
    """A broker's inter-broker throttled rates in bytes/s (KIP-179's ThrottledRate).  Plain tuples work too."""

    leader_rate: int
    follower_rate: int


class ThrottledReplicas(NamedTuple):
    """The brokers of one partition throttled when leading and when following it (KIP-179's ThrottledReplicas)."""

    leaders: tuple[int, ...] | list[int]
    followers: tuple[int, ...] | list[int]


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    topic: str
    partition: int
    size: int  # bytes of the replica's segment files
    offset_lag: int | None  # how far the replica trails (future: behind the current one); None if unknown
    is_future: bool  # the copy a log-dir move is building


@dataclass(frozen=True, slots=True)
class LogDirInfo:
    broker_id: int
    path: str
    directory_id: UUID | None  # KIP-858 id; None when the broker does not report it (Apache Kafka)
    error: ErrorCode | None  # KAFKA_STORAGE_ERROR for an offline dir
    total_bytes: int | None  # size of the volume; None before DescribeLogDirs v4 or when unknown
    usable_bytes: int | None
    replicas: list[ReplicaInfo]
    # kjbod extensions: online, degraded (slow), offline or not-answering, and the dir's slowest recent file
    # operation; None when the broker does not report them (Apache Kafka)
    state: str | None = None
    recent_latency_ms: int | None = None
    failed_at_ms: int | None = None  # an offline dir: when it failed (ms since the epoch), if the broker knows
    reserved_bytes: int | None = None  # kjbod: what the dir keeps free (log.dir.reserved.bytes); None: unknown
    # kjbod: why the dir is not online (the I/O error or stalled operation that took it offline, the operation a
    # dir that does not answer is stuck in, a full dir's free bytes); None when online or not reported
    state_reason: str | None = None
    # KIP-1066 (DescribeLogDirs v5): whether the dir is cordoned (takes no new replicas); None before v5
    is_cordoned: bool | None = None
    # kjbod: the broker's device id of the dir's filesystem (dirs of one broker with the same id share it); None:
    # not reported (Apache Kafka)
    filesystem_id: int | None = None


class LogDirsByBroker(dict[int, list[LogDirInfo]]):
    """`describe_log_dirs` result: broker id -> its log dirs; brokers that failed are in `errors` instead."""

    __slots__ = ("errors",)

    def __init__(self) -> None:
        super().__init__()
        self.errors: dict[int, KafkaError] = {}


@dataclass(frozen=True, slots=True)
class ReplicaLogDirInfo:
    """Where one replica lives and, during a log-dir move, where it is going (KIP-113's ReplicaLogDirInfo)."""

    current_dir: str | None  # None: the broker has no current log for it
    current_offset_lag: int | None
    current_size: int | None
    future_dir: str | None  # None: no move in progress
    future_offset_lag: int | None  # how far the future copy trails the current one
    future_size: int | None


# ------------------------------------------------------------------------------------------------- topics

@dataclass(frozen=True)
class NewTopic:
    """A topic to create.  -1 partitions or replication factor: the broker's default (CreateTopics v4+)."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str | None] = field(default_factory=dict)
    # Explicit placement: partition -> broker ids (preferred leader first); leave the counts at -1 with it.
    assignments: Mapping[int, Sequence[int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CreateTopicResult:
    name: str
    topic_id: UUID | None
    num_partitions: int | None
    replication_factor: int | None
    error: KafkaError | None


@dataclass(frozen=True, slots=True)
class DeleteTopicResult:
    name: str
    topic_id: UUID | None
    error: KafkaError | None


@dataclass(frozen=True, slots=True)
class NewPartitions:
    """Grow a topic to `total_count` partitions (Kafka's NewPartitions.increaseTo).  `assignments`: the broker ids
    of each new partition in order, preferred leader first; None lets the controller place them."""

    total_count: int
    assignments: Sequence[Sequence[int]] | None = None


@dataclass(frozen=True, slots=True)
class CreatePartitionsResult:
    name: str
    error: KafkaError | None


@dataclass(frozen=True, slots=True)
class DeleteRecordsResult:
    """One partition's DeleteRecords answer: its new low watermark (log start offset), or why not."""

    topic: str
    partition: int
    low_watermark: int | None
    error: KafkaError | None


# ------------------------------------------------------------------------------------------------- offsets

class OffsetSpec:
    """ListOffsets' special timestamps (Kafka's OffsetSpec); any value >= 0 is a time in ms since the epoch."""

    LATEST = -1  # the log end offset (high watermark for an ordinary client)
    EARLIEST = -2  # the log start offset
    MAX_TIMESTAMP = -3  # the record with the largest timestamp


@dataclass(frozen=True, slots=True)
class ListOffsetsResult:
    """One partition's ListOffsets answer; `offset` None when no record matches (a time after the last record)."""

    topic: str
    partition: int
    offset: int | None
    timestamp: int | None
    leader_epoch: int | None
    error: KafkaError | None


# ------------------------------------------------------------------------------------------------- transactions

@dataclass(frozen=True, slots=True)
class ProducerState:
    """One producer a partition's leader keeps state for (DescribeProducers)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int  # of the last marker written for it here, -1 if none
    current_txn_start_offset: int | None  # where its open transaction began here; None when none is open


@dataclass(frozen=True, slots=True)
class PartitionProducers:
    topic: str
    partition: int
    producers: tuple[ProducerState, ...]
    error: KafkaError | None = None


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """One transaction as ListTransactions names it, with the broker coordinating it."""

    transactional_id: str
    coordinator: int
    producer_id: int
    state: str  # Kafka's names: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, ...


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """One transactional id as its coordinator describes it (DescribeTransactions)."""

    transactional_id: str
    coordinator: int
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int | None  # when the current transaction began; None when none is under way
    partitions: tuple[tuple[str, int], ...]
    error: KafkaError | None = None


# ------------------------------------------------------------------------------------------------- groups

@dataclass(frozen=True, slots=True)
class GroupListing:
    """One group as ListGroups names it.  `state` and `type` are None from brokers too old to say (v4, v5)."""

    group_id: str
    protocol_type: str  # "consumer" for consumer groups, "" for a group that only commits offsets
    state: str | None = None  # Kafka's names: Stable, PreparingRebalance, CompletingRebalance, Empty, Dead
    type: str | None = None  # "classic" or "consumer"


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    # The partitions the member was given, decoded from its ConsumerProtocolAssignment; () while the group
    # rebalances, None when the group is not a consumer group or the bytes are not an assignment.
    assignment: tuple[tuple[str, int], ...] | None


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """One group as its coordinator describes it (DescribeGroups).  A group the coordinator does not know is
    described as Dead with no members, as Kafka's classic coordinator answers; `error` is None unless the
    group could not be described at all (then only `group_id` and `error` are meaningful)."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str  # the assignor of a consumer group ("range", "roundrobin", ...), "" while rebalancing
    members: tuple[MemberDescription, ...]
    coordinator: BrokerNode | None
    error: KafkaError | None = None


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset: the next offset to consume, the leader epoch of the record before it, free text."""

    offset: int
    leader_epoch: int | None = None
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class GroupOffsets:
    """The committed offsets of one group (OffsetFetch): partitions without a commit are left out."""

    group_id: str
    offsets: dict[tuple[str, int], OffsetAndMetadata]
    error: KafkaError | None = None


@dataclass(frozen=True, slots=True)
class GroupOffsetsChangeResult:
    """What altering (OffsetCommit) or deleting (OffsetDelete) a group's offsets did: `error` is the group's
    error (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, ...) or the first partition's; `partitions` each partition's."""

    group_id: str
    partitions: dict[tuple[str, int], KafkaError | None]
    error: KafkaError | None


@dataclass(frozen=True, slots=True)
class DeleteGroupResult:
    group_id: str
    error: KafkaError | None


@dataclass(frozen=True, slots=True)
class ShareMemberDescription:
    member_id: str
    client_id: str
    host: str
    member_epoch: int
    assignment: tuple[tuple[str, int], ...]  # (topic, partition), sorted


@dataclass(frozen=True, slots=True)
class ShareGroupDescription:
    """One KIP-932 share group as its coordinator describes it (ShareGroupDescribe).  A group that does not exist
    is described as Dead; `error` is None unless the group could not be described at all."""

    group_id: str
    state: str  # Empty, Stable, Dead
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[ShareMemberDescription, ...]
    coordinator: BrokerNode | None
    error: KafkaError | None = None


@dataclass(frozen=True, slots=True)
class SharePartitionOffset:
    """Where a share group's share-partition starts (DescribeShareGroupOffsets): None where it has no state."""

    topic: str
    partition: int
    start_offset: int | None
    leader_epoch: int | None
    lag: int | None


@dataclass(frozen=True, slots=True)
class ShareOffsetsChangeResult:
    """What altering or deleting a share group's offsets did: `error` is the group's error (GROUP_ID_NOT_FOUND,
    NON_EMPTY_GROUP, ...) or else the first item's; `items` each partition's (alter) or topic's (delete)."""

    group_id: str
    items: dict[Any, KafkaError | None]
    error: KafkaError | None


# ------------------------------------------------------------------------------------------------- configs

class ConfigResourceType(IntEnum):
    """Kafka's ConfigResource.Type ids (not the ACL resource types)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class ConfigSource(IntEnum):
    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class AlterConfigOpType(IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class ConfigResource:
    """A topic (by name), a broker (by id as text; "" for the cluster-wide broker default), a group (by id) or a
    client metrics subscription (by name)."""

    type: ConfigResourceType
    name: str

    @classmethod
    def topic(cls, name: str) -> ConfigResource:
        return cls(ConfigResourceType.TOPIC, name)

    @classmethod
    def broker(cls, broker_id: int | str) -> ConfigResource:
        return cls(ConfigResourceType.BROKER, str(broker_id))

    @classmethod
    def client_metrics(cls, name: str) -> ConfigResource:
        """A client metrics subscription (KIP-714)."""
        return cls(ConfigResourceType.CLIENT_METRICS, name)

    @classmethod
    def group(cls, group_id: str) -> ConfigResource:
        return cls(ConfigResourceType.GROUP, group_id)


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: ConfigSource | int


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None  # None for sensitive entries
    source: ConfigSource | int
    read_only: bool
    is_sensitive: bool
    config_type: int = 0  # DescribeConfigs v3+ ConfigType; 0 when unknown
    documentation: str | None = None
    synonyms: tuple[ConfigSynonym, ...] = ()


@dataclass(frozen=True, slots=True)
class AlterConfigOp:
    name: str
    value: str | None = None
    op: AlterConfigOpType = AlterConfigOpType.SET


@dataclass(frozen=True, slots=True)
class AlterConfigsResult:
    resource: ConfigResource
    error: KafkaError | None


@dataclass(frozen=True, slots=True)
class AlterReplicaLogDirResult:
    replica: TopicPartitionReplica
    path: str
    error: KafkaError | None


# ------------------------------------------------------------------------------------------------- features

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3  # UpdateFeatures' upgrade types


@dataclass(frozen=True, slots=True)
class FeatureMetadata:
    """What ApiVersions says of features (Kafka's Admin.describeFeatures): the cluster's finalized levels with the
    metadata offset they come from, and the range each feature the answering node supports."""

    finalized: dict[str, int]
    finalized_epoch: int | None
    supported: dict[str, tuple[int, int]]


# ------------------------------------------------------------------------------------------------- per-item results

K = TypeVar("K")
R = TypeVar("R")


class Results(dict[K, R], Generic[K, R]):
    """Per-item results of a call on many items; every value has an `error` (None on success)."""

    __slots__ = ()

    def errors(self) -> dict[K, KafkaError]:
        return {k: v.error for k, v in self.items() if v.error is not None}  # type: ignore[attr-defined]

    def raise_first(self) -> None:
        """Raises the first item's error, if any item failed."""
        for value in self.values():
            error = value.error  # type: ignore[attr-defined]
            if error is not None:
                raise error
