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
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kjbod.broker.groups.state import CommittedOffset

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


def read_key(buf: bytes) -> OffsetKey | GroupKey:
    r = _Reader(buf)
    version = r.int16()
    if version in (0, 1):
        group, topic = r.string(), r.string()
        return OffsetKey(group or "", topic or "", r.int32())
    if version == 2:
        return GroupKey(r.string() or "")
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
