"""FrameDecoder: whole streams, one byte at a time, random splits, and the size limit enforced before buffering."""

from __future__ import annotations

import random
import struct
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kjbod.wire.framing import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameDecoder,
    FrameTooLarge,
    InvalidFrameSize,
    encode_frame_size,
)


def framed(*bodies: bytes) -> bytes:
    return b"".join(struct.pack(">i", len(b)) + b for b in bodies)


def drain(decoder: FrameDecoder) -> list[bytes]:
    return list(decoder.frames())


BODIES = [b"", b"a", b"hello", bytes(range(256)) * 3, b"\x00\x01\x02\x03", b"x" * 70_000]


def test_encode_frame_size() -> None:
    assert encode_frame_size(0) == b"\x00\x00\x00\x00"
    assert encode_frame_size(0x01020304) == b"\x01\x02\x03\x04"
    assert encode_frame_size(2**31 - 1) == b"\x7f\xff\xff\xff"
    with pytest.raises(ValueError):
        encode_frame_size(-1)
    with pytest.raises(ValueError):
        encode_frame_size(2**31)


def test_many_frames_in_one_feed() -> None:
    decoder = FrameDecoder()
    decoder.feed(framed(*BODIES))
    assert drain(decoder) == BODIES
    assert decoder.next_frame() is None
    assert decoder.buffered == 0


def test_one_byte_at_a_time() -> None:
    stream = framed(*BODIES)
    decoder = FrameDecoder()
    got: list[bytes] = []
    for i in range(len(stream)):
        decoder.feed(stream[i : i + 1])
        got.extend(drain(decoder))
        # Nothing is lost and nothing piles up: everything not yet returned is held, apart from a size prefix that
        # has already been read and checked.
        assert 0 <= (i + 1 - sum(4 + len(b) for b in got)) - decoder.buffered <= 4
    assert got == BODIES


def test_split_at_every_position() -> None:
    stream = framed(b"first frame", b"", b"third")
    for cut in range(len(stream) + 1):
        decoder = FrameDecoder()
        decoder.feed(stream[:cut])
        got = drain(decoder)
        decoder.feed(stream[cut:])
        got += drain(decoder)
        assert got == [b"first frame", b"", b"third"], cut


def test_feed_without_draining_then_drain() -> None:
    # Frames can pile up (reading is paused while the handler catches up) and come out in order later.
    decoder = FrameDecoder()
    stream = framed(*BODIES)
    for i in range(0, len(stream), 7):
        decoder.feed(stream[i : i + 7])
    assert drain(decoder) == BODIES


def test_frame_exactly_one_chunk_is_not_copied() -> None:
    decoder = FrameDecoder()
    body = b"payload" * 10
    decoder.feed(struct.pack(">i", len(body)))
    decoder.feed(body)
    assert decoder.next_frame() is body


@given(
    bodies=st.lists(st.binary(max_size=300), max_size=20),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_random_splits(bodies: list[bytes], seed: int) -> None:
    stream = framed(*bodies)
    rng = random.Random(seed)
    decoder = FrameDecoder()
    got: list[bytes] = []
    pos = 0
    while pos < len(stream):
        step = rng.randint(1, 50)
        decoder.feed(stream[pos : pos + step])
        pos += step
        if rng.random() < 0.7:
            got += drain(decoder)
    got += drain(decoder)
    assert got == bodies
    assert decoder.buffered == 0


@given(
    bodies=st.lists(st.binary(max_size=300), max_size=20),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_next_frames_and_next_frame_agree_over_random_splits(bodies: list[bytes], seed: int) -> None:
    stream = framed(*bodies)
    rng = random.Random(seed)
    decoder = FrameDecoder()
    got: list[bytes] = []
    pos = 0
    while pos < len(stream):
        step = rng.randint(1, 80)
        decoder.feed(stream[pos : pos + step])
        pos += step
        choice = rng.random()
        if choice < 0.4:
            got += decoder.next_frames()
        elif choice < 0.6:
            got += drain(decoder)
        elif choice < 0.8:
            # Take a batch, hand back a tail of it (a paused caller), as the connection does.
            batch = decoder.next_frames()
            keep = rng.randint(0, len(batch))
            got += batch[:keep]
            decoder.unread(batch[keep:])
    got += decoder.next_frames()
    got += decoder.next_frames()
    assert got == bodies
    assert decoder.buffered == 0


def test_next_frames_splits_one_read_in_one_call() -> None:
    decoder = FrameDecoder()
    decoder.feed(framed(*BODIES) + b"\x00\x00")  # and the start of the next prefix
    assert decoder.next_frames() == BODIES
    assert decoder.next_frames() == []
    assert decoder.buffered == 2
    decoder.feed(b"\x00\x01x")
    assert decoder.next_frames() == [b"x"]


def test_unread_frames_come_first() -> None:
    decoder = FrameDecoder()
    decoder.feed(framed(b"a", b"b", b"c"))
    first = decoder.next_frames()
    decoder.unread(first[1:])
    assert decoder.buffered == 2
    decoder.feed(framed(b"d"))
    assert decoder.next_frame() == b"b"
    assert decoder.next_frames() == [b"c"]
    assert decoder.next_frames() == [b"d"]
    decoder.unread([b"x", b"y"])
    assert list(decoder.frames()) == [b"x", b"y"]
    assert decoder.buffered == 0


def test_next_frames_returns_good_frames_before_raising() -> None:
    decoder = FrameDecoder(max_size=100)
    decoder.feed(framed(b"one", b"two") + struct.pack(">i", 101) + b"junk")
    assert decoder.next_frames() == [b"one", b"two"]
    with pytest.raises(FrameTooLarge):
        decoder.next_frames()
    with pytest.raises(FrameTooLarge):
        decoder.next_frames()


def test_feed_checks_a_valid_prefix_without_consuming_it() -> None:
    decoder = FrameDecoder(max_size=100)
    decoder.feed(struct.pack(">i", 3) + b"ab")
    assert decoder.buffered == 6
    decoder.feed(b"c")
    assert decoder.next_frames() == [b"abc"]


def test_size_at_the_limit_is_accepted() -> None:
    decoder = FrameDecoder(max_size=10)
    decoder.feed(framed(b"0123456789"))
    assert decoder.next_frame() == b"0123456789"


def test_size_over_the_limit_raises_in_feed_before_any_body_is_buffered() -> None:
    decoder = FrameDecoder(max_size=10)
    with pytest.raises(FrameTooLarge) as info:
        decoder.feed(struct.pack(">i", 11))
    assert (info.value.size, info.value.limit) == (11, 10)
    assert decoder.buffered == 0
    # The stream cannot be resynchronised: the decoder stays broken.
    with pytest.raises(FrameTooLarge):
        decoder.feed(b"x")
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()


def test_prefix_split_across_chunks_is_checked_when_complete() -> None:
    decoder = FrameDecoder(max_size=100)
    decoder.feed(framed(b"ok"))
    decoder.feed(b"\x00\x00")
    assert decoder.next_frame() == b"ok"
    assert decoder.next_frame() is None
    with pytest.raises(FrameTooLarge):
        decoder.feed(b"\x10\x00")


def test_oversized_prefix_after_good_frames_raises_from_next_frame() -> None:
    decoder = FrameDecoder(max_size=100)
    decoder.feed(framed(b"one", b"two") + struct.pack(">i", 1000) + b"junk")
    assert decoder.next_frame() == b"one"
    assert decoder.next_frame() == b"two"
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()


def test_huge_claimed_size_allocates_nothing() -> None:
    decoder = FrameDecoder(DEFAULT_MAX_FRAME_SIZE)
    tracemalloc.start()
    try:
        with pytest.raises(FrameTooLarge):
            decoder.feed(b"\x7f\xff\xff\xff")  # 2 GiB - 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert decoder.buffered <= 4
    assert peak < 64 * 1024


def test_large_claimed_size_within_limit_buffers_only_what_arrived() -> None:
    decoder = FrameDecoder(DEFAULT_MAX_FRAME_SIZE)
    tracemalloc.start()
    try:
        decoder.feed(struct.pack(">i", DEFAULT_MAX_FRAME_SIZE))
        decoder.feed(b"x" * 100)
        assert decoder.next_frame() is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert decoder.buffered == 100
    assert peak < 64 * 1024


@pytest.mark.parametrize("prefix", [b"\xff\xff\xff\xff", b"\x80\x00\x00\x00"])
def test_negative_size(prefix: bytes) -> None:
    decoder = FrameDecoder()
    with pytest.raises(InvalidFrameSize) as info:
        decoder.feed(prefix + b"rest")
    assert info.value.size < 0
    with pytest.raises(InvalidFrameSize):
        decoder.next_frame()


def test_negative_size_fed_one_byte_at_a_time() -> None:
    decoder = FrameDecoder()
    for b in b"\xff\xff\xff":
        decoder.feed(bytes([b]))
        assert decoder.next_frame() is None
    with pytest.raises(InvalidFrameSize):
        decoder.feed(b"\xfe")


# ------------------------------------------------------------------------------------------ detach_partial


@pytest.mark.parametrize("cut", [1, 3, 4, 5, 1000, 99_999])
def test_detach_partial_hands_over_an_incomplete_big_frame(cut: int) -> None:
    big = bytes(random.Random(cut).randbytes(100_000))
    stream = framed(b"small") + framed(big)
    head = stream[: 9 + cut]
    decoder = FrameDecoder()
    for i in range(0, len(head), 7):  # many chunks, so a prefix can straddle them
        decoder.feed(head[i : i + 7])
    assert decoder.detach_partial(1000) is None  # a complete frame is still waiting
    assert decoder.next_frames() == [b"small"]
    detached = decoder.detach_partial(1000)
    if cut < 4:
        assert detached is None  # the size prefix itself is not complete yet
        return
    assert detached is not None
    buf, filled = detached
    assert (len(buf), filled) == (len(big), cut - 4)
    assert bytes(buf[:filled]) == big[:filled]
    assert decoder.idle and decoder.buffered == 0
    decoder.feed(framed(b"after"))
    assert decoder.next_frames() == [b"after"]


def test_detach_partial_leaves_small_and_complete_frames_alone() -> None:
    decoder = FrameDecoder()
    decoder.feed(framed(b"y" * 500)[:100])
    assert decoder.detach_partial(1000) is None  # too small to be worth a buffer of its own
    assert decoder.buffered == 100
    decoder.feed(framed(b"y" * 500)[100:])
    assert decoder.next_frames() == [b"y" * 500]
    decoder.feed(framed(b"z" * 2000))
    assert decoder.detach_partial(1000) is None  # complete: nothing to receive
    assert decoder.next_frames() == [b"z" * 2000]


def test_detach_partial_never_hands_over_a_refused_frame() -> None:
    decoder = FrameDecoder(max_size=10_000)
    decoder.feed(b"\x00\x00")
    with pytest.raises(FrameTooLarge):
        decoder.feed(struct.pack(">i", 50_000)[2:] + b"x")
    assert decoder.detach_partial(1000) is None
    with pytest.raises(FrameTooLarge):
        decoder.next_frames()


def test_a_partial_prefix_fed_while_unread_frames_wait() -> None:
    # Frames given back with unread() count in the decoder's buffered bytes; two bytes of the next size prefix fed
    # after them must wait for the other two (found by the property test above: an IndexError before the fix).
    decoder = FrameDecoder()
    decoder.feed(framed(b"ab", b"cdef"))
    decoder.unread(decoder.next_frames())
    rest = framed(b"ghi")
    decoder.feed(rest[:2])
    decoder.feed(rest[2:])
    assert decoder.next_frames() == [b"ab", b"cdef"]
    assert decoder.next_frames() == [b"ghi"]
    assert decoder.buffered == 0
