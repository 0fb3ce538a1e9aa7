"""Replication between brokers: partition state (partition.py), the replica manager with the acks=all
purgatory and AlterPartition (manager.py), follower fetchers (fetcher.py), settings (config.py)."""

from kjbod.broker.replication.config import ReplicationConfig
from kjbod.broker.replication.manager import FetchCheck, ReplicaManager

__all__ = ["FetchCheck", "ReplicaManager", "ReplicationConfig"]
