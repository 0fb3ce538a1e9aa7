"""The `/metrics` HTTP endpoint, served on the node's own event loop (`kjbod.metrics.listener=HOST:PORT`).

Strategy: a deliberately small HTTP/1.x server on asyncio streams, one task per scrape connection.  It reads one
request head (bounded in size and time), answers ``GET /metrics`` (or ``/``) with the node's families in
Prometheus' text format, or OpenMetrics when the Accept header asks for it (prometheus_client's encoders), any
other path with 404 and any other method with 405, then closes.  Building the answer runs on the loop between
requests; sending it waits on the socket, never the loop, so a scraper that reads slowly or goes away holds only
its own task, which is dropped after `SEND_TIMEOUT_S`.  The close is staged as RFC 9112 section 9.6 advises: the
answer is flushed whole, the sending side shut (the scraper sees the end of the answer), and what the scraper still
sends (a request body, pipelined requests) is read and dropped until it hangs up or `LINGER_S` passes; closing at
once with bytes unread would make the kernel reset the connection, which can fail the scraper's own sends or cut
off the answer it has not read yet.  Dir sizes are awaited (bounded) before the families are
built, so a hung disk never holds up a scrape (kjbod.metrics.collect).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import structlog
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from kjbod.metrics.collect import NodeCollector
from kjbod.metrics.counters import RequestStats, TopicStats

__all__ = ["MetricsEndpoint", "NodeMetrics", "parse_listener"]

log = structlog.get_logger("kjbod.metrics")

HEAD_LIMIT = 8192
READ_TIMEOUT_S = 10.0
SEND_TIMEOUT_S = 30.0
LINGER_S = 10.0
METRICS_PATHS = frozenset({"/metrics", "/"})
OPENMETRICS_END = b"# EOF\n"


def parse_listener(value: str) -> tuple[str, int]:
    """HOST:PORT (IPv6 hosts in brackets) -> (host, port); ValueError naming the problem."""
    host, sep, port = value.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT, not {value!r}")
    return host.strip("[]"), int(port)


class NodeMetrics:
    """A node's counters, wired into its request path, and the registry a scrape reads."""

    def __init__(self, node: Any) -> None:
        self.requests = RequestStats()
        self.topics = TopicStats(self.requests) if hasattr(node, "topic_stats") else None
        self.collector = NodeCollector(node, self.requests, self.topics)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        handler = getattr(node, "handler", None)
        if handler is not None and hasattr(handler, "stats"):
            handler.stats = self.requests
        if self.topics is not None:
            node.topic_stats = self.topics

    async def render(self, accept: str | None) -> tuple[bytes, str]:
        """The scrape's body and content type."""
        await self.collector.refresh_dirs()
        self.collector.snapshot_partitions()
        encoder, content_type = choose_encoder(accept or "")
        body = encoder(self.registry)
        partitions = self.collector.partition_text().encode()
        if body.endswith(OPENMETRICS_END):  # OpenMetrics: every family before the end marker
            return body[: -len(OPENMETRICS_END)] + partitions + OPENMETRICS_END, content_type
        return body + partitions, content_type


class MetricsEndpoint:
    """Serves a NodeMetrics over HTTP until closed."""

    def __init__(self, metrics: NodeMetrics, host: str, port: int) -> None:
        self.metrics = metrics
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("metrics_listening", host=self.host, port=self.port, path="/metrics")

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5.0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        # No high-water mark: drain() returns only once the whole answer is in the kernel, so nothing is left in
        # the transport's buffer for the close to drop.
        writer.transport.set_write_buffer_limits(high=0)
        try:
            await self._answer(reader, writer)
            await self._linger(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass  # the scraper went away, was too slow, or sent nonsense: only this connection ends
        except Exception:
            log.warning("metrics_scrape_failed", exc_info=True)
        finally:
            if task is not None:
                self._tasks.discard(task)
            writer.transport.abort()

    async def _linger(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """After the answer: shut the sending side, then drop what the scraper still sends until it hangs up."""
        if writer.can_write_eof():
            writer.write_eof()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(LINGER_S):
                while await reader.read(65536):
                    pass

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
        if len(head) > HEAD_LIMIT:
            await self._send(writer, 431, b"request head too large\n", "text/plain; charset=utf-8")
            return
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            await self._send(writer, 400, b"not an HTTP request line\n", "text/plain; charset=utf-8")
            return
        method, target, _version = parts
        path = target.split("?", 1)[0]
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        if method not in ("GET", "HEAD"):
            await self._send(writer, 405, b"only GET and HEAD\n", "text/plain; charset=utf-8", allow="GET, HEAD")
            return
        if path not in METRICS_PATHS:
            await self._send(writer, 404, f"no {path} here: metrics are at /metrics\n".encode(),
                             "text/plain; charset=utf-8")
            return
        started = time.perf_counter()
        body, content_type = await self.metrics.render(headers.get("accept"))
        rendered = time.perf_counter()
        await self._send(writer, 200, body, content_type, head_only=method == "HEAD")
        log.debug("metrics_scrape", bytes=len(body), render_ms=round((rendered - started) * 1000, 1),
                  send_ms=round((time.perf_counter() - rendered) * 1000, 1))

    async def _send(self, writer: asyncio.StreamWriter, status: int, body: bytes, content_type: str, *,
                    head_only: bool = False, allow: str | None = None) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
                  431: "Request Header Fields Too Large"}[status]
        extra = f"Allow: {allow}\r\n" if allow else ""
        writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                     f"{extra}Connection: close\r\n\r\n".encode("latin-1"))
        if not head_only:
            writer.write(body)
        await asyncio.wait_for(writer.drain(), SEND_TIMEOUT_S)
