"""InitProducerId (key 22), versions 0-5.

Version notes: v1 same as v0; v2 flexible; v3 lets a producer pass its current id and epoch (KIP-360); v4 allows
producer fencing checks; v5 only changes client behaviour.

kjbod serves idempotent producers (no transactions).  Without a transactional id Kafka's coordinator accepts
every request blindly and answers a fresh producer id with epoch 0, whatever id and epoch the request carries
(an idempotent producer bumps its own epoch without asking); kjbod answers the same.  The id and epoch must
still be both set or both -1 (INVALID_REQUEST otherwise), and an empty transactional id is INVALID_REQUEST, as
in Kafka.  Ids come from blocks the controller hands this broker (AllocateProducerIds, recorded in the metadata
log before they are used), so no two brokers, and no restart, ever give out the same id.  A transactional id
answers INVALID_REQUEST (transactions are not supported).  Every error answers producer id and epoch -1.
"""

from __future__ import annotations

from kjbod.broker.authz import idempotent_write_allowed
from kjbod.broker.node import ProducerIdsUnavailable
from kjbod.broker.router import api
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import InitProducerIdRequest, InitProducerIdResponse

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


def _error(code: int) -> InitProducerIdResponse:
    return InitProducerIdResponse(error_code=code, producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH)


@api(InitProducerIdRequest)
async def handle(node, request, body: InitProducerIdRequest) -> InitProducerIdResponse:
    if (body.producer_id == NO_PRODUCER_ID) != (body.producer_epoch == NO_PRODUCER_EPOCH):
        return _error(ErrorCode.INVALID_REQUEST)
    if body.transactional_id is not None:  # "" is INVALID_REQUEST in Kafka too; any other id needs transactions
        return _error(ErrorCode.INVALID_REQUEST)
    if getattr(node, "authorizer", None) is not None and not idempotent_write_allowed(node, request):
        return _error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    try:
        producer_id = await node.next_producer_id()
    except ProducerIdsUnavailable as e:
        return _error(e.error_code)
    return InitProducerIdResponse(error_code=0, producer_id=producer_id, producer_epoch=0)
