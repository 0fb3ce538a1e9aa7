"""The records of a streams group in `__consumer_offsets`, in Kafka's layouts (KIP-1071).

Strategy: as for consumer and share groups, a key's leading int16 is the record kind, then the group id (and the
member id where there is one) as int16-length strings; a value is its int16 version (0) then the flexible body the
generated codec writes (schemas/streams/):

  key 17  StreamsGroupMetadata:                  epoch, metadata hash, validated topology epoch (tag 0)
  key 19  StreamsGroupMemberMetadata:            instance id?, rack id?, client id, client host, rebalance timeout,
                                                 topology epoch, process id, user endpoint?, client tags
  key 20  StreamsGroupTargetAssignmentMetadata:  assignment epoch
  key 21  StreamsGroupTargetAssignmentMember:    active, standby and warm-up tasks
  key 22  StreamsGroupCurrentMemberAssignment:   member epoch, previous epoch, state, the three kinds of tasks, and
                                                 the three kinds pending revocation
  key 23  StreamsGroupTopology:                  the topology (its epoch and sub-topologies)

(Kind 18, StreamsGroupPartitionMetadata, was dropped by Kafka before 4.1 and is never written.)  The metadata hash
is kjbod's own hash of the topology's topics' partition counts (Kafka's uses XXH3 over more of the image): a Kafka
coordinator reading these records would bump such a group's epoch once.  `streams_group_records(group)` turns a
group into its records and `streams_group_of(id, records)` makes it again from what a load found; the coordinator
writes the difference in Kafka's writing order.  The configured topology is not stored: the first heartbeat after
a load configures it again.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping
from typing import Any

from kjbod.broker.groups.records import RecordFormatError
from kjbod.broker.streams.groups import MemberState, StreamsGroup, StreamsMember, Tasks
from kjbod.broker.streams.topology import Subtopology, TopicInfo, Topology
from kjbod.protocol.generated.streams_group_current_member_assignment_value import (
    StreamsGroupCurrentMemberAssignmentValue,
)
from kjbod.protocol.generated.streams_group_current_member_assignment_value import TaskIds as CurrentTaskIds
from kjbod.protocol.generated.streams_group_member_metadata_value import Endpoint, KeyValue
from kjbod.protocol.generated.streams_group_member_metadata_value import (
    StreamsGroupMemberMetadataValue as MemberValue,
)
from kjbod.protocol.generated.streams_group_metadata_value import StreamsGroupMetadataValue
from kjbod.protocol.generated.streams_group_target_assignment_member_value import (
    StreamsGroupTargetAssignmentMemberValue,
)
from kjbod.protocol.generated.streams_group_target_assignment_member_value import TaskIds as TargetTaskIds
from kjbod.protocol.generated.streams_group_target_assignment_metadata_value import (
    StreamsGroupTargetAssignmentMetadataValue,
)
from kjbod.protocol.generated.streams_group_topology_value import (
    CopartitionGroup,
    StreamsGroupTopologyValue,
    TopicConfig,
)
from kjbod.protocol.generated.streams_group_topology_value import Subtopology as SubtopologyValue
from kjbod.protocol.generated.streams_group_topology_value import TopicInfo as TopicInfoValue

STG_METADATA = 17
STG_MEMBER = 19
STG_TARGET_METADATA = 20
STG_TARGET_MEMBER = 21
STG_CURRENT = 22
STG_TOPOLOGY = 23
STREAMS_KINDS = frozenset((STG_METADATA, STG_MEMBER, STG_TARGET_METADATA, STG_TARGET_MEMBER, STG_CURRENT,
                           STG_TOPOLOGY))
WITH_MEMBER = frozenset((STG_MEMBER, STG_TARGET_MEMBER, STG_CURRENT))
# the order Kafka writes a heartbeat's records in; tombstones go the other way round
WRITE_ORDER = (STG_TOPOLOGY, STG_MEMBER, STG_METADATA, STG_TARGET_MEMBER, STG_TARGET_METADATA, STG_CURRENT)
_STATES = {MemberState.STABLE: 0, MemberState.UNREVOKED_TASKS: 1, MemberState.UNRELEASED_TASKS: 2}

_H = struct.Struct(">h")


def _str(s: str) -> bytes:
    b = s.encode("utf-8")
    return _H.pack(len(b)) + b


def streams_key(kind: int, group: str, member: str | None = None) -> bytes:
    return _H.pack(kind) + _str(group) + (_str(member) if member is not None else b"")


def read_streams_key(buf: bytes) -> tuple[int, str, str | None]:
    """(kind, group, member) of a streams group key; RecordFormatError for anything else."""
    try:
        (kind,) = _H.unpack_from(buf)
        if kind not in STREAMS_KINDS:
            raise RecordFormatError(f"not a streams group key (kind {kind})")
        group, pos = _read_str(buf, 2)
        member = _read_str(buf, pos)[0] if kind in WITH_MEMBER else None
        return kind, group, member
    except struct.error as e:
        raise RecordFormatError(f"short streams group key: {e}") from None
    except UnicodeDecodeError as e:
        raise RecordFormatError(f"streams group key not UTF-8: {e}") from None


def _read_str(buf: bytes, pos: int) -> tuple[str, int]:
    """The int16-length string at `pos` and the position after it; RecordFormatError when it does not fit."""
    (n,) = _H.unpack_from(buf, pos)
    if n < 0 or pos + 2 + n > len(buf):
        raise RecordFormatError(f"streams group key: a string of {n} bytes at {pos} in {len(buf)} bytes")
    return bytes(buf[pos + 2:pos + 2 + n]).decode("utf-8"), pos + 2 + n


def _value(msg: Any) -> bytes:
    return _H.pack(0) + msg.encode(0)


def _decode(cls: Any, raw: bytes) -> Any:
    """A value's message; RecordFormatError for a short value, another version, or a body that does not decode."""
    if len(raw) < 2:
        raise RecordFormatError(f"{cls.__name__} of {len(raw)} bytes has no version")
    (version,) = _H.unpack_from(raw)
    if version != 0:
        raise RecordFormatError(f"unsupported {cls.__name__} version {version}")
    try:
        return cls.decode(raw[2:], 0)
    except ValueError as e:  # the codec's DecodeError
        raise RecordFormatError(str(e)) from None


def metadata_hash(g: StreamsGroup) -> int:
    configured = g.configured
    text = repr(sorted(configured.tasks.items())) if configured is not None else ""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big", signed=True)


def _task_ids(cls: Any, kind: dict[str, set[int]]) -> list[Any]:
    return [cls(subtopology_id=s, partitions=sorted(ps)) for s, ps in sorted(kind.items()) if ps]


def _topology_value(t: Topology) -> StreamsGroupTopologyValue:
    def info(x: TopicInfo) -> TopicInfoValue:
        return TopicInfoValue(name=x.name, partitions=x.partitions, replication_factor=x.replication_factor,
                              topic_configs=[TopicConfig(key=k, value=v) for k, v in x.configs])

    return StreamsGroupTopologyValue(epoch=t.epoch, subtopologies=[SubtopologyValue(
        subtopology_id=s.subtopology_id, source_topics=list(s.source_topics),
        source_topic_regex=list(s.source_topic_regex),
        state_changelog_topics=[info(x) for x in s.state_changelog_topics],
        repartition_sink_topics=list(s.repartition_sink_topics),
        repartition_source_topics=[info(x) for x in s.repartition_source_topics],
        copartition_groups=[CopartitionGroup(source_topics=list(src), source_topic_regex=[],
                                             repartition_source_topics=list(rep))
                            for src, rep in s.copartition_groups]) for s in t.subtopologies])


def streams_group_records(g: StreamsGroup) -> dict[bytes, bytes]:
    """The records holding a streams group now: key bytes -> value bytes."""
    gid = g.group_id
    out: dict[bytes, bytes] = {}
    if g.topology is not None:
        out[streams_key(STG_TOPOLOGY, gid)] = _value(_topology_value(g.topology))
    for mid, m in g.members.items():
        out[streams_key(STG_MEMBER, gid, mid)] = _value(MemberValue(
            instance_id=None, rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
            rebalance_timeout_ms=m.rebalance_timeout_ms, topology_epoch=m.topology_epoch, process_id=m.process_id,
            user_endpoint=None if m.user_endpoint is None else Endpoint(host=m.user_endpoint[0],
                                                                        port=m.user_endpoint[1]),
            client_tags=[KeyValue(key=k, value=v) for k, v in m.client_tags]))
    out[streams_key(STG_METADATA, gid)] = _value(StreamsGroupMetadataValue(
        epoch=g.group_epoch, metadata_hash=metadata_hash(g), validated_topology_epoch=g.validated_topology_epoch))
    for mid, t in g.targets.items():
        out[streams_key(STG_TARGET_MEMBER, gid, mid)] = _value(StreamsGroupTargetAssignmentMemberValue(
            active_tasks=_task_ids(TargetTaskIds, t.active), standby_tasks=_task_ids(TargetTaskIds, t.standby),
            warmup_tasks=_task_ids(TargetTaskIds, t.warmup)))
    out[streams_key(STG_TARGET_METADATA, gid)] = _value(StreamsGroupTargetAssignmentMetadataValue(
        assignment_epoch=g.assignment_epoch))
    for mid, m in g.members.items():
        a, p = m.assigned, m.pending_revocation
        out[streams_key(STG_CURRENT, gid, mid)] = _value(StreamsGroupCurrentMemberAssignmentValue(
            member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch, state=_STATES[m.state],
            active_tasks=_task_ids(CurrentTaskIds, a.active), standby_tasks=_task_ids(CurrentTaskIds, a.standby),
            warmup_tasks=_task_ids(CurrentTaskIds, a.warmup),
            active_tasks_pending_revocation=_task_ids(CurrentTaskIds, p.active),
            standby_tasks_pending_revocation=_task_ids(CurrentTaskIds, p.standby),
            warmup_tasks_pending_revocation=_task_ids(CurrentTaskIds, p.warmup)))
    return out


def records_between(before: Mapping[bytes, bytes], after: Mapping[bytes, bytes]) -> list[tuple[bytes, bytes | None]]:
    """What to write to go from one set of a streams group's records to the next: new or changed values in Kafka's
    writing order, then tombstones in the reverse order (the topology last)."""
    def kind(key: bytes) -> int:
        return WRITE_ORDER.index(_H.unpack_from(key)[0])

    writes = sorted((k for k, v in after.items() if before.get(k) != v), key=kind)
    gone = sorted((k for k in before if k not in after), key=kind, reverse=True)
    return [(k, after[k]) for k in writes] + [(k, None) for k in gone]


def _tasks(ids: list[Any]) -> dict[str, set[int]]:
    return {t.subtopology_id: set(t.partitions) for t in ids if t.partitions}


def streams_group_of(group_id: str, values: Mapping[tuple[int, str | None], bytes]) -> StreamsGroup | None:
    """The streams group the loaded records describe ((kind, member) -> the last value, tombstones dropped), or
    None when its metadata record is gone."""
    meta = values.get((STG_METADATA, None))
    if meta is None:
        return None
    m = _decode(StreamsGroupMetadataValue, meta)
    g = StreamsGroup(group_id, group_epoch=m.epoch, validated_topology_epoch=m.validated_topology_epoch)
    if (raw := values.get((STG_TARGET_METADATA, None))) is not None:
        g.assignment_epoch = _decode(StreamsGroupTargetAssignmentMetadataValue, raw).assignment_epoch
    if (raw := values.get((STG_TOPOLOGY, None))) is not None:
        t = _decode(StreamsGroupTopologyValue, raw)

        def info(x: Any) -> TopicInfo:
            return TopicInfo(x.name, x.partitions, x.replication_factor,
                             tuple((c.key, c.value) for c in x.topic_configs))

        g.topology = Topology(t.epoch, tuple(Subtopology(
            s.subtopology_id, tuple(s.source_topics), tuple(s.repartition_sink_topics),
            tuple(info(x) for x in s.state_changelog_topics), tuple(info(x) for x in s.repartition_source_topics),
            tuple((tuple(c.source_topics), tuple(c.repartition_source_topics)) for c in s.copartition_groups),
            tuple(s.source_topic_regex)) for s in t.subtopologies))
    states = {v: k for k, v in _STATES.items()}
    for (kind, mid), raw in values.items():
        if mid is None:
            continue
        if kind == STG_MEMBER:
            v = _decode(MemberValue, raw)
            member = g.members.setdefault(mid, StreamsMember(mid))
            member.rack_id, member.client_id, member.client_host = v.rack_id, v.client_id, v.client_host
            member.rebalance_timeout_ms, member.topology_epoch = v.rebalance_timeout_ms, v.topology_epoch
            member.process_id = v.process_id
            member.user_endpoint = None if v.user_endpoint is None else (v.user_endpoint.host, v.user_endpoint.port)
            member.client_tags = tuple((kv.key, kv.value) for kv in v.client_tags)
        elif kind == STG_TARGET_MEMBER:
            v = _decode(StreamsGroupTargetAssignmentMemberValue, raw)
            g.targets[mid] = Tasks(_tasks(v.active_tasks), _tasks(v.standby_tasks), _tasks(v.warmup_tasks))
    for (kind, mid), raw in values.items():
        if kind != STG_CURRENT or mid is None or mid not in g.members:
            continue
        v = _decode(StreamsGroupCurrentMemberAssignmentValue, raw)
        member = g.members[mid]
        member.member_epoch, member.previous_member_epoch = v.member_epoch, v.previous_member_epoch
        member.state = states.get(v.state, MemberState.STABLE)
        member.assigned = Tasks(_tasks(v.active_tasks), _tasks(v.standby_tasks), _tasks(v.warmup_tasks))
        member.pending_revocation = Tasks(_tasks(v.active_tasks_pending_revocation),
                                          _tasks(v.standby_tasks_pending_revocation),
                                          _tasks(v.warmup_tasks_pending_revocation))
    g.targets = {mid: t for mid, t in g.targets.items() if mid in g.members}
    return g
