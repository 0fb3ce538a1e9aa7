"""Request routing: frame → header → API handler → response parts.

Strategy (franz-go's kfake shape): every API lives in one handler module under kjbod/broker/handlers that
registers itself once with `@api(RequestClass)`.  The registry built from those registrations is the single
truth for what this node serves: routing, listener checks and the ApiVersions answer all read it, so an API is
advertised exactly when a handler exists for it.

What closes a connection (as Kafka does, with a warning naming client, API and version): an unknown API key,
an API not served on this listener, a version outside the served range (except ApiVersions, answered per
KIP-511 with a v0 UNSUPPORTED_VERSION body listing its own range), and bytes that do not decode.  Domain
failures are the handlers' business: they answer with Kafka error codes inside the response.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog

from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated.api_versions_response import ApiVersion, ApiVersionsResponse
from kjbod.protocol.generated.registry import APIS
from kjbod.protocol.headers import (
    API_VERSIONS_KEY,
    decode_request_header,
    peek_api,
    peek_client_id,
    response_header,
    response_header_version,
)
from kjbod.protocol.runtime import DecodeError, EncodeError
from kjbod.wire.handler import CloseConnection, RequestContext

log = structlog.get_logger("kjbod.router")

HandlerFn = Callable[[Any, "Request", Any], Any]


@dataclass(slots=True)
class Request:
    """One decoded request's envelope: who asked, which API version, and the header."""

    ctx: RequestContext
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str


@dataclass(frozen=True, slots=True)
class ApiEntry:
    api_key: int
    name: str
    request_cls: type
    response_cls: type
    min_version: int
    max_version: int
    listeners: frozenset[str]
    fn: HandlerFn


_REGISTRY: dict[int, ApiEntry] = {}


def api(request_cls: type, *, min_version: int | None = None, max_version: int | None = None,
        listeners: frozenset[str] | None = None) -> Callable[[HandlerFn], HandlerFn]:
    """Registers a handler for the API of `request_cls`.  Versions and listeners default to the schema's."""
    info = APIS[request_cls.API_KEY]
    lo = info.min_version if min_version is None else min_version
    hi = info.max_version if max_version is None else max_version
    if not info.min_version <= lo <= hi <= info.max_version:
        raise ValueError(f"{info.name}: handler versions {lo}-{hi} outside the schema's "
                         f"{info.min_version}-{info.max_version}")
    served_on = info.listeners if listeners is None else listeners
    if not served_on <= info.listeners:
        raise ValueError(f"{info.name}: listeners {sorted(served_on)} not allowed by the schema "
                         f"({sorted(info.listeners)})")

    def register(fn: HandlerFn) -> HandlerFn:
        if info.api_key in _REGISTRY:
            raise ValueError(f"{info.name} registered twice")
        _REGISTRY[info.api_key] = ApiEntry(info.api_key, info.name, info.request, info.response, lo, hi,
                                           frozenset(served_on), fn)
        return fn

    return register


def registry() -> dict[int, ApiEntry]:
    from kjbod.broker import handlers  # noqa: F401  (importing the package registers every handler)

    return _REGISTRY


def api_versions_for(listener_kind: str) -> list[ApiVersion]:
    """The ApiVersions entries for one listener kind, in api key order."""
    return [ApiVersion(api_key=e.api_key, min_version=e.min_version, max_version=e.max_version)
            for e in sorted(registry().values(), key=lambda e: e.api_key) if listener_kind in e.listeners]


class Router:
    """Implements kjbod.server.handler.RequestHandler for one node."""

    def __init__(self, node: Any, *, debug_requests: bool = False):
        self.node = node
        self.entries = registry()
        self.debug_requests = debug_requests

    def handle(self, frame, ctx: RequestContext):
        try:
            key, version, corr = peek_api(frame)
        except DecodeError as e:
            self._refuse(ctx, frame, None, None, f"undecodable request header: {e}")
        entry = self.entries.get(key)
        if entry is None:
            self._refuse(ctx, frame, key, version, "unknown or unsupported API key")
        if ctx.listener_kind not in entry.listeners:
            self._refuse(ctx, frame, key, version, f"API not served on the {ctx.listener_kind} listener "
                         f"{ctx.listener_name}")
        if not entry.min_version <= version <= entry.max_version:
            if key == API_VERSIONS_KEY:
                return self._unsupported_api_versions(entry, corr, ctx, version)
            self._refuse(ctx, frame, key, version, f"unsupported version (this node serves "
                         f"{entry.min_version}-{entry.max_version})")
        try:
            header, pos = decode_request_header(frame, key, version)
            # Bytes after the body are ignored, as Apache Kafka does (librdkafka's Metadata v13 requests end with
            # three of them); the generated decode() is strict, decode_from() lets the router choose.
            body, _end = entry.request_cls.decode_from(frame, pos, version)
        except DecodeError as e:
            self._refuse(ctx, frame, key, version, f"undecodable request: {e}")
        request = Request(ctx, key, version, header.correlation_id, header.client_id)
        started = time.perf_counter() if self.debug_requests else 0.0
        result = entry.fn(self.node, request, body)
        if inspect.isawaitable(result):
            return self._finish_later(entry, request, result, started)
        return self._reply(entry, request, result, started)

    async def _finish_later(self, entry: ApiEntry, request: Request, pending: Awaitable, started: float):
        result = await pending
        return self._reply(entry, request, result, started)

    def _reply(self, entry: ApiEntry, request: Request, response, started: float):
        if response is None:  # no response on the wire (Produce with acks=0)
            return None
        out = [response_header(request.correlation_id, response_header_version(entry.api_key, request.api_version))]
        try:
            response.encode_into(out, request.api_version)
        except EncodeError as e:
            # A handler produced a response that this version cannot carry: a bug, never the client's fault.
            log.warning("response_encode_failed", api=entry.name, version=request.api_version,
                        client_id=request.client_id, peer=request.ctx.peer, error=str(e))
            raise CloseConnection(f"cannot encode {entry.name} v{request.api_version} response") from None
        if self.debug_requests:
            log.debug("request", api=entry.name, version=request.api_version, client_id=request.client_id,
                      peer=request.ctx.peer, correlation_id=request.correlation_id,
                      latency_ms=round((time.perf_counter() - started) * 1000, 3))
        return out

    def _unsupported_api_versions(self, entry: ApiEntry, corr: int, ctx: RequestContext, version: int):
        log.warning("unsupported_api_version", api=entry.name, version=version, peer=ctx.peer,
                    listener=ctx.listener_name, answer="UNSUPPORTED_VERSION with v0 body (KIP-511)")
        body = ApiVersionsResponse(
            error_code=ErrorCode.UNSUPPORTED_VERSION,
            api_keys=[ApiVersion(api_key=entry.api_key, min_version=entry.min_version,
                                 max_version=entry.max_version)],
        )
        return [response_header(corr, 0), body.encode(0)]

    def _refuse(self, ctx: RequestContext, frame, key, version, reason: str):
        name = APIS[key].name if key in APIS else None
        log.warning("closing_connection", reason=reason, api_key=key, api=name, version=version,
                    peer=ctx.peer, listener=ctx.listener_name, client_id=peek_client_id(frame))
        raise CloseConnection(reason)
