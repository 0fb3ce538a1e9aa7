"""DescribeProducers (key 61), version 0 (KIP-664: `kafka-transactions.sh describe-producers`).

Version notes: v0 is the only version, flexible.

Per topic, in Kafka's order: a name no topic may have is INVALID_TOPIC_EXCEPTION, no READ on the topic
TOPIC_AUTHORIZATION_FAILED, a topic the image lacks UNKNOWN_TOPIC_OR_PARTITION, for each partition asked about.
Then per partition, where it is hosted (UNKNOWN_TOPIC_OR_PARTITION for a partition the topic lacks,
NOT_LEADER_OR_FOLLOWER unless this broker leads it, KAFKA_STORAGE_ERROR for an offline dir) and the leader's
producer state: every producer id it keeps, with its epoch, last sequence, last timestamp, the coordinator epoch
of its last marker and where its open transaction began (-1: none).  The state is read on the partition's dir
worker, loaded there first when a restart has not needed it yet.
"""

from __future__ import annotations

from typing import Any

from kjbod.broker.authz import allowed
from kjbod.broker.dir_work import DirWork
from kjbod.broker.handlers.leader_epoch_check import checked_log
from kjbod.broker.router import api
from kjbod.metadata.acls import READ, TOPIC
from kjbod.metadata.names import topic_name_problem
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import DescribeProducersRequest, DescribeProducersResponse
from kjbod.protocol.generated.describe_producers_response import (
    PartitionResponse,
    ProducerState,
    TopicResponse,
)

# How long the dir workers may take when a partition's producer state must be loaded first (a client's default
# request.timeout.ms is 30 s; a busy dir answers REQUEST_TIMED_OUT for its partitions before that).
DISK_WAIT_S = 20.0


def _read(items: list[Any]) -> list[Any]:
    """On the dir's worker: each log's active producers."""
    return [plog.active_producers() for _answer, plog in items]


def _fill(item: Any, producers: Any) -> None:
    answer, _plog = item
    answer.active_producers = [
        ProducerState(producer_id=e.producer_id, producer_epoch=e.epoch, last_sequence=e.last_seq,
                      last_timestamp=e.last_timestamp, coordinator_epoch=e.coordinator_epoch,
                      current_txn_start_offset=e.txn_first_offset)
        for e in producers]


def _fail(item: Any, e: BaseException | None) -> None:
    answer, plog = item
    if e is None:
        answer.error_code, answer.error_message = ErrorCode.REQUEST_TIMED_OUT, f"{plog.name}: its log dir is busy"
    else:
        answer.error_code = getattr(e, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR)
        answer.error_message = str(e) or None


@api(DescribeProducersRequest)
def handle(node: Any, request: Any, body: DescribeProducersRequest) -> Any:
    work = DirWork(node, _fill, _fail)
    topics = []
    for t in body.topics:
        parts: list[PartitionResponse] = []
        topics.append(TopicResponse(name=t.name, partitions=parts))
        problem = topic_name_problem(t.name)
        code: int
        if problem:
            code, message = ErrorCode.INVALID_TOPIC_EXCEPTION, problem
        elif not allowed(node, request, READ, TOPIC, t.name):
            code, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
        elif node.metadata.topic(t.name) is None:
            code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        else:
            code, message = 0, None
        for p in t.partition_indexes:
            answer = PartitionResponse(partition_index=p, error_code=code, error_message=message,
                                       active_producers=[])
            parts.append(answer)
            if code:
                continue
            try:
                plog = checked_log(node, t.name, p, -1)
            except Exception as e:
                answer.error_code = getattr(e, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR)
                continue
            if not plog.online:
                answer.error_code = ErrorCode.KAFKA_STORAGE_ERROR if not plog.io.online \
                    else ErrorCode.NOT_LEADER_OR_FOLLOWER
                continue
            work.add(plog.log_dir, (answer, plog))
    response = DescribeProducersResponse(topics=topics)
    if not work:
        return response
    pending = work.run(_read, DISK_WAIT_S)
    if pending is None:
        return response
    return _after(pending, response)


async def _after(pending: Any, response: DescribeProducersResponse) -> DescribeProducersResponse:
    await pending
    return response
