"""ReadShareGroupState (key 84), version 0 (KIP-932): a share-partition leader reads the state it starts from.

Version notes: v0 is the only version, flexible.

Each share-partition is answered on its own by the share coordinator (kjbod.broker.share.coordinator): its state
epoch, start offset and state batches.  A leader epoch newer than the recorded one is written down first (a
ShareUpdate, or a ShareSnapshot when one is due), an older one is FENCED_LEADER_EPOCH; INVALID_REQUEST for a
state never initialized or a negative partition, UNKNOWN_TOPIC_OR_PARTITION for a topic id or partition the
metadata lacks, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS or COORDINATOR_NOT_AVAILABLE when this broker does
not hold the key's partition of `__share_group_state`.  Brokers only: the router checks CLUSTER_ACTION first.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kjbod.broker.router import api
from kjbod.broker.share.coordinator import coordinator_of
from kjbod.protocol.generated import ReadShareGroupStateRequest, ReadShareGroupStateResponse
from kjbod.protocol.generated.read_share_group_state_response import (
    PartitionResult,
    ReadStateResult,
    StateBatch,
)


async def serve(node: Any, body: ReadShareGroupStateRequest) -> ReadShareGroupStateResponse:
    sc = coordinator_of(node)
    results = []
    for t in body.topics:
        answers = await asyncio.gather(*(sc.read(body.group_id, t.topic_id, p.partition, p.leader_epoch)
                                         for p in t.partitions))
        results.append(ReadStateResult(topic_id=t.topic_id, partitions=[
            PartitionResult(partition=p.partition, error_code=a.error_code, error_message=a.error_message,
                            state_epoch=a.state_epoch, start_offset=a.start_offset,
                            state_batches=[StateBatch(b.first_offset, b.last_offset, b.delivery_state,
                                                      b.delivery_count) for b in a.batches])
            for p, a in zip(t.partitions, answers, strict=True)]))
    return ReadShareGroupStateResponse(results=results)


@api(ReadShareGroupStateRequest)
async def handle(node, request, body: ReadShareGroupStateRequest) -> ReadShareGroupStateResponse:
    return await serve(node, body)
