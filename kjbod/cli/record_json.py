"""Messages as Kafka's generated JSON converters write them (for `kjbod dump-log --cluster-metadata-decoder`).

Kafka's rules (generator/JsonConverterGenerator): a message is an object of its fields present in the version,
named in camelCase (`PartitionId` → `partitionId`); a tagged field appears only when it differs from its default;
uuids are Kafka's text form (URL-safe base64 of the 16 bytes, no padding), bytes are base64, null is null. A
metadata record is wrapped as MetadataRecordSerde's dump does: `{"type":"PARTITION_RECORD","version":1,
"data":{...}}`.

Which fields a version has, and which are tagged, comes from the schema the record class was generated from
(schemas/ beside the package, read once). Without it (an installation without the schemas) every field is
written and a field is treated as tagged only when it holds its default.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
from functools import cache
from pathlib import Path
from typing import Any
from uuid import UUID

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
_COMMENT = re.compile(r"^\s*//")


def uuid_text(u: UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode("ascii")


def record_type_name(message_name: str) -> str:
    """MetadataRecordType's constant for a record class: PartitionRecord → PARTITION_RECORD."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", message_name).upper()


def _camel(name: str) -> str:
    return name[:1].lower() + name[1:]


def _snake(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()
    return s + "_" if s in {"from", "import", "class", "def", "global", "lambda", "pass", "is", "in", "not", "and",
                            "or"} else s


def _in_versions(spec: str | None, version: int) -> bool:
    if spec is None or spec == "none":
        return False
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    lo, _, hi = spec.partition("-")
    return int(lo) <= version <= int(hi or lo)


@cache
def _schemas() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    if not SCHEMAS.is_dir():
        return out
    for path in SCHEMAS.rglob("*.json"):
        text = "\n".join(line for line in path.read_text(encoding="utf-8").splitlines() if not _COMMENT.match(line))
        try:
            schema = json.loads(text)
        except ValueError:
            continue
        out[schema.get("name", path.stem)] = schema
    return out


def _value(v: Any, ftype: str, spec: dict[str, Any] | None, common: dict[str, Any], version: int) -> Any:
    if v is None:
        return None
    if ftype.startswith("[]"):
        inner = ftype[2:]
        return [_value(x, inner, spec, common, version) for x in v]
    if isinstance(v, UUID):
        return uuid_text(v)
    if isinstance(v, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(v)).decode("ascii")
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        fields = (spec or {}).get("fields") or common.get(ftype.removeprefix("[]"), {}).get("fields")
        return _struct(v, fields, common, version)
    return v


def _struct(obj: Any, fields: list[dict[str, Any]] | None, common: dict[str, Any], version: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    defaults = {f.name: f for f in dataclasses.fields(obj)}
    if fields is None:  # no schema: every field, in declaration order
        for name in defaults:
            if name == "unknown_tagged_fields":
                continue
            camel = re.sub(r"_([a-z0-9])", lambda m: m.group(1).upper(), name.rstrip("_"))
            out[camel] = _value(getattr(obj, name), "", None, common, version)
        return out
    for spec in fields:
        if not _in_versions(spec.get("versions"), version):
            continue
        attr = _snake(spec["name"])
        value = getattr(obj, attr)
        if _in_versions(spec.get("taggedVersions"), version) and value == _default_of(defaults[attr]):
            continue
        out[_camel(spec["name"])] = _value(value, spec["type"], spec, common, version)
    return out


def _default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def message_json(message: Any, version: int) -> dict[str, Any]:
    """The `data` object of a message at `version`, as Kafka's JSON converter writes it."""
    schema = _schemas().get(type(message).__name__)
    if schema is None:
        return _struct(message, None, {}, version)
    common = {s["name"]: s for s in schema.get("commonStructs", [])}
    return _struct(message, schema["fields"], common, version)


def metadata_record_json(message: Any, version: int) -> str:
    """One metadata record as `kafka-dump-log.sh --cluster-metadata-decoder` prints it after `payload: `."""
    doc = {"type": record_type_name(type(message).__name__), "version": version,
           "data": message_json(message, version)}
    return dumps(doc)


def dumps(doc: Any) -> str:
    """Compact JSON as Jackson writes it (no spaces, non-ASCII kept)."""
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
