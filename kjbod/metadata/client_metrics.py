"""Client metrics subscriptions (KIP-714): the CLIENT_METRICS config resource (type 16) and what it means.

A subscription is a named CLIENT_METRICS resource with up to three configs, kept in the metadata log as
ConfigRecords like any other resource's: ``metrics`` (a list of metric name prefixes; ``*`` or one empty prefix
for all), ``interval.ms`` (how often matching clients push, 100 ms to one hour, 5 minutes by default) and
``match`` (a list of ``selector=regex`` pairs, all of which must match the whole attribute; none matches every
client). The selectors are Kafka's: client_id, client_instance_id, client_software_name,
client_software_version, client_source_address and client_source_port.

Plain functions and frozen values: the controller validates changes with them and brokers turn the image's
resources into `Subscription`s. `subscription_id` is Kafka's: the CRC32C of the text of the metric set as a Java
HashSet prints it, followed by the interval, XORed with the Java hash of the client's instance id.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import crc32c

__all__ = ["CLIENT_METRICS_RESOURCE", "DEFAULT_INTERVAL_MS", "KEYS", "ClientMetricsConfigError", "Subscription",
           "java_set_text", "parse_list", "plan", "subscription_id", "subscriptions", "validate"]

CLIENT_METRICS_RESOURCE = 16
CLIENT_METRICS_CONFIG_SOURCE = 7  # DescribeConfigs' config source for these configs
METRICS, INTERVAL_MS, MATCH = "metrics", "interval.ms", "match"
KEYS = (METRICS, INTERVAL_MS, MATCH)
LIST_KEYS = frozenset({METRICS, MATCH})
ALL_METRICS = "*"
DEFAULT_INTERVAL_MS = 5 * 60 * 1000
MIN_INTERVAL_MS, MAX_INTERVAL_MS = 100, 3_600_000
SELECTORS = ("client_id", "client_instance_id", "client_software_name", "client_software_version",
             "client_source_address", "client_source_port")
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # IncrementalAlterConfigs' operations
INVALID_CONFIG, INVALID_REQUEST = 40, 42


class ClientMetricsConfigError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def parse_list(value: str | None) -> list[str]:
    """A list config as Kafka parses it: comma-separated, blanks around commas dropped; empty text is no items."""
    if value is None or not value.strip():
        return []
    return re.split(r"\s*,\s*", value.strip())


def _interval(value: str) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        raise ClientMetricsConfigError(INVALID_CONFIG, f"Invalid value {value} for configuration {INTERVAL_MS}: "
                                       "Not a number of type INT") from None
    if not MIN_INTERVAL_MS <= n <= MAX_INTERVAL_MS:
        raise ClientMetricsConfigError(INVALID_REQUEST, f"Invalid value {n} for {INTERVAL_MS}, interval must be "
                                       f"between {MIN_INTERVAL_MS} and {MAX_INTERVAL_MS} (1 hour)")
    return n


def parse_match(patterns: Iterable[str]) -> dict[str, re.Pattern[str]]:
    """selector -> compiled regex; INVALID_CONFIG naming the pattern for an unknown selector or a bad regex."""
    out: dict[str, re.Pattern[str]] = {}
    for pattern in patterns:
        parts = pattern.split("=")
        if len(parts) != 2 or parts[0].strip() not in SELECTORS:
            raise ClientMetricsConfigError(INVALID_CONFIG, f"Illegal client matching pattern: {pattern}")
        try:
            out[parts[0].strip()] = re.compile(parts[1].strip())
        except re.error:
            raise ClientMetricsConfigError(INVALID_CONFIG, f"Illegal client matching pattern: {pattern}") from None
    return out


def validate(name: str, configs: Mapping[str, str]) -> None:
    """Kafka's checks of a subscription's configs (ClientMetricsConfigs.validate)."""
    if not name:
        raise ClientMetricsConfigError(INVALID_REQUEST, "Subscription name can't be empty")
    for key in configs:
        if key not in KEYS:
            raise ClientMetricsConfigError(INVALID_REQUEST, f"Unknown client metrics configuration: {key}")
    if INTERVAL_MS in configs:
        _interval(configs[INTERVAL_MS])
    if MATCH in configs:
        parse_match(parse_list(configs[MATCH]))


def plan(current: Mapping[str, str], name: str, changes: Iterable[tuple[str, int, str | None]], *,
         replace: bool) -> dict[str, str]:
    """The subscription's configs after `changes` ((key, operation, value); `replace`: AlterConfigs, the new set
    whole), validated."""
    new = {} if replace else dict(current)
    for key, op, value in changes:
        if key not in KEYS:
            raise ClientMetricsConfigError(INVALID_REQUEST, f"Unknown client metrics configuration: {key}")
        if replace or op == SET:
            new[key] = value or ""
        elif op == DELETE:
            new.pop(key, None)
        elif op in (APPEND, SUBTRACT):
            if key not in LIST_KEYS:
                raise ClientMetricsConfigError(INVALID_REQUEST, f"Config value append is not allowed for config "
                                               f"key: {key}" if op == APPEND else
                                               f"Config value subtract is not allowed for config key: {key}")
            items = parse_list(new.get(key))
            given = parse_list(value)
            items = items + [v for v in given if v not in items] if op == APPEND else [
                v for v in items if v not in given]
            new[key] = ",".join(items)
        else:
            raise ClientMetricsConfigError(INVALID_REQUEST, f"Unknown operation {op}")
    validate(name, new)
    return new


@dataclass(frozen=True)
class Subscription:
    name: str
    metrics: tuple[str, ...]
    interval_ms: int
    match: Mapping[str, re.Pattern[str]] = field(default_factory=dict)

    def matches(self, attributes: Mapping[str, str | None]) -> bool:
        for selector, pattern in self.match.items():
            value = attributes.get(selector)
            if value is None or pattern.fullmatch(value) is None:
                return False
        return True


def subscriptions(configs: Mapping[tuple[int, str], Mapping[str, str]]) -> tuple[Subscription, ...]:
    """The subscriptions an image's configs hold, by name; a resource whose configs were all deleted is none.
    A resource that no longer validates (written by another tool) is left out rather than applied."""
    out = []
    for (rtype, name), values in sorted(configs.items()):
        if rtype != CLIENT_METRICS_RESOURCE or not values:
            continue
        try:
            validate(name, values)
            out.append(Subscription(name, tuple(parse_list(values.get(METRICS))),
                                    _interval(values[INTERVAL_MS]) if INTERVAL_MS in values else DEFAULT_INTERVAL_MS,
                                    parse_match(parse_list(values.get(MATCH)))))
        except ClientMetricsConfigError:
            continue
    return tuple(out)


def _java_string_hash(text: str) -> int:
    h = 0
    for unit in text.encode("utf-16-be").hex(" ", 2).split():  # UTF-16 code units, as Java's String holds them
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return h


def java_set_text(items: Iterable[str]) -> str:
    """What Java's HashSet<String>.toString() prints for these items: "[a, b]" in the set's iteration order (the
    HashMap bucket of each string's spread hash in a table grown from 16 at a 0.75 load factor; within a bucket,
    the order they were added, here sorted)."""
    unique = sorted(set(items))
    capacity = 16
    while len(unique) > capacity * 0.75:
        capacity *= 2

    def bucket(s: str) -> int:
        h = _java_string_hash(s)
        return (h ^ (h >> 16)) & (capacity - 1)

    ordered = sorted(enumerate(unique), key=lambda pair: (bucket(pair[1]), pair[0]))
    return "[" + ", ".join(s for _, s in ordered) + "]"


def _signed(n: int) -> int:
    n &= 0xFFFFFFFF
    return n - (1 << 32) if n & 0x80000000 else n


def uuid_java_hash(raw: bytes) -> int:
    """Kafka's Uuid.hashCode of a 16-byte id."""
    most = int.from_bytes(raw[:8], "big", signed=True)
    least = int.from_bytes(raw[8:], "big", signed=True)
    x = (most ^ least) & 0xFFFFFFFFFFFFFFFF
    return _signed((x >> 32) ^ x)


def subscription_id(metrics: Iterable[str], interval_ms: int, client_instance_id: bytes) -> int:
    text = (java_set_text(metrics) + str(interval_ms)).encode("utf-8")
    return _signed(crc32c.crc32c(text) ^ uuid_java_hash(client_instance_id))
