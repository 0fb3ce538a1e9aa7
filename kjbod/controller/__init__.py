"""The controller role: the one writer of cluster metadata (`QuorumController`) and the managers that turn
requests into records without changing anything (cluster_control, heartbeats, replication_control with
placement, alter_partition, elections, directories, configs, producer_ids, partition_change)."""

from kjbod.controller.quorum import QuorumController
from kjbod.controller.result import ConfigPolicy, ControllerResult, ControllerSettings, PolicyError

__all__ = ["ConfigPolicy", "ControllerResult", "ControllerSettings", "PolicyError", "QuorumController"]
