"""Our schemas/ checked field by field against Apache Kafka's own message JSON.

Strategy: kjbod's message definitions are written by us in Kafka's JSON schema format, so every fact in them
(field order, names, types, version ranges, nullability, tags, defaults, ignorable, mapKey, entityType) must equal
Kafka's for each version we serve; only the `about` texts and the `//` headers are ours. Rather than comparing
version strings (ours may legitimately say "0+" where the range starts later), both sides are projected onto one
version at a time: the fields present in that version, each with its per-version attributes, recursively. Two
projections are equal exactly when the wire format of that version is the same.

Kafka's JSON comes from the kafka-python package (its bundled resources are Kafka 4.x), and from the reference
snapshot in the repository's sibling `shared/` directory for messages or versions kafka-python lacks (the
controller APIs, the metadata-log records, RequestHeader v0). Fields marked `"kjbodExtension": true` are ours
alone: they are left out of the comparison and checked to be tagged, ignorable and numbered 10000 or above, so
Kafka clients skip them.
"""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"
REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "kafka-schemas"
# Kafka's facts (no prose) for the messages neither kafka-python nor the reference snapshot ships.
KAFKA_FACTS = Path(__file__).resolve().parent / "kafka_facts"

# The versions kjbod serves. validVersions in schemas/ must equal these ranges exactly.
SERVED_APIS: dict[str, tuple[int, int]] = {
    "ApiVersions": (0, 4),
    "Metadata": (0, 13),
    "Produce": (3, 13),
    "Fetch": (4, 18),
    "ListOffsets": (1, 11),
    "CreateTopics": (2, 7),
    "CreatePartitions": (0, 3),
    "DeleteTopics": (1, 6),
    "DeleteRecords": (0, 2),
    "InitProducerId": (0, 5),
    "OffsetForLeaderEpoch": (2, 4),
    "FindCoordinator": (0, 6),
    "DescribeConfigs": (1, 4),
    "AlterConfigs": (0, 2),
    "IncrementalAlterConfigs": (0, 1),
    "AlterReplicaLogDirs": (1, 2),
    "DescribeLogDirs": (1, 5),
    "SaslHandshake": (0, 1),
    "SaslAuthenticate": (0, 2),
    "AlterPartitionReassignments": (0, 1),
    "ListPartitionReassignments": (0, 0),
    "DescribeCluster": (0, 2),
    "BrokerRegistration": (0, 4),
    "BrokerHeartbeat": (0, 2),
    "UnregisterBroker": (0, 0),
    "ControllerRegistration": (0, 0),
    "AddRaftVoter": (0, 1),
    "RemoveRaftVoter": (0, 0),
    "UpdateRaftVoter": (0, 0),
    "AssignReplicasToDirs": (0, 0),
    "AlterPartition": (2, 3),
    "ElectLeaders": (0, 2),
    "FetchSnapshot": (0, 1),
    "AllocateProducerIds": (0, 0),
    "JoinGroup": (0, 9),
    "SyncGroup": (0, 5),
    "Heartbeat": (0, 4),
    "LeaveGroup": (0, 5),
    "OffsetCommit": (2, 10),
    "OffsetFetch": (1, 10),
    "ListGroups": (0, 5),
    "DescribeGroups": (0, 6),
    "DeleteGroups": (0, 2),
    "OffsetDelete": (0, 0),
    "DescribeUserScramCredentials": (0, 0),
    "AlterUserScramCredentials": (0, 0),
    "DescribeClientQuotas": (0, 1),
    "GetTelemetrySubscriptions": (0, 0),
    "PushTelemetry": (0, 0),
    "AlterClientQuotas": (0, 1),
    "DescribeAcls": (1, 3),
    "CreateAcls": (1, 3),
    "DeleteAcls": (1, 3),
    "CreateDelegationToken": (1, 3),
    "RenewDelegationToken": (1, 2),
    "ExpireDelegationToken": (1, 2),
    "DescribeDelegationToken": (1, 3),
    "Vote": (0, 2),
    "BeginQuorumEpoch": (0, 1),
    "EndQuorumEpoch": (0, 1),
    "DescribeQuorum": (0, 2),
    "AddPartitionsToTxn": (0, 5),
    "AddOffsetsToTxn": (0, 4),
    "EndTxn": (0, 5),
    "WriteTxnMarkers": (1, 2),
    "TxnOffsetCommit": (0, 5),
    "DescribeProducers": (0, 0),
    "DescribeTransactions": (0, 0),
    "ListTransactions": (0, 2),
    "UpdateFeatures": (0, 2),
    "ConsumerGroupHeartbeat": (0, 1),
    "ConsumerGroupDescribe": (0, 1),
    "DescribeTopicPartitions": (0, 0),
    "ListConfigResources": (0, 1),
    "ShareGroupHeartbeat": (1, 1),
    "ShareGroupDescribe": (1, 1),
    "DescribeShareGroupOffsets": (0, 1),
    "AlterShareGroupOffsets": (0, 0),
    "DeleteShareGroupOffsets": (0, 0),
    "InitializeShareGroupState": (0, 0),
    "ReadShareGroupState": (0, 0),
    "WriteShareGroupState": (0, 1),
    "DeleteShareGroupState": (0, 0),
    "ReadShareGroupStateSummary": (0, 1),
    "ShareFetch": (1, 2),
    "ShareAcknowledge": (1, 2),
    "StreamsGroupHeartbeat": (0, 0),
    "StreamsGroupDescribe": (0, 0),
}
SERVED_HEADERS: dict[str, tuple[int, int]] = {"RequestHeader": (0, 2), "ResponseHeader": (0, 1)}
SERVED_RECORDS: dict[str, tuple[int, int]] = {
    "RegisterBrokerRecord": (0, 4),
    "BrokerRegistrationChangeRecord": (0, 3),
    "TopicRecord": (0, 0),
    "PartitionRecord": (0, 2),
    "PartitionChangeRecord": (0, 2),
    "RemoveTopicRecord": (0, 0),
    "ConfigRecord": (0, 0),
    "FenceBrokerRecord": (0, 0),
    "UnfenceBrokerRecord": (0, 0),
    "UnregisterBrokerRecord": (0, 0),
    "FeatureLevelRecord": (0, 0),
    "ProducerIdsRecord": (0, 0),
    "UserScramCredentialRecord": (0, 0),
    "RemoveUserScramCredentialRecord": (0, 0),
    "AccessControlEntryRecord": (0, 0),
    "RemoveAccessControlEntryRecord": (0, 0),
    "DelegationTokenRecord": (0, 0),
    "RemoveDelegationTokenRecord": (0, 0),
    "ClientQuotaRecord": (0, 0),
    "ClearElrRecord": (0, 0),
    "NoOpRecord": (0, 0),
    "ZkMigrationStateRecord": (0, 0),
    "BeginTransactionRecord": (0, 0),
    "EndTransactionRecord": (0, 0),
    "AbortTransactionRecord": (0, 0),
    "RegisterControllerRecord": (0, 0),
}
# Control records of the metadata log (schemas/raft/, Kafka type "data").
# kjbod's own metadata records, which Kafka lacks: shipped beside Kafka's, never compared with them.
EXTENSION_RECORDS: dict[str, tuple[int, int]] = {
    "ReassignmentIntentRecord": (0, 0), "ThrottledReplicasIntentRecord": (0, 0), "ThrottledRateIntentRecord": (0, 0)}
# kjbod's own APIs (KIP-179's, which Kafka never shipped): api keys from 10000, never compared with Kafka's.
EXTENSION_APIS: dict[str, tuple[int, int]] = {
    "ReassignPartitions": (0, 0),
    "AlterInterbrokerThrottledRates": (0, 0),
    "AlterInterbrokerThrottledReplicas": (0, 0),
}
EXTENSION_MESSAGES: dict[str, tuple[int, int]] = {
    api + kind: rng for api, rng in EXTENSION_APIS.items() for kind in ("Request", "Response")}
SERVED_CONTROL_RECORDS: dict[str, tuple[int, int]] = {
    "LeaderChangeMessage": (0, 1),
    "SnapshotHeaderRecord": (0, 0),
    "SnapshotFooterRecord": (0, 0),
    "KRaftVersionRecord": (0, 0),
    "VotersRecord": (0, 0),
}
SERVED: dict[str, tuple[int, int]] = {
    **SERVED_HEADERS,
    **SERVED_CONTROL_RECORDS,
    **{api + kind: rng for api, rng in SERVED_APIS.items() for kind in ("Request", "Response")},
    **SERVED_RECORDS,
}

TOP_KEYS = {"apiKey", "type", "listeners", "name", "validVersions", "flexibleVersions", "latestVersionUnstable",
            "fields", "commonStructs"}
FIELD_KEYS = {"name", "type", "versions", "nullableVersions", "taggedVersions", "tag", "default", "ignorable",
              "mapKey", "entityType", "flexibleVersions", "about", "fields", "kjbodExtension"}
INT_TYPES = {"int8", "int16", "int32", "int64", "uint16", "uint32"}
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"
EMPTY = "<empty>"  # implicit default of arrays, distinct from an explicit null


# ---------------------------------------------------------------------------------------------------------------
# Reading Kafka's format


def strip_line_comments(text: str) -> str:
    """Drop `//` comments (to end of line) outside string literals, as Kafka's JSON reader allows."""
    out: list[str] = []
    i, n, in_string = 0, len(text), False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            out.append(c)
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def load_schema(path: Path) -> dict[str, Any]:
    return json.loads(strip_line_comments(path.read_text(encoding="utf-8")))


_VERSION_RE = re.compile(r"^(\d+)(?:(\+)|-(\d+))?$")


def parse_versions(spec: str) -> tuple[int, int | None] | None:
    """Kafka's version spec: "none" -> None, "3+" -> (3, None), "3-5" -> (3, 5), "7" -> (7, 7)."""
    spec = spec.strip()
    if spec == "none":
        return None
    m = _VERSION_RE.match(spec)
    if m is None:
        raise ValueError(f"not a Kafka version spec: {spec!r}")
    low = int(m.group(1))
    if m.group(2):
        return (low, None)
    high = int(m.group(3)) if m.group(3) is not None else low
    if high < low:
        raise ValueError(f"empty version range: {spec!r}")
    return (low, high)


def in_versions(spec: str | None, version: int) -> bool:
    if spec is None:
        return False
    rng = parse_versions(spec)
    if rng is None:
        return False
    low, high = rng
    return version >= low and (high is None or version <= high)


def normalize_default(value: Any, type_: str) -> Any:
    """One value per meaning: "0x7fffffff" == 2147483647, "true" == True, absent == the type's zero value."""
    if value is None:
        if type_ in INT_TYPES:
            return 0
        return {"bool": False, "float64": 0.0, "string": "", "uuid": ZERO_UUID}.get(
            type_, EMPTY if type_.startswith("[]") else None)
    if isinstance(value, bool):
        value = "true" if value else "false"
    text = str(value).strip()
    if text == "null":
        return None
    if type_ in INT_TYPES:
        return int(text, 16) if text.lower().startswith(("0x", "-0x")) else int(text)
    if type_ == "bool":
        if text.lower() not in ("true", "false"):
            raise ValueError(f"bad bool default {value!r}")
        return text.lower() == "true"
    if type_ == "float64":
        return float(text)
    return text


# ---------------------------------------------------------------------------------------------------------------
# Where Kafka's JSON lives


def kafka_python_resources() -> Path:
    spec = importlib.util.find_spec("kafka")
    if spec is None or spec.origin is None:
        pytest.fail("kafka-python is not installed in this environment; it ships Kafka's message JSON "
                    "(install the dev extras: make install)")
    path = Path(spec.origin).parent / "protocol" / "schemas" / "resources"
    if not path.is_dir():
        pytest.fail(f"kafka-python has no bundled Kafka message JSON at {path} (expected kafka-python 3.x)")
    return path


def reference_dir() -> Path:
    if not (REFERENCE.is_dir() and (REFERENCE / "metadata").is_dir()):
        pytest.fail(f"Kafka reference schemas are missing: expected {REFERENCE} with a metadata/ subdirectory "
                    "(the repository's sibling shared/reference/kafka-schemas)")
    return REFERENCE


def kafka_candidates(name: str) -> list[Path]:
    """Kafka's files for a message, preferred first: kafka-python's (4.x), then the reference snapshot."""
    if name in SERVED_RECORDS:
        paths = [reference_dir() / "metadata" / f"{name}.json"]
    else:
        paths = [kafka_python_resources() / f"{name}.json", reference_dir() / f"{name}.json"]
    paths.append(KAFKA_FACTS / f"{name}.json")
    return [p for p in paths if p.is_file()]


@cache
def kafka_schema(path: Path) -> dict[str, Any]:
    return load_schema(path)


# Kafka's structure (apache/kafka trunk, no about texts) of the messages neither kafka-python nor the reference
# snapshot ships: the facts the comparison needs, written out here.
def _f(name: str, type_: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, "versions": "0+", **extra}


KAFKA_INLINE: dict[str, dict[str, Any]] = {
    "UnregisterBrokerRecord": {"apiKey": 1, "type": "metadata", "validVersions": "0", "flexibleVersions": "none",
                               "fields": [_f("BrokerId", "int32", entityType="brokerId"),
                                          _f("BrokerEpoch", "int64")]},
    "FeatureLevelRecord": {"apiKey": 12, "type": "metadata", "validVersions": "0", "flexibleVersions": "0+",
                           "fields": [_f("Name", "string"), _f("FeatureLevel", "int16")]},
    "ProducerIdsRecord": {"apiKey": 15, "type": "metadata", "validVersions": "0", "flexibleVersions": "0+",
                          "fields": [_f("BrokerId", "int32", entityType="brokerId"),
                                     _f("BrokerEpoch", "int64", default="-1"), _f("NextProducerId", "int64")]},
    "UserScramCredentialRecord": {"apiKey": 11, "type": "metadata", "validVersions": "0", "flexibleVersions": "0+",
                                  "fields": [_f("Name", "string"), _f("Mechanism", "int8"), _f("Salt", "bytes"),
                                             _f("StoredKey", "bytes"), _f("ServerKey", "bytes"),
                                             _f("Iterations", "int32")]},
    "RemoveUserScramCredentialRecord": {"apiKey": 22, "type": "metadata", "validVersions": "0",
                                        "flexibleVersions": "0+",
                                        "fields": [_f("Name", "string"), _f("Mechanism", "int8")]},
    "AccessControlEntryRecord": {"apiKey": 18, "type": "metadata", "validVersions": "0", "flexibleVersions": "0+",
                                 "fields": [_f("Id", "uuid"), _f("ResourceType", "int8"), _f("ResourceName", "string"),
                                            _f("PatternType", "int8"), _f("Principal", "string"),
                                            _f("Host", "string"), _f("Operation", "int8"),
                                            _f("PermissionType", "int8")]},
    "RemoveAccessControlEntryRecord": {"apiKey": 19, "type": "metadata", "validVersions": "0",
                                       "flexibleVersions": "0+", "fields": [_f("Id", "uuid")]},
    "DelegationTokenRecord": {"apiKey": 10, "type": "metadata", "validVersions": "0", "flexibleVersions": "0+",
                              "fields": [_f("Owner", "string"), _f("Requester", "string"), _f("Renewers", "[]string"),
                                         _f("IssueTimestamp", "int64"), _f("MaxTimestamp", "int64"),
                                         _f("ExpirationTimestamp", "int64"), _f("TokenId", "string")]},
    "RemoveDelegationTokenRecord": {"apiKey": 26, "type": "metadata", "validVersions": "0", "flexibleVersions": "0+",
                                    "fields": [_f("TokenId", "string")]},
    # Kafka 4.0's metadata/src/main/resources/common/metadata/ClearElrRecord.json (KIP-966)
    "ClearElrRecord": {"apiKey": 28, "type": "metadata", "validVersions": "0", "flexibleVersions": "0+",
                       "fields": [_f("TopicName", "string", entityType="topicName")]},
    "AllocateProducerIdsRequest": {"apiKey": 67, "type": "request", "listeners": ["zkBroker", "controller"],
                                   "validVersions": "0", "flexibleVersions": "0+",
                                   "fields": [_f("BrokerId", "int32", entityType="brokerId"),
                                              _f("BrokerEpoch", "int64", default="-1")]},
    "AllocateProducerIdsResponse": {"apiKey": 67, "type": "response", "validVersions": "0", "flexibleVersions": "0+",
                                    "fields": [_f("ThrottleTimeMs", "int32"), _f("ErrorCode", "int16"),
                                               _f("ProducerIdStart", "int64", entityType="producerId"),
                                               _f("ProducerIdLen", "int32")]},
}


def primary_kafka(name: str) -> dict[str, Any]:
    paths = kafka_candidates(name)
    if not paths and name in KAFKA_INLINE:
        return KAFKA_INLINE[name]
    if not paths:
        pytest.fail(f"no Kafka definition of {name} in kafka-python or {REFERENCE}")
    return kafka_schema(paths[0])


def kafka_for_version(name: str, version: int) -> tuple[str, dict[str, Any]]:
    for path in kafka_candidates(name):
        schema = kafka_schema(path)
        if in_versions(schema["validVersions"], version):
            return f"{path.parent.name}/{path.name}", schema
    if name in KAFKA_INLINE and in_versions(KAFKA_INLINE[name]["validVersions"], version):
        return "KAFKA_INLINE", KAFKA_INLINE[name]
    pytest.fail(f"no Kafka definition of {name} covers version {version}")


# ---------------------------------------------------------------------------------------------------------------
# Our files


def our_paths() -> list[Path]:
    return (sorted(SCHEMAS.glob("*.json")) + sorted((SCHEMAS / "metadata").glob("*.json"))
            + sorted((SCHEMAS / "raft").glob("*.json")))


@cache
def our_schema(name: str) -> dict[str, Any]:
    sub = "metadata/" if name in SERVED_RECORDS else "raft/" if name in SERVED_CONTROL_RECORDS else ""
    return load_schema(SCHEMAS / f"{sub}{name}.json")


def walk_fields(fields: list[dict[str, Any]], prefix: str = ""):
    """Yield (dotted path, field) for every field at every nesting level."""
    for field in fields:
        path = prefix + field["name"]
        yield path, field
        yield from walk_fields(field.get("fields", []), path + ".")


def all_fields(schema: dict[str, Any]):
    yield from walk_fields(schema["fields"])
    for struct in schema.get("commonStructs", []):
        yield from walk_fields(struct["fields"], struct["name"] + ".")


def is_extension(field: dict[str, Any]) -> bool:
    return field.get("kjbodExtension") is True


# ---------------------------------------------------------------------------------------------------------------
# Projection onto one version


@dataclass(frozen=True)
class FieldAt:
    """A field as it exists in one version: everything that decides its bytes and its meaning."""

    name: str
    type: str
    nullable: bool
    tag: int | None  # None when the field is not tagged in this version
    default: Any
    ignorable: bool
    map_key: bool
    entity_type: str | None
    flexible_versions: str | None
    children: tuple[FieldAt, ...]


def struct_fields(field: dict[str, Any], common: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    if "fields" in field:
        return field["fields"]
    return common.get(field["type"].removeprefix("[]"), [])


def project(fields: list[dict[str, Any]], common: dict[str, list[dict[str, Any]]], version: int,
            skip_extensions: bool) -> tuple[FieldAt, ...]:
    out = []
    for f in fields:
        if not in_versions(f["versions"], version) or (skip_extensions and is_extension(f)):
            continue
        tagged = in_versions(f.get("taggedVersions"), version)
        flex = f.get("flexibleVersions")
        out.append(FieldAt(
            name=f["name"],
            type=f["type"],
            nullable=in_versions(f.get("nullableVersions"), version),
            tag=int(f["tag"]) if tagged else None,
            default=normalize_default(f.get("default"), f["type"]),
            ignorable=bool(f.get("ignorable", False)),
            map_key=bool(f.get("mapKey", False)),
            entity_type=f.get("entityType"),
            flexible_versions=None if flex is None else str(parse_versions(flex)),
            children=project(struct_fields(f, common), common, version, skip_extensions),
        ))
    return tuple(out)


def project_schema(schema: dict[str, Any], version: int, skip_extensions: bool) -> tuple[FieldAt, ...]:
    common = {s["name"]: s["fields"] for s in schema.get("commonStructs", [])}
    return project(schema["fields"], common, version, skip_extensions)


def differences(ours: tuple[FieldAt, ...], theirs: tuple[FieldAt, ...], where: str) -> list[str]:
    """Readable differences between two projections, naming the field path of each."""
    names_ours, names_theirs = [f.name for f in ours], [f.name for f in theirs]
    if names_ours != names_theirs:
        return [f"{where or '<root>'}: fields {names_ours} but Kafka has {names_theirs}"]
    problems = []
    for a, b in zip(ours, theirs, strict=True):
        path = f"{where}{a.name}"
        for attr in ("type", "nullable", "tag", "default", "ignorable", "map_key", "entity_type",
                     "flexible_versions"):
            if getattr(a, attr) != getattr(b, attr):
                problems.append(f"{path}: {attr} is {getattr(a, attr)!r}, Kafka has {getattr(b, attr)!r}")
        problems += differences(a.children, b.children, path + ".")
    return problems


def served_versions(name: str) -> range:
    low, high = SERVED[name]
    return range(low, high + 1)


SCHEMA_NAMES = sorted(SERVED)


# ---------------------------------------------------------------------------------------------------------------
# The version-spec parser and normalizer this file relies on


@pytest.mark.parametrize(("spec", "expected"), [
    ("0+", (0, None)), ("12+", (12, None)), ("3-5", (3, 5)), ("7", (7, 7)), ("none", None), (" 2+ ", (2, None)),
])
def test_parse_versions(spec: str, expected: tuple[int, int | None] | None) -> None:
    assert parse_versions(spec) == expected


@pytest.mark.parametrize("spec", ["", "+", "1-", "a+", "5-3", "-1", "1+2", "1 - 2"])
def test_parse_versions_rejects_junk(spec: str) -> None:
    with pytest.raises(ValueError):
        parse_versions(spec)


def test_in_versions_bounds() -> None:
    assert in_versions("3-5", 3) and in_versions("3-5", 5)
    assert not in_versions("3-5", 2) and not in_versions("3-5", 6)
    assert in_versions("4+", 1000) and not in_versions("4+", 3)
    assert not in_versions("none", 0) and not in_versions(None, 0)


def test_normalize_default() -> None:
    assert normalize_default("0x7fffffff", "int32") == 2147483647 == normalize_default(2147483647, "int32")
    assert normalize_default("-1", "int64") == -1 == normalize_default(-1, "int64")
    assert normalize_default(None, "int16") == 0 == normalize_default("0", "int16")
    assert normalize_default("true", "bool") is True and normalize_default(False, "bool") is False
    assert normalize_default("null", "string") is None != normalize_default(None, "string")
    assert normalize_default("null", "[]int32") is None != normalize_default(None, "[]int32")
    assert normalize_default(None, "uuid") == ZERO_UUID


def test_strip_line_comments_keeps_strings() -> None:
    text = '// head\n{ "a": "x // not a comment", // tail\n "b": 1 }\n'
    assert json.loads(strip_line_comments(text)) == {"a": "x // not a comment", "b": 1}


# ---------------------------------------------------------------------------------------------------------------
# Our files: present, parseable, well-formed


def test_kafka_sources_are_present() -> None:
    assert (kafka_python_resources() / "ApiVersionsRequest.json").is_file()
    assert (reference_dir() / "metadata" / "RegisterBrokerRecord.json").is_file()


def test_exactly_the_served_schemas_are_shipped() -> None:
    shipped = {p.stem for p in our_paths()}
    expected = set(SERVED) | set(EXTENSION_RECORDS) | set(EXTENSION_MESSAGES)
    assert shipped == expected, (
        f"missing: {sorted(expected - shipped)}; unexpected: {sorted(shipped - expected)}")
    for name in SERVED_RECORDS:
        assert (SCHEMAS / "metadata" / f"{name}.json").is_file(), f"{name} belongs in schemas/metadata/"


@pytest.mark.parametrize("name", sorted(EXTENSION_RECORDS))
def test_extension_records_use_kjbods_type_range(name: str) -> None:
    schema = load_schema(SCHEMAS / "metadata" / f"{name}.json")
    assert schema["apiKey"] >= 10000, "kjbod's metadata record types start at 10000"
    assert all(f["about"].startswith("kjbod extension:") for _, f in all_fields(schema))


@pytest.mark.parametrize("name", sorted(EXTENSION_MESSAGES))
def test_extension_apis_use_kjbods_key_range(name: str) -> None:
    schema = load_schema(SCHEMAS / f"{name}.json")
    assert schema["apiKey"] >= 10000, "kjbod's API keys start at 10000 (Kafka's are below 100)"
    assert parse_versions(schema["validVersions"]) == EXTENSION_MESSAGES[name]
    assert parse_versions(schema["flexibleVersions"]) == (0, None), "flexible from the start"
    assert all(f["about"].startswith("kjbod extension:") for _, f in all_fields(schema))
    partner = name.removesuffix("Request") + "Response" if name.endswith("Request") else \
        name.removesuffix("Response") + "Request"
    assert load_schema(SCHEMAS / f"{partner}.json")["apiKey"] == schema["apiKey"]


@pytest.mark.parametrize("path", our_paths(), ids=lambda p: p.stem)
def test_file_parses_and_is_well_formed(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    schema = load_schema(path)
    assert text.lstrip().startswith("//"), "each schema opens with our version-history comment"
    assert "Licensed to the Apache Software Foundation" not in text
    assert schema["name"] == path.stem, "file name must be the message name"
    assert set(schema) <= TOP_KEYS, f"unknown top-level keys {set(schema) - TOP_KEYS}"
    assert "deprecatedVersions" not in schema
    expected_type = ("metadata" if path.parent.name == "metadata" else "data" if path.parent.name == "raft"
                     else "header" if path.stem.endswith("Header")
                     else "request" if path.stem.endswith("Request") else "response")
    assert schema["type"] == expected_type
    if expected_type == "request":
        assert schema["listeners"] and set(schema["listeners"]) <= {"broker", "controller"}
    else:
        assert "listeners" not in schema
    assert (expected_type in ("header", "data")) == ("apiKey" not in schema)
    parse_versions(schema["validVersions"])
    parse_versions(schema["flexibleVersions"])
    for field_path, field in all_fields(schema):
        assert set(field) <= FIELD_KEYS, f"{field_path}: unknown keys {set(field) - FIELD_KEYS}"
        for key in ("versions", "nullableVersions", "taggedVersions", "flexibleVersions"):
            if key in field:
                parse_versions(field[key])
        about = field.get("about", "")
        assert about.strip() and "\n" not in about, f"{field_path}: needs a one-line about"
        assert ("tag" in field) == ("taggedVersions" in field), f"{field_path}: tag and taggedVersions go together"


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_valid_versions_are_the_served_range(name: str) -> None:
    low, high = SERVED[name]
    assert parse_versions(our_schema(name)["validVersions"]) == (low, high)


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_no_field_lies_wholly_outside_the_served_range(name: str) -> None:
    schema = our_schema(name)
    outside = [p for p, f in all_fields(schema) if not any(in_versions(f["versions"], v)
                                                           for v in served_versions(name))]
    assert not outside, f"fields that exist only in versions we do not serve: {outside}"


def test_names_are_unique() -> None:
    names = [load_schema(p)["name"] for p in our_paths()]
    assert len(names) == len(set(names))
    for path in our_paths():
        schema = load_schema(path)
        structs = [s["name"] for s in schema.get("commonStructs", [])]
        structs += [f["type"].removeprefix("[]") for _, f in all_fields(schema) if "fields" in f]
        assert len(structs) == len(set(structs)), f"{path.stem}: struct names repeat: {structs}"
        levels = [schema["fields"]] + [f["fields"] for _, f in all_fields(schema) if "fields" in f]
        levels += [s["fields"] for s in schema.get("commonStructs", [])]
        for fields in levels:
            field_names = [f["name"] for f in fields]
            assert len(field_names) == len(set(field_names)), f"{path.stem}: field names repeat: {field_names}"


def test_tags_are_unique_within_each_struct_and_version() -> None:
    for name in SCHEMA_NAMES:
        for version in served_versions(name):
            stack = [project_schema(our_schema(name), version, skip_extensions=False)]
            while stack:
                fields = stack.pop()
                tags = [f.tag for f in fields if f.tag is not None]
                assert len(tags) == len(set(tags)), f"{name} v{version}: repeated tags {tags}"
                stack += [f.children for f in fields]


# ---------------------------------------------------------------------------------------------------------------
# Against Kafka


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_header_facts_match_kafka(name: str) -> None:
    ours, kafka = our_schema(name), primary_kafka(name)
    assert ours["type"] == kafka["type"]
    assert ours.get("apiKey") == kafka.get("apiKey")
    assert parse_versions(ours["flexibleVersions"]) == parse_versions(kafka["flexibleVersions"])
    if "listeners" in kafka:
        assert ours["listeners"] == [lst for lst in kafka["listeners"] if lst != "zkBroker"]
    # Only flag a served version as unstable when Kafka does so for that same version.
    if ours.get("latestVersionUnstable"):
        assert kafka.get("latestVersionUnstable") and parse_versions(kafka["validVersions"]) == parse_versions(
            ours["validVersions"])


def test_request_and_response_share_api_keys() -> None:
    seen: dict[int, str] = {}
    for api in SERVED_APIS:
        request, response = our_schema(api + "Request"), our_schema(api + "Response")
        assert request["apiKey"] == response["apiKey"], api
        assert request["apiKey"] not in seen, f"{api} reuses api key of {seen.get(request['apiKey'])}"
        seen[request["apiKey"]] = api
    record_keys = [our_schema(r)["apiKey"] for r in SERVED_RECORDS]
    assert len(record_keys) == len(set(record_keys))


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_structure_matches_kafka_in_every_served_version(name: str) -> None:
    ours = our_schema(name)
    problems = []
    for version in served_versions(name):
        source, kafka = kafka_for_version(name, version)
        mine = project_schema(ours, version, skip_extensions=True)
        theirs = project_schema(kafka, version, skip_extensions=False)
        problems += [f"v{version} (vs {source}): {d}"
                     for d in differences(mine, theirs, "")]
    assert not problems, "\n".join(problems)


def _squash(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_about_texts_are_our_own(name: str) -> None:
    kafka_abouts: dict[str, set[str]] = {}
    for path in kafka_candidates(name):
        for field_path, field in all_fields(kafka_schema(path)):
            if field.get("about"):
                kafka_abouts.setdefault(field_path, set()).add(_squash(field["about"]))
    copied = [p for p, f in all_fields(our_schema(name)) if _squash(f["about"]) in kafka_abouts.get(p, set())]
    assert not copied, f"about texts identical to Kafka's: {copied}"


# ---------------------------------------------------------------------------------------------------------------
# kjbod extensions


def test_extension_fields_are_safe_for_kafka_clients() -> None:
    found = 0
    for name in SCHEMA_NAMES:
        schema = our_schema(name)
        for field_path, field in all_fields(schema):
            if not is_extension(field):
                continue
            found += 1
            assert "taggedVersions" in field and field["taggedVersions"] == field["versions"], field_path
            assert int(field["tag"]) >= 10000, f"{name}.{field_path}: extension tags start at 10000"
            assert field.get("ignorable") is True, f"{name}.{field_path}: extensions must be ignorable"
            assert field["about"].startswith("kjbod extension:"), f"{name}.{field_path}"
            flexible = parse_versions(schema["flexibleVersions"])
            tagged = parse_versions(field["taggedVersions"])
            assert flexible is not None and tagged is not None and tagged[0] >= flexible[0], (
                f"{name}.{field_path}: tagged only where the message is flexible")
    assert found >= 1


def test_describe_log_dirs_carries_the_directory_id_extension() -> None:
    fields = dict(all_fields(our_schema("DescribeLogDirsResponse")))
    field = fields["Results.DirectoryId"]
    assert field["type"] == "uuid"
    assert field["kjbodExtension"] is True
    assert (field["versions"], field["taggedVersions"], int(field["tag"])) == ("2+", "2+", 10000)
    assert normalize_default(field.get("default"), "uuid") == ZERO_UUID
    assert field["about"].startswith("kjbod extension:")
