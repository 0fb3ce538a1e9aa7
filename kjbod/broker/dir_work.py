"""A request's file work, grouped by log dir and handed to each dir's worker (kjbod.storage.workers).

A handler adds one item per partition (``add(dir, item)``), then :meth:`DirWork.run` submits one closure per
dir, ``fn(items) -> results`` (one result per item, in order), and gives each result to ``fill(item, result)``
on the event loop; a dir whose closure raised gives ``fail(item, exc)`` for each of its items. Dirs without a
worker (``KJBOD_DIR_WORKERS=0``) run inline at once, and :meth:`DirWork.run` returns None when every dir did.

Otherwise it returns one future for the whole request, done when every dir has answered or when ``timeout_s``
has passed: then each dir still out gives ``fail(item, None)``, and what it answers later goes to ``discard``
(to close what it holds), so a slow dir costs only its own partitions; ``answered()`` runs as each dir's results
come in. No task and no ``asyncio.wait`` per
request: callbacks and one timer, as the hand-off is on the hot path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kjbod.storage import fsio

Items = list[Any]


class DirWork:
    def __init__(
        self,
        node: Any,
        fill: Callable[[Any, Any], None],
        fail: Callable[[Any, BaseException | None], None],
        discard: Callable[[list[Any]], None] | None = None,
        answered: Callable[[], None] | None = None,
    ) -> None:
        self.node = node
        self.fill = fill
        self.fail = fail
        self.discard = discard
        self.answered = answered  # called once a dir's results are in (Produce wakes long polls then)
        self.by_dir: dict[str, Items] = {}

    def add(self, log_dir: str, item: Any) -> None:
        items = self.by_dir.get(log_dir)
        if items is None:
            self.by_dir[log_dir] = [item]
        else:
            items.append(item)

    def __bool__(self) -> bool:
        return bool(self.by_dir)

    def run(self, fn: Callable[[Items], list[Any]], timeout_s: float | None, *,
            cached_first: bool = False) -> asyncio.Future[None] | None:
        """``cached_first``: try ``fn`` on the loop first where nothing can make it wait (fsio.no_waiting: page
        cache hits only, no open, no lock held elsewhere; the dir idle, online, not slow, no injected faults);
        a dir where it would wait goes to its worker as usual. For reads, whose order against appends the log's
        lock keeps: a thread hand-off costs more than a cached read."""
        manager = getattr(self.node.logs, "manager", None)
        handed: list[tuple[Any, Items]] = []
        for log_dir, items in self.by_dir.items():
            worker = manager.worker(log_dir) if manager is not None else None
            if worker is not None and manager is not None and cached_first and worker.idle() \
                    and not fsio.FAULTS.active and worker.io.online and not manager.dir_degraded(log_dir):
                try:
                    with fsio.no_waiting():
                        results = fn(items)
                except fsio.WouldBlock:
                    pass
                except Exception as e:
                    self._failed(items, e)
                    continue
                else:
                    self._filled(items, results)
                    continue
            if worker is None:
                try:
                    results = fn(items)
                except Exception as e:
                    self._failed(items, e)
                else:
                    self._filled(items, results)
            else:
                handed.append((worker, items))
        if not handed:
            return None
        return _Waiting(self, fn, handed, timeout_s).future

    def _filled(self, items: Items, results: list[Any]) -> None:
        for item, result in zip(items, results, strict=True):
            self.fill(item, result)
        if self.answered is not None:
            self.answered()

    def _failed(self, items: Items, e: BaseException | None) -> None:
        for item in items:
            self.fail(item, e)


class _Waiting:
    """One request's dirs in flight: counts them down, answers the late ones at the timeout."""

    def __init__(self, work: DirWork, fn: Callable[[Items], list[Any]], handed: list[tuple[Any, Items]],
                 timeout_s: float | None) -> None:
        loop = asyncio.get_running_loop()
        self.work = work
        self.future: asyncio.Future[None] = loop.create_future()
        self.out: dict[int, Items] = {}  # the dirs not answered yet, by their position
        self.timer = None if timeout_s is None else loop.call_later(max(timeout_s, 0.0), self._time_up)
        self.out = {i: items for i, (_worker, items) in enumerate(handed)}
        for i, (worker, items) in enumerate(handed):
            worker.submit(lambda items=items: fn(items), lambda ok, value, i=i: self._answered(i, ok, value))

    def _answered(self, i: int, ok: bool, value: Any) -> None:
        items = self.out.pop(i, None)
        if items is None:  # answered after the request gave up on it (or twice, by an abandoned worker)
            if ok and self.work.discard is not None:
                self.work.discard(value)
            return
        if ok:
            self.work._filled(items, value)
        else:
            self.work._failed(items, value)
        if not self.out:
            if self.timer is not None:
                self.timer.cancel()
            if not self.future.done():
                self.future.set_result(None)

    def _time_up(self) -> None:
        for items in self.out.values():
            self.work._failed(items, None)
        self.out = {}
        if not self.future.done():
            self.future.set_result(None)
