"""Inter-broker replication throttles (KIP-73 as Kafka ships it): a byte-rate quota per direction per broker,
and the replicas it applies to.

Strategy, as Kafka's ReplicationQuotaManager (kraft-notes D.3):

* Two quotas per broker, `leader` and `follower`, each a rate over sampled windows (Kafka's SimpleRate over a
  WindowedSum): `replication.quota.window.num` samples (11) of `replication.quota.window.size.seconds` (1)
  each; the rate is the bytes of the live samples over the time since the oldest one started (at least one
  window).  The quota is exceeded when that rate is above the bound.  Bytes are always recorded, over quota or
  not, so the rate over a long transfer settles at the bound.
* One departure from Kafka, where the check is made (`SampledRate.forget_idle`): idle time is not credit.  In
  Kafka a sample lives until `samples` windows after its last record, and the rate's time base is the oldest
  live sample's start, even when that sample was reset to empty by the purge.  So a transfer starting within
  that span after an earlier one (or after any purge) finds the time since then counted as if bytes could have
  flowed, and passes that unused allowance at full speed before the check stops it: in the reassignment bench a
  50 MB/s copy 8 s after a 10 MB/s one moved 500 MB in its first 2 s.  Here, when the live samples hold less
  than the bound allows for all but one window of their span, they are dropped before the check, and the next
  transfer starts as the first one did: at most one window's worth at once, then the bound.  This never lets
  more through than the bound over the whole span (the dropped samples were already a window's worth under it),
  nor more than Kafka's rate would at that moment (the unused allowance it would pass is over a window's worth).
  A transfer being held back is checked more often than once a window (a leader answers a throttled fetch after
  `replica.fetch.wait.max.ms`, a follower retries after `replica.fetch.backoff.ms`), so its deficit stays near
  a window's worth and the drop, if it fires at all, changes little.
* The bound is the broker's dynamic `leader.replication.throttled.rate` / `follower.replication.throttled.rate`:
  the per-broker value, else the cluster default (the broker resource ""), else unlimited.
* Which replicas: the topic configs `leader.replication.throttled.replicas` / `follower.replication.throttled.replicas`,
  `*` (every partition of the topic) or `partition:broker` pairs, of which this broker keeps the partitions
  paired with its own id.  A rate without a list throttles nothing; a list without a rate is unlimited.
* Leader (`leader_throttled`): a follower's fetch of a throttled partition, from a follower outside the ISR,
  while the leader quota is exceeded, is answered with no records (HW and log start still filled in); the leader
  then records the record bytes of every throttled partition it sent, in sync or not.
* Follower (`follower_throttled`): a throttled partition that is not in sync (behind the leader's HW as last
  heard) is left out of the fetch while the follower quota is exceeded; the follower records the bytes it
  appends for every throttled partition.

Sans-IO: the time comes in as milliseconds.  The replica manager owns one `ReplicationThrottles` and refreshes
it from each new metadata image (`update`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

LONG_MAX = (1 << 63) - 1
BROKER_RESOURCE = 4

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
WINDOW_NUM_DEFAULT = 11
WINDOW_SIZE_SECONDS_DEFAULT = 1

ALL = "*"  # every partition of the topic is throttled
_ENTRY = re.compile(r"([0-9]+:[0-9]+)?")


# ------------------------------------------------------------------------------------------ the replica lists


def replica_list_problem(name: str, value: str) -> str | None:
    """Kafka's ThrottledReplicaListValidator: every entry `partition:broker` (empty entries allowed), or the whole
    value `*`.  The message Kafka's ConfigException gives, or None when valid."""
    entries = [e.strip() for e in value.split(",")]
    if all(_ENTRY.fullmatch(e) for e in entries) or "".join(entries) == ALL:
        return None
    return (f"Invalid value [{', '.join(entries)}] for configuration {name}: {name} must be the literal '*' or a list of replicas "
            "in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")


def throttled_partitions(value: str | None, broker_id: int) -> str | frozenset[int] | None:
    """What a topic's replica list means on broker `broker_id`: None (no throttle: missing or empty), ALL, or the
    partitions paired with this broker (possibly none).  An invalid value (the controller refuses those) counts
    as no throttle."""
    if value is None or not value.strip() or replica_list_problem("", value) is not None:
        return None
    entries = [e.strip() for e in value.split(",")]
    if "".join(entries) == ALL:
        return ALL
    out = set()
    for e in entries:
        if e:
            partition, _, broker = e.partition(":")
            if int(broker) == broker_id:
                out.add(int(partition))
    return frozenset(out)


# ------------------------------------------------------------------------------------------ the rate


@dataclass(slots=True)
class _Sample:
    start_ms: int
    last_event_ms: int
    value: float = 0.0

    def reset(self, now_ms: int) -> None:
        self.start_ms = self.last_event_ms = now_ms
        self.value = 0.0


@dataclass(slots=True)
class SampledRate:
    """Kafka's SimpleRate over a WindowedSum: bytes per second over `samples` windows of `window_ms`."""

    samples: int = WINDOW_NUM_DEFAULT
    window_ms: int = WINDOW_SIZE_SECONDS_DEFAULT * 1000
    _ring: list[_Sample] = field(default_factory=list)
    _current: int = 0

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._ring:
            self._ring.append(_Sample(now_ms, now_ms))
        return self._ring[self._current]

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:
            # One more slot than samples: the one overlapping the start of the monitored window.
            self._current = (self._current + 1) % (self.samples + 1)
            if self._current >= len(self._ring):
                sample = _Sample(now_ms, now_ms)
                self._ring.append(sample)
            else:
                sample = self._ring[self._current]
                sample.reset(now_ms)
        sample.value += value
        sample.last_event_ms = now_ms

    def _purge(self, now_ms: int) -> None:
        expire = self.samples * self.window_ms
        for sample in self._ring:
            if now_ms - sample.last_event_ms >= expire:
                sample.reset(now_ms)

    def _live(self, now_ms: int) -> tuple[float, int]:
        """The purged samples' total and the time since the oldest one began (Kafka's SimpleRate.windowSize
        before its floor of one window)."""
        self._purge(now_ms)
        if not self._ring:
            return 0.0, 0
        return sum(s.value for s in self._ring), now_ms - min(s.start_ms for s in self._ring)

    def measure(self, now_ms: int) -> float:
        """Bytes per second, as Kafka measures them."""
        total, elapsed_ms = self._live(now_ms)
        return total / (max(elapsed_ms, self.window_ms) / 1000.0)

    def forget_idle(self, now_ms: int, bound: float) -> bool:
        """Drops every sample when they hold less than `bound` (bytes per second) allows for all but one window of
        their span (see the module docstring); whether it did."""
        total, elapsed_ms = self._live(now_ms)
        if elapsed_ms <= self.window_ms or total >= bound * (elapsed_ms - self.window_ms) / 1000.0:
            return False
        self._ring.clear()
        self._current = 0
        return True


# ------------------------------------------------------------------------------------------ one direction


class ReplicationQuota:
    """One direction's quota (Kafka's ReplicationQuotaManager): the rate, its bound, the throttled partitions."""

    def __init__(self, name: str, samples: int = WINDOW_NUM_DEFAULT,
                 window_seconds: int = WINDOW_SIZE_SECONDS_DEFAULT) -> None:
        self.name = name
        self.rate = SampledRate(samples, window_seconds * 1000)
        self.bound = LONG_MAX  # bytes per second; LONG_MAX: unlimited
        self.throttled: dict[str, str | frozenset[int]] = {}  # topic → ALL or its partitions here

    def is_throttled(self, topic: str, partition: int) -> bool:
        parts = self.throttled.get(topic)
        return parts is not None and (parts == ALL or partition in parts)

    def exceeded(self, now_ms: int) -> bool:
        if self.bound >= LONG_MAX:
            return False
        self.rate.forget_idle(now_ms, self.bound)
        return self.rate.measure(now_ms) > self.bound

    def ms_until_within(self, now_ms: int) -> int:
        """Milliseconds until the rate is within the bound again with nothing more recorded (0: it is now): the
        time the recorded bytes take at the bound, less the time they already span.  At most that: a sample
        that expires meanwhile only brings it sooner."""
        if not self.exceeded(now_ms):
            return 0
        if self.bound <= 0:
            return LONG_MAX
        total, elapsed_ms = self.rate._live(now_ms)
        return max(1, math.ceil(total * 1000 / self.bound - elapsed_ms))

    def record(self, nbytes: int, now_ms: int) -> None:
        self.rate.record(nbytes, now_ms)

    def byte_rate(self, now_ms: int) -> float:
        return self.rate.measure(now_ms)

    def mark(self, topic: str, parts: str | frozenset[int] | None) -> None:
        if parts is None:
            self.throttled.pop(topic, None)
        else:
            self.throttled[topic] = parts


def broker_rate(image: Any, broker_id: int, key: str) -> int:
    """Kafka's BrokerConfigHandler: the per-broker dynamic value, else the cluster default, else unlimited."""
    for name in (str(broker_id), ""):
        value = image.resource_configs(BROKER_RESOURCE, name).get(key)
        if value is not None:
            try:
                return int(value)
            except ValueError:
                break  # the controller refuses these; nothing to throttle with
    return LONG_MAX


class ReplicationThrottles:
    """This broker's leader and follower quotas, kept as the metadata image says."""

    def __init__(self, broker_id: int, samples: int = WINDOW_NUM_DEFAULT,
                 window_seconds: int = WINDOW_SIZE_SECONDS_DEFAULT) -> None:
        self.broker_id = broker_id
        self.leader = ReplicationQuota("LeaderReplication", samples, window_seconds)
        self.follower = ReplicationQuota("FollowerReplication", samples, window_seconds)

    def update(self, image: Any, topic_names: Iterable[str] | None = None) -> None:
        """The bounds from the broker configs; the lists of `topic_names` (every topic when None) from their
        configs; topics gone from the image lose theirs."""
        self.leader.bound = broker_rate(image, self.broker_id, LEADER_RATE)
        self.follower.bound = broker_rate(image, self.broker_id, FOLLOWER_RATE)
        names = [t.name for t in image.topics()] if topic_names is None else list(topic_names)
        for name in names:
            topic = image.topic(name)
            configs: Mapping[str, str] = topic.configs if topic is not None else {}
            self.leader.mark(name, throttled_partitions(configs.get(LEADER_REPLICAS), self.broker_id))
            self.follower.mark(name, throttled_partitions(configs.get(FOLLOWER_REPLICAS), self.broker_id))
        for quota in (self.leader, self.follower):
            for name in [n for n in quota.throttled if image.topic(n) is None]:
                del quota.throttled[name]

    def leader_throttled(self, topic: str, partition: int, in_sync: bool, now_ms: int) -> bool:
        """Kafka's shouldLeaderThrottle: a follower outside the ISR, a throttled partition, the quota exceeded."""
        q = self.leader
        return not in_sync and bool(q.throttled) and q.is_throttled(topic, partition) and q.exceeded(now_ms)

    def follower_throttled(self, topic: str, partition: int, in_sync: bool, now_ms: int) -> bool:
        """Kafka's shouldFollowerThrottle: not in sync, a throttled partition, the quota exceeded."""
        q = self.follower
        return not in_sync and bool(q.throttled) and q.is_throttled(topic, partition) and q.exceeded(now_ms)
