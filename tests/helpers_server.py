"""A `kjbod serve` process with a fake node, for tests of the server shell (signals, draining, exit codes).

Run as a script: `python tests/helpers_server.py server.properties`. It runs kjbod.server.app.run() with the
real config loading, logging, listeners and shutdown, but a node whose handler speaks a tiny test protocol inside
Kafka framing:

    b"slow MS"  -> after MS milliseconds: b"slow done"  (logs "slow request started" first)
    b"die"      -> sets node.shutdown_requested, as a node whose every log dir failed would; replies b"dying"
    anything    -> b"echo:" + the frame

The fake node logs "fake node started" / "fake node stopped" so tests can check the order of shutdown steps.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from kjbod.server.app import run
from kjbod.server.config import ServerConfig, load_config
from kjbod.server.logging import configure_logging, get_logger

log = get_logger("tests.fake_node")


class FakeHandler:
    def __init__(self, node: FakeNode) -> None:
        self.node = node

    def handle(self, frame: bytes, ctx: Any) -> Any:
        verb, _, arg = frame.partition(b" ")
        if verb == b"slow":
            return self._slow(int(arg))
        if verb == b"die":
            self.node.shutdown_requested.set()
            return [b"dying"]
        return [b"echo:", frame]

    async def _slow(self, ms: int) -> list[bytes]:
        log.info("slow request started", ms=ms)
        await asyncio.sleep(ms / 1000)
        log.info("slow request finished", ms=ms)
        return [b"slow done"]


class FakeNode:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.handler = FakeHandler(self)
        self.shutdown_requested = asyncio.Event()

    async def start(self) -> None:
        log.info("fake node started")

    async def stop(self) -> None:
        log.info("fake node stopped")


def main(argv: list[str]) -> int:
    configure_logging("json", "info")
    config = load_config(argv[1], argv[2:])
    return run(config, FakeNode)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
