"""Each log dir's data path on a thread of its own: the event loop hands a dir's file work to that dir's worker
and awaits it, so a slow or hung disk holds up only the requests (and the partitions) that live on it.

Strategy: one :class:`DirWorker` per log dir, one thread, one FIFO queue. A request handler groups what it needs
by dir and submits one closure per dir (a Produce touching six partitions of one dir is one hand-off, not six);
the worker runs closures in the order they were submitted, so appends to a partition keep their order, and
everything a closure does on disk (validation, the write, a roll, index loads, the read that prepares a fetch's
file regions) happens on the dir's thread. Results go back to the loop in batches: the worker drains every
closure queued, runs them, then wakes the loop once with all their results, so a busy dir costs one wake-up per
batch of requests, not one per partition.

The two threads wake each other through bells (:class:`_Bell`, an eventfd each way: the worker's, and one inbox
per loop that every worker answers to) rung and waited on in system calls made with the GIL released, so the
woken thread finds the interpreter free instead of sleeping again on it until the ringer lets it go. With a
queue's lock and ``call_soon_threadsafe``, both rung holding the GIL, the server's threads were preempted 3.2-3.5
times per Produce at 500 requests/s; with the bells, 1.5-1.8 (the event loop alone: 0.6-1.0).

At most one batch of the loop's closures is in flight per worker: an idle worker gets a closure at the end of
the loop's pass (no added latency), but while it runs a batch, what the loop submits for that dir is held on the
loop and handed over as one batch when the running one's answers arrive. Under a heavy load the worker is then
woken once per batch of many requests, not once per request: under CPython's GIL each wake-up also costs the two
threads a hand-over of the interpreter, which at small requests cost more than the appends themselves (measured,
tools/bench/dir_workers.py).

While the process is quiet (Placement has the loop and the workers on one CPU: less than a quarter of a CPU
used), the loop, which has nothing else to do then, waits for the answers of a hand-over of light work up to
SYNC_WAIT_MS in a system call with the GIL released (_wait_answers), and settles them in the same pass: the
worker finds the interpreter free and the answers skip a pass through epoll, the inbox's wake-up and its
callbacks. A dir that misses that wait (slow, hung, or just a long batch) is not waited for again for
SYNC_BACKOFF_S, and its answers come through the inbox as always: a disk that turns bad costs the loop one such
wait at most per SYNC_BACKOFF_S. Busy, heavy work (``at_once``), injected faults or an offline dir: no wait; nor for
work held behind a running batch, which goes over as that batch's answers arrive and is answered after them.

A dir failed because an operation never returned (:mod:`kjbod.storage.health`) has its worker abandoned: the
closures queued behind the stuck one, and the stuck one itself, are answered with the dir's offline error at
once (their requests do not wait for a disk that will not answer), and the thread is left to the kernel. If the
stuck call ever returns, its result is dropped.

A closure may carry a ``together`` attribute: a function that runs several such closures (consecutive in a batch,
with the same ``together``) in one call and returns one result per closure, what each alone would have
returned. Produce uses it to write the batches that several requests bring to one partition at once (one lock
taken, one ``writev``: group commit); an exception it raises is every one of those closures' answer.

CPU placement: the event loop and the workers take turns (the loop waits in epoll while a worker appends, and
the GIL lets one run Python at a time), so ``kjbod serve`` keeps them on one CPU while the process is quiet
(:class:`Placement`). Then a hand-off wakes a thread on the CPU that is running, which is a context switch,
instead of one on an idle CPU, which on a VM is an interrupt to a halted virtual CPU. While the process is busy
the kernel spreads them again: the copies of 1 MiB writes, done without the GIL, then use the second CPU. Heavy
work handed to a worker that still runs earlier heavy work (big Produce requests back to back) spreads them at
once, without waiting for the reviews: the loop's reads of the next big request and the worker's write of the
last one then run side by side. So does a big send of the loop's own (:func:`loop_sends`: a Fetch of 1 MiB or
more answered from the page cache), whose copy gains nothing from the workers' CPU and needs whichever is free.

``KJBOD_DIR_WORKERS=0`` gives no dir a worker: handlers then run their closures inline on the event loop (the
old single-loop path, without Placement either), so the benchmark of the hand-off's cost measures both in one run;
``KJBOD_DIR_WORKERS=unplaced`` keeps the workers but leaves their CPU to the kernel (the benchmark's check of
the placement). Nothing else sets it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import resource
import select
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

import structlog

from kjbod.storage import fsio, timeline
from kjbod.storage.fsio import LogDirIO

try:  # optional (setup.py): without it every append goes through the dir's worker
    from kjbod.storage._nativewrite import Writer as _NativeWriter
except ImportError:  # pragma: no cover (built wherever a C compiler is)
    _NativeWriter = None
NATIVE_ENV = "KJBOD_NATIVE_APPENDS"  # "0": no native appends (for benchmarks against the worker's hand-off)

log = structlog.get_logger("kjbod.storage.workers")

WORKERS_ENV = "KJBOD_DIR_WORKERS"


def workers_enabled() -> bool:
    return os.environ.get(WORKERS_ENV, "1") != "0"


_loop_cpus: set[int] | None = None  # the event loop's CPU while the dir workers share it (Placement)


def current_cpu(tid: int | None = None) -> int:
    """The CPU the calling thread (or thread ``tid`` of this process) runs on now (Linux: /proc's stat, its 39th
    field)."""
    with open("/proc/thread-self/stat" if tid is None else f"/proc/self/task/{tid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])


class Placement:
    """Keeps the event loop's thread and the dir workers on one CPU while the process is quiet, and lets the
    kernel spread them while it is busy (see the module's docstring).

    Started on the loop's thread once the node has started; every REVIEW_S it compares the CPU time the process
    used (getrusage: every thread, one system call) and the time the loop's thread waited to run (its /proc
    schedstat, kept open and re-read) with the time passed. Placed, when they wanted more than BUSY of their
    one CPU (ran or waited) in two reviews in a row, they get every allowed CPU back: the copies of big writes
    and reads, which run without the GIL, can then use a second CPU, and a CPU crowded by other processes is
    left; one busy review (a burst, a neighbour's moment) does not move them. Spread, when they ran less than
    QUIET, they are placed again, on the CPU the loop runs on then (also after :meth:`spread_now`, which a
    hand-over of heavy work behind heavy work calls on the loop). A thread started while placed inherits the
    loop's CPU; the next review after Python's thread count changed (or the LOOK_OVER_EVERY-th) gives it every
    allowed CPU back (only the loop and the workers are placed).

    The review runs four times a second on a thread of its own that is never placed: on the loop it would be a
    stall for the request that came in meanwhile, and a loop placed on a CPU that another process crowds could
    not run the review that lets it go (seen in the replication bench: a follower's loop did not run for 540 ms,
    until its next review, on that loop, spread it). A loop that waited to run more than STARVED of the time
    since the last review is spread at once. The review is kept to two cheap reads (measured with
    KJBOD_TIMELINE: opening and reading each thread's schedstat, then every thread's affinity, took 0.18-0.34 ms
    at the median, the caches cold after a quarter second asleep; now 0.05-0.1 ms)."""

    REVIEW_S = 0.25
    BUSY = 0.75  # placed, the process ran or the loop waited to run more than this share of the time: spread
    QUIET = 0.25  # spread, the process ran less than this share: placed again
    LOOK_OVER_EVERY = 20  # placed, every other thread's CPUs are looked over at least every 20th review (5 s)
    STARVED = 0.5  # placed, the loop waited to run more than this share of the time: spread at once

    def __init__(self) -> None:
        self._moving = threading.Lock()  # the reviewer and the loop (heavy work, spread_now) both move threads
        self.allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
        self.loop_tid = threading.get_native_id()
        try:  # kept open: re-read in place, it costs a tenth of an open and read of a cold /proc path (measured)
            self._schedstat: int | None = os.open(f"/proc/self/task/{self.loop_tid}/schedstat",
                                                  os.O_RDONLY | os.O_CLOEXEC)
        except OSError:  # no /proc, or no schedstats in this kernel: what ran decides alone
            self._schedstat = None
        self._last = (time.monotonic(), *self._usage())
        self._stopping = threading.Event()
        self._reviewer: threading.Thread | None = None
        self._busy_before = False  # the last review found the process busy
        self._threads = 0  # Python's thread count when the threads were last looked over (_free_others)
        self._reviews_placed = 0

    def start(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Place the threads now (called on ``loop``'s thread, the one placed with the workers) and review every
        REVIEW_S on a thread of its own; False where placement is not done (one CPU allowed anyway,
        ``KJBOD_DIR_WORKERS=unplaced``, or no workers at all: ``KJBOD_DIR_WORKERS=0``, the old single-loop path the
        benchmark measures against, which had no placement and must keep none to be that reference)."""
        if not workers_enabled() or os.environ.get(WORKERS_ENV) == "unplaced" or len(self.allowed) < 2:
            self._close()  # nothing to review
            return False
        # Started before the threads are placed, so it keeps every allowed CPU (a thread inherits its starter's).
        self._reviewer = threading.Thread(target=self._reviews, name="kjbod-placement", daemon=True)
        self._reviewer.start()
        self._place()
        global _placement
        _placement = self
        return True

    def stop(self) -> None:
        global _placement
        if _placement is self:
            _placement = None
        self._stopping.set()
        if self._reviewer is not None:
            self._reviewer.join(5)
            self._reviewer = None
        self._spread()
        self._close()

    def spread_now(self, why: str = "spread, heavy work overlapping") -> None:
        """Every allowed CPU back at once, from the loop: heavy work was handed to a worker still busy with
        earlier heavy work (DirWorker._hand_over), so the worker's big writes and checks and the loop's reads of the
        next big requests can run side by side; or the loop itself is about to copy a lot (loop_sends). The
        reviews would see it too late: two busy reviews take half a second, and a burst of big requests (the
        benchmark's 32 of 1 MiB) is over before that, all of it spent on one CPU. The next review places them
        again once the process is quiet (QUIET)."""
        started = time.perf_counter() if timeline.ON else 0.0
        self._spread()
        self._busy_before = True  # the first review after this sees a busy process, not a burst's start
        if timeline.ON:
            timeline.span("placement review", started, why)

    def _reviews(self) -> None:
        while not self._stopping.wait(self.REVIEW_S):
            try:
                self._review()
            except Exception:  # a bug here must not end the reviews (the threads would stay where they are)
                log.exception("dir_workers_placement_review_failed")

    def _close(self) -> None:
        if self._schedstat is not None:
            os.close(self._schedstat)
            self._schedstat = None

    def _review(self) -> None:
        started = time.perf_counter() if timeline.ON else 0.0
        now = (time.monotonic(), *self._usage())
        passed = max(now[0] - self._last[0], 1e-3)
        ran, waited = (max(now[i] - self._last[i], 0.0) / passed for i in (1, 2))
        self._last = now
        busy = ran + waited > self.BUSY
        if _loop_cpus is None:
            action = "place" if ran < self.QUIET else "stay spread"
            if ran < self.QUIET:
                self._place()
        elif (busy and self._busy_before) or waited > self.STARVED:
            action = "spread" if busy and self._busy_before else "spread, the loop starved"
            self._spread()
        else:
            action = "stay placed, busy once" if busy else "stay placed"
            self._reviews_placed += 1
            if threading.active_count() != self._threads or self._reviews_placed % self.LOOK_OVER_EVERY == 0:
                action += ", threads looked over"
                self._free_others()
        self._busy_before = busy
        if timeline.ON:
            timeline.span("placement review", started, action)

    def _usage(self) -> tuple[float, float]:
        """Seconds the process has run (all its threads), and the loop's thread waited to run, so far."""
        used = resource.getrusage(resource.RUSAGE_SELF)
        waited = 0
        if self._schedstat is not None:
            try:
                waited = int(os.pread(self._schedstat, 64, 0).split()[1])
            except (OSError, ValueError, IndexError):
                pass
        return used.ru_utime + used.ru_stime, waited / 1e9

    def _place(self) -> None:
        global _loop_cpus
        with self._moving:
            try:
                cpus = {current_cpu(self.loop_tid)}
                os.sched_setaffinity(self.loop_tid, cpus)
            except (OSError, ValueError, IndexError) as e:  # no /proc, or a cpuset that changed: the kernel chooses
                log.info("dir_workers_not_placed", reason=str(e))
                return
            _loop_cpus = cpus
            self._threads = threading.active_count()  # threads started from now on inherit the loop's CPU
            for worker in _workers():
                worker._set_cpus(cpus)

    def _spread(self) -> None:
        global _loop_cpus
        with self._moving:
            if _loop_cpus is None:
                return
            _loop_cpus = None
            _set_cpus(self.loop_tid, self.allowed)
            for worker in _workers():
                worker._set_cpus(self.allowed)

    def _free_others(self) -> None:
        """Every allowed CPU back for a thread that inherited the loop's (threads the interpreter does not count,
        libuv's own, are not looked for: they start for name look-ups, not on the data path)."""
        self._threads = threading.active_count()
        placed = _loop_cpus
        ours = {self.loop_tid} | {w._thread.native_id for w in _workers()} | {
            w._native.native_id for w in _workers() if w._native is not None}
        try:
            tids = [int(t) for t in os.listdir("/proc/self/task")]
        except OSError:
            return
        for tid in tids:
            if tid in ours:
                continue
            try:
                inherited = os.sched_getaffinity(tid) == placed
            except OSError:  # ended meanwhile
                continue
            if inherited:
                _set_cpus(tid, self.allowed)


_placement: Placement | None = None  # the started one (a server has one), for DirWorker._hand_over

LOOP_SENDS_HEAVY = 1 << 20  # bytes of file data one reply sends: from this on, the loop's own copy is heavy work


def loop_sends(nbytes: int) -> None:
    """The event loop is about to send ``nbytes`` of file data itself (a Fetch answered from the page cache, its
    regions copied to the socket by sendfile): from LOOP_SENDS_HEAVY on, threads placed on one CPU are spread
    (Placement.spread_now). Placement pays off for hand-offs to the workers; a loop busy with big copies of its
    own gains nothing from it and loses the kernel's choice of CPU: held to one, it waits there behind whatever
    else runs (the consumer it sends to, another process) instead of moving to the free one. Measured on the Fetch
    benchmark, servers interleaved over 30 rounds: placed, 8 us more CPU and 8 us more waiting on a run queue per
    3 MiB fetch than unplaced, and 1-6 % less throughput in four runs. Otherwise a compare or two."""
    if nbytes >= LOOP_SENDS_HEAVY and _loop_cpus is not None and _placement is not None:
        _placement.spread_now("spread, a big send on the loop")


def _set_cpus(tid: int, cpus: set[int]) -> None:
    try:
        os.sched_setaffinity(tid, cpus)
    except OSError as e:  # the thread ended, or the CPU left this process's cpuset: the kernel chooses
        log.debug("thread_not_placed", tid=tid, cpus=sorted(cpus), reason=str(e))


_running: weakref.WeakSet[DirWorker] = weakref.WeakSet()  # started, for Placement
_running_lock = threading.Lock()  # workers start on any thread: the set must not change while it is copied


def _workers() -> list[DirWorker]:
    with _running_lock:
        return list(_running)


def running_workers() -> list[DirWorker]:
    """This process's started dir workers (for debug hooks: kjbod.server.loop_profile profiles their threads)."""
    return _workers()


class _Bell:
    """A wake-up another thread waits on: an eventfd (a pipe where there is none), rung and waited on in system
    calls that run with the GIL released. A thread woken by it therefore finds the GIL free while the ringer is
    still in its write, where a ring made holding the GIL (a queue's lock, ``call_soon_threadsafe``) wakes a
    thread that at once sleeps again on the GIL and is woken a second time when the ringer lets it go: on one
    CPU, two more context switches per wake-up, one of them a preemption (measured, tools/bench/dir_workers.py).
    Rings before a wait are not lost (the count stays until read); several rings wake the waiter once."""

    __slots__ = ("_r", "_w", "__weakref__")

    def __init__(self, *, blocking: bool) -> None:
        if hasattr(os, "eventfd"):
            self._r = self._w = os.eventfd(0, os.EFD_CLOEXEC | (0 if blocking else os.EFD_NONBLOCK))
        else:  # pragma: no cover (Linux has eventfd)
            self._r, self._w = os.pipe()
            os.set_blocking(self._r, blocking)
            os.set_blocking(self._w, False)
        # Closed once no thread can ring it any more; not at the interpreter's exit, where a daemon worker stuck
        # in a hung dir may still come back to it (the process's end closes it).
        weakref.finalize(self, _close_fds, self._r, self._w).atexit = False

    @property
    def fd(self) -> int:
        return self._r

    def ring(self) -> None:
        try:
            os.write(self._w, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        except BlockingIOError:  # a full pipe (or a counter at its maximum): the waiter is woken anyway
            pass

    def wait(self) -> None:
        """Until rung (at once if rung since the last wait); a bell made non-blocking returns at once."""
        try:
            os.read(self._r, 8 if self._r == self._w else 4096)
        except BlockingIOError:
            pass


def _close_fds(r: int, w: int) -> None:
    os.close(r)
    if w != r:
        os.close(w)


class _Inbox:
    """The workers' answers to one event loop: callbacks queued from worker threads and run on the loop, which
    a :class:`_Bell` it reads wakes (``call_soon_threadsafe`` rings the loop holding the GIL: see _Bell). One per
    loop, made on the loop's thread by the first submit from it, closed with the loop."""

    __slots__ = ("_calls", "_bell", "_loop", "__weakref__")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._calls: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        self._bell = _Bell(blocking=False)
        self._loop = weakref.ref(loop)
        loop.add_reader(self._bell.fd, self._run)

    def post(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop soon, from any thread (dropped when the loop is closed)."""
        loop = self._loop()
        if loop is None or loop.is_closed():
            return
        self._calls.append((fn, args))
        self._bell.ring()

    def _run(self) -> None:
        self._bell.wait()  # cleared before the calls are taken: a ring after this is read next time
        calls = self._calls
        while calls:
            fn, args = calls.popleft()
            try:
                fn(*args)
            except Exception:  # one answer's bug must not keep the others'
                log.exception("dir_worker_callback_failed")


_INBOXES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Inbox] = weakref.WeakKeyDictionary()


def _inbox(loop: asyncio.AbstractEventLoop) -> _Inbox:
    """``loop``'s inbox (called on its thread)."""
    inbox = _INBOXES.get(loop)
    if inbox is None:
        inbox = _INBOXES[loop] = _Inbox(loop)
    return inbox


Done = Callable[[bool, Any], None]  # called on the loop with (True, result) or (False, exception)
_Job = tuple[Callable[[], Any], _Inbox | None, Done | None]  # no inbox: posted from any thread, unanswered
_STOP = object()


def _settle(results: list[tuple[Done, bool, Any]], _batch: object = None) -> None:
    """On the loop: hand each closure's result (or exception) to its callback (``_batch``: the closures, freed
    here when this returns)."""
    for done, ok, value in results:
        try:
            done(ok, value)
        except Exception:  # one request's bug must not keep the others' answers
            log.exception("dir_worker_callback_failed")


# The short wait (see DirWorker._hand_over): how long the loop waits for a quiet, healthy dir's answer, and how
# long after a wait that ran out it does not wait on that dir again.
SYNC_WAIT_MS = 1
SYNC_BACKOFF_S = 1.0


def _may_wait() -> bool:
    """Whether the process is quiet enough for the loop to wait for a dir's answer (Placement keeps the loop and
    the workers on one CPU only while the process ran less than a quarter of its time)."""
    return _loop_cpus is not None


class DirWorker:
    """The one thread that does a log dir's request-path file work, in submission order."""

    def __init__(self, io: LogDirIO) -> None:
        self.io = io
        self._jobs: deque[Any] = deque()  # lists of jobs and _STOP, taken by the thread (see _take)
        self._bell = _Bell(blocking=True)  # the thread waits on it for jobs
        self._current: list[_Job] = []  # the batch being run (read by abandon() from another thread)
        self._held: list[_Job] = []  # submitted on the loop, not handed over yet (see submit)
        self._held_heavy = False  # one of them is heavy work (``at_once``)
        self._in_flight = False  # a hand-over's answers are not back on the loop yet (loop-side state)
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop holding _held, told when abandoned
        self._inbox: _Inbox | None = None  # that loop's, where the answers go
        self.abandoned = False
        self._handed_at = self._delivered_at = 0.0  # KJBOD_TIMELINE only: the last hand-over's legs
        # The short wait (see _hand_over): the loop waiting, the answers the worker left for it, the bell it rings.
        self._sync_lock = threading.Lock()  # never held across file work: only to hand the answers over
        self._sync_waiting: _Inbox | None = None  # the inbox whose answers the waiting loop takes itself
        self._sync_got: tuple[list[tuple[Done, bool, Any]], list[_Job]] | None = None
        self._sync_bell = _Bell(blocking=False)
        self._sync_poll = select.poll()
        self._sync_poll.register(self._sync_bell.fd, select.POLLIN)
        self._sync_after = 0.0  # monotonic time before which the loop does not wait on this dir (it ran out)
        self._native: Any = None  # the dir's native append writer (see native_writer), made on first use
        self._native_waits: set[_NativeWait] = set()  # its appends not back in time, not answered yet (loop-side)
        self._native_on = _NativeWriter is not None and os.environ.get(NATIVE_ENV, "1") != "0"
        self.degraded: Callable[[], bool] = lambda: False  # the dir seen slow (the LogManager sets it)
        self._thread = threading.Thread(target=self._run, name=f"kjbod-dir-worker {io.path}", daemon=True)
        self._thread.start()
        with _running_lock:
            _running.add(self)

    def __repr__(self) -> str:
        return f"DirWorker({self.io.path!r}, abandoned={self.abandoned})"

    def submit(self, fn: Callable[[], Any], done: Done, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Run ``fn`` on this dir's thread after everything submitted before it; ``done(ok, value)`` gets its
        result or exception on the calling loop (``loop``, the running one when not given; exactly once: an
        abandoned dir's closures get its offline error).

        Closures submitted during one pass of the loop (every request read from every ready connection) reach the
        worker together, at the end of that pass, or, while the worker still runs the previous hand-over, when
        its answers are back: one wake-up of the thread per batch, not one per request. A closure whose
        ``at_once`` attribute is true (heavy work: a big Produce to validate and write) goes over at the end of
        the pass even then, with what is held before it: held behind a running batch, a big request would wait
        for it and its answer for every other one of the next batch, and the worker would sit idle meanwhile."""
        if loop is None:
            loop = asyncio.get_running_loop()
        inbox = self._inbox
        if self._loop is not loop or inbox is None:
            inbox = self._inbox = _inbox(loop)
            self._loop = loop
        held = self._held
        held.append((fn, inbox, done))
        if getattr(fn, "at_once", False):
            self._held_heavy = True
            loop.call_soon(self._hand_over, True)
        elif len(held) == 1 and (not self._in_flight or self.abandoned):
            loop.call_soon(self._hand_over)

    def post(self, fn: Callable[[], Any], what: str) -> None:
        """Run ``fn`` on this dir's thread after everything queued, from any thread, answering nobody (a failure
        is logged with ``what``); dropped if the dir is abandoned."""
        if self.abandoned:
            log.warning("dir_worker_job_dropped", log_dir=self.io.path, what=what, reason="the dir is failed")
            return

        def job() -> None:
            try:
                fn()
            except Exception as e:
                log.warning("dir_worker_job_failed", log_dir=self.io.path, what=what, error=str(e))

        self._put([(job, None, None)])

    def call(self, fn: Callable[[], Any], *, gave_up: Callable[[], bool] = lambda: False) -> Any:
        """Run ``fn`` on this dir's thread after everything queued and return its result (or raise its exception),
        from another thread (a replica mover's final step: appends to this dir's partitions happen only here, so
        none can interleave with ``fn``). Raises the dir's offline error if the dir is abandoned first, and
        TimeoutError if ``gave_up()`` turns true before ``fn`` starts."""
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def job() -> None:
            if not done.set_running_or_notify_cancel():
                return
            try:
                done.set_result(fn())
            except BaseException as e:  # handed to the caller
                done.set_exception(e)

        if self.abandoned:
            raise self.io.offline_error()
        self._put([(job, None, None)])
        while True:
            try:
                return done.result(timeout=0.1)
            except concurrent.futures.TimeoutError:
                if self.abandoned and done.cancel():
                    raise self.io.offline_error() from None
                if gave_up() and done.cancel():
                    raise TimeoutError(f"gave up waiting for the worker of {self.io.path}") from None

    def _hand_over(self, at_once: bool = False, may_wait: bool = True) -> None:
        """On the loop: what is held goes to the worker as one batch (unless one is in flight and not
        ``at_once``: then it goes when that one's answers arrive, in _answers_in, which passes ``may_wait``
        False: the answers it holds are settled before this batch's, so requests are answered in the order the
        worker ran them)."""
        held = self._held
        if self.abandoned:
            self._held = []
            self._held_heavy = False
            err = self.io.offline_error()
            _settle([(done, False, err) for _fn, _loop, done in held if done is not None])
            return
        if (self._in_flight and not at_once) or not held:
            return
        heavy = self._held_heavy  # heavy work among them: no wait
        if (len(held) == 1 and may_wait and not at_once and not heavy and not self._in_flight
                and self._native_append(held[0])):
            return
        if heavy and self._in_flight and _loop_cpus is not None and _placement is not None:
            # Heavy work while the worker still runs the last hand-over (at_once: a big request behind another):
            # the two threads have work at the same time, and on one CPU they would take turns.
            _placement.spread_now()
        self._held = []
        self._held_heavy = False
        self._in_flight = True
        if timeline.ON:
            self._handed_at = time.perf_counter()
        waits = (may_wait and not at_once and not heavy and _may_wait() and self.io.online and not fsio.FAULTS.active
                 and time.monotonic() >= self._sync_after)
        if waits:
            self._sync_waiting = held[0][1]
        self._put(held)
        if self.abandoned:  # abandoned meanwhile, from another thread: nothing will run these
            self._sync_waiting = None
            self._fail_queued([])
        elif waits:
            self._wait_answers()

    def _wait_answers(self) -> None:
        """On the loop, right after a hand-over while the process is quiet and the dir healthy: wait up to
        SYNC_WAIT_MS for the answers, in a system call with the GIL released, and settle them here. The worker
        then finds the interpreter free, and the loop, which had nothing else to do, takes the answers without
        another pass through epoll, its inbox's wake-up and callbacks. Measured (tools/bench/dir_workers.py
        --p99, 15 rounds, same machine and hour): the Produce p99 at 500 requests/s went from 1.24x and 1.27x
        the loop path's to 1.14x and 1.20x; a bare round trip to an idle worker did not get shorter (the two
        thread wake-ups it still pays are most of it). A dir that does not answer in time is not waited for again for
        SYNC_BACKOFF_S: its answers come through the inbox as usual, so a disk that turns slow or hangs costs the
        loop one such wait, not one per request. Nothing here waits for a lock held across file work."""
        deadline = time.perf_counter() + SYNC_WAIT_MS / 1000
        poll = self._sync_poll.poll
        bell = self._sync_bell
        while True:
            left_ms = (deadline - time.perf_counter()) * 1000
            if left_ms > 0 and poll(left_ms):
                bell.wait()  # cleared; a ring left by a wait that ran out is read here and looked past
            with self._sync_lock:
                got = self._sync_got
                if got is not None or left_ms <= 0:
                    self._sync_got = None
                    self._sync_waiting = None
                    break
        if got is None:  # ran out: the answers come through the inbox
            self._sync_after = time.monotonic() + SYNC_BACKOFF_S
            return
        self._answers_in(*got)

    def _put(self, jobs: Any) -> None:
        """From any thread: ``jobs`` (a list, or _STOP) queued, the thread woken."""
        self._jobs.append(jobs)
        self._bell.ring()

    def _answers_in(self, results: list[tuple[Done, bool, Any]], _batch: object) -> None:
        """On the loop: a hand-over's answers. What was held meanwhile goes over first, so the worker runs it
        while the loop settles these (``_batch``: the closures, freed here when this returns)."""
        if timeline.ON:
            timeline.span("loop wake-up", self._delivered_at)
        self._in_flight = False
        if self._held:
            self._hand_over(may_wait=False)
        _settle(results)

    def _set_cpus(self, cpus: set[int]) -> None:
        """Where this worker's thread (and its native writer's) may run (from any thread; see Placement)."""
        tid = self._thread.native_id
        if tid is not None:
            _set_cpus(tid, cpus)
        if self._native is not None:
            _set_cpus(self._native.native_id, cpus)

    def native_writer(self) -> Any:
        """On the loop: the dir's native append writer (kjbod/storage/_nativewrite.c), when the loop may hand it an
        append and wait for it now, else None. As for the short wait (_hand_over): the process quiet, the worker not
        busy, no native write of this dir out, the dir online and not slow, no injected faults, no wait on it run
        out in the last SYNC_BACKOFF_S (:meth:`native_missed`). A hand-off to it wakes a thread that runs no Python:
        measured (tools/bench/dir_workers.py), half of what a hand-off to this worker adds to a write."""
        if (not self._native_on or not _may_wait() or self._in_flight or self._current or self._jobs
                or self._native_waits or self.abandoned or not self.io.online or fsio.FAULTS.active
                or time.monotonic() < self._sync_after or self.degraded()):
            return None
        writer = self._native
        if writer is None:  # started on the loop's thread: on its CPU while placed, as the worker is
            writer = self._native = _NativeWriter()
        return writer

    def _native_append(self, job: _Job) -> bool:
        """At the hand-over of one job, on the loop: done here instead, its write made by the dir's native writer
        (the job's ``native``: Produce's one append; PartitionLog.append_native), when the job can be and the
        writer may be used now. True when taken: answered, or (its write not back within the loop's wait) left
        for the writer's thread to settle, then answered on the loop (or with the dir's offline error, if the
        dir is failed first); the dir is then not waited for again for SYNC_BACKOFF_S."""
        fn, inbox, done = job
        native = getattr(fn, "native", None)
        if native is None or inbox is None or done is None:
            return False
        writer = self.native_writer()
        if writer is None:
            return False
        started = time.perf_counter() if timeline.ON else 0.0
        try:
            got = native(writer, self)
        except Exception as e:  # a bug: the request gets it, as from the worker; the others go on
            log.exception("dir_worker_native_append_failed", log_dir=self.io.path)
            got = (e, False)
        if got is None:
            return False
        self._held = []
        self._held_heavy = False
        results, pending = got
        if pending is False:
            _settle([(done, False, results)])
            return True
        if timeline.ON:
            timeline.span("native append", started, "done" if pending is None else "not back in time")
        if pending is None:
            _settle([(done, True, results)])
            return True
        self.native_missed()
        appended, complete = pending
        wait = _NativeWait(self, inbox, complete, done)
        self._native_waits.add(wait)
        if self.abandoned:  # failed meanwhile, from another thread, perhaps before this wait was there to answer
            wait.fail(self.io.offline_error())
        appended.when_settled(wait.settled)
        return True

    def native_missed(self) -> None:
        """A native write was not back within the loop's wait: the loop does not wait on this dir again for
        SYNC_BACKOFF_S (that write is finished on the writer's thread, the appends meanwhile on the worker)."""
        self._sync_after = time.monotonic() + SYNC_BACKOFF_S

    def _run(self) -> None:
        placed = _loop_cpus
        if placed is not None:  # started from another thread while the loop's CPU is shared: onto it
            _set_cpus(0, placed)
        while True:
            batch, stop = self._take()
            started = 0.0
            if timeline.ON:
                started = time.perf_counter()
                if self._handed_at:  # not for a job posted from another thread
                    timeline.span("worker wake-up", self._handed_at)
                    self._handed_at = 0.0
            answers = self._answer(batch)
            if self.abandoned:
                return  # a stuck call came back after the dir was failed: already answered with the error
            if timeline.ON:
                timeline.span("worker batch", started, str(len(batch)))
                self._delivered_at = time.perf_counter()
            if self._sync_waiting is not None:  # the loop is waiting for its answers (see _wait_answers)
                batch = self._hand_to_waiting(answers, batch)
            self._deliver(answers, batch)
            # Dropped before the next wait, so the loop, which gets the last references, frees the requests.
            batch = answers = None  # type: ignore[assignment]
            if stop:
                return

    def _take(self) -> tuple[list[_Job], bool]:
        """Everything queued (waiting for the first): one batch, answered with one wake-up of each loop."""
        jobs = self._jobs
        batch: list[_Job] = []
        stop = False
        while True:
            while jobs:  # only this thread takes, except abandon(), after which nothing runs
                try:
                    got = jobs.popleft()
                except IndexError:
                    break
                if got is _STOP:
                    stop = True
                elif batch:
                    batch.extend(got)
                else:  # the list handed over is the worker's from now on (the loop holds a new one)
                    batch = got
            if batch or stop:
                return batch, stop
            self._bell.wait()  # queued before the wait: the ring is still counted, so it returns at once

    def _answer(self, batch: list[_Job]) -> dict[_Inbox, list[tuple[Done, bool, Any]]]:
        self._current = batch
        n = len(batch)
        if n == 1:  # one closure (a follower's answer, a quiet dir's request): no group to look for
            fn, inbox, done = batch[0]
            try:
                result: tuple[Done, bool, Any] = (done, True, fn())  # type: ignore[assignment]
            except BaseException as e:  # handed to the awaiting request, which decides
                result = (done, False, e)  # type: ignore[assignment]
            self._current = []
            return {inbox: [result]} if inbox is not None else {}
        by_inbox: dict[_Inbox, list[tuple[Done, bool, Any]]] = {}
        i = 0
        while i < n:
            fn, inbox, done = batch[i]
            together = getattr(fn, "together", None)
            j = i + 1
            if together is not None:
                while j < n and getattr(batch[j][0], "together", None) is together:
                    j += 1
            if j - i > 1 and together is not None:
                jobs = batch[i:j]
                try:
                    outcomes = [(True, value) for value in together([job[0] for job in jobs])]
                except BaseException as e:  # every one of them answers it
                    outcomes = [(False, e)] * len(jobs)
                for (_fn, inbox, done), (ok, value) in zip(jobs, outcomes, strict=True):
                    if inbox is not None:
                        by_inbox.setdefault(inbox, []).append((done, ok, value))  # type: ignore[arg-type]
                i = j
                continue
            try:
                result = (done, True, fn())  # type: ignore[assignment]
            except BaseException as e:  # handed to the awaiting request, which decides
                result = (done, False, e)  # type: ignore[assignment]
            if inbox is not None:
                by_inbox.setdefault(inbox, []).append(result)
            i = j
        self._current = []
        return by_inbox

    def _hand_to_waiting(self, answers: dict[_Inbox, list[tuple[Done, bool, Any]]],
                         batch: list[_Job]) -> list[_Job]:
        """The waiting loop's answers (and the batch, to free on the loop) left for it and its bell rung; what
        remains for ``_deliver`` (other loops' answers, and the batch if the loop stopped waiting)."""
        with self._sync_lock:
            inbox = self._sync_waiting
            mine = answers.pop(inbox, None) if inbox is not None else None
            if mine is None:
                return batch
            self._sync_got = (mine, batch)
        self._sync_bell.ring()
        return []

    def _deliver(self, answers: dict[_Inbox, list[tuple[Done, bool, Any]]],
                 batch: list[_Job]) -> None:
        """Each loop's answers in one callback. The batch goes along: its closures hold the requests (their
        bytes, validated batches, answer slots), and freeing them here, away from the loop that made them, cost
        the worker more CPU than the appends themselves (measured); the loop frees them hot in its cache."""
        for inbox, results in answers.items():
            inbox.post(self._answers_in, results, batch)  # nothing if that loop is closed: nobody waits
            batch = []

    def abandon(self) -> None:
        """The dir was failed (a stall or an I/O error): answer everything queued or running with the dir's
        offline error now. Called from any thread."""
        if self.abandoned:
            return
        self.abandoned = True
        err = self.io.offline_error()
        for wait in list(self._native_waits):  # native appends stuck in the dir: answered now (their lock stays)
            wait.inbox.post(wait.fail, err)
        self._fail_queued(list(self._current))
        self._put(_STOP)  # a worker that is not stuck stops
        loop = self._loop
        if loop is not None:  # what the loop holds for this dir (a hand-over was in flight) is answered too
            try:
                loop.call_soon_threadsafe(self._hand_over)
            except RuntimeError:
                pass

    def _fail_queued(self, pending: list[_Job]) -> None:
        while True:
            try:
                jobs = self._jobs.popleft()
            except IndexError:
                break
            if jobs is not _STOP:
                pending.extend(jobs)
        err = self.io.offline_error()
        by_inbox: dict[_Inbox, list[tuple[Done, bool, Any]]] = {}
        for _fn, inbox, done in pending:
            if inbox is not None and done is not None:
                by_inbox.setdefault(inbox, []).append((done, False, err))
        for inbox, results in by_inbox.items():
            inbox.post(_settle, results)

    def stop(self) -> None:
        """Stop once what is queued has run (the caller joins; one stuck in the kernel is left behind, a daemon)."""
        if not self.abandoned:
            self._put(_STOP)

    def idle(self) -> bool:
        """Nothing queued or running (a hint, read without a lock)."""
        return (not self._held and not self._in_flight and not self._current and not self._jobs
                and not self._native_waits)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)


class _NativeWait:
    """A native append's request waiting for the writer's thread to settle it (DirWorker._native_append): answered
    exactly once, on the loop, with the append's results or the dir's offline error."""

    __slots__ = ("worker", "inbox", "complete", "answered", "done")

    def __init__(self, worker: DirWorker, inbox: _Inbox, complete: Callable[[bool, Any], Any], answered: Done) -> None:
        self.worker = worker
        self.inbox = inbox
        self.complete = complete
        self.answered = answered
        self.done = False

    def settled(self, ok: bool, value: Any) -> None:
        """From the writer's thread (or the loop, if settled before this was given): onto the loop."""
        self.inbox.post(self._on_loop, ok, value)

    def _on_loop(self, ok: bool, value: Any) -> None:
        self.worker._native_waits.discard(self)
        if not self.done:
            self.done = True
            self.answered(True, self.complete(ok, value))

    def fail(self, err: BaseException) -> None:
        """On the loop: the dir was failed with the write still out."""
        self.worker._native_waits.discard(self)
        if not self.done:
            self.done = True
            self.answered(False, err)
