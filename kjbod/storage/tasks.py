"""The storage's background work: periodic tasks, and delayed file deletions (Kafka's ``file.delete.delay.ms``).

Periodic tasks (retention, checkpoints) follow Kafka's scheduler: the first run comes an initial delay after
startup (``log.initial.task.delay.ms``, 30 s), then one every interval. Nothing is remembered across restarts, so
the first run after a start never waits more than one interval: kjbod caps the initial delay at the interval
(Kafka does not), which keeps a short interval short from the first run on. A task's clock starts again after
each run, so a slow run (a long retention pass) is not followed by runs back to back. An interval of 0 means one
run only, after the initial delay (Kafka's scheduler does the same with a period of 0).

Delayed deletions: deleting is two steps, as in Kafka. The rename happens at once under the log's lock (readers holding
a region keep their fd, so nothing they hold goes away); the unlink is queued here with a due time and runs
when the owner calls :meth:`DeletionQueue.run_due` (the LogManager's background tick). A failure marks the dir
offline through the fsio seam and is logged; it never propagates into the tick.
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
from collections.abc import Callable

import structlog

from kjbod.storage.errors import KafkaStorageError

log = structlog.get_logger("kjbod.storage.tasks")

_NEVER = (1 << 63) - 1


class Periodic:
    """When one periodic task is due. Not thread-safe: one owner (a background thread) asks :meth:`due`."""

    def __init__(self, name: str, interval_ms: int, initial_delay_ms: int) -> None:
        if interval_ms < 0 or initial_delay_ms < 0:
            raise ValueError(f"{name}: negative interval or delay ({interval_ms} ms, {initial_delay_ms} ms)")
        self.name = name
        self.interval_ms = interval_ms
        self.initial_delay_ms = initial_delay_ms
        self.next_ms = 0

    def arm(self, start_ms: int) -> None:
        """(Re)start the schedule at ``start_ms``: the first run is due after the initial delay or the interval,
        whichever is shorter."""
        delay = min(self.initial_delay_ms, self.interval_ms) if self.interval_ms > 0 else self.initial_delay_ms
        self.next_ms = start_ms + delay

    def arm_after_run(self, now_ms: int) -> None:
        self.next_ms = now_ms + self.interval_ms if self.interval_ms > 0 else _NEVER

    def due(self, now_ms: int) -> bool:
        """Whether the task should run at ``now_ms``; when it should, the next run is scheduled one interval on."""
        if now_ms < self.next_ms:
            return False
        self.arm_after_run(now_ms)
        return True


class DeletionQueue:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._heap: list[tuple[int, int, str, Callable[[], None]]] = []
        self._seq = itertools.count()

    def schedule(self, due_ms: int, what: str, action: Callable[[], None]) -> None:
        with self._lock:
            heapq.heappush(self._heap, (due_ms, next(self._seq), what, action))

    def __len__(self) -> int:
        with self._lock:
            return len(self._heap)

    def pending(self) -> list[str]:
        with self._lock:
            return [what for _, _, what, _ in sorted(self._heap)]

    def run_due(self, now_ms: int, *, under: str | None = None) -> int:
        """Run every deletion due at ``now_ms`` (only those of paths under the dir ``under``, when given: each
        log dir's background thread deletes its own files); returns how many ran."""
        ran = 0
        prefix = None if under is None else under.rstrip(os.sep) + os.sep
        while True:
            with self._lock:
                entry = self._pop_due(now_ms, prefix)
                if entry is None:
                    return ran
                _, _, what, action = entry
            try:
                action()
                log.debug("deleted", what=what)
            except KafkaStorageError as e:
                log.warning("delete_failed", what=what, error=str(e))
            ran += 1

    def _pop_due(self, now_ms: int, prefix: str | None) -> tuple[int, int, str, Callable[[], None]] | None:
        heap = self._heap
        if prefix is None:
            return heapq.heappop(heap) if heap and heap[0][0] <= now_ms else None
        for i, entry in enumerate(heap):  # a short queue: a scan is fine
            if entry[0] <= now_ms and entry[2].startswith(prefix):
                heap[i] = heap[-1]
                heap.pop()
                heapq.heapify(heap)
                return entry
        return None
