"""DescribeTopicPartitions (key 75), version 0 (KIP-966; Kafka's AdminClient describes topics with it since 3.8).

Version notes: v0 only; flexible.

Metadata's topic and partition answer, paged.  The topics asked for (all of them when the list is empty) are
taken in name order from the cursor's topic on, and their partitions in index order from the cursor's partition
(for the cursor's topic; from 0 for the others), until the page holds as many partitions as the smaller of the
request's ResponsePartitionLimit and the broker's `max.request.partition.size.limit` (at least 1).  A topic cut
short sets NextCursor to its first partition left out; a page that fills up exactly at a topic's end sets it to
the next topic's partition 0; the last page has none.  This is Kafka's DescribeTopicPartitionsRequestHandler:

- a named topic that does not exist is UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION when the name is not
  a legal one) and takes no room in the page; with an empty list, only existing topics are walked;
- a named topic the caller may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED (zero topic id, after the others);
  when every topic is asked for, such topics are left out silently;
- a cursor whose topic is not among the named topics, or whose partition is negative, is INVALID_REQUEST for
  every topic named (none when all were asked for), as Kafka's error response for the whole request;
- a partition whose leader is not registered or has no endpoint for this listener has leader -1 and error 0;
  offline replicas are Metadata's (fenced or gone brokers, no such listener, the replica's log dir offline);
- EligibleLeaderReplicas and LastKnownElr are the partition's KIP-966 ELR and last known ELR from the metadata
  image (empty lists while eligible.leader.replicas.version is 0, as Kafka answers);
- TopicAuthorizedOperations is filled for every topic answered but the refused ones.
"""

from __future__ import annotations

from kjbod.broker.authz import allowed, authorized_operations
from kjbod.broker.handlers.metadata import INTERNAL_TOPICS, offline_replicas
from kjbod.broker.router import api
from kjbod.metadata.acls import DESCRIBE, TOPIC
from kjbod.metadata.names import topic_name_problem
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse
from kjbod.protocol.generated.describe_topic_partitions_response import Cursor
from kjbod.protocol.generated.describe_topic_partitions_response import (
    DescribeTopicPartitionsResponsePartition as Partition,
)
from kjbod.protocol.generated.describe_topic_partitions_response import (
    DescribeTopicPartitionsResponseTopic as Topic,
)
from kjbod.protocol.runtime import ZERO_UUID


def page_limit(node, asked: int) -> int:
    """The most partitions one answer holds: the client's limit capped by the broker's, and at least one."""
    cap = node.config.max_request_partition_size_limit
    return max(min(cap, asked), 1)


def describe_partition(node, topic, p, listener: str) -> Partition:
    image = node.metadata
    if image.brokers:
        here_online = node.node_id not in p.replicas or node.partition_online(topic.name, p.partition)
        offline = offline_replicas(node, p, listener, here_online)
        leader = image.brokers.get(p.leader)
        leader_id = p.leader if leader is not None and leader.endpoint(listener) is not None else -1
    else:  # a node that keeps no broker registrations answers for itself
        offline, leader_id = [], p.leader
    return Partition(error_code=0, partition_index=p.partition, leader_id=leader_id, leader_epoch=p.leader_epoch,
                     replica_nodes=list(p.replicas), isr_nodes=list(p.isr), eligible_leader_replicas=list(p.elr),
                     last_known_elr=list(p.last_known_elr), offline_replicas=offline)


def invalid_request(body: DescribeTopicPartitionsRequest) -> DescribeTopicPartitionsResponse:
    return DescribeTopicPartitionsResponse(topics=[
        Topic(error_code=ErrorCode.INVALID_REQUEST, name=t.name, is_internal=False, partitions=[])
        for t in body.topics])


@api(DescribeTopicPartitionsRequest)
def handle(node, request, body: DescribeTopicPartitionsRequest) -> DescribeTopicPartitionsResponse:
    image = node.metadata
    listener = request.ctx.listener_name
    cursor = body.cursor
    start_name = cursor.topic_name if cursor is not None else ""
    every_topic = not body.topics
    names = {t.name for t in image.topics()} if every_topic else {t.name for t in body.topics}
    names = {n for n in names if n >= start_name}
    if cursor is not None and ((not every_topic and cursor.topic_name not in names) or cursor.partition_index < 0):
        return invalid_request(body)

    refused: list[Topic] = []
    walk: list[str] = []
    for name in sorted(names):
        if allowed(node, request, DESCRIBE, TOPIC, name):
            walk.append(name)
        elif not every_topic:  # the topic's existence is not disclosed: no id, not internal
            refused.append(Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=ZERO_UUID,
                                 is_internal=False, partitions=[]))

    out: list[Topic] = []
    next_cursor: Cursor | None = None
    remaining = page_limit(node, body.response_partition_limit)
    for name in walk:
        if remaining == 0:
            # The page filled up exactly at the previous topic's end: the next page starts at this one.
            next_cursor = Cursor(topic_name=name, partition_index=0)
            break
        topic = image.topic(name)
        if topic is None:
            if not every_topic:
                code = ErrorCode.INVALID_TOPIC_EXCEPTION if topic_name_problem(name) else \
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                out.append(Topic(error_code=code, name=name, topic_id=ZERO_UUID, is_internal=name in INTERNAL_TOPICS,
                                 partitions=[]))
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        count = len(topic.partitions)
        upper = min(count, first + remaining)
        parts = [describe_partition(node, topic, topic.partitions[i], listener)
                 for i in range(first, upper) if i in topic.partitions]
        out.append(Topic(error_code=0, name=name, topic_id=topic.topic_id, is_internal=name in INTERNAL_TOPICS,
                         partitions=parts))
        if upper < count:
            next_cursor = Cursor(topic_name=name, partition_index=upper)
            break
        remaining -= len(parts)
    for t in out:  # as Kafka: every topic answered but the refused ones, the unknown ones too
        t.topic_authorized_operations = authorized_operations(node, request, TOPIC, t.name or "")
    return DescribeTopicPartitionsResponse(topics=out + refused, next_cursor=next_cursor)
