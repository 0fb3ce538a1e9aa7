"""AddPartitionsToTxn (key 24), versions 0-5.

Version notes: v1 same as v0; v2 answers PRODUCER_FENCED (below v2 it becomes INVALID_PRODUCER_EPOCH, as
Kafka maps it); v3 flexible (producers send v0-v3).  v4 is the broker-to-broker form of KIP-890: a batch of
transactions, each either added (as v3 adds) or, with VerifyOnly, only checked (a partition leader asking
whether a transactional batch's partition is in the producer's ongoing transaction: NONE or
TRANSACTION_ABORTABLE per partition, kjbod.broker.txn.state.TxnBook.verify_partitions); it needs CLUSTER_ACTION
on the cluster (else the whole request answers CLUSTER_AUTHORIZATION_FAILED at the top) and checks no topic
ACL.  v5 same as v4 (TRANSACTION_ABORTABLE was new to it; kjbod answers it to v4 too, as Kafka's coordinator
does, and the leader maps it for the producer).  A v4+ transaction without VerifyOnly is a leader adding the
partitions of a transaction.version 2 producer's batch (Produce v12+, TxnOffsetCommit v5; KIP-890 part 2): the
transaction then keeps ClientTransactionVersion 2; a producer's own v0-3 request sets it to 0, as in Kafka.

The transaction coordinator (kjbod.broker.txn) adds the partitions to the producer's transaction, starting it,
and answers once that is written.  One error answers every partition, except that partitions of topics this
broker does not know answer UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED, as in Kafka.
"""

from __future__ import annotations

import asyncio

from kjbod.broker.authz import allowed, allowed_cluster
from kjbod.broker.router import api
from kjbod.broker.txn.coordinator import coordinator_of
from kjbod.metadata.acls import CLUSTER_ACTION, TRANSACTIONAL_ID, WRITE
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse
from kjbod.protocol.generated.add_partitions_to_txn_request import AddPartitionsToTxnTopic
from kjbod.protocol.generated.add_partitions_to_txn_response import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopicResult,
)


def _results(topics: list[AddPartitionsToTxnTopic], codes: dict[tuple[str, int], int]) \
        -> list[AddPartitionsToTxnTopicResult]:
    return [AddPartitionsToTxnTopicResult(name=t.name, results_by_partition=[AddPartitionsToTxnPartitionResult(
        partition_index=p, partition_error_code=codes[(t.name, p)]) for p in t.partitions]) for t in topics]


def _unknown(node, asked: list[tuple[str, int]]) -> dict[tuple[str, int], int] | None:
    unknown = set()
    for t, p in asked:
        topic = node.metadata.topic(t)
        if topic is None or p not in topic.partitions:
            unknown.add((t, p))
    if not unknown:
        return None
    return {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
            for tp in asked}


async def _one(node, tid: str, pid: int, epoch: int, verify_only: bool, topics: list[AddPartitionsToTxnTopic],
               version: int) -> dict[tuple[str, int], int]:
    asked = [(t.name, p) for t in topics for p in t.partitions]
    codes = _unknown(node, asked)
    if codes is not None:
        return codes
    if verify_only:
        return coordinator_of(node).verify_partitions(tid, pid, epoch, asked)
    # Kafka's transactionVersionForAddPartitionsToTxn: v4 and up (a partition leader adding the partitions of a
    # Produce v12+ or TxnOffsetCommit v5 batch, KIP-890 part 2) is transaction.version 2, v0-3 (a producer's own) 0.
    code = await coordinator_of(node).add_partitions(tid, pid, epoch, asked, 2 if version >= 4 else 0)
    if code == ErrorCode.PRODUCER_FENCED and version < 2:
        code = ErrorCode.INVALID_PRODUCER_EPOCH
    return dict.fromkeys(asked, code)


@api(AddPartitionsToTxnRequest)
async def handle(node, request, body: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse:
    version = request.api_version
    if version >= 4:
        # Sent by brokers only, as Kafka's: the leader's principal needs CLUSTER_ACTION.
        if not allowed_cluster(node, request, CLUSTER_ACTION):
            return AddPartitionsToTxnResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        answers = await asyncio.gather(*(
            _one(node, t.transactional_id, t.producer_id, t.producer_epoch, t.verify_only, t.topics, version)
            for t in body.transactions))
        return AddPartitionsToTxnResponse(results_by_transaction=[
            AddPartitionsToTxnResult(transactional_id=t.transactional_id, topic_results=_results(t.topics, codes))
            for t, codes in zip(body.transactions, answers, strict=True)])
    topics = body.v3_and_below_topics
    codes: dict[tuple[str, int], int]
    if not allowed(node, request, WRITE, TRANSACTIONAL_ID, body.v3_and_below_transactional_id):
        codes = dict.fromkeys(((t.name, p) for t in topics for p in t.partitions),
                              ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    else:
        codes = await _one(node, body.v3_and_below_transactional_id, body.v3_and_below_producer_id,
                           body.v3_and_below_producer_epoch, False, topics, version)
    return AddPartitionsToTxnResponse(results_by_topic_v3_and_below=_results(topics, codes))
