"""The broker's channel to the controller: one `send()` whether the controller is in this process or across a socket.

Strategy (Kafka's NodeToControllerChannelManager, reduced to what one controller quorum needs):

* `ControllerChannel.send(request, api_key, version=None)` returns the controller's response body.  With no version
  the highest one both sides serve is used; `forward()` keeps the version (and client id) of a client's request that
  the broker passes on (CreateTopics, DeleteTopics, configs), so the client gets the answer it asked for.
* Every send has a deadline (`request_timeout`, or the call's `timeout`).  Until it passes, the channel retries when
  the controller cannot be reached or answers NOT_CONTROLLER anywhere in the response (Kafka's channel looks at every
  error code of the response for it), waiting with exponential backoff and jitter between attempts; after it,
  `RequestTimeoutError` says which API, which controller addresses and the last failure.  Other error codes are the
  caller's: the response comes back as it is.
* `InProcessControllerChannel` (a combined node) calls the controller's `handle_request(api_key, version, request,
  header)` directly, with the same semantics: the request and the response are passed through the codec at the
  version in use (so neither side ever holds the other's objects, and a value that cannot go on the wire fails
  here as it would on a socket), the same deadline, the same NOT_CONTROLLER retries.  A handler that raises is an
  UNKNOWN_SERVER_ERROR, as a server answers an unexpected failure.
* `SocketControllerChannel` connects to the controller listener of the addresses in `controller.quorum.voters`
  (`id@host:port,...`) or `controller.quorum.bootstrap.servers` (`host:port,...`), keeping one connection and
  moving to the next address on NOT_CONTROLLER or a lost connection.  A connection answers its requests in
  order, so a broker gives each of its users a channel of its own (as Kafka's broker has one channel manager
  each for heartbeats, forwarding and assignments, and the raft client its own): a heartbeat must never wait
  behind a metadata Fetch that long-polls for half a second.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import fields, is_dataclass
from typing import Any

import structlog

from kjbod.net.backoff import ExponentialBackoff
from kjbod.net.connection import NO_TIME_LEFT, ReconnectingConnection
from kjbod.net.correlator import api_name
from kjbod.net.errors import (
    BrokerConnectionError,
    BrokerResponseError,
    ClientError,
    RequestTimeoutError,
    UnsupportedVersionError,
)
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated.registry import APIS
from kjbod.protocol.generated.request_header import RequestHeader
from kjbod.protocol.runtime import DecodeError, EncodeError
from kjbod.wire.region import FileRegion

__all__ = [
    "ControllerChannel",
    "ControllerHandler",
    "InProcessControllerChannel",
    "SocketControllerChannel",
    "controller_addresses",
]

log = structlog.get_logger("kjbod.net.controller")

ControllerHandler = Callable[[int, int, Any, RequestHeader], Awaitable[Any]]

DEFAULT_REQUEST_TIMEOUT = 30.0
DEFAULT_CONNECT_TIMEOUT = 10.0
# Kafka's reconnect.backoff.ms / reconnect.backoff.max.ms for the controller channel.
RETRY_BACKOFF = 0.05
RETRY_BACKOFF_MAX = 1.0
NO_ATTEMPT = "no attempt made"


def controller_addresses(voters: str | None, bootstrap_servers: str | None) -> list[tuple[str, int]]:
    """The controller addresses from `controller.quorum.voters` (`id@host:port,...`, used when set) or
    `controller.quorum.bootstrap.servers` (`host:port,...`); ValueError naming the key on bad input."""
    if voters and voters.strip():
        key, text, with_ids = "controller.quorum.voters", voters, True
    elif bootstrap_servers and bootstrap_servers.strip():
        key, text, with_ids = "controller.quorum.bootstrap.servers", bootstrap_servers, False
    else:
        raise ValueError("neither controller.quorum.voters nor controller.quorum.bootstrap.servers is set")
    out: list[tuple[str, int]] = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        address = item
        if with_ids:
            node, sep, address = item.partition("@")
            if not sep or not node.strip().isdigit():
                raise ValueError(f"{key}: {item!r} is not id@host:port")
        host, sep, port_text = address.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(f"{key}: {item!r} has no valid host:port")
        out.append((host, int(port_text)))
    if not out:
        raise ValueError(f"{key} lists no controller")
    return out


def has_error(response: Any, code: int, depth: int = 3) -> bool:
    """Whether `code` appears as an error_code of the response or of its items (`depth` levels of lists)."""
    if getattr(response, "error_code", None) == code:
        return True
    if depth == 0 or not is_dataclass(response):
        return False
    for f in fields(response):
        value = getattr(response, f.name)
        if isinstance(value, list) and value and is_dataclass(value[0]):
            if any(has_error(item, code, depth - 1) for item in value):
                return True
    return False


class ControllerChannel:
    """What a broker uses to talk to the controller; see the module docstring for the semantics."""

    def __init__(self, *, request_timeout: float = DEFAULT_REQUEST_TIMEOUT, backoff: ExponentialBackoff | None = None,
                 client_id: str = "kjbod-broker") -> None:
        if request_timeout <= 0:
            raise ValueError("request_timeout must be positive")
        self.request_timeout = request_timeout
        self.client_id = client_id
        self._backoff_template = backoff or ExponentialBackoff(RETRY_BACKOFF, RETRY_BACKOFF_MAX)
        self._closed = False

    @property
    def peer(self) -> str:
        """Where the controller is, for messages."""
        raise NotImplementedError

    async def send(self, request: Any, api_key: int, version: int | None = None, *,
                   timeout: float | None = None) -> Any:
        """The controller's response to `request` (at `version`, or the highest both sides serve)."""
        return await self._call(request, api_key, version, None, timeout)

    async def forward(self, request: Any, api_key: int, version: int, *, client_id: str | None = None,
                      timeout: float | None = None) -> Any:
        """Passes on a client's request at the client's version (and with its client id)."""
        return await self._call(request, api_key, version, client_id, timeout)

    def close(self) -> None:
        self._closed = True

    async def _attempt(self, request: Any, api_key: int, version: int | None, client_id: str | None,
                       remaining: float) -> Any:
        raise NotImplementedError

    def _not_controller(self) -> None:
        """The peer answered NOT_CONTROLLER: look elsewhere next time."""

    def look_elsewhere(self) -> None:
        """The peer is not the controller the caller wants (a KRaft observer told NOT_LEADER_OR_FOLLOWER): the
        next request goes to the next controller address."""
        self._not_controller()

    async def _call(self, request: Any, api_key: int, version: int | None, client_id: str | None,
                    timeout: float | None) -> Any:
        if api_key not in APIS:
            raise UnsupportedVersionError(f"api key {api_key} is not known to this client")
        loop = asyncio.get_running_loop()
        budget = self.request_timeout if timeout is None else timeout
        deadline = loop.time() + budget
        backoff = ExponentialBackoff(self._backoff_template.initial, self._backoff_template.maximum,
                                     multiplier=self._backoff_template.multiplier,
                                     jitter=self._backoff_template.jitter)
        last: str = NO_ATTEMPT
        while True:
            if self._closed:
                raise BrokerConnectionError(*self._first_address(), "the controller channel is closed")
            remaining = deadline - loop.time()
            if remaining > 0:
                try:
                    response = await self._attempt(request, api_key, version, client_id, remaining)
                except (BrokerConnectionError, RequestTimeoutError) as e:
                    # An attempt the deadline left no time to connect tried nothing: the attempt before it says
                    # why the controller is not reachable (refused, say), and the error names that.
                    if getattr(e, "reason", None) != NO_TIME_LEFT or last == NO_ATTEMPT:
                        last = str(e)
                else:
                    if not has_error(response, ErrorCode.NOT_CONTROLLER):
                        return response
                    last = f"{self.peer} answered NOT_CONTROLLER"
                    self._not_controller()
            delay = backoff.next()
            if loop.time() + delay >= deadline:
                raise RequestTimeoutError(
                    f"{api_name(api_key)} to the controller ({self.peer}): no answer within {budget:g}s; "
                    f"last: {last}")
            log.debug("controller request retry", api=api_name(api_key), delay=round(delay, 3), last=last)
            await asyncio.sleep(delay)

    def _first_address(self) -> tuple[str, int]:
        return ("in-process", 0)


class InProcessControllerChannel(ControllerChannel):
    """A channel to a controller in this process: calls `handler(api_key, version, request, header)`."""

    def __init__(self, handler: ControllerHandler, **options: Any) -> None:
        super().__init__(**options)
        self.handler = handler
        self._correlation_id = 0

    @property
    def peer(self) -> str:
        return "in-process controller"

    async def _attempt(self, request: Any, api_key: int, version: int | None, client_id: str | None,
                       remaining: float) -> Any:
        info = APIS[api_key]
        if version is None:
            version = info.max_version
        elif not info.min_version <= version <= info.max_version:
            raise UnsupportedVersionError(
                f"{self.peer} serves {info.name} v{info.min_version}-v{info.max_version}, not v{version}")
        copied = _through_codec(request, info.request, version, f"{info.name} v{version} request")
        self._correlation_id = (self._correlation_id + 1) & 0x7FFF_FFFF
        header = RequestHeader(api_key, version, self._correlation_id,
                               self.client_id if client_id is None else client_id)
        try:
            async with asyncio.timeout(remaining):
                response = await self.handler(api_key, version, copied, header)
        except TimeoutError:
            raise RequestTimeoutError(
                f"{info.name} v{version} to the {self.peer}: no response within {remaining:.3g}s") from None
        except ClientError:
            raise
        except Exception as e:  # a server answers an unexpected failure, it does not crash
            log.exception("controller handler failed", api=info.name, version=version)
            raise BrokerResponseError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(e).__name__}: {e}",
                                      api=info.name, broker=self.peer) from None
        return _through_codec(response, info.response, version, f"{info.name} v{version} response")


def _through_codec(message: Any, cls: Any, version: int, what: str) -> Any:
    """`message` written and read back at `version`: what the other side of a socket would get.

    Record data handed over as file regions (a Fetch answered from segments) is read here, and the regions are
    closed: this channel is their last holder, as a connection is after sending them."""
    parts: list[Any] = []
    try:
        message.encode_into(parts, version)
    except EncodeError as e:
        _close_regions(parts)
        raise ValueError(f"cannot encode {what}: {e}") from None
    try:
        data = b"".join(_read_region(p) if isinstance(p, FileRegion) else p for p in parts)
    finally:
        _close_regions(parts)  # idempotent: the ones already read are closed
    try:
        return cls.decode(data, version)
    except DecodeError as e:  # pragma: no cover - our own encoder's output
        raise ValueError(f"{what} does not read back: {e}") from None


def _read_region(region: FileRegion) -> bytes:
    try:
        chunks = []
        offset, left = region.offset, region.count
        while left > 0:
            chunk = os.pread(region.fd, left, offset)
            if not chunk:
                raise ValueError(f"{region!r} ends {left} bytes early")
            chunks.append(chunk)
            offset += len(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        region.close()


def _close_regions(parts: list[Any]) -> None:
    for part in parts:
        if isinstance(part, FileRegion):
            part.close()


class SocketControllerChannel(ControllerChannel):
    """A channel to the controller listener of `addresses` (see `controller_addresses`)."""

    def __init__(self, addresses: Sequence[tuple[str, int]], *, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 ssl_context: Any = None, sasl: Any = None, **options: Any) -> None:
        """`ssl_context`: the client side of a TLS controller listener (kjbod.net.tls.client_context), or None;
        `sasl`: the credentials for a SASL controller listener (kjbod.net.sasl.client_credentials_of), or None."""
        super().__init__(**options)
        self.addresses = list(addresses)
        self._conn = ReconnectingConnection(
            self.addresses, client_id=self.client_id, connect_timeout=connect_timeout,
            backoff=ExponentialBackoff(self._backoff_template.initial, self._backoff_template.maximum),
            software_name="kjbod-broker", peer_kind="controller", ssl_context=ssl_context,
            sasl=sasl)

    @classmethod
    def from_quorum_config(cls, voters: str | None, bootstrap_servers: str | None,
                           **options: Any) -> SocketControllerChannel:
        """A channel to `controller.quorum.voters`, or else `controller.quorum.bootstrap.servers`."""
        return cls(controller_addresses(voters, bootstrap_servers), **options)

    @property
    def peer(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.addresses)

    def _first_address(self) -> tuple[str, int]:
        return self.addresses[0]

    async def _attempt(self, request: Any, api_key: int, version: int | None, client_id: str | None,
                       remaining: float) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + remaining
        conn = await self._conn.get(deadline)
        if version is None:
            version = conn.pick_version(api_key)
        else:
            conn.pick_version(api_key, version, version)  # raises UnsupportedVersionError if not served
        return await conn.request(api_key, version, request, max(deadline - loop.time(), 0.001), client_id)

    def _not_controller(self) -> None:
        self._conn.rotate()

    def close(self) -> None:
        super().close()
        self._conn.close()
