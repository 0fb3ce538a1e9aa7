"""The numbers the request path keeps for the metrics endpoint: flat lists of ints, bumped in place.

Strategy: nothing here is a Prometheus object.  A request costs list-index increments (a request counter, one bucket
per timing histogram, an error counter) and a dict lookup for a topic's counters; nothing is locked, no string is
built, and histograms are fixed bucket arrays whose quantiles and counts are worked out only when someone scrapes
(kjbod.metrics.collect).  Everything runs on the event loop, except the storage latency buckets that the file-I/O
seam keeps itself (kjbod.storage.fsio), so plain increments are safe.

Layout: per-API arrays are indexed by api key (``api << VERSION_BITS | version`` for the per-version request
counts), histograms by ``api * BUCKETS + bucket``.  Keys and versions out of range are not counted (the router
refuses such requests anyway).  A follower's Fetch counts under its own slot, FETCH_FOLLOWER (a key no Kafka API
has), so consumers' and followers' fetches are apart (Kafka's FetchConsumer and FetchFollower): the Fetch handler
says so (`follower_fetch`, which sets `count_as`) while the connection is handing it the request, and the connection takes that slot for
the request's figures instead of the header's api key (one attribute test per request).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence

__all__ = [
    "API_KEYS",
    "BOUNDS_MS",
    "BUCKETS",
    "ERROR_SLOTS",
    "FETCH_FOLLOWER",
    "TIMINGS",
    "RequestStats",
    "TopicCounters",
    "TopicStats",
    "quantile",
]

API_KEYS = 128  # api keys counted: 0..127 (Kafka's highest is below 100)
VERSION_BITS = 5  # versions 0..31
ROUTE_LIMIT = API_KEYS << 16  # a route id (api key << 16 | version) below this has a slot
FETCH_FOLLOWER = API_KEYS - 1  # the slot of followers' Fetch requests (Fetch's own slot keeps consumers')
# Latency bucket upper bounds in milliseconds (the last bucket, above 10 s, is open).
BOUNDS_MS: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0,
                                1000.0, 2500.0, 5000.0, 10000.0)
BUCKETS = len(BOUNDS_MS) + 1
BOUNDS_S = _BOUNDS_S = tuple(b / 1000 for b in BOUNDS_MS)
# Error codes counted per API: -1 (UNKNOWN_SERVER_ERROR) .. 158.
ERROR_SLOTS = 160
# Kafka's RequestMetrics timing names, in the order of RequestStats.timings.
TIMINGS = ("TotalTimeMs", "RequestQueueTimeMs", "LocalTimeMs", "RemoteTimeMs", "ResponseSendTimeMs")


class RequestStats:
    """Per-API request counts, timing histograms and error counts of one node (all its listeners)."""

    __slots__ = ("count_as", "errors", "remote", "requests", "send", "local", "queue", "timings", "total")

    def __init__(self) -> None:
        # The slot the request being handed to its handler counts under instead of its api key, -1 for its own:
        # set by the handler (a follower's Fetch), read and reset by the connection right after (see the module
        # docstring).
        self.count_as = -1
        self.requests = [0] * (API_KEYS << VERSION_BITS)
        self.total = [0] * (API_KEYS * BUCKETS)
        self.queue = [0] * (API_KEYS * BUCKETS)
        self.local = [0] * (API_KEYS * BUCKETS)
        self.remote = [0] * (API_KEYS * BUCKETS)
        self.send = [0] * (API_KEYS * BUCKETS)
        self.timings = (self.total, self.queue, self.local, self.remote, self.send)
        self.errors = [0] * (API_KEYS * ERROR_SLOTS)

    def follower_fetch(self) -> None:
        """The request being handed to its handler is a follower's Fetch."""
        self.count_as = FETCH_FOLLOWER

    def counted_route(self, route_id: int) -> int:
        """`route_id` with the api key the handler asked for (`count_as`), which is then reset."""
        slot, self.count_as = self.count_as, -1
        return (slot << 16) | (route_id & 0xFFFF)

    def handled(self, route_id: int, queue_s: float, local_s: float) -> None:
        """A request of `route_id` (api key << 16 | version) waited `queue_s` after it was read and took
        `local_s` in its handler."""
        if 0 <= route_id < ROUTE_LIMIT:
            api = route_id >> 16
            self.requests[(api << VERSION_BITS) | (route_id & 31)] += 1
            base = api * BUCKETS
            self.queue[base + bisect_right(_BOUNDS_S, queue_s)] += 1
            self.local[base + bisect_right(_BOUNDS_S, local_s)] += 1

    def sent(self, route_id: int, remote_s: float, send_s: float, total_s: float) -> None:
        """The reply of a request of `route_id` was awaited `remote_s` after its handler returned, took `send_s`
        to hand to the socket, and went out `total_s` after the request was read."""
        if 0 <= route_id < ROUTE_LIMIT:
            base = (route_id >> 16) * BUCKETS
            self.remote[base + bisect_right(_BOUNDS_S, remote_s)] += 1
            self.send[base + bisect_right(_BOUNDS_S, send_s)] += 1
            self.total[base + bisect_right(_BOUNDS_S, total_s)] += 1

    def sent_batch(self, routes: list[int], read_at: float, write_started: float, written: float) -> None:
        """Replies answered at once (no remote wait), written together: each request was read at `read_at` (a
        non-empty list of their route ids)."""
        send, total = written - write_started, written - read_at
        send_bucket = bisect_right(_BOUNDS_S, send)
        total_bucket = bisect_right(_BOUNDS_S, total)
        remote, send_h, total_h = self.remote, self.send, self.total
        first = routes[0]
        if routes.count(first) == len(routes):  # the common case: one API (pipelined Produce, say) in the batch
            by_route: Iterable[tuple[int, int]] = ((first, len(routes)),)
        else:
            by_route = ((route_id, 1) for route_id in routes)
        for route_id, n in by_route:
            if 0 <= route_id < ROUTE_LIMIT:
                base = (route_id >> 16) * BUCKETS
                remote[base] += n
                send_h[base + send_bucket] += n
                total_h[base + total_bucket] += n

    def error(self, api_key: int, code: int, n: int = 1) -> None:
        """A response's error code (the router counts each response's top-level code, NONE included; Produce and
        Fetch count their partitions' codes through TopicStats)."""
        if 0 <= api_key < API_KEYS and -1 <= code < ERROR_SLOTS - 1:
            self.errors[api_key * ERROR_SLOTS + code + 1] += n


class TopicCounters:
    """Kafka's BrokerTopicMetrics of one topic (or of all topics together)."""

    __slots__ = ("bytes_in", "bytes_out", "failed_fetch", "failed_produce", "messages_in", "total_fetch",
                 "total_produce")

    def __init__(self) -> None:
        self.bytes_in = 0
        self.bytes_out = 0
        self.messages_in = 0
        self.failed_produce = 0
        self.failed_fetch = 0
        self.total_produce = 0
        self.total_fetch = 0

    def add(self, other: TopicCounters) -> None:
        for name in TopicCounters.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


PRODUCE_KEY = 0
FETCH_KEY = 1


class TopicStats:
    """BrokerTopicMetrics per topic; the all-topics figures are summed at scrape (plus `retired`, what topics
    deleted since had counted, so the totals never go down).  The produce and fetch handlers feed it."""

    __slots__ = ("requests", "retired", "topics")

    def __init__(self, requests: RequestStats) -> None:
        self.topics: dict[str, TopicCounters] = {}
        self.retired = TopicCounters()
        self.requests = requests

    def topic(self, name: str) -> TopicCounters:
        counters = self.topics.get(name)
        if counters is None:
            counters = self.topics[name] = TopicCounters()
        return counters

    def produced(self, topic: str, size: int, records: int) -> None:
        """One partition of a Produce appended: the batch's bytes and records.  (Its error code, NONE, is
        counted at scrape: the partitions produced minus those that failed.)"""
        counters = self.topics.get(topic) or self.topic(topic)
        counters.total_produce += 1
        counters.bytes_in += size
        counters.messages_in += records

    def produce_failed(self, topic: str, code: int) -> None:
        """One partition of a Produce refused with `code`."""
        counters = self.topic(topic)
        counters.total_produce += 1
        counters.failed_produce += 1
        self.requests.error(PRODUCE_KEY, code)

    def fetched(self, topic: str | None, code: int, size: int) -> None:
        """One partition of a Fetch answered to a consumer: its error code and the record bytes sent."""
        counters = (self.topics.get(topic) or self.topic(topic)) if topic is not None else None
        if code:
            self.requests.error(FETCH_KEY, code)
            if counters is not None:
                counters.total_fetch += 1
                counters.failed_fetch += 1
        elif counters is not None:
            counters.total_fetch += 1
            counters.bytes_out += size
        else:
            self.requests.error(FETCH_KEY, 0)

    def retire_except(self, live: Iterable[str]) -> None:
        """Folds the counters of topics no longer in `live` into `retired` (called at scrape)."""
        keep = set(live)
        for name in [n for n in self.topics if n not in keep]:
            self.retired.add(self.topics.pop(name))

    def all_topics(self) -> TopicCounters:
        out = TopicCounters()
        out.add(self.retired)
        for counters in self.topics.values():
            out.add(counters)
        return out


def quantile(counts: Sequence[int], bounds: Sequence[float], q: float) -> float:
    """The `q` quantile of a histogram (`counts` per bucket, `bounds` the upper bounds of all but the last, open
    bucket), interpolated linearly within its bucket, in the bounds' unit; 0 when empty."""
    n = sum(counts)
    if n == 0:
        return 0.0
    rank, seen = q * n, 0
    for i, c in enumerate(counts):
        if c and seen + c >= rank:
            lo = bounds[i - 1] if i > 0 else 0.0
            hi = bounds[i] if i < len(bounds) else bounds[-1] * 2
            return lo + (hi - lo) * ((rank - seen) / c)
        seen += c
    return bounds[-1] * 2
