"""What a scrape answers: Prometheus families built from the node's state and counters, at scrape time only.

Strategy: one `NodeCollector` per node, registered in a `prometheus_client.CollectorRegistry` of its own.  Nothing
is computed between scrapes: gauges are read from the node's objects (the metadata image, the log manager and its
dirs' health, the assignments queue, the replica mover, the controller) and counters from the plain arrays the
request path bumps (kjbod.metrics.counters).  Per-dir sizes come from the log manager's size probes, awaited by the
endpoint with a bound before the families are built (`refresh_dirs`), so a hung disk makes its dir "not answering"
instead of holding up the scrape.

Names follow what the Prometheus JMX exporter makes of Kafka's MBeans with Strimzi's example rules and
``lowercaseOutputName: true``: ``kafka.<domain>:type=T,name=N,k=v`` becomes ``kafka_<domain>_<t>_<n>{k="v"}``, a
``...PerSec`` meter ``kafka_<domain>_<t>_<n without PerSec>_total``, a histogram or timer ``..._count`` plus one
gauge per percentile with a ``quantile`` label.  kjbod's own figures are under ``kjbod_``.

Figures other parts of kjbod keep, read when scraped:

* replication: the node's ReplicaManager (kjbod.broker.replication) gives ``isr_shrinks`` and ``isr_expands``
  (counts), ``max_lag`` (messages), ``failed_partitions`` and ``dead_threads``; the leader and follower
  replication throttle rates (``leader_throttled_byte_rate``, ``follower_throttled_byte_rate``) are 0 until
  inter-broker throttles exist (the reassignment work adds them to the same object);
* the full-disk work: the ``full`` dir state and each dir's reserve (``LogDirInfo.reserved_bytes``).
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString as _number

from kjbod.metrics.counters import (
    API_KEYS,
    BOUNDS_MS,
    BUCKETS,
    ERROR_SLOTS,
    FETCH_FOLLOWER,
    TIMINGS,
    VERSION_BITS,
    RequestStats,
    TopicStats,
    quantile,
)
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated.registry import APIS
from kjbod.storage.fsio import LATENCY_BOUNDS_S
from kjbod.storage.health import DirState

__all__ = ["QUANTILES", "NodeCollector"]

# Kafka's histogram percentiles as the JMX exporter rules label them ("50thPercentile" -> quantile="0.50").
QUANTILES = (("0.50", 0.50), ("0.75", 0.75), ("0.95", 0.95), ("0.98", 0.98), ("0.99", 0.99), ("0.999", 0.999))
PRODUCE_KEY = 0
FETCH_KEY = 1
ALWAYS_TIMED = frozenset({PRODUCE_KEY, FETCH_KEY})
# Kafka's RequestMetrics names for Fetch: consumers' and followers' fetches apart, and all of them as "Fetch",
# whose errors are the only ones counted (RequestChannel marks ErrorsPerSec under the API's own name): (request
# label, the stats slots it sums, whether it has the errors).
FETCH_ROWS = (("FetchConsumer", (FETCH_KEY,), False), ("FetchFollower", (FETCH_FOLLOWER,), False),
              ("Fetch", (FETCH_KEY, FETCH_FOLLOWER), True))
ERROR_NAMES = {int(code): code.name for code in ErrorCode}
STATES = [s.value for s in DirState]
DIR_PROBE_WAIT_S = 1.0
# Kafka's Log gauges per partition: (name, HELP text).
PARTITION_GAUGES = (
    ("size", "Log Size per partition: bytes of its segments"),
    ("numlogsegments", "Log NumLogSegments per partition"),
    ("logendoffset", "Log LogEndOffset per partition"),
    ("logstartoffset", "Log LogStartOffset per partition"),
)
# BrokerTopicMetrics meters: (Kafka's name without PerSec, lowercased; the TopicCounters field).
TOPIC_METERS = (
    ("messagesin", "messages_in"), ("bytesin", "bytes_in"), ("bytesout", "bytes_out"),
    ("failedproducerequests", "failed_produce"), ("failedfetchrequests", "failed_fetch"),
    ("totalproducerequests", "total_produce"), ("totalfetchrequests", "total_fetch"),
)


def _request_rows(served: list[int]) -> list[tuple[str, int, tuple[int, ...], bool]]:
    """(request label, api key, the stats slots it sums, whether its errors are exported) per served API."""
    rows: list[tuple[str, int, tuple[int, ...], bool]] = []
    for api in served:
        if api == FETCH_KEY:
            rows.extend((name, api, slots, with_errors) for name, slots, with_errors in FETCH_ROWS)
        else:
            rows.append((APIS[api].name, api, (api,), True))
    return rows


def _summed(buckets: list[int], slots: tuple[int, ...]) -> list[int]:
    """A histogram's bucket counts summed over `slots`."""
    out = buckets[slots[0] * BUCKETS:(slots[0] + 1) * BUCKETS]
    for slot in slots[1:]:
        for i, n in enumerate(buckets[slot * BUCKETS:(slot + 1) * BUCKETS]):
            out[i] += n
    return out


def _family(name: str, doc: str, kind: str = "gauge") -> Metric:
    return Metric(name, doc, kind)


def _counter(name: str, doc: str) -> Metric:
    """A counter exposed as `name`_total (`name` given without the suffix)."""
    return Metric(name, doc, "counter")


class NodeCollector(Collector):
    """Every family of one node (broker, controller or both)."""

    def __init__(self, node: Any, requests: RequestStats, topics: TopicStats | None) -> None:
        self.node = node
        self.requests = requests
        self.topics = topics
        self._sizes: dict[str, tuple[int, int, int] | None] = {}
        # PartitionLog -> ((size, segments, end offset, start offset), (topic, partition), its four lines)
        self._partition_lines: dict[Any, tuple[tuple[int, int, int, int], tuple[str, int], str, str, str, str]] = {}
        self._text = ""
        self._per_dir: dict[str, int] = {}
        # (image, its (topic, partition) replicas on this broker, leaders, under-replicated, under min ISR)
        self._image_figures: tuple[Any, set[tuple[str, int]], int, int, int] | None = None
        self._controller_figures: tuple[Any, int, int] | None = None  # (image, partitions, offline partitions)
        self._online: set[tuple[str, int]] = set()  # (topic, partition) of the logs online at this scrape
        # The server shell's connection counts (kjbod.server.quotas.ConnectionQuotas, one per role's listeners):
        # `per_listener`, `created` and `creation_rate(listener)` are read.
        self.connection_quotas: list[Any] = []

    # ---------------------------------------------------------------------------------------------- before a scrape
    async def refresh_dirs(self, wait_s: float = DIR_PROBE_WAIT_S) -> None:
        """Asks every online dir for its sizes and waits (at most `wait_s`) for the answers."""
        manager = self._manager()
        if manager is None:
            self._sizes = {}
            return
        probes = manager.start_probes()
        if probes:
            waiting = [asyncio.wrap_future(f) for f in probes.values()]
            done, pending = await asyncio.wait(waiting, timeout=wait_s)
            for f in done:
                f.exception()  # retrieved, so an I/O error of a failing dir is not reported as never retrieved
        self._sizes = {path: _answer(f) for path, f in probes.items()}

    def _manager(self) -> Any:
        logs = getattr(self.node, "logs", None)
        return getattr(logs, "manager", None) if logs is not None else None

    def snapshot_partitions(self) -> None:
        """Takes each partition's figures for this scrape: Kafka's per-partition Log gauges (Size, NumLogSegments,
        LogEndOffset, LogStartOffset) as exposition text, which the text format and OpenMetrics share for gauges,
        the partitions of each dir, and which logs are online.

        The Log gauges are most of a big node's samples (four per partition), so they are written here line by
        line instead of as prometheus_client samples (a few microseconds each in its encoder), and each log's
        lines are kept until one of its figures changes (most partitions of a big node are idle between two
        scrapes); values are written as the library writes them (`_whole`).  Topic names need no escaping: Kafka
        allows only [a-zA-Z0-9._-]."""
        manager = self._manager()
        per_dir: dict[str, int] = {}
        online: set[tuple[str, int]] = set()
        self._per_dir, self._online, self._text = per_dir, online, ""
        if manager is None:
            return
        lines = self._partition_lines
        size: list[str] = []
        segments: list[str] = []
        end: list[str] = []
        start: list[str] = []
        logs = manager.partitions()
        paths: list[str] = []
        for plog in logs:
            segs = plog.segments
            n = 0
            for seg in segs:
                n += seg.size
            figures = (n, len(segs), plog.log_end_offset, plog.log_start_offset)
            known = lines.get(plog)
            if known is None or known[0] != figures:  # written again only when a figure changed
                text = f'{{partition="{plog.partition}",topic="{plog.topic}"}}'
                known = lines[plog] = (figures, (plog.topic, plog.partition), f"kafka_log_log_size{text} {_whole(n)}\n",
                                       f"kafka_log_log_numlogsegments{text} {len(segs)}.0\n",
                                       f"kafka_log_log_logendoffset{text} {_whole(figures[2])}\n",
                                       f"kafka_log_log_logstartoffset{text} {_whole(figures[3])}\n")
            size.append(known[2])
            segments.append(known[3])
            end.append(known[4])
            start.append(known[5])
            io = plog.io
            if io.online and not plog.closed:
                online.add(known[1])
            paths.append(io.path)
        per_dir.update(Counter(paths))
        if len(lines) > 2 * len(logs) + 1000:  # logs closed since (deleted, moved): forget their lines
            self._partition_lines = {plog: lines[plog] for plog in logs if plog in lines}
        out = []
        for (short, doc), part in zip(PARTITION_GAUGES, (size, segments, end, start), strict=True):
            out.append(f"# HELP kafka_log_log_{short} {doc}\n# TYPE kafka_log_log_{short} gauge\n")
            out.extend(part)
        self._text = "".join(out)

    def partition_text(self) -> str:
        """The per-partition Log gauges taken by the last `snapshot_partitions`."""
        text, self._text = self._text, ""
        return text

    # ---------------------------------------------------------------------------------------------- the families
    def collect(self) -> Iterator[Metric]:
        yield from self._requests()
        yield from self._connections()
        if self._manager() is not None:
            yield from self._log_dirs()
            yield from self._kjbod_dirs()
            yield from self._moves()
            yield from self._replica_manager()
            yield from self._assignments()
        if self.topics is not None:
            yield from self._topic_meters()
        if getattr(self.node, "controller", None) is not None and getattr(self.node.controller, "image", None):
            yield from self._controller()
        if getattr(self.node, "client_quotas", None) is not None:
            yield from self._client_quotas()
        if getattr(self.node, "client_metrics", None) is not None:
            yield from self._client_telemetry()
        if getattr(self.node, "share_coordinator", None) is not None:
            yield from self._share_coordinator()

    def _share_coordinator(self) -> Iterator[Metric]:
        """Kafka's share-coordinator-metrics (kafka.server:type=share-coordinator-metrics: write-total, write-rate,
        write-latency-avg, write-latency-max), and kjbod's counts of what the share coordinator holds."""
        sc = self.node.share_coordinator
        total, rate, avg, peak = sc.write_figures()
        prefix = "kafka_server_share_coordinator_metrics_"
        written = _counter(f"{prefix}write", "Share-partition state writes (WriteShareGroupState) served here.")
        written.add_sample(f"{prefix}write_total", {}, total)
        yield written
        for name, doc, value in (
                ("write_rate", "State writes a second, over the last 30 s.", rate),
                ("write_latency_avg", "Average ms a state write took (its record replicated), over the last 30 s.",
                 avg),
                ("write_latency_max", "Longest ms a state write took, over the last 30 s.", peak)):
            family = _family(f"{prefix}{name}", doc)
            family.add_sample(f"{prefix}{name}", {}, value)
            yield family
        parts = _family("kjbod_share_coordinator_partitions",
                        "Partitions of __share_group_state this broker coordinates, by state (loaded, loading).")
        parts.add_sample("kjbod_share_coordinator_partitions", {"state": "loaded"}, len(sc.owned))
        parts.add_sample("kjbod_share_coordinator_partitions", {"state": "loading"}, len(sc.loading))
        held = _family("kjbod_share_coordinator_share_partitions", "Share-partition states held in memory.")
        held.add_sample("kjbod_share_coordinator_share_partitions", {}, len(sc.book.states))
        yield from (parts, held)

    def _connections(self) -> Iterator[Metric]:
        """Kafka's socket-server-metrics per listener (one network loop: networkProcessor "0")."""
        prefix = "kafka_server_socket_server_metrics_connection_"
        count = _family(f"{prefix}count", "Open connections of the listener.")
        rate = _family(f"{prefix}creation_rate", "Connections accepted a second on the listener, over 30 s.")
        created = _counter(f"{prefix}creation", "Connections accepted on the listener.")
        for quotas in self.connection_quotas:
            for listener, open_now in quotas.per_listener.items():
                labels = {"listener": listener, "networkProcessor": "0"}
                count.add_sample(f"{prefix}count", labels, open_now)
                rate.add_sample(f"{prefix}creation_rate", labels, quotas.creation_rate(listener))
                created.add_sample(f"{prefix}creation_total", labels, quotas.created.get(listener, 0))
        yield from (count, rate, created)

    def _client_quotas(self) -> Iterator[Metric]:
        """Kafka's client quota sensors (kafka.server:type=Produce|Fetch|Request,user=U,client-id=C with byte-rate
        or request-time, and throttle-time; type=ControllerMutation with mutation-rate, tokens and
        throttle-time), one sample per client sensor; empty until a quota of the kind exists.
        kjbod adds what was recorded in all and the bound that applies."""
        quotas = self.node.client_quotas
        now = quotas.clock_ms()
        recorded = _counter("kjbod_client_quota_recorded", "What a client's sensor recorded: bytes for Produce and "
                            "Fetch, seconds of handler time for Request, partitions for ControllerMutation.")
        bound = _family("kjbod_client_quota_limit", "The quota that applies to the sensor (bytes per second, "
                        "percent for Request, partitions per second for ControllerMutation).")
        for qt in quotas.types:
            if not qt.sensors:
                continue
            kind = qt.name.lower()
            tokens = None
            if kind == "controllermutation":  # Kafka's ControllerMutation sensors: mutation-rate and tokens
                value_name = "kafka_server_controllermutation_mutation_rate"
                tokens = _family("kafka_server_controllermutation_tokens", "Tokens left in the controller "
                                 "mutation quota's bucket per user and client id (negative: throttled)")
            else:
                value_name = f"kafka_server_{kind}_{'request_time' if kind == 'request' else 'byte_rate'}"
            value = _family(value_name, f"{qt.name} rate per user and client id, over the quota window")
            throttle = _family(f"kafka_server_{kind}_throttle_time",
                               f"Average {qt.name} throttle time in ms per user and client id, over the quota window")
            for (user, client_id), rate, avg_throttle, total in qt.metrics(now):
                labels = {"user": user, "client_id": client_id}
                value.add_sample(value_name, labels, rate)
                throttle.add_sample(f"kafka_server_{kind}_throttle_time", labels, avg_throttle)
                typed = {"quota_type": qt.name, **labels}
                recorded.add_sample("kjbod_client_quota_recorded_total", typed,
                                    total / 100.0 if kind == "request" else total)
                limit = qt.limit((user, client_id))
                if limit is not None:
                    bound.add_sample("kjbod_client_quota_limit", typed, limit)
                if tokens is not None:
                    left = qt.tokens((user, client_id), now)
                    if left is not None:
                        tokens.add_sample("kafka_server_controllermutation_tokens", labels, left)
            yield from (value, throttle)
            if tokens is not None:
                yield tokens
        yield from (recorded, bound)

    def _client_telemetry(self) -> Iterator[Metric]:
        """What clients pushed (KIP-714 PushTelemetry; Kafka only hands it to a plugin): one family per metric
        name, its dots made underscores, each series labelled with the client's instance id and client id and its
        data point's attributes. Monotonic sums are counters (deltas added up), gauges and other sums gauges,
        histograms and summaries their count and sum. kjbod's own counts of the manager follow."""
        manager = self.node.client_metrics
        families: dict[str, Metric] = {}
        for instance, (name, attributes), series in manager.series():
            base = _prom_name(name)
            if series.kind in ("histogram", "summary"):
                kind = "summary"
            elif series.kind == "sum" and series.monotonic:
                kind = "counter"
                base = base.removesuffix("_total")
            else:
                kind = "gauge"
            family = families.get(base)
            if family is None:
                family = families[base] = Metric(base, f"Client metric {name}, as pushed (KIP-714)", kind)
            elif family.type != kind:
                continue  # one name pushed with two kinds: the first one seen is kept
            labels = {"client_instance_id": instance.name, "client_id": instance.attributes.get("client_id") or ""}
            for key, value in attributes:
                label = _prom_name(key)
                labels[label if label not in labels else f"attr_{label}"] = value
            if kind == "summary":
                family.add_sample(f"{base}_count", labels, series.count)
                family.add_sample(f"{base}_sum", labels, series.value)
            else:
                family.add_sample(f"{base}_total" if kind == "counter" else base, labels, series.value)
        yield from families.values()
        # Kafka's client-metrics group: kafka.server:type=client-metrics (instance-count,
        # unknown-subscription-request-count, and throttle-count per client instance).
        clients = _family("kafka_server_client_metrics_instance_count", "Client instances the broker knows (KIP-714)")
        clients.add_sample("kafka_server_client_metrics_instance_count", {}, len(manager.instances))
        unknown = _family("kafka_server_client_metrics_unknown_subscription_request_count",
                          "Pushes that quoted a subscription id the client no longer has")
        unknown.add_sample("kafka_server_client_metrics_unknown_subscription_request_count", {},
                           manager.unknown_subscription)
        throttled = _family("kafka_server_client_metrics_throttle_count",
                            "Telemetry requests a client instance sent too early")
        for instance in manager.instances.values():
            throttled.add_sample("kafka_server_client_metrics_throttle_count",
                                 {"client_instance_id": instance.name}, instance.throttles)
        kept = _family("kjbod_client_telemetry_series", "Series of pushed client metrics kept, across clients")
        kept.add_sample("kjbod_client_telemetry_series", {}, manager.series_count)
        dropped = _counter("kjbod_client_telemetry_dropped_series", "Pushed series dropped: over the cap on series")
        dropped.add_sample("kjbod_client_telemetry_dropped_series_total", {}, manager.dropped_series)
        yield from (clients, unknown, throttled, kept, dropped)

    def _requests(self) -> Iterator[Metric]:
        stats = self.requests
        rows = _request_rows(sorted(self._served_apis()))
        totals = self.topics.all_topics() if self.topics is not None else None
        requests = _counter("kafka_network_requestmetrics_requests", "Requests received, per API and version "
                            "(Kafka's RequestMetrics RequestsPerSec)")
        errors = _counter("kafka_network_requestmetrics_errors", "Responses per API and error code "
                          "(RequestMetrics ErrorsPerSec)")
        for name, api, slots, with_errors in rows:
            info = APIS[api]
            for version in range(info.min_version, min(info.max_version, 31) + 1):
                n = sum(stats.requests[(slot << VERSION_BITS) | version] for slot in slots)
                if n:  # as in Kafka, a version's meter exists once a request of that version came
                    requests.add_sample("kafka_network_requestmetrics_requests_total",
                                        {"request": name, "version": str(version)}, n)
            if not with_errors:
                continue
            row = stats.errors[api * ERROR_SLOTS:(api + 1) * ERROR_SLOTS]
            if totals is not None and api in (PRODUCE_KEY, FETCH_KEY):  # their partitions answered NONE
                row[1] += (totals.total_produce - totals.failed_produce if api == PRODUCE_KEY
                           else totals.total_fetch - totals.failed_fetch)
            for slot, n in enumerate(row):
                if n:
                    code = slot - 1
                    errors.add_sample("kafka_network_requestmetrics_errors_total",
                                      {"request": name, "error": ERROR_NAMES.get(code, str(code))}, n)
        yield requests
        yield errors
        # Timings of the APIs requested at least once, and always of Produce and Fetch (what dashboards show).
        for timing, buckets in zip(TIMINGS, stats.timings, strict=True):
            base = f"kafka_network_requestmetrics_{timing.lower()}"
            count = _family(f"{base}_count", f"Requests timed, per API (RequestMetrics {timing} Count)", "unknown")
            gauge = _family(base, f"{timing} percentiles per API (RequestMetrics {timing})")
            for name, api, slots, _errors in rows:
                counts = _summed(buckets, slots)
                if api not in ALWAYS_TIMED and not any(_summed(stats.total, slots)):
                    continue
                count.add_sample(f"{base}_count", {"request": name}, sum(counts))
                for label, q in QUANTILES:
                    gauge.add_sample(base, {"request": name, "quantile": label}, quantile(counts, BOUNDS_MS, q))
            yield count
            yield gauge

    def _served_apis(self) -> Iterable[int]:
        entries = getattr(getattr(self.node, "handler", None), "entries", None)
        keys = set(entries) if entries else set(APIS)
        stats = self.requests
        keys |= {k for k in range(API_KEYS) if k in APIS and any(
            stats.requests[k << VERSION_BITS:(k + 1) << VERSION_BITS])}
        # kjbod's own APIs (keys from 10000) have no slots in the per-API arrays: not counted.
        return [k for k in keys if k in APIS and k < API_KEYS]

    def _topic_meters(self) -> Iterator[Metric]:
        topics = self.topics
        assert topics is not None
        image = getattr(self.node, "metadata", None)
        if image is not None:
            topics.retire_except(image.by_name)
        total = topics.all_topics()
        for short, field in TOPIC_METERS:
            name = f"kafka_server_brokertopicmetrics_{short}"
            family = _counter(name, f"BrokerTopicMetrics {short}, per topic and in total")
            family.add_sample(f"{name}_total", {}, getattr(total, field))
            for topic, counters in sorted(topics.topics.items()):
                family.add_sample(f"{name}_total", {"topic": topic}, getattr(counters, field))
            yield family

    def _log_dirs(self) -> Iterator[Metric]:
        manager = self._manager()
        offline = manager.offline_dirs
        count = _family("kafka_log_logmanager_offlinelogdirectorycount", "Log dirs offline (LogManager)")
        count.add_sample("kafka_log_logmanager_offlinelogdirectorycount", {}, len(offline))
        yield count
        each = _family("kafka_log_logmanager_logdirectoryoffline", "1 when the log dir is offline (LogManager)")
        off = set(offline)
        for path in sorted(manager.online_dirs + offline):
            each.add_sample("kafka_log_logmanager_logdirectoryoffline", {"logDirectory": path}, int(path in off))
        yield each
        # LogFlushStats: Kafka times each log flush; here that is every fsync on the data dirs.
        merged = [0] * (len(LATENCY_BOUNDS_S) + 1)
        for io in self._dir_ios():
            for i, n in enumerate(io.latency_buckets["fsync"]):
                merged[i] += n
        flush = "kafka_log_logflushstats_logflushrateandtimems"
        flushes = _family(f"{flush}_count", "Log flushes (LogFlushStats LogFlushRateAndTimeMs Count)", "unknown")
        flushes.add_sample(f"{flush}_count", {}, sum(merged))
        yield flushes
        times = _family(flush, "Log flush time percentiles in ms (LogFlushStats LogFlushRateAndTimeMs)")
        for label, q in QUANTILES:
            times.add_sample(flush, {"quantile": label}, quantile(merged, LATENCY_BOUNDS_S, q) * 1000)
        yield times

    def _dir_ios(self) -> list[Any]:
        return [h.io for h in self._manager().watchdog.health.values()]

    def _kjbod_dirs(self) -> Iterator[Metric]:
        manager = self._manager()
        infos = manager.dir_infos(self._sizes)
        states = _family("kjbod_log_dir_state", "1 for the log dir's current state (online, degraded, full, "
                         "offline, not-answering), 0 for the others")
        total = _family("kjbod_log_dir_total_bytes", "Size of the log dir's file system (-1: unknown)")
        usable = _family("kjbod_log_dir_usable_bytes", "Bytes free for kjbod on the log dir's file system (-1: unknown)")
        reserve = _family("kjbod_log_dir_reserve_bytes",
                          "Bytes kept free on the log dir (log.dir.reserved.bytes as applied; -1: unknown)")
        parts = _family("kjbod_log_dir_partitions", "Partition logs in the log dir (current, not -future)")
        recent = _family("kjbod_log_dir_recent_latency_seconds", "Slowest file operation of the last 10 s")
        cordoned = _family("kjbod_log_dir_cordoned", "1 when the log dir is cordoned (cordoned.log.dirs: no new "
                           "replicas), else 0")
        per_dir = self._per_dir
        for info in infos:
            path = info.path
            for state in STATES:
                states.add_sample("kjbod_log_dir_state", {"log_dir": path, "state": state},
                                  int(info.state.value == state))
            total.add_sample("kjbod_log_dir_total_bytes", {"log_dir": path}, info.total_bytes)
            usable.add_sample("kjbod_log_dir_usable_bytes", {"log_dir": path}, info.usable_bytes)
            reserve.add_sample("kjbod_log_dir_reserve_bytes", {"log_dir": path}, info.reserved_bytes)
            parts.add_sample("kjbod_log_dir_partitions", {"log_dir": path}, per_dir.get(path, 0))
            recent.add_sample("kjbod_log_dir_recent_latency_seconds", {"log_dir": path}, info.recent_latency_ms / 1000)
            cordoned.add_sample("kjbod_log_dir_cordoned", {"log_dir": path}, int(info.cordoned))
        yield from (states, total, usable, reserve, parts, recent, cordoned)
        ops = _family("kjbod_log_dir_operation_seconds", "File operation latency per log dir and operation",
                      "histogram")
        for io in self._dir_ios():
            for op, buckets in sorted(io.latency_buckets.items()):
                if not any(buckets):
                    continue  # an operation never run on this dir (most of the 15) adds nothing
                labels = {"log_dir": io.path, "op": op}
                seen = 0
                for bound, n in zip((*LATENCY_BOUNDS_S, float("inf")), buckets, strict=True):
                    seen += n
                    ops.add_sample("kjbod_log_dir_operation_seconds_bucket",
                                   {**labels, "le": _le(bound)}, seen)
                ops.add_sample("kjbod_log_dir_operation_seconds_count", labels, seen)
                ops.add_sample("kjbod_log_dir_operation_seconds_sum", labels, io.latency_seconds[op])
        yield ops

    def _moves(self) -> Iterator[Metric]:
        """KIP-113's ReplicaAlterLogDirsManager figures, each move's and each dir's bytes, rate and ETA, and how many
        moves are not converging (kjbod.broker.kip113.convergence)."""
        mover = getattr(self.node, "mover", None)
        manager = self._manager()
        moves = mover.all_progress() if mover is not None else []
        running = [m for m in moves if m.state in ("queued", "copying", "catching-up", "swapping")]
        max_lag = 0
        for m in running:
            source = manager.find(m.topic, m.partition)
            future = manager.get_future(m.topic, m.partition)
            future_leo = future.log_end_offset if future is not None else (m.future_log_end_offset or 0)
            if source is not None:
                max_lag = max(max_lag, source.log_end_offset - future_leo)
        workers = getattr(mover, "_workers", []) if mover is not None else []
        dead = 0 if mover is None or mover.stopping else sum(1 for t in workers if not t.is_alive())
        labels = {"clientId": "ReplicaAlterLogDirs"}
        for short, value, doc in (
                ("maxlag", max_lag, "Messages the furthest-behind future replica lags its current one"),
                ("failedpartitionscount", sum(1 for m in moves if m.state == "failed"), "Moves that failed"),
                ("deadthreadcount", dead, "Mover threads that died")):
            name = f"kafka_server_replicaalterlogdirsmanager_{short}"
            family = _family(name, f"ReplicaAlterLogDirsManager {doc}")
            family.add_sample(name, labels, value)
            yield family
        copied = _family("kjbod_replica_move_copied_bytes", "Bytes a move between log dirs has copied")
        size = _family("kjbod_replica_move_size_bytes", "Bytes a move between log dirs copies in all (so far)")
        rate = _family("kjbod_replica_move_rate_bytes_per_second", "A move's copy rate since it started")
        eta = _family("kjbod_replica_move_eta_seconds", "Seconds a move needs at its rate (-1: unknown)")
        dir_in: dict[str, list[float]] = {}
        dir_out: dict[str, list[float]] = {}
        for m in running:
            labels = {"topic": m.topic, "partition": str(m.partition), "source_dir": m.source_dir,
                      "dest_dir": m.dest_dir}
            copied.add_sample("kjbod_replica_move_copied_bytes", labels, m.bytes_copied)
            size.add_sample("kjbod_replica_move_size_bytes", labels, m.bytes_total)
            rate.add_sample("kjbod_replica_move_rate_bytes_per_second", labels, m.rate)
            eta.add_sample("kjbod_replica_move_eta_seconds", labels, -1 if m.eta_seconds is None else m.eta_seconds)
            remaining = max(0, m.bytes_total - m.bytes_copied)
            for side, path in ((dir_in, m.dest_dir), (dir_out, m.source_dir)):
                acc = side.setdefault(path, [0.0, 0.0, 0.0])
                acc[0] += remaining
                acc[1] += m.rate
                acc[2] = max(acc[2], -1 if m.eta_seconds is None else m.eta_seconds)
        yield from (copied, size, rate, eta)
        # Always present (0 when none), so an alert can fire on "> 0" without a rule for the absent series.
        name = "kjbod_replica_moves_not_converging"
        stuck = _family(name, "Moves between this broker's log dirs whose source has outgrown the copy over the "
                              "last two minutes (replica_move_not_converging in the log): their catch-up cannot end")
        stuck.add_sample(name, {}, sum(1 for m in running if m.not_converging is not None))
        yield stuck
        paths = sorted(manager.online_dirs + manager.offline_dirs)
        for direction, side in (("in", dir_in), ("out", dir_out)):
            rem = _family(f"kjbod_log_dir_move_{direction}_remaining_bytes",
                          f"Bytes still to move {direction}to this log dir" if direction == "in" else
                          "Bytes still to move out of this log dir")
            rt = _family(f"kjbod_log_dir_move_{direction}_rate_bytes_per_second",
                         f"Copy rate of the moves {direction} of this log dir")
            et = _family(f"kjbod_log_dir_move_{direction}_eta_seconds",
                         f"Seconds until the last move {direction} of this log dir is done (0: none; -1: unknown)")
            for path in paths:
                remaining, r, e = side.get(path, (0.0, 0.0, 0.0))
                rem.add_sample(f"kjbod_log_dir_move_{direction}_remaining_bytes", {"log_dir": path}, remaining)
                rt.add_sample(f"kjbod_log_dir_move_{direction}_rate_bytes_per_second", {"log_dir": path}, r)
                et.add_sample(f"kjbod_log_dir_move_{direction}_eta_seconds", {"log_dir": path}, e)
            yield from (rem, rt, et)

    def _replica_manager(self) -> Iterator[Metric]:
        node = self.node
        image = node.metadata
        me = node.node_id
        cached = self._image_figures
        if cached is None or cached[0] is not image:  # images are immutable: counted once per image
            hosted: set[tuple[str, int]] = set()
            leaders = under = under_min = 0
            for topic in image.topics():
                min_isr = int(topic.configs.get("min.insync.replicas", 1) or 1)
                name = topic.name
                for p in topic.partitions.values():
                    if me not in p.replicas:
                        continue
                    hosted.add((name, p.partition))
                    if p.leader == me:
                        leaders += 1
                        if len(p.isr) < len(p.replicas):
                            under += 1
                        if len(p.isr) < min_isr:
                            under_min += 1
            cached = self._image_figures = (image, hosted, leaders, under, under_min)
        _image, hosted, leaders, under, under_min = cached
        partitions = len(hosted)
        offline = len(hosted - self._online)  # replicas here whose log is missing or in an offline dir
        # The replica manager's own figures (ISR changes, fetcher lag and health), else a stand-in set by tests.
        figures = getattr(node, "replication_metrics", None) or getattr(node, "replication", None)

        def fig(attr: str) -> float:
            return float(getattr(figures, attr, 0) or 0) if figures is not None else 0.0

        for short, value in (("partitioncount", partitions), ("leadercount", leaders),
                             ("underreplicatedpartitions", under), ("underminisrpartitioncount", under_min),
                             ("offlinereplicacount", offline)):
            name = f"kafka_server_replicamanager_{short}"
            family = _family(name, f"ReplicaManager {short}, from the metadata image")
            family.add_sample(name, {}, value)
            yield family
        for short, attr in (("isrshrinks", "isr_shrinks"), ("isrexpands", "isr_expands")):
            family = _counter(f"kafka_server_replicamanager_{short}", f"ReplicaManager {short} (replication)")
            family.add_sample(f"kafka_server_replicamanager_{short}_total", {}, fig(attr))
            yield family
        for short, attr in (("maxlag", "max_lag"), ("failedpartitionscount", "failed_partitions"),
                            ("deadthreadcount", "dead_threads")):
            name = f"kafka_server_replicafetchermanager_{short}"
            family = _family(name, f"ReplicaFetcherManager {short} (replication)")
            family.add_sample(name, {"clientId": "Replica"}, fig(attr))
            yield family
        for who, attr in (("leader", "leader_throttled_byte_rate"), ("follower", "follower_throttled_byte_rate")):
            name = f"kafka_server_{who}replication_byte_rate"
            family = _family(name, f"Throttled {who} replication bytes per second ({who.capitalize()}Replication)")
            family.add_sample(name, {}, fig(attr))
            yield family
        applied = _family("kafka_server_brokermetadatametrics_last_applied_record_offset",
                          "Offset of the last metadata record this broker applied")
        applied.add_sample("kafka_server_brokermetadatametrics_last_applied_record_offset", {}, image.offset)
        yield applied

    def _assignments(self) -> Iterator[Metric]:
        node = self.node
        manager = getattr(node, "assignments", None)
        if manager is not None:
            queued = manager.queued
        else:  # the combined node records its dirs through its own controller, one task per batch
            queued = len(getattr(node, "_assignments", ()))
        name = "kafka_server_kafkaserver_queuedreplicatodirassignments"
        family = _family(name, "Replica-to-dir assignments waiting or in flight to the controller (KIP-858)")
        family.add_sample(name, {}, queued)
        yield family

    def _controller(self) -> Iterator[Metric]:
        controller = self.node.controller
        image = controller.image
        brokers = list(image.brokers.values())
        if self._controller_figures is None or self._controller_figures[0] is not image:
            offline = partitions = 0
            for topic in image.topics():
                for p in topic.partitions.values():
                    partitions += 1
                    if p.leader < 0:
                        offline += 1
            self._controller_figures = (image, partitions, offline)
        _image, partitions, offline = self._controller_figures
        end = getattr(controller.log, "next_offset", image.offset + 1)
        committed = getattr(controller.log, "high_watermark", end)
        for short, value in (("activecontrollercount", 1), ("offlinepartitionscount", offline),
                             ("globalpartitioncount", partitions), ("globaltopiccount", len(image.topics_by_id)),
                             ("fencedbrokercount", sum(1 for b in brokers if b.fenced)),
                             ("activebrokercount", sum(1 for b in brokers if not b.fenced)),
                             ("lastappliedrecordoffset", image.offset),
                             ("lastcommittedrecordoffset", committed - 1)):
            name = f"kafka_controller_kafkacontroller_{short}"
            family = _family(name, f"KafkaController {short}")
            family.add_sample(name, {}, value)
            yield family
        leo = _family("kafka_server_raftmetrics_log_end_offset", "End offset of the metadata log (raft-metrics)")
        leo.add_sample("kafka_server_raftmetrics_log_end_offset", {}, end)
        yield leo
        lag = _family("kjbod_controller_broker_metadata_lag_records",
                      "Metadata records each registered broker is behind the log's end, by its last heartbeat")
        sessions = controller.heartbeats.sessions
        local = controller.settings.local_broker_id
        for b in sorted(brokers, key=lambda b: b.broker_id):
            if b.broker_id == local:
                offset = image.offset
            else:
                session = sessions.get(b.broker_id)
                offset = session.metadata_offset if session is not None else -1
            lag.add_sample("kjbod_controller_broker_metadata_lag_records", {"broker": str(b.broker_id)},
                           max(0, end - 1 - offset) if offset >= 0 else end)
        yield lag


def _whole(n: int) -> str:
    """An int as prometheus_client writes a float (Go's style): "42.0", "1.234567e+06" from a million up."""
    return f"{n}.0" if n < 1_000_000 else _number(n)


def _answer(future: Any) -> tuple[int, int, int] | None:
    if not future.done() or future.cancelled() or future.exception() is not None:
        return None
    return future.result()  # type: ignore[no-any-return]


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


def _prom_name(name: str) -> str:
    """A Prometheus metric or label name for an OpenTelemetry one (dots and anything else not allowed made '_')."""
    out = re.sub(r"[^a-zA-Z0-9_]", "_", name) or "_"
    if out.startswith("__"):  # reserved for Prometheus' own labels
        return f"x{out}"
    return f"_{out}" if out[0].isdigit() else out
