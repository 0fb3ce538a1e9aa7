"""What a controller operation produces: records to make durable, and the answer to give once they are."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(slots=True)
class ControllerResult:
    records: list[Any] = field(default_factory=list)
    response: Any = None


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    """What the controller reads from its own config (Kafka's controller reads these keys itself)."""

    cluster_id: str = ""
    num_partitions: int = 1
    default_replication_factor: int = 1
    broker_session_timeout_ms: int = 9000
    broker_heartbeat_interval_ms: int = 2000
    max_bytes_between_snapshots: int = 20 << 20
    max_snapshot_interval_ms: int = 3_600_000  # metadata.log.max.snapshot.interval.ms (0: bytes only)
    # metadata.max.idle.interval.ms: a NoOpRecord this often (0: never). The server passes its config (Kafka's 500);
    # a controller built without one (in-process tests) writes none, so its log holds only what it was asked for.
    max_idle_interval_ms: int = 0
    delete_topic_enable: bool = True
    # Leader elections (Kafka's defaults): unclean elections where a topic does not say otherwise, and the
    # periodic preferred-leader rebalance with its imbalance threshold.
    unclean_leader_election_enable: bool = False
    # min.insync.replicas where no topic or dynamic config says otherwise: the ELR's threshold (KIP-966), and
    # the cluster-wide value written when a cluster starts with eligible.leader.replicas.version 1.
    min_insync_replicas: int = 1
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_per_broker_percentage: int = 10
    leader_imbalance_check_interval_seconds: int = 300
    # This controller's node id: its own dynamic broker configs (resource "<node id>") come before the cluster
    # default where it resolves a topic config, as Kafka's ConfigurationControlManager does.
    node_id: int | None = None
    # The broker that shares this process (combined mode): its session never expires, since both live and
    # die together and a blocked event loop must not fence it.
    local_broker_id: int | None = None
    # Delegation tokens (Kafka's keys): no secret, no tokens.
    delegation_token_secret_key: str = ""
    delegation_token_max_lifetime_ms: int = 604800000
    delegation_token_expiry_time_ms: int = 86400000
    delegation_token_expiry_check_interval_ms: int = 3600000


class PolicyError(Exception):
    """A request the config policy refuses: a Kafka error code and a message naming the problem."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ConfigPolicy(Protocol):
    """Which topic and broker configs exist and what values they take: the broker's config tables, given to the
    controller by whoever builds it (the controller layer does not know them)."""

    def validate_topic(self, overrides: dict[str, str]) -> None: ...

    def plan_topic(self, overrides: dict[str, str], changes: list[tuple[str, int, str | None]], *,
                   replace: bool) -> dict[str, str]: ...

    def plan_broker(self, current: dict[str, str], resource_name: str,
                    changes: list[tuple[str, int, str | None]], *, replace: bool) -> dict[str, str | None]: ...

    def plan_group(self, overrides: dict[str, str], changes: list[tuple[str, int, str | None]], *,
                   replace: bool) -> dict[str, str]: ...
