"""InitializeShareGroupState (key 83), version 0 (KIP-932): the group coordinator starts share-partitions' state.

Version notes: v0 is the only version, flexible.

Each share-partition is answered on its own by the share coordinator (kjbod.broker.share.coordinator): a new
ShareSnapshot with the given state epoch and start offset (-1: the leader picks one on its first read), no batches;
FENCED_STATE_EPOCH for a state epoch older than the stored one; NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS or
COORDINATOR_NOT_AVAILABLE when this broker does not hold the key's partition of `__share_group_state`.  Brokers
only: the router checks CLUSTER_ACTION first, as Kafka does.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kjbod.broker.router import api
from kjbod.broker.share.coordinator import coordinator_of
from kjbod.protocol.generated import InitializeShareGroupStateRequest, InitializeShareGroupStateResponse
from kjbod.protocol.generated.initialize_share_group_state_response import (
    InitializeStateResult,
    PartitionResult,
)


async def serve(node: Any, body: InitializeShareGroupStateRequest) -> InitializeShareGroupStateResponse:
    sc = coordinator_of(node)
    results = []
    for t in body.topics:
        answers = await asyncio.gather(*(sc.initialize(body.group_id, t.topic_id, p.partition, p.state_epoch,
                                                       p.start_offset) for p in t.partitions))
        results.append(InitializeStateResult(topic_id=t.topic_id, partitions=[
            PartitionResult(partition=p.partition, error_code=a.error_code, error_message=a.error_message)
            for p, a in zip(t.partitions, answers, strict=True)]))
    return InitializeShareGroupStateResponse(results=results)


@api(InitializeShareGroupStateRequest)
async def handle(node, request, body: InitializeShareGroupStateRequest) -> InitializeShareGroupStateResponse:
    return await serve(node, body)
