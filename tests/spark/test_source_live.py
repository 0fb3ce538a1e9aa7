"""The `kjbod` data source against a real `kjbod serve` holding known data.

The server runs with a counting hook on its DescribeLogDirs handler (counting_server.py), so the tests see, on
the server side, which topics each request asked for.  Known data: topics created through the admin client and
records produced with kafka-python.  Expected rows come from the admin client's `describe_log_dirs()`.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path

import live
import pytest

from kjbod.admin import NewTopic, SyncAdminClient
from tools.bench.fleet import Fleet, FleetDir, FleetReplica

with warnings.catch_warnings():
    # kafka-python's package import uses importlib.resources.read_text, deprecated in 3.11; only the import warns.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaProducer

pytestmark = pytest.mark.slow

HOOK = Path(__file__).with_name("counting_server.py")
TOPICS = {"alpha": 3, "beta": 2, "gamma": 1}


class CountedServer:
    def __init__(self, server: live.LiveServer, record: Path) -> None:
        self.server = server
        self.record = record

    @property
    def bootstrap(self) -> str:
        return self.server.bootstrap

    def requests(self) -> list[list | None]:
        """The topic list of every DescribeLogDirs the server answered so far (None: all topics)."""
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines() if line]

    def reset(self) -> None:
        self.record.write_text("")


def produce(bootstrap: str, per_partition: dict[tuple[str, int], int], value_size: int = 200) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    try:
        futures = [producer.send(t, value=bytes([65 + i % 26]) * value_size, partition=p)
                   for (t, p), n in per_partition.items() for i in range(n)]
        producer.flush(60)
        for f in futures:
            f.get(timeout=0)
    finally:
        producer.close(timeout=10)


@pytest.fixture(scope="module")
def counted(tmp_path_factory) -> CountedServer:
    directory = tmp_path_factory.mktemp("live-spark")
    record = directory / "describe_log_dirs.jsonl"
    saved = live.COMMAND
    live.COMMAND = (sys.executable, str(HOOK), str(record))  # `kjbod` with the counting hook installed
    try:
        server = live.start_server(directory / "node")
    finally:
        live.COMMAND = saved
    try:
        with SyncAdminClient(server.bootstrap, request_timeout=20) as admin:
            admin.create_topics([NewTopic(t, n, 1) for t, n in TOPICS.items()])
        produce(server.bootstrap, {(t, p): 5 * (p + 1) for t, n in TOPICS.items() for p in range(n)})
        yield CountedServer(server, record)
    finally:
        server.stop()


# The free space of a real volume moves with everything else on the machine, so rows are compared without
# dir_usable_bytes (column 5), which is only checked for sanity.
def admin_rows(bootstrap: str, topics=None):
    with SyncAdminClient(bootstrap) as admin:
        result = admin.describe_log_dirs(None, topics)
    return sorted(
        (b, d.path, str(d.directory_id), None if d.error is None else d.error.name, d.total_bytes,
         r.topic, r.partition, r.size, r.offset_lag, r.is_future)
        for b, dirs in result.items() for d in dirs for r in d.replicas)


def spark_rows(df):
    rows = df.collect()
    assert all(0 < r.dir_usable_bytes <= r.dir_total_bytes for r in rows)
    return sorted(tuple(r)[:5] + tuple(r)[6:-1] for r in rows)


def reader(spark, bootstrap):
    return spark.read.format("kjbod").option("bootstrap.servers", bootstrap)


def test_rows_equal_admin_client(spark, counted):
    df = reader(spark, counted.bootstrap).load()
    assert df.rdd.getNumPartitions() == 1  # one broker
    rows = spark_rows(df)
    expected = admin_rows(counted.bootstrap)
    assert rows == expected
    assert sorted((r[5], r[6]) for r in rows) == sorted((t, p) for t, n in TOPICS.items() for p in range(n))
    assert all(r[7] > 0 for r in rows)  # every partition holds produced records
    # Sizes follow the produced amounts: partition p of a topic got 5 * (p + 1) records.
    sizes = {(r[5], r[6]): r[7] for r in rows}
    assert sizes[("alpha", 0)] < sizes[("alpha", 1)] < sizes[("alpha", 2)]


def test_log_dirs_view_equals_admin_client(spark, counted):
    rows = reader(spark, counted.bootstrap).option("view", "log_dirs").load().collect()
    with SyncAdminClient(counted.bootstrap) as admin:
        dirs = admin.describe_log_dirs()[1]
    assert sorted((r.log_dir, r.dir_id, r.dir_total_bytes, r.replica_count, r.size_bytes) for r in rows) == sorted(
        (d.path, str(d.directory_id), d.total_bytes, len(d.replicas), sum(x.size for x in d.replicas))
        for d in dirs)
    assert sorted(r.log_dir for r in rows) == sorted(str(p) for p in counted.server.log_dirs)
    # The source asks for kjbod's directory-id extension: every dir has its KIP-858 id.
    assert {r.log_dir: r.dir_id for r in rows} == {
        str(p): str(live.kafka_uuid(live.read_meta_properties(p)["directory.id"])) for p in counted.server.log_dirs}


def test_topics_option_is_sent_to_the_server(spark, counted):
    df = reader(spark, counted.bootstrap).option("topics", "beta,no-such-topic").load()
    counted.reset()
    rows = spark_rows(df)
    asked = counted.requests()
    assert asked == [[["beta", [0, 1]]]]  # one request, for beta's partitions only
    assert rows == admin_rows(counted.bootstrap, ["beta"])


def test_spark_filter_is_pushed_to_the_server(spark, counted):
    df = reader(spark, counted.bootstrap).load().where("topic IN ('gamma', 'alpha') AND broker_id = 1")
    counted.reset()
    rows = spark_rows(df)
    assert [sorted(t for t, _ in topics) for topics in counted.requests()] == [["alpha", "gamma"]]
    assert rows == admin_rows(counted.bootstrap, ["alpha", "gamma"])
    df = reader(spark, counted.bootstrap).load().where("broker_id = 2")  # no such broker: nobody is asked
    counted.reset()
    assert df.count() == 0  # (Spark runs one empty placeholder partition when a source plans none)
    assert counted.requests() == []


def test_down_broker_next_to_a_live_one(spark, counted):
    """A fleet whose Metadata lists the live server as broker 1, a simulated broker 2 that goes down, and an
    empty simulated broker 3 (the bootstrap)."""
    layout = {2: [FleetDir("/sim/d0", replicas=[FleetReplica("sim", 0, 123)])], 3: []}
    with Fleet(layout, external={1: ("127.0.0.1", counted.server.port)}) as fleet:
        fleet.set_down(2)
        base = reader(spark, fleet.bootstrap).option("request.timeout.ms", "2000")
        started = time.monotonic()
        with pytest.raises(Exception, match=r"broker 2 \(127\.0\.0\.1:\d+\) did not answer DescribeLogDirs"):
            base.load().collect()
        skipped = base.option("on_broker_error", "skip").load()
        assert skipped.rdd.getNumPartitions() == 3
        rows = spark_rows(skipped)
        assert time.monotonic() - started < 60
    assert rows == admin_rows(counted.bootstrap)


def test_stream_sizes_change_between_micro_batches(spark, counted, tmp_path):
    stream = (spark.readStream.format("kjbod").option("bootstrap.servers", counted.bootstrap)
              .option("topics", "gamma").option("interval.ms", "3000").load())
    query = (stream.writeStream.format("memory").queryName("live_stream")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime="500 milliseconds").start())
    try:
        done = 0
        deadline = time.monotonic() + 120
        while done < 3:
            assert time.monotonic() < deadline, f"only {done} micro-batches"
            assert query.exception() is None, query.exception()
            batches = sum(1 for p in query.recentProgress if p["numInputRows"] > 0)
            if batches > done:
                done = batches
                if done < 3:
                    produce(counted.bootstrap, {("gamma", 0): 20})  # between this batch and the next
            time.sleep(0.1)
    finally:
        query.stop()
    rows = spark.sql("SELECT snapshot_ts, count(*) AS n, sum(size_bytes) AS size, collect_set(topic) AS topics "
                     "FROM live_stream GROUP BY snapshot_ts ORDER BY snapshot_ts").collect()
    assert len(rows) >= 3
    sizes = [r.size for r in rows[:3]]
    assert sizes[0] < sizes[1] < sizes[2], sizes
    assert all(r.n == 1 and r.topics == ["gamma"] for r in rows)
