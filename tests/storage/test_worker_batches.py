"""A dir worker's batch of one closure (the usual hand-over at a light load: a follower's answer, a quiet dir's
request) takes a short way through DirWorker._answer; its callers must get what a batch of several gives: each
closure's result, or its exception, once, on the loop; a closure posted from another thread (no answer) runs too.
No test waits for a clock: each awaits its answers. The bare worker is conftest's ``worker``."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from kjbod.storage.workers import DirWorker


class Boom(Exception):
    pass


def _ok() -> str:
    return "written"


def _fails() -> None:
    raise Boom("the disk said no")


async def _outcomes(w: DirWorker, fns: list[Any], together: bool) -> list[tuple[bool, Any]]:
    """Each closure's (ok, value), submitted in one loop pass (one batch) or each after the last's answer."""
    loop = asyncio.get_running_loop()
    got: list[tuple[bool, Any]] = []
    futures = []
    for fn in fns:
        future = loop.create_future()
        futures.append(future)
        w.submit(fn, lambda ok, value, f=future: (got.append((ok, value)), f.set_result(None)), loop)
        if not together:
            await future
    await asyncio.gather(*futures)
    return got


async def test_a_batch_of_one_answers_as_a_batch_of_several(worker: DirWorker):
    sizes: list[int] = []
    fns = [_ok, _fails, _ok, _fails]
    spy = [lambda fn=fn: (sizes.append(len(worker._current)), fn())[1] for fn in fns]
    alone = await _outcomes(worker, spy, together=False)
    assert sizes == [1, 1, 1, 1]
    sizes.clear()
    batched = await _outcomes(worker, spy, together=True)
    assert sizes == [4, 4, 4, 4]
    for got in (alone, batched):
        assert [(ok, value if ok else type(value)) for ok, value in got] == [
            (True, "written"), (False, Boom), (True, "written"), (False, Boom)]


def test_a_closure_posted_alone_from_another_thread_runs_and_answers_nobody(worker: DirWorker):
    ran = threading.Event()
    worker.post(ran.set, "alone")
    assert ran.wait(60)
    worker.post(_fails, "alone, failing")  # logged, not raised: the worker goes on
    assert worker.call(_ok) == "written"
