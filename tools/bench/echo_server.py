"""A minimal Kafka-framed echo server: the reference point for the server benchmark.

It splits the stream into size-prefixed frames and answers each with a fixed-size frame carrying the request's
correlation id, all replies of one read in a single write: the least work any Kafka-protocol server on the same
event loop can do per request.
"""

from __future__ import annotations

import asyncio
import struct
import sys

SIZE = struct.Struct(">i")
REPLY_BODY = bytes(24)


class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.t = transport
        self.buf = b""

    def data_received(self, data):
        buf = self.buf + data if self.buf else data
        pos = 0
        out = []
        n = len(buf)
        while n - pos >= 4:
            (size,) = SIZE.unpack_from(buf, pos)
            if n - pos - 4 < size:
                break
            corr = buf[pos + 8:pos + 12]
            out.append(SIZE.pack(4 + len(REPLY_BODY)) + corr + REPLY_BODY)
            pos += 4 + size
        self.buf = buf[pos:]
        if out:
            self.t.write(b"".join(out))


async def main(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Echo, "127.0.0.1", port, backlog=1024)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main(int(sys.argv[1])))
