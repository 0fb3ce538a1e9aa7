"""AlterPartition (key 56) on the controller: a partition leader asks to change its ISR or leader recovery
state (Kafka's ReplicationControlManager.alterPartition and validateAlterPartitionData).

Checks, in Kafka's order.  The whole request: the sender's broker epoch (no registration or another epoch:
STALE_BROKER_EPOCH).  Per topic: unknown id: UNKNOWN_TOPIC_ID (v2 and v3, which name topics by id, are the versions
served: Kafka 4.x dropped v0 and v1).  Per partition:
1. unknown partition: UNKNOWN_TOPIC_OR_PARTITION;
2. a leader or partition epoch above the controller's: NOT_CONTROLLER (the sender saw a newer controller);
3. a leader epoch below it: FENCED_LEADER_EPOCH;
4. the sender is not the leader: INVALID_REQUEST;
5. a partition epoch below the controller's: INVALID_UPDATE_VERSION;
6. an ISR with duplicates, a non-replica, or without the leader: INVALID_REQUEST;
7. RECOVERING with more than one ISR member, or RECOVERED going back to RECOVERING: INVALID_REQUEST;
8. an ISR member that is unregistered, shutting down, fenced, whose broker epoch is not its registration's
   (-1 skips the check), or (beyond Kafka, KIP-858) whose replica sits in a dir that is offline:
   INELIGIBLE_REPLICA.
Then the change is built as any other (kjbod.controller.partition_change, unclean where the topic allows it).  A
change that moves leadership off the sender is written and answered NEW_LEADER_ELECTED; otherwise the answer is the partition's state after the change (unchanged when nothing changed).
"""

from __future__ import annotations

from typing import Any

from kjbod.controller.partition_change import change, has_online_dir, unclean_enabled
from kjbod.controller.result import ControllerResult, ControllerSettings
from kjbod.metadata import RECOVERED, RECOVERING, MetadataImage, PartitionImage
from kjbod.metadata.delta import NO_CHANGE_LEADER, replay_partition
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import AlterPartitionRequest, AlterPartitionResponse
from kjbod.protocol.generated import alter_partition_response as out
from kjbod.protocol.runtime import ZERO_UUID


def _isr_with_epochs(part: Any, version: int) -> list[tuple[int, int]]:
    if version >= 3:
        return [(s.broker_id, s.broker_epoch) for s in part.new_isr_with_epochs]
    return [(b, -1) for b in part.new_isr]


def _ineligible(image: MetadataImage, p: PartitionImage, isr: list[tuple[int, int]]) -> bool:
    for broker_id, epoch in isr:
        reg = image.brokers.get(broker_id)
        if (reg is None or reg.in_controlled_shutdown or reg.fenced or (epoch != -1 and reg.epoch != epoch)
                or not has_online_dir(image, broker_id, p.directory_of(broker_id))):
            return True
    return False


def validate(image: MetadataImage, sender: int, p: PartitionImage | None, part: Any, version: int) -> int:
    """The error code for one partition of the request, or NONE."""
    if p is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if part.leader_epoch > p.leader_epoch or part.partition_epoch > p.partition_epoch:
        return ErrorCode.NOT_CONTROLLER
    if part.leader_epoch < p.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if sender != p.leader:
        return ErrorCode.INVALID_REQUEST
    if part.partition_epoch < p.partition_epoch:
        return ErrorCode.INVALID_UPDATE_VERSION
    isr = _isr_with_epochs(part, version)
    ids = [b for b, _ in isr]
    if len(set(ids)) != len(ids) or any(b not in p.replicas for b in ids) or p.leader not in ids:
        return ErrorCode.INVALID_REQUEST
    state = part.leader_recovery_state
    if state not in (RECOVERED, RECOVERING):
        return ErrorCode.INVALID_REQUEST
    if state == RECOVERING and len(ids) > 1:
        return ErrorCode.INVALID_REQUEST
    if p.leader_recovery_state == RECOVERED and state == RECOVERING:
        return ErrorCode.INVALID_REQUEST
    if _ineligible(image, p, isr):
        return ErrorCode.INELIGIBLE_REPLICA
    return ErrorCode.NONE


def alter_partition(image: MetadataImage, req: AlterPartitionRequest, version: int,
                    settings: ControllerSettings) -> ControllerResult:
    reg = image.brokers.get(req.broker_id)
    if reg is None or reg.epoch != req.broker_epoch:
        return ControllerResult([], AlterPartitionResponse(error_code=ErrorCode.STALE_BROKER_EPOCH))
    records: list[Any] = []
    response = AlterPartitionResponse(error_code=ErrorCode.NONE)
    for req_topic in req.topics:
        res_topic = out.TopicData(topic_id=req_topic.topic_id)
        response.topics.append(res_topic)
        topic = image.topic_by_id(req_topic.topic_id) if req_topic.topic_id != ZERO_UUID else None
        if topic is None:
            res_topic.partitions += [out.PartitionData(partition_index=part.partition_index,
                                                       error_code=ErrorCode.UNKNOWN_TOPIC_ID)
                                     for part in req_topic.partitions]
            continue
        for part in req_topic.partitions:
            p = topic.partitions.get(part.partition_index)
            code: int = validate(image, req.broker_id, p, part, version)
            if code != ErrorCode.NONE or p is None:
                res_topic.partitions.append(out.PartitionData(partition_index=part.partition_index, error_code=code))
                continue
            rec = change(image, topic.topic_id, p, target_isr=[b for b, _ in _isr_with_epochs(part, version)],
                         unclean=unclean_enabled(image, topic, settings.unclean_leader_election_enable,
                                                         settings.node_id),
                         min_isr_default=settings.min_insync_replicas, node_id=settings.node_id,
                         recovery_state=part.leader_recovery_state)
            if rec is not None:
                records.append(rec)
                p = replay_partition(p, rec)
                if rec.leader not in (req.broker_id, NO_CHANGE_LEADER):
                    res_topic.partitions.append(out.PartitionData(partition_index=p.partition,
                                                                  error_code=ErrorCode.NEW_LEADER_ELECTED))
                    continue
            res_topic.partitions.append(out.PartitionData(
                partition_index=p.partition, error_code=ErrorCode.NONE, leader_id=p.leader, leader_epoch=p.leader_epoch,
                isr=list(p.isr), leader_recovery_state=p.leader_recovery_state, partition_epoch=p.partition_epoch))
    return ControllerResult(records, response)
