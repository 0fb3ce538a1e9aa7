"""The least any TCP-fed log writer can do per Produce request: the ceiling of the Produce benchmark.

One blocking thread per connection receives each size-prefixed frame straight into a buffer of its size
(`recv_into`, one copy out of the socket), writes the whole frame with `os.write` to a file in the given
directory (one copy into the page cache) and answers with a fixed, valid ProduceResponse v9 carrying the request's
correlation id.  No parsing, no CRC, no offsets, no index: whatever kjbod does beyond this is its own overhead, and
whatever this reaches below a plain `os.write` of the same bytes is the cost of receiving them over TCP on this
machine.  Prints "ready" once listening.

    python -m tools.bench.produce_sink PORT DIRECTORY
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import threading

SIZE = struct.Struct(">i")


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


def _serve(sock: socket.socket, fd: int, body: bytes) -> None:
    size_buf = bytearray(4)
    buf = bytearray(0)
    with sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while _fill(sock, memoryview(size_buf)):
            (size,) = SIZE.unpack(size_buf)
            if len(buf) != size:
                buf = bytearray(size)
            view = memoryview(buf)
            if not _fill(sock, view):
                return
            os.write(fd, view)
            sock.sendall(SIZE.pack(4 + len(body)) + bytes(view[4:8]) + body)


def main(port: int, directory: str) -> None:
    body = _reply_body()
    fd = os.open(os.path.join(directory, "produce-sink.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    listener = socket.create_server(("127.0.0.1", port))
    print("ready", flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_serve, args=(conn, fd, body), daemon=True).start()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
