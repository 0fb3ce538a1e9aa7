"""InitProducerId (key 22), versions 0-5.

Version notes: v1 same as v0; v2 flexible; v3 lets a producer pass its current id and epoch (KIP-360); v4 answers
PRODUCER_FENCED (older versions hear INVALID_PRODUCER_EPOCH instead, as Kafka maps it); v5 only changes client
behaviour.

Without a transactional id (an idempotent producer) Kafka's coordinator accepts every request blindly and
answers a fresh producer id with epoch 0, whatever id and epoch the request carries (an idempotent producer bumps
its own epoch without asking); kjbod answers the same.  The id and epoch must still be both set or both -1
(INVALID_REQUEST otherwise), and an empty transactional id is INVALID_REQUEST, as in Kafka.  Ids come from blocks
the controller hands this broker (AllocateProducerIds, recorded in the metadata log before they are used), so no
two brokers, and no restart, ever give out the same id.

With a transactional id the transaction coordinator answers (kjbod.broker.txn): a new id, or the epoch of the
known one bumped (fencing its older instance), transaction.timeout.ms checked against
transaction.max.timeout.ms (INVALID_TRANSACTION_TIMEOUT); NOT_COORDINATOR from a broker that does not lead the
id's `__transaction_state` partition.  Every error answers producer id and epoch -1.
"""

from __future__ import annotations

from kjbod.broker.authz import allowed, idempotent_write_allowed
from kjbod.broker.node import ProducerIdsUnavailable
from kjbod.broker.router import api
from kjbod.broker.txn.coordinator import coordinator_of
from kjbod.metadata.acls import TRANSACTIONAL_ID, WRITE
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import InitProducerIdRequest, InitProducerIdResponse

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


def _error(code: int, version: int) -> InitProducerIdResponse:
    if code == ErrorCode.PRODUCER_FENCED and version < 4:
        code = ErrorCode.INVALID_PRODUCER_EPOCH
    return InitProducerIdResponse(error_code=code, producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH)


@api(InitProducerIdRequest)
async def handle(node, request, body: InitProducerIdRequest) -> InitProducerIdResponse:
    v = request.api_version
    if (body.producer_id == NO_PRODUCER_ID) != (body.producer_epoch == NO_PRODUCER_EPOCH):
        return _error(ErrorCode.INVALID_REQUEST, v)
    if body.transactional_id == "":
        return _error(ErrorCode.INVALID_REQUEST, v)
    if getattr(node, "authorizer", None) is not None:
        if body.transactional_id is not None:  # Kafka: WRITE on the transactional id
            if not allowed(node, request, WRITE, TRANSACTIONAL_ID, body.transactional_id):
                return _error(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, v)
        elif not idempotent_write_allowed(node, request):
            return _error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, v)
    try:
        if body.transactional_id is not None:
            coordinator = coordinator_of(node)
            code, _ = await coordinator.ensure_topic()
            if code:
                return _error(code, v)
            code, pid, epoch = await coordinator.init_producer_id(
                body.transactional_id, body.transaction_timeout_ms, body.producer_id, body.producer_epoch)
            if code:
                return _error(code, v)
            return InitProducerIdResponse(error_code=0, producer_id=pid, producer_epoch=epoch)
        producer_id = await node.next_producer_id()
    except ProducerIdsUnavailable as e:
        return _error(e.error_code, v)
    return InitProducerIdResponse(error_code=0, producer_id=producer_id, producer_epoch=0)
