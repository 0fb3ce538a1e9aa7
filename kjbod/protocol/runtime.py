"""Primitives the generated codecs call: varints, strings, bytes, arrays, records and tagged fields.

Strategy: the generated code does the common, fixed-width work inline with precompiled `struct.Struct`
objects; everything variable-length goes through the small functions here, so that the rules for classic
(int16/int32 lengths) and compact (unsigned varint N+1) encodings live in one place.  Readers take
`(buf, pos)` and return `(value, new_pos)`; writers append `bytes` parts to a list that is joined once at the
end (or handed to the transport as is, when a `records` value is a file region).

Every malformed input surfaces as `DecodeError`; values that cannot be written surface as `EncodeError`.
"""

from __future__ import annotations

import gc
import struct
from uuid import UUID

__all__ = ["DecodeError", "EncodeError"]


class DecodeError(ValueError):
    """Bytes that are not a valid encoding of the expected message (the connection should be closed)."""


class EncodeError(ValueError):
    """A message value that cannot be written at the requested version."""


I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
U32 = struct.Struct(">I")
I64 = struct.Struct(">q")

ZERO_UUID = UUID(int=0)
EMPTY: tuple = ()

# Single-byte unsigned varints, precomputed: most compact lengths and counts are below 128.
UV1 = tuple(bytes((i,)) for i in range(128))
NULL_I16 = b"\xff\xff"
NULL_I32 = b"\xff\xff\xff\xff"
ZERO_BYTE = b"\x00"


# Decoding a large message allocates tens of thousands of objects that all survive; the cyclic garbage
# collector would scan them repeatedly while they are being built (about a third of the decode time for a
# 10,000-partition DescribeLogDirs response).  None of them can form a cycle, so collection is paused for the
# duration of a large decode and resumed right after.
GC_PAUSE_BYTES = 64 * 1024


def gc_pause() -> bool:
    """Disables the cyclic GC if it is enabled; returns whether the caller must resume it."""
    if gc.isenabled():
        gc.disable()
        return True
    return False


def gc_resume() -> None:
    gc.enable()


# ---------------------------------------------------------------------------------------------- varints

def read_uvarint(buf, pos: int) -> tuple[int, int]:
    """Unsigned varint of at most 5 bytes (32 bits), as Kafka's readUnsignedVarint."""
    value = 0
    shift = 0
    while True:
        try:
            b = buf[pos]
        except IndexError:
            raise DecodeError("truncated unsigned varint") from None
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            if value > 0xFFFFFFFF:
                # A fifth byte above 0x0f sets bits past 32: Java would silently drop them (and read another
                # tag or length than was written); we refuse, so that what we decode can be written back.
                raise DecodeError(f"unsigned varint {value} does not fit in 32 bits")
            return value, pos
        shift += 7
        if shift > 28:
            raise DecodeError("unsigned varint is longer than 5 bytes")


def write_uvarint(n: int) -> bytes:
    if n < 0 or n > 0xFFFFFFFF:
        raise EncodeError(f"unsigned varint out of range: {n}")
    if n < 0x80:
        return UV1[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_varint(buf, pos: int) -> tuple[int, int]:
    """Zigzag-encoded signed 32-bit varint (used inside record batches)."""
    v, pos = read_uvarint(buf, pos)
    return (v >> 1) ^ -(v & 1), pos


def write_varint(n: int) -> bytes:
    if not -(1 << 31) <= n < (1 << 31):
        raise EncodeError(f"varint out of range: {n}")
    return write_uvarint(((n << 1) ^ (n >> 31)) & 0xFFFFFFFF)


def read_varlong(buf, pos: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        try:
            b = buf[pos]
        except IndexError:
            raise DecodeError("truncated varlong") from None
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            raise DecodeError("varlong is longer than 10 bytes")
    return (value >> 1) ^ -(value & 1), pos


def write_varlong(n: int) -> bytes:
    if not -(1 << 63) <= n < (1 << 63):
        raise EncodeError(f"varlong out of range: {n}")
    z = ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


# ---------------------------------------------------------------------------------------------- readers

def _take(buf, pos: int, n: int) -> tuple[int, int]:
    end = pos + n
    if end > len(buf):
        raise DecodeError(f"length {n} at byte {pos} runs past the end of the data ({len(buf)} bytes)")
    return pos, end


def _utf8(buf, start: int, end: int) -> str:
    try:
        return str(buf[start:end], "utf-8")
    except UnicodeDecodeError as e:
        raise DecodeError(f"invalid UTF-8 in string at byte {start}: {e.reason}") from None


def read_string(buf, pos: int) -> tuple[str, int]:
    (n,) = I16.unpack_from(buf, pos)
    if n < 0:
        raise DecodeError("non-nullable string was serialized as null")
    start, end = _take(buf, pos + 2, n)
    return _utf8(buf, start, end), end


def read_nullable_string(buf, pos: int) -> tuple[str | None, int]:
    (n,) = I16.unpack_from(buf, pos)
    if n < 0:
        if n != -1:
            raise DecodeError(f"invalid string length {n}")
        return None, pos + 2
    start, end = _take(buf, pos + 2, n)
    return _utf8(buf, start, end), end


def read_compact_string(buf, pos: int) -> tuple[str, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        raise DecodeError("non-nullable string was serialized as null")
    n -= 1
    if n > 0x7FFF:
        raise DecodeError(f"string length {n} is longer than the maximum 32767")
    start, end = _take(buf, pos, n)
    return _utf8(buf, start, end), end


def read_compact_nullable_string(buf, pos: int) -> tuple[str | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    n -= 1
    if n > 0x7FFF:
        raise DecodeError(f"string length {n} is longer than the maximum 32767")
    start, end = _take(buf, pos, n)
    return _utf8(buf, start, end), end


def read_bytes(buf, pos: int) -> tuple[bytes, int]:
    (n,) = I32.unpack_from(buf, pos)
    if n < 0:
        raise DecodeError("non-nullable bytes field was serialized as null")
    start, end = _take(buf, pos + 4, n)
    return bytes(buf[start:end]), end


def read_nullable_bytes(buf, pos: int) -> tuple[bytes | None, int]:
    (n,) = I32.unpack_from(buf, pos)
    if n < 0:
        if n != -1:
            raise DecodeError(f"invalid bytes length {n}")
        return None, pos + 4
    start, end = _take(buf, pos + 4, n)
    return bytes(buf[start:end]), end


def read_compact_bytes(buf, pos: int) -> tuple[bytes, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        raise DecodeError("non-nullable bytes field was serialized as null")
    start, end = _take(buf, pos, n - 1)
    return bytes(buf[start:end]), end


def read_compact_nullable_bytes(buf, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    start, end = _take(buf, pos, n - 1)
    return bytes(buf[start:end]), end


def _records_view(buf, start: int, end: int):
    """Record batches are handed on as a view into the request (no copy): a 1 MiB Produce would otherwise be
    copied once more on its way to the log.  Equal to the same bytes; `bytes(view)` gives a copy when needed."""
    return memoryview(buf)[start:end]


def read_records(buf, pos: int):
    (n,) = I32.unpack_from(buf, pos)
    if n < 0:
        if n != -1:
            raise DecodeError(f"invalid records length {n}")
        return None, pos + 4
    start, end = _take(buf, pos + 4, n)
    return _records_view(buf, start, end), end


def read_compact_records(buf, pos: int):
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    start, end = _take(buf, pos, n - 1)
    return _records_view(buf, start, end), end


def read_uuid(buf, pos: int) -> tuple[UUID, int]:
    start, end = _take(buf, pos, 16)
    return UUID(bytes=bytes(buf[start:end])), end


def uuid_from_bytes(b: bytes) -> UUID:
    """The UUID of 16 bytes, the same object for the same bytes while it is kept: a topic id comes in every
    Fetch and Produce of a topic, and building a UUID (a check and an int conversion in Python) cost a few us of
    each (UUIDs are immutable, so sharing one is safe)."""
    u = _UUIDS.get(b)
    if u is None:
        if len(_UUIDS) >= _UUIDS_KEPT:
            _UUIDS.clear()
        u = _UUIDS[bytes(b)] = UUID(bytes=bytes(b))
    return u


_UUIDS: dict[bytes, UUID] = {}
_UUIDS_KEPT = 4096


def read_array_len(buf, pos: int, nullable: bool) -> tuple[int, int]:
    """Classic int32 array length; -1 = null. Returns (-1, pos) for null."""
    (n,) = I32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        if n != -1 or not nullable:
            raise DecodeError("non-nullable array was serialized as null" if n == -1 else f"invalid array length {n}")
        return -1, pos
    if n > len(buf) - pos:
        raise DecodeError(f"array length {n} is larger than the remaining {len(buf) - pos} bytes")
    return n, pos


def read_compact_array_len(buf, pos: int, nullable: bool) -> tuple[int, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        if not nullable:
            raise DecodeError("non-nullable array was serialized as null")
        return -1, pos
    n -= 1
    if n > len(buf) - pos:
        raise DecodeError(f"array length {n} is larger than the remaining {len(buf) - pos} bytes")
    return n, pos


_ARRAY_STRUCTS: dict[tuple[str, int], struct.Struct] = {}


def _array_struct(code: str, n: int) -> struct.Struct:
    s = _ARRAY_STRUCTS.get((code, n))
    if s is None:
        s = struct.Struct(f">{n}{code}")
        if len(_ARRAY_STRUCTS) < 512:
            _ARRAY_STRUCTS[(code, n)] = s
    return s


def read_fixed_array(buf, pos: int, n: int, code: str, size: int) -> tuple[list, int]:
    """n fixed-width elements in one unpack call (ints, bools, floats)."""
    end = pos + n * size
    if end > len(buf):
        raise DecodeError(f"array of {n} elements runs past the end of the data")
    return list(_array_struct(code, n).unpack_from(buf, pos)), end


def read_uuid_array(buf, pos: int, n: int) -> tuple[list, int]:
    end = pos + 16 * n
    if end > len(buf):
        raise DecodeError(f"array of {n} uuids runs past the end of the data")
    b = bytes(buf[pos:end])
    return [UUID(bytes=b[i:i + 16]) for i in range(0, 16 * n, 16)], end


def read_unknown_tag(buf, pos: int) -> tuple[int, int, int]:
    """Reads a tag header: returns (tag, value_start, value_end)."""
    tag, pos = read_uvarint(buf, pos)
    size, pos = read_uvarint(buf, pos)
    end = pos + size
    if end > len(buf):
        raise DecodeError(f"tagged field {tag} of {size} bytes runs past the end of the data")
    return tag, pos, end


def check_tag_end(pos: int, end: int, tag: int) -> None:
    if pos != end:
        raise DecodeError(f"tagged field {tag} declared a size that does not match its value")


# ---------------------------------------------------------------------------------------------- writers

def write_string(out: list, s: str) -> None:
    b = s.encode("utf-8")
    n = len(b)
    if n > 0x7FFF:
        raise EncodeError(f"string of {n} bytes is longer than the maximum 32767")
    out.append(I16.pack(n))
    out.append(b)


def write_nullable_string(out: list, s: str | None) -> None:
    if s is None:
        out.append(NULL_I16)
    else:
        write_string(out, s)


def write_compact_string(out: list, s: str) -> None:
    b = s.encode("utf-8")
    n = len(b) + 1
    if n > 0x8000:
        raise EncodeError(f"string of {n - 1} bytes is longer than the maximum 32767")
    out.append(UV1[n] if n < 0x80 else write_uvarint(n))
    out.append(b)


def write_compact_nullable_string(out: list, s: str | None) -> None:
    if s is None:
        out.append(ZERO_BYTE)
    else:
        write_compact_string(out, s)


def write_bytes(out: list, b) -> None:
    out.append(I32.pack(len(b)))
    out.append(bytes(b))


def write_nullable_bytes(out: list, b) -> None:
    if b is None:
        out.append(NULL_I32)
    else:
        write_bytes(out, b)


def write_compact_bytes(out: list, b) -> None:
    out.append(write_uvarint(len(b) + 1))
    out.append(bytes(b))


def write_compact_nullable_bytes(out: list, b) -> None:
    if b is None:
        out.append(ZERO_BYTE)
    else:
        write_compact_bytes(out, b)


def write_records(out: list, v, compact: bool) -> None:
    """A `records` value: None, a bytes-like object, a file region (anything with len()), or a list of those.

    File regions are appended as they are, so that the transport can send them without copying."""
    if v is None:
        out.append(ZERO_BYTE if compact else NULL_I32)
        return
    if isinstance(v, (bytes, bytearray, memoryview)):
        n = len(v)
        out.append(write_uvarint(n + 1) if compact else I32.pack(n))
        out.append(v if isinstance(v, bytes) else bytes(v))
        return
    if isinstance(v, (list, tuple)):
        n = sum(len(p) for p in v)
        out.append(write_uvarint(n + 1) if compact else I32.pack(n))
        out.extend(v)
        return
    n = len(v)
    out.append(write_uvarint(n + 1) if compact else I32.pack(n))
    out.append(v)


def write_array_len(out: list, n: int) -> None:
    out.append(I32.pack(n))


def write_compact_array_len(out: list, n: int) -> None:
    n += 1
    out.append(UV1[n] if n < 0x80 else write_uvarint(n))


def write_fixed_array(out: list, values, code: str) -> None:
    out.append(_array_struct(code, len(values)).pack(*values))


def write_uuid_array(out: list, values) -> None:
    out.append(b"".join([u.bytes for u in values]))


def write_tags(out: list, known: list, unknown) -> None:
    """Writes a tagged-field section: known (tag, bytes) pairs and preserved unknown ones, ascending by tag."""
    if unknown:
        tags = sorted(list(known) + list(unknown), key=lambda t: t[0])
    else:
        tags = known
    n = len(tags)
    out.append(UV1[n] if n < 0x80 else write_uvarint(n))
    for tag, value in tags:
        out.append(write_uvarint(tag))
        out.append(write_uvarint(len(value)))
        out.append(value)


def write_unknown_tags(out: list, unknown) -> None:
    write_tags(out, [], unknown)


def join_parts(parts: list) -> bytes:
    try:
        return b"".join(parts)
    except TypeError:
        raise EncodeError("the message holds file regions; use encode_into() and send the parts") from None
