"""WriteTxnMarkers (key 27), versions 1-2 (the transaction coordinator to the leaders of a transaction's partitions).

Version notes: v0 is gone from Kafka 4 (v1, flexible, is the lowest it serves); v2 adds each marker's
TransactionVersion (KIP-1228): a marker of a transaction.version 2 transaction carries the epoch its EndTxn
bumped to, so the leader refuses one whose epoch is not above the producer's epoch on the partition
(INVALID_PRODUCER_EPOCH), except the same epoch once that transaction has ended there (a resent marker, written
again as Kafka does) or at 32767; below 2 (and for v1) only an older epoch is refused.  The check is made on the
loop against the partition's producer state when it is loaded (a state not yet loaded leaves it to the append's
own check, which refuses an older epoch).

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

import structlog

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
MAX_EPOCH = 32767
log = structlog.get_logger("kjbod.txn.markers")


class _MarkerRequest(_InternalRequest):
    client_id = "kjbod-txn-markers"
    coordinator_origin = True


async def write_markers(node: Any, body: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    """Appends every marker of the request; the per-partition answers."""
    from kjbod.broker.handlers import produce

    results = []
    for marker in body.markers:
        refused = _tv2_refusals(node, marker) if marker.transaction_version >= 2 else {}
        batch = build_batch([(rec.marker_key(marker.transaction_result), rec.marker_value(marker.coordinator_epoch),
                              [], now_ms())], producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
                            is_transactional=True, is_control=True)
        request = ProduceRequest(acks=-1, timeout_ms=MARKER_WRITE_TIMEOUT_MS, topic_data=[
            TopicProduceData(name=t.name, partition_data=[PartitionProduceData(index=p, records=batch)
                                                           for p in t.partition_indexes])
            for t in marker.topics if any((t.name, p) not in refused for p in t.partition_indexes)])
        for t in request.topic_data:
            t.partition_data = [pd for pd in t.partition_data if (t.name, pd.index) not in refused]
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
        by_name = {t.name: t for t in topics}
        for (name, index), code in refused.items():
            if name not in by_name:
                by_name[name] = WritableTxnMarkerTopicResult(name=name, partitions=[])
                topics.append(by_name[name])
            by_name[name].partitions.append(WritableTxnMarkerPartitionResult(partition_index=index, error_code=code))
        results.append(WritableTxnMarkerResult(producer_id=marker.producer_id, topics=topics))
    return WriteTxnMarkersResponse(markers=results)


def _tv2_refusals(node: Any, marker: Any) -> dict[tuple[str, int], int]:
    """The partitions whose producer state refuses a transaction.version 2 marker (Kafka's checkProducerEpoch
    with TV2: the marker's epoch must be above the producer's, or equal once its transaction has ended)."""
    out: dict[tuple[str, int], int] = {}
    for t in marker.topics:
        for p in t.partition_indexes:
            try:
                plog = node.partition_log(t.name, p)
            except Exception:
                continue  # not led here: the append answers it
            if plog is None or not plog.producer_state_ready:
                continue
            entry = plog.producer_state.producers.get(marker.producer_id)
            if entry is None or marker.producer_epoch > entry.epoch:
                continue
            if marker.producer_epoch == entry.epoch and (entry.txn_first_offset < 0
                                                         or marker.producer_epoch == MAX_EPOCH):
                continue  # the marker again, after its transaction ended here: written again, as Kafka does
            log.info("transaction_marker_epoch_refused", topic=t.name, partition=p, producer_id=marker.producer_id,
                     marker_epoch=marker.producer_epoch, producer_epoch=entry.epoch)
            out[(t.name, p)] = ErrorCode.INVALID_PRODUCER_EPOCH
    return out


def _settle_offsets(node: Any, partition: int, producer_id: int, commit: bool) -> None:
    coordinator = getattr(node, "group_coordinator", None)
    if coordinator is not None:
        coordinator.book.end_txn_offsets(producer_id, partition, commit, coordinator.partition_of)


@api(WriteTxnMarkersRequest)
async def handle(node, request, body: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    return await write_markers(node, body)
