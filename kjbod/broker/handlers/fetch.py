"""Fetch (key 1), versions 4-18.

Version notes: v4 is the oldest served (isolation level, last stable offset, aborted transactions); v5 log
start offsets; v6 may answer KAFKA_STORAGE_ERROR (older versions get NOT_LEADER_OR_FOLLOWER); v7 fetch
sessions (KIP-227); v9 current leader epoch (a consumer's: older than this broker's FENCED_LEADER_EPOCH, newer
UNKNOWN_LEADER_EPOCH, as Kafka: kjbod.broker.handlers.leader_epoch_check); v10 zstd; v11 rack id and preferred
read replica (from v11 a consumer may read a follower, up to the follower's high watermark, as Kafka's
FetchParams.fetchOnlyLeader; with replica.selector.class set to Kafka's RackAwareReplicaSelector, a leader sends a
consumer that gives its rack to an in-sync replica in that rack: PreferredReadReplica, no records, answered at
once; KIP-392); v12 flexible; v13 topic
ids instead of names (an unknown id answers UNKNOWN_TOPIC_ID); v15 replica state moves to a tagged field; v16
the leader named with NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH (CurrentLeader, NodeEndpoints: KIP-951;
on every way a fetch is answered, a consumer's or a follower's); v17 replica directory id; v18 the high watermark
the fetching replica knows (KIP-1166, a tagged field): the metadata log's fetches on a controller listener answer at
once when it is behind the leader's (see below); on a broker listener it changes nothing, as in Kafka, whose
partition replicas learn the high watermark from each answer.

Sessions: kjbod answers every fetch in full and never creates a session (session id 0), which clients treat as
"sessionless"; as Kafka's FetchManager.newContext, a fetch whose session epoch is 0 (open a session) or -1 (no
session) is a full fetch whatever session id it names, and any other epoch continues a session, which answers
FETCH_SESSION_ID_NOT_FOUND (no partitions) so the client falls back to full fetches.  An isolation level other
than 0 and 1 makes Kafka's FetchRequest.isolationLevel throw once some partition asked for is known: the
request's error response, UNKNOWN_SERVER_ERROR at the top and (before v13) on every partition named.

Long poll: when less than min_bytes is available the request waits, up to max_wait_ms, for an append to one of its
partitions (a consumer's also for a high watermark move of one: Kafka's DelayedFetch purgatory, watched per
partition: kjbod.broker.parked_fetches; min_bytes capped at max_bytes, as Kafka's fetchMinBytes: 0 or less answers
at once, a follower's too). Record data leaves as file regions: the connection sends them with sendfile, without
copying them through Python. Limits: partition_max_bytes per partition and max_bytes for the response, except that
the first partition with data always gets at least one whole batch (KIP-74), and for a consumer only it (a batch
over a later partition's partition_max_bytes waits for another fetch; a follower gets the first batch of each dir's
first partition with data, read in parallel). As Kafka's ReplicaManager.readFromLog, a negative max_bytes is the
first partition's budget only (the next ones get 0: one batch until some partition gave records), and a negative
budget where there are records to read answers UNKNOWN_SERVER_ERROR. A consumer's OFFSET_OUT_OF_RANGE carries -1 for
the offsets, as Kafka's. As Kafka's KafkaApis.handleFetchRequest, every fetch on a broker listener (a consumer's or
a follower's) has its max_bytes capped at the broker's fetch.max.bytes (55 MiB by default; static, as in Kafka)
before any of this, and min_bytes is capped after it (`_capped`): one int min per request.

A follower's fetch (replica id >= 0) is answered by callbacks (`_FollowerFetch`, Kafka's DelayedFetch): at once,
or parked until the next append to one of its partitions or its max_wait_ms and answered in the callback that
wakes it; a consumer's, and a follower's that meets an active leader throttle, by the `_serve` coroutine. A
follower's plain fetch of one partition that repeats its connection's last one but for its offsets is answered
before it is decoded (kjbod.broker.handlers.follower_fetch_fast, called by the router), with this module's
`_FollowerFetch` behind it for anything not plain.

On a controller listener Fetch reads only the metadata log `__cluster_metadata` (kjbod.controller.metadata_fetch:
KRaft's checks, epochs, snapshots), which is how brokers follow it.  From v18 a fetch there whose HighWatermark
(the replica's known one; -1 when it has none) is below the leader's is answered without waiting, so the replica
learns the new high watermark at once (KIP-1166); the int64 maximum, the field's default, never is.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import structlog

from kjbod.broker.authz import allowed, allowed_cluster
from kjbod.broker.client_quotas import user_of
from kjbod.broker.dir_work import DirWork, loop_may_read
from kjbod.broker.handlers.leader_epoch_check import checked_log
from kjbod.broker.replication import hooks as replication
from kjbod.broker.router import api
from kjbod.metadata.acls import CLUSTER_ACTION, READ, TOPIC
from kjbod.net import trace
from kjbod.net.tasks import wait_event
from kjbod.net.tls import is_tls
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import FetchRequest, FetchResponse
from kjbod.protocol.generated.fetch_request import FetchTopic
from kjbod.protocol.generated.fetch_response import (
    AbortedTransaction,
    EpochEndOffset,
    LeaderIdAndEpoch,
    NodeEndpoint,
)
from kjbod.protocol.generated.fetch_response import FetchableTopicResponse as TopicResp
from kjbod.protocol.generated.fetch_response import PartitionData as PartResp
from kjbod.protocol.runtime import ZERO_UUID
from kjbod.storage import fsio
from kjbod.storage.errors import OffsetOutOfRangeError
from kjbod.storage.fsio import WouldBlock
from kjbod.storage.workers import loop_sends
from kjbod.wire.handler import Later

READ_COMMITTED = 1
LSO_AFTER_LOAD = -7  # a read limit: the last stable offset, once the log's producer state is loaded
ISOLATION_LEVELS = (0, READ_COMMITTED)

log = structlog.get_logger("kjbod.fetch")


def _error_part(index: int, code: int, version: int) -> PartResp:
    if code == ErrorCode.KAFKA_STORAGE_ERROR and version < 6:
        code = ErrorCode.NOT_LEADER_OR_FOLLOWER
    return PartResp(partition_index=index, error_code=code, high_watermark=-1, last_stable_offset=-1,
                    log_start_offset=-1, records=b"")


def _resolve(node, body: FetchRequest, version: int):
    """[(topic name or None, FetchTopic)], topics looked up by id from v13 (the name a v13+ request may carry is
    not on the wire), in the order Kafka answers them (`_regrouped`) when it is not the request's own."""
    image = node.metadata
    by_id = version >= 13
    out = []
    keys = set()
    regular = True  # no partition named twice, no topic in two entries or none, no unknown topic or partition
    for t in body.topics:
        if by_id:
            topic = image.topic_by_id(t.topic_id) if t.topic_id != ZERO_UUID else None
            out.append((topic.name if topic is not None else None, t))
        else:
            topic = image.topic(t.topic)
            out.append((t.topic if topic is not None else None, t))
        if regular:
            key = t.topic_id if by_id else t.topic
            parts = t.partitions
            asked = {p.partition for p in parts}
            regular = bool(parts and key not in keys and len(asked) == len(parts) and topic is not None
                           and asked <= topic.partitions.keys())
            keys.add(key)
    return out if regular else _regrouped(image, out, by_id)


def _regrouped(image, resolved, by_id: bool):
    """The partitions of a fetch as Kafka's KafkaApis.handleFetchRequest answers them: FetchRequest.fetchData
    keeps one entry per topic (id from v13, else name) and partition, where it was first named, with what it was
    last asked; the partitions of unknown topics and unknown partitions (its `erroneous` list) follow the others;
    consecutive partitions of one topic share a topic entry (FetchResponse.of)."""
    chosen: dict[tuple, list] = {}  # (topic key, partition) -> [erroneous, name, FetchTopic, FetchPartition]
    for name, t in resolved:
        key = t.topic_id if by_id else t.topic
        topic = image.topic(name) if name is not None else None
        for p in t.partitions:
            slot = chosen.get((key, p.partition))
            if slot is None:
                erroneous = topic is None or p.partition not in topic.partitions
                chosen[(key, p.partition)] = [erroneous, name, t, p]
            else:
                slot[3] = p
    out: list = []
    last_key: object = None
    for wanted in (False, True):
        for erroneous, name, t, p in chosen.values():
            if erroneous is not wanted:
                continue
            key = t.topic_id if by_id else t.topic
            if out and key == last_key:
                out[-1][1].partitions.append(p)
            else:
                out.append((name, FetchTopic(topic=t.topic, topic_id=t.topic_id, partitions=[p])))
                last_key = key
    return out


def _continues_session(body: FetchRequest, version: int) -> bool:
    """Whether the fetch continues a fetch session (Kafka's FetchMetadata.isFull is false): an epoch other than
    0 and -1.  kjbod has none to continue."""
    return version >= 7 and body.session_epoch != 0 and body.session_epoch != -1


def _isolation_refused(node, resolved, body: FetchRequest, version: int) -> FetchResponse | None:
    """The answer to an isolation level Kafka does not know (IsolationLevel.forId throws; KafkaApis answers with
    FetchRequest.getErrorResponse), when some partition asked for is known, else None: Kafka reads the level
    only for the partitions it would read."""
    image = node.metadata
    if not any(name is not None and (topic := image.topic(name)) is not None and p.partition in topic.partitions
               for name, t in resolved for p in t.partitions):
        return None
    log.warning("fetch_refused", reason=f"Unknown isolation level {body.isolation_level}",
                answer="UNKNOWN_SERVER_ERROR")
    code = ErrorCode.UNKNOWN_SERVER_ERROR
    topics = [] if version >= 13 else [
        TopicResp(topic=t.topic, partitions=[_error_part(p.partition, code, version) for p in t.partitions])
        for t in body.topics]
    return FetchResponse(error_code=code, session_id=body.session_id, responses=topics)


def _has_data(node, resolved, body: FetchRequest, decided: dict | None, throttled=frozenset(), *,
              leader_only: bool = True) -> bool:
    """True when some partition has records past its fetch offset (a follower: the LEO; a consumer: the HW),
    or answers an error; a partition the leader throttle answers empty does not count. `leader_only` as for
    `_consumer_log`."""
    if decided:
        return True
    for name, t in resolved:
        if name is None:
            return True
        for p in t.partitions:
            if throttled and (name, p.partition) in throttled:
                continue
            try:
                plog = (node.partition_log(name, p.partition) if decided is not None
                        else _consumer_log(node, name, p, leader_only))
                if decided is None and p.last_fetched_epoch >= 0 and _diverging(plog, p) is not None:
                    return True  # answered at once, as Kafka's hasDivergingEpoch
            except Exception:
                return True
            if not plog.io.online:  # answers KAFKA_STORAGE_ERROR now, not after the long poll
                return True
            end = plog.log_end_offset if decided is not None else \
                plog.last_stable_offset if body.isolation_level == READ_COMMITTED else plog.high_watermark
            if p.fetch_offset != end:  # data to send, or an out-of-range offset to report
                return True
    return False


def _consumer_log(node, name: str, p, leader_only: bool):
    """The log a consumer's fetch reads, as Kafka's Partition.localLogWithEpochOrThrow with
    FetchParams.fetchOnlyLeader: from v11 a consumer's fetch carries client metadata (its rack), and any local
    replica may serve it, a follower's up to its own high watermark; before v11 only the leader
    (NOT_LEADER_OR_FOLLOWER elsewhere).  Fetch takes every negative CurrentLeaderEpoch for "none" (Kafka's
    FetchRequest.optionalEpoch), unlike ListOffsets and OffsetForLeaderEpoch, where only -1 is."""
    epoch = p.current_leader_epoch
    return checked_log(node, name, p.partition, epoch if epoch >= 0 else -1, leader_only=leader_only)


def _diverging(plog, p) -> PartResp | None:
    """A consumer's LastFetchedEpoch (v12+) checked as Kafka's Partition.readRecords checks anyone's: the answer
    that names where the logs parted (DivergingEpoch, no records), or None to read; OFFSET_OUT_OF_RANGE when the
    epoch's end is unknown here or the offset is below the log start."""
    epoch, end = plog.leader_epochs.end_offset_for(p.last_fetched_epoch, plog.log_end_offset)
    if epoch < 0 or end < 0:
        raise OffsetOutOfRangeError(f"{plog.name}: the end of leader epoch {p.last_fetched_epoch} is not known here")
    if p.fetch_offset < plog.log_start_offset:
        raise OffsetOutOfRangeError(f"{plog.name}: offset {p.fetch_offset} is below the log start "
                                    f"{plog.log_start_offset}")
    if epoch >= p.last_fetched_epoch and end >= p.fetch_offset:
        return None
    hw = plog.high_watermark
    return PartResp(partition_index=p.partition, error_code=0, high_watermark=hw, last_stable_offset=hw,
                    log_start_offset=plog.log_start_offset, diverging_epoch=EpochEndOffset(epoch=epoch, end_offset=end),
                    records=b"")


def _build(node, resolved, body: FetchRequest, version: int, max_bytes: int, deadline: float, decided: dict | None,
           throttled=frozenset(), later: bool = False, tls: bool = False, preferred: dict | None = None):
    """The response, or an awaitable of it when some partition's read runs on its dir's worker. Each dir reads
    its partitions in request order with the whole response budget; the loop then keeps, in request order, what
    fits in `max_bytes` (the request's, capped at fetch.max.bytes: `_capped`; the first partition with data
    always: KIP-74), so one dir gives the answer today's single loop gave, and several dirs read at once.
    `decided` is None for a consumer (reads stop at the high watermark), else a follower's answers already
    decided (the rest read to the log end). With `later`, a Later of it in place of the awaitable (completed in
    the callback of the last dir's read: a follower's parked fetch). With `tls` (the connection is TLS, where sendfile
    cannot send) records are read into bytes where they are read (a dir's worker, or the page cache on the loop),
    never handed out as file regions. A consumer's partition in `preferred` (KIP-392's replica selector) is not
    read: its answer names the replica to read instead, with the offsets."""
    committed = body.isolation_level == READ_COMMITTED
    topics = []
    slots = []  # [(parts, index, partition request, plog, read limit)] of the partitions read from disk, in order

    def fill(slot, result) -> None:
        slot[0][slot[1]] = result

    def fail(slot, e: BaseException | None) -> None:
        # A dir that did not answer by the fetch's wait answers "nothing new", as a long poll that expires
        # (errors stay for failures: the Java consumer throws on codes it does not expect in a Fetch).
        slot[0][slot[1]] = _NOT_READ if e is None else e

    work = DirWork(node, fill, fail, _close_reads)
    negative = max_bytes < 0
    first = None  # with a negative max_bytes: the first partition Kafka reads, which alone gets it as its budget
    for name, t in resolved:
        parts: list = []
        for p in t.partitions:
            if name is None:
                code = ErrorCode.UNKNOWN_TOPIC_ID if version >= 13 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                parts.append(_error_part(p.partition, code, version))
                continue
            if negative and first is None:
                first = p
            if decided is not None and (ready := decided.get((name, p.partition))) is not None:
                parts.append(ready)
                continue
            try:
                # A follower's epochs were checked by prepare_follower_fetch; a consumer's are checked here.
                if decided is not None:
                    plog = node.partition_log(name, p.partition)
                else:
                    plog = _consumer_log(node, name, p, version < 11)
                    if p.last_fetched_epoch >= 0 and (diverged := _diverging(plog, p)) is not None:
                        parts.append(diverged)
                        continue
            except Exception as e:
                parts.append(_failed_part(node, name, p, e, version, decided is not None))
                continue
            if not plog.io.online:
                # Its dir is offline: nothing will be read there. Answered here rather than by the dir's worker,
                # which a loaded machine may not run within the fetch's wait (that answers "nothing new", 0).
                parts.append(_failed_part(node, name, p, plog.io.offline_error(), version, decided is not None))
                continue
            if preferred and (pick := preferred.get((name, p.partition))) is not None:
                parts.append(PartResp(partition_index=p.partition, error_code=0, high_watermark=plog.high_watermark,
                                      last_stable_offset=plog.last_stable_offset if plog.producer_state_ready
                                      else plog.high_watermark, log_start_offset=plog.log_start_offset,
                                      preferred_read_replica=pick, records=b""))
                continue
            if throttled and (name, p.partition) in throttled:  # the leader throttle: no records, the offsets
                parts.append(PartResp(partition_index=p.partition, error_code=0, high_watermark=plog.high_watermark,
                                      last_stable_offset=plog.high_watermark, log_start_offset=plog.log_start_offset,
                                      records=b""))
                continue
            # A read_committed consumer reads up to the last stable offset (no open transaction's records); a log
            # whose producer state is not loaded yet (a restart) has it loaded first, on its dir's worker.
            slot = (parts, len(parts), p, plog, None if decided is not None else plog.high_watermark if not committed
                    else plog.last_stable_offset if plog.producer_state_ready else LSO_AFTER_LOAD)
            parts.append(None)
            slots.append(slot)
            work.add(plog.log_dir, slot)
        topics.append(TopicResp(topic=t.topic if version < 13 else "", topic_id=t.topic_id if version >= 13 else ZERO_UUID,
                                partitions=parts))
    manager = getattr(node.logs, "manager", None)
    follower = decided is not None

    def assemble() -> tuple[FetchResponse, int]:
        return FetchResponse(error_code=0, session_id=0, responses=topics), _keep(
            node, resolved, slots, max_bytes, committed, version, follower)

    first_slot = slots[0] if first is not None and slots and slots[0][2] is first else None
    pending = (work.run(lambda items: _read_all(items, max_bytes if items[0] is first_slot else max(max_bytes, 0),
                                                manager, follower, tls),
                        max(deadline - time.monotonic(), MIN_DIR_WAIT_S), cached_first=True,
                        then=assemble if later else None, later=later) if work else None)
    if pending is None:
        return assemble()
    if later:
        return pending

    async def finish() -> tuple[FetchResponse, int]:
        await pending
        return assemble()

    return finish()


# A fetch waits for its dirs' reads at least this long even when its max_wait_ms is spent (a 0 ms fetch still
# gets the data of dirs that answer at once); a dir slower than that answers "nothing new" for its partitions.
MIN_DIR_WAIT_S = 0.1
_NOT_READ = object()


def _read_all(items, max_bytes: int, manager, follower: bool = False, tls: bool = False) -> list:
    """On the dir's worker: each partition's read (regions or bytes, hw, log start) or the exception it raised.

    A degraded (slow) dir's records are read here into memory instead of being sent with sendfile: sendfile
    runs on the event loop, and a read that misses the page cache of a slow disk would hold the loop. So is a
    follower's small read (_small_read): the acks=all path's common case, a caught-up follower taking the last
    batch or two. So is every read for a TLS connection (`tls`): the TLS transport must encrypt the bytes, and
    reading them here keeps the file reads on the dir's worker (or cache hits on the loop, under no_waiting)."""
    out: list = []
    remaining = max_bytes
    total = 0
    copy = bool(items) and manager is not None and manager.dir_degraded(items[0][3].log_dir)
    for _parts, _slot, p, plog, limit in items:
        if plog.closed:  # swapped by a KIP-113 move since the request came: read the moved replica
            plog = plog.current()
        try:
            if limit == LSO_AFTER_LOAD:
                if not fsio.waiting_allowed():
                    raise WouldBlock(f"the producer state of {plog.name} is not loaded")
                plog.ensure_producer_state()
                limit = plog.last_stable_offset
            budget = min(p.partition_max_bytes, remaining)
            remaining = max(remaining, 0)  # a negative max_bytes is the first partition's only (Kafka's limitBytes)
            if budget < 0 and plog.log_start_offset <= p.fetch_offset < min(
                    plog.log_end_offset, plog.log_end_offset if limit is None else limit):
                # Kafka's LogSegment.read refuses a negative size once there are records to read: the partition
                # answers UNKNOWN_SERVER_ERROR (ReplicaManager.readFromLog's catch-all).
                raise ValueError(f"Invalid max size {budget} for the read of {plog.name} at {p.fetch_offset}")
            if budget <= 0 and total > 0:
                out.append(([], plog.high_watermark, plog.log_start_offset))
                continue
            if copy:
                hw, lso = plog.high_watermark, plog.log_start_offset
                data = plog.read_bytes(p.fetch_offset, max(budget, 1), max_offset=limit)
                size = len(data)
                got: tuple = (data, hw, lso)
            elif follower:
                got = _small_read(plog, p.fetch_offset, budget, tls)
                size = len(got[0]) if got[0].__class__ is bytes else sum(r.count for r in got[0])
            else:
                # At least one batch only until a partition has given records (Kafka's minOneMessage), so a
                # batch over partition_max_bytes waits for a fetch where its partition is the first with data.
                result = plog.read(p.fetch_offset, max(budget, 1), max_offset=limit, min_one_batch=not total)
                if tls:
                    data = _region_bytes(result.regions, plog.name)
                    size = len(data)
                    got = (data, result.high_watermark, result.log_start_offset)
                else:
                    size = sum(len(r) for r in result.regions)
                    got = (result.regions, result.high_watermark, result.log_start_offset)
        except WouldBlock:
            _close_reads(out)  # read from the page cache on the loop so far; the dir's worker reads it all
            raise
        except Exception as e:
            out.append(e)
            continue
        total += size
        remaining = max(remaining - size, 0)
        out.append(got)
    return out


# A follower's read up to this size is sent as bytes: one write with the answer's header, where a file region
# costs a sendfile and a close of its own (and a segment of its own on the wire, which can wake the follower
# twice), more than copying a few KiB.
SMALL_FOLLOWER_READ = 32 * 1024


def _small_read(plog, fetch_offset: int, budget: int, tls: bool = False):
    """A follower's read: (records, hw, log start), the records as bytes when they are at most
    SMALL_FOLLOWER_READ (a caught-up follower taking the last batch or two), else as the file regions read.

    The regions are read first, with the follower's whole budget, and copied only when small: a follower that
    is behind pays no read it then throws away. A small read is everything the budget allows up to the log end
    (the read stops only at the end, at the budget or at a batch that does not fit it), so its bytes are what
    the regions would have sent. A caught-up follower's read starts where one of the last appends began or
    ended and goes to the log end: read in one pread, with no index lookup or header scan
    (PartitionLog.read_to_end). With `tls`, a big read is copied too (regions cannot go over TLS)."""
    recent = plog.read_to_end(fetch_offset, min(budget, SMALL_FOLLOWER_READ))
    if recent is not None:
        return recent
    result = plog.read(fetch_offset, max(budget, 1))
    regions = result.regions
    if tls:
        return _region_bytes(regions, plog.name), result.high_watermark, result.log_start_offset
    if sum(r.count for r in regions) > SMALL_FOLLOWER_READ:
        return regions, result.high_watermark, result.log_start_offset
    try:
        data = b"".join([fsio.pread_region(r.fd, r.count, r.offset, plog.name) for r in regions])
    except OSError:  # sent as regions after all: the transport meets and reports the failure as for any region
        return regions, result.high_watermark, result.log_start_offset
    except BaseException:  # WouldBlock: the dir's worker reads it again
        _close_regions(regions)
        raise
    _close_regions(regions)
    return data, result.high_watermark, result.log_start_offset


def _over_tls(ctx) -> bool:
    """Whether the fetch came over TLS, where file regions cannot be sent (sendfile bypasses the encryption)."""
    return is_tls(getattr(ctx, "security_protocol", "PLAINTEXT"))


def _region_bytes(regions: list, name: str) -> bytes:
    """The bytes of `regions`, read through the file seam (page-cache hits only under fsio.no_waiting, else
    WouldBlock for the dir's worker to read them); the regions are closed either way."""
    try:
        if len(regions) == 1:
            r = regions[0]
            return fsio.pread_region(r.fd, r.count, r.offset, name)
        return b"".join([fsio.pread_region(r.fd, r.count, r.offset, name) for r in regions])
    finally:
        _close_regions(regions)


def _close_regions(regions: list) -> None:
    for r in regions:
        r.close()


def _close_reads(results: list) -> None:
    for got in results:
        if got.__class__ is tuple and got[0].__class__ is list:
            for r in got[0]:
                r.close()


def _keep(node, resolved, slots, max_bytes: int, committed: bool, version: int, follower: bool) -> int:
    """Turn each read into its partition's answer, in request order, keeping what fits in the response."""
    remaining = max_bytes
    total = 0
    for parts, i, p, plog, limit in slots:
        got = parts[i]
        if got is _NOT_READ:
            got = ([], plog.high_watermark, plog.log_start_offset)
        elif isinstance(got, BaseException):
            parts[i] = _failed_part(node, plog.topic, p, got, version, follower)
            continue
        regions, hw, lso = got  # file regions, or bytes read by a degraded dir
        size = len(regions) if regions.__class__ is bytes else sum(len(r) for r in regions)
        if regions and total > 0 and (size > remaining or (not follower and size > p.partition_max_bytes)):
            # Read by another dir at the same time, past the response's budget, or (a consumer's, as Kafka's
            # minOneMessage) a first batch over its partition's budget while an earlier partition gave records.
            _close_reads([got])
            regions, size = [], 0
        total += size
        remaining -= size
        aborted = None
        if committed and not follower:
            upper = plog.last_stable_offset if limit == LSO_AFTER_LOAD else limit
            aborted = [AbortedTransaction(producer_id=pid, first_offset=first)
                       for pid, first in plog.aborted_transactions(p.fetch_offset, upper)] if regions else []
        parts[i] = PartResp(partition_index=p.partition, error_code=0, high_watermark=hw,
                            last_stable_offset=hw if follower else min(plog.last_stable_offset, hw),
                            log_start_offset=lso, aborted_transactions=aborted,
                            records=regions if regions else b"")
    return total


def _failed_part(node, name: str, p, e: BaseException, version: int, follower: bool) -> PartResp:
    """A partition's error answer.  OFFSET_OUT_OF_RANGE carries the offsets to a follower (kjbod's fetcher
    truncates or restarts from them); a consumer gets -1 for them, as from Kafka (createLogReadResult)."""
    code = getattr(e, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR)
    part = _error_part(p.partition, code, version)
    if code == ErrorCode.OFFSET_OUT_OF_RANGE and follower:
        try:
            plog = node.partition_log(name, p.partition)
            part.high_watermark = plog.high_watermark
            part.last_stable_offset = plog.high_watermark
            part.log_start_offset = plog.log_start_offset
        except Exception:
            pass
    return part


def close_regions(resp: FetchResponse) -> None:
    for t in resp.responses:
        for p in t.partitions:
            if isinstance(p.records, list):
                for r in p.records:
                    r.close()


def _authorize(node, request, body: FetchRequest, follower: int):
    """Kafka's checks: the metadata log's fetches (a controller listener) and a replica's need CLUSTER_ACTION on
    the cluster (refused as a whole, or each partition TOPIC_AUTHORIZATION_FAILED for a replica); a consumer's
    need READ on each topic, and the topics it may not read are answered TOPIC_AUTHORIZATION_FAILED while the
    others are served. Returns the answer when nothing is left to serve, else None (`body` keeps what may be read,
    and the refused topics are added to the answer)."""
    v = request.api_version
    if request.ctx.listener_kind == "controller" or follower >= 0:
        if allowed_cluster(node, request, CLUSTER_ACTION):
            return None
        if request.ctx.listener_kind == "controller":
            return FetchResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        denied, body.topics = list(body.topics), []
    else:
        image = node.metadata
        denied, kept = [], []
        for t in body.topics:
            if v >= 13:
                topic = image.topic_by_id(t.topic_id) if t.topic_id != ZERO_UUID else None
                name = topic.name if topic is not None else None
            else:
                name = t.topic
            if name is None or allowed(node, request, READ, TOPIC, name):
                kept.append(t)  # an unknown topic id is answered UNKNOWN_TOPIC_ID as without an authorizer
            else:
                denied.append(t)
        if not denied:
            return None
        body.topics = kept
    refused = [TopicResp(topic=t.topic, topic_id=t.topic_id, partitions=[
        _error_part(p.partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED, v) for p in t.partitions]) for t in denied]
    if not body.topics:
        return FetchResponse(error_code=0, session_id=0, responses=refused)
    answer = _serve(node, request, body, follower)

    async def with_refused() -> FetchResponse:
        resp = await answer
        resp.responses.extend(refused)
        return resp

    return with_refused()


@api(FetchRequest)
def handle(node, request, body: FetchRequest):
    """The answer's coroutine.  Before it runs, while the connection is handing over the request, a follower's
    fetch (a replica id >= 0) on a broker listener asks the metrics to count it as FetchFollower, as Kafka's
    RequestMetrics do (the metadata log's fetches on a controller listener keep Fetch's own figures)."""
    follower = replication.follower_id(body, request.api_version)
    if getattr(node, "authorizer", None) is not None:
        refused = _authorize(node, request, body, follower)
        if refused is not None:
            return refused
    if follower >= 0 and request.ctx.listener_kind != "controller":
        if node.topic_stats is not None:
            node.topic_stats.requests.follower_fetch()
        if not _continues_session(body, request.api_version) and body.isolation_level in ISOLATION_LEVELS \
                and not replication.leader_throttling(node):
            return _FollowerFetch(node, request, body, follower).answer()
    return _serve(node, request, body, follower)


async def _serve(node, request, body: FetchRequest, follower: int) -> FetchResponse:
    v = request.api_version
    if request.ctx.listener_kind == "controller":
        raft = getattr(node, "raft", None)
        replica = body.replica_state.replica_id if v >= 15 else body.replica_id
        if raft is not None and replica in raft.voters and replica != raft.node_id:  # another voter of the quorum
            return await raft.fetch(body, v)
        return await node.metadata_fetch.fetch(body, v)  # brokers following the metadata log (KRaft observers)
    if _continues_session(body, v):
        return FetchResponse(error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, session_id=0)
    resolved = _resolve(node, body, v)
    if body.isolation_level not in ISOLATION_LEVELS and (refused := _isolation_refused(node, resolved, body, v)):
        return refused
    decided = replication.prepare_follower_fetch(node, resolved, body, v, follower) if follower >= 0 else None
    preferred = (replication.preferred_read_replicas(node, resolved, body.rack_id, request.ctx.listener_name)
                 if follower < 0 and v >= 11 and body.rack_id and node.config.replica_selector_class else None)
    # Like Kafka, a fetch that asks for no partitions needs no data and is answered at once, and so is every
    # fetch once the node is shutting down (a long poll must not hold up a SIGTERM).
    wants_nothing = not any(t.partitions for t in body.topics)
    deadline = time.monotonic() + (0 if wants_nothing else max(body.max_wait_ms, 0) / 1000.0)
    max_bytes, min_bytes = _capped(node, body)
    fetch_quota = (node.client_quotas.fetch if getattr(request, "quota", False) and node.client_quotas.fetch.active
                   else None)  # only a client request the router counted (not a test's or an in-process one)
    if fetch_quota is not None:
        # Kafka's cap: no more than the quota lets through in its window, so one fetch is never throttled for sure
        user, client_id = user_of(request.ctx.principal), request.client_id or ""
        max_bytes = min(max_bytes, int(min(fetch_quota.max_value_in_window(user, client_id), 2**31 - 1)))
        min_bytes = min(min_bytes, max_bytes)
    tls = _over_tls(request.ctx)
    while True:
        # Look before reading: reading hands out file regions that must be closed if we then decide to wait.
        if node.stopping:
            deadline = 0.0
        throttled = replication.leader_throttled(node, resolved, follower) if follower >= 0 else frozenset()
        if min_bytes <= 0 or preferred or _has_data(node, resolved, body, decided, throttled, leader_only=v < 11) \
                or time.monotonic() >= deadline:
            built = _build(node, resolved, body, v, max_bytes, deadline, decided, throttled, tls=tls,
                           preferred=preferred)
            resp, total = built if built.__class__ is tuple else await built
            if total >= min_bytes or time.monotonic() >= deadline or not _only_data(resp):
                if fetch_quota is not None:
                    throttled_resp = _over_fetch_quota(node, request, resp, total)
                    if throttled_resp is not None:
                        return throttled_resp
                loop_sends(total)
                if node.topic_stats is not None:  # the metrics endpoint's counters (kjbod.metrics)
                    _count(node.topic_stats, resolved, resp, follower >= 0)
                if follower >= 0:
                    replication.leader_sent(node, resolved, resp)
                    if trace.ON:
                        _trace_answer(node, resolved, follower)
                if v >= 16 and not _only_data(resp):
                    _point_at_leaders(node, resolved, resp, request.ctx.listener_name)
                return resp
            close_regions(resp)
        timeout = deadline - time.monotonic()
        if throttled:  # held back by the leader throttle: looked at again once the quota allows them
            timeout = min(timeout, replication.leader_throttle_wait_s(node))
        if timeout <= 0:
            continue
        if follower >= 0 and trace.ON:
            trace.event("ff_parked", follower)
        # Parked on its own partitions: woken by their appends (a consumer also by their HW moves; a follower
        # not: a HW move, every acks=all answer, would wake it for nothing).
        arrived = asyncio.Event()
        wake, keys, parked = arrived.set, _keys(resolved), node.parked_fetches
        parked.park(keys, wake, follower=decided is not None)
        try:
            await wait_event(arrived, timeout)  # no task per parked fetch (kjbod.net.tasks)
        finally:
            parked.unpark(keys, wake, follower=decided is not None)
        if decided is not None:  # a follower's fetch: checked again, as Kafka's DelayedFetch (see the hook)
            replication.recheck_follower_fetch(node, resolved, body, v, follower, decided)


def _over_fetch_quota(node, request, resp: FetchResponse, total: int) -> FetchResponse | None:
    """Records a consumer's response bytes against its consumer_byte_rate; over the quota, Kafka's answer
    instead: the bytes taken back, no partitions, and the throttle time (the router mutes the connection)."""
    quotas = node.client_quotas
    user, client_id = user_of(request.ctx.principal), request.client_id or ""
    now = quotas.clock_ms()
    throttle = quotas.fetch.record(user, client_id, total, now)
    if throttle <= 0:
        return None
    quotas.fetch.unrecord(user, client_id, total, now)
    quotas.fetch.throttled(user, client_id, throttle, now)
    close_regions(resp)
    return FetchResponse(throttle_time_ms=throttle, error_code=0, session_id=0, responses=[])


def _capped(node, body: FetchRequest) -> tuple[int, int]:
    """(max_bytes, min_bytes) a fetch is answered with, as Kafka's KafkaApis.handleFetchRequest sets them for a
    consumer's fetch and a follower's alike: max_bytes capped at the broker's fetch.max.bytes, then min_bytes
    capped at that (0 or less answers at once).  A negative max_bytes stays as it is (see `_read_all`)."""
    max_bytes = min(body.max_bytes, node.fetch_max_bytes)
    return max_bytes, min(body.min_bytes, max_bytes)


def _keys(resolved) -> list[tuple[str, int]]:
    """The partitions a fetch parks on (those of topics this broker knows)."""
    return [(name, p.partition) for name, t in resolved if name is not None for p in t.partitions]


class _FollowerFetch:
    """A follower's fetch on the leader (Kafka's DelayedFetch), answered by callbacks: at once when there is
    something to send, else parked until the next append to one of its partitions (node.parked_fetches) or its
    max_wait_ms, then answered in the callback that woke it, with the reads of dirs whose workers are busy
    completed by their callbacks too.
    It returns the response, or a Later (kjbod.wire.handler) of it: no task, timeout scope or event wait per
    fetch, and no loop pass between the append and the answer's encoding (the connection writes it with the
    other replies of that pass).  What `_serve` does for any fetch, minus the leader throttle: a fetch that meets
    an active throttle goes there."""

    __slots__ = ("node", "ctx", "body", "version", "follower", "max_bytes", "min_bytes", "resolved", "decided",
                 "deadline", "later", "timer", "keys", "single")

    def __init__(self, node, request, body: FetchRequest, follower: int, decided: dict | None = None,
                 deadline: float | None = None) -> None:
        """`decided` and `deadline` are given by the short way (follower_fetch_fast), which made the checks and
        moved the follower's position when the request came."""
        self.node = node
        self.ctx = request.ctx  # its listener names the leaders' endpoints of a v16+ answer (`_point_at_leaders`)
        self.body = body
        self.version = version = request.api_version
        self.follower = follower
        self.max_bytes, self.min_bytes = _capped(node, body)
        self.resolved = _resolve(node, body, version)
        self.decided = replication.prepare_follower_fetch(node, self.resolved, body, version, follower) \
            if decided is None else decided
        if deadline is None:
            # Like Kafka, a fetch that asks for no partitions needs no data and is answered at once.
            wait_s = max(body.max_wait_ms, 0) / 1000.0 if any(t.partitions for t in body.topics) else 0.0
            deadline = time.monotonic() + wait_s
        self.deadline = deadline
        self.later = Later()  # what the connection gets when the answer is not ready at once
        self.timer: asyncio.TimerHandle | None = None
        self.keys: list[tuple[str, int]] | None = None  # the partitions it parks on, once it parks
        self.single = _single(node, self.resolved, self.decided)

    def answer(self):
        """The response when it is ready now, else self.later, which gets it."""
        node, body = self.node, self.body
        if node.stopping:  # a long poll must not hold up a SIGTERM
            self.deadline = 0.0
        if self.single is not None:
            resp = self._answer_single(self.single)
            if resp is _PARK:
                return self._park()
            if resp is not None:
                return resp
        if self.min_bytes <= 0 or _has_data(node, self.resolved, body, self.decided) \
                or time.monotonic() >= self.deadline:
            built = _build(node, self.resolved, body, self.version, self.max_bytes, self.deadline, self.decided,
                           later=True, tls=_over_tls(self.ctx))
            if built.__class__ is not tuple:  # read by dirs' workers: answered by their callback
                built.on_done(self._read)
                return self.later
            resp = self._complete(*built)
            if resp is not None:
                return resp
        return self._park()

    def _park(self):
        node = self.node
        node.parked_fetches.park(self._parked_on(), self._woken, follower=True)
        self.timer = asyncio.get_running_loop().call_later(max(self.deadline - time.monotonic(), 0.0), self._woken)
        if trace.ON:
            trace.event("ff_parked", self.follower)
        return self.later

    def _answer_single(self, single: tuple) -> Any:
        """The answer to a fetch of one partition whose checks passed (the replica fetcher's usual fetch: one
        leader's partition), read straight from the page cache on the loop: the response, _PARK to wait, or
        None for the general way (anything else: a closed or offline log, a busy, slow or faulty dir, a read
        that would wait for the disk or fails). What the general way answers for the same fetch, without its
        per-dir hand-off machinery; it answers no error, so it has no leader to name (KIP-951)."""
        plog, p, name = single
        if plog.closed or not plog.io.online:
            return None
        if p.fetch_offset == plog.log_end_offset and self.min_bytes > 0 and time.monotonic() < self.deadline:
            return _PARK
        manager = self.node.logs.manager
        log_dir = plog.log_dir
        worker = manager.worker(log_dir)
        if worker is None or not loop_may_read(manager, log_dir, worker):
            return None
        body = self.body
        try:
            with fsio.no_waiting():
                records, hw, lso = _small_read(plog, p.fetch_offset, min(p.partition_max_bytes, self.max_bytes),
                                               _over_tls(self.ctx))
        except Exception:  # WouldBlock, or a failure the general way reports
            return None
        size = len(records) if records.__class__ is bytes else sum(r.count for r in records)
        if size < self.min_bytes and time.monotonic() < self.deadline:
            if records.__class__ is not bytes:
                _close_regions(records)
            return _PARK
        t = self.resolved[0][1]
        v13 = self.version >= 13
        resp = FetchResponse(error_code=0, session_id=0, responses=[TopicResp(
            topic="" if v13 else t.topic, topic_id=t.topic_id if v13 else ZERO_UUID, partitions=[PartResp(
                partition_index=p.partition, error_code=0, high_watermark=hw, last_stable_offset=hw,
                log_start_offset=lso, aborted_transactions=[] if body.isolation_level == READ_COMMITTED else None,
                records=records if size else b"")])])
        node = self.node
        if node.topic_stats is not None:  # the metrics endpoint's counters (kjbod.metrics): as _count
            node.topic_stats.fetched(name, 0, 0)
        replication.leader_sent(node, self.resolved, resp)
        if trace.ON:
            _trace_answer(node, self.resolved, self.follower)
        return resp

    def recheck(self) -> None:
        """Woken while parked: the checks again (replication.recheck_follower_fetch, as Kafka's DelayedFetch);
        what they now refuse is answered, not read."""
        if replication.recheck_follower_fetch(self.node, self.resolved, self.body, self.version, self.follower,
                                              self.decided):
            self.single = None

    def _parked_on(self) -> list[tuple[str, int]]:
        keys = self.keys
        if keys is None:
            keys = self.keys = _keys(self.resolved)
        return keys

    def _complete(self, resp: FetchResponse, total: int) -> FetchResponse | None:
        """The response once read, counted, with the leaders named where v16+ wants them (as `_serve` does); None
        (its regions closed) when it must wait for more."""
        if total >= self.min_bytes or time.monotonic() >= self.deadline or not _only_data(resp):
            loop_sends(total)
            node = self.node
            if node.topic_stats is not None:  # the metrics endpoint's counters (kjbod.metrics)
                _count(node.topic_stats, self.resolved, resp, True)
            replication.leader_sent(node, self.resolved, resp)
            if trace.ON:
                _trace_answer(node, self.resolved, self.follower)
            if self.version >= 16 and not _only_data(resp):
                _point_at_leaders(node, self.resolved, resp, self.ctx.listener_name)
            return resp
        close_regions(resp)
        return None

    def _woken(self) -> None:
        """The next append, or the fetch's max_wait_ms: look again (in that callback)."""
        self.node.parked_fetches.unpark(self._parked_on(), self._woken, follower=True)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        later = self.later
        if later.done():  # cancelled: the connection went away
            return
        try:
            self.recheck()
            result = self.answer()
        except Exception as e:  # the handler's bug: the connection closes, the append that woke it goes on
            later.fail(e)
            return
        if result is not later:
            later.resolve(result)

    def _read(self, built: Later) -> None:
        """The dirs' workers read: the response, or back to waiting."""
        later = self.later
        try:
            resp, total = built.result()
        except Exception as e:
            later.fail(e)
            return
        if later.done():  # cancelled meanwhile: nobody writes what was read
            close_regions(resp)
            return
        try:
            result = self._complete(resp, total)
            if result is None:
                result = self.answer()
        except Exception as e:
            later.fail(e)
            return
        if result is not later:
            later.resolve(result)


_PARK = object()  # _FollowerFetch._answer_single: wait for an append


def _single(node, resolved, decided: dict) -> tuple | None:
    """(log, partition request, topic name) of a follower's fetch of exactly one partition that passed its checks
    (see _FollowerFetch._answer_single), else None."""
    if decided or len(resolved) != 1:
        return None
    name, t = resolved[0]
    if name is None or len(t.partitions) != 1:
        return None
    p = t.partitions[0]
    try:
        plog = node.partition_log(name, p.partition)
    except Exception:
        return None
    manager = getattr(node.logs, "manager", None)
    if manager is None or manager.worker(plog.log_dir) is None:  # no workers: the general way reads inline
        return None
    return plog, p, name


def _trace_answer(node, resolved, follower: int) -> None:
    """KJBOD_TRACE: a follower's answer leaves, with its first partition's log end (what it could carry)."""
    for name, t in resolved:
        if name is not None and t.partitions:
            try:
                end = node.partition_log(name, t.partitions[0].partition).log_end_offset
            except Exception:
                end = -1
            trace.event("answered", follower, end)
            return


def _count(stats, resolved, resp: FetchResponse, follower: bool) -> None:
    """BrokerTopicMetrics of a fetch answered: per partition its error and the record bytes it carries, which
    are BytesOut for a consumer only (Kafka counts a follower's as replication bytes)."""
    for (name, _t), topic in zip(resolved, resp.responses, strict=True):
        for p in topic.partitions:
            records = p.records
            stats.fetched(name, p.error_code, sum(len(r) for r in records)
                          if records.__class__ is list and not follower else 0)


_MOVED = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH)


def _point_at_leaders(node, resolved, resp: FetchResponse, listener: str) -> None:
    """Fetch v16+ (KIP-951), as Kafka's KafkaApis.handleFetchRequest: a partition answered NOT_LEADER_OR_FOLLOWER
    or FENCED_LEADER_EPOCH names the leader and leader epoch this broker knows (CurrentLeader), and the response
    carries that leader's endpoint on the request's listener when it is alive (NodeEndpoints): the client moves
    to it without a metadata round trip."""
    image = node.metadata
    endpoints: dict[int, NodeEndpoint] = {}
    for (name, _t), topic in zip(resolved, resp.responses, strict=True):
        if name is None:
            continue
        known = image.topic(name)
        for p in topic.partitions:
            if p.error_code not in _MOVED:
                continue
            info = known.partitions.get(p.partition_index) if known is not None else None
            if info is None:
                continue  # -1, -1: no leader known
            p.current_leader = LeaderIdAndEpoch(leader_id=info.leader, leader_epoch=info.leader_epoch)
            broker = image.brokers.get(info.leader)
            if broker is not None and not broker.fenced and (e := broker.endpoint(listener)) is not None:
                endpoints[info.leader] = NodeEndpoint(node_id=info.leader, host=e.host, port=e.port, rack=broker.rack)
    resp.node_endpoints = list(endpoints.values())


def _only_data(resp: FetchResponse) -> bool:
    """No partition answers an error or a DivergingEpoch (Kafka answers those at once, whatever min_bytes)."""
    return all(p.error_code == 0 and p.diverging_epoch.end_offset < 0 for t in resp.responses for p in t.partitions)
