"""``KJBOD_TRACE=<dir>``: turns on kjbod.net.trace for this process and hooks the background work of modules that
do not record their own events (see kjbod.net.trace), so a latency tail can be laid next to what ran under it:
garbage collections, heartbeats, the metadata log's fetches, the dir workers' placement reviews, the dirs'
background ticks and the stall watchdog's looks. Each becomes a span (``<kind>+`` ... ``<kind>-``) around the
method that does it. Installed once, only when the variable is set: without it nothing here is imported."""

from __future__ import annotations

import functools
import gc
import inspect
from collections.abc import Callable
from typing import Any

from kjbod.net import trace

# (module, class, method, kind): the background work hooked (each a method of its own, called where it runs)
HOOKS = (
    ("kjbod.storage.workers", "Placement", "_review", "placement_review"),
    ("kjbod.storage.workers", "Placement", "_place", "placement_place"),
    ("kjbod.storage.workers", "Placement", "_spread", "placement_spread"),
    ("kjbod.storage.manager", "LogManager", "tick_dir", "dir_tick"),
    ("kjbod.storage.health", "DirWatchdog", "check", "watchdog"),
    ("kjbod.broker.node", "BrokerNode", "_heartbeat", "heartbeat"),
    ("kjbod.broker.metadata_follower", "MetadataFollower", "_fetch_once", "metadata_fetch"),
)


def install_tracing() -> bool:
    """Tracing on and the hooks in place, when $KJBOD_TRACE names a directory; False otherwise."""
    if not trace.start():
        return False
    import importlib

    for module, cls_name, method, kind in HOOKS:
        cls = getattr(importlib.import_module(module), cls_name)
        original = getattr(cls, method)
        if not getattr(original, "_traced", False):
            setattr(cls, method, _spanned(original, kind))
    gc.callbacks.append(_on_gc)
    return True


def _spanned(fn: Callable[..., Any], kind: str) -> Callable[..., Any]:
    opened, closed = kind + "+", kind + "-"
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def spanned_async(*args: Any, **kwargs: Any) -> Any:
            trace.event(opened)
            try:
                return await fn(*args, **kwargs)
            finally:
                trace.event(closed)

        spanned_async._traced = True  # type: ignore[attr-defined]
        return spanned_async

    @functools.wraps(fn)
    def spanned(*args: Any, **kwargs: Any) -> Any:
        trace.event(opened)
        try:
            return fn(*args, **kwargs)
        finally:
            trace.event(closed)

    spanned._traced = True  # type: ignore[attr-defined]
    return spanned


def _on_gc(phase: str, info: dict[str, int]) -> None:
    trace.event("gc+" if phase == "start" else "gc-", info.get("generation", -1))
