"""A TLS listener: accepts sockets itself and runs each one's server handshake as a small task of its own.

Strategy:

* Why not `loop.create_server(ssl=...)`: a handshake that fails there is dropped without a word (asyncio and uvloop
  log it only in debug mode), and a broker operator must be able to see a client speaking plaintext to a TLS port, or
  a refused certificate. Accepting the socket here and handing it to `loop.connect_accepted_socket(ssl=...)` gives
  the handshake's outcome back: on success the `Connection` has been made (after the handshake, so it never sees a
  byte of it); on failure the exception says why, and it is logged once, with the peer and the listener.
* Each handshake is its own task: the TLS work is done in memory by the loop's TLS layer as the client's bytes
  arrive, so a slow or silent client holds nothing but its own task, for at most HANDSHAKE_TIMEOUT_S.
* The object offers what kjbod.server.app uses of an asyncio server: `sockets`, `start_serving()`, `close()`,
  `wait_closed()`. Closing stops accepting and cancels the handshakes still running; connections already made are
  the registry's, as for a plaintext listener.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import ssl
from collections.abc import Callable
from typing import Any

from kjbod.server.connection import Connection
from kjbod.server.logging import get_logger

__all__ = ["HANDSHAKE_TIMEOUT_S", "TlsServer", "bind_socket", "describe_tls_failure"]

log = get_logger("kjbod.server")

# A TLS client must finish its handshake within this long (Kafka has no key for it; asyncio's default is 60 s).
HANDSHAKE_TIMEOUT_S = 10.0
# accept() failures that pass (out of fds, a peer gone before it was accepted): wait a little and accept again.
_ACCEPT_RETRY_S = 0.1
_NOT_TLS = frozenset({"WRONG_VERSION_NUMBER", "HTTP_REQUEST", "HTTPS_PROXY_REQUEST", "UNKNOWN_PROTOCOL",
                      "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG", "UNEXPECTED_RECORD"})


def bind_socket(host: str, port: int, backlog: int) -> socket.socket:
    """A listening, non-blocking TCP socket on host:port (SO_REUSEADDR, IPv6 only for an IPv6 address, as asyncio's
    create_server sets them)."""
    family, kind, proto, _, address = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                                         flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


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


class TlsServer:
    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, context: ssl.SSLContext,
                 factory: Callable[[], Connection], listener: str) -> None:
        self._loop = loop
        self._sock = sock
        self._context = context
        self._factory = factory
        self._listener = listener
        self._accepting: asyncio.Task[None] | None = None
        self._handshakes: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def sockets(self) -> list[socket.socket]:
        return [self._sock]

    async def start_serving(self) -> None:
        if self._accepting is None and not self._closed:
            self._accepting = self._loop.create_task(self._accept())

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._accepting is not None:
            self._accepting.cancel()
        for task in list(self._handshakes):
            task.cancel()
        self._sock.close()

    async def wait_closed(self) -> None:
        tasks = [t for t in (self._accepting, *self._handshakes) if t is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _accept(self) -> None:
        loop = self._loop
        while not self._closed:
            try:
                sock, peer = await loop.sock_accept(self._sock)
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
            task = loop.create_task(self._handshake(sock, peer))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    async def _handshake(self, sock: socket.socket, peer: Any) -> None:
        try:
            await self._loop.connect_accepted_socket(
                self._factory, sock, ssl=self._context, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S)
        except asyncio.CancelledError:
            _close(sock)
            raise
        except Exception as e:  # noqa: BLE001  (whatever the handshake met, it ends here, for this client only)
            log.warning("TLS handshake failed; connection dropped", listener=self._listener, peer=_peer(peer),
                        error=describe_tls_failure(e))
            _close(sock)


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
