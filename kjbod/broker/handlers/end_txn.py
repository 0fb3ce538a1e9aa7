"""EndTxn (key 26), versions 0-5.

Version notes: v1 same as v0; v2 answers PRODUCER_FENCED (below v2 it becomes INVALID_PRODUCER_EPOCH, as Kafka
maps it); v3 flexible; v4 same as v3.  v5 (KIP-890 part 2) is sent by producers speaking transaction.version 2:
the coordinator bumps the producer's epoch at every end (a fresh producer id once the epochs ran out) and the
answer carries the ProducerId and ProducerEpoch to go on with (-1 on error).  As in Kafka, the request's version
decides the rules, not the finalized transaction.version (a producer only sends v5 once the cluster finalizes
level 2).

The transaction coordinator (kjbod.broker.txn) writes PrepareCommit or PrepareAbort and answers once that is
committed: from then on the outcome is decided, and the markers and the Complete* record follow on their own.
A retry of the outcome already reached answers success; the other outcome INVALID_TXN_STATE
(kjbod.broker.txn.state has v5's retry table).
"""

from __future__ import annotations

from kjbod.broker.authz import allowed
from kjbod.broker.router import api
from kjbod.broker.txn.coordinator import coordinator_of
from kjbod.metadata.acls import TRANSACTIONAL_ID, WRITE
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import EndTxnRequest, EndTxnResponse

TV2_END_TXN_VERSION = 5  # Kafka's TransactionVersion.transactionVersionForEndTxn: above 4 is transaction.version 2


@api(EndTxnRequest)
async def handle(node, request, body: EndTxnRequest) -> EndTxnResponse:
    if not allowed(node, request, WRITE, TRANSACTIONAL_ID, body.transactional_id):
        return EndTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    client_tv = 2 if request.api_version >= TV2_END_TXN_VERSION else 0
    code, pid, epoch = await coordinator_of(node).end_txn(body.transactional_id, body.producer_id,
                                                          body.producer_epoch, body.committed, client_tv)
    if code == ErrorCode.PRODUCER_FENCED and request.api_version < 2:
        code = ErrorCode.INVALID_PRODUCER_EPOCH
    return EndTxnResponse(error_code=code, producer_id=pid, producer_epoch=epoch)
