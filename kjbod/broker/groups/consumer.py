"""KIP-848 consumer groups (group.protocol=consumer) as a state machine without I/O.

Strategy: the coordinator owns the assignment.  Each ConsumerGroupHeartbeat is one call of
`ConsumerGroups.heartbeat(now, request, topics)` that runs three steps, as Kafka's coordinator does:

1. the member is created or updated from the request; when its subscription changes, or the subscribed topics
   change in the metadata (a topic created, partitions added), the **group epoch** goes up;
2. when the group epoch is ahead of the **assignment epoch**, a server-side assignor (`uniform`, the default, or
   `range`: group.consumer.assignors, a member may name one) computes the **target assignment** of every member,
   stamped with the group epoch;
3. the member is reconciled towards its target, one step at a time (Kafka's CurrentAssignmentBuilder): partitions
   it must give up are revoked first, and it keeps its epoch (UNREVOKED_PARTITIONS) until a heartbeat no longer
   lists them; only then does it take the new epoch and the partitions of its target that no other member still
   owns (those it waits for: UNRELEASED_PARTITIONS, handed over as soon as their owner lets them go).

A partition belongs to at most one member at any time: a member is given a partition only when no member lists it
as assigned or pending revocation.  The member epoch fences zombies: a heartbeat with an epoch the coordinator does
not expect is FENCED_MEMBER_EPOCH (the previous epoch is forgiven when the member owns no more than it has now: the
answer carrying the bump may have been lost), and the member must rejoin with epoch 0 and nothing owned.  A member
leaves with epoch -1; a static member (instance id) with -2 keeps its place and partitions until its session
ends.  Timers: a member not heard from for group.consumer.session.timeout.ms is removed; a member that does not
revoke within its rebalance timeout is removed too; both bump the group epoch.

Classic members (KIP-848's mixed groups, Kafka 3.8+): a consumer using the classic protocol may be a member of a
consumer group (`classic_join`, `classic_sync`, `classic_heartbeat`, `classic_leave`): it is a member like any
other, with its JoinGroup's protocols and session timeout kept beside it (ClassicMeta, tag 0 of its member
record), and it learns of each step through REBALANCE_IN_PROGRESS and a new JoinGroup.  Converting a whole group
between the protocols (`upgrade`, `downgrade`) is done by the owner of the classic groups, under
group.consumer.migration.policy.

Nothing here reads a clock, sleeps or writes: the asyncio shell (kjbod.broker.groups.coordinator) passes the time,
a view of the metadata image, turns the group's state into `__consumer_offsets` records (kjbod.broker.groups.records)
and calls `tick(now)`.  A group's own configs (consumer.session.timeout.ms, consumer.heartbeat.interval.ms: KIP-848's
per-group configs, ConfigRecords of resource type 32) replace the broker's keys for its members.  A regex subscription (Python's `re`, the whole topic name matching, internal topics left
out) is resolved again against the image's topic names on every heartbeat of the group.
"""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from uuid import UUID

from kjbod.protocol.errors import ErrorCode

LEAVE_GROUP_EPOCH = -1
LEAVE_GROUP_STATIC_EPOCH = -2
MEMBER_ID_MAX_LENGTH = 255  # kjbod's own bound: a client-made member id longer than this is refused

# topic id -> partitions
Assignment = dict[UUID, frozenset[int]]


class MemberState(IntEnum):
    """Kafka's MemberState, with its byte values (the State field of ConsumerGroupCurrentMemberAssignmentValue)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class ConsumerGroupState(Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class TopicMeta:
    """What the subscription metadata keeps of a subscribed topic."""

    topic_id: UUID
    name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    """The broker keys of consumer groups (Kafka's names and defaults)."""

    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5000  # group.consumer.heartbeat.interval.ms
    assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors: the first is the default
    max_size: int = 2**31 - 1  # group.consumer.max.size
    migration_policy: str = "bidirectional"  # group.consumer.migration.policy
    classic_max_size: int = 2**31 - 1  # group.max.size: a downgrade never makes a classic group larger

    @property
    def upgrade_enabled(self) -> bool:
        return self.migration_policy in ("upgrade", "bidirectional")

    @property
    def downgrade_enabled(self) -> bool:
        return self.migration_policy in ("downgrade", "bidirectional")


@dataclass(frozen=True, slots=True)
class ClassicMeta:
    """What a member using the classic protocol inside a consumer group has besides a consumer member's fields
    (Kafka's ClassicMemberMetadata): its session timeout and the protocols of its JoinGroup."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]

    @property
    def protocol_name(self) -> str:
        return self.protocols[0][0] if self.protocols else ""


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    classic: ClassicMeta | None = None  # set for a member that joined with the classic protocol
    # not persisted: timers
    session_deadline_ms: int = 0
    rebalance_deadline_ms: int = -1  # while UNREVOKED_PARTITIONS: when the member is removed if still there

    def stored(self) -> tuple:
        """What the group's records hold of this member (its timers aside)."""
        return (self.instance_id, self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names,
                self.subscribed_topic_regex, self.rebalance_timeout_ms, self.server_assignor, self.member_epoch,
                self.previous_member_epoch, self.state, tuple(sorted(self.assigned.items(), key=str)),
                tuple(sorted(self.pending_revocation.items(), key=str)), self.classic)

    def reconciled_to(self, epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == epoch

    def subscription_key(self) -> tuple[tuple[str, ...], str | None]:
        return tuple(sorted(self.subscribed_topic_names)), self.subscribed_topic_regex


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, Assignment] = field(default_factory=dict)  # member id -> target assignment
    topics: dict[str, TopicMeta] = field(default_factory=dict)  # the subscription metadata, by topic name
    # regex -> the topics it matches now (not stored: resolved again from the metadata image on a heartbeat)
    resolved: dict[str, frozenset[str]] = field(default_factory=dict)

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not m.reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def member_topics(self, m: ConsumerMember) -> set[str]:
        """The topics a member subscribes to: its names, and what its regex matches."""
        out = set(m.subscribed_topic_names)
        if m.subscribed_topic_regex is not None:
            out |= self.resolved.get(m.subscribed_topic_regex, frozenset())
        return out

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in self.member_topics(m)}

    def preferred_assignor(self, default: str) -> str:
        """The assignor most members name (ties: the smaller name), else the default (Kafka's choice)."""
        votes: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        if not votes:
            return default
        return min(votes, key=lambda n: (-votes[n], n))

    def partition_epochs(self) -> dict[tuple[UUID, int], int]:
        """Who owns what now: (topic id, partition) -> the epoch of the member that has it assigned or is still
        revoking it."""
        out: dict[tuple[UUID, int], int] = {}
        for m in self.members.values():
            for assignment in (m.assigned, m.pending_revocation):
                for tid, parts in assignment.items():
                    for p in parts:
                        out[(tid, p)] = m.member_epoch
        return out


@dataclass(frozen=True, slots=True)
class MemberHeartbeat:
    """The fields of a ConsumerGroupHeartbeat request, plus who sent it."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None  # None: not sent (unchanged)
    client_id: str = ""
    client_host: str = ""
    # v1+ (KIP-1082): the consumer makes its own member id, so an empty one is refused even when joining
    member_id_required: bool = False


@dataclass(frozen=True, slots=True)
class MemberHeartbeatResult:
    error_code: int = 0
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None
    # whether anything the group's records hold changed (else the heartbeat has nothing to write)
    changed: bool = True


@dataclass(frozen=True, slots=True)
class ClassicJoin:
    """A classic member's JoinGroup to a consumer group: its answer (the generation is its member epoch)."""

    error_code: int
    member_id: str
    generation_id: int = -1
    protocol_name: str = ""
    message: str | None = None
    changed: bool = False  # whether the group's records must be written before the answer goes out


class HeartbeatError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# name -> TopicMeta of an existing topic, or None
TopicLookup = Callable[[str], TopicMeta | None]
# the names of every topic, for regex subscriptions
TopicNames = Callable[[], Iterable[str]]


def regex_matches(regex: str, names: Iterable[str]) -> frozenset[str]:
    """The topics a subscription regex takes: the whole name must match; internal topics (`__...`) never."""
    pattern = re.compile(regex)
    return frozenset(n for n in names if not n.startswith("__") and pattern.fullmatch(n))


# ------------------------------------------------------------------------------------------------ assignors
def uniform_assign(subscriptions: Mapping[str, Iterable[str]], topics: Mapping[str, TopicMeta],
                   previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Kafka's `uniform` assignor's goals: every partition of a subscribed topic to exactly one member that
    subscribes to it, partition counts as even as the subscriptions allow, and partitions left where they were.

    Sticky pass: a member keeps its previous partitions of topics it still subscribes to, up to its fair share.
    Then every free partition goes to the eligible member holding fewest (ties: member id).  Then, while some
    partition could move from a member holding two more than an eligible other, it moves (heterogeneous
    subscriptions)."""
    members = sorted(subscriptions)
    subs = {m: {t for t in subscriptions[m] if t in topics} for m in members}
    eligible: dict[str, list[str]] = {}
    for m in members:
        for t in subs[m]:
            eligible.setdefault(t, []).append(m)
    all_parts = [(t, p) for t in sorted(eligible) for p in range(topics[t].num_partitions)]
    by_id = {topics[t].topic_id: t for t in eligible}
    # a member's fair share: ceil of the partitions it could hold over the members competing for them
    share: dict[str, int] = {}
    for m in members:
        reachable = sum(topics[t].num_partitions for t in subs[m])
        rivals = len({r for t in subs[m] for r in eligible[t]}) or 1
        share[m] = -(-reachable // rivals)
    owner: dict[tuple[str, int], str] = {}
    held: dict[str, list[tuple[str, int]]] = {m: [] for m in members}
    for m in members:
        for tid, parts in sorted(previous.get(m, {}).items(), key=lambda kv: str(kv[0])):
            name = by_id.get(tid)
            if name is None or name not in subs[m]:
                continue
            t = name
            for p in sorted(parts):
                if p < topics[t].num_partitions and (t, p) not in owner and len(held[m]) < share[m]:
                    owner[(t, p)] = m
                    held[m].append((t, p))
    for tp in all_parts:
        if tp not in owner:
            m = min(eligible[tp[0]], key=lambda x: (len(held[x]), x))
            owner[tp] = m
            held[m].append(tp)
    moved = True
    while moved:
        moved = False
        for m in sorted(members, key=lambda x: (-len(held[x]), x)):
            for tp in list(held[m]):
                to = min(eligible[tp[0]], key=lambda x: (len(held[x]), x))
                if len(held[to]) + 1 < len(held[m]):
                    held[m].remove(tp)
                    held[to].append(tp)
                    moved = True
    return {m: _as_assignment(held[m], topics) for m in members}


def range_assign(subscriptions: Mapping[str, Iterable[str]], topics: Mapping[str, TopicMeta],
                 previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Kafka's `range` assignor: per topic, its subscribers in member id order get contiguous ranges, the first
    ones one partition more when the count does not divide; members subscribed to the same topics get the same
    partition numbers of each (co-partitioning)."""
    held: dict[str, list[tuple[str, int]]] = {m: [] for m in subscriptions}
    subs = {m: set(ts) for m, ts in subscriptions.items()}
    for t in sorted({t for ts in subs.values() for t in ts if t in topics}):
        who = sorted(m for m in subscriptions if t in subs[m])
        n = topics[t].num_partitions
        base, extra = divmod(n, len(who))
        start = 0
        for i, m in enumerate(who):
            count = base + (1 if i < extra else 0)
            held[m].extend((t, p) for p in range(start, start + count))
            start += count
    return {m: _as_assignment(parts, topics) for m, parts in held.items()}


ASSIGNORS: dict[str, Callable[..., dict[str, Assignment]]] = {"uniform": uniform_assign, "range": range_assign}
# Kafka's class names for them, accepted in group.consumer.assignors
ASSIGNOR_CLASSES = {"org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
                    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range"}


def _as_assignment(parts: Iterable[tuple[str, int]], topics: Mapping[str, TopicMeta]) -> Assignment:
    out: dict[UUID, set[int]] = {}
    for t, p in parts:
        out.setdefault(topics[t].topic_id, set()).add(p)
    return {tid: frozenset(ps) for tid, ps in out.items()}


# ------------------------------------------------------------------------------------------------ reconciliation
def owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Whether the owned partitions (None: not reported, counted as owning everything) meet `partitions`."""
    if owned is None:
        return True
    return any(owned.get(tid, frozenset()) & ps for tid, ps in partitions.items())


def is_subset(owned: Assignment | None, assigned: Assignment) -> bool:
    if owned is None:
        return False
    return all(ps <= assigned.get(tid, frozenset()) for tid, ps in owned.items() if ps)


def reconcile(member: ConsumerMember, target_epoch: int, target: Assignment,
              partition_epoch: Callable[[UUID, int], int], owned: Assignment | None) -> None:
    """One step of the member towards its target (Kafka's CurrentAssignmentBuilder), in place."""
    if member.state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    elif member.state is MemberState.UNREVOKED_PARTITIONS:
        if not owns_any(owned, member.pending_revocation):
            _next(member, member.member_epoch + 1, target_epoch, target, partition_epoch, owned)
    elif member.state is MemberState.UNRELEASED_PARTITIONS:
        _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    else:  # a state this coordinator does not know: start the member again from nothing
        if owned is None or any(owned.values()):
            raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH,
                                 "The member is in an unknown state; it must give up its partitions and rejoin.")
        _next(member, target_epoch, target_epoch, target, partition_epoch, owned)


def _set_epoch(member: ConsumerMember, epoch: int) -> None:
    if epoch != member.member_epoch:
        member.previous_member_epoch = member.member_epoch
        member.member_epoch = epoch


def _next(member: ConsumerMember, member_epoch: int, target_epoch: int, target: Assignment,
          partition_epoch: Callable[[UUID, int], int], owned: Assignment | None) -> None:
    unreleased = False
    keep: dict[UUID, frozenset[int]] = {}
    revoke: dict[UUID, frozenset[int]] = {}
    gain: dict[UUID, frozenset[int]] = {}
    for tid in set(target) | set(member.assigned):
        want = target.get(tid, frozenset())
        have = member.assigned.get(tid, frozenset())
        kept = have & want
        pending = want - kept
        free = frozenset(p for p in pending if partition_epoch(tid, p) == -1)
        unreleased = unreleased or free != pending
        if kept:
            keep[tid] = kept
        if have - kept:
            revoke[tid] = have - kept
        if free:
            gain[tid] = free
    if revoke and owns_any(owned, revoke):
        member.state = MemberState.UNREVOKED_PARTITIONS
        _set_epoch(member, member_epoch)
        member.assigned = keep
        member.pending_revocation = revoke
        return
    for tid, ps in gain.items():
        keep[tid] = keep.get(tid, frozenset()) | ps
    member.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    _set_epoch(member, target_epoch)
    member.assigned = keep
    member.pending_revocation = {}


# ------------------------------------------------------------------------------------------------ the groups
class ConsumerGroups:
    """Heartbeats and timers of the consumer groups of one coordinator.  `groups` is the coordinator's table of
    consumer groups (group id -> ConsumerGroup); `classic_busy(group_id)` says whether a classic group of that id
    has members (then the id is taken)."""

    def __init__(self, config: ConsumerGroupConfig, groups: dict[str, ConsumerGroup],
                 classic_busy: Callable[[str], bool] = lambda gid: False,
                 group_configs: Callable[[str], Mapping[str, int]] | None = None) -> None:
        self.config = config
        self.groups = groups
        self.classic_busy = classic_busy
        # group id -> its per-group configs (KIP-848's consumer.session.timeout.ms and
        # consumer.heartbeat.interval.ms, from the metadata image); a key it lacks is the broker's
        self.group_configs = group_configs or (lambda gid: {})
        # Online migration (set by the owner of the classic groups, kjbod.broker.groups.state.GroupBook):
        # `upgrade(now, group id, topics)` turns the classic group of that id into a consumer group (or None when it
        # may not be), `downgrade(now, group, leaving member id)` turns a consumer group into a classic one.
        self.upgrade: Callable[[int, str, TopicLookup], ConsumerGroup | None] | None = None
        self.downgrade: Callable[[int, ConsumerGroup, str], None] | None = None
        # whether a KIP-932 share group has this id (then no consumer group may take it)
        self.taken_by_share: Callable[[str], bool] = lambda gid: False

    def session_timeout_ms(self, group_id: str) -> int:
        return self.group_configs(group_id).get("consumer.session.timeout.ms", self.config.session_timeout_ms)

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self.group_configs(group_id).get("consumer.heartbeat.interval.ms", self.config.heartbeat_interval_ms)

    @property
    def default_assignor(self) -> str:
        return self.config.assignors[0]

    # -------------------------------------------------------------------------------------- validation
    def _validate(self, r: MemberHeartbeat) -> None:
        bad = ErrorCode.INVALID_REQUEST
        if (r.member_id_required or r.member_epoch > 0 or r.member_epoch == LEAVE_GROUP_EPOCH) and not r.member_id:
            raise HeartbeatError(bad, "MemberId can't be empty.")
        if not r.group_id:
            raise HeartbeatError(bad, "GroupId can't be empty.")
        if r.instance_id == "":
            raise HeartbeatError(bad, "InstanceId can't be empty.")
        if r.rack_id == "":
            raise HeartbeatError(bad, "RackId can't be empty.")
        if r.subscribed_topic_regex:
            try:
                re.compile(r.subscribed_topic_regex)
            except re.error as e:
                raise HeartbeatError(ErrorCode.INVALID_REGULAR_EXPRESSION,
                                     f"SubscribedTopicRegex {r.subscribed_topic_regex!r} is not a valid regular "
                                     f"expression: {e}.") from None
        if len(r.member_id) > MEMBER_ID_MAX_LENGTH:
            raise HeartbeatError(bad, f"MemberId is longer than {MEMBER_ID_MAX_LENGTH} characters.")
        if r.member_epoch > 0 or r.member_epoch == LEAVE_GROUP_EPOCH:
            pass  # the member id was checked first, as Kafka checks it
        elif r.member_epoch == 0:
            if r.rebalance_timeout_ms == -1:
                raise HeartbeatError(bad, "RebalanceTimeoutMs must be provided in first request.")
            if r.owned is None or any(r.owned.values()):
                raise HeartbeatError(bad, "TopicPartitions must be empty when (re-)joining.")
            # An empty list or an empty regex joins subscribed to nothing, as Kafka 4 accepts it; only both
            # left null is refused.
            if r.subscribed_topic_names is None and r.subscribed_topic_regex is None:
                raise HeartbeatError(bad, "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null "
                                          "when (re-)joining.")
        elif r.member_epoch == LEAVE_GROUP_STATIC_EPOCH:
            if not r.member_id:
                raise HeartbeatError(bad, "MemberId can't be empty.")
            if r.instance_id is None:
                raise HeartbeatError(bad, "InstanceId can't be null.")
        else:
            raise HeartbeatError(bad, "MemberEpoch is invalid.")
        if r.server_assignor is not None and r.server_assignor not in self.config.assignors:
            raise HeartbeatError(ErrorCode.UNSUPPORTED_ASSIGNOR,
                                 f"ServerAssignor {r.server_assignor} is not supported. Supported assignors: "
                                 f"{', '.join(self.config.assignors)}.")

    # -------------------------------------------------------------------------------------- heartbeat
    def heartbeat(self, now: int, r: MemberHeartbeat, topics: TopicLookup,
                  names: TopicNames | None = None) -> MemberHeartbeatResult:
        """One ConsumerGroupHeartbeat.  `topics` looks a topic up in the metadata image; `names` lists every
        topic (for regex subscriptions; without it a regex matches nothing)."""
        try:
            self._validate(r)
            if r.member_epoch in (LEAVE_GROUP_EPOCH, LEAVE_GROUP_STATIC_EPOCH):
                return self._leave(now, r, topics)
            return self._heartbeat(now, r, topics, names)
        except HeartbeatError as e:
            return MemberHeartbeatResult(error_code=e.code, error_message=e.message)

    def _group(self, group_id: str, create: bool, now: int = 0, topics: TopicLookup | None = None) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is None:
            if self.taken_by_share(group_id):
                raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
            if not create:
                raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
            if self.classic_busy(group_id):
                # a classic group with members: upgraded when the policy and the group allow it (Kafka's
                # validateOnlineUpgrade), else the id is taken
                upgraded = self.upgrade(now, group_id, topics or (lambda name: None)) \
                    if self.upgrade is not None else None
                if upgraded is None:
                    raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
                self.groups[group_id] = upgraded
                return upgraded
            group = self.groups[group_id] = ConsumerGroup(group_id)
        return group

    def _session_ms(self, group_id: str, member: ConsumerMember) -> int:
        """A classic member's own session timeout (from its JoinGroup), else the group's."""
        return member.classic.session_timeout_ms if member.classic is not None else self.session_timeout_ms(group_id)

    @staticmethod
    def _check_epoch(member: ConsumerMember, received: int, owned: Assignment | None) -> None:
        if received > member.member_epoch:
            raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH,
                                 f"The consumer group member has a greater member epoch ({received}) than the one "
                                 f"known by the group coordinator ({member.member_epoch}). The member must abandon "
                                 "all its partitions and rejoin.")
        if received < member.member_epoch and (received != member.previous_member_epoch
                                               or not is_subset(owned, member.assigned)):
            raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH,
                                 f"The consumer group member has a smaller member epoch ({received}) than the one "
                                 f"known by the group coordinator ({member.member_epoch}). The member must abandon "
                                 "all its partitions and rejoin.")

    def _member(self, now: int, group: ConsumerGroup, r: MemberHeartbeat, member_id: str) -> ConsumerMember:
        joining = r.member_epoch == 0
        if r.instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not joining:
                    raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                         f"Member {member_id} is not a member of group {group.group_id}.")
                return ConsumerMember(member_id)
            if joining:  # the member starts again (after being fenced): from nothing, under the same id
                return ConsumerMember(member_id, subscribed_topic_names=member.subscribed_topic_names,
                                      rebalance_timeout_ms=member.rebalance_timeout_ms,
                                      server_assignor=member.server_assignor, client_id=member.client_id,
                                      client_host=member.client_host, rack_id=member.rack_id)
            self._check_epoch(member, r.member_epoch, r.owned)
            return member
        existing_id = group.static.get(r.instance_id)
        existing = group.members.get(existing_id) if existing_id is not None else None
        if joining:
            if existing is None:
                return ConsumerMember(member_id, instance_id=r.instance_id)
            if existing.member_epoch != LEAVE_GROUP_STATIC_EPOCH and existing.member_id != member_id:
                raise HeartbeatError(ErrorCode.UNRELEASED_INSTANCE_ID,
                                     f"Static member {existing.member_id} with instance id {r.instance_id} is "
                                     "present in the consumer group.")
            # the static member comes back: the new member takes the old one's place and partitions
            return ConsumerMember(member_id, instance_id=r.instance_id, rack_id=existing.rack_id,
                                  client_id=existing.client_id, client_host=existing.client_host,
                                  subscribed_topic_names=existing.subscribed_topic_names,
                                  rebalance_timeout_ms=existing.rebalance_timeout_ms,
                                  server_assignor=existing.server_assignor, member_epoch=0,
                                  previous_member_epoch=0, state=existing.state, assigned=dict(existing.assigned),
                                  pending_revocation=dict(existing.pending_revocation))
        if existing is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {r.instance_id} is unknown.")
        if existing.member_id != member_id:
            raise HeartbeatError(ErrorCode.FENCED_INSTANCE_ID,
                                 f"Static member {member_id} with instance id {r.instance_id} was fenced by "
                                 f"member {existing.member_id}.")
        self._check_epoch(existing, r.member_epoch, r.owned)
        return existing

    def _heartbeat(self, now: int, r: MemberHeartbeat, topics: TopicLookup,
                   names: TopicNames | None) -> MemberHeartbeatResult:
        group = self._group(r.group_id, r.member_epoch == 0, now, topics)
        member_id = r.member_id or base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if len(group.members) >= self.config.max_size and member_id not in group.members and \
                (r.instance_id is None or r.instance_id not in group.static):
            raise HeartbeatError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                 f"The consumer group has reached its maximum capacity of {self.config.max_size} "
                                 "members.")
        old = group.members.get(member_id)
        member = self._member(now, group, r, member_id)
        before_subscription = old.subscription_key() if old is not None else None
        stored_before = (group.group_epoch, group.assignment_epoch, len(group.members),
                         old.stored() if old is not None else None)
        before_assigned = dict(member.assigned) if member is old else None
        # 1. the member, updated from what the request carries
        if r.rack_id is not None:
            member.rack_id = r.rack_id
        if r.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = r.rebalance_timeout_ms
        if r.server_assignor is not None:
            member.server_assignor = r.server_assignor
        if r.subscribed_topic_names is not None:
            member.subscribed_topic_names = tuple(r.subscribed_topic_names)
        if r.subscribed_topic_regex is not None:  # "" clears it (librdkafka sends "" with a list of names)
            member.subscribed_topic_regex = r.subscribed_topic_regex or None
        member.client_id, member.client_host = r.client_id, r.client_host
        replaced = None
        if member is not old:
            if r.instance_id is not None:
                replaced_id = group.static.get(r.instance_id)
                if replaced_id is not None and replaced_id != member_id:
                    replaced = group.members.pop(replaced_id, None)
                    group.target[member_id] = group.target.pop(replaced_id, {})
                group.static[r.instance_id] = member_id
            group.members[member_id] = member
        bump = before_subscription != member.subscription_key() and replaced is None
        if replaced is not None and replaced.subscription_key() != member.subscription_key():
            bump = True
        if self._refresh_topics(group, topics, names):
            bump = True
        if bump:
            group.group_epoch += 1
        # 2. the target assignment, when the group epoch moved on
        if group.group_epoch > group.assignment_epoch:
            self._assign(group)
        # 3. the member, one step towards its target
        target = group.target.get(member_id, {})
        if not member.reconciled_to(group.assignment_epoch):
            epochs = group.partition_epochs()
            was = member.state, member.member_epoch
            reconcile(member, group.assignment_epoch, target, lambda t, p: epochs.get((t, p), -1), r.owned)
            if member.state is MemberState.UNREVOKED_PARTITIONS:
                if was != (member.state, member.member_epoch) or member.rebalance_deadline_ms < 0:
                    member.rebalance_deadline_ms = now + max(member.rebalance_timeout_ms, 0)
            else:
                member.rebalance_deadline_ms = -1
        member.session_deadline_ms = now + self.session_timeout_ms(group.group_id)
        full = r.member_epoch == 0 or (r.rebalance_timeout_ms != -1 and r.subscribed_topic_names is not None
                                       and r.owned is not None)
        changed = before_assigned is None or before_assigned != member.assigned
        stored_after = (group.group_epoch, group.assignment_epoch, len(group.members), member.stored())
        return MemberHeartbeatResult(changed=member is not old or stored_before != stored_after,
                                     member_id=member_id, member_epoch=member.member_epoch,
                               heartbeat_interval_ms=self.heartbeat_interval_ms(group.group_id),
                               assignment=dict(member.assigned) if full or changed else None)

    # -------------------------------------------------------------------------------------- classic members
    # A classic consumer (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) in a consumer group, as Kafka serves it: its
    # JoinGroup is one step of the same three (its subscription and owned partitions read from the protocol
    # metadata, the generation answered is its member epoch, nobody is asked to assign), its SyncGroup returns the
    # partitions it is assigned now, and its Heartbeat says REBALANCE_IN_PROGRESS whenever it must join again to
    # move on (the group epoch is ahead of it, it must give partitions up, or partitions it waits for are free).
    def classic_join(self, now: int, group_id: str, member_id: str, instance_id: str | None, client_id: str,
                     client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                     protocols: list[tuple[str, bytes]], require_known_member_id: bool, topics: TopicLookup,
                     names: TopicNames | None = None) -> ClassicJoin:
        from kjbod.broker.groups import embedded

        group = self.groups[group_id]
        if not self.supports_classic(group, protocol_type, [n for n, _ in protocols]):
            return ClassicJoin(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id,
                               message=f"Member {member_id}'s protocols are not supported.")
        unknown = member_id == ""
        if unknown:
            member_id = str(uuid.uuid4())
        if len(group.members) >= self.config.max_size and member_id not in group.members and \
                (instance_id is None or instance_id not in group.static):
            return ClassicJoin(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id)
        if unknown and require_known_member_id and instance_id is None:
            return ClassicJoin(ErrorCode.MEMBER_ID_REQUIRED, member_id)
        try:
            subscription = embedded.read_subscription(protocols[0][1])
        except embedded.EmbeddedProtocolError as e:
            return ClassicJoin(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id,
                               message=f"The consumer protocol metadata does not decode: {e}")
        replaced: ConsumerMember | None = None
        old = group.members.get(member_id)
        if instance_id is not None:
            known = group.static.get(instance_id)
            if known is not None and known != member_id:
                if not unknown:
                    return ClassicJoin(ErrorCode.FENCED_INSTANCE_ID, member_id)
                replaced = group.members.get(known)
        stored_before = (group.group_epoch, group.assignment_epoch, len(group.members),
                         old.stored() if old is not None else None)
        if old is not None:
            member = old
        elif replaced is not None:  # a restarted static member takes the old one's place and partitions
            member = ConsumerMember(member_id, instance_id=instance_id, member_epoch=replaced.member_epoch,
                                    previous_member_epoch=replaced.previous_member_epoch, state=replaced.state,
                                    assigned=dict(replaced.assigned),
                                    pending_revocation=dict(replaced.pending_revocation),
                                    subscribed_topic_names=replaced.subscribed_topic_names)
        else:
            member = ConsumerMember(member_id, instance_id=instance_id)
        before_subscription = old.subscription_key() if old is not None else \
            (replaced.subscription_key() if replaced is not None else None)
        member.rack_id = subscription.rack_id or member.rack_id
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.server_assignor = None
        member.subscribed_topic_names = tuple(subscription.topics)
        member.subscribed_topic_regex = None
        member.client_id, member.client_host = client_id, client_host
        member.classic = ClassicMeta(session_timeout_ms, tuple(protocols))
        if member is not old:
            if replaced is not None:
                group.members.pop(replaced.member_id, None)
                group.target[member_id] = group.target.pop(replaced.member_id, {})
            if instance_id is not None:
                group.static[instance_id] = member_id
            group.members[member_id] = member
        bump = before_subscription != member.subscription_key()
        if self._refresh_topics(group, topics, names):
            bump = True
        if bump:
            group.group_epoch += 1
        if group.group_epoch > group.assignment_epoch:
            self._assign(group)
        owned: Assignment = {}
        for name, parts in subscription.owned.items():
            meta = group.topics.get(name) or topics(name)
            if meta is not None:
                owned[meta.topic_id] = parts
        if not member.reconciled_to(group.assignment_epoch):
            epochs = group.partition_epochs()
            was = member.state, member.member_epoch
            reconcile(member, group.assignment_epoch, group.target.get(member_id, {}),
                      lambda t, p: epochs.get((t, p), -1), owned)
            if member.state is MemberState.UNREVOKED_PARTITIONS:
                if was != (member.state, member.member_epoch) or member.rebalance_deadline_ms < 0:
                    member.rebalance_deadline_ms = now + max(member.rebalance_timeout_ms, 0)
            else:
                member.rebalance_deadline_ms = -1
        member.session_deadline_ms = now + session_timeout_ms
        stored_after = (group.group_epoch, group.assignment_epoch, len(group.members), member.stored())
        return ClassicJoin(ErrorCode.NONE, member_id, member.member_epoch, member.classic.protocol_name,
                           changed=member is not old or stored_before != stored_after)

    @staticmethod
    def supports_classic(group: ConsumerGroup, protocol_type: str, names: list[str]) -> bool:
        """Kafka's supportsClassicProtocols: the consumer protocol type, and a protocol every classic member has."""
        if protocol_type != "consumer" or not names:
            return False
        common: set[str] | None = None
        for m in group.members.values():
            if m.classic is not None:
                mine = {n for n, _ in m.classic.protocols}
                common = mine if common is None else common & mine
        return common is None or bool(common & set(names))

    def _classic_member(self, group_id: str, member_id: str, instance_id: str | None) -> ConsumerMember:
        group = self.groups[group_id]
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"Member {member_id} is not a member of group {group_id}.")
        else:
            known = group.static.get(instance_id)
            member = group.members.get(known) if known is not None else None
            if member is None:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"Member with instance id {instance_id} is not a member of group {group_id}.")
            if member_id and member.member_id != member_id:
                raise HeartbeatError(ErrorCode.FENCED_INSTANCE_ID,
                                     f"Static member {member_id} with instance id {instance_id} was fenced by "
                                     f"member {member.member_id}.")
        if member.classic is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member.member_id} does not use the classic "
                                                              "protocol.")
        return member

    def classic_sync(self, now: int, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
                     protocol_type: str | None, protocol_name: str | None) -> tuple[int, bytes, str]:
        """(error code, the member's assignment in the consumer protocol, protocol name)."""
        from kjbod.broker.groups import embedded

        group = self.groups[group_id]
        try:
            member = self._classic_member(group_id, member_id, instance_id)
        except HeartbeatError as e:
            return e.code, b"", ""
        assert member.classic is not None
        if generation_id != member.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION, b"", ""
        name = member.classic.protocol_name
        if (protocol_type is not None and protocol_type != "consumer") or \
                (protocol_name is not None and protocol_name != name):
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL, b"", ""
        if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
            return ErrorCode.REBALANCE_IN_PROGRESS, b"", ""
        member.session_deadline_ms = now + member.classic.session_timeout_ms
        names = {t.topic_id: t.name for t in group.topics.values()}
        try:
            version = embedded.read_version(member.classic.protocols[0][1])
        except embedded.EmbeddedProtocolError:
            version = 0
        data = embedded.write_assignment([(names[tid], ps) for tid, ps in member.assigned.items() if tid in names],
                                         version)
        return ErrorCode.NONE, data, name

    def classic_heartbeat(self, now: int, group_id: str, member_id: str, instance_id: str | None,
                          generation_id: int) -> int:
        group = self.groups[group_id]
        try:
            member = self._classic_member(group_id, member_id, instance_id)
        except HeartbeatError as e:
            return e.code
        assert member.classic is not None
        if generation_id != member.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION
        member.session_deadline_ms = now + member.classic.session_timeout_ms
        if member.member_epoch < group.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS or \
                (member.state is MemberState.UNRELEASED_PARTITIONS and not self._waiting(group, member)):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    @staticmethod
    def _waiting(group: ConsumerGroup, member: ConsumerMember) -> bool:
        """Whether a partition of the member's target that it does not have yet is still held by another member."""
        epochs = group.partition_epochs()
        for tid, parts in group.target.get(member.member_id, {}).items():
            mine = member.assigned.get(tid, frozenset())
            if any((tid, p) in epochs for p in parts - mine):
                return True
        return False

    def classic_leave(self, now: int, group_id: str, leaving: list[tuple[str, str | None]],
                      topics: TopicLookup | None = None) -> list[int]:
        """LeaveGroup of classic members of a consumer group: one code per (member id, instance id)."""
        group = self.groups[group_id]
        codes: list[int] = []
        for member_id, instance_id in leaving:
            try:
                member = self._classic_member(group_id, member_id, instance_id)
            except HeartbeatError as e:
                codes.append(e.code)
                continue
            self.remove_member(group, member.member_id, topics, now=now, may_downgrade=False)
            codes.append(ErrorCode.NONE)
        return codes

    def _refresh_topics(self, group: ConsumerGroup, topics: TopicLookup, names: TopicNames | None = None) -> bool:
        """The subscription metadata from the image (regexes resolved again when `names` is given); True when it
        changed (the group epoch then goes up)."""
        regexes = {m.subscribed_topic_regex for m in group.members.values() if m.subscribed_topic_regex is not None}
        if names is not None:
            every = list(names()) if regexes else []
            group.resolved = {rx: regex_matches(rx, every) for rx in regexes}
        else:
            group.resolved = {rx: ts for rx, ts in group.resolved.items() if rx in regexes}
        now: dict[str, TopicMeta] = {}
        for name in sorted(group.subscribed_topics()):
            meta = topics(name)
            if meta is not None:
                now[name] = meta
        if now == group.topics:
            return False
        group.topics = now
        return True

    def _assign(self, group: ConsumerGroup) -> None:
        name = group.preferred_assignor(self.default_assignor)
        assignor = ASSIGNORS.get(name, ASSIGNORS[self.default_assignor])
        subscriptions = {mid: tuple(sorted(group.member_topics(m))) for mid, m in group.members.items()}
        group.target = assignor(subscriptions, group.topics, group.target)
        group.assignment_epoch = group.group_epoch

    # -------------------------------------------------------------------------------------- leaving
    def _leave(self, now: int, r: MemberHeartbeat, topics: TopicLookup) -> MemberHeartbeatResult:
        group = self._group(r.group_id, create=False)
        if r.instance_id is None:
            member = group.members.get(r.member_id)
            if member is None:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"Member {r.member_id} is not a member of group {group.group_id}.")
        else:
            mid = group.static.get(r.instance_id)
            member = group.members.get(mid) if mid is not None else None
            if member is None:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {r.instance_id} is unknown.")
            if member.member_id != r.member_id:
                raise HeartbeatError(ErrorCode.FENCED_INSTANCE_ID,
                                     f"Static member {r.member_id} with instance id {r.instance_id} was fenced by "
                                     f"member {member.member_id}.")
            if r.member_epoch == LEAVE_GROUP_STATIC_EPOCH:
                # a static member away for a while: its place and partitions are kept until its session ends
                _set_epoch(member, LEAVE_GROUP_STATIC_EPOCH)
                member.pending_revocation = {}
                member.session_deadline_ms = now + self.session_timeout_ms(group.group_id)
                return MemberHeartbeatResult(member_id=member.member_id, member_epoch=LEAVE_GROUP_STATIC_EPOCH)
        self.remove_member(group, member.member_id, topics, now=now)
        return MemberHeartbeatResult(member_id=r.member_id, member_epoch=r.member_epoch)

    def remove_member(self, group: ConsumerGroup, member_id: str, topics: TopicLookup | None = None, *,
                      now: int = 0, may_downgrade: bool = True) -> None:
        """A member is gone (left, fenced, timed out): its partitions are free, the group epoch goes up.  When every
        other member uses the classic protocol and the policy allows, the group becomes a classic group instead
        (Kafka's online downgrade; not on a classic LeaveGroup, as in Kafka)."""
        member = group.members.get(member_id)
        if member is None:
            return
        if may_downgrade and self.downgrade is not None and self._may_downgrade(group, member_id):
            self.downgrade(now, group, member_id)
            return
        del group.members[member_id]
        group.target.pop(member_id, None)
        if member.instance_id is not None and group.static.get(member.instance_id) == member_id:
            del group.static[member.instance_id]
        if topics is not None:
            self._refresh_topics(group, topics)
        else:
            group.topics = {n: t for n, t in group.topics.items() if n in group.subscribed_topics()}
        group.group_epoch += 1

    def _may_downgrade(self, group: ConsumerGroup, leaving: str) -> bool:
        """Kafka's validateOnlineDowngradeWithFencedMember."""
        others = [m for mid, m in group.members.items() if mid != leaving]
        return bool(others) and all(m.classic is not None for m in others) and self.config.downgrade_enabled \
            and len(others) <= self.config.classic_max_size

    # -------------------------------------------------------------------------------------- timers
    def tick(self, now: int) -> list[str]:
        """Removes members whose session ended or who did not revoke in time; the ids of the groups changed."""
        changed = []
        for gid, group in list(self.groups.items()):
            gone = [m.member_id for m in group.members.values()
                    if m.session_deadline_ms <= now
                    or (m.state is MemberState.UNREVOKED_PARTITIONS and 0 <= m.rebalance_deadline_ms <= now)]
            for mid in gone:
                if self.groups.get(gid) is group:  # (a downgrade takes the group away)
                    self.remove_member(group, mid, now=now)
            if gone:
                changed.append(gid)
        return changed

    def touch_all(self, now: int) -> None:
        """Every member's session starts now (after a load: the coordinator has not heard from them yet)."""
        for gid, group in self.groups.items():
            for m in group.members.values():
                m.session_deadline_ms = now + self._session_ms(gid, m)
                if m.state is MemberState.UNREVOKED_PARTITIONS:
                    m.rebalance_deadline_ms = now + max(m.rebalance_timeout_ms, 0)

    # -------------------------------------------------------------------------------------- offsets
    def check_commit(self, group_id: str, member_id: str, member_epoch: int, version: int,
                     transactional: bool = False) -> int:
        """0, or Kafka's code refusing an offset commit to a consumer group."""
        group = self.groups[group_id]
        if member_epoch < 0 and not group.members:
            return ErrorCode.NONE
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if not transactional and version < 9 and member.classic is None:
            return ErrorCode.UNSUPPORTED_VERSION
        if member_epoch == member.member_epoch:
            return ErrorCode.NONE
        # TxnOffsetCommit has no STALE_MEMBER_EPOCH: Kafka answers ILLEGAL_GENERATION there, and to a classic member
        return ErrorCode.ILLEGAL_GENERATION if transactional or member.classic is not None \
            else ErrorCode.STALE_MEMBER_EPOCH

    def check_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> int:
        group = self.groups[group_id]
        if member_id is None and member_epoch < 0:
            return ErrorCode.NONE
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch == member.member_epoch:
            return ErrorCode.NONE
        return ErrorCode.ILLEGAL_GENERATION if member.classic is not None else ErrorCode.STALE_MEMBER_EPOCH
