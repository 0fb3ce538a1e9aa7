"""ListOffsets (key 2), versions 1-11.

Version notes: v1 single offset per partition; v2 isolation level and throttle time; v4 leader epochs; v5 may
answer OFFSET_NOT_AVAILABLE; v6 flexible; v7 timestamp -3 (MAX_TIMESTAMP); v8 -4 (EARLIEST_LOCAL); v9 -5
(LATEST_TIERED); v10 timeout_ms (kjbod: how long a timestamp lookup may wait for its log dir; then
REQUEST_TIMED_OUT for that partition); v11 -6 (EARLIEST_PENDING_UPLOAD, KIP-1023).

Replica ids, as Kafka: -1 (a consumer) reads the leader, and latest is the high watermark; -2 (a debugging
client: `kjbod log-dirs describe`) may read any local replica, a follower's too; any replica id but -1 gets the
log end offset for latest.

Special timestamps: -1 latest (the high watermark, which equals the log end on a single node), -2 earliest
(log start offset), -3 the record with the largest timestamp, -4 earliest local (= earliest: no tiered
storage), -5 latest tiered (offset -1: nothing is tiered).  Any other timestamp finds the first offset whose
timestamp is at least that, through the .timeindex; none → offset -1.  -6 earliest pending upload (the first
offset not yet copied to tiered storage) answers offset -1 and leader epoch -1, as Kafka's broker does for a
topic without remote storage (kjbod has none).  A special timestamp asked for below the version that introduced
it, or a negative timestamp Kafka does not define (-7 and below), is UNSUPPORTED_VERSION for that partition,
checked before the partition is looked up, as Kafka's ReplicaManager does.  As Kafka, -3 and timestamp lookups answer
only below the last fetchable offset (a consumer's high watermark, the log end for others): a record found past
it answers offset -1, so a consumer is never pointed at a record that is not committed.  While a new leader's high
watermark is below the offset its epoch started at, a consumer's latest offset, and a lookup that finds nothing
below the high watermark, answer OFFSET_NOT_AVAILABLE (LEADER_NOT_AVAILABLE before v5), as Kafka: the client
retries rather than see the high watermark go back.

A read_committed consumer's (v2+ isolation level 1) latest is the last stable offset, and its lookups stop
there; a log whose producer state a restart left unloaded has it loaded on its dir's worker first, so the answer
never passes a transaction that was open before the restart.

An isolation level other than 0 and 1 (v2+) in a request naming some topic makes Kafka's
ListOffsetsRequest.isolationLevel throw: its error response, every partition named UNKNOWN_SERVER_ERROR.

Bad input, as Kafka's ReplicaManager.fetchOffset: a partition named twice is answered once, INVALID_REQUEST; a
CurrentLeaderEpoch (v4+) older than this broker's is FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH (checked
before leadership: kjbod.broker.handlers.leader_epoch_check).
"""

from __future__ import annotations

import structlog

from kjbod.broker.authz import allowed
from kjbod.broker.dir_work import DirWork
from kjbod.broker.handlers.leader_epoch_check import checked_log
from kjbod.broker.router import api
from kjbod.metadata.acls import DESCRIBE, TOPIC
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import ListOffsetsRequest, ListOffsetsResponse
from kjbod.protocol.generated.list_offsets_response import ListOffsetsPartitionResponse as PartResp
from kjbod.protocol.generated.list_offsets_response import ListOffsetsTopicResponse as TopicResp

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
EARLIEST_PENDING_UPLOAD = -6
# The version each special timestamp needs (Kafka's table); a negative timestamp not listed is never valid.
TIMESTAMP_MIN_VERSION = {LATEST: 1, EARLIEST: 1, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9,
                         EARLIEST_PENDING_UPLOAD: 11}
CONSUMER, DEBUGGING = -1, -2
ISOLATION_LEVELS = (0, 1)

log = structlog.get_logger("kjbod.list_offsets")


# A timestamp lookup reads the partition's time index and batch headers on its dir's worker: a request without
# its own timeout_ms (before v10, or 0) waits for a dir no longer than a client's default request.timeout.ms.
DEFAULT_DISK_WAIT_S = 30.0


def _lookup(node, topic: str, partition: int, ts: int, version: int, replica_id: int = CONSUMER,
            current_leader_epoch: int = -1, committed: bool = False):
    """The answer when memory has it; otherwise the partition's log, whose dir's worker searches it."""
    # Leader epochs exist on the wire from v4; below that the field must stay at its default.
    epoch = 0 if version >= 4 else -1
    try:
        plog = checked_log(node, topic, partition, current_leader_epoch, leader_only=replica_id != DEBUGGING)
        if not plog.online:
            # The offsets below are in memory and would still answer; a partition whose log dir failed (or whose
            # log is closed: deleted, or moved away while the image still has it) must not look healthy, as Fetch
            # and Produce do not either. The codes are Kafka's ReplicaManager.getPartitionOrError's.
            t = node.metadata.topic(topic)
            code = (ErrorCode.KAFKA_STORAGE_ERROR if not plog.io.online
                    else ErrorCode.NOT_LEADER_OR_FOLLOWER if t is not None and partition in t.partitions
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            return PartResp(partition_index=partition, error_code=code)
        if ts == LATEST:
            if replica_id == CONSUMER and (lagging := offsets_not_available(node, topic, partition, plog, version)):
                return PartResp(partition_index=partition, error_code=lagging)
            if committed and replica_id == CONSUMER and not plog.producer_state_ready:
                return plog  # its open transactions are not known yet: its dir's worker loads them first
            end = last_fetchable_offset(plog, replica_id, committed)
            return PartResp(partition_index=partition, timestamp=-1, offset=end, leader_epoch=epoch)
        if ts in (EARLIEST, EARLIEST_LOCAL):
            return PartResp(partition_index=partition, timestamp=-1, offset=plog.log_start_offset, leader_epoch=epoch)
        if ts in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
            # Nothing is tiered: Kafka's answer without remote storage.  A consumer still hears that a new
            # leader's offsets are not available yet, as for any lookup that is not latest or earliest.
            if replica_id == CONSUMER and (lagging := offsets_not_available(node, topic, partition, plog, version)):
                return PartResp(partition_index=partition, error_code=lagging)
            return PartResp(partition_index=partition, timestamp=-1, offset=-1, leader_epoch=-1)
        if ts < 0 and ts != MAX_TIMESTAMP:
            return PartResp(partition_index=partition, error_code=ErrorCode.INVALID_REQUEST)
    except Exception as e:
        return PartResp(partition_index=partition, error_code=getattr(e, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR))
    return plog


LSO_AFTER_LOAD = -7  # a lookup's limit: the last stable offset, once the log's producer state is loaded


def last_fetchable_offset(plog, replica_id: int, committed: bool = False) -> int:
    """Where a lookup's answer must stop, as Kafka's Partition.fetchOffsetForTimestamp: a read_committed
    consumer's at the last stable offset, a read_uncommitted consumer's at the high watermark, anyone else's at
    the log end.  A log whose producer state is not loaded yet (nothing appended or read read_committed since a
    restart) does not know its open transactions, so its last stable offset is known only once its dir's worker
    has loaded them (LSO_AFTER_LOAD): answering the high watermark would send a consumer past an open
    transaction."""
    if replica_id != CONSUMER:
        return plog.log_end_offset
    if not committed:
        return plog.high_watermark
    return plog.last_stable_offset if plog.producer_state_ready else LSO_AFTER_LOAD


def offsets_not_available(node, topic: str, partition: int, plog, version: int) -> int:
    """Kafka's answer to a consumer while a new leader's high watermark is still below the offset its leader
    epoch started at (the followers have not confirmed what the last leader had, so the HW could look as if it
    went back): OFFSET_NOT_AVAILABLE (LEADER_NOT_AVAILABLE before v5), else 0."""
    manager = getattr(node, "replication", None)
    state = manager.states.get((topic, partition)) if manager is not None else None
    if state is None or state.role != "leader" or state.leader_epoch_start_offset <= plog.high_watermark:
        return 0
    return ErrorCode.OFFSET_NOT_AVAILABLE if version >= 5 else ErrorCode.LEADER_NOT_AVAILABLE


def _search(items, version: int) -> list[PartResp]:
    """On the dir's worker: the timestamp lookups of its partitions. A record found at or past the last
    fetchable offset (taken when the request came) answers offset -1, as Kafka: a consumer is never sent to a
    record that is not committed yet, and may still be truncated away."""
    epoch = 0 if version >= 4 else -1
    out = []
    for _parts, _slot, partition, ts, plog, limit, not_available in items:
        try:
            if limit == LSO_AFTER_LOAD:
                plog.ensure_producer_state()
                limit = plog.last_stable_offset
            if ts == LATEST:  # a read_committed consumer's, held back for the load above
                out.append(PartResp(partition_index=partition, timestamp=-1, offset=limit, leader_epoch=epoch))
                continue
            found = plog.max_timestamp_offset() if ts == MAX_TIMESTAMP else plog.offset_for_timestamp(ts)
        except Exception as e:
            code = getattr(e, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR)
            out.append(PartResp(partition_index=partition, error_code=code))
            continue
        if not_available and (found is None or found[0] >= limit):
            out.append(PartResp(partition_index=partition, error_code=not_available))
        elif found is None or found[0] >= limit:
            out.append(PartResp(partition_index=partition, timestamp=-1, offset=-1, leader_epoch=-1))
        else:
            offset, timestamp = found
            out.append(PartResp(partition_index=partition, timestamp=timestamp, offset=offset, leader_epoch=epoch))
    return out


@api(ListOffsetsRequest)
def handle(node, request, body: ListOffsetsRequest):
    version = request.api_version
    if body.isolation_level not in ISOLATION_LEVELS and body.topics:
        log.warning("list_offsets_refused", reason=f"Unknown isolation level {body.isolation_level}",
                    answer="UNKNOWN_SERVER_ERROR")
        return ListOffsetsResponse(topics=[TopicResp(name=t.name, partitions=[
            PartResp(partition_index=p.partition_index, error_code=ErrorCode.UNKNOWN_SERVER_ERROR)
            for p in t.partitions]) for t in body.topics])

    def fill(slot, resp: PartResp) -> None:
        slot[0][slot[1]] = resp

    def fail(slot, e: BaseException | None) -> None:
        code = ErrorCode.REQUEST_TIMED_OUT if e is None else getattr(e, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR)
        slot[0][slot[1]] = PartResp(partition_index=slot[2], error_code=code)

    work = DirWork(node, fill, fail)
    topics = []
    repeated = _repeated(body)
    committed = version >= 2 and body.isolation_level == 1
    for t in body.topics:
        topic = node.metadata.topic(t.name)
        parts: list = []
        if not allowed(node, request, DESCRIBE, TOPIC, t.name):
            topics.append(TopicResp(name=t.name, partitions=[PartResp(
                partition_index=p.partition_index, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                for p in t.partitions]))
            continue
        for p in t.partitions:
            if repeated and (t.name, p.partition_index) in repeated:
                # Kafka answers a partition named twice once, INVALID_REQUEST.
                if repeated[(t.name, p.partition_index)]:
                    repeated[(t.name, p.partition_index)] = False
                    parts.append(PartResp(partition_index=p.partition_index, error_code=ErrorCode.INVALID_REQUEST))
            elif not ts_ok(p.timestamp, version):
                parts.append(PartResp(partition_index=p.partition_index, error_code=ErrorCode.UNSUPPORTED_VERSION))
            elif topic is None or p.partition_index not in topic.partitions:
                parts.append(PartResp(partition_index=p.partition_index,
                                      error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            else:
                answer = _lookup(node, t.name, p.partition_index, p.timestamp, version, body.replica_id,
                                 p.current_leader_epoch if version >= 4 else -1, committed)
                if answer.__class__ is PartResp:
                    parts.append(answer)
                else:
                    not_available = (offsets_not_available(node, t.name, p.partition_index, answer, version)
                                     if body.replica_id == CONSUMER else 0)
                    work.add(answer.log_dir, (parts, len(parts), p.partition_index, p.timestamp, answer,
                                              last_fetchable_offset(answer, body.replica_id, committed),
                                              not_available))
                    parts.append(None)
        topics.append(TopicResp(name=t.name, partitions=parts))
    response = ListOffsetsResponse(topics=topics)
    if not work:
        return response
    timeout_ms = body.timeout_ms if version >= 10 else 0
    pending = work.run(lambda items: _search(items, version), timeout_ms / 1000 if timeout_ms > 0 else DEFAULT_DISK_WAIT_S)
    if pending is None:
        return response
    return _finish(pending, response)


async def _finish(pending, response: ListOffsetsResponse) -> ListOffsetsResponse:
    await pending
    return response


def _repeated(body: ListOffsetsRequest) -> dict[tuple[str, int], bool]:
    """The partitions named more than once in the request, each True until its one answer is given."""
    seen: set[tuple[str, int]] = set()
    out: dict[tuple[str, int], bool] = {}
    for t in body.topics:
        for p in t.partitions:
            key = (t.name, p.partition_index)
            if key in seen:
                out[key] = True
            seen.add(key)
    return out


def ts_ok(ts: int, version: int) -> bool:
    """A special timestamp needs the version that introduced it; a negative one Kafka does not define never
    passes (Kafka's ReplicaManager.isListOffsetsTimestampUnsupported)."""
    if ts >= 0:
        return True
    needed = TIMESTAMP_MIN_VERSION.get(ts)
    return needed is not None and version >= needed
