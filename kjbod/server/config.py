"""server.properties: Kafka's key names, Kafka's defaults, and errors that name the key and the value.

Strategy: one table (`KEYS`) lists every key kjbod understands with its type, default and check; parsing walks
the Java-properties text, applies `--override key=value` pairs on top, and converts each value through the
table.  Anything not in the table is refused (with the closest known key as a hint), except a short list of
Kafka keys that are accepted and have no effect here (users copy their Kafka configs).  The result is a frozen
`ServerConfig` whose attributes are the keys in snake_case (`log.segment.bytes` → `log_segment_bytes`).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1


class ConfigError(ValueError):
    """A configuration problem, with a one-line message that names the key and the value."""


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def _int(lo: int = -INT_MAX - 1, hi: int = INT_MAX) -> Callable[[str, str], int]:
    def conv(key: str, raw: str) -> int:
        try:
            v = int(raw.strip())
        except ValueError:
            raise ConfigError(f"invalid value {raw!r} for {key}: expected an integer") from None
        if not lo <= v <= hi:
            raise ConfigError(f"invalid value {raw!r} for {key}: must be between {lo} and {hi}")
        return v
    return conv


def _long(lo: int = -LONG_MAX - 1) -> Callable[[str, str], int]:
    return _int(lo, LONG_MAX)


def _bool(key: str, raw: str) -> bool:
    v = raw.strip().lower()
    if v not in ("true", "false"):
        raise ConfigError(f"invalid value {raw!r} for {key}: expected true or false")
    return v == "true"


def _str(key: str, raw: str) -> str:
    return raw.strip()


def _list(key: str, raw: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in raw.split(",") if p.strip())


def _roles(key: str, raw: str) -> tuple[str, ...]:
    roles = _list(key, raw)
    if not roles or any(r not in ("broker", "controller") for r in roles) or len(set(roles)) != len(roles):
        raise ConfigError(f"invalid value {raw!r} for {key}: expected broker, controller, or broker,controller")
    return roles


def _policy(key: str, raw: str) -> str:
    v = raw.strip()
    if v not in ("most-usable", "fewest-partitions"):
        raise ConfigError(f"invalid value {raw!r} for {key}: expected most-usable or fewest-partitions")
    return v


_LISTENER = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)://(\[[^\]]*\]|[^:/]*):(\d+)$")


def _listeners(key: str, raw: str) -> tuple[tuple[str, str, int], ...]:
    out = []
    for item in _list(key, raw):
        m = _LISTENER.match(item)
        if not m:
            raise ConfigError(f"invalid value {item!r} in {key}: expected NAME://host:port")
        name, host, port = m.group(1).upper(), m.group(2).strip("[]"), int(m.group(3))
        if not 0 <= port <= 65535:
            raise ConfigError(f"invalid port {port} in {key}")
        if any(n == name for n, _, _ in out):
            raise ConfigError(f"invalid value {raw!r} for {key}: listener name {name} appears twice")
        out.append((name, host, port))
    return tuple(out)


def _protocol_map(key: str, raw: str) -> dict[str, str]:
    out = {}
    for item in _list(key, raw):
        if ":" not in item:
            raise ConfigError(f"invalid value {item!r} in {key}: expected LISTENER_NAME:SECURITY_PROTOCOL")
        name, proto = item.split(":", 1)
        proto = proto.strip().upper()
        if proto not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ConfigError(f"invalid security protocol {proto!r} in {key}")
        out[name.strip().upper()] = proto
    return out


@dataclass(frozen=True)
class KeyDef:
    key: str
    conv: Callable[[str, str], Any]
    default: Any
    doc: str = ""


KEYS: dict[str, KeyDef] = {k.key: k for k in [
    KeyDef("node.id", _int(0), None, "this node's id (required)"),
    KeyDef("process.roles", _roles, None, "broker, controller, or both (required)"),
    KeyDef("listeners", _listeners, (("PLAINTEXT", "127.0.0.1", 9092),)),
    KeyDef("advertised.listeners", _listeners, None),
    KeyDef("controller.listener.names", _list, ()),
    KeyDef("listener.security.protocol.map", _protocol_map, None),
    KeyDef("inter.broker.listener.name", _str, None),
    KeyDef("controller.quorum.bootstrap.servers", _list, ()),
    KeyDef("controller.quorum.voters", _list, ()),
    KeyDef("log.dirs", _list, None),
    KeyDef("log.dir", _str, "/tmp/kraft-combined-logs"),
    KeyDef("metadata.log.dir", _str, None),
    KeyDef("num.partitions", _int(1), 1),
    KeyDef("default.replication.factor", _int(1, 32767), 1),
    KeyDef("auto.create.topics.enable", _bool, True),
    KeyDef("delete.topic.enable", _bool, True),
    KeyDef("log.segment.bytes", _int(14), 1 << 30),
    KeyDef("log.roll.ms", _long(1), None),
    KeyDef("log.roll.hours", _int(1), 168),
    KeyDef("log.retention.ms", _long(-1), None),
    KeyDef("log.retention.minutes", _int(-1), None),
    KeyDef("log.retention.hours", _int(-1), 168),
    KeyDef("log.retention.bytes", _long(-1), -1),
    KeyDef("log.retention.check.interval.ms", _long(1), 300_000),
    KeyDef("message.max.bytes", _int(0), 1_048_588),
    KeyDef("log.index.interval.bytes", _int(0), 4096),
    KeyDef("log.index.size.max.bytes", _int(4), 10 * 1024 * 1024),
    KeyDef("log.flush.interval.messages", _long(1), LONG_MAX),
    KeyDef("log.flush.interval.ms", _long(0), None),
    KeyDef("log.segment.delete.delay.ms", _long(0), 60_000),
    KeyDef("log.flush.offset.checkpoint.interval.ms", _int(0), 60_000),
    KeyDef("log.cleanup.policy", _str, "delete"),
    KeyDef("replica.alter.log.dirs.io.max.bytes.per.second", _long(1), LONG_MAX),
    KeyDef("intra.broker.throttled.rate", _long(1), None),
    KeyDef("num.replica.alter.log.dirs.threads", _int(1), None),
    KeyDef("log.dir.failure.timeout.ms", _long(1), 30_000),
    KeyDef("socket.request.max.bytes", _int(1), 104_857_600),
    KeyDef("broker.heartbeat.interval.ms", _int(1), 2000),
    KeyDef("broker.session.timeout.ms", _int(1), 9000),
    KeyDef("replica.fetch.max.bytes", _int(0), 1_048_576),
    KeyDef("log.dir.placement.policy", _policy, "most-usable", "kjbod: most-usable or fewest-partitions"),
    KeyDef("kjbod.zero.copy", _bool, True, "kjbod: send Fetch record data with sendfile"),
]}

# Kafka keys people copy from their configs; accepted, with no effect in kjbod.
ACCEPTED_NO_EFFECT = frozenset({
    "group.initial.rebalance.delay.ms", "offsets.topic.replication.factor", "offsets.topic.num.partitions",
    "transaction.state.log.replication.factor", "transaction.state.log.min.isr", "num.network.threads",
    "num.io.threads", "socket.send.buffer.bytes", "socket.receive.buffer.bytes", "num.recovery.threads.per.data.dir",
    "log.retention.check.interval.ms", "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.min.isr", "min.insync.replicas", "broker.rack",
})

DEFAULT_PROTOCOL_MAP = {"PLAINTEXT": "PLAINTEXT", "CONTROLLER": "PLAINTEXT", "SSL": "SSL",
                        "SASL_PLAINTEXT": "SASL_PLAINTEXT", "SASL_SSL": "SASL_SSL"}


@dataclass(frozen=True)
class ServerConfig:
    node_id: int
    process_roles: tuple[str, ...]
    listeners: tuple[Listener, ...]
    advertised_listeners: tuple[Listener, ...]
    controller_listener_names: tuple[str, ...]
    log_dirs: tuple[str, ...]
    metadata_log_dir: str
    num_partitions: int
    default_replication_factor: int
    auto_create_topics_enable: bool
    log_segment_bytes: int
    log_roll_ms: int
    log_retention_ms: int
    log_retention_bytes: int
    log_retention_check_interval_ms: int
    message_max_bytes: int
    log_index_interval_bytes: int
    log_index_size_max_bytes: int
    log_flush_interval_messages: int
    log_flush_interval_ms: int
    log_segment_delete_delay_ms: int
    replica_alter_log_dirs_io_max_bytes_per_second: int
    num_replica_alter_log_dirs_threads: int
    log_dir_failure_timeout_ms: int
    socket_request_max_bytes: int
    broker_heartbeat_interval_ms: int
    broker_session_timeout_ms: int
    replica_fetch_max_bytes: int
    log_dir_placement_policy: str
    zero_copy: bool
    properties: Mapping[str, str] = field(default_factory=dict)  # the effective raw key=value pairs

    def listener_kind(self, name: str) -> str:
        return "controller" if name in self.controller_listener_names else "broker"


def parse_properties(text: str) -> list[tuple[int, str, str]]:
    """(line number, key, value) for each entry of a Java-properties text (comments, continuations, escapes)."""
    out = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        lineno = i + 1
        line = lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        while line.endswith("\\") and not line.endswith("\\\\") and i < len(lines):
            line = line[:-1] + lines[i].lstrip()
            i += 1
        m = re.match(r"((?:\\.|[^=:\s\\])+)\s*[=:\s]\s*(.*)$", line)
        if m:
            key, value = m.group(1), m.group(2)
        else:
            key, value = line.strip(), ""
        unescape = lambda s: re.sub(r"\\(.)", lambda mm: {"t": "\t", "n": "\n", "r": "\r"}.get(mm.group(1), mm.group(1)), s)  # noqa: E731
        out.append((lineno, unescape(key), unescape(value).rstrip()))
    return out


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"invalid --override {item!r}: expected key=value")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _unknown(key: str) -> ConfigError:
    close = difflib.get_close_matches(key, list(KEYS) + sorted(ACCEPTED_NO_EFFECT), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return ConfigError(f"unknown config key {key!r}{hint}")


def build_config(props: Mapping[str, str], *, base_dir: str | None = None) -> ServerConfig:
    values: dict[str, Any] = {}
    for key, raw in props.items():
        if key in ACCEPTED_NO_EFFECT:
            continue
        d = KEYS.get(key)
        if d is None:
            raise _unknown(key)
        values[key] = d.conv(key, raw)

    def get(key: str) -> Any:
        return values.get(key, KEYS[key].default)

    if get("node.id") is None:
        raise ConfigError("node.id is required")
    if get("process.roles") is None:
        raise ConfigError("process.roles is required (broker, controller, or broker,controller)")
    protomap = dict(DEFAULT_PROTOCOL_MAP)
    if get("listener.security.protocol.map") is not None:
        protomap = get("listener.security.protocol.map")
    listeners = []
    for name, host, port in get("listeners"):
        if name not in protomap:
            raise ConfigError(f"listener {name} has no entry in listener.security.protocol.map")
        if protomap[name] != "PLAINTEXT":
            raise ConfigError(f"listener {name}: security protocol {protomap[name]} is not supported yet "
                              "(only PLAINTEXT)")
        listeners.append(Listener(name, host or "0.0.0.0", port, protomap[name]))
    advertised = [Listener(n, h, p, protomap.get(n, "PLAINTEXT")) for n, h, p in (get("advertised.listeners") or ())]
    names = {ln.name for ln in listeners}
    for a in advertised:
        if a.name not in names:
            raise ConfigError(f"advertised.listeners names {a.name}, which is not in listeners")
    controller_names = tuple(n.upper() for n in get("controller.listener.names"))
    roles = get("process.roles")
    if "controller" in roles and not controller_names:
        raise ConfigError("controller.listener.names is required when process.roles includes controller")
    for n in controller_names:
        if n not in names:
            raise ConfigError(f"controller.listener.names names {n}, which is not in listeners")
    if "broker" in roles and not names - set(controller_names):
        raise ConfigError("a broker needs at least one listener that is not a controller listener")

    base = base_dir or os.getcwd()
    raw_dirs = get("log.dirs") if get("log.dirs") is not None else (get("log.dir"),)
    if not raw_dirs:
        raise ConfigError("log.dirs is empty: give at least one log dir")
    dirs = [os.path.normpath(os.path.join(base, d)) for d in raw_dirs]
    seen = set()
    for d in dirs:
        if d in seen:
            raise ConfigError(f"invalid value for log.dirs: {d} is listed twice")
        seen.add(d)
    meta = get("metadata.log.dir")
    meta_dir = os.path.normpath(os.path.join(base, meta)) if meta else dirs[0]

    if get("log.retention.ms") is not None:
        retention = get("log.retention.ms")
    elif get("log.retention.minutes") is not None:
        retention = get("log.retention.minutes") * 60_000
    else:
        retention = get("log.retention.hours") * 3_600_000
        if get("log.retention.hours") < 0:
            retention = -1
    roll = get("log.roll.ms") if get("log.roll.ms") is not None else get("log.roll.hours") * 3_600_000
    throttle = get("replica.alter.log.dirs.io.max.bytes.per.second")
    if "intra.broker.throttled.rate" in values:
        if "replica.alter.log.dirs.io.max.bytes.per.second" in values:
            raise ConfigError("set replica.alter.log.dirs.io.max.bytes.per.second or its alias "
                              "intra.broker.throttled.rate, not both")
        throttle = values["intra.broker.throttled.rate"]
    flush_ms = get("log.flush.interval.ms")
    return ServerConfig(
        node_id=get("node.id"), process_roles=roles, listeners=tuple(listeners), advertised_listeners=tuple(advertised),
        controller_listener_names=controller_names, log_dirs=tuple(dirs), metadata_log_dir=meta_dir,
        num_partitions=get("num.partitions"), default_replication_factor=get("default.replication.factor"),
        auto_create_topics_enable=get("auto.create.topics.enable"), log_segment_bytes=get("log.segment.bytes"),
        log_roll_ms=roll, log_retention_ms=retention, log_retention_bytes=get("log.retention.bytes"),
        log_retention_check_interval_ms=get("log.retention.check.interval.ms"),
        message_max_bytes=get("message.max.bytes"), log_index_interval_bytes=get("log.index.interval.bytes"),
        log_index_size_max_bytes=get("log.index.size.max.bytes"),
        log_flush_interval_messages=get("log.flush.interval.messages"),
        log_flush_interval_ms=LONG_MAX if flush_ms is None else flush_ms,
        log_segment_delete_delay_ms=get("log.segment.delete.delay.ms"),
        replica_alter_log_dirs_io_max_bytes_per_second=throttle,
        num_replica_alter_log_dirs_threads=get("num.replica.alter.log.dirs.threads") or len(dirs),
        log_dir_failure_timeout_ms=get("log.dir.failure.timeout.ms"),
        socket_request_max_bytes=get("socket.request.max.bytes"),
        broker_heartbeat_interval_ms=get("broker.heartbeat.interval.ms"),
        broker_session_timeout_ms=get("broker.session.timeout.ms"),
        replica_fetch_max_bytes=get("replica.fetch.max.bytes"),
        log_dir_placement_policy=get("log.dir.placement.policy"), zero_copy=get("kjbod.zero.copy"),
        properties=dict(props),
    )


def load_config(path: str, overrides: Iterable[str] = ()) -> ServerConfig:
    """Reads `path`, applies `key=value` overrides, and validates.  Relative log dirs resolve against the CWD."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    props: dict[str, str] = {}
    for _lineno, key, value in parse_properties(text):
        props[key] = value
    props.update(parse_overrides(overrides))
    return build_config(props)
