"""kjbod's codec against two independent implementations of the Kafka protocol: kafka-python and kio.

Strategy: for every (message, version) of ours that a library also has, Hypothesis builds a random message
(`schema_values`), kjbod encodes it, the library decodes it, and the library's values are compared with ours
field by field; then the library encodes what it decoded and kjbod must decode exactly the message it started
from.  Both libraries are generated from Apache Kafka's JSON (kafka-python at run time, kio ahead of time), so
a disagreement points at a wire-format mistake on one side.

Fields are matched by position for regular fields and by tag for tagged ones, with a name check on every match,
because the libraries rename fields (kio: `ThrottleTimeMs` → `throttle_time`, a `timedelta`; kafka-python:
authorized-operation bitfields).  Values are normalised to plain Python before comparing: kio's int wrappers,
`ErrorCode` enum, tuples, timedeltas, datetimes and `None` for the zero UUID; kafka-python's `None` for the zero
UUID and bit sets.  kio can only represent some values (known error codes, non-negative timestamps, timedeltas
Python can hold), so messages checked against kio are first conformed to that domain.

Left at their defaults: kjbod's extension fields (`"kjbodExtension": true`, unknown to both libraries; a
separate test checks that both skip them), tagged fields a library does not know, and unknown tagged fields
(kio drops them; the round-trip suite covers them).  Pairs that a library lacks are not checked against it; the
coverage is computed, asserted to stay broad, and printed by `test_coverage`.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import io
import types
import typing
import uuid
from dataclasses import dataclass, field
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kjbod.protocol.generated.describe_log_dirs_response import DescribeLogDirsResponse
from tools.codegen.schema import FieldSpec, StructSpec, snake

from .schema_values import DrawSource, all_pairs, pair_id, random_message, specs

kafka_api_message = pytest.importorskip("kafka.protocol.api_message")
kio_serial = pytest.importorskip("kio.serial")

from kafka.protocol import api_header as kp_headers  # noqa: E402
from kafka.protocol.schemas.fields.base import BaseField  # noqa: E402
from kio.schema.errors import ErrorCode  # noqa: E402

ZERO_UUID = uuid.UUID(int=0)
INT32_MIN = -(1 << 31)
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
MS = datetime.timedelta(milliseconds=1)
# kio turns these int64 fields into datetimes and timedeltas: the representable ranges, in milliseconds.  kio
# builds datetimes through a float timestamp, exact to the millisecond only up to about 2^42 ms (year 2109).
# Its timedelta writer goes through a float too, exact up to about 2^50 ms.
MAX_DATETIME_MS = 1 << 41
MAX_TIMEDELTA_MS = 1 << 48
ERROR_CODES = sorted(int(e) for e in ErrorCode)

CROSS_SETTINGS = settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# ---------------------------------------------------------------------------------------------- libraries

@cache
def kp_classes() -> dict[str, type]:
    """kafka-python's message classes by name (they are spread over several modules)."""
    out: dict[str, type] = {"RequestHeader": kp_headers.RequestHeader, "ResponseHeader": kp_headers.ResponseHeader}
    base = kafka_api_message.ApiMessage
    for modname in ("admin", "consumer", "metadata", "producer", "sasl"):
        mod = importlib.import_module(f"kafka.protocol.{modname}")
        for name in getattr(mod, "__all__", dir(mod)):
            obj = getattr(mod, name, None)
            if isinstance(obj, type) and issubclass(obj, base) and obj is not base:
                out[obj.__name__] = obj
    return out


def kp_class(cls: type, version: int) -> type | None:
    kcls = kp_classes().get(cls.__name__)
    if kcls is None:
        return None
    lo, hi = BaseField.parse_versions(kcls._json["validVersions"])
    if cls.KIND == "header":
        # kafka-python's headers know two versions only: the first valid one and the first flexible one.
        flex_lo = BaseField.parse_versions(kcls._json["flexibleVersions"])[0]
        return kcls if version in (lo, flex_lo) else None
    return kcls if lo <= version <= hi else None


def kio_class(cls: type, version: int) -> type | None:
    name = cls.__name__
    if cls.KIND == "header":
        modname = f"kio.schema.{snake(name)}.v{version}.header"
    elif cls.KIND in ("request", "response"):
        api = name[: -len(cls.KIND)]
        modname = f"kio.schema.{snake(api)}.v{version}.{cls.KIND}"
    elif cls.KIND == "data":  # the metadata log's control records
        modname = f"kio.schema.{snake(name)}.v{version}.data"
    else:
        return None
    try:
        mod = importlib.import_module(modname)
    except ImportError:
        return None
    return getattr(mod, name, None)


def kp_decode(kcls: type, cls: type, wire: bytes, version: int):
    flexible = version in specs()[cls.__name__].flexible
    if cls.KIND == "header":
        buf = io.BytesIO(wire)
        obj = kcls.decode(buf, flexible=flexible)
        assert buf.tell() == len(wire), "kafka-python left bytes unread"
        return obj
    # ApiVersionsResponse.decode in kafka-python re-reads the body as v0 when ErrorCode != 0 (what a client
    # does with an UNSUPPORTED_VERSION answer); the codec underneath is what is compared here.
    return kafka_api_message.ApiMessage.decode.__func__(kcls, wire, version=version)


def kp_encode(obj, cls: type, version: int) -> bytes:
    """Encodes an object kafka-python decoded (it remembers its version)."""
    if cls.KIND == "header":
        return obj.encode(flexible=version in specs()[cls.__name__].flexible)
    # kafka-python's decoder builds objects without __init__, leaving the `_header` slot unset, and encode()
    # reads it; set it as __init__ would.
    if not hasattr(obj, "_header"):
        obj._header = None
    return obj.encode(version=version)


def kio_decode(kcls: type, wire: bytes):
    obj, size = kio_serial.entity_reader(kcls)(wire, 0)
    assert size == len(wire), f"kio read {size} of {len(wire)} bytes"
    return obj


def kio_encode(kcls: type, obj) -> bytes:
    buf = io.BytesIO()
    kio_serial.entity_writer(kcls)(buf, obj)
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------- field matching

@dataclass
class LibField:
    name: str
    tag: int | None  # set when the field is tagged in this version
    handle: object  # kafka-python field object, or kio dataclass Field
    kio_type: str | None = None  # kio's "kafka_type" (error_code, timedelta_i32, ...)
    optional: bool = False
    child: object = None  # nested struct: kafka-python field / kio entity class


@dataclass
class StructMap:
    """One kjbod struct matched with a library's struct at one version."""

    matched: list[tuple[FieldSpec, LibField, StructMap | None]] = field(default_factory=list)
    missing: list[FieldSpec] = field(default_factory=list)  # tagged fields the library does not know


def kp_fields(kfield, version: int) -> list[LibField]:
    out = []
    for kf in kfield._fields:
        if not kf.for_version_q(version):
            continue
        tag = kf.tag if kf.tagged_field_q(version) else None
        child = kf if (kf.is_struct() or kf.is_struct_array()) else None
        out.append(LibField(kf.name, tag, kf, child=child))
    return out


def _unwrap(tp):
    """(inner type, optional?) from kio annotations such as `tuple[X, ...] | None` or `uuid.UUID | None`."""
    optional = False
    while True:
        if typing.get_origin(tp) in (types.UnionType, typing.Union):
            optional = True
            tp = next(a for a in typing.get_args(tp) if a is not type(None))
        elif typing.get_origin(tp) is tuple:
            tp = typing.get_args(tp)[0]
        else:
            return tp, optional


def kio_fields(kcls: type) -> list[LibField]:
    out = []
    for f in dataclasses.fields(kcls):
        inner, optional = _unwrap(f.type)
        child = inner if dataclasses.is_dataclass(inner) else None
        out.append(LibField(f.name, f.metadata.get("tag"), f, kio_type=f.metadata.get("kafka_type"),
                            optional=optional, child=child))
    return out


def kp_name_ok(f: FieldSpec, lf: LibField) -> bool:
    if lf.handle._type_str == "bitfield":  # kafka-python renames these *AuthorizedOperations fields
        return lf.name == "authorized_operations"
    return lf.name == BaseField.underscore_name(f.name)


def kio_name_ok(f: FieldSpec, lf: LibField) -> bool:
    full = BaseField.underscore_name(f.name)
    # kio drops unit suffixes when it changes the type (ThrottleTimeMs → throttle_time, a timedelta) and
    # appends "_" to names that shadow builtins (Id → id_).
    name = lf.name.rstrip("_")
    return name == full or full.startswith(name + "_")


def build_map(s: StructSpec, lib, version: int, fields_of, name_ok) -> StructMap:
    kj = [f for f in s.fields if f.present(version)]
    lib_fields = fields_of(lib)
    plain_kj = [f for f in kj if not f.is_tagged(version)]
    plain_lib = [lf for lf in lib_fields if lf.tag is None]
    assert len(plain_kj) == len(plain_lib), (
        f"{s.name} v{version}: kjbod has {[f.name for f in plain_kj]}, the library {[lf.name for lf in plain_lib]}")
    pairs = list(zip(plain_kj, plain_lib, strict=True))
    by_tag = {lf.tag: lf for lf in lib_fields if lf.tag is not None}
    m = StructMap()
    for f in kj:
        if f.is_tagged(version):
            if f.tag in by_tag:
                pairs.append((f, by_tag[f.tag]))
            else:
                m.missing.append(f)
    for f, lf in pairs:
        assert name_ok(f, lf), f"{s.name}.{f.name} v{version} matched the library's {lf.name!r}"
        sub = build_map(f.struct, lf.child, version, fields_of, name_ok) if f.struct is not None else None
        m.matched.append((f, lf, sub))
    return m


def kp_map(cls: type, kcls: type, version: int) -> StructMap:
    return build_map(specs()[cls.__name__].struct, kcls._struct, version, lambda k: kp_fields(k, version),
                     kp_name_ok)


def kio_map(cls: type, kcls: type, version: int) -> StructMap:
    return build_map(specs()[cls.__name__].struct, kcls, version, kio_fields, kio_name_ok)


def missing_fields(m: StructMap | None) -> set[int]:
    if m is None:
        return set()
    out = {id(f) for f in m.missing}
    for _, _, sub in m.matched:
        out |= missing_fields(sub)
    return out


# ---------------------------------------------------------------------------------------------- normalising

def kj_plain(m: StructMap, obj) -> dict:
    """kjbod values, for the fields the library matched, as plain Python."""
    out = {}
    for f, _lf, sub in m.matched:
        v = getattr(obj, f.py_name)
        if v is None:
            out[f.name] = None
        elif f.is_array:
            out[f.name] = [kj_plain(sub, e) for e in v] if sub else list(v)
        else:
            out[f.name] = kj_plain(sub, v) if sub else v
    return out


def kp_scalar(f: FieldSpec, lf: LibField, v):
    if lf.handle._type_str == "bitfield":
        # kafka-python reads an int32 of authorized operations as the set of its bits; {31} alone is None.
        if v is None:
            return INT32_MIN
        bits = sum(1 << b for b in v)
        return bits - (1 << 32) if bits >= 1 << 31 else bits
    if f.elem == "uuid":
        return ZERO_UUID if v is None else v
    if isinstance(v, memoryview | bytearray):
        return bytes(v)
    return v


def kp_plain(m: StructMap, obj) -> dict:
    out = {}
    for f, lf, sub in m.matched:
        v = getattr(obj, lf.name)
        if v is None and not (f.elem == "uuid" or lf.handle._type_str == "bitfield"):
            out[f.name] = None
        elif f.is_array:
            out[f.name] = [kp_plain(sub, e) for e in v] if sub else [kp_scalar(f, lf, e) for e in v]
        else:
            out[f.name] = kp_plain(sub, v) if sub else kp_scalar(f, lf, v)
    return out


def kio_scalar(f: FieldSpec, lf: LibField, v):
    t = lf.kio_type
    if t == "datetime_i64":
        return -1 if v is None else (v - EPOCH) // MS
    if v is None:
        return ZERO_UUID if f.elem == "uuid" else None
    if t in ("timedelta_i32", "timedelta_i64"):
        return v // MS
    if f.elem == "uuid":
        return v
    if f.elem in ("bytes", "records"):
        return bytes(v)
    if f.elem == "string":
        return str(v)
    if f.elem == "bool":
        return bool(v)
    if f.elem == "float64":
        return float(v)
    return int(v)  # i8..i64, u16, ErrorCode


def kio_plain(m: StructMap, obj) -> dict:
    out = {}
    for f, lf, sub in m.matched:
        v = getattr(obj, lf.name)
        if f.is_array:
            if v is None:
                out[f.name] = None
            else:
                out[f.name] = [kio_plain(sub, e) for e in v] if sub else [kio_scalar(f, lf, e) for e in v]
        elif sub is not None:
            out[f.name] = None if v is None else kio_plain(sub, v)
        else:
            out[f.name] = kio_scalar(f, lf, v)
    return out


def conform_to_kio(m: StructMap, obj) -> None:
    """Moves values kio cannot represent into its domain, in place (deterministically, so shrinking works)."""
    for f, lf, sub in m.matched:
        v = getattr(obj, f.py_name)
        if v is None:
            continue
        if sub is not None:
            for e in v if f.is_array else [v]:
                conform_to_kio(sub, e)
            continue
        fix = _KIO_FIXES.get(lf.kio_type)
        if fix is not None:
            if f.is_array:
                setattr(obj, f.py_name, [fix(e, lf) for e in v])
            else:
                setattr(obj, f.py_name, fix(v, lf))


def _fix_error_code(v: int, lf: LibField) -> int:
    return v if v in ERROR_CODES else ERROR_CODES[v % len(ERROR_CODES)]


def _fix_datetime(v: int, lf: LibField) -> int:
    if v == -1 and lf.optional:
        return v
    return v % MAX_DATETIME_MS


def _fix_timedelta(v: int, lf: LibField) -> int:
    return v if -MAX_TIMEDELTA_MS <= v <= MAX_TIMEDELTA_MS else v % MAX_TIMEDELTA_MS


_KIO_FIXES = {"error_code": _fix_error_code, "datetime_i64": _fix_datetime, "timedelta_i64": _fix_timedelta}


# ---------------------------------------------------------------------------------------------- the pairs

@dataclass
class Plan:
    cls: type
    version: int
    kp: type | None
    kio: type | None
    kp_map: StructMap | None
    kio_map: StructMap | None
    skip: set[int]


@cache
def plans() -> dict[str, Plan]:
    out = {}
    for cls, v in all_pairs():
        kp, kio = kp_class(cls, v), kio_class(cls, v)
        if kp is None and kio is None:
            continue
        km = kp_map(cls, kp, v) if kp else None
        im = kio_map(cls, kio, v) if kio else None
        out[pair_id((cls, v))] = Plan(cls, v, kp, kio, km, im, missing_fields(km) | missing_fields(im))
    return out


def covered_ids() -> list[str]:
    return [pair_id(p) for p in all_pairs() if kp_class(*p) is not None or kio_class(*p) is not None]


def test_coverage():
    pairs = all_pairs()
    kp = [pair_id(p) for p in pairs if kp_class(*p)]
    kio = [pair_id(p) for p in pairs if kio_class(*p)]
    neither = [pair_id(p) for p in pairs if not kp_class(*p) and not kio_class(*p)]
    summary = (f"{len(pairs)} pairs; kafka-python checks {len(kp)}, kio checks {len(kio)}; "
               f"not cross-checked: {neither}")
    print(summary)
    # Broad coverage: most pairs in each library, and every API we serve has some version checked (the
    # libraries lack only versions Kafka 4 removed, e.g. AlterPartition v0-v1, and the metadata records).
    assert len(kio) >= 200 and len(kp) >= 180, summary
    covered = {cls.__name__ for cls, v in pairs if kp_class(cls, v) or kio_class(cls, v)}
    # kjbod's own APIs (api keys from 10000) exist in neither library.
    assert all(cls.__name__ in covered for cls, _ in pairs
               if cls.KIND in ("request", "response") and cls.API_KEY < 10000), summary
    # The field maps build for every covered pair (a structural mismatch fails here, naming the field).
    assert len(plans()) == len(pairs) - len(neither)


@pytest.mark.parametrize("pid", covered_ids())
@CROSS_SETTINGS
@given(data=st.data())
def test_cross_decode_and_reencode(pid, data):
    plan = plans()[pid]
    cls, version = plan.cls, plan.version
    msg = random_message(cls, version, DrawSource(data), unknown_tags=False,
                         skip=lambda f: f.extension or id(f) in plan.skip)
    if plan.kio_map is not None:
        conform_to_kio(plan.kio_map, msg)
    wire = msg.encode(version)

    if plan.kp is not None:
        kobj = kp_decode(plan.kp, cls, wire, version)
        assert kp_plain(plan.kp_map, kobj) == kj_plain(plan.kp_map, msg)
        assert cls.decode(kp_encode(kobj, cls, version), version) == msg

    if plan.kio is not None:
        iobj = kio_decode(plan.kio, wire)
        assert kio_plain(plan.kio_map, iobj) == kj_plain(plan.kio_map, msg)
        iwire = kio_encode(plan.kio, iobj)
        assert cls.decode(iwire, version) == msg
        # kio writes tags ascending and omits defaults, as Kafka does: the bytes must be ours exactly.
        assert iwire == wire


# ---------------------------------------------------------------------------------------------- extension

DIR_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")


def log_dirs_response_with_directory_id() -> DescribeLogDirsResponse:
    # DescribeLogDirsResponse carries kjbod's DirectoryId as tag 10000 (v2+); Kafka clients must read past it.
    part = DescribeLogDirsResponse.DescribeLogDirsPartition(partition_index=3, partition_size=1024, offset_lag=7)
    topic = DescribeLogDirsResponse.DescribeLogDirsTopic(name="t", partitions=[part])
    result = DescribeLogDirsResponse.DescribeLogDirsResult(
        log_dir="/data/d1", topics=[topic], directory_id=DIR_ID, total_bytes=10**12, usable_bytes=10**11)
    return DescribeLogDirsResponse(throttle_time_ms=5, results=[result])


@pytest.mark.parametrize("version", [2, 3, 4])
def test_kafka_python_skips_directory_id_extension(version):
    msg = log_dirs_response_with_directory_id()
    wire = msg.encode(version)
    assert DIR_ID.bytes in wire

    kobj = kp_decode(kp_class(DescribeLogDirsResponse, version), DescribeLogDirsResponse, wire, version)
    kres = kobj.results[0]
    assert (kres.log_dir, kres.topics[0].name, kres.topics[0].partitions[0].partition_size) == ("/data/d1", "t", 1024)
    assert kres.unknown_tags == {"_10000": DIR_ID.bytes}  # kept raw, as an unknown tag
    assert kobj.throttle_time_ms == 5
    # kafka-python does not write unknown tags back: what it re-encodes is the response without the extension.
    msg.results[0].directory_id = ZERO_UUID
    assert kp_encode(kobj, DescribeLogDirsResponse, version) == msg.encode(version)


def test_kio_rejects_every_unknown_tag():
    # kio's general behaviour: any unknown tag in any struct stops its reader.  That is why kjbod sends the
    # DirectoryId extension only to a request that asks for it (tests/admin/test_describe_log_dirs_clients_live.py
    # shows kio reading a real server's answer).  kjbod's own decoder keeps such tags (test_roundtrip).
    msg = DescribeLogDirsResponse(unknown_tagged_fields=((5, b"x"),))
    with pytest.raises(KeyError, match="5"):
        kio_decode(kio_class(DescribeLogDirsResponse, 4), msg.encode(4))
    assert DescribeLogDirsResponse.decode(msg.encode(4), 4) == msg
