"""`kjbod analyze`: the Spark analytics job over log-dir state (needs the `spark` extra and Java 17+).

Strategy: everything that can be checked without Spark is checked first (arguments, the extra, Java, that the
cluster answers), so a mistake costs a second, not a JVM start, and ends as one line with exit code 2.  Then a
Spark session is built (`--master`, local by default; an already active session in this process is reused and
left running) and `kjbod.spark.analyze.run_analysis` does the work.  A failure inside the Spark job is reduced to
its kjbod message when there is one (e.g. which broker did not answer).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import sys
from pathlib import Path

__all__ = ["add_subcommand"]


def add_subcommand(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("analyze", help="snapshot log dirs into a Parquet history and write a usage report (Spark)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="Kafka bootstrap server(s)")
    p.add_argument("--out", required=True, metavar="DIR", help="where report.json, report.md and charts go")
    p.add_argument("--history", metavar="DIR", help="Parquet history (default: OUT/history)")
    p.add_argument("--master", default="local[*]", metavar="URL", help="Spark master (default: local[*])")
    p.add_argument("--top", type=int, default=10, help="partitions listed as largest / fastest-growing")
    p.add_argument("--window-days", type=float, default=7.0, help="history used for growth rates (days)")
    p.add_argument("--on-broker-error", choices=("fail", "skip"), default="fail",
                   help="a broker that does not answer fails the run, or is left out")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds each broker may take to answer")
    p.set_defaults(func=_cmd_analyze)


def _check(args: argparse.Namespace) -> None:
    from kjbod.admin import KafkaError, SyncAdminClient, parse_bootstrap_servers
    from kjbod.cli.main import UserError

    try:
        parse_bootstrap_servers(args.bootstrap_server)
    except ValueError as e:
        raise UserError(f"--bootstrap-server: {e}") from None
    if args.top < 1 or args.window_days <= 0 or args.timeout <= 0:
        raise UserError("--top, --window-days and --timeout must be positive")
    for option, path in (("--out", args.out), ("--history", args.history)):
        if path is not None and Path(path).exists() and not Path(path).is_dir():
            raise UserError(f"{option} {path}: not a directory")
    for module in ("pyspark", "pyarrow", "matplotlib"):
        if importlib.util.find_spec(module) is None:
            raise UserError(f"kjbod analyze needs the spark extra ({module} is missing): pip install 'kjbod[spark]'")
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        raise UserError("kjbod analyze needs Java 17+ for Spark: install a JRE (Debian: openjdk-17-jre-headless) "
                        "or set JAVA_HOME")
    try:
        with SyncAdminClient(args.bootstrap_server, request_timeout=args.timeout,
                             connect_timeout=min(args.timeout, 10.0)) as admin:
            admin.describe_cluster()  # type: ignore[attr-defined]
    except KafkaError as e:
        raise UserError(f"cannot reach the cluster at {args.bootstrap_server}: {e}") from None


def _session(master: str):
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    # Spark's Python workers must run this interpreter (the one with kjbod installed), not `python3` on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (SparkSession.builder.master(master).appName("kjbod-analyze")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.python.filterPushdown.enabled", "true")
               .config("spark.sql.shuffle.partitions", "8")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    return session, True


def _one_line(error: BaseException) -> str:
    text = str(error)
    # A worker's error arrives inside Spark's text with the worker's traceback: take the raised message.
    found = re.findall(r"(?:Error|Exception): kjbod: ([^\n]*)", text)
    if found:
        return found[-1].strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def _cmd_analyze(args: argparse.Namespace) -> int:
    from kjbod.cli.main import UserError

    _check(args)
    from kjbod.spark.analyze import AnalyzeSettings, run_analysis

    settings = AnalyzeSettings(
        bootstrap_servers=args.bootstrap_server, out=Path(args.out),
        history=Path(args.history) if args.history else None, top=args.top, window_days=args.window_days,
        on_broker_error=args.on_broker_error, request_timeout_ms=int(args.timeout * 1000))
    try:
        session, owned = _session(args.master)
    except Exception as e:  # noqa: BLE001  (a JVM that does not start: one line, not a Java trace)
        raise UserError(f"cannot start Spark (--master {args.master}): {_one_line(e)}") from None
    try:
        report = run_analysis(session, settings)
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001  (Spark wraps worker errors in its own types)
        raise UserError(f"analysis failed: {_one_line(e)}") from None
    finally:
        if owned:
            session.stop()
    out = settings.out
    totals = report["totals"]
    print(f"snapshot {report['snapshot_ts']}: {totals['brokers']} brokers, {totals['log_dirs']} log dirs, "
          f"{totals['replicas']} replicas; history {settings.history_dir} holds {report['history']['snapshots']} "
          f"snapshots")
    print(f"wrote {out / 'report.json'}, {out / 'report.md'}, "
          + ", ".join(str(out / f) for f in report["charts"].values()))
    return 0
