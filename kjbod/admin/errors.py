"""Exceptions raised by the admin client: every one is a `KafkaError`, so each carries a Kafka error code and name.

Strategy: one hierarchy, rooted in the protocol's `KafkaError`, so that callers catch one type and always find
`.code` (an `ErrorCode`), `.code.name` and `.retriable`.  Failures that happen on our side of the wire map to the
code Kafka's own clients use for them: a refused or lost connection is NETWORK_EXCEPTION, a reply that does not come
in time is REQUEST_TIMED_OUT, a call the broker cannot answer at any version both sides know is
UNSUPPORTED_VERSION.  Errors that arrive in a response keep the broker's code and error message, plus which API and
which broker (host:port) answered, because "UNKNOWN_TOPIC_OR_PARTITION" alone does not say where to look.
"""

from __future__ import annotations

from kjbod.protocol.errors import RETRIABLE, ErrorCode, KafkaError

__all__ = [
    "AdminError",
    "BrokerConnectionError",
    "BrokerResponseError",
    "KafkaError",
    "ProtocolViolation",
    "RequestTimeoutError",
    "UnsupportedVersionError",
    "error_for_code",
]


class AdminError(KafkaError):
    """Base of every error the admin client raises."""


class BrokerConnectionError(AdminError):
    """Could not connect to a broker, or the connection broke while requests were in flight (retriable)."""

    def __init__(self, host: str, port: int, reason: str):
        self.host = host
        self.port = port
        self.reason = reason
        super().__init__(ErrorCode.NETWORK_EXCEPTION, f"{host}:{port}: {reason}")


class RequestTimeoutError(AdminError):
    """No response (or no connection) within the time allowed for the call."""

    def __init__(self, message: str):
        super().__init__(ErrorCode.REQUEST_TIMED_OUT, message)


class UnsupportedVersionError(AdminError):
    """The broker does not serve the API at any version this client can speak."""

    def __init__(self, message: str):
        super().__init__(ErrorCode.UNSUPPORTED_VERSION, message)

    @property
    def retriable(self) -> bool:
        return False


class ProtocolViolation(AdminError):
    """The broker sent bytes this client cannot make sense of (bad frame, wrong correlation id, undecodable body).

    The connection is closed.  Not retriable: a broker that sends garbage once will most likely do it again.
    """

    def __init__(self, host: str, port: int, reason: str):
        self.host = host
        self.port = port
        super().__init__(ErrorCode.UNKNOWN_SERVER_ERROR, f"{host}:{port}: {reason}")

    @property
    def retriable(self) -> bool:
        return False


class BrokerResponseError(AdminError):
    """A Kafka error code returned inside a response.  `api` and `broker` say which call and which broker."""

    def __init__(self, code: int, message: str | None = None, *, api: str | None = None,
                 broker: str | None = None):
        self.api = api
        self.broker = broker
        where = " ".join(p for p in (api and f"{api}", broker and f"from {broker}") if p)
        text = message or ""
        if where:
            text = f"{text} ({where})" if text else where
        super().__init__(code, text or None)


def error_for_code(code: int, message: str | None = None, *, api: str | None = None,
                   broker: str | None = None) -> BrokerResponseError | None:
    """The exception for a response's error code, or None for NONE (0)."""
    if code == 0:
        return None
    return BrokerResponseError(code, message, api=api, broker=broker)


def is_retriable(code: int) -> bool:
    return code in RETRIABLE
