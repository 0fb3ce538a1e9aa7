"""Capture relay: a TCP proxy on 127.0.0.1 that records every Kafka frame in both directions.

    python -m tools.capture_relay --listen 127.0.0.1:19092 --upstream 127.0.0.1:9092 --out capture.jsonl

Each line of the output is one frame: {"conn": n, "dir": "request"|"response", "hex": "..."} (the frame without
its 4-byte size).  Responses are matched to requests by correlation id when the capture is turned into golden
test files (tools/make_golden.py).  Clients must be pointed at the relay for bootstrap *and* for the broker
address the metadata returns, so start the server with `advertised.listeners` set to the relay's address.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import struct
import sys
from pathlib import Path

SIZE = struct.Struct(">i")


class Recorder:
    def __init__(self, path: Path):
        self.f = path.open("w", encoding="utf-8")
        self.next_conn = 0

    def write(self, conn: int, direction: str, frame: bytes) -> None:
        self.f.write(json.dumps({"conn": conn, "dir": direction, "hex": frame.hex()}) + "\n")
        self.f.flush()


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, rec: Recorder, conn: int,
               direction: str) -> None:
    try:
        while True:
            head = await reader.readexactly(4)
            (size,) = SIZE.unpack(head)
            body = await reader.readexactly(size)
            rec.write(conn, direction, body)
            writer.write(head + body)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listen", required=True)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    lhost, lport = args.listen.rsplit(":", 1)
    uhost, uport = args.upstream.rsplit(":", 1)
    rec = Recorder(args.out)

    async def on_client(creader, cwriter):
        conn = rec.next_conn
        rec.next_conn += 1
        sreader, swriter = await asyncio.open_connection(uhost, int(uport))
        await asyncio.gather(pump(creader, swriter, rec, conn, "request"),
                             pump(sreader, cwriter, rec, conn, "response"))

    server = await asyncio.start_server(on_client, lhost, int(lport))
    print(f"relaying {args.listen} -> {args.upstream}, recording to {args.out}", file=sys.stderr, flush=True)
    async with server:
        await server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
