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

KIP-435 batching (kjbod.controller.reassignment_steps), when any of `reassignment.parallel.replica.count`,
`reassignment.parallel.partition.count` or `reassignment.parallel.leader.movements` is set on the default broker
resource: an accepted target becomes the partition's plan (its final target, kept by the controller) and the
partition moves there in steps, each an ordinary reassignment as above that starts with a preferred election
(so a step that put the new preferred leader in front hands it leadership once it is in sync).  `advance` runs
after every commit: it drops finished plans and starts the next steps the limits allow, read afresh each time,
so a changed limit applies from the next step on.  Cancelling a planned partition drops its plan and reverts the
step in progress, if any.  Listing shows planned partitions too: Replicas now, Adding and Removing towards the
final target, and (asked for with the IncludeBatches extension) the current step's start and target.  The plans
are kept in the metadata log (kjbod's ReassignmentIntentRecord, with the partition), so a restarted controller
takes them up again (`plans_from`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from kjbod.controller.partition_change import ONLINE, PREFERRED, UNCLEAN, change, partitions, unclean_enabled
from kjbod.controller.reassignment_steps import Limits, moves_leader, next_step, pick
from kjbod.controller.replication_control import assignment_problem, cordoned_problem
from kjbod.controller.result import ControllerResult, ControllerSettings
from kjbod.metadata import BROKER_RESOURCE, MetadataImage, PartitionImage, TopicImage
from kjbod.metadata.delta import replay_partition
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    PartitionChangeRecord,
    ReassignmentIntentRecord,
)
from kjbod.protocol.generated import alter_partition_reassignments_response as alter_out
from kjbod.protocol.generated import list_partition_reassignments_response as list_out
from kjbod.protocol.runtime import ZERO_UUID

NO_REASSIGNMENT_MESSAGE = "No partition reassignment is in progress."
MIN_ISR_KEY = "min.insync.replicas"



@dataclass(slots=True)
class Plan:
    """A batched reassignment: the final target, and the log dirs named for some of its replicas."""

    target: list[int]
    dirs: dict[int, UUID] = field(default_factory=dict)


Plans = dict[tuple[UUID, int], Plan]  # (topic id, partition) -> its plan, for batched reassignments


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


def check_target(image: MetadataImage, p: PartitionImage, target: list[int], *, allow_rf_change: bool = True,
                 heading: int | None = None, cordoned: frozenset[int] = frozenset()) -> None:
    heading = heading_for(p) if heading is None else heading
    if not allow_rf_change and heading != len(target):
        raise ReassignmentError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                f"The replication factor is changed from {heading} to {len(target)}")
    problem = assignment_problem(image, target)
    if problem is not None:
        raise ReassignmentError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
    # KIP-1066: a broker whose every log dir is cordoned takes no new replica; the replicas it has may stay.
    problem = cordoned_problem([b for b in target if b not in p.replicas], cordoned)
    if problem is not None:
        raise ReassignmentError(ErrorCode.INELIGIBLE_REPLICA, problem)


def step_change(image: MetadataImage, topic: TopicImage, p: PartitionImage, target: list[int], *,
                target_dirs: dict[int, UUID] | None = None, election: str = ONLINE, min_isr_default: int = 1,
                node_id: int | None = None) -> PartitionChangeRecord | None:
    replicas, adding, removing = reassignment_replicas(p.replicas, target)
    # As Kafka's builder: an empty adding or removing set leaves the partition's own in place.
    return change(image, topic.topic_id, p, target_replicas=replicas, target_adding=adding or None,
                  target_removing=removing or None, target_dirs=target_dirs, election=election,
                  min_isr_default=min_isr_default, node_id=node_id)


def cancel(image: MetadataImage, topic: TopicImage, p: PartitionImage,
           settings: ControllerSettings) -> PartitionChangeRecord | None:
    """The record reverting `p`'s reassignment (Kafka's PartitionReassignmentRevert); raises ReassignmentError."""
    if not p.reassigning:
        raise ReassignmentError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, NO_REASSIGNMENT_MESSAGE)
    original = [r for r in p.replicas if r not in p.adding]
    isr = [r for r in p.isr if r not in p.adding]
    unclean = unclean_enabled(image, topic, settings.unclean_leader_election_enable, settings.node_id)
    if not isr:
        if not unclean:
            raise ReassignmentError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                    f"Unable to revert partition assignment for {topic.name}:{p.partition} because "
                                    "it would require an unclean leader election.")
        isr = original[:1]
    return change(image, topic.topic_id, p, target_isr=isr, target_replicas=original, target_adding=[],
                  target_removing=[], election=UNCLEAN if unclean else ONLINE,
                  min_isr_default=settings.min_insync_replicas, node_id=settings.node_id)


def limits(image: MetadataImage) -> Limits:
    return Limits.from_configs(image.resource_configs(BROKER_RESOURCE, ""))


def min_isr(image: MetadataImage, topic: TopicImage, node_id: int | None = None) -> int:
    """The topic's min.insync.replicas as the controller knows it (Kafka's order): its override, else the dynamic
    value of this controller's node (`node_id`), else the cluster-wide dynamic default, else 1 (the brokers'
    static values are not in the metadata)."""
    own = image.resource_configs(BROKER_RESOURCE, str(node_id)) if node_id is not None else {}
    raw = (topic.configs.get(MIN_ISR_KEY) or own.get(MIN_ISR_KEY)
           or image.resource_configs(BROKER_RESOURCE, "").get(MIN_ISR_KEY) or "1")
    try:
        return max(1, int(raw))
    except ValueError:
        return 1


def target_dirs(image: MetadataImage, p: PartitionImage, target: list[int], dirs: list[UUID]) -> dict[int, UUID]:
    """{broker: dir id} from the TargetDirectories extension, for the replicas new to the partition (a replica it
    already has stays where it is: moving it between dirs is AlterReplicaLogDirs' job); raises ReassignmentError
    for a list of the wrong length (INVALID_REQUEST) or a dir that is not an online dir of its broker
    (LOG_DIR_NOT_FOUND)."""
    if not dirs:
        return {}
    if len(dirs) != len(target):
        raise ReassignmentError(ErrorCode.INVALID_REQUEST, f"TargetDirectories has {len(dirs)} entries for "
                                f"{len(target)} replicas")
    out = {}
    for broker_id, dir_id in zip(target, dirs, strict=True):
        if dir_id == ZERO_UUID:
            continue
        reg = image.brokers.get(broker_id)
        if reg is None or dir_id not in reg.log_dirs:
            raise ReassignmentError(ErrorCode.LOG_DIR_NOT_FOUND,
                                    f"log dir {dir_id} is not an online log dir of broker {broker_id}")
        if broker_id not in p.replicas or broker_id in p.adding:
            out[broker_id] = dir_id
    return out


def _one(image: MetadataImage, topic: TopicImage | None, name: str, wanted: Any, changed: dict[tuple[str, int],
         PartitionImage], settings: ControllerSettings, allow: bool, plans: Plans | None,
         batching: bool, cordoned: frozenset[int] = frozenset()) -> list[Any]:
    if topic is None:
        raise ReassignmentError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {name}.")
    p = changed.get((name, wanted.partition_index)) or topic.partitions.get(wanted.partition_index)
    if p is None:
        raise ReassignmentError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                f"Unable to find partition {name}:{wanted.partition_index}.")
    key = (topic.topic_id, p.partition)
    planned = plans is not None and key in plans
    if wanted.replicas is None:
        ended = []
        if planned and plans is not None:
            del plans[key]
            ended.append(intent_record(key, None))
            if not p.reassigning:
                return ended
        return [*ended, *_some(cancel(image, topic, p, settings))]
    target = list(wanted.replicas)
    if batching and plans is not None:
        check_target(image, p, target, allow_rf_change=allow, heading=len(plans[key].target) if planned else None,
                     cordoned=cordoned)
        plans[key] = Plan(target, target_dirs(image, p, target, wanted.target_directories))
        return [intent_record(key, plans[key])]
    check_target(image, p, target, allow_rf_change=allow, cordoned=cordoned)
    return _some(step_change(image, topic, p, target,
                             target_dirs=target_dirs(image, p, target, wanted.target_directories),
                             min_isr_default=settings.min_insync_replicas, node_id=settings.node_id))


def _some(rec: Any) -> list[Any]:
    return [] if rec is None else [rec]


def intent_record(key: tuple[UUID, int], plan: Plan | None) -> ReassignmentIntentRecord:
    """The metadata record keeping (or, with None, ending) a batched reassignment's plan."""
    rec = ReassignmentIntentRecord(topic_id=key[0], partition_id=key[1])
    if plan is not None:
        rec.target_replicas = list(plan.target)
        rec.target_directory_brokers = list(plan.dirs)
        rec.target_directories = list(plan.dirs.values())
    return rec


def plans_from(image: MetadataImage) -> Plans:
    """The batched reassignments the metadata log holds (a controller's plans after a restart)."""
    return {(t.topic_id, p.partition): Plan(list(p.intent), dict(p.intent_dirs))
            for t, p in partitions(image) if p.intent is not None}


def alter_partition_reassignments(image: MetadataImage, req: AlterPartitionReassignmentsRequest, version: int,
                                  settings: ControllerSettings, plans: Plans | None = None,
                                  cordoned: frozenset[int] = frozenset()) -> ControllerResult:
    """`plans`: the controller's batched reassignments, changed in place (batching when the limits say so);
    `cordoned`: the brokers whose every log dir is cordoned (INELIGIBLE_REPLICA for a new replica there)."""
    allow = req.allow_replication_factor_change if version >= 1 else True
    batching = plans is not None and limits(image).batching
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
                for rec in _one(image, topic, t.name, wanted, changed, settings, allow, plans, batching, cordoned):
                    records.append(rec)
                    if isinstance(rec, PartitionChangeRecord) and topic is not None:
                        p = changed.get((t.name, wanted.partition_index)) or topic.partitions[wanted.partition_index]
                        changed[(t.name, p.partition)] = replay_partition(p, rec)
            except ReassignmentError as e:
                code, message = e.code, e.message
            result.partitions.append(alter_out.ReassignablePartitionResponse(
                partition_index=wanted.partition_index, error_code=code, error_message=message))
    if batching and plans is not None:
        records += advance(image, plans, skip={(image.topics_by_name[n].topic_id, i) for n, i in changed},
                           node_id=settings.node_id, min_isr_default=settings.min_insync_replicas)
    return ControllerResult(records, response)


def advance(image: MetadataImage, plans: Plans, *,
            skip: frozenset[tuple[UUID, int]] | set[tuple[UUID, int]] = frozenset(),
            node_id: int | None = None, min_isr_default: int = 1) -> list[Any]:
    """Drops the plans that are done (or whose partition is gone) and starts the next steps the limits allow:
    one PartitionChangeRecord per partition starting a step.  `skip`: partitions changed by records not yet
    in `image` (they wait for the next round).  Steps are computed only for as many waiting partitions as the
    batch can still take (movers and others in plan order), so a full batch costs one pass over the plans."""
    lim = limits(image)
    records: list[Any] = []
    stepping = moving = 0
    for t in image.topics_by_id.values():
        for busy in t.partitions.values():
            if busy.adding or busy.removing:
                stepping += 1
                moving += moves_leader([r for r in busy.replicas if r not in busy.removing], busy.leader)
    free = lim.partitions - stepping
    movers_cap = min(free, lim.leader_movements - moving)
    full = movers_cap <= 0 and free <= 0
    movers: list[tuple[tuple[TopicImage, PartitionImage, list[int]], bool]] = []
    others: list[tuple[tuple[TopicImage, PartitionImage, list[int]], bool]] = []
    # One pass over the plans, each as cheap as it can be: this runs after every commit of a reassignment.  Plans
    # come topic by topic, so a topic is looked up once per run of its partitions (its id is the same object).
    last_id: UUID | None = None
    topic: TopicImage | None = None
    for key, plan in list(plans.items()):
        if key[0] is not last_id:
            last_id, topic = key[0], image.topics_by_id.get(key[0])
        p = topic.partitions.get(key[1]) if topic is not None else None
        if p is None or (not (p.adding or p.removing) and p.replicas[0] == plan.target[0]
                         and list(p.replicas) == plan.target):
            del plans[key]
            if p is not None:
                records.append(intent_record(key, None))
            continue
        if full or p.adding or p.removing or (skip and key in skip):
            continue
        assert topic is not None
        step = next_step(p.replicas, plan.target, isr=p.isr, min_isr=min_isr(image, topic, node_id),
                         replica_count=lim.replicas)
        moves = moves_leader(step, p.leader)
        (movers if moves else others).append(((topic, p, step), moves))
        full = len(movers) >= movers_cap and len(others) >= free
    for topic, p, step in pick(movers + others, stepping=stepping, moving_leaders=moving, limits=lim):
        dirs = plans[(topic.topic_id, p.partition)].dirs
        rec = step_change(image, topic, p, step, election=PREFERRED,
                          target_dirs={r: d for r, d in dirs.items() if r in step and r not in p.replicas},
                          min_isr_default=min_isr_default, node_id=node_id)
        if rec is not None:
            records.append(rec)
    return records


def started_steps_ended(image: MetadataImage, records: list[Any]) -> bool:
    """Whether a step that `records` (an `advance` round, now in `image`) started has ended at once (a pure
    reordering or removal does), freeing its place: only then can another round start more.  A round that
    only started steps still running, or dropped finished plans, left nothing for the next one."""
    for rec in records:
        if isinstance(rec, PartitionChangeRecord):
            topic = image.topic_by_id(rec.topic_id)
            p = topic.partitions.get(rec.partition_id) if topic is not None else None
            if p is not None and not p.reassigning:
                return True
    return False


def _ongoing(p: PartitionImage, final: list[int] | None, batches: bool) -> list_out.OngoingPartitionReassignment:
    settled = [r for r in p.replicas if r not in p.adding]
    if final is None:
        adding, removing = list(p.adding), list(p.removing)
    else:
        adding, removing = sorted(set(final) - set(settled)), sorted(set(settled) - set(final))
    out = list_out.OngoingPartitionReassignment(partition_index=p.partition, replicas=list(p.replicas),
                                                adding_replicas=adding, removing_replicas=removing)
    if batches:
        out.batch_current_replicas = settled
        out.batch_target_replicas = [r for r in p.replicas if r not in p.removing] if p.reassigning else []
    return out


def list_partition_reassignments(image: MetadataImage, req: ListPartitionReassignmentsRequest,
                                 plans: Plans | None = None) -> ControllerResult:
    plans = plans or {}
    response = ListPartitionReassignmentsResponse(error_message=None)
    if req.topics is None:
        wanted = [(name, sorted(t.partitions)) for name, t in sorted(image.topics_by_name.items())]
    else:
        wanted = [(t.name, list(t.partition_indexes)) for t in req.topics]
    for name, indexes in wanted:
        topic = image.topic(name)
        if topic is None:
            continue
        ongoing = [_ongoing(p, plan.target if (plan := plans.get((topic.topic_id, i))) else None,
                            req.include_batches)
                   for i in indexes if (p := topic.partitions.get(i)) is not None
                   and (p.reassigning or (topic.topic_id, i) in plans)]
        if ongoing:
            response.topics.append(list_out.OngoingTopicReassignment(name=name, partitions=ongoing))
    return ControllerResult([], response)
