"""OffsetFetch (key 9), versions 1-10.

Version notes: v1 reads `__consumer_offsets`; v2 takes null topics (every committed offset) and adds a group error
code; v3 throttle time; v5 the committed leader epoch; v6 flexible; v7 require_stable (a partition with a
transactional offset commit still pending then answers UNSTABLE_OFFSET_COMMIT, which clients retry, as Kafka); v8 several groups per request; v9 member id and epoch (the consumer
protocol's: a member of a consumer group must send its current epoch, else STALE_MEMBER_EPOCH, or
UNKNOWN_MEMBER_ID for a member the group lacks; ignored for classic groups); v10 names topics by id instead of
name (KIP-848), answered by id: an id the metadata does not know is UNKNOWN_TOPIC_ID for each of its partitions
(after the others), and an answer for every topic leaves out the committed offsets of topics that no longer exist
(they have no id to answer with), as Kafka does.  v0 (offsets in ZooKeeper) is not served, as in Kafka 4.

A partition without a committed offset answers offset -1 and empty metadata, no error, as Kafka. With an
authorizer: DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED) and on each topic (see `_fetch`).
"""

from __future__ import annotations

from kjbod.broker.authz import allowed
from kjbod.broker.groups.coordinator import coordinator_of
from kjbod.broker.router import api
from kjbod.metadata.acls import DESCRIBE, GROUP, TOPIC
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import OffsetFetchRequest, OffsetFetchResponse
from kjbod.protocol.generated import offset_fetch_response as r
from kjbod.protocol.generated.offset_fetch_request import OffsetFetchRequestTopics


def _fetch(node, group_id: str, topics, version: int, request=None, require_stable: bool = False,
           member: tuple[str | None, int] = (None, -1)):
    """(group error, [(topic, [(partition, offset, epoch, metadata, error)])]). With an authorizer, as Kafka: a
    topic named that the client may not DESCRIBE answers TOPIC_AUTHORIZATION_FAILED per partition, and one it may
    not describe is left out of an answer for every topic."""
    code, found = _committed(node, group_id, topics, version, require_stable, member)
    if code or request is None or getattr(node, "authorizer", None) is None:
        return code, found
    out = []
    for t, parts in found:
        if allowed(node, request, DESCRIBE, TOPIC, t):
            out.append((t, parts))
        elif topics is not None:
            out.append((t, [(p, -1, -1, "", ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p, *_ in parts]))
    return code, out


def _committed(node, group_id: str, topics, version: int, require_stable: bool = False,
               member: tuple[str | None, int] = (None, -1)):
    coordinator = coordinator_of(node)
    code = coordinator.status(group_id) if group_id else ErrorCode.INVALID_GROUP_ID
    if not code and group_id in coordinator.book.consumer_groups:  # v9: the member's epoch must be current
        code = coordinator.book.consumer.check_fetch(group_id, *member)
    elif not code and group_id in coordinator.streams_groups:  # so for a streams group's member (KIP-1071)
        code = coordinator.streams.check_fetch(group_id, *member)
    if code:
        return code, [(t.name, [(p, -1, -1, "", code) for p in t.partition_indexes]) for t in topics or ()]
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    found = coordinator.book.committed(group_id, wanted)
    pending = coordinator.book.pending_txn_partitions(group_id) if require_stable else set()
    by_topic: dict[str, list] = {}
    for (t, p), c in found.items():
        entry: tuple[int, int, int, str, int]
        if (t, p) in pending:
            entry = (p, -1, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT)
        else:
            entry = (p, -1, -1, "", 0) if c is None else (p, c.offset, c.leader_epoch if version >= 5 else -1,
                                                          c.metadata, 0)
        by_topic.setdefault(t, []).append(entry)
    return 0, list(by_topic.items())


def _by_name(node, topics):
    """v10: the request's topics by name (those whose id the metadata knows), and the unknown ids' entries."""
    if topics is None:
        return None, []
    image = node.metadata
    known, unknown = [], []
    for t in topics:
        found = image.topic_by_id(t.topic_id)
        if found is None:
            unknown.append(t)
        else:
            known.append(OffsetFetchRequestTopics(name=found.name, topic_id=t.topic_id,
                                                  partition_indexes=t.partition_indexes))
    return known, unknown


def _with_ids(node, answered, unknown_ids):
    """v10: each answered topic with its id (a topic without one, deleted since its offsets were committed, is left
    out), then UNKNOWN_TOPIC_ID for each partition of the ids the metadata does not know."""
    image = node.metadata
    out = []
    for t in answered:
        found = image.topic(t.name)
        if found is not None:
            t.topic_id = found.topic_id
            out.append(t)
    for t in unknown_ids:
        out.append(r.OffsetFetchResponseTopics(name="", topic_id=t.topic_id, partitions=[
            r.OffsetFetchResponsePartitions(partition_index=p, committed_offset=-1, metadata="",
                                            error_code=ErrorCode.UNKNOWN_TOPIC_ID) for p in t.partition_indexes]))
    return out


@api(OffsetFetchRequest)
def handle(node, request, body: OffsetFetchRequest) -> OffsetFetchResponse:
    v = request.api_version
    if v >= 8:
        groups = []
        for g in body.groups:
            if not allowed(node, request, DESCRIBE, GROUP, g.group_id):
                groups.append(r.OffsetFetchResponseGroup(group_id=g.group_id,
                                                         error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED))
                continue
            asked, unknown_ids = (g.topics, []) if v < 10 else _by_name(node, g.topics)
            code, topics = _fetch(node, g.group_id, asked, v, request, body.require_stable,
                                  (g.member_id, g.member_epoch) if v >= 9 else (None, -1))
            answered = [r.OffsetFetchResponseTopics(name=t, partitions=[
                r.OffsetFetchResponsePartitions(partition_index=p, committed_offset=o, committed_leader_epoch=e,
                                                metadata=m, error_code=c) for p, o, e, m, c in parts])
                for t, parts in topics]
            if v >= 10 and not code:
                answered = _with_ids(node, answered, unknown_ids)
            groups.append(r.OffsetFetchResponseGroup(group_id=g.group_id, error_code=code,
                                                     topics=[] if code else answered))
        return OffsetFetchResponse(groups=groups)
    if not allowed(node, request, DESCRIBE, GROUP, body.group_id):
        denied = ErrorCode.GROUP_AUTHORIZATION_FAILED  # v1 has no group error: each partition carries it
        return OffsetFetchResponse(error_code=denied, topics=[] if v >= 2 else [r.OffsetFetchResponseTopic(
            name=t.name, partitions=[r.OffsetFetchResponsePartition(
                partition_index=p, committed_offset=-1, metadata="", error_code=denied) for p in t.partition_indexes])
            for t in body.topics or ()])
    code, topics = _fetch(node, body.group_id, body.topics if v >= 2 else (body.topics or []), v, request,
                          v >= 7 and body.require_stable)
    if code and v >= 2:
        return OffsetFetchResponse(error_code=code)
    return OffsetFetchResponse(error_code=code, topics=[r.OffsetFetchResponseTopic(name=t, partitions=[
        r.OffsetFetchResponsePartition(partition_index=p, committed_offset=o, committed_leader_epoch=e, metadata=m,
                                       error_code=c) for p, o, e, m, c in parts]) for t, parts in topics])
