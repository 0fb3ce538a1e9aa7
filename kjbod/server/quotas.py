"""Connection limits, as Apache Kafka's broker applies them (its socket server's connection quotas), and the close
of idle connections.

Strategy:

* `ConnectionLimits` is the set of values in force: ``max.connections`` (broker-wide, and per listener as
  ``listener.name.<listener>.max.connections``), ``max.connections.per.ip`` and its
  ``max.connections.per.ip.overrides`` (``host:count,...``), and ``max.connection.creation.rate`` (KIP-612,
  broker-wide and per listener). It is built from the server config with the dynamic broker configs (per-broker
  over cluster default) laid over it, and built again whenever those change, so an AlterConfigs takes effect on
  the next accept.
* `ConnectionQuotas` counts the open connections per IP, per listener and in all, and decides, as Kafka does:
  - an acceptor waits (`admit`) before taking the next connection off its listening socket while its listener is
    at its own limit, or while the broker is at ``max.connections``; the clients wait in the kernel's backlog and
    are served once a connection closes (or a limit is raised);
  - the inter-broker listener is protected when there are several listeners: the broker-wide limit does not
    hold it back; when its connection takes the broker over the limit, the least recently active connection of
    another listener is closed to make room (`excess`; also after ``max.connections`` is lowered at runtime);
  - a connection from an IP that already has its limit open is closed at once, uncounted (`open` says so),
    logged at info at most once a second per IP with how many were refused in between;
  - the creation rate delays the next accept until the connections accepted in the last second are below the
    rate (broker-wide rate, not for the protected listener, and the listener's own rate, whichever is longer).
    Kafka measures the rate over its quota window (``quota.window.num`` samples); kjbod over one second.
  - a client IP's own ``connection_creation_rate`` (a client quota of an ip entity, or the ip default, set with
    AlterClientQuotas and read from the broker's metadata image) is measured as Kafka measures it, over the
    quota window (``quota.window.num`` samples of ``quota.window.size.seconds``, kjbod.broker.client_quotas'
    Rate): a connection that takes the IP over it is not counted and is closed after the throttle time, unserved
    (`ip_throttle_ms`), as Kafka's ConnectionThrottledException does.
* `close_idle_connections` closes a connection that has received nothing for ``connections.max.idle.ms`` and is
  owed no answer. The counts (open, accepted, the creation rate over 30 s) are what /metrics shows per listener.
* Everything here runs on the event loop; `admit` and `close_idle_connections` are the only coroutines. The
  counting and the rates are plain methods, tested in process with a clock of their own.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kjbod.broker.broker_config import (
    INT_MAX,
    LISTENER_CONNECTION_KEYS,
    listener_connection_key,
    parse_per_ip_overrides,
)
from kjbod.broker.client_quotas import Rate
from kjbod.server.config import ServerConfig
from kjbod.server.logging import get_logger

__all__ = ["INT_MAX", "ConnectionLimits", "ConnectionQuotas", "RateWindow"]

log = get_logger("kjbod.server.quotas")
_IP_SENSORS_MAX = 65536

# A refused connection from one IP is logged at most this often (the others are counted into the next line).
_REJECT_LOG_INTERVAL_S = 1.0
# The creation rate the metrics show is over this many seconds (Kafka's default metrics window: 2 samples of 30 s).
CREATION_RATE_WINDOW_S = 30


def _addresses(host: str) -> list[str]:
    """The IP addresses an override's host stands for: itself when it is one, else what it resolves to (Kafka
    resolves it too); nothing when it does not resolve (logged)."""
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as e:
        log.warning("max.connections.per.ip.overrides: host does not resolve; its entry is ignored", host=host,
                    error=str(e))
        return []
    return list(dict.fromkeys(str(ipaddress.ip_address(info[4][0])) for info in infos))


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int = INT_MAX
    max_connections_per_ip: int = INT_MAX
    per_ip_overrides: Mapping[str, int] = field(default_factory=dict)  # IP address -> limit
    max_connection_creation_rate: int = INT_MAX
    listener_max_connections: Mapping[str, int] = field(default_factory=dict)
    listener_max_connection_creation_rate: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def build(cls, config: ServerConfig, dynamic: Mapping[str, str]) -> ConnectionLimits:
        """The limits in force: `dynamic` (the dynamic broker configs, per-broker over cluster default, checked
        when they were set) over the server config's values and its listener-prefixed keys."""

        def number(key: str, static: int) -> int:
            raw = dynamic.get(key)
            if raw is not None:
                try:
                    return int(raw.strip())
                except ValueError:
                    log.warning("ignored: a dynamic value that is not an integer", key=key, value=raw)
            return static

        key = "max.connections.per.ip.overrides"
        try:
            hosts = parse_per_ip_overrides(key, dynamic.get(key, config.max_connections_per_ip_overrides))
        except ValueError as e:
            log.warning("ignored: a bad value", error=str(e))
            hosts = {}
        per_ip = {address: count for host, count in hosts.items() for address in _addresses(host)}
        per_listener: dict[str, dict[str, int]] = {k: {} for k in LISTENER_CONNECTION_KEYS}
        for source in (config.properties, dynamic):  # dynamic last: it wins
            for name, raw in source.items():
                found = listener_connection_key(name)
                if found is None:
                    continue
                try:
                    per_listener[found[1]][found[0]] = int(raw.strip())
                except ValueError:
                    log.warning("ignored: a value that is not an integer", key=name, value=raw)
        return cls(
            max_connections=number("max.connections", config.max_connections),
            max_connections_per_ip=number("max.connections.per.ip", config.max_connections_per_ip),
            per_ip_overrides=per_ip,
            max_connection_creation_rate=number("max.connection.creation.rate", config.max_connection_creation_rate),
            listener_max_connections=per_listener["max.connections"],
            listener_max_connection_creation_rate=per_listener["max.connection.creation.rate"],
        )

    def per_ip(self, address: str) -> int:
        return self.per_ip_overrides.get(address, self.max_connections_per_ip)


class RateWindow:
    """Accepts over the last second, to hold a creation rate: `delay(now)` is how long the next accept must wait
    so that fewer than `rate` were accepted in the second before it; `record(at)` counts one."""

    def __init__(self, rate: int = INT_MAX) -> None:
        self.rate = rate
        self._times: deque[float] = deque()

    @property
    def limited(self) -> bool:
        return self.rate < INT_MAX

    def delay(self, now: float) -> float:
        if not self.limited:
            return 0.0
        times = self._times
        while times and times[0] <= now - 1.0:
            times.popleft()
        if len(times) < self.rate:
            return 0.0
        # the accept that must leave the window before this one may happen
        return times[len(times) - self.rate] + 1.0 - now

    def record(self, at: float) -> None:
        if self.limited:
            self._times.append(at)


def _normal_ip(host: str) -> str:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


class ConnectionQuotas:
    """The open connections of one server process against its `ConnectionLimits` (see the module docstring)."""

    def __init__(self, limits: ConnectionLimits, listeners: Sequence[str], inter_broker_listener: str | None,
                 *, clock: Callable[[], float] = time.monotonic, quota_samples: int = 11,
                 quota_window_seconds: int = 1) -> None:
        self.limits = limits
        self._clock = clock
        # Per-IP connection_creation_rate quotas: the image's client quotas (set by the server shell once the
        # node exists), the rates taken from them (None: the ip default), and one Rate per IP that has a quota.
        self.client_quotas: Callable[[], Mapping[Any, Mapping[str, float]]] | None = None
        self._quota_seen: Any = None
        self._ip_rates: dict[str | None, float] = {}
        self._ip_sensors: dict[str, Rate] = {}
        self._quota_samples = quota_samples
        self._quota_window_ms = quota_window_seconds * 1000
        self.ip_throttled = 0  # connections closed for their IP's connection_creation_rate
        self.per_listener: dict[str, int] = dict.fromkeys(listeners, 0)
        self.per_ip: dict[str, int] = {}
        self.total = 0
        # Kafka protects the inter-broker listener only when there is another one to take connections from.
        self.protected = inter_broker_listener if len(self.per_listener) > 1 else None
        self._broker_rate = RateWindow(limits.max_connection_creation_rate)
        self._listener_rates = {name: RateWindow(limits.listener_max_connection_creation_rate.get(name, INT_MAX))
                                for name in self.per_listener}
        self.created: dict[str, int] = dict.fromkeys(listeners, 0)  # connections accepted per listener, ever
        self.refused: dict[str, int] = dict.fromkeys(listeners, 0)  # closed at once (per-IP limit), not counted
        self._recent: dict[str, deque[list[int]]] = {name: deque() for name in listeners}  # [second, created]
        self._waiters: list[asyncio.Future[None]] = []
        self._reject_logged: dict[str, tuple[float, int]] = {}  # IP -> (last logged at, refused since)

    # -- limits ----------------------------------------------------------------------------------------------------

    def reconfigure(self, limits: ConnectionLimits) -> bool:
        """Take new limits; True when they differ. Acceptors waiting for a slot look again."""
        if limits == self.limits:
            return False
        self.limits = limits
        self._broker_rate.rate = limits.max_connection_creation_rate
        for name, window in self._listener_rates.items():
            window.rate = limits.listener_max_connection_creation_rate.get(name, INT_MAX)
        self._wake()
        return True

    def listener_limit(self, listener: str) -> int:
        return self.limits.listener_max_connections.get(listener, INT_MAX)

    # -- accepting -------------------------------------------------------------------------------------------------

    def slot_available(self, listener: str) -> bool:
        if self.per_listener.get(listener, 0) >= self.listener_limit(listener):
            return False
        if listener == self.protected:
            return True
        return self.total < self.limits.max_connections

    def _rate_windows(self, listener: str) -> list[RateWindow]:
        windows = [self._listener_rates[listener]] if listener in self._listener_rates else []
        if listener != self.protected:  # the broker-wide rate does not hold the inter-broker listener back
            windows.append(self._broker_rate)
        return windows

    def creation_delay(self, listener: str, now: float) -> float:
        """How long `listener` must wait before it accepts a connection, for the creation rates (the broker's
        and its own, whichever asks longer)."""
        return max((w.delay(now) for w in self._rate_windows(listener)), default=0.0)

    async def admit(self, listener: str) -> None:
        """Wait until `listener` may accept its next connection: the creation rates allow one, and a slot is
        free (looked at again whenever a connection closes or the limits change)."""
        while True:
            delay = self.creation_delay(listener, self._clock())
            if delay > 0:
                await asyncio.sleep(delay)
                continue
            if self.slot_available(listener):
                return
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    def ip_throttle_ms(self, host: str) -> int:
        """Counts a connection from `host` against its IP's connection_creation_rate quota; the milliseconds to
        hold it before closing it when that takes the IP over the quota (it is then not counted), else 0."""
        source = self.client_quotas
        if source is None:
            return 0
        quotas = source()
        if quotas is not self._quota_seen:
            self._quota_seen = quotas
            self._ip_rates = {}
            for entity, values in quotas.items():
                if len(entity) == 1 and entity[0][0] == "ip" and "connection_creation_rate" in values:
                    name = entity[0][1]
                    self._ip_rates[_normal_ip(name) if name is not None else None] = values["connection_creation_rate"]
        if not self._ip_rates:
            self._ip_sensors.clear()
            return 0
        ip = _normal_ip(host)
        bound = self._ip_rates.get(ip, self._ip_rates.get(None))
        if bound is None:
            return 0
        sensor = self._ip_sensors.get(ip)
        if sensor is None:
            if len(self._ip_sensors) >= _IP_SENSORS_MAX:
                self._ip_sensors.clear()  # forget the rates of many IPs at once rather than grow without bound
            sensor = self._ip_sensors[ip] = Rate(self._quota_samples, self._quota_window_ms)
        now_ms = int(self._clock() * 1000)
        sensor.record(1.0, now_ms)
        measured = sensor.measure(now_ms)
        if measured <= bound:
            return 0
        sensor.record(-1.0, now_ms)  # not accepted: not counted
        self.ip_throttled += 1
        return max(1, min(round((measured - bound) / bound * sensor.window_size(now_ms)), self._quota_window_ms))

    def open(self, listener: str, host: str) -> int | None:
        """Count a connection just accepted from `host`; None when it may stay, else the per-IP limit it exceeds
        (the caller closes it at once; it is not counted then)."""
        now = self._clock()
        for window in self._rate_windows(listener):
            window.record(now)
        ip = _normal_ip(host)
        count = self.per_ip.get(ip, 0)
        limit = self.limits.per_ip(ip)
        if count >= limit:
            self.refused[listener] = self.refused.get(listener, 0) + 1
            self._log_refused(ip, limit)
            return limit
        self.per_ip[ip] = count + 1
        self.per_listener[listener] = self.per_listener.get(listener, 0) + 1
        self.total += 1
        self.created[listener] = self.created.get(listener, 0) + 1
        recent = self._recent.setdefault(listener, deque())
        second = int(now)
        if recent and recent[-1][0] == second:
            recent[-1][1] += 1
        else:
            recent.append([second, 1])
            while recent and recent[0][0] <= second - CREATION_RATE_WINDOW_S:
                recent.popleft()
        return None

    def creation_rate(self, listener: str) -> float:
        """Connections accepted a second on `listener` over the last CREATION_RATE_WINDOW_S seconds (what
        Kafka's connection-creation-rate shows)."""
        since = int(self._clock()) - CREATION_RATE_WINDOW_S
        return sum(n for second, n in self._recent.get(listener, ()) if second > since) / CREATION_RATE_WINDOW_S

    def close(self, listener: str, host: str) -> None:
        """A counted connection went away."""
        ip = _normal_ip(host)
        count = self.per_ip.get(ip, 0)
        if count <= 1:
            self.per_ip.pop(ip, None)
        else:
            self.per_ip[ip] = count - 1
        if self.per_listener.get(listener, 0) > 0:
            self.per_listener[listener] -= 1
        if self.total > 0:
            self.total -= 1
        self._wake()

    def excess(self) -> int:
        """How many connections of unprotected listeners must close for the broker to be back within
        ``max.connections`` (more are open after the protected listener took its own, or the limit was lowered)."""
        return max(0, self.total - self.limits.max_connections)

    def lru_to_close(self, connections: Iterable[Any]) -> list[Any]:
        """Of `connections` (objects with `listener_name`, `last_active` and `closing`; those of other listeners
        are passed over), the least recently active ones of unprotected listeners to close now, `excess()` of
        them less those already closing."""
        n = self.excess()
        if n == 0:
            return []
        unprotected = [c for c in connections if c.listener_name in self.per_listener
                       and c.listener_name != self.protected]
        n -= sum(1 for c in unprotected if c.closing)  # already going: their counts come back soon
        candidates = sorted((c for c in unprotected if not c.closing), key=lambda c: c.last_active)
        return candidates[:max(0, n)]

    def close_excess(self, connections: Iterable[Any]) -> int:
        """Aborts the connections `lru_to_close` picks, logged; returns how many."""
        chosen = self.lru_to_close(connections)
        for connection in chosen:
            log.info("closing the least recently used connection: the broker is over max.connections",
                     listener=connection.listener_name, connection=connection.connection_id,
                     max_connections=self.limits.max_connections, open_connections=self.total)
            connection.abort()
        return len(chosen)

    # -- internals -------------------------------------------------------------------------------------------------

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _log_refused(self, ip: str, limit: int) -> None:
        now = self._clock()
        last, since = self._reject_logged.get(ip, (float("-inf"), 0))
        if now - last < _REJECT_LOG_INTERVAL_S:
            self._reject_logged[ip] = (last, since + 1)
            return
        self._reject_logged[ip] = (now, 0)
        if len(self._reject_logged) > 1024:  # forget the IPs not refused lately
            self._reject_logged = {k: v for k, v in self._reject_logged.items() if now - v[0] < 60}
        log.info("Rejected connection: the address already has the configured maximum of connections", ip=ip,
                 max_connections=limit, also_rejected_since_last_line=since)


async def close_idle_connections(connections: Iterable[Any], idle_ms: int, *,
                                 clock: Callable[[], float] = time.monotonic) -> None:
    """Runs until cancelled: closes every connection that has received nothing for ``connections.max.idle.ms``
    and owes no reply (a parked long-poll Fetch is not idle), as Kafka's broker does. Negative: never."""
    if idle_ms < 0:
        return
    idle_s = idle_ms / 1000
    interval = min(max(idle_s / 4, 0.05), 10.0)
    while True:
        await asyncio.sleep(interval)
        now = clock()
        for connection in list(connections):
            if not connection.closing and connection.idle and now - connection.last_active >= idle_s:
                log.info("closing an idle connection", connection=connection.connection_id,
                         listener=connection.listener_name, idle_ms=round((now - connection.last_active) * 1000),
                         connections_max_idle_ms=idle_ms)
                connection.close_after_pending(f"idle for {idle_ms} ms (connections.max.idle.ms)")
