"""Background tasks of the client side (heartbeats, metadata fetches, replica fetchers): waiting for an event
with a bound, without a task of its own, so that they can be stopped; stopping one cleanly."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

__all__ = ["cancel_and_wait", "wait_event"]


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancels `task` and waits until it has finished (its cancellation is not the caller's)."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Waits until `event` is set, for at most `timeout` seconds (None: no limit); whether it is set.

    Not `asyncio.wait_for(event.wait(), timeout)`, for two reasons. On Python 3.11 that returns normally when its
    task is cancelled just as the event is set (the inner wait is done, so the cancellation is dropped): a loop
    around it then goes on running, and whoever stops it with cancel_and_wait waits for ever; a timeout scope
    keeps no inner task, so the cancellation always arrives. And no task is made per wait: the caller's own task
    is woken straight from the event, one loop pass sooner. The replication path waits like this once per
    replicated batch on each side (a follower's parked fetch at the leader, the fetcher's wait for its appends)."""
    if event.is_set():
        return True
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()
    return event.is_set()
