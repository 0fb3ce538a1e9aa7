"""ShareFetch (key 78), versions 1-2 (KIP-932).

Version notes: v1 is the first Kafka serves (MaxRecords, BatchSize, AcquisitionLockTimeoutMs); v2 (KIP-1222)
adds IsRenewAck (the acknowledgements may hold Renew, type 4, which restarts a record's acquisition lock; such a
request must set MaxBytes, MinBytes, MaxRecords and MaxWaitMs to 0 and fetches nothing) and ShareAcquireMode
(0 whole batches, the last one possibly past MaxRecords; 1 never past MaxRecords, the last batch split).

As Kafka's KafkaApis.handleShareFetchRequest: a null group id or a member id that is empty or over 36 characters is
INVALID_REQUEST; READ on the group is needed (GROUP_AUTHORIZATION_FAILED) and READ on each topic
(TOPIC_AUTHORIZATION_FAILED for its partitions); the share session comes next (kjbod.broker.share.sessions:
SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_LIMIT_REACHED, answered after MaxWaitMs as
Kafka's idle wait does, INVALID_REQUEST for acknowledgements in a request that opens a session), all answered
at the top.  The acknowledgements are applied first (each partition's outcome in AcknowledgeErrorCode), then
records are acquired for every partition of the session: at most MaxRecords in all (whole batches), MaxBytes of
batches (the first always whole).  A partition this node does not lead answers NOT_LEADER_OR_FOLLOWER with the
leader it knows (CurrentLeader, NodeEndpoints); an unknown topic id UNKNOWN_TOPIC_ID.  As Kafka's
DelayedShareFetch, records are acquired once MinBytes of batches are available past the partitions' next fetch
offsets (0 answers at once); until then the request waits, up to MaxWaitMs, for an append, a high watermark move or
an acquisition lock running out (Fetch's parked-fetch machinery).  Epoch -1 closes the session after the acknowledgements and fetches nothing:
the member's other acquired records are released.  The member is not checked with the group coordinator, as in
Kafka.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from kjbod.broker.authz import allowed
from kjbod.broker.handlers.leader_epoch_check import checked_log
from kjbod.broker.router import api
from kjbod.broker.share.fetch import (
    FENCED,
    Batch,
    ShareLeader,
    error_of,
    mark_aborted,
    on_dir,
    parse_batches,
    share_leader_of,
)
from kjbod.broker.share.partition import AckBatch
from kjbod.broker.share.sessions import FINAL_EPOCH, SessionError
from kjbod.metadata.acls import GROUP, READ, TOPIC
from kjbod.net.tasks import wait_event
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import ShareFetchRequest, ShareFetchResponse
from kjbod.protocol.generated.share_fetch_response import (
    AcquiredRecords,
    LeaderIdAndEpoch,
    NodeEndpoint,
    PartitionData,
    ShareFetchableTopicResponse,
)

MAX_MEMBER_ID = 36
RECORD_LIMIT = 1  # ShareAcquireMode: never acquire past MaxRecords


def member_id_valid(member_id: str | None) -> bool:
    return bool(member_id) and len(member_id or "") <= MAX_MEMBER_ID


@dataclass
class Target:
    """One partition of a request, resolved: its topic name (None: unknown id) or the error it answers."""
    topic_id: UUID
    partition: int
    name: str | None
    error: int = 0
    message: str | None = None
    plog: Any = None
    leader_epoch: int = -1
    acks: list[AckBatch] = field(default_factory=list)


def resolve(node: Any, request: Any, topic_id: UUID, partition: int, denied: dict[UUID, bool]) -> Target:
    """The partition's log if this node leads it, else the error it answers (UNKNOWN_TOPIC_ID,
    TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR)."""
    topic = node.metadata.topic_by_id(topic_id)
    if topic is None:
        return Target(topic_id, partition, None, ErrorCode.UNKNOWN_TOPIC_ID)
    if topic_id not in denied:
        denied[topic_id] = not allowed(node, request, READ, TOPIC, topic.name)
    if denied[topic_id]:
        return Target(topic_id, partition, topic.name, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    info = topic.partitions.get(partition)
    if info is None:
        return Target(topic_id, partition, topic.name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    try:
        plog = checked_log(node, topic.name, partition, -1)
    except Exception as e:
        return Target(topic_id, partition, topic.name, getattr(e, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR),
                      str(e) or None)
    if not plog.io.online:
        return Target(topic_id, partition, topic.name, ErrorCode.KAFKA_STORAGE_ERROR, f"{plog.name}: log dir offline")
    return Target(topic_id, partition, topic.name, plog=plog, leader_epoch=info.leader_epoch)


def leader_of(node: Any, t: Target, listener: str, endpoints: dict[int, Any], endpoint_type: Any) -> Any:
    """CurrentLeader for a NOT_LEADER_OR_FOLLOWER answer (KIP-951), adding the leader's endpoint on the request's
    listener to `endpoints`; None for none."""
    if t.error not in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH) or t.name is None:
        return None
    topic = node.metadata.topic(t.name)
    info = topic.partitions.get(t.partition) if topic is not None else None
    if info is None:
        return None
    broker = node.metadata.brokers.get(info.leader)
    if broker is not None and not broker.fenced and (e := broker.endpoint(listener)) is not None:
        endpoints[info.leader] = endpoint_type(node_id=info.leader, host=e.host, port=e.port, rack=broker.rack)
    return (info.leader, info.leader_epoch)


async def acknowledge(leader: ShareLeader, group_id: str, member_id: str, t: Target, *, renew: bool
                      ) -> tuple[int, str | None]:
    """One partition's acknowledgements applied and persisted: (error code, message)."""
    if t.error:
        return t.error, t.message
    try:
        sp = await leader.partition(group_id, t.topic_id, t.partition, t.plog, t.leader_epoch)
        sp.expire_locks(time.monotonic())
        enabled = bool(leader.settings(group_id)["share.renew.acknowledge.enable"])
        undo = sp.acknowledge(member_id, t.acks, time.monotonic(), renew_allowed=renew, renew_enabled=enabled,
                              hold=True)
    except Exception as e:  # a refusal, or a persister or log dir failure: this partition's error code
        return error_of(e)
    if not undo.before:  # renewals only: nothing to write, as Kafka's
        return 0, None
    code, message = await leader.persist(group_id, t.topic_id, t.partition, sp, t.leader_epoch)
    if code:  # as Kafka's: the transitions are rolled back and the acknowledgement answers the write's error
        sp.rollback(undo, time.monotonic())
        return code, message
    sp.confirm(undo)
    return 0, None


def ack_batches(batches: Any) -> list[AckBatch]:
    return [AckBatch(b.first_offset, b.last_offset, tuple(b.acknowledge_types)) for b in batches]


@dataclass
class Acquired:
    records: bytes = b""
    ranges: list[tuple[int, int, int]] = field(default_factory=list)
    error: int = 0
    message: str | None = None


@dataclass
class Available:
    """What one partition's read found past its next fetch offset (or the error it answers)."""
    sp: Any = None
    data: bytes = b""
    batches: list = field(default_factory=list)
    changed: bool = False
    error: int = 0
    message: str | None = None
    offset: int | None = None  # where the read began


async def read_available(leader: ShareLeader, group_id: str, t: Target, max_bytes: int) -> Available:
    """Read, on the partition's log dir worker, the batches from the share-partition's next fetch offset up to
    the high watermark (the last stable offset under read_committed), at most `max_bytes` (one batch always)."""
    if t.error:
        return Available(error=t.error, message=t.message)
    plog = t.plog
    try:
        sp = await leader.partition(group_id, t.topic_id, t.partition, plog, t.leader_epoch)
    except Exception as e:  # a refusal, or a persister or log dir failure: this partition's error code
        code, message = error_of(e)
        return Available(error=code, message=message)
    changed = sp.expire_locks(time.monotonic())
    changed |= sp.update_log_start(plog.log_start_offset)
    committed = leader.settings(group_id)["share.isolation.level"] == "read_committed"
    offset = sp.next_fetch_offset()
    if offset == sp.end_offset and sp.in_flight() >= sp.max_record_locks:
        return Available(sp, changed=changed)  # nothing may be acquired until some in-flight records are done

    def read() -> tuple[bytes, list[tuple[int, int]]]:
        if committed:
            plog.ensure_producer_state()
        limit = plog.last_stable_offset if committed else plog.high_watermark
        if offset >= limit or offset < plog.log_start_offset:
            return b"", []
        data = plog.read_bytes(offset, max(max_bytes, 1), max_offset=limit)
        return data, plog.aborted_transactions(offset, limit) if committed else []

    try:
        data, aborted = await on_dir(leader.node, plog, read)
    except Exception as e:
        code, message = error_of(e)
        return Available(error=code, message=message)
    batches = parse_batches(data)
    if aborted:
        mark_aborted(data, batches, aborted)
    return Available(sp, data, batches, changed, offset=offset)


async def acquire(leader: ShareLeader, group_id: str, member_id: str, t: Target, found: Available,
                  max_records: int, max_bytes: int, record_limit: bool = False) -> Acquired:
    """Acquire for the member what `found` holds, within `max_records` and `max_bytes` (the first batch always):
    the batches holding the records acquired, and their ranges."""
    if found.error:
        return Acquired(error=found.error, message=found.message)
    sp = found.sp
    budget, size = max_bytes, 0
    offered: list[Batch] = []
    for b in found.batches:
        if offered and size + (b.end - b.start) > budget and not b.aborted:
            break
        offered.append(b)
        size += 0 if b.aborted else b.end - b.start
    ranges = sp.acquire(member_id, [(b.base, b.last, b.aborted) for b in offered], max_records, time.monotonic(),
                        read_from=found.offset, record_limit=record_limit)
    if found.changed or any(b.aborted for b in offered):
        code, message = await leader.persist(group_id, t.topic_id, t.partition, sp, t.leader_epoch)
        if code in FENCED:  # the share-partition was dropped: what it acquired is not this leader's to hand out
            return Acquired(error=code, message=message)
    if not ranges:
        return Acquired()
    first, last = ranges[0][0], ranges[-1][1]
    data = found.data
    parts = [data[b.start:b.end] for b in offered if b.last >= first and b.base <= last and not b.aborted]
    return Acquired(b"".join(parts), ranges)


def next_lock_deadline(leader: ShareLeader, group_id: str, targets: list[Target]) -> float | None:
    deadlines = []
    for t in targets:
        held = leader.partitions.get((group_id, t.topic_id, t.partition))
        if held is not None and (d := held[1].next_deadline()) is not None:
            deadlines.append(d)
    return min(deadlines) if deadlines else None


@api(ShareFetchRequest)
async def handle(node: Any, request: Any, body: ShareFetchRequest) -> ShareFetchResponse:
    version = request.api_version
    leader = share_leader_of(node)
    leader.prune()
    group_id, member_id, epoch = body.group_id, body.member_id, body.share_session_epoch
    if group_id is None:
        return ShareFetchResponse(error_code=ErrorCode.INVALID_REQUEST, error_message="Invalid group id in the request.")
    if not allowed(node, request, READ, GROUP, group_id):
        return ShareFetchResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if not member_id_valid(member_id):
        return ShareFetchResponse(error_code=ErrorCode.INVALID_REQUEST,
                                  error_message="Invalid member id in the request.")
    assert member_id is not None
    renew = version >= 2 and body.is_renew_ack
    if renew:
        nonzero = [n for n, v in (("maxBytes", body.max_bytes), ("minBytes", body.min_bytes),
                                  ("maxRecords", body.max_records), ("maxWaitMs", body.max_wait_ms)) if v != 0]
        if nonzero:
            return ShareFetchResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=(
                ", ".join(f"{n} must be set to 0" for n in nonzero) + " if isRenewAck is true."))
    acknowledging = any(p.acknowledgement_batches for t in body.topics for p in t.partitions)
    asked = [(t.topic_id, p.partition_index) for t in body.topics for p in t.partitions]
    forgotten = [(t.topic_id, p) for t in body.forgotten_topics_data for p in t.partitions]
    ctx = getattr(request, "ctx", None)
    try:
        session = leader.sessions.for_fetch(group_id, member_id, epoch, asked, forgotten,
                                            ctx.connection_id if ctx is not None else 0, acknowledging=acknowledging)
    except SessionError as e:
        if e.code == ErrorCode.SHARE_SESSION_LIMIT_REACHED and body.max_wait_ms > 0:
            await asyncio.sleep(body.max_wait_ms / 1000)  # Kafka answers it after the request's wait
        return ShareFetchResponse(error_code=e.code, error_message=e.message)
    settings = leader.settings(group_id)
    lock_ms = int(settings["share.record.lock.duration.ms"])
    denied: dict[UUID, bool] = {}
    answers: dict[tuple[UUID, int], PartitionData] = {}
    # acknowledgements first
    for ft in body.topics:
        for p in ft.partitions:
            if not p.acknowledgement_batches:
                continue
            target = resolve(node, request, ft.topic_id, p.partition_index, denied)
            target.acks = ack_batches(p.acknowledgement_batches)
            code, message = await acknowledge(leader, group_id, member_id, target, renew=renew)
            answers[(ft.topic_id, p.partition_index)] = PartitionData(
                partition_index=p.partition_index, acknowledge_error_code=code, acknowledge_error_message=message,
                records=b"")
    # then acquisition, for every partition of the session
    targets = [] if epoch == FINAL_EPOCH or renew else [
        resolve(node, request, tid, p, denied) for tid, p in session.partitions]
    wait_until = time.monotonic() + max(body.max_wait_ms, 0) / 1000
    parked = node.parked_fetches
    keys = [(t.name, t.partition) for t in targets if t.name is not None and not t.error]
    results: dict[tuple[UUID, int], Acquired] = {}
    while True:
        # As Kafka's DelayedShareFetch: answer once MinBytes are available past the partitions' next fetch
        # offsets (or an error, or MaxWaitMs), then acquire.
        found = {(t.topic_id, t.partition): await read_available(leader, group_id, t, body.max_bytes)
                 for t in targets}
        now = time.monotonic()
        if (any(f.error for f in found.values()) or sum(len(f.data) for f in found.values()) >= body.min_bytes
                or now >= wait_until or not keys):
            break
        arrived = asyncio.Event()
        wake = arrived.set
        parked.park(keys, wake, follower=False)
        try:
            lock_deadline = next_lock_deadline(leader, group_id, targets)
            until = wait_until if lock_deadline is None else min(wait_until, lock_deadline + 0.001)
            await wait_event(arrived, max(until - now, 0))
        finally:
            parked.unpark(keys, wake, follower=False)
    remaining_records, remaining_bytes = body.max_records, body.max_bytes
    record_limit = version >= 2 and body.share_acquire_mode == RECORD_LIMIT
    got_any = False
    for t in targets:
        key = (t.topic_id, t.partition)
        if got_any and (remaining_records <= 0 or remaining_bytes <= 0) and not found[key].error:
            # MaxRecords or MaxBytes reached (the first partition with records always gets a batch); what the
            # read changed (locks run out, a moved log start) is written all the same
            if found[key].changed:
                await leader.persist(group_id, t.topic_id, t.partition, found[key].sp, t.leader_epoch)
            continue
        got = await acquire(leader, group_id, member_id, t, found[key], max(remaining_records, 0),
                            remaining_bytes if not got_any else max(remaining_bytes, 0), record_limit)
        results[key] = got
        if got.ranges:
            got_any = True
            remaining_records -= sum(last - first + 1 for first, last, _c in got.ranges)
            remaining_bytes -= len(got.records)
    endpoints: dict[int, NodeEndpoint] = {}
    listener = ctx.listener_name if ctx is not None else ""
    for t in targets:
        key = (t.topic_id, t.partition)
        got = results.get(key, Acquired())
        part = answers.get(key) or PartitionData(partition_index=t.partition, records=b"")
        answers[key] = part
        part.error_code, part.error_message = got.error, got.message
        part.records = got.records
        part.acquired_records = [AcquiredRecords(first_offset=f, last_offset=la, delivery_count=c)
                                 for f, la, c in got.ranges]
        if got.error:
            t.error = got.error
            current = leader_of(node, t, listener, endpoints, NodeEndpoint)
            if current is not None:
                part.current_leader = LeaderIdAndEpoch(leader_id=current[0], leader_epoch=current[1])
    if epoch == FINAL_EPOCH:
        await leader.close_session(group_id, member_id)
    by_topic: dict[UUID, list[PartitionData]] = {}
    for (tid, _p), part in answers.items():
        by_topic.setdefault(tid, []).append(part)
    return ShareFetchResponse(
        acquisition_lock_timeout_ms=lock_ms, node_endpoints=list(endpoints.values()),
        responses=[ShareFetchableTopicResponse(topic_id=tid, partitions=parts) for tid, parts in by_topic.items()])
