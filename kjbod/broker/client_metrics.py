"""Client metrics on a broker (KIP-714): Kafka's ClientMetricsManager, and the pushed metrics kept for /metrics.

Strategy, as Kafka:

* The subscriptions are the image's CLIENT_METRICS resources (kjbod.metadata.client_metrics), re-read when the
  image's configs change; a change of them bumps a version, and each client instance is re-evaluated against the
  new set at its next request.
* GetTelemetrySubscriptions gives a client with the zero id a new random instance id, finds the subscriptions
  whose `match` selectors all match the client (its client id, instance id, software name and version from its
  ApiVersions, source address and port), and answers their metric prefixes (``*`` alone when one wants all), the
  shortest interval (5 minutes when none matches, with no metrics: the client then pushes nothing), the
  subscription id, the accepted codecs (zstd, lz4, gzip, snappy) and ``telemetry.max.bytes``. Asking again before
  the interval has passed since the client's last request is THROTTLING_QUOTA_EXCEEDED.
* PushTelemetry is refused INVALID_REQUEST for a reserved instance id or after the client said it was
  terminating, THROTTLING_QUOTA_EXCEEDED when it comes before the interval (the first push after a
  GetTelemetrySubscriptions, and a terminating push, are always in time), UNKNOWN_SUBSCRIPTION_ID when it quotes
  another subscription id than the client's current one, UNSUPPORTED_COMPRESSION_TYPE for a codec id Kafka does
  not know, TELEMETRY_TOO_LARGE over ``telemetry.max.bytes``, and INVALID_RECORD when the payload does not
  decompress or decode.
* Instances not heard from for three intervals (at least a minute) are forgotten, at most 16384 are kept (the
  least recently used goes first), as Kafka's cache.

Where kjbod does more: Kafka hands the payload to a receiver plugin and keeps nothing. kjbod decodes the OTLP
MetricsData (kjbod.broker.otlp) and keeps each instance's latest value per series (a monotonic delta sum is
added up into a running total), for the Prometheus endpoint to show labelled with the client's instance id and
client id. At most ``MAX_SERIES`` series are kept across all clients (new series past that are dropped and
counted); a client's series go with its instance.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from kjbod.broker import otlp
from kjbod.metadata.client_metrics import (
    ALL_METRICS,
    DEFAULT_INTERVAL_MS,
    Subscription,
    subscription_id,
    subscriptions,
)
from kjbod.protocol.errors import ErrorCode
from kjbod.storage.ids import uuid_to_str
from kjbod.storage.records import _decompress

__all__ = ["ACCEPTED_CODECS", "MAX_SERIES", "ClientMetricsManager", "Instance"]

log = structlog.get_logger(__name__)

ACCEPTED_CODECS = [4, 3, 1, 2]  # zstd, lz4, gzip, snappy: Kafka's order of preference
KNOWN_CODECS = frozenset({0, 1, 2, 3, 4})
ZERO_ID = bytes(16)
RESERVED_IDS = frozenset({ZERO_ID, bytes(15) + b"\x01"})  # Kafka's ZERO_UUID and ONE_UUID (the metadata topic's)
CACHE_MAX = 16384
MIN_EXPIRY_MS = 60_000
MAX_SERIES = 50_000

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclass
class Series:
    kind: str
    value: float
    count: int = 0
    monotonic: bool = False
    unix_ms: int = 0


@dataclass
class Instance:
    instance_id: bytes
    attributes: dict[str, str | None]
    subscription_id: int
    version: int
    metrics: tuple[str, ...]
    interval_ms: int
    last_get_ms: int = 0
    last_push_ms: int = 0
    last_seen_ms: int = 0
    terminating: bool = False
    pushes: int = 0
    throttles: int = 0  # requests refused THROTTLING_QUOTA_EXCEEDED (Kafka's throttle-count)
    series: dict[SeriesKey, Series] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return uuid_to_str(self.instance_id)

    def expiry_ms(self) -> int:
        return max(MIN_EXPIRY_MS, 3 * self.interval_ms)


@dataclass(frozen=True)
class Answer:
    """What GetTelemetrySubscriptions answers (error_code 0) or why not."""

    error_code: int
    instance_id: bytes = ZERO_ID
    subscription_id: int = 0
    interval_ms: int = 0
    metrics: tuple[str, ...] = ()
    message: str = ""


class ClientMetricsManager:
    def __init__(self, image_configs: Callable[[], Mapping[tuple[int, str], Mapping[str, str]]], *,
                 telemetry_max_bytes: int, clock_ms: Callable[[], int] | None = None,
                 max_series: int = MAX_SERIES, cache_max: int = CACHE_MAX) -> None:
        self._image_configs = image_configs
        self.telemetry_max_bytes = telemetry_max_bytes
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self.max_series = max_series
        self.cache_max = cache_max
        self.instances: OrderedDict[bytes, Instance] = OrderedDict()
        self.subscriptions: tuple[Subscription, ...] = ()
        self.version = 0
        self.series_count = 0
        self.dropped_series = 0
        self.throttled = 0
        self.unknown_subscription = 0
        self._seen: Any = None

    # -- subscriptions ---------------------------------------------------------------------------------------------

    def sync(self) -> None:
        configs = self._image_configs()
        if configs is self._seen:
            return
        self._seen = configs
        current = subscriptions(configs)
        if current != self.subscriptions:
            self.subscriptions = current
            self.version += 1

    def _evaluate(self, instance_id: bytes, attributes: dict[str, str | None]) -> Instance:
        interval = DEFAULT_INTERVAL_MS
        wanted: set[str] = set()
        everything = False
        for sub in self.subscriptions:
            if sub.matches(attributes):
                everything = everything or ALL_METRICS in sub.metrics
                wanted.update(sub.metrics)
                interval = min(interval, sub.interval_ms)
        if everything:
            wanted = {ALL_METRICS}
        return Instance(instance_id, attributes, subscription_id(wanted, interval, instance_id), self.version,
                        tuple(sorted(wanted)), interval)

    def _instance(self, instance_id: bytes, attributes: dict[str, str | None], now: int) -> Instance:
        self.expire(now)
        instance = self.instances.get(instance_id)
        if instance is None:
            instance = self._evaluate(instance_id, attributes)
            self.instances[instance_id] = instance
            while len(self.instances) > self.cache_max:
                _, gone = self.instances.popitem(last=False)
                self._forget(gone)
        elif instance.version < self.version:
            # As Kafka: a new instance, so the client may ask for its new subscription at once (timestamps start
            # again); the series it pushed stay.
            fresh = self._evaluate(instance_id, instance.attributes)
            fresh.pushes, fresh.series, fresh.throttles = instance.pushes, instance.series, instance.throttles
            instance = self.instances[instance_id] = fresh
        self.instances.move_to_end(instance_id)
        instance.last_seen_ms = now
        return instance

    def expire(self, now: int) -> None:
        """Forgets instances not heard from for their expiry time, with their series."""
        gone = [i for i in self.instances.values() if now - i.last_seen_ms >= i.expiry_ms()]
        for instance in gone:
            del self.instances[instance.instance_id]
            self._forget(instance)

    def _forget(self, instance: Instance) -> None:
        self.series_count -= len(instance.series)
        instance.series = {}

    # -- the two requests ------------------------------------------------------------------------------------------

    def get_subscriptions(self, instance_id: bytes, attributes: dict[str, str | None]) -> Answer:
        self.sync()
        now = self.clock_ms()
        if instance_id == ZERO_ID:
            instance_id = os.urandom(16)
            while instance_id in RESERVED_IDS or instance_id in self.instances:
                instance_id = os.urandom(16)
        attributes = dict(attributes, client_instance_id=uuid_to_str(instance_id))
        instance = self._instance(instance_id, attributes, now)
        if now - max(instance.last_get_ms, instance.last_push_ms) < instance.interval_ms \
                and (instance.last_get_ms or instance.last_push_ms):
            self.throttled += 1
            instance.throttles += 1
            return Answer(ErrorCode.THROTTLING_QUOTA_EXCEEDED, message=f"Request from the client "
                          f"[{instance.name}] arrived before the next push interval time")
        instance.last_get_ms = now
        return Answer(ErrorCode.NONE, instance_id, instance.subscription_id, instance.interval_ms, instance.metrics)

    def push(self, instance_id: bytes, attributes: dict[str, str | None], subscription: int, terminating: bool,
             codec: int, payload: bytes | None) -> tuple[int, str]:
        """(error code, message) for a PushTelemetry; the metrics are kept when it is 0."""
        if instance_id in RESERVED_IDS:
            return ErrorCode.INVALID_REQUEST, f"Invalid request from the client [{uuid_to_str(instance_id)}], " \
                                              "invalid client instance id"
        self.sync()
        now = self.clock_ms()
        instance = self._instance(instance_id, dict(attributes, client_instance_id=uuid_to_str(instance_id)), now)
        try:
            if instance.terminating:
                return ErrorCode.INVALID_REQUEST, f"Client [{instance.name}] sent the previous request with state " \
                                                  "terminating to TRUE, can not accept any requests after that"
            in_time = instance.last_get_ms > instance.last_push_ms or \
                now - instance.last_push_ms >= instance.interval_ms
            if in_time:
                instance.last_push_ms = now
            elif not terminating:
                self.throttled += 1
                instance.throttles += 1
                return ErrorCode.THROTTLING_QUOTA_EXCEEDED, f"Request from the client [{instance.name}] arrived " \
                                                            "before the next push interval time"
            if subscription != instance.subscription_id:
                self.unknown_subscription += 1
                return ErrorCode.UNKNOWN_SUBSCRIPTION_ID, f"Unknown client subscription id for the client " \
                                                          f"[{instance.name}]"
            if codec not in KNOWN_CODECS:
                return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"Unknown compression type [{codec}] is received " \
                                                               f"in telemetry request from [{instance.name}]"
            if payload is not None and len(payload) > self.telemetry_max_bytes:
                return ErrorCode.TELEMETRY_TOO_LARGE, f"Telemetry request from [{instance.name}] is larger than " \
                                                      f"the maximum allowed size [{self.telemetry_max_bytes}]"
        finally:
            instance.terminating = terminating
        if payload:
            try:
                data = _decompress(codec, payload) if codec else payload
                _resource, points = otlp.decode_metrics(data)
            except Exception as e:  # the codec's or the decoder's complaint: a bad payload, never the broker's
                log.info("telemetry_payload_refused", client_instance_id=instance.name, error=str(e))
                return ErrorCode.INVALID_RECORD, "the metrics payload could not be decompressed and decoded"
            self._keep(instance, points)
        instance.pushes += 1
        return ErrorCode.NONE, ""

    def _keep(self, instance: Instance, points: list[otlp.Point]) -> None:
        series = instance.series
        for p in points:
            key = (p.name, p.attributes)
            s = series.get(key)
            if s is None:
                if self.series_count >= self.max_series:
                    self.dropped_series += 1
                    continue
                s = series[key] = Series(p.kind, 0.0, monotonic=p.monotonic)
                self.series_count += 1
            if p.kind == otlp.SUM and p.temporality == otlp.DELTA and p.monotonic:
                s.value += p.value
            else:
                s.value = p.value
            s.count = s.count + p.count if p.temporality == otlp.DELTA and p.kind == otlp.HISTOGRAM else p.count
            s.unix_ms = p.time_unix_nano // 1_000_000

    # -- what /metrics shows ---------------------------------------------------------------------------------------

    def series(self) -> Iterator[tuple[Instance, SeriesKey, Series]]:
        self.expire(self.clock_ms())
        for instance in list(self.instances.values()):
            for key, s in instance.series.items():
                yield instance, key, s

    def names(self) -> list[str]:
        """The subscriptions' names (ListClientMetricsResources)."""
        self.sync()
        return [s.name for s in self.subscriptions]
