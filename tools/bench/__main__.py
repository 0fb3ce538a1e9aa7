"""`make bench` / `python -m tools.bench [NAME ...] [--quick]`: run every benchmark module, then one summary table.

Strategy: the benchmarks are plain modules under tools/bench, each with `run(...) -> dict` of named ratios (a
measurement against a peer or a physical limit taken in the same run).  This runner imports each name of
BENCHMARKS in turn; a module that is not there yet (a later issue's) is skipped with a note, one without `run`
too.  `--quick` is passed on to the modules whose `run` accepts it.  One benchmark failing does not stop the
others: the table says which failed and the exit code is 1.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import logging
import sys
import time
import traceback
from typing import Any

# In the order they run: the cheap, self-contained ones first.
BENCHMARKS = ("codec", "server", "controller", "reassign_controller", "datapath", "validation", "kip113", "spark",
              "metadata_log", "propagation", "kip858", "metrics", "full_disk", "dir_workers", "replication", "reassign")


def _load(name: str) -> tuple[Any, str | None]:
    try:
        module = importlib.import_module(f"tools.bench.{name}")
    except ModuleNotFoundError as e:
        if e.name == f"tools.bench.{name}":
            return None, "not present yet: skipped"
        return None, f"skipped: needs {e.name}, which is not installed"
    if not callable(getattr(module, "run", None)):
        return None, "has no run(): skipped"
    return module, None


def _run(module: Any, quick: bool) -> dict:
    kwargs = {"quick": True} if quick and "quick" in inspect.signature(module.run).parameters else {}
    result = module.run(**kwargs)
    return dict(result or {})


# Figures that are not ratios, by how their names end: printed with their unit instead of "x".
_UNITS = (("_seconds", " s"), ("_cpu_per_gb", " CPU s/GB"), ("rows_per_s_local1", " rows/s"),
          ("rows_per_s_local2", " rows/s"))


def _format(metric: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    for suffix, unit in _UNITS:
        if metric.endswith(suffix):
            return f"{value:,.2f}{unit}"
    return f"{value:.2f}x"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", metavar="NAME", help=f"benchmarks to run (default: {', '.join(BENCHMARKS)})")
    ap.add_argument("--quick", action="store_true", help="smaller runs, for a smoke test")
    args = ap.parse_args(argv)
    # Benchmarks that run kjbod code in this process (the mover, the admin client) log warnings only: a debug
    # line per segment copied is not what they measure.
    from kjbod.server.logging import configure_logging

    configure_logging("console", "warning")
    # kafka-python, a peer in some benchmarks, warns about its own slow event-loop tasks while it is timed.
    logging.getLogger("kafka").setLevel(logging.ERROR)
    rows: list[tuple[str, str, str]] = []
    failed = False
    for name in args.names or BENCHMARKS:
        module, note = _load(name)
        if module is None:
            print(f"\n== {name}: {note}")
            rows.append((name, "-", note or ""))
            continue
        started = time.monotonic()
        try:
            results = _run(module, args.quick)
        except Exception as e:  # noqa: BLE001  (report and go on with the next benchmark)
            traceback.print_exc()
            rows.append((name, "-", f"FAILED: {type(e).__name__}: {e}"))
            failed = True
            continue
        print(f"   ({name}: {time.monotonic() - started:.0f} s)")
        if not results:
            rows.append((name, "-", "no ratios returned"))
        rows += [(name, metric, _format(metric, value)) for metric, value in results.items()]
    widths = [max(len(r[i]) for r in [("benchmark", "measure", "ratio"), *rows]) for i in range(3)]
    print("\n== Summary (ratios: higher is better; see each benchmark's lines above for its target)")
    for row in [("benchmark", "measure", "ratio"), tuple("-" * w for w in widths), *rows]:
        print("   " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
