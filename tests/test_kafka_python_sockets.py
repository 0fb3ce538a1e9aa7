"""The suite's fix for kafka-python 3.0.12's leaked sockets (see tests/conftest.py) holds."""

from __future__ import annotations

import gc
import logging
import socket
import struct
import warnings

import pytest
from kafka import KafkaAdminClient
from kafka.errors import KafkaError
from kafka.net.selector import NetworkSelector
from kafka.net.transport import KafkaTCPTransport
from live import free_port, kjbod_server, kjbod_server_factory  # noqa: F401  (live-server fixtures)

pytestmark = pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning")

_HEADER = struct.pack(">hhih", 18, 0, 1, 4) + b"test"  # ApiVersions v0, correlation id 1
API_VERSIONS = struct.pack(">i", len(_HEADER)) + _HEADER


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


def test_a_transport_closed_with_bytes_unsent_leaves_no_socket_open_when_its_selector_closes(
        kjbod_server) -> None:  # noqa: F811
    """KafkaConnection.close then the client's selector close, right after a request was queued: the writer task
    that was to flush the bytes and close the socket is cancelled (see tests/conftest.py)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", ResourceWarning)
        net = NetworkSelector()
        sock = socket.create_connection(("127.0.0.1", kjbod_server.port), timeout=10)
        sock.setblocking(False)
        kafka_transport = KafkaTCPTransport(net, sock, host="127.0.0.1")
        kafka_transport.write(API_VERSIONS)  # queued: the writer task runs on the selector's next pass
        kafka_transport.close()  # bytes unsent: the writer is to close the socket once they are out
        net.close()  # runs what is ready (the writer, which then waits to write) and cancels the waiting tasks
        closed = sock.fileno() == -1
        del kafka_transport, sock, net
        gc.collect()
    assert closed and [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)] == []
