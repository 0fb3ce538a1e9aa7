"""The classic group protocol as a state machine without I/O: one `Group` per group id, driven by `GroupBook`.

Strategy: every request and every timer is a method call with the current time in milliseconds passed in; a
request that must wait (a JoinGroup until the rebalance ends, a follower's SyncGroup until the leader sends the
assignment) leaves a callback on its member, and whatever event ends the wait calls it.  Nothing here reads a
clock, sleeps or writes a file: the asyncio shell (kjbod.broker.groups.coordinator) calls `tick(now)` on a timer,
turns the callbacks into futures, and persists what `on_stable` and the offset commits hand it.

The states and moves are Kafka's (its classic group: Empty, PreparingRebalance, CompletingRebalance, Stable,
Dead):

* Empty → PreparingRebalance: the first member joins.  The rebalance waits `group.initial.rebalance.delay.ms`,
  and again (up to the rebalance timeout) while new members keep arriving, so a starting fleet lands in one
  generation.
* PreparingRebalance → CompletingRebalance: every known member has rejoined (or the largest rebalance timeout
  passed: who did not rejoin is dropped).  The generation goes up, the protocol every member supports with the
  most first-choice votes is chosen, the leader (the first member, or the old leader if it rejoined) gets every
  member's subscription, the others an empty list.  With no member left the group goes Empty instead.
* CompletingRebalance → Stable: the leader's SyncGroup brings the assignment; every waiting SyncGroup is answered.
* Stable or CompletingRebalance → PreparingRebalance: a member joins, leaves, changes its protocols, or misses
  its session timeout.  SyncGroups still waiting are answered REBALANCE_IN_PROGRESS.
* Any → Dead: the group is deleted, or its offsets partition is no longer led here.

Online migration (KIP-848): a consumer-protocol member joining a classic group that has members turns it into a
consumer group when group.consumer.migration.policy allows (`_upgrade`), and a consumer group whose last
consumer-protocol member leaves while classic members stay turns back into a classic group (`_downgrade`); the
offsets stay in this book's entry for the id either way.

From JoinGroup v4 a member joining without an id gets one with MEMBER_ID_REQUIRED and must join again with it
(within its session timeout); it counts towards group.max.size meanwhile, as in Kafka.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from kjbod.broker.groups import embedded
from kjbod.broker.groups.consumer import (
    ClassicMeta,
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroups,
    ConsumerMember,
    MemberState,
    TopicLookup,
)
from kjbod.protocol.errors import ErrorCode

UNKNOWN_MEMBER = ""
NO_GENERATION = -1


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The broker keys the coordinator obeys (Kafka's names and defaults)."""

    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    max_size: int = 2**31 - 1  # group.max.size
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.ms


@dataclass(frozen=True, slots=True)
class JoinResult:
    error_code: int
    member_id: str = UNKNOWN_MEMBER
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    # (member id, group instance id, metadata of the chosen protocol); the leader's answer only.
    members: tuple[tuple[str, str | None, bytes], ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    error_code: int
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


JoinCallback = Callable[[JoinResult], None]
Persist = Callable[["Group", Callable[[int, int], None]], None]
SyncCallback = Callable[[SyncResult], None]


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    deadline_ms: int
    assignment: bytes = b""
    join_waiter: JoinCallback | None = None
    sync_waiter: SyncCallback | None = None

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1  # only set by a v2-v4 commit with its own retention


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)  # member id -> deadline (MEMBER_ID_REQUIRED given)
    static: dict[str, str] = field(default_factory=dict)  # group instance id -> member id
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    join_deadline_ms: int = 0
    sync_deadline_ms: int = 0  # CompletingRebalance: members that have not sent SyncGroup by then are dropped
    pending_sync: set[str] = field(default_factory=set)
    storing: bool = False  # the leader's assignment is being written
    initial_delay: bool = False  # the rebalance started from Empty and waits for more members to arrive
    initial_delay_left_ms: int = 0
    joined_during_delay: bool = False
    state_since_ms: int = 0

    @property
    def size(self) -> int:
        return len(self.members) + len(self.pending)

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a member with these protocols may join (Kafka's supportsProtocols)."""
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        names = {name for name, _ in protocols}
        return all(names & {n for n, _ in m.protocols} for m in self.members.values())

    def select_protocol(self) -> str:
        """Among the protocols every member supports, the one most members list first (ties: the first found)."""
        members = list(self.members.values())
        common = [n for n, _ in members[0].protocols if all(any(n == x for x, _ in m.protocols) for m in members)]
        votes = dict.fromkeys(common, 0)
        for m in members:
            choice = next(n for n, _ in m.protocols if n in votes)
            votes[choice] += 1
        return max(votes, key=lambda n: votes[n])

    def all_joined(self) -> bool:
        return not self.pending and all(m.join_waiter is not None for m in self.members.values())


class GroupBook:
    """The groups of one coordinator, and every move between their states."""

    def __init__(self, config: GroupConfig, persist: Persist | None = None,
                 consumer_config: ConsumerGroupConfig | None = None,
                 group_configs: Callable[[str], Mapping[str, int]] | None = None) -> None:
        self.config = config
        self.groups: dict[str, Group] = {}
        # KIP-848 groups (kjbod.broker.groups.consumer).  Their committed offsets live in `groups` like every
        # group's: the entry there of a consumer group's id is the holder of its offsets and never has members.
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self.consumer = ConsumerGroups(consumer_config or ConsumerGroupConfig(), self.consumer_groups,
                                       classic_busy=lambda gid: bool(gid in self.groups and self.groups[gid].members),
                                       group_configs=group_configs)
        self.consumer.upgrade = self._upgrade
        self.consumer.downgrade = self._downgrade
        # Groups converted between the protocols whose records the shell has yet to write: group id -> "upgrade"
        # (the classic group's metadata tombstoned, the consumer group's records written) or "downgrade" (the
        # consumer group's records tombstoned, the classic group's metadata written).
        self.converted: dict[str, str] = {}
        # Stores a group's metadata (the shell: a record of __consumer_offsets) and then calls back with the time
        # and 0 or the error code; without one, the write counts as done at once (in-process tests).
        self.persist: Persist = persist or (lambda group, done: done(group.state_since_ms, ErrorCode.NONE))
        # Transactional offset commits (TxnOffsetCommit) not yet ended by a marker: producer id -> group ->
        # offsets.  They are invisible until the commit marker reaches the group's partition, and dropped on abort.
        self.pending_txn: dict[int, dict[str, dict[tuple[str, int], CommittedOffset]]] = {}
        # A streams group's offsets also live in `groups`, in a holder without members: for a streams group's id,
        # the topics whose offsets do not expire (Kafka's StreamsGroup.isSubscribedToTopic; none once the streams
        # group is empty); None for any other id.  The shell sets it.
        self.streams_kept_topics: Callable[[str], frozenset[str] | None] = lambda gid: None

    # ------------------------------------------------------------------------------------------- migration
    def _upgrade(self, now: int, group_id: str, topics: TopicLookup) -> ConsumerGroup | None:
        """A consumer-protocol member joins the classic group of this id, which has members: the consumer group
        it becomes (Kafka's convertToConsumerGroup), or None when the policy, the group's protocol type, its size or
        its members' protocol bytes do not allow it.  Every classic member keeps its id, its last assignment (its
        member epoch is the generation) and its subscription; whoever waits in a JoinGroup or SyncGroup is told
        REBALANCE_IN_PROGRESS and joins again, now through the consumer group."""
        group = self.groups[group_id]
        cfg = self.consumer.config
        if not cfg.upgrade_enabled or group.protocol_type != "consumer" or len(group.members) > cfg.max_size:
            return None
        cg = ConsumerGroup(group_id, group_epoch=group.generation_id, assignment_epoch=group.generation_id)
        try:
            for m in group.members.values():
                metadata = m.metadata_for(group.protocol_name) if group.protocol_name else \
                    (m.protocols[0][1] if m.protocols else b"")
                subscription = embedded.read_subscription(metadata)
                assigned = {}
                for name, parts in embedded.read_assignment(m.assignment).items():
                    meta = topics(name)
                    if meta is not None:
                        assigned[meta.topic_id] = frozenset(p for p in parts if p < meta.num_partitions)
                cg.members[m.member_id] = ConsumerMember(
                    m.member_id, instance_id=m.group_instance_id, rack_id=subscription.rack_id,
                    client_id=m.client_id, client_host=m.client_host, subscribed_topic_names=subscription.topics,
                    rebalance_timeout_ms=m.rebalance_timeout_ms, member_epoch=group.generation_id,
                    previous_member_epoch=group.generation_id, state=MemberState.STABLE, assigned=assigned,
                    classic=ClassicMeta(m.session_timeout_ms, tuple(m.protocols)),
                    session_deadline_ms=now + m.session_timeout_ms)
                cg.target[m.member_id] = dict(assigned)
                if m.group_instance_id is not None:
                    cg.static[m.group_instance_id] = m.member_id
        except embedded.EmbeddedProtocolError:
            return None
        for name in sorted({t for m in cg.members.values() for t in m.subscribed_topic_names}):
            meta = topics(name)
            if meta is not None:
                cg.topics[name] = meta
        for m in group.members.values():
            waiters, m.join_waiter, m.sync_waiter = (m.join_waiter, m.sync_waiter), None, None
            if waiters[0] is not None:
                waiters[0](JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, m.member_id))
            if waiters[1] is not None:
                waiters[1](SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        # the id's entry in `groups` stays as the holder of its offsets, without members
        group.members.clear()
        group.static.clear()
        group.pending.clear()
        group.pending_sync.clear()
        group.leader_id = group.protocol_name = None
        group.storing = False
        self._move(now, group, GroupState.EMPTY)
        self.converted[group_id] = "upgrade"
        return cg

    def _downgrade(self, now: int, cg: ConsumerGroup, leaving: str) -> None:
        """The last consumer-protocol member of a consumer group leaves and only classic members stay: the group
        becomes a classic group (Kafka's convertToClassicGroup) of generation = the group epoch, each member with its
        target assignment, and a rebalance starts at once, so the members join again under the classic protocol."""
        gid = cg.group_id
        group = self.groups.get(gid)
        if group is None:
            group = self.groups[gid] = Group(gid, state_since_ms=now)
        names = {t.topic_id: t.name for t in cg.topics.values()}
        group.generation_id = cg.group_epoch
        group.protocol_type = "consumer"
        group.members.clear()
        group.static.clear()
        for mid, m in cg.members.items():
            if mid == leaving or m.classic is None:
                continue
            try:
                version = embedded.read_version(m.classic.protocols[0][1]) if m.classic.protocols else 0
            except embedded.EmbeddedProtocolError:
                version = 0
            assignment = embedded.write_assignment(
                [(names[tid], ps) for tid, ps in cg.target.get(mid, {}).items() if tid in names], version)
            group.members[mid] = Member(mid, m.instance_id, m.client_id, m.client_host, m.classic.session_timeout_ms,
                                        m.rebalance_timeout_ms if m.rebalance_timeout_ms >= 0
                                        else m.classic.session_timeout_ms,
                                        "consumer", list(m.classic.protocols), now + m.classic.session_timeout_ms,
                                        assignment=assignment)
            if m.instance_id is not None:
                group.static[m.instance_id] = mid
        group.leader_id = next(iter(group.members))
        group.protocol_name = group.select_protocol()
        self._move(now, group, GroupState.STABLE)
        del self.consumer_groups[gid]
        self.converted[gid] = "downgrade"
        self._prepare_rebalance(now, group)

    # ------------------------------------------------------------------------------------------- JoinGroup
    def join(self, now: int, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
             client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
             protocols: list[tuple[str, bytes]], require_known_member_id: bool, reply: JoinCallback, *,
             skip_assignment_ok: bool = False) -> None:
        """Answers through `reply`, at once or when the rebalance completes.  `skip_assignment_ok`: the request
        is v9 or later, where a static leader rejoining a stable group is told to skip the assignment."""
        if not group_id:
            return reply(JoinResult(ErrorCode.INVALID_GROUP_ID, member_id))
        if not self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms:
            return reply(JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id))
        if rebalance_timeout_ms < 0:  # v0: the session timeout stands in for it
            rebalance_timeout_ms = session_timeout_ms
        if self.consumer.taken_by_share(group_id):  # a share group's id: Kafka answers without a member id
            return reply(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER))
        if group_id in self.consumer_groups:
            # a consumer-protocol group with members; an empty one is dropped first by the shell, as Kafka turns
            # it into a classic group
            return reply(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id))
        group = self.groups.get(group_id)
        if group is None:
            if member_id != UNKNOWN_MEMBER:
                return reply(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
            group = self.groups[group_id] = Group(group_id, state_since_ms=now)
        if group.is_(GroupState.DEAD):
            return reply(JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id))
        if not group.supports(protocol_type, protocols):
            return reply(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id))
        new = member_id == UNKNOWN_MEMBER or (member_id in group.pending and member_id not in group.members)
        if group_instance_id is not None and group_instance_id in group.static:
            known = group.static[group_instance_id]
            if member_id not in (UNKNOWN_MEMBER, known):
                return reply(JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id))
            if member_id == UNKNOWN_MEMBER:  # a restarted static member takes its place back under a new id
                return self._replace_static(now, group, known, client_id, client_host, session_timeout_ms,
                                            rebalance_timeout_ms, protocol_type, protocols, reply,
                                            skip_assignment_ok)
            new = False
        if new:
            if member_id == UNKNOWN_MEMBER and group.size >= self.config.max_size:
                return reply(JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id))
            if member_id == UNKNOWN_MEMBER:
                member_id = f"{group_instance_id or client_id}-{uuid.uuid4()}"
                if require_known_member_id and group_instance_id is None:
                    group.pending[member_id] = now + session_timeout_ms
                    return reply(JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id))
            group.pending.pop(member_id, None)
            self._add(now, group, Member(member_id, group_instance_id, client_id, client_host, session_timeout_ms,
                                         rebalance_timeout_ms, protocol_type, list(protocols),
                                         now + session_timeout_ms), reply)
            return None
        member = group.members.get(member_id)
        if member is None:
            return reply(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
        member.client_id, member.client_host = client_id, client_host
        member.session_timeout_ms, member.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
        changed = member.protocols != list(protocols)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._update(now, group, member, protocols, reply)
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            if changed:
                self._update(now, group, member, protocols, reply)
            else:  # a repeated join (its answer was lost): the same answer again
                member.deadline_ms = now + session_timeout_ms
                reply(self._join_result(group, member))
        elif group.is_(GroupState.STABLE):
            if changed or member_id == group.leader_id:
                self._update(now, group, member, protocols, reply)
            else:
                member.deadline_ms = now + session_timeout_ms
                reply(self._join_result(group, member))
        else:  # Empty: no member can be known
            reply(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
        return None

    def _add(self, now: int, group: Group, member: Member, reply: JoinCallback) -> None:
        if not group.members:
            group.protocol_type = member.protocol_type
        member.join_waiter = reply
        group.members[member.member_id] = member
        if member.group_instance_id is not None:
            group.static[member.group_instance_id] = member.member_id
        if group.leader_id is None:
            group.leader_id = member.member_id
        if group.initial_delay:
            group.joined_during_delay = True
        self._prepare_rebalance(now, group)
        self._try_complete_join(now, group)

    def _update(self, now: int, group: Group, member: Member, protocols, reply: JoinCallback) -> None:
        member.protocols = list(protocols)
        if member.join_waiter is not None and member.join_waiter is not reply:
            # The same member joined twice in one rebalance: the older request is answered as superseded.
            member.join_waiter(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member.member_id))
        member.join_waiter = reply
        self._prepare_rebalance(now, group)
        self._try_complete_join(now, group)

    def _replace_static(self, now: int, group: Group, old_id: str, client_id: str, client_host: str,
                        session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str, protocols,
                        reply: JoinCallback, skip_assignment_ok: bool) -> None:
        old = group.members.pop(old_id)
        old_leader = group.leader_id
        if old.join_waiter is not None:
            old.join_waiter(JoinResult(ErrorCode.FENCED_INSTANCE_ID, old_id))
        if old.sync_waiter is not None:
            old.sync_waiter(SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        new_id = f"{old.group_instance_id}-{uuid.uuid4()}"
        member = Member(new_id, old.group_instance_id, client_id, client_host, session_timeout_ms,
                        rebalance_timeout_ms, protocol_type, list(protocols), now + session_timeout_ms,
                        assignment=old.assignment)
        group.members[new_id] = member
        assert old.group_instance_id is not None
        group.static[old.group_instance_id] = new_id
        if group.leader_id == old_id:
            group.leader_id = new_id
        if group.is_(GroupState.STABLE) and group.select_protocol() == group.protocol_name:
            # Kafka's static rejoin without a rebalance (the group's protocol stays): same generation, the
            # assignment it had, once the new member id is stored.  A leader is told to skip the assignment
            # (v9+), or before v9 shown the old leader's id, so that it does not assign again.
            result = self._join_result(group, member)
            if not skip_assignment_ok:
                result = JoinResult(ErrorCode.NONE, new_id, group.generation_id, group.protocol_type,
                                    group.protocol_name, old_leader or "")
            elif group.leader_id == new_id:
                result = JoinResult(ErrorCode.NONE, new_id, group.generation_id, group.protocol_type,
                                    group.protocol_name, new_id, result.members, skip_assignment=True)
            generation = group.generation_id

            def stored(_now: int, code: int) -> None:
                if code and self.groups.get(group.group_id) is group and group.generation_id == generation:
                    reply(JoinResult(code, UNKNOWN_MEMBER, group.generation_id, group.protocol_type,
                                     group.protocol_name, old_leader or ""))
                else:
                    reply(result)

            self.persist(group, stored)
            return
        member.join_waiter = reply
        self._prepare_rebalance(now, group)
        self._try_complete_join(now, group)

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if member.member_id == group.leader_id and group.protocol_name is not None:
            members = tuple((m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
                            for m in group.members.values())
        return JoinResult(ErrorCode.NONE, member.member_id, group.generation_id, group.protocol_type,
                          group.protocol_name, group.leader_id or "", members)

    def _prepare_rebalance(self, now: int, group: Group) -> None:
        if group.is_(GroupState.PREPARING_REBALANCE):
            return
        if group.is_(GroupState.COMPLETING_REBALANCE):
            for m in group.members.values():
                m.assignment = b""
        for m in group.members.values():
            if m.sync_waiter is not None:
                waiter, m.sync_waiter = m.sync_waiter, None
                waiter(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        if group.is_(GroupState.EMPTY):
            delay = min(self.config.initial_rebalance_delay_ms, timeout)
            group.initial_delay, group.joined_during_delay = True, False
            group.initial_delay_left_ms = max(timeout - delay, 0)
            group.join_deadline_ms = now + delay
        else:
            group.initial_delay = False
            group.join_deadline_ms = now + timeout
        self._move(now, group, GroupState.PREPARING_REBALANCE)

    def _try_complete_join(self, now: int, group: Group) -> None:
        if group.is_(GroupState.PREPARING_REBALANCE) and not group.initial_delay and group.all_joined():
            self._complete_join(now, group)

    def _complete_join(self, now: int, group: Group) -> None:
        for m in [m for m in group.members.values() if m.join_waiter is None]:
            self._remove(group, m)  # did not rejoin in time
        group.generation_id += 1
        group.initial_delay = False
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            self._move(now, group, GroupState.EMPTY)
            self.persist(group, lambda _now, _code: None)
            return
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.protocol_name = group.select_protocol()
        self._move(now, group, GroupState.COMPLETING_REBALANCE)
        group.pending_sync = set(group.members)
        group.sync_deadline_ms = now + max(m.rebalance_timeout_ms for m in group.members.values())
        for m in group.members.values():
            waiter, m.join_waiter = m.join_waiter, None
            m.deadline_ms = now + m.session_timeout_ms
            assert waiter is not None
            waiter(self._join_result(group, m))

    def _remove(self, group: Group, member: Member) -> None:
        del group.members[member.member_id]
        if member.group_instance_id is not None and group.static.get(member.group_instance_id) == member.member_id:
            del group.static[member.group_instance_id]
        if group.leader_id == member.member_id:
            group.leader_id = next(iter(group.members), None)

    def _move(self, now: int, group: Group, state: GroupState) -> None:
        group.state = state
        group.state_since_ms = now

    # ------------------------------------------------------------------------------------------- SyncGroup
    def sync(self, now: int, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
             protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes],
             reply: SyncCallback) -> None:
        group = self.groups.get(group_id)
        if not group_id:
            return reply(SyncResult(ErrorCode.INVALID_GROUP_ID))
        if group is not None and (fenced := self._fenced(group, member_id, group_instance_id)):
            return reply(SyncResult(fenced))
        if group is None or member_id not in group.members:
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE if group is not None and group.is_(GroupState.DEAD) \
                else ErrorCode.UNKNOWN_MEMBER_ID
            return reply(SyncResult(code))
        if generation_id != group.generation_id:
            return reply(SyncResult(ErrorCode.ILLEGAL_GENERATION))
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            return reply(SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
        member = group.members[member_id]
        member.deadline_ms = now + member.session_timeout_ms
        if group.is_(GroupState.PREPARING_REBALANCE):
            return reply(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        if group.is_(GroupState.STABLE):
            return reply(SyncResult(ErrorCode.NONE, member.assignment, group.protocol_type, group.protocol_name))
        # CompletingRebalance
        group.pending_sync.discard(member_id)
        if member.sync_waiter is not None and member.sync_waiter is not reply:
            # The same member synced twice in one generation (its first request timed out on its side): the older
            # request is answered, not left waiting (as Kafka after KAFKA-20938 answers it, NOT_COORDINATOR).
            member.sync_waiter(SyncResult(ErrorCode.NOT_COORDINATOR))
        member.sync_waiter = reply
        if member_id == group.leader_id and not group.storing:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            group.storing = True
            generation = group.generation_id
            self.persist(group, lambda when, code: self._stored(when, group, generation, code))
        return None

    def _stored(self, now: int, group: Group, generation: int, code: int) -> None:
        """The leader's assignment is stored (code 0) or could not be (as Kafka: the waiting SyncGroups get the
        code, and the group rebalances).  Nothing to do if the group moved on meanwhile."""
        group.storing = False
        if self.groups.get(group.group_id) is not group or group.generation_id != generation \
                or not group.is_(GroupState.COMPLETING_REBALANCE):
            return
        if code:
            for m in group.members.values():
                m.assignment = b""
                if m.sync_waiter is not None:
                    waiter, m.sync_waiter = m.sync_waiter, None
                    waiter(SyncResult(code))
            self._prepare_rebalance(now, group)
            return
        self._move(now, group, GroupState.STABLE)
        for m in group.members.values():
            if m.sync_waiter is not None:
                waiter, m.sync_waiter = m.sync_waiter, None
                waiter(SyncResult(ErrorCode.NONE, m.assignment, group.protocol_type, group.protocol_name))

    @staticmethod
    def _fenced(group: Group, member_id: str, group_instance_id: str | None) -> int:
        if group_instance_id is None:
            return 0
        known = group.static.get(group_instance_id)
        if known is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.FENCED_INSTANCE_ID if known != member_id else 0

    # ------------------------------------------------------------------------------------------- Heartbeat
    def heartbeat(self, now: int, group_id: str, generation_id: int, member_id: str,
                  group_instance_id: str | None) -> int:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if (fenced := self._fenced(group, member_id, group_instance_id)):
            return fenced
        if member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        member = group.members[member_id]
        member.deadline_ms = now + member.session_timeout_ms
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # ------------------------------------------------------------------------------------------- LeaveGroup
    def leave(self, now: int, group_id: str, leaving: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        """(group error, one code per leaving member) for [(member id, group instance id)]."""
        n = len(leaving)
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, [int(ErrorCode.INVALID_GROUP_ID)] * n
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE, [int(ErrorCode.UNKNOWN_MEMBER_ID)] * n
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, [int(ErrorCode.COORDINATOR_NOT_AVAILABLE)] * n
        codes: list[int] = []
        for member_id, instance_id in leaving:
            if instance_id is not None:
                known = group.static.get(instance_id)
                if known is None:
                    codes.append(ErrorCode.UNKNOWN_MEMBER_ID)
                    continue
                if member_id != UNKNOWN_MEMBER and member_id != known:
                    codes.append(ErrorCode.FENCED_INSTANCE_ID)
                    continue
                member_id = known
            if member_id in group.pending:
                del group.pending[member_id]
                codes.append(ErrorCode.NONE)
                self._try_complete_join(now, group)
                continue
            member = group.members.get(member_id)
            if member is None:
                codes.append(ErrorCode.UNKNOWN_MEMBER_ID)
                continue
            self._drop(now, group, member, ErrorCode.UNKNOWN_MEMBER_ID)
            codes.append(ErrorCode.NONE)
        return ErrorCode.NONE, codes

    def _drop(self, now: int, group: Group, member: Member, code: int) -> None:
        """A member is gone (left, or its session expired): answer what it waits on, then rebalance."""
        if member.join_waiter is not None:
            member.join_waiter(JoinResult(code, member.member_id))
        if member.sync_waiter is not None:
            member.sync_waiter(SyncResult(code))
        member.join_waiter = member.sync_waiter = None
        self._remove(group, member)
        if group.is_(GroupState.STABLE) or group.is_(GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(now, group)
            if not group.members:
                self._complete_join(now, group)
        elif group.is_(GroupState.PREPARING_REBALANCE):
            if not group.members and not group.initial_delay:
                self._complete_join(now, group)
            else:
                self._try_complete_join(now, group)

    # ------------------------------------------------------------------------------------------- timers
    def tick(self, now: int) -> None:
        """Expires sessions and pending member ids, and ends rebalances whose time is up."""
        for group in list(self.groups.values()):
            for member_id, deadline in list(group.pending.items()):
                if deadline <= now:
                    del group.pending[member_id]
                    self._try_complete_join(now, group)
            for member in list(group.members.values()):
                # Waiting in a JoinGroup or SyncGroup keeps a member alive: the rebalance timeout bounds those.
                if member.deadline_ms <= now and member.join_waiter is None and member.sync_waiter is None \
                        and member.member_id in group.members:
                    self._drop(now, group, member, ErrorCode.UNKNOWN_MEMBER_ID)
            if group.is_(GroupState.COMPLETING_REBALANCE) and group.sync_deadline_ms <= now and group.pending_sync:
                # Kafka's pending-sync timeout: who did not ask for its assignment in time is dropped, and the
                # group rebalances without it (a leader that never syncs would otherwise hold everyone).
                for member_id in list(group.pending_sync):
                    if member_id in group.members:
                        self._drop(now, group, group.members[member_id], ErrorCode.UNKNOWN_MEMBER_ID)
                group.pending_sync.clear()
            if group.is_(GroupState.PREPARING_REBALANCE) and group.join_deadline_ms <= now:
                if group.initial_delay and group.joined_during_delay and group.initial_delay_left_ms > 0:
                    step = min(self.config.initial_rebalance_delay_ms, group.initial_delay_left_ms)
                    group.initial_delay_left_ms -= step
                    group.joined_during_delay = False
                    group.join_deadline_ms = now + step
                else:
                    group.initial_delay = False
                    self._complete_join(now, group)

    # ------------------------------------------------------------------------------------------- offsets
    def check_commit(self, now: int, group_id: str, generation_id: int, member_id: str,
                     group_instance_id: str | None, *, v9: bool = False, transactional: bool = False) -> int:
        """Whether a commit may go ahead (0) or Kafka's code refusing it.  A commit with generation -1 from
        outside the group (a consumer with assigned partitions) goes to an empty or new group; a commit with a
        generation to a group that does not exist is ILLEGAL_GENERATION, GROUP_ID_NOT_FOUND from v9."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        if group_id in self.consumer_groups:
            return self.consumer.check_commit(group_id, member_id, generation_id, 9 if v9 else 8,
                                              transactional=transactional)
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return ErrorCode.GROUP_ID_NOT_FOUND if v9 else ErrorCode.ILLEGAL_GENERATION
            self.groups[group_id] = Group(group_id, state_since_ms=now)
            return ErrorCode.NONE
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_(GroupState.EMPTY):
            return ErrorCode.NONE
        if (fenced := self._fenced(group, member_id, group_instance_id)):
            return fenced
        if member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.is_(GroupState.COMPLETING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        member = group.members[member_id]
        member.deadline_ms = now + member.session_timeout_ms
        return ErrorCode.NONE

    def commit(self, group_id: str, offsets: dict[tuple[str, int], CommittedOffset]) -> None:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        group.offsets.update(offsets)

    def add_txn_offsets(self, producer_id: int, group_id: str,
                        offsets: dict[tuple[str, int], CommittedOffset]) -> None:
        """A transactional offset commit is written: pending until the transaction ends."""
        self.pending_txn.setdefault(producer_id, {}).setdefault(group_id, {}).update(offsets)

    def end_txn_offsets(self, producer_id: int, partition: int, commit: bool,
                        partition_of: Callable[[str], int]) -> None:
        """A marker of `producer_id` reached offsets partition `partition`: its pending offsets of the groups
        there become committed (commit) or are dropped (abort)."""
        groups = self.pending_txn.get(producer_id)
        if not groups:
            return
        for gid in [g for g in groups if partition_of(g) == partition]:
            offsets = groups.pop(gid)
            if commit:
                self.commit(gid, offsets)
        if not groups:
            del self.pending_txn[producer_id]

    def pending_txn_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """The partitions with a transactional offset commit of the group still pending."""
        return {tp for groups in self.pending_txn.values() for tp in groups.get(group_id, {})}

    def committed(self, group_id: str, partitions: list[tuple[str, int]] | None
                  ) -> dict[tuple[str, int], CommittedOffset | None]:
        group = self.groups.get(group_id)
        offsets = group.offsets if group is not None else {}
        if partitions is None:
            return dict(offsets)
        return {tp: offsets.get(tp) for tp in partitions}

    def expired_offsets(self, now: int) -> dict[str, list[tuple[str, int]]]:
        """Kafka's offset expiry (offsets.retention.ms), per group: an empty group's offsets expire that long after
        it became empty (or after the commit, if later); a consumer group with members loses only the offsets of
        topics no member subscribes to, that long after their commit; a group of another protocol with members
        keeps them all.  An offset committed with its own retention (OffsetCommit v2-v4) expires at its expire
        timestamp.  A streams group keeps the offsets of its topology's source topics while it has members; the
        others expire a retention after their commit, as do all of an empty streams group's."""
        retention = self.config.offsets_retention_ms
        out: dict[str, list[tuple[str, int]]] = {}
        for gid, group in self.groups.items():
            if group.is_(GroupState.DEAD) or not group.offsets:
                continue
            cg = self.consumer_groups.get(gid)
            empty = group.is_(GroupState.EMPTY) and not (cg is not None and cg.members)
            streams_kept = self.streams_kept_topics(gid)
            if streams_kept is not None:
                empty = False  # Kafka's streams groups count from the commit only
            subscribed = streams_kept if streams_kept is not None else set() if empty else \
                self.subscribed_topics(group)
            if subscribed is None:
                continue
            gone = []
            for (topic, partition), c in group.offsets.items():
                if topic in subscribed:
                    continue
                if c.expire_timestamp_ms >= 0:
                    expired = now >= c.expire_timestamp_ms
                else:
                    base = max(group.state_since_ms, c.commit_timestamp_ms) if empty else c.commit_timestamp_ms
                    expired = now - base >= retention
                if expired:
                    gone.append((topic, partition))
            if gone:
                out[gid] = gone
        return out

    def subscribed_topics(self, group: Group) -> set[str] | None:
        """The topics a consumer group's members subscribe to (from their subscriptions, Kafka's
        ConsumerProtocolSubscription), or None when the group is not a consumer group."""
        cg = self.consumer_groups.get(group.group_id)
        if cg is not None:
            return cg.subscribed_topics()
        if group.protocol_type != "consumer":
            return None
        topics: set[str] = set()
        for m in group.members.values():
            data = m.metadata_for(group.protocol_name) if group.protocol_name else \
                (m.protocols[0][1] if m.protocols else b"")
            topics |= subscription_topics(data)
        return topics

    # ------------------------------------------------------------------------------------------- unloading
    def unload(self, group_ids: list[str], code: int = ErrorCode.NOT_COORDINATOR) -> None:
        """The groups moved away (their offsets partition is led elsewhere now): answer whatever waits."""
        gone = set(group_ids)
        for pid in list(self.pending_txn):
            groups = self.pending_txn[pid]
            for gid in gone & set(groups):
                del groups[gid]
            if not groups:
                del self.pending_txn[pid]
        for gid in group_ids:
            self.consumer_groups.pop(gid, None)
            group = self.groups.pop(gid, None)
            if group is None:
                continue
            group.state = GroupState.DEAD
            for m in group.members.values():
                if m.join_waiter is not None:
                    m.join_waiter(JoinResult(code, m.member_id))
                if m.sync_waiter is not None:
                    m.sync_waiter(SyncResult(code))
                m.join_waiter = m.sync_waiter = None


def subscription_topics(data: bytes) -> set[str]:
    """The topics of a consumer's subscription (ConsumerProtocolSubscription, any version: an int16 version, then
    an int32 count of int16-length strings); empty when the bytes do not hold one."""
    import struct

    try:
        (count,) = struct.unpack_from(">i", data, 2)
        pos, out = 6, set()
        for _ in range(max(count, 0)):
            (n,) = struct.unpack_from(">h", data, pos)
            out.add(data[pos + 2:pos + 2 + n].decode("utf-8"))
            pos += 2 + n
        return out
    except (struct.error, UnicodeDecodeError):
        return set()
