"""The intra-broker throttle: every mover thread shares one pacer, so the configured rate is the node's total.

Strategy (performance-baseline.md §2): an absolute schedule, not a sleep per chunk and not a small token
bucket. The pacer keeps a virtual clock: byte number ``p`` is due at ``anchor_time + (p - anchor_pos) / rate``.
A thread that has just copied ``n`` bytes adds them to the shared position and sleeps until its own last byte is
due. Any oversleep or slow chunk is repaid by the next chunk, so the long-run rate is exact (the naive design
undershoots by 1-13 %, a bucket capped at one chunk by up to 10 %).

Three re-anchorings keep it honest:

* a rate change (IncrementalAlterConfigs at runtime) moves the anchor to "now" at the position that was due
  now, so bytes already owed are paid at the new rate and sleeping threads wake up to recompute;
* when the first copier starts (:meth:`copying`: no move was running), the schedule restarts at its first
  chunk: time nobody copied (nor the move's set-up) earns no allowance;
* while moves run, time a copier spends not copying (fsyncing a group of files, opening the future log) is
  repaid by copying faster afterwards, so the long-run rate is the setting, as with Kafka's quota windows;
  the lag that can be repaid is capped at ``burst_seconds`` of data (a stalled disk does not buy a long
  full-speed burst).

The chunk a copier asks for is about 20 ms of data at the current rate, between 64 KiB and 8 MiB: it is the
granularity of the throttle and costs no throughput (sendfile runs at the same speed for any of these sizes).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

UNLIMITED = (1 << 63) - 1  # Kafka's default for the quota: Long.MAX_VALUE, i.e. no throttle
MIN_CHUNK = 64 << 10
MAX_CHUNK = 8 << 20
CHUNK_SECONDS = 0.02


class Throttle:
    """A shared byte-rate pacer. ``pace(n)`` after copying ``n`` bytes; ``set_rate`` at any time."""

    def __init__(
        self,
        rate: int = UNLIMITED,
        *,
        burst_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate < 1:
            raise ValueError(f"throttle rate must be at least 1 byte/s, not {rate}")
        self._cond = threading.Condition()
        self._clock = clock
        self._rate = rate
        self._burst = burst_seconds
        self._anchor_time = clock()
        self._anchor_pos = 0.0
        self._pos = 0  # bytes ever paced through the schedule (the shared position)
        self._copiers = 0
        self._fresh = True  # the next paced chunk restarts the schedule
        self.total_bytes = 0  # every byte reported, paced or not (progress and benchmarks)

    @property
    def rate(self) -> int:
        return self._rate

    @property
    def unlimited(self) -> bool:
        return self._rate >= UNLIMITED

    def chunk_size(self) -> int:
        """How much a copier should move between two ``pace`` calls at the current rate."""
        if self.unlimited:
            return MAX_CHUNK
        return int(min(MAX_CHUNK, max(MIN_CHUNK, self._rate * CHUNK_SECONDS)))

    def set_rate(self, rate: int) -> None:
        if rate < 1:
            raise ValueError(f"throttle rate must be at least 1 byte/s, not {rate}")
        with self._cond:
            now = self._clock()
            if self.unlimited:
                due_pos = float(self._pos)
            else:
                due_pos = min(float(self._pos), self._anchor_pos + (now - self._anchor_time) * self._rate)
            self._anchor_time = now
            self._anchor_pos = due_pos
            self._rate = rate
            self._cond.notify_all()

    def wake(self) -> None:
        """Wake every thread sleeping in :meth:`pace`, so it checks its ``should_stop`` now (a stop, or a move
        redirected or cancelled) instead of at the end of its bounded wait."""
        with self._cond:
            self._cond.notify_all()

    @contextmanager
    def copying(self) -> Iterator[None]:
        """Bracket one move: the first of several concurrent moves restarts the schedule at "now"."""
        with self._cond:
            if self._copiers == 0:
                self._fresh = True
            self._copiers += 1
        try:
            yield
        finally:
            with self._cond:
                self._copiers -= 1

    def account(self, nbytes: int) -> None:
        """Count bytes copied outside the schedule (the final catch-up under the append lock must not sleep),
        while still charging them to the rate: later chunks wait for them."""
        with self._cond:
            self.total_bytes += nbytes
            self._pos += nbytes

    def pace(self, nbytes: int, should_stop: Callable[[], bool] | None = None) -> None:
        """Charge ``nbytes`` just copied and sleep until they are due (returns early if ``should_stop()``)."""
        with self._cond:
            self.total_bytes += nbytes
            if self.unlimited:
                self._pos += nbytes
                self._anchor_pos = float(self._pos)
                self._anchor_time = self._clock()
                return
            now = self._clock()
            if self._fresh:
                self._fresh = False
                self._anchor_time = now
                self._anchor_pos = float(self._pos)
            due_now = self._anchor_pos + (now - self._anchor_time) * self._rate
            if due_now > self._pos + self._burst * self._rate:
                # Slower than the rate for a while: forget the unused allowance beyond one burst.
                self._anchor_time = now - self._burst
                self._anchor_pos = float(self._pos)
            self._pos += nbytes
            mine = self._pos
            while not self.unlimited:
                delay = self._anchor_time + (mine - self._anchor_pos) / self._rate - self._clock()
                if delay <= 0 or (should_stop is not None and should_stop()):
                    return
                # Bounded waits so a stop request is noticed; set_rate() wakes sleepers to recompute.
                self._cond.wait(min(delay, 0.25))
