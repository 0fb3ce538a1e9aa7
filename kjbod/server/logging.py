"""Logging setup for kjbod processes: structlog, JSON lines on stderr for servers, a readable console format for people.

Library modules get their logger with `get_logger("kjbod.x")` at import time; it stays lazy, so whatever
`configure_logging` sets later applies. The standard library's `logging` (asyncio, third-party code) is routed to the
same stream in the same format, so a server's stderr is one consistent stream of events.

Level filtering happens in structlog's filtering bound logger: a call below the level is a no-op method, so debug
calls on hot paths cost almost nothing (a logger given a level of its own at runtime, kjbod.broker.log_levels, lowers
that bar to its level while it has one); code that would compute values only for a debug line checks
`logger.is_enabled_for(logging.DEBUG)` once, up front.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Literal, TextIO

import structlog

from kjbod.broker.log_levels import LEVELS, NamedWriteLoggerFactory, drop_below_logger_level

__all__ = ["LOG_FORMATS", "LOG_LEVELS", "configure_logging", "get_logger", "parse_level", "reset_logging"]

LOG_FORMATS = ("json", "console")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def parse_level(level: str | int) -> int:
    """A stdlib level number from "info", "WARNING", 20, ..."""
    if isinstance(level, int):
        return level
    number = logging.getLevelNamesMapping().get(level.upper())
    if number is None:
        raise ValueError(f"unknown log level {level!r} (expected one of {', '.join(LOG_LEVELS)})")
    return number


def configure_logging(
    fmt: Literal["json", "console"] = "json", level: str | int = "info", *, stream: TextIO | None = None
) -> None:
    """Send structlog and stdlib logging to `stream` (default: stderr) as JSON lines or console lines."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"unknown log format {fmt!r} (expected json or console)")
    level_no = parse_level(level)
    out = sys.stderr if stream is None else stream
    LEVELS.reset()  # loggers' own levels (kafka-configs' broker-loggers) last until the next configuration
    LEVELS.set_root(level_no)

    timestamper = structlog.processors.TimeStamper(fmt="iso", utc=True)
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        timestamper,
    ]
    renderer: Any
    if fmt == "json":
        shared.append(structlog.processors.format_exc_info)
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=_isatty(out))

    structlog.configure(
        processors=[drop_below_logger_level, *shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level_no),
        logger_factory=NamedWriteLoggerFactory(out),
        context_class=dict,
        # Not cached: tests and the CLI may reconfigure; the lookup cost only applies to calls that do log.
        cache_logger_on_first_use=False,
    )

    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[_add_component, *shared],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_kjbod", False):
            root.removeHandler(old)
    handler._kjbod = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level_no)


def get_logger(name: str, **initial_values: Any) -> Any:
    """A lazy structlog logger that tags every event with `component=name` (the stdlib logger name, for events
    that come through stdlib logging)."""
    return structlog.get_logger(component=name, **initial_values)


def _add_component(logger: Any, method_name: str, event_dict: Any) -> Any:
    record = event_dict.get("_record")
    if record is not None:
        event_dict.setdefault("component", record.name)
    return event_dict


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def reset_logging() -> None:
    """Undo `configure_logging` (structlog defaults, kjbod's stdlib handler removed); for tests."""
    structlog.reset_defaults()
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_kjbod", False):
            root.removeHandler(old)
