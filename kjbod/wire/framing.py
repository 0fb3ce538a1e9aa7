"""Kafka's size-prefixed framing, sans-IO.

Every Kafka request and response travels as a 4-byte big-endian signed size followed by that many bytes. This module
turns a stream of received chunks into complete frames and nothing else: it never touches a socket, so the asyncio
connection (kjbod.server.connection), tests and fuzzers all drive the same code by calling `feed()` and
`next_frame()`.

Strategy:

* The receive buffer is a deque of the chunks as they arrived plus a read offset into the first one. Nothing is
  concatenated except the bytes of one frame that happens to straddle chunks, so a read holding many small
  pipelined frames costs one slice per frame, and a large frame arriving in many reads is joined once, when complete.
* When a frame lies whole inside one chunk it is sliced out of it; when it is exactly the chunk it is returned as is.
* `next_frames()` returns every complete frame at once, splitting a chunk that holds many frames in one tight loop
  (the per-request cost of a pipelined read); `unread()` gives back frames the caller could not handle yet (it
  paused), so they come out first next time.
* The size field is checked against the limit (`socket.request.max.bytes`) the moment its 4 bytes are available,
  before any byte of the body is buffered, so a peer claiming 2 GiB costs us 4 bytes, not 2 GiB. A negative size is
  rejected the same way. Both errors leave the decoder unusable: the stream can no longer be resynchronised, and the
  caller is expected to close the connection.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterator

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "SIZE_PREFIX_LENGTH",
    "FrameDecoder",
    "FrameError",
    "FrameTooLarge",
    "InvalidFrameSize",
    "encode_frame_size",
]

# Kafka's default socket.request.max.bytes (100 MiB).
DEFAULT_MAX_FRAME_SIZE = 104_857_600
SIZE_PREFIX_LENGTH = 4
_MAX_INT32 = 0x7FFF_FFFF

_SIZE = struct.Struct(">i")
_unpack_size_from = _SIZE.unpack_from
_pack_size = _SIZE.pack


class FrameError(Exception):
    """The byte stream cannot be split into frames any more; the connection must be closed."""


class FrameTooLarge(FrameError):
    """A size prefix larger than the configured limit (Kafka: `socket.request.max.bytes`)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame size {size} is larger than the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class InvalidFrameSize(FrameError):
    """A negative size prefix."""

    def __init__(self, size: int) -> None:
        super().__init__(f"invalid frame size {size}")
        self.size = size


def encode_frame_size(n: int) -> bytes:
    """The 4-byte size prefix for a frame body of `n` bytes."""
    if n < 0 or n > _MAX_INT32:
        raise ValueError(f"frame size {n} does not fit a non-negative int32")
    return _pack_size(n)


class FrameDecoder:
    """Splits received bytes into frame bodies (the size prefix removed).

    Usage: `feed(data)` with whatever the transport delivered, then call `next_frame()` until it returns None (or
    iterate `frames()`). Either call raises `FrameTooLarge` / `InvalidFrameSize` as soon as a bad size prefix is
    complete; after that the decoder refuses further use.
    """

    __slots__ = ("_broken", "_buffered", "_chunks", "_frame_size", "_max_size", "_offset", "_ready")

    def __init__(self, max_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_size < 0:
            raise ValueError("max_size must be >= 0")
        self._max_size = max_size
        self._chunks: deque[bytes] = deque()
        # Read position inside self._chunks[0]; the bytes before it are consumed.
        self._offset = 0
        # Unconsumed bytes over all chunks.
        self._buffered = 0
        # Body size of the frame whose prefix has been consumed, or -1 while the next prefix is still unread.
        self._frame_size = -1
        self._broken: FrameError | None = None
        # Complete frames given back with unread(), returned before anything else.
        self._ready: list[bytes] = []

    @property
    def max_size(self) -> int:
        return self._max_size

    @max_size.setter
    def max_size(self, value: int) -> None:
        """A new limit for the frames whose size prefix is not read yet (a SASL connection's limit rises once the
        client has authenticated)."""
        if value < 0:
            raise ValueError("max_size must be >= 0")
        self._max_size = value

    @property
    def buffered(self) -> int:
        """Bytes held for frames not yet returned (a size prefix already read and checked is not counted)."""
        return self._buffered

    @property
    def idle(self) -> bool:
        """True when nothing is buffered, no size prefix is half-read and no error is pending: the next bytes
        start a new frame, so a caller may split them itself (kjbod.server.connection's fast path does)."""
        return self._buffered == 0 and self._frame_size < 0 and self._broken is None and not self._ready

    def feed(self, data: bytes) -> None:
        """Append received bytes. Checks the next size prefix at once if it has become complete."""
        if self._broken is not None:
            raise self._broken
        if not data:
            return
        self._chunks.append(data)
        self._buffered += len(data)
        # Checking here (not only when frames are taken) refuses an oversized prefix even from a caller that keeps
        # feeding without draining; it costs one comparison per read, not per frame.
        # (Not while frames given back with `unread` wait: `_buffered` counts their bytes too, not only the chunks'.)
        if self._frame_size < 0 and not self._ready and self._buffered >= SIZE_PREFIX_LENGTH:
            first = self._chunks[0]
            if len(first) - self._offset >= SIZE_PREFIX_LENGTH:
                (size,) = _unpack_size_from(first, self._offset)
                if size < 0 or size > self._max_size:
                    self._read_prefix()  # consumes the prefix and raises
            else:
                self._read_prefix()  # the prefix straddles chunks: read it now

    def detach_partial(self, min_size: int) -> tuple[bytearray, int] | None:
        """Hand over an incomplete frame of at least `min_size` bytes so the caller can receive the rest of it
        straight into a buffer of its own: returns (a buffer of the frame's size holding the bytes received so
        far, how many that is) and forgets them, leaving the decoder idle.  None (nothing changes) unless the
        decoder holds exactly one incomplete frame, that big, and nothing else."""
        if self._broken is not None or self._ready:
            return None
        if self._frame_size < 0:
            if self._buffered < SIZE_PREFIX_LENGTH:
                return None
            first = self._chunks[0]
            if len(first) - self._offset >= SIZE_PREFIX_LENGTH:
                (size,) = _unpack_size_from(first, self._offset)
                if size < min_size or size > self._max_size or self._buffered - SIZE_PREFIX_LENGTH >= size:
                    return None
            self._read_prefix()  # raises (and breaks the decoder) on a bad size, as next_frame would
        size = self._frame_size
        if size < min_size or self._buffered >= size:
            return None
        buf = bytearray(size)
        filled = 0
        offset = self._offset
        for chunk in self._chunks:
            n = len(chunk) - offset
            buf[filled : filled + n] = memoryview(chunk)[offset:]
            filled += n
            offset = 0
        self._chunks.clear()
        self._offset = 0
        self._buffered = 0
        self._frame_size = -1
        return buf, filled

    def unread(self, frames: list[bytes]) -> None:
        """Give back frames taken but not handled (in their order); they are returned first next time."""
        if frames:
            self._ready[:0] = frames
            self._buffered += sum(map(len, frames))

    def next_frames(self) -> list[bytes]:
        """Every complete frame buffered now, in order (an empty list until more bytes arrive).

        Raises like `next_frame` on a bad size prefix, but only once the frames before it have been returned.
        """
        if self._ready:
            out, self._ready = self._ready, []
            self._buffered -= sum(map(len, out))
            return out
        if self._broken is not None:
            raise self._broken
        out = []
        # Finish a frame whose prefix is read, or one that straddles chunks, the general way.
        while self._frame_size >= 0 or len(self._chunks) > 1:
            frame = self.next_frame()
            if frame is None:
                return out
            out.append(frame)
        if not self._chunks:
            return out
        # One chunk left: split it in a tight loop.
        chunk = self._chunks[0]
        start = pos = self._offset
        end_of_chunk = len(chunk)
        limit = self._max_size
        while end_of_chunk - pos >= SIZE_PREFIX_LENGTH:
            (size,) = _unpack_size_from(chunk, pos)
            if size < 0 or size > limit:
                if not out and pos == start:
                    self._read_prefix()  # raises
                break  # the next call raises, after the caller has these frames
            end = pos + SIZE_PREFIX_LENGTH + size
            if end > end_of_chunk:
                break
            out.append(chunk[pos + SIZE_PREFIX_LENGTH : end])
            pos = end
        self._buffered -= pos - start
        if pos == end_of_chunk:
            self._chunks.popleft()
            self._offset = 0
        else:
            self._offset = pos
        return out

    def next_frame(self) -> bytes | None:
        """The next complete frame body, or None until more bytes arrive."""
        if self._ready:
            frame = self._ready.pop(0)
            self._buffered -= len(frame)
            return frame
        if self._frame_size < 0:
            if self._broken is not None:
                raise self._broken
            if self._buffered < SIZE_PREFIX_LENGTH:
                return None
            self._read_prefix()
        size = self._frame_size
        if self._buffered < size:
            return None
        self._frame_size = -1
        return self._take(size)

    def frames(self) -> Iterator[bytes]:
        """Every complete frame currently buffered, in order."""
        while (frame := self.next_frame()) is not None:
            yield frame

    def _read_prefix(self) -> None:
        first = self._chunks[0]
        offset = self._offset
        if len(first) - offset >= SIZE_PREFIX_LENGTH:
            (size,) = _unpack_size_from(first, offset)
            offset += SIZE_PREFIX_LENGTH
            self._buffered -= SIZE_PREFIX_LENGTH
            if offset == len(first):
                self._chunks.popleft()
                offset = 0
            self._offset = offset
        else:
            (size,) = _unpack_size_from(self._take(SIZE_PREFIX_LENGTH))
        if size < 0:
            self._broken = InvalidFrameSize(size)
            raise self._broken
        if size > self._max_size:
            self._broken = FrameTooLarge(size, self._max_size)
            raise self._broken
        self._frame_size = size

    def _take(self, n: int) -> bytes:
        """Remove and return the next `n` buffered bytes (the caller checked that they are there)."""
        if n == 0:
            return b""
        self._buffered -= n
        first = self._chunks[0]
        offset = self._offset
        end = offset + n
        available = len(first)
        if end < available:
            self._offset = end
            return first[offset:end]
        if end == available:
            self._chunks.popleft()
            self._offset = 0
            return first if offset == 0 else first[offset:]
        # The frame straddles chunks: gather exactly its pieces and join them once.
        chunks = self._chunks
        chunks.popleft()
        pieces = [first[offset:] if offset else first]
        remaining = n - (available - offset)
        while remaining:
            chunk = chunks[0]
            size = len(chunk)
            if size <= remaining:
                pieces.append(chunk)
                chunks.popleft()
                remaining -= size
            else:
                pieces.append(chunk[:remaining])
                self._offset = remaining
                return b"".join(pieces)
        self._offset = 0
        return b"".join(pieces)
