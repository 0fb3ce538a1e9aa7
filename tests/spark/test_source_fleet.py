"""The `kjbod` data source against the simulated fleet (tools/bench/fleet.py): many brokers, faults on demand.

What a single live server cannot show is tested here: one input partition per broker across several brokers,
pushdown of broker filters, and brokers that are down (connection refused) or hang (accept, never answer).
"""

from __future__ import annotations

import datetime as dt
import re
import time

import pytest

from kjbod.admin import SyncAdminClient

pytestmark = pytest.mark.slow


def read(spark, fleet, **options):
    r = spark.read.format("kjbod").option("bootstrap.servers", fleet.bootstrap)
    for k, v in options.items():
        r = r.option(k.replace("_", ".") if k.endswith("_ms") else k, v)
    return r.load()


def expected_rows(fleet, brokers=None, topics=None):
    """What the admin client reports, flattened to the data source's replica columns (without snapshot_ts)."""
    with SyncAdminClient(fleet.bootstrap) as admin:
        result = admin.describe_log_dirs(brokers, topics)
    return sorted(
        (b, d.path, str(d.directory_id), None, d.total_bytes, d.usable_bytes, r.topic, r.partition, r.size,
         r.offset_lag, r.is_future)
        for b, dirs in result.items() for d in dirs for r in d.replicas)


def rows_of(df):
    return sorted(tuple(r)[:-1] for r in df.collect())


def test_rows_match_admin_client_one_partition_per_broker(spark, fleet):
    df = read(spark, fleet)
    assert df.columns == ["broker_id", "log_dir", "dir_id", "dir_error", "dir_total_bytes", "dir_usable_bytes",
                          "topic", "partition", "size_bytes", "offset_lag", "is_future", "snapshot_ts"]
    assert df.rdd.getNumPartitions() == 3
    rows = df.collect()
    assert sorted(tuple(r)[:-1] for r in rows) == expected_rows(fleet)
    assert len(rows) == 3 * 2 * 5
    stamps = {r.snapshot_ts for r in rows}
    assert len(stamps) == 1  # one plan, one snapshot time
    (stamp,) = stamps
    assert abs(stamp.replace(tzinfo=dt.UTC).timestamp() - time.time()) < 120


def test_log_dirs_view(spark, fleet):
    df = read(spark, fleet, view="log_dirs")
    rows = {(r.broker_id, r.log_dir): r for r in df.collect()}
    assert len(rows) == 6
    for b in fleet.broker_ids:
        for d in fleet.dirs(b):
            r = rows[(b, d.path)]
            assert (r.dir_id, r.dir_error, r.dir_total_bytes, r.dir_usable_bytes) == (
                str(d.directory_id), None, d.total_bytes, d.usable_bytes)
            assert (r.replica_count, r.future_count, r.size_bytes) == (
                len(d.replicas), 0, sum(x.size for x in d.replicas))


def test_broker_and_topic_options_are_sent_not_filtered(spark, fleet):
    df = read(spark, fleet, brokers="1,3", topics="topic-001,no-such-topic")
    assert df.rdd.getNumPartitions() == 2
    fleet.describe_requests.clear()
    rows = rows_of(df)
    assert rows == expected_rows(fleet, [1, 3], ["topic-001"])
    assert rows and {r[6] for r in rows} == {"topic-001"}
    asked = {b: topics for b, topics in fleet.describe_requests if b in (1, 3)}
    # Only brokers 1 and 3 were asked (the expected_rows call above asked the same two), and only for topic-001.
    assert {b for b, _ in fleet.describe_requests} == {1, 3}
    for topics in asked.values():
        assert [t for t, _ in topics] == ["topic-001"]


def test_spark_filters_are_pushed(spark, fleet):
    df = read(spark, fleet).where("broker_id IN (2, 3) AND topic = 'topic-002'")
    assert df.rdd.getNumPartitions() == 2
    fleet.describe_requests.clear()
    rows = rows_of(df)
    assert {b for b, _ in fleet.describe_requests} == {2, 3}
    assert all([t for t, _ in topics] == ["topic-002"] for _, topics in fleet.describe_requests)
    assert rows == expected_rows(fleet, [2, 3], ["topic-002"])
    # Everything was pushed: Spark has nothing left to filter.
    filter_node = re.compile(r"\bFilter \(")  # a Filter operator, not "RuntimeFilters: []"
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert not filter_node.search(plan), plan
    partial = read(spark, fleet).where("broker_id = 1 AND size_bytes > 0")
    assert filter_node.search(partial._jdf.queryExecution().executedPlan().toString())
    assert partial.rdd.getNumPartitions() == 1


def test_reads_work_with_pushdown_disabled(spark, fleet, pushdown_off):
    df = read(spark, fleet).where("broker_id = 2 AND topic = 'topic-000'")
    fleet.describe_requests.clear()
    rows = rows_of(df)
    assert rows == expected_rows(fleet, [2], ["topic-000"])
    # Without pushdown every broker is asked for everything and Spark filters the rows.
    assert {b for b, t in fleet.describe_requests if t is None} == {1, 2, 3}


def test_auto_registration_and_sql(spark, fleet):
    # No spark.dataSource.register call in this suite: the format resolves through the pyspark_kjbod module.
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW fleet_dirs USING kjbod "
              f"OPTIONS ('bootstrap.servers' '{fleet.bootstrap}', view 'log_dirs')")
    (row,) = spark.sql("SELECT count(*) AS n, sum(replica_count) AS r FROM fleet_dirs").collect()
    assert (row.n, row.r) == (6, 30)


def test_explicit_registration(spark, fleet):
    from kjbod.spark import KjbodDataSource

    spark.dataSource.register(KjbodDataSource)
    assert read(spark, fleet, view="log_dirs").count() == 6


def test_down_broker_fails_clearly_or_is_skipped(spark, fleet):
    fleet.set_down(2)
    started = time.monotonic()
    with pytest.raises(Exception, match=r"broker 2 \(127\.0\.0\.1:\d+\) did not answer DescribeLogDirs"):
        read(spark, fleet, request_timeout_ms="1500").collect()
    assert time.monotonic() - started < 30
    skipped = read(spark, fleet, on_broker_error="skip", request_timeout_ms="1500")
    assert skipped.rdd.getNumPartitions() == 3
    assert {r.broker_id for r in skipped.collect()} == {1, 3}


def test_hanging_broker_is_bounded_by_the_timeout(spark, fleet):
    fleet.set_hanging(3)
    started = time.monotonic()
    rows = read(spark, fleet, on_broker_error="skip", request_timeout_ms="2000",
                connect_timeout_ms="500").collect()
    took = time.monotonic() - started
    assert {r.broker_id for r in rows} == {1, 2}
    assert took < 20, took
    with pytest.raises(Exception, match=r"broker 3 .*did not answer DescribeLogDirs"):
        read(spark, fleet, request_timeout_ms="2000", connect_timeout_ms="500").collect()


def test_bad_options_are_named(spark, fleet):
    with pytest.raises(Exception, match="bootstrap.servers"):
        spark.read.format("kjbod").load().collect()
    with pytest.raises(Exception, match="on_broker_error"):
        read(spark, fleet, on_broker_error="maybe").collect()
    with pytest.raises(Exception, match="view"):
        read(spark, fleet, view="nope").schema  # noqa: B018


def test_unknown_broker_id(spark, fleet):
    with pytest.raises(Exception, match="broker 9 is not in the cluster metadata"):
        read(spark, fleet, brokers="1,9").collect()
    assert {r.broker_id for r in read(spark, fleet, brokers="1,9", on_broker_error="skip").collect()} == {1}
