"""Background tasks of the client side (heartbeats, metadata fetches): stopping one cleanly; waiting for an event
with a bound, without a task of its own."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

__all__ = ["cancel_and_wait", "wait_set"]


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancels `task` and waits until it has finished (its cancellation is not the caller's)."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def wait_set(event: asyncio.Event, timeout_s: float | None) -> bool:
    """Waits until `event` is set or `timeout_s` seconds have passed (None: no bound); returns whether it was set.

    Unlike ``asyncio.wait_for(event.wait(), ...)`` no task is made for the wait: the caller's own task is woken
    straight from the event, one pass of the loop sooner and without a task's cost. The replication path waits
    like this once per replicated batch on each side (a follower's parked fetch at the leader, the fetcher's wait
    for its appends), so that cost is paid thousands of times a second."""
    if event.is_set():
        return True
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            await event.wait()
    return event.is_set()
