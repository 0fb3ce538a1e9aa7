"""FindCoordinator (key 10), versions 0-6.

Version notes: v1 adds the key type and error messages; v3 is flexible; v4 batches keys (one result each); v6
adds share groups.  kjbod has no group or transaction coordinator yet (consumer groups are out of scope), so
group and transactional keys answer COORDINATOR_NOT_AVAILABLE with no node, as Kafka answers while the
partition of __consumer_offsets or __transaction_state that owns the key has no leader.  Clients treat that as
retriable, and some (aiokafka) retry without a limit: a user sees a client that waits and never says why.  So
kjbod logs a warning naming the key and what to do instead, once per connection and key (clients ask again
every 100 ms or so).  Share keys answer INVALID_REQUEST, Kafka's answer when share groups are not enabled (and
before v6 always), and so does a key type Kafka does not know.

The API is served anyway because librdkafka takes its presence as the sign that a broker understands
lz4-compressed batches.
"""

from __future__ import annotations

from collections import OrderedDict

import structlog

from kjbod.broker.router import api
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import FindCoordinatorRequest, FindCoordinatorResponse
from kjbod.protocol.generated.find_coordinator_response import Coordinator

log = structlog.get_logger("kjbod.find_coordinator")

GROUP, TRANSACTION, SHARE = 0, 1, 2
KEY_TYPE_NAMES = {GROUP: "GROUP", TRANSACTION: "TRANSACTION", SHARE: "SHARE"}
REASONS = {
    GROUP: "kjbod does not implement consumer groups yet: consume without a group id, with explicit "
           "partition assignment",
    TRANSACTION: "kjbod does not implement transactions yet: produce without a transactional id "
                 "(idempotent producers work)",
    SHARE: "kjbod does not implement share groups",
}

# (connection id, key type, key) already warned about; the oldest are forgotten past WARNED_MAX.
WARNED_MAX = 4096
_warned: OrderedDict[tuple[int, int, str], None] = OrderedDict()


def _answer(request, key_type: int, key: str) -> tuple[int, str]:
    """(error code, error message) for one key."""
    if key_type == SHARE:
        return ErrorCode.INVALID_REQUEST, REASONS[SHARE]
    if key_type not in REASONS:
        return ErrorCode.INVALID_REQUEST, f"Unknown coordinator type received: {key_type}"
    _warn_once(request, key_type, key)
    return ErrorCode.COORDINATOR_NOT_AVAILABLE, REASONS[key_type]


def _warn_once(request, key_type: int, key: str) -> None:
    seen = (request.ctx.connection_id, key_type, key)
    if seen in _warned:
        return
    _warned[seen] = None
    if len(_warned) > WARNED_MAX:
        _warned.popitem(last=False)
    log.warning("coordinator_not_available", key_type=KEY_TYPE_NAMES[key_type], key=key,
                client_id=request.client_id, peer=request.ctx.peer, reason=REASONS[key_type],
                answer="COORDINATOR_NOT_AVAILABLE")


@api(FindCoordinatorRequest)
def handle(node, request, body: FindCoordinatorRequest) -> FindCoordinatorResponse:
    version = request.api_version
    if version >= 4:
        coordinators = []
        for key in body.coordinator_keys:
            code, message = _answer(request, body.key_type, key)
            coordinators.append(Coordinator(key=key, node_id=-1, host="", port=-1, error_code=code,
                                            error_message=message))
        return FindCoordinatorResponse(coordinators=coordinators)
    code, message = _answer(request, body.key_type if version >= 1 else GROUP, body.key)
    return FindCoordinatorResponse(error_code=code, error_message=message if version >= 1 else None,
                                   node_id=-1, host="", port=-1)
