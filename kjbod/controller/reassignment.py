"""Partition reassignment on the controller (KIP-455): AlterPartitionReassignments (key 45) and
ListPartitionReassignments (key 46), as Kafka's ReplicationControlManager answers them.

A reassignment lives in the partition itself.  Starting one writes a PartitionChangeRecord whose Replicas are the
target followed by the replicas being removed (current − target), with AddingReplicas = target − current and
RemovingReplicas = current − target (both sorted).  "Current" is the whole replica list, so overriding a
reassignment in progress turns a replica it was adding, and the new target leaves out, into one being removed.
The reassignment completes in whatever change next finds every target replica in the ISR (an AlterPartition that
grows the ISR, usually: kjbod.controller.partition_change), and a pure reordering completes at once.  Starting
never bumps the leader epoch; completing drops replicas and does.

Cancelling (Replicas null) reverts: the replicas less those being added, the ISR less those being added; when
that ISR would be empty its first original replica is put back alone, which is an unclean election and refused
(INVALID_REPLICA_ASSIGNMENT) unless the topic allows one.

Per-partition errors, each partition on its own, the records of the whole request written as one batch:
UNKNOWN_TOPIC_OR_PARTITION ("Unable to find a topic named X." / "Unable to find partition X:N."),
NO_REASSIGNMENT_IN_PROGRESS (cancelling where none runs), INVALID_REPLICATION_FACTOR (v1 with
AllowReplicationFactorChange false and a target whose length differs from the replica set the partition is
headed for), INVALID_REPLICA_ASSIGNMENT (an empty list, an unregistered broker, a broker twice).  Listing leaves
out unknown topics and partitions and those not being reassigned, without an error.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from kjbod.controller.partition_change import ONLINE, UNCLEAN, change, unclean_enabled
from kjbod.controller.replication_control import assignment_problem
from kjbod.controller.result import ControllerResult, ControllerSettings
from kjbod.metadata import MetadataImage, PartitionImage, TopicImage
from kjbod.metadata.delta import replay_partition
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    PartitionChangeRecord,
)
from kjbod.protocol.generated import alter_partition_reassignments_response as alter_out
from kjbod.protocol.generated import list_partition_reassignments_response as list_out

NO_REASSIGNMENT_MESSAGE = "No partition reassignment is in progress."


class ReassignmentError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def reassignment_replicas(current: tuple[int, ...], target: list[int]) -> tuple[list[int], list[int], list[int]]:
    """(replicas, adding, removing) for moving `current` to `target` (Kafka's PartitionReassignmentReplicas)."""
    removing = sorted(set(current) - set(target))
    adding = sorted(set(target) - set(current))
    return [*target, *removing], adding, removing


def heading_for(p: PartitionImage) -> int:
    """How many replicas the partition will have when its reassignment (if any) ends."""
    if not p.reassigning:
        return len(p.replicas)
    return len((set(p.replicas) | set(p.adding)) - set(p.removing))


def start(image: MetadataImage, topic: TopicImage, p: PartitionImage, target: list[int], *,
          allow_rf_change: bool = True, target_dirs: dict[int, UUID] | None = None) -> PartitionChangeRecord | None:
    """The record starting (or overriding) a reassignment of `p` to `target`; raises ReassignmentError."""
    if not allow_rf_change and heading_for(p) != len(target):
        raise ReassignmentError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                f"The replication factor is changed from {heading_for(p)} to {len(target)}")
    problem = assignment_problem(image, target)
    if problem is not None:
        raise ReassignmentError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
    replicas, adding, removing = reassignment_replicas(p.replicas, target)
    # As Kafka's builder: an empty adding or removing set leaves the partition's own in place.
    return change(image, topic.topic_id, p, target_replicas=replicas,
                  target_adding=adding or None, target_removing=removing or None, target_dirs=target_dirs)


def cancel(image: MetadataImage, topic: TopicImage, p: PartitionImage,
           settings: ControllerSettings) -> PartitionChangeRecord | None:
    """The record reverting `p`'s reassignment (Kafka's PartitionReassignmentRevert); raises ReassignmentError."""
    if not p.reassigning:
        raise ReassignmentError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, NO_REASSIGNMENT_MESSAGE)
    original = [r for r in p.replicas if r not in p.adding]
    isr = [r for r in p.isr if r not in p.adding]
    unclean = unclean_enabled(image, topic, settings.unclean_leader_election_enable)
    if not isr:
        if not unclean:
            raise ReassignmentError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                    f"Unable to revert partition assignment for {topic.name}:{p.partition} because "
                                    "it would require an unclean leader election.")
        isr = original[:1]
    return change(image, topic.topic_id, p, target_isr=isr, target_replicas=original, target_adding=[],
                  target_removing=[], election=UNCLEAN if unclean else ONLINE)


def alter_partition_reassignments(image: MetadataImage, req: AlterPartitionReassignmentsRequest, version: int,
                                  settings: ControllerSettings,
                                  dirs_of: Any = None) -> ControllerResult:
    """`dirs_of(topic, partition)`, when given, names target log dirs for some replicas ({broker: dir id})."""
    allow = req.allow_replication_factor_change if version >= 1 else True
    records: list[Any] = []
    changed: dict[tuple[str, int], PartitionImage] = {}  # a partition named twice sees the first change
    response = AlterPartitionReassignmentsResponse(allow_replication_factor_change=allow, error_message=None)
    for t in req.topics:
        result = alter_out.ReassignableTopicResponse(name=t.name)
        response.responses.append(result)
        topic = image.topic(t.name)
        for wanted in t.partitions:
            code: int = ErrorCode.NONE
            message: str | None = None
            try:
                if topic is None:
                    raise ReassignmentError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                            f"Unable to find a topic named {t.name}.")
                p = changed.get((t.name, wanted.partition_index)) or topic.partitions.get(wanted.partition_index)
                if p is None:
                    raise ReassignmentError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                            f"Unable to find partition {t.name}:{wanted.partition_index}.")
                if wanted.replicas is None:
                    rec = cancel(image, topic, p, settings)
                else:
                    dirs = dirs_of(t.name, wanted.partition_index) if dirs_of is not None else None
                    rec = start(image, topic, p, list(wanted.replicas), allow_rf_change=allow, target_dirs=dirs)
                if rec is not None:
                    records.append(rec)
                    changed[(t.name, p.partition)] = replay_partition(p, rec)
            except ReassignmentError as e:
                code, message = e.code, e.message
            result.partitions.append(alter_out.ReassignablePartitionResponse(
                partition_index=wanted.partition_index, error_code=code, error_message=message))
    return ControllerResult(records, response)


def list_partition_reassignments(image: MetadataImage, req: ListPartitionReassignmentsRequest) -> ControllerResult:
    response = ListPartitionReassignmentsResponse(error_message=None)
    if req.topics is None:
        wanted = [(name, sorted(t.partitions)) for name, t in sorted(image.topics_by_name.items())]
    else:
        wanted = [(t.name, list(t.partition_indexes)) for t in req.topics]
    for name, indexes in wanted:
        topic = image.topic(name)
        if topic is None:
            continue
        ongoing = [list_out.OngoingPartitionReassignment(
            partition_index=i, replicas=list(p.replicas), adding_replicas=list(p.adding),
            removing_replicas=list(p.removing))
            for i in indexes if (p := topic.partitions.get(i)) is not None and p.reassigning]
        if ongoing:
            response.topics.append(list_out.OngoingTopicReassignment(name=name, partitions=ongoing))
    return ControllerResult([], response)
