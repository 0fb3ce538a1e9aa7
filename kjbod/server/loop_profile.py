"""``KJBOD_LOOP_PROFILE=<dir>``: a debug hook that profiles the event loop's thread of a running node, and its log
dirs' worker threads, in CPU time.

Strategy: installed once when the process starts serving (kjbod.server.app), only when the variable is set:
without it nothing here is imported. SIGUSR1 turns cProfile on for the loop's thread (cProfile follows the thread
that enables it, so other threads stay out of that profile), timed with ``time.thread_time``: a shared machine
preempts the loop in the middle of its writes, and wall time would count the other processes' turns as the
loop's. It also posts each running dir worker (kjbod.storage.workers) a job that turns on a profiler of that
worker's own, so what a worker spends per record (a follower's appends, the hand-offs around them) can be read
beside the loop's. SIGUSR2 turns them off: the loop's profile goes to ``<dir>/loop-<pid>.prof`` (pstats' format),
the workers' merged into ``<dir>/workers-<pid>.prof`` once each worker has run its stop job (a dir whose worker
does not get to it within WORKERS_WAIT_S, a hung or failed one, is left out), and last ``<dir>/loop-<pid>.json``
with the loop thread's CPU seconds over the profiled window and the workers' together (so the json's presence
says every file is written); a later SIGUSR1 starts fresh profiles. tools/bench/replication.py ``--profile``
drives it on every broker around the rounds it wants profiled and reads the files back.
"""

from __future__ import annotations

import asyncio
import cProfile
import functools
import json
import os
import pstats
import signal
import threading
import time

from kjbod.storage.workers import running_workers

ENV = "KJBOD_LOOP_PROFILE"
WORKERS_WAIT_S = 5.0  # how long SIGUSR2's files wait for the workers' profiles
_POLL_S = 0.01


class _WorkerProfile:
    """One dir worker's profiler: started and stopped by jobs that run on that worker's thread."""

    __slots__ = ("profiler", "cpu0", "cpu")

    def __init__(self) -> None:
        self.profiler = cProfile.Profile(time.thread_time)
        self.cpu0 = 0.0
        self.cpu: float | None = None  # the thread's CPU seconds over the window, once stopped

    def start(self) -> None:
        self.cpu0 = time.thread_time()
        self.profiler.enable()

    def stop(self) -> None:
        self.profiler.disable()
        self.cpu = time.thread_time() - self.cpu0


class LoopProfile:
    """The profiler of one loop thread and its process's dir workers, driven by two signals (see the module
    docstring)."""

    def __init__(self, directory: str, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.directory = directory
        self.loop = loop
        self.profiler: cProfile.Profile | None = None
        self.cpu0 = 0.0
        self.workers: list[_WorkerProfile] = []

    def start(self) -> None:
        if self.profiler is not None:
            return
        self.profiler = cProfile.Profile(time.thread_time)
        self.cpu0 = time.thread_time()
        self.workers = []
        for worker in running_workers():
            if not worker.abandoned:
                profile = _WorkerProfile()
                self.workers.append(profile)
                worker.post(functools.partial(_start_on_this_thread, profile), "loop profile start")
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
        profiles, self.workers = self.workers, []
        for worker in running_workers():
            if not worker.abandoned:
                # Each started profile is stopped by the next job its worker runs (the order of running_workers
                # may differ from start's, and one worker may have gone: stop whichever profile started there).
                worker.post(_stop_on_this_thread, "loop profile stop")
        self._finish(base, cpu, profiles, time.monotonic() + WORKERS_WAIT_S)

    def _finish(self, base: str, cpu: float, profiles: list[_WorkerProfile], deadline: float) -> None:
        """The workers' merged profile and the json, once each worker's stop job ran (or the wait ran out)."""
        stopped = [p for p in profiles if p.cpu is not None]
        if len(stopped) < len(profiles) and time.monotonic() < deadline and self.loop is not None:
            self.loop.call_later(_POLL_S, self._finish, base, cpu, profiles, deadline)
            return
        workers_cpu = sum(p.cpu for p in stopped if p.cpu is not None)
        if stopped:
            stats = pstats.Stats(stopped[0].profiler)
            for p in stopped[1:]:
                stats.add(p.profiler)
            stats.dump_stats(os.path.join(self.directory, f"workers-{os.getpid()}.prof"))
        with open(base + ".json", "w") as f:
            json.dump({"loop_cpu_s": cpu, "workers_cpu_s": workers_cpu, "workers": len(stopped)}, f)


_running_profiles = threading.local()  # on a worker's thread: its started _WorkerProfile


def _start_on_this_thread(profile: _WorkerProfile) -> None:
    _running_profiles.profile = profile
    profile.start()


def _stop_on_this_thread() -> None:
    profile = getattr(_running_profiles, "profile", None)
    if profile is not None:
        _running_profiles.profile = None
        profile.stop()


def install_loop_profile(loop: asyncio.AbstractEventLoop) -> LoopProfile | None:
    """The signals wired to a LoopProfile of this (the loop's) thread when $KJBOD_LOOP_PROFILE names a directory."""
    directory = os.environ.get(ENV)
    if not directory:
        return None
    profile = LoopProfile(directory, loop)
    loop.add_signal_handler(signal.SIGUSR1, profile.start)
    loop.add_signal_handler(signal.SIGUSR2, profile.stop)
    return profile
