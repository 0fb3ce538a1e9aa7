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

__all__ = ["HANDSHAKE_TIMEOUT_S", "TlsServer", "bind_sockets", "describe_tls_failure"]

log = get_logger("kjbod.server")

# A TLS client must finish its handshake within this long (Kafka has no key for it; asyncio's default is 60 s).
HANDSHAKE_TIMEOUT_S = 10.0
# accept() failures that pass (out of fds, a peer gone before it was accepted): wait a little and accept again.
_ACCEPT_RETRY_S = 0.1
_NOT_TLS = frozenset({"WRONG_VERSION_NUMBER", "HTTP_REQUEST", "HTTPS_PROXY_REQUEST", "UNKNOWN_PROTOCOL",
                      "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG", "UNEXPECTED_RECORD"})


def bind_sockets(host: str, port: int, backlog: int) -> list[socket.socket]:
    """Listening, non-blocking TCP sockets on every address `host` resolves to, as asyncio's create_server binds
    them (SO_REUSEADDR; IPv6 only on an IPv6 address, so a name with both kinds of address binds both)."""
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
            sock.listen(backlog)
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


class TlsServer:
    def __init__(self, loop: asyncio.AbstractEventLoop, sockets: list[socket.socket], context: ssl.SSLContext,
                 factory: Callable[[], Connection], listener: str) -> None:
        self._loop = loop
        self._sockets = sockets
        self._context = context
        self._factory = factory
        self._listener = listener
        self._accepting: list[asyncio.Task[None]] = []
        self._handshakes: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def sockets(self) -> list[socket.socket]:
        return list(self._sockets)

    async def start_serving(self) -> None:
        if not self._accepting and not self._closed:
            self._accepting = [self._loop.create_task(self._accept(sock)) for sock in self._sockets]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for task in [*self._accepting, *self._handshakes]:
            task.cancel()
        for sock in self._sockets:
            sock.close()

    async def wait_closed(self) -> None:
        tasks = [*self._accepting, *self._handshakes]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _accept(self, listening: socket.socket) -> None:
        loop = self._loop
        while not self._closed:
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
