"""Log-dir snapshots for the Spark data source, without Spark: options, the per-broker fetch, Arrow columns.

Strategy: everything a Spark worker does besides talking to Spark lives here, so it can be tested and timed
without a JVM.

* `ReadOptions.parse(options)` turns the data source's string options into typed settings and rejects bad ones
  with a message that names the option (Spark shows the message of an exception raised while planning).
* `list_brokers()` runs once per query plan (on Spark's planning worker): one Metadata call for the broker list,
  and, when topics are filtered, Metadata for those topics so the DescribeLogDirs request can name their
  partitions (Kafka's request lists partitions explicitly).  Unknown topics are dropped: they hold no replicas.
* `fetch_broker()` runs once per input partition (one per broker, on an executor): it connects to that broker
  only, asks DescribeLogDirs with the pushed topic list, and bounds everything (connect, each attempt, the whole
  call) by the configured timeouts, so a broker that is down or hangs costs at most `request.timeout.ms`.
* `to_record_batch()` builds one Arrow batch per broker straight from the admin client's result objects, one
  list per column, with exactly the Arrow types Spark expects for the declared schema (Spark refuses a batch
  whose schema differs by so much as a nullability flag); that is about twice as fast as yielding tuples.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kjbod.admin import AdminClient, KafkaError, LogDirInfo, parse_bootstrap_servers

__all__ = [
    "LOG_DIR_COLUMNS",
    "REPLICA_COLUMNS",
    "BrokerFetchError",
    "BrokerTarget",
    "ReadOptions",
    "columns_for",
    "fetch_broker",
    "list_brokers",
    "to_record_batch",
]

VIEWS = ("replicas", "log_dirs")
ON_BROKER_ERROR = ("fail", "skip")

# (name, Spark SQL type).  The Spark schema (kjbod.spark.source) and the Arrow columns are both built from these.
# Both views start with the log dir's own columns.
_DIR_COLUMNS: tuple[tuple[str, str], ...] = (
    ("broker_id", "INT"),
    ("log_dir", "STRING"),
    ("dir_id", "STRING"),
    ("dir_error", "STRING"),
    ("dir_total_bytes", "BIGINT"),
    ("dir_usable_bytes", "BIGINT"),
)
REPLICA_COLUMNS: tuple[tuple[str, str], ...] = _DIR_COLUMNS + (
    ("topic", "STRING"),
    ("partition", "INT"),
    ("size_bytes", "BIGINT"),
    ("offset_lag", "BIGINT"),
    ("is_future", "BOOLEAN"),
    ("snapshot_ts", "TIMESTAMP"),
)
LOG_DIR_COLUMNS: tuple[tuple[str, str], ...] = _DIR_COLUMNS + (
    ("replica_count", "INT"),  # replicas in the dir (of the filtered topics), future copies included
    ("future_count", "INT"),  # of which copies a log-dir move is building
    ("size_bytes", "BIGINT"),  # bytes of those replicas
    ("dir_reserved_bytes", "BIGINT"),  # kjbod: what the dir keeps free (log.dir.reserved.bytes); null: unknown
    ("snapshot_ts", "TIMESTAMP"),
)


def columns_for(view: str) -> tuple[tuple[str, str], ...]:
    return REPLICA_COLUMNS if view == "replicas" else LOG_DIR_COLUMNS


class OptionError(ValueError):
    """A data source option is missing or malformed."""


def _ids(text: str, option: str) -> tuple[int, ...]:
    out = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        try:
            out.append(int(item))
        except ValueError:
            raise OptionError(f"kjbod: option {option!r} must be comma-separated broker ids, got {text!r}") from None
    return tuple(dict.fromkeys(out))


def _millis(options: Mapping[str, str], key: str, default: int) -> int:
    text = options.get(key)
    if text is None:
        return default
    try:
        value = int(str(text).strip())
    except ValueError:
        raise OptionError(f"kjbod: option {key!r} must be a number of milliseconds, got {text!r}") from None
    if value <= 0:
        raise OptionError(f"kjbod: option {key!r} must be positive, got {text!r}")
    return value


@dataclass(frozen=True)
class ReadOptions:
    """The data source's options, parsed.  Plain data: it is pickled to Spark's workers."""

    bootstrap_servers: str
    view: str = "replicas"
    brokers: tuple[int, ...] | None = None  # None: every broker in the cluster metadata
    topics: tuple[str, ...] | None = None  # None: every topic
    on_broker_error: str = "fail"
    connect_timeout_ms: int = 10_000
    request_timeout_ms: int = 30_000
    interval_ms: int = 10_000  # streaming: time between snapshots

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        # Spark hands over a case-insensitive dict; a plain dict (tests, tools) is lower-cased here.
        opts = {str(k).lower(): v for k, v in options.items()}
        bootstrap = (opts.get("bootstrap.servers") or "").strip()
        if not bootstrap:
            raise OptionError('kjbod: option "bootstrap.servers" is required, e.g. '
                              '.option("bootstrap.servers", "127.0.0.1:9092")')
        try:
            parse_bootstrap_servers(bootstrap)
        except ValueError as e:
            raise OptionError(f'kjbod: option "bootstrap.servers": {e}') from None
        view = (opts.get("view") or "replicas").strip().lower()
        if view not in VIEWS:
            raise OptionError(f'kjbod: option "view" must be one of {", ".join(VIEWS)}, got {view!r}')
        on_error = (opts.get("on_broker_error") or "fail").strip().lower()
        if on_error not in ON_BROKER_ERROR:
            raise OptionError(f'kjbod: option "on_broker_error" must be "fail" or "skip", got {on_error!r}')
        brokers = _ids(opts["brokers"], "brokers") if opts.get("brokers") is not None else None
        topics = None
        if opts.get("topics") is not None:
            topics = tuple(dict.fromkeys(t.strip() for t in opts["topics"].split(",") if t.strip()))
        return cls(
            bootstrap_servers=bootstrap, view=view, brokers=brokers, topics=topics, on_broker_error=on_error,
            connect_timeout_ms=_millis(opts, "connect.timeout.ms", 10_000),
            request_timeout_ms=_millis(opts, "request.timeout.ms", 30_000),
            interval_ms=_millis(opts, "interval.ms", 10_000))

    @property
    def request_timeout(self) -> float:
        return self.request_timeout_ms / 1000

    @property
    def connect_timeout(self) -> float:
        return min(self.connect_timeout_ms, self.request_timeout_ms) / 1000


@dataclass(frozen=True)
class BrokerTarget:
    """One broker to read, and the DescribeLogDirs topic list to send it (None: every replica)."""

    broker_id: int
    host: str
    port: int
    topics: tuple[tuple[str, tuple[int, ...]], ...] | None


class BrokerFetchError(RuntimeError):
    """A broker did not answer DescribeLogDirs (with on_broker_error=fail)."""


def _client(bootstrap: str, settings: ReadOptions) -> AdminClient:
    return AdminClient(bootstrap, client_id="kjbod-spark", connect_timeout=settings.connect_timeout,
                       request_timeout=settings.request_timeout)


def list_brokers(settings: ReadOptions, brokers: Sequence[int] | None = None,
                 topics: Sequence[str] | None = None, *, only: Iterable[int] | None = None) -> list[BrokerTarget]:
    """The brokers to read (sorted by id) with the topic list each DescribeLogDirs request will carry.

    `brokers`: the ids asked for by name (the `brokers` option), None for all.  A broker asked for by id but
    absent from the metadata is still listed (with port 0), so that `fail` reports it and `skip` leaves it
    out, as for a broker that is down.  `only`: a filter (Spark's pushed `broker_id` predicates): ids outside
    it are dropped, and an id in it that no broker has simply matches nothing.  `topics`: None for all.
    """
    return asyncio.run(_list_brokers(settings, brokers, topics, None if only is None else frozenset(only)))


async def _list_brokers(settings: ReadOptions, brokers: Sequence[int] | None, topics: Sequence[str] | None,
                        only: frozenset[int] | None) -> list[BrokerTarget]:
    try:
        async with asyncio.timeout(settings.request_timeout + 1.0):  # a safety net: the client has deadlines
            async with _client(settings.bootstrap_servers, settings) as admin:
                nodes = admin.brokers
                request_topics: tuple[tuple[str, tuple[int, ...]], ...] | None = None
                if topics is not None:
                    request_topics = await _topic_partitions(admin, topics, settings.request_timeout)
    except TimeoutError:
        raise BrokerFetchError(
            f"kjbod: no answer to Metadata from {settings.bootstrap_servers} within "
            f"{settings.request_timeout:g}s (request.timeout.ms)") from None
    except KafkaError as e:
        raise BrokerFetchError(f"kjbod: cannot load the broker list from {settings.bootstrap_servers}: {e}") from None
    wanted = sorted(nodes) if brokers is None else sorted(set(brokers))
    if only is not None:
        wanted = [b for b in wanted if b in only]
    out = []
    for broker_id in wanted:
        node = nodes.get(broker_id)
        host, port = (node.host, node.port) if node is not None else ("", 0)
        out.append(BrokerTarget(broker_id, host, port, request_topics))
    return out


async def _topic_partitions(admin: AdminClient, topics: Sequence[str],
                            timeout: float) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(topic, partitions) for each named topic that exists, in the order given."""
    from kjbod.protocol.errors import ErrorCode

    async def one(name: str) -> tuple[str, tuple[int, ...]] | None:
        try:
            described = await admin.describe_topics([name], timeout=timeout)
        except KafkaError as e:
            if e.code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_TOPIC_EXCEPTION):
                return None  # no such topic: it has no replicas to report
            raise
        return name, tuple(p.partition for p in described[name].partitions)

    found = await asyncio.gather(*(one(t) for t in dict.fromkeys(topics)))
    return tuple(f for f in found if f is not None)


def fetch_broker(settings: ReadOptions, target: BrokerTarget) -> list[LogDirInfo] | None:
    """The log dirs of one broker, or None if it failed and `on_broker_error` is skip (else BrokerFetchError)."""
    try:
        return asyncio.run(_fetch(settings, target))
    except BrokerFetchError:
        if settings.on_broker_error == "skip":
            return None
        raise


async def _fetch(settings: ReadOptions, target: BrokerTarget) -> list[LogDirInfo]:
    where = f"broker {target.broker_id}" + (f" ({target.host}:{target.port})" if target.port else "")
    hint = '; set option on_broker_error="skip" to leave such brokers out'
    if not target.port:
        raise BrokerFetchError(f"kjbod: {where} is not in the cluster metadata{hint}")
    topics: Any = None if target.topics is None else {t: ps for t, ps in target.topics}
    timeout = settings.request_timeout
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    try:
        # The broker's own address is the bootstrap: Metadata and DescribeLogDirs share one connection, and a
        # down broker fails here instead of after a detour through another broker.  The client's own deadlines
        # end the call with its last error (e.g. connection refused); the outer timeout is only a safety net.
        async with asyncio.timeout(timeout + 1.0):
            admin = _client(f"{target.host}:{target.port}", settings)
            try:
                await admin.start(timeout=timeout)
                result = await admin.describe_log_dirs(
                    [target.broker_id], topics, timeout=max(end - loop.time(), 0.001))
            finally:
                await admin.close()
    except TimeoutError:
        raise BrokerFetchError(
            f"kjbod: {where} did not answer DescribeLogDirs within {timeout:g}s (request.timeout.ms){hint}"
        ) from None
    except KafkaError as e:
        raise BrokerFetchError(f"kjbod: {where} did not answer DescribeLogDirs: {e}{hint}") from None
    return result[target.broker_id]


def _dir_fields(d: LogDirInfo) -> tuple[str | None, str | None, int | None, int | None]:
    return (None if d.directory_id is None else str(d.directory_id),
            None if d.error is None else d.error.name, d.total_bytes, d.usable_bytes)


def to_columns(view: str, dirs: Sequence[LogDirInfo], snapshot_us: int,
               names: Sequence[str] | None = None) -> dict[str, list[Any]]:
    """Column lists for `view` (all columns, or `names`), with snapshot_ts as microseconds since the epoch."""
    cols: dict[str, list[Any]] = {name: [] for name, _ in columns_for(view)}
    if view == "replicas":
        for d in dirs:
            reps = d.replicas
            n = len(reps)
            if not n:
                continue
            dir_id, error, total, usable = _dir_fields(d)
            cols["broker_id"] += [d.broker_id] * n
            cols["log_dir"] += [d.path] * n
            cols["dir_id"] += [dir_id] * n
            cols["dir_error"] += [error] * n
            cols["dir_total_bytes"] += [total] * n
            cols["dir_usable_bytes"] += [usable] * n
            cols["topic"] += [r.topic for r in reps]
            cols["partition"] += [r.partition for r in reps]
            cols["size_bytes"] += [r.size for r in reps]
            cols["offset_lag"] += [r.offset_lag for r in reps]
            cols["is_future"] += [r.is_future for r in reps]
            cols["snapshot_ts"] += [snapshot_us] * n
    else:
        for d in dirs:
            dir_id, error, total, usable = _dir_fields(d)
            cols["broker_id"].append(d.broker_id)
            cols["log_dir"].append(d.path)
            cols["dir_id"].append(dir_id)
            cols["dir_error"].append(error)
            cols["dir_total_bytes"].append(total)
            cols["dir_usable_bytes"].append(usable)
            cols["replica_count"].append(len(d.replicas))
            cols["future_count"].append(sum(1 for r in d.replicas if r.is_future))
            cols["size_bytes"].append(sum(r.size for r in d.replicas))
            cols["dir_reserved_bytes"].append(d.reserved_bytes)
            cols["snapshot_ts"].append(snapshot_us)
    if names is None:
        return cols
    missing = [n for n in names if n not in cols]
    if missing:
        raise OptionError(f"kjbod: the {view} view has no column(s) {', '.join(missing)}; "
                          f"its columns are {', '.join(cols)}")
    return {n: cols[n] for n in names}


def to_record_batch(view: str, dirs: Sequence[LogDirInfo], snapshot_us: int, arrow_schema: Any) -> Any:
    """One `pyarrow.RecordBatch` with exactly `arrow_schema` (the Arrow form of the Spark schema in use)."""
    import pyarrow as pa

    cols = to_columns(view, dirs, snapshot_us, arrow_schema.names)
    arrays = [pa.array(cols[f.name], type=f.type) for f in arrow_schema]
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)
