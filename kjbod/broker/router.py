"""Request routing: frame → header → API handler → response parts.

Strategy (franz-go's kfake shape): every API lives in one handler module under kjbod/broker/handlers that
registers itself once with `@api(RequestClass)`.  The registry built from those registrations is the single
truth for what this node serves: routing, listener checks and the ApiVersions answer all read it, so an API is
advertised exactly when a handler exists for it.

What closes a connection (as Kafka does, with a warning naming client, API and version): an unknown API key,
an API not served on this listener, a version outside the served range (except ApiVersions, answered per
KIP-511 with a v0 UNSUPPORTED_VERSION body listing its own range), and bytes that do not decode.  Domain
failures are the handlers' business: they answer with Kafka error codes inside the response.

Client quotas (kjbod.broker.client_quotas), once any exists: each client request on a broker listener is recorded
when its response is encoded (`_throttle`); over a quota, the response's ThrottleTimeMs is set and the
connection is muted for that long, as Kafka's KafkaApis and RequestHandlerHelper do.
"""

from __future__ import annotations

import asyncio
import inspect
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import structlog

from kjbod.broker.authz import CLUSTER_ACTION_APIS, allowed_cluster, cluster_operation_for
from kjbod.broker.client_quotas import NANOS_TO_PERCENT, user_of
from kjbod.metadata.acls import CLUSTER_ACTION, OPERATIONS
from kjbod.protocol.error_responses import error_response
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated.api_versions_response import ApiVersion, ApiVersionsResponse
from kjbod.protocol.generated.fetch_request import FetchRequest
from kjbod.protocol.generated.registry import APIS
from kjbod.protocol.headers import (
    API_VERSIONS_KEY,
    peek_api,
    peek_client_id,
    read_request_header,
    request_header_version,
    response_header,
    response_header_version,
)
from kjbod.protocol.runtime import DecodeError, EncodeError
from kjbod.wire.handler import CloseConnection, Later, RequestContext

log = structlog.get_logger("kjbod.router")

HandlerFn = Callable[[Any, "Request", Any], Any]

# APIs Kafka answers without asking the authorizer: the authorizer's readiness does not hold them back.
_NO_AUTHORIZATION = frozenset({18, 17, 36})  # ApiVersions, SaslHandshake, SaslAuthenticate


@dataclass(slots=True)
class Request:
    """One decoded request's envelope: who asked, which API version, and the header."""

    ctx: RequestContext
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str
    # Set when the client's requests count against client quotas (kjbod.broker.client_quotas): the request's
    # size in bytes and the handler's time on the event loop.
    quota: bool = False
    size: int = 0
    handler_ns: int = 0


@dataclass(frozen=True, slots=True)
class ApiEntry:
    api_key: int
    name: str
    request_cls: Any  # a generated request class
    response_cls: Any
    min_version: int
    max_version: int
    listeners: frozenset[str]
    fn: HandlerFn


_REGISTRY: dict[int, ApiEntry] = {}


def api(request_cls: Any, *, min_version: int | None = None, max_version: int | None = None,
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
        _API_VERSIONS.clear()
        return fn

    return register


def registry() -> dict[int, ApiEntry]:
    from kjbod.broker import handlers  # noqa: F401  (importing the package registers every handler)

    return _REGISTRY


# listener kind -> its ApiVersions entries; rebuilt after any registration (the registry is fixed once the
# handlers package is imported, so in a running node this is computed once per listener kind, as Kafka does).
_API_VERSIONS: dict[str, tuple[ApiVersion, ...]] = {}


def api_versions_for(listener_kind: str) -> list[ApiVersion]:
    """The ApiVersions entries for one listener kind, in api key order."""
    cached = _API_VERSIONS.get(listener_kind)
    if cached is None:
        cached = _API_VERSIONS[listener_kind] = tuple(
            ApiVersion(api_key=e.api_key, min_version=e.min_version, max_version=e.max_version)
            for e in sorted(registry().values(), key=lambda e: e.api_key) if listener_kind in e.listeners)
    return list(cached)


class _Route:
    """One served (API, version): what the per-request path needs, computed once."""

    __slots__ = ("cluster_op", "decode_from", "entry", "fn", "has_error_code", "header_version", "listeners",
                 "memoised", "response_cls", "response_header_v1", "version", "follower_fetch", "quota_exempt")

    def __init__(self, entry: ApiEntry, version: int):
        self.entry = entry
        self.version = version
        self.fn = entry.fn
        self.listeners = entry.listeners
        self.response_cls = entry.response_cls
        self.has_error_code = "error_code" in getattr(entry.response_cls, "__slots__", ())  # for the metrics
        # the cluster operation an authorizer must allow before the handler runs (inter-broker and cluster-wide
        # APIs), or None
        self.cluster_op = cluster_operation_for(entry.api_key)
        # Client quotas leave out what brokers send each other, and the connection's handshake (ApiVersions,
        # whose answers are memoised, and SASL).
        self.quota_exempt = entry.api_key in CLUSTER_ACTION_APIS or entry.api_key in _QUOTA_EXEMPT
        self.decode_from = entry.request_cls.decode_from
        self.header_version = request_header_version(entry.api_key, version)
        self.response_header_v1 = response_header_version(entry.api_key, version) == 1
        # ApiVersions answers depend only on the listener kind and the request's bytes (client software name
        # and version are validated, nothing else is read): Kafka computes them once per listener, and so do we,
        # by memoising the encoded body per listener kind and request bytes after the correlation id (the
        # router's ready answers).  Its response header is always v0, which the memo's replies rely on.
        # From v3 the request names the client's software, which client metrics subscriptions match on
        # (KIP-714): the handler notes it per connection, so those versions are not memoised.
        self.memoised = entry.api_key == API_VERSIONS_KEY and not self.response_header_v1 and version < 3
        # A replica fetcher's Fetch may be answered from its connection's last one: the module that does it (its
        # import here, once the handlers are imported, since they import this module), or None.
        from kjbod.broker.handlers import follower_fetch_fast

        self.follower_fetch: Any = follower_fetch_fast if (
            entry.api_key == FetchRequest.API_KEY and version >= follower_fetch_fast.MIN_VERSION) else None


_QUOTA_EXEMPT = frozenset({API_VERSIONS_KEY, 17, 36})  # ApiVersions, SaslHandshake, SaslAuthenticate
_PRODUCE_KEY = 0
_perf_ns = time.perf_counter_ns

_pack_corr = struct.Struct(">i").pack
_pack_corr_tags = struct.Struct(">iB").pack
_unpack_route_corr = struct.Struct(">ii").unpack_from
_route_id = struct.Struct(">hh")
_MEMO_LIMIT = 256


class Router:
    """Implements kjbod.server.handler.RequestHandler for one node.

    Per request, the common case is: one unpack of the first 8 bytes (api key and version read together as one
    int32, which indexes a table of served (API, version) routes, plus the correlation id), the header read
    in place, the body decoded by the generated codec, the handler, the response encoded behind a precomputed
    header. A replica fetcher's Fetch that repeats its connection's last one but for its offsets is answered
    before that, from the bytes (kjbod.broker.handlers.follower_fetch_fast, which learns the connection's fetch
    from each one decoded here).  Anything unusual (unknown key, wrong listener, version out of range, short
    frame) leaves the common case for `_route_slowly`, which applies the checks in the order Kafka does.
    """

    def __init__(self, node: Any):
        self.node = node
        self.quotas: Any = getattr(node, "client_quotas", None)  # kjbod.broker.client_quotas.ClientQuotas
        self.stats: Any = None  # kjbod.metrics' RequestStats when the node serves /metrics: error codes counted
        self.entries = registry()
        self._routes: dict[int, _Route] = {}
        for entry in self.entries.values():
            for version in range(entry.min_version, entry.max_version + 1):
                (route_id,) = struct.unpack(">i", _route_id.pack(entry.api_key, version))
                self._routes[route_id] = _Route(entry, version)
        # The memoised answers, by listener kind and route id: the connection looks them up before calling
        # handle() (ready_replies), and handle() itself before anything else.
        self._ready: dict[str, dict[int, dict[bytes, bytes]]] = {
            kind: {rid: {} for rid, route in self._routes.items() if route.memoised} for kind in ("broker", "controller")}
        # Per connection id, the shape of its last plain follower fetch (kjbod.broker.handlers.follower_fetch_fast).
        self.follower_fetch_shapes: dict[int, Any] = {}

    def forget_answers(self) -> None:
        """Drops the memoised answers (in place: connections share these dicts): what they say has changed (the
        finalized feature levels ApiVersions reports)."""
        for by_route in self._ready.values():
            for answers in by_route.values():
                answers.clear()

    def ready_replies(self, listener_kind: str) -> dict[int, dict[bytes, bytes]]:
        """The memoised answers for one listener kind (see kjbod.wire.handler): route id -> {request bytes after
        the correlation id -> response bytes after it}.  Filled as requests are answered; shared, not copied."""
        return self._ready[listener_kind]

    def handle(self, frame, ctx: RequestContext):
        try:
            route_id, corr = _unpack_route_corr(frame)
        except struct.error:
            route_id = corr = None  # too short for a header: _route_slowly refuses it
        answers = self._ready[ctx.listener_kind].get(route_id)  # type: ignore[arg-type]
        if answers is not None:
            if frame.__class__ is bytes:
                # Filled only after a request passed every check below on this listener kind, so a hit needs
                # none of them.
                body = answers.get(frame[8:])
                if body is not None:
                    return _pack_corr(corr) + body
            else:
                answers = None  # a big request arrives as a bytearray, which cannot key the memo
        route = self._routes.get(route_id)  # type: ignore[arg-type]
        if route is None or ctx.listener_kind not in route.listeners:
            route = self._route_slowly(frame, ctx)
            if route.__class__ is list:  # the KIP-511 answer
                return route
        version = route.version
        fast = route.follower_fetch
        if fast is not None:
            reply = fast.answer(self, route, frame, ctx, corr)
            if reply is not None:
                return reply
        try:
            client_id, pos = read_request_header(frame, route.header_version)
            # Bytes after the body are ignored, as Apache Kafka does (librdkafka's Metadata v13 requests end with
            # three of them); the generated decode() is strict, decode_from() lets the router choose.
            body_msg, _end = route.decode_from(frame, pos, version)
        except DecodeError as e:
            self._refuse(ctx, frame, route.entry.api_key, version, f"undecodable request: {e}")
        request = Request(ctx, route.entry.api_key, version, corr, client_id)
        authz = getattr(self.node, "authorizer", None)
        if authz is not None and not authz.ready and route.entry.api_key not in _NO_AUTHORIZATION \
                and ctx.principal not in authz.super_users:
            return self._not_ready(route, request, body_msg)
        if route.cluster_op is not None and authz is not None \
                and not allowed_cluster(self.node, request, route.cluster_op):
            return self._reply(route, request, error_response(
                route.entry.api_key, body_msg, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                f"{ctx.principal} may not {OPERATIONS[route.cluster_op]} the cluster"))
        if fast is not None and (getattr(self.node, "authorizer", None) is None
                                 or allowed_cluster(self.node, request, CLUSTER_ACTION)):
            fast.learn(self, route, frame, pos, body_msg, ctx)  # only a replica's connection is answered from bytes
        quotas = self.quotas
        if quotas is not None and (quotas.active if self.node.metadata.client_quotas is quotas.seen
                                   else quotas.sync()) \
                and not route.quota_exempt and ctx.listener_kind == "broker" \
                and not _from_follower(route, body_msg, version):
            request.quota = True
            request.size = len(frame)
            started = _perf_ns()
            result = route.fn(self.node, request, body_msg)
            request.handler_ns = _perf_ns() - started
        else:
            result = route.fn(self.node, request, body_msg)
        if result.__class__ is not route.response_cls:
            if result is None:  # no response on the wire (Produce with acks=0)
                if request.quota:
                    self._throttle(route, request, None)
                return None
            if result.__class__ is Later:  # answered by a callback (the dirs' workers): encoded in that callback
                return result.then(lambda response: None if response is None else self._reply(route, request, response))
            if isinstance(result, asyncio.Future):  # answered by callbacks (a dir's worker): no task for it
                return self._reply_later(route, request, result)
            if inspect.isawaitable(result):
                return self._finish_later(route, request, result)
        out = self._reply(route, request, result)
        if answers is not None and result.__class__ is route.response_cls:
            if len(answers) >= _MEMO_LIMIT:
                answers.clear()
            answers[frame[8:]] = b"".join(out[1:])
        return out

    def _not_ready(self, route: _Route, request: Request, body: Any) -> Any:
        """Kafka's answer before its StandardAuthorizer finished the initial ACL load (an early-start listener):
        the authorization fails with AuthorizerNotReadyException, which reaches the client as UNKNOWN_SERVER_ERROR
        (a retriable error). An API without a whole-request error answer closes the connection instead."""
        entry = route.entry
        log.warning("authorizer_not_ready", api=entry.name, version=request.api_version,
                    principal=request.ctx.principal, peer=request.ctx.peer, listener=request.ctx.listener_name)
        try:
            response = error_response(entry.api_key, body, ErrorCode.UNKNOWN_SERVER_ERROR,
                                      "the authorizer has not loaded the ACLs yet (AuthorizerNotReadyException)")
        except ValueError:
            raise CloseConnection(f"{entry.name}: the authorizer has not loaded the ACLs yet") from None
        return self._reply(route, request, response)

    def _route_slowly(self, frame, ctx: RequestContext):
        """The checks for anything off the common path, in Kafka's order; refuses, answers KIP-511, or returns
        the route (a served API and version on the right listener, reached here only via an odd frame)."""
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
        (route_id,) = struct.unpack(">i", _route_id.pack(key, version))
        return self._routes[route_id]

    def _reply_later(self, route: _Route, request: Request, pending: asyncio.Future) -> asyncio.Future:
        """The reply to ``pending``'s response, as a future completed by a callback when it is done."""
        out = pending.get_loop().create_future()

        def settle(done: asyncio.Future) -> None:
            if done.cancelled():
                out.cancel()
                return
            try:
                result = done.result()
                reply = None if result is None else self._reply(route, request, result)
            except BaseException as e:  # the handler's error or CloseConnection: the connection decides
                if not out.done():
                    out.set_exception(e)
                return
            if not out.done():  # else cancelled: the connection went away
                out.set_result(reply)

        pending.add_done_callback(settle)
        return out

    async def _finish_later(self, route: _Route, request: Request, pending: Awaitable):
        result = await pending
        if result is None:
            return None
        return self._reply(route, request, result)

    def _throttle(self, route: _Route, request: Request, response: Any) -> None:
        """Records the request against its client's quotas; when it is over one, sets the response's
        ThrottleTimeMs and mutes the connection that long (Kafka sends the response at once either way). A Fetch
        handler has recorded its bytes already (and answered empty when over): its throttle time is kept if
        longer. The request quota is not applied to a Produce with acks=0, as in Kafka."""
        quotas = self.quotas
        assert quotas is not None
        user = user_of(request.ctx.principal)
        client_id = request.client_id or ""
        now = quotas.clock_ms()
        byte_ms = request_ms = 0
        if route.entry.api_key == _PRODUCE_KEY and quotas.produce.active:
            byte_ms = quotas.produce.record(user, client_id, request.size, now)
        if quotas.request.active and response is not None:
            request_ms = quotas.request.record(user, client_id, request.handler_ns * NANOS_TO_PERCENT, now)
        if byte_ms > 0 and byte_ms >= request_ms:
            quotas.produce.throttled(user, client_id, byte_ms, now)
        elif request_ms > 0:
            quotas.request.throttled(user, client_id, request_ms, now)
        throttle = max(byte_ms, request_ms, getattr(response, "throttle_time_ms", 0) or 0)
        if throttle <= 0:
            return
        if response is not None and hasattr(response, "throttle_time_ms"):
            response.throttle_time_ms = throttle
        mute = request.ctx.mute
        if mute is not None:
            mute(throttle)

    def _reply(self, route: _Route, request: Request, response):
        if request.quota:
            self._throttle(route, request, response)
        corr = request.correlation_id
        if self.stats is not None and route.has_error_code:
            self.stats.error(route.entry.api_key, response.error_code)
        out = [_pack_corr_tags(corr, 0) if route.response_header_v1 else _pack_corr(corr)]
        try:
            response.encode_into(out, request.api_version)
        except EncodeError as e:
            # A handler produced a response that this version cannot carry: a bug, never the client's fault.
            entry = route.entry
            log.warning("response_encode_failed", api=entry.name, version=request.api_version,
                        client_id=request.client_id, peer=request.ctx.peer, error=str(e))
            raise CloseConnection(f"cannot encode {entry.name} v{request.api_version} response") from None
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

    def _refuse(self, ctx: RequestContext, frame, key, version, reason: str) -> NoReturn:
        name = APIS[key].name if key in APIS else None
        log.warning("closing_connection", reason=reason, api_key=key, api=name, version=version,
                    peer=ctx.peer, listener=ctx.listener_name, client_id=peek_client_id(frame))
        raise CloseConnection(reason)


def _from_follower(route: _Route, body: Any, version: int) -> bool:
    """A replica's Fetch: replication, never counted against client quotas."""
    if route.entry.api_key != FetchRequest.API_KEY:
        return False
    if version >= 15:
        return body.replica_state.replica_id >= 0
    return body.replica_id >= 0
