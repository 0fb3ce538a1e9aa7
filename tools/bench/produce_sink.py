"""What a TCP-fed log writer can reach at best on this machine: the ceilings of the Produce benchmark.

Each sink receives the benchmark's size-prefixed Produce frames and answers each with a fixed, valid
ProduceResponse v9 carrying the request's correlation id.  No parsing, no CRC, no offsets, no index: whatever kjbod
does beyond a sink is its own overhead.  Three ways to handle a frame, one per MODE:

* ``write``: one blocking thread per connection receives each frame straight into a buffer of its size
  (`recv_into`, one copy out of the socket) and writes it with `os.write` to a file in DIRECTORY (one copy into
  the page cache), then answers.  The shape of any single-threaded writer, kjbod's event loop included.
* ``threads``: per connection, one thread receives while a second writes the previous frames and answers, so
  receiving and writing overlap on two CPUs (four buffers in rotation).
* ``discard``: receives and answers, writes nothing: what TCP over loopback alone costs here.

Prints "ready" once listening.

    python -m tools.bench.produce_sink PORT DIRECTORY [write|threads|discard]
"""

from __future__ import annotations

import os
import queue
import socket
import struct
import sys
import threading
from collections.abc import Callable

SIZE = struct.Struct(">i")
MODES = ("write", "threads", "discard")
_BUFFERS = 4  # in rotation between the receiving and the writing thread of the ``threads`` mode


def _reply_body() -> bytes:
    """A ProduceResponse v9 body (after the correlation id) acknowledging one partition at offset 0."""
    from kjbod.protocol.generated import ProduceResponse as R

    resp = R(responses=[R.TopicProduceResponse(name="produce", partition_responses=[
        R.PartitionProduceResponse(index=0, error_code=0, base_offset=0)])])
    return b"\x00" + resp.encode(9)  # response header v1: the correlation id, then empty tagged fields


def _fill(sock: socket.socket, view: memoryview) -> bool:
    got, n = 0, len(view)
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            return False
        got += k
    return True


def _frames(sock: socket.socket, take: Callable[[int], bytearray]):
    """Yield (buffer, size) for each frame received on `sock`, the frame in buffer[:size]; `take(size)` gives the
    buffer to receive into."""
    size_buf = bytearray(4)
    while _fill(sock, memoryview(size_buf)):
        (size,) = SIZE.unpack(size_buf)
        buf = take(size)
        if not _fill(sock, memoryview(buf)[:size]):
            return
        yield buf, size


def _answer(sock: socket.socket, frame: memoryview, body: bytes) -> None:
    sock.sendall(SIZE.pack(4 + len(body)) + bytes(frame[4:8]) + body)


def _serve_inline(sock: socket.socket, fd: int | None, body: bytes) -> None:
    held = bytearray(0)

    def take(size: int) -> bytearray:
        nonlocal held
        if len(held) < size:
            held = bytearray(size)
        return held

    for buf, size in _frames(sock, take):
        view = memoryview(buf)[:size]
        if fd is not None:
            os.write(fd, view)
        _answer(sock, view, body)


def _serve_threads(sock: socket.socket, fd: int, body: bytes) -> None:
    full: queue.SimpleQueue[tuple[bytearray, int] | None] = queue.SimpleQueue()
    free: queue.SimpleQueue[bytearray] = queue.SimpleQueue()
    for _ in range(_BUFFERS):
        free.put(bytearray(0))

    def writer() -> None:
        while (item := full.get()) is not None:
            buf, size = item
            view = memoryview(buf)[:size]
            os.write(fd, view)
            _answer(sock, view, body)
            free.put(buf)

    def take(size: int) -> bytearray:
        buf = free.get()
        return buf if len(buf) >= size else bytearray(size)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    try:
        for item in _frames(sock, take):
            full.put(item)
    finally:
        full.put(None)
        t.join()


def _serve(sock: socket.socket, fd: int | None, body: bytes, mode: str) -> None:
    with sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if mode == "threads":
                assert fd is not None
                _serve_threads(sock, fd, body)
            else:
                _serve_inline(sock, fd, body)
        except OSError:
            pass  # the load generator hung up


def main(port: int, directory: str, mode: str = "write") -> None:
    if mode not in MODES:
        raise SystemExit(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    body = _reply_body()
    fd = None
    if mode != "discard":
        fd = os.open(os.path.join(directory, f"produce-sink-{mode}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                     0o644)
    listener = socket.create_server(("127.0.0.1", port))
    print("ready", flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_serve, args=(conn, fd, body, mode), daemon=True).start()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], *sys.argv[3:4])
