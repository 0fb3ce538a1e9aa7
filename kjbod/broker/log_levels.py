"""Loggers' levels changed while the process runs: Kafka's BROKER_LOGGER config resource (KIP-412), which
`kafka-configs.sh --entity-type broker-loggers` and `kjbod configs` read and change.

Strategy: the process has one configured level (``root``, from ``--log-level``); a logger may be given its own
level, by name, and a logger without one takes the level of its nearest dotted ancestor that has one, else
root's, as log4j resolves it for Kafka. The loggers are kjbod's (``kjbod.storage.workers`` ...: every logger a
loaded kjbod module made, found by looking through those modules, plus their dotted ancestors such as
``kjbod.storage``) and the standard library's that exist (``asyncio`` ...). Levels are Kafka's names: TRACE (kjbod
logs nothing below DEBUG, so TRACE shows what DEBUG shows), DEBUG, INFO, WARN, ERROR and FATAL.

Filtering stays where it is cheap: structlog's filtering logger drops every call below the lowest level in use
before any work is done, and only while some logger has a level of its own does one processor (first in the
chain) drop the events below their logger's level. Changes are this process's only and last until it stops, as
in Kafka (not written to the metadata log, not replayed at start).
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

import structlog

__all__ = ["ROOT", "VALID_LEVELS", "LEVELS", "LoggerLevels", "drop_below_logger_level", "logger_name"]

ROOT = "root"
# Kafka's level names (LogLevelConfig), sorted as its error message lists them.
VALID_LEVELS = ("DEBUG", "ERROR", "FATAL", "INFO", "TRACE", "WARN")
_NUMBER = {"TRACE": 5, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
           "ERROR": logging.ERROR, "FATAL": logging.CRITICAL}
_METHOD_LEVEL = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "warn": logging.WARNING,
                 "error": logging.ERROR, "exception": logging.ERROR, "critical": logging.CRITICAL,
                 "fatal": logging.CRITICAL, "msg": logging.INFO}


def kafka_name(level: int) -> str:
    """A stdlib level number as Kafka names it (the nearest level at or below it)."""
    for name in ("FATAL", "ERROR", "WARN", "INFO", "DEBUG"):
        if level >= _NUMBER[name]:
            return name
    return "TRACE"


def logger_name(logger: Any, event_dict: Any) -> str | None:
    """The name of the logger an event comes from: kjbod's loggers carry it (see NamedWriteLoggerFactory), events
    from the standard library's logging their component."""
    name = getattr(logger, "kjbod_name", None)
    if name is None:
        name = event_dict.get("component")
    return name


class LoggerLevels:
    """The root level and the loggers' own levels of this process (one instance: LEVELS)."""

    def __init__(self) -> None:
        self.root = logging.INFO
        self._own: dict[str, str] = {}  # logger name -> Kafka level name
        self._resolved: dict[str | None, int] = {}  # cache of effective levels, cleared on every change
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        """Some logger has a level of its own (the filtering processor has work)."""
        return bool(self._own)

    def set_root(self, level: int) -> None:
        with self._lock:
            self.root = level
            self._resolved = {}

    def lowest(self) -> int:
        """The lowest level any logger has: what structlog's filtering logger lets through."""
        return min([self.root, *(_NUMBER[v] for v in self._own.values())])

    def effective(self, name: str | None) -> int:
        """The level in force for a logger: its own, else its nearest dotted ancestor's, else root's."""
        cached = self._resolved.get(name)
        if cached is not None:
            return cached
        level = self.root
        probe = name
        while probe:
            own = self._own.get(probe)
            if own is not None:
                level = _NUMBER[own]
                break
            probe = probe.rpartition(".")[0]
        self._resolved[name] = level
        return level

    def names(self) -> list[str]:
        """Every logger that exists in this process, root first, then sorted."""
        found: set[str] = set()
        for module_name, module in list(sys.modules.items()):
            if not module_name.startswith("kjbod") or module is None:
                continue
            for value in list(vars(module).values()):
                if isinstance(value, structlog._config.BoundLoggerLazyProxy):
                    args = value._logger_factory_args
                    name = args[0] if args and isinstance(args[0], str) else \
                        (value._initial_values or {}).get("component")
                    if isinstance(name, str) and name:
                        found.add(name)
        for name in list(found):
            while "." in name:
                name = name.rpartition(".")[0]
                found.add(name)
        found.update(name for name, obj in list(logging.Logger.manager.loggerDict.items())
                     if isinstance(obj, logging.Logger))
        found.update(self._own)
        found.discard(ROOT)
        return [ROOT, *sorted(found)]

    def exists(self, name: str) -> bool:
        return name == ROOT or name in self.names()

    def describe(self) -> dict[str, str]:
        """{logger: level name} for every logger, as Kafka lists them: a logger without a level of its own shows
        the one it takes."""
        return {name: self._own.get(name) or kafka_name(self.effective(None if name == ROOT else name))
                for name in self.names()}

    def set(self, name: str, level: str) -> None:
        with self._lock:
            if name == ROOT:
                self.root = _NUMBER[level]
            else:
                self._own[name] = level
            self._apply()

    def unset(self, name: str) -> None:
        with self._lock:
            self._own.pop(name, None)
            self._apply()

    def reset(self) -> None:
        """No logger with a level of its own (a new configure_logging; tests)."""
        with self._lock:
            self._own.clear()
            self._resolved = {}

    def _apply(self) -> None:
        self._resolved = {}
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(self.lowest()))
        logging.getLogger().setLevel(self.root)
        for name, obj in list(logging.Logger.manager.loggerDict.items()):
            if isinstance(obj, logging.Logger):
                obj.setLevel(self.effective(name) if self._own else logging.NOTSET)


LEVELS = LoggerLevels()


def drop_below_logger_level(logger: Any, method_name: str, event_dict: Any) -> Any:
    """structlog processor: while some logger has a level of its own, drop an event below its logger's level."""
    if not LEVELS.active:
        return event_dict
    if _METHOD_LEVEL.get(method_name, logging.INFO) < LEVELS.effective(logger_name(logger, event_dict)):
        raise structlog.DropEvent
    return event_dict


class _NamedWriteLogger(structlog.WriteLogger):
    """structlog's WriteLogger that knows the name it was asked for (``structlog.get_logger("kjbod.x")``)."""

    kjbod_name: str | None = None


class NamedWriteLoggerFactory:
    """structlog logger factory: a WriteLogger to ``file`` carrying its logger's name for the level processor."""

    def __init__(self, file: Any) -> None:
        self._file = file

    def __call__(self, *args: Any) -> _NamedWriteLogger:
        logger = _NamedWriteLogger(self._file)
        if args and isinstance(args[0], str):
            logger.kjbod_name = args[0]
        return logger
