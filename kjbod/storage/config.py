"""Per-log configuration (Kafka's topic-level ``LogConfig``) with Kafka's defaults and key names.

Strategy: one frozen dataclass holds what the storage engine obeys. It can be built from broker properties
(``log.segment.bytes`` ...: the defaults for every topic) and then overridden by topic configs
(``segment.bytes`` ...), the way Kafka layers them. ``cleanup.policy`` is ``delete``, ``compact`` or both
(kjbod.storage.cleaner compacts; retention applies only where ``delete`` is named, as in Kafka).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LONG_MAX = (1 << 63) - 1

# topic config key -> LogConfig field
TOPIC_CONFIG_KEYS = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "segment.jitter.ms": "segment_jitter_ms",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "max.message.bytes": "max_message_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "segment.index.bytes": "segment_index_bytes",
    "flush.messages": "flush_interval_messages",
    "flush.ms": "flush_interval_ms",
    "file.delete.delay.ms": "file_delete_delay_ms",
    "cleanup.policy": "cleanup_policy",
    "message.timestamp.type": "message_timestamp_type",
    "message.timestamp.before.max.ms": "message_timestamp_before_max_ms",
    "message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
    "message.timestamp.difference.max.ms": "message_timestamp_difference_max_ms",
    "delete.retention.ms": "delete_retention_ms",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
    "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
    "compression.type": "compression_type",
    "compression.gzip.level": "compression_gzip_level",
    "compression.lz4.level": "compression_lz4_level",
    "compression.zstd.level": "compression_zstd_level",
}

# broker property -> (LogConfig field, multiplier to ms or 1); the first key present wins, as in Kafka
# (log.roll.ms over log.roll.hours, log.retention.ms over .minutes over .hours).
BROKER_CONFIG_KEYS: list[tuple[str, str, int]] = [
    ("log.segment.bytes", "segment_bytes", 1),
    ("log.roll.ms", "segment_ms", 1),
    ("log.roll.hours", "segment_ms", 3_600_000),
    ("log.roll.jitter.ms", "segment_jitter_ms", 1),
    ("log.roll.jitter.hours", "segment_jitter_ms", 3_600_000),
    ("log.retention.ms", "retention_ms", 1),
    ("log.retention.minutes", "retention_ms", 60_000),
    ("log.retention.hours", "retention_ms", 3_600_000),
    ("log.retention.bytes", "retention_bytes", 1),
    ("message.max.bytes", "max_message_bytes", 1),
    ("log.index.interval.bytes", "index_interval_bytes", 1),
    ("log.index.size.max.bytes", "segment_index_bytes", 1),
    ("log.flush.interval.messages", "flush_interval_messages", 1),
    ("log.flush.interval.ms", "flush_interval_ms", 1),
    ("log.segment.delete.delay.ms", "file_delete_delay_ms", 1),
    ("log.cleanup.policy", "cleanup_policy", 1),
    ("log.message.timestamp.type", "message_timestamp_type", 1),
    ("log.message.timestamp.before.max.ms", "message_timestamp_before_max_ms", 1),
    ("log.message.timestamp.after.max.ms", "message_timestamp_after_max_ms", 1),
    ("log.message.timestamp.difference.max.ms", "message_timestamp_difference_max_ms", 1),
    ("log.cleaner.delete.retention.ms", "delete_retention_ms", 1),
    ("log.cleaner.min.compaction.lag.ms", "min_compaction_lag_ms", 1),
    ("log.cleaner.max.compaction.lag.ms", "max_compaction_lag_ms", 1),
    ("log.cleaner.min.cleanable.ratio", "min_cleanable_dirty_ratio", 1),
    ("compression.type", "compression_type", 1),
    ("compression.gzip.level", "compression_gzip_level", 1),
    ("compression.lz4.level", "compression_lz4_level", 1),
    ("compression.zstd.level", "compression_zstd_level", 1),
]
CLEANUP_POLICIES = ("delete", "compact")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
# compression.type: the codec a topic's batches are stored in; "producer" keeps each producer's own.
COMPRESSION_TYPES = {"producer": None, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
LEVEL_DEFAULTS = {"gzip": -1, "lz4": 9, "zstd": 3}
LEVEL_RANGES = {"gzip": (1, 9), "lz4": (1, 17), "zstd": (-131072, 22)}  # gzip also takes -1, its default


def compression_level_problem(codec: str, level: int) -> str | None:
    """Why ``level`` is not a compression.<codec>.level Kafka accepts, or None."""
    low, high = LEVEL_RANGES[codec]
    if low <= level <= high or (codec == "gzip" and level == -1):
        return None
    return f"must be between {low} and {high}" + (" or -1" if codec == "gzip" else "")


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3_600_000
    segment_jitter_ms: int = 0  # each segment rolls by time up to this much earlier (drawn per segment)
    retention_ms: int = 7 * 24 * 3_600_000  # -1: keep forever
    retention_bytes: int = -1  # -1: no size limit
    max_message_bytes: int = 1_048_588
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10 * 1024 * 1024
    flush_interval_messages: int = LONG_MAX
    flush_interval_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60_000
    cleanup_policy: str = "delete"
    # Checked per record on a client's append (records.validate_records), with Kafka's defaults.
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    message_timestamp_difference_max_ms: int = LONG_MAX  # Kafka's deprecated key: both limits where those are unset
    # Compaction (kjbod.storage.cleaner), Kafka's defaults.
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    # The codec batches are stored in (records.validate_records rebuilds a batch in another), Kafka's defaults.
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    # Kafka's LogConfig.compact and .delete, from cleanup.policy (set once here: Produce reads compact per request).
    compact: bool = dataclasses.field(init=False, repr=False, compare=False, default=False)
    delete: bool = dataclasses.field(init=False, repr=False, compare=False, default=True)

    def __post_init__(self) -> None:
        policies = [p.strip() for p in self.cleanup_policy.split(",") if p.strip()]
        unknown = [p for p in policies if p not in CLEANUP_POLICIES]
        if unknown or not policies:
            raise ValueError(f"cleanup.policy={self.cleanup_policy!r} is not a list of delete and compact")
        object.__setattr__(self, "cleanup_policy", ",".join(dict.fromkeys(policies)))
        object.__setattr__(self, "compact", "compact" in policies)  # the cleaner keeps each key's last record
        object.__setattr__(self, "delete", "delete" in policies)  # retention applies, DeleteRecords is allowed
        if self.delete_retention_ms < 0 or self.min_compaction_lag_ms < 0 or self.max_compaction_lag_ms < 1:
            raise ValueError("delete.retention.ms and min.compaction.lag.ms must be >= 0, max.compaction.lag.ms >= 1")
        if not 0 <= self.min_cleanable_dirty_ratio <= 1:
            raise ValueError(f"min.cleanable.dirty.ratio={self.min_cleanable_dirty_ratio} is not within [0, 1]")
        if self.segment_bytes < 14:
            raise ValueError(f"segment.bytes={self.segment_bytes} is below Kafka's minimum 14")
        if self.segment_index_bytes < 12:
            raise ValueError(f"segment.index.bytes={self.segment_index_bytes} is below 12")
        if self.index_interval_bytes < 0:
            raise ValueError(f"index.interval.bytes={self.index_interval_bytes} is negative")
        if self.segment_ms < 1:
            raise ValueError(f"segment.ms={self.segment_ms} must be at least 1")
        if self.segment_jitter_ms < 0:
            raise ValueError(f"segment.jitter.ms={self.segment_jitter_ms} is negative")
        if self.max_message_bytes < 0:
            raise ValueError(f"max.message.bytes={self.max_message_bytes} is negative")
        if self.flush_interval_messages < 1 or self.flush_interval_ms < 0:
            raise ValueError("flush.messages must be >= 1 and flush.ms >= 0")
        if self.file_delete_delay_ms < 0:
            raise ValueError(f"file.delete.delay.ms={self.file_delete_delay_ms} is negative")
        if self.message_timestamp_type not in TIMESTAMP_TYPES:
            raise ValueError(f"message.timestamp.type={self.message_timestamp_type!r} is not one of "
                             f"{', '.join(TIMESTAMP_TYPES)}")
        if min(self.message_timestamp_before_max_ms, self.message_timestamp_after_max_ms,
               self.message_timestamp_difference_max_ms) < 0:
            raise ValueError("message.timestamp.before.max.ms, .after.max.ms and .difference.max.ms must be >= 0")
        if self.compression_type not in COMPRESSION_TYPES:
            raise ValueError(f"compression.type={self.compression_type!r} is not one of "
                             f"{', '.join(COMPRESSION_TYPES)}")
        for codec in LEVEL_RANGES:
            level = getattr(self, f"compression_{codec}_level")
            if (problem := compression_level_problem(codec, level)) is not None:
                raise ValueError(f"compression.{codec}.level={level} {problem}")

    @property
    def message_timestamp_before_limit_ms(self) -> int:
        """How far in the past a CreateTime may be: message.timestamp.before.max.ms, or where that is left at its
        default, message.timestamp.difference.max.ms (Kafka's LogConfig)."""
        before = self.message_timestamp_before_max_ms
        return before if before != LONG_MAX else self.message_timestamp_difference_max_ms

    @property
    def message_timestamp_after_limit_ms(self) -> int:
        after = self.message_timestamp_after_max_ms
        return after if after != LONG_MAX else self.message_timestamp_difference_max_ms

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def target_codec(self) -> int | None:
        """The codec compression.type stores batches in (records.CODEC_*), or None for ``producer``."""
        return COMPRESSION_TYPES[self.compression_type]

    @property
    def target_level(self) -> int | None:
        """The configured level of the target codec (None for codecs without levels and for ``producer``)."""
        name = self.compression_type
        return getattr(self, f"compression_{name}_level") if name in LEVEL_RANGES else None

    def random_segment_jitter(self) -> int:
        """How much earlier than segment.ms a new segment rolls by time: drawn in [0, min(segment.jitter.ms,
        segment.ms)), Kafka's LogConfig.randomSegmentJitter, so many partitions made at once do not all roll in
        the same instant."""
        if self.segment_jitter_ms == 0:
            return 0
        return random.randrange(min(self.segment_jitter_ms, self.segment_ms))

    def expected_partition_bytes(self) -> int:
        """What placement assumes one new partition will take: retention.bytes plus an active segment when
        retention.bytes is set, else one full segment."""
        if self.retention_bytes >= 0:
            return self.retention_bytes + self.segment_bytes
        return self.segment_bytes

    def with_overrides(self, **changes: Any) -> LogConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_broker_properties(cls, props: Mapping[str, Any]) -> LogConfig:
        """Defaults for every topic from the broker's ``log.*`` properties."""
        values: dict[str, Any] = {}
        for key, field, scale in BROKER_CONFIG_KEYS:
            if field in values or key not in props:
                continue
            values[field] = _coerce(field, props[key], key) * scale if scale != 1 else _coerce(field, props[key], key)
        return cls(**values)

    def with_topic_configs(self, configs: Mapping[str, Any]) -> LogConfig:
        """This config overridden by topic-level keys (``retention.ms`` ...); unknown keys are ignored here
        (the broker validates topic configs before they reach storage)."""
        values = {
            TOPIC_CONFIG_KEYS[k]: _coerce(TOPIC_CONFIG_KEYS[k], v, k)
            for k, v in configs.items()
            if k in TOPIC_CONFIG_KEYS and v is not None
        }
        return dataclasses.replace(self, **values)


def _coerce(field: str, value: Any, key: str) -> Any:
    if field in ("cleanup_policy", "message_timestamp_type", "compression_type"):
        return str(value).strip()
    if field == "min_cleanable_dirty_ratio":
        try:
            return float(str(value).strip())
        except ValueError as e:
            raise ValueError(f"{key}={value!r} is not a number") from e
    try:
        return int(str(value).strip())
    except ValueError as e:
        raise ValueError(f"{key}={value!r} is not an integer") from e
