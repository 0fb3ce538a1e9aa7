"""KIP-1071 streams groups on the group coordinator's side, as a state machine without I/O.

Strategy: a streams group is a fourth kind of group beside classic, consumer and share groups, in the same id space
(an id used by another kind answers GROUP_ID_NOT_FOUND).  Each StreamsGroupHeartbeat is one call of
`StreamsGroups.heartbeat(now, request, partitions_of)`, running Kafka's steps in its order:

1. the member is created (epoch 0, with a topology) or updated (rack, process, endpoint, client tags, rebalance
   timeout, client id and host); any change bumps the **group epoch**, as Kafka compares the whole member;
2. the first topology a member brings becomes the group's; a member with an older topology epoch gets the
   STALE_TOPOLOGY status, one with the same epoch but another topology is INVALID_REQUEST ("Topology updates are
   not supported yet.", as in Kafka 4.3);
3. the topology is configured against the image (kjbod.broker.streams.topology): the internal topics to create
   and the statuses; a new configuration (topics created, partitions added) bumps the group epoch;
4. when the group epoch is ahead of the **assignment epoch**, the sticky assignor (kjbod.broker.streams.assignor)
   computes every member's target tasks, unless the group's initial rebalance delay has not passed yet (status
   ASSIGNMENT_DELAYED: the first members' joins are gathered, group.streams.initial.rebalance.delay.ms);
5. the member is reconciled towards its target: tasks it must give up are revoked first (state UNREVOKED_TASKS,
   its epoch kept) until a heartbeat reports them gone; then it moves to the target's epoch with those target
   tasks no other member still holds (an active task held as active anywhere, or any task held in any kind by
   another member of its process: UNRELEASED_TASKS until they are released), else STABLE.

Epochs: a member heartbeats with the epoch it was given; a higher one, or a lower one other than its previous
epoch with tasks it does not hold, is FENCED_MEMBER_EPOCH.  A member leaves with -1 (-2, a static member's leave,
is refused earlier: Kafka 4.3 serves no static streams members), and one not heard from for the session timeout
is removed by `tick`; both bump the group epoch.

Nothing here reads a clock or writes: the shell (kjbod.broker.groups.coordinator) passes the time and the image's
partition counts, and creates the internal topics the result names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from kjbod.broker.streams import assignor as sa
from kjbod.broker.streams.topology import (
    ASSIGNMENT_DELAYED,
    SHUTDOWN_APPLICATION,
    STALE_TOPOLOGY,
    Configured,
    PartitionCount,
    TopicInfo,
    Topology,
    configure,
)
from kjbod.protocol.errors import ErrorCode

LEAVE_GROUP_EPOCH = -1
LEAVE_GROUP_STATIC_EPOCH = -2


class StreamsGroupState(Enum):
    EMPTY = "Empty"
    NOT_READY = "NotReady"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class MemberState(Enum):
    STABLE = "stable"
    UNREVOKED_TASKS = "unrevoked_tasks"
    UNRELEASED_TASKS = "unreleased_tasks"


@dataclass(frozen=True, slots=True)
class StreamsGroupConfig:
    """The broker keys of streams groups (Kafka's names and defaults)."""

    session_timeout_ms: int = 45_000  # group.streams.session.timeout.ms
    heartbeat_interval_ms: int = 5000  # group.streams.heartbeat.interval.ms
    max_size: int = 2**31 - 1  # group.streams.max.size
    num_standby_replicas: int = 0  # group.streams.num.standby.replicas
    initial_rebalance_delay_ms: int = 3000  # group.streams.initial.rebalance.delay.ms


@dataclass(slots=True)
class Tasks:
    active: dict[str, set[int]] = field(default_factory=dict)
    standby: dict[str, set[int]] = field(default_factory=dict)
    warmup: dict[str, set[int]] = field(default_factory=dict)

    def copy(self) -> Tasks:
        return Tasks({k: set(v) for k, v in self.active.items()}, {k: set(v) for k, v in self.standby.items()},
                     {k: set(v) for k, v in self.warmup.items()})

    def kinds(self) -> tuple[dict[str, set[int]], dict[str, set[int]], dict[str, set[int]]]:
        return self.active, self.standby, self.warmup

    def is_empty(self) -> bool:
        return not any(ps for kind in self.kinds() for ps in kind.values())

    def normalized(self) -> tuple:
        return tuple(tuple(sorted((k, tuple(sorted(v))) for k, v in kind.items() if v)) for kind in self.kinds())


def _owned_within(assigned: dict[str, set[int]], owned: dict[str, set[int]] | None) -> bool:
    """Whether the tasks a member says it owns are all among those assigned to it: not when it does not say (null),
    nor for a sub-topology it has nothing of (Kafka's areOwnedTasksContainedInAssignedTasks)."""
    if owned is None:
        return False
    return all(s in assigned and ps <= assigned[s] for s, ps in owned.items())


def _intersect(a: dict[str, set[int]], b: dict[str, set[int]]) -> dict[str, set[int]]:
    return {s: ps & b[s] for s, ps in a.items() if s in b and ps & b[s]}


@dataclass(slots=True)
class StreamsMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topology_epoch: int = -1
    process_id: str = ""
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] = ()
    client_id: str = ""
    client_host: str = ""
    assigned: Tasks = field(default_factory=Tasks)
    pending_revocation: Tasks = field(default_factory=Tasks)
    session_deadline_ms: int = 0
    rebalance_deadline_ms: int = -1  # while UNREVOKED_TASKS: when the member is fenced if it still holds them


@dataclass(slots=True)
class StreamsGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    topology: Topology | None = None
    configured: Configured | None = None
    validated_topology_epoch: int = -1
    members: dict[str, StreamsMember] = field(default_factory=dict)
    targets: dict[str, Tasks] = field(default_factory=dict)
    endpoint_information_epoch: int = 0
    assign_not_before_ms: int = 0
    shutdown_requested_by: str | None = None

    def state(self) -> StreamsGroupState:
        if not self.members:
            return StreamsGroupState.EMPTY
        if self.configured is None or not self.configured.ready:
            return StreamsGroupState.NOT_READY
        if self.group_epoch != self.assignment_epoch:
            return StreamsGroupState.ASSIGNING
        if any(m.member_epoch != self.assignment_epoch or m.state != MemberState.STABLE
               for m in self.members.values()):
            return StreamsGroupState.RECONCILING
        return StreamsGroupState.STABLE

    def unreleased(self, kind: int, subtopology: str, partition: int, member: StreamsMember) -> bool:
        """Whether a task `member` is to get (kind 0 active, 1 standby, 2 warm-up) is still held by another member,
        so that it must wait (Kafka's isUnreleasedTask): an active task while any member holds it as active, or a
        member of the same process holds it in any kind; a standby or warm-up task while a member of the same
        process holds it in any kind.  Tasks pending revocation count as held."""
        for m in self.members.values():
            if m is member:
                continue
            same_process = m.process_id == member.process_id
            for held_kind, (held, pending) in enumerate(zip(m.assigned.kinds(), m.pending_revocation.kinds(),
                                                            strict=True)):
                if partition in held.get(subtopology, ()) or partition in pending.get(subtopology, ()):
                    if same_process or (kind == 0 and held_kind == 0):
                        return True
        return False


@dataclass(frozen=True, slots=True)
class StreamsHeartbeat:
    """What a StreamsGroupHeartbeat asks, in plain values (the handler decodes the request into this)."""

    group_id: str
    member_id: str
    member_epoch: int
    endpoint_information_epoch: int = 0
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topology: Topology | None = None
    active_tasks: dict[str, set[int]] | None = None
    standby_tasks: dict[str, set[int]] | None = None
    warmup_tasks: dict[str, set[int]] | None = None
    process_id: str | None = None
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] | None = None
    task_offsets_given: bool = False
    task_end_offsets_given: bool = False
    shutdown_application: bool = False
    client_id: str = ""
    client_host: str = ""


@dataclass(slots=True)
class StreamsHeartbeatResult:
    error_code: int = 0
    error_message: str | None = None
    member_id: str = ""
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    tasks: Tasks | None = None  # set when the member is sent its tasks
    status: list[tuple[int, str]] = field(default_factory=list)
    endpoint_information_epoch: int = 0
    # member id -> (endpoint, active partitions, standby partitions), each partitions {topic: [p]}; None: unchanged
    partitions_by_endpoint: list[tuple[tuple[str, int], dict[str, list[int]], dict[str, list[int]]]] | None = None
    to_create: Mapping[str, TopicInfo] = field(default_factory=dict)
    changed: bool = False


class Refused(Exception):
    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def validate(r: StreamsHeartbeat) -> None:
    """Kafka's request checks before the group is looked at, in its order (the unsupported features first)."""
    if r.instance_id is not None:
        raise Refused(ErrorCode.INVALID_REQUEST, "Static membership is not yet supported.")
    if r.task_offsets_given:
        raise Refused(ErrorCode.INVALID_REQUEST, "TaskOffsets are not supported yet.")
    if r.task_end_offsets_given:
        raise Refused(ErrorCode.INVALID_REQUEST, "TaskEndOffsets are not supported yet.")
    if r.warmup_tasks:
        raise Refused(ErrorCode.INVALID_REQUEST, "WarmupTasks are not supported yet.")
    if r.topology is not None and any(s.source_topic_regex for s in r.topology.subtopologies):
        raise Refused(ErrorCode.INVALID_REQUEST, "Regular expressions for source topics are not supported yet.")
    for value, what in ((r.member_id, "MemberId"), (r.group_id, "GroupId"), (r.instance_id, "InstanceId"),
                        (r.rack_id, "RackId")):
        if value is not None and not value.strip():
            raise Refused(ErrorCode.INVALID_REQUEST, f"{what} can't be empty.")
    if r.member_epoch == 0:
        if r.rebalance_timeout_ms == -1:
            raise Refused(ErrorCode.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request.")
        for tasks, what in ((r.active_tasks, "ActiveTasks"), (r.standby_tasks, "StandbyTasks"),
                            (r.warmup_tasks, "WarmupTasks")):
            if tasks:
                raise Refused(ErrorCode.INVALID_REQUEST, f"{what} must be empty when (re-)joining.")
        if r.topology is None:
            raise Refused(ErrorCode.INVALID_REQUEST, "Topology must be non-null when (re-)joining.")
        for s in r.topology.subtopologies:
            for t in s.state_changelog_topics:
                if t.partitions != 0:
                    raise Refused(ErrorCode.STREAMS_INVALID_TOPOLOGY,
                                  f"Changelog topic {t.name} must have an undefined partition count, but it is set "
                                  f"to {t.partitions}.")
    elif r.member_epoch == LEAVE_GROUP_STATIC_EPOCH:
        if r.instance_id is None:
            raise Refused(ErrorCode.INVALID_REQUEST, "InstanceId can't be null.")
    elif r.member_epoch < LEAVE_GROUP_STATIC_EPOCH:
        raise Refused(ErrorCode.INVALID_REQUEST,
                      f"MemberEpoch is {r.member_epoch}, but must be greater than or equal to -2.")
    given = [t is not None for t in (r.active_tasks, r.standby_tasks, r.warmup_tasks)]
    if any(given) and not all(given):
        raise Refused(ErrorCode.INVALID_REQUEST, "If one task-type is non-null, all must be non-null.")
    if r.member_epoch != 0 and r.topology is not None:
        raise Refused(ErrorCode.INVALID_REQUEST, "Topology can only be provided when (re-)joining.")


class StreamsGroups:
    """Every streams group of one coordinator, by id (the dict is shared with the coordinator, which loads it)."""

    def __init__(self, config: StreamsGroupConfig, groups: dict[str, StreamsGroup],
                 other_kind: Callable[[str], str | None] = lambda _: None,
                 group_config: Callable[[str], Mapping[str, int]] = lambda _: {}) -> None:
        self.config = config
        self.groups = groups
        self.other_kind = other_kind
        self.group_config = group_config  # the group's own streams.* configs (Kafka's GroupConfig)

    def _setting(self, group_id: str, key: str, default: int) -> int:
        return int(self.group_config(group_id).get(key, default))

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self._setting(group_id, "streams.heartbeat.interval.ms", self.config.heartbeat_interval_ms)

    def session_timeout_ms(self, group_id: str) -> int:
        return self._setting(group_id, "streams.session.timeout.ms", self.config.session_timeout_ms)

    def _group(self, group_id: str, create: bool) -> StreamsGroup:
        group = self.groups.get(group_id)
        if group is None and self.other_kind(group_id) is not None:
            raise Refused(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a streams group.")
        if group is None:
            if not create:
                raise Refused(ErrorCode.GROUP_ID_NOT_FOUND, f"Streams group {group_id} not found.")
            group = StreamsGroup(group_id)
        return group

    # ------------------------------------------------------------------------------------------------ heartbeat
    def heartbeat(self, now: int, r: StreamsHeartbeat, partitions_of: PartitionCount) -> StreamsHeartbeatResult:
        try:
            validate(r)
            if r.member_epoch in (LEAVE_GROUP_EPOCH, LEAVE_GROUP_STATIC_EPOCH):
                return self._leave(r)
            return self._heartbeat(now, r, partitions_of)
        except Refused as e:
            return StreamsHeartbeatResult(error_code=e.code, error_message=e.message)

    def _leave(self, r: StreamsHeartbeat) -> StreamsHeartbeatResult:
        group = self._group(r.group_id, create=False)
        if r.shutdown_application:  # asked for before the member is looked at, as Kafka's streamsGroupLeave does
            self._request_shutdown(group, r.member_id)
        if r.member_id not in group.members:
            raise Refused(ErrorCode.UNKNOWN_MEMBER_ID,
                          f"Member {r.member_id} is not a member of group {r.group_id}.")
        self.remove_member(group, r.member_id)
        return StreamsHeartbeatResult(member_id=r.member_id, member_epoch=r.member_epoch, changed=True)

    def remove_member(self, group: StreamsGroup, member_id: str) -> None:
        group.members.pop(member_id, None)
        group.targets.pop(member_id, None)
        group.group_epoch += 1
        if not group.members:  # the application's shutdown is over once every member is gone
            group.shutdown_requested_by = None
        if group.members and any(m.user_endpoint for m in group.members.values()):
            group.endpoint_information_epoch += 1

    @staticmethod
    def _request_shutdown(group: StreamsGroup, member_id: str) -> None:
        """The first member to ask for the application's shutdown is the one every member is told of."""
        if group.shutdown_requested_by is None:
            group.shutdown_requested_by = member_id

    def _heartbeat(self, now: int, r: StreamsHeartbeat, partitions_of: PartitionCount) -> StreamsHeartbeatResult:
        joining = r.member_epoch == 0
        group = self._group(r.group_id, create=joining)
        member = group.members.get(r.member_id)
        if member is None:
            if not joining:
                raise Refused(ErrorCode.UNKNOWN_MEMBER_ID,
                              f"Member {r.member_id} is not a member of group {r.group_id}.")
            if len(group.members) >= self.config.max_size:  # a broker key only: Kafka has no group config for it
                raise Refused(ErrorCode.GROUP_MAX_SIZE_REACHED,
                              f"The streams group has reached its maximum capacity of {self.config.max_size} members.")
            member = StreamsMember(r.member_id)
        elif not joining:
            self._check_epoch(member, r)
        # every refusal first, so that a refused heartbeat changes nothing: another topology of the same epoch, then
        # owned tasks outside the configured topology
        topology = group.topology
        if r.topology is not None:
            if topology is None:
                topology = r.topology
            elif topology.epoch <= r.topology.epoch and topology != r.topology:
                raise Refused(ErrorCode.INVALID_REQUEST, "Topology updates are not supported yet.")
        assert topology is not None
        configured = configure(topology, partitions_of)
        if configured.ready:
            self._check_tasks(configured, r.active_tasks)
            self._check_tasks(configured, r.standby_tasks)
            self._check_tasks(configured, r.warmup_tasks)
        old_tasks = member.assigned.normalized()
        status: list[tuple[int, str]] = []
        changed = r.group_id not in self.groups or r.member_id not in group.members
        bump = changed
        # 1. the member's metadata
        before = (member.rack_id, member.rebalance_timeout_ms, member.topology_epoch, member.process_id,
                  member.user_endpoint, member.client_tags, member.client_id, member.client_host)
        if r.rack_id is not None:
            member.rack_id = r.rack_id
        if r.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = r.rebalance_timeout_ms
        if r.topology is not None:
            member.topology_epoch = r.topology.epoch
        if r.process_id is not None:
            member.process_id = r.process_id
        if r.user_endpoint is not None:
            member.user_endpoint = r.user_endpoint
        if r.client_tags is not None:
            member.client_tags = r.client_tags
        member.client_id, member.client_host = r.client_id, r.client_host
        if before != (member.rack_id, member.rebalance_timeout_ms, member.topology_epoch, member.process_id,
                      member.user_endpoint, member.client_tags, member.client_id, member.client_host):
            bump = True
        # 2. the topology (the first a member brings becomes the group's)
        if group.topology is None:
            group.topology = topology
            changed = True
        if member.topology_epoch < topology.epoch:
            status.append((STALE_TOPOLOGY, f"The member's topology epoch {member.topology_epoch} is behind the "
                                           f"group's topology epoch {topology.epoch}."))
        # 3. the topology against the image
        if configured != group.configured:
            if group.configured is None or configured.tasks != group.configured.tasks:
                bump = True
            group.configured = configured
        validated = topology.epoch if configured.ready else -1
        if validated != group.validated_topology_epoch:
            group.validated_topology_epoch = validated
            bump = True
        if not group.members:  # a group (again) empty: the first joins are gathered before assigning
            group.assign_not_before_ms = now + self._setting(
                r.group_id, "streams.initial.rebalance.delay.ms", self.config.initial_rebalance_delay_ms)
        group.members[member.member_id] = member
        self.groups[r.group_id] = group
        if bump:
            group.group_epoch += 1
            changed = True
        # 4. the target assignment
        if now < group.assign_not_before_ms:
            status.append((ASSIGNMENT_DELAYED, "Assignment delayed due to the configured initial rebalance delay."))
        elif group.group_epoch > group.assignment_epoch:
            self._assign(group)
            changed = True
        # 5. reconciliation; a member told to revoke tasks has its rebalance timeout to do so (Kafka's timer starts
        # each time the member's reconciled state changes into or within UNREVOKED_TASKS, and stops on leaving it)
        if self._reconcile(group, member, r):
            changed = True
            if member.state == MemberState.UNREVOKED_TASKS:
                member.rebalance_deadline_ms = now + max(member.rebalance_timeout_ms, 0)
        if member.state != MemberState.UNREVOKED_TASKS:
            member.rebalance_deadline_ms = -1
        member.session_deadline_ms = now + self.session_timeout_ms(r.group_id)
        if r.shutdown_application:
            self._request_shutdown(group, member.member_id)
        result = StreamsHeartbeatResult(member_id=member.member_id, member_epoch=member.member_epoch,
                                        heartbeat_interval_ms=self.heartbeat_interval_ms(r.group_id),
                                        changed=changed)
        if joining or member.assigned.normalized() != old_tasks:
            result.tasks = member.assigned.copy()
            if member.user_endpoint is not None:
                group.endpoint_information_epoch += 1
        if group.endpoint_information_epoch != r.endpoint_information_epoch:
            result.partitions_by_endpoint = self.partitions_by_endpoint(group, partitions_of)
        result.endpoint_information_epoch = group.endpoint_information_epoch
        if configured.status is not None:
            status.append(configured.status)
            result.to_create = configured.to_create
        if group.shutdown_requested_by is not None:
            status.append((SHUTDOWN_APPLICATION, f"Streams group member {group.shutdown_requested_by} encountered a "
                                                 "fatal error and requested a shutdown for the entire application."))
        result.status = status
        return result

    @staticmethod
    def _check_epoch(member: StreamsMember, r: StreamsHeartbeat) -> None:
        if r.member_epoch > member.member_epoch:
            raise Refused(ErrorCode.FENCED_MEMBER_EPOCH,
                          f"The streams group member has a greater member epoch ({r.member_epoch}) than the one "
                          f"known by the group coordinator ({member.member_epoch}). The member must abandon all its "
                          "partitions and rejoin.")
        if r.member_epoch < member.member_epoch and (
                r.member_epoch != member.previous_member_epoch
                or not _owned_within(member.assigned.active, r.active_tasks)
                or not _owned_within(member.assigned.standby, r.standby_tasks)
                or not _owned_within(member.assigned.warmup, r.warmup_tasks)):
            raise Refused(ErrorCode.FENCED_MEMBER_EPOCH,
                          f"The streams group member has a smaller member epoch ({r.member_epoch}) than the one "
                          f"known by the group coordinator ({member.member_epoch}). The member must abandon all its "
                          "partitions and rejoin.")

    @staticmethod
    def _check_tasks(configured: Configured, tasks: dict[str, set[int]] | None) -> None:
        for subtopology, partitions in (tasks or {}).items():
            n = configured.tasks.get(subtopology)
            if n is None:
                raise Refused(ErrorCode.INVALID_REQUEST, f"Subtopology {subtopology} does not exist in the topology.")
            for p in sorted(partitions):
                if p < 0 or p >= n:
                    raise Refused(ErrorCode.INVALID_REQUEST, f"Task {p} for subtopology {subtopology} is invalid. "
                                                             f"Number of tasks for this subtopology: {n}")

    def _assign(self, group: StreamsGroup) -> None:
        configured = group.configured
        tasks = dict(configured.tasks) if configured is not None and configured.ready else {}
        stateful = {s.subtopology_id for s in group.topology.subtopologies if s.stateful} if group.topology else set()
        specs = {m.member_id: sa.MemberSpec(
            m.process_id or m.member_id,
            {s: frozenset(ps) for s, ps in group.targets.get(m.member_id, m.assigned).active.items()},
            {s: frozenset(ps) for s, ps in group.targets.get(m.member_id, m.assigned).standby.items()})
            for m in group.members.values()}
        standbys = self._setting(group.group_id, "streams.num.standby.replicas", self.config.num_standby_replicas)
        out = sa.assign(specs, tasks, stateful, standbys)
        group.targets = {m: Tasks(t.active, t.standby, t.warmup) for m, t in out.items()}
        group.assignment_epoch = group.group_epoch

    def _reconcile(self, group: StreamsGroup, member: StreamsMember, r: StreamsHeartbeat) -> bool:
        """Moves the member towards its target; True when its epoch, state or tasks changed."""
        target = group.targets.get(member.member_id, Tasks())
        before = (member.member_epoch, member.state, member.assigned.normalized())
        if member.state == MemberState.UNREVOKED_TASKS:
            owned = (r.active_tasks, r.standby_tasks, r.warmup_tasks)
            if owned[0] is None or any(
                    any(ps & kind_owned.get(s, set()) for s, ps in pending.items())
                    for pending, kind_owned in zip(member.pending_revocation.kinds(), owned, strict=True)
                    if kind_owned is not None):
                return False  # still holding tasks it was told to give up
            member.pending_revocation = Tasks()
        if member.member_epoch == group.assignment_epoch and member.state == MemberState.STABLE:
            return False
        kept = Tasks(*(_intersect(have, want) for have, want in zip(member.assigned.kinds(), target.kinds(),
                                                                     strict=True)))
        revoked = Tasks(*({s: ps - want.get(s, set()) for s, ps in have.items() if ps - want.get(s, set())}
                          for have, want in zip(member.assigned.kinds(), target.kinds(), strict=True)))
        if not revoked.is_empty():
            member.assigned, member.pending_revocation = kept, revoked
            member.state = MemberState.UNREVOKED_TASKS
        else:
            new = Tasks()
            unreleased = False
            for kind, (want, have, into) in enumerate(zip(target.kinds(), member.assigned.kinds(), new.kinds(),
                                                          strict=True)):
                for s, ps in want.items():
                    for p in ps:
                        if p in have.get(s, ()) or not group.unreleased(kind, s, p, member):
                            into.setdefault(s, set()).add(p)
                        else:
                            unreleased = True
            member.assigned = new
            if member.member_epoch != group.assignment_epoch:
                member.previous_member_epoch = member.member_epoch
                member.member_epoch = group.assignment_epoch
            member.state = MemberState.UNRELEASED_TASKS if unreleased else MemberState.STABLE
        return before != (member.member_epoch, member.state, member.assigned.normalized())

    def partitions_by_endpoint(self, group: StreamsGroup, partitions_of: PartitionCount) -> list[
            tuple[tuple[str, int], dict[str, list[int]], dict[str, list[int]]]]:
        """Each member with an endpoint and the source partitions (user and repartition) of its tasks: task p of a
        sub-topology is partition p of each of its source topics that has that many partitions (a sub-topology has
        as many tasks as its largest source), as Kafka's EndpointToPartitionsManager lists them."""
        inputs: dict[str, list[str]] = {}
        if group.topology is not None:
            for s in group.topology.subtopologies:
                inputs[s.subtopology_id] = [*s.source_topics, *(t.name for t in s.repartition_source_topics)]

        def partitions(tasks: dict[str, set[int]]) -> dict[str, list[int]]:
            out: dict[str, set[int]] = {}
            for s, ps in tasks.items():
                for topic in inputs.get(s, []):
                    n = partitions_of(topic) or 0
                    if kept := {p for p in ps if p < n}:
                        out.setdefault(topic, set()).update(kept)
            return {t: sorted(ps) for t, ps in sorted(out.items())}

        return [(m.user_endpoint, partitions(m.assigned.active), partitions(m.assigned.standby))
                for m in sorted(group.members.values(), key=lambda m: m.member_id) if m.user_endpoint is not None]

    # ------------------------------------------------------------------------------------------------ offsets
    def check_commit(self, group_id: str, member_id: str, member_epoch: int, instance_id: str | None,
                     version: int, transactional: bool = False) -> int:
        """Whether a member may commit offsets (0) or Kafka's code refusing it: a commit with epoch -1 goes to an
        empty group only; a member must send its current epoch (STALE_MEMBER_EPOCH otherwise, also for an older
        one: kjbod keeps no per-task assignment epochs, which Kafka 4.3 checks an older epoch against) and, outside
        a transaction, OffsetCommit v9 or later."""
        group = self.groups[group_id]
        if member_epoch < 0 and not group.members:
            return ErrorCode.NONE
        if transactional and member_epoch == -1 and not member_id and instance_id is None:
            return ErrorCode.NONE
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if not transactional and version < 9:
            return ErrorCode.UNSUPPORTED_VERSION
        return ErrorCode.NONE if member_epoch == member.member_epoch else ErrorCode.STALE_MEMBER_EPOCH

    def check_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> int:
        """Whether a member may fetch the group's offsets: without a member id and epoch (an admin) always, else
        with its current epoch only."""
        if member_id is None and member_epoch < 0:
            return ErrorCode.NONE
        member = self.groups[group_id].members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE if member_epoch == member.member_epoch else ErrorCode.STALE_MEMBER_EPOCH

    def offsets_kept(self, group_id: str) -> frozenset[str] | None:
        """The topics whose committed offsets do not expire, for a streams group's id (None for another id): the
        topology's source and repartition source topics while the group has members, none once it is empty."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if not group.members or group.topology is None:
            return frozenset()
        return frozenset(t for s in group.topology.subtopologies
                         for t in (*s.source_topics, *(x.name for x in s.repartition_source_topics)))

    def removable(self, has_offsets: Callable[[str], bool]) -> list[str]:
        """The empty streams groups without committed offsets, which the offset expiry deletes (as Kafka's cleanup
        deletes an empty group whose offsets are all gone)."""
        return [gid for gid, g in self.groups.items() if not g.members and not has_offsets(gid)]

    # ------------------------------------------------------------------------------------------------ time
    def tick(self, now: int) -> list[str]:
        """Removes the members whose session ran out, and those that held on to tasks they were told to revoke
        past their rebalance timeout (fenced as Kafka fences them: removed, their groups' epochs bumped); the
        groups changed."""
        changed = []
        for gid, group in self.groups.items():
            gone = [m for m in group.members.values() if (m.session_deadline_ms and now >= m.session_deadline_ms)
                    or (m.state == MemberState.UNREVOKED_TASKS and 0 <= m.rebalance_deadline_ms <= now)]
            for m in gone:
                self.remove_member(group, m.member_id)
            if gone:
                changed.append(gid)  # the next heartbeat computes the new target, as after a leave
        return changed

    def touch_all(self, now: int, ids: Iterable[str] | None = None) -> None:
        """Gives every member a fresh session (after a load: their last heartbeat's time was not kept).  An id
        without a group (a deleted group, its records all tombstones) is passed over."""
        for gid in ids if ids is not None else list(self.groups):
            group = self.groups.get(gid)
            for m in group.members.values() if group is not None else ():
                m.session_deadline_ms = now + self.session_timeout_ms(gid)
                if m.state == MemberState.UNREVOKED_TASKS:  # loaded mid-revocation: its timeout starts again
                    m.rebalance_deadline_ms = now + max(m.rebalance_timeout_ms, 0)
