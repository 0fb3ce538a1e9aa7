"""Fuzzing the request decoders: whatever bytes arrive, decoding raises `DecodeError` or succeeds, nothing else.

Strategy: the server decodes requests from untrusted peers, and any exception other than `DecodeError` would
escape the protocol layer's single error channel.  Starting from valid frames (request header + body, built by
`schema_values` for every request version the registry serves), a seeded `random.Random` applies mutations that
target what decoders get wrong: bit flips, truncation, trailing garbage, huge and negative lengths, over-long
varints, invalid UTF-8, null markers, repeated and zeroed regions, and wholly random bodies; 50,000 frames in
all.  Each frame goes through the server's path (peek the api key and version, decode the header, decode the
body), and whatever decodes must encode again and decode to the same message (what the server accepts, it can
log, forward and answer about).  Failures are collected and reported with the seed, the mutation and the frame
in hex, so any of them can be replayed.  Response bodies get the same treatment on a smaller budget: the admin
client reads them from brokers it does not control.

Targeted checks follow, where the outcome is known exactly: every string field of every request version, made
invalid UTF-8, null, too long, or given an over-long varint length, must raise `DecodeError`; so must every
truncation of a valid body.
"""

from __future__ import annotations

import dataclasses
import random
import struct
from collections import Counter
from collections.abc import Callable

import pytest

from kjbod.protocol.generated.describe_log_dirs_request import DescribeLogDirsRequest
from kjbod.protocol.generated.registry import APIS
from kjbod.protocol.generated.request_header import RequestHeader
from kjbod.protocol.headers import decode_request_header, peek_api, request_header_version
from kjbod.protocol.runtime import DecodeError, read_uvarint

from .schema_values import RandomSource, pair_id, random_message, request_pairs, specs

SEED = 0x6B6A626F64  # "kjbod"
TOTAL_FRAMES = 50_000
SEEDS_PER_PAIR = 3

PAIRS = request_pairs()


def frame_for(msg, version: int, rng: random.Random) -> tuple[bytes, int]:
    """(header + body, header length) for a request message; the frame's 4-byte size is not included."""
    cls = type(msg)
    client_id = rng.choice(["", "cli", None, "\u00e9\U0001f600"])
    header = RequestHeader(request_api_key=cls.API_KEY, request_api_version=version,
                           correlation_id=rng.randint(-(1 << 31), (1 << 31) - 1), client_id=client_id)
    head = header.encode(request_header_version(cls.API_KEY, version))
    return head + msg.encode(version), len(head)


def decode_like_server(frame):
    """The server's order of work; returns (message, version), or None when the api key or version is unknown
    (the server closes the connection without decoding).  Raises whatever the decoders raise."""
    key, version, _corr = peek_api(frame)
    info = APIS.get(key)
    if info is None or not info.min_version <= version <= info.max_version:
        return None
    _header, pos = decode_request_header(frame, key, version)
    return info.request.decode(memoryview(frame)[pos:], version), version


def sort_unknown_tags(obj):
    """`obj` with every struct's unknown tags in ascending order, recursively (the encoder writes them so)."""
    if isinstance(obj, list):
        return [sort_unknown_tags(e) for e in obj]
    if not dataclasses.is_dataclass(obj):
        return obj
    changes = {f.name: sort_unknown_tags(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    changes["unknown_tagged_fields"] = tuple(sorted(obj.unknown_tagged_fields, key=lambda t: t[0]))
    return dataclasses.replace(obj, **changes)


# ---------------------------------------------------------------------------------------------- mutations

def _pos(rng: random.Random, data: bytes, start: int) -> int:
    return rng.randint(start, max(start, len(data) - 1))


def flip_bits(rng, data, start):
    b = bytearray(data)
    if len(b) > start:
        for _ in range(rng.randint(1, 4)):
            i = _pos(rng, b, start)
            b[i] ^= 1 << rng.randint(0, 7)
    return bytes(b)


def truncate(rng, data, start):
    return data[: rng.randint(0, len(data))]


def append_garbage(rng, data, start):
    return data + rng.randbytes(rng.randint(1, 8))


def overwrite(rng, data, start, patch: bytes) -> bytes:
    i = _pos(rng, data, start)
    return data[:i] + patch + data[i + len(patch):]


HUGE_INTS = [struct.pack(">i", n) for n in (0x7FFFFFFF, -1, -2, -(1 << 31), 1 << 24, 65536)] + \
    [struct.pack(">h", n) for n in (0x7FFF, -1, -2, -(1 << 15), 0x4000)]


def huge_length(rng, data, start):
    return overwrite(rng, data, start, rng.choice(HUGE_INTS))


BAD_VARINTS = [
    b"\x80\x80\x80\x80\x80\x80\x01",  # 6 continuation bytes: longer than any 32-bit varint
    b"\xff\xff\xff\xff\xff\x01",
    b"\xff\xff\xff\xff\x0f",  # 0xffffffff: a length or count of 4 GiB
    b"\xff\xff\xff\x7f",  # 2^28 - 1
    b"\x80\x80\x80\x80",  # truncated in the middle of a varint when it ends the frame
]


def bad_varint(rng, data, start):
    patch = rng.choice(BAD_VARINTS)
    if rng.random() < 0.5:
        i = _pos(rng, data, start)
        return data[:i] + patch + data[i:]
    return overwrite(rng, data, start, patch)


INVALID_UTF8 = [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\xfe\xfe"]


def invalid_utf8(rng, data, start):
    return overwrite(rng, data, start, rng.choice(INVALID_UTF8))


NULL_MARKERS = [b"\xff\xff", b"\xff\xff\xff\xff", b"\x00", b"\xff"]


def null_marker(rng, data, start):
    return overwrite(rng, data, start, rng.choice(NULL_MARKERS))


def repeat_region(rng, data, start):
    if len(data) <= start:
        return data + data
    i = _pos(rng, data, start)
    j = rng.randint(i, len(data))
    return data[:j] + data[i:j] * rng.randint(1, 3) + data[j:]


def zero_region(rng, data, start):
    i = _pos(rng, data, start)
    n = rng.randint(1, 8)
    return data[:i] + bytes(max(0, min(n, len(data) - i))) + data[i + n:]


def random_body(rng, data, start):
    return data[:start] + rng.randbytes(rng.randint(0, 64))


def random_frame(rng, data, start):
    # Keeps a served api key and version half of the time, so the body decoders see it.
    body = rng.randbytes(rng.randint(0, 48))
    return (data[:4] + body) if rng.random() < 0.5 else rng.randbytes(rng.randint(0, 12)) + body


MUTATIONS: list[Callable] = [
    flip_bits, truncate, append_garbage, huge_length, bad_varint, invalid_utf8, null_marker, repeat_region,
    zero_region, random_body, random_frame,
]


def mutate(rng: random.Random, frame: bytes, header_len: int) -> tuple[bytes, str]:
    # Mostly mutate the body (the header must survive for the body decoder to run), sometimes the header too;
    # sometimes stack two mutations.
    start = header_len if rng.random() < 0.85 else 0
    names = []
    data = frame
    for _ in range(1 if rng.random() < 0.7 else 2):
        m = rng.choice(MUTATIONS)
        data = m(rng, data, start)
        names.append(m.__name__)
    return data, "+".join(names)


# ---------------------------------------------------------------------------------------------- the fuzz run

def run_fuzz(pairs, total: int, seed: int, build, decoder_for) -> Counter:
    """Mutates `total` frames, spread evenly over `pairs`: build(msg, version, rng) → (frame, header length) makes
    the valid starting points, decoder_for(cls, version) the function that decodes a mutated frame."""
    rng = random.Random(seed)
    src = RandomSource(rng)
    outcomes: Counter = Counter()
    failures: list[str] = []
    per_pair = [total // len(pairs) + (1 if i < total % len(pairs) else 0) for i in range(len(pairs))]
    for (cls, version), budget in zip(pairs, per_pair, strict=True):
        seeds = [build(random_message(cls, version, src), version, rng) for _ in range(SEEDS_PER_PAIR)]
        decode = decoder_for(cls, version)
        for i in range(budget):
            frame, header_len = seeds[i % len(seeds)]
            data, how = mutate(rng, frame, header_len)
            try:
                got = decode(data)
            except DecodeError:
                outcomes["DecodeError"] += 1
                continue
            except Exception as e:  # noqa: BLE001 - anything but DecodeError is the bug being hunted
                problem = f"{type(e).__name__}: {e}"
            else:
                if got is None:
                    outcomes["rejected"] += 1
                    continue
                # Whatever was accepted can be written again and reads back the same (up to the order of
                # unknown tags, which the encoder sorts).
                msg, v = got
                try:
                    again = type(msg).decode(msg.encode(v), v)
                except Exception as e:  # noqa: BLE001
                    problem = f"re-encoding what was decoded failed: {type(e).__name__}: {e}"
                else:
                    # equal, or (a float64 NaN is not equal to itself) the same bytes when written again
                    if again == sort_unknown_tags(msg) or again.encode(v) == msg.encode(v):
                        outcomes["decoded"] += 1
                        continue
                    problem = f"decoded {msg!r}, re-encoded and decoded {again!r}"
            outcomes["other"] += 1
            if len(failures) < 10:
                failures.append(f"{pair_id((cls, version))} #{i} (seed {seed:#x}, {how}): {problem}\n"
                                f"    frame: {data.hex()}")
    assert not failures, f"{outcomes['other']} bad outcomes, the first ones:\n" + "\n".join(failures)
    return outcomes


def test_fuzz_request_frames():
    outcomes = run_fuzz(PAIRS, TOTAL_FRAMES, SEED, frame_for, lambda cls, version: decode_like_server)
    assert sum(outcomes.values()) == TOTAL_FRAMES
    # The mutations must mostly break frames, and some must still decode (a mutation in a value, not a length).
    assert outcomes["DecodeError"] > TOTAL_FRAMES // 2, outcomes
    assert outcomes["decoded"] > TOTAL_FRAMES // 50, outcomes


def body_only(msg, version: int, rng: random.Random) -> tuple[bytes, int]:
    return msg.encode(version), 0


def test_fuzz_response_bodies():
    # The admin client decodes responses from brokers it does not control: the same invariant, fewer frames.
    pairs = [(info.response, v) for info in APIS.values() for v in range(info.min_version, info.max_version + 1)]

    def decoder_for(cls, version):
        return lambda data: (cls.decode(data, version), version)

    outcomes = run_fuzz(pairs, 10_000, SEED + 1, body_only, decoder_for)
    assert outcomes["DecodeError"] > 5_000, outcomes


# ---------------------------------------------------------------------------------------------- targeted

def string_sites(struct, obj, version: int):
    """(object, field) for every non-nullable, untagged string field present on the wire in `obj`."""
    for f in struct.fields:
        if not f.present(version) or f.is_tagged(version):
            continue
        value = getattr(obj, f.py_name)
        if f.elem == "string" and not f.is_array and not f.is_nullable(version):
            yield obj, f
        elif f.struct is not None and value is not None:
            for e in value if f.is_array else [value]:
                yield from string_sites(f.struct, e, version)


def has_string(struct, version: int) -> bool:
    return any(
        (f.elem == "string" and not f.is_array and not f.is_nullable(version))
        or (f.struct is not None and has_string(f.struct, version))
        for f in struct.fields if f.present(version) and not f.is_tagged(version))


def string_cases():
    return [p for p in PAIRS if has_string(specs()[p[0].__name__].struct, p[1])]


@pytest.mark.parametrize("pair", string_cases(), ids=pair_id)
def test_broken_strings_raise_decode_error(pair):
    cls, version = pair
    rng = random.Random(f"{SEED}-{pair_id(pair)}")
    msg = random_message(cls, version, RandomSource(rng), unknown_tags=False, full=True)
    sites = list(string_sites(specs()[cls.__name__].struct, msg, version))
    assert sites, "a request with string fields must put at least one on the wire"
    flexible = specs()[cls.__name__].flexible_at(version)
    for n, (obj, f) in enumerate(sites):
        saved = getattr(obj, f.py_name)
        marker = f"\u00e9MARK{n:04d}\u00e9"
        setattr(obj, f.py_name, marker)
        wire = msg.encode(version)
        setattr(obj, f.py_name, saved)
        raw = marker.encode()
        i = wire.index(raw)
        assert wire.count(raw) == 1
        tail = wire[i + len(raw):]
        if flexible:
            head = wire[: i - 1]  # a compact length: one varint byte for these short strings
            broken = {
                "invalid UTF-8": wire[:i] + b"\xc3\x28" + raw[2:] + tail,
                "null": head + b"\x00" + raw + tail,
                "longer than 32767": head + b"\x81\x80\x02" + raw + tail,
                "6-byte varint": head + b"\x80\x80\x80\x80\x80\x01" + raw + tail,
                "past the end": head + bytes([len(raw) + 2]) + raw + tail[:0],
            }
        else:
            head = wire[: i - 2]  # an int16 length
            broken = {
                "invalid UTF-8": wire[:i] + b"\xc3\x28" + raw[2:] + tail,
                "null": head + b"\xff\xff" + raw + tail,
                "negative": head + b"\x80\x00" + raw + tail,
                "past the end": head + b"\x7f\xff" + raw + tail,
            }
        for what, data in broken.items():
            with pytest.raises(DecodeError):
                cls.decode(data, version)
                pytest.fail(f"{cls.__name__}.{f.name} v{version}: {what} decoded: {data.hex()}")


@pytest.mark.parametrize("pair", PAIRS, ids=pair_id)
def test_every_truncation_raises_decode_error(pair):
    cls, version = pair
    rng = random.Random(f"{SEED}-trunc-{pair_id(pair)}")
    wire = random_message(cls, version, RandomSource(rng), full=True).encode(version)
    for n in range(len(wire)):
        with pytest.raises(DecodeError):
            cls.decode(wire[:n], version)


def test_unsigned_varints_stop_at_32_bits():
    assert read_uvarint(b"\xff\xff\xff\xff\x0f", 0) == (0xFFFFFFFF, 5)
    for bad in (b"\xff\xff\xff\xff\x10", b"\x80\x80\x80\x80\x80\x01", b"\x80\x80"):
        with pytest.raises(DecodeError):
            read_uvarint(bad, 0)
    # An unknown tag numbered past 32 bits (found by the fuzz run) used to be accepted and kept, and then the
    # message could not be encoded again.
    body = DescribeLogDirsRequest().encode(4)
    assert body == b"\x01\x00"
    with pytest.raises(DecodeError):
        DescribeLogDirsRequest.decode(b"\x01" + b"\x01\xff\xff\xff\xff\x10\x00", 4)
    msg = DescribeLogDirsRequest.decode(b"\x01" + b"\x01\xff\xff\xff\xff\x0f\x00", 4)
    assert msg.unknown_tagged_fields == ((0xFFFFFFFF, b""),)
    assert msg.encode(4) == b"\x01\x01\xff\xff\xff\xff\x0f\x00"
