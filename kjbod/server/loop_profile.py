"""``KJBOD_LOOP_PROFILE=<dir>``: a debug hook that profiles the event loop's thread of a running node in CPU time.

Strategy: installed once when the process starts serving (kjbod.server.app), only when the variable is set:
without it nothing here is imported. SIGUSR1 turns cProfile on for the loop's thread (cProfile follows the thread
that enables it, so the dir workers and other threads stay out), timed with ``time.thread_time``: a shared
machine preempts the loop in the middle of its writes, and wall time would count the other processes' turns as
the loop's. SIGUSR2 turns it off and writes what it gathered to ``<dir>/loop-<pid>.prof`` (pstats' format), with
the loop thread's CPU seconds over the profiled window beside it in ``<dir>/loop-<pid>.json``; a later SIGUSR1
starts a fresh profile. tools/bench/replication.py ``--profile`` drives it on every broker around the rounds it
wants profiled and reads the files back.
"""

from __future__ import annotations

import asyncio
import cProfile
import json
import os
import signal
import time

ENV = "KJBOD_LOOP_PROFILE"


class LoopProfile:
    """The profiler of one loop thread, driven by two signals (see the module docstring)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.profiler: cProfile.Profile | None = None
        self.cpu0 = 0.0

    def start(self) -> None:
        if self.profiler is not None:
            return
        self.profiler = cProfile.Profile(time.thread_time)
        self.cpu0 = time.thread_time()
        self.profiler.enable()

    def stop(self) -> None:
        profiler, self.profiler = self.profiler, None
        if profiler is None:
            return
        profiler.disable()
        cpu = time.thread_time() - self.cpu0
        os.makedirs(self.directory, exist_ok=True)
        base = os.path.join(self.directory, f"loop-{os.getpid()}")
        profiler.dump_stats(base + ".prof")
        with open(base + ".json", "w") as f:
            json.dump({"loop_cpu_s": cpu}, f)


def install_loop_profile(loop: asyncio.AbstractEventLoop) -> LoopProfile | None:
    """The signals wired to a LoopProfile of this (the loop's) thread when $KJBOD_LOOP_PROFILE names a directory."""
    directory = os.environ.get(ENV)
    if not directory:
        return None
    profile = LoopProfile(directory)
    loop.add_signal_handler(signal.SIGUSR1, profile.start)
    loop.add_signal_handler(signal.SIGUSR2, profile.stop)
    return profile
