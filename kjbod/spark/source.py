"""The `kjbod` PySpark data source: log-dir state of a Kafka cluster as a DataFrame, batch or streaming.

    df = spark.read.format("kjbod").option("bootstrap.servers", "127.0.0.1:9092").load()

Strategy:

* Planning (Spark's planning worker) asks the bootstrap servers for the broker list and returns one input
  partition per broker, so brokers are read in parallel, each by one task that connects to that broker only
  (`kjbod.spark.snapshot`).  Every partition of one plan carries the same `snapshot_ts`, taken at planning time,
  so the rows of one read form one snapshot and can be grouped by it.
* Filters on the broker and topic are sent to the brokers, never applied afterwards: the `brokers` and `topics`
  options, and, when `spark.sql.python.filterPushdown.enabled` is on, Spark's `broker_id = / IN` and
  `topic = / IN` filters.  A broker filter removes input partitions; a topic filter becomes the DescribeLogDirs
  request's topic list.  Both are exact, so Spark does not re-check them.
* The pushdown trap: with that setting off (Spark's default), Spark refuses to read from a reader that has a
  `pushFilters` method at all (DATA_SOURCE_PUSHDOWN_DISABLED).  Spark runs `pushFilters` only in one dedicated
  worker module, so `reader()` hands the pushdown-capable reader to that worker and the plain reader to every
  other caller: with pushdown off, reads work and Spark filters the rows itself.
* Errors: options are checked in `schema()` and `reader()`, before any task runs, with messages naming the
  option.  A broker that cannot answer within `request.timeout.ms` fails the read with a message naming the
  broker (`on_broker_error=fail`, the default) or is left out (`skip`).
* Streaming: `KjbodStreamReader` offers a new snapshot whenever `interval.ms` has passed since the last one.
  The offset is the snapshot's time (microseconds since the epoch), so offsets only grow, also across a restart
  from a checkpoint, and a batch re-run after a failure stamps its rows with the same time.  Every batch reads
  all brokers again (one input partition per broker).
* Everything pickled to workers (the source, readers, partitions) holds plain data only; connections are opened
  inside `partitions()` and `read()`.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import structlog
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    In,
    InputPartition,
    IsNotNull,
)
from pyspark.sql.types import (
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kjbod.spark.snapshot import (
    BrokerTarget,
    ReadOptions,
    columns_for,
    fetch_broker,
    list_brokers,
    to_record_batch,
)

__all__ = ["BrokerPartition", "KjbodDataSource", "KjbodReader", "KjbodStreamReader", "schema_for"]

log = structlog.get_logger("kjbod.spark")

_SQL_TYPES: dict[str, DataType] = {
    "INT": IntegerType(), "BIGINT": LongType(), "STRING": StringType(), "BOOLEAN": BooleanType(),
    "TIMESTAMP": TimestampType(),
}

# The worker module in which Spark calls pushFilters (see the module docstring).
_PUSHDOWN_WORKER = "pyspark.sql.worker.data_source_pushdown_filters"


def schema_for(view: str) -> StructType:
    """The Spark schema of `view` ("replicas" or "log_dirs")."""
    return StructType([StructField(name, _SQL_TYPES[kind], True) for name, kind in columns_for(view)])


@dataclass
class BrokerPartition(InputPartition):
    """One broker to read, and the snapshot time its rows carry."""

    target: BrokerTarget
    snapshot_us: int


def _now_us() -> int:
    return time.time_ns() // 1000


def _quiet_worker_logs() -> None:
    """Warnings and errors only, on stderr, in Spark's worker processes (structlog's default prints debug)."""
    if not structlog.is_configured():
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
                            logger_factory=structlog.PrintLoggerFactory(sys.stderr))


def _read_partition(settings: ReadOptions, schema: StructType, partition: InputPartition) -> Iterator[Any]:
    from pyspark.sql.pandas.types import to_arrow_schema

    if not isinstance(partition, BrokerPartition):
        return  # Spark turns an empty partition list into one placeholder partition: no broker, no rows
    _quiet_worker_logs()
    dirs = fetch_broker(settings, partition.target)
    if dirs is None:
        log.warning("broker left out (on_broker_error=skip)", broker_id=partition.target.broker_id)
        return
    # Spark compares a yielded batch's schema with exactly this (UTC timestamps), so build it the same way.
    batch = to_record_batch(settings.view, dirs, partition.snapshot_us, to_arrow_schema(schema, timezone="UTC"))
    if batch.num_rows:
        yield batch


class KjbodDataSource(DataSource):
    """Log dirs and replicas of a Kafka cluster (DescribeLogDirs), read from every broker in parallel.

    Options (all strings):

    * ``bootstrap.servers`` (required): ``host:port[,host:port...]``.
    * ``view``: ``replicas`` (default, one row per replica) or ``log_dirs`` (one row per log dir).
    * ``brokers``: comma-separated broker ids to read (default: every broker).
    * ``topics``: comma-separated topic names whose replicas to report (default: all).
    * ``on_broker_error``: ``fail`` (default) or ``skip`` (leave out a broker that does not answer).
    * ``request.timeout.ms`` (default 30000): how long one broker may take, retries included.
    * ``connect.timeout.ms`` (default 10000): how long one connection attempt may take.
    * ``interval.ms`` (streaming, default 10000): time between snapshots.

    >>> df = spark.read.format("kjbod").option("bootstrap.servers", "127.0.0.1:9092").load()
    >>> df.groupBy("broker_id", "log_dir").sum("size_bytes").show()
    """

    @classmethod
    def name(cls) -> str:
        return "kjbod"

    def _settings(self) -> ReadOptions:
        return ReadOptions.parse(self.options)

    def schema(self) -> StructType:
        return schema_for(self._settings().view)

    def reader(self, schema: StructType) -> DataSourceReader:
        settings = self._settings()
        if _in_pushdown_worker():
            return KjbodPushdownReader(schema, settings)
        return KjbodReader(schema, settings)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KjbodStreamReader(schema, self._settings())


def _in_pushdown_worker() -> bool:
    if _PUSHDOWN_WORKER in sys.modules:  # the daemon imports the worker module by name
        return True
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)  # without daemons: `python -m <module>`
    return spec is not None and spec.name == _PUSHDOWN_WORKER


class KjbodReader(DataSourceReader):
    """Batch reader: one input partition per broker."""

    def __init__(self, schema: StructType, settings: ReadOptions) -> None:
        self.schema = schema
        self.settings = settings
        self.pushed_brokers: frozenset[int] | None = None
        self.pushed_topics: frozenset[str] | None = None

    def partitions(self) -> list[InputPartition]:
        s = self.settings
        only = self.pushed_brokers
        if only is not None and (not only or (s.brokers is not None and not only & set(s.brokers))):
            return []  # the filters exclude every broker: nothing to ask anyone
        topics = _intersect(s.topics, self.pushed_topics)
        _quiet_worker_logs()
        snapshot_us = _now_us()
        targets = list_brokers(s, s.brokers, sorted(topics) if topics is not None else None, only=only)
        return [BrokerPartition(t, snapshot_us) for t in targets]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read_partition(self.settings, self.schema, partition)


class KjbodPushdownReader(KjbodReader):
    """The batch reader Spark's filter-pushdown worker gets: broker and topic filters become the request."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        for f in filters:
            if isinstance(f, IsNotNull) and f.attribute in _NEVER_NULL[self.settings.view]:
                continue  # always true: Spark adds these for every equality on the column
            column, values = _equality(f)
            if column == "broker_id" and all(isinstance(v, int) for v in values):
                self.pushed_brokers = _narrow(self.pushed_brokers, values)
            elif column == "topic" and self.settings.view == "replicas" and all(isinstance(v, str) for v in values):
                self.pushed_topics = _narrow(self.pushed_topics, values)
            else:
                yield f


# Columns that always have a value, per view.
_NEVER_NULL = {
    "replicas": {(c,) for c in ("broker_id", "log_dir", "topic", "partition", "size_bytes", "is_future",
                                "snapshot_ts")},
    "log_dirs": {(c,) for c in ("broker_id", "log_dir", "replica_count", "future_count", "size_bytes",
                                "snapshot_ts")},
}


def _equality(f: Filter) -> tuple[str | None, tuple[Any, ...]]:
    """(column, allowed values) for `col = v` and `col IN (...)` on a top-level column; (None, ()) otherwise."""
    if isinstance(f, EqualTo) and len(f.attribute) == 1 and f.value is not None:
        return f.attribute[0], (f.value,)
    if isinstance(f, In) and len(f.attribute) == 1 and None not in f.value:
        return f.attribute[0], tuple(f.value)
    return None, ()


def _narrow(current: frozenset[Any] | None, values: Iterable[Any]) -> frozenset[Any]:
    new = frozenset(values)
    return new if current is None else current & new


def _intersect(option: tuple[Any, ...] | None, pushed: frozenset[Any] | None) -> frozenset[Any] | None:
    if option is None:
        return pushed
    if pushed is None:
        return frozenset(option)
    return frozenset(option) & pushed


class KjbodStreamReader(DataSourceStreamReader):
    """A new snapshot of every broker's log dirs at most every `interval.ms`; the offset is the snapshot time."""

    def __init__(self, schema: StructType, settings: ReadOptions) -> None:
        self.schema = schema
        self.settings = settings
        self._latest_us = 0
        self._latest_at: float | None = None  # monotonic time the latest snapshot was offered

    def initialOffset(self) -> dict:
        return {"snapshot_us": 0}

    # The no-argument form (every 4.x release accepts it): there is no read limit to honour, a snapshot is whole.
    def latestOffset(self) -> dict:  # type: ignore[override]
        now = time.monotonic()
        if self._latest_at is None or now - self._latest_at >= self.settings.interval_ms / 1000:
            self._latest_at = now
            self._latest_us = max(_now_us(), self._latest_us + 1)
        return {"snapshot_us": self._latest_us}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        if end["snapshot_us"] <= start["snapshot_us"]:
            return []
        _quiet_worker_logs()
        s = self.settings
        return [BrokerPartition(t, end["snapshot_us"]) for t in list_brokers(s, s.brokers, s.topics)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read_partition(self.settings, self.schema, partition)

    def commit(self, end: dict) -> None:
        pass  # nothing to acknowledge: every snapshot is read whole from the brokers
