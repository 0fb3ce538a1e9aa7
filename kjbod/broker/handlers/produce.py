"""Produce (key 0), versions 3-13.

Every batch is validated down to its records before anything is written (kjbod.storage.records: framing,
offsets, timestamps; compressed payloads decompressed), so a refused batch changes nothing on disk.

Version notes: v3 is the oldest served (message format v2 only, exactly one batch per partition, transactional
id); v4 may answer
KAFKA_STORAGE_ERROR (older versions get NOT_LEADER_OR_FOLLOWER instead, as Kafka maps it); v5 answers the log
start offset; v7 allows zstd (zstd below v7 is UNSUPPORTED_COMPRESSION_TYPE); v8 adds per-batch record errors
and an error message; v9 flexible; v10 adds current-leader hints (tagged); v11 may answer
TRANSACTION_ABORTABLE; v12 only changes client behaviour; v13 names topics by id instead of name (KIP-516),
answered by id: an id the metadata does not know is UNKNOWN_TOPIC_ID for each of its partitions, as Kafka.

acks=0 produces no response frame; an error then closes the connection, as Kafka does, so the producer finds
out.  A transactional batch (kjbod.broker.txn: the producer's transaction then stays open on the partition,
bounding its last stable offset, until the coordinator's marker) needs the request's transactional id:
without one it answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED, Kafka's answer.  A client's produce to
the internal `__consumer_offsets` or `__transaction_state` is INVALID_TOPIC_EXCEPTION, as in Kafka; the
coordinators' own appends come through here with `internal_topics_allowed`, and with `coordinator_origin` those
that may be control batches (transaction markers) or transactional batches without a sequence (TxnOffsetCommit),
as Kafka accepts from its coordinators.

KIP-890 part 1 (transaction.partition.verification.enable, on by default, dynamic): a transactional batch of a
producer with no transaction open on the partition is held while the transaction coordinator is asked whether
the partition is in the producer's ongoing transaction (kjbod.broker.txn.verification; the whole request waits,
as Kafka's does). Not in it: INVALID_TXN_STATE ("Partition was not added to the transaction"), or
TRANSACTION_ABORTABLE from v11 on, and nothing is written, so a producer that skipped AddPartitionsToTxn cannot
leave a transaction open that no coordinator will ever end (the hanging transaction that stalls the last stable
offset). A coordinator that cannot answer now (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE, CONCURRENT_TRANSACTIONS, a network error) answers NOT_ENOUGH_REPLICAS, which every
producer retries, as Kafka maps it. The dir's worker checks again as it appends
(PartitionLog.check_transaction_guard): a transactional batch starts a transaction only with the guard the
verification made, so a transaction that ended meanwhile is not reopened.

KIP-890 part 2: a transactional batch in Produce v12 or later (a producer speaking transaction.version 2, which
sends no AddPartitionsToTxn) is held the same way, but the leader asks the coordinator to add the partition to
the producer's transaction (AddPartitionsToTxn v5 without VerifyOnly), whether or not verification is enabled;
the coordinator's refusal (an old epoch: INVALID_PRODUCER_EPOCH; another producer id:
INVALID_PRODUCER_ID_MAPPING; a transaction being ended: NOT_ENOUGH_REPLICAS, retried) is the batch's answer and
nothing is written.
"""

from __future__ import annotations

import time

import structlog

from kjbod.broker.dir_work import DirWork
from kjbod.broker.replication import hooks as replication
from kjbod.broker.router import api
from kjbod.broker.txn.verification import verification_enabled, verifier_of
from kjbod.metadata.acls import TOPIC, TRANSACTIONAL_ID, WRITE
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import ProduceRequest, ProduceResponse
from kjbod.protocol.generated.produce_response import BatchIndexAndErrorMessage as RecordError
from kjbod.protocol.generated.produce_response import PartitionProduceResponse as PartResp
from kjbod.protocol.generated.produce_response import TopicProduceResponse as TopicResp
from kjbod.storage.log import AppendInfo
from kjbod.storage.records import LOG_OVERHEAD, MIN_BATCH_LENGTH
from kjbod.storage.workers import SYNC_WAIT_MS
from kjbod.wire.handler import CloseConnection, Later

log = structlog.get_logger("kjbod.produce")

ZSTD = 4
# Internal: Produce from clients is refused, as in Kafka (only their coordinators write them).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
TRANSACTIONAL = 0x10  # the transactional bit of a v2 batch's attributes, in their low byte (byte 22; magic at 16)
# Records up to this size are validated (CRC, records, timestamps: CPU only, no file) on the event loop before the
# hand-off, so the dir's worker does little more than the write: it then holds the GIL briefly, and the loop and
# the worker rarely wait for each other. Bigger ones are validated on the worker, where the CRC and the
# decompression of a large batch overlap the loop's next request.
VALIDATE_ON_LOOP_BYTES = 64 * 1024
# A v2 batch's producer id, epoch and base sequence (big-endian, after the max timestamp).
PRODUCER_ID_AT, PRODUCER_EPOCH_AT, BASE_SEQUENCE_AT, RECORDS_COUNT_AT = 43, 51, 53, 57
TV2_PRODUCE_VERSION = 12  # Kafka's produceRequestVersionToTransactionSupportedOperation: above 11 adds partitions
# What a coordinator that cannot answer now becomes for the producer (Kafka's mapping: NOT_ENOUGH_REPLICAS is
# retried by every producer and sends none of them to refresh metadata).
VERIFY_RETRIABLE = frozenset({ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NETWORK_EXCEPTION,
                              ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                              ErrorCode.NOT_COORDINATOR})


def _error(index: int, code: int, message: str | None, version: int) -> PartResp:
    if code == ErrorCode.KAFKA_STORAGE_ERROR and version < 4:
        code = ErrorCode.NOT_LEADER_OR_FOLLOWER
    return PartResp(index=index, error_code=code, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1,
                    error_message=message if version >= 8 else None)


@api(ProduceRequest)
def handle(node, request, body: ProduceRequest):
    v = request.api_version
    acks = body.acks
    now_ms = int(time.time() * 1000)
    responses = []
    timeout_ms = body.timeout_ms

    waits: list[tuple[str, PartResp, int]] = []  # acks=all: (topic, answer, offset the HW must pass)

    def fill(slot, result) -> None:
        """On the loop: a partition's answer from its dir's worker (with its log end and record count when the
        append succeeded)."""
        slot[4].appends_in_flight -= 1
        if result.__class__ is not tuple:
            slot[0][slot[1]] = result
            return
        resp, end, records = result
        topic, pd = slot[2], slot[3]
        if replication.lost_leadership(slot[7]):
            slot[0][slot[1]] = _error(pd.index, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                      f"this broker stopped leading {topic}-{pd.index} while the append ran", v)
            return
        slot[0][slot[1]] = resp
        replication.appended(node, topic, pd.index)
        node.notify_append(topic, pd.index)  # the fetches parked on this partition look again
        if node.topic_stats is not None:  # the metrics endpoint's counters (kjbod.metrics)
            node.topic_stats.produced(topic, len(pd.records), records)
        if acks == -1 and replication.needs_replication(node, topic, pd.index, end):
            waits.append((topic, resp, end))

    def fail(slot, e: BaseException | None) -> None:
        slot[4].appends_in_flight -= 1  # after a timeout too: its order is no longer promised, as any timeout's
        pd = slot[3]
        if e is None:  # the dir did not answer in time; its appends may still happen, as after any timeout
            resp = _error(pd.index, ErrorCode.REQUEST_TIMED_OUT,
                          f"the log dir of {slot[2]}-{pd.index} did not answer within timeout_ms {timeout_ms}", v)
        else:
            resp = _failed(slot[2], pd, e, v)
        slot[0][slot[1]] = resp

    work = DirWork(node, fill, fail)
    big = False
    authz = getattr(node, "authorizer", None)
    ctx = request.ctx
    # A coordinator's own append (kjbod.broker.txn, kjbod.broker.groups): markers and transactional offsets.
    coordinator = getattr(request, "coordinator_origin", False)
    # KIP-890: the transactional batches of producers with no transaction open on their partition wait for the
    # coordinator's word: (item, (topic, partition)) each, and the producer they are for.
    # KIP-890 part 2: from v12 the producer speaks transaction.version 2 and the leader adds the partition to the
    # transaction itself (whatever transaction.partition.verification.enable says, as Kafka's ADD_PARTITION).
    add = v >= TV2_PRODUCE_VERSION
    verify = body.transactional_id is not None and not coordinator and (add or verification_enabled(node))
    held: list[tuple[tuple, tuple[str, int]]] = []
    producer: tuple[int, int] | None = None
    # As Kafka: a transactional producer needs WRITE on its transactional id.
    txn_denied = authz is not None and ctx is not None and body.transactional_id is not None and not authz.allowed(
        ctx.principal, ctx.peer_host, WRITE, TRANSACTIONAL_ID, body.transactional_id)
    by_id = v >= 13
    for td in body.topic_data:
        parts: list[PartResp | None] = []
        if by_id:  # the topic's name, from its id
            topic = node.metadata.topic_by_id(td.topic_id)
            name = topic.name if topic is not None else ""
        else:
            name = td.name
            topic = node.metadata.topic(name)
        denied = authz is not None and ctx is not None and not authz.allowed(ctx.principal, ctx.peer_host, WRITE,
                                                                              TOPIC, name)
        for pd in td.partition_data:
            if acks not in (-1, 0, 1):
                parts.append(_error(pd.index, ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be -1, 0 or 1, not {acks}", v))
            elif txn_denied:
                parts.append(_error(pd.index, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                    f"{ctx.principal} may not WRITE transactional id {body.transactional_id}", v))
            elif body.transactional_id is None and pd.records and len(pd.records) > 22 and pd.records[16] == 2 \
                    and pd.records[22] & TRANSACTIONAL and not coordinator:
                parts.append(_error(pd.index, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                    "a transactional record batch needs the request's transactional id", v))
            elif by_id and topic is None:
                parts.append(_error(pd.index, ErrorCode.UNKNOWN_TOPIC_ID, f"no topic has id {td.topic_id}", v))
            elif denied:
                parts.append(_error(pd.index, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                    f"{ctx.principal} may not WRITE to topic {name}", v))
            elif name in INTERNAL_TOPICS and not getattr(request, "internal_topics_allowed", False):
                # As Kafka: only the group and transaction coordinators write their topics.
                parts.append(_error(pd.index, ErrorCode.INVALID_TOPIC_EXCEPTION,
                                    f"Cannot append to internal topic {name}", v))
            elif topic is None or pd.index not in topic.partitions:
                parts.append(_error(pd.index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                    f"{name}-{pd.index} does not exist on this broker", v))
            elif not pd.records:
                parts.append(_error(pd.index, ErrorCode.INVALID_RECORD, "the request carries no record batch", v))
            elif v < 7 and len(pd.records) > 22 and (pd.records[22] & 0x07) == ZSTD:
                parts.append(_error(pd.index, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                                    "zstd needs Produce v7 or later", v))
            elif _second_batch(pd.records):
                parts.append(_error(pd.index, ErrorCode.INVALID_RECORD,
                                    f"Produce v{v} allows exactly one record batch per partition", v))
            elif acks == -1 and (code := replication.acks_all_refusal(node, name, pd.index)):
                parts.append(_error(pd.index, code, f"{name}-{pd.index} has fewer in-sync replicas than "
                                    "min.insync.replicas", v))
            else:
                try:
                    plog = node.partition_log(name, pd.index)
                except Exception as e:
                    parts.append(_failed(name, pd, e, v))
                else:
                    checked = None
                    if len(pd.records) <= VALIDATE_ON_LOOP_BYTES or coordinator:
                        try:
                            checked = plog.validate(pd.records, now_ms=now_ms, from_coordinator=coordinator)
                        except Exception as e:
                            parts.append(_failed(name, pd, e, v))
                            continue
                    else:
                        big = True
                    txn = None
                    if verify and pd.records[22] & TRANSACTIONAL and len(pd.records) >= RECORDS_COUNT_AT:
                        txn, ask = _transaction_check(plog, pd.records, now_ms, add)
                        if producer is None:
                            producer = (txn[0], ask[1])
                        elif producer[0] != txn[0]:
                            parts.append(_error(pd.index, ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                                                "transactional records of more than one producer id", v))
                            continue
                        if ask[0]:
                            item = (parts, len(parts), name, pd, plog, node.leader_epoch(name, pd.index),
                                    checked, replication.leader_state(node, name, pd.index), txn)
                            held.append((item, (name, pd.index)))
                            parts.append(None)
                            continue
                    # Answered by the partition's dir (its worker), into the slot kept here.
                    _hand_over(work, (parts, len(parts), name, pd, plog, node.leader_epoch(name, pd.index),
                                      checked, replication.leader_state(node, name, pd.index), txn))
                    parts.append(None)
        responses.append((name, td.topic_id, parts))
    if held and producer is not None and body.transactional_id is not None:
        return _after_verification(node, body.transactional_id, producer, held, v, work, add,
                                   lambda: _run(node, work, responses, waits, acks, timeout_ms, now_ms, v, big))
    return _run(node, work, responses, waits, acks, timeout_ms, now_ms, v, big)


def _run(node, work, responses, waits, acks: int, timeout_ms: int, now_ms: int, v: int, big: bool):
    """The appends handed to the dirs, then the answer (a Later while a dir has not answered)."""
    if not work:
        return _respond(node, acks, responses, waits=waits, timeout_ms=timeout_ms)
    # Each dir answers on its own; one that has not by the request's own timeout answers REQUEST_TIMED_OUT for
    # its partitions, the others normally. A timeout of 0 or less sets no bound of its own: a dir that never
    # answers is failed by the stall watchdog, which answers its waiting requests KAFKA_STORAGE_ERROR.
    # The answer is a Later the dirs' callbacks complete (no task, future or loop pass per request: the hot path).
    pending = work.run(_Appends(now_ms, v, big), timeout_ms / 1000 if timeout_ms > 0 else None,
                       then=lambda: _respond(node, acks, responses, waits=waits, timeout_ms=timeout_ms), later=True)
    if pending is None:
        return _respond(node, acks, responses, waits=waits, timeout_ms=timeout_ms)
    return pending


def _hand_over(work: DirWork, item: tuple) -> None:
    """An append to the partition's dir (its worker), answered into the slot the item names."""
    plog = item[4]
    if plog.moved_from is not None:
        plog = _serving(plog)
        item = (*item[:4], plog, *item[5:])
    plog.appends_in_flight += 1
    work.add(plog.log_dir, item)


def _transaction_check(plog, records, now_ms: int, add: bool = False) \
        -> tuple[tuple[int, object | None], tuple[bool, int]]:
    """KIP-890 for one transactional batch: ((producer id, guard), (whether the coordinator must be asked, the
    producer's epoch)). A producer with a transaction open here needs no question (its guard None: the worker
    then checks the transaction is still open); else its verification guard is made (Kafka's
    maybeStartTransactionVerification). A log whose producer state is not loaded yet (on the loop no file is
    read) asks: the coordinator's answer is right either way."""
    pid = int.from_bytes(records[PRODUCER_ID_AT:PRODUCER_EPOCH_AT], "big", signed=True)
    epoch = int.from_bytes(records[PRODUCER_EPOCH_AT:BASE_SEQUENCE_AT], "big", signed=True)
    state = plog.producer_state
    if plog.producer_state_ready and state.has_ongoing_txn(pid, epoch):
        return (pid, None), (False, epoch)
    sequence = int.from_bytes(records[BASE_SEQUENCE_AT:RECORDS_COUNT_AT], "big", signed=True)
    return (pid, state.start_verification(pid, sequence, epoch, now_ms, add)), (True, epoch)


def _verification_error(index: int, code: int, v: int) -> PartResp:
    """Kafka's mapping of a coordinator's verification answer for the producer."""
    if code == ErrorCode.TRANSACTION_ABORTABLE and v < 11:  # older producers do not know it
        code = ErrorCode.INVALID_TXN_STATE
    if code == ErrorCode.INVALID_TXN_STATE:
        return _error(index, code, "Partition was not added to the transaction", v)
    if code in VERIFY_RETRIABLE:
        return _error(index, ErrorCode.NOT_ENOUGH_REPLICAS, "Unable to verify the partition has been added to the "
                      f"transaction. Underlying error: {ErrorCode(code).name}", v)
    return _error(index, code, None, v)


def _after_verification(node, tid: str, producer: tuple[int, int], held, v: int, work: DirWork, add: bool,
                        run) -> Later:
    """The request's answer once the coordinator has answered for its held batches: those verified are handed to
    their dirs with the others, the rest answered with the mapped error."""
    out = Later()

    async def verify_then_append() -> None:
        try:
            codes = await verifier_of(node).verify(tid, producer[0], producer[1], [tp for _, tp in held], add)
            for item, tp in held:
                code = codes.get(tp, ErrorCode.NONE)
                if code:
                    item[0][item[1]] = _verification_error(tp[1], code, v)
                else:
                    _hand_over(work, item)
            result = run()
        except BaseException as e:  # handed to the connection, as a handler's own exception would be
            out.fail(e)
            if not isinstance(e, Exception):
                raise
            return
        if result.__class__ is Later:
            result.on_done(out.take)
        else:
            out.resolve(result)

    verifier_of(node).run(verify_then_append())
    return out


def _serving(plog):
    """The log whose dir's worker takes an append to ``plog``, a log a KIP-113 move just swapped in: the log it
    replaced while appends handed to that one's worker (the source dir's) are still out, else ``plog``. Those
    appends land in the moved log on the source dir's worker (_append_one); one handed to the destination dir's
    worker meanwhile could run before them, out of the order the requests came in (a producer's pipelined
    requests on one connection: Kafka's partition lock keeps them in order). Queued behind them on the same
    worker, it keeps their order; once none is out, the moved log's own dir takes its appends."""
    old = plog.moved_from
    if old.appends_in_flight:
        return old
    plog.moved_from = None
    return plog


def _second_batch(records) -> bool:
    """Whether a partition's records hold a complete batch after the first: Kafka's ProduceRequest.validateRecords
    refuses that from v3 (INVALID_RECORD), so a producer's sequences arrive one batch per partition per request.
    A length field below a batch's minimum, or an incomplete tail, is left to validate_batches (CORRUPT_MESSAGE,
    as Kafka's batch iterator answers)."""
    n = len(records)
    if n < LOG_OVERHEAD:
        return False
    length = int.from_bytes(records[8:12], "big", signed=True)
    second = LOG_OVERHEAD + length
    if length < MIN_BATCH_LENGTH or n - second < 17:  # Kafka reads a next batch from 17 bytes (up to its magic)
        return False
    following = int.from_bytes(records[second + 8 : second + 12], "big", signed=True)
    return following >= MIN_BATCH_LENGTH and second + LOG_OVERHEAD + following <= n


class _Appends:
    """On the dir's worker: one request's appends to the partitions of one dir (``together``: the appends of
    several requests handed over together, grouped per partition into one write each)."""

    __slots__ = ("now_ms", "v", "at_once")

    def __init__(self, now_ms: int, v: int, at_once: bool) -> None:
        self.now_ms = now_ms
        self.v = v
        self.at_once = at_once  # batches to validate on the worker: handed over without waiting for a batch

    def __call__(self, items) -> list:
        """Each partition's append, in the request's order: (answer, log end, record count) when it succeeded,
        else the error answer."""
        return [_append_one(item, self.now_ms, self.v) for item in items]

    def native(self, items, writer, worker):
        """The one append of ``items`` on the loop, its write made by the dir's native writer
        (PartitionLog.append_native; DirWorker._native_append): None where it is not taken, (results, None) when
        done, else (None, (the pending append, its results from how it settled))."""
        _parts, _slot, topic, pd, plog, leader_epoch, checked, _lead, txn = items[0]
        if checked is None or txn is not None or plog.closed:
            return None
        v = self.v
        try:
            got = plog.append_native(checked, writer, SYNC_WAIT_MS / 1000, leader_epoch=leader_epoch)
        except Exception as e:  # refused, or the write failed: answered as the worker's append would be
            return [_failed(topic, pd, e, v)], None
        if got is None:
            return None
        if got.__class__ is AppendInfo:
            return [_appended(pd, got)], None

        def complete(ok: bool, value) -> list:
            return [_appended(pd, value) if ok else _failed(topic, pd, value, v)]

        return None, (got, complete)

    @staticmethod
    def together(calls) -> list:
        """The appends of several requests (``calls``: each with ``fn``, its _Appends, and ``items``, in
        hand-over order; kjbod.broker.dir_work), as each request's own call would answer them, with the small
        batches of one partition written at once, idempotent producers' too (PartitionLog.append_validated_together:
        each batch's sequence checked against the state the batches before it in the group left; per partition
        the order is kept, and partitions are independent). One result list per call."""
        outs: list[list] = [[None] * len(call.items) for call in calls]
        by_log: dict = {}
        for c, call in enumerate(calls):
            for i, item in enumerate(call.items):
                entries = by_log.get(item[4])
                if entries is None:
                    by_log[item[4]] = [(c, i, item)]
                else:
                    entries.append((c, i, item))
        for queued, entries in by_log.items():
            plog = queued.current()
            first = entries[0][2]
            if len(entries) > 1 and all(e[2][6] is not None and e[2][5] == first[5] and e[2][8] is None
                                        for e in entries):
                try:
                    infos = plog.append_validated_together([e[2][6] for e in entries], leader_epoch=first[5])
                except Exception as e:
                    for c, i, item in entries:
                        outs[c][i] = _failed(item[2], item[3], e, calls[c].fn.v)
                    continue
                if infos is not None:
                    for (c, i, item), info in zip(entries, infos, strict=True):
                        # an append refused inside the group (a producer's sequence or epoch) has its own error
                        outs[c][i] = (_failed(item[2], item[3], info, calls[c].fn.v) if isinstance(info, Exception)
                                      else _appended(item[3], info))
                    continue
            for c, i, item in entries:
                fn = calls[c].fn
                outs[c][i] = _append_one(item, fn.now_ms, fn.v)
        return outs


def _append_one(item, now_ms: int, v: int):
    _parts, _slot, topic, pd, plog, leader_epoch, checked, _lead, txn = item
    if plog.closed:  # swapped by a KIP-113 move since the request came: append to the moved replica
        plog = plog.current()
    try:
        if txn is not None:  # KIP-890: a transactional batch starts a transaction only once verified
            plog.check_transaction_guard(*txn)
        if checked is not None:
            info = plog.append_validated(checked, leader_epoch=leader_epoch)
        else:
            info = plog.append(pd.records, now_ms=now_ms, leader_epoch=leader_epoch)
    except Exception as e:
        return _failed(topic, pd, e, v)
    return _appended(pd, info)


def _appended(pd, info) -> tuple:
    return (PartResp(index=pd.index, error_code=0, base_offset=info.base_offset,
                     log_append_time_ms=info.log_append_time, log_start_offset=info.log_start_offset),
            info.last_offset + 1, info.record_count)


def _respond(node, acks: int, responses, *, waits, timeout_ms: int):
    failed = False
    topics = []
    stats = node.topic_stats
    for name, topic_id, parts in responses:
        for part in parts:
            if part.error_code:
                failed = True
                if stats is not None:  # the metrics endpoint's counters (kjbod.metrics)
                    stats.produce_failed(name, part.error_code)
        topics.append(TopicResp(name=name, topic_id=topic_id, partition_responses=parts))
    if acks == 0:
        if failed:
            raise CloseConnection("acks=0 produce failed; closing so the producer notices")
        return None
    if waits:
        return replication.await_replication(node, ProduceResponse(responses=topics), waits, timeout_ms)
    return ProduceResponse(responses=topics)


def _failed(topic: str, pd, e: BaseException, v: int) -> PartResp:
    code = getattr(e, "error_code", None)
    if code is None:
        log.warning("produce_failed", topic=topic, partition=pd.index, error=repr(e))
        code = ErrorCode.UNKNOWN_SERVER_ERROR
    resp = _error(pd.index, code, getattr(e, "message", None) or str(e), v)
    if v >= 8:
        # The records refused and why (validate_records); a refusal of the batch as a whole names record 0.
        found = getattr(e, "record_errors", None)
        if found:
            resp.record_errors = [RecordError(batch_index=i, batch_index_error_message=why) for i, why in found]
        elif code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD):
            resp.record_errors = [RecordError(batch_index=0, batch_index_error_message=str(e))]
    return resp
