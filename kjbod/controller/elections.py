"""Elections someone asks for, or the controller runs on a timer: ElectLeaders (key 43), the automatic
preferred-leader rebalance, and the sweep that elects unclean leaders where a topic allows it.

ElectLeaders (Kafka's ReplicationControlManager.electLeaders): an unknown ElectionType answers INVALID_REQUEST
for the whole request, and on each partition named with the message "Unknown election type N".  Each named partition: unknown topic or partition, UNKNOWN_TOPIC_OR_PARTITION; a PREFERRED
election where the first replica already leads, or an UNCLEAN one where there is a leader, ELECTION_NOT_NEEDED;
otherwise the election runs (PREFERRED: the first replica when it is in the ISR and may lead, else as an online
election; UNCLEAN: from the ISR, else any replica that may lead, LeaderRecoveryState RECOVERING) and a partition
it cannot change answers PREFERRED_LEADER_NOT_AVAILABLE or ELIGIBLE_LEADERS_NOT_AVAILABLE.  TopicPartitions null
means every partition, and then the partitions that needed nothing are left out of the answer.

The rebalance is the check Kafka's controller made with `auto.leader.rebalance.enable`: every
`leader.imbalance.check.interval.seconds`, for each broker, the share of the partitions it is the preferred
(first) replica of that another broker leads; above `leader.imbalance.per.broker.percentage` percent, preferred
elections for those partitions (a partition whose preferred replica is not in its ISR or may not lead is left).
KRaft's controller skips the percentage and rebalances any imbalance; kjbod keeps the documented threshold.
"""

from __future__ import annotations

from typing import Any

from kjbod.controller.partition_change import PREFERRED, UNCLEAN, change, partitions, unclean_enabled
from kjbod.controller.result import ControllerResult, ControllerSettings
from kjbod.metadata import NO_LEADER, MetadataImage
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import ElectLeadersRequest, ElectLeadersResponse
from kjbod.protocol.generated.elect_leaders_response import PartitionResult, ReplicaElectionResult

ELECTION_TYPES = {0: PREFERRED, 1: UNCLEAN}
MESSAGES = {
    ErrorCode.ELECTION_NOT_NEEDED: "Leader election not needed for topic partition.",
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: "The preferred leader was not available.",
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: "Eligible topic partition leaders are not available.",
}


def elect_one(image: MetadataImage, topic_name: str, partition: int, election: str,
              records: list[Any], *, min_isr_default: int = 1, node_id: int | None = None) -> tuple[int, str | None]:
    topic = image.topic(topic_name)
    if topic is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic_name}"
    p = topic.partitions.get(partition)
    if p is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic_name}-{partition}"
    if (election == PREFERRED and p.replicas and p.leader == p.replicas[0]) or (
            election == UNCLEAN and p.leader != NO_LEADER):
        return ErrorCode.ELECTION_NOT_NEEDED, MESSAGES[ErrorCode.ELECTION_NOT_NEEDED]
    rec = change(image, topic.topic_id, p, election=election, min_isr_default=min_isr_default, node_id=node_id)
    if rec is None:
        code = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE if election == PREFERRED else \
            ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
        return code, MESSAGES[code]
    records.append(rec)
    return ErrorCode.NONE, None


def elect_leaders(image: MetadataImage, req: ElectLeadersRequest, version: int, *, min_isr_default: int = 1,
                  node_id: int | None = None) -> ControllerResult:
    """The ElectLeaders answer; the ELR is computed against each topic's effective min.insync.replicas (with
    `min_isr_default` the controller's static value and `node_id` its own node)."""
    kind = req.election_type if version >= 1 else 0
    election = ELECTION_TYPES.get(kind)
    if election is None:
        # Kafka's answer to the request's InvalidRequestException: the code at the top and, with its message, on
        # every partition named (the top level has no message field).
        unknown = f"Unknown election type {kind}"
        return ControllerResult([], ElectLeadersResponse(error_code=ErrorCode.INVALID_REQUEST, replica_election_results=[
            ReplicaElectionResult(topic=tp.topic, partition_result=[
                PartitionResult(partition_id=pid, error_code=ErrorCode.INVALID_REQUEST, error_message=unknown)
                for pid in tp.partitions]) for tp in req.topic_partitions or []]))
    records: list[Any] = []
    results = []
    if req.topic_partitions is None:
        for name, topic in sorted(image.topics_by_name.items()):
            result = ReplicaElectionResult(topic=name)
            for pid in sorted(topic.partitions):
                code, message = elect_one(image, name, pid, election, records, min_isr_default=min_isr_default,
                                          node_id=node_id)
                if code != ErrorCode.ELECTION_NOT_NEEDED:
                    result.partition_result.append(PartitionResult(partition_id=pid, error_code=code,
                                                                   error_message=message))
            results.append(result)
    else:
        for tp in req.topic_partitions:
            result = ReplicaElectionResult(topic=tp.topic)
            for pid in tp.partitions:
                code, message = elect_one(image, tp.topic, pid, election, records,
                                          min_isr_default=min_isr_default, node_id=node_id)
                result.partition_result.append(PartitionResult(partition_id=pid, error_code=code,
                                                               error_message=message))
            results.append(result)
    return ControllerResult(records, ElectLeadersResponse(error_code=ErrorCode.NONE, replica_election_results=results))


def imbalanced_brokers(image: MetadataImage, percentage: int) -> dict[int, list[tuple[Any, Any]]]:
    """Broker id → the (topic, partition) pairs it should lead but does not, for each broker whose share of
    such partitions is above `percentage` percent."""
    preferred: dict[int, int] = {}
    not_led: dict[int, list[tuple[Any, Any]]] = {}
    for topic, p in partitions(image):
        if not p.replicas:
            continue
        first = p.replicas[0]
        preferred[first] = preferred.get(first, 0) + 1
        if p.leader != first:
            not_led.setdefault(first, []).append((topic, p))
    return {b: pairs for b, pairs in not_led.items() if len(pairs) * 100 > percentage * preferred[b]}


def rebalance_leaders(image: MetadataImage, settings: ControllerSettings) -> ControllerResult:
    """Preferred elections for the brokers over the imbalance threshold (records only)."""
    records: list[Any] = []
    for _, pairs in sorted(imbalanced_brokers(image, settings.leader_imbalance_per_broker_percentage).items()):
        for topic, p in pairs:
            rec = change(image, topic.topic_id, p, election=PREFERRED,
                         min_isr_default=settings.min_insync_replicas, node_id=settings.node_id)
            if rec is not None and rec.leader == p.replicas[0]:
                records.append(rec)
    return ControllerResult(records, len(records))


def elect_unclean_leaders(image: MetadataImage, settings: ControllerSettings) -> ControllerResult:
    """Unclean elections for leaderless partitions of topics that allow them (Kafka's periodic sweep, which
    picks up a config turned on after the partition went offline)."""
    records: list[Any] = []
    for topic, p in partitions(image):
        if p.leader == NO_LEADER and unclean_enabled(image, topic, settings.unclean_leader_election_enable,
                                                             settings.node_id):
            rec = change(image, topic.topic_id, p, election=UNCLEAN,
                         min_isr_default=settings.min_insync_replicas, node_id=settings.node_id)
            if rec is not None:
                records.append(rec)
    return ControllerResult(records, len(records))
