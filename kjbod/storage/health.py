"""Each log dir's health beyond online/offline: a slow dir is *degraded*, a dir whose operation never returns is
failed exactly as an I/O error fails it.

Strategy: the fsio seam stamps every operation with its start while it runs (:meth:`LogDirIO.oldest_outstanding`)
and keeps the slowest one finished (:meth:`LogDirIO.take_slowest`). :class:`DirWatchdog` looks at those stamps on
its own thread, never on the event loop and never through the disk, so a hung disk cannot stop it:

* an operation outstanding longer than ``log.dir.stall.timeout.ms`` (0: never) fails the dir through the seam's
  one failure path (:meth:`LogDirIO.fail_stalled`): offline once, logged with the operation and the file it is
  stuck on, the owner's ``on_offline`` called. A thread stuck in the kernel cannot be killed: it is abandoned, and
  if its call returns it raises like any operation on an offline dir;
* a dir whose operations take longer than ``log.dir.slow.threshold.ms`` (an operation finished that slowly, or
  one still running for that long) within the last :data:`LATENCY_WINDOW_S` is *degraded*: it keeps serving, is
  logged at warning once a minute at most, and is shown as degraded by DescribeLogDirs' callers.

:class:`DirState` is the one place a dir's state is named. A *full* dir (ENOSPC or EDQUOT, or usable bytes at or
below ``log.dir.reserved.bytes``: the seam's ``full`` flag) is online for everything but appends, which are
refused until a space check finds room again (see :mod:`kjbod.storage.fsio`).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import structlog

from kjbod.storage import timeline
from kjbod.storage.fsio import LogDirIO

log = structlog.get_logger("kjbod.storage.health")

LATENCY_WINDOW_S = 10.0  # "recent" operation latency: the slowest operation of the last 10 s
DEGRADED_LOG_INTERVAL_S = 60.0


class DirState(StrEnum):
    ONLINE = "online"
    DEGRADED = "degraded"  # slow but moving
    FULL = "full"  # out of space (or into its reserve): readable, appends refused until space returns
    OFFLINE = "offline"  # failed: an I/O error or a stall; never used again by this process
    NOT_ANSWERING = "not-answering"  # online, but an operation (a size probe, ...) has not returned for 5 probe waits


@dataclass(frozen=True)
class DirHealthInfo:
    state: DirState
    recent_latency_ms: int  # the slowest operation of the last LATENCY_WINDOW_S (or the one still running)


class DirHealth:
    """What the watchdog knows of one dir. Written by the watchdog thread, read by anyone."""

    def __init__(self, io: LogDirIO) -> None:
        self.io = io
        self._samples: deque[tuple[float, float]] = deque()  # (monotonic time, slowest seconds in that look)
        self.recent_latency_s = 0.0
        self.degraded = False
        self._degraded_logged_at = float("-inf")

    def state(self) -> DirState:
        if not self.io.online:
            return DirState.OFFLINE
        if self.io.full:
            return DirState.FULL
        return DirState.DEGRADED if self.degraded else DirState.ONLINE

    def info(self) -> DirHealthInfo:
        return DirHealthInfo(self.state(), round(self.recent_latency_s * 1000))

    def observe(self, now: float, slowest_s: float) -> None:
        samples = self._samples
        samples.append((now, slowest_s))
        while samples and samples[0][0] < now - LATENCY_WINDOW_S:
            samples.popleft()
        self.recent_latency_s = max(s for _, s in samples)


class DirWatchdog:
    """Checks every dir's outstanding operations; :meth:`check` is one look (tests call it with their own clock),
    :meth:`start` runs it on a daemon thread."""

    def __init__(
        self,
        dirs: Sequence[LogDirIO],
        *,
        stall_timeout_ms: int = 30_000,
        slow_threshold_ms: int = 1_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if stall_timeout_ms < 0 or slow_threshold_ms < 0:
            raise ValueError(f"negative stall timeout or slow threshold ({stall_timeout_ms}, {slow_threshold_ms} ms)")
        self.health = {io.path: DirHealth(io) for io in dirs}
        self.stall_timeout_s = stall_timeout_ms / 1000
        self.slow_threshold_s = slow_threshold_ms / 1000
        self.clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def interval_s(self) -> float:
        """How often to look: often enough that a stall is caught within a fifth of its timeout past it."""
        bounds = [1.0]
        if self.stall_timeout_s:
            bounds.append(self.stall_timeout_s / 5)
        if self.slow_threshold_s:
            bounds.append(self.slow_threshold_s / 2)
        return max(0.02, min(bounds))

    def check(self) -> list[str]:
        """One look at every online dir; returns the dirs failed by this look."""
        now = self.clock()
        failed = []
        for health in self.health.values():
            io = health.io
            if not io.online:
                continue
            slowest = io.take_slowest()
            oldest = io.oldest_outstanding()
            running = now - oldest[2] if oldest is not None else 0.0
            if oldest is not None and self.stall_timeout_s and running >= self.stall_timeout_s:
                op, path, _ = oldest
                log.error("log_dir_stalled", log_dir=io.path, op=op, path=path, outstanding_s=round(running, 1),
                          timeout_ms=round(self.stall_timeout_s * 1000),
                          effect="taken offline as for an I/O error; never used again by this process")
                io.fail_stalled(op, path, running)
                failed.append(io.path)
                continue
            health.observe(now, max(slowest, running))
            self._note_slowness(health, now, oldest)
        return failed

    def _note_slowness(self, health: DirHealth, now: float, oldest: tuple[str, str, float] | None) -> None:
        slow = bool(self.slow_threshold_s) and health.recent_latency_s > self.slow_threshold_s
        if slow and now - health._degraded_logged_at >= DEGRADED_LOG_INTERVAL_S:
            health._degraded_logged_at = now
            log.warning("log_dir_degraded", log_dir=health.io.path,
                        recent_latency_ms=round(health.recent_latency_s * 1000),
                        threshold_ms=round(self.slow_threshold_s * 1000),
                        outstanding=None if oldest is None else f"{oldest[0]} {oldest[1]}")
        elif not slow and health.degraded:
            log.info("log_dir_no_longer_degraded", log_dir=health.io.path,
                     recent_latency_ms=round(health.recent_latency_s * 1000))
            health._degraded_logged_at = float("-inf")
        health.degraded = slow

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()

        def run() -> None:
            while not self._stop.wait(self.interval_s):
                started = time.perf_counter() if timeline.ON else 0.0
                try:
                    self.check()
                except Exception:
                    log.exception("log_dir_watchdog_failed")
                if timeline.ON:
                    timeline.span("stall watchdog", started)

        self._thread = threading.Thread(target=run, name="kjbod-log-dir-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        thread = self._thread
        if thread is not None:
            self._stop.set()
            thread.join()
            self._thread = None
