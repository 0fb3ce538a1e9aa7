"""Exceptions of the Kafka client side (kjbod.net and its users): every one is a `KafkaError` with a Kafka code.

Strategy: one hierarchy rooted in the protocol's `KafkaError`, so callers catch one type and always find `.code`,
`.code.name` and `.retriable`.  Failures on our side of the wire take the code Kafka's own clients use for them: a
refused or lost connection is NETWORK_EXCEPTION, a reply that does not come in time is REQUEST_TIMED_OUT, an API the
peer cannot answer at any version both sides know is UNSUPPORTED_VERSION.  Errors that arrive in a response keep the
peer's code and message, plus which API and which peer (host:port) answered.  The admin client re-exports these
under its own names (`kjbod.admin.errors`), so they are also its errors.
"""

from __future__ import annotations

from kjbod.protocol.errors import RETRIABLE, ErrorCode, KafkaError

__all__ = [
    "BrokerConnectionError",
    "BrokerResponseError",
    "ClientError",
    "KafkaError",
    "ProtocolViolation",
    "RequestTimeoutError",
    "SaslAuthenticationError",
    "UnsupportedVersionError",
    "error_for_code",
    "is_retriable",
]


class ClientError(KafkaError):
    """Base of every error the client side raises."""


class BrokerConnectionError(ClientError):
    """Could not connect to a peer, or the connection broke while requests were in flight (retriable)."""

    def __init__(self, host: str, port: int, reason: str) -> None:
        self.host = host
        self.port = port
        self.reason = reason
        super().__init__(ErrorCode.NETWORK_EXCEPTION, f"{host}:{port}: {reason}")


class SaslAuthenticationError(ClientError):
    """The peer refused our SASL credentials or mechanism (not retriable: the same credentials fail again)."""

    def __init__(self, host: str, port: int, code: ErrorCode, message: str) -> None:
        self.host = host
        self.port = port
        super().__init__(code, f"{host}:{port}: {message}")

    @property
    def retriable(self) -> bool:
        return False


class RequestTimeoutError(ClientError):
    """No response (or no connection) within the time allowed for the call."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.REQUEST_TIMED_OUT, message)


class UnsupportedVersionError(ClientError):
    """The peer does not serve the API at any version this client can speak."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.UNSUPPORTED_VERSION, message)

    @property
    def retriable(self) -> bool:
        return False


class ProtocolViolation(ClientError):
    """The peer sent bytes this client cannot make sense of (bad frame, wrong correlation id, undecodable body).

    The connection is closed.  Not retriable: a peer that sends garbage once will most likely do it again.
    """

    def __init__(self, host: str, port: int, reason: str) -> None:
        self.host = host
        self.port = port
        super().__init__(ErrorCode.UNKNOWN_SERVER_ERROR, f"{host}:{port}: {reason}")

    @property
    def retriable(self) -> bool:
        return False


class BrokerResponseError(ClientError):
    """A Kafka error code returned inside a response.  `api` and `broker` say which call and which peer."""

    def __init__(self, code: int, message: str | None = None, *, api: str | None = None,
                 broker: str | None = None) -> None:
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
