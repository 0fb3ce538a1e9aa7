"""Connection on a real 127.0.0.1 socket, on the default loop and on uvloop, driven by a fake handler.

The fake handler speaks a tiny text protocol inside Kafka framing: a frame is b"verb args", the reply echoes what
the test needs to check order and content.
"""

from __future__ import annotations

import asyncio
import errno
import io
import json
import os
import socket
import struct
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvloop

from kjbod.server.connection import Connection, ConnectionRegistry
from kjbod.server.handler import CloseConnection, Later, RequestContext
from kjbod.server.logging import configure_logging, reset_logging
from kjbod.wire.region import FileRegion

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


@pytest.fixture(params=sorted(LOOPS))
def run(request: pytest.FixtureRequest) -> Callable[[Awaitable[Any]], Any]:
    factory = LOOPS[request.param]

    def runner(coro: Awaitable[Any]) -> Any:
        with asyncio.Runner(loop_factory=factory) as r:
            return r.run(asyncio.wait_for(coro, 60))

    return runner


@pytest.fixture(autouse=True)
def quiet_logs() -> Iterator[io.StringIO]:
    buf = io.StringIO()
    configure_logging("json", "info", stream=buf)
    yield buf
    reset_logging()


@pytest.fixture
def logs(quiet_logs: io.StringIO) -> Iterator[io.StringIO]:
    buf = io.StringIO()
    configure_logging("json", "debug", stream=buf)
    yield buf
    reset_logging()


def events(buf: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buf.getvalue().splitlines() if line.strip()]


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


class RecordingCloser:
    def __init__(self) -> None:
        self.closed: list[int] = []

    def __call__(self, fd: int) -> None:
        self.closed.append(fd)
        os.close(fd)


class FakeHandler:
    """Verbs: echo X | bytes X | sleep MS X | none | mute MS X | close | boom | wait | region NAME | aregion MS NAME | big N |
    later MS X | laterwait | laterfail MS | laterclose MS | laterregion MS NAME (the later* verbs answer with a
    `Later` a loop callback completes after MS milliseconds, or the test through `laters`)."""

    def __init__(self) -> None:
        self.handled = 0
        self.futures: list[asyncio.Future[Any]] = []
        self.laters: list[Later] = []
        self.regions: dict[bytes, Callable[[], list[Any]]] = {}
        self.contexts: list[RequestContext] = []
        self.frame_types: set[type] = set()

    def handle(self, frame: bytes, ctx: RequestContext) -> Any:
        self.handled += 1
        self.contexts.append(ctx)
        self.frame_types.add(type(frame))
        verb, _, rest = frame.partition(b" ")
        if verb == b"echo":
            return [b"echo:", rest]
        if verb == b"bytes":
            return b"bytes:" + rest  # the one-piece reply form
        if verb == b"sleep":
            ms, _, payload = rest.partition(b" ")
            return self._sleep(int(ms), [b"slept:", payload])
        if verb == b"none":
            return None
        if verb == b"mute":  # a client over a quota: answered, then muted
            ms, _, payload = rest.partition(b" ")
            assert ctx.mute is not None
            ctx.mute(int(ms))
            return [b"muted:", payload]
        if verb == b"close":
            raise CloseConnection("client asked")
        if verb == b"boom":
            raise RuntimeError("boom")
        if verb == b"wait":
            fut = asyncio.get_running_loop().create_future()
            self.futures.append(fut)
            return fut
        if verb == b"region":
            return self.regions[rest]()
        if verb == b"aregion":
            ms, _, name = rest.partition(b" ")
            return self._sleep_then(int(ms), self.regions[name])
        if verb == b"big":
            return [b"B" * int(rest)]
        if verb.startswith(b"later"):
            return self._later(verb, rest)
        raise AssertionError(f"unknown verb {verb!r}")

    def _later(self, verb: bytes, rest: bytes) -> Later:
        later = Later()
        self.laters.append(later)
        if verb == b"laterwait":
            return later
        ms, _, arg = rest.partition(b" ")
        if verb == b"later":
            answer: Callable[[], None] = lambda: later.resolve([b"later:", arg])  # noqa: E731
        elif verb == b"laterfail":
            answer = lambda: later.fail(ValueError("late failure"))  # noqa: E731
        elif verb == b"laterclose":
            answer = lambda: later.fail(CloseConnection("asked later"))  # noqa: E731
        else:
            answer = lambda: later.resolve(self.regions[arg]())  # noqa: E731
        asyncio.get_running_loop().call_later(int(ms) / 1000, answer)
        return later

    async def _sleep(self, ms: int, reply: list[Any]) -> list[Any]:
        await asyncio.sleep(ms / 1000)
        return reply

    async def _sleep_then(self, ms: int, make: Callable[[], list[Any]]) -> list[Any]:
        await asyncio.sleep(ms / 1000)
        return make()


class Server:
    def __init__(self, handler: FakeHandler, **kwargs: Any) -> None:
        self.handler = handler
        self.kwargs = kwargs
        self.registry = ConnectionRegistry()
        self.server: asyncio.AbstractServer | None = None
        self.port = 0

    async def __aenter__(self) -> Server:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(
            lambda: Connection(self.handler, registry=self.registry, **self.kwargs), "127.0.0.1", 0
        )
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.registry.shutdown(5)
        await self.server.wait_closed()

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port)

    def connection(self) -> Connection:
        (conn,) = list(self.registry)
        return conn

    async def wait_for_connections(self, n: int) -> None:
        for _ in range(500):
            if len(self.registry) == n:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"expected {n} connections, have {len(self.registry)}")


async def close_client(writer: asyncio.StreamWriter) -> None:
    writer.close()
    try:
        await writer.wait_closed()
    except (ConnectionError, BrokenPipeError):
        pass


def reset_client(writer: asyncio.StreamWriter) -> None:
    """Drop the connection with a TCP reset, as a crashed client or a broken network would."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def roundtrip(server: Server, body: bytes) -> bytes:
    reader, writer = await server.connect()
    writer.write(frame(body))
    reply = await read_frame(reader)
    await close_client(writer)
    return reply


# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("split", [False, True])
def test_a_muted_connection_answers_then_reads_nothing_until_the_mute_ends(run: Any, split: bool) -> None:
    """Kafka's quota mute: the reply to the request that went over is written at once; the requests behind it
    (already received, in the same read or not) wait in the buffer until the mute has passed, then are served
    in order."""

    async def scenario() -> None:
        handler = FakeHandler()
        async with Server(handler) as server:
            reader, writer = await server.connect()
            first = frame(b"mute 1500 a")
            rest = frame(b"echo b") + frame(b"bytes c")
            writer.write(first if split else first + rest)
            assert await read_frame(reader) == b"muted:a"
            if split:
                writer.write(rest)
                await writer.drain()
            conn = server.connection()
            assert conn.reading_paused and handler.handled == 1
            assert await read_frame(reader) == b"echo:b"
            assert await read_frame(reader) == b"bytes:c"
            assert handler.handled == 3 and not conn.reading_paused
            await close_client(writer)

    run(scenario())


def test_pipelined_sync_replies_in_order(run: Any) -> None:
    async def scenario() -> None:
        async with Server(FakeHandler()) as server:
            reader, writer = await server.connect()
            writer.write(b"".join(frame(b"echo %d" % i) for i in range(500)))
            for i in range(500):
                assert await read_frame(reader) == b"echo:%d" % i
            await close_client(writer)

    run(scenario())


class CollectingTransport:
    """Just enough of a transport to drive a Connection without a socket: records what is written."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False
        self.reading = True

    def write(self, data: bytes) -> None:
        self.written += data

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


def on_transport(handler: Any, **kwargs: Any) -> tuple[Connection, CollectingTransport]:
    """A Connection for `handler` made on a CollectingTransport (call it with the event loop running)."""
    connection = Connection(handler, **kwargs)
    transport = CollectingTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    return connection, transport


def _mixed_requests(n: int) -> tuple[list[bytes], bytes]:
    """n requests mixing every reply form (parts list, one bytes object, no reply, awaitable, a ready answer of
    ReadyHandler) and the byte stream of replies they must produce, in request order."""
    requests, expected = [], b""
    for i in range(n):
        kind = i % 5
        if kind == 4:
            requests.append(b"RDY!" + struct.pack(">i", i) + b"ping")
            expected += frame(struct.pack(">i", i) + b"ready:ping")
            continue
        if kind == 0:
            requests.append(b"echo %d" % i)
            expected += frame(b"echo:%d" % i)
        elif kind == 1:
            requests.append(b"bytes %d" % i)
            expected += frame(b"bytes:%d" % i)
        elif kind == 2:
            requests.append(b"none")
        else:
            requests.append(b"sleep 0 %d" % i)
            expected += frame(b"slept:%d" % i)
    return requests, expected


@pytest.mark.parametrize("seed", range(6))
def test_any_split_of_the_stream_gives_the_same_replies(run: Any, seed: int) -> None:
    # The connection answers a read holding whole frames on a fast path and falls back to the decoder for
    # partial frames and queued replies; however the bytes are cut, the replies must come out whole and in order.
    import random

    rng = random.Random(seed)
    requests, expected = _mixed_requests(60)
    stream = b"".join(frame(r) for r in requests)
    if seed == 0:  # one read per frame, as an unpipelined client sends them
        cuts = [len(b"".join(frame(r) for r in requests[:i])) for i in range(1, len(requests))]
    else:
        cuts = sorted(rng.sample(range(1, len(stream)), rng.choice([1, 5, 40, len(stream) // 3])))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]

    async def scenario() -> bytes:
        handler = ReadyHandler()
        connection, transport = on_transport(handler, max_pending=8)
        for chunk in chunks:
            for _ in range(100):  # a paused connection is not fed, as a real transport would not read
                if transport.reading:
                    break
                await asyncio.sleep(0)
            connection.data_received(chunk)
            if rng.random() < 0.3:
                await asyncio.sleep(0)
        for _ in range(200):
            if bytes(transport.written) == expected:
                break
            await asyncio.sleep(0)
        # Ready answers skip the handler on the fast path, while the general path asks it (the same answer).
        assert handler.handled <= len(requests) and handler.handled >= len(requests) - len(requests) // 5
        connection.connection_lost(None)
        return bytes(transport.written)

    assert run(scenario()) == expected


def _feed_like_a_transport(connection: Connection, stream: bytes, rng: Any) -> None:
    """What a transport does with a buffered protocol: ask for a buffer, read at most its size into it (here a
    random amount, as the kernel hands over whatever has arrived), report the count."""
    pos = 0
    while pos < len(stream):
        buf = connection.get_buffer(-1)
        n = min(len(buf), len(stream) - pos, rng.choice([1, 7, 100, 5000, 70_000, 1 << 20]))
        buf[:n] = stream[pos : pos + n]
        connection.buffer_updated(n)
        pos += n


@pytest.mark.parametrize("allocator", ["unzeroed", "zeroing fall-back"])
@pytest.mark.parametrize("seed", range(4))
def test_big_requests_received_into_their_own_buffer(run: Any, seed: int, allocator: str, monkeypatch) -> None:
    # Requests of 64 KiB and more are read straight into a buffer of their size; mixed with small ones, cut
    # anywhere, they must still come out whole, in order, each handled once. The buffer is allocated without
    # zeroing it (CPython's constructor from C) or, where that cannot be had, by bytearray(size): the same bytes.
    import random

    from kjbod.server import connection as module

    if allocator == "unzeroed":
        assert module._new_bytearray is not None  # CPython: the unzeroed allocation is what runs
    else:
        monkeypatch.setattr(module, "_new_bytearray", None)

    rng = random.Random(seed)
    requests: list[bytes] = []
    expected = b""
    for i in range(30):
        size = rng.choice([3, 40, 65_536 - 9, 65_536, 200_000, 1 << 20])
        payload = (b"%d:" % i) + bytes([65 + i % 26]) * size
        verb = rng.choice([b"echo", b"bytes"])
        requests.append(verb + b" " + payload)
        expected += frame((b"echo:" if verb == b"echo" else b"bytes:") + payload)
    stream = b"".join(frame(r) for r in requests)

    async def scenario() -> tuple[bytes, int, set[type]]:
        handler = FakeHandler()
        connection, transport = on_transport(handler, max_pending=4)
        _feed_like_a_transport(connection, stream, rng)
        connection.connection_lost(None)
        return bytes(transport.written), handler.handled, handler.frame_types

    written, handled, frame_types = run(scenario())
    assert frame_types == {bytes, bytearray}  # both receive paths were taken
    assert handled == len(requests)
    assert written == expected


def test_the_receive_buffer_is_a_bytearray_of_the_size_either_way(monkeypatch) -> None:
    from kjbod.server import connection as module

    for _ in range(2):  # the second time: what the first left in the allocator's memory may be in it
        buf = module._receive_buffer(1 << 20)
        assert type(buf) is bytearray and len(buf) == 1 << 20
        buf[:] = b"\xab" * (1 << 20)  # writable all through, as the transport writes it
        assert buf.count(b"\xab") == 1 << 20
        del buf
    monkeypatch.setattr(module, "_new_bytearray", None)
    assert module._receive_buffer(100_000) == bytearray(100_000)


def test_big_request_cut_short_by_the_peer_is_dropped_cleanly(run: Any) -> None:
    async def scenario() -> tuple[bytes, bool, int]:
        handler = FakeHandler()
        connection, transport = on_transport(handler)
        stream = frame(b"echo small") + frame(b"echo " + b"x" * 100_000)[:50_000]
        import random

        _feed_like_a_transport(connection, stream, random.Random(1))
        connection.eof_received()
        return bytes(transport.written), transport.closed, handler.handled

    written, closed, handled = run(scenario())
    assert (written, closed, handled) == (frame(b"echo:small"), True, 1)


class ReadyHandler(FakeHandler):
    """FakeHandler plus ready answers for frames b"RDY!" + correlation id (4 bytes) + payload; `handle` answers
    such a frame with the correlation id and the ready answer, or b"handled:" + payload when there is none."""

    ROUTE = struct.unpack(">i", b"RDY!")[0]

    def __init__(self) -> None:
        super().__init__()
        self.ready: dict[int, dict[bytes, bytes]] = {self.ROUTE: {b"ping": b"ready:ping"}}
        self.kinds: list[str] = []

    def ready_replies(self, listener_kind: str) -> dict[int, dict[bytes, bytes]]:
        self.kinds.append(listener_kind)
        return self.ready

    def handle(self, frame: bytes, ctx: RequestContext) -> Any:
        if frame[:4] == b"RDY!":
            self.handled += 1  # the same answer as the ready one when there is one, as the contract requires
            known = self.ready[self.ROUTE].get(bytes(frame[8:])) if len(frame) >= 8 else None
            return bytes(frame[4:8]) + (known if known is not None else b"handled:" + bytes(frame[8:]))
        return super().handle(frame, ctx)


def test_ready_answers_skip_the_handler_and_keep_order(run: Any) -> None:
    def rdy(corr: int, payload: bytes) -> bytes:
        return frame(b"RDY!" + struct.pack(">i", corr) + payload)

    async def scenario() -> None:
        handler = ReadyHandler()
        async with Server(handler) as server:
            reader, writer = await server.connect()
            # One write: hits, a miss, ordinary frames and a short "RDY!" frame (no room for a correlation id),
            # which goes to the handler, in order.
            writer.write(rdy(7, b"ping") + frame(b"echo a") + rdy(8, b"pong") + frame(b"RDY!xy") + rdy(9, b"ping"))
            replies = [await read_frame(reader) for _ in range(5)]
            assert replies == [struct.pack(">i", 7) + b"ready:ping", b"echo:a", struct.pack(">i", 8) + b"handled:pong",
                               b"xy" + b"handled:", struct.pack(">i", 9) + b"ready:ping"]
            assert handler.handled == 3  # echo, the miss and the short frame
            # The connection holds the handler's dicts: an answer added later is used at once.
            handler.ready[ReadyHandler.ROUTE][b"pong"] = b"ready:pong"
            writer.write(rdy(10, b"pong"))
            assert await read_frame(reader) == struct.pack(">i", 10) + b"ready:pong"
            assert handler.handled == 3
            await close_client(writer)
        assert handler.kinds == ["broker"]

    run(scenario())


def test_bad_size_after_good_frames_answers_them_then_closes(run: Any) -> None:
    async def scenario() -> tuple[bytes, bool]:
        connection, transport = on_transport(FakeHandler(), max_frame_size=1000)
        connection.data_received(frame(b"echo a") + frame(b"bytes b") + struct.pack(">i", 5000) + b"x" * 10)
        return bytes(transport.written), transport.closed

    written, closed = run(scenario())
    assert written == frame(b"echo:a") + frame(b"bytes:b")
    assert closed


def test_frames_after_a_closing_request_are_not_handled(run: Any) -> None:
    async def scenario() -> tuple[bytes, bool, int]:
        handler = FakeHandler()
        connection, transport = on_transport(handler)
        connection.data_received(frame(b"echo a") + frame(b"close") + frame(b"echo b"))
        return bytes(transport.written), transport.closed, handler.handled

    written, closed, handled = run(scenario())
    assert (written, closed, handled) == (frame(b"echo:a"), True, 2)


def test_context_describes_the_connection(run: Any) -> None:
    async def scenario() -> None:
        handler = FakeHandler()
        async with Server(handler, listener_name="CONTROLLER", listener_kind="controller") as server:
            reader, writer = await server.connect()
            local_port = writer.get_extra_info("sockname")[1]
            writer.write(frame(b"echo 1") + frame(b"echo 2"))
            await read_frame(reader)
            await read_frame(reader)
            await close_client(writer)
        ctx = handler.contexts[0]
        assert ctx is handler.contexts[1]  # one context per connection
        assert (ctx.peer_host, ctx.peer_port) == ("127.0.0.1", local_port)
        assert (ctx.listener_name, ctx.listener_kind) == ("CONTROLLER", "controller")
        assert ctx.peer == f"127.0.0.1:{local_port}"

    run(scenario())


def test_async_replies_finishing_out_of_order_are_written_in_request_order(run: Any) -> None:
    async def scenario() -> None:
        async with Server(FakeHandler()) as server:
            reader, writer = await server.connect()
            requests = [
                b"sleep 80 a",
                b"sleep 10 b",
                b"echo c",
                b"none",
                b"sleep 0 d",
                b"echo e",
                b"sleep 40 f",
            ]
            writer.write(b"".join(frame(r) for r in requests))
            got = [await read_frame(reader) for _ in range(6)]
            assert got == [b"slept:a", b"slept:b", b"echo:c", b"slept:d", b"echo:e", b"slept:f"]
            # The fast path is back once the queue drained.
            writer.write(frame(b"echo g"))
            assert await read_frame(reader) == b"echo:g"
            assert server.connection().pending == 0
            await close_client(writer)

    run(scenario())


def test_later_replies_mixed_with_others_are_written_in_request_order(run: Any) -> None:
    async def scenario() -> None:
        async with Server(FakeHandler()) as server:
            reader, writer = await server.connect()
            requests = [b"later 80 a", b"later 10 b", b"echo c", b"none", b"sleep 0 d", b"later 0 e", b"echo f",
                        b"later 40 g", b"sleep 30 h", b"later 5 i"]
            writer.write(b"".join(frame(r) for r in requests))
            got = [await read_frame(reader) for _ in range(9)]
            assert got == [b"later:a", b"later:b", b"echo:c", b"slept:d", b"later:e", b"echo:f", b"later:g",
                           b"slept:h", b"later:i"]
            writer.write(frame(b"echo j"))
            assert await read_frame(reader) == b"echo:j"
            assert server.connection().pending == 0
            await close_client(writer)

    run(scenario())


async def _queued(server: Server, writer: asyncio.StreamWriter, requests: list[bytes]) -> Any:
    """Sends `requests` and waits until the connection holds a reply (or a pending one) for each of them."""
    writer.write(b"".join(frame(r) for r in requests))
    await writer.drain()
    while server.connection().pending < len(requests):
        await asyncio.sleep(0.01)
    return server.connection()


def test_laters_alone_need_no_sender_task(run: Any) -> None:
    async def scenario() -> None:
        handler = FakeHandler()
        async with Server(handler) as server:
            reader, writer = await server.connect()
            conn = await _queued(server, writer, [b"laterwait", b"laterwait", b"echo x"])
            tasks = len(asyncio.all_tasks())
            handler.laters[1].resolve([b"second"])  # not at the head: nothing is written yet
            handler.laters[0].resolve([b"first"])  # writes both; echo x is behind them, written by a sender
            assert [await read_frame(reader) for _ in range(3)] == [b"first", b"second", b"echo:x"]
            assert len(asyncio.all_tasks()) <= tasks + 1
            writer.write(frame(b"later 0 y"))
            assert await read_frame(reader) == b"later:y"
            assert conn.pending == 0
            await close_client(writer)

    run(scenario())


def test_laters_are_written_in_the_completing_call_once_none_is_left_out(run: Any) -> None:
    async def scenario() -> None:
        handler = FakeHandler()
        async with Server(handler) as server:
            reader, writer = await server.connect()
            conn = await _queued(server, writer, [b"laterwait"] * 3)
            written: list[bytes] = []
            conn._transport = _WriteSpy(conn._transport, written)  # type: ignore[assignment]
            handler.laters[0].resolve([b"first"])
            handler.laters[1].resolve([b"second"])
            assert written == []  # the third is still out: these wait for the end of the loop's pass, together
            await asyncio.sleep(0)
            assert written == [frame(b"first") + frame(b"second")]
            handler.laters[2].resolve([b"third"])
            assert written[1:] == [frame(b"third")]  # the last one out: written in the call that completed it
            assert [await read_frame(reader) for _ in range(3)] == [b"first", b"second", b"third"]
            assert conn.pending == 0
            writer.write(frame(b"echo x"))  # the fast path is back
            assert await read_frame(reader) == b"echo:x"
            await close_client(writer)

    run(scenario())


class _WriteSpy:
    """A transport whose writes are also kept in `written` (each write's bytes)."""

    def __init__(self, transport: Any, written: list[bytes]) -> None:
        self._transport, self._written = transport, written

    def write(self, data: Any) -> None:
        self._written.append(bytes(data))
        self._transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _count_pumps(conn: Connection) -> list[int]:
    """A list that gets an entry each time the connection's `_pump_later` runs."""
    pumped: list[int] = []
    pump = conn._pump_later
    conn._pump_later = lambda: (pumped.append(1), pump())[1]  # type: ignore[method-assign]
    return pumped


@pytest.mark.parametrize("reply", [b"one piece", [b"two ", b"parts"]])
def test_the_only_later_out_is_written_in_its_completing_call_without_the_pump(run: Any, reply: Any) -> None:
    """A client that waits for each answer has one Later out at a time: its reply is written in the call that
    completes it, one write of the framed reply, by _later_done itself; the fast path is back right after."""
    async def scenario() -> None:
        handler = FakeHandler()
        conn, transport = on_transport(handler)
        pumped = _count_pumps(conn)
        writes: list[bytes] = []
        transport.write = lambda data: (writes.append(bytes(data)), transport.written.extend(data))[1]  # type: ignore[method-assign]
        conn.data_received(frame(b"laterwait"))
        assert writes == [] and conn.pending == 1
        handler.laters[0].resolve(reply)
        body = reply if reply.__class__ is bytes else b"".join(reply)
        assert writes == [frame(body)] and conn.pending == 0 and pumped == []
        conn.data_received(frame(b"bytes x"))  # the fast path: answered within the read
        assert writes[1:] == [frame(b"bytes:x")]

    run(scenario())


def test_the_only_later_out_goes_through_the_pump_when_it_answers_nothing_or_fails(run: Any, logs: io.StringIO) -> None:
    """No reply (acks=0) and a failure are the pump's to handle: nothing written for the first, the connection
    closed for the second, as when more replies are queued."""
    async def scenario() -> None:
        handler = FakeHandler()
        conn, transport = on_transport(handler)
        pumped = _count_pumps(conn)
        conn.data_received(frame(b"laterwait"))
        handler.laters[0].resolve(None)
        assert transport.written == b"" and conn.pending == 0 and pumped == [1]
        conn.data_received(frame(b"bytes x"))
        assert bytes(transport.written) == frame(b"bytes:x")
        conn.data_received(frame(b"laterwait"))
        handler.laters[1].fail(ValueError("late failure"))
        assert pumped == [1, 1] and transport.closed
        assert bytes(transport.written) == frame(b"bytes:x")

    run(scenario())


def test_with_one_pending_reply_allowed_reading_resumes_once_the_only_later_is_written(run: Any) -> None:
    async def scenario() -> None:
        handler = FakeHandler()
        conn, transport = on_transport(handler, max_pending=1)
        conn.data_received(frame(b"laterwait"))
        assert conn.reading_paused and not transport.reading
        handler.laters[0].resolve(b"done")
        assert bytes(transport.written) == frame(b"done")
        assert not conn.reading_paused and transport.reading

    run(scenario())


@pytest.mark.parametrize("verb", [b"laterfail 10", b"laterclose 10"])
def test_a_failed_later_closes_after_earlier_replies(run: Any, logs: io.StringIO, verb: bytes) -> None:
    async def scenario() -> None:
        handler = FakeHandler()
        async with Server(handler) as server:
            reader, writer = await server.connect()
            writer.write(frame(b"later 20 a") + frame(verb) + frame(b"later 0 never") + frame(b"echo never"))
            assert await read_frame(reader) == b"later:a"
            assert await reader.read() == b""
            await close_client(writer)
            assert await roundtrip(server, b"later 0 next") == b"later:next"
        assert handler.laters[2].cancelled() or handler.laters[2].done()

    run(scenario())
    found = events(logs)
    if verb.startswith(b"laterfail"):
        assert any("ValueError: late failure" in e.get("exception", "") for e in found)
    else:
        assert any(e.get("reason") == "asked later" for e in found)


def test_client_closing_while_laters_are_pending(run: Any) -> None:
    async def scenario() -> None:
        handler = FakeHandler()
        async with Server(handler) as server:
            reader, writer = await server.connect()
            writer.write(frame(b"laterwait") + frame(b"laterwait"))
            await writer.drain()
            while len(handler.laters) < 2:
                await asyncio.sleep(0.01)
            reset_client(writer)
            await server.wait_for_connections(0)
            assert all(later.cancelled() for later in handler.laters)
            handler.laters[0].resolve([b"too late"])  # dropped: nobody waits
            assert await roundtrip(server, b"later 0 ok") == b"later:ok"

    run(scenario())


def test_later_resolved_before_it_is_queued_is_written_after_earlier_replies(run: Any) -> None:
    class Early(FakeHandler):
        def handle(self, frame: bytes, ctx: RequestContext) -> Any:
            if frame == b"early":
                later = Later()
                later.resolve([b"early"])
                return later
            return super().handle(frame, ctx)

    async def scenario() -> None:
        async with Server(Early()) as server:
            reader, writer = await server.connect()
            writer.write(frame(b"echo a") + frame(b"early") + frame(b"echo b"))
            assert [await read_frame(reader) for _ in range(3)] == [b"echo:a", b"early", b"echo:b"]
            await close_client(writer)

    run(scenario())


def test_requests_split_across_writes(run: Any) -> None:
    async def scenario() -> None:
        async with Server(FakeHandler()) as server:
            reader, writer = await server.connect()
            data = b"".join(frame(b"echo %d" % i) for i in range(20))
            for i in range(0, len(data), 3):
                writer.write(data[i : i + 3])
                await writer.drain()
                await asyncio.sleep(0)
            for i in range(20):
                assert await read_frame(reader) == b"echo:%d" % i
            await close_client(writer)

    run(scenario())


def test_acks_zero_gets_no_reply(run: Any) -> None:
    async def scenario() -> None:
        async with Server(FakeHandler()) as server:
            reader, writer = await server.connect()
            writer.write(frame(b"none") + frame(b"echo x") + frame(b"none"))
            assert await read_frame(reader) == b"echo:x"
            writer.write(frame(b"echo y"))
            assert await read_frame(reader) == b"echo:y"
            await close_client(writer)

    run(scenario())


@pytest.mark.parametrize("first", [b"echo a", b"sleep 50 a"])
def test_close_connection_after_earlier_replies(run: Any, logs: io.StringIO, first: bytes) -> None:
    async def scenario() -> None:
        handler = FakeHandler()
        async with Server(handler) as server:
            reader, writer = await server.connect()
            writer.write(frame(first) + frame(b"close") + frame(b"echo never"))
            assert (await read_frame(reader)).endswith(b":a")
            assert await reader.read() == b""  # EOF, and nothing after the close
            await close_client(writer)
            await server.wait_for_connections(0)
        assert handler.handled == 2
        closing = [e for e in events(logs) if e["event"] == "closing connection at the handler's request"]
        assert closing and closing[0]["level"] == "warning" and closing[0]["reason"] == "client asked"

    run(scenario())


def test_handler_exception_closes_only_that_connection(run: Any, logs: io.StringIO) -> None:
    async def scenario() -> None:
        async with Server(FakeHandler()) as server:
            r1, w1 = await server.connect()
            r2, w2 = await server.connect()
            w1.write(frame(b"echo ok") + frame(b"boom") + frame(b"echo never"))
            assert await read_frame(r1) == b"echo:ok"
            assert await r1.read() == b""
            # The other connection is untouched and the server still accepts new ones.
            w2.write(frame(b"echo still here"))
            assert await read_frame(r2) == b"echo:still here"
            assert await roundtrip(server, b"echo new") == b"echo:new"
            await close_client(w1)
            await close_client(w2)
        failures = [e for e in events(logs) if e["event"] == "request handler failed; closing the connection"]
        assert len(failures) == 1
        assert failures[0]["level"] == "warning"
        assert "RuntimeError: boom" in failures[0]["exception"]
        assert "Traceback" in failures[0]["exception"]

    run(scenario())


def test_async_handler_exception_closes_the_connection(run: Any, logs: io.StringIO) -> None:
    class Failing(FakeHandler):
        def handle(self, frame: bytes, ctx: RequestContext) -> Any:
            if frame == b"later boom":
                return self._fail()
            return super().handle(frame, ctx)

        async def _fail(self) -> list[Any]:
            await asyncio.sleep(0.01)
            raise ValueError("late failure")

    async def scenario() -> None:
        async with Server(Failing()) as server:
            reader, writer = await server.connect()
            writer.write(frame(b"sleep 20 a") + frame(b"later boom") + frame(b"echo never"))
            assert await read_frame(reader) == b"slept:a"
            assert await reader.read() == b""
            await close_client(writer)
            assert await roundtrip(server, b"echo next") == b"echo:next"
        assert any("ValueError: late failure" in e.get("exception", "") for e in events(logs))

    run(scenario())


def test_request_debug_log_has_api_version_and_latency(run: Any, logs: io.StringIO) -> None:
    async def scenario() -> None:
        async with Server(FakeHandler()) as server:
            assert await roundtrip(server, b"echo abcdefgh") == b"echo:abcdefgh"
        opened = [e for e in events(logs) if e["event"] == "connection opened"]
        closed = [e for e in events(logs) if e["event"] == "connection closed"]
        assert opened and closed and opened[0]["level"] == "info" and opened[0]["listener"] == "PLAINTEXT"
        assert opened[0]["peer"].startswith("127.0.0.1:")
        (req,) = [e for e in events(logs) if e["event"] == "request"]
        api_key, api_version, correlation_id = struct.unpack(">hhi", b"echo abcdefgh"[:8])
        assert (req["api_key"], req["api_version"], req["correlation_id"]) == (
            api_key,
            api_version,
            correlation_id,
        )
        assert req["level"] == "debug" and req["latency_us"] >= 0

    run(scenario())


def test_oversized_frame_closes_the_connection_without_hurting_others(run: Any, logs: io.StringIO) -> None:
    async def scenario() -> None:
        async with Server(FakeHandler(), max_frame_size=1000) as server:
            r1, w1 = await server.connect()
            r2, w2 = await server.connect()
            w1.write(frame(b"echo before") + struct.pack(">i", 0x7FFFFFFF) + b"x" * 100)
            assert await read_frame(r1) == b"echo:before"
            assert await r1.read() == b""
            w2.write(frame(b"echo fine"))
            assert await read_frame(r2) == b"echo:fine"
            w2.write(struct.pack(">i", -5))
            assert await r2.read() == b""
            await close_client(w1)
            await close_client(w2)
            assert await roundtrip(server, b"echo after") == b"echo:after"
        warnings = [e for e in events(logs) if e["event"] == "invalid frame; closing the connection"]
        assert len(warnings) == 2 and all(e["level"] == "warning" for e in warnings)

    run(scenario())


@pytest.mark.parametrize("verb", [b"wait", b"laterwait"])
def test_pause_reading_under_many_pending_requests(run: Any, verb: bytes) -> None:
    async def scenario() -> None:
        handler = FakeHandler()
        pending: list[Any] = handler.futures if verb == b"wait" else handler.laters
        async with Server(handler, max_pending=4) as server:
            reader, writer = await server.connect()
            writer.write(b"".join(frame(verb) for _ in range(100)))
            await writer.drain()
            await asyncio.sleep(0.1)
            conn = server.connection()
            # The handler saw only as many requests as may be pending; the rest waits in the socket and decoder.
            assert handler.handled == 4
            assert conn.pending == 4
            assert conn.reading_paused
            replies: list[bytes] = []
            resolved = 0
            max_pending = 0
            while len(replies) < 100:
                max_pending = max(max_pending, conn.pending)
                while resolved < len(pending):
                    done = pending[resolved]
                    (done.set_result if verb == b"wait" else done.resolve)([b"done %d" % resolved])
                    resolved += 1
                try:
                    replies.append(await asyncio.wait_for(read_frame(reader), 0.05))
                except TimeoutError:
                    pass
            assert replies == [b"done %d" % i for i in range(100)]
            assert max_pending <= 4
            assert not conn.reading_paused
            await close_client(writer)

    run(scenario())


def test_pause_reading_when_the_client_does_not_read(run: Any) -> None:
    async def scenario() -> None:
        handler = FakeHandler()
        async with Server(handler) as server:
            reader, writer = await server.connect()
            writer.write(b"".join(frame(b"big 65536") for _ in range(400)))
            await asyncio.sleep(0.3)
            conn = server.connection()
            # 400 x 64 KiB would be 25 MiB of replies: the transport's high-water mark stopped us well before.
            assert conn.reading_paused
            assert handler.handled < 400
            for _ in range(400):
                assert await read_frame(reader) == b"B" * 65536
            assert handler.handled == 400
            await close_client(writer)

    run(scenario())


def test_half_close_still_gets_its_replies(run: Any) -> None:
    async def scenario() -> None:
        async with Server(FakeHandler()) as server:
            reader, writer = await server.connect()
            writer.write(frame(b"sleep 30 a") + frame(b"echo b") + frame(b"echo c"))
            writer.write_eof()
            assert [await read_frame(reader) for _ in range(3)] == [b"slept:a", b"echo:b", b"echo:c"]
            assert await reader.read() == b""
            await close_client(writer)
            await server.wait_for_connections(0)

    run(scenario())


def test_shutdown_delivers_in_flight_replies_then_closes(run: Any) -> None:
    async def scenario() -> None:
        handler = FakeHandler()
        registry = ConnectionRegistry()
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: Connection(handler, registry=registry), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(frame(b"sleep 200 slow"))
        await asyncio.sleep(0.05)
        server.close()
        aborted = await registry.shutdown(5)
        assert aborted == 0
        assert len(registry) == 0
        assert await read_frame(reader) == b"slept:slow"
        assert await reader.read() == b""
        await close_client(writer)
        await server.wait_closed()

    run(scenario())


def test_shutdown_aborts_connections_that_never_finish(run: Any) -> None:
    async def scenario() -> None:
        handler = FakeHandler()
        registry = ConnectionRegistry()
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: Connection(handler, registry=registry), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(frame(b"wait"))
        await asyncio.sleep(0.05)
        server.close()
        assert await registry.shutdown(0.1) == 1
        assert len(registry) == 0
        assert handler.futures[0].cancelled()
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            await read_frame(reader)
        await close_client(writer)
        await server.wait_closed()

    run(scenario())


# -- file regions -------------------------------------------------------------------------------------------------


@pytest.fixture
def data_file(tmp_path: Path) -> tuple[str, bytes]:
    content = os.urandom(6 * 1024 * 1024 + 12345)
    path = tmp_path / "segment.log"
    path.write_bytes(content)
    return str(path), content


@pytest.fixture
def sendfile_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.sendfile

    def counting(out_fd: int, in_fd: int, offset: int, count: int) -> int:
        calls.append(count)
        return real(out_fd, in_fd, offset, count)

    monkeypatch.setattr(os, "sendfile", counting)
    return calls


@pytest.fixture
def pread_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.pread

    def counting(fd: int, n: int, offset: int) -> bytes:
        calls.append(n)
        return real(fd, n, offset)

    monkeypatch.setattr(os, "pread", counting)
    return calls


def region_reply(path: str, closer: RecordingCloser, spec: list[Any]) -> Callable[[], list[Any]]:
    """spec items: bytes, or (offset, count) for a region of the file."""

    def make() -> list[Any]:
        parts: list[Any] = []
        for item in spec:
            if isinstance(item, tuple):
                parts.append(FileRegion(os.open(path, os.O_RDONLY), item[0], item[1], closer))
            else:
                parts.append(item)
        return parts

    return make


def expected_body(content: bytes, spec: list[Any]) -> bytes:
    return b"".join(content[i[0] : i[0] + i[1]] if isinstance(i, tuple) else i for i in spec)


REGION_SPECS = {
    "bytes-region-bytes": [b"header|", (100, 5000), b"|tail"],
    "region-first-and-last": [(0, 10), b"-mid-", (7, 0), (20, 3)],
    "large": [b"H", (1000, 6 * 1024 * 1024), b"T"],
}


@pytest.mark.parametrize("zero_copy", [True, False], ids=["sendfile", "copy"])
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_file_regions_byte_exact(
    run: Any,
    data_file: tuple[str, bytes],
    sendfile_calls: list[int],
    pread_calls: list[int],
    zero_copy: bool,
    asynchronous: bool,
) -> None:
    path, content = data_file
    closer = RecordingCloser()

    async def scenario() -> None:
        handler = FakeHandler()
        for name, spec in REGION_SPECS.items():
            handler.regions[name.encode()] = region_reply(path, closer, spec)
        async with Server(handler, zero_copy=zero_copy) as server:
            reader, writer = await server.connect()
            names = list(REGION_SPECS)
            requests = []
            for i, name in enumerate(names):
                # asynchronous: each region's reply comes from a coroutine or (every other one) from a Later
                verb = (b"laterregion 5 " if i % 2 else b"aregion 5 ") if asynchronous else b"region "
                requests += [frame(b"echo before-" + name.encode()), frame(verb + name.encode())]
            requests.append(frame(b"echo end"))
            writer.write(b"".join(requests))
            for name in names:
                assert await read_frame(reader) == b"echo:before-" + name.encode()
                assert await read_frame(reader) == expected_body(content, REGION_SPECS[name])
            assert await read_frame(reader) == b"echo:end"
            await close_client(writer)

    run(scenario())
    n_regions = sum(isinstance(i, tuple) for spec in REGION_SPECS.values() for i in spec)
    assert len(closer.closed) == n_regions  # every region's fd closed exactly once
    if zero_copy:
        assert sendfile_calls and not pread_calls
    else:
        assert pread_calls and not sendfile_calls


def test_sendfile_with_a_slow_reader_waits_for_writability(
    run: Any, data_file: tuple[str, bytes], sendfile_calls: list[int]
) -> None:
    path, content = data_file
    closer = RecordingCloser()
    spec: list[Any] = [b"<", (0, len(content)), b">"]

    async def scenario() -> None:
        handler = FakeHandler()
        handler.regions[b"all"] = region_reply(path, closer, spec)
        async with Server(handler) as server:
            reader, writer = await server.connect()
            writer.write(frame(b"region all") + frame(b"echo after"))
            await asyncio.sleep(0.2)  # the socket buffers fill up: sendfile must hit EAGAIN and wait
            assert await read_frame(reader) == expected_body(content, spec)
            assert await read_frame(reader) == b"echo:after"
            await close_client(writer)

    run(scenario())
    assert len(sendfile_calls) > 1  # it was sent in several pieces
    assert closer.closed


def test_sendfile_unsupported_falls_back_to_copy(
    run: Any, data_file: tuple[str, bytes], monkeypatch: pytest.MonkeyPatch, pread_calls: list[int]
) -> None:
    path, content = data_file
    closer = RecordingCloser()
    calls: list[int] = []

    def unsupported(out_fd: int, in_fd: int, offset: int, count: int) -> int:
        calls.append(count)
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(os, "sendfile", unsupported)
    spec: list[Any] = [b"[", (10, 300_000), b"]"]

    async def scenario() -> None:
        handler = FakeHandler()
        handler.regions[b"r"] = region_reply(path, closer, spec)
        async with Server(handler) as server:
            reader, writer = await server.connect()
            writer.write(frame(b"region r") + frame(b"region r"))
            assert await read_frame(reader) == expected_body(content, spec)
            assert await read_frame(reader) == expected_body(content, spec)
            await close_client(writer)

    run(scenario())
    assert len(calls) == 1  # the connection remembers that sendfile does not work
    assert pread_calls
    assert len(closer.closed) == 2


@pytest.mark.parametrize("zero_copy", [True, False], ids=["sendfile", "copy"])
def test_client_disconnecting_mid_response(run: Any, tmp_path: Path, zero_copy: bool) -> None:
    path = tmp_path / "big.log"
    with open(path, "wb") as f:
        f.truncate(48 * 1024 * 1024)  # sparse: cheap to create, still 48 MiB to send
    closer = RecordingCloser()

    async def scenario() -> None:
        handler = FakeHandler()
        handler.regions[b"big"] = region_reply(str(path), closer, [b"x", (0, 48 * 1024 * 1024)])
        async with Server(handler, zero_copy=zero_copy) as server:
            reader, writer = await server.connect()
            writer.write(frame(b"region big") + frame(b"echo never"))
            await reader.readexactly(100_000)
            writer.transport.abort()
            await server.wait_for_connections(0)
            assert await roundtrip(server, b"echo alive") == b"echo:alive"

    run(scenario())
    assert len(closer.closed) == 1


def test_regions_of_unwritten_replies_are_closed_when_the_connection_drops(
    run: Any, data_file: tuple[str, bytes]
) -> None:
    path, _ = data_file
    closer = RecordingCloser()

    async def scenario() -> None:
        handler = FakeHandler()
        handler.regions[b"r"] = region_reply(path, closer, [(0, 10)])
        async with Server(handler) as server:
            reader, writer = await server.connect()
            # The first reply never completes, so the region replies behind it stay queued.
            writer.write(frame(b"wait") + frame(b"region r") + frame(b"aregion 0 r"))
            await asyncio.sleep(0.1)
            assert server.connection().pending == 3
            reset_client(writer)
            await server.wait_for_connections(0)
            await asyncio.sleep(0.05)

    run(scenario())
    assert len(closer.closed) == 2


def test_region_shorter_than_promised_closes_the_connection(
    run: Any, tmp_path: Path, logs: io.StringIO
) -> None:
    path = tmp_path / "short.log"
    path.write_bytes(b"0123456789")
    closer = RecordingCloser()

    async def scenario() -> None:
        handler = FakeHandler()
        handler.regions[b"r"] = region_reply(str(path), closer, [(0, 100)])
        async with Server(handler) as server:
            reader, writer = await server.connect()
            writer.write(frame(b"region r"))
            assert struct.unpack(">i", await reader.readexactly(4)) == (100,)
            assert await reader.read() == b"0123456789"  # then the connection is cut
            await close_client(writer)
            assert await roundtrip(server, b"echo ok") == b"echo:ok"

    run(scenario())
    assert len(closer.closed) == 1
    assert any(e["event"] == "sending a reply failed; closing the connection" for e in events(logs))


def test_later_when_pending_adds_its_callback_only_while_the_outcome_is_unknown() -> None:
    """What the connection's queue asks a Later it is handed (one call for done() and on_done): pending, the
    callback runs when it completes; done, failed or cancelled, False and the callback is never run."""
    seen: list[Any] = []
    pending = Later()
    assert pending.when_pending(lambda d: seen.append(d.result()))
    assert pending.when_pending(lambda d: seen.append(d.result() * 2))
    pending.resolve(3)
    assert seen == [3, 6]
    done, failed, cancelled = Later(), Later(), Later()
    done.resolve(1)
    failed.fail(ValueError("no"))
    cancelled.cancel()
    for later in (done, failed, cancelled):
        assert not later.when_pending(lambda d: seen.append("never"))
    assert seen == [3, 6]


def test_client_closing_while_a_reply_is_pending(run: Any) -> None:
    async def scenario() -> None:
        async with Server(FakeHandler()) as server:
            reader, writer = await server.connect()
            writer.write(frame(b"sleep 100 late"))
            await writer.drain()
            await close_client(writer)
            # The server answers what it read (into a closed socket), then lets the connection go.
            await server.wait_for_connections(0)
            assert await roundtrip(server, b"echo ok") == b"echo:ok"

    run(scenario())


def test_later_runs_its_steps_then_its_callbacks_in_the_completing_call() -> None:
    seen: list[Any] = []
    later = Later().then(lambda v: v + 1).then(lambda v: v * 10)
    later.on_done(lambda d: seen.append(("a", d.result())))
    later.on_done(lambda d: seen.append(("b", d.result())))
    assert not later.done()
    later.resolve(1)
    assert seen == [("a", 20), ("b", 20)]
    later.resolve(5)  # the outcome is known: ignored
    later.on_done(lambda d: seen.append(("late", d.result())))  # called at once
    assert seen[-1] == ("late", 20)

    failing = Later().then(lambda v: 1 / v)
    failing.resolve(0)
    with pytest.raises(ZeroDivisionError):
        failing.result()

    failed = Later()
    failed.fail(CloseConnection("bye"))
    with pytest.raises(CloseConnection):
        failed.result()

    cancelled = Later()
    cancelled.on_done(lambda d: seen.append("never"))
    assert cancelled.cancel() and cancelled.cancelled() and cancelled.done()
    cancelled.resolve(1)
    assert "never" not in seen
    with pytest.raises(RuntimeError):
        cancelled.result()
    assert not cancelled.cancel()
