"""Load and check message schemas written in Apache Kafka's JSON schema format.

The loader turns each JSON file into a small model (`MessageSpec` → `StructSpec` → `FieldSpec`) and rejects
anything the emitter could not turn into a correct codec: duplicate or missing tags, tagged fields outside the
flexible versions, version ranges that are malformed or fall outside the message's valid versions, nullable
primitives, unknown types.  Every error names the file, the field and the problem, so a schema author can fix it
without reading the generator.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

MAX_VERSION = 0x7FFF

PRIMITIVES = {
    "bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64",
    "string", "bytes", "uuid", "records",
}
NULLABLE_TYPES = {"string", "bytes", "records"}  # plus arrays and structs
MESSAGE_TYPES = {"request", "response", "header", "metadata", "data"}
KNOWN_MESSAGE_KEYS = {
    "apiKey", "type", "listeners", "name", "validVersions", "flexibleVersions", "deprecatedVersions",
    "latestVersionUnstable", "fields", "commonStructs",
}
KNOWN_FIELD_KEYS = {
    "name", "type", "versions", "nullableVersions", "taggedVersions", "tag", "default", "ignorable",
    "mapKey", "entityType", "about", "fields", "flexibleVersions", "zeroCopy", "kjbodExtension",
}


class SchemaError(ValueError):
    """A schema file that cannot be turned into a codec; the message names file, field and problem."""


@dataclass(frozen=True)
class Versions:
    """An inclusive version range; `empty` when lo > hi (Kafka's "none")."""

    lo: int
    hi: int

    @classmethod
    def parse(cls, text: str, where: str) -> Versions:
        text = str(text).strip()
        if text == "none":
            return NONE
        m = re.fullmatch(r"(\d+)(\+|-(\d+))?", text)
        if not m:
            raise SchemaError(f"{where}: bad version range {text!r} (expected 'N', 'N+', 'N-M' or 'none')")
        lo = int(m.group(1))
        if m.group(2) is None:
            hi = lo
        elif m.group(2) == "+":
            hi = MAX_VERSION
        else:
            hi = int(m.group(3))
            if hi < lo:
                raise SchemaError(f"{where}: bad version range {text!r}: upper bound below lower bound")
        if lo > MAX_VERSION or hi > MAX_VERSION:
            raise SchemaError(f"{where}: version range {text!r} exceeds {MAX_VERSION}")
        return cls(lo, hi)

    @property
    def empty(self) -> bool:
        return self.lo > self.hi

    def __contains__(self, v: object) -> bool:
        return isinstance(v, int) and self.lo <= v <= self.hi

    def intersect(self, other: Versions) -> Versions:
        lo, hi = max(self.lo, other.lo), min(self.hi, other.hi)
        return Versions(lo, hi) if lo <= hi else NONE

    def contains_range(self, other: Versions) -> bool:
        return other.empty or (self.lo <= other.lo and other.hi <= self.hi)

    def __str__(self) -> str:
        if self.empty:
            return "none"
        if self.hi == MAX_VERSION:
            return f"{self.lo}+"
        return f"{self.lo}" if self.lo == self.hi else f"{self.lo}-{self.hi}"


NONE = Versions(1, 0)


@dataclass
class FieldSpec:
    name: str
    py_name: str
    type: str  # as written, e.g. "int32", "[]string", "[]Topic", "Topic"
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    default: object  # parsed default (Python value), or the sentinel for structs/arrays
    default_text: str | None
    ignorable: bool
    flexible_override: Versions | None
    extension: bool
    about: str
    struct: StructSpec | None = None  # for struct and []struct types

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def elem(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.struct is not None

    def present(self, v: int) -> bool:
        return v in self.versions

    def is_tagged(self, v: int) -> bool:
        return v in self.tagged

    def is_nullable(self, v: int) -> bool:
        return v in self.nullable


@dataclass
class StructSpec:
    name: str
    fields: list[FieldSpec] = field(default_factory=list)
    versions: Versions = NONE  # versions in which this struct can appear


@dataclass
class MessageSpec:
    name: str
    kind: str
    api_key: int | None
    listeners: tuple[str, ...]
    valid: Versions
    flexible: Versions
    struct: StructSpec
    structs: dict[str, StructSpec]
    path: Path
    latest_unstable: bool = False

    def flexible_at(self, v: int) -> bool:
        return v in self.flexible


def snake(name: str) -> str:
    """Kafka's CamelCase field names to Python attribute names (ThrottleTimeMs → throttle_time_ms)."""
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    s = s.lower()
    if s in {"from", "import", "class", "def", "global", "lambda", "pass", "is", "in", "not", "and", "or"}:
        s += "_"
    return s


def strip_comments(text: str) -> str:
    """Drop `//` line comments, as Kafka's generator does, without touching `//` inside strings."""
    out = []
    for line in text.splitlines():
        in_str = False
        esc = False
        cut = None
        for i, ch in enumerate(line):
            if esc:
                esc = False
                continue
            if ch == "\\":
                esc = True
            elif ch == '"':
                in_str = not in_str
            elif ch == "/" and not in_str and line[i + 1:i + 2] == "/":
                cut = i
                break
        out.append(line if cut is None else line[:cut])
    return "\n".join(out)


def _parse_int_default(text: str, where: str, bits: int, signed: bool = True) -> int:
    try:
        value = int(text, 16) if text.lower().startswith(("0x", "-0x")) else int(text)
    except ValueError:
        raise SchemaError(f"{where}: default {text!r} is not an integer") from None
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if not lo <= value <= hi:
        raise SchemaError(f"{where}: default {text!r} does not fit the field's type")
    return value


_INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint16": 16, "uint32": 32}


class _Loader:
    def __init__(self, path: Path, doc: dict):
        self.path = path
        self.doc = doc
        self.structs: dict[str, StructSpec] = {}
        self.common: dict[str, list] = {}

    def err(self, where: str, msg: str) -> SchemaError:
        return SchemaError(f"{self.path.name}: {where}: {msg}")

    def load(self) -> MessageSpec:
        d = self.doc
        unknown = set(d) - KNOWN_MESSAGE_KEYS
        if unknown:
            raise self.err("top level", f"unknown keys {sorted(unknown)}")
        for key in ("name", "type", "validVersions", "fields"):
            if key not in d:
                raise self.err("top level", f"missing {key!r}")
        name = d["name"]
        if not re.fullmatch(r"[A-Z][A-Za-z0-9]*", name):
            raise self.err("name", f"{name!r} is not a CamelCase identifier")
        kind = d["type"]
        if kind not in MESSAGE_TYPES:
            raise self.err("type", f"{kind!r} is not one of {sorted(MESSAGE_TYPES)}")
        valid = Versions.parse(d["validVersions"], f"{self.path.name}: validVersions")
        if valid.empty:
            raise self.err("validVersions", "must not be empty")
        flexible = Versions.parse(d.get("flexibleVersions", "none"), f"{self.path.name}: flexibleVersions")
        api_key = d.get("apiKey")
        if kind in ("request", "response", "metadata") and not isinstance(api_key, int):
            raise self.err("apiKey", f"a {kind} needs an integer apiKey")
        listeners = tuple(d.get("listeners", ()))
        if kind == "request" and not listeners:
            raise self.err("listeners", "a request must list the listeners that serve it")
        for ln in listeners:
            if ln not in ("broker", "controller", "zkBroker"):
                raise self.err("listeners", f"unknown listener {ln!r}")
        self.valid = valid
        self.flexible = flexible
        for cs in d.get("commonStructs", []):
            cname = cs.get("name")
            if not cname or "fields" not in cs:
                raise self.err("commonStructs", "each common struct needs a name and fields")
            if cname in self.common:
                raise self.err("commonStructs", f"duplicate common struct {cname!r}")
            self.common[cname] = cs["fields"]
        top = StructSpec(name=name, versions=valid)
        self.structs[name] = top
        top.fields = self._fields(d["fields"], name, valid)
        for cname in self.common:
            if cname not in self.structs:
                raise self.err("commonStructs", f"common struct {cname!r} is never used")
        return MessageSpec(
            name=name, kind=kind, api_key=api_key, listeners=listeners, valid=valid, flexible=flexible,
            struct=top, structs=self.structs, path=self.path,
            latest_unstable=bool(d.get("latestVersionUnstable", False)),
        )

    def _fields(self, raw: list, owner: str, owner_versions: Versions) -> list[FieldSpec]:
        if not isinstance(raw, list):
            raise self.err(owner, "fields must be a list")
        out: list[FieldSpec] = []
        names: set[str] = set()
        tags: dict[int, str] = {}
        for rf in raw:
            f = self._field(rf, owner, owner_versions)
            if f.name in names:
                raise self.err(f"{owner}.{f.name}", "duplicate field name")
            names.add(f.name)
            if f.tag is not None:
                if f.tag in tags:
                    raise self.err(f"{owner}.{f.name}", f"duplicate tag {f.tag} (already used by {tags[f.tag]})")
                tags[f.tag] = f.name
            out.append(f)
        py = [f.py_name for f in out]
        if len(set(py)) != len(py) or "unknown_tagged_fields" in py:
            raise self.err(owner, "field names collide after conversion to Python names")
        return out

    def _field(self, rf: dict, owner: str, owner_versions: Versions) -> FieldSpec:
        if not isinstance(rf, dict) or "name" not in rf or "type" not in rf:
            raise self.err(owner, "every field needs a name and a type")
        name = rf["name"]
        where = f"{owner}.{name}"
        unknown = set(rf) - KNOWN_FIELD_KEYS
        if unknown:
            raise self.err(where, f"unknown keys {sorted(unknown)}")
        ftype = rf["type"]
        if "versions" not in rf:
            raise self.err(where, "missing 'versions'")
        versions = Versions.parse(rf["versions"], f"{self.path.name}: {where}: versions")
        nullable = Versions.parse(rf.get("nullableVersions", "none"), f"{self.path.name}: {where}: nullableVersions")
        tagged = Versions.parse(rf.get("taggedVersions", "none"), f"{self.path.name}: {where}: taggedVersions")
        tag = rf.get("tag")
        flex_override = None
        if "flexibleVersions" in rf:
            flex_override = Versions.parse(rf["flexibleVersions"], f"{self.path.name}: {where}: flexibleVersions")
            if ftype not in ("string", "bytes"):
                raise self.err(where, "only string and bytes fields may override flexibleVersions")
        if (tag is None) != tagged.empty:
            raise self.err(where, "a tagged field needs both 'tag' and 'taggedVersions'")
        if tag is not None:
            if not isinstance(tag, int) or tag < 0:
                raise self.err(where, f"tag {tag!r} must be a non-negative integer")
            if not self.flexible.contains_range(tagged):
                raise self.err(where, f"taggedVersions {tagged} are outside the flexible versions {self.flexible}")
            if not versions.contains_range(tagged):
                raise self.err(where, f"taggedVersions {tagged} are outside the field's versions {versions}")
            if tagged.hi != versions.hi:
                raise self.err(where, "a field tagged in some versions must stay tagged in every later version")
        eff = versions.intersect(self.valid)
        if not versions.empty and eff.empty and not rf.get("kjbodExtension"):
            raise self.err(where, f"versions {versions} fall outside the message's valid versions {self.valid}")
        elem = ftype[2:] if ftype.startswith("[]") else ftype
        is_array = ftype.startswith("[]")
        struct = None
        if elem not in PRIMITIVES:
            if not re.fullmatch(r"[A-Z][A-Za-z0-9]*", elem):
                raise self.err(where, f"unknown type {ftype!r}")
            if "fields" in rf:
                if elem in self.common:
                    raise self.err(where, f"struct {elem!r} is both inline and a common struct")
                if elem in self.structs:
                    raise self.err(where, f"struct name {elem!r} is defined twice")
                struct = StructSpec(name=elem, versions=eff)
                self.structs[elem] = struct
                struct.fields = self._fields(rf["fields"], elem, eff)
            elif elem in self.common:
                struct = self.structs.get(elem)
                if struct is None:
                    struct = StructSpec(name=elem, versions=eff)
                    self.structs[elem] = struct
                    struct.fields = self._fields(self.common[elem], elem, eff)
                else:
                    struct.versions = Versions(min(struct.versions.lo, eff.lo), max(struct.versions.hi, eff.hi))
            else:
                raise self.err(where, f"unknown type {ftype!r} (no inline fields and no common struct)")
        elif "fields" in rf:
            raise self.err(where, f"a {ftype} field cannot have nested fields")
        if elem == "records" and is_array:
            raise self.err(where, "records cannot be an array element")
        if not nullable.empty and not is_array and struct is None and elem not in NULLABLE_TYPES:
            raise self.err(where, f"type {ftype} cannot be nullable")
        if elem == "records" and tag is not None:
            raise self.err(where, "a records field cannot be tagged")
        default_text = rf.get("default")
        default = self._default(where, ftype, elem, is_array, struct, default_text, nullable, versions)
        return FieldSpec(
            name=name, py_name=snake(name), type=ftype, versions=versions, nullable=nullable, tagged=tagged,
            tag=tag, default=default, default_text=None if default_text is None else str(default_text),
            ignorable=bool(rf.get("ignorable", False)), flexible_override=flex_override,
            extension=bool(rf.get("kjbodExtension", False)), about=str(rf.get("about", "")), struct=struct,
        )

    def _default(self, where, ftype, elem, is_array, struct, text, nullable, versions):
        null_everywhere = not versions.empty and nullable.contains_range(versions)
        if text is not None and str(text) == "null":
            if not null_everywhere:
                raise self.err(where, "default null needs the field to be nullable in all its versions")
            return None
        if is_array or struct is not None:
            if text not in (None, ""):
                raise self.err(where, f"{ftype} fields cannot have a default other than null")
            return ...  # constructed: empty list / default struct
        if text is None:
            return {
                "bool": False, "float64": 0.0, "string": "", "bytes": b"", "records": None,
                "uuid": 0,
            }.get(elem, 0)
        text = str(text)
        if elem == "bool":
            if text.lower() not in ("true", "false"):
                raise self.err(where, f"bool default {text!r} must be true or false")
            return text.lower() == "true"
        if elem in _INT_BITS:
            return _parse_int_default(text, f"{self.path.name}: {where}", _INT_BITS[elem], not elem.startswith("u"))
        if elem == "float64":
            try:
                return float(text)
            except ValueError:
                raise self.err(where, f"float default {text!r} is not a number") from None
        if elem == "string":
            return text
        if elem == "uuid":
            if text not in ("", "AAAAAAAAAAAAAAAAAAAAAA"):
                raise self.err(where, "uuid defaults other than the zero uuid are not supported")
            return 0
        raise self.err(where, f"type {ftype} cannot have a default")


def load_schema_text(text: str, path: Path) -> MessageSpec:
    try:
        doc = json.loads(strip_comments(text))
    except json.JSONDecodeError as e:
        raise SchemaError(f"{path.name}: invalid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise SchemaError(f"{path.name}: top level must be an object")
    return _Loader(path, doc).load()


def load_schema(path: Path) -> MessageSpec:
    return load_schema_text(path.read_text(encoding="utf-8"), path)


def load_all(root: Path) -> list[MessageSpec]:
    specs = [load_schema(p) for p in sorted(root.rglob("*.json"))]
    seen: dict[str, Path] = {}
    keys: dict[tuple[str, int], str] = {}
    for s in specs:
        if s.name in seen:
            raise SchemaError(f"{s.path.name}: message name {s.name} also defined in {seen[s.name].name}")
        seen[s.name] = s.path
        if s.api_key is not None:
            k = (s.kind, s.api_key)
            if k in keys:
                raise SchemaError(f"{s.path.name}: {s.kind} apiKey {s.api_key} also used by {keys[k]}")
            keys[k] = s.name
    return specs
