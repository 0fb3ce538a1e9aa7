"""ReadShareGroupStateSummary (key 87), versions 0-1 (KIP-932): start offsets for DescribeShareGroupOffsets.

Version notes: v0 is flexible; v1 adds DeliveryCompleteCount to the answer (KIP-1226).

Each share-partition is answered on its own by the share coordinator (kjbod.broker.share.coordinator): state
epoch, leader epoch, start offset (and the delivery-complete count).  A share-partition never initialized is
answered as Kafka does, without an error: start offset -1, epochs 0, count -1.  INVALID_REQUEST for a negative
partition, UNKNOWN_TOPIC_OR_PARTITION for a topic id or partition the metadata lacks, NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS or COORDINATOR_NOT_AVAILABLE when this broker does not hold the key's partition of
`__share_group_state`.  Brokers only: the router checks CLUSTER_ACTION first, as Kafka does.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kjbod.broker.router import api
from kjbod.broker.share.coordinator import coordinator_of
from kjbod.protocol.generated import ReadShareGroupStateSummaryRequest, ReadShareGroupStateSummaryResponse
from kjbod.protocol.generated.read_share_group_state_summary_response import (
    PartitionResult,
    ReadStateSummaryResult,
)


async def serve(node: Any, body: ReadShareGroupStateSummaryRequest) -> ReadShareGroupStateSummaryResponse:
    sc = coordinator_of(node)
    results = []
    for t in body.topics:
        answers = await asyncio.gather(*(sc.read_summary(body.group_id, t.topic_id, p.partition)
                                         for p in t.partitions))
        results.append(ReadStateSummaryResult(topic_id=t.topic_id, partitions=[
            PartitionResult(partition=p.partition, error_code=a.error_code, error_message=a.error_message,
                            state_epoch=a.state_epoch, leader_epoch=a.leader_epoch, start_offset=a.start_offset,
                            delivery_complete_count=a.delivery_complete_count)
            for p, a in zip(t.partitions, answers, strict=True)]))
    return ReadShareGroupStateSummaryResponse(results=results)


@api(ReadShareGroupStateSummaryRequest)
async def handle(node, request, body: ReadShareGroupStateSummaryRequest) -> ReadShareGroupStateSummaryResponse:
    return await serve(node, body)
