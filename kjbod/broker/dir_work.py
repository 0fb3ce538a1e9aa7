"""A request's file work, grouped by log dir and handed to each dir's worker (kjbod.storage.workers).

A handler adds one item per partition (``add(dir, item)``), then :meth:`DirWork.run` submits one closure per
dir, ``fn(items) -> results`` (one result per item, in order), and gives each result to ``fill(item, result)``
on the event loop. Dirs without a worker (``KJBOD_DIR_WORKERS=0``) run inline at once; :meth:`DirWork.run`
returns None when every dir did. Otherwise it returns :class:`DirWaits`, whose :meth:`DirWaits.wait` waits for
the dirs' answers up to a bound: a dir that raised gives ``fail(item, exc)`` for each of its items, one that did
not answer in time ``fail(item, None)``, so a slow dir costs only its own partitions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

Items = list[Any]


class DirWork:
    def __init__(
        self,
        node: Any,
        fill: Callable[[Any, Any], None],
        fail: Callable[[Any, BaseException | None], None],
        discard: Callable[[list[Any]], None] | None = None,
    ) -> None:
        self.node = node
        self.fill = fill
        self.fail = fail
        self.discard = discard  # given the results of a dir that answered too late (to close what they hold)
        self.by_dir: dict[str, Items] = {}

    def add(self, log_dir: str, item: Any) -> None:
        items = self.by_dir.get(log_dir)
        if items is None:
            self.by_dir[log_dir] = [item]
        else:
            items.append(item)

    def __bool__(self) -> bool:
        return bool(self.by_dir)

    def run(self, fn: Callable[[Items], list[Any]]) -> DirWaits | None:
        manager = getattr(self.node.logs, "manager", None)
        pending: dict[asyncio.Future[Any], Items] = {}
        for log_dir, items in self.by_dir.items():
            worker = manager.worker(log_dir) if manager is not None else None
            if worker is None:
                self._settle(items, fn, None)
            else:
                pending[worker.submit(lambda items=items: fn(items))] = items
        return DirWaits(self, pending) if pending else None

    def _settle(self, items: Items, fn: Callable[[Items], list[Any]] | None, fut: asyncio.Future[Any] | None) -> None:
        try:
            results = fn(items) if fn is not None else fut.result()  # type: ignore[union-attr]
        except Exception as e:
            for item in items:
                self.fail(item, e)
            return
        for item, result in zip(items, results, strict=True):
            self.fill(item, result)


class DirWaits:
    def __init__(self, work: DirWork, pending: dict[asyncio.Future[Any], Items]) -> None:
        self.work = work
        self.pending = pending

    async def wait(self, timeout_s: float | None) -> int:
        """Wait for every dir up to ``timeout_s`` (None: no bound); returns how many dirs did not answer."""
        done, late = await asyncio.wait(self.pending, timeout=timeout_s)
        for fut in done:
            self.work._settle(self.pending[fut], None, fut)
        for fut in late:
            for item in self.pending[fut]:
                self.work.fail(item, None)
            fut.add_done_callback(self._drop)  # its answer (or error) comes later and is not wanted
        return len(late)

    def _drop(self, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        if self.work.discard is not None:
            self.work.discard(fut.result())
