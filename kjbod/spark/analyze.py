"""`kjbod analyze`: snapshot the cluster's log dirs into a Parquet history, then report usage, balance and growth.

Strategy: one Spark job over the `kjbod` data source.

1. Snapshot: read the `log_dirs` and `replicas` views once each and stamp both with the same snapshot time, so
   the two tables describe one moment.  Append them to the history (`HISTORY/log_dirs`, `HISTORY/replicas`),
   Parquet partitioned by `date` (UTC), so the history grows by one snapshot per run and old days can be
   dropped by deleting folders.
2. Analyse the history with Spark SQL (it may hold months of snapshots of a large fleet); only the small results
   come back to the driver.  Growth rates are least-squares slopes (`regr_slope`) over the snapshots of the last
   `window_days` before the newest one, in bytes per day; one snapshot gives no rate.
3. Write `report.json` (every figure), `report.md` (the same for people) and two PNG charts drawn with
   matplotlib's Agg backend at a fixed size: usage per log dir per broker, and usage over time, each with a
   legend that names the dirs by broker, path and KIP-858 id (a chart whose lines cannot be told apart shows
   nothing).

Definitions (also in the README): a dir's used bytes are `total - usable` of its volume, usage % is
`100 * used / total`.  A broker's imbalance compares the usage % of its online dirs: max - min, and the
coefficient of variation (population standard deviation / mean).  Days until full: the usable bytes above the
dir's reserve (kjbod's `log.dir.reserved.bytes`, reported by DescribeLogDirs; 0 when a broker does not report
it), where appends stop, / the dir's growth rate of used bytes, only when that rate is positive.  A move in flight is a future replica (the copy a
log-dir move is building) next to its current replica; progress is future size / current size.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kjbod.storage.ids import uuid_to_str

__all__ = ["AnalyzeSettings", "CHART_SIZE", "run_analysis"]

CHART_SIZE = (1200, 600)  # pixels, width x height, of every PNG chart
_DPI = 100
_US_PER_DAY = 86_400_000_000


@dataclass
class AnalyzeSettings:
    bootstrap_servers: str
    out: Path
    history: Path | None = None  # default: OUT/history
    top: int = 10  # rows in the largest / fastest-growing partition lists
    window_days: float = 7.0  # history used for growth rates
    on_broker_error: str = "fail"
    request_timeout_ms: int = 30_000
    extra_options: dict[str, str] = field(default_factory=dict)

    @property
    def history_dir(self) -> Path:
        return self.history if self.history is not None else self.out / "history"


def _iso(ts: dt.datetime | None) -> str | None:
    if ts is None:
        return None
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=dt.UTC)  # the session runs in UTC
    return ts.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def _snapshot(spark: Any, s: AnalyzeSettings, snapshot_time: dt.datetime) -> None:
    from pyspark.sql import functions as F

    def view(name: str) -> Any:
        reader = (spark.read.format("kjbod").option("bootstrap.servers", s.bootstrap_servers)
                  .option("view", name).option("on_broker_error", s.on_broker_error)
                  .option("request.timeout.ms", str(s.request_timeout_ms)))
        for k, v in s.extra_options.items():
            reader = reader.option(k, v)
        # One time for both tables: they are read one after the other but describe one snapshot.
        return (reader.load().withColumn("snapshot_ts", F.lit(snapshot_time).cast("timestamp"))
                .withColumn("date", F.to_date("snapshot_ts")))

    for name in ("log_dirs", "replicas"):
        view(name).write.mode("append").partitionBy("date").parquet(str(s.history_dir / name))


def _ensure_registered(spark: Any) -> None:
    """Registers the source only where PySpark did not find it by itself (pyspark_kjbod not on the path)."""
    from pyspark.errors import AnalysisException

    try:
        # Resolving the format runs only the source's schema(): no broker is contacted.
        spark.read.format("kjbod").option("bootstrap.servers", "127.0.0.1:9092").load()
    except AnalysisException as e:
        if "DATA_SOURCE_NOT_FOUND" not in str(e):
            raise
        from kjbod.spark.source import KjbodDataSource

        spark.dataSource.register(KjbodDataSource)


def run_analysis(spark: Any, s: AnalyzeSettings, *, snapshot_time: dt.datetime | None = None) -> dict[str, Any]:
    """Takes a snapshot, appends it to the history, writes the report files into `s.out`; returns the report."""
    _ensure_registered(spark)
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    s.out.mkdir(parents=True, exist_ok=True)
    now = (snapshot_time or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).replace(microsecond=0)
    _snapshot(spark, s, now)
    report = _analyse(spark, s, now)
    charts = _charts(report, s.out)
    report["charts"] = charts
    (s.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (s.out / "report.md").write_text(_markdown(report))
    return report


def _analyse(spark: Any, s: AnalyzeSettings, now: dt.datetime) -> dict[str, Any]:
    from pyspark.sql import functions as F

    # mergeSchema: snapshots taken before a column was added (dir_reserved_bytes) read as null there.
    dirs_all = spark.read.option("mergeSchema", "true").parquet(str(s.history_dir / "log_dirs"))
    reps_all = spark.read.parquet(str(s.history_dir / "replicas"))
    now_lit = F.lit(now).cast("timestamp")
    # Days relative to the newest snapshot: small numbers keep the regression exact in doubles.
    days = (F.expr("unix_micros(snapshot_ts)") - F.lit(int(now.timestamp() * 1_000_000))) / F.lit(_US_PER_DAY)
    window_start = F.lit(now - dt.timedelta(days=s.window_days)).cast("timestamp")

    used = F.col("dir_total_bytes") - F.col("dir_usable_bytes")
    dirs_all = dirs_all.withColumn("used_bytes", used).withColumn(
        "usage_pct", F.when(F.col("dir_error").isNull() & (F.col("dir_total_bytes") > 0),
                            100.0 * used / F.col("dir_total_bytes")))
    dirs_now = dirs_all.where(F.col("snapshot_ts") == now_lit)
    in_window = (F.col("snapshot_ts") >= window_start) & (F.col("snapshot_ts") <= now_lit)

    dir_growth = (dirs_all.where(in_window & F.col("used_bytes").isNotNull()).withColumn("x", days)
                  .groupBy("broker_id", "log_dir")
                  .agg(F.expr("regr_slope(used_bytes, x)").alias("growth"),
                       F.countDistinct("snapshot_ts").alias("points")))
    dir_rows = (dirs_now.join(dir_growth, ["broker_id", "log_dir"], "left")
                .orderBy("broker_id", "log_dir").collect())

    snapshots = dirs_all.agg(F.countDistinct("snapshot_ts").alias("n"), F.min("snapshot_ts").alias("first"),
                             F.max("snapshot_ts").alias("last")).collect()[0]

    reps_now = reps_all.where(F.col("snapshot_ts") == now_lit)
    current = reps_now.where(~F.col("is_future"))
    largest = current.orderBy(F.col("size_bytes").desc(), "broker_id", "topic", "partition").limit(s.top).collect()

    rep_growth = (reps_all.where(in_window & ~F.col("is_future")).withColumn("x", days)
                  .groupBy("broker_id", "topic", "partition")
                  .agg(F.expr("regr_slope(size_bytes, x)").alias("growth"),
                       F.countDistinct("snapshot_ts").alias("points"))
                  .where((F.col("points") >= 2) & (F.col("growth") > 0)))
    fastest = (rep_growth.join(current.select("broker_id", "topic", "partition", "log_dir", "size_bytes"),
                               ["broker_id", "topic", "partition"])
               .orderBy(F.col("growth").desc(), "broker_id", "topic", "partition").limit(s.top).collect())

    future = reps_now.where(F.col("is_future")).select(
        "broker_id", "topic", "partition", F.col("log_dir").alias("to_dir"),
        F.col("size_bytes").alias("future_size"), F.col("offset_lag").alias("future_lag"))
    moves = (future.join(current.select("broker_id", "topic", "partition", F.col("log_dir").alias("from_dir"),
                                        F.col("size_bytes").alias("current_size")),
                         ["broker_id", "topic", "partition"], "left")
             .orderBy("broker_id", "topic", "partition").collect())

    history_series = (dirs_all.where(F.col("usage_pct").isNotNull())
                      .select("broker_id", "log_dir", "snapshot_ts", "usage_pct")
                      .orderBy("broker_id", "log_dir", "snapshot_ts").collect())
    totals = reps_now.agg(F.count(F.lit(1)).alias("replicas"),
                          F.sum(F.when(~F.col("is_future"), F.col("size_bytes"))).alias("bytes")).collect()[0]

    brokers: dict[int, dict[str, Any]] = {}
    for r in dir_rows:
        growth = r.growth if r.points is not None and r.points >= 2 else None
        days_left = None
        reserve = r.dir_reserved_bytes or 0
        if growth is not None and growth > 0 and r.dir_usable_bytes is not None:
            days_left = max(r.dir_usable_bytes - reserve, 0) / growth
        b = brokers.setdefault(r.broker_id, {"broker_id": r.broker_id, "dirs": []})
        b["dirs"].append({
            "log_dir": r.log_dir, "dir_id": r.dir_id, "error": r.dir_error,
            "total_bytes": r.dir_total_bytes, "usable_bytes": r.dir_usable_bytes, "used_bytes": r.used_bytes,
            "reserved_bytes": r.dir_reserved_bytes,
            "usage_pct": r.usage_pct, "replicas": r.replica_count, "future_replicas": r.future_count,
            "replica_bytes": r.size_bytes, "growth_bytes_per_day": growth, "days_until_full": days_left,
        })
    for b in brokers.values():
        b["imbalance"] = _imbalance([d["usage_pct"] for d in b["dirs"] if d["usage_pct"] is not None])

    return {
        "version": 1,
        "generated_at": _iso(dt.datetime.now(dt.UTC)),
        "bootstrap_servers": s.bootstrap_servers,
        "snapshot_ts": _iso(now),
        "history": {"path": str(s.history_dir), "snapshots": snapshots.n, "first": _iso(snapshots.first),
                    "last": _iso(snapshots.last), "window_days": s.window_days},
        "totals": {"brokers": len(brokers), "log_dirs": len(dir_rows),
                   "offline_log_dirs": sum(1 for r in dir_rows if r.dir_error is not None),
                   "replicas": totals.replicas, "replica_bytes": totals.bytes or 0},
        "brokers": [brokers[k] for k in sorted(brokers)],
        "largest_partitions": [
            {"broker_id": r.broker_id, "log_dir": r.log_dir, "topic": r.topic, "partition": r.partition,
             "size_bytes": r.size_bytes} for r in largest],
        "fastest_growing_partitions": [
            {"broker_id": r.broker_id, "log_dir": r.log_dir, "topic": r.topic, "partition": r.partition,
             "size_bytes": r.size_bytes, "growth_bytes_per_day": r.growth} for r in fastest],
        "moves_in_flight": [
            {"broker_id": r.broker_id, "topic": r.topic, "partition": r.partition, "from_dir": r.from_dir,
             "to_dir": r.to_dir, "current_size_bytes": r.current_size, "future_size_bytes": r.future_size,
             "offset_lag": r.future_lag,
             "progress_pct": (100.0 * r.future_size / r.current_size) if r.current_size else None}
            for r in moves],
        "usage_history": [
            {"broker_id": r.broker_id, "log_dir": r.log_dir, "snapshot_ts": _iso(r.snapshot_ts),
             "usage_pct": r.usage_pct} for r in history_series],
    }


def _imbalance(usages: list[float]) -> dict[str, Any]:
    """max - min and coefficient of variation (population std / mean) of a broker's dir usage %."""
    if not usages:
        return {"dirs": 0, "max_minus_min_pct": None, "coefficient_of_variation": None}
    mean = sum(usages) / len(usages)
    std = (sum((u - mean) ** 2 for u in usages) / len(usages)) ** 0.5
    return {"dirs": len(usages), "max_minus_min_pct": max(usages) - min(usages),
            "coefficient_of_variation": (std / mean) if mean else None}


# ------------------------------------------------------------------------------------------------ charts

LEGEND_MAX = 20  # dirs a chart names one by one in its legend; above, the fullest (or each dir slot) are named


def _kafka_id(dir_id: str | None) -> str | None:
    """A dir id in Kafka's text form, as in meta.properties (the data source gives the uuid's hex form)."""
    if not dir_id:
        return None
    try:
        return uuid_to_str(uuid.UUID(dir_id).bytes)
    except ValueError:
        return dir_id


def dir_label(broker_id: int, log_dir: str, dir_id: str | None) -> str:
    """How a chart names a log dir: broker, path and KIP-858 id."""
    return f"broker {broker_id} {log_dir} ({_kafka_id(dir_id) or 'no id'})"


def _labels(report: dict[str, Any]) -> dict[tuple[int, str], str]:
    return {(b["broker_id"], d["log_dir"]): dir_label(b["broker_id"], d["log_dir"], d.get("dir_id"))
            for b in report["brokers"] for d in b["dirs"]}


def _usage_by_dir(report: dict[str, Any], plt: Any) -> Any:
    """Bars of usage % per dir, grouped by broker.  Up to LEGEND_MAX dirs each has its own colour and legend
    entry (broker, path, id); above, the colour is the dir's position in its broker and the legend names the
    positions (with the path, when every broker has the same one there)."""
    fig, ax = plt.subplots(figsize=(CHART_SIZE[0] / _DPI, CHART_SIZE[1] / _DPI), dpi=_DPI)
    brokers = report["brokers"]
    labels = _labels(report)
    each = len(labels) <= LEGEND_MAX
    palette = plt.cm.tab20 if each else plt.cm.tab10
    width = 0.8 / max((len(b["dirs"]) for b in brokers), default=1)
    slot_paths: dict[int, set[str]] = {}
    n = 0
    for bi, b in enumerate(brokers):
        for di, d in enumerate(b["dirs"]):
            slot_paths.setdefault(di, set()).add(d["log_dir"])
            x = bi - 0.4 + width * (di + 0.5)
            colour = palette(n % 20) if each else palette(di % 10)
            label = labels[(b["broker_id"], d["log_dir"])] if each else None
            if d["usage_pct"] is None:
                label = f"{label}: offline" if label else None
                ax.bar(x, 100, width, color="none", edgecolor=colour, hatch="//", label=label)
            else:
                ax.bar(x, d["usage_pct"], width, color=colour, label=label)
            n += 1
    if not each:
        for di, paths in sorted(slot_paths.items()):
            name = f"dir #{di + 1} of each broker" + (f": {next(iter(paths))}" if len(paths) == 1 else "")
            ax.bar(0, 0, 0, color=palette(di % 10), label=name)
    if n:
        title = None if each else f"{n} dirs (ids in report.md)"
        ax.legend(fontsize="small", loc="upper right", title=title, title_fontsize="small")
    ax.set_xticks(range(len(brokers)), [str(b["broker_id"]) for b in brokers],
                  rotation=90 if len(brokers) > 20 else 0)
    ax.set_ylim(0, 100)
    ax.set_xlabel("broker (one bar per log dir; hatched: offline)")
    ax.set_ylabel("volume usage %")
    ax.set_title(f"Log dir usage per broker at {report['snapshot_ts']}")
    return fig


def _usage_over_time(report: dict[str, Any], plt: Any) -> Any:
    """A line of usage % per dir.  The legend names each dir (broker, path, id); with more than LEGEND_MAX, the
    LEGEND_MAX fullest at the last snapshot are drawn in colour and named, the others in grey."""
    fig, ax = plt.subplots(figsize=(CHART_SIZE[0] / _DPI, CHART_SIZE[1] / _DPI), dpi=_DPI)
    labels = _labels(report)
    series: dict[tuple[int, str], tuple[list[dt.datetime], list[float]]] = {}
    for p in report["usage_history"]:
        xs, ys = series.setdefault((p["broker_id"], p["log_dir"]), ([], []))
        xs.append(dt.datetime.fromisoformat(p["snapshot_ts"].replace("Z", "+00:00")))
        ys.append(p["usage_pct"])
    named = sorted(series, key=lambda k: (-series[k][1][-1], k))[:LEGEND_MAX]
    for key, (xs, ys) in sorted(series.items(), key=lambda kv: kv[0] in named):  # named lines drawn on top
        if key in named:
            label = labels.get(key) or dir_label(key[0], key[1], None)
            ax.plot(xs, ys, marker="o", markersize=3, label=label)  # type: ignore[arg-type]
        else:
            ax.plot(xs, ys, color="0.8", linewidth=0.8)  # type: ignore[arg-type]
    if series:
        title = None if len(series) <= LEGEND_MAX else f"the {LEGEND_MAX} fullest of {len(series)} dirs"
        ax.legend(fontsize="small", loc="upper left", title=title, title_fontsize="small")
    ax.set_ylim(0, 100)
    ax.set_xlabel("snapshot time (UTC)")
    ax.set_ylabel("volume usage %")
    ax.set_title("Log dir usage over time")
    fig.autofmt_xdate()
    return fig


def _charts(report: dict[str, Any], out: Path) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    files = {"usage_by_dir": "usage_by_dir.png", "usage_over_time": "usage_over_time.png"}
    for name, draw in (("usage_by_dir", _usage_by_dir), ("usage_over_time", _usage_over_time)):
        fig = draw(report, plt)
        fig.savefig(out / files[name], dpi=_DPI)
        plt.close(fig)
    return files


# ------------------------------------------------------------------------------------------------ markdown

def _num(v: Any, digits: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return f"{v:,}"


def _markdown(r: dict[str, Any]) -> str:
    t = r["totals"]
    lines = [
        "# kjbod log-dir report", "",
        f"Snapshot {r['snapshot_ts']} of `{r['bootstrap_servers']}`: {t['brokers']} brokers, {t['log_dirs']} log dirs "
        f"({t['offline_log_dirs']} offline), {t['replicas']:,} replicas, {t['replica_bytes']:,} bytes.",
        f"History: {r['history']['snapshots']} snapshots from {r['history']['first']} to {r['history']['last']} "
        f"in `{r['history']['path']}`; growth rates use the last {r['history']['window_days']:g} days.", "",
        "## Log dirs", "",
        "| broker | log dir | usage % | used bytes | usable bytes | replicas | growth bytes/day | days until full "
        "| directory id |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for b in r["brokers"]:
        for d in b["dirs"]:
            usage = f"offline ({d['error']})" if d["error"] else _num(d["usage_pct"], 2)
            lines.append(f"| {b['broker_id']} | `{d['log_dir']}` | {usage} | {_num(d['used_bytes'])} | "
                         f"{_num(d['usable_bytes'])} | {_num(d['replicas'])} | {_num(d['growth_bytes_per_day'])} | "
                         f"{_num(d['days_until_full'])} | {_kafka_id(d.get('dir_id')) or '-'} |")
    lines += ["", "## Imbalance between each broker's dirs", "",
              "| broker | online dirs | max - min usage (points) | coefficient of variation |", "|---|---|---|---|"]
    for b in r["brokers"]:
        i = b["imbalance"]
        lines.append(f"| {b['broker_id']} | {i['dirs']} | {_num(i['max_minus_min_pct'], 2)} | "
                     f"{_num(i['coefficient_of_variation'], 3)} |")
    lines += ["", "## Largest partitions", "", "| broker | topic-partition | log dir | bytes |", "|---|---|---|---|"]
    lines += [f"| {p['broker_id']} | {p['topic']}-{p['partition']} | `{p['log_dir']}` | {p['size_bytes']:,} |"
              for p in r["largest_partitions"]]
    lines += ["", "## Fastest-growing partitions", "", "| broker | topic-partition | bytes | growth bytes/day |",
              "|---|---|---|---|"]
    lines += [f"| {p['broker_id']} | {p['topic']}-{p['partition']} | {p['size_bytes']:,} | "
              f"{_num(p['growth_bytes_per_day'])} |" for p in r["fastest_growing_partitions"]]
    lines += ["", "## Moves in flight", ""]
    if r["moves_in_flight"]:
        lines += ["| broker | topic-partition | from | to | copied bytes | of | progress % |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {m['broker_id']} | {m['topic']}-{m['partition']} | `{m['from_dir']}` | `{m['to_dir']}` | "
                  f"{m['future_size_bytes']:,} | {_num(m['current_size_bytes'])} | {_num(m['progress_pct'])} |"
                  for m in r["moves_in_flight"]]
    else:
        lines.append("None.")
    charts = r.get("charts", {})
    lines += ["", "## Charts", ""] + [f"![{k}]({v})" for k, v in charts.items()] + [""]
    return "\n".join(lines)
