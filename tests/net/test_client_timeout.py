"""A ClientConnection's failures, named: a request that times out gets RequestTimeoutError and closes the
connection, and the answer that arrives after that changes nothing (no exception in the loop); a host that does not
resolve says so."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from handler_server import HandlerServer

from kjbod.net.connection import ClientConnection
from kjbod.net.errors import BrokerConnectionError, RequestTimeoutError
from kjbod.protocol.generated import MetadataRequest, MetadataResponse, RequestHeader

METADATA = 3


class LateServer:
    """Answers Metadata only once `release` is set, then with a fixed response."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.answered = asyncio.Event()
        self.seen = 0

    async def __call__(self, api_key: int, version: int, request: Any, header: RequestHeader) -> Any:
        assert api_key == METADATA
        self.seen += 1
        await self.release.wait()
        self.answered.set()
        return MetadataResponse(controller_id=7)


async def test_a_late_answer_after_the_timeout_changes_nothing() -> None:
    loop = asyncio.get_running_loop()
    loop_errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: loop_errors.append(context))
    handler = LateServer()
    server = await HandlerServer(handler).start()
    try:
        conn = await ClientConnection.open("127.0.0.1", server.port, client_id="t", connect_timeout=5)
        version = conn.pick_version(METADATA, max_version=9)
        with pytest.raises(RequestTimeoutError, match="no response within"):
            await conn.request(METADATA, version, MetadataRequest(topics=[]), timeout=0.05)
        assert conn.closed
        # The server answers now, after the client gave up: nothing reaches the closed connection's callers.
        handler.release.set()
        await asyncio.wait_for(handler.answered.wait(), 5)
        await asyncio.sleep(0.05)  # let any bytes that could still arrive be read
        with pytest.raises(BrokerConnectionError, match="closed after a request timed out"):
            conn.send(METADATA, version, MetadataRequest(topics=[]))
        assert conn.in_flight == 0
        assert loop_errors == []
    finally:
        await server.stop()


async def test_an_answer_in_time_cancels_the_timer() -> None:
    handler = LateServer()
    handler.release.set()
    server = await HandlerServer(handler).start()
    try:
        conn = await ClientConnection.open("127.0.0.1", server.port, client_id="t", connect_timeout=5)
        version = conn.pick_version(METADATA, max_version=9)
        response = await conn.request(METADATA, version, MetadataRequest(topics=[]), timeout=0.2)
        assert response.controller_id == 7
        await asyncio.sleep(0.3)  # past the bound: a timer left behind would have closed the connection
        assert not conn.closed
        assert (await conn.request(METADATA, version, MetadataRequest(topics=[]), timeout=5)).controller_id == 7
        conn.close()
    finally:
        await server.stop()


async def test_a_host_that_does_not_resolve_is_named_with_the_resolvers_reason() -> None:
    with pytest.raises(BrokerConnectionError, match=r"cannot resolve 'no-such-host\.invalid'") as info:
        await ClientConnection.open("no-such-host.invalid", 9092, client_id="t", connect_timeout=60)
    assert "Unknown error" not in str(info.value)
