"""Every request the admin client sends, at every version it can send it, decodes in kafka-python and in kio.

For each (API, version) the fake broker advertises only that version, the client's methods for that API run with
inputs that fill every field the client can set (nulls, empty lists, several topics, configs with a null value,
synonyms and documentation, explicit replica assignments), and the fake broker records the request bytes exactly
as they arrived.  The header and the body are then decoded by kafka-python 3.0.12 and kio 0.6.5, and every field
those libraries report must equal both kjbod's own decoding of the bytes and, for the fields that carry the
caller's input, the input itself.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import io
import re
import uuid
from enum import Enum
from typing import Any

import pytest

from kjbod.admin import (
    AdminClient,
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResource,
    NewTopic,
)
from kjbod.protocol.generated.registry import APIS
from kjbod.protocol.headers import request_header_version

from .fake_broker import FakeCluster, LogDir, Recorded, Replica

kafka_api_header = pytest.importorskip("kafka.protocol.api_header")
kio_serial = pytest.importorskip("kio.serial")
import kafka.protocol.admin as kp_admin  # noqa: E402
import kafka.protocol.metadata as kp_metadata  # noqa: E402

_ZERO_UUID = uuid.UUID(int=0)

# Lowest version the client sends, when above the codec's own minimum.
CLIENT_MIN = {3: 1}


def _versions(api_key: int) -> list[int]:
    info = APIS[api_key]
    return list(range(max(info.min_version, CLIENT_MIN.get(api_key, 0)), info.max_version + 1))


SENT = (18, 3, 60, 35, 34, 19, 20, 32, 44)
CASES = [(k, v) for k in SENT for v in _versions(k)]


# ================================================================================================ scenarios


async def _scenario(api_key: int, admin: AdminClient, cluster: FakeCluster) -> None:
    """Calls that make the client send `api_key` with as many of its fields set as the client can set."""
    if api_key in (18, 3):
        await admin.describe_topics(["events", "other"])
        await admin.describe_topics()
    elif api_key == 60:
        await admin.describe_cluster()
    elif api_key == 35:
        await admin.describe_log_dirs()
        await admin.describe_log_dirs(topics=["events"])
        await admin.describe_log_dirs(topics=[])
        await admin.describe_replica_log_dirs([("events", 0, 1), ("other", 0, 1)])
    elif api_key == 34:
        await admin.alter_replica_log_dirs({
            ("events", 0, 1): "/data/b", ("events", 1, 1): "/data/b", ("other", 0, 1): "/data/b",
            ("events", 2, 1): "/data/a"})
    elif api_key == 19:
        await admin.create_topics([
            NewTopic("new-a", 4, 1, {"retention.ms": "1000", "cleanup.policy": None}),
            NewTopic("new-b", assignments={0: [1], 1: [1]}),
        ], raise_on_error=False)
        await admin.create_topics([NewTopic("new-c", 1, 1)], validate_only=True, raise_on_error=False)
    elif api_key == 20:
        await admin.delete_topics(["events", "other"], raise_on_error=False)
    elif api_key == 32:
        await admin.describe_configs([ConfigResource.topic("events"), ConfigResource.broker(1)])
        await admin.describe_configs([ConfigResource.topic("events")], keys=["retention.ms", "x"],
                                     include_synonyms=True, include_documentation=True)
        await admin.describe_configs([ConfigResource.broker("")], keys=[])
    elif api_key == 44:
        await admin.incremental_alter_configs({
            ConfigResource.topic("events"): [AlterConfigOp("retention.ms", "5"),
                                             AlterConfigOp("flush.ms", None, AlterConfigOpType.DELETE)],
            ConfigResource.broker(1): {"num.io.threads": "4"},
        })
        await admin.incremental_alter_configs(
            {ConfigResource.topic("events"): {"segment.bytes": "1000"}}, validate_only=True)
    else:  # pragma: no cover
        raise AssertionError(api_key)


# Input values the libraries must see, per API (checked on top of "equal to kjbod's decoding").
def _check_inputs(api_key: int, version: int, decoded: list[dict]) -> None:
    if api_key == 18 and version >= 3:
        assert decoded[0]["client_software_name"] == "kjbod-admin"
    elif api_key == 3:
        assert [t["name"] for t in decoded[-2]["topics"]] == ["events", "other"]
        assert decoded[-1]["topics"] is None
        if version >= 4:
            assert decoded[-1]["allow_auto_topic_creation"] is False
    elif api_key == 35:
        assert decoded[0]["topics"] is None
        assert [(t["topic"], t["partitions"]) for t in decoded[1]["topics"]] == [("events", [0, 1, 2])]
        assert decoded[2]["topics"] == []
    elif api_key == 34:
        dirs = {d["path"]: [(t["name"], t["partitions"]) for t in d["topics"]] for d in decoded[0]["dirs"]}
        assert dirs == {"/data/b": [("events", [0, 1]), ("other", [0])], "/data/a": [("events", [2])]}
    elif api_key == 19:
        a, b = decoded[0]["topics"]
        assert (a["name"], a["num_partitions"], a["replication_factor"]) == ("new-a", 4, 1)
        assert [(c["name"], c["value"]) for c in a["configs"]] == [("retention.ms", "1000"), ("cleanup.policy", None)]
        assert [(x["partition_index"], x["broker_ids"]) for x in b["assignments"]] == [(0, [1]), (1, [1])]
        assert (b["num_partitions"], b["replication_factor"]) == (-1, -1)
        assert decoded[1]["validate_only"] is True and decoded[0]["validate_only"] is False
        assert 0 < decoded[0]["timeout_ms"] <= 30_000
    elif api_key == 20:
        names = ([t["name"] for t in decoded[0]["topics"]] if version >= 6 else decoded[0]["topic_names"])
        assert names == ["events", "other"]
    elif api_key == 32:
        sent = [(r["resource_type"], r["resource_name"], r["configuration_keys"])
                for d in decoded for r in d["resources"]]
        # A broker's own resource is routed to that broker, so it may travel in a request of its own.
        assert sorted(sent, key=repr) == sorted(
            [(2, "events", None), (4, "1", None), (2, "events", ["retention.ms", "x"]), (4, "", [])], key=repr)
        keyed = next(d for d in decoded if d["resources"][0]["configuration_keys"] == ["retention.ms", "x"])
        assert keyed["include_synonyms"] is True
        if version >= 3:
            assert keyed["include_documentation"] is True
    elif api_key == 44:
        resources = {(r["resource_type"], r["resource_name"]): [
            (c["name"], c["config_operation"], c["value"]) for c in r["configs"]]
            for d in decoded for r in d["resources"]}
        assert resources[(2, "events")] in (
            [("retention.ms", 0, "5"), ("flush.ms", 1, None)], [("segment.bytes", 0, "1000")])
        assert resources[(4, "1")] == [("num.io.threads", 0, "4")]
        assert any(d["validate_only"] for d in decoded) and not all(d["validate_only"] for d in decoded)


# ================================================================================================ libraries


def _kp_class(api_key: int):
    name = APIS[api_key].request.__name__
    for module in (kp_admin, kp_metadata):
        cls = getattr(module, name, None)
        if cls is not None:
            return cls
    raise AssertionError(f"kafka-python has no {name}")


def _kio_class(api_key: int, version: int):
    name = APIS[api_key].request.__name__
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", name[: -len("Request")]).lower()
    return getattr(importlib.import_module(f"kio.schema.{snake}.v{version}.request"), name)


def _kio_header_class(version: int):
    return importlib.import_module(f"kio.schema.request_header.v{version}.header").RequestHeader


def _plain(value: Any) -> Any:
    """A library's decoded value as plain Python: dicts, lists, ints, strs, bools, UUIDs, None."""
    if hasattr(value, "to_dict") and not isinstance(value, dict):
        return _plain(value.to_dict())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            name = f.name
            # kio turns int32/int64 millisecond fields into timedeltas and drops the "_ms".
            if isinstance(item, datetime.timedelta) and not name.endswith("_ms"):
                name += "_ms"
            out[name] = _plain(item)
        return out
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    if isinstance(value, bool) or value is None or isinstance(value, uuid.UUID):
        return value
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        return str(value)
    raise TypeError(f"unexpected value {value!r}")


def _ours(message: Any) -> Any:
    """kjbod's decoded message as plain Python, without the unknown-tagged-fields bookkeeping."""
    if dataclasses.is_dataclass(message):
        return {f.name: _ours(getattr(message, f.name)) for f in dataclasses.fields(message)
                if f.name != "unknown_tagged_fields"}
    if isinstance(message, list):
        return [_ours(v) for v in message]
    return message


def _same(lib: Any, ours: Any, where: str) -> None:
    """Every field the library decoded equals kjbod's value (fields absent at this version are not reported)."""
    if isinstance(lib, dict):
        assert isinstance(ours, dict), where
        for key, value in lib.items():
            assert key in ours, f"{where}.{key}: field unknown to kjbod"
            _same(value, ours[key], f"{where}.{key}")
    elif isinstance(lib, list):
        assert isinstance(ours, list) and len(lib) == len(ours), f"{where}: {lib!r} != {ours!r}"
        for i, (a, b) in enumerate(zip(lib, ours, strict=True)):
            _same(a, b, f"{where}[{i}]")
    elif lib is None and ours == _ZERO_UUID:
        pass  # kafka-python reads the all-zero uuid ("no id") as None
    else:
        assert lib == ours, f"{where}: library decoded {lib!r}, kjbod {ours!r}"


def _without_extensions(record: Recorded) -> bytes:
    """The body with kjbod's extension tags left out.  kjbod's admin client asks DescribeLogDirs for the
    directory-id extension (tag 10000 of the request); kafka-python reads past an unknown tag, as Apache Kafka's
    broker does, but kio 0.6.5 refuses any (KeyError), so kio gets the same request without it."""
    message = record.message
    if getattr(message, "include_directory_ids", False):
        assert record.version >= 2 and record.body != dataclasses.replace(
            message, include_directory_ids=False).encode(record.version)
        with pytest.raises(KeyError, match="10000"):
            kio_serial.entity_reader(_kio_class(record.api_key, record.version))(record.body, 0)
        return dataclasses.replace(message, include_directory_ids=False).encode(record.version)
    return record.body


def _decode_both(record: Recorded) -> tuple[dict, dict]:
    key, version = record.api_key, record.version
    kp = _plain(_kp_class(key).decode(record.body, version=version))
    body = _without_extensions(record)
    kio_obj, size = kio_serial.entity_reader(_kio_class(key, version))(body, 0)
    assert size == len(body), f"kio read {size} of {len(body)} bytes"
    return kp, _plain(kio_obj)


def _check_header(record: Recorded) -> None:
    header_version = request_header_version(record.api_key, record.version)
    expected = {"request_api_key": record.api_key, "request_api_version": record.version,
                "client_id": "wire-test"}
    buf = io.BytesIO(record.header)
    kp = _plain(kafka_api_header.RequestHeader.decode(buf, flexible=header_version == 2))
    assert buf.tell() == len(record.header)
    kio_obj, size = kio_serial.entity_reader(_kio_header_class(header_version))(record.header, 0)
    assert size == len(record.header)
    for decoded in (kp, _plain(kio_obj)):
        assert {k: decoded[k] for k in expected} == expected


# ================================================================================================ the test


@pytest.fixture
async def wire_cluster():
    c = FakeCluster()
    (broker,) = await c.start(1)
    c.add_topic("events", 3)
    c.add_topic("other", 1)
    broker.log_dirs = [
        LogDir("/data/a", replicas=[Replica("events", 0, 10), Replica("events", 1, 20), Replica("other", 0, 1)]),
        LogDir("/data/b", replicas=[Replica("events", 2, 30)]),
    ]
    yield c
    await c.stop()


@pytest.mark.parametrize(("api_key", "version"), CASES, ids=[f"{APIS[k].name}-v{v}" for k, v in CASES])
async def test_requests_decode_in_kafka_python_and_kio(wire_cluster, api_key, version):
    broker = wire_cluster.brokers[1]
    # Advertise only this version (for ApiVersions: a range topped by it, so the KIP-511 fallback is used).
    broker.api_versions[api_key] = (0, version) if api_key == 18 else (version, version)
    async with AdminClient(wire_cluster.bootstrap, client_id="wire-test") as admin:
        await _scenario(api_key, admin, wire_cluster)
    records = [r for r in broker.received if r.api_key == api_key]
    assert records and {r.version for r in records} == {version}
    kp_all, kio_all = [], []
    for record in records:
        _check_header(record)
        kp, kio = _decode_both(record)
        ours = _ours(record.message)
        _same(kp, ours, f"kafka-python {APIS[api_key].name} v{version}")
        _same(kio, ours, f"kio {APIS[api_key].name} v{version}")
        kp_all.append(kp)
        kio_all.append(kio)
    _check_inputs(api_key, version, kp_all)
    _check_inputs(api_key, version, kio_all)
