"""OffsetForLeaderEpoch (key 23), versions 2-4.

Version notes: v2 is the oldest served (CurrentLeaderEpoch for fencing, throttle time); v3 carries the asking
follower's replica id; v4 flexible.

Answered by a partition's leader only (NOT_LEADER_OR_FOLLOWER elsewhere, as Kafka's fetchOnlyFromLeader), from
the leader epoch cache (kjbod.storage.epoch_cache): the largest epoch not above the one asked for and the offset
where it ended (the LEO for the latest epoch); an epoch above every known one answers -1/-1 with no error.
CurrentLeaderEpoch older than this broker's is FENCED_LEADER_EPOCH, newer is UNKNOWN_LEADER_EPOCH, checked before
leadership (a follower asked with a stale epoch answers FENCED_LEADER_EPOCH) and only -1 skips it, as Kafka
(kjbod.broker.handlers.leader_epoch_check).  Followers and consumers use it to find where their log parted
from the leader's.
"""

from __future__ import annotations

from kjbod.broker.authz import allowed, allowed_cluster
from kjbod.broker.handlers.leader_epoch_check import checked_log
from kjbod.broker.router import api
from kjbod.metadata.acls import CLUSTER_ACTION, DESCRIBE, TOPIC
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse
from kjbod.protocol.generated.offset_for_leader_epoch_response import (
    EpochEndOffset,
    OffsetForLeaderTopicResult,
)


def _lookup(node, topic: str, partition: int, current_epoch: int, epoch: int) -> EpochEndOffset:
    t = node.metadata.topic(topic)
    if t is None or partition not in t.partitions:
        return EpochEndOffset(partition=partition, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    try:
        plog = checked_log(node, topic, partition, current_epoch)
        found, end = plog.leader_epochs.end_offset_for(epoch, plog.log_end_offset)
    except Exception as e:  # not the leader, a wrong epoch, an offline dir: the error the check or storage names
        return EpochEndOffset(partition=partition,
                              error_code=getattr(e, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR))
    return EpochEndOffset(partition=partition, leader_epoch=found, end_offset=end)


@api(OffsetForLeaderEpochRequest)
def handle(node, request, body: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    if getattr(node, "authorizer", None) is not None:  # a replica's needs CLUSTER_ACTION, a consumer's DESCRIBE on each topic
        replica = body.replica_id >= 0 if request.api_version >= 3 else False
        everything = replica and allowed_cluster(node, request, CLUSTER_ACTION)
        return OffsetForLeaderEpochResponse(topics=[OffsetForLeaderTopicResult(topic=t.topic, partitions=[
            _lookup(node, t.topic, p.partition, p.current_leader_epoch, p.leader_epoch)
            if everything or (not replica and allowed(node, request, DESCRIBE, TOPIC, t.topic))
            else EpochEndOffset(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, partition=p.partition)
            for p in t.partitions]) for t in body.topics])
    return OffsetForLeaderEpochResponse(topics=[OffsetForLeaderTopicResult(topic=t.topic, partitions=[
        _lookup(node, t.topic, p.partition, p.current_leader_epoch, p.leader_epoch) for p in t.partitions])
        for t in body.topics])
