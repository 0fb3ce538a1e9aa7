"""Serves an async request handler `handler(api_key, version, request, header) -> response` on 127.0.0.1.

For the client-side tests: real framing and the generated codecs on both ends, so the socket controller channel
and the in-process one can be driven by the same fake controller.  ApiVersions is answered from the codec's
registry (every API at every version this codec knows, or the ranges in `api_versions`).  A request above the
advertised range closes the connection, as Kafka does.  `stop()` closes the listener and every connection;
`start()` again on the same port plays a controller that comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from kjbod.protocol.generated import ApiVersionsResponse
from kjbod.protocol.generated.registry import APIS
from kjbod.protocol.headers import decode_request_header, encode_response, peek_api
from kjbod.wire.framing import FrameDecoder, encode_frame_size


async def serve_frames(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       answer: Callable[[bytes], Awaitable[bytes | None]], writers: set[asyncio.StreamWriter],
                       truncate: Callable[[], bool] = lambda: False) -> None:
    """One connection of a test server: each request frame gets `answer(frame)` (the reply after its size;
    None closes the connection without answering).  When `truncate()` says so, only half of that reply goes out
    and the connection drops.  `writers` holds the open connections, for a stop that closes them all."""
    writers.add(writer)
    decoder = FrameDecoder()
    try:
        while data := await reader.read(65536):
            decoder.feed(data)
            for frame in decoder.frames():
                reply = await answer(frame)
                if reply is None:
                    return
                out = encode_frame_size(len(reply)) + reply
                if truncate():
                    writer.write(out[: len(out) // 2])
                    await writer.drain()
                    return
                writer.write(out)
                await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writers.discard(writer)
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


class HandlerServer:
    def __init__(self, handler: Any, port: int = 0) -> None:
        self.handler = handler
        self.port = port
        self.api_versions: dict[int, tuple[int, int]] = {k: (i.min_version, i.max_version) for k, i in APIS.items()}
        self.client_ids: list[str] = []
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    async def start(self) -> HandlerServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await serve_frames(reader, writer, self._answer, self._writers)

    async def _answer(self, frame: bytes) -> bytes | None:
        key, version, correlation_id = peek_api(frame)
        lo, hi = self.api_versions.get(key, (0, -1))
        if not lo <= version <= hi:
            return None
        header, pos = decode_request_header(frame, key, version)
        self.client_ids.append(header.client_id)
        request = APIS[key].request.decode(frame[pos:], version)
        if key == 18:
            response = ApiVersionsResponse(api_keys=[
                ApiVersionsResponse.ApiVersion(api_key=k, min_version=a, max_version=b)
                for k, (a, b) in sorted(self.api_versions.items())])
        else:
            response = await self.handler(key, version, request, header)
            if response is None:
                return None  # the handler wants the connection dropped
        return b"".join(encode_response(key, version, correlation_id, response))
