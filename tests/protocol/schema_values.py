"""Random, valid messages built from the schema model: the generator shared by the codec test suites.

Strategy: the generator walks `tools.codegen.schema`'s model (MessageSpec → StructSpec → FieldSpec) for one
version and fills every field present in that version with a value of its type: integers over their type's whole
range, strings of arbitrary Unicode (non-BMP included, always far below 32767 UTF-8 bytes), nulls only where the
field is nullable in that version, and, on every struct of a flexible version, a few unknown tagged fields whose
tags no known field of that struct uses.  Fields absent from the version keep their defaults, so a codec that is
correct must give back exactly the message it was handed.

Randomness comes from a `Source`: `DrawSource` wraps Hypothesis' `data.draw` (failures shrink to a small
message), `RandomSource` wraps a seeded `random.Random` (the fuzz suite needs tens of thousands of inputs, cheap
and reproducible).  The pairs to test are read from the generated registry, not from the schema files, so that a
message the server serves cannot be left out of the suites.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable
from functools import cache
from pathlib import Path
from uuid import UUID

from hypothesis import strategies as st

from kjbod.protocol.generated.registry import APIS, METADATA_RECORDS
from kjbod.protocol.generated.request_header import RequestHeader
from kjbod.protocol.generated.response_header import ResponseHeader
from tools.codegen.emit import module_name
from tools.codegen.schema import FieldSpec, MessageSpec, StructSpec, load_all

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"

INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
    "uint16": (0, (1 << 16) - 1),
    "uint32": (0, (1 << 32) - 1),
}
MAX_TAG = (1 << 31) - 1  # Kafka tags are Java ints; the wire allows any 32-bit unsigned varint

# Code points for strings: ASCII, the rest of the BMP (surrogates excluded: UTF-8 cannot carry them) and the
# supplementary planes, where a 4-byte UTF-8 sequence (and a UTF-16 surrogate pair in Java) is needed.
_CHAR_RANGES = ((0x00, 0x7F), (0x80, 0xD7FF), (0xE000, 0xFFFF), (0x10000, 0x10FFFF))
_TEXT = st.one_of(
    st.text(st.characters(codec="utf-8"), max_size=10),
    st.text(st.characters(min_codepoint=0x10000, max_codepoint=0x10FFFF), max_size=4),
)


# ---------------------------------------------------------------------------------------------- sources

class DrawSource:
    """Random choices drawn through Hypothesis, so that a failing message shrinks."""

    def __init__(self, data):
        self.draw = data.draw

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def boolean(self) -> bool:
        return self.draw(st.booleans())

    def text(self) -> str:
        return self.draw(_TEXT)

    def binary(self, max_size: int) -> bytes:
        return self.draw(st.binary(max_size=max_size))

    def real(self) -> float:
        return self.draw(st.floats(allow_nan=False))


class RandomSource:
    """Random choices from a seeded `random.Random`: cheap, and reproducible from the seed."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def integer(self, lo: int, hi: int) -> int:
        r = self.rng.random()
        if r < 0.15:  # the edges of a range are where codecs break
            return self.rng.choice((lo, hi, max(lo, min(hi, 0)), max(lo, min(hi, -1))))
        if r < 0.5:
            return max(lo, min(hi, self.rng.randint(-300, 300)))
        return self.rng.randint(lo, hi)

    def boolean(self) -> bool:
        return self.rng.random() < 0.5

    def text(self) -> str:
        n = self.rng.randint(0, 10)
        out = []
        for _ in range(n):
            lo, hi = self.rng.choice(_CHAR_RANGES)
            out.append(chr(self.rng.randint(lo, hi)))
        return "".join(out)

    def binary(self, max_size: int) -> bytes:
        return self.rng.randbytes(self.rng.randint(0, max_size))

    def real(self) -> float:
        return self.rng.choice((0.0, -0.0, 1.5, -1e300, 1e-300, self.rng.uniform(-1e9, 1e9)))


# ---------------------------------------------------------------------------------------------- the pairs

@cache
def specs() -> dict[str, MessageSpec]:
    return {s.name: s for s in load_all(SCHEMAS)}


def message_classes() -> list[type]:
    """Every message class the codec must handle: requests and responses of the registry, both headers, and
    every metadata record and control record."""
    out: list[type] = [RequestHeader, ResponseHeader]
    for info in APIS.values():
        out += [info.request, info.response]
    out += list(METADATA_RECORDS.values())
    for spec in sorted((s for s in specs().values() if s.kind == "data"), key=lambda s: s.name):
        out.append(getattr(importlib.import_module(f"kjbod.protocol.generated.{module_name(spec)}"), spec.name))
    return out


def all_pairs() -> list[tuple[type, int]]:
    return [(cls, v) for cls in message_classes() for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1)]


def request_pairs() -> list[tuple[type, int]]:
    return [(info.request, v) for info in APIS.values() for v in range(info.min_version, info.max_version + 1)]


def pair_id(pair: tuple[type, int]) -> str:
    return f"{pair[0].__name__}-v{pair[1]}"


@cache
def struct_classes(name: str) -> dict[str, type]:
    """Struct name → generated class, for one message (nested classes are module-level in its module)."""
    spec = specs()[name]
    mod = importlib.import_module(f"kjbod.protocol.generated.{module_name(spec)}")
    return {s: getattr(mod, s) for s in spec.structs}


def known_tags(struct: StructSpec) -> set[int]:
    return {f.tag for f in struct.fields if f.tag is not None}


def walk_fields(struct: StructSpec, version: int):
    """The fields of `struct` present in `version`, in wire order of declaration."""
    return [f for f in struct.fields if f.present(version)]


# ---------------------------------------------------------------------------------------------- generation

class MessageBuilder:
    """Builds one random message of `cls` at `version`.

    skip(field) → True leaves a field at its default (cross-implementation tests use it for kjbod's extension
    fields and for tagged fields another library does not know); `unknown_tags` adds random unknown tagged
    fields in flexible versions; `max_items` bounds every array (the top level gets one more element);
    `full` gives every array exactly one element and never uses null, so every field has a value on the wire.
    `spec` and `classes` (struct name → class) default to the schemas/ message of `cls` and its module."""

    def __init__(self, cls: type, version: int, src, *, unknown_tags: bool = True,
                 skip: Callable[[FieldSpec], bool] | None = None, max_items: int = 2, full: bool = False,
                 spec: MessageSpec | None = None, classes: dict[str, type] | None = None):
        self.spec = spec or specs()[cls.__name__]
        self.cls = cls
        self.version = version
        self.flexible = self.spec.flexible_at(version)
        self.src = src
        self.unknown_tags = unknown_tags and self.flexible
        self.skip = skip or (lambda f: False)
        self.max_items = max_items
        self.full = full
        self.classes = classes or struct_classes(self.spec.name)

    def build(self):
        return self.struct(self.spec.struct, 0)

    def struct(self, s: StructSpec, depth: int):
        kwargs = {}
        for f in walk_fields(s, self.version):
            if self.skip(f):
                continue
            kwargs[f.py_name] = self.value(f, depth)
        if self.unknown_tags:
            kwargs["unknown_tagged_fields"] = self.random_unknown_tags(known_tags(s))
        return self.classes[s.name](**kwargs)

    def random_unknown_tags(self, taken: set[int]) -> tuple[tuple[int, bytes], ...]:
        n = self.src.integer(0, 2)
        tags: set[int] = set()
        for _ in range(n):
            # Mostly small tags (one-byte varints), sometimes large ones (multi-byte varints).
            tag = self.src.integer(0, 40) if self.src.boolean() else self.src.integer(0, MAX_TAG)
            if tag not in taken:
                tags.add(tag)
        # The decoder reports unknown tags in wire order, and the encoder writes them ascending.
        return tuple((t, self.src.binary(6)) for t in sorted(tags))

    def value(self, f: FieldSpec, depth: int):
        v = self.version
        if f.is_nullable(v) and not self.full and self.src.integer(0, 3) == 0:
            return None
        if f.is_array:
            n = 1 if self.full else self.src.integer(0, self.max_items + (1 if depth == 0 else 0))
            if f.is_struct:
                return [self.struct(f.struct, depth + 1) for _ in range(n)]
            return [self.scalar(f.elem) for _ in range(n)]
        if f.is_struct:
            return self.struct(f.struct, depth + 1)
        return self.scalar(f.elem)

    def scalar(self, elem: str):
        src = self.src
        if elem in INT_RANGES:
            return src.integer(*INT_RANGES[elem])
        if elem == "bool":
            return src.boolean()
        if elem == "float64":
            return src.real()
        if elem == "string":
            return src.text()
        if elem in ("bytes", "records"):
            return src.binary(24)
        if elem == "uuid":
            return UUID(int=src.integer(0, (1 << 128) - 1))
        raise AssertionError(f"no generator for type {elem}")


def random_message(cls: type, version: int, src, **kw):
    return MessageBuilder(cls, version, src, **kw).build()
