"""KIP-932 share groups on the group coordinator's side, as a state machine without I/O.

Strategy: a share group is a third kind of group beside classic and consumer groups, in the same id space (an id
used by another kind answers GROUP_ID_NOT_FOUND, as Kafka answers it).  Its members do not own partitions: many
members may fetch from one partition, and the share-partition leader hands out records one delivery at a time, so
there is no revocation step.  Each ShareGroupHeartbeat is one call of `ShareGroups.heartbeat(now, request, topics)`
that runs Kafka's three steps:

1. the member is created (epoch 0) or updated; a change of its subscription, or of the subscribed topics in the
   metadata image (a topic created, partitions added: the group's **metadata hash**), bumps the **group epoch**;
   so does a partition whose share state has been initialized since the last assignment;
2. when the group epoch is ahead of the **assignment epoch**, the `simple` share assignor computes every member's
   target assignment over the partitions whose share state is initialized;
3. the member takes its target at once, with the target's epoch (its previous epoch kept: a heartbeat with it is
   still accepted, the answer carrying the bump may have been lost).

Share state: a partition is given to members only once its state exists in the persister.  The heartbeat names the
subscribed partitions not yet initialized (`HeartbeatResult.to_initialize`: state epoch = the group epoch, start
offset -1 so the share-partition leader picks it by share.auto.offset.reset), they are recorded as *initializing*
with the time, the shell calls the persister, and `initialized()` moves those that succeeded to *initialized* (the
next heartbeat then assigns them); those that failed are dropped from *initializing* (`uninitialized()`) and tried
again by a later heartbeat; an initializing partition older than group.share.initialize.retry.interval.ms is asked
for again.  This bookkeeping is Kafka's ShareGroupStatePartitionMetadata record.

A member leaves with epoch -1; a member not heard from for the session timeout (group.share.session.timeout.ms, or
the group's share.session.timeout.ms) is removed by `tick`; both bump the group epoch.

Nothing here reads a clock or writes: the asyncio shell (kjbod.broker.groups.coordinator) passes the time and a
view of the metadata image, writes the group's records (kjbod.broker.share.groups_records) and calls the
persister.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from uuid import UUID

from kjbod.broker.groups.consumer import Assignment, TopicLookup, TopicMeta
from kjbod.broker.share.persister import InitializeData
from kjbod.protocol.errors import ErrorCode

LEAVE_GROUP_EPOCH = -1
MEMBER_ID_MAX_LENGTH = 36  # Kafka's broker refuses a longer member id (a UUID's text is 36 characters)
ASSIGNOR = "simple"
MEMBER_STABLE = 0  # the one MemberState a share member is ever in (Kafka's byte value)


class ShareGroupState(Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ShareGroupConfig:
    """The broker keys of share groups (Kafka's names and defaults)."""

    session_timeout_ms: int = 45_000  # group.share.session.timeout.ms
    heartbeat_interval_ms: int = 5000  # group.share.heartbeat.interval.ms
    max_size: int = 200  # group.share.max.size
    initialize_retry_interval_ms: int = 30_000  # group.share.initialize.retry.interval.ms


@dataclass(slots=True)
class ShareMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: Assignment = field(default_factory=dict)
    # not persisted
    session_deadline_ms: int = 0

    def subscription(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.subscribed_topic_names)))


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)  # member id -> target assignment
    # ShareGroupStatePartitionMetadata: topic id -> (name, partitions[, since ms])
    initializing: dict[UUID, tuple[str, frozenset[int], int]] = field(default_factory=dict)
    initialized: dict[UUID, tuple[str, frozenset[int]]] = field(default_factory=dict)
    deleting: dict[UUID, str] = field(default_factory=dict)

    @property
    def state(self) -> ShareGroupState:
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}

    def has_state_records(self) -> bool:
        return bool(self.initializing or self.initialized or self.deleting)


@dataclass(frozen=True, slots=True)
class ShareHeartbeat:
    """The fields of a ShareGroupHeartbeat request, plus who sent it."""

    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error_code: int = 0
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None
    # the partitions whose share state the shell must initialize through the persister (already recorded as
    # initializing), and whether the group's records changed
    to_initialize: tuple[InitializeData, ...] = ()
    changed: bool = True


class ShareGroupError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# ------------------------------------------------------------------------------------------------ metadata hash
_TOPIC_HASH = struct.Struct(">b16si")


def topic_hash(t: TopicMeta) -> int:
    """A 64-bit hash of what the group's assignment depends on in a topic: its id, name and partition count.
    Kafka hashes the same facts (and partition racks) with XXH3, which Python's standard library lacks: kjbod's
    values differ from Kafka's, so a Kafka coordinator loading kjbod's records would bump such a group's epoch
    once; nothing else reads the value."""
    raw = _TOPIC_HASH.pack(0, t.topic_id.bytes, t.num_partitions) + t.name.encode("utf-8")
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big", signed=True)


def metadata_hash(names: Iterable[str], topics: TopicLookup) -> int:
    """The hash of the subscribed topics that exist (0 when none), in topic name order, as Kafka combines them."""
    hashes = []
    for name in sorted(set(names)):
        meta = topics(name)
        if meta is not None:
            hashes.append(struct.pack(">q", topic_hash(meta)))
    if not hashes:
        return 0
    return int.from_bytes(hashlib.blake2b(b"".join(hashes), digest_size=8).digest(), "big", signed=True)


# ------------------------------------------------------------------------------------------------ the assignor
def simple_assign(subscriptions: Mapping[str, Iterable[UUID]], assignable: Mapping[UUID, Iterable[int]],
                  previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Kafka's `simple` share assignor.  Every assignable partition goes to at least one member subscribed to its
    topic, and a partition is shared by several members when there are more members than partitions (each by
    ceil(members / partitions) of them); the members' counts are spread evenly, what a member had and may keep
    it keeps (stickiness), the rest is dealt round-robin.  When every member subscribes to the same topics the
    partitions of all of them are spread together (Kafka's homogeneous case), else topic by topic among the
    members subscribed to each (the heterogeneous case)."""
    subs = {mid: frozenset(ts) for mid, ts in subscriptions.items()}
    out: dict[str, dict[UUID, set[int]]] = {mid: {} for mid in subs}
    if len(set(subs.values())) == 1:
        topics = sorted(next(iter(subs.values())), key=str)
        parts = [(t, q) for t in topics for q in sorted(set(assignable.get(t, ())))]
        _spread(sorted(subs), parts, previous, out)
    else:
        for t in sorted({t for ts in subs.values() for t in ts}, key=str):
            _spread(sorted(m for m, ts in subs.items() if t in ts), [(t, q) for q in sorted(set(assignable.get(t, ())))],
                    previous, out)
    return {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in out.items()}


def _spread(members: list[str], parts: list[tuple[UUID, int]], previous: Mapping[str, Assignment],
            out: dict[str, dict[UUID, set[int]]]) -> None:
    """Deals `parts` among `members` into `out` (see simple_assign)."""
    if not parts or not members:
        return
    n, p = len(members), len(parts)
    sharing = (n + p - 1) // p  # members per partition
    slots = sharing * p  # assignments to make
    desired = {m: (slots * (i + 1) + n - 1) // n - (slots * i + n - 1) // n for i, m in enumerate(members)}
    holders: dict[tuple[UUID, int], list[str]] = {tp: [] for tp in parts}
    counts = dict.fromkeys(members, 0)
    # keep what each member had, within its desired count and the partition's sharing
    for m in members:
        had = sorted(((t, q) for t, qs in previous.get(m, {}).items() for q in qs), key=lambda tp: (str(tp[0]), tp[1]))
        for tp in had:
            if tp in holders and counts[m] < desired[m] and len(holders[tp]) < sharing:
                holders[tp].append(m)
                counts[m] += 1
    # deal the rest: each partition up to its sharing, to the members still below their count
    unfilled = [m for m in members if counts[m] < desired[m]]
    i = 0
    for tp in parts:
        tries = 0
        while len(holders[tp]) < sharing and unfilled and tries < len(unfilled):
            m = unfilled[i % len(unfilled)]
            if m in holders[tp]:
                i += 1
                tries += 1
                continue
            holders[tp].append(m)
            counts[m] += 1
            tries = 0
            if counts[m] >= desired[m]:
                unfilled.remove(m)
            else:
                i += 1
    for ms in holders.values():  # whatever the stickiness kept, no partition is left without a member
        if not ms:
            m = min(members, key=lambda x: (counts[x], x))
            ms.append(m)
            counts[m] += 1
    for (t, q), ms in holders.items():
        for m in ms:
            out[m].setdefault(t, set()).add(q)


# ------------------------------------------------------------------------------------------------ the groups
class ShareGroups:
    """Heartbeats and timers of the share groups of one coordinator.  `groups` is the coordinator's table of share
    groups; `other_kind(group_id)` names the kind of another group using that id ("classic", "consumer"), or
    None; `group_configs(group_id)` its per-group configs (share.session.timeout.ms, share.heartbeat.interval.ms)."""

    def __init__(self, config: ShareGroupConfig, groups: dict[str, ShareGroup],
                 other_kind: Callable[[str], str | None] = lambda gid: None,
                 group_configs: Callable[[str], Mapping[str, object]] | None = None) -> None:
        self.config = config
        self.groups = groups
        self.other_kind = other_kind
        self.group_configs = group_configs or (lambda gid: {})

    def session_timeout_ms(self, group_id: str) -> int:
        return int(self.group_configs(group_id).get("share.session.timeout.ms",  # type: ignore[call-overload]
                                                   self.config.session_timeout_ms))

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return int(self.group_configs(group_id).get("share.heartbeat.interval.ms",  # type: ignore[call-overload]
                                                   self.config.heartbeat_interval_ms))

    # -------------------------------------------------------------------------------------- validation
    @staticmethod
    def validate(r: ShareHeartbeat) -> None:
        """Kafka's checks of a request, in its order (the broker's, then the coordinator's)."""
        bad = ErrorCode.INVALID_REQUEST
        if not r.member_id or len(r.member_id) > MEMBER_ID_MAX_LENGTH:
            raise ShareGroupError(bad, "Invalid member id in the request.")
        if not r.group_id:
            raise ShareGroupError(bad, "GroupId can't be empty.")
        if r.rack_id == "":
            raise ShareGroupError(bad, "RackId can't be empty.")
        if r.member_epoch == 0:
            if not r.subscribed_topic_names:
                raise ShareGroupError(bad, "SubscribedTopicNames must be set in first request.")
        elif r.member_epoch < LEAVE_GROUP_EPOCH:
            raise ShareGroupError(bad, "MemberEpoch is invalid.")

    def group(self, group_id: str, create: bool = False) -> ShareGroup:
        group = self.groups.get(group_id)
        if group is not None:
            return group
        kind = self.other_kind(group_id)
        if kind is not None:
            raise ShareGroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        if not create:
            raise ShareGroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Share group {group_id} not found.")
        group = self.groups[group_id] = ShareGroup(group_id)
        return group

    # -------------------------------------------------------------------------------------- heartbeat
    def heartbeat(self, now: int, r: ShareHeartbeat, topics: TopicLookup) -> HeartbeatResult:
        """One ShareGroupHeartbeat.  `topics` looks a topic up by name in the metadata image."""
        try:
            self.validate(r)
            if r.member_epoch == LEAVE_GROUP_EPOCH:
                return self._leave(r, topics)
            return self._heartbeat(now, r, topics)
        except ShareGroupError as e:
            return HeartbeatResult(error_code=e.code, error_message=e.message)

    def _heartbeat(self, now: int, r: ShareHeartbeat, topics: TopicLookup) -> HeartbeatResult:
        creating = r.group_id not in self.groups
        group = self.group(r.group_id, create=r.member_epoch == 0)
        try:
            return self._step(now, group, r, topics)
        except ShareGroupError:
            if creating and not group.members:
                self.groups.pop(r.group_id, None)  # the group a failed first heartbeat made is not kept
            raise

    def _step(self, now: int, group: ShareGroup, r: ShareHeartbeat, topics: TopicLookup) -> HeartbeatResult:
        if len(group.members) >= self.config.max_size and r.member_id not in group.members:
            raise ShareGroupError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                  f"The share group has reached its maximum capacity of {self.config.max_size} "
                                  "members.")
        old = group.members.get(r.member_id)
        if old is None:
            if r.member_epoch != 0:
                raise ShareGroupError(ErrorCode.UNKNOWN_MEMBER_ID,
                                      f"Member {r.member_id} is not a member of group {group.group_id}.")
            member = ShareMember(r.member_id)
        else:
            self._check_epoch(old, r.member_epoch)
            member = old
        stored_before = (group.group_epoch, group.metadata_hash, group.assignment_epoch, len(group.members),
                         self._stored(old) if old is not None else None, dict(group.target),
                         dict(group.initializing), dict(group.initialized))
        before_assigned = dict(member.assigned) if old is not None else None
        before_subscription = member.subscription() if old is not None else None
        # 1. the member, then the group epoch
        if r.rack_id is not None:
            member.rack_id = r.rack_id
        if r.subscribed_topic_names is not None:
            member.subscribed_topic_names = tuple(r.subscribed_topic_names)
        member.client_id, member.client_host = r.client_id, r.client_host
        group.members[member.member_id] = member
        subscription_changed = before_subscription != member.subscription()
        bump = subscription_changed
        if group.assignment_epoch >= group.group_epoch:
            bump = bump or self._initialized_unassigned(group)
        new_hash = metadata_hash(group.subscribed_topics(), topics)
        if new_hash != group.metadata_hash:
            bump = True
        if bump:
            group.group_epoch += 1
            group.metadata_hash = new_hash
        # 2. the target assignment
        if group.assignment_epoch < group.group_epoch:
            self._assign(group, topics)
        # 3. the member takes its target
        target = group.target.get(member.member_id, {})
        names = {tid: n for tid, (n, _) in group.initialized.items()}
        if member.member_epoch != group.assignment_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = group.assignment_epoch
            member.assigned = _only_subscribed(target, member, names)
        elif subscription_changed:
            member.assigned = _only_subscribed(target, member, names)
        member.session_deadline_ms = now + self.session_timeout_ms(group.group_id)
        to_initialize = self._to_initialize(now, group, topics)
        stored_after = (group.group_epoch, group.metadata_hash, group.assignment_epoch, len(group.members),
                        self._stored(member), dict(group.target), dict(group.initializing), dict(group.initialized))
        full = r.member_epoch == 0 or r.subscribed_topic_names is not None
        return HeartbeatResult(
            member_id=member.member_id, member_epoch=member.member_epoch,
            heartbeat_interval_ms=self.heartbeat_interval_ms(group.group_id),
            assignment=dict(member.assigned) if full or before_assigned != member.assigned else None,
            to_initialize=to_initialize, changed=stored_before != stored_after)

    @staticmethod
    def _stored(m: ShareMember) -> tuple:
        return (m.rack_id, m.client_id, m.client_host, m.subscribed_topic_names, m.member_epoch,
                m.previous_member_epoch, tuple(sorted(m.assigned.items(), key=str)))

    @staticmethod
    def _check_epoch(member: ShareMember, received: int) -> None:
        if received == 0:
            return  # the member joins again under its id
        if received > member.member_epoch:
            raise ShareGroupError(ErrorCode.FENCED_MEMBER_EPOCH,
                                  f"The share group member has a greater member epoch ({received}) than the one "
                                  f"known by the group coordinator ({member.member_epoch}). The member must abandon "
                                  "all its partitions and rejoin.")
        if received < member.member_epoch and received != member.previous_member_epoch:
            raise ShareGroupError(ErrorCode.FENCED_MEMBER_EPOCH,
                                  f"The share group member has a smaller member epoch ({received}) than the one "
                                  f"known by the group coordinator ({member.member_epoch}), and it does not match "
                                  f"the previous member epoch ({member.previous_member_epoch}). The member must "
                                  "abandon all its partitions and rejoin.")

    def _initialized_unassigned(self, group: ShareGroup) -> bool:
        """Whether an initialized partition of a subscribed topic is in no target assignment (Kafka's
        initializedAssignmentPending): a new assignment is then computed."""
        if not group.members or not group.initialized:
            return False
        subscribed = group.subscribed_topics()
        assigned: dict[UUID, set[int]] = {}
        for a in group.target.values():
            for tid, ps in a.items():
                assigned.setdefault(tid, set()).update(ps)
        return any(name in subscribed and assigned.get(tid, set()) != set(ps)
                   for tid, (name, ps) in group.initialized.items())

    def _assign(self, group: ShareGroup, topics: TopicLookup) -> None:
        ids: dict[str, UUID] = {}
        for name in group.subscribed_topics():
            meta = topics(name)
            if meta is not None:
                ids[name] = meta.topic_id
        subscriptions = {mid: [ids[t] for t in m.subscribed_topic_names if t in ids]
                         for mid, m in group.members.items()}
        assignable = {tid: ps for tid, (_, ps) in group.initialized.items()}
        group.target = simple_assign(subscriptions, assignable, group.target)
        group.assignment_epoch = group.group_epoch

    def _to_initialize(self, now: int, group: ShareGroup, topics: TopicLookup) -> tuple[InitializeData, ...]:
        """The subscribed partitions whose share state is neither initialized nor being initialized (recently):
        recorded as initializing now, and returned for the shell to initialize (Kafka's
        subscribedTopicsChangeMap)."""
        out: list[InitializeData] = []
        retry = self.config.initialize_retry_interval_ms
        for name in sorted(group.subscribed_topics()):
            meta = topics(name)
            if meta is None:
                continue
            have = set(group.initialized.get(meta.topic_id, ("", frozenset()))[1])
            busy = group.initializing.get(meta.topic_id)
            if busy is not None and now - busy[2] < retry:
                have |= busy[1]
            missing = frozenset(range(meta.num_partitions)) - have
            if not missing:
                continue
            group.initializing[meta.topic_id] = (name, missing, now)
            out += [InitializeData(meta.topic_id, p, group.group_epoch, -1) for p in sorted(missing)]
        return tuple(out)

    def initialized(self, group_id: str, done: Mapping[UUID, Iterable[int]],
                    failed: Mapping[UUID, Iterable[int]] = {}) -> bool:
        """The persister's answer to an initialization: partitions in `done` move from initializing to
        initialized, those in `failed` leave initializing (a later heartbeat asks again).  True when the group's
        records changed."""
        group = self.groups.get(group_id)
        if group is None:
            return False
        before = (dict(group.initializing), dict(group.initialized))
        for tid, parts in done.items():
            parts = frozenset(parts)
            name = None
            if tid in group.initializing:
                name, busy, since = group.initializing[tid]
                rest = busy - parts
                if rest:
                    group.initializing[tid] = (name, rest, since)
                else:
                    del group.initializing[tid]
            old_name, old = group.initialized.get(tid, (name or "", frozenset()))
            group.initialized[tid] = (name or old_name, old | parts)
        for tid, parts in failed.items():
            if tid in group.initializing:
                name, busy, since = group.initializing[tid]
                rest = busy - frozenset(parts)
                if rest:
                    group.initializing[tid] = (name, rest, since)
                else:
                    del group.initializing[tid]
        return before != (group.initializing, group.initialized)

    # -------------------------------------------------------------------------------------- leaving
    def _leave(self, r: ShareHeartbeat, topics: TopicLookup | None = None) -> HeartbeatResult:
        group = self.group(r.group_id)
        if r.member_id not in group.members:
            raise ShareGroupError(ErrorCode.UNKNOWN_MEMBER_ID,
                                  f"Member {r.member_id} is not a member of group {group.group_id}.")
        self.remove_member(group, r.member_id, topics)
        return HeartbeatResult(member_id=r.member_id, member_epoch=LEAVE_GROUP_EPOCH)

    @staticmethod
    def remove_member(group: ShareGroup, member_id: str, topics: TopicLookup | None = None) -> None:
        """A member is gone (left or timed out): the group epoch goes up, so the others are given its partitions;
        the metadata hash is computed again without its subscription."""
        if group.members.pop(member_id, None) is None:
            return
        group.target.pop(member_id, None)
        if topics is not None:
            group.metadata_hash = metadata_hash(group.subscribed_topics(), topics)
        group.group_epoch += 1

    # -------------------------------------------------------------------------------------- timers
    def tick(self, now: int, topics: TopicLookup | None = None) -> list[str]:
        """Removes the members whose session ended; the ids of the groups changed."""
        changed = []
        for gid, group in list(self.groups.items()):
            gone = [mid for mid, m in group.members.items() if m.session_deadline_ms <= now]
            for mid in gone:
                self.remove_member(group, mid, topics)
            if gone:
                changed.append(gid)
        return changed

    def forget_deleted_topics(self, exists: Callable[[UUID], bool]) -> list[str]:
        """Drops the topics deleted from the cluster from every group's share-state bookkeeping, targets and
        assignments (Kafka's coordinator does so when a topic goes; the share coordinator deletes their state);
        the ids of the groups changed.  The next heartbeat sees the new metadata hash and bumps the epoch."""
        changed = []
        for gid, group in self.groups.items():
            gone = {t for t in (*group.initialized, *group.initializing, *group.deleting) if not exists(t)}
            gone |= {t for a in group.target.values() for t in a if not exists(t)}
            gone |= {t for m in group.members.values() for t in m.assigned if not exists(t)}
            if not gone:
                continue
            for t in gone:
                group.initialized.pop(t, None)
                group.initializing.pop(t, None)
                group.deleting.pop(t, None)
            group.target = {mid: {t: ps for t, ps in a.items() if t not in gone} for mid, a in group.target.items()}
            for m in group.members.values():
                m.assigned = {t: ps for t, ps in m.assigned.items() if t not in gone}
            changed.append(gid)
        return changed

    def touch_all(self, now: int) -> None:
        """Every member's session starts now (after a load: the coordinator has not heard from them yet)."""
        for gid, group in self.groups.items():
            for m in group.members.values():
                m.session_deadline_ms = now + self.session_timeout_ms(gid)


def _only_subscribed(target: Assignment, member: ShareMember, names: Mapping[UUID, str]) -> Assignment:
    """The target's partitions of the topics the member subscribes to now."""
    subscribed = set(member.subscribed_topic_names)
    return {tid: ps for tid, ps in target.items() if ps and names.get(tid) in subscribed}
