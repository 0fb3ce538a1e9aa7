"""Replication settings with Kafka's names and defaults, read from the broker's config.

The server config's attributes (kjbod.server.config parses and checks the keys), else Kafka's defaults.
`min.insync.replicas` is also a topic config: the topic's override wins over the broker's dynamic value
(per-broker, then cluster default), which wins over server.properties.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEFAULTS: dict[str, int] = {
    "replica.lag.time.max.ms": 30_000,
    "replica.fetch.wait.max.ms": 500,
    "replica.fetch.min.bytes": 1,
    "replica.fetch.max.bytes": 1_048_576,
    "replica.fetch.response.max.bytes": 10_485_760,
    "replica.fetch.backoff.ms": 1_000,
    "replica.socket.timeout.ms": 30_000,
    "num.replica.fetchers": 1,
    "min.insync.replicas": 1,
    "replication.quota.window.num": 11,
    "replication.quota.window.size.seconds": 1,
}


def _setting(config: Any, attr: str, key: str) -> int:
    value = getattr(config, attr, None)
    return int(value) if value is not None else DEFAULTS[key]


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    lag_time_max_ms: int = DEFAULTS["replica.lag.time.max.ms"]
    fetch_wait_max_ms: int = DEFAULTS["replica.fetch.wait.max.ms"]
    fetch_min_bytes: int = DEFAULTS["replica.fetch.min.bytes"]
    fetch_max_bytes: int = DEFAULTS["replica.fetch.max.bytes"]
    fetch_response_max_bytes: int = DEFAULTS["replica.fetch.response.max.bytes"]
    fetch_backoff_ms: int = DEFAULTS["replica.fetch.backoff.ms"]
    socket_timeout_ms: int = DEFAULTS["replica.socket.timeout.ms"]
    num_fetchers: int = DEFAULTS["num.replica.fetchers"]
    min_insync_replicas: int = DEFAULTS["min.insync.replicas"]
    quota_window_num: int = DEFAULTS["replication.quota.window.num"]
    quota_window_size_seconds: int = DEFAULTS["replication.quota.window.size.seconds"]

    @classmethod
    def from_config(cls, config: Any) -> ReplicationConfig:
        return cls(
            lag_time_max_ms=_setting(config, "replica_lag_time_max_ms", "replica.lag.time.max.ms"),
            fetch_wait_max_ms=_setting(config, "replica_fetch_wait_max_ms", "replica.fetch.wait.max.ms"),
            fetch_min_bytes=_setting(config, "replica_fetch_min_bytes", "replica.fetch.min.bytes"),
            fetch_max_bytes=_setting(config, "replica_fetch_max_bytes", "replica.fetch.max.bytes"),
            fetch_response_max_bytes=_setting(config, "replica_fetch_response_max_bytes",
                                              "replica.fetch.response.max.bytes"),
            fetch_backoff_ms=_setting(config, "replica_fetch_backoff_ms", "replica.fetch.backoff.ms"),
            socket_timeout_ms=_setting(config, "replica_socket_timeout_ms", "replica.socket.timeout.ms"),
            num_fetchers=max(1, _setting(config, "num_replica_fetchers", "num.replica.fetchers")),
            min_insync_replicas=max(1, _setting(config, "min_insync_replicas", "min.insync.replicas")),
            quota_window_num=max(1, _setting(config, "replication_quota_window_num", "replication.quota.window.num")),
            quota_window_size_seconds=max(1, _setting(config, "replication_quota_window_size_seconds",
                                                      "replication.quota.window.size.seconds")))

    def min_isr(self, topic_configs: Any, dynamic: Any = None) -> int:
        """The topic's min.insync.replicas: its override, else the broker's dynamic value (``dynamic``: broker
        key -> value, this broker's over the cluster default), else server.properties."""
        for level in (topic_configs, dynamic):
            value = (level or {}).get("min.insync.replicas")
            if value is not None:
                try:
                    return max(1, int(value))
                except ValueError:
                    continue  # never written (checked when set): the next level decides
        return self.min_insync_replicas
