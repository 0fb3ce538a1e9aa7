"""Suite-wide fixtures.

Logging: code under test (the CLI's main(), connection tests) may point structlog at a stream that pytest closes
when the test ends (its captured stderr, a StringIO).  Resetting after every test keeps a later test's log calls
from writing to a closed file.

kafka-python 3.0.12 leaves the socket of a refused connect open: ``KafkaNetSocket.sock_connect``
(kafka/net/inet.py) raises KafkaConnectionError without closing it.  Tests that kill a broker make kafka-python
clients reconnect to a closed port, and the leaked socket's ResourceWarning (an error here, filterwarnings =
error) then surfaces in whichever later test the garbage collector happens to run in.  The suite closes such a
socket where the connect fails, and nothing else changes in kafka-python.
"""

import warnings

import pytest

from kjbod.server.logging import reset_logging

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python loads its schemas with importlib's old API
    from kafka.net import inet

_sock_connect = inet.KafkaNetSocket.sock_connect


async def _sock_connect_closing_on_failure(self, net, sock, sockaddr, timeout_at=None):
    try:
        return await _sock_connect(self, net, sock, sockaddr, timeout_at=timeout_at)
    except BaseException:
        sock.close()
        raise


inet.KafkaNetSocket.sock_connect = _sock_connect_closing_on_failure


@pytest.fixture(autouse=True)
def _reset_logging_after_test():
    yield
    reset_logging()
