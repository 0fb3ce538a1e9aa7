"""A listener: accepts sockets itself, applies the connection limits (kjbod.server.quotas), and for TLS runs each
one's server handshake as a small task of its own.

Strategy:

* Why not `loop.create_server(...)`: its accept loop cannot be held back, and Kafka's limits need exactly that (a
  listener at its connection limit stops accepting until one closes; the creation rate delays the next accept).
  Here each listening socket has one accept task: it waits for the quotas to admit a connection, accepts it, counts
  it (a connection over its IP's limit is closed at once), then hands it to `loop.connect_accepted_socket`.
* TLS: a handshake that fails inside `create_server(ssl=...)` is dropped without a word (asyncio and uvloop log it
  only in debug mode), and a broker operator must be able to see a client speaking plaintext to a TLS port, or a
  refused certificate. Here the handshake's outcome comes back: on success the `Connection` has been made (after
  the handshake, so it never sees a byte of it); on failure the exception says why, and it is logged once, with the
  peer and the listener. Each handshake is its own task: the TLS work is done in memory by the loop's TLS layer as
  the client's bytes arrive, so a slow or silent client holds nothing but its own task, for at most
  HANDSHAKE_TIMEOUT_S. A plaintext connection is made at once, in the accept task.
* A connection's count is given back once, when it closes (the `Connection`'s `on_close`), or when its handshake
  fails.
* The object offers what kjbod.server.app uses of an asyncio server: `sockets`, `start_serving()`, `close()`,
  `wait_closed()`. Closing stops accepting and cancels the handshakes still running; connections already made are
  the registry's.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import ssl
from collections.abc import Callable
from typing import Any

from kjbod.server.connection import Connection, ConnectionRegistry
from kjbod.server.logging import get_logger
from kjbod.server.quotas import ConnectionQuotas

__all__ = ["HANDSHAKE_TIMEOUT_S", "ConnectionFactory", "ListenerServer", "bind_sockets", "describe_tls_failure"]

# Makes a listener's Connection; the argument is what the connection calls when it closes (None: nothing).
ConnectionFactory = Callable[[Callable[[], None] | None], Connection]

log = get_logger("kjbod.server")

# A TLS client must finish its handshake within this long (Kafka has no key for it; asyncio's default is 60 s).
HANDSHAKE_TIMEOUT_S = 10.0
# accept() failures that pass (out of fds, a peer gone before it was accepted): wait a little and accept again.
_ACCEPT_RETRY_S = 0.1
_NOT_TLS = frozenset({"WRONG_VERSION_NUMBER", "HTTP_REQUEST", "HTTPS_PROXY_REQUEST", "UNKNOWN_PROTOCOL",
                      "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG", "UNEXPECTED_RECORD"})


def bind_sockets(host: str, port: int) -> list[socket.socket]:
    """Bound, non-blocking TCP sockets on every address `host` resolves to, as asyncio's create_server binds them
    (SO_REUSEADDR; IPv6 only on an IPv6 address, so a name with both kinds of address binds both). They listen
    from `ListenerServer.start_serving` on: until then a client's connect is refused, not left waiting for a
    node that is still starting."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def describe_tls_failure(e: BaseException) -> str:
    """One line for a failed handshake."""
    if isinstance(e, TimeoutError) or (isinstance(e, ConnectionAbortedError) and "longer than" in str(e)):
        return f"no TLS handshake within {HANDSHAKE_TIMEOUT_S:g}s"
    if isinstance(e, ssl.SSLError):
        reason = e.reason or ""
        if reason in _NOT_TLS:
            return f"not TLS: a plaintext client on a TLS listener? ({reason})"
        if isinstance(e, ssl.SSLCertVerificationError):
            return f"client certificate refused: {e.verify_message}"
        return str(reason or e)
    return f"{type(e).__name__}: {e}" if str(e) else f"{type(e).__name__} (the peer went away)"


class ListenerServer:
    def __init__(self, loop: asyncio.AbstractEventLoop, sockets: list[socket.socket], factory: ConnectionFactory,
                 listener: str, *, context: ssl.SSLContext | None = None, quotas: ConnectionQuotas | None = None,
                 registry: ConnectionRegistry | None = None, backlog: int = 1024) -> None:
        self._loop = loop
        self._backlog = backlog
        self._sockets = sockets
        self._context = context
        self._factory = factory
        self._listener = listener
        self._quotas = quotas
        self._registry = registry
        self._accepting: list[asyncio.Task[None]] = []
        self._handshakes: set[asyncio.Task[None]] = set()
        self._throttled: set[socket.socket] = set()  # held for their IP's connection rate quota, closed later
        self._closed = False

    @property
    def sockets(self) -> list[socket.socket]:
        return list(self._sockets)

    async def start_serving(self) -> None:
        if not self._accepting and not self._closed:
            for sock in self._sockets:
                sock.listen(self._backlog)
            self._accepting = [self._loop.create_task(self._accept(sock)) for sock in self._sockets]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for task in [*self._accepting, *self._handshakes]:
            task.cancel()
        for sock in self._sockets:
            sock.close()
        for sock in self._throttled:
            _close(sock)
        self._throttled.clear()

    async def wait_closed(self) -> None:
        tasks = [*self._accepting, *self._handshakes]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _accept(self, listening: socket.socket) -> None:
        loop = self._loop
        quotas = self._quotas
        while not self._closed:
            if quotas is not None:
                await quotas.admit(self._listener)
            try:
                sock, peer = await loop.sock_accept(listening)
            except asyncio.CancelledError:
                raise
            except OSError as e:
                if self._closed:
                    return
                if e.errno not in (errno.ECONNABORTED, errno.EPROTO, errno.EINTR):
                    log.warning("accepting a connection failed", listener=self._listener,
                                error=e.strerror or str(e))
                await asyncio.sleep(_ACCEPT_RETRY_S)
                continue
            admitted, release = self._count(sock, peer)
            if not admitted:
                continue
            _configure(sock)
            if self._context is None:
                await self._connect(sock, peer, release)
            else:
                task = loop.create_task(self._handshake(sock, peer, release))
                self._handshakes.add(task)
                task.add_done_callback(self._handshakes.discard)

    def _count(self, sock: socket.socket, peer: Any) -> tuple[bool, Callable[[], None] | None]:
        """Counts the connection against the quotas: (False, None) when it was over its IP's limit (closed
        here), else (True, what gives its count back; None without quotas)."""
        quotas = self._quotas
        if quotas is None:
            return True, None
        host = str(peer[0]) if isinstance(peer, tuple) and peer else str(peer)
        throttle_ms = quotas.ip_throttle_ms(host)
        if throttle_ms > 0:
            # Over its IP's connection_creation_rate: held unserved for the throttle time, then closed (Kafka's
            # ConnectionThrottledException and delayed close).
            log.debug("connection throttled: its IP is over its connection_creation_rate", listener=self._listener,
                      peer=_peer(peer), throttle_ms=throttle_ms)
            self._throttled.add(sock)
            self._loop.call_later(throttle_ms / 1000, self._close_throttled, sock)
            return False, None
        if quotas.open(self._listener, host) is not None:
            _close(sock)
            return False, None
        listener = self._listener
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                quotas.close(listener, host)

        if quotas.excess() and self._registry is not None:
            quotas.close_excess(self._registry)
        return True, release

    def _close_throttled(self, sock: socket.socket) -> None:
        if sock in self._throttled:
            self._throttled.discard(sock)
            _close(sock)

    async def _connect(self, sock: socket.socket, peer: Any, release: Callable[[], None] | None) -> None:
        try:
            await self._loop.connect_accepted_socket(lambda: self._factory(release), sock)
        except asyncio.CancelledError:
            _close(sock)
            if release is not None:
                release()
            raise
        except Exception as e:  # noqa: BLE001  (a peer gone before its transport was made: only this one)
            log.warning("accepted connection dropped", listener=self._listener, peer=_peer(peer),
                        error=f"{type(e).__name__}: {e}")
            _close(sock)
            if release is not None:
                release()

    async def _handshake(self, sock: socket.socket, peer: Any, release: Callable[[], None] | None) -> None:
        try:
            await self._loop.connect_accepted_socket(
                lambda: self._factory(release), sock, ssl=self._context, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S)
        except asyncio.CancelledError:
            _close(sock)
            if release is not None:
                release()
            raise
        except Exception as e:  # noqa: BLE001  (whatever the handshake met, it ends here, for this client only)
            log.warning("TLS handshake failed; connection dropped", listener=self._listener, peer=_peer(peer),
                        error=describe_tls_failure(e))
            _close(sock)
            if release is not None:
                release()


def _configure(sock: socket.socket) -> None:
    """As Kafka sets up an accepted socket: no Nagle delay, TCP keepalive."""
    try:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    except OSError:
        pass  # the peer is already gone: the transport will say so


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass


def _peer(peer: Any) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        host = str(peer[0])
        return f"[{host}]:{peer[1]}" if ":" in host else f"{host}:{peer[1]}"
    return str(peer)
