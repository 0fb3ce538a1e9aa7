"""The keys and values the group coordinator writes to `__consumer_offsets`, in Kafka's layouts.

Strategy: Kafka stores a group's state as records of its internal topic, a key naming what the record is about
and a value holding it (a null value deletes).  The key's leading int16 says which kind:

  key version 0 or 1  OffsetCommitKey:    group (string), topic (string), partition (int32)
  key version 2       GroupMetadataKey:   group (string)

and the value's leading int16 its own version.  kjbod writes the newest non-flexible versions, which every Kafka
since 2.3 reads: OffsetCommitValue v3

  offset (int64), leader epoch (int32), metadata (string), commit timestamp (int64)

(v1 instead when a commit carries its own expiry: offset, metadata, commit timestamp, expire timestamp), and
GroupMetadataValue v3

  protocol type (string), generation (int32), protocol (nullable string), leader (nullable string),
  current state timestamp (int64), members (int32 count of: member id, group instance id (nullable),
  client id, client host (strings), rebalance timeout, session timeout (int32), subscription, assignment
  (int32-length bytes))

It reads every version Kafka defines up to 3 (v0: no leader epoch; v1: expire timestamp; v2: no instance ids
in members before v3; rebalance timeout from v1).  Strings are an int16 length then UTF-8, null as length -1.

KIP-932 share groups use keys 10 to 15 in the same way (kjbod.broker.share.groups_records).

KIP-848 consumer groups (kjbod.broker.groups.consumer) are stored as Kafka's six record kinds, their keys plain
(group id, and member id where there is one) and their values version 0 in the flexible encoding (compact
strings and arrays: an unsigned varint of length + 1, 0 for null; a tagged-field count closing each struct):

  key 3  ConsumerGroupMetadata:               value: epoch (int32)
  key 4  ConsumerGroupPartitionMetadata:      value: topics [topic id (uuid), name, partitions (int32),
                                                      partition racks [partition (int32), racks [string]]]
  key 5  ConsumerGroupMemberMetadata:         value: instance id?, rack id?, client id, client host,
                                                      subscribed topic names [string], regex?, rebalance
                                                      timeout (int32), server assignor?  (tag 0: a classic
                                                      member's session timeout and protocols [name,
                                                      metadata (bytes)], KIP-848's online migration)
  key 6  ConsumerGroupTargetAssignmentMetadata: value: assignment epoch (int32)
  key 7  ConsumerGroupTargetAssignmentMember: value: topic partitions [topic id, partitions [int32]]
  key 8  ConsumerGroupCurrentMemberAssignment: value: member epoch, previous member epoch (int32), state
                                                      (int8), assigned and pending revocation (as key 7's)

`consumer_group_records(group)` turns a group into the records that hold it (key bytes -> value bytes), and
`consumer_group_of(group id, records)` makes the group again from what a load found; the coordinator writes the
difference between the records last written and the ones the group needs now (a tombstone for a key gone).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from uuid import UUID

from kjbod.broker.groups.consumer import (
    Assignment,
    ClassicMeta,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    TopicMeta,
)
from kjbod.broker.groups.state import CommittedOffset
from kjbod.protocol.runtime import write_uvarint

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")


class RecordFormatError(ValueError):
    """A key or value of `__consumer_offsets` that does not decode."""


def _str(s: str | None) -> bytes:
    if s is None:
        return _H.pack(-1)
    raw = s.encode("utf-8")
    return _H.pack(len(raw)) + raw


def _bytes(b: bytes) -> bytes:
    return _I.pack(len(b)) + b


class _Reader:
    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos = buf, 0

    def _take(self, s: struct.Struct) -> int:
        if self.pos + s.size > len(self.buf):
            raise RecordFormatError("truncated record")
        (v,) = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return v

    def int16(self) -> int:
        return self._take(_H)

    def int32(self) -> int:
        return self._take(_I)

    def int64(self) -> int:
        return self._take(_Q)

    def string(self) -> str | None:
        n = self.int16()
        if n < 0:
            return None
        if self.pos + n > len(self.buf):
            raise RecordFormatError("truncated string")
        s = self.buf[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def bytes_(self) -> bytes:
        n = self.int32()
        if n < 0 or self.pos + n > len(self.buf):
            raise RecordFormatError("bad bytes length")
        b = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return b


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupRecord:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberRecord, ...]


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return _H.pack(OFFSET_KEY_VERSION) + _str(group) + _str(topic) + _I.pack(partition)


def group_key(group: str) -> bytes:
    return _H.pack(GROUP_KEY_VERSION) + _str(group)


def offset_value(c: CommittedOffset) -> bytes:
    if c.expire_timestamp_ms >= 0:
        return (_H.pack(1) + _Q.pack(c.offset) + _str(c.metadata) + _Q.pack(c.commit_timestamp_ms)
                + _Q.pack(c.expire_timestamp_ms))
    return _H.pack(3) + _Q.pack(c.offset) + _I.pack(c.leader_epoch) + _str(c.metadata) + _Q.pack(c.commit_timestamp_ms)


def group_value(g: GroupRecord) -> bytes:
    out = [_H.pack(3), _str(g.protocol_type), _I.pack(g.generation), _str(g.protocol), _str(g.leader),
           _Q.pack(g.current_state_timestamp), _I.pack(len(g.members))]
    for m in g.members:
        out += [_str(m.member_id), _str(m.group_instance_id), _str(m.client_id), _str(m.client_host),
                _I.pack(m.rebalance_timeout_ms), _I.pack(m.session_timeout_ms), _bytes(m.subscription),
                _bytes(m.assignment)]
    return b"".join(out)


def read_key(buf: bytes) -> OffsetKey | GroupKey | ConsumerKey:
    r = _Reader(buf)
    version = r.int16()
    if version in (0, 1):
        group, topic = r.string(), r.string()
        return OffsetKey(group or "", topic or "", r.int32())
    if version == 2:
        return GroupKey(r.string() or "")
    if version in (CG_METADATA, CG_PARTITION_METADATA, CG_TARGET_METADATA):
        return ConsumerKey(version, r.string() or "", None)
    if version in (CG_MEMBER, CG_TARGET_MEMBER, CG_CURRENT, *SHARE_MEMBER_KEYS):
        group = r.string() or ""
        return ConsumerKey(version, group, r.string() or "")
    if version in SHARE_GROUP_KEYS:
        return ConsumerKey(version, r.string() or "", None)
    raise RecordFormatError(f"unknown __consumer_offsets key version {version}")


def read_offset_value(buf: bytes) -> CommittedOffset:
    r = _Reader(buf)
    version = r.int16()
    if not 0 <= version <= 3:
        raise RecordFormatError(f"unsupported OffsetCommitValue version {version}")
    offset = r.int64()
    epoch = r.int32() if version >= 3 else -1
    metadata = r.string() or ""
    ts = r.int64()
    expire = r.int64() if version == 1 else -1
    return CommittedOffset(offset, epoch, metadata, ts, expire)


def read_group_value(buf: bytes) -> GroupRecord:
    r = _Reader(buf)
    version = r.int16()
    if not 0 <= version <= 3:
        raise RecordFormatError(f"unsupported GroupMetadataValue version {version}")
    protocol_type = r.string() or ""
    generation = r.int32()
    protocol, leader = r.string(), r.string()
    ts = r.int64() if version >= 2 else -1
    members = []
    for _ in range(r.int32()):
        member_id = r.string() or ""
        instance = r.string() if version >= 3 else None
        client_id, client_host = r.string() or "", r.string() or ""
        rebalance = r.int32() if version >= 1 else -1
        session = r.int32()
        members.append(MemberRecord(member_id, instance, client_id, client_host, rebalance, session,
                                    r.bytes_(), r.bytes_()))
    return GroupRecord(protocol_type, generation, protocol, leader, ts, tuple(members))


# ------------------------------------------------------------------------------------------------ consumer groups
CG_METADATA = 3
CG_PARTITION_METADATA = 4
CG_MEMBER = 5
CG_TARGET_METADATA = 6
CG_TARGET_MEMBER = 7
CG_CURRENT = 8
# KIP-932 share group keys (their values: kjbod.broker.share.groups_records): member metadata, target member and
# current assignment carry a member id; group metadata, target metadata and state partition metadata do not
SHARE_MEMBER_KEYS = (10, 13, 14)
SHARE_GROUP_KEYS = (11, 12, 15)
# the order Kafka writes a heartbeat's records in; tombstones go the other way round
WRITE_ORDER = (CG_MEMBER, CG_PARTITION_METADATA, CG_METADATA, CG_TARGET_MEMBER, CG_TARGET_METADATA, CG_CURRENT)
_B = struct.Struct(">b")


@dataclass(frozen=True, slots=True)
class ConsumerKey:
    """A key of a consumer group record: its kind (the key version), the group, and the member if any."""

    kind: int
    group: str
    member: str | None


def consumer_key(kind: int, group: str, member: str | None = None) -> bytes:
    return _H.pack(kind) + _str(group) + (_str(member) if member is not None else b"")


def _cstr(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    raw = s.encode("utf-8")
    return write_uvarint(len(raw) + 1) + raw


def _carray(items: list[bytes]) -> bytes:
    return write_uvarint(len(items) + 1) + b"".join(items)


_NO_TAGS = b"\x00"


def _partitions(a: Assignment) -> bytes:
    return _carray([tid.bytes + _carray([_I.pack(p) for p in sorted(ps)]) + _NO_TAGS
                    for tid, ps in sorted(a.items(), key=lambda kv: kv[0].bytes) if ps])


class _FlexReader(_Reader):
    def uvarint(self) -> int:
        shift = n = 0
        while True:
            if self.pos >= len(self.buf):
                raise RecordFormatError("truncated varint")
            b = self.buf[self.pos]
            self.pos += 1
            n |= (b & 0x7F) << shift
            if not b & 0x80:
                return n
            shift += 7
            if shift > 35:
                raise RecordFormatError("varint too long")

    def cstr(self) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        if self.pos + n > len(self.buf):
            raise RecordFormatError("truncated string")
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8")
        self.pos += n
        return s

    def count(self) -> int:
        n = self.uvarint() - 1
        if n > len(self.buf):
            raise RecordFormatError("bad array length")
        return max(n, 0)

    def uuid(self) -> UUID:
        if self.pos + 16 > len(self.buf):
            raise RecordFormatError("truncated uuid")
        u = UUID(bytes=bytes(self.buf[self.pos:self.pos + 16]))
        self.pos += 16
        return u

    def int8(self) -> int:
        return self._take(_B)

    def tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            size = self.uvarint()
            if self.pos + size > len(self.buf):
                raise RecordFormatError("truncated tagged field")
            self.pos += size

    def cbytes(self) -> bytes:
        n = self.uvarint() - 1
        if n < 0 or self.pos + n > len(self.buf):
            raise RecordFormatError("bad bytes length")
        b = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return b

    def classic_tag(self) -> ClassicMeta | None:
        """The tagged fields closing a ConsumerGroupMemberMetadataValue: tag 0 is a classic member's metadata."""
        found = None
        for _ in range(self.uvarint()):
            tag, size = self.uvarint(), self.uvarint()
            end = self.pos + size
            if end > len(self.buf):
                raise RecordFormatError("truncated tagged field")
            if tag == 0:
                session = self.int32()
                protocols = []
                for _ in range(self.count()):
                    name = self.cstr() or ""
                    protocols.append((name, self.cbytes()))
                    self.tags()
                found = ClassicMeta(session, tuple(protocols))
            self.pos = end
        return found

    def partitions(self) -> Assignment:
        out: Assignment = {}
        for _ in range(self.count()):
            tid = self.uuid()
            out[tid] = frozenset(self.int32() for _ in range(self.count()))
            self.tags()
        return out


def _value(fields: bytes) -> bytes:
    return _H.pack(0) + fields + _NO_TAGS


def consumer_group_records(g: ConsumerGroup) -> dict[bytes, bytes]:
    """The records holding a consumer group now: key bytes -> value bytes, in Kafka's writing order."""
    gid = g.group_id
    out: dict[bytes, bytes] = {}
    for mid, m in g.members.items():
        fields = (_cstr(m.instance_id) + _cstr(m.rack_id) + _cstr(m.client_id) + _cstr(m.client_host)
                  + _carray([_cstr(t) for t in m.subscribed_topic_names]) + _cstr(m.subscribed_topic_regex)
                  + _I.pack(m.rebalance_timeout_ms) + _cstr(m.server_assignor))
        if m.classic is None:
            out[consumer_key(CG_MEMBER, gid, mid)] = _value(fields)
        else:  # tag 0: ClassicMemberMetadata (session timeout, [name, metadata]), a struct with its own tags
            classic = _I.pack(m.classic.session_timeout_ms) + _carray([
                _cstr(name) + write_uvarint(len(meta) + 1) + meta + _NO_TAGS
                for name, meta in m.classic.protocols]) + _NO_TAGS
            out[consumer_key(CG_MEMBER, gid, mid)] = (_H.pack(0) + fields + write_uvarint(1) + write_uvarint(0)
                                                      + write_uvarint(len(classic)) + classic)
    out[consumer_key(CG_PARTITION_METADATA, gid)] = _value(_carray([
        t.topic_id.bytes + _cstr(t.name) + _I.pack(t.num_partitions) + _carray([]) + _NO_TAGS
        for t in sorted(g.topics.values(), key=lambda t: t.name)]))
    out[consumer_key(CG_METADATA, gid)] = _value(_I.pack(g.group_epoch))
    for mid, a in g.target.items():
        out[consumer_key(CG_TARGET_MEMBER, gid, mid)] = _value(_partitions(a))
    out[consumer_key(CG_TARGET_METADATA, gid)] = _value(_I.pack(g.assignment_epoch))
    for mid, m in g.members.items():
        out[consumer_key(CG_CURRENT, gid, mid)] = _value(
            _I.pack(m.member_epoch) + _I.pack(m.previous_member_epoch) + _B.pack(int(m.state))
            + _partitions(m.assigned) + _partitions(m.pending_revocation))
    return out


def records_between(before: Mapping[bytes, bytes], after: Mapping[bytes, bytes]) -> list[tuple[bytes, bytes | None]]:
    """What to write to go from one set of records to the next: new or changed values in Kafka's writing order,
    then tombstones (a member's current assignment, target, metadata first; the group's epoch last)."""
    def kind(key: bytes) -> int:
        return WRITE_ORDER.index(_H.unpack_from(key)[0])

    writes = sorted((k for k, v in after.items() if before.get(k) != v), key=kind)
    gone = sorted((k for k in before if k not in after), key=kind, reverse=True)
    return [(k, after[k]) for k in writes] + [(k, None) for k in gone]


def consumer_group_of(group_id: str, values: Mapping[ConsumerKey, bytes]) -> ConsumerGroup | None:
    """The consumer group that the loaded records (the last value of each key, tombstones dropped) describe, or
    None when its group record is gone."""
    meta = values.get(ConsumerKey(CG_METADATA, group_id, None))
    if meta is None:
        return None
    g = ConsumerGroup(group_id, group_epoch=_epoch(meta))
    target_meta = values.get(ConsumerKey(CG_TARGET_METADATA, group_id, None))
    g.assignment_epoch = _epoch(target_meta) if target_meta is not None else 0
    pm = values.get(ConsumerKey(CG_PARTITION_METADATA, group_id, None))
    if pm is not None:
        r = _flex(pm)
        for _ in range(r.count()):
            tid, name, n = r.uuid(), r.cstr() or "", r.int32()
            for _ in range(r.count()):
                r.int32()
                for _ in range(r.count()):
                    r.cstr()
                r.tags()
            r.tags()
            g.topics[name] = TopicMeta(tid, name, n)
    for key, raw in values.items():
        if key.member is None:
            continue
        if key.kind == CG_MEMBER:
            r = _flex(raw)
            m = g.members.setdefault(key.member, ConsumerMember(key.member))
            m.instance_id, m.rack_id, m.client_id, m.client_host = r.cstr(), r.cstr(), r.cstr() or "", r.cstr() or ""
            m.subscribed_topic_names = tuple(r.cstr() or "" for _ in range(r.count()))
            m.subscribed_topic_regex, m.rebalance_timeout_ms, m.server_assignor = r.cstr(), r.int32(), r.cstr()
            m.classic = r.classic_tag()
            if m.instance_id is not None:
                g.static[m.instance_id] = key.member
        elif key.kind == CG_TARGET_MEMBER:
            g.target[key.member] = _flex(raw).partitions()
    for key, raw in values.items():
        if key.kind == CG_CURRENT and key.member in g.members:
            r = _flex(raw)
            m = g.members[key.member]
            m.member_epoch, m.previous_member_epoch = r.int32(), r.int32()
            state = r.int8()
            m.state = MemberState(state) if state in MemberState._value2member_map_ else MemberState.UNKNOWN
            m.assigned, m.pending_revocation = r.partitions(), r.partitions()
    g.target = {mid: a for mid, a in g.target.items() if mid in g.members}
    return g


def _flex(raw: bytes) -> _FlexReader:
    r = _FlexReader(raw)
    version = r.int16()
    if version != 0:
        raise RecordFormatError(f"unsupported consumer group value version {version}")
    return r


def _epoch(raw: bytes) -> int:
    return _flex(raw).int32()
