"""Delayed file deletions (Kafka's ``file.delete.delay.ms``): segments renamed ``.deleted`` and ``-delete`` dirs.

Strategy: deleting is two steps, as in Kafka. The rename happens at once under the log's lock (readers holding
a region keep their fd, so nothing they hold goes away); the unlink is queued here with a due time and runs
when the owner calls :meth:`DeletionQueue.run_due` (the LogManager's background tick). A failure marks the dir
offline through the fsio seam and is logged; it never propagates into the tick.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable

import structlog

from kjbod.storage.errors import KafkaStorageError

log = structlog.get_logger("kjbod.storage.tasks")


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

    def run_due(self, now_ms: int) -> int:
        """Run every deletion due at ``now_ms``; returns how many ran."""
        ran = 0
        while True:
            with self._lock:
                if not self._heap or self._heap[0][0] > now_ms:
                    return ran
                _, _, what, action = heapq.heappop(self._heap)
            try:
                action()
                log.debug("deleted", what=what)
            except KafkaStorageError as e:
                log.warning("delete_failed", what=what, error=str(e))
            ran += 1
