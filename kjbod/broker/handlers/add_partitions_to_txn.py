"""AddPartitionsToTxn (key 24), versions 0-3 (what transactional producers send).

Version notes: v1 same as v0; v2 answers PRODUCER_FENCED (below v2 it becomes INVALID_PRODUCER_EPOCH, as
Kafka maps it); v3 flexible.  v4 and later (brokers verifying a transaction, KIP-890) are not served.

The transaction coordinator (kjbod.broker.txn) adds the partitions to the producer's transaction, starting it,
and answers once that is written.  One error answers every partition, except that partitions of topics this
broker does not know answer UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED, as in Kafka.
"""

from __future__ import annotations

from kjbod.broker.authz import allowed
from kjbod.broker.router import api
from kjbod.broker.txn.coordinator import coordinator_of
from kjbod.metadata.acls import TRANSACTIONAL_ID, WRITE
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse
from kjbod.protocol.generated.add_partitions_to_txn_response import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnTopicResult,
)


@api(AddPartitionsToTxnRequest)
async def handle(node, request, body: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse:
    asked = [(t.name, p) for t in body.v3_and_below_topics for p in t.partitions]
    unknown = set()
    codes: dict[tuple[str, int], int]
    for t, p in asked:
        topic = node.metadata.topic(t)
        if topic is None or p not in topic.partitions:
            unknown.add((t, p))
    if not allowed(node, request, WRITE, TRANSACTIONAL_ID, body.v3_and_below_transactional_id):
        codes = dict.fromkeys(asked, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    elif unknown:
        codes = {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
                 for tp in asked}
    else:
        code = await coordinator_of(node).add_partitions(
            body.v3_and_below_transactional_id, body.v3_and_below_producer_id, body.v3_and_below_producer_epoch,
            asked)
        if code == ErrorCode.PRODUCER_FENCED and request.api_version < 2:
            code = ErrorCode.INVALID_PRODUCER_EPOCH
        codes = dict.fromkeys(asked, code)
    return AddPartitionsToTxnResponse(results_by_topic_v3_and_below=[AddPartitionsToTxnTopicResult(
        name=t.name, results_by_partition=[AddPartitionsToTxnPartitionResult(
            partition_index=p, partition_error_code=codes[(t.name, p)]) for p in t.partitions])
        for t in body.v3_and_below_topics])
