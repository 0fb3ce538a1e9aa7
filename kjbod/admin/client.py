"""The asyncio admin client: cluster discovery, routing, retries and deadlines around kjbod's generated codecs.

Strategy:

* Discovery: `start()` (or `async with`) asks a bootstrap server for Metadata; the broker list it returns maps
  broker ids to addresses.  One `ClientConnection` per address, opened on first use and shared by every call
  (requests to one broker are pipelined on it).  Versions are negotiated per connection (ApiVersions) and each
  request goes out at the highest version both sides serve, so the client works against Apache Kafka brokers.
* Routing: a call goes to "any broker" (an open connection if there is one, else the bootstrap servers then the
  known brokers, in order), to the controller reported by Metadata (topic creation and deletion), or to one broker
  id (log dirs and broker configs are answered only by the broker that owns them).
* Deadlines: every public call has one deadline (`timeout`, default `request_timeout`).  Connecting is bounded by
  `connect_timeout`, each attempt by `request_timeout`, and everything by the deadline, so no call can hang.
* Retries (`_call`): a lost connection, a timed-out attempt and a retriable error code at the top level of a
  response (protocol.errors.RETRIABLE) are retried with exponential backoff and jitter until the deadline; the
  last error is raised when time runs out.  Per-item codes (one topic, one replica, one log dir) are results, not
  retried, except those Kafka's own admin client retries for topic creation and deletion (NOT_CONTROLLER,
  THROTTLING_QUOTA_EXCEEDED), which are resent for the affected items only.
* DeleteRecords goes to each partition's leader, as in Kafka's admin client: Metadata names the leaders, the
  partitions are sent grouped per leader, and a partition whose leader moved or is not known yet (the invalid
  metadata codes, or a leader that cannot be reached) is looked up and sent again until the deadline; a partition
  still unanswered then keeps the last error it got.
* Groups, as in Kafka's admin client: ListGroups goes to every broker (each lists the groups it coordinates);
  the other group calls find each group's coordinator (FindCoordinator, one request for all groups from v4) and
  send each coordinator its groups.  A group answered NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE, or whose
  coordinator cannot be reached, has its coordinator looked up again; COORDINATOR_LOAD_IN_PROGRESS is asked
  again; both until the deadline, when the group keeps its last error.  Results are per group.
* Transactions, as Kafka's admin client: DescribeProducers goes to each partition's leader (or to the broker
  named), ListTransactions to every broker (each lists the transactions it coordinates), DescribeTransactions to
  each transactional id's coordinator (FindCoordinator with the transaction key type), retried as the group calls.
* The hot path (`describe_log_dirs` over many thousand partitions) decodes each response once into the generated
  dataclasses and builds the result objects from them in one comprehension per log dir, with nothing in between.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar
from uuid import UUID

import structlog

from kjbod import __version__
from kjbod.admin.consumer_protocol import decode_assignment
from kjbod.admin.errors import (
    AdminError,
    BrokerConnectionError,
    BrokerResponseError,
    RequestTimeoutError,
    UnsupportedVersionError,
    error_for_code,
)
from kjbod.admin.types import (
    NO_THROTTLE,
    AlterConfigOp,
    AlterConfigOpType,
    AlterConfigsResult,
    AlterReplicaLogDirResult,
    BrokerNode,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    ConfigSynonym,
    CreatePartitionsResult,
    CreateTopicResult,
    DelegationToken,
    DeleteGroupResult,
    DeleteRecordsResult,
    DeleteTopicResult,
    FeatureMetadata,
    GroupDescription,
    GroupListing,
    GroupOffsets,
    GroupOffsetsChangeResult,
    ListOffsetsResult,
    LogDirInfo,
    LogDirsByBroker,
    MemberDescription,
    NewPartitions,
    NewTopic,
    OffsetAndMetadata,
    PartitionDescription,
    PartitionProducers,
    ProducerState,
    ReplicaInfo,
    ReplicaLogDirInfo,
    Results,
    ShareGroupDescription,
    ShareMemberDescription,
    ShareOffsetsChangeResult,
    SharePartitionOffset,
    ThrottledRate,
    ThrottledReplicas,
    TopicDescription,
    TopicPartitionReplica,
    TransactionDescription,
    TransactionListing,
)
from kjbod.metadata.acls import AclEntry, AclFilter
from kjbod.net.backoff import ExponentialBackoff
from kjbod.net.connection import ClientConnection
from kjbod.net.correlator import api_name
from kjbod.net.sasl import SaslCredentials
from kjbod.protocol.errors import ErrorCode, KafkaError
from kjbod.protocol.generated import alter_client_quotas_request as quotas_req
from kjbod.protocol.generated.alter_interbroker_throttled_rates_request import (
    AlterInterbrokerThrottledRatesRequest,
    BrokerThrottle,
)
from kjbod.protocol.generated.alter_interbroker_throttled_replicas_request import (
    AlterInterbrokerThrottledReplicasRequest,
    PartitionThrottle,
    TopicThrottle,
)
from kjbod.protocol.generated.alter_partition_reassignments_request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from kjbod.protocol.generated.alter_replica_log_dirs_request import (
    AlterReplicaLogDir,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirTopic,
)
from kjbod.protocol.generated.api_versions_request import ApiVersionsRequest
from kjbod.protocol.generated.consumer_group_describe_request import ConsumerGroupDescribeRequest
from kjbod.protocol.generated.create_acls_request import AclCreation, CreateAclsRequest
from kjbod.protocol.generated.create_delegation_token_request import (
    CreatableRenewers,
    CreateDelegationTokenRequest,
)
from kjbod.protocol.generated.create_partitions_request import (
    CreatePartitionsAssignment,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from kjbod.protocol.generated.create_topics_request import (
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from kjbod.protocol.generated.delete_acls_request import DeleteAclsFilter, DeleteAclsRequest
from kjbod.protocol.generated.delete_groups_request import DeleteGroupsRequest
from kjbod.protocol.generated.delete_records_request import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)
from kjbod.protocol.generated.delete_topics_request import DeleteTopicsRequest, DeleteTopicState
from kjbod.protocol.generated.describe_acls_request import DescribeAclsRequest
from kjbod.protocol.generated.describe_client_quotas_request import ComponentData, DescribeClientQuotasRequest
from kjbod.protocol.generated.describe_cluster_request import DescribeClusterRequest
from kjbod.protocol.generated.describe_configs_request import DescribeConfigsRequest, DescribeConfigsResource
from kjbod.protocol.generated.describe_delegation_token_request import (
    DescribeDelegationTokenOwner,
    DescribeDelegationTokenRequest,
)
from kjbod.protocol.generated.describe_groups_request import DescribeGroupsRequest
from kjbod.protocol.generated.describe_log_dirs_request import DescribableLogDirTopic, DescribeLogDirsRequest
from kjbod.protocol.generated.describe_producers_request import DescribeProducersRequest
from kjbod.protocol.generated.describe_producers_request import TopicRequest as ProducersTopicRequest
from kjbod.protocol.generated.describe_topic_partitions_request import Cursor as DTPCursor
from kjbod.protocol.generated.describe_topic_partitions_request import DescribeTopicPartitionsRequest
from kjbod.protocol.generated.describe_topic_partitions_request import TopicRequest as DTPTopic
from kjbod.protocol.generated.describe_transactions_request import DescribeTransactionsRequest
from kjbod.protocol.generated.describe_user_scram_credentials_request import (
    DescribeUserScramCredentialsRequest,
    UserName,
)
from kjbod.protocol.generated.elect_leaders_request import ElectLeadersRequest
from kjbod.protocol.generated.elect_leaders_request import TopicPartitions as ElectTopicPartitions
from kjbod.protocol.generated.expire_delegation_token_request import ExpireDelegationTokenRequest
from kjbod.protocol.generated.find_coordinator_request import FindCoordinatorRequest
from kjbod.protocol.generated.incremental_alter_configs_request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kjbod.protocol.generated.list_groups_request import ListGroupsRequest
from kjbod.protocol.generated.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kjbod.protocol.generated.list_partition_reassignments_request import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsTopics,
)
from kjbod.protocol.generated.list_transactions_request import ListTransactionsRequest
from kjbod.protocol.generated.metadata_request import MetadataRequest, MetadataRequestTopic
from kjbod.protocol.generated.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kjbod.protocol.generated.offset_delete_request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from kjbod.protocol.generated.offset_fetch_request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
)
from kjbod.protocol.generated.reassign_partitions_request import (
    PartitionReassignment,
    ReassignPartitionsRequest,
    TopicReassignment,
)
from kjbod.protocol.generated.renew_delegation_token_request import RenewDelegationTokenRequest
from kjbod.protocol.generated.update_features_request import FeatureUpdateKey, UpdateFeaturesRequest
from kjbod.protocol.generated.write_txn_markers_request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from kjbod.protocol.runtime import ZERO_UUID, gc_pause, gc_resume
from kjbod.wire.framing import DEFAULT_MAX_FRAME_SIZE

__all__ = ["DEFAULT_CONNECT_TIMEOUT", "DEFAULT_REQUEST_TIMEOUT", "AdminClient", "parse_bootstrap_servers"]

log = structlog.get_logger("kjbod.admin")

DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_REQUEST_TIMEOUT = 30.0
DEFAULT_RETRY_BACKOFF = 0.1
DEFAULT_RETRY_BACKOFF_MAX = 1.0

METADATA = 3
DELETE_RECORDS = 21
CREATE_TOPICS = 19
DELETE_TOPICS = 20
CREATE_PARTITIONS = 37
DESCRIBE_CONFIGS = 32
ALTER_REPLICA_LOG_DIRS = 34
DESCRIBE_LOG_DIRS = 35
LIST_OFFSETS = 2
DEBUGGING_REPLICA_ID = -2  # ListOffsets from a tool: any local replica answers, latest = its log end offset
INCREMENTAL_ALTER_CONFIGS = 44
ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46
DESCRIBE_CLUSTER = 60
API_VERSIONS = 18
UPDATE_FEATURES = 57
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
# The last OffsetCommit and OffsetFetch version that names topics (v10 names them by id only, KIP-848).
BY_NAME_MAX = 9
FIND_COORDINATOR = 10
DESCRIBE_GROUPS = 15
CONSUMER_GROUP_DESCRIBE = 69
LIST_GROUPS = 16
DELETE_GROUPS = 42
SHARE_GROUP_DESCRIBE = 77
DESCRIBE_SHARE_GROUP_OFFSETS = 90
ALTER_SHARE_GROUP_OFFSETS = 91
DELETE_SHARE_GROUP_OFFSETS = 92
OFFSET_DELETE = 47
DESCRIBE_ACLS = 29
DESCRIBE_CLIENT_QUOTAS = 48
LIST_CONFIG_RESOURCES = 74  # ListClientMetricsResources before Kafka 4.1 (KIP-1142), the same v0
DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_CLIENT_QUOTAS = 49
CREATE_ACLS = 30
DELETE_ACLS = 31
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
WRITE_TXN_MARKERS = 27
DESCRIBE_TOPIC_PARTITIONS = 75
CREATE_DELEGATION_TOKEN = 38
RENEW_DELEGATION_TOKEN = 39
EXPIRE_DELEGATION_TOKEN = 40
DESCRIBE_DELEGATION_TOKEN = 41
ELECT_LEADERS = 43
# kjbod's own APIs (KIP-179; an Apache Kafka broker does not have them: UnsupportedVersionError).
REASSIGN_PARTITIONS = 10000
ALTER_INTERBROKER_THROTTLED_RATES = 10001
ALTER_INTERBROKER_THROTTLED_REPLICAS = 10002

# Per-topic codes worth resending the failed topics for (what Kafka's admin client retries for these APIs).
_TOPIC_RETRY_CODES = frozenset({ErrorCode.NOT_CONTROLLER, ErrorCode.THROTTLING_QUOTA_EXCEEDED})

# Codes that say the partition's leader is not where Metadata said (Kafka's InvalidMetadataException family):
# DeleteRecords looks the leader up again and resends.  Metadata answering them for a partition means "not yet".
_STALE_LEADER_CODES = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.BROKER_NOT_AVAILABLE, ErrorCode.REPLICA_NOT_AVAILABLE, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH})

_CONTROLLER = "controller"
CLIENT_SOFTWARE_NAME = "kjbod-admin"
Target = int | str | None  # broker id, _CONTROLLER, or None for any broker
T = TypeVar("T")


def parse_bootstrap_servers(servers: str | Iterable[str]) -> list[tuple[str, int]]:
    """"h1:9092,h2:9092", "[::1]:9092" or a list of those -> [(host, port)].  The port defaults to 9092."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        if "://" in item:  # accept listener syntax, PLAINTEXT://host:port
            item = item.split("://", 1)[1]
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port_text = rest[1:] if rest.startswith(":") else ""
        elif item.count(":") == 1:
            host, port_text = item.split(":")
        else:
            host, port_text = item, ""
        try:
            port = int(port_text) if port_text else 9092
        except ValueError:
            raise ValueError(f"bad port in bootstrap server {item!r}") from None
        if not host or not 0 < port < 65536:
            raise ValueError(f"bad bootstrap server {item!r}")
        out.append((host, port))
    if not out:
        raise ValueError("no bootstrap servers given")
    return out


def _code(value: int) -> ErrorCode | None:
    """ErrorCode for a wire value; None for NONE.  A code newer than this client stays usable as UNKNOWN."""
    if value == 0:
        return None
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _source(value: int) -> ConfigSource | int:
    try:
        return ConfigSource(value)
    except ValueError:
        return value


class _Deadline:
    __slots__ = ("_loop", "at", "started", "timeout")

    def __init__(self, timeout: float) -> None:
        self._loop = asyncio.get_running_loop()
        self.timeout = timeout
        self.started = self._loop.time()
        self.at = self.started + timeout

    def remaining(self) -> float:
        return self.at - self._loop.time()


class AdminClient:
    """Asyncio Kafka admin client.  Use as `async with AdminClient(bootstrap_servers="h:p") as admin: ...`.

    Not thread-safe: use it from the event loop that started it (see `kjbod.admin.SyncAdminClient` for scripts).
    """

    def __init__(
        self,
        bootstrap_servers: str | Iterable[str],
        *,
        client_id: str = "kjbod-admin",
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        retry_backoff: float = DEFAULT_RETRY_BACKOFF,
        retry_backoff_max: float = DEFAULT_RETRY_BACKOFF_MAX,
        max_response_bytes: int = DEFAULT_MAX_FRAME_SIZE,
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslCredentials | None = None,
    ) -> None:
        """`ssl_context`: connect with TLS (a broker listener whose security protocol is SSL); see
        kjbod.admin.security.ssl_context_from for one made from Kafka's client properties. `sasl`: authenticate
        (SASL_PLAINTEXT and SASL_SSL listeners) with these credentials, e.g.
        `SaslCredentials("PLAIN", "alice", "alice-secret")` or kjbod.admin.security.sasl_credentials_from."""
        if connect_timeout <= 0 or request_timeout <= 0:
            raise ValueError("timeouts must be positive")
        self.bootstrap_servers = parse_bootstrap_servers(bootstrap_servers)
        self.client_id = client_id
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.retry_backoff = retry_backoff
        self.retry_backoff_max = retry_backoff_max
        self.max_response_bytes = max_response_bytes
        self.ssl_context = ssl_context
        self.sasl = sasl
        self._connections: dict[tuple[str, int], asyncio.Task[ClientConnection]] = {}
        self._brokers: dict[int, BrokerNode] = {}
        self._controller_id: int | None = None
        self._cluster_id: str | None = None
        self._metadata_stale = True
        self._metadata_time = float("-inf")  # loop time of the last Metadata answer
        self._closed = False

    # ============================================================================================ lifecycle

    async def __aenter__(self) -> AdminClient:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self, timeout: float | None = None) -> None:
        """Connects to a bootstrap server and loads the broker list."""
        await self._refresh_metadata([], self._deadline(timeout))

    async def close(self) -> None:
        """Closes every connection; the client cannot be used afterwards."""
        self._closed = True
        tasks = list(self._connections.values())
        self._connections.clear()
        for task in tasks:
            if task.done():
                if not task.cancelled() and task.exception() is None:
                    task.result().close()
            else:
                task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
            # Transports finish closing on the next loop iteration; give it one so the sockets are really closed
            # when close() returns, even if the caller's loop stops right after.
            await asyncio.sleep(0)

    @property
    def brokers(self) -> dict[int, BrokerNode]:
        """Brokers from the last Metadata answer (id -> node)."""
        return dict(self._brokers)

    @property
    def cluster_id(self) -> str | None:
        return self._cluster_id

    # ============================================================================================ cluster

    async def describe_cluster(self, *, include_fenced_brokers: bool = False,
                               timeout: float | None = None) -> ClusterDescription:
        """Cluster id, controller and brokers (DescribeCluster; Metadata for brokers that lack it).
        `include_fenced_brokers`: also the brokers the controller has fenced, marked `is_fenced` (KIP-1073,
        DescribeCluster v2; an older broker lists the unfenced ones only)."""
        deadline = self._deadline(timeout)
        try:
            response, _, _ = await self._call(
                None, DESCRIBE_CLUSTER,
                lambda v: DescribeClusterRequest(include_fenced_brokers=include_fenced_brokers and v >= 2), deadline,
                check=lambda r: r.error_code, message=lambda r: r.error_message)
        except UnsupportedVersionError:
            md = await self._refresh_metadata([], deadline)
            return ClusterDescription(
                md.cluster_id, md.controller_id if md.controller_id >= 0 else None,
                tuple(BrokerNode(b.node_id, b.host, b.port, b.rack) for b in md.brokers))
        return ClusterDescription(
            response.cluster_id,
            response.controller_id if response.controller_id >= 0 else None,
            tuple(BrokerNode(b.broker_id, b.host, b.port, b.rack, b.is_fenced) for b in response.brokers))

    async def describe_topics(self, topics: Iterable[str] | None = None, *,
                              timeout: float | None = None) -> dict[str, TopicDescription]:
        """Partitions, leaders and replicas of `topics` (None: every topic).  An unknown topic raises."""
        names = None if topics is None else list(topics)
        md = await self._refresh_metadata(names, self._deadline(timeout))
        out: dict[str, TopicDescription] = {}
        for t in md.topics:
            if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION or t.error_code in _FATAL_TOPIC_CODES:
                raise BrokerResponseError(t.error_code, f"topic {t.name!r}", api="Metadata")
            out[t.name] = TopicDescription(
                t.name, t.topic_id if t.topic_id != ZERO_UUID else None, t.is_internal,
                tuple(PartitionDescription(
                    p.partition_index, p.leader_id if p.leader_id >= 0 else None, p.leader_epoch,
                    tuple(p.replica_nodes), tuple(p.isr_nodes), tuple(p.offline_replicas), _code(p.error_code))
                    for p in sorted(t.partitions, key=lambda p: p.partition_index)))
        return out

    async def describe_topic_partitions(self, topics: Iterable[str] | None = None, *,
                                        partition_limit: int = 2000,
                                        timeout: float | None = None) -> dict[str, TopicDescription]:
        """What describe_topics answers, asked with DescribeTopicPartitions (KIP-966, Kafka 3.8+), a page of at
        most `partition_limit` partitions at a time (the broker may cap it lower) until its NextCursor is null.
        A broker without the API raises UnsupportedVersionError (describe_topics works everywhere).  An unknown
        topic raises, as in describe_topics; with `topics=None`, topics the caller may not describe are left out.
        """
        deadline = self._deadline(timeout)
        asked = [] if topics is None else [DTPTopic(name=n) for n in dict.fromkeys(topics)]
        out: dict[str, TopicDescription] = {}
        cursor = None
        while True:
            request = DescribeTopicPartitionsRequest(topics=asked, response_partition_limit=partition_limit,
                                                     cursor=cursor)
            response, _, _ = await self._call(None, DESCRIBE_TOPIC_PARTITIONS, _constant(request), deadline)
            for t in response.topics:
                if t.error_code:
                    raise BrokerResponseError(t.error_code, f"topic {t.name!r}", api="DescribeTopicPartitions")
                parts = tuple(PartitionDescription(
                    p.partition_index, p.leader_id if p.leader_id >= 0 else None, p.leader_epoch,
                    tuple(p.replica_nodes), tuple(p.isr_nodes), tuple(p.offline_replicas), _code(p.error_code),
                    tuple(p.eligible_leader_replicas), tuple(p.last_known_elr))
                    for p in t.partitions)
                seen = out.get(t.name)
                out[t.name] = TopicDescription(t.name, t.topic_id if t.topic_id != ZERO_UUID else None,
                                               t.is_internal, (seen.partitions if seen else ()) + parts)
            if response.next_cursor is None:
                return out
            cursor = DTPCursor(topic_name=response.next_cursor.topic_name,
                                       partition_index=response.next_cursor.partition_index)

    # ============================================================================================ log dirs

    async def describe_log_dirs(
        self,
        brokers: Iterable[int] | None = None,
        topics: Iterable[str | tuple[str, int]] | Mapping[str, Iterable[int]] | None = None,
        *,
        raise_on_broker_error: bool = True,
        timeout: float | None = None,
    ) -> LogDirsByBroker:
        """Log dirs of `brokers` (None: all) with the replicas of `topics` they hold.

        `topics`: None for every replica; topic names (all their partitions, looked up in Metadata); (topic,
        partition) pairs; or {topic: partitions}.  An empty list reports the dirs without replicas.  A broker that
        cannot answer raises, or with `raise_on_broker_error=False` is left out and listed in `result.errors`.
        """
        deadline = self._deadline(timeout)
        request_topics = await self._log_dir_topics(topics, deadline)
        # kjbod's extension: each dir's KIP-858 id (a Kafka broker ignores the tag and answers without ids).
        request = DescribeLogDirsRequest(topics=request_topics, include_directory_ids=True)
        broker_ids = await self._broker_ids(brokers, deadline)

        async def one(broker_id: int) -> list[LogDirInfo]:
            response, version, _ = await self._call(
                broker_id, DESCRIBE_LOG_DIRS, lambda v: request, deadline, check=lambda r: r.error_code)
            return _log_dirs(broker_id, response, version)

        answers = await asyncio.gather(*(one(b) for b in broker_ids), return_exceptions=True)
        out = LogDirsByBroker()
        for broker_id, answer in zip(broker_ids, answers, strict=True):
            if isinstance(answer, BaseException):
                if raise_on_broker_error or not isinstance(answer, KafkaError):
                    raise answer
                out.errors[broker_id] = answer
            else:
                out[broker_id] = answer
        return out

    async def replica_end_offsets(self, broker_id: int, partitions: Iterable[tuple[str, int]], *,
                                  timeout: float | None = None) -> dict[tuple[str, int], int]:
        """The log end offset of each of `broker_id`'s local replicas of `partitions`, leader or follower
        (ListOffsets latest with Kafka's debugging replica id); replicas it cannot answer for are left out."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        if not by_topic:
            return {}
        request = ListOffsetsRequest(replica_id=DEBUGGING_REPLICA_ID, topics=[ListOffsetsTopic(
            name=topic, partitions=[ListOffsetsPartition(partition_index=p, timestamp=-1) for p in parts])
            for topic, parts in by_topic.items()])
        response, _, _ = await self._call(broker_id, LIST_OFFSETS, lambda v: request, self._deadline(timeout))
        return {(t.name, p.partition_index): p.offset for t in response.topics for p in t.partitions
                if p.error_code == 0 and p.offset >= 0}

    async def describe_replica_log_dirs(
        self, replicas: Iterable[TopicPartitionReplica | tuple[str, int, int]], *, timeout: float | None = None,
    ) -> dict[TopicPartitionReplica, ReplicaLogDirInfo]:
        """Current and future (move target) log dir of each replica, with sizes and lags (KIP-113).

        A replica its broker does not hold comes back with every field None.
        """
        deadline = self._deadline(timeout)
        wanted = [TopicPartitionReplica(*r) for r in replicas]
        by_broker: dict[int, dict[str, set[int]]] = {}
        for topic, partition, broker_id in wanted:
            by_broker.setdefault(broker_id, {}).setdefault(topic, set()).add(partition)

        async def one(broker_id: int, topics: dict[str, set[int]]) -> dict[tuple[str, int], list[Any]]:
            request = DescribeLogDirsRequest(
                topics=[DescribableLogDirTopic(topic=t, partitions=sorted(ps)) for t, ps in topics.items()])
            response, _, _ = await self._call(
                broker_id, DESCRIBE_LOG_DIRS, lambda v: request, deadline, check=lambda r: r.error_code)
            found: dict[tuple[str, int], list[Any]] = {}
            for result in response.results:
                if result.error_code:
                    continue  # an offline dir reports no replicas
                for t in result.topics:
                    for p in t.partitions:
                        slot = found.setdefault((t.name, p.partition_index), [None] * 6)
                        lag = p.offset_lag if p.offset_lag >= 0 else None
                        base = 3 if p.is_future_key else 0
                        slot[base], slot[base + 1], slot[base + 2] = result.log_dir, lag, p.partition_size
            return found

        broker_ids = list(by_broker)
        answers = await asyncio.gather(*(one(b, by_broker[b]) for b in broker_ids))
        found_by_broker = dict(zip(broker_ids, answers, strict=True))
        out: dict[TopicPartitionReplica, ReplicaLogDirInfo] = {}
        for replica in wanted:
            slot = found_by_broker[replica.broker_id].get((replica.topic, replica.partition)) or [None] * 6
            out[replica] = ReplicaLogDirInfo(*slot)
        return out

    async def alter_replica_log_dirs(
        self,
        assignments: Mapping[TopicPartitionReplica | tuple[str, int, int], str],
        *,
        raise_on_error: bool = False,
        timeout: float | None = None,
    ) -> Results[TopicPartitionReplica, AlterReplicaLogDirResult]:
        """Moves each replica to the given absolute log dir on its broker (AlterReplicaLogDirs).

        Returns one result per replica; an error such as REPLICA_NOT_AVAILABLE (replica not created yet) or
        LOG_DIR_NOT_FOUND is reported, not raised, unless `raise_on_error`.  A broker that cannot be reached gives
        each of its replicas that connection error.
        """
        deadline = self._deadline(timeout)
        paths: dict[TopicPartitionReplica, str] = {
            TopicPartitionReplica(*r): path for r, path in assignments.items()}
        by_broker: dict[int, dict[str, dict[str, list[int]]]] = {}
        for (topic, partition, broker_id), path in paths.items():
            by_broker.setdefault(broker_id, {}).setdefault(path, {}).setdefault(topic, []).append(partition)

        async def one(broker_id: int, dirs: dict[str, dict[str, list[int]]]) -> tuple[Any, str]:
            request = AlterReplicaLogDirsRequest(dirs=[
                AlterReplicaLogDir(path=path, topics=[
                    AlterReplicaLogDirTopic(name=t, partitions=ps) for t, ps in topics.items()])
                for path, topics in dirs.items()])
            response, _, conn = await self._call(broker_id, ALTER_REPLICA_LOG_DIRS, lambda v: request, deadline)
            return response, conn.address

        broker_ids = list(by_broker)
        answers = await asyncio.gather(*(one(b, by_broker[b]) for b in broker_ids), return_exceptions=True)
        codes: dict[TopicPartitionReplica, KafkaError | None] = {}
        for broker_id, answer in zip(broker_ids, answers, strict=True):
            if isinstance(answer, BaseException):
                if not isinstance(answer, KafkaError):
                    raise answer
                for topics in by_broker[broker_id].values():
                    for topic, partitions in topics.items():
                        for partition in partitions:
                            codes[TopicPartitionReplica(topic, partition, broker_id)] = answer
                continue
            response, address = answer
            for t in response.results:
                for p in t.partitions:
                    codes[TopicPartitionReplica(t.topic_name, p.partition_index, broker_id)] = error_for_code(
                        p.error_code, f"{t.topic_name}-{p.partition_index}", api="AlterReplicaLogDirs",
                        broker=address)
        results: Results[TopicPartitionReplica, AlterReplicaLogDirResult] = Results()
        for replica, path in paths.items():
            if replica in codes:
                error = codes[replica]
            else:
                error = BrokerResponseError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                            f"no result for {replica.topic}-{replica.partition} in the response",
                                            api="AlterReplicaLogDirs", broker=f"broker {replica.broker_id}")
            results[replica] = AlterReplicaLogDirResult(replica, path, error)
        if raise_on_error:
            results.raise_first()
        return results

    # ============================================================================================ topics

    async def create_topics(
        self, new_topics: Iterable[NewTopic], *, validate_only: bool = False, raise_on_error: bool = True,
        timeout: float | None = None,
    ) -> Results[str, CreateTopicResult]:
        """Creates topics (CreateTopics, sent to the controller).  Per-topic errors raise unless told not to."""
        deadline = self._deadline(timeout)
        topics = {t.name: t for t in new_topics}

        def build(names: list[str]) -> Callable[[int], Any]:
            body = [
                CreatableTopic(
                    name=t.name, num_partitions=t.num_partitions, replication_factor=t.replication_factor,
                    assignments=[CreatableReplicaAssignment(partition_index=p, broker_ids=list(ids))
                                 for p, ids in t.assignments.items()],
                    configs=[CreatableTopicConfig(name=k, value=v) for k, v in t.configs.items()])
                for t in (topics[n] for n in names)]
            return lambda v: CreateTopicsRequest(
                topics=body, timeout_ms=self._timeout_ms(deadline), validate_only=validate_only)

        def result(r: Any, address: str) -> CreateTopicResult:
            return CreateTopicResult(
                r.name, r.topic_id if r.topic_id != ZERO_UUID else None,
                r.num_partitions if r.num_partitions >= 0 else None,
                r.replication_factor if r.replication_factor >= 0 else None,
                error_for_code(r.error_code, r.error_message or f"topic {r.name!r}", api="CreateTopics",
                               broker=address))

        results = await self._topic_batches(
            list(topics), CREATE_TOPICS, build, lambda resp: resp.topics, result,
            lambda name, error: CreateTopicResult(name, None, None, None, error), deadline)
        if raise_on_error:
            results.raise_first()
        return results

    async def delete_topics(
        self, names: Iterable[str], *, raise_on_error: bool = True, timeout: float | None = None,
    ) -> Results[str, DeleteTopicResult]:
        """Deletes topics by name (DeleteTopics, sent to the controller)."""
        deadline = self._deadline(timeout)

        def build(batch: list[str]) -> Callable[[int], Any]:
            def request(version: int) -> DeleteTopicsRequest:
                timeout_ms = self._timeout_ms(deadline)
                if version >= 6:
                    return DeleteTopicsRequest(topics=[DeleteTopicState(name=n) for n in batch], timeout_ms=timeout_ms)
                return DeleteTopicsRequest(topic_names=list(batch), timeout_ms=timeout_ms)
            return request

        def result(r: Any, address: str) -> DeleteTopicResult:
            return DeleteTopicResult(
                r.name, r.topic_id if r.topic_id != ZERO_UUID else None,
                error_for_code(r.error_code, r.error_message or f"topic {r.name!r}", api="DeleteTopics",
                               broker=address))

        results = await self._topic_batches(
            list(dict.fromkeys(names)), DELETE_TOPICS, build, lambda resp: resp.responses, result,
            lambda name, error: DeleteTopicResult(name, None, error), deadline)
        if raise_on_error:
            results.raise_first()
        return results

    async def create_partitions(
        self, new_partitions: Mapping[str, NewPartitions | int], *, validate_only: bool = False,
        raise_on_error: bool = True, timeout: float | None = None,
    ) -> Results[str, CreatePartitionsResult]:
        """Grows topics to a new partition count: {topic: NewPartitions(total) or the total} (CreatePartitions, sent
        to the controller).  Per-topic errors raise unless told not to."""
        deadline = self._deadline(timeout)
        wanted = {name: p if isinstance(p, NewPartitions) else NewPartitions(p) for name, p in new_partitions.items()}

        def build(names: list[str]) -> Callable[[int], Any]:
            body = [
                CreatePartitionsTopic(
                    name=name, count=wanted[name].total_count,
                    assignments=None if wanted[name].assignments is None else [
                        CreatePartitionsAssignment(broker_ids=list(ids)) for ids in wanted[name].assignments or ()])
                for name in names]
            return lambda v: CreatePartitionsRequest(
                topics=body, timeout_ms=self._timeout_ms(deadline), validate_only=validate_only)

        def result(r: Any, address: str) -> CreatePartitionsResult:
            return CreatePartitionsResult(r.name, error_for_code(
                r.error_code, r.error_message or f"topic {r.name!r}", api="CreatePartitions", broker=address))

        results = await self._topic_batches(
            list(wanted), CREATE_PARTITIONS, build, lambda resp: resp.results, result,
            lambda name, error: CreatePartitionsResult(name, error), deadline)
        if raise_on_error:
            results.raise_first()
        return results

    async def delete_records(
        self, before_offsets: Mapping[tuple[str, int], int], *, raise_on_error: bool = True,
        timeout: float | None = None,
    ) -> Results[tuple[str, int], DeleteRecordsResult]:
        """Deletes the records of each (topic, partition) below its offset (-1: the high watermark) by moving the
        log start offset (DeleteRecords, sent to each partition's leader).  Returns each partition's new low
        watermark; per-partition errors raise unless told not to."""

        def request(parts: dict[tuple[str, int], int], deadline: _Deadline) -> Callable[[int], Any]:
            by_topic: dict[str, list[DeleteRecordsPartition]] = {}
            for (topic, index), offset in parts.items():
                by_topic.setdefault(topic, []).append(DeleteRecordsPartition(partition_index=index, offset=offset))
            body = [DeleteRecordsTopic(name=name, partitions=ps) for name, ps in by_topic.items()]
            return lambda v: DeleteRecordsRequest(topics=body, timeout_ms=self._timeout_ms(deadline))

        out = await self._by_leader(
            before_offsets, DELETE_RECORDS, request,
            lambda tp, p: DeleteRecordsResult(tp[0], tp[1], p.low_watermark, None),
            lambda tp, error: DeleteRecordsResult(tp[0], tp[1], None, error), self._deadline(timeout))
        if raise_on_error:
            out.raise_first()
        return out

    async def _by_leader(
        self, wanted: Mapping[tuple[str, int], int], api_key: int,
        request: Callable[[dict[tuple[str, int], int], _Deadline], Callable[[int], Any]],
        answered: Callable[[tuple[str, int], Any], T], failed: Callable[[tuple[str, int], KafkaError], T],
        deadline: _Deadline, *, min_version: int | None = None,
        topics: Callable[[Any], Any] = lambda response: response.topics,
    ) -> Results[tuple[str, int], T]:
        """Sends a per-partition request (its response lists topics, each with partitions carrying error_code) to
        each partition's leader, all leaders at once; a partition whose leader is gone, moved or not elected yet
        is looked up again and resent after a backoff, until the deadline, which fails it with its last error (or
        a timeout).  `request(parts, deadline)` builds one leader's request, `answered(tp, partition)` and
        `failed(tp, error)` make the results, returned in the order of `wanted`; `topics(response)` finds the
        response's topics where they are not its `topics` field."""
        api = api_name(api_key)
        pending = dict(wanted)
        done: dict[tuple[str, int], T] = {}
        last_error: dict[tuple[str, int], KafkaError] = {}
        backoff = self._backoff()

        def finish(tp: tuple[str, int], p: Any, error: KafkaError | None) -> None:
            done[tp] = answered(tp, p) if error is None else failed(tp, error)
            pending.pop(tp, None)

        async def send(leader: int, parts: dict[tuple[str, int], int]) -> None:
            try:
                response, _, conn = await self._call(leader, api_key, request(parts, deadline), deadline,
                                                     retry=False, min_version=min_version)
            except AdminError as failure:
                if not failure.retriable:
                    raise
                for tp in parts:  # the leader is gone or moved: look it up again
                    last_error[tp] = failure
                self._metadata_stale = True
                return
            for t in topics(response):
                for p in t.partitions:
                    tp = (t.name, p.partition_index)
                    if tp not in parts:
                        continue
                    error = error_for_code(p.error_code, f"partition {t.name}-{p.partition_index}",
                                           api=api, broker=conn.address)
                    if error is None:
                        finish(tp, p, None)
                    elif p.error_code in _STALE_LEADER_CODES or error.retriable:
                        last_error[tp] = error
                    else:
                        finish(tp, None, error)
            for tp in parts:
                if tp in pending and tp not in last_error:
                    finish(tp, None, BrokerResponseError(
                        ErrorCode.UNKNOWN_SERVER_ERROR, f"no result for partition {tp[0]}-{tp[1]} in the response",
                        api=api, broker=conn.address))

        while pending:
            last_error = {tp: e for tp, e in last_error.items() if tp in pending}
            leaders = await self._leaders(pending, last_error, finish, deadline)
            await asyncio.gather(*(send(leader, parts) for leader, parts in leaders.items()))
            if not pending:
                break
            delay = backoff.next()
            if deadline.remaining() <= delay:
                for tp in list(pending):
                    finish(tp, None, last_error.get(tp) or RequestTimeoutError(
                        f"{api}: partition {tp[0]}-{tp[1]} not answered within {deadline.timeout:g}s"))
                break
            await asyncio.sleep(delay)
        out: Results[tuple[str, int], T] = Results()
        for tp in wanted:
            out[tp] = done[tp]
        return out

    async def _topic_batches(self, names: list[str], api_key: int, build: Callable[[list[str]], Any],
                             entries: Callable[[Any], Any], result: Callable[[Any, str], T],
                             missing: Callable[[str, KafkaError], T], deadline: _Deadline) -> Results[str, T]:
        """Sends a per-topic request to the controller, resending only the topics that got a retriable code."""
        done: dict[str, T] = {}
        pending = names
        backoff = self._backoff()
        while pending:
            response, _, conn = await self._call(_CONTROLLER, api_key, build(pending), deadline)
            retry = []
            delay = backoff.next()
            for entry in entries(response):
                if entry.name not in pending:
                    continue
                if entry.error_code in _TOPIC_RETRY_CODES and deadline.remaining() > delay:
                    retry.append(entry.name)
                    continue
                done[entry.name] = result(entry, conn.address)
            for name in pending:
                if name not in done and name not in retry:
                    done[name] = missing(name, BrokerResponseError(
                        ErrorCode.UNKNOWN_SERVER_ERROR, f"no result for topic {name!r} in the response",
                        api=api_name(api_key), broker=conn.address))
            pending = retry
            if pending:
                self._metadata_stale = True  # NOT_CONTROLLER: find the controller again
                await asyncio.sleep(delay)
        out: Results[str, T] = Results()
        for name in names:
            out[name] = done[name]
        return out

    # ============================================================================================ offsets

    async def list_offsets(
        self, specs: Mapping[tuple[str, int], int], *, raise_on_error: bool = True, timeout: float | None = None,
    ) -> Results[tuple[str, int], ListOffsetsResult]:
        """The offset of each (topic, partition) for its spec: OffsetSpec.EARLIEST, OffsetSpec.LATEST, or a time
        in ms (the first offset whose record is at or after it; None when there is none).  Sent to each partition's
        leader (ListOffsets), looked up again when the leader moved, until the deadline."""

        def request(parts: dict[tuple[str, int], int], _deadline: _Deadline) -> Callable[[int], Any]:
            by_topic: dict[str, list[ListOffsetsPartition]] = {}
            for (topic, index), spec in parts.items():
                by_topic.setdefault(topic, []).append(ListOffsetsPartition(partition_index=index, timestamp=spec))
            body = [ListOffsetsTopic(name=name, partitions=ps) for name, ps in by_topic.items()]
            return lambda v: ListOffsetsRequest(replica_id=-1, topics=body)

        def answered(tp: tuple[str, int], p: Any) -> ListOffsetsResult:
            return ListOffsetsResult(tp[0], tp[1], p.offset if p.offset >= 0 else None,
                                     p.timestamp if p.timestamp >= 0 else None,
                                     p.leader_epoch if p.leader_epoch >= 0 else None, None)

        out = await self._by_leader(
            specs, LIST_OFFSETS, request, answered,
            lambda tp, error: ListOffsetsResult(tp[0], tp[1], None, None, None, error), self._deadline(timeout),
            min_version=1)
        if raise_on_error:
            out.raise_first()
        return out

    async def _leaders(self, pending: Mapping[tuple[str, int], int], last_error: dict[tuple[str, int], KafkaError],
                       finish: Callable[[tuple[str, int], Any, KafkaError | None], None],
                       deadline: _Deadline) -> dict[int, dict[tuple[str, int], int]]:
        """Groups `pending` by current leader (Metadata); partitions that cannot exist are finished with their
        error, those without a leader yet get one in `last_error`."""
        md = await self._refresh_metadata(sorted({topic for topic, _ in pending}), deadline)
        leaders: dict[int, dict[tuple[str, int], int]] = {}
        for t in md.topics:
            partitions = {p.partition_index: p for p in t.partitions}
            for tp in [tp for tp in pending if tp[0] == t.name]:
                p = partitions.get(tp[1])
                code = t.error_code or (p.error_code if p is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                if code and code not in _STALE_LEADER_CODES:
                    finish(tp, None, error_for_code(code, f"partition {tp[0]}-{tp[1]}", api="Metadata"))
                elif code or p is None or p.leader_id < 0:
                    last_error[tp] = BrokerResponseError(
                        code or ErrorCode.LEADER_NOT_AVAILABLE, f"partition {tp[0]}-{tp[1]}", api="Metadata")
                else:
                    leaders.setdefault(p.leader_id, {})[tp] = pending[tp]
                    last_error.pop(tp, None)
        for tp in pending:
            if tp not in last_error and not any(tp in parts for parts in leaders.values()):
                last_error[tp] = BrokerResponseError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {tp[0]}-{tp[1]}", api="Metadata")
        return leaders

    # ============================================================================================ groups

    async def list_groups(self, *, states: Iterable[str] | None = None, types: Iterable[str] | None = None,
                          timeout: float | None = None) -> list[GroupListing]:
        """Every group of the cluster (ListGroups, asked of every broker: each lists the groups it coordinates),
        sorted by id.  `states` / `types` keep only groups in those states (Kafka's names, any case) / of those
        types; the filters go to the brokers (ListGroups v4 / v5) and are applied here too for older ones."""
        deadline = self._deadline(timeout)
        state_filter = sorted({s.strip() for s in states or () if s.strip()})
        type_filter = sorted({t.strip() for t in types or () if t.strip()})
        broker_ids = await self._broker_ids(None, deadline)

        def build(version: int) -> ListGroupsRequest:
            return ListGroupsRequest(states_filter=state_filter if version >= 4 else [],
                                     types_filter=type_filter if version >= 5 else [])

        async def one(broker_id: int) -> tuple[Any, int]:
            response, version, _ = await self._call(broker_id, LIST_GROUPS, build, deadline,
                                                    check=lambda r: r.error_code)
            return response, version

        answers = await asyncio.gather(*(one(b) for b in broker_ids))
        wanted_states = {s.lower() for s in state_filter}
        wanted_types = {t.lower() for t in type_filter}
        found: dict[str, GroupListing] = {}
        for response, version in answers:
            for g in response.groups:
                listing = GroupListing(g.group_id, g.protocol_type, g.group_state if version >= 4 else None,
                                       g.group_type if version >= 5 else None)
                if wanted_states and (listing.state or "").lower() not in wanted_states:
                    continue
                if wanted_types and (listing.type or "classic").lower() not in wanted_types:
                    continue
                found[g.group_id] = listing
        return [found[k] for k in sorted(found)]

    async def describe_groups(self, group_ids: Iterable[str], *,
                              timeout: float | None = None) -> Results[str, GroupDescription]:
        """Each group's state, protocol and members as its coordinator knows them (FindCoordinator, then, as
        Kafka's admin client does, ConsumerGroupDescribe to each coordinator for its groups, and DescribeGroups
        for those it does not know as KIP-848 groups, or to a broker without ConsumerGroupDescribe).  A classic
        consumer group's member assignments are decoded from the consumer protocol's bytes.  Errors are per
        group, in each result's `error`."""
        deadline = self._deadline(timeout)
        groups = list(dict.fromkeys(group_ids))

        async def send(node_id: int, batch: list[str]) -> dict[str, Any]:
            out: dict[str, Any] = {}
            coordinator = self._brokers.get(node_id)
            try:
                modern, _, conn = await self._call(
                    node_id, CONSUMER_GROUP_DESCRIBE, lambda v: ConsumerGroupDescribeRequest(group_ids=batch),
                    deadline, retry=False)
            except UnsupportedVersionError:
                modern = None
            if modern is not None:
                for g in modern.groups:
                    if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
                        continue  # a classic group, or none: DescribeGroups says which
                    error = error_for_code(g.error_code, f"group {g.group_id!r}", api="ConsumerGroupDescribe",
                                           broker=conn.address)
                    out[g.group_id] = error if error is not None else _consumer_group_description(g, coordinator)
                batch = [gid for gid in batch if gid not in out]
                if not batch:
                    return out
            response, _, conn = await self._call(
                node_id, DESCRIBE_GROUPS, lambda v: DescribeGroupsRequest(groups=batch), deadline, retry=False)
            for g in response.groups:
                # v6 (KIP-1043) names an unknown group GROUP_ID_NOT_FOUND; older versions describe it as Dead
                # without error, which is what callers here get either way
                code = 0 if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND else g.error_code
                error = error_for_code(code, f"group {g.group_id!r}", api="DescribeGroups", broker=conn.address)
                out[g.group_id] = error if error is not None else _group_description(g, coordinator)
            return out

        answers = await self._for_coordinators(groups, "DescribeGroups", send, deadline)
        results: Results[str, GroupDescription] = Results()
        for gid in groups:
            answer = answers[gid]
            results[gid] = answer if isinstance(answer, GroupDescription) else GroupDescription(
                gid, "Unknown", "", "", (), None, answer)
        return results

    async def list_group_offsets(
        self, group_ids: str | Iterable[str], *, partitions: Iterable[tuple[str, int]] | None = None,
        timeout: float | None = None,
    ) -> Results[str, GroupOffsets]:
        """The committed offsets of each group (OffsetFetch to its coordinator; several groups in one request
        from v8): all of them, or only `partitions`.  Errors are per group, in each result's `error`."""
        deadline = self._deadline(timeout)
        groups = [group_ids] if isinstance(group_ids, str) else list(dict.fromkeys(group_ids))
        topics: list[OffsetFetchRequestTopics] | None = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for topic, index in partitions:
                by_topic.setdefault(topic, []).append(index)
            topics = [OffsetFetchRequestTopics(name=t, partition_indexes=ps) for t, ps in by_topic.items()]

        def offsets_of(gid: str, entries: Any, address: str) -> GroupOffsets:
            offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
            first: KafkaError | None = None
            for t in entries:
                for p in t.partitions:
                    if p.error_code:
                        first = first or error_for_code(p.error_code, f"group {gid!r} partition {t.name}-"
                                                        f"{p.partition_index}", api="OffsetFetch", broker=address)
                    elif p.committed_offset >= 0:
                        offsets[(t.name, p.partition_index)] = OffsetAndMetadata(
                            p.committed_offset,
                            p.committed_leader_epoch if p.committed_leader_epoch >= 0 else None, p.metadata or "")
            return GroupOffsets(gid, offsets, first)

        async def send(node_id: int, batch: list[str]) -> dict[str, Any]:
            version = await self._version_for(node_id, OFFSET_FETCH, deadline)
            if version < 8:
                singles = await asyncio.gather(*(send_one(node_id, gid) for gid in batch))
                return {gid: value for gid, value in zip(batch, singles, strict=True)}
            request = OffsetFetchRequest(groups=[OffsetFetchRequestGroup(group_id=gid, topics=topics)
                                                 for gid in batch])
            response, _, conn = await self._call(node_id, OFFSET_FETCH, lambda v: request, deadline, min_version=8,
                                                 max_version=BY_NAME_MAX, retry=False)
            out: dict[str, Any] = {}
            for g in response.groups:
                error = error_for_code(g.error_code, f"group {g.group_id!r}", api="OffsetFetch", broker=conn.address)
                out[g.group_id] = error if error is not None else offsets_of(g.group_id, g.topics, conn.address)
            return out

        async def send_one(node_id: int, gid: str) -> Any:
            response, _, conn = await self._call(node_id, OFFSET_FETCH, lambda v: OffsetFetchRequest(
                group_id=gid, topics=None if topics is None else [
                    OffsetFetchRequestTopic(name=t.name, partition_indexes=t.partition_indexes) for t in topics]),
                deadline, min_version=2, retry=False)
            error = error_for_code(response.error_code, f"group {gid!r}", api="OffsetFetch", broker=conn.address)
            return error if error is not None else offsets_of(gid, response.topics, conn.address)

        answers = await self._for_coordinators(groups, "OffsetFetch", send, deadline)
        results: Results[str, GroupOffsets] = Results()
        for gid in groups:
            answer = answers[gid]
            results[gid] = answer if isinstance(answer, GroupOffsets) else GroupOffsets(gid, {}, answer)
        return results

    async def delete_groups(self, group_ids: Iterable[str], *,
                            timeout: float | None = None) -> Results[str, DeleteGroupResult]:
        """Deletes groups and their committed offsets (DeleteGroups to each coordinator).  Per-group errors:
        NON_EMPTY_GROUP while it has members, GROUP_ID_NOT_FOUND for a group that does not exist."""
        deadline = self._deadline(timeout)
        groups = list(dict.fromkeys(group_ids))

        async def send(node_id: int, batch: list[str]) -> dict[str, Any]:
            response, _, conn = await self._call(
                node_id, DELETE_GROUPS, lambda v: DeleteGroupsRequest(groups_names=batch), deadline, retry=False)
            return {r.group_id: error_for_code(r.error_code, f"group {r.group_id!r}", api="DeleteGroups",
                                               broker=conn.address) for r in response.results}

        answers = await self._for_coordinators(groups, "DeleteGroups", send, deadline)
        results: Results[str, DeleteGroupResult] = Results()
        for gid in groups:
            results[gid] = DeleteGroupResult(gid, answers[gid])
        return results

    # -------------------------------------------------------------------------------------------- share groups
    async def describe_share_groups(self, group_ids: Iterable[str], *,
                                    timeout: float | None = None) -> Results[str, ShareGroupDescription]:
        """Each KIP-932 share group as its coordinator describes it (ShareGroupDescribe).  A group that does not
        exist is described as Dead with no members (GROUP_ID_NOT_FOUND); other errors are per group."""
        from kjbod.protocol.generated import ShareGroupDescribeRequest

        deadline = self._deadline(timeout)
        groups = list(dict.fromkeys(group_ids))

        async def send(node_id: int, batch: list[str]) -> dict[str, Any]:
            coordinator = self._brokers.get(node_id)
            response, _, conn = await self._call(
                node_id, SHARE_GROUP_DESCRIBE, lambda v: ShareGroupDescribeRequest(group_ids=batch), deadline,
                retry=False)
            out: dict[str, Any] = {}
            for g in response.groups:
                if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
                    out[g.group_id] = ShareGroupDescription(g.group_id, "Dead", -1, -1, "", (), coordinator)
                    continue
                error = error_for_code(g.error_code, f"group {g.group_id!r}", api="ShareGroupDescribe",
                                       broker=conn.address)
                out[g.group_id] = error if error is not None else ShareGroupDescription(
                    g.group_id, g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name, tuple(
                        ShareMemberDescription(m.member_id, m.client_id, m.client_host, m.member_epoch, tuple(sorted(
                            (t.topic_name, p) for t in m.assignment.topic_partitions for p in t.partitions)))
                        for m in g.members), coordinator)
            return out

        answers = await self._for_coordinators(groups, "ShareGroupDescribe", send, deadline)
        results: Results[str, ShareGroupDescription] = Results()
        for gid in groups:
            answer = answers[gid]
            results[gid] = answer if isinstance(answer, ShareGroupDescription) else ShareGroupDescription(
                gid, "Unknown", -1, -1, "", (), None, answer)
        return results

    async def list_share_group_offsets(
        self, group_id: str, *, partitions: Iterable[tuple[str, int]] | None = None, timeout: float | None = None,
    ) -> dict[tuple[str, int], SharePartitionOffset]:
        """Where a share group's share-partitions start (DescribeShareGroupOffsets to its coordinator): every
        partition it has share state for, or only `partitions`.  Raises the group's error."""
        from kjbod.protocol.generated import DescribeShareGroupOffsetsRequest
        from kjbod.protocol.generated.describe_share_group_offsets_request import (
            DescribeShareGroupOffsetsRequestGroup,
            DescribeShareGroupOffsetsRequestTopic,
        )

        deadline = self._deadline(timeout)
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for topic, index in partitions:
                by_topic.setdefault(topic, []).append(index)
            topics = [DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps) for t, ps in by_topic.items()]
        request = DescribeShareGroupOffsetsRequest(groups=[DescribeShareGroupOffsetsRequestGroup(
            group_id=group_id, topics=topics)])

        async def send(node_id: int, batch: list[str]) -> dict[str, Any]:
            response, version, conn = await self._call(node_id, DESCRIBE_SHARE_GROUP_OFFSETS, lambda v: request,
                                                       deadline, retry=False)
            out: dict[str, Any] = {}
            for g in response.groups:
                error = error_for_code(g.error_code, f"group {g.group_id!r}", api="DescribeShareGroupOffsets",
                                       broker=conn.address)
                if error is not None:
                    out[g.group_id] = error
                    continue
                found = {}
                for t in g.topics:
                    for p in t.partitions:
                        known = p.error_code == 0 and p.start_offset >= 0
                        found[(t.topic_name, p.partition_index)] = SharePartitionOffset(
                            t.topic_name, p.partition_index, p.start_offset if known else None,
                            p.leader_epoch if known else None, p.lag if known and version >= 1 and p.lag >= 0
                            else None)
                out[g.group_id] = found
            return out

        answer = (await self._for_coordinators([group_id], "DescribeShareGroupOffsets", send, deadline))[group_id]
        if isinstance(answer, KafkaError):
            raise answer
        return answer

    async def alter_share_group_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], int], *,
                                        timeout: float | None = None) -> ShareOffsetsChangeResult:
        """Sets where an empty share group's share-partitions start (AlterShareGroupOffsets)."""
        from kjbod.protocol.generated import AlterShareGroupOffsetsRequest
        from kjbod.protocol.generated.alter_share_group_offsets_request import (
            AlterShareGroupOffsetsRequestPartition,
            AlterShareGroupOffsetsRequestTopic,
        )

        deadline = self._deadline(timeout)
        by_topic: dict[str, list[AlterShareGroupOffsetsRequestPartition]] = {}
        for (topic, index), offset in offsets.items():
            by_topic.setdefault(topic, []).append(AlterShareGroupOffsetsRequestPartition(
                partition_index=index, start_offset=offset))
        request = AlterShareGroupOffsetsRequest(group_id=group_id, topics=[
            AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps) for t, ps in by_topic.items()])

        async def send(node_id: int, batch: list[str]) -> dict[str, Any]:
            response, _, conn = await self._call(node_id, ALTER_SHARE_GROUP_OFFSETS, lambda v: request, deadline,
                                                 retry=False)
            group_error = error_for_code(response.error_code, response.error_message or f"group {group_id!r}",
                                         api="AlterShareGroupOffsets",
                                         broker=conn.address)
            if group_error is not None and group_error.retriable:
                return {group_id: group_error}
            items: dict[Any, KafkaError | None] = {}
            for t in response.responses:
                for p in t.partitions:
                    items[(t.topic_name, p.partition_index)] = error_for_code(
                        p.error_code, f"group {group_id!r} partition {t.topic_name}-{p.partition_index}",
                        api="AlterShareGroupOffsets", broker=conn.address)
            first = group_error or next((e for e in items.values() if e is not None), None)
            return {group_id: ShareOffsetsChangeResult(group_id, items, first)}

        answer = (await self._for_coordinators([group_id], "AlterShareGroupOffsets", send, deadline))[group_id]
        return answer if isinstance(answer, ShareOffsetsChangeResult) else \
            ShareOffsetsChangeResult(group_id, {}, answer)

    async def delete_share_group_offsets(self, group_id: str, topics: Iterable[str], *,
                                         timeout: float | None = None) -> ShareOffsetsChangeResult:
        """Makes an empty share group forget the share state of whole topics (DeleteShareGroupOffsets)."""
        from kjbod.protocol.generated import DeleteShareGroupOffsetsRequest
        from kjbod.protocol.generated.delete_share_group_offsets_request import (
            DeleteShareGroupOffsetsRequestTopic,
        )

        deadline = self._deadline(timeout)
        names = list(dict.fromkeys(topics))
        request = DeleteShareGroupOffsetsRequest(group_id=group_id, topics=[
            DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in names])

        async def send(node_id: int, batch: list[str]) -> dict[str, Any]:
            response, _, conn = await self._call(node_id, DELETE_SHARE_GROUP_OFFSETS, lambda v: request, deadline,
                                                 retry=False)
            group_error = error_for_code(response.error_code, response.error_message or f"group {group_id!r}",
                                         api="DeleteShareGroupOffsets",
                                         broker=conn.address)
            if group_error is not None and group_error.retriable:
                return {group_id: group_error}
            items: dict[Any, KafkaError | None] = {}
            for t in response.responses:
                error = error_for_code(t.error_code, f"group {group_id!r} topic {t.topic_name}",
                                       api="DeleteShareGroupOffsets", broker=conn.address)
                if error is not None and t.error_message:
                    error = BrokerResponseError(t.error_code, t.error_message, api="DeleteShareGroupOffsets",
                                                broker=conn.address)
                items[t.topic_name] = error
            first = group_error or next((e for e in items.values() if e is not None), None)
            return {group_id: ShareOffsetsChangeResult(group_id, items, first)}

        answer = (await self._for_coordinators([group_id], "DeleteShareGroupOffsets", send, deadline))[group_id]
        return answer if isinstance(answer, ShareOffsetsChangeResult) else \
            ShareOffsetsChangeResult(group_id, {}, answer)

    async def alter_group_offsets(
        self, group_id: str, offsets: Mapping[tuple[str, int], int | OffsetAndMetadata], *,
        timeout: float | None = None,
    ) -> GroupOffsetsChangeResult:
        """Commits `offsets` for a group from outside it (OffsetCommit with generation -1 and no member id, as
        Kafka's admin client sends it).  The coordinator accepts it only while the group has no members: an
        active group answers UNKNOWN_MEMBER_ID for each partition."""
        deadline = self._deadline(timeout)
        wanted = {tp: o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(o) for tp, o in offsets.items()}
        by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
        for (topic, index), o in wanted.items():
            by_topic.setdefault(topic, []).append(OffsetCommitRequestPartition(
                partition_index=index, committed_offset=o.offset,
                committed_leader_epoch=-1 if o.leader_epoch is None else o.leader_epoch,
                committed_metadata=o.metadata))
        request = OffsetCommitRequest(group_id=group_id, generation_id_or_member_epoch=-1, member_id="",
                                      topics=[OffsetCommitRequestTopic(name=t, partitions=ps)
                                              for t, ps in by_topic.items()])

        async def send(node_id: int, batch: list[str]) -> dict[str, Any]:
            response, _, conn = await self._call(node_id, OFFSET_COMMIT, lambda v: request, deadline, min_version=2,
                                                 max_version=BY_NAME_MAX, retry=False)
            codes = {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}
            coordinator_code = next((c for c in codes.values() if c in _COORDINATOR_CODES), 0)
            if coordinator_code:  # the group is not (or not yet) here: find its coordinator again
                return {group_id: BrokerResponseError(coordinator_code, f"group {group_id!r}", api="OffsetCommit",
                                                      broker=conn.address)}
            return {group_id: _change_result(group_id, wanted, codes, None, "OffsetCommit", conn.address)}

        answer = (await self._for_coordinators([group_id], "OffsetCommit", send, deadline))[group_id]
        if isinstance(answer, GroupOffsetsChangeResult):
            return answer
        return GroupOffsetsChangeResult(group_id, dict.fromkeys(wanted, answer), answer)

    async def delete_group_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]], *, timeout: float | None = None,
    ) -> GroupOffsetsChangeResult:
        """Deletes a group's committed offsets of `partitions` (OffsetDelete).  The group's error is
        GROUP_ID_NOT_FOUND, or NON_EMPTY_GROUP for an active group that is not a consumer group; an active
        consumer group refuses only the partitions of topics its members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC
        per partition)."""
        deadline = self._deadline(timeout)
        wanted = list(dict.fromkeys(partitions))
        by_topic: dict[str, list[OffsetDeleteRequestPartition]] = {}
        for topic, index in wanted:
            by_topic.setdefault(topic, []).append(OffsetDeleteRequestPartition(partition_index=index))
        request = OffsetDeleteRequest(group_id=group_id, topics=[
            OffsetDeleteRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()])

        async def send(node_id: int, batch: list[str]) -> dict[str, Any]:
            response, _, conn = await self._call(node_id, OFFSET_DELETE, lambda v: request, deadline, retry=False)
            if response.error_code in _COORDINATOR_CODES:
                return {group_id: BrokerResponseError(response.error_code, f"group {group_id!r}",
                                                      api="OffsetDelete", broker=conn.address)}
            codes = {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}
            group_error = error_for_code(response.error_code, f"group {group_id!r}", api="OffsetDelete",
                                         broker=conn.address)
            return {group_id: _change_result(group_id, dict.fromkeys(wanted), codes, group_error, "OffsetDelete",
                                             conn.address)}

        answer = (await self._for_coordinators([group_id], "OffsetDelete", send, deadline))[group_id]
        if isinstance(answer, GroupOffsetsChangeResult):
            return answer
        return GroupOffsetsChangeResult(group_id, dict.fromkeys(wanted, answer), answer)

    async def find_group_coordinators(self, group_ids: Iterable[str], *,
                                      timeout: float | None = None) -> dict[str, BrokerNode | KafkaError]:
        """The coordinator of each group (FindCoordinator, one request for all from v4), or why not."""
        deadline = self._deadline(timeout)
        groups = list(dict.fromkeys(group_ids))
        found = await self._find_coordinators(groups, deadline)
        return {g: v if isinstance(v, KafkaError) else self._brokers[v] for g, v in found.items()}

    async def _version_for(self, target: Target, api_key: int, deadline: _Deadline) -> int:
        conn = await self._connection_for(target, deadline)
        return conn.pick_version(api_key, None)

    async def _find_coordinators(self, groups: list[str], deadline: _Deadline,
                                 key_type: int = 0) -> dict[str, int | KafkaError]:
        """{group (or transactional id, key_type 1): coordinator node id, or the error FindCoordinator answered
        for it}."""
        if not groups:
            return {}
        out: dict[str, int | KafkaError] = {}

        def record(key: str, code: int, message: str | None, node_id: int, host: str, port: int,
                   address: str) -> None:
            if code:
                out[key] = BrokerResponseError(code, message or f"group {key!r}", api="FindCoordinator",
                                               broker=address)
                return
            if node_id not in self._brokers:
                self._brokers[node_id] = BrokerNode(node_id, host, port)
            out[key] = node_id

        version = await self._version_for(None, FIND_COORDINATOR, deadline)
        if version >= 4:
            response, _, conn = await self._call(None, FIND_COORDINATOR, lambda v: FindCoordinatorRequest(
                key_type=key_type, coordinator_keys=groups), deadline, min_version=4)
            for c in response.coordinators:
                record(c.key, c.error_code, c.error_message, c.node_id, c.host, c.port, conn.address)
        else:
            async def one(key: str) -> None:
                response, _, conn = await self._call(
                    None, FIND_COORDINATOR, lambda v: FindCoordinatorRequest(key=key, key_type=key_type), deadline)
                record(key, response.error_code, response.error_message, response.node_id, response.host,
                       response.port, conn.address)
            await asyncio.gather(*(one(g) for g in groups))
        for g in groups:
            out.setdefault(g, BrokerResponseError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no coordinator for group {g!r}"
                                                  " in the response", api="FindCoordinator"))
        return out

    async def _for_coordinators(
        self, groups: list[str], api: str, send: Callable[[int, list[str]], Any], deadline: _Deadline,
        key_type: int = 0,
    ) -> dict[str, Any]:
        """Runs a per-group request against each group's coordinator, as Kafka's admin client does: find the
        coordinators, send each its groups (`send(node id, groups)` -> {group: value or KafkaError}, one attempt:
        the retries are made here, where a group can be sent elsewhere), and for a
        group answered with NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE (or whose coordinator cannot be reached)
        find its coordinator again, for COORDINATOR_LOAD_IN_PROGRESS ask again, with backoff until the deadline;
        then the group keeps its last error.  Returns {group: value or KafkaError}."""
        done: dict[str, Any] = {}
        last: dict[str, KafkaError] = {}
        coordinators: dict[str, int] = {}
        pending = list(groups)
        backoff = self._backoff()
        while pending:
            need = [g for g in pending if g not in coordinators]
            if need:
                try:
                    found = await self._find_coordinators(need, deadline, key_type)
                except AdminError as error:
                    if not error.retriable:
                        raise
                    found = dict.fromkeys(need, error)
                for g, value in found.items():
                    if isinstance(value, KafkaError):
                        if value.retriable:
                            last[g] = value
                        else:
                            done[g] = value
                    else:
                        coordinators[g] = value
            by_node: dict[int, list[str]] = {}
            for g in pending:
                if g in coordinators and g not in done:
                    by_node.setdefault(coordinators[g], []).append(g)
            nodes = list(by_node)
            answers = await asyncio.gather(*(send(n, by_node[n]) for n in nodes), return_exceptions=True)
            for node_id, answer in zip(nodes, answers, strict=True):
                batch = by_node[node_id]
                if isinstance(answer, BaseException):
                    if not isinstance(answer, KafkaError):
                        raise answer
                    # The coordinator is gone, slow, or no longer in the broker list: look it up again.
                    again = answer.retriable or answer.code == ErrorCode.BROKER_NOT_AVAILABLE
                    if again:
                        self._metadata_stale = True
                    # The call's own deadline running out mid-request says less than the error a group had
                    # before it (COORDINATOR_LOAD_IN_PROGRESS, say): that one is kept.
                    expired = isinstance(answer, RequestTimeoutError) and deadline.remaining() <= 0
                    for g in batch:
                        if again:
                            if not (expired and g in last):
                                last[g] = answer
                            coordinators.pop(g, None)
                        else:
                            done[g] = answer
                    continue
                for g in batch:
                    value = answer.get(g, _MISSING)
                    if value is _MISSING:
                        done[g] = BrokerResponseError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                                      f"no result for group {g!r} in the response", api=api)
                    elif isinstance(value, KafkaError) and value.code in _COORDINATOR_CODES:
                        last[g] = value
                        if value.code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                            coordinators.pop(g, None)
                    else:
                        done[g] = value
            pending = [g for g in pending if g not in done]
            if not pending:
                break
            delay = backoff.next()
            if deadline.remaining() <= delay:
                for g in pending:
                    done[g] = last.get(g) or RequestTimeoutError(
                        f"{api}: group {g!r} not answered within {deadline.timeout:g}s")
                break
            log.debug("retrying", api=api, groups=pending, delay=round(delay, 3))
            await asyncio.sleep(delay)
        return done

    # ============================================================================================ transactions

    async def describe_producers(
        self, partitions: Iterable[tuple[str, int]], *, broker_id: int | None = None, raise_on_error: bool = True,
        timeout: float | None = None,
    ) -> Results[tuple[str, int], PartitionProducers]:
        """The producers each partition's leader keeps state for (DescribeProducers; `broker_id`: ask that broker,
        leader or not, as kafka-transactions.sh's --broker-id)."""
        deadline = self._deadline(timeout)
        wanted = dict.fromkeys(partitions, 0)

        def build(parts: Iterable[tuple[str, int]]) -> Callable[[int], Any]:
            by_topic: dict[str, list[int]] = {}
            for topic, index in parts:
                by_topic.setdefault(topic, []).append(index)
            body = [ProducersTopicRequest(name=name, partition_indexes=ps) for name, ps in by_topic.items()]
            return lambda v: DescribeProducersRequest(topics=body)

        def answered(tp: tuple[str, int], p: Any) -> PartitionProducers:
            return PartitionProducers(tp[0], tp[1], tuple(
                ProducerState(s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp, s.coordinator_epoch,
                              s.current_txn_start_offset if s.current_txn_start_offset >= 0 else None)
                for s in p.active_producers))

        def failed(tp: tuple[str, int], error: KafkaError) -> PartitionProducers:
            return PartitionProducers(tp[0], tp[1], (), error)

        out: Results[tuple[str, int], PartitionProducers]
        if broker_id is None:
            out = await self._by_leader(wanted, DESCRIBE_PRODUCERS, lambda parts, _d: build(parts), answered,
                                        failed, deadline)
        else:
            response, _, conn = await self._call(broker_id, DESCRIBE_PRODUCERS, build(wanted), deadline)
            got = {(t.name, p.partition_index): p for t in response.topics for p in t.partitions}
            out = Results()
            for tp in wanted:
                p = got.get(tp)
                error = BrokerResponseError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no result for partition {tp[0]}-{tp[1]}",
                                            api="DescribeProducers", broker=conn.address) if p is None else \
                    error_for_code(p.error_code, f"partition {tp[0]}-{tp[1]}", api="DescribeProducers",
                                   broker=conn.address)
                out[tp] = failed(tp, error) if error is not None else answered(tp, p)
        if raise_on_error:
            out.raise_first()
        return out

    async def abort_transaction(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                                coordinator_epoch: int, *, timeout: float | None = None) -> None:
        """Ends a producer's open transaction on one partition with an abort marker written by the partition's
        leader (WriteTxnMarkers, as Kafka's Admin.abortTransaction and kafka-transactions.sh's abort: for a
        hanging transaction its coordinator no longer knows). A coordinator epoch below 0 (no marker written
        yet) is sent as 0. Raises the partition's error: INVALID_PRODUCER_EPOCH when the producer has moved on,
        TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch than the partition has seen,
        CLUSTER_AUTHORIZATION_FAILED without CLUSTER_ACTION."""
        marker = WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=False,
            topics=[WritableTxnMarkerTopic(name=topic, partition_indexes=[partition])],
            coordinator_epoch=max(coordinator_epoch, 0))
        out = await self._by_leader(
            {(topic, partition): 0}, WRITE_TXN_MARKERS, lambda parts, _d: lambda v: WriteTxnMarkersRequest(
                markers=[marker]), lambda tp, p: None, lambda tp, error: error, self._deadline(timeout),
            topics=lambda response: [t for m in response.markers for t in m.topics])
        error = out[(topic, partition)]
        if error is not None:
            raise error

    async def list_transactions(self, *, states: Iterable[str] | None = None,
                                producer_ids: Iterable[int] | None = None, duration_ms: int | None = None,
                                transactional_id_pattern: str | None = None,
                                timeout: float | None = None) -> list[TransactionListing]:
        """Every transaction of the cluster (ListTransactions, asked of every broker: each lists those it
        coordinates), by transactional id; the filters (Kafka's state names, producer ids, running longer than
        `duration_ms`, ListTransactions v1; ids matching `transactional_id_pattern` whole, v2) are the brokers'."""
        deadline = self._deadline(timeout)
        broker_ids = await self._broker_ids(None, deadline)
        state_filter = sorted(set(states or ()))
        pid_filter = sorted(set(producer_ids or ()))

        def build(version: int) -> ListTransactionsRequest:
            return ListTransactionsRequest(state_filters=state_filter, producer_id_filters=pid_filter,
                                           duration_filter=duration_ms if duration_ms is not None else -1,
                                           transactional_id_pattern=transactional_id_pattern or None)

        needs = 2 if transactional_id_pattern else 1 if duration_ms is not None else None

        async def one(broker_id: int) -> list[TransactionListing]:
            response, _, _ = await self._call(broker_id, LIST_TRANSACTIONS, build, deadline,
                                              check=lambda r: r.error_code, min_version=needs)
            return [TransactionListing(s.transactional_id, broker_id, s.producer_id, s.transaction_state)
                    for s in response.transaction_states]

        answers = await asyncio.gather(*(one(b) for b in broker_ids))
        return sorted((t for listing in answers for t in listing), key=lambda t: t.transactional_id)

    async def describe_transactions(self, transactional_ids: Iterable[str], *,
                                    timeout: float | None = None) -> Results[str, TransactionDescription]:
        """Each transactional id as its coordinator knows it (FindCoordinator, then DescribeTransactions to each
        coordinator for its ids).  Errors are per id, in each result's `error`."""
        deadline = self._deadline(timeout)
        ids = list(dict.fromkeys(transactional_ids))

        async def send(node_id: int, batch: list[str]) -> dict[str, Any]:
            response, _, conn = await self._call(
                node_id, DESCRIBE_TRANSACTIONS, lambda v: DescribeTransactionsRequest(transactional_ids=batch),
                deadline, retry=False)
            out: dict[str, Any] = {}
            for s in response.transaction_states:
                error = error_for_code(s.error_code, f"transactional id {s.transactional_id!r}",
                                       api="DescribeTransactions", broker=conn.address)
                out[s.transactional_id] = error if error is not None else TransactionDescription(
                    s.transactional_id, node_id, s.transaction_state, s.producer_id, s.producer_epoch,
                    s.transaction_timeout_ms, s.transaction_start_time_ms if s.transaction_start_time_ms >= 0 else None,
                    tuple((t.topic, p) for t in s.topics for p in t.partitions))
            return out

        answers = await self._for_coordinators(ids, "DescribeTransactions", send, deadline, key_type=1)
        results: Results[str, TransactionDescription] = Results()
        for tid in ids:
            answer = answers[tid]
            results[tid] = answer if isinstance(answer, TransactionDescription) else TransactionDescription(
                tid, -1, "Unknown", -1, -1, 0, None, (), answer)
        return results

    # ============================================================================================ reassignments

    async def alter_partition_reassignments(
        self, targets: Mapping[tuple[str, int], Sequence[int] | None], *,
        directories: Mapping[tuple[str, int], Sequence[UUID]] | None = None,
        allow_replication_factor_change: bool = True, timeout: float | None = None,
    ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """Starts (a replica list), or cancels (None), reassignments: {(topic, partition): (error code,
        message)}.  `directories` names a log dir per target replica (kjbod's TargetDirectories extension; the
        zero uuid lets the broker pick)."""
        deadline = self._deadline(timeout)
        by_topic: dict[str, list[ReassignablePartition]] = {}
        for (topic, index), replicas in targets.items():
            by_topic.setdefault(topic, []).append(ReassignablePartition(
                partition_index=index, replicas=None if replicas is None else list(replicas),
                target_directories=list((directories or {}).get((topic, index), ()))))
        body = [ReassignableTopic(name=name, partitions=parts) for name, parts in by_topic.items()]
        response, _, _ = await self._call(_CONTROLLER, ALTER_PARTITION_REASSIGNMENTS, lambda v: (
            AlterPartitionReassignmentsRequest(timeout_ms=self._timeout_ms(deadline), topics=body,
                                               allow_replication_factor_change=allow_replication_factor_change)),
            deadline, check=lambda r: r.error_code, message=lambda r: r.error_message,
            min_version=0 if allow_replication_factor_change else 1)
        return {(t.name, p.partition_index): (p.error_code, p.error_message)
                for t in response.responses for p in t.partitions}

    async def list_partition_reassignments(
        self, partitions: Mapping[str, Sequence[int]] | None = None, *, include_batches: bool = False,
        timeout: float | None = None,
    ) -> dict[tuple[str, int], Any]:
        """Reassignments in progress: {(topic, partition): the response's OngoingPartitionReassignment}, with the
        current KIP-435 step (BatchCurrentReplicas/BatchTargetReplicas) when `include_batches`."""
        deadline = self._deadline(timeout)
        topics = None if partitions is None else [
            ListPartitionReassignmentsTopics(name=n, partition_indexes=list(ps)) for n, ps in partitions.items()]
        response, _, _ = await self._call(_CONTROLLER, LIST_PARTITION_REASSIGNMENTS, lambda v: (
            ListPartitionReassignmentsRequest(timeout_ms=self._timeout_ms(deadline), topics=topics,
                                              include_batches=include_batches)),
            deadline, check=lambda r: r.error_code, message=lambda r: r.error_message)
        return {(t.name, p.partition_index): p for t in response.topics for p in t.partitions}

    async def elect_leaders(
        self, election_type: int, partitions: Iterable[tuple[str, int]] | None = None, *,
        timeout: float | None = None,
    ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """Leader elections (ElectLeaders): ``election_type`` 0 moves leadership to each partition's preferred
        replica, 1 (unclean) elects any live replica where a partition has no leader; ``partitions`` None for
        every partition. {(topic, partition): (error code, message)}, ELECTION_NOT_NEEDED where nothing had to
        change; a refusal of the whole request (CLUSTER_AUTHORIZATION_FAILED) raises."""
        deadline = self._deadline(timeout)
        topics: list[ElectTopicPartitions] | None = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for topic, index in partitions:
                by_topic.setdefault(topic, []).append(index)
            topics = [ElectTopicPartitions(topic=t, partitions=ps) for t, ps in by_topic.items()]
        response, _, _ = await self._call(_CONTROLLER, ELECT_LEADERS, lambda v: ElectLeadersRequest(
            election_type=election_type, topic_partitions=topics, timeout_ms=self._timeout_ms(deadline)),
            deadline, check=lambda r: r.error_code, min_version=0 if election_type == 0 else 1)
        return {(r.topic, p.partition_id): (p.error_code, p.error_message)
                for r in response.replica_election_results for p in r.partition_result}

    # ============================================================================================ KIP-179

    async def reassign_partitions(
        self, targets: Mapping[tuple[str, int], Sequence[int]], *, throttle: int | None = None,
        remove_throttle: bool = True, validate_only: bool = False,
        directories: Mapping[tuple[str, int], Sequence[UUID]] | None = None,
        allow_replication_factor_change: bool = True, additional: bool = False, timeout: float | None = None,
    ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """Starts reassignments with an inter-broker throttle in one request (kjbod's ReassignPartitions,
        KIP-179): {(topic, partition): (error code, message)}.

        `throttle` (bytes/s, None for none) is set as both rates on every broker of the moving partitions and
        their replicas as the throttled ones (leaders: the current replicas, followers: the new ones), in the
        same metadata batch that starts the moves; with `remove_throttle` the controller removes what it set as
        each partition's reassignment ends.  `additional` starts even while other reassignments run (else
        REASSIGNMENT_IN_PROGRESS).  `directories` names a log dir per target replica (zero uuid: the broker
        picks).  An Apache Kafka broker lacks the API: UnsupportedVersionError."""
        deadline = self._deadline(timeout)
        by_topic: dict[str, list[PartitionReassignment]] = {}
        for (topic, index), replicas in targets.items():
            by_topic.setdefault(topic, []).append(PartitionReassignment(
                partition_id=index, brokers=list(replicas),
                target_directories=list((directories or {}).get((topic, index), ()))))
        body = [TopicReassignment(topic=name, partition_reassignments=parts) for name, parts in by_topic.items()]
        response, _, _ = await self._call(_CONTROLLER, REASSIGN_PARTITIONS, lambda v: ReassignPartitionsRequest(
            topic_reassignments=body, timeout_ms=self._timeout_ms(deadline), validate_only=validate_only,
            throttle=NO_THROTTLE if throttle is None else throttle, remove_throttle=remove_throttle,
            allow_replication_factor_change=allow_replication_factor_change, additional=additional), deadline)
        return {(t.topic, p.partition_id): (p.error_code, p.error_message)
                for t in response.reassign_partition_results for p in t.partition_errors}

    async def alter_interbroker_throttled_rates(
        self, rates: Mapping[int, ThrottledRate | tuple[int, int]], *, remove_throttle: bool = True,
        validate_only: bool = False, timeout: float | None = None,
    ) -> dict[int, tuple[int, str | None]]:
        """Sets `leader.replication.throttled.rate` / `follower.replication.throttled.rate` per broker
        ({broker id: (leader rate, follower rate)}, bytes/s) through the controller (kjbod's
        AlterInterbrokerThrottledRates, KIP-179): {broker id: (error code, message)}.  With `remove_throttle`
        the controller removes each broker's rates once no reassignment in progress involves it (a broker no
        reassignment involves now is refused with NO_REASSIGNMENT_IN_PROGRESS)."""
        deadline = self._deadline(timeout)
        body = [BrokerThrottle(broker_id=b, leader_rate=r[0], follower_rate=r[1]) for b, r in rates.items()]
        response, _, _ = await self._call(
            _CONTROLLER, ALTER_INTERBROKER_THROTTLED_RATES, lambda v: AlterInterbrokerThrottledRatesRequest(
                broker_throttles=body, remove_throttle=remove_throttle, timeout_ms=self._timeout_ms(deadline),
                validate_only=validate_only), deadline)
        return {e.broker_id: (e.error_code, e.error_message) for e in response.broker_errors}

    async def alter_interbroker_throttled_replicas(
        self, replicas: Mapping[tuple[str, int], ThrottledReplicas | tuple[Sequence[int], Sequence[int]]], *,
        remove_throttle: bool = True, validate_only: bool = False, timeout: float | None = None,
    ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """Adds `partition:broker` entries to topics' `leader.replication.throttled.replicas` /
        `follower.replication.throttled.replicas` ({(topic, partition): (leaders, followers)}), merged with
        what is there (kjbod's AlterInterbrokerThrottledReplicas, KIP-179): {(topic, partition): (error code,
        message)}.  With `remove_throttle` the controller removes the entries it added when the partition's
        reassignment ends (a partition not being reassigned is refused with NO_REASSIGNMENT_IN_PROGRESS)."""
        deadline = self._deadline(timeout)
        by_topic: dict[str, list[PartitionThrottle]] = {}
        for (topic, index), (leaders, followers) in replicas.items():
            by_topic.setdefault(topic, []).append(PartitionThrottle(
                partition_id=index, leaders=list(leaders), followers=list(followers)))
        body = [TopicThrottle(topic=name, partition_throttles=parts) for name, parts in by_topic.items()]
        response, _, _ = await self._call(
            _CONTROLLER, ALTER_INTERBROKER_THROTTLED_REPLICAS, lambda v: AlterInterbrokerThrottledReplicasRequest(
                topic_throttles=body, remove_throttle=remove_throttle, timeout_ms=self._timeout_ms(deadline),
                validate_only=validate_only), deadline)
        return {(t.topic, p.partition_id): (p.error_code, p.error_message)
                for t in response.topic_errors for p in t.partition_errors}

    # ============================================================================================ configs

    async def describe_configs(
        self,
        resources: Iterable[ConfigResource | tuple[int, str]],
        *,
        keys: Iterable[str] | None = None,
        include_synonyms: bool = False,
        include_documentation: bool = False,
        timeout: float | None = None,
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        """Configs of topics and brokers (DescribeConfigs; a broker's own configs are asked of that broker).

        `keys` limits the answer to those keys (None: all).  A resource the broker reports an error for raises.
        """
        deadline = self._deadline(timeout)
        wanted = [_resource(r) for r in resources]
        key_list = None if keys is None else list(keys)
        groups = _group_by_target(wanted)

        async def one(target: Target, batch: list[ConfigResource]) -> list[tuple[Any, str]]:
            resources = [DescribeConfigsResource(resource_type=r.type, resource_name=r.name,
                                                 configuration_keys=key_list) for r in batch]

            def build(version: int) -> DescribeConfigsRequest:
                # Documentation exists from v3; an older broker simply answers without it.
                return DescribeConfigsRequest(resources=resources, include_synonyms=include_synonyms,
                                              include_documentation=include_documentation and version >= 3)

            response, _, conn = await self._call(target, DESCRIBE_CONFIGS, build, deadline)
            return [(r, conn.address) for r in response.results]

        answers = await asyncio.gather(*(one(t, b) for t, b in groups.items()))
        by_resource = {(r.resource_type, r.resource_name): (r, a) for answer in answers for r, a in answer}
        out: dict[ConfigResource, dict[str, ConfigEntry]] = {}
        for resource in wanted:
            found = by_resource.get((resource.type, resource.name))
            if found is None:
                raise BrokerResponseError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no result for {resource}",
                                          api="DescribeConfigs")
            r, address = found
            if r.error_code:
                raise BrokerResponseError(r.error_code, r.error_message or f"{resource.type.name} {resource.name!r}",
                                          api="DescribeConfigs", broker=address)
            out[resource] = {
                c.name: ConfigEntry(
                    c.name, c.value, _source(c.config_source), c.read_only, c.is_sensitive, c.config_type,
                    c.documentation or None,
                    tuple(ConfigSynonym(s.name, s.value, _source(s.source)) for s in c.synonyms))
                for c in r.configs}
        return out

    async def incremental_alter_configs(
        self,
        changes: Mapping[ConfigResource | tuple[int, str], Iterable[AlterConfigOp] | Mapping[str, str | None]],
        *,
        validate_only: bool = False,
        raise_on_error: bool = True,
        timeout: float | None = None,
    ) -> Results[ConfigResource, AlterConfigsResult]:
        """Sets, deletes, appends to or subtracts from config values (IncrementalAlterConfigs).

        Per resource, either `AlterConfigOp`s or {key: value} where value None deletes the key.
        """
        deadline = self._deadline(timeout)
        ops: dict[ConfigResource, list[AlterConfigOp]] = {}
        for resource, change in changes.items():
            if isinstance(change, Mapping):
                ops[_resource(resource)] = [
                    AlterConfigOp(k, None, AlterConfigOpType.DELETE) if v is None else AlterConfigOp(k, v)
                    for k, v in change.items()]
            else:
                ops[_resource(resource)] = list(change)
        groups = _group_by_target(list(ops))

        async def one(target: Target, batch: list[ConfigResource]) -> list[tuple[Any, str]]:
            request = IncrementalAlterConfigsRequest(
                resources=[AlterConfigsResource(
                    resource_type=r.type, resource_name=r.name,
                    configs=[AlterableConfig(name=o.name, config_operation=o.op, value=o.value) for o in ops[r]])
                    for r in batch],
                validate_only=validate_only)
            response, _, conn = await self._call(target, INCREMENTAL_ALTER_CONFIGS, lambda v: request, deadline)
            return [(r, conn.address) for r in response.responses]

        answers = await asyncio.gather(*(one(t, b) for t, b in groups.items()))
        by_resource = {(r.resource_type, r.resource_name): (r, a) for answer in answers for r, a in answer}
        results: Results[ConfigResource, AlterConfigsResult] = Results()
        for resource in ops:
            found = by_resource.get((resource.type, resource.name))
            if found is None:
                error: KafkaError | None = BrokerResponseError(
                    ErrorCode.UNKNOWN_SERVER_ERROR, f"no result for {resource}", api="IncrementalAlterConfigs")
            else:
                r, address = found
                error = error_for_code(r.error_code, r.error_message or f"{resource.type.name} {resource.name!r}",
                                       api="IncrementalAlterConfigs", broker=address)
            results[resource] = AlterConfigsResult(resource, error)
        if raise_on_error:
            results.raise_first()
        return results

    # ============================================================================================ machinery

    def _deadline(self, timeout: float | None) -> _Deadline:
        if self._closed:
            raise RuntimeError("the admin client is closed")
        if timeout is not None and timeout <= 0:
            raise ValueError("timeout must be positive")
        return _Deadline(self.request_timeout if timeout is None else timeout)

    @staticmethod
    def _timeout_ms(deadline: _Deadline) -> int:
        """What to tell the broker it may wait (CreateTopics/DeleteTopics timeout_ms): what is left of ours."""
        return max(int(deadline.remaining() * 1000), 0)

    def _backoff(self) -> ExponentialBackoff:
        return ExponentialBackoff(self.retry_backoff, self.retry_backoff_max)

    # ============================================================================================ ACLs

    # ============================================================================================ features

    async def describe_features(self, *, timeout: float | None = None) -> FeatureMetadata:
        """The cluster's finalized feature levels and what the answering broker supports (ApiVersions v3+)."""
        response, _, _ = await self._call(
            None, API_VERSIONS, lambda v: ApiVersionsRequest(client_software_name="kjbod",
                                                             client_software_version=__version__),
            self._deadline(timeout), check=lambda r: r.error_code, min_version=3)
        return FeatureMetadata(
            {f.name: f.max_version_level for f in response.finalized_features},
            response.finalized_features_epoch if response.finalized_features_epoch >= 0 else None,
            {f.name: (f.min_version, f.max_version) for f in response.supported_features})

    async def update_features(self, updates: Mapping[str, tuple[int, int]], *, validate_only: bool = False,
                              timeout: float | None = None) -> dict[str, KafkaError | None]:
        """Changes finalized feature levels: {feature: (level, upgrade type: UPGRADE, SAFE_DOWNGRADE or
        UNSAFE_DOWNGRADE)} (UpdateFeatures, which the broker forwards to the controller).  Per feature, the error
        or None; the controller takes all of them or none."""
        deadline = self._deadline(timeout)

        def build(version: int) -> UpdateFeaturesRequest:
            return UpdateFeaturesRequest(
                timeout_ms=self._timeout_ms(deadline), validate_only=validate_only,
                feature_updates=[FeatureUpdateKey(feature=name, max_version_level=level,
                                                  upgrade_type=kind if version >= 1 else 1,
                                                  allow_downgrade=version == 0 and kind != 1)
                                 for name, (level, kind) in updates.items()])

        response, _, conn = await self._call(None, UPDATE_FEATURES, build, deadline)
        top = error_for_code(response.error_code, response.error_message, api="UpdateFeatures", broker=conn.address)
        out: dict[str, KafkaError | None] = {name: top for name in updates}
        for r in response.results:
            if r.feature in out and top is None:
                out[r.feature] = error_for_code(r.error_code, r.error_message, api="UpdateFeatures",
                                                broker=conn.address)
        return out

    async def describe_acls(self, acl_filter: AclFilter, *, timeout: float | None = None) -> list[AclEntry]:
        """The ACL entries `acl_filter` matches (DescribeAcls to any broker); an error answer raises."""
        deadline = self._deadline(timeout)
        f = acl_filter
        response, _, _ = await self._call(None, DESCRIBE_ACLS, lambda v: DescribeAclsRequest(
            resource_type_filter=f.resource_type, resource_name_filter=f.resource_name,
            pattern_type_filter=f.pattern_type, principal_filter=f.principal, host_filter=f.host,
            operation=f.operation, permission_type=f.permission_type), deadline,
            check=lambda r: r.error_code, message=lambda r: r.error_message, min_version=1)
        return [AclEntry(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
                         a.permission_type) for r in response.resources for a in r.acls]

    async def list_client_metrics_resources(self, *, timeout: float | None = None) -> list[str]:
        """The names of the client metrics subscriptions (KIP-714; ListConfigResources, to any broker: its v0,
        Kafka's ListClientMetricsResources, lists nothing else, and v1 is asked for type 16 only)."""
        from kjbod.protocol.generated import ListConfigResourcesRequest

        deadline = self._deadline(timeout)
        response, _, _ = await self._call(None, LIST_CONFIG_RESOURCES,
                                          lambda v: ListConfigResourcesRequest(resource_types=[16] if v >= 1 else []),
                                          deadline, check=lambda r: r.error_code)
        return [r.resource_name for r in response.config_resources]

    async def describe_client_quotas(
        self, components: Sequence[tuple[str, int, str | None]] = (), *, strict: bool = False,
        timeout: float | None = None,
    ) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        """The client quotas whose entities match every (entity type, match type, match) component
        (DescribeClientQuotas to any broker; match type 0 exact, 1 the default entity, 2 any entity of the type):
        per entity, ({type: name, None for the default}, {quota key: value}). An error answer raises."""
        deadline = self._deadline(timeout)
        response, _, _ = await self._call(None, DESCRIBE_CLIENT_QUOTAS, lambda v: DescribeClientQuotasRequest(
            components=[ComponentData(entity_type=t, match_type=m, match=name) for t, m, name in components],
            strict=strict), deadline, check=lambda r: r.error_code, message=lambda r: r.error_message)
        return [({p.entity_type: p.entity_name for p in e.entity}, {v.key: v.value for v in e.values})
                for e in response.entries or ()]

    async def describe_user_scram_credentials(
        self, users: Sequence[str] = (), *, timeout: float | None = None,
    ) -> dict[str, tuple[int, str | None, list[tuple[int, int]]]]:
        """The SCRAM credentials of `users` (all users when empty), DescribeUserScramCredentials to any broker:
        per user, (error code, message, [(mechanism type, iterations)]); a user without credentials answers
        RESOURCE_NOT_FOUND. A top-level error raises."""
        deadline = self._deadline(timeout)
        response, _, _ = await self._call(None, DESCRIBE_USER_SCRAM_CREDENTIALS, lambda v: (
            DescribeUserScramCredentialsRequest(users=[UserName(name=u) for u in users] if users else None)),
            deadline, check=lambda r: r.error_code, message=lambda r: r.error_message)
        return {r.user: (r.error_code, r.error_message, [(c.mechanism, c.iterations) for c in r.credential_infos])
                for r in response.results}

    async def alter_client_quotas(
        self, entries: Sequence[tuple[Mapping[str, str | None], Mapping[str, float | None]]], *,
        validate_only: bool = False, timeout: float | None = None,
    ) -> list[tuple[int, str | None]]:
        """Sets (a value) or removes (None) quota keys per entity ({type: name, None for the default},
        {key: value}) with AlterClientQuotas (a broker forwards it to the controller): per entity, in order,
        (error code, message)."""
        deadline = self._deadline(timeout)
        body = [quotas_req.EntryData(
            entity=[quotas_req.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
            ops=[quotas_req.OpData(key=k, value=0.0 if v is None else float(v), remove=v is None)
                 for k, v in ops.items()]) for entity, ops in entries]
        response, _, _ = await self._call(None, ALTER_CLIENT_QUOTAS, lambda v: quotas_req.AlterClientQuotasRequest(
            entries=body, validate_only=validate_only), deadline)
        return [(e.error_code, e.error_message) for e in response.entries]

    async def create_acls(self, entries: Sequence[AclEntry], *,
                          timeout: float | None = None) -> list[tuple[int, str | None]]:
        """Adds ACL entries (CreateAcls): per entry, in order, (error code, message)."""
        deadline = self._deadline(timeout)
        creations = [AclCreation(resource_type=e.resource_type, resource_name=e.resource_name,
                                 resource_pattern_type=e.pattern_type, principal=e.principal, host=e.host,
                                 operation=e.operation, permission_type=e.permission_type) for e in entries]
        response, _, _ = await self._call(None, CREATE_ACLS, lambda v: CreateAclsRequest(creations=creations),
                                          deadline, min_version=1)
        return [(r.error_code, r.error_message) for r in response.results]

    async def delete_acls(self, filters: Sequence[AclFilter], *,
                          timeout: float | None = None) -> list[tuple[int, str | None, list[AclEntry]]]:
        """Removes the ACL entries each filter matches (DeleteAcls): per filter, in order, (error code, message,
        the entries it removed)."""
        deadline = self._deadline(timeout)
        body = [DeleteAclsFilter(resource_type_filter=f.resource_type, resource_name_filter=f.resource_name,
                                 pattern_type_filter=f.pattern_type, principal_filter=f.principal,
                                 host_filter=f.host, operation=f.operation, permission_type=f.permission_type)
                for f in filters]
        response, _, _ = await self._call(None, DELETE_ACLS, lambda v: DeleteAclsRequest(filters=body), deadline,
                                          min_version=1)
        return [(r.error_code, r.error_message, [
            AclEntry(m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host, m.operation,
                     m.permission_type) for m in r.matching_acls]) for r in response.filter_results]

    # -- delegation tokens (KIP-48) ----------------------------------------------------------------------------------

    async def create_delegation_token(self, *, owner: str | None = None, renewers: Sequence[str] = (),
                                      max_lifetime_ms: int = -1, timeout: float | None = None) -> DelegationToken:
        """Makes a delegation token (CreateDelegationToken) for this client's principal, or for `owner` (Type:name,
        v3: needs CREATE_TOKENS on that user); `renewers` may renew and expire it too; `max_lifetime_ms` -1 is
        the broker's delegation.token.max.lifetime.ms. An error answer raises."""
        deadline = self._deadline(timeout)
        owner_type, owner_name = _principal_parts(owner) if owner else (None, None)
        request = CreateDelegationTokenRequest(
            owner_principal_type=owner_type, owner_principal_name=owner_name,
            renewers=[CreatableRenewers(principal_type=k, principal_name=n) for k, n in map(_principal_parts, renewers)],
            max_lifetime_ms=max_lifetime_ms)
        r, _, _ = await self._call(None, CREATE_DELEGATION_TOKEN, lambda v: request, deadline,
                                   check=lambda r: r.error_code, min_version=3 if owner else 1)
        return DelegationToken(r.token_id, bytes(r.hmac), f"{r.principal_type}:{r.principal_name}",
                               f"{r.token_requester_principal_type}:{r.token_requester_principal_name}"
                               if r.token_requester_principal_name else "", tuple(renewers), r.issue_timestamp_ms,
                               r.expiry_timestamp_ms, r.max_timestamp_ms)

    async def renew_delegation_token(self, hmac: bytes, *, renew_period_ms: int = -1,
                                     timeout: float | None = None) -> int:
        """Renews the token with this HMAC (RenewDelegationToken); its new expiry (ms since the epoch). -1: the
        broker's delegation.token.expiry.time.ms. An error answer raises."""
        deadline = self._deadline(timeout)
        r, _, _ = await self._call(None, RENEW_DELEGATION_TOKEN, lambda v: RenewDelegationTokenRequest(
            hmac=hmac, renew_period_ms=renew_period_ms), deadline, check=lambda r: r.error_code, min_version=1)
        return int(r.expiry_timestamp_ms)

    async def expire_delegation_token(self, hmac: bytes, *, expiry_time_period_ms: int = -1,
                                      timeout: float | None = None) -> int:
        """Expires the token with this HMAC (ExpireDelegationToken): at once with -1 (the default), else that many
        ms from now; its new expiry. An error answer raises."""
        deadline = self._deadline(timeout)
        r, _, _ = await self._call(None, EXPIRE_DELEGATION_TOKEN, lambda v: ExpireDelegationTokenRequest(
            hmac=hmac, expiry_time_period_ms=expiry_time_period_ms), deadline, check=lambda r: r.error_code,
            min_version=1)
        return int(r.expiry_timestamp_ms)

    async def describe_delegation_tokens(self, owners: Sequence[str] | None = None, *,
                                         timeout: float | None = None) -> list[DelegationToken]:
        """The tokens this client may see (DescribeDelegationToken), of `owners` (Type:name) or all (None)."""
        deadline = self._deadline(timeout)
        wanted = None if owners is None else [DescribeDelegationTokenOwner(principal_type=k, principal_name=n)
                                              for k, n in map(_principal_parts, owners)]
        r, _, _ = await self._call(None, DESCRIBE_DELEGATION_TOKEN, lambda v: DescribeDelegationTokenRequest(
            owners=wanted), deadline, check=lambda r: r.error_code, min_version=1)
        return [DelegationToken(t.token_id, bytes(t.hmac), f"{t.principal_type}:{t.principal_name}",
                                f"{t.token_requester_principal_type}:{t.token_requester_principal_name}"
                                if t.token_requester_principal_name else "",
                                tuple(f"{w.principal_type}:{w.principal_name}" for w in t.renewers),
                                t.issue_timestamp, t.expiry_timestamp, t.max_timestamp) for t in r.tokens]

    async def _call(
        self,
        target: Target,
        api_key: int,
        build: Callable[[int], Any],
        deadline: _Deadline,
        *,
        check: Callable[[Any], int] | None = None,
        message: Callable[[Any], str | None] | None = None,
        min_version: int | None = None,
        max_version: int | None = None,
        retry: bool = True,
    ) -> tuple[Any, int, ClientConnection]:
        """Sends one request to `target` and returns (response, version, connection), retrying what is retriable.

        `build(version)` makes the request for the negotiated version; `check(response)` returns the response's
        top-level error code, which raises (after retries, if retriable).  `retry=False`: one attempt, for callers
        that route around a failure themselves (DeleteRecords looks the leader up again).
        """
        backoff = self._backoff()
        last_error: AdminError | None = None
        while True:
            try:
                conn = await self._connection_for(target, deadline)
                version = conn.pick_version(api_key, min_version, max_version)
                remaining = deadline.remaining()
                if remaining <= 0:
                    raise RequestTimeoutError(f"{api_name(api_key)}: the call's deadline passed")
                response = await conn.request(api_key, version, build(version),
                                              min(self.request_timeout, remaining))
                if check is not None:
                    code = check(response)
                    if code:
                        raise BrokerResponseError(code, message(response) if message else None,
                                                  api=api_name(api_key), broker=conn.address)
                return response, version, conn
            except AdminError as error:
                if (isinstance(error, RequestTimeoutError) and last_error is not None
                        and deadline.remaining() <= 0):
                    # The deadline ran out while retrying: the error that made us retry says what is wrong
                    # (on a busy machine the last try may not even have reached the broker).
                    raise last_error from None
                last_error = error
                delay = backoff.next()
                if not retry or not error.retriable or deadline.remaining() <= delay:
                    raise
                log.debug("retrying", api=api_name(api_key), target=target, error=str(error),
                          delay=round(delay, 3))
                if isinstance(error, BrokerConnectionError | RequestTimeoutError) or target == _CONTROLLER:
                    self._metadata_stale = True
                await asyncio.sleep(delay)

    async def _connection_for(self, target: Target, deadline: _Deadline) -> ClientConnection:
        if target == _CONTROLLER:
            if self._metadata_stale:
                await self._refresh_metadata([], deadline)
            controller = self._controller_id
            target = controller if controller is not None and controller in self._brokers else None
        if target is None:
            return await self._any_connection(deadline)
        assert isinstance(target, int)
        node = self._brokers.get(target)
        if node is None or self._metadata_stale:
            await self._refresh_metadata([], deadline)
            node = self._brokers.get(target)
            if node is None:
                raise BrokerResponseError(ErrorCode.BROKER_NOT_AVAILABLE,
                                          f"broker {target} is not in the cluster metadata")
        return await self._connect((node.host, node.port), deadline)

    async def _any_connection(self, deadline: _Deadline) -> ClientConnection:
        for task in self._connections.values():
            if task.done() and not task.cancelled() and task.exception() is None and not task.result().closed:
                return task.result()
        candidates = list(dict.fromkeys(
            self.bootstrap_servers + [(b.host, b.port) for b in self._brokers.values()]))
        failures = []
        for address in candidates:
            try:
                return await self._connect(address, deadline)
            except BrokerConnectionError as e:
                failures.append(e)
        if len(failures) == 1:
            raise failures[0]
        host, port = candidates[0]
        raise BrokerConnectionError(host, port, "no broker reachable; tried " + "; ".join(
            f"{e.host}:{e.port} ({e.reason})" for e in failures))

    async def _connect(self, address: tuple[str, int], deadline: _Deadline) -> ClientConnection:
        if self._closed:
            raise RuntimeError("the admin client is closed")
        task = self._connections.get(address)
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None
                                             or task.result().closed)):
            task = asyncio.get_running_loop().create_task(ClientConnection.open(
                address[0], address[1], client_id=self.client_id, connect_timeout=self.connect_timeout,
                max_frame_size=self.max_response_bytes, software_name=CLIENT_SOFTWARE_NAME,
                ssl_context=self.ssl_context, sasl=self.sasl))
            # Retrieve a failure even when every waiter gave up, so asyncio does not log it as never retrieved.
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            self._connections[address] = task
        remaining = deadline.remaining()
        if remaining <= 0:
            raise RequestTimeoutError(f"connecting to {address[0]}:{address[1]}: the call's deadline passed")
        try:
            async with asyncio.timeout(remaining):
                return await asyncio.shield(task)
        except TimeoutError:
            raise RequestTimeoutError(
                f"connecting to {address[0]}:{address[1]}: the call's deadline ({deadline.timeout:g}s) passed"
            ) from None

    async def _refresh_metadata(self, topics: list[str] | None, deadline: _Deadline) -> Any:
        """Metadata for `topics` (None: all, []: none); refreshes the broker list and controller."""
        def build(version: int) -> MetadataRequest:
            # AllowAutoTopicCreation exists from v4; before it, whether a lookup creates topics is the broker's call.
            return MetadataRequest(
                topics=None if topics is None else [MetadataRequestTopic(name=n) for n in topics],
                allow_auto_topic_creation=version < 4)

        # v0 would read an empty topic list as "all topics"; every broker since 0.10 serves v1.
        response, _, _ = await self._call(None, METADATA, build, deadline, check=lambda r: r.error_code,
                                          min_version=1)
        self._brokers = {b.node_id: BrokerNode(b.node_id, b.host, b.port, b.rack) for b in response.brokers}
        self._controller_id = response.controller_id if response.controller_id >= 0 else None
        self._cluster_id = response.cluster_id
        self._metadata_stale = False
        self._metadata_time = asyncio.get_running_loop().time()
        return response

    async def _broker_ids(self, brokers: Iterable[int] | None, deadline: _Deadline) -> list[int]:
        if brokers is not None:
            return list(dict.fromkeys(brokers))
        # "All brokers" means the brokers alive now: reuse Metadata only if this very call already fetched it.
        if self._metadata_stale or self._metadata_time < deadline.started:
            await self._refresh_metadata([], deadline)
        return sorted(self._brokers)

    async def _log_dir_topics(self, topics: Any, deadline: _Deadline) -> list[DescribableLogDirTopic] | None:
        """The DescribeLogDirs request's topic list: None (all), or topics with explicit partition numbers."""
        if topics is None:
            return None
        wanted: dict[str, set[int]] = {}
        whole: list[str] = []
        if isinstance(topics, Mapping):
            for name, partitions in topics.items():
                wanted.setdefault(name, set()).update(partitions)
        else:
            for item in topics:
                if isinstance(item, str):
                    whole.append(item)
                else:
                    name, partition = item
                    wanted.setdefault(name, set()).add(partition)
        if whole:
            described = await self.describe_topics(whole, timeout=max(deadline.remaining(), 0.001))
            for name in whole:
                wanted.setdefault(name, set()).update(p.partition for p in described[name].partitions)
        return [DescribableLogDirTopic(topic=name, partitions=sorted(ps)) for name, ps in wanted.items()]


# Metadata topic codes that mean "you will not get this topic", raised by describe_topics.
def _constant(request: Any) -> Callable[[int], Any]:
    """A request builder that answers the same request at every version (one-version APIs)."""
    return lambda version: request


_FATAL_TOPIC_CODES = frozenset({ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.INVALID_TOPIC_EXCEPTION})


def _resource(value: ConfigResource | tuple[int, str]) -> ConfigResource:
    if isinstance(value, ConfigResource):
        return value
    kind, name = value
    return ConfigResource(ConfigResourceType(kind), str(name))


def _group_by_target(resources: Sequence[ConfigResource]) -> dict[Target, list[ConfigResource]]:
    """A broker's own configs (and loggers) are answered by that broker; topics and defaults by any broker."""
    groups: dict[Target, list[ConfigResource]] = {}
    for r in resources:
        target: Target = None
        if r.type in (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER) and r.name:
            try:
                target = int(r.name)
            except ValueError:
                raise ValueError(f"broker config resource name must be a broker id, not {r.name!r}") from None
        groups.setdefault(target, []).append(r)
    return groups


# ReplicaInfo is built field by field through its slot descriptors: a frozen dataclass's __init__ goes through
# object.__setattr__ once per field, which makes it about three times slower, and describe_log_dirs builds one per
# replica (20,000 for a large broker).  The result is an ordinary, immutable ReplicaInfo.
_new_object = object.__new__
_SET_TOPIC, _SET_PARTITION, _SET_SIZE, _SET_LAG, _SET_FUTURE = (
    ReplicaInfo.__dict__[name].__set__ for name in ("topic", "partition", "size", "offset_lag", "is_future"))


def _log_dirs(broker_id: int, response: Any, version: int = 5) -> list[LogDirInfo]:
    """LogDirInfo per dir of one DescribeLogDirs response: the hot path, one pass over the decoded partitions."""
    out = []
    # The objects built here all survive and cannot form cycles; scanning them again and again while they are
    # being created would cost the cyclic GC about a third of the time (as in the codec's large decodes).
    resume_gc = gc_pause()
    try:
        for r in response.results:
            replicas: list[ReplicaInfo] = []
            append = replicas.append
            for t in r.topics:
                name = t.name
                for p in t.partitions:
                    replica = _new_object(ReplicaInfo)
                    _SET_TOPIC(replica, name)
                    _SET_PARTITION(replica, p.partition_index)
                    _SET_SIZE(replica, p.partition_size)
                    lag = p.offset_lag
                    _SET_LAG(replica, lag if lag >= 0 else None)
                    _SET_FUTURE(replica, p.is_future_key)
                    append(replica)
            directory_id: UUID | None = r.directory_id
            out.append(LogDirInfo(
                broker_id, r.log_dir, None if directory_id == ZERO_UUID else directory_id, _code(r.error_code),
                r.total_bytes if r.total_bytes >= 0 else None, r.usable_bytes if r.usable_bytes >= 0 else None,
                replicas, r.dir_state or None, r.recent_latency_ms if r.recent_latency_ms >= 0 else None,
                r.failed_at_ms if r.failed_at_ms >= 0 else None,
                r.reserved_bytes if r.reserved_bytes >= 0 else None, r.state_reason or None,
                r.is_cordoned if version >= 5 else None, r.filesystem_id if r.filesystem_id >= 0 else None))
    finally:
        if resume_gc:
            gc_resume()
    return out


_MISSING = object()
# Codes that say "ask the group's coordinator (again)": Kafka's admin client finds the coordinator again for the
# first two and retries the same one for the last.
_COORDINATOR_CODES = frozenset({
    ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})
CONSUMER_PROTOCOL_TYPE = "consumer"


def _group_description(g: Any, coordinator: BrokerNode | None) -> GroupDescription:
    """A DescribeGroups entry; a consumer group's (or an offsets-only group's) assignments decoded."""
    consumer = g.protocol_type in (CONSUMER_PROTOCOL_TYPE, "")
    members = []
    for m in g.members:
        assignment: tuple[tuple[str, int], ...] | None = None
        if consumer:
            try:
                assignment = decode_assignment(m.member_assignment) if m.member_assignment else ()
            except ValueError:
                assignment = None
        members.append(MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host, assignment))
    return GroupDescription(g.group_id, g.group_state, g.protocol_type, g.protocol_data, tuple(members), coordinator)


def _consumer_group_description(g: Any, coordinator: BrokerNode | None) -> GroupDescription:
    """A ConsumerGroupDescribe entry (a KIP-848 group): its assignor as the protocol, each member's partitions."""
    members = tuple(MemberDescription(
        m.member_id, m.instance_id, m.client_id, m.client_host,
        tuple((t.topic_name, p) for t in m.assignment.topic_partitions for p in sorted(t.partitions)))
        for m in g.members)
    return GroupDescription(g.group_id, g.group_state, CONSUMER_PROTOCOL_TYPE, g.assignor_name, members, coordinator)


def _change_result(group_id: str, wanted: Mapping[tuple[str, int], Any], codes: Mapping[tuple[str, int], int],
                   group_error: KafkaError | None, api: str, address: str) -> GroupOffsetsChangeResult:
    partitions: dict[tuple[str, int], KafkaError | None] = {}
    for tp in wanted:
        code = codes.get(tp)
        if group_error is not None:
            partitions[tp] = group_error
        elif code is None:
            partitions[tp] = BrokerResponseError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                                 f"no result for partition {tp[0]}-{tp[1]} in the response",
                                                 api=api, broker=address)
        else:
            partitions[tp] = error_for_code(code, f"group {group_id!r} partition {tp[0]}-{tp[1]}", api=api,
                                            broker=address)
    first = group_error or next((e for e in partitions.values() if e is not None), None)
    return GroupOffsetsChangeResult(group_id, partitions, first)


def _principal_parts(principal: str) -> tuple[str, str]:
    """("User", "alice") for "User:alice"; ValueError for text without Type:name."""
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        raise ValueError(f"expected a principal as Type:name, got {principal!r}")
    return kind, name
