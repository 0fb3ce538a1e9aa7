"""The audit of every config key kjbod accepts: each one takes effect, or is listed as compatibility-only.

A key added to the parser (kjbod/server/config.py) fails these tests until it is one of two things:

* **taking effect**: named in ``EFFECTS`` below with the tests that show a change of the key changing what the node
  does (not that it parses), and its ServerConfig attribute read by the node somewhere outside the parser and
  the DescribeConfigs table; or
* **compatibility-only**: in ``COMPATIBILITY_ONLY`` with the reason, read nowhere (so the list stays true),
  logged at start when a config sets it, and listed in the README's "Where kjbod differs" section.

Topic configs are checked the same way: each one is a LogConfig field that the storage reads (or, listed in
READ_OUTSIDE_STORAGE, one the controller or the replication reads from the metadata image), defaulting to a
broker key that takes effect. The one dynamic broker config (the intra-broker throttle) is in EFFECTS too.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re
from pathlib import Path

import pytest

from kjbod.broker import topic_config
from kjbod.server.config import (
    ACCEPTED_NO_EFFECT,
    ALIASES,
    COMPATIBILITY_ONLY,
    KEYS,
    ServerConfig,
    build_config,
)
from kjbod.storage.config import TOPIC_CONFIG_KEYS, LogConfig

REPO = Path(__file__).resolve().parents[1]
EFFECT = "tests/test_config_effects.py::test_the_key_changes_what_storage_does"
NODE = "tests/test_config_effects.py::test_the_nodes_storage_and_mover_run_as_the_keys_say"
LIVE = "tests/datapath/test_config_live.py"
CLUSTER = "tests/cluster/test_cluster_live.py"
REMOTE = "tests/broker/test_remote.py"
REPLICATION = "tests/replication/test_config.py"
ELECTIONS = "tests/controller/test_elections.py"
THROTTLES = "tests/replication/test_throttle.py"
GROUPS = "tests/groups/test_group_state.py"
GROUPS_LIVE = "tests/groups/test_groups_live.py"
CONSUMER_GROUPS = "tests/groups/test_consumer_group_state.py"
GROUP_CONFIGS = "tests/groups/test_group_configs.py"
MIGRATION = "tests/groups/test_group_migration.py"
SHARE_GROUPS = "tests/share/test_groups_config.py"
STREAMS_CONFIG = "tests/streams/test_streams_config.py"
STREAMS_LIVE = "tests/streams/test_streams_groups_live.py"
LIMITS = "tests/test_connection_limits_live.py"
QUOTAS = "tests/test_connection_quotas.py"
TXN_LIVE = "tests/txn/test_txn_coordinator_live.py"
QUORUM = "tests/raft/test_quorum_config.py"

# key -> the tests that show it taking effect
EFFECTS: dict[str, list[str]] = {
    **{f"group.share.{key}": [f"{SHARE_GROUPS}::test_the_share_keys_reach_the_coordinator"]
       for key in ("session.timeout.ms", "heartbeat.interval.ms", "max.size", "initialize.retry.interval.ms")},
    **{f"group.share.{pre}{key}": [f"{SHARE_GROUPS}::test_share_group_config_reads_a_groups_values_over_the_broker_keys",
                                   f"{SHARE_GROUPS}::test_the_share_group_configs_are_checked_as_kafka_checks_them"]
       for pre in ("", "min.", "max.")
       for key in ("record.lock.duration.ms", "delivery.count.limit", "partition.max.record.locks")},
    **{f"group.share.{bound}": [f"{SHARE_GROUPS}::test_the_share_keys_reach_the_coordinator",
                                f"{SHARE_GROUPS}::test_a_groups_share_values_are_checked_against_the_broker_keys"]
       for bound in ("min.session.timeout.ms", "max.session.timeout.ms", "min.heartbeat.interval.ms",
                     "max.heartbeat.interval.ms")},
    "group.consumer.session.timeout.ms": [f"{CONSUMER_GROUPS}::test_the_consumer_keys_reach_the_coordinator",
                                          f"{CONSUMER_GROUPS}::test_the_heartbeat_interval_and_session_timeout_are_the_keys"],
    "group.consumer.heartbeat.interval.ms": [
        f"{CONSUMER_GROUPS}::test_the_consumer_keys_reach_the_coordinator",
        f"{CONSUMER_GROUPS}::test_the_heartbeat_interval_and_session_timeout_are_the_keys"],
    "group.consumer.assignors": [f"{CONSUMER_GROUPS}::test_the_consumer_keys_reach_the_coordinator",
                                 f"{CONSUMER_GROUPS}::test_the_first_configured_assignor_is_the_default"],
    "group.consumer.max.size": [f"{CONSUMER_GROUPS}::test_the_consumer_keys_reach_the_coordinator",
                                f"{CONSUMER_GROUPS}::test_group_consumer_max_size"],
    **{f"group.streams.{key}": [f"{STREAMS_CONFIG}::test_the_streams_keys_reach_the_coordinator"]
       for key in ("session.timeout.ms", "max.size", "num.standby.replicas", "initial.rebalance.delay.ms")},
    "group.streams.heartbeat.interval.ms": [
        f"{STREAMS_CONFIG}::test_the_streams_keys_reach_the_coordinator",
        f"{STREAMS_LIVE}::test_the_heartbeat_interval_is_the_broker_key_or_the_groups_own_config"],
    **{f"group.streams.{bound}": [f"{STREAMS_CONFIG}::test_a_groups_streams_values_are_checked_against_the_broker_keys",
                                  f"{STREAMS_CONFIG}::test_the_broker_keys_are_checked_against_each_other_at_startup"]
       for bound in ("min.session.timeout.ms", "max.session.timeout.ms", "min.heartbeat.interval.ms",
                     "max.heartbeat.interval.ms", "max.standby.replicas")},
    "group.share.max.share.sessions": ["tests/share/test_fetch_live.py::test_the_share_session_limit"],
    "group.consumer.migration.policy": [
        f"{MIGRATION}::test_the_policy_decides_whether_a_consumer_member_may_upgrade_a_classic_group",
        f"{MIGRATION}::test_the_policy_decides_whether_the_last_consumer_member_leaving_downgrades",
        f"{CONSUMER_GROUPS}::test_the_consumer_keys_reach_the_coordinator"],
    **{f"group.consumer.{bound}": [f"{GROUP_CONFIGS}::test_group_values_are_checked_as_kafka_checks_them",
                                   f"{GROUP_CONFIGS}::test_kafka_python_and_confluent_admins_set_and_read_group_configs",
                                   f"{CONSUMER_GROUPS}::test_the_consumer_keys_reach_the_coordinator"]
       for bound in ("min.session.timeout.ms", "max.session.timeout.ms", "min.heartbeat.interval.ms",
                     "max.heartbeat.interval.ms")},
    **{key: ["tests/quotas/test_quota_arithmetic.py::test_the_window_keys_shape_the_brokers_quota_rates",
             "tests/quotas/test_client_quotas_live.py::test_produce_and_fetch_quotas_throttle_their_client_only"]
       for key in ("quota.window.num", "quota.window.size.seconds")},
    "telemetry.max.bytes": ["tests/telemetry/test_client_metrics.py::test_telemetry_max_bytes_reaches_the_broker"],
    **{key: ["tests/quotas/test_mutation_quota.py::test_the_controller_window_keys_set_the_brokers_burst",
             "tests/quotas/test_mutation_quota_live.py::test_a_client_over_its_mutation_rate_is_refused_and_another_is_not"]
       for key in ("controller.quota.window.num", "controller.quota.window.size.seconds")},
    "authorizer.class.name": ["tests/security/test_acls_live.py::test_alice_needs_acls_to_produce_and_consume",
                              "tests/security/test_acls_live.py::test_acl_apis_without_an_authorizer"],
    "super.users": ["tests/security/test_acls_live.py::test_alice_needs_acls_to_produce_and_consume"],
    "early.start.listeners": [
        "tests/security/test_acls.py::test_early_start_listeners_default_to_the_controller_listeners",
        "tests/security/test_acls.py::test_before_the_initial_load_only_super_users_are_served"],
    "delegation.token.secret.key": [
        "tests/security/test_delegation_tokens_live.py::test_a_scram_user_makes_a_token_that_authenticates_as_that_user",
        "tests/security/test_delegation_tokens_live.py::test_tokens_are_refused_without_a_secret_key"],
    "delegation.token.max.lifetime.ms": [
        "tests/security/test_delegation_tokens.py::test_create_makes_one_record_with_kafkas_times",
        "tests/security/test_delegation_tokens_live.py::test_a_scram_user_makes_a_token_that_authenticates_as_that_user"],
    "delegation.token.expiry.time.ms": [
        "tests/security/test_delegation_tokens.py::test_create_makes_one_record_with_kafkas_times",
        "tests/security/test_delegation_tokens_live.py::test_a_scram_user_makes_a_token_that_authenticates_as_that_user"],
    "delegation.token.expiry.check.interval.ms": [
        "tests/security/test_delegation_tokens_live.py::test_a_token_past_its_lifetime_is_refused_and_swept"],
    "allow.everyone.if.no.acl.found": [
        "tests/security/test_acls.py::test_no_acl_denies_unless_allow_everyone_if_no_acl_found"],
    "node.id": [f"{LIVE}::test_cluster_keys_show_in_what_clients_see"],
    "process.roles": [f"{CLUSTER}::test_cluster_up_writes_kafka_configs_and_every_broker_is_unfenced",
                      "tests/test_config.py::test_role_rules"],
    "controller.quorum.voters": [f"{REMOTE}::test_the_controller_is_found_from_voters_else_bootstrap_servers",
                                 "tests/controller/test_controller_only_live.py::test_controller_only_process"],
    "controller.quorum.election.timeout.ms": [
        f"{QUORUM}::test_election_timeout_ms_sets_when_an_unattached_voter_stands"],
    "controller.quorum.election.backoff.max.ms": [
        f"{QUORUM}::test_election_backoff_max_ms_caps_the_wait_before_standing_again"],
    "controller.quorum.fetch.timeout.ms": [
        f"{QUORUM}::test_fetch_timeout_ms_sets_when_a_follower_that_cannot_fetch_stands"],
    "controller.quorum.request.timeout.ms": [
        f"{QUORUM}::test_request_timeout_ms_sets_when_an_unanswered_request_is_sent_again"],
    "controller.quorum.retry.backoff.ms": [f"{QUORUM}::test_retry_backoff_ms_sets_the_wait_after_a_failed_request"],
    "controller.quorum.bootstrap.servers": [
        f"{REMOTE}::test_the_controller_is_found_from_voters_else_bootstrap_servers",
        f"{CLUSTER}::test_cluster_up_writes_kafka_configs_and_every_broker_is_unfenced"],
    "log.dir.failure.timeout.ms": [
        f"{REMOTE}::test_the_lifecycle_timers_come_from_the_brokers_keys",
        "tests/broker/test_lifecycle.py::test_a_failed_dir_that_cannot_be_reported_shuts_the_broker_down"],
    "listeners": [f"{LIVE}::test_cluster_keys_show_in_what_clients_see",
                  "tests/test_cli_serve.py::test_port_in_use_is_one_line_exit_2"],
    "advertised.listeners": [f"{LIVE}::test_cluster_keys_show_in_what_clients_see"],
    "controller.listener.names": [f"{LIVE}::test_cluster_keys_show_in_what_clients_see"],
    "listener.security.protocol.map": ["tests/test_config.py::test_sasl_needs_a_served_mechanism_and_tls_needs_a_keystore",
                                       "tests/test_config.py::test_custom_listener_names_need_a_protocol"],
    "log.dirs": ["tests/kip113/test_log_dirs_live.py::test_describe_log_dirs_reports_sizes_lags_and_volumes"],
    "log.dir": ["tests/test_config.py::test_log_dirs_wins_over_log_dir"],
    "metadata.log.dir": ["tests/storage/test_meta.py::test_format_writes_every_dir_with_unique_ids"],
    "num.partitions": [f"{LIVE}::test_cluster_keys_show_in_what_clients_see"],
    "default.replication.factor": [
        f"{LIVE}::test_topic_deletion_disabled_default_replication_factor_and_compatibility_keys"],
    "auto.create.topics.enable": ["tests/datapath/test_bad_input.py::test_produce_to_a_missing_topic_with_auto_create_off"],
    "delete.topic.enable": [f"{LIVE}::test_topic_deletion_disabled_default_replication_factor_and_compatibility_keys"],
    "log.segment.bytes": [f"{EFFECT}[log.segment.bytes]"],
    "log.roll.ms": [f"{EFFECT}[log.roll.ms]"],
    "log.roll.hours": [f"{EFFECT}[log.roll.hours]"],
    "log.roll.jitter.ms": [f"{EFFECT}[log.roll.jitter.ms]"],
    "log.roll.jitter.hours": [f"{EFFECT}[log.roll.jitter.hours]"],
    "log.retention.ms": [f"{EFFECT}[log.retention.ms]"],
    "log.retention.minutes": [f"{EFFECT}[log.retention.minutes]"],
    "log.retention.hours": [f"{EFFECT}[log.retention.hours]"],
    "log.retention.bytes": [f"{EFFECT}[log.retention.bytes]"],
    "log.retention.check.interval.ms": [
        f"{LIVE}::test_retention_follows_a_short_check_interval_also_on_a_node_restarted_every_few_seconds", NODE,
        "tests/storage/test_manager.py::test_a_short_retention_interval_also_shortens_the_first_pass"],
    "message.max.bytes": [f"{EFFECT}[message.max.bytes]",
                          "tests/datapath/test_bad_input.py::test_batch_over_max_message_bytes_is_message_too_large"],
    "log.index.interval.bytes": [f"{EFFECT}[log.index.interval.bytes]"],
    "log.index.size.max.bytes": [f"{EFFECT}[log.index.size.max.bytes]"],
    "log.flush.interval.messages": [f"{EFFECT}[log.flush.interval.messages]"],
    "log.flush.interval.ms": [f"{EFFECT}[log.flush.interval.ms]"],
    "log.segment.delete.delay.ms": [f"{EFFECT}[log.segment.delete.delay.ms]"],
    "log.flush.offset.checkpoint.interval.ms": [f"{LIVE}::test_checkpoints_are_rewritten_at_their_interval", NODE,
                                                "tests/storage/test_manager.py::test_checkpoints_follow_their_interval"],
    "log.initial.task.delay.ms": [
        NODE, "tests/storage/test_manager.py::test_first_retention_pass_comes_after_the_initial_delay_counted_from_start"],
    "log.cleanup.policy": [f"{EFFECT}[log.cleanup.policy]",
                           "tests/test_config_effects.py::test_log_cleanup_policy_takes_delete_and_compact_and_nothing_else"],
    **{key: [f"{EFFECT}[{key}]"] for key in (
        "log.cleaner.enable", "log.cleaner.min.cleanable.ratio", "log.cleaner.min.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms", "log.cleaner.delete.retention.ms", "log.cleaner.backoff.ms",
        "log.cleaner.dedupe.buffer.size", "log.cleaner.threads", "log.cleaner.io.buffer.load.factor")},
    "log.cleaner.io.max.bytes.per.second": [
        "tests/test_config_effects.py::test_the_cleaner_throttle_reaches_the_cleaner_and_holds_it_to_the_rate"],
    "replica.alter.log.dirs.io.max.bytes.per.second": [
        NODE, "tests/kip113/test_configs_live.py::test_dynamic_throttle_precedence_errors_and_restart",
        "tests/kip113/test_throttle_live.py::test_move_takes_size_over_rate"],
    "num.replica.alter.log.dirs.threads": [
        NODE, "tests/kip113/test_crash_live.py::test_kill_with_moves_queued_then_restart"],
    "socket.request.max.bytes": [
        "tests/test_connection.py::test_oversized_frame_closes_the_connection_without_hurting_others"],
    "log.dir.placement.policy": ["tests/storage/test_placement.py::test_manager_spreads_one_create_call_2_2_2"],
    "cordoned.log.dirs": ["tests/storage/test_cordon.py::test_new_partitions_skip_cordoned_dirs"],
    "log.dir.reserved.bytes": [
        "tests/storage/test_full_dir.py::test_the_reserve_refuses_appends_before_the_filesystem_is_full",
        "tests/storage/test_full_dir.py::test_the_default_reserve_is_1_percent_capped_at_1_gib", NODE],
    "log.dir.space.check.interval.ms": [
        "tests/storage/test_full_dir.py::test_space_returning_brings_the_dir_back_without_a_restart",
        "tests/storage/test_full_dir.py::test_free_space_is_counted_from_writes_between_checks", NODE],
    "log.dir.stall.timeout.ms": [
        "tests/storage/test_dir_health.py::test_a_stalled_dir_is_failed_once_and_a_late_return_changes_nothing",
        "tests/storage/test_dir_health.py::test_a_stall_timeout_of_0_never_fails_a_dir_but_it_is_degraded", NODE],
    "log.dir.slow.threshold.ms": [
        "tests/storage/test_dir_health.py::test_a_stall_timeout_of_0_never_fails_a_dir_but_it_is_degraded",
        "tests/storage/test_dir_health.py::test_a_slow_threshold_of_0_never_degrades", NODE],
    "broker.heartbeat.interval.ms": [
        "tests/controller/test_controller_listener_live.py::test_a_second_broker_registers_on_the_controller_listener",
        "tests/controller/test_quorum.py::test_session_expiry_fences_a_silent_broker"],
    "broker.session.timeout.ms": [
        "tests/controller/test_controller_listener_live.py::test_a_second_broker_registers_on_the_controller_listener",
        "tests/controller/test_quorum.py::test_session_expiry_fences_a_silent_broker"],
    "broker.rack": [f"{LIVE}::test_cluster_keys_show_in_what_clients_see",
                    "tests/controller/test_managers.py::test_create_topics_rack_aware_placement_spans_racks"],
    **{key: ["tests/storage/test_metadata_log.py::test_the_metadata_log_keys_reach_the_log"]
       for key in ("metadata.log.segment.bytes", "metadata.log.segment.min.bytes", "metadata.log.segment.ms",
                   "metadata.max.retention.bytes", "metadata.max.retention.ms")},
    "metadata.max.idle.interval.ms": [
        "tests/cluster/test_controller_registration_live.py::"
        "test_an_idle_cluster_writes_no_ops_and_the_brokers_metadata_offset_follows",
        "tests/controller/test_kraft43_controller.py::test_the_active_controller_writes_no_ops_while_idle"],
    "metadata.log.max.snapshot.interval.ms": [
        "tests/controller/test_quorum.py::test_snapshot_interval_ms_snapshots_a_changed_log_once_the_time_has_passed"],
    "metadata.log.max.record.bytes.between.snapshots": [
        "tests/controller/test_controller_only_live.py::"
        "test_snapshot_interval_key_makes_the_controller_snapshot_and_a_restart_loads_it",
        "tests/controller/test_quorum.py::test_a_snapshot_is_written_off_the_loop_once_enough_bytes_were_written"],
    "log.message.timestamp.type": [f"{EFFECT}[log.message.timestamp.type]"],
    "producer.id.expiration.ms": [f"{EFFECT}[producer.id.expiration.ms]"],
    "producer.id.expiration.check.interval.ms": [f"{EFFECT}[producer.id.expiration.check.interval.ms]"],
    "replica.high.watermark.checkpoint.interval.ms": [f"{EFFECT}[replica.high.watermark.checkpoint.interval.ms]"],
    "log.flush.start.offset.checkpoint.interval.ms": [
        f"{EFFECT}[log.flush.start.offset.checkpoint.interval.ms]"],
    "log.flush.scheduler.interval.ms": [f"{EFFECT}[log.flush.scheduler.interval.ms]"],
    "replica.selector.class": [
        "tests/cluster/test_fetch_from_follower_live.py::test_the_leader_names_the_in_sync_replica_in_the_consumers_rack",
        "tests/test_config.py::test_replica_selector_class_takes_kafkas_rack_aware_selector_only"],
    "controlled.shutdown.enable": [
        f"{REMOTE}::test_controlled_shutdown_enable_decides_whether_sigterm_asks_the_controller_first",
        "tests/cluster/test_replication_live.py::test_controlled_shutdown_moves_leadership_before_the_broker_goes"],
    "sasl.server.max.receive.size": [
        "tests/security/test_sasl.py::test_sasl_server_max_receive_size_sets_the_limit_before_authentication",
        "tests/security/test_sasl_live.py::test_big_requests_wait_for_authentication"],
    "initial.broker.registration.timeout.ms": [f"{REMOTE}::test_the_lifecycle_timers_come_from_the_brokers_keys"],
    "request.timeout.ms": [f"{REMOTE}::test_the_lifecycle_timers_come_from_the_brokers_keys"],
    "socket.listen.backlog.size": [f"{LIVE}::test_the_listen_backlog_is_the_configured_one"],
    "offsets.topic.segment.bytes": [f"{GROUPS_LIVE}::test_the_offsets_topic_follows_its_broker_keys"],
    "offsets.topic.compression.codec": [f"{GROUPS_LIVE}::test_the_offsets_topic_follows_its_broker_keys"],
    "offsets.load.buffer.size": [f"{GROUPS_LIVE}::test_the_offsets_topic_follows_its_broker_keys"],
    "offsets.commit.timeout.ms": ["tests/groups/test_group_state.py::test_the_offsets_topic_settings_come_from_the_keys"],
    "compression.type": [f"{EFFECT}[compression.type]",
                         "tests/storage/test_compression_type.py::"
                         "test_every_batch_is_stored_in_the_topics_codec_with_its_records_unchanged"],
    "compression.gzip.level": [f"{EFFECT}[compression.gzip.level]"],
    "compression.lz4.level": [f"{EFFECT}[compression.lz4.level]"],
    "compression.zstd.level": [f"{EFFECT}[compression.zstd.level]"],
    "log.message.timestamp.before.max.ms": [f"{EFFECT}[log.message.timestamp.before.max.ms]"],
    "log.message.timestamp.after.max.ms": [f"{EFFECT}[log.message.timestamp.after.max.ms]"],
    "log.message.timestamp.difference.max.ms": [f"{EFFECT}[log.message.timestamp.difference.max.ms]"],
    "kjbod.zero.copy": ["tests/test_connection.py::test_client_disconnecting_mid_response"],
    "kjbod.extensions.enable": [
        "tests/reassign/test_cli_fallback.py::test_without_the_extensions_the_tool_moves_dirs_the_kafka_way",
        "tests/reassign/test_cli_fallback.py::test_with_the_extensions_dir_ids_are_reported"],
    **{key: [f"{REPLICATION}::test_the_replication_keys_reach_the_fetchers"] for key in (
        "replica.fetch.max.bytes", "replica.fetch.min.bytes", "replica.fetch.wait.max.ms",
        "replica.fetch.response.max.bytes", "replica.fetch.backoff.ms", "replica.socket.timeout.ms",
        "num.replica.fetchers", "inter.broker.listener.name")},
    "security.inter.broker.protocol": [
        "tests/security/test_tls_config.py::test_security_inter_broker_protocol_names_the_listener",
        "tests/security/test_tls_cluster_live.py::test_replication_over_tls_with_every_listener_ssl"],
    "fetch.max.bytes": [
        "tests/storage/test_fetch_max_bytes.py::test_a_consumers_fetch_carries_no_more_than_fetch_max_bytes",
        "tests/replication/test_fetch_caps.py::test_a_followers_fetch_carries_no_more_than_fetch_max_bytes",
        f"{LIVE}::test_fetch_max_bytes_caps_what_one_fetch_gives_a_consumer"],
    "replica.lag.time.max.ms": [f"{REPLICATION}::test_lag_time_and_min_isr_change_what_a_leader_does"],
    "group.initial.rebalance.delay.ms": [f"{GROUPS}::test_the_broker_keys_reach_the_coordinator",
                                         f"{GROUPS}::test_the_initial_delay_waits_while_members_keep_arriving"],
    "group.min.session.timeout.ms": [f"{GROUPS}::test_the_broker_keys_reach_the_coordinator",
                                     f"{GROUPS}::test_join_refusals"],
    "group.max.session.timeout.ms": [f"{GROUPS}::test_the_broker_keys_reach_the_coordinator",
                                     f"{GROUPS}::test_join_refusals"],
    "group.max.size": [f"{GROUPS}::test_the_broker_keys_reach_the_coordinator", f"{GROUPS}::test_group_max_size"],
    "max.request.partition.size.limit": [
        "tests/kafka41/test_describe_topic_partitions.py::test_the_broker_key_sets_the_page_size",
        "tests/kafka41/test_describe_topic_partitions_live.py::test_paging_over_many_partitions_matches_metadata"],
    "offset.metadata.max.bytes": [f"{GROUPS_LIVE}::test_bad_group_requests_get_kafkas_codes"],
    "offsets.topic.num.partitions": [f"{GROUPS_LIVE}::test_the_offsets_topic_is_internal_in_metadata"],
    "offsets.retention.minutes": [f"{GROUPS}::test_the_broker_keys_reach_the_coordinator",
                                  f"{GROUPS}::test_offset_expiry_follows_kafkas_conditions"],
    "offsets.retention.check.interval.ms": [f"{GROUPS_LIVE}::test_expired_offsets_are_removed"],
    "transaction.state.log.num.partitions": [f"{TXN_LIVE}::test_the_transaction_topic_follows_its_keys_and_is_internal"],
    "transaction.state.log.replication.factor": [
        f"{TXN_LIVE}::test_the_transaction_topic_follows_its_keys_and_is_internal"],
    "transaction.state.log.min.isr": [f"{TXN_LIVE}::test_the_transaction_topic_follows_its_keys_and_is_internal"],
    "transaction.state.log.segment.bytes": [
        f"{TXN_LIVE}::test_the_transaction_topic_follows_its_keys_and_is_internal"],
    "transaction.max.timeout.ms": [f"{TXN_LIVE}::test_states_and_error_codes"],
    "share.coordinator.state.topic.num.partitions": [
        "tests/share/test_state_coordinator_live.py::test_state_is_written_read_back_after_a_restart_and_deleted"],
    "share.coordinator.state.topic.replication.factor": [
        "tests/share/test_state_coordinator_live.py::test_with_fewer_brokers_than_the_replication_factor_share_keys_are_not_served",
        "tests/share/test_state_coordinator_live.py::test_state_is_written_read_back_after_a_restart_and_deleted"],
    "share.coordinator.state.topic.min.isr": [
        "tests/share/test_state_coordinator_live.py::test_state_is_written_read_back_after_a_restart_and_deleted"],
    "share.coordinator.state.topic.segment.bytes": [
        "tests/share/test_state_coordinator_live.py::test_state_is_written_read_back_after_a_restart_and_deleted"],
    "share.coordinator.snapshot.update.records.per.snapshot": [
        "tests/share/test_state_coordinator_live.py::test_state_is_written_read_back_after_a_restart_and_deleted",
        "tests/share/test_state_records.py::test_writes_are_updates_then_a_snapshot_every_n_and_replay_rebuilds_the_state"],
    "share.coordinator.state.topic.prune.interval.ms": [
        "tests/share/test_state_coordinator_live.py::test_the_state_topic_is_pruned_below_the_oldest_latest_snapshot"],
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": [
        f"{TXN_LIVE}::test_a_transaction_past_its_timeout_is_aborted"],
    "transactional.id.expiration.ms": [
        "tests/txn/test_txn_expiration_live.py::test_an_idle_transactional_id_expires_and_an_open_one_stays",
        "tests/txn/test_txn_state.py::test_idle_ids_expire_with_a_tombstone_and_come_back_with_a_new_producer_id"],
    "transaction.remove.expired.transaction.cleanup.interval.ms": [
        "tests/txn/test_txn_expiration_live.py::test_an_idle_transactional_id_expires_and_an_open_one_stays"],
    "transaction.partition.verification.enable": [
        "tests/txn/test_txn_verification_live.py::test_with_verification_off_the_hanging_transaction_is_back"],
    "offsets.topic.replication.factor": [
        f"{GROUPS_LIVE}::test_the_offsets_topic_waits_for_as_many_brokers_as_its_replication_factor"],
    "min.insync.replicas": [f"{REPLICATION}::test_lag_time_and_min_isr_change_what_a_leader_does"],
    "unclean.leader.election.enable": [
        f"{ELECTIONS}::test_the_election_keys_reach_the_controllers_settings",
        "tests/controller/test_replication.py::test_static_unclean_default_from_the_controllers_config",
        f"{ELECTIONS}::test_the_unclean_sweep_elects_where_a_topic_allows_it"],
    "auto.leader.rebalance.enable": [
        f"{ELECTIONS}::test_the_election_keys_reach_the_controllers_settings",
        f"{ELECTIONS}::test_the_rebalance_timer_runs_every_check_interval_when_enabled"],
    "leader.imbalance.check.interval.seconds": [
        f"{ELECTIONS}::test_the_election_keys_reach_the_controllers_settings",
        f"{ELECTIONS}::test_the_rebalance_timer_runs_every_check_interval_when_enabled"],
    "leader.imbalance.per.broker.percentage": [
        f"{ELECTIONS}::test_the_election_keys_reach_the_controllers_settings",
        f"{ELECTIONS}::test_rebalance_follows_the_imbalance_percentage"],
    **{key: [f"{THROTTLES}::test_the_quota_window_keys_reach_the_quotas"] for key in (
        "replication.quota.window.num", "replication.quota.window.size.seconds")},
    **{key: [f"{LIMITS}::test_a_connection_over_its_ips_limit_is_closed_at_once_and_an_override_raises_it_for_127_0_0_1",
             f"{LIMITS}::test_a_dynamic_change_through_alter_configs_takes_effect_and_bad_values_are_refused",
             f"{QUOTAS}::test_limits_are_built_from_the_config_with_dynamic_values_over_static_ones"]
       for key in ("max.connections.per.ip", "max.connections.per.ip.overrides")},
    "max.connections": [
        f"{LIMITS}::test_a_listener_at_its_limit_makes_a_new_connection_wait_until_one_closes[max.connections]",
        f"{LIMITS}::test_the_inter_broker_listener_is_served_at_max_connections_and_the_oldest_client_connection_makes_room",
        f"{QUOTAS}::test_limits_are_built_from_the_config_with_dynamic_values_over_static_ones"],
    "max.connection.creation.rate": [
        f"{QUOTAS}::test_limits_are_built_from_the_config_with_dynamic_values_over_static_ones",
        f"{QUOTAS}::test_creation_rates_broker_wide_and_per_listener_the_inter_broker_listener_only_its_own"],
    "connection.failed.authentication.delay.ms": [
        f"{LIMITS}::test_the_answer_to_a_failed_authentication_and_the_close_wait_the_delay_while_others_are_served",
        f"{QUOTAS}::test_the_answer_to_a_failed_authentication_waits_the_delay_and_the_close_follows_it"],
    "connections.max.idle.ms": [f"{LIMITS}::test_a_connection_that_sends_nothing_for_connections_max_idle_ms_is_closed"],
    "kjbod.metrics.listener": [
        "tests/metrics/test_endpoint_live.py::test_counters_follow_a_known_workload_and_a_failed_dir_shows"],
}

# Topic configs read outside the storage (the controller's elections, a leader's replication), from the metadata
# image: the tests that show each one taking effect.
READ_OUTSIDE_STORAGE: dict[str, list[str]] = {
    "min.insync.replicas": [
        "tests/replication/test_replica_manager.py::test_min_isr_refuses_before_the_append_and_freezes_the_hw",
        "tests/replication/test_replica_manager.py::test_min_isr_above_the_replication_factor_counts_as_the_replication_factor"],
    "unclean.leader.election.enable": ["tests/controller/test_replication.py::test_unclean_election_only_where_enabled"],
    **{f"{who}.replication.throttled.replicas": [
        f"{THROTTLES}::test_the_replica_lists_and_rates_follow_the_image",
        f"{THROTTLES}::test_the_{who}_throttles_only_out_of_sync_throttled_replicas_over_quota",
        "tests/replication/test_throttle_live.py::test_a_throttled_new_follower_copies_at_the_rate"]
       for who in ("leader", "follower")},
}

# Dynamic-only broker configs (no server.properties key, as in Kafka): the tests that show each one taking effect.
DYNAMIC_ONLY: dict[str, list[str]] = {
    f"{who}.replication.throttled.rate": [
        f"{THROTTLES}::test_the_replica_lists_and_rates_follow_the_image",
        f"{THROTTLES}::test_the_{who}_throttles_only_out_of_sync_throttled_replicas_over_quota",
        "tests/replication/test_throttle_live.py::test_a_throttled_new_follower_copies_at_the_rate"]
    for who in ("leader", "follower")
} | {f"reassignment.parallel.{k}": ["tests/reassign/test_batching.py::test_a_changed_limit_applies_from_the_next_step",
                                    "tests/reassign/test_batching.py::test_the_limits_are_dynamic_broker_configs_of_positive_integers"]
     for k in ("replica.count", "partition.count", "leader.movements")}

# Where the node reads a key's value through something derived from the attribute, inside the parser's module.
DERIVED = {
    "process_roles": {"is_broker", "is_controller"},
    "controller_listener_names": {"listener_kind", "broker_listeners", "controller_listeners"},
    "listener_security_protocol_map": {"security_protocol"},  # each Listener's protocol comes from the map
}
# The parser, and the DescribeConfigs table (reporting a value is not using it).
NOT_A_USE = {REPO / "kjbod/server/config.py", REPO / "kjbod/broker/broker_config.py"}


def names_read_by_the_node(not_a_use: set[Path] = NOT_A_USE) -> set[str]:
    """Attribute names and identifier-like strings (getattr's, topic_config's broker_attr) in kjbod's modules."""
    found: set[str] = set()
    for path in (REPO / "kjbod").rglob("*.py"):
        if path in not_a_use or "generated" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute):
                found.add(node.attr)
            elif isinstance(node, ast.Name):
                found.add(node.id)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
                found.add(node.value)
    return found


def test_every_accepted_key_takes_effect_or_is_compatibility_only():
    accepted = set(KEYS) | ACCEPTED_NO_EFFECT
    both = set(EFFECTS) & set(COMPATIBILITY_ONLY)
    assert not both, f"listed as taking effect and as compatibility-only: {sorted(both)}"
    unclassified = accepted - set(EFFECTS) - set(COMPATIBILITY_ONLY)
    assert not unclassified, (
        f"accepted but neither shown to take effect (EFFECTS, with a test) nor listed in COMPATIBILITY_ONLY: "
        f"{sorted(unclassified)}")
    assert set(EFFECTS) | set(COMPATIBILITY_ONLY) == accepted, "the audit lists keys the parser does not accept"
    assert set(ALIASES.values()) <= set(EFFECTS), "an alias's key must take effect"


def test_every_dynamic_only_broker_key_is_shown_to_take_effect():
    from kjbod.broker.broker_config import BROKER_KEYS

    dynamic_only = {name for name, k in BROKER_KEYS.items() if k.dynamic and k.attr is None}
    assert dynamic_only == set(DYNAMIC_ONLY)


def test_keys_that_take_effect_are_read_by_the_node_and_compatibility_keys_are_not():
    read = names_read_by_the_node()
    attrs = {f.name for f in ServerConfig.__dataclass_fields__.values()}
    for key, keydef in KEYS.items():
        assert keydef.attr in attrs, f"{key}: ServerConfig has no attribute {keydef.attr}"
        uses = {keydef.attr} | DERIVED.get(keydef.attr, set())
        if key in COMPATIBILITY_ONLY:
            assert not uses & read, f"{key} is listed as compatibility-only, but the node reads {keydef.attr}"
        else:
            assert uses & read, f"{key} is parsed into {keydef.attr}, which nothing outside the parser reads"


@pytest.mark.parametrize("key", sorted(EFFECTS) + [f"topic:{k}" for k in sorted(READ_OUTSIDE_STORAGE)]
                         + [f"dynamic:{k}" for k in sorted(DYNAMIC_ONLY)])
def test_the_tests_named_for_each_key_exist(key):
    if key.startswith("topic:"):
        refs = READ_OUTSIDE_STORAGE[key.removeprefix("topic:")]
    elif key.startswith("dynamic:"):
        refs = DYNAMIC_ONLY[key.removeprefix("dynamic:")]
    else:
        refs = EFFECTS[key]
    for ref in refs:
        path, _, name = ref.partition("::")
        function, _, param = name.partition("[")
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        test = getattr(module, function, None)
        assert callable(test), f"{key}: {ref} does not exist"
        if param:
            ids = [mark.kwargs.get("ids") or [] for mark in getattr(test, "pytestmark", [])]
            assert any(param.rstrip("]") in i for i in ids), f"{key}: {ref} has no case {param.rstrip(']')}"


SAMPLE = {
    "inter.broker.listener.name": "PLAINTEXT",
    "controller.quorum.voters": "1@127.0.0.1:9093",
    "controller.quorum.bootstrap.servers": "127.0.0.1:9093",
    "broker.rack": "r1",
    "group.coordinator.rebalance.protocols": "classic",
    "remote.log.storage.system.enable": "false",
}


def test_compatibility_keys_that_a_config_sets_are_kept_for_the_start_log():
    props = {"node.id": "1", "process.roles": "broker,controller", "controller.listener.names": "CONTROLLER",
             "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093", "log.dirs": "/d"}
    given = {key: SAMPLE.get(key, "1") for key in COMPATIBILITY_ONLY}
    assert dict(build_config({**props, **given}).ignored) == given
    assert dict(build_config(props).ignored) == {}


def test_the_readme_lists_the_compatibility_only_keys():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- compat-keys.*?-->(.*?)<!-- /compat-keys -->", text, re.S)
    assert block, "README.md lost its compat-keys markers"
    listed = re.findall(r"^\| `([a-z0-9.]+)` \|", block.group(1), re.M)
    assert sorted(listed) == sorted(COMPATIBILITY_ONLY)
    block = re.search(r"<!-- compat-topic-configs.*?-->(.*?)<!-- /compat-topic-configs -->", text, re.S)
    assert block, "README.md lost its compat-topic-configs markers"
    listed = re.findall(r"^\| `([a-z0-9.]+)` \|", block.group(1), re.M)
    assert sorted(listed) == sorted(topic_config.COMPATIBILITY_ONLY)


def test_compatibility_only_topic_configs_are_accepted_and_checked():
    parsed = topic_config.validate({"preallocate": "true", "message.downconversion.enable": "false",
                                    "message.format.version": "2.8-IV1", "remote.storage.enable": "false",
                                    "local.retention.ms": "-2", "local.retention.bytes": "1000"})
    assert parsed["preallocate"] is True and parsed["message.format.version"] == "2.8-IV1"
    for key, value, problem in (("remote.storage.enable", "true", "no tiered storage"),
                                ("message.format.version", "latest", "a Kafka release"),
                                ("local.retention.ms", "-3", "at least -2"), ("preallocate", "yes", "true or false")):
        with pytest.raises(topic_config.TopicConfigError, match=problem):
            topic_config.validate({key: value})


def test_every_topic_config_reaches_the_log_and_storage_reads_it():
    # Topic configs (CreateTopics, AlterConfigs) become the same LogConfig fields as their broker defaults.
    compat = set(topic_config.COMPATIBILITY_ONLY)
    assert set(topic_config.DEFS) == set(TOPIC_CONFIG_KEYS) | set(READ_OUTSIDE_STORAGE) | compat
    assert not set(TOPIC_CONFIG_KEYS) & set(READ_OUTSIDE_STORAGE)
    assert not (set(TOPIC_CONFIG_KEYS) | set(READ_OUTSIDE_STORAGE)) & compat
    assert all(topic_config.DEFS[k].broker_key is None for k in compat)  # and nothing reads them
    assert {d.broker_key for d in topic_config.DEFS.values()} - {None} <= set(EFFECTS)
    read = names_read_by_the_node({REPO / "kjbod/storage/config.py"})
    # Fields the storage reads through a LogConfig property.
    read |= {field for field, prop in {"message_timestamp_type": "log_append_time", "compression_type": "target_codec",
                                       "segment_jitter_ms": "random_segment_jitter",
                                       "message_timestamp_before_max_ms": "message_timestamp_before_limit_ms",
                                       "message_timestamp_after_max_ms": "message_timestamp_after_limit_ms",
                                       "message_timestamp_difference_max_ms": "message_timestamp_before_limit_ms",
                                       **{f"compression_{c}_level": "target_level" for c in ("gzip", "lz4", "zstd")},
                                       }.items() if prop in read}
    read |= {"cleanup_policy"} if {"compact", "delete"} <= read else set()  # read through LogConfig.compact/.delete
    unread = {f.name for f in dataclasses.fields(LogConfig)} - read
    assert not unread, f"LogConfig fields nothing outside kjbod/storage/config.py reads: {sorted(unread)}"
