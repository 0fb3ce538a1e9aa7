"""`kjbod analyze` on a crafted history: every figure of report.json against numbers worked out by hand.

The cluster is a simulated fleet with a hand-written layout (the current snapshot); the history holds two earlier
snapshots written in the data source's own schema, one and two days before.  Along each series the values grow
by a fixed amount per day, so the least-squares rates are those amounts (to float precision: the run's snapshot
is taken a few seconds after "now").
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys

import pytest
from PIL import Image

from kjbod.cli.main import main
from kjbod.spark.analyze import CHART_SIZE
from tools.bench.fleet import Fleet, FleetDir, FleetReplica

pytestmark = pytest.mark.slow

STORAGE_ERROR = 56
# Current state.  used = total - usable: b1 d0 600 (60%), b1 d1 200 (20%), b2 d0 1000 (50%), b2 d1 offline.
LAYOUT = {
    1: [FleetDir("/b1/d0", total_bytes=1000, usable_bytes=400, replicas=[
            FleetReplica("t", 0, 500), FleetReplica("t", 1, 100)]),
        FleetDir("/b1/d1", total_bytes=1000, usable_bytes=800, replicas=[
            FleetReplica("t", 2, 150), FleetReplica("t", 0, 250, offset_lag=7, is_future=True)])],
    2: [FleetDir("/b2/d0", total_bytes=2000, usable_bytes=1000, replicas=[FleetReplica("t", 3, 900)],
                 reserved_bytes=200),
        FleetDir("/b2/d1", error=STORAGE_ERROR)],
}
# Two and one day(s) ago: (usable bytes per dir), (size per current replica).
PAST_USABLE = {(1, "/b1/d0"): (600, 500), (1, "/b1/d1"): (800, 800), (2, "/b2/d0"): (1200, 1100)}
PAST_SIZE = {(1, "t", 0): (300, 400), (1, "t", 1): (100, 100), (1, "t", 2): (50, 100), (2, "t", 3): (880, 890)}
TOTAL = {(1, "/b1/d0"): 1000, (1, "/b1/d1"): 1000, (2, "/b2/d0"): 2000}
DIR_OF = {(1, "t", 0): "/b1/d0", (1, "t", 1): "/b1/d0", (1, "t", 2): "/b1/d1", (2, "t", 3): "/b2/d0"}


def write_history(spark, history, now):
    from pyspark.sql import functions as F

    from kjbod.spark.source import schema_for

    dirs, reps = [], []
    for back in (2, 1):
        ts = now - dt.timedelta(days=back)
        i = 2 - back
        for (b, path), usable in PAST_USABLE.items():
            dirs.append((b, path, None, None, TOTAL[(b, path)], usable[i], 1, 0, 0, None, ts))
        for (b, t, p), sizes in PAST_SIZE.items():
            path = DIR_OF[(b, t, p)]
            reps.append((b, path, None, None, TOTAL[(b, path)], PAST_USABLE[(b, path)][i], t, p, sizes[i], 0,
                         False, ts))
    for name, rows in (("log_dirs", dirs), ("replicas", reps)):
        (spark.createDataFrame(rows, schema_for(name)).withColumn("date", F.to_date("snapshot_ts"))
         .write.mode("append").partitionBy("date").parquet(str(history / name)))


@pytest.fixture
def fleet_now():
    with Fleet(LAYOUT) as fleet:
        yield fleet


def test_report_figures_charts_and_appending_history(spark, fleet_now, tmp_path, capsys):
    out, history = tmp_path / "out", tmp_path / "history"
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    write_history(spark, history, now)

    args = ["analyze", "--bootstrap-server", fleet_now.bootstrap, "--out", str(out), "--history", str(history),
            "--top", "3"]
    assert main(args) == 0
    assert "report.json" in capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    snap = dt.datetime.fromisoformat(report["snapshot_ts"].replace("Z", "+00:00"))
    assert 0 <= (snap - now).total_seconds() < 300

    assert report["history"]["snapshots"] == 3
    assert report["totals"] == {"brokers": 2, "log_dirs": 4, "offline_log_dirs": 1, "replicas": 5,
                                "replica_bytes": 500 + 100 + 150 + 900}
    approx = pytest.approx
    b1, b2 = report["brokers"]
    d0, d1 = b1["dirs"]
    assert (d0["log_dir"], d0["used_bytes"], d0["usage_pct"], d0["replicas"], d0["replica_bytes"]) == (
        "/b1/d0", 600, 60.0, 2, 600)
    # used 400, 500, 600 on consecutive days: 100 bytes/day; 400 usable left -> 4 days.
    assert d0["growth_bytes_per_day"] == approx(100, rel=1e-3)
    assert d0["days_until_full"] == approx(4, rel=1e-3)
    assert (d1["usage_pct"], d1["replicas"], d1["future_replicas"]) == (20.0, 2, 1)
    assert d1["growth_bytes_per_day"] == approx(0, abs=1e-6) and d1["days_until_full"] is None
    # Usage 60% and 20%: max - min = 40 points; mean 40, population std 20 -> CV 0.5.
    assert b1["imbalance"] == {"dirs": 2, "max_minus_min_pct": approx(40.0),
                               "coefficient_of_variation": approx(0.5)}
    e0, e1 = b2["dirs"]
    # 1000 usable, 200 of them the reserve where appends stop: 800 / 100 a day.
    assert (e0["usage_pct"], e0["days_until_full"], e0["reserved_bytes"]) == (50.0, approx(8, rel=1e-3), 200)
    assert d0["reserved_bytes"] is None  # a broker that reports no reserve: the whole usable space counts
    assert e0["growth_bytes_per_day"] == approx(100, rel=1e-3)
    assert (e1["log_dir"], e1["error"], e1["usage_pct"], e1["total_bytes"]) == (
        "/b2/d1", "KAFKA_STORAGE_ERROR", None, None)
    assert b2["imbalance"] == {"dirs": 1, "max_minus_min_pct": 0.0, "coefficient_of_variation": 0.0}

    assert [(p["broker_id"], p["topic"], p["partition"], p["size_bytes"], p["log_dir"])
            for p in report["largest_partitions"]] == [
        (2, "t", 3, 900, "/b2/d0"), (1, "t", 0, 500, "/b1/d0"), (1, "t", 2, 150, "/b1/d1")]
    # Growth: t-0 +100/day, t-2 +50/day, t-3 +10/day; t-1 flat is not "growing".
    fastest = [(p["broker_id"], p["topic"], p["partition"], p["growth_bytes_per_day"])
               for p in report["fastest_growing_partitions"]]
    assert fastest == [(1, "t", 0, approx(100, rel=1e-3)), (1, "t", 2, approx(50, rel=1e-3)),
                       (2, "t", 3, approx(10, rel=1e-3))]
    assert report["moves_in_flight"] == [{
        "broker_id": 1, "topic": "t", "partition": 0, "from_dir": "/b1/d0", "to_dir": "/b1/d1",
        "current_size_bytes": 500, "future_size_bytes": 250, "offset_lag": 7, "progress_pct": 50.0}]
    series = [(p["broker_id"], p["log_dir"], p["usage_pct"]) for p in report["usage_history"]]
    assert series == [(1, "/b1/d0", 40.0), (1, "/b1/d0", 50.0), (1, "/b1/d0", 60.0),
                      (1, "/b1/d1", 20.0), (1, "/b1/d1", 20.0), (1, "/b1/d1", 20.0),
                      (2, "/b2/d0", 40.0), (2, "/b2/d0", 45.0), (2, "/b2/d0", 50.0)]

    for name in ("usage_by_dir.png", "usage_over_time.png"):
        assert report["charts"][name.removesuffix(".png")] == name
        with Image.open(out / name) as image:
            assert image.format == "PNG" and image.size == CHART_SIZE
            image.verify()
    markdown = (out / "report.md").read_text()
    assert "| 1 | `/b1/d0` | 60.00 |" in markdown and "offline (KAFKA_STORAGE_ERROR)" in markdown
    assert "| 1 | t-0 | `/b1/d0` | `/b1/d1` | 250 | 500 | 50.0 |" in markdown

    # A second run appends one more snapshot to the same history.
    fleet_now.grow(10)
    assert main(args) == 0
    again = json.loads((out / "report.json").read_text())
    assert again["history"]["snapshots"] == 4
    stamps = spark.read.parquet(str(history / "replicas")).select("snapshot_ts").distinct().count()
    assert stamps == 4
    assert again["largest_partitions"][0]["size_bytes"] == 910


def test_cli_errors_are_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "kjbod", "analyze", "--bootstrap-server", "127.0.0.1:1",
                           "--out", str(tmp_path), "--timeout", "1"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("kjbod: error: cannot reach the cluster")
    done = subprocess.run([sys.executable, "-m", "kjbod", "analyze", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--bootstrap-server" in done.stderr and done.stderr.count("\n") == 1


def test_a_down_broker_fails_the_run_in_one_line(spark, tmp_path, capsys):
    layout = {1: [FleetDir("/a")], 2: [FleetDir("/b")]}
    with Fleet(layout) as fleet:
        fleet.set_down(2)
        code = main(["analyze", "--bootstrap-server", fleet.bootstrap, "--out", str(tmp_path), "--timeout", "2"])
    err = capsys.readouterr().err
    assert code == 2
    # One line from the command (a client of another test in this process may log its own lines meanwhile).
    said = [line for line in err.splitlines() if line.startswith("kjbod")]
    assert len(said) == 1 and said[0].startswith("kjbod: error: analysis failed: broker 2 (127.0.0.1:"), err
    assert "Traceback" not in err
