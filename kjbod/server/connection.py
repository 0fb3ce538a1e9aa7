"""One Kafka client connection: an `asyncio.BufferedProtocol` that turns received bytes into handler calls and
replies into writes, in request order, with backpressure both ways.

Strategy:

* Receiving: the transport reads into a buffer we hand it (`get_buffer`).  Normally that is a reusable 64 KiB
  buffer whose bytes then go through `data_received`.  When a read starts a request of at least 64 KiB (a
  Produce of big batches) whose body has not all arrived, a buffer of exactly that request's size is allocated
  and the transport reads the rest of the body straight into it: the bytes cross from the kernel into the frame
  once and are never joined or copied again before the log writes them.  Such a frame reaches the handler as a
  `bytearray`, allocated without zeroing its bytes (the reads overwrite them all before anyone looks).
* Reading: each `data_received` feeds the sans-IO `FrameDecoder` and hands every complete frame to
  `handler.handle(frame, ctx)`.
* The fast path (no reply queued, handler answered synchronously with bytes only): the reply's size prefix and parts
  go into a batch, and the whole batch goes out with ONE `transport.write` after the read's last frame. A read
  holding 16 pipelined requests therefore costs one write, and nothing allocates a task.
* The slow path: as soon as one reply is an awaitable (long-poll Fetch) or carries a `FileRegion`, that reply and
  every reply after it are queued, and a single sender task writes the queue in order, awaiting each pending reply
  at the head and batching whatever is ready behind it. Once the queue drains, the sender exits and the fast path
  resumes. Exactly one writer at a time keeps the byte stream ordered.
* Replies a callback gives later (`Later`: a Produce answered by the log dirs' workers) are queued the same way,
  but while the queue holds nothing else no sender task runs: each `Later`'s completion writes every reply ready
  at the head of the queue, in the callback that completed it. Anything else queued behind or before them (an
  awaitable, a file region) starts the sender, which then awaits the `Later`s in its turn.
* File regions: bytes before a region are written, then the sender waits until the transport's own buffer is empty
  and calls `os.sendfile` on the socket until EAGAIN, waiting for writability through a dup of the socket fd
  registered with `add_writer` (the transport's fd is already registered by the loop itself, and asyncio's
  `loop.sendfile` is not implemented by uvloop). Nothing else writes meanwhile because every reply is queued
  behind the sender. When sendfile is off (`zero_copy=False`) or unsupported (EINVAL/ENOSYS/...), the region is
  sent with `os.pread` + `transport.write` in 1 MiB chunks, honouring pause_writing.
* TLS connections (`tls=True`) never use sendfile: the kernel would put the file's bytes on the socket past the
  TLS layer, unencrypted. The handlers answer them with record bytes instead of regions (the Fetch handler reads
  them on the dirs' workers); a region that still reaches one goes out through the pread copy above.
* SASL listeners (`sasl=`): a `kjbod.server.sasl_gate.SaslGate` stands before the handler until the client has
  authenticated; the router's ready answers are off until then.
* Backpressure: reading pauses while `max_pending` replies are queued (frames already received stay in the decoder
  and are processed when the queue falls to half), and while the transport asks us to pause writing.
* Errors: a bad size prefix, a `CloseConnection` from the handler, or an unexpected handler exception stops
  reading; the replies to earlier requests are written, then the connection is closed. Handler bugs are logged
  with their traceback at warning level. None of it touches other connections.
* Metrics (when the node has a /metrics endpoint, kjbod.metrics): each request's route id goes into per-API
  arrays with its queue and handler time; replies answered at once are timed by the write that sends their batch,
  queued ones when the sender has sent them.  With no endpoint `stats` is None and costs one test per read.
* Teardown: when the connection goes, queued replies are dropped, their tasks cancelled and their file regions
  closed; the socket dup is unregistered before it is closed so an fd number reused later is never confused with it.
"""

from __future__ import annotations

import asyncio
import bisect
import errno
import itertools
import logging
import os
import struct
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

from kjbod.metadata.acls import ANONYMOUS
from kjbod.metrics.counters import BOUNDS_S as _BOUNDS_S
from kjbod.metrics.counters import BUCKETS as _BUCKETS
from kjbod.metrics.counters import ROUTE_LIMIT as _ROUTE_LIMIT
from kjbod.metrics.counters import RequestStats
from kjbod.net.sasl import SaslSettings
from kjbod.net.tls import NoMatchingRule, PrincipalMapper, certificate_principal
from kjbod.server.handler import CloseConnection, Later, ListenerKind, Reply, RequestContext, RequestHandler
from kjbod.server.logging import get_logger
from kjbod.server.sasl_gate import MAX_RECEIVE_SIZE as SASL_MAX_RECEIVE_SIZE
from kjbod.server.sasl_gate import SaslGate
from kjbod.storage import timeline
from kjbod.wire.framing import DEFAULT_MAX_FRAME_SIZE, SIZE_PREFIX_LENGTH, FrameDecoder, FrameError
from kjbod.wire.region import FileRegion

__all__ = ["DEFAULT_MAX_PENDING", "Connection", "ConnectionRegistry", "RegionTruncated"]

_log = get_logger("kjbod.server.connection")

DEFAULT_MAX_PENDING = 64
# Fallback copy size for file regions: large enough to amortise the syscalls, small enough not to balloon memory.
_COPY_CHUNK = 1 << 20

# The reusable receive buffer, and the request size from which a request gets a buffer of its own.
_RECV_BYTES = 64 * 1024
_OWN_BUFFER_FROM = 64 * 1024



def _zeroing_buffer(size: int) -> bytearray:
    return bytearray(size)


def _unzeroed_allocator() -> Any:
    """CPython's own bytearray constructor from C (``PyByteArray_FromStringAndSize`` given no bytes), which
    allocates without zeroing; None where it cannot be had (another Python)."""
    try:
        import ctypes

        new = ctypes.PyDLL(None).PyByteArray_FromStringAndSize  # a handle of our own: pythonapi's is shared
    except (ImportError, OSError, AttributeError):
        return None
    new.restype = ctypes.py_object
    new.argtypes = (ctypes.c_char_p, ctypes.c_ssize_t)
    return new


_new_bytearray = _unzeroed_allocator()


def _receive_buffer(size: int) -> bytearray:
    """A buffer of ``size`` bytes for a big request's body, its bytes not zeroed: the transport's reads fill all
    of it before the frame is handed on (a connection that closes first drops it unread). ``bytearray(size)``
    zeroes it first, a pass over 1 MiB that cost 40-120 us of the event loop's CPU per 1 MiB Produce (perf, on
    tmpfs: the most on the workers path, whose worker read the memory last on the other CPU), about as much as
    the Produce's whole Python work on the loop."""
    if _new_bytearray is None:
        return _zeroing_buffer(size)
    return cast(bytearray, _new_bytearray(None, size))


# A read of many small requests with big replies is written in slices of this size, not all at once.
_FLUSH_BYTES = 256 * 1024

# Why reading is paused; the transport reads again once no reason is left.
_PAUSE_PENDING = 1
_PAUSE_WRITING = 2
_PAUSE_CLOSING = 4
_PAUSE_THROTTLED = 8  # a client over its quota, muted until its throttle time has passed (Kafka's channel mute)

# sendfile errors that mean "not possible for this pair of fds", not "the connection broke".
_SENDFILE_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP})

_pack_size = struct.Struct(">i").pack
_unpack_size_from = struct.Struct(">i").unpack_from
_unpack_request_header = struct.Struct(">hhi").unpack_from
# Size prefix, route id (API key and version as one int32) and correlation id: what a ready answer needs.
_REQUEST_HEAD = 8  # the route id and the correlation id
_HEAD_LENGTH = 4 + _REQUEST_HEAD
_unpack_head_from = struct.Struct(">iii").unpack_from
_pack_size_corr = struct.Struct(">ii").pack
_NO_READY: dict[int, dict[bytes, bytes]] = {}
# The sender while only `Later`s are queued: their callbacks write, no task runs (see _pump_later).
_BY_CALLBACKS: Any = object()
_connection_ids = itertools.count(1)
_now = time.perf_counter
_monotonic = time.monotonic
_bucket = bisect.bisect_right
_FIRST_BOUND_S = _BOUNDS_S[0]


class RegionTruncated(Exception):
    """A file region's file ended before its last byte: the frame size already sent cannot be honoured."""


class Connection(asyncio.BufferedProtocol):
    """Serves one client connection. Construct one per accepted socket (it is the protocol factory's product)."""

    def __init__(
        self,
        handler: RequestHandler,
        *,
        listener_name: str = "PLAINTEXT",
        listener_kind: ListenerKind = "broker",
        security_protocol: str = "PLAINTEXT",
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        max_pending: int = DEFAULT_MAX_PENDING,
        zero_copy: bool = True,
        registry: ConnectionRegistry | None = None,
        stats: RequestStats | None = None,
        tls: bool = False,
        principal_mapper: PrincipalMapper | None = None,
        sasl: SaslSettings | None = None,
        scram_credential: Any = None,
        token_credential: Any = None,
        auth_failure_delay_ms: int = 0,
        sasl_max_receive_size: int = SASL_MAX_RECEIVE_SIZE,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        if max_pending < 1:
            raise ValueError("max_pending must be >= 1")
        self._handle = handler.handle
        ready = getattr(handler, "ready_replies", None)
        self._ready: dict[int, dict[bytes, bytes]] | None = ready(listener_kind) if ready is not None else None
        self._listener_name = listener_name
        self._listener_kind: ListenerKind = listener_kind
        self._security_protocol = security_protocol
        self._decoder = FrameDecoder(max_frame_size)
        self._max_pending = max_pending
        self._resume_below = max_pending // 2 + 1
        # sendfile would put a file's bytes on a TLS socket unencrypted: never on one
        self._zero_copy = zero_copy and not tls
        self._tls = tls
        self._principal_mapper = principal_mapper
        self._registry = registry
        self.connection_id = next(_connection_ids)
        self._stats = stats
        self._on_close = on_close
        # When the peer last sent bytes (time.monotonic): what connections.max.idle.ms and the choice of the least
        # recently used connection to close (kjbod.server.quotas) go by.
        self.last_active = _monotonic()
        self._read_at = 0.0  # when the read being served arrived (metrics)
        self._batch_routes: list[int] = []  # route ids of the replies in the batch not yet written (metrics)

        self._transport: asyncio.Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ctx: RequestContext | None = None
        self._log: Any = _log
        self._debug = False

        # Replies not yet written, in request order: (reply or future of one, request metadata for the debug log).
        self._queue: deque[tuple[Any, tuple[float, ...] | None]] = deque()
        self._sender: asyncio.Task[None] | None = None  # or _BY_CALLBACKS
        # Replies of completed Laters not written yet: written together once this pass of the loop is over.
        self._later_batch: list[Any] | None = None
        self._later_write_due = False  # a _write_later_batch is scheduled for the end of this pass
        # The reply the sender is writing, so its file regions are closed if the connection drops midway.
        self._sending: list[Any] | None = None
        self._pause = 0
        self._muted_until = 0.0  # loop time the quota mute ends
        self._mute_timer: asyncio.TimerHandle | None = None
        self._resume_scheduled = False
        self._write_paused = False
        self._write_waiter: asyncio.Future[None] | None = None
        self._eof = False
        self._close_reason: str | None = None
        self._closed = False
        self._sock_dup: int | None = None
        self._lost_waiter: asyncio.Future[None] | None = None
        self._recv_view = memoryview(bytearray(_RECV_BYTES))
        # A big request being received straight into its own buffer: the buffer and how much of it is filled.
        self._big: bytearray | None = None
        self._big_view: memoryview | None = None
        self._big_filled = 0
        # A SASL listener: the gate answers the authentication exchange and passes frames on once it succeeded; the
        # router's ready answers wait until then (a raw v0 token must never be taken for a request).
        self.sasl: SaslGate | None = None
        self._max_frame_size = max_frame_size
        if sasl is not None:
            # Kafka's sasl.server.max.receive.size: a bigger size prefix before authentication closes the connection
            # before its body is buffered
            self._decoder.max_size = min(max_frame_size, sasl_max_receive_size)
            self._router_ready, self._ready = self._ready, None
            self.sasl = SaslGate(self._handle, sasl, close_later=self._close_soon,
                                 on_authenticated=self._sasl_authenticated, scram_credential=scram_credential,
                                 token_credential=token_credential,
                                 failure_delay_ms=auth_failure_delay_ms, max_receive_size=sasl_max_receive_size)
            self._handle = self.sasl.handle

    def _close_soon(self, reason: str) -> None:
        """Close once the reply being built now is written (it goes out in this pass of the loop)."""
        assert self._loop is not None
        self._loop.call_soon(self.close_after_pending, reason)

    def _sasl_authenticated(self) -> None:
        self._ready = self._router_ready
        self._decoder.max_size = self._max_frame_size

    # -- public surface ---------------------------------------------------------------------------------------------

    @property
    def context(self) -> RequestContext | None:
        return self._ctx

    @property
    def pending(self) -> int:
        """Replies queued behind the sender (0 on the fast path)."""
        return len(self._queue)

    @property
    def reading_paused(self) -> bool:
        return self._pause != 0

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def closing(self) -> bool:
        """Closed, or asked to close (it goes once its owed replies are written, or at once when aborted)."""
        return self._closed or self._close_reason is not None

    @property
    def listener_name(self) -> str:
        return self._listener_name

    @property
    def idle(self) -> bool:
        """Nothing being answered: no reply queued or being written."""
        return not self._queue and self._sender is None and self._sending is None

    def close_after_pending(self, reason: str) -> None:
        """Stop reading requests; close once the replies to requests already read are written."""
        if self._closed:
            return
        self._begin_close(reason)
        self._maybe_finish_close()

    def abort(self) -> None:
        """Close at once, dropping unwritten replies."""
        if self._transport is not None and not self._closed:
            if self._close_reason is None:
                self._close_reason = "aborted"
            self._transport.abort()

    async def wait_closed(self) -> None:
        if self._closed:
            return
        if self._lost_waiter is None:
            self._lost_waiter = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._lost_waiter)

    # -- asyncio.Protocol -------------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)
        self._loop = asyncio.get_running_loop()
        host, port = _split_peer(transport.get_extra_info("peername"))
        # A TLS client's certificate names it (the listener's ssl.principal.mapping.rules); SASL names it later (the
        # gate). A name no rule maps fails the client's authentication, as in Kafka: the connection is closed.
        unmapped: str | None = None
        try:
            principal = certificate_principal(transport.get_extra_info("peercert"), self._principal_mapper) \
                if self._tls else None
        except NoMatchingRule as e:
            principal, unmapped = None, str(e)
        self._ctx = RequestContext(
            connection_id=self.connection_id,
            peer_host=host,
            peer_port=port,
            listener_name=self._listener_name,
            listener_kind=self._listener_kind,
            security_protocol=self._security_protocol,
            principal=principal or ANONYMOUS,
            mute=self.mute_for,
        )
        self._log = _log.bind(conn=self.connection_id, peer=self._ctx.peer, listener=self._listener_name)
        self._debug = self._log.is_enabled_for(logging.DEBUG)
        if self._registry is not None:
            self._registry.add(self)
        self._log.info("connection opened", listener_kind=self._listener_kind)
        if unmapped is not None:
            self._log.warning("TLS client certificate refused; closing the connection", error=unmapped)
            self.close_after_pending("no ssl.principal.mapping.rules rule maps the client certificate")

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._big_view is not None:
            return self._big_view[self._big_filled :]
        return self._recv_view

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = _monotonic()
        if timeline.ON:
            timeline.span("server read", time.perf_counter())
        if self._big_view is not None:
            self._big_filled += nbytes
            if self._big_filled == len(self._big_view):
                self._big_received()
            return
        view = self._recv_view
        if nbytes == _RECV_BYTES and not self._pause and self._decoder.idle:
            # A full buffer with nothing before it may be the start of a big request: if so, receive the rest
            # straight into a buffer of its own.
            (size,) = _unpack_size_from(view, 0)
            if _OWN_BUFFER_FROM <= size <= self._decoder.max_size and nbytes < SIZE_PREFIX_LENGTH + size:
                big = _receive_buffer(size)
                first = nbytes - SIZE_PREFIX_LENGTH
                big[:first] = view[SIZE_PREFIX_LENGTH:nbytes]
                self._big, self._big_view, self._big_filled = big, memoryview(big), first
                return
        if self._received(bytes(view[:nbytes])) and not self._pause:
            # Bytes of an incomplete request are buffered. If it is a big one (it began after other requests in
            # the same read, or arrived slowly) the rest of it goes into its own buffer too, which also brings
            # reads back in step with request boundaries.
            try:
                detached = self._decoder.detach_partial(_OWN_BUFFER_FROM)
            except FrameError as exc:
                self._frame_error(exc)
                self._maybe_finish_close()
                return
            if detached is not None:
                big, self._big_filled = detached
                self._big, self._big_view = big, memoryview(big)

    def _big_received(self) -> None:
        frame = self._big
        self._big = self._big_view = None
        if frame is None or self._pause & _PAUSE_CLOSING:
            return
        # Through the decoder's queue, so ordering, pausing and the slow path work as for any other frame.
        self._decoder.unread([frame])  # type: ignore[list-item]
        if not self._pause:
            self._process_frames()

    def data_received(self, data: bytes) -> None:
        """Received bytes (the buffered-protocol path goes through here for ordinary reads; tests call it)."""
        self.last_active = _monotonic()
        self._received(data)

    def _received(self, data: bytes) -> bool:
        """Handle received bytes; True when some may be left in the decoder (an incomplete request)."""
        if self._pause & _PAUSE_CLOSING:
            return False
        if not self._pause and self._sender is None and not self._debug and self._decoder.idle:
            pos = self._serve_chunk(data)
            if self._pause & _PAUSE_CLOSING:
                self._maybe_finish_close()  # what follows the closing request is dropped, as on the general path
                return False
            if pos == len(data):
                return False
            if pos:
                data = data[pos:]
        try:
            self._decoder.feed(data)
        except FrameError as exc:
            self._frame_error(exc)
            self._maybe_finish_close()
            return False
        if not self._pause:
            self._process_frames()
        return True

    def eof_received(self) -> bool:
        # The peer will send nothing more, but may still read: answer what was received, then close.
        self._eof = True
        if not self._pause:
            self._process_frames()
        else:
            self._maybe_finish_close()
        return True

    def pause_writing(self) -> None:
        self._write_paused = True
        self._pause_reading(_PAUSE_WRITING)

    def resume_writing(self) -> None:
        self._write_paused = False
        waiter, self._write_waiter = self._write_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        self._resume_reading(_PAUSE_WRITING)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._pause |= _PAUSE_CLOSING
        if self._mute_timer is not None:
            self._mute_timer.cancel()
            self._mute_timer = None
        sender, self._sender = self._sender, None
        if sender is not None and sender is not _BY_CALLBACKS:
            sender.cancel()
        sending, self._sending = self._sending, None
        if sending is not None:
            _close_regions(sending)
        while self._queue:
            _discard(self._queue.popleft()[0])
        if self._sock_dup is not None:
            dup, self._sock_dup = self._sock_dup, None
            assert self._loop is not None
            # Unregister before closing: epoll keys registrations by open file, and the fd number may be reused.
            self._loop.remove_writer(dup)
            os.close(dup)
        waiter, self._write_waiter = self._write_waiter, None
        if waiter is not None and not waiter.done():
            waiter.cancel()
        self._decoder = FrameDecoder(0)
        self._big = self._big_view = None
        if self._registry is not None:
            self._registry.discard(self)
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            on_close()
        if self._lost_waiter is not None and not self._lost_waiter.done():
            self._lost_waiter.set_result(None)
        if exc is not None:
            self._log.info("connection closed", error=_describe(exc))
        elif self._close_reason is not None:
            self._log.info("connection closed", reason=self._close_reason)
        else:
            self._log.info("connection closed")

    # -- reading and the fast path ----------------------------------------------------------------------------------

    def _serve_chunk(self, data: bytes) -> int:
        """The fast path for one read when nothing is buffered or queued: split `data` into frames right here and
        answer each (from the handler's ready answers when it has one, else through `handle`), batching the replies
        into one write, until a frame is incomplete, a reply must be queued (awaitable or file region; it is queued
        and the rest goes the general way), a size prefix is bad (left for the decoder to report) or the handler
        closes the connection.  Returns how many bytes were consumed.  Equivalent to feeding the decoder and
        calling `_process_frames`, minus the per-frame bookkeeping."""
        handle = self._handle
        ctx = self._ctx
        ready = self._ready or _NO_READY
        limit = self._decoder.max_size
        stats = self._stats
        if stats is not None:
            # One clock read per request: each starts where the previous one ended (the loop runs them in turn).
            self._read_at = started = read_at = _now()
            routes_append = self._batch_routes.append
            requests, queue_h, local_h = stats.requests, stats.queue, stats.local
        batch: list[Any] = []
        append = batch.append
        batch_bytes = 0
        n = len(data)
        pos = 0
        try:
            # Whatever is left shorter than a size prefix and a request header (at most a frame too short to be a
            # request) goes the general way, which refuses it.
            while n - pos >= _HEAD_LENGTH:
                size, route_id, correlation_id = _unpack_head_from(data, pos)
                end = pos + SIZE_PREFIX_LENGTH + size
                if end > n or size < 0 or size > limit:
                    break
                frame_at = pos + SIZE_PREFIX_LENGTH
                pos = end
                answers = ready.get(route_id)
                reply: Any = None
                if answers is not None and size >= _REQUEST_HEAD:
                    reply = answers.get(data[frame_at + _REQUEST_HEAD : end])
                if reply is not None:
                    size = len(reply)
                    append(_pack_size_corr(size + 4, correlation_id))
                else:
                    try:
                        reply = handle(data[frame_at:end], ctx)  # type: ignore[arg-type]
                    except Exception as exc:  # noqa: BLE001  (CloseConnection or a handler bug; both close)
                        self._handler_raised(exc)
                        break
                    if stats is not None and stats.count_as >= 0:  # a follower's Fetch (kjbod.metrics.counters)
                        route_id = stats.counted_route(route_id)
                    if reply.__class__ is not bytes:  # bytes, the common case, skips all of this
                        if reply is None:
                            if stats is not None:
                                now = _now()
                                stats.handled(route_id, started - self._read_at, now - started)
                                started = now
                            if self._pause:
                                break  # muted for a quota: the requests after it wait
                            continue
                        body = None if reply.__class__ is Later else _joined(reply)
                        if body is None:
                            meta = None
                            if stats is not None:
                                # What _sent_metrics needs, from what the head's unpack gave: the api key the
                                # request counts under (`route_id`'s), its version (a signed int16) and correlation
                                # id.
                                now = _now()
                                meta = (route_id >> 16, ((route_id & 0xFFFF) ^ 0x8000) - 0x8000, correlation_id,
                                        started, self._read_at, now)
                                stats.handled(route_id, started - self._read_at, now - started)
                            self._enqueue(reply, meta)
                            break
                        reply = body
                    size = len(reply)
                    append(_pack_size(size))
                append(reply)
                if stats is not None:
                    now = _now()
                    if 0 <= route_id < _ROUTE_LIMIT:
                        base = (route_id >> 16) * _BUCKETS
                        requests[(route_id >> 11) | (route_id & 31)] += 1
                        waited = started - read_at  # mostly below the first bound: no search then
                        queue_h[base + (_bucket(_BOUNDS_S, waited) if waited >= _FIRST_BOUND_S else 0)] += 1
                        local_h[base + _bucket(_BOUNDS_S, now - started)] += 1
                        routes_append(route_id)
                    started = now
                batch_bytes += size
                if batch_bytes >= _FLUSH_BYTES:
                    batch_bytes = 0
                    if self._flush(batch):
                        break
                if self._pause:
                    break  # muted for a quota: the requests after it wait
        finally:
            if batch:
                self._write_batch(batch)
        return pos

    def _flush(self, batch: list[Any]) -> bool:
        """Big replies in `batch`: write them now (and empty it), so pause_writing can stop us before the next frame;
        True when reading is paused now."""
        self._write_batch(batch)
        batch.clear()
        return bool(self._pause)

    def _write_batch(self, batch: list[Any]) -> None:
        """Writes replies answered at once; with metrics on, times the write for the requests they answer."""
        stats = self._stats
        if stats is None or not self._batch_routes:
            self._write(batch)
            return
        write_started = _now()
        self._write(batch)
        stats.sent_batch(self._batch_routes, self._read_at, write_started, _now())
        self._batch_routes.clear()

    def _sent_metrics(self, meta: tuple[float, ...], ready_at: float) -> None:
        """A queued reply is sent: its remote wait (handler returned -> reply ready), send and total times."""
        stats = self._stats
        if stats is not None and len(meta) > 4:
            api_key, api_version = int(meta[0]), int(meta[1])
            now = _now()
            stats.sent((api_key << 16) | api_version, ready_at - meta[5], now - ready_at, now - meta[4])

    def _handler_raised(self, exc: Exception) -> None:
        if isinstance(exc, CloseConnection):
            self._log.warning("closing connection at the handler's request", reason=exc.reason)
            self._begin_close(exc.reason)
        else:
            self._log.warning("request handler failed; closing the connection", exc_info=exc)
            self._begin_close("request handler failed")

    def _process_frames(self) -> None:
        """Hand buffered frames to the handler until none is complete or something pauses reading."""
        decoder = self._decoder
        handle = self._handle
        ctx = self._ctx
        debug = self._debug
        stats = self._stats
        if stats is not None:
            self._read_at = _now()
        batch: list[Any] = []
        batch_bytes = 0
        try:
            while not self._pause:
                try:
                    frames = decoder.next_frames()
                except FrameError as exc:
                    self._frame_error(exc)
                    break
                if not frames:
                    break
                fast = self._sender is None
                remaining = iter(frames)
                for frame in remaining:
                    meta: tuple[float, ...] | None = _request_meta(frame) if debug or stats else None
                    try:
                        reply = handle(frame, ctx)  # type: ignore[arg-type]
                    except Exception as exc:  # noqa: BLE001  (CloseConnection or a handler bug; both close)
                        self._handler_raised(exc)
                        break
                    if stats is not None and meta is not None:
                        route_id = (int(meta[0]) << 16) | int(meta[1])
                        if stats.count_as >= 0:  # a follower's Fetch (kjbod.metrics.counters)
                            route_id = stats.counted_route(route_id)
                            meta = (route_id >> 16, *meta[1:])
                        handled_at = _now()
                        stats.handled(route_id, meta[3] - self._read_at, handled_at - meta[3])
                        meta = (*meta, self._read_at, handled_at)
                    if fast:
                        if reply is None:
                            if debug and meta is not None:
                                self._log_request(meta, replied=False)
                            if self._pause:
                                break
                            continue
                        body = _joined(reply)
                        if body is not None:
                            size = len(body)
                            batch.append(_pack_size(size))
                            batch.append(body)
                            if stats is not None and meta is not None:
                                self._batch_routes.append(route_id)
                            if debug and meta is not None:
                                self._log_request(meta)
                            batch_bytes += size
                            if batch_bytes >= _FLUSH_BYTES:
                                batch_bytes = 0
                                if self._flush(batch):
                                    break
                            if self._pause:
                                break  # muted for a quota: the frames after it wait
                            continue
                    self._enqueue(reply, meta)
                    fast = False  # from now on the sender writes, in order
                    if self._pause:
                        break
                else:
                    if decoder.buffered < SIZE_PREFIX_LENGTH:
                        break  # the common case: nothing left, not even a partial frame
                    continue  # every frame handled: look for more
                # Stopped early. Frames not handled yet wait in the decoder, unless the connection is closing.
                if not self._pause & _PAUSE_CLOSING:
                    decoder.unread(list(remaining))
                break
        finally:
            if batch:
                self._write_batch(batch)
        if self._close_reason is not None or self._eof:
            self._maybe_finish_close()

    def _enqueue(self, reply: Any, meta: tuple[float, ...] | None) -> None:
        if reply.__class__ is Later:
            self._queue.append((reply, meta))
            if self._sender is None:
                self._sender = _BY_CALLBACKS
            if not reply.when_pending(self._later_done):
                # Done already: not from inside the read being served, whose earlier replies are not written yet.
                assert self._loop is not None
                self._loop.call_soon(self._later_done, reply)
            if len(self._queue) >= self._max_pending:
                self._pause_reading(_PAUSE_PENDING)
            return
        if reply.__class__ is bytes:
            reply = [reply]
        elif reply is not None and reply.__class__ is not list:
            try:
                reply = asyncio.ensure_future(reply)
            except TypeError:
                self._log.warning(
                    "request handler returned neither a reply nor an awaitable", returned=repr(reply)
                )
                self._begin_close("request handler failed")
                return
        self._queue.append((reply, meta))
        if self._sender is None or self._sender is _BY_CALLBACKS:
            self._start_sender()
        if len(self._queue) >= self._max_pending:
            self._pause_reading(_PAUSE_PENDING)

    def _start_sender(self) -> None:
        assert self._loop is not None
        self._sender = self._loop.create_task(self._run_sender())

    def _later_done(self, later: Later) -> None:
        """A queued `Later` is complete: write it, and what is ready behind it, if it is next.

        The common case, the only reply out with nothing gathered for the end of the pass (a Produce answered by
        its dir's worker, a parked follower fetch woken by an append: each request of a client that waits for its
        answer), is written here as `_pump_later` would write it, without its batch and loop; anything else (more
        queued, a failure, no reply, file regions, the debug log) goes through `_pump_later`."""
        queue = self._queue
        if self._sender is not _BY_CALLBACKS or self._closed or not queue or queue[0][0] is not later:
            return  # the sender task writes it, or an earlier reply is not ready yet (its completion writes both)
        if len(queue) == 1 and self._later_batch is None and not self._debug:
            try:
                reply = later.result()
            except Exception:  # noqa: BLE001  (_pump_later reports it)
                reply = None
            body = reply if reply.__class__ is bytes else _joined(reply) if reply is not None else None
            if body is not None:
                meta = queue.popleft()[1]
                stats = self._stats
                if meta is not None and stats is not None:  # as _sent_metrics, in line (once per such reply)
                    ready_at = _now()
                    now = _now()
                    stats.sent((int(meta[0]) << 16) | int(meta[1]), ready_at - meta[5], now - ready_at,
                               now - meta[4])
                self._sender = None  # the fast path is back once this is written (as _write_later_batch)
                transport = self._transport  # as _write, in line
                if transport is not None and not transport.is_closing():
                    if timeline.ON:
                        timeline.span("server write", time.perf_counter())
                    transport.write(_pack_size(len(body)) + body)
                if self._close_reason is not None or self._eof:
                    self._maybe_finish_close()
                if self._pause & _PAUSE_PENDING:  # (max_pending 1)
                    self._resume_reading(_PAUSE_PENDING)
                return
        self._pump_later()

    def _pump_later(self) -> None:
        """Write every reply ready at the head of the queue (no sender task runs); hand the rest to a sender
        task when something other than a `Later` is next.

        While a reply queued behind them is still out, the replies go into a batch written once this pass of
        the loop is over: a dir's worker answers many requests of a connection in one callback (and the other
        dirs' workers in the next ones), and one write for all of them costs one syscall instead of one each.
        The connection stays in the callbacks' hands (no fast path) until that batch is written, so nothing
        overtakes it. Once none is out, the batch is written at once: at a moderate rate, one request at a time,
        that saves the loop a pass between the worker's answer and the reply."""
        queue = self._queue
        batch = self._later_batch
        if batch is None:
            batch = self._later_batch = []
        stats = self._stats
        debug = self._debug
        failed = False
        while queue:
            item, meta = queue[0]
            if item.__class__ is not Later:
                break
            if not item.done():
                break
            queue.popleft()
            try:
                reply = item.result()
            except CloseConnection as exc:
                self._log.warning("closing connection at the handler's request", reason=exc.reason)
                self._begin_close(exc.reason)
                failed = True
                break
            except Exception:
                self._log.warning("request handler failed; closing the connection", exc_info=True)
                self._begin_close("request handler failed")
                failed = True
                break
            if reply is None:
                if debug and meta is not None:
                    self._log_request(meta, replied=False)
                continue
            body = reply if reply.__class__ is bytes else _joined(reply)  # bytes: a reply written in one piece
            if body is None:  # file regions: the sender writes those
                queue.appendleft((reply, meta))
                break
            batch.append(_pack_size(len(body)))
            batch.append(body)
            if meta is not None:
                if stats is not None:
                    self._sent_metrics(meta, _now())
                if debug:
                    self._log_request(meta)
        if failed:
            while queue:  # nothing after a failed or closing request is answered
                _discard(queue.popleft()[0])
        if not queue:  # nothing left to wait for: written now, in the callback that completed the last one
            self._write_later_batch()
        elif queue[0][0].__class__ is not Later:
            self._write_later_batch()  # before anything the sender writes
            self._start_sender()
        elif batch and not self._later_write_due:  # the rest of this pass's completions may join it
            self._later_write_due = True
            assert self._loop is not None
            self._loop.call_soon(self._write_later_batch)
        if self._pause & _PAUSE_PENDING and len(queue) < self._resume_below:
            self._resume_reading(_PAUSE_PENDING)

    def _write_later_batch(self) -> None:
        """Write the replies _pump_later gathered; with nothing left queued, the fast path is back."""
        batch, self._later_batch = self._later_batch, None
        self._later_write_due = False
        if batch:
            self._write(batch)
        if self._sender is _BY_CALLBACKS and not self._queue:
            self._sender = None
            if self._close_reason is not None or self._eof:  # else _maybe_finish_close has nothing to do
                self._maybe_finish_close()

    def mute_for(self, ms: int) -> None:
        """Reads nothing more from the client for `ms` milliseconds (it went over a client quota): the replies
        already handled are still written, as Kafka sends the response and mutes the channel until the throttle
        time has passed. A longer mute while muted extends it."""
        if ms <= 0 or self._closed or self._loop is None:
            return
        until = self._loop.time() + ms / 1000.0
        if until <= self._muted_until:
            return
        self._muted_until = until
        if self._mute_timer is not None:
            self._mute_timer.cancel()
        self._pause_reading(_PAUSE_THROTTLED)
        self._mute_timer = self._loop.call_at(until, self._unmute)

    def _unmute(self) -> None:
        self._mute_timer = None
        self._resume_reading(_PAUSE_THROTTLED)

    def _pause_reading(self, reason: int) -> None:
        if not self._pause and self._transport is not None and not self._eof:
            self._transport.pause_reading()
        self._pause |= reason

    def _resume_reading(self, reason: int) -> None:
        if not self._pause & reason:
            return
        self._pause &= ~reason
        if self._pause:
            return
        if self._transport is not None and not self._eof:
            self._transport.resume_reading()
        # Frames left in the decoder when we paused are handled from a fresh callback, never from inside the
        # transport's own write callback or halfway through the sender's bookkeeping.
        if not self._resume_scheduled and self._loop is not None:
            self._resume_scheduled = True
            self._loop.call_soon(self._resume_processing)

    def _resume_processing(self) -> None:
        self._resume_scheduled = False
        if (
            not self._pause
            and not self._closed
            and self._transport is not None
            and not self._transport.is_closing()
        ):
            self._process_frames()

    def _frame_error(self, exc: FrameError) -> None:
        self._log.warning("invalid frame; closing the connection", error=str(exc))
        self._begin_close(str(exc))

    def _begin_close(self, reason: str) -> None:
        if self._close_reason is None:
            self._close_reason = reason
        self._pause_reading(_PAUSE_CLOSING)

    def _maybe_finish_close(self) -> None:
        if self._sender is not None or self._closed or self._transport is None:
            return
        if self._close_reason is not None or (self._eof and not self._pause and not self._resume_scheduled):
            if self._close_reason is None:
                self._close_reason = "peer closed its side"
            # close() still flushes what the transport has buffered.
            self._transport.close()

    def _write(self, parts: list[Any]) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if timeline.ON:  # before: the client may have the reply before this thread runs again
            timeline.span("server write", time.perf_counter())
        transport.write(parts[0] if len(parts) == 1 else b"".join(parts))

    def _log_request(self, meta: tuple[float, ...], *, replied: bool = True) -> None:
        api_key, api_version, correlation_id, started = meta[:4]
        self._log.debug(
            "request",
            api_key=api_key,
            api_version=api_version,
            correlation_id=correlation_id,
            latency_us=round((time.perf_counter() - started) * 1e6),
            replied=replied,
        )

    # -- the slow path: the sender task ------------------------------------------------------------------------------

    async def _run_sender(self) -> None:
        queue = self._queue
        batch: list[Any] = []
        debug = self._debug
        try:
            while queue:
                item, meta = queue[0]
                ready_at = _now() if meta is not None else 0.0
                if item is not None and item.__class__ is not list:
                    if not item.done():
                        if batch:
                            self._write(batch)
                            batch = []
                    try:
                        item = await (_later_future(item) if item.__class__ is Later else item)
                    except CloseConnection as exc:
                        queue.popleft()
                        self._log.warning("closing connection at the handler's request", reason=exc.reason)
                        self._begin_close(exc.reason)
                        break
                    except asyncio.CancelledError:
                        current = asyncio.current_task()
                        if current is not None and current.cancelling():
                            raise
                        queue.popleft()
                        self._log.warning("request handler's reply was cancelled; closing the connection")
                        self._begin_close("request handler failed")
                        break
                    except Exception:
                        queue.popleft()
                        self._log.warning("request handler failed; closing the connection", exc_info=True)
                        self._begin_close("request handler failed")
                        break
                    if meta is not None:
                        ready_at = _now()
                    if item is not None and item.__class__ is not list:
                        queue.popleft()
                        _discard(item)
                        self._log.warning(
                            "request handler's awaitable returned no reply list", returned=repr(item)
                        )
                        self._begin_close("request handler failed")
                        break
                queue.popleft()
                if self._pause & _PAUSE_PENDING and len(queue) < self._resume_below:
                    self._resume_reading(_PAUSE_PENDING)
                if item is None:
                    if debug and meta is not None:
                        self._log_request(meta, replied=False)
                    continue
                self._sending = item
                batch.append(_pack_size(sum(map(len, item))))
                for part in item:
                    if isinstance(part, FileRegion):
                        if batch:
                            self._write(batch)
                            batch = []
                        await self._send_region(part)
                    else:
                        batch.append(part)
                self._sending = None
                if meta is not None:
                    self._sent_metrics(meta, ready_at)
                    if debug:
                        self._log_request(meta)
            if batch:
                self._write(batch)
        except asyncio.CancelledError:
            raise
        except OSError as exc:
            # The peer went away mid-response, or the file could not be read: nothing more can go out in order.
            self._log.info("sending a reply failed; closing the connection", error=_describe(exc))
            self._close_reason = self._close_reason or "send failed"
            if self._transport is not None:
                self._transport.abort()
        except Exception:
            self._log.warning("sending a reply failed; closing the connection", exc_info=True)
            self._close_reason = self._close_reason or "send failed"
            if self._transport is not None:
                self._transport.abort()
        finally:
            sending, self._sending = self._sending, None
            if sending is not None:
                _close_regions(sending)
            if self._sender is asyncio.current_task():
                self._sender = None
        if self._close_reason is not None:
            # Stopped early: what is still queued will never be written.
            while queue:
                _discard(queue.popleft()[0])
        self._maybe_finish_close()

    async def _send_region(self, region: FileRegion) -> None:
        try:
            if region.closed:
                raise ValueError(f"{region!r} was closed before it was sent")
            sent = 0
            if self._zero_copy and region.count:
                out_fd = self._socket_dup()
                if out_fd is not None:
                    sent = await self._sendfile(region, out_fd)
            if sent < region.count:
                await self._copy_region(region, sent)
        finally:
            region.close()

    def _socket_dup(self) -> int | None:
        if self._sock_dup is None:
            assert self._transport is not None
            sock = self._transport.get_extra_info("socket")
            if sock is None:
                return None
            self._sock_dup = os.dup(sock.fileno())
        return self._sock_dup

    async def _sendfile(self, region: FileRegion, out_fd: int) -> int:
        """Send with os.sendfile; returns the bytes sent, short of the count only if sendfile is unsupported."""
        transport = self._transport
        assert transport is not None
        # The transport may still hold bytes of this very reply; they must reach the socket first.
        while transport.get_write_buffer_size():
            if transport.is_closing():
                raise ConnectionResetError("connection closing")
            await self._wait_writable(out_fd)
        in_fd = region.fd
        start = region.offset
        offset = start
        end = start + region.count
        while offset < end:
            try:
                sent = os.sendfile(out_fd, in_fd, offset, end - offset)
            except BlockingIOError:
                await self._wait_writable(out_fd)
                continue
            except OSError as exc:
                if exc.errno in _SENDFILE_UNSUPPORTED:
                    self._zero_copy = False
                    self._log.info("sendfile unavailable, copying file regions instead", error=_describe(exc))
                    return offset - start
                raise
            if sent == 0:
                raise RegionTruncated(
                    f"file ended at offset {offset}, {end - offset} bytes short of {region!r}"
                )
            offset += sent
        return region.count

    async def _wait_writable(self, fd: int) -> None:
        loop = self._loop
        assert loop is not None
        waiter: asyncio.Future[None] = loop.create_future()
        loop.add_writer(fd, _wake, waiter)
        try:
            await waiter
        finally:
            # After connection_lost the dup is gone (and unregistered); its number may belong to someone else now.
            if self._sock_dup == fd:
                loop.remove_writer(fd)

    async def _copy_region(self, region: FileRegion, already_sent: int) -> None:
        transport = self._transport
        assert transport is not None
        in_fd = region.fd
        offset = region.offset + already_sent
        end = region.offset + region.count
        while offset < end:
            if self._write_paused:
                await self._wait_write_resumed()
            if transport.is_closing():
                raise ConnectionResetError("connection closing")
            data = os.pread(in_fd, min(_COPY_CHUNK, end - offset), offset)
            if not data:
                raise RegionTruncated(
                    f"file ended at offset {offset}, {end - offset} bytes short of {region!r}"
                )
            transport.write(data)
            offset += len(data)

    async def _wait_write_resumed(self) -> None:
        if self._write_waiter is None or self._write_waiter.done():
            assert self._loop is not None
            self._write_waiter = self._loop.create_future()
        await self._write_waiter


class ConnectionRegistry:
    """The live connections of one server process, so shutdown can drain and close them."""

    def __init__(self) -> None:
        self._connections: set[Connection] = set()
        self._emptied: asyncio.Event | None = None
        # Called with a connection's id when it closes (share sessions tied to a connection end with it).
        self.closed_hooks: list[Callable[[int], None]] = []

    def add(self, connection: Connection) -> None:
        self._connections.add(connection)

    def discard(self, connection: Connection) -> None:
        self._connections.discard(connection)
        for hook in self.closed_hooks:
            try:
                hook(connection.connection_id)
            except Exception:
                _log.exception("connection_closed_hook_failed")
        if not self._connections and self._emptied is not None:
            self._emptied.set()

    def __len__(self) -> int:
        return len(self._connections)

    def __iter__(self) -> Iterator[Connection]:
        return iter(list(self._connections))

    async def shutdown(self, timeout: float) -> int:
        """Stop reading on every connection, let each write the replies it owes and close, for up to `timeout`
        seconds; abort the rest. Returns how many connections had to be aborted."""
        for connection in self:
            connection.close_after_pending("server shutting down")
        if await self._wait_empty(timeout):
            return 0
        stragglers = list(self._connections)
        for connection in stragglers:
            connection.abort()
        await self._wait_empty(1.0)
        return len(stragglers)

    async def _wait_empty(self, timeout: float) -> bool:
        if not self._connections:
            return True
        self._emptied = asyncio.Event()
        try:
            await asyncio.wait_for(self._emptied.wait(), timeout)
        except TimeoutError:
            return False
        finally:
            self._emptied = None
        return True


def _joined(reply: Any) -> bytes | None:
    """A reply written as it comes, in one piece: the bytes themselves, or its parts joined; None for what must be
    queued for the sender (an awaitable, or parts holding a FileRegion). Joining is also the cheapest check that
    every part is bytes-like: a FileRegion makes it raise TypeError."""
    if reply.__class__ is bytes:
        return reply  # type: ignore[no-any-return]
    if reply.__class__ is not list:
        return None
    try:
        return b"".join(reply)
    except TypeError:
        return None


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _request_meta(frame: bytes) -> tuple[float, ...]:
    # Every Kafka request header starts with api_key int16, api_version int16, correlation_id int32.
    if len(frame) >= 8:
        api_key, api_version, correlation_id = _unpack_request_header(frame)
    else:
        api_key = api_version = correlation_id = -1
    return api_key, api_version, correlation_id, time.perf_counter()


def _close_regions(parts: Iterable[Any]) -> None:
    for part in parts:
        if isinstance(part, FileRegion):
            part.close()


def _later_future(later: Later) -> asyncio.Future[Reply]:
    """A `Later` as an awaitable, for the sender task."""
    future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()

    def copy(done: Later) -> None:
        if future.done():
            return
        try:
            future.set_result(done.result())
        except BaseException as e:  # handed to the sender, which decides
            future.set_exception(e)

    later.on_done(copy)
    return future


def _discard(item: Any) -> None:
    """Drop a queued reply that will never be written, releasing its file regions."""
    if item is None:
        return
    if item.__class__ is Later:
        if not item.cancel() and not item.cancelled():
            try:
                _discard(item.result())
            except Exception:  # noqa: BLE001  (a failed reply holds nothing to release)
                pass
        return
    if item.__class__ is list:
        _close_regions(item)
        return
    if isinstance(item, asyncio.Future):
        if item.done():
            _discard_future(item)
        else:
            item.cancel()
            item.add_done_callback(_discard_future)


def _discard_future(future: asyncio.Future[Reply]) -> None:
    if future.cancelled():
        return
    if future.exception() is None:  # retrieving it also silences "exception was never retrieved"
        result = future.result()
        if result.__class__ is list:
            _close_regions(result)  # type: ignore[arg-type]


def _split_peer(peer: Any) -> tuple[str, int]:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return str(peer[0]), int(peer[1])
    return (str(peer) if peer else "unknown"), 0


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
