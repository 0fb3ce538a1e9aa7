"""Each log dir's data path on a thread of its own: the event loop hands a dir's file work to that dir's worker
and awaits it, so a slow or hung disk holds up only the requests (and the partitions) that live on it.

Strategy: one :class:`DirWorker` per log dir, one thread, one FIFO queue. A request handler groups what it needs
by dir and submits one closure per dir (a Produce touching six partitions of one dir is one hand-off, not six);
the worker runs closures in the order they were submitted, so appends to a partition keep their order, and
everything a closure does on disk (validation, the write, a roll, index loads, the read that prepares a fetch's
file regions) happens on the dir's thread. Results go back to the loop in batches: the worker drains every
closure queued, runs them, then wakes the loop once (``call_soon_threadsafe``) with all their results, so a busy
dir costs one wake-up per batch of requests, not one per partition.

A dir failed because an operation never returned (:mod:`kjbod.storage.health`) has its worker abandoned: the
closures queued behind the stuck one, and the stuck one itself, are answered with the dir's offline error at
once (their requests do not wait for a disk that will not answer), and the thread is left to the kernel. If the
stuck call ever returns, its result is dropped.

``KJBOD_DIR_WORKERS=0`` gives no dir a worker: handlers then run their closures inline on the event loop (the
old single-loop path), so the benchmark of the hand-off's cost measures both in one run. Nothing else sets it.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

import structlog

from kjbod.storage.fsio import LogDirIO

log = structlog.get_logger("kjbod.storage.workers")

WORKERS_ENV = "KJBOD_DIR_WORKERS"


def workers_enabled() -> bool:
    return os.environ.get(WORKERS_ENV, "1") != "0"


_Job = tuple[Callable[[], Any], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]
_STOP = object()


def _settle(results: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    """On the loop: hand each closure's result (or exception) to its future, unless it was given up on."""
    for fut, ok, value in results:
        if fut.done():
            continue
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)


class DirWorker:
    """The one thread that does a log dir's request-path file work, in submission order."""

    def __init__(self, io: LogDirIO) -> None:
        self.io = io
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._current: list[_Job] = []  # the batch being run (read by abandon() from another thread)
        self.abandoned = False
        self._thread = threading.Thread(target=self._run, name=f"kjbod-dir-worker {io.path}", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"DirWorker({self.io.path!r}, abandoned={self.abandoned})"

    def submit(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        """Run ``fn`` on this dir's thread after everything submitted before it; await the returned future on the
        calling loop for its result or exception."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        if self.abandoned:
            fut.set_exception(self.io.offline_error())
            return fut
        self._queue.put((fn, loop, fut))
        return fut

    def _run(self) -> None:
        get = self._queue.get
        get_nowait = self._queue.get_nowait
        while True:
            job = get()
            batch = [job]
            while True:  # everything queued meanwhile is run in this batch, answered with one wake-up
                try:
                    batch.append(get_nowait())
                except queue.Empty:
                    break
            stop = False
            if _STOP in batch:
                stop = True
                batch = [j for j in batch if j is not _STOP]
            self._current = batch
            by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]] = {}
            for fn, loop, fut in batch:
                try:
                    result: tuple[asyncio.Future[Any], bool, Any] = (fut, True, fn())
                except BaseException as e:  # handed to the awaiting request, which decides
                    result = (fut, False, e)
                by_loop.setdefault(loop, []).append(result)
            self._current = []
            if self.abandoned:
                return  # a stuck call came back after the dir was failed: its results are void
            for loop, results in by_loop.items():
                try:
                    loop.call_soon_threadsafe(_settle, results)
                except RuntimeError:  # that loop is closed: nobody waits for these any more
                    pass
            if stop:
                return

    def abandon(self) -> None:
        """The dir was failed (a stall or an I/O error): answer everything queued or running with the dir's
        offline error now. Called from any thread."""
        if self.abandoned:
            return
        self.abandoned = True
        err = self.io.offline_error()
        pending: list[_Job] = list(self._current)
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not _STOP:
                pending.append(job)
        self._queue.put(_STOP)  # a worker that is not stuck stops
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]] = {}
        for _fn, loop, fut in pending:
            by_loop.setdefault(loop, []).append((fut, False, err))
        for loop, results in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, results)
            except RuntimeError:
                pass

    def stop(self) -> None:
        """Stop once what is queued has run (the caller joins; one stuck in the kernel is left behind, a daemon)."""
        if not self.abandoned:
            self._queue.put(_STOP)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)
