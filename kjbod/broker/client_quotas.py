"""Client quotas on a broker: Kafka's ClientQuotaManager (producer_byte_rate, consumer_byte_rate) and
ClientRequestQuotaManager (request_percentage), fed from the metadata image (ClientQuotaRecord).

Strategy, as Kafka:

* One `QuotaType` per kind (Produce, Fetch, Request). Each keeps the quota bounds per entity (user and client-id
  parts, a name, the default, or absent) from the image, and one sensor per client: a `Rate` over
  ``quota.window.num`` samples of ``quota.window.size.seconds`` (Kafka's Rate over a SampledStat: the sum of the
  live samples over the time since the oldest began, counted as at least ``samples - 1`` whole windows).
* Which sensor a client records into (its metric tags) and which bound applies follow Kafka's precedence:
  user+client-id, user+default client-id, user, default user+client-id, default user+default client-id, default
  user, client-id, default client-id. While only one level of entity has ever had a quota of the kind, the tags
  are that level's alone (client-id only, user only, or both); "ever" holds until the broker restarts, as in Kafka.
* A record adds the value, measures the rate, and when it is above the bound answers the throttle time: the
  time the excess takes to drain at the bound over the rate's window, ``(rate - bound) / bound * window``
  (Kafka's QuotaUtils.throttleTime), at most one window for the request quota. Nothing is recorded for a kind no
  quota was ever set for, so a broker without quotas pays one attribute check per request.
* The request quota's value is the handler's time on the event loop in percent of one second (Kafka counts its
  request handler threads' time; kjbod's handlers run on the loop, and a request that waits for a log dir's
  worker or the controller is counted for the part that ran on the loop).
* Sensors unused for an hour are dropped (Kafka's inactive sensor expiry).

* The controller mutation quota (KIP-599, ``controller_mutation_rate``: partitions created or deleted per
  second) is a token bucket per sensor instead (Kafka's TokenBucket): it holds at most ``samples * window *
  bound`` tokens, refills at ``bound`` a second, and each topic created, extended or deleted takes as many
  tokens as partitions it adds or removes. A strict quota (CreateTopics v6+, DeleteTopics v5+, CreatePartitions
  v3+) refuses a topic while the bucket is below zero, with the time the deficit takes to refill; a permissive
  one (older versions) lets every topic through and only reports that throttle time. Its windows are
  ``controller.quota.window.num`` and ``controller.quota.window.size.seconds``.

Everything here is plain code with the clock passed in; kjbod.broker.router and the Fetch handler apply it, and
the connection mutes the client (reads nothing more from it) for the throttle time after the response is sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kjbod.metadata.client_quotas import CLIENT_ID, USER, Entity

__all__ = ["ABSENT", "CONTROLLER_MUTATION", "FETCH", "PRODUCE", "REQUEST", "ClientQuotas", "MutationQuota",
           "MutationQuotaType", "QuotaType", "Rate", "TokenBucket", "user_of"]

PRODUCE = "Produce"
FETCH = "Fetch"
REQUEST = "Request"
CONTROLLER_MUTATION = "ControllerMutation"
KEYS = {PRODUCE: "producer_byte_rate", FETCH: "consumer_byte_rate", REQUEST: "request_percentage",
        CONTROLLER_MUTATION: "controller_mutation_rate"}

ABSENT = ""  # a part the entity does not have (Kafka's empty tag)
DEFAULT: None = None  # the type's default entity

_CLIENT_ONLY, _USER_ONLY, _USER_CLIENT = 1, 2, 4  # Kafka's QuotaTypes bits
INACTIVE_SENSOR_S = 3600.0
NANOS_TO_PERCENT = 100.0 / 1e9

Tags = tuple[str, str]  # (user tag, client-id tag); "" when the level does not apply
EntityKey = tuple[str | None, str | None]  # (user, client-id): a name, DEFAULT (None) or ABSENT ("")


def user_of(principal: str) -> str:
    """The user a principal names (User:alice -> alice), as quotas see it."""
    return principal.split(":", 1)[1] if ":" in principal else principal


class _Sample:
    __slots__ = ("count", "start", "value")

    def __init__(self, now_ms: int) -> None:
        self.start = now_ms
        self.value = 0.0
        self.count = 0

    def reset(self, now_ms: int) -> None:
        self.start = now_ms
        self.value = 0.0
        self.count = 0


class _Sampled:
    """Kafka's SampledStat: `samples` windows of `window_ms`; a window is complete once `window_ms` has passed
    since it began, and a sample that began `samples` windows ago is reset before it is read."""

    __slots__ = ("_current", "_ring", "samples", "window_ms")

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._ring: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        ring = self._ring
        if not ring:
            ring.append(_Sample(now_ms))
        sample = ring[self._current]
        if now_ms - sample.start >= self.window_ms:
            self._current = (self._current + 1) % self.samples
            if self._current >= len(ring):
                sample = _Sample(now_ms)
                ring.append(sample)
            else:
                sample = ring[self._current]
                sample.reset(now_ms)
        sample.value += value
        sample.count += 1

    def _purge(self, now_ms: int) -> None:
        expire = self.samples * self.window_ms
        for sample in self._ring:
            if now_ms - sample.start >= expire:
                sample.reset(now_ms)

    def totals(self, now_ms: int) -> tuple[float, int]:
        self._purge(now_ms)
        return sum(s.value for s in self._ring), sum(s.count for s in self._ring)


class Rate(_Sampled):
    """Kafka's Rate: the live samples' sum per second over `window_size`."""

    __slots__ = ()

    def window_size(self, now_ms: int) -> int:
        """Milliseconds since the oldest live sample began, counted as at least `samples - 1` whole windows."""
        self._purge(now_ms)
        if not self._ring:
            self._ring.append(_Sample(now_ms))
        elapsed = now_ms - min(s.start for s in self._ring)
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return elapsed

    def measure(self, now_ms: int) -> float:
        total, _ = self.totals(now_ms)
        return total / (self.window_size(now_ms) / 1000.0)


class Avg(_Sampled):
    """Kafka's Avg: the mean of what the live samples recorded (0 when they recorded nothing)."""

    __slots__ = ()

    def measure(self, now_ms: int) -> float:
        total, count = self.totals(now_ms)
        return total / count if count else 0.0


class TokenBucket:
    """Kafka's TokenBucket: up to `burst` tokens, refilled at the bound per second since the last use; a record
    takes tokens and may leave the bucket below zero. A new bucket is full."""

    __slots__ = ("last_ms", "tokens")

    def __init__(self) -> None:
        self.tokens = 0.0
        self.last_ms: int | None = None

    def _refill(self, bound: float, burst: float, now_ms: int) -> None:
        if self.last_ms is None:
            self.tokens = burst
        else:
            self.tokens = min(burst, self.tokens + bound * (now_ms - self.last_ms) / 1000.0)
        self.last_ms = now_ms

    def measure(self, bound: float, burst: float, now_ms: int) -> float:
        self._refill(bound, burst, now_ms)
        return self.tokens

    def record(self, value: float, bound: float, burst: float, now_ms: int) -> None:
        self._refill(bound, burst, now_ms)
        self.tokens = min(burst, self.tokens - value)


@dataclass(slots=True)
class ClientSensor:
    rate: Rate
    throttle_time: Avg
    last_used: float
    total: float = 0.0  # everything recorded (less what was given back): what /metrics counts
    bucket: TokenBucket | None = None  # the controller mutation quota's tokens


class QuotaType:
    """One kind of client quota (Kafka's ClientQuotaManager of one QuotaType)."""

    def __init__(self, name: str, samples: int = 11, window_seconds: int = 1, *,
                 max_throttle_ms: int | None = None) -> None:
        self.name = name
        self.key = KEYS.get(name, name)
        self.samples = samples
        self.window_ms = window_seconds * 1000
        self.max_throttle_ms = max_throttle_ms
        self.enabled = 0  # _CLIENT_ONLY | _USER_ONLY | _USER_CLIENT, sticky
        self.bounds: dict[EntityKey, float] = {}
        self.sensors: dict[Tags, ClientSensor] = {}
        self._next_expiry = 0.0

    @property
    def active(self) -> bool:
        return self.enabled != 0

    # -- bounds ----------------------------------------------------------------------------------------------------

    def set_bounds(self, bounds: Mapping[EntityKey, float]) -> None:
        for user, client in bounds:
            if user != ABSENT:
                self.enabled |= _USER_CLIENT if client != ABSENT else _USER_ONLY
            elif client != ABSENT:
                self.enabled |= _CLIENT_ONLY
        self.bounds = dict(bounds)

    def tags(self, user: str, client_id: str) -> Tags:
        """The sensor a client records into (Kafka's DefaultQuotaCallback.quotaMetricTags)."""
        enabled = self.enabled
        if enabled in (0, _CLIENT_ONLY):
            return ABSENT, client_id
        if enabled == _USER_ONLY:
            return user, ABSENT
        if enabled == _USER_CLIENT:
            return user, client_id
        b = self.bounds
        if (user, client_id) in b or (user, DEFAULT) in b:
            return user, client_id
        if (user, ABSENT) in b:
            return user, ABSENT
        if (DEFAULT, client_id) in b or (DEFAULT, DEFAULT) in b:
            return user, client_id
        if (DEFAULT, ABSENT) in b:
            return user, ABSENT
        return ABSENT, client_id

    def limit(self, tags: Tags) -> float | None:
        """The bound for a sensor's tags, by Kafka's precedence; None: unlimited."""
        user, client = tags
        b = self.bounds
        if user and client:
            order: tuple[EntityKey, ...] = ((user, client), (user, DEFAULT), (DEFAULT, client), (DEFAULT, DEFAULT))
        elif user:
            order = ((user, ABSENT), (DEFAULT, ABSENT))
        elif client:
            order = ((ABSENT, client), (ABSENT, DEFAULT))
        else:
            return None
        for key in order:
            bound = b.get(key)
            if bound is not None:
                return bound
        return None

    # -- recording -------------------------------------------------------------------------------------------------

    def sensor(self, tags: Tags, now: float) -> ClientSensor:
        s = self.sensors.get(tags)
        if s is None:
            if now >= self._next_expiry:
                self._expire(now)
            s = self.sensors[tags] = ClientSensor(Rate(self.samples, self.window_ms),
                                                  Avg(self.samples, self.window_ms), now)
        s.last_used = now
        return s

    def _expire(self, now: float) -> None:
        self._next_expiry = now + 60.0
        gone = [t for t, s in self.sensors.items() if now - s.last_used >= INACTIVE_SENSOR_S]
        for t in gone:
            del self.sensors[t]

    def record(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Records `value` for the client; the throttle time in ms (0 when within its quota)."""
        tags = self.tags(user, client_id)
        s = self.sensor(tags, now_ms / 1000.0)
        s.rate.record(value, now_ms)
        s.total += value
        bound = self.limit(tags)
        if bound is None:
            return 0
        rate = s.rate.measure(now_ms)
        if rate <= bound:
            return 0
        throttle = round((rate - bound) / bound * s.rate.window_size(now_ms))
        if self.max_throttle_ms is not None:
            throttle = min(throttle, self.max_throttle_ms)
        return int(throttle)

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Takes back a value recorded for a response that was not sent (a throttled Fetch)."""
        s = self.sensor(self.tags(user, client_id), now_ms / 1000.0)
        s.rate.record(-value, now_ms)
        s.total -= value

    def throttled(self, user: str, client_id: str, throttle_ms: int, now_ms: int) -> None:
        """Notes a throttle the client was given (the throttle-time metric)."""
        self.sensor(self.tags(user, client_id), now_ms / 1000.0).throttle_time.record(throttle_ms, now_ms)

    def max_value_in_window(self, user: str, client_id: str) -> float:
        """The most one request may ask for without being throttled for certain (the Fetch max_bytes cap)."""
        bound = self.limit(self.tags(user, client_id))
        if bound is None:
            return float("inf")
        return bound * (self.samples - 1) * self.window_ms / 1000.0

    def metrics(self, now_ms: int) -> Iterator[tuple[Tags, float, float, float]]:
        """Per sensor: (tags, measured rate, average throttle time in ms, total recorded)."""
        for tags, s in list(self.sensors.items()):
            yield tags, s.rate.measure(now_ms), s.throttle_time.measure(now_ms), s.total


def bounds_from(client_quotas: Mapping[Entity, Mapping[str, float]], key: str) -> dict[EntityKey, float]:
    """The bounds one quota key has in an image's client quotas, per (user, client-id)."""
    out: dict[EntityKey, float] = {}
    for entity, values in client_quotas.items():
        value = values.get(key)
        if value is None:
            continue
        parts = dict(entity)
        if not (USER in parts or CLIENT_ID in parts):
            continue  # ip entities: connection quotas
        user = parts[USER] if USER in parts else ABSENT
        client = parts[CLIENT_ID] if CLIENT_ID in parts else ABSENT
        out[(user, client)] = value
    return out


class MutationQuotaType(QuotaType):
    """The controller mutation quota (Kafka's ControllerMutationQuotaManager): per sensor a Rate of partition
    mutations (Kafka's mutation-rate metric) and a TokenBucket (its tokens metric) the bound applies to."""

    def __init__(self, samples: int = 11, window_seconds: int = 1) -> None:
        super().__init__(CONTROLLER_MUTATION, samples, window_seconds)

    def burst(self, bound: float) -> float:
        return self.samples * self.window_ms / 1000.0 * bound

    def sensor(self, tags: Tags, now: float) -> ClientSensor:
        s = super().sensor(tags, now)
        if s.bucket is None:
            s.bucket = TokenBucket()
        return s

    def deficit_ms(self, tags: Tags, now_ms: int) -> int:
        """The time the bucket takes to climb back to zero tokens (Kafka's throttle time for a violated token
        bucket: -tokens / bound seconds); 0 while it holds any."""
        bound = self.limit(tags)
        if bound is None:
            return 0
        bucket = self.sensor(tags, now_ms / 1000.0).bucket
        assert bucket is not None
        tokens = bucket.measure(bound, self.burst(bound), now_ms)
        return round(-tokens / bound * 1000) if tokens < 0 else 0

    def take(self, tags: Tags, permits: float, now_ms: int) -> None:
        """Records `permits` partition mutations (negative: gives back what a refused topic took)."""
        s = self.sensor(tags, now_ms / 1000.0)
        if permits > 0:
            s.rate.record(permits, now_ms)
        s.total += permits
        bound = self.limit(tags)
        if bound is not None:
            assert s.bucket is not None
            s.bucket.record(permits, bound, self.burst(bound), now_ms)

    def tokens(self, tags: Tags, now_ms: int) -> float | None:
        """The tokens a sensor's bucket holds now; None when no bound applies (Kafka reports Long.MAX_VALUE)."""
        bound = self.limit(tags)
        s = self.sensors.get(tags)
        if bound is None or s is None or s.bucket is None:
            return None
        return s.bucket.measure(bound, self.burst(bound), now_ms)


class MutationQuota:
    """One request's controller mutation quota (Kafka's Strict- or PermissiveControllerMutationQuota): `admit`
    each topic's partition mutations in the request's order; `throttle_ms` is what the response carries."""

    def __init__(self, kind: MutationQuotaType, user: str, client_id: str, strict: bool,
                 clock_ms: Callable[[], int]) -> None:
        self.kind = kind
        self.user = user
        self.client_id = client_id
        self.strict = strict
        self.clock_ms = clock_ms
        self.tags = kind.tags(user, client_id)
        self._throttle_ms = 0
        self._noted_ms = 0

    def admit(self, permits: int) -> bool:
        """Takes the topic's permits; False (the topic is refused THROTTLING_QUOTA_EXCEEDED) when the quota is
        strict and the bucket was already below zero. A permissive quota always admits and notes the deficit."""
        now = self.clock_ms()
        kind = self.kind
        if self.strict:
            deficit = kind.deficit_ms(self.tags, now)
            if deficit > 0:
                self._throttle_ms, self._noted_ms = deficit, now
                return False
            kind.take(self.tags, permits, now)
            return True
        kind.take(self.tags, permits, now)
        deficit = kind.deficit_ms(self.tags, now)
        if deficit > 0:
            self._throttle_ms, self._noted_ms = deficit, now
        return True

    def give_back(self, permits: int) -> None:
        """Returns what an admitted topic took when the controller refused the topic after all."""
        if permits:
            self.kind.take(self.tags, -permits, self.clock_ms())

    def throttle_ms(self) -> int:
        """The throttle time noted, less the time since (the request may have waited for the controller)."""
        if not self._throttle_ms:
            return 0
        left = self._throttle_ms - (self.clock_ms() - self._noted_ms)
        return max(0, int(left))

    def note_throttled(self, throttle_ms: int) -> None:
        if throttle_ms > 0:
            self.kind.throttled(self.user, self.client_id, throttle_ms, self.clock_ms())


class ClientQuotas:
    """The broker's client quota kinds, kept in step with the metadata image it reads."""

    def __init__(self, image_quotas: Callable[[], Mapping[Entity, Mapping[str, float]]], *, samples: int = 11,
                 window_seconds: int = 1, clock_ms: Callable[[], int] | None = None,
                 mutation_samples: int = 11, mutation_window_seconds: int = 1) -> None:
        self._image_quotas = image_quotas
        self.seen: Any = None  # the image's quotas the bounds were taken from
        self.produce = QuotaType(PRODUCE, samples, window_seconds)
        self.fetch = QuotaType(FETCH, samples, window_seconds)
        self.request = QuotaType(REQUEST, samples, window_seconds, max_throttle_ms=window_seconds * 1000)
        self.mutation = MutationQuotaType(mutation_samples, mutation_window_seconds)
        self.types = (self.produce, self.fetch, self.request, self.mutation)
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self.active = False

    def sync(self, quotas: Mapping[Entity, Mapping[str, float]] | None = None) -> bool:
        """Takes the image's quotas (`quotas`, else read from the image) when they changed (the image shares the
        mapping until a record changes it); whether any kind is in use."""
        if quotas is None:
            quotas = self._image_quotas()
        if quotas is not self.seen:
            self.seen = quotas
            for qt in self.types:
                qt.set_bounds(bounds_from(quotas, qt.key))
            self.active = any(qt.active for qt in self.types)
        return self.active

    def mutation_quota(self, principal: str, client_id: str | None, strict: bool) -> MutationQuota | None:
        """The controller mutation quota for one CreateTopics, CreatePartitions or DeleteTopics request; None
        while no controller_mutation_rate was ever set (nothing is recorded then, as Kafka's unbounded quota)."""
        self.sync()
        if not self.mutation.active:
            return None
        return MutationQuota(self.mutation, user_of(principal), client_id or "", strict, self.clock_ms)
