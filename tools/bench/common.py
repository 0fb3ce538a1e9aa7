"""Timing helpers shared by the benchmarks: interleaved rounds, medians and paired ratios.

This machine is a shared VM whose absolute speed drifts, so every comparison runs its variants round-robin in
the same rounds and reports the median of per-round ratios as well as median absolute figures.
"""

from __future__ import annotations

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


def heading(title: str) -> None:
    print()
    print(f"== {title}")


def verdict(ok: bool) -> str:
    return "meets target" if ok else "BELOW TARGET"
