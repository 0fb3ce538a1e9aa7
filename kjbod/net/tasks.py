"""Background tasks of the client side (heartbeats, metadata fetches, replica fetchers): waiting in them so that
they can be stopped, and stopping one cleanly."""

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

    Not `asyncio.wait_for(event.wait(), timeout)`: on Python 3.11 that returns normally when its task is cancelled
    just as the event is set (the inner wait is done, so the cancellation is dropped).  A loop around it then goes
    on running, and whoever stops it with cancel_and_wait waits for ever.  A timeout scope keeps no inner task:
    the cancellation always arrives."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()
    return event.is_set()
