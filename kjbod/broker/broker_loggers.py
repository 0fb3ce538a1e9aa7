"""This broker's loggers as a config resource (type 8, BROKER_LOGGER; KIP-412): DescribeConfigs lists every
logger with the level in force, IncrementalAlterConfigs sets (SET) or removes (DELETE) a logger's own level.

The broker answers these itself, as Kafka's brokers do (ConfigAdminManager's preprocessing): nothing goes to the
controller or the metadata log, and a change lasts until the process stops. The resource's name must be this
broker's id. Kafka's checks and messages: a level outside TRACE, DEBUG, INFO, WARN, ERROR, FATAL and a logger
that does not exist are INVALID_CONFIG; removing root's level, APPEND and SUBTRACT are INVALID_REQUEST; every
operation of a resource is checked before any is applied, and validate_only applies none. The legacy
AlterConfigs does not take this resource (INVALID_REQUEST, as in Kafka). See kjbod.broker.log_levels for the
loggers and how their levels filter.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import structlog

from kjbod.broker import broker_config as bc
from kjbod.broker.log_levels import LEVELS, ROOT, VALID_LEVELS
from kjbod.protocol.errors import ErrorCode

log = structlog.get_logger("kjbod.broker.broker_loggers")

_OPERATIONS = {bc.APPEND: "APPEND", bc.SUBTRACT: "SUBTRACT"}


def _check_name(node_id: int, name: str) -> None:
    if not name:
        raise bc.ConfigProblem(ErrorCode.INVALID_REQUEST, "Broker id must not be empty")
    try:
        asked = int(name)
    except ValueError:
        raise bc.ConfigProblem(ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}") from None
    if asked != node_id:
        raise bc.ConfigProblem(ErrorCode.INVALID_REQUEST,
                               f"Unexpected broker id, expected {node_id} but received {name}")


def describe_loggers(node_id: int, name: str, keys: Iterable[str] | None) -> list[bc.Entry]:
    """Every logger (those in ``keys`` when given) with its level, as DescribeConfigs entries."""
    _check_name(node_id, name)
    wanted = None if keys is None else set(keys)
    return [bc.Entry(logger, level, bc.DYNAMIC_BROKER_LOGGER_CONFIG, 0)
            for logger, level in LEVELS.describe().items() if wanted is None or logger in wanted]


def alter_loggers(node_id: int, resource: Any, validate_only: bool) -> None:
    """Check every operation of an IncrementalAlterConfigs resource of type 8, then apply them (unless
    ``validate_only``); bc.ConfigProblem names the first refusal."""
    _check_name(node_id, resource.resource_name)
    names = LEVELS.names()
    for c in resource.configs:
        if c.config_operation in _OPERATIONS:
            raise bc.ConfigProblem(ErrorCode.INVALID_REQUEST, f"{_OPERATIONS[c.config_operation]} operation is not "
                                   "allowed for the BROKER_LOGGER resource")
        if c.config_operation not in (bc.SET, bc.DELETE):
            raise bc.ConfigProblem(ErrorCode.INVALID_REQUEST, f"Unknown operation type {c.config_operation} is not "
                                   "allowed for the BROKER_LOGGER resource")
        if c.name not in names:
            raise bc.ConfigProblem(ErrorCode.INVALID_CONFIG, f"Logger {c.name} does not exist!")
        if c.config_operation == bc.SET and c.value not in VALID_LEVELS:
            raise bc.ConfigProblem(ErrorCode.INVALID_CONFIG, f"Cannot set the log level of {c.name} to {c.value} as "
                                   f"it is not a supported log level. Valid log levels are {', '.join(VALID_LEVELS)}")
        if c.config_operation == bc.DELETE and c.name == ROOT:
            raise bc.ConfigProblem(ErrorCode.INVALID_REQUEST,
                                   f"Removing the log level of the {ROOT} logger is not allowed")
    if validate_only:
        return
    for c in resource.configs:
        if c.config_operation == bc.SET:
            LEVELS.set(c.name, c.value)
            log.warning("log_level_changed", logger=c.name, level=c.value)
        else:
            LEVELS.unset(c.name)
            log.warning("log_level_unset", logger=c.name)
