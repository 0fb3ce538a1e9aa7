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

`handle` may return the reply directly, which is the common and fast case (no task is created), an awaitable of
it for work that waits (a long-poll Fetch), or a `Later` that a callback completes (a Produce answered by the log
dirs' workers): the connection still writes replies in request order.

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

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias

from kjbod.wire.region import FileRegion

__all__ = ["CloseConnection", "Later", "ListenerKind", "Reply", "ReplyPart", "RequestContext", "RequestHandler"]

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
    # Who the client is, as Kafka names it for authorization: User:<SASL name>, User:<the TLS client certificate's
    # distinguished name>, or User:ANONYMOUS.
    principal: str = "User:ANONYMOUS"
    # The client authenticated with a delegation token (SASL/SCRAM with tokenauth=true): it may not create, renew
    # or expire tokens, as in Kafka.
    token_authenticated: bool = False
    # Mutes the connection for that many milliseconds: nothing more is read from it until they have passed (a
    # client over its quota, kjbod.broker.client_quotas); None where nothing can be muted (in-process calls).
    mute: Callable[[int], None] | None = field(default=None, compare=False, repr=False)

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


_PENDING, _DONE, _FAILED, _CANCELLED = 0, 1, 2, 3


class Later:
    """A reply that a callback gives later, on the connection's event loop (no task, no loop pass in between).

    What a request handed to a log dir's worker returns: when the worker's answer reaches the loop, the steps
    added with :meth:`then` (the router's encoding of the response) run and the callbacks added with
    :meth:`on_done` (the connection writing the reply) follow in the same call. An asyncio future would run each
    of them one pass of the loop later, and a task per request costs more than the request's own work.
    Not thread-safe: everything is called on the loop."""

    __slots__ = ("_steps", "_callbacks", "_state", "_value")

    def __init__(self) -> None:
        self._steps: list[Callable[[Any], Any]] | None = None
        self._callbacks: list[Callable[[Later], None]] | None = None
        self._state = _PENDING
        self._value: Any = None

    def __repr__(self) -> str:
        return f"Later({('pending', 'done', 'failed', 'cancelled')[self._state]})"

    def then(self, step: Callable[[Any], Any]) -> Later:
        """Transform the result with ``step`` when it comes (an exception it raises becomes the outcome)."""
        if self._state == _PENDING:
            if self._steps is None:
                self._steps = [step]
            else:
                self._steps.append(step)
        elif self._state == _DONE:
            try:
                self._value = step(self._value)
            except Exception as e:
                self._state, self._value = _FAILED, e
        return self

    def on_done(self, callback: Callable[[Later], None]) -> None:
        """Call ``callback(self)`` once the outcome is known (at once if it is); never if cancelled first."""
        if self._state == _PENDING:
            if self._callbacks is None:
                self._callbacks = [callback]
            else:
                self._callbacks.append(callback)
        elif self._state != _CANCELLED:
            callback(self)

    def when_pending(self, callback: Callable[[Later], None]) -> bool:
        """:meth:`on_done` while the outcome is not known yet (True); False, and ``callback`` not added, once it
        is (or cancelled): the caller, which must not run it at once, decides. One call where ``done()`` and
        ``on_done`` were two, once per reply a callback gives (the connection's queue)."""
        if self._state != _PENDING:
            return False
        if self._callbacks is None:
            self._callbacks = [callback]
        else:
            self._callbacks.append(callback)
        return True

    def resolve(self, value: Any) -> None:
        """The result; ignored when the outcome is already known or nobody waits any more (cancelled)."""
        if self._state != _PENDING:
            return
        steps = self._steps
        try:
            if steps is not None:
                for step in steps:
                    value = step(value)
        except Exception as e:
            self._state, self._value = _FAILED, e
        else:
            self._state, self._value = _DONE, value
        self._fire()

    def take(self, source: Later) -> None:
        """``source``'s outcome as this one's (its result through this one's steps, or its failure): a callback
        for ``source.on_done``, which calls it once ``source`` is done, never cancelled. A further wait chained
        (acks=all: the Produce's answer waits for the HW move) in one call, where a closure copying the outcome
        took four."""
        if self._state != _PENDING:
            return
        if source._state == _DONE:
            self.resolve(source._value)
        else:
            self.fail(source._value)

    def fail(self, exc: BaseException) -> None:
        if self._state != _PENDING:
            return
        self._state, self._value = _FAILED, exc
        self._fire()

    def cancel(self) -> bool:
        """Nobody waits any more (the connection went away): the outcome, when it comes, is dropped."""
        if self._state != _PENDING:
            return False
        self._state = _CANCELLED
        self._steps = self._callbacks = None
        return True

    def _fire(self) -> None:
        callbacks, self._callbacks = self._callbacks, None
        self._steps = None
        if callbacks is not None:
            for callback in callbacks:
                callback(self)

    def done(self) -> bool:
        return self._state != _PENDING

    def cancelled(self) -> bool:
        return self._state == _CANCELLED

    def result(self) -> Any:
        """The result, or the failure raised; only once done (and not cancelled)."""
        if self._state == _DONE:
            return self._value
        if self._state == _FAILED:
            raise self._value
        raise RuntimeError(f"{self!r} has no result")


class RequestHandler(Protocol):
    def handle(self, frame: bytes, ctx: RequestContext) -> Reply | Awaitable[Reply] | Later:
        """Answer one request frame (size prefix removed): `bytes`, or a `bytearray` for a big request received
        straight into its own buffer. See the module docstring for the reply contract."""
        ...
