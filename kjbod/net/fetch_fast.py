"""A replica fetcher's Fetch: its request encoded once and patched per fetch, its response read by a short path.

Strategy: a follower sends its leader the same request over and over, one per replicated batch, and from one to
the next only three fixed-width fields of each partition change: FetchOffset (int64), LastFetchedEpoch (int32)
and LogStartOffset (int64). So the generated codec (kjbod.protocol.generated.fetch_request) writes the request
once for a *shape* (version, replica, broker epoch, waits and sizes, the partitions and their leader epochs) and
the bytes are kept as a template; each later fetch of that shape packs its three fields per partition into the
template at the places the codec put them, found by looking for each partition's fixed block (Partition,
CurrentLeaderEpoch, FetchOffset, LastFetchedEpoch, LogStartOffset, PartitionMaxBytes, as the codec packs them) in
its bytes. The generated codec stays the only definition of the bytes: where a block is not found exactly where
expected (a schema change, a tagged field), every fetch is written by the codec instead. No dataclass is built
per fetch: the request is a list of plain tuples until something asks for its fields (`as_request`).

The response (`decode_follower_response`): a caught-up follower's answer is one topic, one partition, no error, no
tagged field, no aborted transaction list, and a batch or two. Such a frame is read here straight into the
generated classes, with the partition's absent tagged structs (DivergingEpoch, CurrentLeader, SnapshotId) one
shared default each instead of three new objects per partition: the fetcher only reads them. Anything else (a tagged field anywhere, an aborted transaction list, a
varint of more than one byte where a count goes, bytes left over) goes to the generated decoder, which stays the
only judge of a frame that is not plain.

A fetcher with one partition in steady state needs less still (its short way, kjbod.broker.replication.fetcher):
`one_partition` reads that partition's HighWatermark, LogStartOffset and records from such a frame with one
unpack and no message, and `Template.again` gives the next fetch's bytes of the shape last written.
"""

from __future__ import annotations

import struct
from typing import Any

from kjbod.net.correlator import decode_response
from kjbod.protocol.generated.fetch_request import FetchPartition, FetchRequest, FetchTopic, ReplicaState
from kjbod.protocol.generated.fetch_response import (
    EpochEndOffset,
    FetchableTopicResponse,
    FetchResponse,
    LeaderIdAndEpoch,
    PartitionData,
    SnapshotId,
)
from kjbod.protocol.runtime import ZERO_UUID, DecodeError, read_compact_records, uuid_from_bytes

# (name, topic id, partition, current leader epoch, fetch offset, last fetched epoch, log start offset)
Entry = tuple[str, Any, int, int, int, int, int]

_BLOCK = struct.Struct(">iiqiqi")  # a FetchPartition's fixed fields, as the codec packs them from v12 on
_FIELDS = struct.Struct(">qiq")  # FetchOffset, LastFetchedEpoch, LogStartOffset, together in that block
_FIELDS_AT = 8  # where they start in the block
MIN_VERSION = 12  # LastFetchedEpoch (and the flexible versions) from v12


class FollowerFetchRequest:
    """One fetch of a replica fetcher (see the module docstring); what ClientConnection.send_to encodes, like a
    generated message (`encode_into(out, version)`). `template` is the fetcher's, kept across fetches."""

    __slots__ = ("replica_id", "replica_epoch", "max_wait_ms", "min_bytes", "max_bytes", "partition_max_bytes",
                 "entries", "template")

    def __init__(self, replica_id: int, replica_epoch: int, max_wait_ms: int, min_bytes: int, max_bytes: int,
                 partition_max_bytes: int, entries: list[Entry], template: Template) -> None:
        self.replica_id = replica_id
        self.replica_epoch = replica_epoch
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.partition_max_bytes = partition_max_bytes
        self.entries = entries
        self.template = template

    @property
    def first_offset(self) -> int:
        return self.entries[0][4]

    @property
    def topics(self) -> list[FetchTopic]:
        """The request's topics as the generated message's, with both the names and the ids (tests, logs)."""
        return self._topics(True, True)

    def as_request(self, version: int) -> FetchRequest:
        """The generated message with these fields at `version` (the codec's input for a new shape)."""
        me, epoch = self.replica_id, self.replica_epoch
        return FetchRequest(
            replica_id=me if version < 15 else -1,
            replica_state=ReplicaState(replica_id=me, replica_epoch=epoch) if version >= 15 else ReplicaState(),
            max_wait_ms=self.max_wait_ms, min_bytes=self.min_bytes, max_bytes=self.max_bytes,
            isolation_level=0, session_id=0, session_epoch=-1, topics=self._topics(version < 13, version >= 13))

    def _topics(self, names: bool, ids: bool) -> list[FetchTopic]:
        topics: dict[str, FetchTopic] = {}
        for name, topic_id, partition, leader_epoch, offset, last_epoch, log_start in self.entries:
            t = topics.get(name)
            if t is None:
                t = topics[name] = FetchTopic(topic=name if names else "", topic_id=topic_id if ids else ZERO_UUID)
            t.partitions.append(FetchPartition(
                partition=partition, current_leader_epoch=leader_epoch, fetch_offset=offset,
                last_fetched_epoch=last_epoch, log_start_offset=log_start,
                partition_max_bytes=self.partition_max_bytes))
        return list(topics.values())

    def encode_into(self, out: list[Any], version: int) -> None:
        self.template.encode_into(self, out, version)


class Template:
    """The bytes of the last shape encoded and where each partition's changing fields are in them."""

    __slots__ = ("shape", "body", "places", "encoded", "patched")

    def __init__(self) -> None:
        self.shape: tuple[Any, ...] | None = None
        self.body = bytearray()
        self.places: list[int] | None = None  # None: the codec writes every fetch of this shape
        self.encoded = 0  # fetches written by the codec (a new shape), for tests
        self.patched = 0  # fetches written from the template

    def encode_into(self, request: FollowerFetchRequest, out: list[Any], version: int) -> None:
        entries = request.entries
        shape = (version, request.replica_id, request.replica_epoch, request.max_wait_ms, request.min_bytes,
                 request.max_bytes, request.partition_max_bytes,
                 tuple((e[0], e[1], e[2], e[3]) for e in entries))
        if shape == self.shape and self.places is not None:
            body = self.body
            pack_into = _FIELDS.pack_into
            for at, e in zip(self.places, entries, strict=True):
                pack_into(body, at, e[4], e[5], e[6])
            self.patched += 1
            out.append(bytes(body))
            return
        parts: list[Any] = []
        request.as_request(version).encode_into(parts, version)
        body = bytearray().join(parts)
        self.encoded += 1
        self.shape, self.body, self.places = shape, body, _places(body, entries, request.partition_max_bytes)
        out.append(bytes(body))

    def again(self, shape: tuple[Any, ...], offset: int, last_epoch: int, log_start: int) -> bytes | None:
        """The body of the next fetch of a one-partition `shape` (the very object the template holds: nothing
        re-encoded since the caller took it) with that partition's three fields patched, as `encode_into` would
        write it; None when the template has no such fetch (another shape, or the codec writes this one)."""
        places = self.places
        if shape is not self.shape or places is None or len(places) != 1:
            return None
        body = self.body
        _FIELDS.pack_into(body, places[0], offset, last_epoch, log_start)
        self.patched += 1
        return bytes(body)


def _places(body: bytearray, entries: list[Entry], partition_max_bytes: int) -> list[int] | None:
    """Where each entry's FetchOffset is in `body`, its blocks in order and none of them found twice; None when
    they are not all there so."""
    places = []
    start = 0
    for _name, _topic_id, partition, leader_epoch, offset, last_epoch, log_start in entries:
        block = _BLOCK.pack(partition, leader_epoch, offset, last_epoch, log_start, partition_max_bytes)
        at = body.find(block, start)
        if at < 0 or body.find(block, at + 1) >= 0:
            return None
        places.append(at + _FIELDS_AT)
        start = at + len(block)
    return places


# ----------------------------------------------------------------------------------------------- the response

FETCH = 1
_TOP = struct.Struct(">ihi")  # ThrottleTimeMs, ErrorCode, SessionId
_PART = struct.Struct(">ihqqq")  # PartitionIndex, ErrorCode, HighWatermark, LastStableOffset, LogStartOffset
_I32 = struct.Struct(">i")
_NO_DIVERGENCE = EpochEndOffset()
_NO_LEADER = LeaderIdAndEpoch()
_NO_SNAPSHOT = SnapshotId()
_ID = struct.Struct(">16s")


# A one-partition answer from v13 on (topics by id), from the correlation id to the records' length: header tags,
# ThrottleTimeMs, ErrorCode, SessionId, the topic count, TopicId, the partition count, PartitionIndex, ErrorCode,
# HighWatermark, LastStableOffset, LogStartOffset, AbortedTransactions (null: 0), PreferredReadReplica.
_ONE = struct.Struct(">iBihiB16sBihqqqBi")
ONE_VERSIONS = range(13, 19)  # where that layout holds (the generated codec's versions from 13 on; v18 answers as v17)


def one_partition(buf: bytes, version: int, topic_id: bytes, partition: int) -> tuple[int, int, Any] | None:
    """A follower's commonest answer read for what the fetcher applies, with no message built: (HighWatermark,
    LogStartOffset, the records: a view into `buf`, or None) when `buf` (a response frame, header included) is
    one topic, `topic_id` (its 16 bytes), one partition, `partition`, with no error anywhere, no tagged field
    and no aborted transaction list, and nothing after it; None for anything else, which the general way
    (decode_follower_response) then reads. Records longer than a two-byte varint says (16 KiB) go that way too."""
    if version not in ONE_VERSIONS or len(buf) < 72:
        return None
    (_corr, tags, _throttle, code, _session, topics, tid, parts, index, error, hw, _lso, log_start, aborted,
     _preferred) = _ONE.unpack_from(buf, 0)
    if (tags or code or topics != 2 or tid != topic_id or parts != 2 or index != partition or error
            or aborted):
        return None
    n = buf[68]
    pos = 69
    if n >= 0x80:
        high = buf[69]
        if high >= 0x80:
            return None
        n = (n & 0x7F) | high << 7
        pos = 70
    end = pos + n - 1 if n else pos
    if end + 3 != len(buf) or buf[end] or buf[end + 1] or buf[end + 2]:  # the three levels' tagged fields
        return None
    return hw, log_start, memoryview(buf)[pos:end] if n else None


def decode_follower_response(frame: bytes, version: int, host: str, port: int) -> FetchResponse:
    """A Fetch response frame (header included) at `version` (12+), as correlator.decode_response reads it: by
    the short path when it is plain (see the module docstring), else by the generated decoder."""
    try:
        fast = _plain(frame, version)
    except (IndexError, ValueError, struct.error, DecodeError):  # the generated decoder says what is wrong
        fast = None
    return fast if fast is not None else decode_response(frame, FETCH, version, host, port)


def _plain(buf: bytes, version: int) -> FetchResponse | None:
    if version < MIN_VERSION or buf[4]:  # the response header's tagged fields
        return None
    throttle, code, session = _TOP.unpack_from(buf, 5)
    pos = 15
    n_topics = buf[pos] - 1
    if n_topics < 0 or n_topics > 0x7E:
        return None
    pos += 1
    topics = []
    by_name = version < 13
    for _ in range(n_topics):
        if by_name:
            n = buf[pos] - 1
            if n < 0 or n > 0x7E:
                return None
            name = buf[pos + 1:pos + 1 + n].decode("utf-8")
            pos += 1 + n
            topic_id = ZERO_UUID
        else:
            topic_id = uuid_from_bytes(_ID.unpack_from(buf, pos)[0])
            name = ""
            pos += 16
        n_parts = buf[pos] - 1
        if n_parts < 0 or n_parts > 0x7E:
            return None
        pos += 1
        parts = []
        for _ in range(n_parts):
            index, error, hw, lso, log_start = _PART.unpack_from(buf, pos)
            pos += 30
            if buf[pos]:  # AbortedTransactions: only null (a read_uncommitted fetch's) is plain
                return None
            (preferred,) = _I32.unpack_from(buf, pos + 1)
            records, pos = read_compact_records(buf, pos + 5)
            if buf[pos]:  # the partition's tagged fields (DivergingEpoch, CurrentLeader, SnapshotId)
                return None
            pos += 1
            parts.append(PartitionData(index, error, hw, lso, log_start, _NO_DIVERGENCE, _NO_LEADER, _NO_SNAPSHOT,
                                       None, preferred, records))
        if buf[pos]:  # the topic's tagged fields
            return None
        pos += 1
        topics.append(FetchableTopicResponse(name, topic_id, parts))
    if buf[pos] or pos + 1 != len(buf):  # the response's tagged fields (NodeEndpoints), or bytes after it
        return None
    return FetchResponse(throttle, code, session, topics, [])
