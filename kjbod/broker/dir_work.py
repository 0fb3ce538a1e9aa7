"""A request's file work, grouped by log dir and handed to each dir's worker (kjbod.storage.workers).

A handler adds one item per partition (``add(dir, item)``), then :meth:`DirWork.run` submits one closure per
dir, ``fn(items) -> results`` (one result per item, in order), and gives each result to ``fill(item, result)``
on the event loop; a dir whose closure raised gives ``fail(item, exc)`` for each of its items. Dirs without a
worker (``KJBOD_DIR_WORKERS=0``) run inline at once, and :meth:`DirWork.run` returns None when every dir did.

Otherwise it returns one future for the whole request, done when every dir has answered or when ``timeout_s``
has passed: then each dir still out gives ``fail(item, None)``, and what it answers later goes to ``discard``
(to close what it holds), so a slow dir costs only its own partitions; ``answered()`` runs as each dir's results
come in. Given ``then``, the future's result is what ``then()`` returns once every dir is in (a handler's whole
answer), so a handler can return that future instead of a coroutine: no task per request. With ``later=True``
it returns a :class:`~kjbod.wire.handler.Later` instead of a future, completed in the callback that brings the
last dir's results (the router encodes the answer and the connection writes it there, with no loop pass or task
in between): Produce's hot path.

Given ``fn`` with a ``native`` attribute (``native(items, writer, worker)``: Produce), a request's one item for a
dir may be appended on the loop with its write made by the dir's native writer (DirWorker._native_append, at the
hand-over, when it is the only work for an idle dir of a quiet process; PartitionLog.append_native).

Given ``fn`` with a ``together`` attribute (``together(calls) -> results``, one per call, each call with ``fn``
and ``items``), a dir's worker may run the calls of several requests handed over together in one go
(kjbod.storage.workers): Produce writes the small batches of one partition from several requests at once.

The hand-off is on the hot path, so a request in flight costs callbacks only: no task, no ``asyncio.wait`` and
no timer of its own. Timeouts are kept in 10 ms ticks, one loop timer per tick that has any (a request times out
at most one tick after its ``timeout_s``); at thousands of requests a second that is a timer per tick instead of
one per request.
"""

from __future__ import annotations

import asyncio
import functools
import math
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from kjbod.storage import fsio, timeline
from kjbod.wire.handler import Later

Items = list[Any]


def loop_may_read(manager: Any, log_dir: str, worker: Any) -> bool:
    """Whether the event loop may try a read of ``log_dir`` itself (under fsio.no_waiting: page cache hits
    only): its worker idle and online, the dir not slow, no injected faults. Otherwise the read is the worker's."""
    return (worker.idle() and not fsio.FAULTS.active and worker.io.online
            and not manager.dir_degraded(log_dir))


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

    def run(self, fn: Callable[[Items], list[Any]], timeout_s: float | None, *, cached_first: bool = False,
            then: Callable[[], Any] | None = None, later: bool = False) -> Any:
        """``cached_first``: try ``fn`` on the loop first where nothing can make it wait (fsio.no_waiting: page
        cache hits only, no open, no lock held elsewhere; the dir idle, online, not slow, no injected faults);
        a dir where it would wait goes to its worker as usual. For reads, whose order against appends the log's
        lock keeps: a thread hand-off costs more than a cached read."""
        manager = getattr(self.node.logs, "manager", None)
        handed: list[tuple[Any, Items]] = []
        for log_dir, items in self.by_dir.items():
            worker = manager.worker(log_dir) if manager is not None else None
            if cached_first and worker is not None and loop_may_read(manager, log_dir, worker):
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
                started = time.perf_counter() if timeline.ON else 0.0
                try:
                    results = fn(items)
                except Exception as e:
                    self._failed(items, e)
                else:
                    self._filled(items, results)
                if timeline.ON:  # the loop path's own file work, as a worker's "worker batch"
                    timeline.span("inline work", started, str(len(items)))
            else:
                handed.append((worker, items))
        if not handed:
            return None
        return _Waiting(self, fn, handed, timeout_s, then, later).future

    def _filled(self, items: Items, results: list[Any]) -> None:
        for item, result in zip(items, results, strict=True):
            self.fill(item, result)
        if self.answered is not None:
            self.answered()

    def _failed(self, items: Items, e: BaseException | None) -> None:
        for item in items:
            self.fail(item, e)


class _Call:
    """One request's closure for one dir: ``fn(items)``, and ``fn.together`` for the worker to run several
    requests' calls at once, ``fn.at_once`` for heavy work not to wait behind a running batch
    (kjbod.storage.workers)."""

    __slots__ = ("fn", "items", "together", "at_once")

    def __init__(self, fn: Callable[[Items], list[Any]], items: Items) -> None:
        self.fn = fn
        self.items = items
        self.together = getattr(fn, "together", None)
        self.at_once = getattr(fn, "at_once", False)  # heavy work: handed over without waiting (workers.submit)

    def __call__(self) -> list[Any]:
        return self.fn(self.items)

    def native(self, writer: Any, worker: Any) -> Any:
        """The call done on the loop with its write on the dir's native writer, where ``fn`` can and there is one
        item (see ``fn.native``); None where not."""
        native = getattr(self.fn, "native", None)
        if native is None or len(self.items) != 1:
            return None
        return native(self.items, writer, worker)


class _Waiting:
    """One request's dirs in flight: counts them down, answers the late ones at the timeout."""

    __slots__ = ("work", "future", "out", "left", "then", "deadlines", "tick")

    def __init__(self, work: DirWork, fn: Callable[[Items], list[Any]], handed: list[tuple[Any, Items]],
                 timeout_s: float | None, then: Callable[[], Any] | None, later: bool) -> None:
        # The running loop as this thread's last one found running, not asyncio.get_running_loop(): on Python
        # 3.11 that is a getpid system call (a check for a fork), one per Produce (see `_here`).
        try:
            deadlines = _HERE.deadlines
        except AttributeError:
            deadlines = _here()
        else:
            if not deadlines.loop.is_running():
                deadlines = _here()
        loop = deadlines.loop
        self.work = work
        self.then = then
        self.future: Any = Later() if later else loop.create_future()  # asyncio.Future or Later
        self.out: list[Items | None] = [items for _worker, items in handed]  # None once answered
        self.left = len(handed)
        self.deadlines: _Deadlines | None = None
        self.tick = 0
        if timeout_s is not None:
            self.deadlines = deadlines
            self.tick = deadlines.add(self, timeout_s)
        answered = self._answered
        for i, (worker, items) in enumerate(handed):
            worker.submit(_Call(fn, items), functools.partial(answered, i), loop)

    def _answered(self, i: int, ok: bool, value: Any) -> None:
        out = self.out
        items = out[i]
        if items is None:  # answered after the request gave up on it (or twice, by an abandoned worker)
            if ok and self.work.discard is not None:
                self.work.discard(value)
            return
        out[i] = None
        if ok:
            self.work._filled(items, value)
        else:
            self.work._failed(items, value)
        self.left -= 1
        if not self.left:
            if self.deadlines is not None:
                self.deadlines.remove(self, self.tick)
            self._done()

    def _time_up(self) -> None:
        out = self.out
        for i, items in enumerate(out):
            if items is not None:
                out[i] = None
                self.work._failed(items, None)
        self.left = 0
        self._done()

    def _done(self) -> None:
        future = self.future
        if future.done():  # cancelled: the connection went away
            return
        later = future.__class__ is Later
        then = self.then
        result = None
        if then is not None:
            try:
                result = then()
            except Exception as e:  # the handler's own error (CloseConnection, ...) is the request's answer
                if later:
                    future.fail(e)
                else:
                    future.set_exception(e)
                return
            if result.__class__ is Later:  # a further wait answered by a callback (acks=all: the HW move)
                result.on_done(future.take if later else lambda done: _copy_later(done, future))
                return
            # A further wait (a future or a coroutine: both awaitable) is chained; an answer (the common case)
            # is told from one by its class alone, cheaper than asyncio's isfuture and iscoroutine checks.
            if getattr(result.__class__, "__await__", None) is not None:
                asyncio.ensure_future(result).add_done_callback(lambda f: _copy_outcome(f, future))
                return
        if later:
            future.resolve(result)
        else:
            future.set_result(result)


def _copy_outcome(source: asyncio.Future[Any], target: Any) -> None:
    """``source``'s outcome into ``target``, an asyncio.Future or a Later."""
    if source.cancelled():
        target.cancel()
        return
    e = source.exception()  # retrieved even when nobody waits any more (target cancelled)
    if target.done():
        return
    if target.__class__ is Later:
        if e is not None:
            target.fail(e)
        else:
            target.resolve(source.result())
    elif e is not None:
        target.set_exception(e)
    else:
        target.set_result(source.result())


def _copy_later(source: Later, target: Any) -> None:
    """A done Later's outcome into ``target``, an asyncio.Future or a Later, in the callback that completed it."""
    if target.done():  # cancelled: the connection went away
        return
    later = target.__class__ is Later
    try:
        value = source.result()
    except Exception as e:
        target.fail(e) if later else target.set_exception(e)
    else:
        target.resolve(value) if later else target.set_result(value)


_TICK_S = 0.01


class _Deadlines:
    """The timeouts of one loop's requests in flight, by the 10 ms tick they end in: one timer per tick."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.ticks: dict[int, dict[_Waiting, None]] = {}
        self.timers: dict[int, asyncio.TimerHandle] = {}
        self.newest = 0  # the latest tick with a timer: the one the next request (same timeout) most likely joins

    def add(self, waiting: _Waiting, timeout_s: float) -> int:
        tick = math.ceil((self.loop.time() + max(timeout_s, 0.0)) / _TICK_S)
        group = self.ticks.get(tick)
        if group is None:
            group = self.ticks[tick] = {}
            self.timers[tick] = self.loop.call_at(tick * _TICK_S, self._fire, tick)
            if tick > self.newest:
                newest, self.newest = self.newest, tick
                if not self.ticks.get(newest, True):  # left empty for this one: nobody joins it now
                    self._drop(newest)
        group[waiting] = None
        return tick

    def remove(self, waiting: _Waiting, tick: int) -> None:
        """``waiting`` answered in time. A tick left with nobody has its timer cancelled (at a moderate rate each
        tick holds a few requests, answered long before it, and its timer would wake the loop for nothing, a
        hundred times a second at 500 requests/s), except the newest, which the next requests may still join
        (cancelled once a later tick takes its place): one timer per tick, not one per request."""
        group = self.ticks.get(tick)
        if group is not None:
            group.pop(waiting, None)
            if not group and tick != self.newest:
                self._drop(tick)

    def _drop(self, tick: int) -> None:
        del self.ticks[tick]
        self.timers.pop(tick).cancel()

    def _fire(self, tick: int) -> None:
        started = time.perf_counter() if timeline.ON else 0.0
        self.timers.pop(tick, None)
        group = self.ticks.pop(tick, {})
        for waiting in group:
            waiting._time_up()
        if timeline.ON:
            timeline.span("deadline tick", started, str(len(group)))


_BY_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Deadlines] = weakref.WeakKeyDictionary()
# Per thread, `deadlines`: the _Deadlines of the loop last found running on it (`_here`).
_HERE = threading.local()


def _deadlines(loop: asyncio.AbstractEventLoop) -> _Deadlines:
    found = _BY_LOOP.get(loop)
    if found is None:
        found = _BY_LOOP[loop] = _Deadlines(loop)
    return found


def _here() -> _Deadlines:
    """The running loop's _Deadlines, kept as this thread's: while that loop still runs, it is the one running
    here (a thread runs one loop at a time, and a loop that stopped here is not run on another thread meanwhile by
    anything in kjbod), which ``loop.is_running()`` tells without a system call; a thread that has gone on to
    another loop (tests run one per test) finds its own again here."""
    found = _HERE.deadlines = _deadlines(asyncio.get_running_loop())
    return found
