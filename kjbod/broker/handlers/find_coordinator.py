"""FindCoordinator (key 10), versions 0-6.

Version notes: v1 adds the key type and error messages; v3 is flexible; v4 batches keys (one result each); v6
adds share groups.  kjbod has no group or transaction coordinator yet (consumer groups are out of scope), so
group and transaction keys answer COORDINATOR_NOT_AVAILABLE: what Kafka answers while it cannot host the
coordinator (its internal topic missing or without a leader), which clients treat as retriable.  Share keys
answer INVALID_REQUEST, as from a Kafka broker without a share coordinator (and from any Kafka broker below v6),
and so does an unknown key type (Kafka's CoordinatorType.forId refuses it).  The API is served anyway because
librdkafka takes its presence as the sign that a broker understands lz4-compressed batches.

Clients retry that answer and then give up with an error of their own that does not say why (KafkaJS's consumer
crashes with "Failed to find group coordinator", and KafkaJS drops the message in the answer; the Java client
times out).  So the answer carries a message naming what is missing (v1 and later), and the server logs one
warning per connection and key type that names the client, the keys and the reason: the place a user looks next.
"""

from __future__ import annotations

import structlog

from kjbod.broker.router import api
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import FindCoordinatorRequest, FindCoordinatorResponse
from kjbod.protocol.generated.find_coordinator_response import Coordinator

log = structlog.get_logger("kjbod.find_coordinator")

# Kafka's CoordinatorType ids of the coordinators clients may wait for, and what kjbod lacks for each.
KEY_TYPES = {0: "group", 1: "transaction"}
REASONS = {
    "group": "consumer groups are not served by kjbod yet: consume with explicit partition assignment",
    "transaction": "transactions are not served by kjbod yet: produce without a transactional id",
}
SHARE = 2

# (connection id, key type) pairs already warned about.  Clients ask again every few hundred milliseconds on the
# same connection; one line per connection says it without flooding the log.  Bounded, oldest first out: a
# connection forgotten while it still asks is warned about once more, which is better than keeping every id.
_warned: dict[tuple[int, int], None] = {}
WARNED_LIMIT = 1024


def _warn_once(request, key_type: int, kind: str, reason: str, keys: list[str]) -> None:
    seen = (request.ctx.connection_id, key_type)
    if seen in _warned:
        return
    if len(_warned) >= WARNED_LIMIT:
        del _warned[next(iter(_warned))]
    _warned[seen] = None
    log.warning("coordinator_not_served", key_type=kind, keys=keys, reason=reason,
                answer="COORDINATOR_NOT_AVAILABLE", client_id=request.client_id, peer=request.ctx.peer)


@api(FindCoordinatorRequest)
def handle(node, request, body: FindCoordinatorRequest) -> FindCoordinatorResponse:
    kind = KEY_TYPES.get(body.key_type)
    if kind is not None:
        code, reason = ErrorCode.COORDINATOR_NOT_AVAILABLE, REASONS[kind]
        message = f"kjbod has no {kind} coordinator ({reason})"
        _warn_once(request, body.key_type, kind, reason,
                   list(body.coordinator_keys) if request.api_version >= 4 else [body.key])
    elif body.key_type == SHARE:
        code, message = ErrorCode.INVALID_REQUEST, "kjbod has no share coordinator (share groups are not served)"
    else:
        code, message = ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {body.key_type}"
    if request.api_version >= 4:
        return FindCoordinatorResponse(coordinators=[
            Coordinator(key=key, node_id=-1, host="", port=-1, error_code=code, error_message=message)
            for key in body.coordinator_keys])
    return FindCoordinatorResponse(error_code=code, error_message=message if request.api_version >= 1 else None,
                                   node_id=-1, host="", port=-1)
