"""The code generator on tiny inline schemas, and `python -m tools.codegen --check` on real trees.

Strategy: every schema here is a few lines of JSON written in the test, so each case shows exactly the rule it
exercises.  Broken schemas must raise `SchemaError` with a message naming the offending field; a valid schema
with every primitive type is turned into a module, executed as a real module (dataclasses need one) and
round-tripped at every version; the write-side rules (ignorable fields, tagged defaults, unknown tags) are
checked byte for byte on that module.  The --check tests run the generator as a subprocess: on the committed
tree, and on a temporary copy of its output that is then edited and given a stale file.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kjbod.protocol.runtime import DecodeError, EncodeError
from tools.codegen.emit import emit_module
from tools.codegen.schema import SchemaError, load_schema_text

from .schema_values import DrawSource, random_message

ROOT = Path(__file__).resolve().parents[2]


def schema(fields: list, *, valid: str = "0-2", flexible: str = "1+", common: list | None = None) -> str:
    doc = {"apiKey": 9000, "type": "request", "listeners": ["broker"], "name": "TinyRequest",
           "validVersions": valid, "flexibleVersions": flexible, "fields": fields}
    if common is not None:
        doc["commonStructs"] = common
    # A `//` comment header, as in schemas/, must be ignored by the loader.
    return "// tiny test schema\n" + json.dumps(doc, indent=2)


def load(text: str):
    return load_schema_text(text, Path("X.json"))


_counter = [0]


def build_module(text: str) -> types.ModuleType:
    """Generates the module for `text` and executes it as a registered module (dataclass needs one)."""
    spec = load(text)
    code = emit_module(spec, "X.json")
    _counter[0] += 1
    name = f"_kjbod_codegen_test_{_counter[0]}"
    mod = types.ModuleType(name)
    sys.modules[name] = mod
    exec(compile(code, f"<generated {name}>", "exec"), mod.__dict__)
    return mod


# ---------------------------------------------------------------------------------------------- errors

def F(name: str, type_: str, versions: str = "0+", **kw) -> dict:
    return {"name": name, "type": type_, "versions": versions, **kw}


BAD_SCHEMAS = {
    "duplicate tag": (
        [F("A", "int32", taggedVersions="1+", tag=3), F("Bee", "int32", taggedVersions="1+", tag=3)],
        "Bee", "duplicate tag"),
    "reversed range": ([F("Lag", "int32", "3-1")], "Lag", "3-1"),
    "not a range": ([F("Lag", "int32", "x")], "Lag", "'x'"),
    "three bounds": ([F("Lag", "int32", "1-2-3")], "Lag", "1-2-3"),
    "bad nullable range": ([F("Name", "string", nullableVersions="2-")], "Name", "2-"),
    "field outside valid versions": ([F("Late", "int32", "5+")], "Late", "outside the message's valid versions"),
    "tagged outside flexible": ([F("Tg", "int32", taggedVersions="0+", tag=0)], "Tg", "flexible"),
    "tagged beyond its versions": (
        [F("Tg", "int32", "2+", taggedVersions="1+", tag=0)], "Tg", "outside the field's versions"),
    "tag without taggedVersions": ([F("Tg", "int32", tag=0)], "Tg", "taggedVersions"),
    "negative tag": ([F("Tg", "int32", taggedVersions="1+", tag=-1)], "Tg", "tag"),
    "nullable int": ([F("Count", "int32", nullableVersions="0+")], "Count", "cannot be nullable"),
    "nullable uuid": ([F("Id", "uuid", nullableVersions="0+")], "Id", "cannot be nullable"),
    "unknown primitive": ([F("Big", "int128")], "Big", "unknown type"),
    "unknown struct": ([F("Things", "[]Thing")], "Things", "unknown type"),
    "default null, not nullable": ([F("Name", "string", default="null")], "Name", "nullable"),
    "default null, nullable in some versions": (
        [F("Name", "string", nullableVersions="1+", default="null")], "Name", "nullable"),
    "int default too big": ([F("Small", "int8", default="300")], "Small", "300"),
    "bool default": ([F("Flag", "bool", default="yes")], "Flag", "yes"),
    "records tagged": ([F("Recs", "records", taggedVersions="1+", tag=0)], "Recs", "records"),
    "duplicate field": ([F("Same", "int32"), F("Same", "int64")], "Same", "duplicate field"),
    "unknown key": ([F("Odd", "int32", nulable="0+")], "Odd", "nulable"),
    "nested fields on a primitive": ([F("Num", "int32", fields=[F("X", "int8")])], "Num", "nested"),
}


@pytest.mark.parametrize("case", sorted(BAD_SCHEMAS))
def test_schema_errors_name_the_field(case):
    fields, field_name, fragment = BAD_SCHEMAS[case]
    with pytest.raises(SchemaError) as ei:
        load(schema(fields))
    msg = str(ei.value)
    assert "X.json" in msg
    assert field_name in msg, msg
    assert fragment in msg, msg


def test_bad_message_level_ranges():
    with pytest.raises(SchemaError, match="validVersions"):
        load(schema([F("A", "int32")], valid="2-1"))
    with pytest.raises(SchemaError, match="flexibleVersions"):
        load(schema([F("A", "int32")], flexible="1.5"))


def test_tagged_field_must_stay_tagged():
    # Tagged in v1 only but present in v2 as a regular field: readers of v2 would disagree on the layout.
    with pytest.raises(SchemaError, match="Tg"):
        load(schema([F("Tg", "int32", taggedVersions="1", tag=0)]))


# ---------------------------------------------------------------------------------------------- a valid schema

EVERY_TYPE = schema([
    F("Flag", "bool"),
    F("Tiny", "int8", default="-7"),
    F("Short", "int16"),
    F("Port", "uint16", default="9092"),
    F("Count", "int32"),
    F("Unsigned", "uint32"),
    F("Big", "int64", default="0x7fffffffffffffff"),
    F("Ratio", "float64", default="0.5"),
    F("Name", "string", default="anon"),
    F("MaybeName", "string", nullableVersions="1+", default="null", versions="1+"),
    F("Blob", "bytes"),
    F("MaybeBlob", "bytes", nullableVersions="0+"),
    F("Id", "uuid"),
    F("Recs", "records", nullableVersions="0+"),
    F("Ints", "[]int32"),
    F("Longs", "[]int64", nullableVersions="0+"),
    F("Names", "[]string"),
    F("Ids", "[]uuid", "1+"),
    F("Items", "[]Item", fields=[
        F("Key", "string"),
        F("Weight", "int16"),
        F("Extra", "int32", taggedVersions="1+", tag=0),
        F("Inner", "Pair"),
    ]),
    F("Single", "Pair", "0+"),
    F("MaybePair", "Pair", "1+", nullableVersions="1+", default="null"),
    F("OnlyOld", "int32", "0"),
    F("OnlyNewIgnorable", "int64", "2+", ignorable=True, default="-1"),
    F("TaggedNote", "string", "1+", taggedVersions="1+", tag=1, nullableVersions="1+", default="null"),
    F("TaggedCount", "int32", "1+", taggedVersions="1+", tag=7, default="5"),
    F("TaggedIds", "[]uuid", "2+", taggedVersions="2+", tag=130),
    F("TaggedPair", "Pair", "1+", taggedVersions="1+", tag=2),
], common=[{"name": "Pair", "fields": [F("Left", "int32"), F("Right", "string", "1+")]}])


@pytest.fixture(scope="module")
def tiny():
    mod = build_module(EVERY_TYPE)
    mod.SPEC = load(EVERY_TYPE)  # for the random-message builder
    return mod


def full_message(mod, version: int):
    Item, Pair = mod.Item, mod.Pair
    msg = mod.TinyRequest(
        flag=True, tiny=-128, short=32767, port=65535, count=-(1 << 31), unsigned=(1 << 32) - 1,
        big=-(1 << 63), ratio=-2.25, name="naïve \U0001f600", blob=b"\x00\xff", maybe_blob=None,
        id=uuid.UUID("0123456789abcdef0123456789abcdef"), recs=b"\x01\x02\x03",
        ints=[1, -1, 1 << 30], longs=None, names=["a", "", "é"],
        items=[Item(key="k", weight=-2, inner=Pair(left=4)), Item(key="", weight=0)],
        single=Pair(left=-1),
    )
    if version >= 1:
        msg.maybe_name = None
        msg.ids = [uuid.UUID(int=1), uuid.UUID(int=(1 << 128) - 1)]
        msg.items[0].extra = 99
        msg.items[0].inner.right = "r"
        msg.single.right = "s"
        msg.tagged_note = "note"
        msg.tagged_count = 6
        msg.tagged_pair = Pair(left=3, right="t")
        msg.maybe_pair = Pair(left=8, right="m") if version == 1 else None
    else:
        msg.only_old = 12
    if version >= 2:
        msg.only_new_ignorable = 77
        msg.tagged_ids = [uuid.UUID(int=7)]
    return msg


@pytest.mark.parametrize("version", [0, 1, 2])
def test_every_type_roundtrips(tiny, version):
    cls = tiny.TinyRequest
    assert (cls.MIN_VERSION, cls.MAX_VERSION, cls.FIRST_FLEXIBLE_VERSION, cls.API_KEY) == (0, 2, 1, 9000)
    msg = full_message(tiny, version)
    wire = msg.encode(version)
    back = cls.decode(wire, version)
    assert back == msg
    assert back.encode(version) == wire
    with pytest.raises(DecodeError):
        cls.decode(wire[:-1], version)


@pytest.mark.parametrize("version", [0, 1, 2])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_type_roundtrips_random_values(tiny, version, data):
    # The schemas/ messages use no float64, uint32 or nullable struct; this one does, at every version.
    msg = random_message(tiny.TinyRequest, version, DrawSource(data), spec=tiny.SPEC,
                         classes={name: getattr(tiny, name) for name in tiny.SPEC.structs})
    wire = msg.encode(version)
    back = tiny.TinyRequest.decode(wire, version)
    assert back == msg
    assert back.encode(version) == wire


def test_nullable_struct_layout(tiny):
    # A nullable struct is prefixed by an int8: -1 for null, 1 for present (KIP-893).  At v1 MaybePair is the
    # last regular field, so only the tail differs: then come the message's tagged fields (none here).
    cls = tiny.TinyRequest
    null = cls(maybe_pair=None).encode(1)
    present = cls(maybe_pair=tiny.Pair(left=2, right="")).encode(1)
    prefix = null[:-2]
    assert null == prefix + b"\xff" + b"\x00"
    assert present == prefix + b"\x01" + b"\x00\x00\x00\x02" + b"\x01" + b"\x00" + b"\x00"
    assert cls.decode(null, 1).maybe_pair is None
    assert cls.decode(present, 1).maybe_pair == tiny.Pair(left=2, right="")


def test_defaults_from_schema(tiny):
    m = tiny.TinyRequest()
    assert (m.tiny, m.port, m.big, m.ratio, m.name, m.maybe_name) == (-7, 9092, (1 << 63) - 1, 0.5, "anon", None)
    assert (m.id, m.recs, m.ints, m.single, m.tagged_count) == (uuid.UUID(int=0), None, [], tiny.Pair(), 5)
    assert m.only_new_ignorable == -1 and m.unknown_tagged_fields == ()
    assert tiny.TinyRequest.Item is tiny.Item  # nested classes are reachable from the message class


def test_v0_layout_is_classic(tiny):
    # v0 is not flexible: int16 string lengths, int32 array and bytes lengths, no tagged-field sections.
    msg = tiny.TinyRequest(name="ab", ints=[5], items=[], single=tiny.Pair(left=1))
    wire = msg.encode(0)
    expected = b"".join([
        b"\x00", b"\xf9", b"\x00\x00", b"\x23\x84", b"\x00\x00\x00\x00", b"\x00\x00\x00\x00",
        b"\x7f" + b"\xff" * 7, bytes.fromhex("3fe0000000000000"),
        b"\x00\x02ab", b"\x00\x00\x00\x00", b"\x00\x00\x00\x00", bytes(16), b"\xff\xff\xff\xff",
        b"\x00\x00\x00\x01\x00\x00\x00\x05", b"\x00\x00\x00\x00", b"\x00\x00\x00\x00",
        b"\x00\x00\x00\x00",  # items
        b"\x00\x00\x00\x01",  # single.left
        b"\x00\x00\x00\x00",  # only_old
    ])
    assert wire == expected


def test_absent_field_non_default_is_refused_unless_ignorable(tiny):
    cls = tiny.TinyRequest
    # OnlyOld exists in v0 only and is not ignorable: a non-default value cannot be written at v1.
    with pytest.raises(EncodeError, match="OnlyOld"):
        cls(only_old=1).encode(1)
    assert cls(only_old=0).encode(1) == cls().encode(1)  # the default is simply not written
    # OnlyNewIgnorable (v2+) is ignorable: at v1 a non-default value is dropped, silently.
    assert cls(only_new_ignorable=5).encode(1) == cls().encode(1)
    assert cls.decode(cls(only_new_ignorable=5).encode(1), 1).only_new_ignorable == -1
    # A non-ignorable nested field (Pair.Right, v1+) refuses a value at v0, wherever it sits.
    with pytest.raises(EncodeError, match="Right"):
        cls(single=tiny.Pair(right="x")).encode(0)
    # Tagged fields absent in v0 are not ignorable either.
    with pytest.raises(EncodeError, match="TaggedCount"):
        cls(tagged_count=4).encode(0)


def test_tagged_fields_at_default_are_omitted(tiny):
    cls = tiny.TinyRequest
    base = cls().encode(1)
    assert base.endswith(b"\xff\x00")  # MaybePair (null), then the message's empty tagged-field section
    assert cls.decode(base, 1) == cls()
    # One tagged field moved off its default adds exactly one (tag, size, value) entry.
    wire = cls(tagged_count=6).encode(1)
    assert wire == base[:-1] + b"\x01" + b"\x07\x04\x00\x00\x00\x06"
    # A null tagged field whose default is null is not written either; a value is.
    assert cls(tagged_note=None).encode(1) == base
    assert cls(tagged_note="hi").encode(1) == base[:-1] + b"\x01" + b"\x01\x03\x03hi"
    # Tag 130 needs a two-byte varint; the tagged-field section is sorted by tag.
    wire = cls(tagged_ids=[uuid.UUID(int=1)], tagged_count=0).encode(2)
    tail = b"\x02" + b"\x07\x04\x00\x00\x00\x00" + b"\x82\x01\x11\x02" + uuid.UUID(int=1).bytes
    assert wire.endswith(tail)
    assert cls.decode(wire, 2).tagged_ids == [uuid.UUID(int=1)]


def test_unknown_tagged_fields_survive_decode_encode(tiny):
    cls = tiny.TinyRequest
    base = cls().encode(1)
    # The message's own section gets one known tag (7) between two unknown ones (3 and 300).
    section = b"\x03" + b"\x03\x02hi" + b"\x07\x04\x00\x00\x00\x09" + b"\xac\x02\x00"
    wire = base[:-1] + section
    msg = cls.decode(wire, 1)
    assert msg.tagged_count == 9
    assert msg.unknown_tagged_fields == ((3, b"hi"), (300, b""))
    assert msg.encode(1) == wire
    # Inside an array element too.
    item = tiny.Item(key="k", unknown_tagged_fields=((5, b"\x01"),))
    msg = cls(items=[item])
    assert cls.decode(msg.encode(2), 2).items[0].unknown_tagged_fields == ((5, b"\x01"),)


def test_known_tag_with_wrong_size_is_refused(tiny):
    cls = tiny.TinyRequest
    base = cls().encode(1)
    # Tag 7 is an int32 but declares 5 bytes.
    with pytest.raises(DecodeError):
        cls.decode(base[:-1] + b"\x01\x07\x05\x00\x00\x00\x09\x00", 1)


def test_non_nullable_none_is_an_encode_error(tiny):
    with pytest.raises(EncodeError):
        tiny.TinyRequest(name=None).encode(1)
    with pytest.raises(EncodeError):
        tiny.TinyRequest(ints=None).encode(0)
    with pytest.raises(EncodeError):
        tiny.TinyRequest(count=1 << 31).encode(0)  # out of int32 range: struct.error becomes EncodeError


def test_generated_module_is_deterministic():
    spec = load(EVERY_TYPE)
    assert emit_module(spec, "X.json") == emit_module(load(EVERY_TYPE), "X.json")


# ---------------------------------------------------------------------------------------------- --check

def run_codegen(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.codegen", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_check_passes_on_committed_tree():
    r = run_codegen("--check")
    assert r.returncode == 0, r.stderr


def test_check_reports_edited_missing_and_stale_files(tmp_path):
    out = tmp_path / "generated"
    r = run_codegen("--out", str(out))
    assert r.returncode == 0, r.stderr
    files = sorted(p.name for p in out.glob("*.py"))
    assert "registry.py" in files and "__init__.py" in files
    assert run_codegen("--check", "--out", str(out)).returncode == 0

    edited = out / "describe_log_dirs_response.py"
    edited.write_text(edited.read_text() + "# a hand edit\n")
    r = run_codegen("--check", "--out", str(out))
    assert r.returncode == 1
    assert "describe_log_dirs_response.py" in r.stderr
    assert "metadata_request.py" not in r.stderr  # only what differs is named

    stale = out / "removed_message.py"
    stale.write_text("# left over from a deleted schema\n")
    (out / "metadata_request.py").unlink()
    r = run_codegen("--check", "--out", str(out))
    assert r.returncode == 1
    assert "stale" in r.stderr and "removed_message.py" in r.stderr
    assert "missing" in r.stderr and "metadata_request.py" in r.stderr

    # Regenerating repairs all three: the edit is overwritten, the stale file deleted, the missing one written.
    assert run_codegen("--out", str(out)).returncode == 0
    assert not stale.exists()
    assert run_codegen("--check", "--out", str(out)).returncode == 0
    assert sorted(p.name for p in out.glob("*.py")) == files


def test_schema_error_exits_2_naming_the_file(tmp_path):
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "TinyRequest.json").write_text(schema([F("Count", "int32", nullableVersions="0+")]))
    r = run_codegen("--schemas", str(schemas), "--out", str(tmp_path / "out"), "--check")
    assert r.returncode == 2
    assert "TinyRequest.json" in r.stderr and "Count" in r.stderr
