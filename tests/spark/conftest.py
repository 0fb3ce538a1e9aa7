"""One Spark session for every Spark test (starting one costs 5-12 s), plus fleets and live servers.

The session runs `local[2]` with filter pushdown on (the per-test `pushdown_off` fixture turns it off where a test
needs Spark's default), quiet logs, small shuffles and the C1-only JIT, which starts faster.  Workers must run
this venv's interpreter (PYSPARK_PYTHON) and see the same environment, so both are set before the JVM starts.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from live import kjbod_server, kjbod_server_factory  # noqa: F401  (live-server fixtures)

from tools.bench.fleet import Fleet

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# No PYTHONPATH: workers import kjbod and pyspark_kjbod from the installed package, as a user's would, so the
# tests also check that the package ships what Spark's auto-registration needs.

PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from pyspark.sql import SparkSession

    quiet = Path(__file__).with_name("log4j2-quiet.properties")
    session = (
        SparkSession.builder.master("local[2]").appName("kjbod-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config(PUSHDOWN, "true")
        .config("spark.driver.extraJavaOptions",
                f"-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Dlog4j.configurationFile=file:{quiet}")
        .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def pushdown_off(spark) -> Iterator[None]:
    spark.conf.set(PUSHDOWN, "false")
    try:
        yield
    finally:
        spark.conf.set(PUSHDOWN, "true")


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    """3 brokers x 2 dirs x 5 partitions, over 3 topics (deterministic sizes)."""
    with Fleet.generate(brokers=3, dirs=2, partitions_per_dir=5, topics=3) as f:
        yield f
