"""Topic-level configs: names, types, validation, and the broker defaults they fall back to.

One table drives CreateTopics validation, DescribeConfigs answers for topics, and the LogConfig handed to
storage. A topic without an override takes its broker key's value: dynamic per-broker, dynamic cluster default
(both from the metadata log, kjbod.broker.broker_config), server.properties, Kafka's default, in that order.
Only configs kjbod honours are accepted, and Kafka's few that have no meaning here (preallocation, down-conversion,
tiered storage: `compat` says why, the README lists them); anything else is INVALID_CONFIG naming the key.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kjbod.broker.replication.throttle import replica_list_problem
from kjbod.storage.config import COMPRESSION_TYPES, LEVEL_DEFAULTS, compression_level_problem

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1


class TopicConfigError(ValueError):
    pass


@dataclass(frozen=True)
class TopicConfigDef:
    name: str
    type: str  # "int", "long", "double", "string", "list", "boolean"
    broker_key: str | None  # the broker config it defaults to
    broker_attr: str | None
    fallback: Any
    check: Callable[[Any], str | None] = lambda v: None
    doc: str = ""
    compat: str = ""  # accepted only so Kafka's topic configs (MirrorMaker's copies, tools) work: why it has no effect


def _at_least(lo: int) -> Callable[[Any], str | None]:
    return lambda v: None if v >= lo else f"must be at least {lo}"


def _one_of(*allowed: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in allowed else f"must be one of {', '.join(allowed)}"


def _policies(value: Any) -> str | None:
    policies = [p for p in value.split(",") if p]
    if not policies or any(p not in ("delete", "compact") for p in policies):
        return "must be a list of delete and compact"
    return None


def _level(codec: str) -> Callable[[Any], str | None]:
    return lambda v: compression_level_problem(codec, v)


def _false_only(value: Any) -> str | None:
    return None if value is False else "kjbod has no tiered storage: only false is accepted"


def _release(value: Any) -> str | None:
    return None if re.fullmatch(r"[0-9]+\.[0-9]+(\.[0-9]+)?(-IV[0-9]+)?", value) else \
        "must be a Kafka release such as 3.0 or 3.0-IV1"


def _ratio(value: Any) -> str | None:
    return None if 0 <= value <= 1 else "must be between 0 and 1"


def _throttled_replicas(name: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        problem = replica_list_problem(name, value)
        if problem is not None:
            raise TopicConfigError(problem)  # Kafka's whole message, not wrapped in ours
        return None
    return check


DEFS: dict[str, TopicConfigDef] = {d.name: d for d in [
    TopicConfigDef("segment.bytes", "int", "log.segment.bytes", "log_segment_bytes", 1 << 30, _at_least(14),
                   "Size at which a segment file is rolled."),
    TopicConfigDef("segment.ms", "long", "log.roll.ms", "log_roll_ms", 7 * 24 * 3600 * 1000, _at_least(1),
                   "Age at which a segment file is rolled even if not full."),
    TopicConfigDef("segment.jitter.ms", "long", "log.roll.jitter.ms", "log_roll_jitter_ms", 0, _at_least(0),
                   "Up to this much before segment.ms, drawn for each segment, it is rolled by time, so partitions "
                   "made together do not roll together."),
    TopicConfigDef("retention.ms", "long", "log.retention.ms", "log_retention_ms", 7 * 24 * 3600 * 1000,
                   _at_least(-1), "How long to keep data; -1 keeps it forever."),
    TopicConfigDef("retention.bytes", "long", "log.retention.bytes", "log_retention_bytes", -1, _at_least(-1),
                   "Size per partition beyond which old segments are deleted; -1 for no limit."),
    TopicConfigDef("max.message.bytes", "int", "message.max.bytes", "message_max_bytes", 1048588,
                   _at_least(0), "Largest record batch the topic accepts."),
    TopicConfigDef("cleanup.policy", "list", "log.cleanup.policy", "log_cleanup_policy", "delete", _policies,
                   "delete (retention), compact (keep the last record of each key), or both."),
    # Compaction (kjbod.storage.cleaner).
    TopicConfigDef("delete.retention.ms", "long", "log.cleaner.delete.retention.ms",
                   "log_cleaner_delete_retention_ms", 86_400_000, _at_least(0),
                   "How long a compacted topic keeps a tombstone after its first clean."),
    TopicConfigDef("min.compaction.lag.ms", "long", "log.cleaner.min.compaction.lag.ms",
                   "log_cleaner_min_compaction_lag_ms", 0, _at_least(0),
                   "How old a record must be before it may be compacted away."),
    TopicConfigDef("max.compaction.lag.ms", "long", "log.cleaner.max.compaction.lag.ms",
                   "log_cleaner_max_compaction_lag_ms", LONG_MAX, _at_least(1),
                   "Age after which a record's log is compacted whatever its dirty ratio."),
    TopicConfigDef("min.cleanable.dirty.ratio", "double", "log.cleaner.min.cleanable.ratio",
                   "log_cleaner_min_cleanable_ratio", 0.5, _ratio,
                   "Share of a log not yet compacted above which the cleaner compacts it."),
    TopicConfigDef("index.interval.bytes", "int", "log.index.interval.bytes", "log_index_interval_bytes", 4096,
                   _at_least(0), "Bytes between offset index entries."),
    TopicConfigDef("segment.index.bytes", "int", "log.index.size.max.bytes", "log_index_size_max_bytes",
                   10 * 1024 * 1024, _at_least(4), "Maximum size of an offset index file."),
    TopicConfigDef("flush.messages", "long", "log.flush.interval.messages", "log_flush_interval_messages",
                   LONG_MAX, _at_least(1), "Messages between forced fsyncs."),
    TopicConfigDef("flush.ms", "long", "log.flush.interval.ms", "log_flush_interval_ms", LONG_MAX,
                   _at_least(0), "Milliseconds between forced fsyncs."),
    TopicConfigDef("file.delete.delay.ms", "long", "log.segment.delete.delay.ms", "log_segment_delete_delay_ms",
                   60000, _at_least(0), "Delay before a deleted file is removed from disk."),
    # Checked per record on produce (kjbod.storage.records.validate_records), with Kafka's defaults.
    TopicConfigDef("message.timestamp.type", "string", "log.message.timestamp.type", "log_message_timestamp_type", "CreateTime",
                   _one_of("CreateTime", "LogAppendTime"),
                   "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches with the broker's time."),
    TopicConfigDef("message.timestamp.before.max.ms", "long", "log.message.timestamp.before.max.ms", "log_message_timestamp_before_max_ms",
                   LONG_MAX, _at_least(0), "How far in the past a record's CreateTime timestamp may be."),
    TopicConfigDef("message.timestamp.after.max.ms", "long", "log.message.timestamp.after.max.ms", "log_message_timestamp_after_max_ms",
                   LONG_MAX, _at_least(0), "How far in the future a record's CreateTime timestamp may be."),
    # Deprecated by Kafka in favour of the two above, and still used where they are not set (LogConfig.
    # message_timestamp_before_limit_ms / _after_limit_ms), as Kafka's LogConfig does.
    TopicConfigDef("message.timestamp.difference.max.ms", "long", "log.message.timestamp.difference.max.ms",
                   "log_message_timestamp_difference_max_ms", LONG_MAX, _at_least(0),
                   "How far a record's CreateTime timestamp may be from the broker's time, either way, where "
                   "message.timestamp.before.max.ms or .after.max.ms is not set."),
    # Applied on produce (kjbod.storage.records.validate_records rebuilds a batch sent in another codec).
    TopicConfigDef("compression.type", "string", "compression.type", "compression_type", "producer",
                   _one_of(*COMPRESSION_TYPES),
                   "The codec batches are stored in; producer keeps each producer's own."),
    *[TopicConfigDef(f"compression.{codec}.level", "int", f"compression.{codec}.level",
                     f"compression_{codec}_level", LEVEL_DEFAULTS[codec], _level(codec),
                     f"The compression level where compression.type is {codec}.")
      for codec in ("gzip", "lz4", "zstd")],
    # Read by the controller from the metadata image when it elects leaders (kjbod.controller.partition_change).
    TopicConfigDef("unclean.leader.election.enable", "boolean", "unclean.leader.election.enable",
                   "unclean_leader_election_enable", False,
                   doc="Whether a replica outside the ISR may be elected when no ISR member can lead (data may be "
                       "lost)."),
    # Read by the leaders' replica manager (kjbod.broker.replication.config) and the controller's KIP-435 steps
    # from the metadata image: how many in-sync replicas an acks=all produce needs.
    TopicConfigDef("min.insync.replicas", "int", "min.insync.replicas", "min_insync_replicas", 1, _at_least(1),
                   "In-sync replicas an acks=all produce needs (counted up to the replication factor)."),
    # Read by the replica manager from the metadata image (kjbod.broker.replication.throttle): which replicas the
    # broker's leader.replication.throttled.rate / follower.replication.throttled.rate apply to.
    *[TopicConfigDef(f"{who}.replication.throttled.replicas", "list", None, None, "",
                     _throttled_replicas(f"{who}.replication.throttled.replicas"),
                     f"Replicas whose replication is throttled on the {who} side: partitionId:brokerId pairs, or * "
                     f"for every replica of the topic (the rate is the broker's {who}.replication.throttled.rate).")
      for who in ("leader", "follower")],
    # Accepted for compatibility only (README, "Where kjbod differs"): Kafka's other topic configs, so a topic
    # copied from a Kafka cluster (MirrorMaker's config sync) or made by a tool that sets them is not refused.
    TopicConfigDef("preallocate", "boolean", None, None, False, doc="Kafka: preallocate segment files.",
                   compat="segment files grow as they are written"),
    TopicConfigDef("message.downconversion.enable", "boolean", None, None, True,
                   doc="Kafka: down-convert batches for old consumers.",
                   compat="only message format v2 is served (Fetch v4 and later), so nothing is down-converted"),
    TopicConfigDef("message.format.version", "string", None, None, "3.0-IV1", _release,
                   doc="Kafka: the message format version (ignored from 3.0 on).",
                   compat="message format v2 is always written, as Kafka does from 3.0 on"),
    TopicConfigDef("remote.storage.enable", "boolean", None, None, False, _false_only,
                   doc="Kafka: tiered storage for this topic.", compat="no tiered storage (only false is accepted)"),
    TopicConfigDef("local.retention.ms", "long", None, None, -2, _at_least(-2),
                   doc="Kafka: local retention under tiered storage.",
                   compat="no tiered storage: the local log is the whole log, kept by retention.ms"),
    TopicConfigDef("local.retention.bytes", "long", None, None, -2, _at_least(-2),
                   doc="Kafka: local retention under tiered storage.",
                   compat="no tiered storage: the local log is the whole log, kept by retention.bytes"),
    TopicConfigDef("remote.log.copy.disable", "boolean", None, None, False,
                   doc="Kafka: stop copying segments to tiered storage.", compat="no tiered storage"),
    TopicConfigDef("remote.log.delete.on.disable", "boolean", None, None, False,
                   doc="Kafka: delete tiered segments when tiered storage is turned off.", compat="no tiered storage"),
]}


# Java's Integer/Long.parseInt as Kafka's ConfigDef uses it: an optional sign and decimal digits, nothing else
# (Python's int() also takes "1_000").
JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")


def parse_value(d: TopicConfigDef, raw: str | None, *, check: bool = True) -> Any:
    """The value of ``raw`` for ``d``; ``check=False`` converts the type only (a dynamic broker default, checked
    as its broker key when it was set)."""
    if raw is None:
        raise TopicConfigError(f"{d.name}: a value is required")
    raw = raw.strip()
    value: Any
    if d.type in ("int", "long"):
        if not JAVA_INTEGER.fullmatch(raw):
            raise TopicConfigError(f"invalid value {raw!r} for {d.name}: expected an integer")
        limit = INT_MAX if d.type == "int" else LONG_MAX
        if len(raw) > 20 or not -limit - 1 <= (value := int(raw)) <= limit:  # (int() refuses 4300+ digits)
            raise TopicConfigError(f"invalid value {raw!r} for {d.name}: out of range for "
                                   f"{'an int' if d.type == 'int' else 'a long'}")
    elif d.type == "double":
        try:
            value = float(raw)
        except ValueError:
            raise TopicConfigError(f"invalid value {raw!r} for {d.name}: expected a number") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise TopicConfigError(f"invalid value {raw!r} for {d.name}: expected a finite number")
    elif d.type == "boolean":
        if raw.lower() not in ("true", "false"):
            raise TopicConfigError(f"invalid value {raw!r} for {d.name}: expected true or false")
        value = raw.lower() == "true"
    elif d.type == "list":
        value = ",".join(p.strip() for p in raw.split(",") if p.strip())
    else:
        value = raw
    problem = d.check(value) if check else None
    if problem:
        raise TopicConfigError(f"invalid value {raw!r} for {d.name}: {problem}")
    return value


def validate(configs: Mapping[str, str | None]) -> dict[str, Any]:
    """Parsed overrides; raises TopicConfigError naming the first bad key or value."""
    out: dict[str, Any] = {}
    for key, raw in configs.items():
        d = DEFS.get(key)
        if d is None:
            raise TopicConfigError(f"unknown or unsupported topic config {key!r} "
                                   f"(supported: {', '.join(sorted(DEFS))})")
        out[key] = parse_value(d, raw)
    # Kafka's LogConfig.validateValues, over the overrides and Kafka's defaults.
    low, high = out.get("min.compaction.lag.ms", 0), out.get("max.compaction.lag.ms", LONG_MAX)
    if low > high:
        raise TopicConfigError(f"conflict topic config setting min.compaction.lag.ms ({low}) > "
                               f"max.compaction.lag.ms ({high})")
    return out


def broker_default(d: TopicConfigDef, broker_config: Any, dynamic: Mapping[str, str] | None = None) -> Any:
    """What a topic without an override of ``d`` gets: the dynamic broker value of its broker key (``dynamic``:
    broker key -> value, this broker's own over the cluster default), else server.properties, else Kafka's
    default. A dynamic value that does not parse is passed over, as Kafka ignores an invalid dynamic config."""
    if dynamic and d.broker_key is not None and d.broker_key in dynamic:
        try:
            return parse_value(d, dynamic[d.broker_key], check=False)
        except TopicConfigError:
            pass
    if d.broker_attr is not None:
        value = getattr(broker_config, d.broker_attr, None)
        if value is not None:
            return value
    return d.fallback


COMPATIBILITY_ONLY = {d.name: d.compat for d in DEFS.values() if d.compat}


def effective(overrides: dict[str, str], broker_config: Any,
              dynamic: Mapping[str, str] | None = None) -> dict[str, tuple[Any, bool]]:
    """name → (value, is_override) for every supported topic config (``dynamic``: see broker_default)."""
    parsed = validate(overrides)
    out = {}
    for name, d in DEFS.items():
        if name in parsed:
            out[name] = (parsed[name], True)
        else:
            out[name] = (broker_default(d, broker_config, dynamic), False)
    return out
