"""Client metrics (KIP-714) in process: the CLIENT_METRICS configs' checks and incremental changes, subscriptions
matched against a client's attributes, Kafka's subscription ids, the manager's answers to
GetTelemetrySubscriptions and PushTelemetry (each of Kafka's errors), the OTLP payload decoded into series (delta
sums added up), the cap on series, forgetting silent clients, and telemetry.max.bytes reaching the broker."""

from __future__ import annotations

import dataclasses
import gzip
import struct

import crc32c
import pytest

from kjbod.broker import otlp
from kjbod.broker.client_metrics import ClientMetricsManager
from kjbod.broker.node import BrokerNode
from kjbod.metadata.client_metrics import (
    CLIENT_METRICS_RESOURCE,
    ClientMetricsConfigError,
    java_set_text,
    plan,
    subscription_id,
    subscriptions,
    uuid_java_hash,
    validate,
)
from kjbod.metadata.image import EMPTY_IMAGE
from kjbod.protocol.errors import ErrorCode
from kjbod.server.config import build_config

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


# -- a tiny protobuf writer for test payloads --------------------------------------------------------------------

def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _double(number: int, value: float) -> bytes:
    return _varint(number << 3 | 1) + struct.pack("<d", value)


def _fixed64(number: int, value: int) -> bytes:
    return _varint(number << 3 | 1) + struct.pack("<Q", value)


def _uint(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _kv(key: str, value: str) -> bytes:
    return _field(1, key.encode()) + _field(2, _field(1, value.encode()))


def metrics_data(*metrics: bytes) -> bytes:
    resource = _field(1, _field(1, _kv("service.name", "test")))  # ResourceMetrics.resource.attributes
    scope = _field(2, b"".join(_field(2, m) for m in metrics))
    return _field(1, resource + scope)


def gauge(name: str, value: float, **attrs: str) -> bytes:
    point = _fixed64(3, 1_700_000_000_000_000_000) + _double(4, value) + b"".join(
        _field(7, _kv(k, v)) for k, v in attrs.items())
    return _field(1, name.encode()) + _field(5, _field(1, point))


def delta_sum(name: str, value: int) -> bytes:
    point = _fixed64(3, 1) + _fixed64(6, value)  # as_int, sfixed64
    return _field(1, name.encode()) + _field(7, _field(1, point) + _uint(2, otlp.DELTA) + _uint(3, 1))


# -- configs -----------------------------------------------------------------------------------------------------

def test_the_configs_are_checked_as_kafka_checks_them() -> None:
    validate("sub", {"metrics": "org.apache.kafka.producer.", "interval.ms": "1000", "match": "client_id=a.*"})
    for name, configs, code, text in (
            ("", {}, ErrorCode.INVALID_REQUEST, "Subscription name can't be empty"),
            ("s", {"colour": "red"}, ErrorCode.INVALID_REQUEST, "Unknown client metrics configuration: colour"),
            ("s", {"interval.ms": "99"}, ErrorCode.INVALID_REQUEST, "interval must be between 100 and 3600000"),
            ("s", {"interval.ms": "3600001"}, ErrorCode.INVALID_REQUEST, "interval must be between"),
            ("s", {"interval.ms": "soon"}, ErrorCode.INVALID_CONFIG, "Not a number"),
            ("s", {"match": "colour=red"}, ErrorCode.INVALID_CONFIG, "Illegal client matching pattern: colour=red"),
            ("s", {"match": "client_id"}, ErrorCode.INVALID_CONFIG, "Illegal client matching pattern"),
            ("s", {"match": "client_id=(("}, ErrorCode.INVALID_CONFIG, "Illegal client matching pattern")):
        with pytest.raises(ClientMetricsConfigError) as e:
            validate(name, configs)
        assert e.value.code == code and text in e.value.message


def test_incremental_changes_of_the_list_configs() -> None:
    current = {"metrics": "a.,b.", "interval.ms": "1000"}
    assert plan(current, "s", [("metrics", APPEND, "c.,a.")], replace=False)["metrics"] == "a.,b.,c."
    assert plan(current, "s", [("metrics", SUBTRACT, "a.")], replace=False)["metrics"] == "b."
    assert plan(current, "s", [("interval.ms", DELETE, None)], replace=False) == {"metrics": "a.,b."}
    assert plan(current, "s", [("match", SET, "client_id=x")], replace=True) == {"match": "client_id=x"}
    with pytest.raises(ClientMetricsConfigError) as e:
        plan(current, "s", [("interval.ms", APPEND, "5")], replace=False)
    assert e.value.code == ErrorCode.INVALID_REQUEST


def test_subscriptions_come_from_the_images_client_metrics_resources_and_match_whole_attributes() -> None:
    configs = {(CLIENT_METRICS_RESOURCE, "a"): {"metrics": "x.", "match": "client_id=app-[0-9]+,client_software_name=librdkafka"},
               (CLIENT_METRICS_RESOURCE, "emptied"): {},
               (2, "topic"): {"retention.ms": "1"}}
    (sub,) = subscriptions(configs)
    assert (sub.name, sub.metrics, sub.interval_ms) == ("a", ("x.",), 300_000)
    assert sub.matches({"client_id": "app-12", "client_software_name": "librdkafka"})
    assert not sub.matches({"client_id": "app-12x", "client_software_name": "librdkafka"})  # the whole value
    assert not sub.matches({"client_id": "app-1", "client_software_name": None})  # no software name known


def test_subscription_ids_are_kafkas() -> None:
    # Java: "hello".hashCode() == 99162322; HashSet<String> prints in bucket order.
    assert java_set_text(["b", "a", "c"]) == "[a, b, c]"
    assert java_set_text([]) == "[]"
    raw = bytes.fromhex("0102030405060708090a0b0c0d0e0f10")
    assert uuid_java_hash(raw) == (0x01020304 ^ 0x05060708 ^ 0x090A0B0C ^ 0x0D0E0F10)
    expected = crc32c.crc32c(b"[*]5000") ^ (0x01020304 ^ 0x05060708 ^ 0x090A0B0C ^ 0x0D0E0F10)
    expected = expected - (1 << 32) if expected >= 1 << 31 else expected
    assert subscription_id({"*"}, 5000, raw) == expected


# -- the manager -------------------------------------------------------------------------------------------------

CLIENT = {"client_id": "app-1", "client_software_name": "librdkafka", "client_software_version": "2.16.0",
          "client_source_address": "127.0.0.1", "client_source_port": "50000"}


def manager(configs: dict, now: list[int], **kwargs) -> ClientMetricsManager:
    return ClientMetricsManager(lambda: configs, telemetry_max_bytes=kwargs.pop("max_bytes", 10_000),
                                clock_ms=lambda: now[0], **kwargs)


def test_a_client_gets_an_id_its_subscription_and_pushes_on_time() -> None:
    now = [1_000_000]
    configs = {(CLIENT_METRICS_RESOURCE, "all"): {"metrics": "*", "interval.ms": "1000"},
               (CLIENT_METRICS_RESOURCE, "some"): {"metrics": "org.", "interval.ms": "5000"},
               (CLIENT_METRICS_RESOURCE, "others"): {"metrics": "x.", "interval.ms": "100", "match": "client_id=other"}}
    m = manager(configs, now)
    answer = m.get_subscriptions(bytes(16), CLIENT)
    assert answer.error_code == 0 and answer.instance_id != bytes(16)
    assert (answer.metrics, answer.interval_ms) == (("*",), 1000)  # '*' wins; the shortest matching interval
    assert answer.subscription_id == subscription_id({"*"}, 1000, answer.instance_id)
    iid, sub = answer.instance_id, answer.subscription_id
    assert m.get_subscriptions(iid, CLIENT).error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED  # too soon
    payload = metrics_data(gauge("org.apache.kafka.producer.record.queue.time.avg", 1.5, **{"node.id": "1"}))
    assert m.push(iid, CLIENT, sub, False, 0, payload) == (0, "")  # the first push after a Get is in time
    now[0] += 10
    assert m.push(iid, CLIENT, sub, False, 0, payload)[0] == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    now[0] += 1000
    assert m.push(iid, CLIENT, sub + 1, False, 0, payload)[0] == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    now[0] += 1000
    assert m.push(iid, CLIENT, sub, False, 9, payload)[0] == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    now[0] += 1000
    assert m.push(iid, CLIENT, sub, False, 0, b"x" * 10_001)[0] == ErrorCode.TELEMETRY_TOO_LARGE
    now[0] += 1000
    assert m.push(iid, CLIENT, sub, False, 0, b"\xff\xff")[0] == ErrorCode.INVALID_RECORD
    now[0] += 1000
    assert m.push(iid, CLIENT, sub, False, 1, gzip.compress(payload))[0] == 0
    (instance, key, series), = list(m.series())
    assert key == ("org.apache.kafka.producer.record.queue.time.avg", (("node.id", "1"),))
    assert (series.kind, series.value) == ("gauge", 1.5) and instance.instance_id == iid
    assert m.push(iid, CLIENT, sub, True, 0, b"")[0] == 0  # terminating: in time whenever it comes
    assert m.push(iid, CLIENT, sub, False, 0, b"")[0] == ErrorCode.INVALID_REQUEST  # nothing after that
    assert m.push(bytes(16), CLIENT, sub, False, 0, b"")[0] == ErrorCode.INVALID_REQUEST  # a reserved id


def test_no_matching_subscription_wants_nothing_and_a_change_is_seen_at_once() -> None:
    now = [1_000_000]
    configs: dict = {(CLIENT_METRICS_RESOURCE, "others"): {"metrics": "x.", "match": "client_id=other"}}
    m = manager(configs, now)
    answer = m.get_subscriptions(bytes(16), CLIENT)
    assert (answer.metrics, answer.interval_ms) == ((), 300_000)
    configs = {(CLIENT_METRICS_RESOURCE, "mine"): {"metrics": "org.", "match": "client_software_name=librdkafka"}}
    m._image_configs = lambda: configs
    again = m.get_subscriptions(answer.instance_id, CLIENT)  # not throttled: the subscriptions changed
    assert again.error_code == 0 and again.metrics == ("org.",) and again.subscription_id != answer.subscription_id


def test_delta_sums_add_up_series_are_capped_and_silent_clients_forgotten() -> None:
    now = [1_000_000]
    m = manager({(CLIENT_METRICS_RESOURCE, "all"): {"metrics": "*", "interval.ms": "100"}}, now, max_series=2)
    a = m.get_subscriptions(bytes(16), CLIENT)
    for _ in range(3):
        assert m.push(a.instance_id, CLIENT, a.subscription_id, False, 0,
                      metrics_data(delta_sum("org.x.total", 2), gauge("g1", 1), gauge("g2", 2)))[0] == 0
        now[0] += 100
    values = {key[0]: s.value for _, key, s in m.series()}
    assert values == {"org.x.total": 6.0, "g1": 1.0}  # the third series is over the cap
    assert m.dropped_series == 3 and m.series_count == 2
    now[0] += 60_000  # three intervals, at least a minute, without a word
    assert list(m.series()) == [] and m.series_count == 0 and not m.instances


def test_telemetry_max_bytes_reaches_the_broker() -> None:
    config = build_config({"process.roles": "broker,controller", "node.id": "1", "log.dirs": "/tmp/unused",
                           "controller.quorum.voters": "1@127.0.0.1:9093", "listeners":
                           "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
                           "controller.listener.names": "CONTROLLER", "telemetry.max.bytes": "100"})
    node = BrokerNode(config, lambda *_: None)
    node.metadata = dataclasses.replace(EMPTY_IMAGE, configs={(CLIENT_METRICS_RESOURCE, "all"): {"metrics": "*"}})
    m = node.client_metrics
    assert m.telemetry_max_bytes == 100
    a = m.get_subscriptions(bytes(16), CLIENT)
    assert m.push(a.instance_id, CLIENT, a.subscription_id, False, 0, b"\x00" * 101)[0] == \
        ErrorCode.TELEMETRY_TOO_LARGE
    assert m.push(a.instance_id, CLIENT, a.subscription_id, True, 0, metrics_data(gauge("g", 1)))[0] == 0


def test_malformed_payloads_raise_the_decoders_error_only() -> None:
    for bad in (b"\x0a\x05ab", b"\x0f", b"\x0a\x80", _field(1, _field(2, _field(2, b"\x0a\x02\xff\xfe")))):
        with pytest.raises(otlp.OtlpError):
            otlp.decode_metrics(bad)


def _histogram(name: str, count: int, total: float) -> bytes:
    point = _fixed64(3, 1) + _fixed64(4, count) + _double(5, total) + _field(9, _kv("node.id", "2"))
    return _field(1, name.encode()) + _field(9, _field(1, point) + _uint(2, otlp.CUMULATIVE))


def test_the_endpoint_shows_pushed_series_as_prometheus_families() -> None:
    from types import SimpleNamespace

    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from kjbod.metrics.collect import NodeCollector
    from kjbod.metrics.counters import RequestStats

    now = [1_000_000]
    m = manager({(CLIENT_METRICS_RESOURCE, "all"): {"metrics": "*", "interval.ms": "100"}}, now)
    a = m.get_subscriptions(bytes(16), CLIENT)
    assert m.push(a.instance_id, CLIENT, a.subscription_id, False, 0, metrics_data(
        delta_sum("org.apache.kafka.producer.connection.creation.total", 3),
        gauge("org.apache.kafka.producer.node.request.latency.avg", 2.5, **{"node.id": "1", "client_id": "x"}),
        _histogram("org.apache.kafka.client.request.latency", 4, 10.0)))[0] == 0
    collector = NodeCollector(SimpleNamespace(handler=None, client_metrics=m), RequestStats(), None)
    class Telemetry:
        def collect(self):
            return collector._client_telemetry()

    registry = CollectorRegistry()
    registry.register(Telemetry())
    text = generate_latest(registry).decode()  # what a scrape answers must parse
    families = {f.name: f for f in text_string_to_metric_families(text)}
    iid = a.instance_id
    from kjbod.storage.ids import uuid_to_str

    who = {"client_instance_id": uuid_to_str(iid), "client_id": "app-1"}
    counter = families["org_apache_kafka_producer_connection_creation"]
    assert counter.type == "counter" and [(s.name, s.labels, s.value) for s in counter.samples] == [
        ("org_apache_kafka_producer_connection_creation_total", who, 3.0)]
    latency = families["org_apache_kafka_producer_node_request_latency_avg"]
    assert [(s.labels, s.value) for s in latency.samples] == [({**who, "node_id": "1", "attr_client_id": "x"}, 2.5)]
    summary = families["org_apache_kafka_client_request_latency"]
    assert {(s.name, s.value) for s in summary.samples} == {("org_apache_kafka_client_request_latency_count", 4.0),
                                                            ("org_apache_kafka_client_request_latency_sum", 10.0)}
    assert families["kafka_server_client_metrics_instance_count"].samples[0].value == 1
    assert families["kjbod_client_telemetry_series"].samples[0].value == 3
