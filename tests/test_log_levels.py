"""Loggers' own levels at runtime (kjbod.broker.log_levels): Kafka's resolution through dotted parents, and the
filtering of real log events written by a configured process logger."""

from __future__ import annotations

import io

import pytest
import structlog

from kjbod.broker.log_levels import LEVELS, LoggerLevels, kafka_name
from kjbod.server.logging import configure_logging, reset_logging


def test_levels_resolve_through_parents() -> None:
    levels = LoggerLevels()
    levels.set_root(20)
    assert levels.effective("kjbod.storage.log") == 20
    levels.set("kjbod.storage", "DEBUG")
    assert levels.effective("kjbod.storage.log") == 10
    assert levels.effective("kjbod.storagex") == 20  # a prefix is not a parent
    levels.set("kjbod.storage.log", "ERROR")
    assert (levels.effective("kjbod.storage.log"), levels.effective("kjbod.storage.index")) == (40, 10)
    assert levels.lowest() == 10
    levels.unset("kjbod.storage")
    assert levels.effective("kjbod.storage.index") == 20
    assert [kafka_name(n) for n in (5, 10, 20, 30, 40, 50)] == ["TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"]


@pytest.fixture
def stream():
    out = io.StringIO()
    configure_logging("json", "info", stream=out)
    yield out
    reset_logging()
    LEVELS.reset()


def test_events_follow_their_loggers_level(stream: io.StringIO) -> None:
    import kjbod.storage.log  # noqa: F401  (its logger exists)

    storage = structlog.get_logger("kjbod.storage.log")
    server = structlog.get_logger("kjbod.server")
    storage.debug("hidden-1")
    assert LEVELS.describe()["kjbod.storage.log"] == "INFO"
    LEVELS.set("kjbod.storage", "DEBUG")
    LEVELS.set("kjbod.server", "ERROR")
    storage.debug("shown-1")
    server.debug("hidden-2")
    server.warning("hidden-3")
    server.error("shown-2")
    assert LEVELS.describe()["kjbod.storage.log"] == "DEBUG"
    LEVELS.unset("kjbod.storage")
    LEVELS.unset("kjbod.server")
    storage.debug("hidden-4")
    server.warning("shown-3")
    text = stream.getvalue()
    assert [w for w in ("shown-1", "shown-2", "shown-3") if w in text] == ["shown-1", "shown-2", "shown-3"]
    assert not [w for w in ("hidden-1", "hidden-2", "hidden-3", "hidden-4") if w in text]


def test_root_level_is_the_configured_one(stream: io.StringIO) -> None:
    assert LEVELS.describe()["root"] == "INFO"
    LEVELS.set("root", "WARN")
    structlog.get_logger("kjbod.server").info("hidden")
    structlog.get_logger("kjbod.server").warning("shown")
    assert "shown" in stream.getvalue() and "hidden" not in stream.getvalue()


@pytest.mark.parametrize(("name", "message"), [
    ("", "Broker id must not be empty"), ("one", "Broker id must be an integer, but it is: one"),
    ("7", "Unexpected broker id, expected 1 but received 7")])
def test_logger_resource_names_this_broker(name: str, message: str) -> None:
    from kjbod.broker.broker_config import ConfigProblem
    from kjbod.broker.broker_loggers import describe_loggers
    from kjbod.protocol.errors import ErrorCode

    with pytest.raises(ConfigProblem) as raised:
        describe_loggers(1, name, None)
    assert (raised.value.code, raised.value.message) == (ErrorCode.INVALID_REQUEST, message)
    assert describe_loggers(1, "1", ["root", "nope"])[0].name == "root"
