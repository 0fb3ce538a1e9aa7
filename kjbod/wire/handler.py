"""The contract between a connection and the request dispatcher.

The contract lives in kjbod.wire because both sides depend on it: the server shell (above) calls it, the broker
router (below the server) implements it. A connection (kjbod.server.connection) splits the byte stream into frames and calls `handler.handle(frame, ctx)` once
per frame, in arrival order. The dispatcher (kjbod.broker) decodes the request header, runs the API and returns the
response as a `Reply`:

* a list of parts, the response header followed by the body, WITHOUT the 4-byte size prefix: the connection computes
  it from the parts' lengths. Parts are bytes-like objects or `FileRegion`s (record data sent with sendfile);
* or one `bytes` object holding header and body together (a reply built in one piece, such as a memoised
  ApiVersions answer), which saves the join;
* or None: no response at all (Produce with acks=0).

`handle` may return the reply directly, which is the common and fast case (no task is created), or an awaitable of
it for work that waits (a long-poll Fetch); the connection still writes replies in request order.

A handler may also offer ready answers: `ready_replies(listener_kind)` returns a dict keyed by route id (the frame's
first 4 bytes, API key and version, read as one big-endian int32) of dicts mapping a request's bytes after its
correlation id to the reply's bytes after the correlation id. The connection may answer a request found there with
the size, the request's correlation id and those bytes, without calling `handle` (its fast path does); `handle` must
give the same answer to the same request. So an entry may only hold an answer that depends on nothing but those bytes
and the listener kind, whose response header is just the correlation id (v0), and that needs no side effect (the
router keeps its memoised ApiVersions answers there). The handler may add and drop entries at any time; the
connection holds the dicts, not copies.

Raising `CloseConnection` closes the connection once the replies to earlier requests have been written. Any other
exception is a bug: the connection logs it with its traceback at warning level and closes that connection only.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias

from kjbod.wire.region import FileRegion

__all__ = ["CloseConnection", "ListenerKind", "Reply", "ReplyPart", "RequestContext", "RequestHandler"]

ListenerKind: TypeAlias = Literal["broker", "controller"]
ReplyPart: TypeAlias = bytes | bytearray | memoryview | FileRegion
Reply: TypeAlias = list[ReplyPart] | bytes | None


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who sent a request and on which listener. One instance per connection, shared by all its requests."""

    connection_id: int
    peer_host: str
    peer_port: int
    listener_name: str
    listener_kind: ListenerKind
    security_protocol: str = "PLAINTEXT"

    @property
    def peer(self) -> str:
        """The peer as "host:port" (IPv6 hosts in brackets), for logs."""
        if ":" in self.peer_host:
            return f"[{self.peer_host}]:{self.peer_port}"
        return f"{self.peer_host}:{self.peer_port}"


class CloseConnection(Exception):
    """Raised by a handler to close the connection after the replies to earlier requests are written."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RequestHandler(Protocol):
    def handle(self, frame: bytes, ctx: RequestContext) -> Reply | Awaitable[Reply]:
        """Answer one request frame (size prefix removed): `bytes`, or a `bytearray` for a big request received
        straight into its own buffer. See the module docstring for the reply contract."""
        ...
