"""Produce (key 0), versions 3-12.

Every batch is validated down to its records before anything is written (kjbod.storage.records: framing,
offsets, timestamps; compressed payloads decompressed), so a refused batch changes nothing on disk.

Version notes: v3 is the oldest served (message format v2 only, transactional id); v4 may answer
KAFKA_STORAGE_ERROR (older versions get NOT_LEADER_OR_FOLLOWER instead, as Kafka maps it); v5 answers the log
start offset; v7 allows zstd (zstd below v7 is UNSUPPORTED_COMPRESSION_TYPE); v8 adds per-batch record errors
and an error message; v9 flexible; v10 adds current-leader hints (tagged); v11 may answer
TRANSACTION_ABORTABLE; v12 only changes client behaviour.

acks=0 produces no response frame; an error then closes the connection, as Kafka does, so the producer finds
out.  Transactions are not supported: a transactional produce answers INVALID_REQUEST with a message saying so.
"""

from __future__ import annotations

import time

import structlog

from kjbod.broker.replication import hooks as replication
from kjbod.broker.router import api
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import ProduceRequest, ProduceResponse
from kjbod.protocol.generated.produce_response import BatchIndexAndErrorMessage as RecordError
from kjbod.protocol.generated.produce_response import PartitionProduceResponse as PartResp
from kjbod.protocol.generated.produce_response import TopicProduceResponse as TopicResp
from kjbod.wire.handler import CloseConnection

log = structlog.get_logger("kjbod.produce")

ZSTD = 4


def _error(index: int, code: int, message: str | None, version: int) -> PartResp:
    if code == ErrorCode.KAFKA_STORAGE_ERROR and version < 4:
        code = ErrorCode.NOT_LEADER_OR_FOLLOWER
    return PartResp(index=index, error_code=code, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1,
                    error_message=message if version >= 8 else None)


@api(ProduceRequest)
def handle(node, request, body: ProduceRequest):
    v = request.api_version
    acks = body.acks
    now_ms = int(time.time() * 1000)
    responses = []
    failed = False
    waits: list[tuple[str, PartResp, int]] = []  # acks=all: (topic, answer, offset the HW must pass)
    for td in body.topic_data:
        parts = []
        topic = node.metadata.topic(td.name)
        for pd in td.partition_data:
            if acks not in (-1, 0, 1):
                parts.append(_error(pd.index, ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be -1, 0 or 1, not {acks}", v))
            elif body.transactional_id is not None:
                parts.append(_error(pd.index, ErrorCode.INVALID_REQUEST, "kjbod does not support transactions", v))
            elif topic is None or pd.index not in topic.partitions:
                parts.append(_error(pd.index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                    f"{td.name}-{pd.index} does not exist on this broker", v))
            elif not pd.records:
                parts.append(_error(pd.index, ErrorCode.INVALID_RECORD, "the request carries no record batch", v))
            elif v < 7 and len(pd.records) > 22 and (pd.records[22] & 0x07) == ZSTD:
                parts.append(_error(pd.index, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                                    "zstd needs Produce v7 or later", v))
            elif acks == -1 and (code := replication.acks_all_refusal(node, td.name, pd.index)):
                parts.append(_error(pd.index, code, f"{td.name}-{pd.index} has fewer in-sync replicas than "
                                    "min.insync.replicas", v))
            else:
                parts.append(_append(node, td.name, pd, now_ms, v, waits if acks == -1 else None))
            if parts[-1].error_code:
                failed = True
        responses.append(TopicResp(name=td.name, partition_responses=parts))
    if acks == 0:
        if failed:
            raise CloseConnection("acks=0 produce failed; closing so the producer notices")
        return None
    if waits:
        return replication.await_replication(node, ProduceResponse(responses=responses), waits, body.timeout_ms)
    return ProduceResponse(responses=responses)


def _append(node, topic: str, pd, now_ms: int, v: int, waits: list | None) -> PartResp:
    try:
        plog = node.partition_log(topic, pd.index)
        info = plog.append(pd.records, now_ms=now_ms, leader_epoch=node.leader_epoch(topic, pd.index))
    except Exception as e:
        code = getattr(e, "error_code", None)
        if code is None:
            log.warning("produce_failed", topic=topic, partition=pd.index, error=repr(e))
            code = ErrorCode.UNKNOWN_SERVER_ERROR
        resp = _error(pd.index, code, getattr(e, "message", None) or str(e), v)
        if v >= 8:
            # The records refused and why (validate_records); a refusal of the batch as a whole names record 0.
            found = getattr(e, "record_errors", None)
            if found:
                resp.record_errors = [RecordError(batch_index=i, batch_index_error_message=why) for i, why in found]
            elif code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD):
                resp.record_errors = [RecordError(batch_index=0, batch_index_error_message=str(e))]
        return resp
    node.notify_append()
    replication.appended(node, topic, pd.index)
    resp = PartResp(index=pd.index, error_code=0, base_offset=info.base_offset,
                    log_append_time_ms=info.log_append_time, log_start_offset=info.log_start_offset)
    if waits is not None and replication.needs_replication(node, topic, pd.index, info.last_offset + 1):
        waits.append((topic, resp, info.last_offset + 1))
    return resp
