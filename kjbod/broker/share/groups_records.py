"""The records of a share group in `__consumer_offsets`, in Kafka's layouts.

Strategy: as for KIP-848 consumer groups (kjbod.broker.groups.records), a key's leading int16 is the record kind,
then the group id (and the member id where there is one) as int16-length strings; values are version 0 in the
flexible encoding (compact strings and arrays, a tagged-field count closing each struct):

  key 10  ShareGroupMemberMetadata:             value: rack id?, client id, client host, subscribed topic names
                                                       [string]
  key 11  ShareGroupMetadata:                   value: epoch (int32), metadata hash (int64)
  key 12  ShareGroupTargetAssignmentMetadata:   value: assignment epoch (int32)  (tag 0: assignment timestamp,
                                                       int64, Kafka 4.3's; not written, skipped on reading)
  key 13  ShareGroupTargetAssignmentMember:     value: topic partitions [topic id (uuid), partitions [int32]]
  key 14  ShareGroupCurrentMemberAssignment:    value: member epoch, previous member epoch (int32), state (int8),
                                                       assigned partitions (as key 13's)
  key 15  ShareGroupStatePartitionMetadata:     value: initializing topics [topic id, name, partitions [int32]],
                                                       initialized topics (the same), deleting topics [topic id,
                                                       name]

`share_group_records(group)` turns a group into the records that hold it (key bytes -> value bytes) and
`share_group_of(group id, records)` makes the group again from what a load found; the coordinator writes the
difference (kjbod.broker.groups.records.records_between's rule, in this module's writing order).  An initializing
partition's start time is not stored: after a load it counts as just started.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from uuid import UUID

from kjbod.broker.groups.records import (
    ConsumerKey,
    RecordFormatError,
    _carray,
    _cstr,
    _FlexReader,
    _partitions,
    _str,
)
from kjbod.broker.share.groups import MEMBER_STABLE, ShareGroup, ShareMember

SG_MEMBER = 10
SG_METADATA = 11
SG_TARGET_METADATA = 12
SG_TARGET_MEMBER = 13
SG_CURRENT = 14
SG_STATE_PARTITIONS = 15
SHARE_KINDS = frozenset(range(SG_MEMBER, SG_STATE_PARTITIONS + 1))
WITH_MEMBER = frozenset((SG_MEMBER, SG_TARGET_MEMBER, SG_CURRENT))
# the order Kafka writes a heartbeat's records in; tombstones go the other way round
WRITE_ORDER = (SG_MEMBER, SG_METADATA, SG_TARGET_MEMBER, SG_TARGET_METADATA, SG_CURRENT, SG_STATE_PARTITIONS)

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_B = struct.Struct(">b")
_NO_TAGS = b"\x00"


def share_key(kind: int, group: str, member: str | None = None) -> bytes:
    return _H.pack(kind) + _str(group) + (_str(member) if member is not None else b"")


def _value(fields: bytes) -> bytes:
    return _H.pack(0) + fields + _NO_TAGS


def _topics(entries: Mapping[UUID, tuple[str, frozenset[int]]]) -> bytes:
    return _carray([tid.bytes + _cstr(name) + _carray([_I.pack(p) for p in sorted(ps)]) + _NO_TAGS
                    for tid, (name, ps) in sorted(entries.items(), key=lambda kv: kv[1][0])])


def share_group_records(g: ShareGroup) -> dict[bytes, bytes]:
    """The records holding a share group now: key bytes -> value bytes."""
    gid = g.group_id
    out: dict[bytes, bytes] = {}
    for mid, m in g.members.items():
        out[share_key(SG_MEMBER, gid, mid)] = _value(
            _cstr(m.rack_id) + _cstr(m.client_id) + _cstr(m.client_host)
            + _carray([_cstr(t) for t in m.subscribed_topic_names]))
    out[share_key(SG_METADATA, gid)] = _value(_I.pack(g.group_epoch) + _Q.pack(g.metadata_hash))
    for mid, a in g.target.items():
        out[share_key(SG_TARGET_MEMBER, gid, mid)] = _value(_partitions(a))
    out[share_key(SG_TARGET_METADATA, gid)] = _value(_I.pack(g.assignment_epoch))
    for mid, m in g.members.items():
        out[share_key(SG_CURRENT, gid, mid)] = _value(
            _I.pack(m.member_epoch) + _I.pack(m.previous_member_epoch) + _B.pack(MEMBER_STABLE)
            + _partitions(m.assigned))
    if g.has_state_records():
        out[share_key(SG_STATE_PARTITIONS, gid)] = _value(
            _topics({t: (n, ps) for t, (n, ps, _) in g.initializing.items()}) + _topics(g.initialized)
            + _carray([tid.bytes + _cstr(name) + _NO_TAGS
                       for tid, name in sorted(g.deleting.items(), key=lambda kv: kv[1])]))
    return out


def records_between(before: Mapping[bytes, bytes], after: Mapping[bytes, bytes]) -> list[tuple[bytes, bytes | None]]:
    """What to write to go from one set of a share group's records to the next: new or changed values in Kafka's
    writing order, then tombstones (a member's current assignment, target and metadata first; the group's epoch
    last)."""
    def kind(key: bytes) -> int:
        return WRITE_ORDER.index(_H.unpack_from(key)[0])

    writes = sorted((k for k, v in after.items() if before.get(k) != v), key=kind)
    gone = sorted((k for k in before if k not in after), key=kind, reverse=True)
    return [(k, after[k]) for k in writes] + [(k, None) for k in gone]


def _flex(raw: bytes) -> _FlexReader:
    r = _FlexReader(raw)
    version = r.int16()
    if version != 0:
        raise RecordFormatError(f"unsupported share group value version {version}")
    return r


def _read_topics(r: _FlexReader) -> dict[UUID, tuple[str, frozenset[int]]]:
    out = {}
    for _ in range(r.count()):
        tid, name = r.uuid(), r.cstr() or ""
        out[tid] = (name, frozenset(r.int32() for _ in range(r.count())))
        r.tags()
    return out


def share_group_of(group_id: str, values: Mapping[ConsumerKey, bytes], now: int = 0) -> ShareGroup | None:
    """The share group the loaded records describe (the last value of each key, tombstones dropped), or None when
    its ShareGroupMetadata record is gone."""
    meta = values.get(ConsumerKey(SG_METADATA, group_id, None))
    if meta is None:
        return None
    r = _flex(meta)
    g = ShareGroup(group_id, group_epoch=r.int32(), metadata_hash=r.int64())
    target_meta = values.get(ConsumerKey(SG_TARGET_METADATA, group_id, None))
    g.assignment_epoch = _flex(target_meta).int32() if target_meta is not None else 0
    state = values.get(ConsumerKey(SG_STATE_PARTITIONS, group_id, None))
    if state is not None:
        r = _flex(state)
        g.initializing = {t: (n, ps, now) for t, (n, ps) in _read_topics(r).items()}
        g.initialized = _read_topics(r)
        for _ in range(r.count()):
            tid, name = r.uuid(), r.cstr() or ""
            r.tags()
            g.deleting[tid] = name
    for key, raw in values.items():
        if key.member is None:
            continue
        if key.kind == SG_MEMBER:
            r = _flex(raw)
            m = g.members.setdefault(key.member, ShareMember(key.member))
            m.rack_id, m.client_id, m.client_host = r.cstr(), r.cstr() or "", r.cstr() or ""
            m.subscribed_topic_names = tuple(r.cstr() or "" for _ in range(r.count()))
        elif key.kind == SG_TARGET_MEMBER:
            g.target[key.member] = _flex(raw).partitions()
    for key, raw in values.items():
        if key.kind == SG_CURRENT and key.member in g.members:
            r = _flex(raw)
            m = g.members[key.member]
            m.member_epoch, m.previous_member_epoch = r.int32(), r.int32()
            r.int8()
            m.assigned = r.partitions()
    g.target = {mid: a for mid, a in g.target.items() if mid in g.members}
    return g
