"""Configs as DescribeConfigs, AlterConfigs and IncrementalAlterConfigs see them: brokers and topics.

Strategy: one table (:data:`BROKER_KEYS`) names the broker configs this node reports, with Kafka's type, the
ServerConfig attribute holding the static value, and whether the key may change at runtime. The dynamic ones:
``replica.alter.log.dirs.io.max.bytes.per.second`` (KIP-113's throttle; ``intra.broker.throttled.rate`` is its
alias), the inter-broker ``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate`` (dynamic
only, as in Kafka), the KIP-435 ``reassignment.parallel.*`` limits, and the broker defaults of topic configs
(Kafka's DynamicLogConfig: ``log.retention.ms``, ``log.segment.bytes``, ``message.max.bytes``, ...,
:data:`LOG_CONFIG_KEYS`; their other synonyms such as ``log.retention.hours`` stay static, as in Kafka).
Dynamic values live in :class:`DynamicBrokerConfigs`, rebuilt at startup from the metadata log's ConfigRecords
(resource type 4: name = node id for this broker, "" for the cluster default), so a restart keeps them.
Precedence is Kafka's: per-broker dynamic > cluster-default dynamic > static (server.properties) > default; a
topic's own override comes before all of them.

Topic configs come from kjbod.broker.topic_config (the table CreateTopics uses); their overrides live in the
metadata image and are changed through ConfigRecords of resource type 2.

Changes are planned here without side effects (``plan_topic_changes``, ``plan_broker_changes``): the controller
(kjbod.controller.configs) calls them through the node's config policy, writes the records, and the node applies
them once they are durable. Errors follow Kafka: an unknown or unsupported key is INVALID_CONFIG naming the key
(Kafka keeps an unknown broker key as a custom config; kjbod refuses it, so nobody believes it took effect); a
bad value is INVALID_CONFIG for a topic and INVALID_REQUEST for a broker, as Kafka answers them (its broker turns
a broker config's error into INVALID_REQUEST, KAFKA-13609), each naming key and value; a key that exists but
cannot change at runtime is INVALID_REQUEST ("Cannot update these configs dynamically"); another broker's id is
INVALID_REQUEST; an unknown topic is UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kjbod.broker import topic_config
from kjbod.protocol.errors import ErrorCode

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
GROUP = 32  # Kafka's ConfigResource GROUP (KIP-848's per-group configs)

# DescribeConfigs ConfigSource
TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
DYNAMIC_BROKER_LOGGER_CONFIG = 6
GROUP_CONFIG = 8

# DescribeConfigs ConfigType
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST = 1, 2, 3, 4, 5, 6, 7
_TOPIC_TYPES = {"int": INT, "long": LONG, "double": DOUBLE, "string": STRING, "list": LIST, "boolean": BOOLEAN}

# IncrementalAlterConfigs operations
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1
THROTTLE_KEY = "replica.alter.log.dirs.io.max.bytes.per.second"
CORDON_KEY = "cordoned.log.dirs"
ALIASES = {"intra.broker.throttled.rate": THROTTLE_KEY}


@dataclass(frozen=True)
class BrokerKey:
    name: str
    type: int
    attr: str | None
    dynamic: bool = False
    doc: str = ""
    default: Any = None
    minimum: int = 1  # a dynamic key's smallest value


BROKER_KEYS: dict[str, BrokerKey] = {k.name: k for k in [
    BrokerKey("node.id", INT, "node_id", doc="This node's id."),
    BrokerKey("process.roles", LIST, "process_roles", doc="Roles this node plays: broker, controller or both."),
    BrokerKey("listeners", LIST, "listeners", doc="Listeners, as NAME://host:port."),
    BrokerKey("advertised.listeners", LIST, "advertised_listeners", doc="Listeners clients are told to use."),
    BrokerKey("controller.listener.names", LIST, "controller_listener_names",
              doc="Listener names used by the controller role."),
    BrokerKey("log.dirs", LIST, "log_dirs", doc="The log dirs (one per disk with JBOD)."),
    BrokerKey("metadata.log.dir", STRING, "metadata_log_dir", doc="Dir of the metadata log."),
    BrokerKey(CORDON_KEY, LIST, "cordoned_log_dirs", dynamic=True,
              doc="Log dirs of this broker that take no new replicas (KIP-1066), or * for all of them."),
    BrokerKey("broker.rack", STRING, "broker_rack", doc="Rack of this broker, for rack-aware replica placement."),
    BrokerKey("metadata.log.max.record.bytes.between.snapshots", LONG,
              "metadata_log_max_record_bytes_between_snapshots",
              doc="Bytes of metadata records written after which the controller writes a snapshot."),
    BrokerKey("num.partitions", INT, "num_partitions", doc="Default partition count of new topics."),
    BrokerKey("default.replication.factor", INT, "default_replication_factor",
              doc="Default replication factor of new topics."),
    BrokerKey("auto.create.topics.enable", BOOLEAN, "auto_create_topics_enable",
              doc="Create a topic when a client first uses it."),
    # The broker defaults of topic configs (Kafka's DynamicLogConfig.ReconfigurableConfigs: each topic config's
    # first broker synonym) change at runtime; their other synonyms (log.roll.hours, log.retention.minutes and
    # .hours, log.flush.scheduler.interval.ms) stay static, as in Kafka.
    BrokerKey("log.segment.bytes", INT, "log_segment_bytes", dynamic=True, doc="Default segment size."),
    BrokerKey("log.roll.ms", LONG, "log_roll_ms", dynamic=True, doc="Default age at which a segment rolls."),
    BrokerKey("log.roll.jitter.ms", LONG, "log_roll_jitter_ms", dynamic=True,
              doc="Default most by which a segment rolls before its age limit (drawn per segment)."),
    BrokerKey("log.retention.ms", LONG, "log_retention_ms", dynamic=True, doc="Default retention time."),
    BrokerKey("log.retention.bytes", LONG, "log_retention_bytes", dynamic=True,
              doc="Default retention size per partition."),
    BrokerKey("log.retention.check.interval.ms", LONG, "log_retention_check_interval_ms",
              doc="How often retention runs."),
    BrokerKey("message.max.bytes", INT, "message_max_bytes", dynamic=True, doc="Largest record batch accepted."),
    BrokerKey("log.index.interval.bytes", INT, "log_index_interval_bytes", dynamic=True,
              doc="Bytes between index entries."),
    BrokerKey("log.index.size.max.bytes", INT, "log_index_size_max_bytes", dynamic=True,
              doc="Maximum index file size."),
    BrokerKey("log.flush.interval.messages", LONG, "log_flush_interval_messages", dynamic=True,
              doc="Messages between forced fsyncs."),
    BrokerKey("log.flush.interval.ms", LONG, "log_flush_interval_ms", dynamic=True,
              doc="Milliseconds between forced fsyncs."),
    BrokerKey("log.segment.delete.delay.ms", LONG, "log_segment_delete_delay_ms", dynamic=True,
              doc="Delay before deleted files and -delete dirs are removed."),
    BrokerKey("log.flush.offset.checkpoint.interval.ms", INT, "log_flush_offset_checkpoint_interval_ms",
              doc="How often the recovery points and log start offsets are checkpointed."),
    BrokerKey("log.initial.task.delay.ms", LONG, "log_initial_task_delay_ms",
              doc="Delay after start before the first retention pass and checkpoint (at most one interval)."),
    BrokerKey("log.cleanup.policy", LIST, "log_cleanup_policy", dynamic=True,
              doc="Default cleanup policy: delete, compact, or both."),
    BrokerKey("log.cleaner.enable", BOOLEAN, "log_cleaner_enable",
              doc="Whether the cleaner compacts the logs of compacted topics."),
    BrokerKey("log.cleaner.threads", INT, "log_cleaner_threads", dynamic=True,
              doc="Cleaner threads (kjbod: each log dir has one; the dedupe buffer is shared out by this count)."),
    BrokerKey("log.cleaner.io.max.bytes.per.second", DOUBLE, "log_cleaner_io_max_bytes_per_second", dynamic=True,
              doc="Most bytes a second a cleaner reads and writes."),
    BrokerKey("log.cleaner.dedupe.buffer.size", LONG, "log_cleaner_dedupe_buffer_size", dynamic=True,
              doc="Memory for the cleaners' key maps (24 bytes a key)."),
    BrokerKey("log.cleaner.io.buffer.load.factor", DOUBLE, "log_cleaner_io_buffer_load_factor", dynamic=True,
              doc="How full a key map may get."),
    BrokerKey("log.cleaner.backoff.ms", LONG, "log_cleaner_backoff_ms", dynamic=True,
              doc="Pause of a cleaner that found nothing to clean."),
    BrokerKey("log.cleaner.min.cleanable.ratio", DOUBLE, "log_cleaner_min_cleanable_ratio", dynamic=True,
              doc="Default min.cleanable.dirty.ratio of topics."),
    BrokerKey("log.cleaner.delete.retention.ms", LONG, "log_cleaner_delete_retention_ms", dynamic=True,
              doc="Default delete.retention.ms of topics."),
    BrokerKey("log.cleaner.min.compaction.lag.ms", LONG, "log_cleaner_min_compaction_lag_ms", dynamic=True,
              doc="Default min.compaction.lag.ms of topics."),
    BrokerKey("log.cleaner.max.compaction.lag.ms", LONG, "log_cleaner_max_compaction_lag_ms", dynamic=True,
              doc="Default max.compaction.lag.ms of topics."),
    BrokerKey("log.message.timestamp.type", STRING, "log_message_timestamp_type", dynamic=True,
              doc="Default timestamp type of topics: CreateTime or LogAppendTime."),
    BrokerKey("compression.type", STRING, "compression_type", dynamic=True,
              doc="Default codec topics store batches in: producer (each producer's own), uncompressed, gzip, "
                  "snappy, lz4 or zstd."),
    *[BrokerKey(f"compression.{codec}.level", INT, f"compression_{codec}_level", dynamic=True,
                doc=f"Default level of {codec} where topics store batches in it.")
      for codec in ("gzip", "lz4", "zstd")],
    BrokerKey("log.message.timestamp.difference.max.ms", LONG, "log_message_timestamp_difference_max_ms",
              dynamic=True, doc="Deprecated: both timestamp limits where before/after.max.ms are not set."),
    BrokerKey("log.message.timestamp.before.max.ms", LONG, "log_message_timestamp_before_max_ms", dynamic=True,
              doc="Default for how far in the past a record's CreateTime timestamp may be."),
    BrokerKey("log.message.timestamp.after.max.ms", LONG, "log_message_timestamp_after_max_ms", dynamic=True,
              doc="Default for how far in the future a record's CreateTime timestamp may be."),
    BrokerKey("delete.topic.enable", BOOLEAN, "delete_topic_enable", doc="Whether DeleteTopics may delete topics."),
    BrokerKey("unclean.leader.election.enable", BOOLEAN, "unclean_leader_election_enable", dynamic=True,
              doc="Whether a replica outside the ISR may be elected when no ISR member can lead."),
    BrokerKey("transaction.partition.verification.enable", BOOLEAN, "transaction_partition_verification_enable",
              dynamic=True, doc="Whether a leader verifies with the transaction coordinator that a partition is in a "
              "producer's transaction before its transactional batch opens one there (KIP-890)."),
    BrokerKey("min.insync.replicas", INT, "min_insync_replicas", dynamic=True,
              doc="Default of the in-sync replicas an acks=all produce needs."),
    BrokerKey("auto.leader.rebalance.enable", BOOLEAN, "auto_leader_rebalance_enable",
              doc="Whether the controller moves leadership back to preferred replicas when brokers are imbalanced."),
    BrokerKey("leader.imbalance.per.broker.percentage", INT, "leader_imbalance_per_broker_percentage",
              doc="Share of a broker's partitions not led by it, in percent, above which a rebalance runs."),
    BrokerKey("leader.imbalance.check.interval.seconds", LONG, "leader_imbalance_check_interval_seconds",
              doc="How often the controller checks the leader imbalance."),
    BrokerKey(THROTTLE_KEY, LONG, "replica_alter_log_dirs_io_max_bytes_per_second", dynamic=True,
              default=LONG_MAX,
              doc="Bytes per second that all replica moves between this broker's log dirs may copy together "
                  "(KIP-113's intra.broker.throttled.rate)."),
    *[BrokerKey(f"{who}.replication.throttled.rate", LONG, None, dynamic=True, default=LONG_MAX, minimum=0,
                doc=f"Bytes per second that replication of the replicas in each topic's {who}.replication."
                    f"throttled.replicas may use on this broker as {who} (dynamic only; unlimited by default).")
      for who in ("leader", "follower")],
    BrokerKey("replication.quota.window.num", INT, "replication_quota_window_num",
              doc="Samples the inter-broker replication throttles measure their rate over."),
    BrokerKey("replication.quota.window.size.seconds", INT, "replication_quota_window_size_seconds",
              doc="The length of one sample of the inter-broker replication throttles."),
    *[BrokerKey(name, INT, None, dynamic=True, default=(1 << 31) - 1, doc=doc) for name, doc in (
        ("reassignment.parallel.replica.count",
         "KIP-435: replicas of one partition a reassignment step adds (and drops) at a time; cluster-wide."),
        ("reassignment.parallel.partition.count",
         "KIP-435: partitions taking a reassignment step at once; cluster-wide."),
        ("reassignment.parallel.leader.movements",
         "KIP-435: reassignment steps moving a leader at once; cluster-wide."))],
    BrokerKey("num.replica.alter.log.dirs.threads", INT, "num_replica_alter_log_dirs_threads",
              doc="Threads moving replicas between log dirs (default: one per log dir)."),
    BrokerKey("log.dir.failure.timeout.ms", LONG, "log_dir_failure_timeout_ms",
              doc="How long a broker may keep serving after a log dir failed before it must be reported."),
    BrokerKey("log.dir.stall.timeout.ms", LONG, "log_dir_stall_timeout_ms",
              doc="kjbod: a log dir whose file operation has not returned for this long is taken offline (0: never)."),
    BrokerKey("log.dir.slow.threshold.ms", LONG, "log_dir_slow_threshold_ms",
              doc="kjbod: a log dir whose file operations take longer than this is shown as degraded (0: never)."),
    BrokerKey("log.dir.reserved.bytes", LONG, "log_dir_reserved_bytes",
              doc="kjbod: bytes kept free in each log dir; below it the dir is full and refuses appends "
                  "(-1: the smaller of 1% of its filesystem and 1 GiB)."),
    BrokerKey("log.dir.space.check.interval.ms", LONG, "log_dir_space_check_interval_ms",
              doc="kjbod: how often each log dir's free space is checked (what brings a full dir back)."),
    BrokerKey("socket.request.max.bytes", INT, "socket_request_max_bytes", doc="Largest request accepted."),
    BrokerKey("broker.heartbeat.interval.ms", INT, "broker_heartbeat_interval_ms",
              doc="Interval between broker heartbeats."),
    BrokerKey("broker.session.timeout.ms", INT, "broker_session_timeout_ms",
              doc="Time without heartbeat after which a broker is fenced."),
    BrokerKey("fetch.max.bytes", INT, "fetch_max_bytes",
              doc="The most record bytes a Fetch answer carries: a request's max_bytes above it is cut to it "
                  "(a first batch over it is still sent whole)."),
    BrokerKey("replica.fetch.max.bytes", INT, "replica_fetch_max_bytes", doc="Bytes per partition per fetch."),
    BrokerKey("log.dir.placement.policy", STRING, "log_dir_placement_policy",
              doc="kjbod: where new partitions go (most-usable or fewest-partitions)."),
    BrokerKey("offsets.topic.num.partitions", INT, "offsets_topic_num_partitions",
              doc="Partitions of __consumer_offsets (made on a group's first FindCoordinator)."),
    BrokerKey("offsets.topic.replication.factor", SHORT, "offsets_topic_replication_factor",
              doc="Replicas of __consumer_offsets; it is not made while fewer brokers are alive."),
    BrokerKey("transaction.state.log.num.partitions", INT, "transaction_state_log_num_partitions",
              doc="Partitions of __transaction_state (made on the first transactional InitProducerId)."),
    BrokerKey("transaction.state.log.replication.factor", SHORT, "transaction_state_log_replication_factor",
              doc="Replicas of __transaction_state; it is not made while fewer brokers are alive."),
    BrokerKey("transaction.state.log.min.isr", INT, "transaction_state_log_min_isr",
              doc="min.insync.replicas of __transaction_state."),
    BrokerKey("transaction.state.log.segment.bytes", INT, "transaction_state_log_segment_bytes",
              doc="segment.bytes of __transaction_state."),
    BrokerKey("share.coordinator.state.topic.num.partitions", INT, "share_coordinator_state_topic_num_partitions",
              doc="Partitions of __share_group_state (made on the first FindCoordinator for a share key)."),
    BrokerKey("share.coordinator.state.topic.replication.factor", SHORT,
              "share_coordinator_state_topic_replication_factor",
              doc="Replicas of __share_group_state; it is not made while fewer brokers are alive."),
    BrokerKey("share.coordinator.state.topic.min.isr", SHORT, "share_coordinator_state_topic_min_isr",
              doc="min.insync.replicas of __share_group_state."),
    BrokerKey("share.coordinator.state.topic.segment.bytes", INT, "share_coordinator_state_topic_segment_bytes",
              doc="segment.bytes of __share_group_state."),
    BrokerKey("share.coordinator.snapshot.update.records.per.snapshot", INT,
              "share_coordinator_snapshot_update_records_per_snapshot",
              doc="ShareUpdate records of a share-partition between two ShareSnapshot records."),
    BrokerKey("transaction.max.timeout.ms", INT, "transaction_max_timeout_ms",
              doc="The longest transaction timeout a transactional producer may ask for."),
    BrokerKey("transaction.abort.timed.out.transaction.cleanup.interval.ms", INT,
              "transaction_abort_timed_out_transaction_cleanup_interval_ms",
              doc="How often transactions past their timeout are aborted."),
    BrokerKey("group.initial.rebalance.delay.ms", INT, "group_initial_rebalance_delay_ms",
              doc="How long a new group's first rebalance waits for more members."),
    BrokerKey("group.min.session.timeout.ms", INT, "group_min_session_timeout_ms",
              doc="The smallest session timeout a group member may ask for."),
    BrokerKey("group.max.session.timeout.ms", INT, "group_max_session_timeout_ms",
              doc="The largest session timeout a group member may ask for."),
    BrokerKey("group.max.size", INT, "group_max_size", doc="The most members a group may have."),
    BrokerKey("max.request.partition.size.limit", INT, "max_request_partition_size_limit",
              doc="The most partitions one DescribeTopicPartitions answer holds."),
    BrokerKey("group.consumer.session.timeout.ms", INT, "group_consumer_session_timeout_ms",
              doc="How long a consumer-protocol member may go without a heartbeat."),
    BrokerKey("group.consumer.heartbeat.interval.ms", INT, "group_consumer_heartbeat_interval_ms",
              doc="How often consumer-protocol members heartbeat."),
    BrokerKey("group.consumer.assignors", LIST, "group_consumer_assignors",
              doc="Server-side assignors of consumer-protocol groups; the first is the default."),
    BrokerKey("group.consumer.max.size", INT, "group_consumer_max_size",
              doc="The most members a consumer-protocol group may have."),
    BrokerKey("group.consumer.min.session.timeout.ms", INT, "group_consumer_min_session_timeout_ms",
              doc="The smallest consumer.session.timeout.ms a group may be given."),
    BrokerKey("group.consumer.max.session.timeout.ms", INT, "group_consumer_max_session_timeout_ms",
              doc="The largest consumer.session.timeout.ms a group may be given."),
    BrokerKey("group.consumer.min.heartbeat.interval.ms", INT, "group_consumer_min_heartbeat_interval_ms",
              doc="The smallest consumer.heartbeat.interval.ms a group may be given."),
    BrokerKey("group.consumer.max.heartbeat.interval.ms", INT, "group_consumer_max_heartbeat_interval_ms",
              doc="The largest consumer.heartbeat.interval.ms a group may be given."),
    BrokerKey("group.consumer.migration.policy", STRING, "group_consumer_migration_policy",
              doc="Whether a non-empty group may change between the classic and the consumer protocol."),
    BrokerKey("group.share.session.timeout.ms", INT, "group_share_session_timeout_ms",
              doc="How long a share group member may go without a heartbeat."),
    BrokerKey("group.share.heartbeat.interval.ms", INT, "group_share_heartbeat_interval_ms",
              doc="How often share group members heartbeat."),
    BrokerKey("group.share.min.session.timeout.ms", INT, "group_share_min_session_timeout_ms",
              doc="The smallest share.session.timeout.ms a group may be given."),
    BrokerKey("group.share.max.session.timeout.ms", INT, "group_share_max_session_timeout_ms",
              doc="The largest share.session.timeout.ms a group may be given."),
    BrokerKey("group.share.min.heartbeat.interval.ms", INT, "group_share_min_heartbeat_interval_ms",
              doc="The smallest share.heartbeat.interval.ms a group may be given."),
    BrokerKey("group.share.max.heartbeat.interval.ms", INT, "group_share_max_heartbeat_interval_ms",
              doc="The largest share.heartbeat.interval.ms a group may be given."),
    BrokerKey("group.share.max.size", INT, "group_share_max_size", doc="The most members a share group may have."),
    BrokerKey("group.share.record.lock.duration.ms", INT, "group_share_record_lock_duration_ms",
              doc="The share.record.lock.duration.ms of share groups that do not set their own."),
    BrokerKey("group.share.min.record.lock.duration.ms", INT, "group_share_min_record_lock_duration_ms",
              doc="The smallest share.record.lock.duration.ms a group may be given."),
    BrokerKey("group.share.max.record.lock.duration.ms", INT, "group_share_max_record_lock_duration_ms",
              doc="The largest share.record.lock.duration.ms a group may be given."),
    BrokerKey("group.share.delivery.count.limit", INT, "group_share_delivery_count_limit",
              doc="The share.delivery.count.limit of share groups that do not set their own."),
    BrokerKey("group.share.min.delivery.count.limit", INT, "group_share_min_delivery_count_limit",
              doc="The smallest share.delivery.count.limit a group may be given."),
    BrokerKey("group.share.max.delivery.count.limit", INT, "group_share_max_delivery_count_limit",
              doc="The largest share.delivery.count.limit a group may be given."),
    BrokerKey("group.share.partition.max.record.locks", INT, "group_share_partition_max_record_locks",
              doc="The share.partition.max.record.locks of share groups that do not set their own."),
    BrokerKey("group.share.min.partition.max.record.locks", INT, "group_share_min_partition_max_record_locks",
              doc="The smallest share.partition.max.record.locks a group may be given."),
    BrokerKey("group.share.max.partition.max.record.locks", INT, "group_share_max_partition_max_record_locks",
              doc="The largest share.partition.max.record.locks a group may be given."),
    BrokerKey("group.share.initialize.retry.interval.ms", INT, "group_share_initialize_retry_interval_ms",
              doc="How long a share partition's state initialization may take before it is asked for again."),
    BrokerKey("group.streams.session.timeout.ms", INT, "group_streams_session_timeout_ms",
              doc="How long a streams group member may go without a heartbeat."),
    BrokerKey("group.streams.heartbeat.interval.ms", INT, "group_streams_heartbeat_interval_ms",
              doc="How often streams group members heartbeat."),
    BrokerKey("group.streams.min.session.timeout.ms", INT, "group_streams_min_session_timeout_ms",
              doc="The smallest streams.session.timeout.ms a group may be given."),
    BrokerKey("group.streams.max.session.timeout.ms", INT, "group_streams_max_session_timeout_ms",
              doc="The largest streams.session.timeout.ms a group may be given."),
    BrokerKey("group.streams.min.heartbeat.interval.ms", INT, "group_streams_min_heartbeat_interval_ms",
              doc="The smallest streams.heartbeat.interval.ms a group may be given."),
    BrokerKey("group.streams.max.heartbeat.interval.ms", INT, "group_streams_max_heartbeat_interval_ms",
              doc="The largest streams.heartbeat.interval.ms a group may be given."),
    BrokerKey("group.streams.max.size", INT, "group_streams_max_size",
              doc="The most members a streams group may have."),
    BrokerKey("group.streams.num.standby.replicas", INT, "group_streams_num_standby_replicas",
              doc="The streams.num.standby.replicas of streams groups that do not set their own."),
    BrokerKey("group.streams.max.standby.replicas", INT, "group_streams_max_standby_replicas",
              doc="The largest streams.num.standby.replicas a group may be given."),
    BrokerKey("group.streams.initial.rebalance.delay.ms", INT, "group_streams_initial_rebalance_delay_ms",
              doc="How long an empty streams group gathers members before its first assignment."),
    BrokerKey("offset.metadata.max.bytes", INT, "offset_metadata_max_bytes",
              doc="The longest metadata an offset commit may carry."),
    BrokerKey("offsets.retention.check.interval.ms", LONG, "offsets_retention_check_interval_ms",
              doc="How often expired offsets are looked for."),
    BrokerKey("max.connections", INT, "max_connections", dynamic=True, default=INT_MAX, minimum=0,
              doc="The most connections the broker keeps open; an acceptor waits while it is reached (the "
                  "inter-broker listener excepted). Per listener: listener.name.<listener>.max.connections."),
    BrokerKey("max.connections.per.ip", INT, "max_connections_per_ip", dynamic=True, default=INT_MAX, minimum=0,
              doc="The most connections from one IP address; one more is closed at once."),
    BrokerKey("max.connections.per.ip.overrides", STRING, "max_connections_per_ip_overrides", dynamic=True,
              default="", doc="Per-IP limits for some hosts or addresses, as host:count,..."),
    BrokerKey("max.connection.creation.rate", INT, "max_connection_creation_rate", dynamic=True, default=INT_MAX,
              minimum=0, doc="The most new connections a second the broker accepts (KIP-612); per listener: "
                             "listener.name.<listener>.max.connection.creation.rate."),
    BrokerKey("connection.failed.authentication.delay.ms", INT, "connection_failed_authentication_delay_ms",
              doc="How long the answer to a failed SASL authentication, and the close after it, are delayed."),
    BrokerKey("connections.max.idle.ms", LONG, "connections_max_idle_ms",
              doc="A connection with no request for this long is closed (-1: never)."),
    BrokerKey("kjbod.zero.copy", BOOLEAN, "zero_copy", doc="kjbod: send Fetch record data with sendfile."),
    BrokerKey("kjbod.extensions.enable", BOOLEAN, "extensions_enable",
              doc="kjbod: serve kjbod's protocol extensions (false: answer as Apache Kafka does)."),
    BrokerKey("kjbod.metrics.listener", STRING, "kjbod_metrics_listener",
              doc="kjbod: HOST:PORT of the Prometheus /metrics endpoint (unset: none)."),
]}


# Connection limits (Kafka's socket server), dynamic per broker or as the cluster default; the two of
# LISTENER_CONNECTION_KEYS also per listener, as listener.name.<listener>.<key> (dynamic and in server.properties).
CONNECTION_KEYS = ("max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides",
                   "max.connection.creation.rate")
LISTENER_CONNECTION_KEYS = ("max.connections", "max.connection.creation.rate")
_LISTENER_CONNECTION_KEY = re.compile(
    r"^listener\.name\.([A-Za-z0-9_.-]+?)\.(max\.connections|max\.connection\.creation\.rate)$")


def listener_connection_key(key: str) -> tuple[str, str] | None:
    """(LISTENER, key) for listener.name.<listener>.max.connections or ...max.connection.creation.rate (the
    listener name upper-cased, as listener names are), else None."""
    m = _LISTENER_CONNECTION_KEY.match(key)
    return (m.group(1).upper(), m.group(2)) if m else None


def parse_per_ip_overrides(key: str, raw: str) -> dict[str, int]:
    """host:count,... as {host: count}; ValueError naming key and value for an entry that is not host:count
    with a count from 0 to INT_MAX (hosts are resolved where the limits are applied)."""
    out: dict[str, int] = {}
    for item in (p.strip() for p in raw.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        host = host.strip()
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        count = count.strip()
        if not sep or not host or not re.fullmatch(r"\+?[0-9]{1,10}", count) or int(count) > INT_MAX:
            raise ValueError(f"invalid value {raw!r} for {key}: {item!r} is not host:count (a count from 0 to "
                             f"{INT_MAX})")
        out[host] = int(count)
    return out


def check_connection_value(key: str, raw: str) -> str:
    """A dynamic connection limit as it is kept (stripped); a bad one is BAD_BROKER_VALUE naming key and value.
    The broker-wide numbers are from 0 (Kafka's atLeast(0)); a listener's from 1 (Kafka refuses 0 or less for
    a listener's limits at runtime)."""
    text = raw.strip()
    if key == "max.connections.per.ip.overrides":
        try:
            parse_per_ip_overrides(key, text)
        except ValueError as e:
            raise ConfigProblem(BAD_BROKER_VALUE, str(e)) from None
        return text
    lo = 1 if listener_connection_key(key) is not None else 0
    if not topic_config.JAVA_INTEGER.fullmatch(text) or len(text) > 11 or not lo <= int(text) <= INT_MAX:
        raise ConfigProblem(BAD_BROKER_VALUE, f"invalid value {raw!r} for {key}: expected an integer between {lo} "
                                              f"and {INT_MAX}")
    return str(int(text))


# The dynamic broker defaults of topic configs: broker key -> the topic config it stands for.
LOG_CONFIG_KEYS: dict[str, topic_config.TopicConfigDef] = {
    d.broker_key: d for d in topic_config.DEFS.values() if d.broker_key is not None}


# Kafka's other broker synonyms of those topic configs: known keys that stay static (INVALID_REQUEST when asked
# to change, not INVALID_CONFIG as an unknown key).
STATIC_SYNONYMS = frozenset({"log.roll.hours", "log.roll.jitter.hours", "log.retention.minutes",
                             "log.retention.hours", "log.flush.scheduler.interval.ms"})


# A bad value for a broker config (per broker or the cluster default) is INVALID_REQUEST, as Kafka's broker answers
# it (ConfigAdminManager turns the config's own error into InvalidRequestException, KAFKA-13609, kept for
# compatibility); a bad value for a topic config is INVALID_CONFIG.
BAD_BROKER_VALUE = ErrorCode.INVALID_REQUEST


class ConfigProblem(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def check_log_default(key: str, raw: str) -> None:
    """A dynamic broker default of a topic config checked as its topic config's value, the message naming the
    broker key (kjbod.server.roles checks it as server.properties would instead, where the server config is)."""
    try:
        topic_config.parse_value(dataclasses.replace(LOG_CONFIG_KEYS[key], name=key), raw)
    except topic_config.TopicConfigError as e:
        raise ConfigProblem(BAD_BROKER_VALUE, str(e)) from None


# The log cleaner's own keys, dynamic as in Kafka (its LogCleaner is reconfigurable): each dir's cleaner takes
# the values in force at its next clean (kjbod.broker.storage_glue.cleaner_config).
CLEANER_KEYS = ("log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.load.factor",
                "log.cleaner.io.max.bytes.per.second", "log.cleaner.backoff.ms")


# Their smallest values, as server.properties takes them, except that a running cleaner keeps at least one thread
# (Kafka refuses fewer than one at runtime).
_CLEANER_MINIMUM: dict[str, int | float] = {
    "log.cleaner.threads": 1, "log.cleaner.dedupe.buffer.size": 0, "log.cleaner.io.buffer.load.factor": 0.0,
    "log.cleaner.io.max.bytes.per.second": 0.0, "log.cleaner.backoff.ms": 0}


def check_cleaner_value(key: str, raw: str) -> int | float:
    """A dynamic value of one of CLEANER_KEYS, read as its type (an int, a long or a double) from its minimum;
    a bad one is BAD_BROKER_VALUE naming key and value."""
    lo = _CLEANER_MINIMUM[key]
    text = raw.strip()
    value: int | float
    if BROKER_KEYS[key].type == DOUBLE:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not value >= lo:  # nan fails too
            raise ConfigProblem(BAD_BROKER_VALUE, f"invalid value {raw!r} for {key}: expected a number >= {lo}")
        return value
    top = INT_MAX if BROKER_KEYS[key].type == INT else LONG_MAX
    if not topic_config.JAVA_INTEGER.fullmatch(text) or len(text) > 20 or not lo <= (value := int(text)) <= top:
        raise ConfigProblem(BAD_BROKER_VALUE, f"invalid value {raw!r} for {key}: expected an integer between {lo} "
                                              f"and {top}")
    return value


def check_cordon_value(resource_name: str, raw: str | None) -> str | None:
    """A dynamic cordoned.log.dirs: set per broker only (its entries are that broker's paths; the broker checks
    them against its log.dirs before the request comes here), absolute paths or `*` alone; returned as a clean
    comma-separated list (None or empty: no dir cordoned, the dynamic value removed)."""
    if resource_name == "":
        raise ConfigProblem(ErrorCode.INVALID_REQUEST, f"{CORDON_KEY} names one broker's log dirs: set it for a "
                            "broker id, not as the cluster-wide default")
    if raw is None:
        return None
    entries = [e.strip() for e in raw.split(",") if e.strip()]
    if "*" in entries and len(entries) > 1:
        raise ConfigProblem(ErrorCode.INVALID_CONFIG, f"{CORDON_KEY}: '*' cordons every log dir and cannot be listed "
                            "with others")
    relative = [e for e in entries if e != "*" and not e.startswith("/")]
    if relative:
        raise ConfigProblem(ErrorCode.INVALID_CONFIG, f"{CORDON_KEY}: {relative[0]!r} is not an absolute path "
                            "(name the log dir as log.dirs and DescribeLogDirs do)")
    return ",".join(dict.fromkeys(entries)) or None


def parse_dynamic_value(key: str, raw: str | None) -> int:
    """Every dynamic key is a number from its minimum: the throttles (longs, bytes per second; the inter-broker
    ones from 0, as Kafka's) and the KIP-435 limits."""
    if raw is None:
        raise ConfigProblem(BAD_BROKER_VALUE, f"{key}: a value is required")
    if not topic_config.JAVA_INTEGER.fullmatch(raw.strip()):
        raise ConfigProblem(BAD_BROKER_VALUE, f"invalid value {raw!r} for {key}: expected an integer")
    k = BROKER_KEYS.get(key)
    lo = k.minimum if k is not None else 1
    if len(raw.strip()) > 20 or not lo <= (value := int(raw.strip())) <= LONG_MAX:
        raise ConfigProblem(BAD_BROKER_VALUE,
                            f"invalid value {raw!r} for {key}: must be between {lo} and {LONG_MAX}")
    return value


class DynamicBrokerConfigs:
    """Dynamic broker configs of this node and the cluster defaults, as replayed from ConfigRecords."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.per_broker: dict[str, str] = {}
        self.cluster_default: dict[str, str] = {}

    @classmethod
    def from_image(cls, node_id: int, image: Any) -> DynamicBrokerConfigs:
        """This node's and the cluster default's dynamic configs as a metadata image holds them."""
        out = cls(node_id)
        out.per_broker = dict(image.resource_configs(BROKER, str(node_id)))
        out.cluster_default = dict(image.resource_configs(BROKER, ""))
        return out

    def target(self, resource_name: str) -> dict[str, str] | None:
        if resource_name == "":
            return self.cluster_default
        if resource_name == str(self.node_id):
            return self.per_broker
        return None

    def apply(self, resource_name: str, key: str, value: str | None) -> None:
        target = self.target(resource_name)
        if target is None:
            return  # another broker's config: not ours to apply
        key = ALIASES.get(key, key)
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value

    def merged(self) -> dict[str, str]:
        """Every dynamic value in force on this broker: its own over the cluster default."""
        return {**self.cluster_default, **self.per_broker}

    def effective(self, key: str) -> tuple[str, int] | None:
        """(value, source) of a dynamic value for ``key``, or None when neither level sets it."""
        if key in self.per_broker:
            return self.per_broker[key], DYNAMIC_BROKER_CONFIG
        if key in self.cluster_default:
            return self.cluster_default[key], DYNAMIC_DEFAULT_BROKER_CONFIG
        return None


# ------------------------------------------------------------------------------------------------ describe


@dataclass
class Entry:
    name: str
    value: str | None
    source: int
    type: int
    read_only: bool = False
    doc: str = ""
    synonyms: list[tuple[str, str | None, int]] = field(default_factory=list)


def _render(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return java_double(value)
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value)
    return str(value)


def java_double(value: float) -> str:
    """A double as Java's Double.toString writes it (what Kafka's DescribeConfigs shows): plain from 10^-3 up to
    10^7, else the shortest digits as d.dddEn ("1.7976931348623157E308", "1.0E-4")."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(float(value))  # Python writes this range plainly too, with the same shortest digits
    sign, digits, exponent = Decimal(repr(float(value))).as_tuple()
    assert isinstance(exponent, int)
    mantissa = "".join(map(str, digits)).rstrip("0") or "0"
    power = len(digits) - 1 + exponent
    return f"{'-' if sign else ''}{mantissa[0]}.{mantissa[1:] or '0'}E{power}"


def _static_source(config: Any, key: str) -> tuple[str, int]:
    """Name and source of the static value: the key (or an alias of it) set in server.properties, or the
    default."""
    props = getattr(config, "properties", None) or {}
    if key in props:
        return key, STATIC_BROKER_CONFIG
    for alias, canonical in ALIASES.items():
        if canonical == key and alias in props:
            return alias, STATIC_BROKER_CONFIG
    return key, DEFAULT_CONFIG


def broker_entry(config: Any, dynamic: DynamicBrokerConfigs, k: BrokerKey) -> Entry:
    static_value = _render(getattr(config, k.attr, k.default)) if k.attr else _render(k.default)
    d = LOG_CONFIG_KEYS.get(k.name)
    if d is not None:
        # The broker default of a topic config lists the synonyms the topic config lists below its own override
        # (Kafka's ConfigHelper asks the same brokerConfigSynonyms for both).
        synonyms = _topic_broker_synonyms(config, dynamic, d)
        value, source = (synonyms[0][1], synonyms[0][2]) if synonyms else (static_value, DEFAULT_CONFIG)
        return Entry(k.name, value, source, k.type, read_only=False, doc=k.doc, synonyms=synonyms)
    static_name, static_source = _static_source(config, k.name)
    synonyms = []
    if k.name in dynamic.per_broker:
        synonyms.append((k.name, dynamic.per_broker[k.name], DYNAMIC_BROKER_CONFIG))
    if k.name in dynamic.cluster_default:
        synonyms.append((k.name, dynamic.cluster_default[k.name], DYNAMIC_DEFAULT_BROKER_CONFIG))
    synonyms.append((static_name, static_value, static_source))
    if static_source == STATIC_BROKER_CONFIG and k.default is not None:
        synonyms.append((k.name, _render(k.default), DEFAULT_CONFIG))
    value, source = synonyms[0][1], synonyms[0][2]
    return Entry(k.name, value, source, k.type, read_only=not k.dynamic, doc=k.doc, synonyms=synonyms)


def describe_broker(config: Any, dynamic: DynamicBrokerConfigs, resource_name: str,
                    keys: Iterable[str] | None) -> list[Entry]:
    check_broker_name(resource_name, dynamic.node_id)
    wanted = None if keys is None else {ALIASES.get(k, k) for k in keys}
    if resource_name == "":
        # The cluster-default resource lists only the defaults set dynamically, as Kafka does.
        out = []
        for key, value in sorted(dynamic.cluster_default.items()):
            k = BROKER_KEYS.get(key)
            if k is not None and (wanted is None or key in wanted):
                out.append(Entry(key, value, DYNAMIC_DEFAULT_BROKER_CONFIG, k.type, read_only=False, doc=k.doc,
                                 synonyms=[(key, value, DYNAMIC_DEFAULT_BROKER_CONFIG)]))
        return out
    out = [broker_entry(config, dynamic, k) for name, k in BROKER_KEYS.items() if wanted is None or name in wanted]
    return out + _listener_connection_entries(config, dynamic, wanted)


def _listener_connection_entries(config: Any, dynamic: DynamicBrokerConfigs, wanted: set[str] | None) -> list[Entry]:
    """The listener-prefixed connection limits that are set (dynamically or in server.properties), as Kafka lists
    a listener's configs: each with its synonyms by source."""
    props = getattr(config, "properties", None) or {}
    names = [k for k in (*dynamic.per_broker, *dynamic.cluster_default, *props) if listener_connection_key(k)]
    out = []
    for key in dict.fromkeys(names):
        if wanted is not None and key not in wanted:
            continue
        synonyms = [(key, level[key], source) for level, source in ((dynamic.per_broker, DYNAMIC_BROKER_CONFIG),
                                                                    (dynamic.cluster_default,
                                                                     DYNAMIC_DEFAULT_BROKER_CONFIG),
                                                                    (props, STATIC_BROKER_CONFIG)) if key in level]
        out.append(Entry(key, synonyms[0][1], synonyms[0][2], INT, read_only=False,
                         doc="A listener's own connection limit.", synonyms=synonyms))
    return out


# The broker keys that stand for one of kjbod's topic-config broker keys (Kafka's
# DynamicBrokerConfig.brokerConfigSynonyms), in Kafka's order, each with the default Kafka's broker config gives
# it (None: it has none, the next one decides). Every other broker key stands alone and has a default.
_BROKER_KEY_SYNONYMS: dict[str, tuple[tuple[str, str | None], ...]] = {
    "log.roll.ms": (("log.roll.ms", None), ("log.roll.hours", "168")),
    "log.roll.jitter.ms": (("log.roll.jitter.ms", None), ("log.roll.jitter.hours", "0")),
    "log.retention.ms": (("log.retention.ms", None), ("log.retention.minutes", None), ("log.retention.hours", "168")),
    "log.flush.interval.ms": (("log.flush.interval.ms", None), ("log.flush.scheduler.interval.ms", str(LONG_MAX))),
}


def _topic_broker_synonyms(config: Any, dynamic: DynamicBrokerConfigs | None,
                           d: topic_config.TopicConfigDef) -> list[tuple[str, str | None, int]]:
    """A topic config's broker synonyms as Kafka's ConfigHelper lists them, source by source: each of the broker
    key's synonyms set dynamically for this broker, then in the cluster default (only the first synonym, the
    broker key itself, can be), then set in server.properties (as written there), then each that has a
    default; a topic config no broker key stands for (the throttled-replicas lists) has none. Kafka then drops
    what comes before the first entry named for the broker key itself, so a retention set only as
    log.retention.hours, or left at its default (log.retention.hours=168), leaves retention.ms with no synonym
    at all, its source the default: Kafka's answer, kept as Kafka gives it (its value is still the retention
    in force)."""
    key = d.broker_key
    if key is None:
        return []
    found: list[tuple[str, str | None, int]] = []
    if dynamic is not None:
        found += [(key, level[key], source) for level, source in ((dynamic.per_broker, DYNAMIC_BROKER_CONFIG),
                                                                   (dynamic.cluster_default,
                                                                    DYNAMIC_DEFAULT_BROKER_CONFIG))
                  if key in level]
    names = _BROKER_KEY_SYNONYMS.get(key)
    if names is None:
        static_name, static_source = _static_source(config, key)
        if static_source == STATIC_BROKER_CONFIG:
            found.append((static_name, _render(topic_config.broker_default(d, config)), static_source))
        found.append((key, _render(d.fallback), DEFAULT_CONFIG))
        return found
    props = getattr(config, "properties", None) or {}
    found += [(n, str(props[n]).strip(), STATIC_BROKER_CONFIG) for n, _ in names if n in props]
    found += [(n, default, DEFAULT_CONFIG) for n, default in names if default is not None]
    while found and found[0][0] != key:
        del found[0]
    return found


def describe_topic(config: Any, overrides: dict[str, str], keys: Iterable[str] | None,
                   dynamic: DynamicBrokerConfigs | None = None) -> list[Entry]:
    """A topic's configs: its overrides, else this broker's dynamic values (``dynamic``), else static ones."""
    wanted = None if keys is None else set(keys)
    out = []
    merged = dynamic.merged() if dynamic is not None else None
    for name, (value, is_override) in topic_config.effective(overrides, config, merged).items():
        if wanted is not None and name not in wanted:
            continue
        d = topic_config.DEFS[name]
        # Kafka's order (ConfigHelper.configSynonyms): the topic override, then the broker's synonyms by
        # source (dynamic per-broker, dynamic cluster default, static, default), each (name, source) once.
        synonyms: list[tuple[str, str | None, int]] = []
        if is_override:
            synonyms.append((name, _render(value), TOPIC_CONFIG))
        synonyms += _topic_broker_synonyms(config, dynamic, d)
        source = synonyms[0][2] if synonyms else DEFAULT_CONFIG
        out.append(Entry(name, _render(value), source, _TOPIC_TYPES.get(d.type, STRING), read_only=False,
                         doc=d.doc, synonyms=synonyms))
    return out


def check_broker_name(resource_name: str, node_id: int) -> None:
    if resource_name == "" or resource_name == str(node_id):
        return
    try:
        int(resource_name)
    except ValueError:
        raise ConfigProblem(ErrorCode.INVALID_REQUEST,
                            f"broker resource name must be a broker id or empty, not {resource_name!r}") from None
    raise ConfigProblem(ErrorCode.INVALID_REQUEST,
                        f"unexpected broker id, expected {node_id} or empty string, but received {resource_name}")


# ------------------------------------------------------------------------------------------------ changes


def _apply_op(key: str, current: str | None, op: int, operand: str | None, is_list: bool) -> str | None:
    if op == SET:
        return operand
    if op == DELETE:
        return None
    if op in (APPEND, SUBTRACT):
        if not is_list:
            verb = "append" if op == APPEND else "subtract"
            raise ConfigProblem(ErrorCode.INVALID_REQUEST, f"config value {verb} is not allowed for config key: {key}")
        items = [p.strip() for p in (current or "").split(",") if p.strip()]
        given = [p.strip() for p in (operand or "").split(",") if p.strip()]
        if op == APPEND:
            items += [g for g in given if g not in items]
        else:
            items = [i for i in items if i not in given]
        return ",".join(items) if items else None
    raise ConfigProblem(ErrorCode.INVALID_REQUEST, f"unknown config operation {op} for {key}")


def plan_broker_changes(
    dynamic: DynamicBrokerConfigs, resource_name: str, changes: list[tuple[str, int, str | None]], *,
    replace: bool, check_static: Callable[[str, str], None] | None = None,
) -> dict[str, str | None]:
    """New dynamic values for this broker (or the cluster default): {key: value, None = remove}.

    ``changes``: (key, operation, value); ``replace`` (AlterConfigs) drops every dynamic key not named.
    ``check_static(key, value)`` checks a topic config's broker default as server.properties would (raising
    ConfigProblem); without it, as the topic config's own value."""
    check_broker_name(resource_name, dynamic.node_id)
    target = dynamic.target(resource_name)
    assert target is not None
    unknown = [k for k, _, _ in changes if ALIASES.get(k, k) not in BROKER_KEYS and k not in STATIC_SYNONYMS
               and listener_connection_key(k) is None]
    if unknown:
        raise ConfigProblem(ErrorCode.INVALID_CONFIG,
                            f"unknown or unsupported broker config {unknown[0]!r} (kjbod changes only {THROTTLE_KEY}, "
                            f"{CORDON_KEY}, "
                            "the *.replication.throttled.rate throttles, the reassignment.parallel.* limits, the "
                            "log cleaner's keys, the connection limits (max.connections, ...), "
                            "transaction.partition.verification.enable and the broker "
                            "defaults of topic configs (log.retention.ms, ...) at runtime)")
    static = sorted({ALIASES.get(k, k) for k, _, _ in changes if listener_connection_key(k) is None}
                    - {k for k, v in BROKER_KEYS.items() if v.dynamic})
    if static:
        raise ConfigProblem(ErrorCode.INVALID_REQUEST,
                            f"Cannot update these configs dynamically: {', '.join(static)}")
    out: dict[str, str | None] = {k: None for k in target} if replace else {}
    for key, op, raw in changes:
        key = ALIASES.get(key, key)
        current = out[key] if key in out else target.get(key)
        is_list = key in BROKER_KEYS and BROKER_KEYS[key].type == LIST
        new = _apply_op(key, current, op, raw, is_list)
        if key == CORDON_KEY:
            new = check_cordon_value(resource_name, new)
        elif new is not None and (key in CONNECTION_KEYS or listener_connection_key(key) is not None):
            new = check_connection_value(key, new)
        elif new is not None and key in CLEANER_KEYS:
            new = new.strip()
            check_cleaner_value(key, new)
        elif new is not None and key in LOG_CONFIG_KEYS:
            new = new.strip()  # kept as given, as Kafka keeps it; read as the topic config's type
            (check_static or check_log_default)(key, new)
        elif new is not None and key in BROKER_KEYS and BROKER_KEYS[key].type == BOOLEAN:
            new = new.strip().lower()
            if new not in ("true", "false"):
                raise ConfigProblem(BAD_BROKER_VALUE, f"invalid value {raw!r} for {key}: expected true or false")
        elif new is not None:
            new = str(parse_dynamic_value(key, new))
        out[key] = new
    return {k: v for k, v in out.items() if target.get(k) != v}


def plan_topic_changes(
    overrides: dict[str, str], changes: list[tuple[str, int, str | None]], *, replace: bool,
) -> dict[str, str]:
    """The topic's complete new set of overrides, validated (raises ConfigProblem naming the key)."""
    new = {} if replace else dict(overrides)
    for key, op, raw in changes:
        d = topic_config.DEFS.get(key)
        if d is None:
            raise ConfigProblem(ErrorCode.INVALID_CONFIG, f"unknown or unsupported topic config {key!r} "
                                f"(supported: {', '.join(sorted(topic_config.DEFS))})")
        value = _apply_op(key, new.get(key), op, raw, d.type == "list")
        if value is None:
            new.pop(key, None)
        else:
            new[key] = value
    try:
        topic_config.validate(dict[str, str | None](new))
    except topic_config.TopicConfigError as e:
        raise ConfigProblem(ErrorCode.INVALID_CONFIG, str(e)) from None
    return new


def duplicates(names: Iterable[str]) -> set[str]:
    seen: set[str] = set()
    dup: set[str] = set()
    for n in names:
        (dup if n in seen else seen).add(n)
    return dup


# ------------------------------------------------------------------------------------------------ group configs
@dataclass(frozen=True, slots=True)
class GroupKey:
    """A per-group config (Kafka's GroupConfig).  An integer's default is the broker key `broker_attr` holds, and
    a group's value must be at least `at_least` and lie within the broker's min and max keys; a string or boolean
    without a broker key has Kafka's `default`, and a string may be checked by `check` (the reason it is refused,
    or None)."""

    name: str
    broker_attr: str | None
    min_key: str | None
    max_key: str | None
    doc: str
    kind: int = INT
    at_least: int = 1
    default: Any = None
    check: Callable[[str], str | None] | None = None


_ISO_DURATION = re.compile(r"P(?:([0-9]+)D)?(?:T(?:([0-9]+)H)?(?:([0-9]+)M)?(?:([0-9]+(?:\.[0-9]{1,9})?)S)?)?",
                           re.IGNORECASE)


def auto_offset_reset(value: str) -> tuple[str, int | None]:
    """A share.auto.offset.reset value -> ("earliest" | "latest", None) or ("by_duration", milliseconds);
    ValueError when it is none of Kafka's forms (case does not matter; the duration is ISO-8601's PnDTnHnMn.nS,
    not negative)."""
    text = value.strip().lower()
    if text in ("earliest", "latest"):
        return text, None
    if text.startswith("by_duration:"):
        m = _ISO_DURATION.fullmatch(text[len("by_duration:"):].strip())
        if m is not None and any(g is not None for g in m.groups()) and not text.endswith("t"):
            days, hours, minutes, seconds = (m.group(i) for i in range(1, 5))
            ms = ((int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes or 0)) * 60_000
            return "by_duration", ms + int(Decimal(seconds or 0) * 1000)
    raise ValueError(value)


def _check_auto_offset_reset(raw: str) -> str | None:
    try:
        auto_offset_reset(raw)
    except ValueError:
        return ("The value must be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.")
    return None


def _check_isolation_level(raw: str) -> str | None:
    return None if raw in ("read_committed", "read_uncommitted") else \
        "String must be one of: read_committed, read_uncommitted"


GROUP_KEYS = {k.name: k for k in (
    GroupKey("consumer.session.timeout.ms", "group_consumer_session_timeout_ms",
             "group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms",
             "How long a consumer-protocol member of this group may go without a heartbeat before it is removed."),
    GroupKey("consumer.heartbeat.interval.ms", "group_consumer_heartbeat_interval_ms",
             "group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms",
             "How often consumer-protocol members of this group are told to heartbeat."),
    GroupKey("share.session.timeout.ms", "group_share_session_timeout_ms",
             "group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms",
             "How long a member of this share group may go without a heartbeat before it is removed."),
    GroupKey("share.heartbeat.interval.ms", "group_share_heartbeat_interval_ms",
             "group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms",
             "How often members of this share group are told to heartbeat."),
    GroupKey("share.record.lock.duration.ms", "group_share_record_lock_duration_ms",
             "group.share.min.record.lock.duration.ms", "group.share.max.record.lock.duration.ms",
             "How long a record handed to a member of this share group stays locked to it.", at_least=1000),
    GroupKey("share.delivery.count.limit", "group_share_delivery_count_limit",
             "group.share.min.delivery.count.limit", "group.share.max.delivery.count.limit",
             "How many times a record may be delivered to this share group before it is archived.", at_least=2),
    GroupKey("share.partition.max.record.locks", "group_share_partition_max_record_locks",
             "group.share.min.partition.max.record.locks", "group.share.max.partition.max.record.locks",
             "The most records of one partition that may be locked to this share group's members at once.",
             at_least=100),
    GroupKey("streams.session.timeout.ms", "group_streams_session_timeout_ms",
             "group.streams.min.session.timeout.ms", "group.streams.max.session.timeout.ms",
             "How long a member of this streams group may go without a heartbeat before it is removed."),
    GroupKey("streams.heartbeat.interval.ms", "group_streams_heartbeat_interval_ms",
             "group.streams.min.heartbeat.interval.ms", "group.streams.max.heartbeat.interval.ms",
             "How often members of this streams group are told to heartbeat."),
    GroupKey("streams.num.standby.replicas", "group_streams_num_standby_replicas",
             None, "group.streams.max.standby.replicas",
             "How many standby copies of each stateful task this streams group's members keep.", at_least=0),
    GroupKey("streams.initial.rebalance.delay.ms", "group_streams_initial_rebalance_delay_ms", None, None,
             "How long this streams group, when empty, gathers joining members before its first assignment.",
             at_least=0),
    GroupKey("share.auto.offset.reset", None, None, None,
             "Where this share group starts reading a partition it has no state for: earliest, latest or "
             "by_duration:<PnDTnHnMn.nS>.", kind=STRING, default="latest", check=_check_auto_offset_reset),
    GroupKey("share.isolation.level", None, None, None,
             "Whether this share group reads uncommitted transactional records: read_committed or "
             "read_uncommitted.", kind=STRING, default="read_uncommitted", check=_check_isolation_level),
    GroupKey("share.renew.acknowledge.enable", None, None, None,
             "Whether members of this share group may renew the lock of a record they hold.", kind=BOOLEAN,
             default=True),
)}


def group_defaults(config: Any) -> dict[str, Any]:
    """Every group config's value for a group without overrides: the broker's keys, or Kafka's defaults."""
    return {k.name: getattr(config, k.broker_attr) if k.broker_attr is not None else k.default
            for k in GROUP_KEYS.values()}


def _group_value(k: GroupKey, raw: str) -> Any:
    if k.kind == INT:
        return int(raw)
    if k.kind == BOOLEAN:
        return raw.strip().lower() == "true"
    return raw.strip()


def group_values(config: Any, overrides: Any) -> dict[str, Any]:
    """A group's effective configs: its overrides (ConfigRecords of resource type 32) over the broker's keys.  An
    override that does not parse (it cannot pass the controller's checks) is ignored."""
    out = group_defaults(config)
    for name, raw in (overrides or {}).items():
        if name in out and raw is not None:
            try:
                out[name] = _group_value(GROUP_KEYS[name], raw)
            except ValueError:
                pass
    return out


def describe_group(config: Any, overrides: Any, keys: Iterable[str] | None) -> list[Entry]:
    """DescribeConfigs of a group: every group config, GROUP_CONFIG when the group overrides it, else the broker's
    value as DEFAULT_CONFIG (Kafka reports the broker-derived default so)."""
    wanted = None if not keys else set(keys)
    values = group_values(config, overrides)
    out = []
    for k in GROUP_KEYS.values():
        if wanted is not None and k.name not in wanted:
            continue
        source = GROUP_CONFIG if k.name in (overrides or {}) else DEFAULT_CONFIG
        value = _render(values[k.name])
        out.append(Entry(k.name, value, source, k.kind, doc=k.doc, synonyms=[(k.name, value, source)]))
    return out


def _check_group_value(k: GroupKey, raw: str) -> str | None:
    """Why a group config's text is refused (Kafka's ConfigDef words), or None."""
    if k.kind == INT:
        if not re.fullmatch(r"[+-]?[0-9]+", raw) or not k.at_least <= int(raw) <= INT_MAX:
            return f"Value must be an integer of at least {k.at_least}"
        return None
    if k.kind == BOOLEAN:
        return None if raw.lower() in ("true", "false") else "Expected value to be either true or false"
    return k.check(raw) if k.check is not None else None


def plan_group_changes(overrides: dict[str, str], changes: list[tuple[str, int, str | None]], *, replace: bool,
                       bounds: dict[str, int], defaults: dict[str, Any]) -> dict[str, str]:
    """A group's complete new set of overrides, validated as Kafka's GroupConfig validates them (each failure
    INVALID_CONFIG naming the key): known names, values of the key's type (integers of at least the key's
    minimum, share.auto.offset.reset and share.isolation.level among their forms, booleans), integers within the
    broker's min and max keys (`bounds`: broker key -> value), and a session timeout longer than the heartbeat
    interval (`defaults` fill the keys the group does not override)."""
    new = {} if replace else dict(overrides)
    for key, op, raw in changes:
        if key not in GROUP_KEYS:
            raise ConfigProblem(ErrorCode.INVALID_CONFIG, f"Unknown group config name: {key}")
        if raw is None and op != DELETE:
            raise ConfigProblem(ErrorCode.INVALID_CONFIG, f"Null value not supported for group configs: {key}")
        if op in (APPEND, SUBTRACT):
            verb = "append" if op == APPEND else "subtract"
            raise ConfigProblem(ErrorCode.INVALID_REQUEST, f"config value {verb} is not allowed for config key: {key}")
        value = _apply_op(key, new.get(key), op, raw, False)
        if value is None:
            new.pop(key, None)
        else:
            new[key] = value.strip()
    values = dict(defaults)
    for key, raw in new.items():
        k = GROUP_KEYS[key]
        reason = _check_group_value(k, raw)
        if reason is not None:
            raise ConfigProblem(ErrorCode.INVALID_CONFIG, f"Invalid value {raw} for configuration {key}: {reason}")
        values[key] = _group_value(k, raw)
    for key, k in GROUP_KEYS.items():
        if k.min_key is not None and values[key] < bounds[k.min_key]:
            raise ConfigProblem(ErrorCode.INVALID_CONFIG, f"{key} must be greater than or equal to {k.min_key}")
        if k.max_key is not None and values[key] > bounds[k.max_key]:
            raise ConfigProblem(ErrorCode.INVALID_CONFIG, f"{key} must be less than or equal to {k.max_key}")
    for kind in ("consumer", "share", "streams"):
        if values[f"{kind}.session.timeout.ms"] <= values[f"{kind}.heartbeat.interval.ms"]:
            raise ConfigProblem(ErrorCode.INVALID_CONFIG, f"{kind}.session.timeout.ms must be greater than "
                                f"{kind}.heartbeat.interval.ms")
    return new

