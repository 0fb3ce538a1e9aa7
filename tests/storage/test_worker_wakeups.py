"""How a dir worker and the event loop wake each other (kjbod.storage.workers): through bells (an eventfd each)
rung and waited on with the GIL released, the loop's through one inbox per loop that every worker posts its
answers to.

What these show: a ring made before the wait is kept and several rings wake the waiter once; a worker's answers
reach the loop through its inbox in the order they were posted, every worker of a loop sharing that one inbox;
answers for a loop that is closed are dropped without an error; a worker's bell is closed once the worker is gone
(no descriptor leaks per worker); a worker's batch still sees every job queued before its wake-up. No test waits
for a clock: each waits for a future or joins a thread.
"""

from __future__ import annotations

import asyncio
import gc
import os
import select
import threading
from pathlib import Path

import pytest

from kjbod.storage import workers
from kjbod.storage.fsio import LogDirIO
from kjbod.storage.workers import DirWorker


def _readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def test_a_ring_before_the_wait_is_kept_and_several_rings_wake_the_waiter_once():
    bell = workers._Bell(blocking=True)
    assert not _readable(bell.fd)
    bell.ring()
    bell.ring()
    assert _readable(bell.fd)
    bell.wait()  # returns at once: the rings were counted before it
    assert not _readable(bell.fd)  # both rings taken by the one wait


def test_a_non_blocking_bell_that_was_not_rung_returns_from_its_wait_at_once():
    bell = workers._Bell(blocking=False)
    bell.wait()
    assert not _readable(bell.fd)


def test_a_thread_waiting_on_a_bell_is_woken_by_a_ring_from_another():
    bell = workers._Bell(blocking=True)
    woken = threading.Event()

    def waiter() -> None:
        bell.wait()
        woken.set()

    t = threading.Thread(target=waiter)
    t.start()
    bell.ring()
    t.join(60)
    assert woken.is_set()


def test_answers_posted_from_threads_run_on_the_loop_in_order_through_one_inbox_per_loop(tmp_path: Path):
    a = DirWorker(LogDirIO(str(tmp_path / "a")))
    b = DirWorker(LogDirIO(str(tmp_path / "b")))
    seen: list[tuple[str, int, bool]] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        on_loop = threading.get_ident()
        for i in range(20):
            for name, w in (("a", a), ("b", b)):
                def answered(ok: bool, value: int, name: str = name) -> None:
                    seen.append((name, value, threading.get_ident() == on_loop))
                    if len(seen) == 40:
                        done.set_result(None)
                w.submit(lambda i=i: i, answered)
            if i % 3 == 0:
                await asyncio.sleep(0)  # some in other passes of the loop
        await done
        assert a._inbox is b._inbox is workers._INBOXES[loop]  # one inbox (one descriptor) for the loop

    try:
        asyncio.run(scenario())
    finally:
        for w in (a, b):
            w.stop()
            w.join(60)
    assert all(on_loop for _n, _v, on_loop in seen)  # every answer run on the loop's thread
    for name in "ab":
        assert [v for n, v, _ in seen if n == name] == list(range(20))  # each worker's in submission order


def test_what_is_posted_to_a_closed_loop_is_dropped_without_an_error():
    loop = asyncio.new_event_loop()
    inbox = workers._Inbox(loop)
    ran: list[int] = []
    inbox.post(ran.append, 1)
    loop.run_until_complete(asyncio.sleep(0))  # the reader runs the posted call
    loop.close()
    inbox.post(ran.append, 2)  # from a worker that answers late: nobody waits any more
    assert ran == [1]
    assert not inbox._calls


def test_a_workers_bell_is_closed_once_the_worker_is_gone(tmp_path: Path):
    w = DirWorker(LogDirIO(str(tmp_path)))
    fd = w._bell.fd
    os.fstat(fd)
    w.stop()
    w.join(60)
    assert not w.is_alive()
    del w
    gc.collect()
    with pytest.raises(OSError):
        os.fstat(fd)


def test_a_batch_takes_every_job_queued_before_the_worker_woke(tmp_path: Path):
    """Jobs queued from several threads while the worker is busy run as one batch after the busy one, in the
    order they were queued, and nothing is lost between the worker's last look and its wait."""
    w = DirWorker(LogDirIO(str(tmp_path)))
    gate = threading.Event()
    started = threading.Event()
    batches: list[int] = []
    order: list[int] = []

    def busy() -> None:
        started.set()
        gate.wait(60)

    try:
        w.post(busy, "busy")
        assert started.wait(60)
        posters = [threading.Thread(target=w.post, args=(lambda i=i: (order.append(i), batches.append(
            id(w._current))), f"job {i}")) for i in range(5)]
        for t in posters:
            t.start()
            t.join(60)
        gate.set()
        for i in range(100):  # after the batch: each alone, the worker woken for each
            w.call(lambda i=i: order.append(100 + i))
    finally:
        w.stop()
        w.join(60)
    assert order == list(range(5)) + [100 + i for i in range(100)]
    assert len(set(batches)) == 1  # the five queued while it was busy: one batch
