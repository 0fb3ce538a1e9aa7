"""The consumer protocol's bytes inside classic JoinGroup and SyncGroup: what the coordinator reads and writes when a
group mixes classic and consumer-protocol members (KIP-848's online migration).

Layouts (non-flexible encoding: int16 version first; strings are an int16 length then UTF-8, arrays an int32 count,
bytes an int32 length, -1 for null):

  ConsumerProtocolSubscription  v0: topics [string], user data (nullable bytes)
                                v1+: owned partitions [topic (string), partitions [int32]]
                                v2+: generation id (int32)   v3+: rack id (nullable string)
  ConsumerProtocolAssignment    v0-v3: assigned partitions [topic (string), partitions [int32]],
                                       user data (nullable bytes)

A reader takes any version from 0 (fields of later versions it does not know are left unread, as Kafka's
readers do for forward compatibility); the assignment is written in the version of the member's subscription,
at most 3, as Kafka writes it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

_H = struct.Struct(">h")
_I = struct.Struct(">i")
MAX_VERSION = 3


class EmbeddedProtocolError(ValueError):
    """Bytes that do not hold a consumer protocol subscription or assignment."""


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    owned: dict[str, frozenset[int]]
    rack_id: str | None = None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def _take(self, s: struct.Struct) -> int:
        if self.pos + s.size > len(self.data):
            raise EmbeddedProtocolError("truncated consumer protocol bytes")
        (v,) = s.unpack_from(self.data, self.pos)
        self.pos += s.size
        return v

    def at_end(self) -> bool:
        return self.pos >= len(self.data)

    def int16(self) -> int:
        return self._take(_H)

    def int32(self) -> int:
        return self._take(_I)

    def string(self) -> str | None:
        n = self.int16()
        if n < 0:
            return None
        if self.pos + n > len(self.data):
            raise EmbeddedProtocolError("truncated string in consumer protocol bytes")
        try:
            s = bytes(self.data[self.pos:self.pos + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise EmbeddedProtocolError("a string that is not UTF-8 in consumer protocol bytes") from None
        self.pos += n
        return s

    def skip_bytes(self) -> None:
        n = self.int32()
        if n > 0:
            if self.pos + n > len(self.data):
                raise EmbeddedProtocolError("truncated bytes in consumer protocol bytes")
            self.pos += n

    def count(self) -> int:
        n = self.int32()
        if n > len(self.data):
            raise EmbeddedProtocolError("bad array length in consumer protocol bytes")
        return max(n, 0)

    def partitions(self) -> dict[str, frozenset[int]]:
        out: dict[str, frozenset[int]] = {}
        for _ in range(self.count()):
            topic = self.string() or ""
            out[topic] = out.get(topic, frozenset()) | frozenset(self.int32() for _ in range(self.count()))
        return out


def read_version(data: bytes) -> int:
    """The version a subscription's bytes are in (what the assignment is written back in), at most 3."""
    if len(data) < 2:
        raise EmbeddedProtocolError("consumer protocol bytes without a version")
    version = _H.unpack_from(data)[0]
    if version < 0:
        raise EmbeddedProtocolError(f"consumer protocol version {version}")
    return min(version, MAX_VERSION)


def read_subscription(data: bytes) -> Subscription:
    r = _Reader(data)
    version = r.int16()
    if version < 0:
        raise EmbeddedProtocolError(f"consumer protocol version {version}")
    topics = tuple(r.string() or "" for _ in range(r.count()))
    r.skip_bytes()
    owned: dict[str, frozenset[int]] = {}
    rack = None
    if version >= 1 and not r.at_end():
        owned = r.partitions()
    if version >= 2 and not r.at_end():
        r.int32()
    if version >= 3 and not r.at_end():
        rack = r.string()
    return Subscription(version, topics, owned, rack)


def read_assignment(data: bytes) -> dict[str, frozenset[int]]:
    """The partitions of an assignment; empty bytes (a member not yet given one) assign nothing."""
    if not data:
        return {}
    r = _Reader(data)
    if r.int16() < 0:
        raise EmbeddedProtocolError("negative consumer protocol version")
    return r.partitions()


def _str(s: str) -> bytes:
    raw = s.encode("utf-8")
    return _H.pack(len(raw)) + raw


def write_assignment(partitions: Iterable[tuple[str, Iterable[int]]], version: int = 0) -> bytes:
    """A ConsumerProtocolAssignment without user data."""
    items = [(t, sorted(ps)) for t, ps in sorted(partitions, key=lambda kv: kv[0]) if ps]
    out = [_H.pack(min(max(version, 0), MAX_VERSION)), _I.pack(len(items))]
    for topic, ps in items:
        out += [_str(topic), _I.pack(len(ps)), *(_I.pack(p) for p in ps)]
    out.append(_I.pack(-1))
    return b"".join(out)
