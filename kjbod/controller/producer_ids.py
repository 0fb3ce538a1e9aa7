"""AllocateProducerIds (API 67): blocks of producer ids handed to brokers, so ids never collide across brokers.

The image holds the first id no block has covered (ProducerIdsRecord.NextProducerId); each request gets the
next `BLOCK_SIZE` ids and one record moves the watermark past them, durably, before the broker hears of them.
Only a registered broker with its current epoch may ask (STALE_BROKER_EPOCH otherwise), as in Kafka.
"""

from __future__ import annotations

from kjbod.controller.result import ControllerResult
from kjbod.metadata import MetadataImage
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    ProducerIdsRecord,
)

BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
LONG_MAX = (1 << 63) - 1


def allocate_producer_ids(image: MetadataImage, req: AllocateProducerIdsRequest) -> ControllerResult:
    reg = image.brokers.get(req.broker_id)
    if reg is None or reg.epoch != req.broker_epoch:
        return ControllerResult([], AllocateProducerIdsResponse(error_code=ErrorCode.STALE_BROKER_EPOCH))
    start = image.next_producer_id
    if start > LONG_MAX - BLOCK_SIZE:
        return ControllerResult([], AllocateProducerIdsResponse(error_code=ErrorCode.UNKNOWN_SERVER_ERROR))
    record = ProducerIdsRecord(broker_id=req.broker_id, broker_epoch=req.broker_epoch,
                               next_producer_id=start + BLOCK_SIZE)
    return ControllerResult([record], AllocateProducerIdsResponse(
        error_code=0, producer_id_start=start, producer_id_len=BLOCK_SIZE))
