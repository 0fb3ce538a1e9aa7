"""Timing helpers shared by the benchmarks: interleaved rounds, medians and paired ratios.

This machine is a shared VM whose absolute speed drifts, so every comparison runs its variants round-robin in
the same rounds and reports the median of per-round ratios as well as median absolute figures.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable


def time_call(fn: Callable[[], object], min_time: float = 0.2) -> float:
    """Seconds per call, averaged over as many calls as fit in `min_time`."""
    fn()
    n = 0
    start = time.perf_counter()
    while True:
        fn()
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            return elapsed / n


def interleaved(variants: dict[str, Callable[[], object]], rounds: int = 7, min_time: float = 0.2
                ) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            samples[name].append(time_call(fn, min_time))
    return samples


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def paired_ratio(slow: list[float], fast: list[float]) -> float:
    """Median over rounds of slow/fast: how many times faster `fast` is."""
    return statistics.median(s / f for s, f in zip(slow, fast, strict=True))


def p99(xs: list[float]) -> float:
    """The 99th percentile of `xs` (the value 99 % of them are at or below, nearest rank)."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * 0.99))]


def sched_ms(pids: list[int], *, loop_only: bool = False) -> tuple[float, float]:
    """(CPU ms, ms waited runnable for a core) of every thread of `pids` so far (with `loop_only`, of each one's
    main thread only: the event loop's), from /proc/<pid>/task/*/schedstat (Linux; zeros where it cannot be
    read)."""
    cpu = wait = 0
    for pid in pids:
        try:
            tasks = [str(pid)] if loop_only else os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                    fields = f.read().split()
            except OSError:
                continue
            cpu += int(fields[0])
            wait += int(fields[1])
    return cpu / 1e6, wait / 1e6


def warm_memory(nbytes: int) -> float:
    """Touch `nbytes` of anonymous memory once and give it back; returns the seconds it took.

    This VM backs guest memory lazily: the first write into memory the guest has never used runs at roughly
    0.3-1 GB/s, memory used before at ~4 GB/s (measured: a file growing by 128 MiB per round wrote at 0.3-1.3 GB/s,
    and at ~4 GB/s after 3 GiB had been touched and freed).  A benchmark whose runners fill the page cache would
    otherwise measure whichever runner happens to get fresh memory.  A broker that has been up for minutes has
    long since touched its page cache; so do the benchmarks, before timing.

    This only narrows the effect: the VM's virtio balloon has free page reporting on (freed pages go back to the
    host, and their next first touch is slow again) and a DAMON `pageout` scheme evicts cold pages on its own
    schedule (kdamond.0).  A run can still meet a slow reference: once, the Produce benchmark's os.write ran at
    383 MB/s instead of 2.4-4 GB/s.  Read a figure together with the reference's own speed, printed next to it."""
    import mmap

    started = time.perf_counter()
    m = mmap.mmap(-1, nbytes)
    try:
        page = mmap.PAGESIZE
        for i in range(0, nbytes, page):
            m[i] = 1
    finally:
        m.close()
    return time.perf_counter() - started


def heading(title: str) -> None:
    print()
    print(f"== {title}")


def verdict(ok: bool) -> str:
    return "meets target" if ok else "BELOW TARGET"


def rounds_main(prog: str, doc: str | None, run: Callable[..., object], argv: list[str] | None,
                *, rounds: int) -> int:
    """The command line of a benchmark whose run takes (rounds, seconds, quick)."""
    import argparse

    ap = argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    run(args.rounds, args.seconds, args.quick)
    return 0
