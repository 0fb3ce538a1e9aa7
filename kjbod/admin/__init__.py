"""kjbod's Kafka admin client: `AdminClient` (asyncio) and `SyncAdminClient` (blocking), result types, errors.

    async with AdminClient(bootstrap_servers="127.0.0.1:9092") as admin:
        dirs = await admin.describe_log_dirs()

See kjbod.admin.client for how calls are routed, retried and bounded in time.
"""

from kjbod.admin.client import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT,
    AdminClient,
    parse_bootstrap_servers,
)
from kjbod.admin.errors import (
    AdminError,
    BrokerConnectionError,
    BrokerResponseError,
    KafkaError,
    ProtocolViolation,
    RequestTimeoutError,
    UnsupportedVersionError,
)
from kjbod.admin.sync import SyncAdminClient
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
    DeleteRecordsResult,
    DeleteTopicResult,
    LogDirInfo,
    LogDirsByBroker,
    NewPartitions,
    NewTopic,
    PartitionDescription,
    ReplicaInfo,
    ReplicaLogDirInfo,
    Results,
    ThrottledRate,
    ThrottledReplicas,
    TopicDescription,
    TopicPartitionReplica,
)
from kjbod.protocol.errors import ErrorCode

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_REQUEST_TIMEOUT",
    "AdminClient",
    "AdminError",
    "AlterConfigOp",
    "AlterConfigOpType",
    "AlterConfigsResult",
    "AlterReplicaLogDirResult",
    "BrokerConnectionError",
    "BrokerNode",
    "BrokerResponseError",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigSource",
    "ConfigSynonym",
    "CreatePartitionsResult",
    "CreateTopicResult",
    "DeleteRecordsResult",
    "DeleteTopicResult",
    "ErrorCode",
    "KafkaError",
    "LogDirInfo",
    "LogDirsByBroker",
    "NewPartitions",
    "NewTopic",
    "PartitionDescription",
    "ProtocolViolation",
    "ReplicaInfo",
    "ReplicaLogDirInfo",
    "RequestTimeoutError",
    "Results",
    "SyncAdminClient",
    "TopicDescription",
    "TopicPartitionReplica",
    "NO_THROTTLE",
    "ThrottledRate",
    "ThrottledReplicas",
    "UnsupportedVersionError",
    "parse_bootstrap_servers",
]
