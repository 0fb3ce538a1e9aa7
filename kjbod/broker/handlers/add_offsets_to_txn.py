"""AddOffsetsToTxn (key 25), versions 0-4.

Version notes: v1 same as v0; v2 answers PRODUCER_FENCED (below v2 it becomes INVALID_PRODUCER_EPOCH, as
Kafka maps it); v3 flexible; v4 same as v3.

The group's `__consumer_offsets` partition (the one its group coordinator writes) joins the producer's
transaction, as AddPartitionsToTxn would add it, so the transaction's markers settle the offsets the producer
then commits with TxnOffsetCommit.
"""

from __future__ import annotations

from kjbod.broker.authz import allowed
from kjbod.broker.groups.coordinator import coordinator_of as groups_of
from kjbod.broker.router import api
from kjbod.broker.txn.coordinator import coordinator_of, offsets_partition
from kjbod.metadata.acls import TRANSACTIONAL_ID, WRITE
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse


@api(AddOffsetsToTxnRequest)
async def handle(node, request, body: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    if not allowed(node, request, WRITE, TRANSACTIONAL_ID, body.transactional_id):
        return AddOffsetsToTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not body.group_id:
        return AddOffsetsToTxnResponse(error_code=ErrorCode.INVALID_GROUP_ID)
    code, _ = await groups_of(node).ensure_topic()  # the group's partition must exist to join the transaction
    if not code:
        code = await coordinator_of(node).add_partitions(
            body.transactional_id, body.producer_id, body.producer_epoch, [offsets_partition(node, body.group_id)])
    if code == ErrorCode.PRODUCER_FENCED and request.api_version < 2:
        code = ErrorCode.INVALID_PRODUCER_EPOCH
    return AddOffsetsToTxnResponse(error_code=code)
