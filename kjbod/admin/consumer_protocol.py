"""The consumer protocol's assignment bytes (ConsumerProtocolAssignment), as a consumer group's leader writes
them into SyncGroup and DescribeGroups hands them back: what the admin client decodes to show a member's
partitions.  Sans-IO: bytes in, tuples out.

Layout, every version (later versions only add fields after these, which are not read here):

    int16 version
    int32 topic count, then per topic: int16 name length + UTF-8 name, int32 partition count + int32 partitions
    int32 user data length (-1: null) + bytes
"""

from __future__ import annotations

import struct

__all__ = ["decode_assignment", "encode_assignment"]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def decode_assignment(data: bytes) -> tuple[tuple[str, int], ...]:
    """(topic, partition) pairs in the order written; ValueError when the bytes are not an assignment."""
    try:
        pos = 2  # the version: every version starts with the same fields
        (topics,) = _I32.unpack_from(data, pos)
        pos += 4
        if topics < 0:
            raise ValueError("negative topic count")
        out: list[tuple[str, int]] = []
        for _ in range(topics):
            (n,) = _I16.unpack_from(data, pos)
            pos += 2
            if n < 0 or pos + n > len(data):
                raise ValueError("bad topic name length")
            name = data[pos:pos + n].decode("utf-8")
            pos += n
            (count,) = _I32.unpack_from(data, pos)
            pos += 4
            if count < 0 or pos + 4 * count > len(data):
                raise ValueError("bad partition count")
            out.extend((name, p) for p in struct.unpack_from(f">{count}i", data, pos))
            pos += 4 * count
        return tuple(out)
    except (struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"not a consumer protocol assignment: {e}") from None


def encode_assignment(partitions: list[tuple[str, int]], version: int = 0) -> bytes:
    """Version-0 style bytes for `partitions` (for tests and tools that hand-make a group)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    out = bytearray(_I16.pack(version) + _I32.pack(len(by_topic)))
    for topic, parts in by_topic.items():
        name = topic.encode("utf-8")
        out += _I16.pack(len(name)) + name + _I32.pack(len(parts)) + struct.pack(f">{len(parts)}i", *parts)
    out += _I32.pack(-1)
    return bytes(out)
