"""TxnOffsetCommit (key 28), versions 0-5.

Version notes: v1 same as v0; v2 adds the committed leader epoch; v3 flexible, with the consumer's generation,
member id and instance id (KIP-447), checked as OffsetCommit checks them when a generation is given; v4-v5 same
as v3.

The offsets are written to the group's `__consumer_offsets` partition as a transactional batch carrying the
producer's id and epoch (an epoch older than the one the partition knows answers INVALID_PRODUCER_EPOCH), and
kept pending: OffsetFetch does not show them until the transaction's commit marker reaches that partition; an
abort marker drops them (kjbod.broker.groups.state: GroupBook.pending_txn).  The partition must have joined the
transaction first (AddOffsetsToTxn): checked in-process when this broker coordinates the transaction too, else
(transaction.partition.verification.enable, KIP-890) asked of the transaction coordinator as a Produce leader asks
(kjbod.broker.txn.verification) unless the producer has a transaction open on that partition already; Kafka's
mapping of the answer: NETWORK_EXCEPTION becomes COORDINATOR_LOAD_IN_PROGRESS, TRANSACTION_ABORTABLE becomes
INVALID_TXN_STATE below v4.

v5 is sent by producers speaking transaction.version 2 (KIP-890 part 2), which send no AddOffsetsToTxn: the
group's offsets partition is added to the transaction here (in-process when this broker coordinates the
transaction, else AddPartitionsToTxn v5 without VerifyOnly to its coordinator), whether or not verification is
enabled, and the coordinator's refusal is each partition's answer.
"""

from __future__ import annotations

from kjbod.broker.authz import allowed
from kjbod.broker.groups import records as rec
from kjbod.broker.groups.coordinator import OFFSETS_TOPIC, coordinator_of, now_ms
from kjbod.broker.groups.state import CommittedOffset
from kjbod.broker.router import api
from kjbod.broker.txn.verification import verification_enabled, verifier_of
from kjbod.metadata.acls import GROUP, READ, TRANSACTIONAL_ID, WRITE
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import TxnOffsetCommitRequest, TxnOffsetCommitResponse
from kjbod.protocol.generated.txn_offset_commit_response import (
    TxnOffsetCommitResponsePartition as PartResp,
)
from kjbod.protocol.generated.txn_offset_commit_response import TxnOffsetCommitResponseTopic as TopicResp

TV2_TXN_OFFSET_COMMIT_VERSION = 5  # Kafka: above 4 adds the group's partition to the transaction (KIP-890 part 2)


def _answer(body: TxnOffsetCommitRequest, codes: dict[tuple[str, int], int]) -> TxnOffsetCommitResponse:
    return TxnOffsetCommitResponse(topics=[TopicResp(name=t.name, partitions=[
        PartResp(partition_index=p.partition_index, error_code=codes[(t.name, p.partition_index)])
        for p in t.partitions]) for t in body.topics])


@api(TxnOffsetCommitRequest)
async def handle(node, request, body: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    v = request.api_version
    asked = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
    if not allowed(node, request, WRITE, TRANSACTIONAL_ID, body.transactional_id):
        return _answer(body, dict.fromkeys(asked, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    if not allowed(node, request, READ, GROUP, body.group_id):
        return _answer(body, dict.fromkeys(asked, ErrorCode.GROUP_AUTHORIZATION_FAILED))
    if not body.group_id:
        return _answer(body, dict.fromkeys(asked, ErrorCode.INVALID_GROUP_ID))
    coordinator = coordinator_of(node)
    if (code := coordinator.status(body.group_id)):
        return _answer(body, dict.fromkeys(asked, code))
    from kjbod.broker.txn.coordinator import coordinator_of as txns_of

    txns = getattr(node, "txn_coordinator", None) or txns_of(node)
    now = now_ms()
    codes: dict[tuple[str, int], int] = {}
    offsets: dict[tuple[str, int], CommittedOffset] = {}
    for t in body.topics:
        topic = node.metadata.topic(t.name)
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            metadata = p.committed_metadata or ""
            if topic is None or p.partition_index not in topic.partitions:
                codes[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif len(metadata.encode("utf-8")) > coordinator.config.offset_metadata_max_bytes:
                codes[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                offsets[tp] = CommittedOffset(p.committed_offset, p.committed_leader_epoch if v >= 2 else -1,
                                              metadata, now)
    if offsets and v >= 3 and (body.generation_id >= 0 or body.member_id):
        if body.group_id in coordinator.streams_groups:  # KIP-1071: the streams member's epoch
            code = coordinator.streams.check_commit(body.group_id, body.member_id, body.generation_id,
                                                    body.group_instance_id, v, transactional=True)
        else:
            code = coordinator.book.check_commit(now, body.group_id, body.generation_id, body.member_id,
                                                 body.group_instance_id, transactional=True)
        if code:
            codes.update(dict.fromkeys(offsets, code))
            offsets = {}
    offsets_tp = (OFFSETS_TOPIC, coordinator.partition_of(body.group_id))
    if offsets and v >= TV2_TXN_OFFSET_COMMIT_VERSION:
        code = await _verified(node, body, offsets_tp, v, add=True)
        if code:
            codes.update(dict.fromkeys(offsets, code))
            offsets = {}
    elif offsets and txns.status(body.transactional_id) == ErrorCode.NONE:
        # This broker coordinates the transaction too: the offsets partition must be in it (AddOffsetsToTxn).
        code = txns.book.check_ongoing(body.transactional_id, body.producer_id, body.producer_epoch,
                                       (OFFSETS_TOPIC, coordinator.partition_of(body.group_id)))
        if code:
            codes.update(dict.fromkeys(offsets, code))
            offsets = {}
    elif offsets and verification_enabled(node):
        code = await _verified(node, body, (OFFSETS_TOPIC, coordinator.partition_of(body.group_id)), v)
        if code:
            codes.update(dict.fromkeys(offsets, code))
            offsets = {}
    if offsets:
        code = await coordinator.append(body.group_id, [
            (rec.offset_key(body.group_id, t, p), rec.offset_value(c)) for (t, p), c in offsets.items()],
            too_large=ErrorCode.INVALID_COMMIT_OFFSET_SIZE, producer_id=body.producer_id,
            producer_epoch=body.producer_epoch)
        if code == 0:
            coordinator.book.add_txn_offsets(body.producer_id, body.group_id, offsets)
        codes.update(dict.fromkeys(offsets, code))
    return _answer(body, codes)


async def _verified(node, body: TxnOffsetCommitRequest, tp: tuple[str, int], v: int, add: bool = False) -> int:
    """KIP-890 for the offsets partition, the transaction coordinator being elsewhere: 0 when the producer's
    transaction is open on it here or the coordinator has it in the transaction (with `add`, v5: puts it in)."""
    try:
        plog = node.partition_log(*tp)
    except Exception:
        plog = None
    if plog is not None and plog.producer_state_ready and plog.producer_state.has_ongoing_txn(body.producer_id,
                                                                                             body.producer_epoch):
        return ErrorCode.NONE
    answer = await verifier_of(node).verify(body.transactional_id, body.producer_id, body.producer_epoch, [tp],
                                            add)
    code = answer.get(tp, ErrorCode.NONE)
    if code == ErrorCode.NETWORK_EXCEPTION:
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    if code == ErrorCode.TRANSACTION_ABORTABLE and v < 4:
        return ErrorCode.INVALID_TXN_STATE
    return code
