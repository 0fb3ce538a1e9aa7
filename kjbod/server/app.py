"""The server process: one listening socket per listener, graceful shutdown on SIGTERM/SIGINT.

Startup: build the node (storage, metadata, router), start it, bind every listener (a port in use is a clear
one-line error), then serve.  Shutdown, on a signal or when the node asks for it (every log dir failed): stop
accepting, let each connection write the replies it owes (bounded), close them, stop the node (checkpoints,
clean-shutdown markers), and return exit code 0.
"""

from __future__ import annotations

import asyncio
import errno
import signal
from collections.abc import Callable
from typing import Any

from kjbod.server.config import ConfigError, ServerConfig
from kjbod.server.connection import Connection, ConnectionRegistry
from kjbod.server.logging import get_logger

log = get_logger("kjbod.server")

SHUTDOWN_GRACE_S = 30.0


class ListenError(ConfigError):
    pass


def install_uvloop() -> bool:
    try:
        import uvloop
    except ImportError:
        return False
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True


async def serve(config: ServerConfig, node_factory: Callable[[ServerConfig], Any] | None = None) -> int:
    if node_factory is None:
        from kjbod.broker.node import build_node

        node_factory = build_node
    loop = asyncio.get_running_loop()
    node = node_factory(config)
    await node.start()
    registry = ConnectionRegistry()
    servers: list[asyncio.base_events.Server] = []
    stop = asyncio.Event()
    try:
        for ln in config.listeners:
            kind = config.listener_kind(ln.name)

            def factory(ln=ln, kind=kind) -> Connection:
                return Connection(node.handler, listener_name=ln.name, listener_kind=kind,
                                  security_protocol=ln.security_protocol,
                                  max_frame_size=config.socket_request_max_bytes, zero_copy=config.zero_copy,
                                  registry=registry)

            try:
                server = await loop.create_server(factory, ln.host, ln.port, backlog=1024, reuse_address=True)
            except OSError as e:
                reason = "address already in use" if e.errno == errno.EADDRINUSE else (e.strerror or str(e))
                raise ListenError(f"cannot listen on {ln.host}:{ln.port} ({ln.name}): {reason}") from None
            servers.append(server)
            log.info("listening", listener=ln.name, kind=kind, host=ln.host, port=ln.port)
    except BaseException:
        for s in servers:
            s.close()
        await node.stop()
        raise

    def on_signal(signame: str) -> None:
        log.info("shutdown_requested", signal=signame)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig.name)
    node_stop = asyncio.ensure_future(node.shutdown_requested.wait())
    stop_wait = asyncio.ensure_future(stop.wait())
    await asyncio.wait({node_stop, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
    node_stop.cancel()
    stop_wait.cancel()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.remove_signal_handler(sig)
    for s in servers:
        s.close()
    aborted = await registry.shutdown(SHUTDOWN_GRACE_S)
    for s in servers:
        await s.wait_closed()
    await node.stop()
    log.info("shutdown_complete", aborted_connections=aborted)
    return 0
