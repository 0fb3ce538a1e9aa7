"""Topics and partitions: CreateTopics, CreatePartitions, DeleteTopics and directory assignments (Kafka's
ReplicationControlManager), as pure functions of an image and a request that return records and a response.

CreateTopics checks, in Kafka's order: a name twice in one request (INVALID_REQUEST), the name
(INVALID_TOPIC_EXCEPTION), the metadata log's own name (INVALID_REQUEST), existence (TOPIC_ALREADY_EXISTS), a
'.'/'_' collision (INVALID_TOPIC_EXCEPTION), configs (INVALID_CONFIG: a null value, then the config policy); then explicit
assignments (INVALID_REQUEST when num_partitions or replication_factor is not -1; INVALID_REPLICA_ASSIGNMENT for
a partition twice, an empty list, an unregistered or repeated broker, a replica count unlike the previous
partitions', only fenced or shutting-down brokers, or partitions not 0..N-1), or else replication factor
(INVALID_REPLICATION_FACTOR), partitions (INVALID_PARTITIONS) and placement (INVALID_REPLICATION_FACTOR: no
unfenced broker, more replicas than registered brokers).  A request whose topics would take more than Kafka's
10,000 records (about that many partitions) fails whole, every topic POLICY_VIOLATION, as Kafka's controller
refuses an excessively large batch.

Placement is Kafka's striped, rack-aware placer (kjbod.controller.placement).  The leader is the first replica,
the ISR the replicas whose brokers are active.  Each replica's directory is its broker's only log dir, or
UNASSIGNED when the broker has several (the broker picks one and reports it back, KIP-858).

CreatePartitions, per topic in Kafka's order: a name twice in the request (INVALID_REQUEST), an unknown topic
(UNKNOWN_TOPIC_OR_PARTITION), a count not above the current one (INVALID_PARTITIONS), assignments other in number
than the partitions added, then per assignment an empty list, an unregistered or repeated broker, a replica count
unlike the topic's, or only fenced or shutting-down brokers (INVALID_REPLICA_ASSIGNMENT); without assignments the
same placer as CreateTopics at the topic's replication factor (INVALID_REPLICATION_FACTOR).  The new partitions'
records are built as a new topic's are.  Kafka's KRaft controller has no pending-deletion state (a deleted topic
is gone at once) and does not refuse a topic under reassignment, so neither does this.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Iterable
from typing import Any
from uuid import UUID

from kjbod.controller.partition_change import with_directory
from kjbod.controller.placement import PlacementError, StripedPlacer
from kjbod.controller.result import ConfigPolicy, ControllerResult, ControllerSettings, PolicyError
from kjbod.metadata import DIR_UNASSIGNED, TOPIC_RESOURCE, BrokerRegistration, MetadataImage
from kjbod.metadata.names import (
    CLUSTER_METADATA_TOPIC,
    collision_index,
    collision_problem,
    topic_name_problem,
)
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    ConfigRecord,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from kjbod.protocol.generated.create_partitions_response import (
    CreatePartitionsTopicResult as PartitionsResult,
)
from kjbod.protocol.generated.create_topics_response import CreatableTopicResult as CreateResult
from kjbod.protocol.generated.delete_topics_response import DeletableTopicResult as DeleteResult
from kjbod.protocol.runtime import ZERO_UUID

MAX_PARTITIONS = 100_000
# Kafka's QuorumController.MAX_RECORDS_PER_USER_OP: a request that would write more records than this (a topic,
# its configs, a record per partition) fails whole, POLICY_VIOLATION, rather than write one huge batch.
MAX_RECORDS_PER_USER_OP = 10_000
TOO_LARGE = "Unable to perform excessively large batch operation."


def new_topic_id() -> UUID:
    """A random topic id as Kafka's Uuid.randomUuid gives one: not reserved (Kafka keeps the ids below 100), and
    never one whose text starts with '-' (the first six bits 111110), which command-line tools would take for an
    option (`kjbod topics --describe --topic-id -x...`)."""
    while True:
        tid = uuid.uuid4()
        if tid.int >= 100 and tid.int >> 122 != 0b111110:
            return tid


def default_dir(b: BrokerRegistration) -> UUID:
    return b.log_dirs[0] if len(b.log_dirs) == 1 else DIR_UNASSIGNED


def assignment_problem(image: MetadataImage, broker_ids: list[int], rf: int | None = None) -> str | None:
    """Kafka's validateManualPartitionAssignment: what is wrong with a manual replica list (empty, an
    unregistered broker, a broker twice, a replica count other than `rf` when one is given), or None."""
    if not broker_ids:
        return "The manual partition assignment includes an empty replica list."
    previous = None
    for b in sorted(broker_ids):
        if b not in image.brokers:
            return f"The manual partition assignment includes broker {b}, but no such broker is registered."
        if b == previous:
            return f"The manual partition assignment includes the broker {b} more than once."
        previous = b
    if rf is not None and len(broker_ids) != rf:
        return (f"The manual partition assignment includes a partition with {len(broker_ids)} replica(s), but "
                f"this is not consistent with previous partitions, which have {rf} replica(s).")
    return None


def usable_brokers(image: MetadataImage, cordoned: frozenset[int]) -> list[BrokerRegistration]:
    """The brokers automatic placement may choose, by id: every registered one except those whose every log dir
    is cordoned (KIP-1066: such a broker takes no new replicas)."""
    return sorted((b for b in image.brokers.values() if b.broker_id not in cordoned), key=lambda b: b.broker_id)


def cordoned_problem(broker_ids: list[int], cordoned: frozenset[int]) -> str | None:
    """INELIGIBLE_REPLICA's message when an explicit assignment names a broker whose log dirs are all cordoned."""
    named = sorted(set(broker_ids) & cordoned)
    if not named:
        return None
    which = ", ".join(map(str, named))
    return (f"Broker{'s' if len(named) > 1 else ''} {which}: every log dir is cordoned (cordoned.log.dirs), so "
            "it takes no new replicas.")


def _cordoned_hint(cordoned: frozenset[int]) -> str:
    if not cordoned:
        return ""
    return (f" (not counting broker{'s' if len(cordoned) > 1 else ''} {', '.join(map(str, sorted(cordoned)))}: "
            "every log dir cordoned)")


def new_partition_record(image: MetadataImage, topic_id: UUID, partition: int, replicas: list[int]) -> Any:
    """A new partition's record: the ISR its active replicas (the callers made sure there is one), the first of
    them the leader, each replica's directory as KIP-858 places it (`default_dir`)."""
    isr = [r for r in replicas if image.brokers[r].active]
    return PartitionRecord(partition_id=partition, topic_id=topic_id, replicas=replicas, isr=isr, leader=isr[0],
                           leader_epoch=0, partition_epoch=0,
                           directories=[default_dir(image.brokers[r]) for r in replicas])


def _fail(name: str, code: int, message: str) -> CreateResult:
    return CreateResult(name=name, error_code=code, error_message=message, configs=None)


class TopicCreator:
    """One CreateTopics request against one image."""

    def __init__(self, image: MetadataImage, settings: ControllerSettings, policy: ConfigPolicy,
                 rng: random.Random | None = None, cordoned: frozenset[int] = frozenset()) -> None:
        self.image = image
        self.settings = settings
        self.policy = policy
        self.cordoned = cordoned
        self.collisions = collision_index(image.topics_by_name)
        self.placer = StripedPlacer(usable_brokers(image, cordoned), rng)

    def check(self, t: Any, duplicates: set[str]) -> tuple[CreateResult | None, list[list[int]], dict[str, str]]:
        """(failure, replicas per partition, config overrides)."""
        name = t.name
        if name in duplicates:
            return _fail(name, ErrorCode.INVALID_REQUEST, f"topic {name!r} appears more than once in the request"), [], {}
        problem = topic_name_problem(name)
        if problem:
            return _fail(name, ErrorCode.INVALID_TOPIC_EXCEPTION, problem), [], {}
        if name == CLUSTER_METADATA_TOPIC:
            return _fail(name, ErrorCode.INVALID_REQUEST,
                         f"creation of the internal topic {CLUSTER_METADATA_TOPIC} is prohibited"), [], {}
        if self.image.topic(name) is not None:
            return _fail(name, ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists"), [], {}
        collision = collision_problem(name, self.collisions)
        if collision:
            return _fail(name, ErrorCode.INVALID_TOPIC_EXCEPTION, collision), [], {}
        nulls = [c.name for c in t.configs if c.value is None]
        if nulls:
            return _fail(name, ErrorCode.INVALID_CONFIG,
                         f"Null value not supported for topic configs: {','.join(nulls)}"), [], {}
        configs = {c.name: c.value for c in t.configs}
        try:
            self.policy.validate_topic(configs)
        except PolicyError as e:
            return _fail(name, e.code, e.message), [], {}
        if t.assignments:
            failure, assignment = self._explicit(t)
        else:
            failure, assignment = self._placed(t)
        if failure is not None:
            return failure, [], {}
        return None, assignment, configs

    def _explicit(self, t: Any) -> tuple[CreateResult | None, list[list[int]]]:
        """Kafka's checks for a manual assignment, in its order."""
        if t.replication_factor != -1:
            return _fail(t.name, ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, but "
                         "replication factor was not set to -1."), []
        if t.num_partitions != -1:
            return _fail(t.name, ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, but "
                         "numPartitions was not set to -1."), []
        parts: dict[int, list[int]] = {}
        rf: int | None = None
        for a in t.assignments:
            if a.partition_index in parts:
                return _fail(t.name, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"Found multiple manual partition assignments for partition {a.partition_index}"), []
            problem = assignment_problem(self.image, list(a.broker_ids), rf)
            if problem is not None:
                return _fail(t.name, ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem), []
            problem = cordoned_problem(list(a.broker_ids), self.cordoned)
            if problem is not None:
                return _fail(t.name, ErrorCode.INELIGIBLE_REPLICA, problem), []
            rf = len(a.broker_ids)
            if not any(self.image.brokers[b].active for b in a.broker_ids):
                return _fail(t.name, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"All brokers specified in the manual partition assignment for partition "
                             f"{a.partition_index} are fenced or in controlled shutdown."), []
            parts[a.partition_index] = list(a.broker_ids)
        if sorted(parts) != list(range(len(parts))):
            return _fail(t.name, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         "partitions should be a consecutive 0-based integer sequence"), []
        return None, [parts[i] for i in range(len(parts))]

    def _placed(self, t: Any) -> tuple[CreateResult | None, list[list[int]]]:
        if t.replication_factor < -1 or t.replication_factor == 0:
            return _fail(t.name, ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0, "
                         "or -1 to use the default value."), []
        if t.num_partitions < -1 or t.num_partitions == 0:
            return _fail(t.name, ErrorCode.INVALID_PARTITIONS,
                         f"number of partitions must be larger than 0 (got {t.num_partitions})"), []
        partitions = t.num_partitions if t.num_partitions != -1 else self.settings.num_partitions
        if partitions > MAX_PARTITIONS:
            return _fail(t.name, ErrorCode.INVALID_PARTITIONS,
                         f"number of partitions {partitions} exceeds kjbod's limit of {MAX_PARTITIONS}"), []
        rf = t.replication_factor if t.replication_factor != -1 else self.settings.default_replication_factor
        try:
            assignment = self.placer.place(partitions, rf)
        except PlacementError as e:
            return _fail(t.name, ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"Unable to replicate the partition {rf} time(s): {e}{_cordoned_hint(self.cordoned)}"), []
        if any(not any(self.image.brokers[r].active for r in replicas) for replicas in assignment):
            return _fail(t.name, ErrorCode.INVALID_REPLICATION_FACTOR, f"Unable to replicate the partition {rf} "
                         "time(s): All brokers are currently fenced or in controlled shutdown."), []
        return None, assignment

    def records(self, name: str, topic_id: UUID, assignment: list[list[int]], configs: dict[str, str]) -> list[Any]:
        out: list[Any] = [TopicRecord(name=name, topic_id=topic_id)]
        out += [ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=name, name=k, value=v)
                for k, v in sorted(configs.items())]
        out += [new_partition_record(self.image, topic_id, p, replicas) for p, replicas in enumerate(assignment)]
        if "." in name or "_" in name:
            self.collisions[name.replace(".", "_")] = name  # later topics of this request collide with it too
        return out


def create_topics(image: MetadataImage, body: CreateTopicsRequest, settings: ControllerSettings,
                  policy: ConfigPolicy, rng: random.Random | None = None,
                  cordoned: frozenset[int] = frozenset()) -> ControllerResult:
    """`cordoned`: the brokers whose every log dir is cordoned (BrokerHeartbeatManager.fully_cordoned)."""
    counts = Counter(t.name for t in body.topics)
    duplicates = {n for n, c in counts.items() if c > 1}
    creator = TopicCreator(image, settings, policy, rng, cordoned)
    records: list[Any] = []
    results = []
    for t in body.topics:
        failure, assignment, configs = creator.check(t, duplicates)
        if failure is not None:
            results.append(failure)
            continue
        rf = len(assignment[0])
        if body.validate_only:
            results.append(CreateResult(name=t.name, error_code=0, error_message=None,
                                        num_partitions=len(assignment), replication_factor=rf, configs=None))
            continue
        topic_id = new_topic_id()
        records += creator.records(t.name, topic_id, assignment, configs)
        results.append(CreateResult(name=t.name, topic_id=topic_id, error_code=0, error_message=None,
                                    num_partitions=len(assignment), replication_factor=rf, configs=None))
    if len(records) > MAX_RECORDS_PER_USER_OP:
        return ControllerResult([], CreateTopicsResponse(topics=[
            _fail(t.name, ErrorCode.POLICY_VIOLATION, TOO_LARGE) for t in body.topics]))
    return ControllerResult(records, CreateTopicsResponse(topics=results))


class _Refused(Exception):
    """One topic of a CreatePartitions request refused: its error code and message (None where Kafka sends none)."""

    def __init__(self, code: int, message: str | None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _added_partitions(image: MetadataImage, t: Any, room: int, rng: random.Random | None,
                      cordoned: frozenset[int] = frozenset()) -> list[Any]:
    """The PartitionRecords that grow topic `t` to `t.count` partitions, or _Refused (Kafka's
    ReplicationControlManager.createPartitions, its checks in its order)."""
    topic = image.topic(t.name)
    if topic is None:
        raise _Refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
    current = len(topic.partitions)
    if t.count == current:
        raise _Refused(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
    if t.count < current:
        raise _Refused(ErrorCode.INVALID_PARTITIONS, f"The topic {t.name} currently has {current} partition(s); "
                       f"{t.count} would not be an increase.")
    additional = t.count - current
    if t.assignments is not None and len(t.assignments) != additional:
        raise _Refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Attempted to add {additional} additional "
                       f"partition(s), but only {len(t.assignments)} assignment(s) were specified.")
    if additional > room or not topic.partitions:
        # Kafka's batch bound (its record list refuses the record past MAX_RECORDS_PER_USER_OP), answered as
        # Kafka answers it: UNKNOWN_SERVER_ERROR without a message.  Kafka still writes the records of that topic
        # made before the bound (part of the partitions asked for, under an error); here the topic gets none.
        # Checked before placing, so a count of two billion costs nothing.
        raise _Refused(ErrorCode.UNKNOWN_SERVER_ERROR, None)
    # The replication factor of the partitions there are (Kafka takes the first it finds; the replicas of a
    # partition being reassigned count its adding and removing ones, as Kafka's do).
    rf = len(topic.partitions[min(topic.partitions)].replicas)
    if t.assignments is not None:
        assignment = []
        for i, a in enumerate(t.assignments):
            replicas = list(a.broker_ids)
            problem = assignment_problem(image, replicas, rf)
            if problem is not None:
                raise _Refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
            problem = cordoned_problem(replicas, cordoned)
            if problem is not None:
                raise _Refused(ErrorCode.INELIGIBLE_REPLICA, problem)
            if not any(image.brokers[b].active for b in replicas):
                raise _Refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "All brokers specified in the manual "
                               f"partition assignment for partition {current + i} are fenced or in controlled "
                               "shutdown.")
            assignment.append(replicas)
    else:
        # A placer of its own per topic, as Kafka's placer builds its rack lists per call.
        placer = StripedPlacer(usable_brokers(image, cordoned), rng)
        try:
            assignment = placer.place(additional, rf)
        except PlacementError as e:
            raise _Refused(ErrorCode.INVALID_REPLICATION_FACTOR, f"{e}{_cordoned_hint(cordoned)}") from None
        if any(not any(image.brokers[r].active for r in replicas) for replicas in assignment):
            raise _Refused(ErrorCode.INVALID_REPLICATION_FACTOR, f"Unable to replicate the partition {rf} time(s): "
                           "All brokers are currently fenced or in controlled shutdown.")
    return [new_partition_record(image, topic.topic_id, current + i, replicas)
            for i, replicas in enumerate(assignment)]


def create_partitions(image: MetadataImage, body: CreatePartitionsRequest,
                      rng: random.Random | None = None, cordoned: frozenset[int] = frozenset()) -> ControllerResult:
    """CreatePartitions: a topic named more than once is refused first (INVALID_REQUEST, Kafka's
    ControllerApis), every other one on its own; the records of those that succeed are written together (none
    when validate_only: the same checks, the same answers)."""
    counts = Counter(t.name for t in body.topics)
    results = [PartitionsResult(name=name, error_code=ErrorCode.INVALID_REQUEST, error_message="Duplicate topic name.")
               for name, n in counts.items() if n > 1]
    records: list[Any] = []
    for t in body.topics:
        if counts[t.name] > 1:
            continue
        try:
            records += _added_partitions(image, t, MAX_RECORDS_PER_USER_OP - len(records), rng, cordoned)
        except _Refused as e:
            results.append(PartitionsResult(name=t.name, error_code=e.code, error_message=e.message))
            continue
        results.append(PartitionsResult(name=t.name, error_code=0, error_message=None))
    return ControllerResult([] if body.validate_only else records,
                            CreatePartitionsResponse(throttle_time_ms=0, results=results))


def delete_topics(image: MetadataImage, body: DeleteTopicsRequest, version: int, *,
                  enabled: bool = True) -> ControllerResult:
    if version >= 6:
        wanted = [(t.name, t.topic_id) for t in body.topics]
    else:
        wanted = [(name, ZERO_UUID) for name in body.topic_names]
    if not enabled:
        # Kafka's controller with delete.topic.enable=false: every topic TOPIC_DELETION_DISABLED, INVALID_REQUEST
        # for clients older than v3 (which do not know that code).
        code = ErrorCode.TOPIC_DELETION_DISABLED if version >= 3 else ErrorCode.INVALID_REQUEST
        return ControllerResult([], DeleteTopicsResponse(responses=[
            DeleteResult(name=name, topic_id=topic_id, error_code=code,
                         error_message="Topic deletion is disabled (delete.topic.enable=false).")
            for name, topic_id in wanted]))
    results = []
    records: list[Any] = []
    seen: set[UUID] = set()
    for name, topic_id in wanted:
        if name is not None and topic_id != ZERO_UUID:
            results.append(DeleteResult(name=name, topic_id=topic_id, error_code=ErrorCode.INVALID_REQUEST,
                                        error_message="give a topic name or a topic id, not both"))
            continue
        topic = image.topic(name) if name is not None else image.topic_by_id(topic_id)
        if topic is None:
            code = ErrorCode.UNKNOWN_TOPIC_ID if name is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            what = f"topic id {topic_id}" if name is None else f"topic {name!r}"
            results.append(DeleteResult(name=name, topic_id=topic_id, error_code=code,
                                        error_message=f"{what} does not exist"))
            continue
        if topic.topic_id in seen:
            results.append(DeleteResult(name=topic.name, topic_id=topic.topic_id, error_code=ErrorCode.INVALID_REQUEST,
                                        error_message="topic appears more than once in the request"))
            continue
        seen.add(topic.topic_id)
        records.append(RemoveTopicRecord(topic_id=topic.topic_id))
        results.append(DeleteResult(name=topic.name, topic_id=topic.topic_id, error_code=0, error_message=None))
    return ControllerResult(records, DeleteTopicsResponse(responses=results))


def assign_directories(image: MetadataImage, broker_id: int,
                       assignments: Iterable[tuple[UUID, int, UUID]]) -> ControllerResult:
    """PartitionChangeRecords setting where `broker_id`'s replicas live: (topic id, partition, dir id) each.
    Assignments for partitions that are gone, not on this broker, or already right are skipped (the combined
    node's own placements; a broker elsewhere sends AssignReplicasToDirs, kjbod.controller.directories)."""
    records: list[Any] = []
    for topic_id, partition, dir_id in assignments:
        topic = image.topic_by_id(topic_id)
        p = topic.partitions.get(partition) if topic is not None else None
        if p is None or broker_id not in p.replicas:
            continue
        rec = with_directory(topic_id, p, broker_id, dir_id)
        if rec is not None:
            records.append(rec)
    return ControllerResult(records, None)
