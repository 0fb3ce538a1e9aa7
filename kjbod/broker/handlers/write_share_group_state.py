"""WriteShareGroupState (key 85), versions 0-1 (KIP-932): a share-partition leader records delivery state.

Version notes: v0 is flexible; v1 adds DeliveryCompleteCount (KIP-1226; -1 from a v0 request).

Each share-partition is answered on its own by the share coordinator (kjbod.broker.share.coordinator): the write
becomes a ShareUpdate record (a ShareSnapshot of the combined state every
share.coordinator.snapshot.update.records.per.snapshot updates); INVALID_REQUEST for a state never initialized
or a negative partition, FENCED_LEADER_EPOCH / FENCED_STATE_EPOCH for epochs older than the stored ones,
UNKNOWN_TOPIC_OR_PARTITION for a topic id or partition the metadata lacks, NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS or COORDINATOR_NOT_AVAILABLE when this broker does not hold the key's partition of
`__share_group_state`.  Brokers only: the router checks CLUSTER_ACTION first, as Kafka does.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kjbod.broker.router import api
from kjbod.broker.share.coordinator import coordinator_of
from kjbod.broker.share.persister import StateBatch
from kjbod.protocol.generated import WriteShareGroupStateRequest, WriteShareGroupStateResponse
from kjbod.protocol.generated.write_share_group_state_response import PartitionResult, WriteStateResult


async def serve(node: Any, body: WriteShareGroupStateRequest) -> WriteShareGroupStateResponse:
    sc = coordinator_of(node)
    results = []
    for t in body.topics:
        answers = await asyncio.gather(*(sc.write(
            body.group_id, t.topic_id, p.partition, p.state_epoch, p.leader_epoch, p.start_offset,
            p.delivery_complete_count,
            tuple(StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                  for b in p.state_batches)) for p in t.partitions))
        results.append(WriteStateResult(topic_id=t.topic_id, partitions=[
            PartitionResult(partition=p.partition, error_code=a.error_code, error_message=a.error_message)
            for p, a in zip(t.partitions, answers, strict=True)]))
    return WriteShareGroupStateResponse(results=results)


@api(WriteShareGroupStateRequest)
async def handle(node, request, body: WriteShareGroupStateRequest) -> WriteShareGroupStateResponse:
    return await serve(node, body)
