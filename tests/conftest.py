"""Suite-wide fixtures.

Logging: code under test (the CLI's main(), connection tests) may point structlog at a stream that pytest closes
when the test ends (its captured stderr, a StringIO).  Resetting after every test keeps a later test's log calls
from writing to a closed file.

kafka-python 3.0.12 leaves the socket of a refused connect open: ``KafkaNetSocket.sock_connect``
(kafka/net/inet.py) raises KafkaConnectionError without closing it.  Tests that kill a broker make kafka-python
clients reconnect to a closed port, and the leaked socket's ResourceWarning (an error here, filterwarnings =
error) then surfaces in whichever later test the garbage collector happens to run in.  The suite closes such a
socket where the connect fails.

It leaks a connected socket too (``raddr`` set in the warning): ``KafkaConnection.close`` calls
``KafkaTCPTransport.close`` (kafka/net/transport.py), which, when request bytes are still buffered, leaves the
socket to its writer task (``_write_to_sock``) to close once they are flushed; the client's close then closes its
``NetworkSelector``, which cancels every task still waiting for I/O, that writer among them, and the writer's
cancellation closes nothing.  A client closed just after it queued a request (a metadata refresh, a heartbeat,
a retried produce after a broker died) hit it now and then.  The suite closes the socket when such a writer ends
with the transport closed.  Nothing else changes in kafka-python.

Order: `make test` runs the files on two pytest-xdist workers, a file at a time each (``--dist loadfile``: a
file's module-scoped cluster is started once). A worker takes the next file in collection order, so the files that
start real processes (marked slow, named ``*_live.py``, or Spark's) are collected first and the many quick files
fill in behind them: collected last, one long file would run alone at the end on one core.
"""

import warnings
from pathlib import PurePath

import pytest

from kjbod.server.logging import reset_logging

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python loads its schemas with importlib's old API
    from kafka.net import inet, transport

_sock_connect = inet.KafkaNetSocket.sock_connect


async def _sock_connect_closing_on_failure(self, net, sock, sockaddr, timeout_at=None):
    try:
        return await _sock_connect(self, net, sock, sockaddr, timeout_at=timeout_at)
    except BaseException:
        sock.close()
        raise


inet.KafkaNetSocket.sock_connect = _sock_connect_closing_on_failure

_write_to_sock = transport.KafkaTCPTransport._write_to_sock


async def _write_to_sock_closing_when_cancelled(self):
    try:
        return await _write_to_sock(self)
    finally:
        sock = self._sock
        if self._closed and sock is not None and not self._writing:  # closed, and no writer left to close it
            self._sock = None
            sock.close()


transport.KafkaTCPTransport._write_to_sock = _write_to_sock_closing_when_cancelled


@pytest.fixture(autouse=True)
def _reset_logging_after_test():
    yield
    reset_logging()


def _weight(item: pytest.Item) -> int:
    """0 for Spark's files (a JVM each worker starts once, and the suite's longest test), 1 for the other files
    that start real processes, 2 for the rest."""
    path = PurePath(item.path)
    if "spark" in path.parts:
        return 0
    return 1 if item.get_closest_marker("slow") is not None or path.name.endswith("_live.py") else 2


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files that start real processes first, each file's tests kept together and in their order."""
    rank: dict[object, int] = {}
    for item in items:
        rank[item.path] = min(rank.get(item.path, 2), _weight(item))
    items.sort(key=lambda item: rank[item.path])  # stable: the order within each rank stays
