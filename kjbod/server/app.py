"""The server process: one listening socket per listener, graceful shutdown on SIGTERM/SIGINT.

Strategy:

* Startup binds every listener first, without serving (`start_serving=False`), so a port in use is reported as
  one clear line before anything else happens; then it builds and starts the node (storage recovery, metadata),
  and only then starts serving, so no request reaches a node that is not ready.
* One `Connection` per accepted socket, all registered in one `ConnectionRegistry`.
* Every listener is a `kjbod.server.listener.ListenerServer`, which accepts the sockets itself so that Kafka's
  connection limits hold (kjbod.server.quotas: max.connections, per listener and per IP, the creation rate); the
  limits are built again whenever the node's dynamic broker configs change. Idle connections are closed after
  ``connections.max.idle.ms``.
* On a TLS listener (security protocol SSL) each accepted socket's handshake runs as its own small task, without
  blocking the loop, and only a connection whose handshake succeeded gets its `Connection`; a client speaking
  plaintext, or one whose certificate is refused, is logged once and dropped. TLS connections never use sendfile
  (the kernel would write the file's bytes unencrypted): their Fetch answers carry record bytes read by the dirs'
  workers instead (kjbod.broker.handlers.fetch).
* Shutdown, on SIGTERM/SIGINT or when the node asks for it (`node.shutdown_requested`, e.g. every log dir
  failed): stop accepting; let every connection write the replies it owes and close (bounded by
  `shutdown_timeout`; a second signal cuts that short); abort the stragglers; stop the node (checkpoints,
  clean-shutdown markers); exit code 0.
* `run()` is the synchronous entry point: it runs `serve()` on uvloop when uvloop is importable, else on the
  default loop.

The node contract (kjbod.server.roles.build_node builds what `process.roles` names): `node_factory(config)`
returns an object with `async start()`, `async stop()`, `handler` (a kjbod.server.handler.RequestHandler) and
optionally `shutdown_requested` (an asyncio.Event).
"""

from __future__ import annotations

import asyncio
import errno
import faulthandler
import gc
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

from kjbod.broker.authz import build_authorizer
from kjbod.broker.tokens import TokenCredentials
from kjbod.controller.tokens import wall_clock_ms
from kjbod.net.sasl import is_sasl
from kjbod.net.scram import ScramCredential
from kjbod.net.tls import TlsConfigError, TlsSettings, is_tls, server_context
from kjbod.server.config import ConfigError, Listener, ServerConfig
from kjbod.server.connection import Connection, ConnectionRegistry
from kjbod.server.listener import ConnectionFactory, ListenerServer, bind_sockets
from kjbod.server.logging import get_logger
from kjbod.server.quotas import ConnectionLimits, ConnectionQuotas, close_idle_connections
from kjbod.storage.records import keep_freed_buffers
from kjbod.storage.workers import Placement

__all__ = ["SHUTDOWN_GRACE_S", "ListenError", "install_uvloop", "new_event_loop", "run", "serve"]

log = get_logger("kjbod.server")

SHUTDOWN_GRACE_S = 30.0
GC_YOUNG_THRESHOLD = 50_000
# KJBOD_GIL_SWITCH_US: how long a thread that wants the GIL waits before the holder is made to let it go
# (sys.setswitchinterval), when set; unset, CPython's 5000 us stays. See _settle_threads.
GIL_SWITCH_ENV = "KJBOD_GIL_SWITCH_US"


class ListenError(ConfigError):
    """A listener could not be bound (port in use, address not local, ...): one line, exit code 2."""


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A uvloop loop when uvloop is installed, else the default asyncio loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def install_uvloop() -> bool:
    """Make uvloop the loop of later `asyncio.run` calls, when installed. (`run()` does not need this.)"""
    try:
        import uvloop
    except ImportError:
        return False
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True


def run(
    config: ServerConfig,
    node_factory: Callable[[ServerConfig], Any] | None = None,
    *,
    shutdown_timeout: float = SHUTDOWN_GRACE_S,
) -> int:
    """Serve until SIGTERM/SIGINT; returns the process exit code.

    A fatal signal (a crash in native code: SIGSEGV, SIGBUS, SIGFPE, SIGABRT, SIGILL) prints every thread's Python
    stack to stderr, which is the node's log under ``kjbod cluster up``, before the process dies: a node that vanished
    leaves the place it crashed behind instead of nothing."""
    faulthandler.enable(all_threads=True)
    keep_freed_buffers()  # produced batches are decompressed to be validated: see kjbod.storage.records
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(serve(config, node_factory, shutdown_timeout=shutdown_timeout, whole_process=True))


async def serve(
    config: ServerConfig,
    node_factory: Callable[[ServerConfig], Any] | None = None,
    *,
    shutdown_timeout: float = SHUTDOWN_GRACE_S,
    whole_process: bool = False,
) -> int:
    """Bind, start the node, serve until asked to stop, shut down gracefully. Returns the exit code (0).
    ``whole_process``: the process is this server's alone (`run`), so it may tune the process's GC."""
    loop = asyncio.get_running_loop()
    registry = ConnectionRegistry()
    # As in Kafka, the broker's listeners and the controller's have connection quotas of their own (each role's
    # socket server counts its own connections); only the broker's protect the inter-broker listener.
    static_limits = ConnectionLimits.build(config, {})
    quotas = {
        "broker": ConnectionQuotas(static_limits, [ln.name for ln in config.broker_listeners],
                                   config.inter_broker_listener_name or _first_broker_listener(config),
                                   quota_samples=config.quota_window_num,
                                   quota_window_seconds=config.quota_window_size_seconds),
        "controller": ConnectionQuotas(static_limits, [ln.name for ln in config.controller_listeners], None),
    }
    node: Any = None
    metrics: Any = None
    endpoint: Any = None

    def scram_credential(user: str, mechanism_type: int) -> ScramCredential | None:
        """A SCRAM credential from the node's current metadata image (AlterUserScramCredentials wrote it)."""
        image = getattr(node, "metadata", None)
        entry = image.scram.get((user, mechanism_type)) if image is not None else None
        if entry is None:
            return None
        return ScramCredential(entry.salt, entry.stored_key, entry.server_key, entry.iterations)

    tokens = TokenCredentials(lambda: getattr(node, "metadata", None), config.delegation_token_secret_key,
                              wall_clock_ms)

    def connection_factory(listener: Listener, kind: Any) -> ConnectionFactory:
        tls = is_tls(listener.security_protocol)
        # the rules name SSL clients only: on SASL_SSL the principal is the SASL one, as in Kafka
        ssl_only = listener.security_protocol.upper() == "SSL"
        mapper = config.tls_settings(listener.name).principal_mapper() if ssl_only else None
        sasl = config.sasl_settings(listener.name) if is_sasl(listener.security_protocol) else None

        def make(on_close: Callable[[], None] | None) -> Connection:
            return Connection(
                node.handler,
                listener_name=listener.name,
                listener_kind=kind,
                security_protocol=listener.security_protocol,
                max_frame_size=config.socket_request_max_bytes,
                zero_copy=config.zero_copy and not tls,
                registry=registry,
                stats=metrics.requests if metrics is not None else None,
                tls=tls,
                principal_mapper=mapper,
                sasl=sasl,
                scram_credential=scram_credential,
                token_credential=tokens.lookup,
                auth_failure_delay_ms=config.connection_failed_authentication_delay_ms,
                sasl_max_receive_size=config.sasl_server_max_receive_size,
                on_close=on_close,
            )

        return make

    def limits_changed() -> None:
        """The node's dynamic broker configs changed: the connection limits in force may have."""
        dynamic = getattr(node, "dynamic_configs", None)
        if dynamic is None:
            return
        limits = ConnectionLimits.build(config, dynamic.merged())
        changed = [q.reconfigure(limits) for q in quotas.values()]
        if any(changed):
            log.info("connection limits changed", max_connections=limits.max_connections,
                     max_connections_per_ip=limits.max_connections_per_ip,
                     max_connections_per_ip_overrides=dict(limits.per_ip_overrides),
                     max_connection_creation_rate=limits.max_connection_creation_rate,
                     listener_max_connections=dict(limits.listener_max_connections),
                     listener_max_connection_creation_rate=dict(limits.listener_max_connection_creation_rate))
            for q in quotas.values():
                q.close_excess(registry)

    servers: list[tuple[Listener, str, Any]] = []
    bound: list[tuple[str, int]] = []
    try:
        for listener in config.listeners:
            kind = config.listener_kind(listener.name)
            context = _tls_context(listener, config.tls_settings(listener.name)) \
                if is_tls(listener.security_protocol) else None
            server = ListenerServer(loop, _listen(listener), connection_factory(listener, kind), listener.name,
                                    context=context, quotas=quotas[kind], registry=registry,
                                    backlog=config.socket_listen_backlog_size)
            servers.append((listener, kind, server))
            # the bound address, read now: a server closed while the node starts (a stop asked meanwhile) has no
            # sockets to read later
            bound.append(server.sockets[0].getsockname()[:2])

        if node_factory is None:
            from kjbod.server.roles import build_node

            node_factory = build_node
        node = node_factory(config)
        node.authorizer = build_authorizer(config, node)
        node.connection_registry = registry  # per-connection state learns of closes (kjbod.broker.share.sessions)
        if getattr(node, "metadata", None) is not None:  # per-IP connection_creation_rate client quotas
            quotas["broker"].client_quotas = lambda: node.metadata.client_quotas
        if config.kjbod_metrics_listener is not None:
            metrics, endpoint = await _start_metrics(node, config.kjbod_metrics_listener)
            metrics.collector.connection_quotas = list(quotas.values())
        await node.start()
        config_listeners = getattr(node, "broker_config_listeners", None)
        if config_listeners is not None:
            config_listeners.append(limits_changed)
        limits_changed()  # the dynamic values the metadata log holds
        if whole_process:
            if os.environ.get("KJBOD_TRACE"):  # a latency tail's background events (kjbod.net.trace)
                from kjbod.server.tracing import install_tracing

                install_tracing()
            if os.environ.get("KJBOD_LOOP_PROFILE"):  # the loop's CPU profile on SIGUSR1/2 (a debug hook)
                from kjbod.server.loop_profile import install_loop_profile

                install_loop_profile(loop)
            _settle_gc()
            _settle_threads()
            Placement().start(loop)  # the dir workers take turns with this loop: on its CPU while quiet
    except BaseException:
        for _, _, server in servers:
            server.close()
        if endpoint is not None:
            await endpoint.close()
        raise

    idle_closer = loop.create_task(close_idle_connections(registry, config.connections_max_idle_ms))
    serve_later: asyncio.Task[None] | None = None
    try:
        authz = getattr(node, "authorizer", None)
        deferred: list[tuple[Listener, str, Any, tuple[str, int]]] = []
        for (listener, kind, server), (host, port) in zip(servers, bound, strict=True):
            if authz is not None and listener.name not in config.early_start_listeners and not authz.ready:
                deferred.append((listener, kind, server, (host, port)))  # as Kafka: after the initial ACL load
                continue
            await server.start_serving()
            log.info("listening", listener=listener.name, kind=kind, host=host, port=port)
        if deferred:
            log.info("waiting for the authorizer's initial ACL load before serving",
                     listeners=[ln.name for ln, _, _, _ in deferred])
            serve_later = loop.create_task(_serve_when_authorizer_ready(authz, deferred))
        if config.ignored:
            log.info("config keys accepted with no effect in kjbod", keys=sorted(config.ignored))
        await _wait_for_stop(loop, node)
    finally:
        # Also on cancellation (embedded use): the node must not be left running.
        idle_closer.cancel()
        if serve_later is not None:
            serve_later.cancel()
        for _, _, server in servers:
            server.close()
        begin = getattr(node, "begin_shutdown", None)
        if begin is not None:
            begin()  # wakes long-polling fetches so draining does not wait out their max_wait_ms
        aborted = await _drain(loop, registry, shutdown_timeout)
        for _, _, server in servers:
            await server.wait_closed()
        if endpoint is not None:
            await endpoint.close()
        await node.stop()
    # Like Kafka, a node that stopped because every log dir failed exits non-zero so a supervisor notices.
    code = int(getattr(node, "exit_code", 0) or 0)
    log.info("shutdown complete", aborted_connections=aborted, exit_code=code)
    return code


def _settle_gc() -> None:
    """Once the node has started: what it built so far lives as long as the process, so it is moved out of the
    cyclic GC's sight (``gc.freeze``), and a collection runs every GC_YOUNG_THRESHOLD net allocations instead of
    CPython's 700. Requests handed to the dir workers (kjbod.storage.workers) are in flight across loop passes,
    hundreds at a time: at 700 their objects were scanned and promoted while still alive, and full collections
    walked every long-lived object a few times a second (a fifth of the server's CPU at the highest small-batch
    Produce rate); at GC_YOUNG_THRESHOLD most die before a collection sees them."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 10, 10)
    if os.environ.get("KJBOD_GC_LOG"):
        gc.callbacks.append(_gc_logger())


def _settle_threads() -> None:
    """Once the node has started: with KJBOD_GIL_SWITCH_US set, a thread waiting for the GIL gets it after that
    many microseconds at most instead of CPython's 5000. Unset, the interpreter's interval stays.

    uvloop lets the GIL go while it waits in epoll and takes it again for each callback it runs. A dir worker
    whose write returns while the loop is busy asks for the GIL, and each time the loop lets it go between two
    callbacks the loop (running) takes it back before the worker (just woken) can: the worker's answer waits
    until the switch interval runs out. Measured both ways, so it is a choice, not a default:
    - latency (tools/bench/replication.py --latency-only, quiet machine, 500 records/s): the acks=all RF 3 p99
      was 11.1 and 10.8 ms at 5000 us, 6.9 and 4.4 ms at 500 us; acks=1 RF 1 3.1 and 3.2 ms against 2.0 and
      2.1 ms;
    - throughput (tools/bench/dir_workers.py's idempotent small batches at the highest rate, each run against
      the code before the change in the same rounds): with 500 us the single-loop path (KJBOD_DIR_WORKERS=0)
      ran at 83 % of the code before's rate (CPU per request 183 against 164 us); with 5000 us, in the next run,
      at 108 %. One pair of runs; why a path with one busy thread pays it is not pinned down.
    """
    value = os.environ.get(GIL_SWITCH_ENV)
    if not value:
        return
    try:
        us = int(value)
    except ValueError:
        log.warning("ignored: not a whole number of microseconds", variable=GIL_SWITCH_ENV, value=value)
        return
    if us <= 0:
        log.warning("ignored: not above 0", variable=GIL_SWITCH_ENV, value=value)
        return
    sys.setswitchinterval(us / 1e6)


def _gc_logger() -> Callable[[str, dict[str, int]], None]:
    """A gc.callbacks hook (KJBOD_GC_LOG=1) logging every collection: its generation, how long it took, what it
    freed, the generations' counts afterwards (gc.get_count) and how many objects the collector still tracks
    outside the frozen ones (what a full collection walks), to find which collections pause the loop and what
    fills them."""
    import time

    started = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
            return
        log.info("gc", generation=info["generation"], ms=round((time.perf_counter() - started[0]) * 1000, 2),
                 collected=info["collected"], uncollectable=info["uncollectable"], counts=gc.get_count(),
                 frozen=gc.get_freeze_count(), tracked=sum(len(gc.get_objects(g)) for g in range(3)))

    return on_gc


async def _start_metrics(node: Any, listener: str) -> tuple[Any, Any]:
    """The node's counters and its /metrics endpoint (kjbod.metrics.listener), listening before the node starts."""
    from kjbod.metrics import MetricsEndpoint, NodeMetrics, parse_listener

    host, port = parse_listener(listener)
    metrics = NodeMetrics(node)
    endpoint = MetricsEndpoint(metrics, host, port)
    try:
        await endpoint.start()
    except OSError as e:
        reason = "address already in use" if e.errno == errno.EADDRINUSE else (e.strerror or str(e)).lower()
        raise ListenError(f"cannot listen on {host}:{port} (kjbod.metrics.listener): {reason}") from None
    return metrics, endpoint


def _first_broker_listener(config: ServerConfig) -> str | None:
    names = [ln.name for ln in config.listeners if ln.name not in config.controller_listener_names]
    return names[0] if names else None


async def _serve_when_authorizer_ready(authz: Any, deferred: list[tuple[Listener, str, Any, tuple[str, int]]]) -> None:
    """Kafka's rule for listeners not in early.start.listeners: they start once the authorizer has loaded the ACLs
    (the node has replayed its metadata log up to the high watermark it saw at start)."""
    while not authz.ready:
        await asyncio.sleep(0.05)
    log.info("authorizer ready: the initial ACL load is complete")
    for listener, kind, server, (host, port) in deferred:
        await server.start_serving()
        log.info("listening", listener=listener.name, kind=kind, host=host, port=port)


def _tls_context(listener: Listener, settings: TlsSettings) -> Any:
    try:
        return server_context(settings)
    except TlsConfigError as e:  # checked when the config was read; a file may have changed since
        raise ConfigError(f"listener {listener.name}: {e}") from None


def _where(listener: Listener) -> str:
    return f"{listener.host}:{listener.port}" if ":" not in listener.host else f"[{listener.host}]:{listener.port}"


def _listen(listener: Listener) -> list[socket.socket]:
    """The listener's bound, listening sockets; a ListenError of one line when it cannot be bound."""
    try:
        return bind_sockets(listener.host, listener.port)
    except socket.gaierror as e:
        raise ListenError(f"cannot listen on {_where(listener)}: unknown host ({e.strerror})") from None
    except OSError as e:
        reason = "address already in use" if e.errno == errno.EADDRINUSE else (e.strerror or str(e)).lower()
        raise ListenError(f"cannot listen on {_where(listener)}: {reason}") from None


_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _add_signal_handlers(
    loop: asyncio.AbstractEventLoop, on_signal: Callable[[signal.Signals], None]
) -> list[signal.Signals]:
    """Route SIGTERM and SIGINT to `on_signal`; returns the signals installed, for loop.remove_signal_handler.
    None is installed off the main thread (embedded use): the caller then stops us by cancelling."""
    installed = []
    for sig in _SIGNALS:
        try:
            loop.add_signal_handler(sig, on_signal, sig)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
    return installed


async def _wait_for_stop(loop: asyncio.AbstractEventLoop, node: Any) -> None:
    stop = asyncio.Event()

    def on_signal(sig: signal.Signals) -> None:
        log.info("shutdown requested", signal=sig.name)
        stop.set()

    installed = _add_signal_handlers(loop, on_signal)
    waiters = [asyncio.ensure_future(stop.wait())]
    node_stop = getattr(node, "shutdown_requested", None)
    if node_stop is not None:
        waiters.append(asyncio.ensure_future(node_stop.wait()))
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        for sig in installed:
            loop.remove_signal_handler(sig)
    if node_stop is not None and node_stop.is_set() and not stop.is_set():
        log.warning("the node asked to shut down")


async def _drain(loop: asyncio.AbstractEventLoop, registry: ConnectionRegistry, timeout: float) -> int:
    """Let connections finish (bounded); a second SIGTERM/SIGINT aborts them at once."""
    hurry = asyncio.Event()

    def on_signal(sig: signal.Signals) -> None:
        log.info("second signal: aborting open connections", signal=sig.name)
        hurry.set()

    installed = _add_signal_handlers(loop, on_signal)
    if len(registry):
        log.info("waiting for open connections", connections=len(registry), timeout_s=timeout)
    shutdown = asyncio.ensure_future(registry.shutdown(timeout))
    hurried = asyncio.ensure_future(hurry.wait())
    try:
        await asyncio.wait([shutdown, hurried], return_when=asyncio.FIRST_COMPLETED)
        if not shutdown.done():
            stragglers = list(registry)
            for connection in stragglers:
                connection.abort()
            await shutdown  # returns promptly: every connection is gone or going
            return len(stragglers)
        return shutdown.result()
    finally:
        hurried.cancel()
        for sig in installed:
            loop.remove_signal_handler(sig)
