"""InitProducerId (key 22), versions 0-5.

Version notes: v1 same as v0; v2 flexible; v3 lets a producer pass its current id and epoch to bump the epoch
(KIP-360); v4 allows producer fencing checks; v5 only changes client behaviour.

kjbod serves idempotent producers (no transactions): a new producer gets a fresh id; one that passes its
current id gets the same id with the next epoch.  Ids come from blocks the controller hands this broker
(AllocateProducerIds, recorded in the metadata log before they are used), so no two brokers, and no restart,
ever give out the same id.  A transactional id answers INVALID_REQUEST (transactions are not supported).
"""

from __future__ import annotations

from kjbod.broker.node import ProducerIdsUnavailable
from kjbod.broker.router import api
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import InitProducerIdRequest, InitProducerIdResponse

MAX_EPOCH = 32767


@api(InitProducerIdRequest)
async def handle(node, request, body: InitProducerIdRequest) -> InitProducerIdResponse:
    if body.transactional_id:
        return InitProducerIdResponse(error_code=ErrorCode.INVALID_REQUEST)
    if body.producer_id >= 0 and body.producer_epoch >= 0:
        if body.producer_epoch + 1 < MAX_EPOCH:
            return InitProducerIdResponse(error_code=0, producer_id=body.producer_id,
                                          producer_epoch=body.producer_epoch + 1)
    try:
        producer_id = await node.next_producer_id()
    except ProducerIdsUnavailable as e:
        return InitProducerIdResponse(error_code=e.error_code)
    return InitProducerIdResponse(error_code=0, producer_id=producer_id, producer_epoch=0)
