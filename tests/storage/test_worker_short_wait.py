"""The loop's short wait for a quiet, healthy dir's answers (kjbod.storage.workers.DirWorker._wait_answers).

What these show: while the process is quiet the loop settles a hand-over's answers itself, in the pass that
handed it over, and the worker posts nothing to the loop's inbox; a dir that does not answer within the wait is
answered through the inbox, exactly once, and is not waited for again for SYNC_BACKOFF_S; heavy work, a busy
process, injected faults and an offline dir are never waited for. The waits are made long where a test needs
the answer to come within them, so a slow machine cannot turn them into misses; no test asserts a duration.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from kjbod.storage import workers
from kjbod.storage.workers import DirWorker


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts of the inbox's posts and of the loop's waits."""
    counts = {"posts": 0, "waits": 0}
    post, wait = workers._Inbox.post, DirWorker._wait_answers

    def counting_post(self: Any, *args: Any) -> None:
        counts["posts"] += 1
        post(self, *args)

    def counting_wait(self: Any) -> None:
        counts["waits"] += 1
        wait(self)

    monkeypatch.setattr(workers._Inbox, "post", counting_post)
    monkeypatch.setattr(DirWorker, "_wait_answers", counting_wait)
    return counts


def _quiet(monkeypatch: pytest.MonkeyPatch, wait_ms: float) -> None:
    monkeypatch.setattr(workers, "_may_wait", lambda: True)
    monkeypatch.setattr(workers, "SYNC_WAIT_MS", wait_ms)


def test_a_quiet_loop_settles_a_healthy_dirs_answers_in_the_pass_that_handed_them_over(
        worker: DirWorker, counted: dict[str, int], monkeypatch: pytest.MonkeyPatch):
    _quiet(monkeypatch, 60_000)
    answers: list[tuple[bool, Any, bool]] = []

    async def scenario() -> None:
        on_loop = threading.get_ident()
        for i in range(5):
            worker.submit(lambda i=i: i * 10, lambda ok, v: answers.append((ok, v, threading.get_ident() == on_loop)))
            await asyncio.sleep(0)  # the hand-over runs before this resumes, and waits for the answer
            assert len(answers) == i + 1

    asyncio.run(scenario())
    assert answers == [(True, i * 10, True) for i in range(5)]
    assert counted == {"posts": 0, "waits": 5}  # every answer taken by the waiting loop, none through the inbox


def test_a_dir_that_does_not_answer_in_time_is_answered_through_the_inbox_once_and_not_waited_for_again(
        worker: DirWorker, counted: dict[str, int], monkeypatch: pytest.MonkeyPatch):
    _quiet(monkeypatch, 1)
    gate = threading.Event()
    answers: list[Any] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        first = loop.create_future()
        worker.submit(lambda: gate.wait(60) and "late", lambda ok, v: (answers.append(v), first.set_result(None)))
        await asyncio.sleep(0)  # handed over; the wait runs out while the job is held at the gate
        assert answers == [] and counted["waits"] == 1
        gate.set()
        await first
        second = loop.create_future()
        worker.submit(lambda: "next", lambda ok, v: (answers.append(v), second.set_result(None)))
        await second

    asyncio.run(scenario())
    assert answers == ["late", "next"]  # the late answer once, then the next
    assert counted["waits"] == 1  # backed off: the second hand-over did not wait
    assert counted["posts"] == 2  # both answers came through the inbox


@pytest.mark.parametrize("why", ["busy process", "heavy work", "heavy work behind light", "faults injected",
                                 "dir offline"])
def test_no_wait_where_the_loop_has_better_to_do_or_the_dir_may_not_answer(
        worker: DirWorker, counted: dict[str, int], monkeypatch: pytest.MonkeyPatch, why: str):
    _quiet(monkeypatch, 60_000)
    fn: Any = lambda: "done"  # noqa: E731
    if why == "busy process":
        monkeypatch.setattr(workers, "_may_wait", lambda: False)
    elif why.startswith("heavy work"):
        def heavy() -> str:
            return "done"
        heavy.at_once = True  # type: ignore[attr-defined]
        fn = heavy
    elif why == "faults injected":
        monkeypatch.setattr(workers.fsio.FAULTS, "active", True)
    else:
        monkeypatch.setattr(worker.io, "online", False)
    answers: list[Any] = []

    async def scenario() -> None:
        done = asyncio.get_running_loop().create_future()
        if why == "heavy work behind light":  # both in one hand-over, which the light one's scheduled
            worker.submit(lambda: "light", lambda ok, v: answers.append(v))
        worker.submit(fn, lambda ok, v: (answers.append(v), done.set_result(None)))
        await done

    asyncio.run(scenario())
    assert answers == (["light", "done"] if why == "heavy work behind light" else ["done"])
    assert counted == {"posts": 1, "waits": 0}


def test_work_held_behind_a_running_batch_is_answered_after_it(
        worker: DirWorker, counted: dict[str, int], monkeypatch: pytest.MonkeyPatch):
    # The held work goes over when the running batch's answers arrive, before they are settled: the loop must
    # not wait for the held work's answers there and settle them first (the requests would be answered out of
    # the order the worker ran them).
    _quiet(monkeypatch, 60_000)
    gate = threading.Event()
    answers: list[str] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        last = loop.create_future()
        monkeypatch.setattr(workers, "SYNC_WAIT_MS", 1)  # the first hand-over's wait runs out at the gate
        worker.submit(lambda: gate.wait(60) and "first", lambda ok, v: answers.append(v))
        await asyncio.sleep(0)
        monkeypatch.setattr(workers, "SYNC_WAIT_MS", 60_000)
        worker._sync_after = 0.0  # no back-off: the later hand-over may wait, where waiting is allowed
        worker.submit(lambda: "second", lambda ok, v: (answers.append(v), last.set_result(None)))
        await asyncio.sleep(0)  # held: the first is still out
        assert answers == []
        gate.set()
        await last

    asyncio.run(scenario())
    assert answers == ["first", "second"]
    assert counted["waits"] == 1  # only the first hand-over waited; the held one went over without a wait
