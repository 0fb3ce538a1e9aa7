"""Exceptions raised by the admin client: every one is a `KafkaError`, so each carries a Kafka error code and name.

They are the client side's errors (`kjbod.net.errors`, where the connection code raises them); `AdminError` is
their common base under the name admin users know.  A refused or lost connection is NETWORK_EXCEPTION, a reply
that does not come in time REQUEST_TIMED_OUT, a call the broker cannot answer at any version both sides know
UNSUPPORTED_VERSION; errors that arrive in a response keep the broker's code and message plus which API and which
broker (host:port) answered.
"""

from __future__ import annotations

from kjbod.net.errors import (
    BrokerConnectionError,
    BrokerResponseError,
    ClientError,
    KafkaError,
    ProtocolViolation,
    RequestTimeoutError,
    UnsupportedVersionError,
    error_for_code,
    is_retriable,
)

__all__ = [
    "AdminError",
    "BrokerConnectionError",
    "BrokerResponseError",
    "KafkaError",
    "ProtocolViolation",
    "RequestTimeoutError",
    "UnsupportedVersionError",
    "error_for_code",
    "is_retriable",
]

AdminError = ClientError
