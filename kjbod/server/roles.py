"""Building the roles a process runs: today the combined node (broker and controller in one process).

The broker role (kjbod.broker.node) and the controller role (kjbod.controller) do not import each other; this
module, above both, joins them: it gives the controller its settings from the server config and the broker's
config tables as its config policy, and gives the broker node a factory that builds the controller on the
metadata log the node opens.
"""

from __future__ import annotations

from typing import Any

from kjbod.broker import broker_config as bc
from kjbod.broker import topic_config
from kjbod.broker.node import BrokerNode
from kjbod.controller import ControllerSettings, PolicyError, QuorumController
from kjbod.protocol.errors import ErrorCode

SNAPSHOT_BYTES = 20 << 20  # metadata.log.max.record.bytes.between.snapshots, Kafka's default


class BrokerConfigPolicy:
    """The controller's view of which configs exist: the broker's tables (kjbod.broker.topic_config and
    broker_config), their errors turned into the controller's PolicyError."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id

    def validate_topic(self, overrides: dict[str, str]) -> None:
        try:
            topic_config.validate(dict[str, str | None](overrides))
        except topic_config.TopicConfigError as e:
            raise PolicyError(ErrorCode.INVALID_CONFIG, str(e)) from None

    def plan_topic(self, overrides: dict[str, str], changes: list[tuple[str, int, str | None]], *,
                   replace: bool) -> dict[str, str]:
        try:
            return bc.plan_topic_changes(overrides, changes, replace=replace)
        except bc.ConfigProblem as e:
            raise PolicyError(e.code, e.message) from None

    def plan_broker(self, current: dict[str, str], resource_name: str, changes: list[tuple[str, int, str | None]],
                    *, replace: bool) -> dict[str, str | None]:
        dynamic = bc.DynamicBrokerConfigs(self.node_id)
        target = dynamic.target(resource_name)
        if target is not None:
            target.update(current)
        try:
            return bc.plan_broker_changes(dynamic, resource_name, changes, replace=replace)
        except bc.ConfigProblem as e:
            raise PolicyError(e.code, e.message) from None


def controller_settings(config: Any, cluster_id: str, local_broker_id: int | None) -> ControllerSettings:
    return ControllerSettings(
        cluster_id=cluster_id, num_partitions=int(getattr(config, "num_partitions", 1)),
        default_replication_factor=int(getattr(config, "default_replication_factor", 1)),
        broker_session_timeout_ms=int(getattr(config, "broker_session_timeout_ms", 9000)),
        broker_heartbeat_interval_ms=int(getattr(config, "broker_heartbeat_interval_ms", 2000)),
        max_bytes_between_snapshots=int(getattr(config, "metadata_log_max_record_bytes_between_snapshots",
                                                SNAPSHOT_BYTES)),
        local_broker_id=local_broker_id)


def _combined_controller(node: BrokerNode, metadata_log: Any) -> QuorumController:
    settings = controller_settings(node.config, node.cluster_id, node.node_id)
    return QuorumController(settings, metadata_log, BrokerConfigPolicy(node.node_id), config_aliases=dict(bc.ALIASES))


def build_combined_node(config: Any) -> BrokerNode:
    """process.roles=broker,controller: the broker node with its controller in the same process."""
    return BrokerNode(config, _combined_controller)
