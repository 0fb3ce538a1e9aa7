"""FindCoordinator (key 10), versions 0-6.

Version notes: v1 adds the key type and error messages; v3 is flexible; v4 batches keys (one result each); v6
adds share groups.

Group keys (type 0) are answered by the group coordinator (kjbod.broker.groups): the first request creates
`__consumer_offsets` as Kafka does, and the answer names the broker leading the group's partition of it, or
COORDINATOR_NOT_AVAILABLE while the topic cannot be created (fewer live brokers than
offsets.topic.replication.factor) or the partition has no leader reachable on this listener.

Transaction keys (type 1) are answered by the transaction coordinator (kjbod.broker.txn) the same way: the first
request creates `__transaction_state` (transaction.state.log.* keys), and the answer names the broker leading the
id's partition of it.  With an authorizer, a key needs DESCRIBE on its group or transactional id (else
GROUP_AUTHORIZATION_FAILED or TRANSACTIONAL_ID_AUTHORIZATION_FAILED for that key), as in Kafka.

Share keys (type 2, v6 and later; KIP-932) are "group:topicId:partition" and answered by the share coordinator
(kjbod.broker.share.coordinator) the same way over `__share_group_state` (share.coordinator.state.topic.* keys);
a key of another shape answers INVALID_REQUEST, and so do share keys below v6 and an unknown key type (Kafka's
CoordinatorType.forId refuses it).

Clients retry COORDINATOR_NOT_AVAILABLE and then give up with an error of their own that does not say why
(KafkaJS drops the message in the answer; the Java client times out).  So the answer carries a message naming
what is missing (v1 and later), and the server logs one warning per connection and key type that names the
client, the keys and the reason: the place a user looks next.
"""

from __future__ import annotations

import re

import structlog

from kjbod.broker.authz import allowed, allowed_cluster
from kjbod.broker.groups.coordinator import OFFSETS_TOPIC, coordinator_of, partition_for
from kjbod.broker.router import api
from kjbod.broker.share.coordinator import SHARE_STATE_TOPIC
from kjbod.broker.share.coordinator import coordinator_of as share_coordinator_of
from kjbod.broker.txn.coordinator import TXN_TOPIC
from kjbod.broker.txn.coordinator import coordinator_of as txn_coordinator_of
from kjbod.metadata.acls import CLUSTER_ACTION, DESCRIBE, TRANSACTIONAL_ID
from kjbod.metadata.acls import GROUP as GROUP_RESOURCE
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import FindCoordinatorRequest, FindCoordinatorResponse
from kjbod.protocol.generated.find_coordinator_response import Coordinator
from kjbod.storage.ids import uuid_from_str

log = structlog.get_logger("kjbod.find_coordinator")

GROUP, TRANSACTION, SHARE = 0, 1, 2
LOAD_WAIT_S = 5.0  # how long a FindCoordinator naming this broker waits for the group's partition to load

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


def _group_coordinator(node, request, key: str, topic_problem: str | None, internal: str = OFFSETS_TOPIC
                       ) -> Coordinator:
    """The broker leading `key`'s partition of `internal` (the offsets or the transaction topic)."""
    if topic_problem is not None:
        return Coordinator(key=key, node_id=-1, host="", port=-1, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                           error_message=topic_problem)
    topic = node.metadata.topic(internal)
    p = partition_for(key, len(topic.partitions))
    leader = topic.partitions[p].leader
    for n in node.cluster_nodes(request.ctx.listener_name, controllers=False):
        if n.node_id == leader:
            return Coordinator(key=key, node_id=n.node_id, host=n.host, port=n.port, error_code=0,
                               error_message=None)
    return Coordinator(key=key, node_id=-1, host="", port=-1, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                       error_message=f"{internal}-{p} has no leader reachable on this listener yet")


@api(FindCoordinatorRequest)
async def handle(node, request, body: FindCoordinatorRequest) -> FindCoordinatorResponse:
    keys = list(body.coordinator_keys) if request.api_version >= 4 else [body.key]
    resource = {GROUP: (GROUP_RESOURCE, "group", ErrorCode.GROUP_AUTHORIZATION_FAILED),
                TRANSACTION: (TRANSACTIONAL_ID, "transactional id",
                              ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)}.get(body.key_type)
    denied = [k for k in keys if not allowed(node, request, DESCRIBE, resource[0], k)] if (
        resource is not None and getattr(node, "authorizer", None) is not None) else []
    if denied:  # as Kafka: refused keys answered GROUP_ or TRANSACTIONAL_ID_AUTHORIZATION_FAILED, the others served
        assert resource is not None
        keys = [k for k in keys if k not in denied]
        refused = [Coordinator(key=k, node_id=-1, host="", port=-1, error_code=resource[2],
                               error_message=f"{request.ctx.principal} may not DESCRIBE {resource[1]} {k}")
                   for k in denied]
        if not keys:
            return _answer(request, refused)
    if body.key_type == GROUP:
        code, problem = await coordinator_of(node).ensure_topic()
        if code:
            problem = problem or f"{OFFSETS_TOPIC} does not exist yet"
            _warn_once(request, body.key_type, "group", problem, keys)
        answers = [_group_coordinator(node, request, key, problem if code else None) for key in keys]
        for a in answers:
            if a.node_id == node.node_id:
                await coordinator_of(node).wait_loaded(a.key, LOAD_WAIT_S)
    elif body.key_type == TRANSACTION:
        txns = txn_coordinator_of(node)
        code, problem = await txns.ensure_topic()
        if code:
            problem = problem or f"{TXN_TOPIC} does not exist yet"
            _warn_once(request, body.key_type, "transaction", problem, keys)
        answers = [_group_coordinator(node, request, key, problem if code else None, TXN_TOPIC) for key in keys]
        for a in answers:
            if a.node_id == node.node_id:
                await txns.wait_loaded(a.key, LOAD_WAIT_S)
    elif body.key_type == SHARE and request.api_version >= 6:
        answers = await _share_coordinators(node, request, keys)
    else:
        if body.key_type == SHARE:
            code, message = ErrorCode.INVALID_REQUEST, "share keys need FindCoordinator v6 or later"
        else:
            code, message = ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {body.key_type}"
        answers = [Coordinator(key=key, node_id=-1, host="", port=-1, error_code=code, error_message=message)
                   for key in keys]
    if denied:
        answers += refused
    return _answer(request, answers)


def share_key_problem(key: str) -> str | None:
    """Why `key` is not a share-partition key, or None.  Kafka's form: "group:topicId:partition", read from the
    right (a group id may hold colons), the group id not blank, the topic id a Kafka Uuid, the partition an int32."""
    parts = key.rsplit(":", 2)
    if len(parts) != 3:
        return f"share key {key!r} is not groupId:topicId:partition"
    group, topic, partition = parts
    if not group.strip():
        return f"share key {key!r} has an empty group id"
    try:
        uuid_from_str(topic)
    except ValueError:
        return f"share key {key!r} has an invalid topic id {topic!r}"
    if re.fullmatch(r"[+-]?[0-9]+", partition) is None or not -(1 << 31) <= int(partition) < 1 << 31:
        return f"share key {key!r} has an invalid partition {partition!r}"
    return None


async def _share_coordinators(node, request, keys: list[str]) -> list[Coordinator]:
    """Share keys (type 2, v6): the broker leading the key's partition of `__share_group_state`, the topic made
    on first use.  Brokers ask this (their persister): with an authorizer it needs CLUSTER_ACTION, as Kafka's."""
    if getattr(node, "authorizer", None) is not None and not allowed_cluster(node, request, CLUSTER_ACTION):
        return [Coordinator(key=k, node_id=-1, host="", port=-1, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                            error_message=f"{request.ctx.principal} may not CLUSTER_ACTION the cluster")
                for k in keys]
    bad = {k: why for k in keys if (why := share_key_problem(k)) is not None}
    code: int = ErrorCode.NONE
    problem: str | None = None
    if len(bad) == len(keys):  # nothing to look up: the topic is not made for malformed keys
        return [Coordinator(key=k, node_id=-1, host="", port=-1, error_code=ErrorCode.INVALID_REQUEST,
                            error_message=bad[k]) for k in keys]
    shares = share_coordinator_of(node)
    if len(bad) < len(keys):
        code, problem = await shares.ensure_topic()
        if code:
            problem = problem or f"{SHARE_STATE_TOPIC} does not exist yet"
            _warn_once(request, SHARE, "share", problem, [k for k in keys if k not in bad])
    answers = []
    for key in keys:
        if key in bad:
            answers.append(Coordinator(key=key, node_id=-1, host="", port=-1, error_code=ErrorCode.INVALID_REQUEST,
                                       error_message=bad[key]))
            continue
        a = _group_coordinator(node, request, key, problem if code else None, SHARE_STATE_TOPIC)
        if a.node_id == node.node_id:
            await shares.wait_loaded(key, LOAD_WAIT_S)
        answers.append(a)
    return answers


def _answer(request, answers: list[Coordinator]) -> FindCoordinatorResponse:
    if request.api_version >= 4:
        return FindCoordinatorResponse(coordinators=answers)
    a = answers[0]
    return FindCoordinatorResponse(error_code=a.error_code,
                                   error_message=a.error_message if request.api_version >= 1 else None,
                                   node_id=a.node_id, host=a.host, port=a.port)
