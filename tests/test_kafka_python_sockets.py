"""The suite's fix for kafka-python 3.0.12's leaked sockets (see tests/conftest.py) holds."""

from __future__ import annotations

import gc
import logging
import warnings

import pytest
from kafka import KafkaAdminClient
from kafka.errors import KafkaError
from live import free_port

pytestmark = pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning")


def test_refused_connects_of_kafka_python_leave_no_socket_open() -> None:
    port = free_port()  # nothing listens there
    # No log records from kafka-python: pytest keeps them, with their tracebacks, and those would keep the sockets
    # alive past gc.collect() (which is how a leak surfaced in some later test).
    kafka_log = logging.getLogger("kafka")
    level = kafka_log.level
    kafka_log.setLevel(logging.CRITICAL)
    try:
        leaked = _refused_connect_warnings(port)
    finally:
        kafka_log.setLevel(level)
    assert leaked == []


def _refused_connect_warnings(port: int) -> list[str]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", ResourceWarning)
        try:
            KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", bootstrap_timeout_ms=1500)
        except KafkaError:
            pass  # expected; not kept (its traceback would keep the sockets alive)
        else:
            pytest.fail("kafka-python bootstrapped from a port nothing listens on")
        gc.collect()
    return [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)]
