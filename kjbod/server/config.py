"""server.properties: Kafka's key names, Kafka's defaults, and errors that name the key and the value.

Strategy:

* `parse_properties` reads Java-properties text the way `java.util.Properties.load` does (comment lines starting
  with `#` or `!`, `key=value`, `key: value` or `key value`, backslash line continuations, `\\t \\n \\r \\f \\uXXXX`
  escapes); values are also trimmed at the end, as Kafka's ConfigDef trims what it parses.
* One table, `KEYS`, lists every key kjbod understands with its converter (which checks the value) and Kafka's
  default. `build_config` converts each given value through the table, then applies the rules that involve several
  keys (roles and listeners, alias and precedence keys, log dirs). Keys outside the table are refused with the
  closest known key as a hint. Every key takes effect where Kafka applies it, except the Kafka keys kjbod accepts
  only for compatibility with Kafka's files (`COMPATIBILITY_ONLY`, with the reason for each): the node logs those
  a config sets once at start.
* Every error is a `ConfigError` with one line that says where (file and line, or `--override`), which key, which
  value and what is expected; the CLI prints it as is and exits 2.
* The result is a frozen `ServerConfig` whose attributes are the keys in snake_case (`log.segment.bytes` ->
  `log_segment_bytes`), with alias and precedence keys already folded in (`log.retention.hours` -> `log_retention_ms`)
  and log dirs made absolute (relative to the current directory, as Kafka resolves them) and normalised.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kjbod.broker.broker_config import listener_connection_key, parse_per_ip_overrides
from kjbod.broker.groups.consumer import ASSIGNOR_CLASSES, ASSIGNORS
from kjbod.metadata.acls import STANDARD_AUTHORIZER
from kjbod.net.sasl import SaslConfigError, SaslSettings, is_sasl, is_sasl_key
from kjbod.net.tls import (
    SSL_KEYS,
    SSL_NO_EFFECT,
    TlsConfigError,
    TlsSettings,
    client_context,
    is_tls,
    listener_key,
)
from kjbod.net.tls import server_context as tls_server_context
from kjbod.storage.placement import CORDON_ALL, cordoned_dirs

__all__ = [
    "ACCEPTED_NO_EFFECT",
    "ALIASES",
    "COMPATIBILITY_ONLY",
    "DEFAULT_PROTOCOL_MAP",
    "KEYS",
    "ConfigError",
    "KeyDef",
    "Listener",
    "ServerConfig",
    "build_config",
    "load_config",
    "parse_overrides",
    "parse_properties",
]

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1
INT_MIN = -(1 << 31)
LONG_MIN = -(1 << 63)

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SUPPORTED_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


class ConfigError(ValueError):
    """A configuration problem, as one line that names the key and the value."""


@dataclass(frozen=True)
class Listener:
    """One entry of `listeners` / `advertised.listeners`: NAME://host:port and its security protocol."""

    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


# -- value converters: (key, raw text) -> value, or ConfigError naming key, value and what is expected -----------


def _bad(key: str, raw: str, expected: str) -> ConfigError:
    return ConfigError(f"invalid value {raw!r} for {key}: expected {expected}")


def _int(lo: int = INT_MIN, hi: int = INT_MAX) -> Callable[[str, str], int]:
    if hi == INT_MAX or hi == LONG_MAX:
        what = "an integer" if lo in (INT_MIN, LONG_MIN) else f"an integer >= {lo}"
    else:
        what = f"an integer between {lo} and {hi}"

    def conv(key: str, raw: str) -> int:
        text = raw.strip()
        # Java's parseInt/parseLong: optional sign and decimal digits, nothing else (no "1_000", no "1e3").
        if not re.fullmatch(r"[+-]?[0-9]+", text):
            raise _bad(key, raw, what)
        value = int(text)
        if not lo <= value <= hi:
            raise _bad(key, raw, what)
        return value

    return conv


def _long(lo: int = LONG_MIN) -> Callable[[str, str], int]:
    return _int(lo, LONG_MAX)


def _bool(key: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise _bad(key, raw, "true or false")
    return value == "true"


def _str(key: str, raw: str) -> str:
    return raw.strip()


def _nonempty_str(key: str, raw: str) -> str:
    value = raw.strip()
    if not value:
        raise _bad(key, raw, "a non-empty value")
    return value


def _list(key: str, raw: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in raw.split(",") if p.strip())


def _upper_list(key: str, raw: str) -> tuple[str, ...]:
    return tuple(p.upper() for p in _list(key, raw))


def _roles(key: str, raw: str) -> tuple[str, ...]:
    roles = _list(key, raw)
    if not roles or any(r not in ("broker", "controller") for r in roles) or len(set(roles)) != len(roles):
        raise _bad(key, raw, "broker, controller, or broker,controller")
    return roles


def _double(lo: float, hi: float = float("inf")) -> Callable[[str, str], float]:
    what = f"a number between {lo} and {hi}" if hi != float("inf") else f"a number >= {lo}"

    def conv(key: str, raw: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            raise _bad(key, raw, what) from None
        if not lo <= value <= hi:
            raise _bad(key, raw, what)
        return value

    return conv


def _assignors(key: str, raw: str) -> tuple[str, ...]:
    """group.consumer.assignors: server-side assignors by name (uniform, range) or Kafka's class name; the first
    is the default."""
    names = _list(key, raw)
    if not names or any(ASSIGNOR_CLASSES.get(n, n) not in ASSIGNORS for n in names):
        raise _bad(key, raw, "a list of uniform and range (or Kafka's UniformAssignor and RangeAssignor classes)")
    return names


def _policies(key: str, raw: str) -> str:
    policies = _list(key, raw)
    if not policies or any(p not in ("delete", "compact") for p in policies):
        raise _bad(key, raw, "a list of delete and compact")
    return ",".join(dict.fromkeys(policies))


def _gzip_level(key: str, raw: str) -> int:
    """compression.gzip.level: Kafka takes 1 to 9, or -1 for gzip's own default."""
    level = _int()(key, raw)
    if level != -1 and not 1 <= level <= 9:
        raise _bad(key, raw, "an integer between 1 and 9, or -1")
    return level


def _rebalance_protocols(key: str, raw: str) -> tuple[str, ...]:
    """group.coordinator.rebalance.protocols: Kafka's names; kjbod serves the classic protocol, so it must be there."""
    protocols = _list(key, raw)
    if not protocols or any(p not in ("classic", "consumer", "share", "streams") for p in protocols):
        raise _bad(key, raw, "a list of classic, consumer, share and streams")
    if "classic" not in protocols:
        raise ConfigError(f"invalid value {raw!r} for {key}: kjbod serves only the classic group protocol, so the "
                          "list must name classic")
    return protocols


def _migration_policy(key: str, raw: str) -> str:
    """group.consumer.migration.policy: Kafka's names, in any case."""
    value = raw.strip().lower()
    if value not in MIGRATION_POLICIES:
        raise _bad(key, raw, "one of " + ", ".join(MIGRATION_POLICIES))
    return value


MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")


def _no_tiered_storage(key: str, raw: str) -> bool:
    if raw.strip().lower() != "false":
        raise ConfigError(f"invalid value {raw!r} for {key}: tiered storage (KIP-405) is not served by kjbod, only "
                          "false is accepted")
    return False


def _one_of(*choices: str) -> Callable[[str, str], str]:
    def conv(key: str, raw: str) -> str:
        value = raw.strip()
        if value not in choices:
            raise _bad(key, raw, " or ".join(choices))
        return value

    return conv


def _security_protocol(key: str, raw: str) -> str:
    value = raw.strip().upper()
    if value not in SECURITY_PROTOCOLS:
        raise _bad(key, raw, " or ".join(SECURITY_PROTOCOLS))
    return value


_LISTENER = re.compile(r"^([A-Za-z0-9_.-]+)://(\[[0-9A-Fa-f:.%a-zA-Z]*\]|[^:/\[\]]*):([0-9]+)$")


def _super_users(key: str, raw: str) -> tuple[str, ...]:
    """Kafka's super.users: principals separated by semicolons, each Type:name."""
    out: list[str] = []
    for part in raw.split(";"):
        principal = part.strip()
        if not principal:
            continue
        if ":" not in principal:
            raise _bad(key, raw, "principals as Type:name separated by ';' (User:admin;User:broker)")
        out.append(principal)
    return tuple(out)


def _listeners(key: str, raw: str) -> tuple[tuple[str, str, int], ...]:
    out: list[tuple[str, str, int]] = []
    for item in _list(key, raw):
        m = _LISTENER.match(item)
        if not m:
            raise ConfigError(f"invalid listener {item!r} in {key}: expected NAME://host:port")
        # Kafka normalises listener names to upper case.
        name, host, port = m.group(1).upper(), m.group(2).strip("[]"), int(m.group(3))
        if port > 65535:
            raise ConfigError(f"invalid listener {item!r} in {key}: port {port} is not between 0 and 65535")
        if any(n == name for n, _, _ in out):
            raise ConfigError(f"invalid value {raw!r} for {key}: listener name {name} appears twice")
        out.append((name, host, port))
    return tuple(out)


def _protocol_map(key: str, raw: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in _list(key, raw):
        name, sep, proto = item.partition(":")
        name, proto = name.strip().upper(), proto.strip().upper()
        if not sep or not name:
            raise ConfigError(f"invalid entry {item!r} in {key}: expected LISTENER_NAME:SECURITY_PROTOCOL")
        if proto not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"invalid entry {item!r} in {key}: unknown security protocol {proto!r} "
                f"(expected one of {', '.join(SECURITY_PROTOCOLS)})"
            )
        if name in out:
            raise ConfigError(f"invalid value {raw!r} for {key}: listener name {name} appears twice")
        out[name] = proto
    return out


_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.%a-zA-Z]+\]|[^:\[\]@]+):([0-9]+)$")


def _host_ports(key: str, raw: str) -> tuple[str, ...]:
    items = _list(key, raw)
    for item in items:
        m = _HOST_PORT.match(item)
        if not m or int(m.group(2)) > 65535:
            raise ConfigError(f"invalid entry {item!r} in {key}: expected host:port")
    return items


def _host_port(key: str, raw: str) -> str:
    value = raw.strip()
    m = _HOST_PORT.match(value)
    if not m or int(m.group(2)) > 65535:
        raise ConfigError(f"invalid value {raw!r} for {key}: expected HOST:PORT (port 0: any free port)")
    return value


def _voters(key: str, raw: str) -> tuple[str, ...]:
    items = _list(key, raw)
    for item in items:
        node, sep, address = item.partition("@")
        m = _HOST_PORT.match(address)
        if not sep or not re.fullmatch(r"[0-9]+", node.strip()) or not m or int(m.group(2)) > 65535:
            raise ConfigError(f"invalid entry {item!r} in {key}: expected id@host:port")
    return items


def _per_ip_overrides(key: str, raw: str) -> str:
    try:
        hosts = parse_per_ip_overrides(key, raw)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return ",".join(f"[{h}]:{n}" if ":" in h else f"{h}:{n}" for h, n in hosts.items())


def _listener_connection_limit(key: str, raw: str) -> int:
    """listener.name.<listener>.max.connections / .max.connection.creation.rate: from 1, as Kafka takes them."""
    return _int(1)(key, raw)


@dataclass(frozen=True)
class KeyDef:
    key: str
    conv: Callable[[str, str], Any]
    default: Any
    doc: str = ""
    into: str = ""  # the ServerConfig attribute the key ends up in, when it is not the key in snake_case

    @property
    def attr(self) -> str:
        return self.into or self.key.replace(".", "_")


# KIP-392's replica selector, the one Kafka ships: a consumer that names its rack is sent to an in-sync replica
# in that rack (kjbod.broker.replication.hooks.preferred_read_replicas).
RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"

KEYS: dict[str, KeyDef] = {
    k.key: k
    for k in [
        KeyDef("node.id", _int(0), None, "this node's id (required)"),
        KeyDef("process.roles", _roles, None, "broker, controller, or both (required)"),
        KeyDef("listeners", _listeners, (("PLAINTEXT", "127.0.0.1", 9092),)),
        KeyDef("advertised.listeners", _listeners, None),
        KeyDef("controller.listener.names", _upper_list, ()),
        KeyDef("listener.security.protocol.map", _protocol_map, None),
        KeyDef("inter.broker.listener.name", _nonempty_str, None),
        KeyDef("security.inter.broker.protocol", _security_protocol, None,
               "the inter-broker listener, named after its protocol (or inter.broker.listener.name)",
               into="inter_broker_listener_name"),
        KeyDef("broker.rack", _nonempty_str, None),
        KeyDef("replica.selector.class", _str, "",
               "KIP-392: RackAwareReplicaSelector sends consumers that give a rack to an in-sync replica there"),
        KeyDef("controller.quorum.bootstrap.servers", _host_ports, ()),
        KeyDef("controller.quorum.voters", _voters, ()),
        # Kafka's QuorumConfig timings (its ConfigDef takes any int; kjbod refuses values its quorum cannot run on)
        KeyDef("controller.quorum.election.timeout.ms", _int(1), 1000,
               "a voter that hears of no leader for this long (a random time in [t, 2t)) stands for election"),
        KeyDef("controller.quorum.election.backoff.max.ms", _int(0), 1000,
               "the most a candidate whose election failed waits before it stands again"),
        KeyDef("controller.quorum.fetch.timeout.ms", _int(1), 2000,
               "a follower that could not fetch from the leader for this long stands for election; a leader not "
               "fetched from by a majority for 1.5 times this resigns"),
        KeyDef("controller.quorum.request.timeout.ms", _int(1), 2000,
               "how long a voter waits for the answer to a quorum request"),
        KeyDef("controller.quorum.retry.backoff.ms", _int(0), 20,
               "the wait before a failed quorum request is sent again"),
        KeyDef("log.dirs", _list, None),
        KeyDef("log.dir", _nonempty_str, "/tmp/kraft-combined-logs", into="log_dirs"),
        KeyDef("metadata.log.dir", _nonempty_str, None),
        KeyDef("cordoned.log.dirs", _list, (),
               "log dirs that take no new replicas (KIP-1066), or * for all; dynamic per broker"),
        KeyDef("metadata.log.max.record.bytes.between.snapshots", _long(1), 20 * 1024 * 1024),
        KeyDef("metadata.log.segment.bytes", _int(12), 1 << 30, "the size at which the metadata log rolls a segment"),
        KeyDef("metadata.log.segment.min.bytes", _int(12), 8 << 20,
               "the smallest metadata.log.segment.bytes allowed (Kafka's internal key, for tests)"),
        KeyDef("metadata.log.segment.ms", _long(1), 7 * 24 * 3_600_000,
               "the age at which the metadata log rolls a segment"),
        KeyDef("metadata.max.retention.bytes", _long(), 100 << 20,
               "older metadata snapshots and the log before them are deleted while the log and the snapshots "
               "together are larger (negative: no limit)"),
        KeyDef("metadata.max.retention.ms", _long(), 7 * 24 * 3_600_000,
               "older metadata snapshots and the log before them are deleted once their last record is older "
               "(negative: no limit)"),
        KeyDef("metadata.log.max.snapshot.interval.ms", _long(0), 3_600_000,
               "a controller writes a snapshot once this long has passed since its last one and something new "
               "was committed (0: only the byte count triggers one)"),
        KeyDef("metadata.max.idle.interval.ms", _int(0), 500,
               "the active controller appends a NoOpRecord this often, so readers can measure their metadata lag "
               "(0: never)"),
        KeyDef("num.partitions", _int(1), 1),
        KeyDef("default.replication.factor", _int(1, 32767), 1),
        KeyDef("auto.create.topics.enable", _bool, True),
        KeyDef("delete.topic.enable", _bool, True),
        KeyDef("unclean.leader.election.enable", _bool, False,
               "elect a replica outside the ISR when no ISR member can lead (topics may override it)"),
        KeyDef("auto.leader.rebalance.enable", _bool, True),
        KeyDef("leader.imbalance.per.broker.percentage", _int(0), 10),
        KeyDef("leader.imbalance.check.interval.seconds", _long(1), 300),
        KeyDef("log.segment.bytes", _int(14), 1 << 30),
        KeyDef("log.roll.ms", _long(1), None),
        KeyDef("log.roll.hours", _int(1), 168, into="log_roll_ms"),
        KeyDef("log.roll.jitter.ms", _long(0), None),
        KeyDef("log.roll.jitter.hours", _int(0), 0, into="log_roll_jitter_ms"),
        KeyDef("log.retention.ms", _long(), None, "-1 (or any negative value): no time limit"),
        KeyDef("log.retention.minutes", _int(), None, into="log_retention_ms"),
        KeyDef("log.retention.hours", _int(), 168, into="log_retention_ms"),
        KeyDef("log.retention.bytes", _long(), -1),
        KeyDef("log.retention.check.interval.ms", _long(1), 300_000),
        KeyDef("message.max.bytes", _int(0), 1_048_588),
        KeyDef("log.index.interval.bytes", _int(0), 4096),
        KeyDef("log.index.size.max.bytes", _int(4), 10 * 1024 * 1024),
        KeyDef("log.flush.interval.messages", _long(1), LONG_MAX),
        KeyDef("log.flush.interval.ms", _long(0), None),
        KeyDef("log.segment.delete.delay.ms", _long(0), 60_000),
        KeyDef("log.flush.offset.checkpoint.interval.ms", _int(0), 60_000),
        KeyDef("log.initial.task.delay.ms", _long(0), 30_000),
        KeyDef("log.cleanup.policy", _policies, "delete", "delete, compact, or compact,delete"),
        KeyDef("log.cleaner.enable", _bool, True),
        KeyDef("log.cleaner.threads", _int(0), 1, "kjbod: each log dir has one cleaner; this shares out the buffer"),
        KeyDef("log.cleaner.io.max.bytes.per.second", _double(0.0), 1.7976931348623157e308),
        KeyDef("log.cleaner.dedupe.buffer.size", _long(0), 128 << 20),
        KeyDef("log.cleaner.io.buffer.load.factor", _double(0.0), 0.9),
        KeyDef("log.cleaner.backoff.ms", _long(0), 15_000),
        KeyDef("log.cleaner.min.cleanable.ratio", _double(0.0, 1.0), 0.5),
        KeyDef("log.cleaner.delete.retention.ms", _long(0), 86_400_000),
        KeyDef("log.cleaner.min.compaction.lag.ms", _long(0), 0),
        KeyDef("log.cleaner.max.compaction.lag.ms", _long(1), LONG_MAX),
        KeyDef("log.message.timestamp.type", _one_of("CreateTime", "LogAppendTime"), "CreateTime"),
        KeyDef("compression.type", _one_of("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"), "producer",
               "the codec topics store batches in (producer: each producer's own)"),
        KeyDef("compression.gzip.level", _gzip_level, -1, "1 to 9, or -1 for gzip's default"),
        KeyDef("compression.lz4.level", _int(1, 17), 9),
        KeyDef("compression.zstd.level", _int(-131072, 22), 3),
        KeyDef("log.message.timestamp.before.max.ms", _long(0), LONG_MAX),
        KeyDef("log.message.timestamp.difference.max.ms", _long(0), LONG_MAX,
               "Kafka's deprecated key: both limits where log.message.timestamp.before/after.max.ms are unset"),
        KeyDef("log.message.timestamp.after.max.ms", _long(0), LONG_MAX),
        KeyDef("replica.alter.log.dirs.io.max.bytes.per.second", _long(1), LONG_MAX),
        KeyDef("num.replica.alter.log.dirs.threads", _int(1), None, "default: the number of log dirs"),
        KeyDef("log.dir.failure.timeout.ms", _long(1), 30_000),
        KeyDef(
            "log.dir.stall.timeout.ms",
            _long(0),
            30_000,
            "kjbod: a log dir whose file operation has not returned for this long is taken offline, as for an I/O "
            "error (0: never)",
        ),
        KeyDef(
            "log.dir.slow.threshold.ms",
            _long(0),
            1_000,
            "kjbod: a log dir whose file operations take longer than this is logged and shown as degraded (0: never)",
        ),
        KeyDef(
            "log.dir.reserved.bytes",
            _long(-1),
            -1,
            "kjbod: bytes kept free in each log dir; below it the dir is full and refuses appends "
            "(-1: the smaller of 1% of its filesystem and 1 GiB)",
        ),
        KeyDef(
            "log.dir.space.check.interval.ms",
            _long(1),
            1_000,
            "kjbod: how often each log dir's free space is checked (what brings a full dir back)",
        ),
        KeyDef("socket.request.max.bytes", _int(1), 104_857_600),
        KeyDef("max.connections", _int(0), INT_MAX,
               "the most connections the broker keeps open (the inter-broker listener excepted); per listener: "
               "listener.name.<listener>.max.connections"),
        KeyDef("max.connections.per.ip", _int(0), INT_MAX, "the most connections from one IP address"),
        KeyDef("max.connections.per.ip.overrides", _per_ip_overrides, "", "per-IP limits as host:count,..."),
        KeyDef("max.connection.creation.rate", _int(0), INT_MAX,
               "the most new connections a second (KIP-612); per listener: "
               "listener.name.<listener>.max.connection.creation.rate"),
        KeyDef("sasl.server.max.receive.size", _int(1), 524288,
               "largest request a SASL listener takes before the client has authenticated"),
        KeyDef("controlled.shutdown.enable", _bool, True,
               "on SIGTERM a broker asks the controller to move its leaders away before it stops"),
        KeyDef("log.flush.scheduler.interval.ms", _long(0), LONG_MAX,
               "the default of log.flush.interval.ms where that is not set (Kafka's synonym)",
               into="log_flush_interval_ms"),
        KeyDef("log.flush.start.offset.checkpoint.interval.ms", _int(0), 60_000),
        KeyDef("connection.failed.authentication.delay.ms", _int(0), 100,
               "how long the answer to a failed SASL authentication and the close after it are delayed"),
        KeyDef("connections.max.idle.ms", _long(), 600_000, "a connection idle this long is closed (-1: never)"),
        KeyDef("broker.heartbeat.interval.ms", _int(1), 2000),
        KeyDef("broker.session.timeout.ms", _int(1), 9000),
        KeyDef("fetch.max.bytes", _int(1024), 55 * 1024 * 1024,
               "the most record bytes a Fetch answer carries, whatever the request's max_bytes asks (at least 1024)"),
        KeyDef("replica.fetch.max.bytes", _int(0), 1_048_576),
        KeyDef("replica.fetch.min.bytes", _int(1), 1),
        KeyDef("replica.fetch.wait.max.ms", _int(0), 500),
        KeyDef("replica.fetch.response.max.bytes", _int(0), 10 * 1024 * 1024),
        KeyDef("replica.fetch.backoff.ms", _int(0), 1000),
        KeyDef("replica.socket.timeout.ms", _int(1), 30_000),
        KeyDef("replica.lag.time.max.ms", _long(1), 30_000),
        KeyDef("offsets.topic.num.partitions", _int(1), 50,
               "partitions of __consumer_offsets, made on the first FindCoordinator for a group"),
        KeyDef("offsets.topic.replication.factor", _int(1, 32767), 3,
               "replicas of __consumer_offsets; it is not made while fewer brokers are alive"),
        KeyDef("transaction.state.log.num.partitions", _int(1), 50,
               "partitions of __transaction_state, made on the first transactional InitProducerId"),
        KeyDef("transaction.state.log.replication.factor", _int(1, 32767), 3,
               "replicas of __transaction_state; it is not made while fewer brokers are alive"),
        KeyDef("transaction.state.log.min.isr", _int(1), 2, "min.insync.replicas of __transaction_state"),
        KeyDef("transaction.state.log.segment.bytes", _int(1), 100 * 1024 * 1024,
               "segment.bytes of __transaction_state"),
        KeyDef("share.coordinator.state.topic.num.partitions", _int(1), 50,
               "partitions of __share_group_state, made on the first FindCoordinator for a share key"),
        KeyDef("share.coordinator.state.topic.replication.factor", _int(1, 32767), 3,
               "replicas of __share_group_state; it is not made while fewer brokers are alive"),
        KeyDef("share.coordinator.state.topic.min.isr", _int(1, 32767), 2, "min.insync.replicas of __share_group_state"),
        KeyDef("share.coordinator.state.topic.segment.bytes", _int(1), 100 * 1024 * 1024,
               "segment.bytes of __share_group_state"),
        KeyDef("share.coordinator.snapshot.update.records.per.snapshot", _int(0, 500), 500,
               "ShareUpdate records written for a share-partition before the next write is a ShareSnapshot"),
        KeyDef("share.coordinator.state.topic.prune.interval.ms", _int(1), 5 * 60 * 1000,
               "how often the share coordinator deletes the records of __share_group_state no state needs"),
        KeyDef("transaction.max.timeout.ms", _int(1), 900_000,
               "the longest transaction.timeout.ms a transactional producer may ask for"),
        KeyDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", _int(1), 10_000,
               "how often transactions past their timeout are looked for and aborted"),
        KeyDef("transactional.id.expiration.ms", _int(1), 604_800_000,
               "how long a transactional id with no open transaction is kept after its last change"),
        KeyDef("transaction.remove.expired.transaction.cleanup.interval.ms", _int(1), 3_600_000,
               "how often expired transactional ids are looked for and removed"),
        KeyDef("transaction.partition.verification.enable", _bool, True,
               "a partition leader asks the transaction coordinator before a producer's transactional batch opens "
               "a transaction on it (KIP-890); dynamic"),
        KeyDef("group.initial.rebalance.delay.ms", _int(0), 3000,
               "how long the first rebalance of an empty group waits for more members"),
        KeyDef("group.min.session.timeout.ms", _int(), 6000),
        KeyDef("group.max.session.timeout.ms", _int(), 1_800_000),
        KeyDef("group.max.size", _int(1), 2**31 - 1),
        KeyDef("max.request.partition.size.limit", _int(1), 2000,
               "the most partitions one DescribeTopicPartitions answer holds (a client may ask for fewer)"),
        KeyDef("group.consumer.session.timeout.ms", _int(1), 45_000,
               "how long a consumer-protocol (KIP-848) member may go without a heartbeat before it is removed"),
        KeyDef("group.consumer.heartbeat.interval.ms", _int(1), 5000,
               "how often consumer-protocol members are told to heartbeat"),
        KeyDef("group.consumer.assignors", _assignors, ("uniform", "range"),
               "the server-side assignors consumer-protocol groups may use; the first is the default"),
        KeyDef("group.consumer.max.size", _int(1), 2**31 - 1, "the most members a consumer-protocol group may have"),
        KeyDef("group.consumer.min.session.timeout.ms", _int(1), 45_000,
               "the smallest consumer.session.timeout.ms a group config may set"),
        KeyDef("group.consumer.max.session.timeout.ms", _int(1), 60_000,
               "the largest consumer.session.timeout.ms a group config may set"),
        KeyDef("group.consumer.min.heartbeat.interval.ms", _int(1), 5000,
               "the smallest consumer.heartbeat.interval.ms a group config may set"),
        KeyDef("group.consumer.max.heartbeat.interval.ms", _int(1), 15_000,
               "the largest consumer.heartbeat.interval.ms a group config may set"),
        KeyDef("group.consumer.migration.policy", _migration_policy, "bidirectional",
               "whether a non-empty group may move between the classic and the consumer protocol: disabled, "
               "upgrade (classic to consumer), downgrade (back) or bidirectional"),
        KeyDef("group.share.session.timeout.ms", _int(1), 45_000,
               "how long a share group (KIP-932) member may go without a heartbeat before it is removed"),
        KeyDef("group.share.heartbeat.interval.ms", _int(1), 5000, "how often share group members are told to heartbeat"),
        KeyDef("group.share.min.session.timeout.ms", _int(1), 45_000,
               "the smallest share.session.timeout.ms a group config may set"),
        KeyDef("group.share.max.session.timeout.ms", _int(1), 60_000,
               "the largest share.session.timeout.ms a group config may set"),
        KeyDef("group.share.min.heartbeat.interval.ms", _int(1), 5000,
               "the smallest share.heartbeat.interval.ms a group config may set"),
        KeyDef("group.share.max.heartbeat.interval.ms", _int(1), 15_000,
               "the largest share.heartbeat.interval.ms a group config may set"),
        KeyDef("group.share.max.size", _int(1, 1000), 200, "the most members a share group may have"),
        KeyDef("group.share.record.lock.duration.ms", _int(1000), 30_000,
               "how long a record handed to a share group member stays locked to it"),
        KeyDef("group.share.min.record.lock.duration.ms", _int(1000), 15_000, "the smallest share.record.lock.duration.ms a group config may set"),
        KeyDef("group.share.max.record.lock.duration.ms", _int(1000), 60_000, "the largest share.record.lock.duration.ms a group config may set"),
        KeyDef("group.share.delivery.count.limit", _int(2, 10), 5,
               "how many times a record may be delivered to a share group before it is archived"),
        KeyDef("group.share.min.delivery.count.limit", _int(2, 10), 2, "the smallest share.delivery.count.limit a group config may set"),
        KeyDef("group.share.max.delivery.count.limit", _int(2, 10), 10, "the largest share.delivery.count.limit a group config may set"),
        KeyDef("group.share.partition.max.record.locks", _int(100), 2_000,
               "the most records of one partition locked to a share group's members at once"),
        KeyDef("group.share.min.partition.max.record.locks", _int(100), 100, "the smallest share.partition.max.record.locks a group config may set"),
        KeyDef("group.share.max.partition.max.record.locks", _int(100), 4_000, "the largest share.partition.max.record.locks a group config may set"),
        KeyDef("group.share.initialize.retry.interval.ms", _int(1), 30_000,
               "how long a share group waits for the persister to initialize a partition's share state before it "
               "asks again"),
        KeyDef("group.share.max.share.sessions", _int(1), 2000,
               "the most share sessions (KIP-932) a broker holds at once (SHARE_SESSION_LIMIT_REACHED past it)"),
        KeyDef("group.streams.session.timeout.ms", _int(1), 45_000,
               "a streams group member not heard from for this long is removed"),
        KeyDef("group.streams.heartbeat.interval.ms", _int(1), 5000,
               "how often streams group members are told to heartbeat"),
        KeyDef("group.streams.min.session.timeout.ms", _int(1), 45_000,
               "the smallest streams.session.timeout.ms a group config may set"),
        KeyDef("group.streams.max.session.timeout.ms", _int(1), 60_000,
               "the largest streams.session.timeout.ms a group config may set"),
        KeyDef("group.streams.min.heartbeat.interval.ms", _int(1), 5000,
               "the smallest streams.heartbeat.interval.ms a group config may set"),
        KeyDef("group.streams.max.heartbeat.interval.ms", _int(1), 15_000,
               "the largest streams.heartbeat.interval.ms a group config may set"),
        KeyDef("group.streams.max.size", _int(1), 2**31 - 1, "the most members a streams group may have"),
        KeyDef("group.streams.num.standby.replicas", _int(0), 0,
               "standby copies of each stateful task, for groups without their own streams.num.standby.replicas"),
        KeyDef("group.streams.max.standby.replicas", _int(0), 2,
               "the largest streams.num.standby.replicas a group config may set"),
        KeyDef("group.streams.initial.rebalance.delay.ms", _int(0), 3000,
               "how long a streams group that was empty gathers members before its first assignment"),
        KeyDef("offset.metadata.max.bytes", _int(), 4096),
        KeyDef("offsets.retention.minutes", _int(1), 10080,
               "how long a group's committed offsets are kept once the group is empty (Kafka has no ms key)",
               into="offsets_retention_ms"),
        KeyDef("offsets.retention.check.interval.ms", _long(1), 600_000),
        KeyDef("offsets.commit.timeout.ms", _int(1), 5000,
               "how long an offset commit waits for the replicas of its __consumer_offsets partition"),
        KeyDef("offsets.topic.segment.bytes", _int(1), 104_857_600, "segment.bytes of __consumer_offsets"),
        KeyDef("offsets.load.buffer.size", _int(1), 5 * 1024 * 1024,
               "bytes read at a time when a coordinator loads a __consumer_offsets partition"),
        KeyDef("offsets.topic.compression.codec", _int(0, 4), 0,
               "codec of the coordinator's own writes (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)"),
        KeyDef("group.coordinator.rebalance.protocols", _rebalance_protocols, ("classic", "consumer")),
        KeyDef("producer.id.expiration.ms", _int(1), 86_400_000,
               "how long a producer's state is kept after its last batch"),
        KeyDef("producer.id.expiration.check.interval.ms", _int(1), 600_000),
        KeyDef("replica.high.watermark.checkpoint.interval.ms", _long(1), 5000),
        KeyDef("initial.broker.registration.timeout.ms", _int(1), 60_000),
        KeyDef("request.timeout.ms", _int(1), 30_000, "how long a broker waits for its controller's answers"),
        KeyDef("socket.listen.backlog.size", _int(1), 1024,
               "connections the kernel queues for a listener before they are accepted (Kafka's default is 50)"),
        KeyDef("remote.log.storage.system.enable", _no_tiered_storage, False),
        KeyDef("num.replica.fetchers", _int(1), 1),
        KeyDef("min.insync.replicas", _int(1), 1),
        KeyDef("replication.quota.window.num", _int(1), 11,
               "samples the inter-broker replication throttles measure their rate over"),
        KeyDef("replication.quota.window.size.seconds", _int(1), 1, "the length of one such sample"),
        KeyDef("quota.window.num", _int(1), 11, "samples the client quotas measure their rates over"),
        KeyDef("quota.window.size.seconds", _int(1), 1, "the length of one such sample"),
        KeyDef("telemetry.max.bytes", _int(1), 1_048_576,
               "the largest metrics payload a client may push (KIP-714 PushTelemetry), in bytes"),
        KeyDef("controller.quota.window.num", _int(1), 11,
               "samples of the controller mutation quota: its token bucket holds this many windows of the rate"),
        KeyDef("controller.quota.window.size.seconds", _int(1), 1, "the length of one such sample"),
        KeyDef(
            "log.dir.placement.policy",
            _one_of("most-usable", "fewest-partitions"),
            "most-usable",
            "kjbod: where a new partition goes: the online dir with most usable bytes (ties: fewest partitions), "
            "or Kafka's rule, the dir with fewest partitions",
        ),
        KeyDef("authorizer.class.name", _str, "",
               "the ACL authorizer: org.apache.kafka.metadata.authorizer.StandardAuthorizer, or empty for none"),
        KeyDef("super.users", _super_users, (), "principals allowed everything, as User:a;User:b"),
        KeyDef("allow.everyone.if.no.acl.found", _bool, False,
               "allow an action on a resource that has no ACL entry at all (else deny it)"),
        KeyDef("early.start.listeners", _upper_list, None,
               "listeners served before the authorizer has loaded the ACLs (the controller listeners by default)"),
        KeyDef("delegation.token.secret.key", _str, "",
               "the secret delegation tokens' HMACs are made with, the same on every node; empty: no delegation tokens"),
        KeyDef("delegation.token.max.lifetime.ms", _long(1), 604800000,
               "the longest a delegation token lives, however often it is renewed"),
        KeyDef("delegation.token.expiry.time.ms", _long(1), 86400000,
               "how long a delegation token lives from its creation or a renewal unless the request asks for less"),
        KeyDef("delegation.token.expiry.check.interval.ms", _long(1), 3600000,
               "how often the controller removes expired delegation tokens"),
        KeyDef("kjbod.zero.copy", _bool, True, "kjbod: send Fetch record data with sendfile", into="zero_copy"),
        KeyDef("kjbod.extensions.enable", _bool, True,
               "kjbod: serve kjbod's protocol extensions (extension API keys in ApiVersions, extension tagged "
               "fields); false answers as Apache Kafka does, for testing tools' fallbacks", into="extensions_enable"),
        KeyDef(
            "kjbod.metrics.listener",
            _host_port,
            None,
            "kjbod: HOST:PORT of the Prometheus /metrics endpoint (unset: no endpoint)",
        ),
    ]
}

# Alternative names: alias -> canonical key. Setting both is an error unless they agree.
ALIASES: dict[str, str] = {
    "broker.id": "node.id",  # Kafka accepts broker.id for node.id in KRaft mode
    "intra.broker.throttled.rate": "replica.alter.log.dirs.io.max.bytes.per.second",  # KIP-113's name
}

# Kafka keys kjbod accepts only for compatibility with Kafka's files: they have no effect here (the node logs the
# ones a config sets, once at start; the README's "Where kjbod differs" lists them). Those in KEYS are still
# checked and reported by DescribeConfigs; the others (ACCEPTED_NO_EFFECT) are taken as they are. Every other key
# kjbod accepts takes effect where Kafka applies it (tests/test_config_audit.py keeps both lists honest).
COMPATIBILITY_ONLY: dict[str, str] = {
    # Checked, reported by DescribeConfigs, no effect yet.
    # Taken as they are.
    "num.network.threads": "one asyncio event loop serves every connection",
    "num.io.threads": "requests are handled on the event loop",
    "socket.send.buffer.bytes": "the operating system's socket buffer sizes are used",
    "socket.receive.buffer.bytes": "the operating system's socket buffer sizes are used",
    "num.recovery.threads.per.data.dir": "each log dir is loaded by one thread",
    "log.cleaner.io.buffer.size": "the cleaner reads segments 1 MiB at a time",
    "group.coordinator.rebalance.protocols": "only the classic group protocol is served (no KIP-848 consumer groups, "
                                             "no share or streams groups)",
    "remote.log.storage.system.enable": "no tiered storage (only false is accepted)",
    "background.threads": "each log dir's background work (flushes, retention, deletions, checkpoints) has a thread "
                          "of its own",
    "fetch.purgatory.purge.interval.requests": "a parked Fetch leaves its queue when it is answered: nothing to purge",
    "producer.purgatory.purge.interval.requests": "a waiting Produce leaves its queue when it is answered: nothing "
                                                  "to purge",
    "delete.records.purgatory.purge.interval.requests": "a waiting DeleteRecords leaves its queue when it is "
                                                        "answered: nothing to purge",
    "max.incremental.fetch.session.cache.slots": "no incremental fetch sessions (KIP-227) are opened: every Fetch "
                                                 "is a full one",
    "metric.reporters": "Java metric reporter classes are not loaded; kjbod's metrics are on its Prometheus endpoint "
                        "(kjbod.metrics.listener)",
    "kafka.metrics.reporters": "Java metric reporter classes are not loaded; kjbod's metrics are on its Prometheus "
                               "endpoint (kjbod.metrics.listener)",
    "replica.socket.receive.buffer.bytes": "the operating system's socket buffer sizes are used",
    "log.message.downconversion.enable": "only message format v2 is served (Fetch v4 and later), so nothing is "
                                         "down-converted",
    "log.preallocate": "segment files grow as they are written",
    "log.message.format.version": "message format v2 is always written, as Kafka does from 3.0 on",
    "queued.max.requests": "requests are handled as they are read, with no queue between sockets and handlers; each "
                           "connection stops reading while its replies wait to be sent",
    "queued.max.request.bytes": "requests are handled as they are read, with no queue between sockets and handlers",
    "inter.broker.protocol.version": "in KRaft mode the metadata version decides what brokers speak (Kafka ignores "
                                     "this key there too)",
    "controlled.shutdown.max.retries": "a controlled shutdown goes through broker heartbeats (KRaft): nothing is "
                                       "retried",
    "controlled.shutdown.retry.backoff.ms": "a controlled shutdown goes through broker heartbeats (KRaft): nothing "
                                            "is retried",
    "unstable.api.versions.enable": "no unstable API versions are served",
    "unstable.feature.versions.enable": "no unstable feature versions are served",
    "kafka.metrics.polling.interval.secs": "no JMX or Yammer metrics; kjbod's metrics are read when the Prometheus "
                                           "endpoint is scraped",
    "broker.id.generation.enable": "ZooKeeper mode only: a KRaft node's id is node.id",
    "reserved.broker.max.id": "ZooKeeper mode only: a KRaft node's id is node.id",
    "controller.quorum.append.linger.ms": "the active controller appends and fsyncs each write's records as one "
                                          "batch at once; nothing waits to be batched with later writes",
}
ACCEPTED_NO_EFFECT = frozenset(k for k in COMPATIBILITY_ONLY if k not in KEYS)

# Kafka's default listener.security.protocol.map, plus CONTROLLER (Kafka maps controller listeners missing from a
# default map to PLAINTEXT).
DEFAULT_PROTOCOL_MAP = {
    "PLAINTEXT": "PLAINTEXT",
    "CONTROLLER": "PLAINTEXT",
    "SSL": "SSL",
    "SASL_PLAINTEXT": "SASL_PLAINTEXT",
    "SASL_SSL": "SASL_SSL",
}


@dataclass(frozen=True)
class ServerConfig:
    node_id: int
    process_roles: tuple[str, ...]
    listeners: tuple[Listener, ...]
    # As configured; empty means "advertise `listeners`" (the node falls back to them).
    advertised_listeners: tuple[Listener, ...]
    controller_listener_names: tuple[str, ...]
    log_dirs: tuple[str, ...]
    metadata_log_dir: str
    cordoned_log_dirs: tuple[str, ...]  # absolute, in log.dirs order ("*" expanded)
    num_partitions: int
    default_replication_factor: int
    auto_create_topics_enable: bool
    log_segment_bytes: int
    log_roll_ms: int
    log_retention_ms: int  # -1: no time limit
    log_retention_bytes: int  # -1: no size limit
    log_retention_check_interval_ms: int
    message_max_bytes: int
    log_index_interval_bytes: int
    log_index_size_max_bytes: int
    log_flush_interval_messages: int
    log_flush_interval_ms: int  # LONG_MAX when unset (Kafka: null, i.e. never by time)
    log_segment_delete_delay_ms: int
    replica_alter_log_dirs_io_max_bytes_per_second: int  # LONG_MAX: unlimited
    num_replica_alter_log_dirs_threads: int
    log_dir_failure_timeout_ms: int
    socket_request_max_bytes: int
    broker_heartbeat_interval_ms: int
    broker_session_timeout_ms: int
    replica_fetch_max_bytes: int
    log_dir_placement_policy: str
    zero_copy: bool
    extensions_enable: bool = True
    listener_security_protocol_map: Mapping[str, str] = field(default_factory=dict)
    inter_broker_listener_name: str | None = None
    replica_fetch_min_bytes: int = 1
    fetch_max_bytes: int = 55 * 1024 * 1024
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_response_max_bytes: int = 10 * 1024 * 1024
    replica_fetch_backoff_ms: int = 1000
    replica_socket_timeout_ms: int = 30_000
    replica_lag_time_max_ms: int = 30_000
    offsets_topic_num_partitions: int = 50
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_min_isr: int = 2
    transaction_state_log_segment_bytes: int = 100 * 1024 * 1024
    share_coordinator_state_topic_num_partitions: int = 50
    share_coordinator_state_topic_replication_factor: int = 3
    share_coordinator_state_topic_min_isr: int = 2
    share_coordinator_state_topic_segment_bytes: int = 100 * 1024 * 1024
    share_coordinator_snapshot_update_records_per_snapshot: int = 500
    share_coordinator_state_topic_prune_interval_ms: int = 5 * 60 * 1000
    transaction_max_timeout_ms: int = 900_000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    transactional_id_expiration_ms: int = 604_800_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    transaction_partition_verification_enable: bool = True
    offsets_topic_replication_factor: int = 3
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_max_size: int = 2**31 - 1
    max_request_partition_size_limit: int = 2000
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_heartbeat_interval_ms: int = 5000
    group_consumer_assignors: tuple[str, ...] = ("uniform", "range")
    group_consumer_max_size: int = 2**31 - 1
    group_consumer_min_session_timeout_ms: int = 45_000
    group_consumer_max_session_timeout_ms: int = 60_000
    group_consumer_min_heartbeat_interval_ms: int = 5000
    group_consumer_max_heartbeat_interval_ms: int = 15_000
    group_consumer_migration_policy: str = "bidirectional"
    group_share_session_timeout_ms: int = 45_000
    group_share_heartbeat_interval_ms: int = 5000
    group_share_min_session_timeout_ms: int = 45_000
    group_share_max_session_timeout_ms: int = 60_000
    group_share_min_heartbeat_interval_ms: int = 5000
    group_share_max_heartbeat_interval_ms: int = 15_000
    group_share_max_size: int = 200
    group_share_initialize_retry_interval_ms: int = 30_000
    group_share_record_lock_duration_ms: int = 30_000
    group_share_min_record_lock_duration_ms: int = 15_000
    group_share_max_record_lock_duration_ms: int = 60_000
    group_share_delivery_count_limit: int = 5
    group_share_min_delivery_count_limit: int = 2
    group_share_max_delivery_count_limit: int = 10
    group_share_partition_max_record_locks: int = 2_000
    group_share_min_partition_max_record_locks: int = 100
    group_share_max_partition_max_record_locks: int = 4_000
    group_share_max_share_sessions: int = 2000
    group_streams_session_timeout_ms: int = 45_000
    group_streams_heartbeat_interval_ms: int = 5000
    group_streams_min_session_timeout_ms: int = 45_000
    group_streams_max_session_timeout_ms: int = 60_000
    group_streams_min_heartbeat_interval_ms: int = 5000
    group_streams_max_heartbeat_interval_ms: int = 15_000
    group_streams_max_size: int = 2**31 - 1
    group_streams_num_standby_replicas: int = 0
    group_streams_max_standby_replicas: int = 2
    group_streams_initial_rebalance_delay_ms: int = 3000
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    offsets_commit_timeout_ms: int = 5000
    offsets_topic_segment_bytes: int = 104_857_600
    offsets_load_buffer_size: int = 5 * 1024 * 1024
    offsets_topic_compression_codec: int = 0
    producer_id_expiration_ms: int = 86_400_000
    producer_id_expiration_check_interval_ms: int = 600_000
    replica_high_watermark_checkpoint_interval_ms: int = 5000
    initial_broker_registration_timeout_ms: int = 60_000
    request_timeout_ms: int = 30_000
    socket_listen_backlog_size: int = 1024
    group_coordinator_rebalance_protocols: tuple[str, ...] = ("classic", "consumer")  # compatibility only
    remote_log_storage_system_enable: bool = False  # compatibility only: true is refused
    num_replica_fetchers: int = 1
    min_insync_replicas: int = 1
    replication_quota_window_num: int = 11
    replication_quota_window_size_seconds: int = 1
    quota_window_num: int = 11
    quota_window_size_seconds: int = 1
    controller_quota_window_num: int = 11
    telemetry_max_bytes: int = 1_048_576
    controller_quota_window_size_seconds: int = 1
    broker_rack: str | None = None
    controller_quorum_bootstrap_servers: tuple[str, ...] = ()
    controller_quorum_voters: tuple[str, ...] = ()
    controller_quorum_election_timeout_ms: int = 1000
    controller_quorum_election_backoff_max_ms: int = 1000
    controller_quorum_fetch_timeout_ms: int = 2000
    controller_quorum_request_timeout_ms: int = 2000
    controller_quorum_retry_backoff_ms: int = 20
    log_flush_offset_checkpoint_interval_ms: int = 60_000
    log_roll_jitter_ms: int = 0
    log_initial_task_delay_ms: int = 30_000
    log_dir_stall_timeout_ms: int = 30_000
    log_dir_slow_threshold_ms: int = 1_000
    log_dir_reserved_bytes: int = -1
    log_dir_space_check_interval_ms: int = 1_000
    delete_topic_enable: bool = True
    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_per_broker_percentage: int = 10
    leader_imbalance_check_interval_seconds: int = 300
    log_cleanup_policy: str = "delete"
    log_cleaner_enable: bool = True
    log_cleaner_threads: int = 1
    log_cleaner_io_max_bytes_per_second: float = 1.7976931348623157e308
    log_cleaner_dedupe_buffer_size: int = 128 << 20
    log_cleaner_io_buffer_load_factor: float = 0.9
    log_cleaner_backoff_ms: int = 15_000
    log_cleaner_min_cleanable_ratio: float = 0.5
    log_cleaner_delete_retention_ms: int = 86_400_000
    log_cleaner_min_compaction_lag_ms: int = 0
    log_cleaner_max_compaction_lag_ms: int = LONG_MAX
    log_message_timestamp_type: str = "CreateTime"
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    metadata_log_max_record_bytes_between_snapshots: int = 20 * 1024 * 1024
    metadata_log_max_snapshot_interval_ms: int = 3_600_000
    metadata_max_idle_interval_ms: int = 500
    metadata_log_segment_bytes: int = 1 << 30
    metadata_log_segment_min_bytes: int = 8 << 20
    metadata_log_segment_ms: int = 7 * 24 * 3_600_000
    metadata_max_retention_bytes: int = 100 << 20
    metadata_max_retention_ms: int = 7 * 24 * 3_600_000
    log_message_timestamp_before_max_ms: int = LONG_MAX
    log_message_timestamp_difference_max_ms: int = LONG_MAX
    log_message_timestamp_after_max_ms: int = LONG_MAX
    kjbod_metrics_listener: str | None = None  # HOST:PORT
    authorizer_class_name: str = ""  # "" or Kafka's StandardAuthorizer
    replica_selector_class: str = ""  # "" (consumers read from leaders) or Kafka's RackAwareReplicaSelector
    super_users: tuple[str, ...] = ()
    allow_everyone_if_no_acl_found: bool = False
    early_start_listeners: tuple[str, ...] = ()  # served before the authorizer's initial ACL load
    delegation_token_secret_key: str = ""
    delegation_token_max_lifetime_ms: int = 604800000
    delegation_token_expiry_time_ms: int = 86400000
    delegation_token_expiry_check_interval_ms: int = 3600000
    max_connections: int = INT_MAX
    max_connections_per_ip: int = INT_MAX
    max_connections_per_ip_overrides: str = ""  # host:count,... (checked)
    max_connection_creation_rate: int = INT_MAX
    connection_failed_authentication_delay_ms: int = 100
    sasl_server_max_receive_size: int = 524288
    controlled_shutdown_enable: bool = True
    log_flush_start_offset_checkpoint_interval_ms: int = 60_000
    connections_max_idle_ms: int = 600_000  # negative: never
    # The COMPATIBILITY_ONLY keys the config sets, as given, so the node can log once that they have no effect.
    ignored: Mapping[str, str] = field(default_factory=dict)
    # The effective raw key=value pairs (file, then overrides).
    properties: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_broker(self) -> bool:
        return "broker" in self.process_roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.process_roles

    def tls_settings(self, listener: str) -> TlsSettings:
        """The ssl.* settings of `listener` (listener.name.<name>.ssl.* over ssl.*, Kafka's defaults)."""
        return TlsSettings.for_listener(self.properties, listener)

    def sasl_settings(self, listener: str) -> SaslSettings:
        """The SASL settings of `listener` (checked when the config was read)."""
        return SaslSettings.for_listener(self.properties, listener)

    def security_protocol(self, listener: str) -> str:
        return self.listener_security_protocol_map.get(listener, "PLAINTEXT")

    def listener_kind(self, name: str) -> str:
        return "controller" if name in self.controller_listener_names else "broker"

    @property
    def broker_listeners(self) -> tuple[Listener, ...]:
        return tuple(ln for ln in self.listeners if ln.name not in self.controller_listener_names)

    @property
    def controller_listeners(self) -> tuple[Listener, ...]:
        return tuple(ln for ln in self.listeners if ln.name in self.controller_listener_names)


# -- the properties format -------------------------------------------------------------------------------------

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str, lineno: int) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c != "\\" or i + 1 == n:
            out.append(c)
            i += 1
            continue
        c = text[i + 1]
        if c == "u":
            digits = text[i + 2 : i + 6]
            if not re.fullmatch(r"[0-9A-Fa-f]{4}", digits):
                raise ConfigError(f"line {lineno}: malformed \\uxxxx escape {text[i : i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(c, c))
            i += 2
    return "".join(out)


def _ends_with_odd_backslashes(line: str) -> bool:
    count = len(line) - len(line.rstrip("\\"))
    return count % 2 == 1


def parse_properties(text: str) -> list[tuple[int, str, str]]:
    """(line number, key, value) for each entry of a Java-properties text, in order (later entries win)."""
    out: list[tuple[int, str, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        lineno = i + 1
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        # A line ending in an odd number of backslashes continues on the next one, minus its leading blanks.
        while _ends_with_odd_backslashes(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip(" \t\f")
            i += 1
        if _ends_with_odd_backslashes(line):
            line = line[:-1]
        # The key ends at the first unescaped '=', ':' or blank; one '=' or ':' (with blanks around it) separates.
        j = 0
        while j < len(line):
            c = line[j]
            if c == "\\":
                j += 2
                continue
            if c in "=: \t\f":
                break
            j += 1
        key = line[:j]
        rest = line[j:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        out.append((lineno, _unescape(key, lineno), _unescape(rest, lineno).rstrip()))
    return out


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    """`key=value` strings (from `--override`) as a dict; later ones win."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"invalid --override {item!r}: expected key=value")
        out[key.strip()] = value.strip()
    return out


# Broker configs Kafka takes only at runtime (DynamicConfig.Broker), never from server.properties.
DYNAMIC_ONLY = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


def _unknown(key: str) -> ConfigError:
    if key in DYNAMIC_ONLY:
        return ConfigError(f"{key} can only be set at runtime, as in Kafka: IncrementalAlterConfigs on the broker "
                           "(or on the cluster default broker resource), e.g. with kafka-configs.sh --alter")
    known = [*KEYS, *ALIASES, *ACCEPTED_NO_EFFECT]
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return ConfigError(f"unknown config key {key!r}{hint}")


# -- building the typed config ---------------------------------------------------------------------------------


def build_config(
    props: Mapping[str, str],
    *,
    base_dir: str | None = None,
    sources: Mapping[str, str] | None = None,
) -> ServerConfig:
    """Convert and check `props` (Kafka key -> raw text). `sources` (key -> "file:line" or "--override") only
    makes messages point at the right place. Relative log dirs resolve against `base_dir` (default: the CWD)."""
    where = sources or {}

    def located(key: str, error: ConfigError) -> ConfigError:
        src = where.get(key)
        return ConfigError(f"{src}: {error}") if src else error

    values: dict[str, Any] = {}
    set_by: dict[str, str] = {}  # canonical key -> the key (itself or an alias) that set it
    ignored: dict[str, str] = {}
    for key, raw in props.items():
        if key in ACCEPTED_NO_EFFECT:
            ignored[key] = raw
            continue
        prefixed = listener_key(key)
        ssl_key = prefixed[1] if prefixed is not None else key
        if ssl_key in SSL_KEYS or ssl_key in SSL_NO_EFFECT:
            # Kafka's ssl.* keys, plain or for one listener: read by the TLS listeners (kjbod.net.tls)
            if ssl_key in SSL_NO_EFFECT:
                ignored[key] = raw
            continue
        if is_sasl_key(key):
            continue  # Kafka's SASL keys, plain or for one listener: read by the SASL listeners (kjbod.net.sasl)
        if listener_connection_key(key) is not None:
            try:  # a listener's connection limits: read from `properties` by kjbod.server.quotas
                _listener_connection_limit(key, raw)
            except ConfigError as e:
                raise located(key, e) from None
            continue
        canonical = ALIASES.get(key, key)
        keydef = KEYS.get(canonical)
        if keydef is None:
            raise located(key, _unknown(key))
        try:
            value = keydef.conv(key, raw)
        except ConfigError as e:
            raise located(key, e) from None
        if canonical in values and values[canonical] != value:
            other = set_by[canonical]
            raise located(
                key,
                ConfigError(
                    f"{key}={raw.strip()} disagrees with {other}={props[other].strip()} (the same setting); "
                    "set only one of them"
                ),
            )
        values[canonical] = value
        set_by[canonical] = key
        if canonical in COMPATIBILITY_ONLY:
            ignored[key] = raw

    def get(key: str) -> Any:
        return values.get(key, KEYS[key].default)

    def fail(key: str, message: str) -> ConfigError:
        return located(key, ConfigError(message))

    if get("node.id") is None:
        raise ConfigError("node.id is required")
    roles: tuple[str, ...] | None = get("process.roles")
    if roles is None:
        raise ConfigError("process.roles is required (broker, controller, or broker,controller)")

    heartbeat, session = get("broker.heartbeat.interval.ms"), get("broker.session.timeout.ms")
    if heartbeat > session:  # Kafka's KafkaConfig requires the same: a broker would be fenced between beats
        raise fail("broker.heartbeat.interval.ms",
                   f"broker.heartbeat.interval.ms ({heartbeat}) must be less than or equal to "
                   f"broker.session.timeout.ms ({session}): the controller would fence every broker between two "
                   "of its heartbeats")

    _check_consumer_group_bounds(get, fail)
    _check_consumer_group_bounds(get, fail, "group.share.")
    for what in ("record.lock.duration.ms", "delivery.count.limit", "partition.max.record.locks"):
        _check_within(get, fail, "group.share.", what)
    _check_consumer_group_bounds(get, fail, "group.streams.")
    standbys, most = get("group.streams.num.standby.replicas"), get("group.streams.max.standby.replicas")
    if standbys > most:
        raise fail("group.streams.num.standby.replicas",
                   f"group.streams.num.standby.replicas ({standbys}) must be less than or equal to "
                   f"group.streams.max.standby.replicas ({most})")

    # Listeners and their security protocols.
    explicit_map = get("listener.security.protocol.map")
    protomap = dict(explicit_map) if explicit_map is not None else dict(DEFAULT_PROTOCOL_MAP)
    controller_names: tuple[str, ...] = get("controller.listener.names")
    if explicit_map is None:
        for name in controller_names:
            protomap.setdefault(name, "PLAINTEXT")
    listeners: list[Listener] = []
    bound: dict[tuple[str, int], str] = {}
    for name, host, port in get("listeners"):
        if name not in protomap:
            raise fail("listeners", f"listener {name} has no entry in listener.security.protocol.map")
        proto = protomap[name]
        if proto not in SUPPORTED_SECURITY_PROTOCOLS:
            raise fail(
                "listeners",
                f"listener {name}: security protocol {proto} is not supported yet (only PLAINTEXT and SSL)",
            )
        host = host or "0.0.0.0"
        if port != 0:
            if (host, port) in bound:
                raise fail("listeners", f"listeners {bound[(host, port)]} and {name} both use {host}:{port}")
            bound[(host, port)] = name
        listeners.append(Listener(name, host, port, proto))
    names = [ln.name for ln in listeners]
    if not listeners:
        raise fail("listeners", "listeners is empty: give at least one NAME://host:port")

    advertised: list[Listener] = []
    for name, host, port in get("advertised.listeners") or ():
        if name not in names:
            raise fail(
                "advertised.listeners", f"advertised.listeners names {name}, which is not in listeners"
            )
        if host in ("", "0.0.0.0", "::"):
            raise fail(
                "advertised.listeners",
                f"advertised listener {name} cannot use {host or 'an empty host'}: clients need a routable address",
            )
        advertised.append(Listener(name, host, port, protomap[name]))

    is_broker, is_controller = "broker" in roles, "controller" in roles
    if not controller_names:
        raise fail("controller.listener.names", "controller.listener.names is required (e.g. CONTROLLER)")
    controller_in_listeners = [n for n in controller_names if n in names]
    early: tuple[str, ...] | None = get("early.start.listeners")
    for name in early or ():
        if name not in names and name not in controller_names:
            raise fail("early.start.listeners", f"early.start.listeners contains listener {name}, but this is not "
                       "contained in listeners or controller.listener.names")
    broker_listener_names = [n for n in names if n not in controller_names]
    if is_controller and not controller_in_listeners:
        raise fail(
            "controller.listener.names",
            f"none of controller.listener.names ({','.join(controller_names)}) is in listeners, "
            "but process.roles includes controller",
        )
    if is_controller and not is_broker and broker_listener_names:
        raise fail(
            "listeners",
            f"listeners has {','.join(broker_listener_names)}, but a controller-only node may only have "
            "controller listeners",
        )
    if is_broker and not broker_listener_names:
        raise fail("listeners", "a broker needs at least one listener that is not a controller listener")
    voters = get("controller.quorum.voters") or ()
    if is_controller and is_broker and len(voters) > 1:
        # A combined node's controller runs alone on the broker's metadata log; only controller-only nodes
        # run the KRaft quorum (kjbod.raft), so a second voter would never be asked and the logs would part.
        raise fail("controller.quorum.voters",
                   f"controller.quorum.voters lists {len(voters)} voters ({','.join(voters)}), but a node with "
                   "process.roles=broker,controller runs its controller alone: list this node only "
                   f"({get('node.id')}@host:port), or run the controllers as process.roles=controller")
    if is_controller and len(voters) > 1 and str(get("node.id")) not in {v.partition("@")[0].strip() for v in voters}:
        raise fail("controller.quorum.voters",
                   f"node.id {get('node.id')} is not one of controller.quorum.voters ({','.join(voters)}): a "
                   "controller of a quorum must be one of its voters")
    if is_broker and not is_controller:
        if controller_in_listeners:
            raise fail(
                "listeners",
                f"listeners has controller listener {controller_in_listeners[0]}, "
                "but process.roles does not include controller",
            )
        if not get("controller.quorum.bootstrap.servers") and not get("controller.quorum.voters"):
            raise ConfigError(
                "a broker-only node needs controller.quorum.bootstrap.servers (or controller.quorum.voters) "
                "to find its controller"
            )
    inter_broker = get("inter.broker.listener.name")
    inter_protocol = get("security.inter.broker.protocol")
    if inter_protocol is not None:
        if inter_broker is not None:
            raise fail("security.inter.broker.protocol",
                       "only one of inter.broker.listener.name and security.inter.broker.protocol may be set, "
                       "as in Kafka")
        # As Kafka: the listener named after the protocol
        inter_broker = inter_protocol
        if is_broker and inter_broker not in broker_listener_names:
            raise fail("security.inter.broker.protocol",
                       f"security.inter.broker.protocol {inter_protocol} names listener {inter_protocol}, which is "
                       f"not one of the broker listeners ({','.join(broker_listener_names)}); set "
                       "inter.broker.listener.name instead")
    elif inter_broker is not None:
        inter_broker = inter_broker.upper()
        if is_broker and inter_broker not in broker_listener_names:
            raise fail(
                "inter.broker.listener.name",
                f"inter.broker.listener.name {inter_broker} is not one of the broker listeners "
                f"({','.join(broker_listener_names)})",
            )

    if get("max.connections.per.ip") == 0 and not get("max.connections.per.ip.overrides"):
        raise fail("max.connections.per.ip", "max.connections.per.ip is 0, which refuses every connection: set "
                   "max.connections.per.ip.overrides for the hosts that may connect, or a limit above 0")

    # TLS: every SSL listener's server side, and the client side this node opens on the inter-broker and the
    # controller listener, built now so a bad value or an unreadable file stops the start with one line.
    client_listeners = set()
    if is_broker:
        client_listeners.add(inter_broker or broker_listener_names[0])
        client_listeners.add(controller_names[0])
    for ln in listeners:
        if is_tls(ln.security_protocol):
            _check_tls(props, ln.name, server=True, located=located)
    for name in sorted(client_listeners):
        if is_tls(protomap.get(name, "PLAINTEXT")):
            _check_tls(props, name, server=False, located=located)
    # SASL: every SASL listener's mechanisms and JAAS configs, and the credentials this node authenticates with on
    # the inter-broker and controller listeners when they are SASL.
    for ln in listeners:
        if is_sasl(ln.security_protocol):
            _check_sasl(props, ln.name, located=located)
    for name in sorted(client_listeners):
        if is_sasl(protomap.get(name, "PLAINTEXT")):
            _check_sasl(props, name, client_key=(
                "sasl.mechanism.controller.protocol" if name in controller_names
                else "sasl.mechanism.inter.broker.protocol"), located=located)

    # Log dirs: log.dirs wins over log.dir; absolute, normalised, distinct, not inside each other.
    base = base_dir or os.getcwd()
    dirs_key = "log.dirs" if get("log.dirs") is not None else "log.dir"
    raw_dirs = get("log.dirs") if dirs_key == "log.dirs" else (get("log.dir"),)
    if not raw_dirs:
        raise fail("log.dirs", "log.dirs is empty: give at least one log dir")
    dirs = [os.path.normpath(os.path.join(base, os.path.expanduser(d))) for d in raw_dirs]
    for i, d in enumerate(dirs):
        for other in dirs[:i]:
            if d == other:
                raise fail(dirs_key, f"invalid value for {dirs_key}: {d} is listed twice")
            if _inside(d, other) or _inside(other, d):
                inner, outer = (d, other) if _inside(d, other) else (other, d)
                raise fail(
                    dirs_key, f"invalid value for {dirs_key}: log dir {inner} is inside log dir {outer}"
                )
    try:
        cordoned = cordoned_dirs([e if e == CORDON_ALL else os.path.normpath(os.path.join(base, os.path.expanduser(e)))
                                  for e in get("cordoned.log.dirs")], dirs)
    except ValueError as e:
        raise fail("cordoned.log.dirs", str(e)) from None
    meta = get("metadata.log.dir")
    meta_dir = os.path.normpath(os.path.join(base, os.path.expanduser(meta))) if meta else dirs[0]
    for d in dirs:
        if _inside(meta_dir, d) or _inside(d, meta_dir):
            raise fail(
                "metadata.log.dir", f"metadata.log.dir {meta_dir} and log dir {d} are nested in each other"
            )

    # Precedence keys, as in Kafka: ms over minutes over hours; any negative retention means unlimited.
    if get("log.retention.ms") is not None:
        retention = get("log.retention.ms")
    elif get("log.retention.minutes") is not None:
        retention = get("log.retention.minutes") * 60_000
    else:
        retention = get("log.retention.hours") * 3_600_000
    if retention < 0:
        retention = -1
    roll = get("log.roll.ms") if get("log.roll.ms") is not None else get("log.roll.hours") * 3_600_000
    jitter = get("log.roll.jitter.ms")
    if jitter is None:
        jitter = get("log.roll.jitter.hours") * 3_600_000
    flush_ms = get("log.flush.interval.ms")
    if flush_ms is None:  # Kafka: log.flush.interval.ms defaults to log.flush.scheduler.interval.ms
        flush_ms = get("log.flush.scheduler.interval.ms")

    authorizer = get("authorizer.class.name").strip()
    if authorizer and authorizer != STANDARD_AUTHORIZER:
        raise fail("authorizer.class.name", f"authorizer.class.name={authorizer} is not served: kjbod's authorizer is "
                   f"{STANDARD_AUTHORIZER} (or leave it empty for none)")

    selector = get("replica.selector.class").strip()
    if selector and selector != RACK_AWARE_REPLICA_SELECTOR:
        raise fail("replica.selector.class", f"replica.selector.class={selector} is not served: kjbod's replica "
                   f"selector is {RACK_AWARE_REPLICA_SELECTOR} (or leave it empty for none)")

    return ServerConfig(
        node_id=get("node.id"),
        process_roles=roles,
        listeners=tuple(listeners),
        advertised_listeners=tuple(advertised),
        controller_listener_names=controller_names,
        early_start_listeners=tuple(controller_names) if early is None else early,
        log_dirs=tuple(dirs),
        cordoned_log_dirs=tuple(cordoned),
        metadata_log_dir=meta_dir,
        num_partitions=get("num.partitions"),
        default_replication_factor=get("default.replication.factor"),
        auto_create_topics_enable=get("auto.create.topics.enable"),
        log_segment_bytes=get("log.segment.bytes"),
        log_roll_ms=roll,
        log_retention_ms=retention,
        log_retention_bytes=get("log.retention.bytes"),
        log_retention_check_interval_ms=get("log.retention.check.interval.ms"),
        message_max_bytes=get("message.max.bytes"),
        log_index_interval_bytes=get("log.index.interval.bytes"),
        log_index_size_max_bytes=get("log.index.size.max.bytes"),
        log_flush_interval_messages=get("log.flush.interval.messages"),
        log_flush_interval_ms=LONG_MAX if flush_ms is None else flush_ms,
        log_segment_delete_delay_ms=get("log.segment.delete.delay.ms"),
        replica_alter_log_dirs_io_max_bytes_per_second=get("replica.alter.log.dirs.io.max.bytes.per.second"),
        num_replica_alter_log_dirs_threads=get("num.replica.alter.log.dirs.threads") or len(dirs),
        log_dir_failure_timeout_ms=get("log.dir.failure.timeout.ms"),
        socket_request_max_bytes=get("socket.request.max.bytes"),
        max_connections=get("max.connections"),
        max_connections_per_ip=get("max.connections.per.ip"),
        max_connections_per_ip_overrides=get("max.connections.per.ip.overrides"),
        max_connection_creation_rate=get("max.connection.creation.rate"),
        connection_failed_authentication_delay_ms=get("connection.failed.authentication.delay.ms"),
        sasl_server_max_receive_size=get("sasl.server.max.receive.size"),
        controlled_shutdown_enable=get("controlled.shutdown.enable"),
        log_flush_start_offset_checkpoint_interval_ms=get("log.flush.start.offset.checkpoint.interval.ms"),
        connections_max_idle_ms=get("connections.max.idle.ms"),
        broker_heartbeat_interval_ms=get("broker.heartbeat.interval.ms"),
        broker_session_timeout_ms=get("broker.session.timeout.ms"),
        replica_fetch_max_bytes=get("replica.fetch.max.bytes"),
        replica_fetch_min_bytes=get("replica.fetch.min.bytes"),
        fetch_max_bytes=get("fetch.max.bytes"),
        replica_fetch_wait_max_ms=get("replica.fetch.wait.max.ms"),
        replica_fetch_response_max_bytes=get("replica.fetch.response.max.bytes"),
        replica_fetch_backoff_ms=get("replica.fetch.backoff.ms"),
        replica_socket_timeout_ms=get("replica.socket.timeout.ms"),
        replica_lag_time_max_ms=get("replica.lag.time.max.ms"),
        offsets_topic_num_partitions=get("offsets.topic.num.partitions"),
        transaction_state_log_num_partitions=get("transaction.state.log.num.partitions"),
        transaction_state_log_replication_factor=get("transaction.state.log.replication.factor"),
        transaction_state_log_min_isr=get("transaction.state.log.min.isr"),
        transaction_state_log_segment_bytes=get("transaction.state.log.segment.bytes"),
        share_coordinator_state_topic_num_partitions=get("share.coordinator.state.topic.num.partitions"),
        share_coordinator_state_topic_replication_factor=get("share.coordinator.state.topic.replication.factor"),
        share_coordinator_state_topic_min_isr=get("share.coordinator.state.topic.min.isr"),
        share_coordinator_state_topic_segment_bytes=get("share.coordinator.state.topic.segment.bytes"),
        share_coordinator_snapshot_update_records_per_snapshot=get(
            "share.coordinator.snapshot.update.records.per.snapshot"),
        share_coordinator_state_topic_prune_interval_ms=get("share.coordinator.state.topic.prune.interval.ms"),
        transaction_max_timeout_ms=get("transaction.max.timeout.ms"),
        transaction_abort_timed_out_transaction_cleanup_interval_ms=get(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms"),
        transactional_id_expiration_ms=get("transactional.id.expiration.ms"),
        transaction_remove_expired_transaction_cleanup_interval_ms=get(
            "transaction.remove.expired.transaction.cleanup.interval.ms"),
        transaction_partition_verification_enable=get("transaction.partition.verification.enable"),
        offsets_topic_replication_factor=get("offsets.topic.replication.factor"),
        group_initial_rebalance_delay_ms=get("group.initial.rebalance.delay.ms"),
        group_min_session_timeout_ms=get("group.min.session.timeout.ms"),
        group_max_session_timeout_ms=get("group.max.session.timeout.ms"),
        group_max_size=get("group.max.size"),
        max_request_partition_size_limit=get("max.request.partition.size.limit"),
        group_consumer_session_timeout_ms=get("group.consumer.session.timeout.ms"),
        group_consumer_heartbeat_interval_ms=get("group.consumer.heartbeat.interval.ms"),
        group_consumer_assignors=get("group.consumer.assignors"),
        group_consumer_max_size=get("group.consumer.max.size"),
        group_consumer_min_session_timeout_ms=get("group.consumer.min.session.timeout.ms"),
        group_consumer_max_session_timeout_ms=get("group.consumer.max.session.timeout.ms"),
        group_consumer_min_heartbeat_interval_ms=get("group.consumer.min.heartbeat.interval.ms"),
        group_consumer_max_heartbeat_interval_ms=get("group.consumer.max.heartbeat.interval.ms"),
        group_consumer_migration_policy=get("group.consumer.migration.policy"),
        group_share_session_timeout_ms=get("group.share.session.timeout.ms"),
        group_share_heartbeat_interval_ms=get("group.share.heartbeat.interval.ms"),
        group_share_min_session_timeout_ms=get("group.share.min.session.timeout.ms"),
        group_share_max_session_timeout_ms=get("group.share.max.session.timeout.ms"),
        group_share_min_heartbeat_interval_ms=get("group.share.min.heartbeat.interval.ms"),
        group_share_max_heartbeat_interval_ms=get("group.share.max.heartbeat.interval.ms"),
        group_share_max_size=get("group.share.max.size"),
        group_share_initialize_retry_interval_ms=get("group.share.initialize.retry.interval.ms"),
        group_share_record_lock_duration_ms=get("group.share.record.lock.duration.ms"),
        group_share_min_record_lock_duration_ms=get("group.share.min.record.lock.duration.ms"),
        group_share_max_record_lock_duration_ms=get("group.share.max.record.lock.duration.ms"),
        group_share_delivery_count_limit=get("group.share.delivery.count.limit"),
        group_share_min_delivery_count_limit=get("group.share.min.delivery.count.limit"),
        group_share_max_delivery_count_limit=get("group.share.max.delivery.count.limit"),
        group_share_partition_max_record_locks=get("group.share.partition.max.record.locks"),
        group_share_min_partition_max_record_locks=get("group.share.min.partition.max.record.locks"),
        group_share_max_partition_max_record_locks=get("group.share.max.partition.max.record.locks"),
        group_share_max_share_sessions=get("group.share.max.share.sessions"),
        group_streams_session_timeout_ms=get("group.streams.session.timeout.ms"),
        group_streams_heartbeat_interval_ms=get("group.streams.heartbeat.interval.ms"),
        group_streams_min_session_timeout_ms=get("group.streams.min.session.timeout.ms"),
        group_streams_max_session_timeout_ms=get("group.streams.max.session.timeout.ms"),
        group_streams_min_heartbeat_interval_ms=get("group.streams.min.heartbeat.interval.ms"),
        group_streams_max_heartbeat_interval_ms=get("group.streams.max.heartbeat.interval.ms"),
        group_streams_max_size=get("group.streams.max.size"),
        group_streams_num_standby_replicas=get("group.streams.num.standby.replicas"),
        group_streams_max_standby_replicas=get("group.streams.max.standby.replicas"),
        group_streams_initial_rebalance_delay_ms=get("group.streams.initial.rebalance.delay.ms"),
        offset_metadata_max_bytes=get("offset.metadata.max.bytes"),
        offsets_retention_ms=get("offsets.retention.minutes") * 60_000,
        offsets_retention_check_interval_ms=get("offsets.retention.check.interval.ms"),
        offsets_commit_timeout_ms=get("offsets.commit.timeout.ms"),
        offsets_topic_segment_bytes=get("offsets.topic.segment.bytes"),
        offsets_load_buffer_size=get("offsets.load.buffer.size"),
        offsets_topic_compression_codec=get("offsets.topic.compression.codec"),
        producer_id_expiration_ms=get("producer.id.expiration.ms"),
        producer_id_expiration_check_interval_ms=get("producer.id.expiration.check.interval.ms"),
        replica_high_watermark_checkpoint_interval_ms=get("replica.high.watermark.checkpoint.interval.ms"),
        initial_broker_registration_timeout_ms=get("initial.broker.registration.timeout.ms"),
        request_timeout_ms=get("request.timeout.ms"),
        socket_listen_backlog_size=get("socket.listen.backlog.size"),
        group_coordinator_rebalance_protocols=get("group.coordinator.rebalance.protocols"),
        remote_log_storage_system_enable=get("remote.log.storage.system.enable"),
        num_replica_fetchers=get("num.replica.fetchers"),
        min_insync_replicas=get("min.insync.replicas"),
        replication_quota_window_num=get("replication.quota.window.num"),
        replication_quota_window_size_seconds=get("replication.quota.window.size.seconds"),
        quota_window_num=get("quota.window.num"),
        quota_window_size_seconds=get("quota.window.size.seconds"),
        controller_quota_window_num=get("controller.quota.window.num"),
        telemetry_max_bytes=get("telemetry.max.bytes"),
        controller_quota_window_size_seconds=get("controller.quota.window.size.seconds"),
        log_dir_placement_policy=get("log.dir.placement.policy"),
        zero_copy=get("kjbod.zero.copy"),
        extensions_enable=get("kjbod.extensions.enable"),
        kjbod_metrics_listener=get("kjbod.metrics.listener"),
        authorizer_class_name=authorizer,
        replica_selector_class=selector,
        super_users=get("super.users"),
        allow_everyone_if_no_acl_found=get("allow.everyone.if.no.acl.found"),
        delegation_token_secret_key=get("delegation.token.secret.key"),
        delegation_token_max_lifetime_ms=get("delegation.token.max.lifetime.ms"),
        delegation_token_expiry_time_ms=get("delegation.token.expiry.time.ms"),
        delegation_token_expiry_check_interval_ms=get("delegation.token.expiry.check.interval.ms"),
        listener_security_protocol_map=protomap,
        inter_broker_listener_name=inter_broker,
        controller_quorum_bootstrap_servers=get("controller.quorum.bootstrap.servers"),
        controller_quorum_voters=get("controller.quorum.voters"),
        controller_quorum_election_timeout_ms=get("controller.quorum.election.timeout.ms"),
        controller_quorum_election_backoff_max_ms=get("controller.quorum.election.backoff.max.ms"),
        controller_quorum_fetch_timeout_ms=get("controller.quorum.fetch.timeout.ms"),
        controller_quorum_request_timeout_ms=get("controller.quorum.request.timeout.ms"),
        controller_quorum_retry_backoff_ms=get("controller.quorum.retry.backoff.ms"),
        log_flush_offset_checkpoint_interval_ms=get("log.flush.offset.checkpoint.interval.ms"),
        log_roll_jitter_ms=jitter,
        log_dir_stall_timeout_ms=get("log.dir.stall.timeout.ms"),
        log_dir_slow_threshold_ms=get("log.dir.slow.threshold.ms"),
        log_dir_reserved_bytes=get("log.dir.reserved.bytes"),
        log_dir_space_check_interval_ms=get("log.dir.space.check.interval.ms"),
        log_initial_task_delay_ms=get("log.initial.task.delay.ms"),
        delete_topic_enable=get("delete.topic.enable"),
        unclean_leader_election_enable=get("unclean.leader.election.enable"),
        auto_leader_rebalance_enable=get("auto.leader.rebalance.enable"),
        leader_imbalance_per_broker_percentage=get("leader.imbalance.per.broker.percentage"),
        leader_imbalance_check_interval_seconds=get("leader.imbalance.check.interval.seconds"),
        log_cleanup_policy=get("log.cleanup.policy"),
        log_cleaner_enable=get("log.cleaner.enable"),
        log_cleaner_threads=get("log.cleaner.threads"),
        log_cleaner_io_max_bytes_per_second=get("log.cleaner.io.max.bytes.per.second"),
        log_cleaner_dedupe_buffer_size=get("log.cleaner.dedupe.buffer.size"),
        log_cleaner_io_buffer_load_factor=get("log.cleaner.io.buffer.load.factor"),
        log_cleaner_backoff_ms=get("log.cleaner.backoff.ms"),
        log_cleaner_min_cleanable_ratio=get("log.cleaner.min.cleanable.ratio"),
        log_cleaner_delete_retention_ms=get("log.cleaner.delete.retention.ms"),
        log_cleaner_min_compaction_lag_ms=get("log.cleaner.min.compaction.lag.ms"),
        log_cleaner_max_compaction_lag_ms=get("log.cleaner.max.compaction.lag.ms"),
        log_message_timestamp_type=get("log.message.timestamp.type"),
        compression_type=get("compression.type"),
        compression_gzip_level=get("compression.gzip.level"),
        compression_lz4_level=get("compression.lz4.level"),
        compression_zstd_level=get("compression.zstd.level"),
        broker_rack=get("broker.rack"),
        metadata_log_max_record_bytes_between_snapshots=get("metadata.log.max.record.bytes.between.snapshots"),
        metadata_log_max_snapshot_interval_ms=get("metadata.log.max.snapshot.interval.ms"),
        metadata_max_idle_interval_ms=get("metadata.max.idle.interval.ms"),
        metadata_log_segment_bytes=get("metadata.log.segment.bytes"),
        metadata_log_segment_min_bytes=get("metadata.log.segment.min.bytes"),
        metadata_log_segment_ms=get("metadata.log.segment.ms"),
        metadata_max_retention_bytes=get("metadata.max.retention.bytes"),
        metadata_max_retention_ms=get("metadata.max.retention.ms"),
        log_message_timestamp_before_max_ms=get("log.message.timestamp.before.max.ms"),
        log_message_timestamp_difference_max_ms=get("log.message.timestamp.difference.max.ms"),
        log_message_timestamp_after_max_ms=get("log.message.timestamp.after.max.ms"),
        ignored=ignored,
        properties=dict(props),
    )


def _check_within(get: Callable[[str], Any], fail: Callable[[str, str], ConfigError], pre: str, what: str) -> None:
    """A broker key lies within its own min and max keys (`pre`min.`what` <= `pre``what` <= `pre`max.`what`)."""
    lo, hi, value = get(f"{pre}min.{what}"), get(f"{pre}max.{what}"), get(f"{pre}{what}")
    if hi < lo:
        raise fail(f"{pre}max.{what}", f"{pre}max.{what} ({hi}) must be greater than or equal to {pre}min.{what} ({lo})")
    if value < lo:
        raise fail(f"{pre}{what}", f"{pre}{what} ({value}) must be greater than or equal to {pre}min.{what} ({lo})")
    if value > hi:
        raise fail(f"{pre}{what}", f"{pre}{what} ({value}) must be less than or equal to {pre}max.{what} ({hi})")


def _check_consumer_group_bounds(get: Callable[[str], Any], fail: Callable[[str, str], ConfigError],
                                 pre: str = "group.consumer.") -> None:
    """Kafka's GroupCoordinatorConfig checks: the consumer-protocol (or, with pre "group.share." or
    "group.streams.", the share or streams group) session timeout and heartbeat interval lie within their min and
    max keys, and a member heartbeats more often than its session lasts."""
    for what in ("session.timeout.ms", "heartbeat.interval.ms"):
        lo, hi, value = get(f"{pre}min.{what}"), get(f"{pre}max.{what}"), get(f"{pre}{what}")
        if hi < lo:
            raise fail(f"{pre}max.{what}", f"{pre}max.{what} ({hi}) must be greater than or equal to "
                                           f"{pre}min.{what} ({lo})")
        if value < lo:
            raise fail(f"{pre}{what}", f"{pre}{what} ({value}) must be greater than or equal to {pre}min.{what} "
                                       f"({lo})")
        if value > hi:
            raise fail(f"{pre}{what}", f"{pre}{what} ({value}) must be less than or equal to {pre}max.{what} "
                                       f"({hi})")
    if get(f"{pre}heartbeat.interval.ms") >= get(f"{pre}session.timeout.ms"):
        raise fail(f"{pre}heartbeat.interval.ms", f"{pre}heartbeat.interval.ms must be less than "
                                                  f"{pre}session.timeout.ms")


def _check_sasl(props: Mapping[str, str], listener: str, *, client_key: str | None = None,
                located: Any) -> None:
    """A SASL listener's server side (`client_key` None) or the client side this node opens to it, with the
    mechanism `client_key` names (Kafka's default GSSAPI when unset)."""
    try:
        if client_key is None:
            SaslSettings.for_listener(props, listener)
            return
        settings = SaslSettings.for_listener(props, listener, server=False)
        mechanism = props.get(client_key, "GSSAPI").strip()
        try:
            settings.client_credentials(mechanism)
        except SaslConfigError as e:
            if "the client mechanism" in str(e):
                raise SaslConfigError(str(e).replace("the client mechanism", client_key)) from None
            raise
    except SaslConfigError as e:
        key = next((k for k in props if k in str(e)), "")
        raise located(key, ConfigError(str(e))) from None


def _check_tls(props: Mapping[str, str], listener: str, *, server: bool,
               located: Callable[[str, ConfigError], ConfigError]) -> None:
    settings = TlsSettings.for_listener(props, listener)
    try:
        if server:
            tls_server_context(settings)
        else:
            client_context(settings)
    except TlsConfigError as e:
        key = next((settings.key(k) for k in SSL_KEYS if settings.key(k) in str(e)), "")
        side = "" if server else " (the client side this node uses to reach it)"
        raise located(key, ConfigError(f"listener {listener}{side}: {e}")) from None


def _inside(path: str, parent: str) -> bool:
    """Whether `path` is strictly inside `parent` (both absolute and normalised)."""
    return path != parent and path.startswith(parent.rstrip(os.sep) + os.sep)


def load_config(path: str, overrides: Iterable[str] | Mapping[str, str] = ()) -> ServerConfig:
    """Read `path`, apply overrides (`key=value` strings or a mapping) on top, and check everything.
    Relative log dirs resolve against the current directory, as in Kafka."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"cannot read config file {path}: not UTF-8 text ({e.reason})") from None
    props: dict[str, str] = {}
    sources: dict[str, str] = {}
    try:
        entries = parse_properties(text)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    for lineno, key, value in entries:
        props[key] = value
        sources[key] = f"{path}:{lineno}"
    extra = dict(overrides) if isinstance(overrides, Mapping) else parse_overrides(overrides)
    for key, value in extra.items():
        props[key] = value
        sources[key] = "--override"
    return build_config(props, sources=sources)
