"""DeleteShareGroupState (key 86), version 0 (KIP-932): the group coordinator drops share-partitions' state.

Version notes: v0 is the only version, flexible.

Each share-partition is answered on its own by the share coordinator (kjbod.broker.share.coordinator): a
ShareSnapshot tombstone when there is state (none is needed when there is not: success either way);
INVALID_REQUEST for a negative partition, UNKNOWN_TOPIC_OR_PARTITION for a topic id or partition the metadata
lacks, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS or COORDINATOR_NOT_AVAILABLE when this broker does not hold
the key's partition of `__share_group_state`.  Brokers only: the router checks CLUSTER_ACTION first.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kjbod.broker.router import api
from kjbod.broker.share.coordinator import coordinator_of
from kjbod.protocol.generated import DeleteShareGroupStateRequest, DeleteShareGroupStateResponse
from kjbod.protocol.generated.delete_share_group_state_response import DeleteStateResult, PartitionResult


async def serve(node: Any, body: DeleteShareGroupStateRequest) -> DeleteShareGroupStateResponse:
    sc = coordinator_of(node)
    results = []
    for t in body.topics:
        answers = await asyncio.gather(*(sc.delete(body.group_id, t.topic_id, p.partition) for p in t.partitions))
        results.append(DeleteStateResult(topic_id=t.topic_id, partitions=[
            PartitionResult(partition=p.partition, error_code=a.error_code, error_message=a.error_message)
            for p, a in zip(t.partitions, answers, strict=True)]))
    return DeleteShareGroupStateResponse(results=results)


@api(DeleteShareGroupStateRequest)
async def handle(node, request, body: DeleteShareGroupStateRequest) -> DeleteShareGroupStateResponse:
    return await serve(node, body)
