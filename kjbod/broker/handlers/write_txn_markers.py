"""WriteTxnMarkers (key 27), version 1 (the transaction coordinator to the leaders of a transaction's partitions).

Version notes: v0 is gone from Kafka 4 (v1, flexible, is the lowest it serves); v2 adds the transaction version
of a marker (transaction.version 2, which kjbod does not finalize).

Each partition gets a control batch holding one marker record (kjbod.broker.txn.records: commit or abort, the
coordinator epoch), with the producer's id and epoch and the transactional and control attributes, appended
through the Produce path with acks=all, so it is replicated like any batch and answered once committed.  A
marker older than the producer's epoch on the partition answers INVALID_PRODUCER_EPOCH; a partition not led
here NOT_LEADER_OR_FOLLOWER, an unknown one UNKNOWN_TOPIC_OR_PARTITION.  A marker on a partition of
`__consumer_offsets` also settles the producer's pending transactional offsets there (kjbod.broker.groups): they
become the group's committed offsets on commit and are dropped on abort.
"""

from __future__ import annotations

from typing import Any

from kjbod.broker.groups.coordinator import OFFSETS_TOPIC, _InternalRequest, now_ms, settle
from kjbod.broker.router import api
from kjbod.broker.txn import records as rec
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import ProduceRequest, WriteTxnMarkersRequest, WriteTxnMarkersResponse
from kjbod.protocol.generated.produce_request import PartitionProduceData, TopicProduceData
from kjbod.protocol.generated.write_txn_markers_response import (
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
)
from kjbod.storage.records import build_batch

MARKER_WRITE_TIMEOUT_MS = 5000


class _MarkerRequest(_InternalRequest):
    client_id = "kjbod-txn-markers"
    coordinator_origin = True


async def write_markers(node: Any, body: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    """Appends every marker of the request; the per-partition answers."""
    from kjbod.broker.handlers import produce

    results = []
    for marker in body.markers:
        batch = build_batch([(rec.marker_key(marker.transaction_result), rec.marker_value(marker.coordinator_epoch),
                              [], now_ms())], producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
                            is_transactional=True, is_control=True)
        request = ProduceRequest(acks=-1, timeout_ms=MARKER_WRITE_TIMEOUT_MS, topic_data=[
            TopicProduceData(name=t.name, partition_data=[PartitionProduceData(index=p, records=batch)
                                                           for p in t.partition_indexes])
            for t in marker.topics])
        internal: Any = _MarkerRequest()
        resp = await settle(produce.handle(node, internal, request))
        topics = []
        for t in resp.responses:
            parts = []
            for pr in t.partition_responses:
                code = pr.error_code
                if code in (ErrorCode.INVALID_RECORD, ErrorCode.CORRUPT_MESSAGE):
                    code = ErrorCode.UNKNOWN_SERVER_ERROR
                if code == 0 and t.name == OFFSETS_TOPIC:
                    _settle_offsets(node, pr.index, marker.producer_id, marker.transaction_result)
                parts.append(WritableTxnMarkerPartitionResult(partition_index=pr.index, error_code=code))
            topics.append(WritableTxnMarkerTopicResult(name=t.name, partitions=parts))
        results.append(WritableTxnMarkerResult(producer_id=marker.producer_id, topics=topics))
    return WriteTxnMarkersResponse(markers=results)


def _settle_offsets(node: Any, partition: int, producer_id: int, commit: bool) -> None:
    coordinator = getattr(node, "group_coordinator", None)
    if coordinator is not None:
        coordinator.book.end_txn_offsets(producer_id, partition, commit, coordinator.partition_of)


@api(WriteTxnMarkersRequest)
async def handle(node, request, body: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    return await write_markers(node, body)
