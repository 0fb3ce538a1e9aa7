"""kjbod.net.tasks.wait_event: the bounded event wait of the replication path's long polls, without a task of its own."""

from __future__ import annotations

import asyncio

from kjbod.net.tasks import wait_event


async def test_woken_by_the_event_in_the_callers_own_task() -> None:
    event = asyncio.Event()
    seen: list[object] = []

    def setter() -> None:
        # while the waiter is parked, the only task is the test's own: the wait made none
        seen.append(len(asyncio.all_tasks()))
        event.set()

    asyncio.get_running_loop().call_soon(setter)
    assert await wait_event(event, 30) is True
    assert seen == [1]


async def test_a_set_event_returns_at_once() -> None:
    event = asyncio.Event()
    event.set()
    assert await wait_event(event, 0) is True


async def test_the_bound_passes_without_the_event() -> None:
    event = asyncio.Event()
    assert await wait_event(event, 0) is False
    assert await wait_event(event, -1) is False


async def test_an_outside_cancellation_still_cancels() -> None:
    event = asyncio.Event()
    waiter = asyncio.ensure_future(wait_event(event, None))
    await asyncio.sleep(0)
    waiter.cancel()
    try:
        await waiter
    except asyncio.CancelledError:
        pass
    assert waiter.cancelled()
