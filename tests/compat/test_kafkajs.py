"""KafkaJS (Node.js, its own protocol implementation) against a real `kjbod serve` process.

Strategy: one server per module (tests/live.py), started with auto.create.topics.enable=false so that every topic
a test uses is one it created, and a missing topic stays missing; one test starts a three-broker cluster of its
own (`kjbod cluster up`) for replicated topics.  Each test hands tests/compat/kafkajs/run.js a JSON plan
(bootstrap address, steps: producer sends, admin calls, a consumer) on stdin and gets one JSON result per step on
stdout: the values KafkaJS returned, or its error (KafkaJS's error name, Kafka's error type and code, the causes).
Every assertion is here.  What KafkaJS wrote is mostly read back with kafka-python, which assigns partitions
itself; KafkaJS's own consumer (always a group member) is tested too.

KafkaJS is pinned in tests/compat/kafkajs/package.json and package-lock.json; `make install` runs `npm ci` there
when npm exists.  Without node, or without the installed package, every test here skips and says why.

KafkaJS drops the error messages brokers send (FindCoordinator's, CreateTopics', AlterConfigs'): it shows only
its own text for each error code.  Where the message matters, the test sends KafkaJS's request version through
a raw socket and checks the message it would have received.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from live import LiveServer, start_server

from kjbod.protocol.errors import ErrorCode
from tests.cluster.conftest import running_cluster
from tests.datapath.support import RawClient, create_topic, scan_log_dirs

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's import uses a deprecated importlib API
    from kafka import KafkaConsumer, TopicPartition

# kafka-python 3.0 loads its schemas with importlib.resources.read_text/open_text, deprecated in Python 3.11.
pytestmark = pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning")

KAFKAJS = Path(__file__).parent / "kafkajs"
RUN_JS = KAFKAJS / "run.js"
PINNED = json.loads((KAFKAJS / "package.json").read_text())["dependencies"]["kafkajs"]
# Retries short and few: a test that expects an error gets it within a second, not after KafkaJS's default backoff
# (five retries from 300 ms, doubling).
FAST_RETRY = {"retries": 2, "initialRetryTime": 100, "maxRetryTime": 500}
GZIP = 1  # the codec id in a record batch's attributes


def _why_not_runnable() -> str | None:
    if shutil.which("node") is None:
        return ("node is not installed: tools/install_system_deps.sh installs Debian's nodejs and npm when run as "
                "root (make install runs it), then make install runs npm ci in tests/compat/kafkajs")
    if not (KAFKAJS / "node_modules" / "kafkajs" / "package.json").exists():
        return ("KafkaJS is not installed: make install runs `npm ci --prefix tests/compat/kafkajs` where npm "
                "exists (or run that command)")
    return None


pytestmark = [pytestmark, pytest.mark.skipif(_why_not_runnable() is not None, reason=str(_why_not_runnable()))]


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> LiveServer:
    s = start_server(tmp_path_factory.mktemp("kafkajs"), overrides={
        "auto.create.topics.enable": "false", "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "100"})
    yield s
    s.stop()


def kafkajs(bootstrap: str, *steps: dict[str, Any], retry: dict[str, int] | None = None,
            timeout: float = 120.0) -> list[dict[str, Any]]:
    """Runs `steps` in one KafkaJS process (one admin client, a producer or consumer per step); returns one
    {"ok": True, "value": ...} or {"ok": False, "error": {...}} per step."""
    plan = {"brokers": bootstrap.split(","), "clientId": "kjbod-kafkajs-test", "retry": retry or FAST_RETRY,
            "steps": list(steps)}
    env = {**os.environ, "KAFKAJS_NO_PARTITIONER_WARNING": "1"}
    done = subprocess.run(["node", str(RUN_JS)], input=json.dumps(plan), capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=KAFKAJS)
    assert done.returncode == 0, f"run.js exited with {done.returncode}:\n{done.stderr}"
    results = json.loads(done.stdout)["results"]
    assert len(results) == len(steps), done.stderr
    return results


def value(result: dict[str, Any]) -> Any:
    assert result["ok"], f"KafkaJS failed: {json.dumps(result['error'], indent=1)}"
    return result["value"]


def error(result: dict[str, Any]) -> dict[str, Any]:
    assert not result["ok"], f"KafkaJS succeeded where it should fail: {result['value']}"
    return result["error"]


def create(name: str, partitions: int = 1, **topic: Any) -> dict[str, Any]:
    return {"do": "admin", "method": "createTopics",
            "args": [{"topics": [{"topic": name, "numPartitions": partitions, **topic}]}]}


def send(topic: str, messages: list[dict[str, Any]], producer: dict[str, Any] | None = None,
         **options: Any) -> dict[str, Any]:
    return {"do": "send", "producer": producer or {}, "send": {"topic": topic, "messages": messages, **options}}


def admin(method: str, *args: Any) -> dict[str, Any]:
    return {"do": "admin", "method": method, "args": list(args)}


def read_back(server: LiveServer, topic: str, partition: int, *,
              at_least: int = 0) -> list[tuple[int, Any, Any, list, int]]:
    """Every record of one partition as (offset, key, value, headers, timestamp), read by kafka-python with
    assign (no group); first waits for the partition to hold `at_least` records (what was sent without an
    answer may still be on its way)."""
    tp = TopicPartition(topic, partition)
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest")
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + 30
        while (end := consumer.end_offsets([tp])[tp]) < at_least:
            assert time.monotonic() < deadline, f"{topic}-{partition} has {end} records, not {at_least}"
            time.sleep(0.05)
        out: list[tuple[int, Any, Any, list, int]] = []
        while (out[-1][0] + 1 if out else 0) < end:
            assert time.monotonic() < deadline, f"kafka-python did not read {topic}-{partition} to {end}"
            for records in consumer.poll(timeout_ms=1000).values():
                out.extend((r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in records)
        return out
    finally:
        consumer.close()


def offsets(result: dict[str, Any]) -> dict[int, tuple[str, str, str]]:
    """fetchTopicOffsets' answer as partition -> (low, high, offset)."""
    return {p["partition"]: (p["low"], p["high"], p["offset"]) for p in value(result)}


# ------------------------------------------------------------------------------------------------- set-up


def test_the_pinned_kafkajs_is_installed():
    installed = json.loads((KAFKAJS / "node_modules" / "kafkajs" / "package.json").read_text())["version"]
    lock = json.loads((KAFKAJS / "package-lock.json").read_text())
    assert installed == PINNED == lock["packages"]["node_modules/kafkajs"]["version"] == "2.2.4"


# ------------------------------------------------------------------------------------------------- producer


@pytest.mark.parametrize("acks", [-1, 1])
def test_send_with_acks_answers_the_offsets_and_the_records_are_there(server, acks):
    topic = f"acks{acks}".replace("-", "minus")
    created, first, second = kafkajs(server.bootstrap, create(topic, 2), send(
        topic, [{"value": "a", "partition": 1}, {"value": "b", "partition": 1}], acks=acks),
        send(topic, [{"value": "c", "partition": 1}], acks=acks))
    assert value(created) is True
    assert [(r["topicName"], r["partition"], r["errorCode"], r["baseOffset"]) for r in value(first)] == [
        (topic, 1, 0, "0")]
    assert [(r["partition"], r["baseOffset"], r["logStartOffset"]) for r in value(second)] == [(1, "2", "0")]
    assert [(o, v) for o, _k, v, _h, _t in read_back(server, topic, 1)] == [(0, b"a"), (1, b"b"), (2, b"c")]
    assert read_back(server, topic, 0) == []


def test_send_with_acks_0_gets_no_answer_and_the_records_are_written(server):
    created, sent = kafkajs(server.bootstrap, create("acks0"), send(
        "acks0", [{"value": "x", "partition": 0}, {"value": "y", "partition": 0}], acks=0))
    value(created)
    assert value(sent) == []  # KafkaJS resolves acks=0 sends with no partition results: the broker sends none
    assert [(o, v) for o, _k, v, _h, _t in read_back(server, "acks0", 0, at_least=2)] == [(0, b"x"), (1, b"y")]
    (ends,) = kafkajs(server.bootstrap, admin("fetchTopicOffsets", "acks0"))
    assert offsets(ends) == {0: ("0", "2", "2")}


def test_idempotent_producer_writes_each_record_once(server):
    producer = {"idempotent": True, "maxInFlightRequests": 1}
    created, *sends = kafkajs(server.bootstrap, create("idem", 2), *[
        send("idem", [{"value": f"v{i}", "partition": i % 2}, {"value": f"w{i}", "partition": i % 2}],
             producer=producer, acks=-1) for i in range(3)],
        {"do": "sendBatch", "producer": producer, "batch": {"acks": -1, "topicMessages": [
            {"topic": "idem", "messages": [{"value": "p0", "partition": 0}, {"value": "p1", "partition": 1}]}]}})
    value(created)
    assert [[(r["partition"], r["baseOffset"]) for r in value(s)] for s in sends] == [
        [(0, "0")], [(1, "0")], [(0, "2")], [(0, "4"), (1, "2")]]
    assert [v for _o, _k, v, _h, _t in read_back(server, "idem", 0)] == [b"v0", b"w0", b"v2", b"w2", b"p0"]
    assert [v for _o, _k, v, _h, _t in read_back(server, "idem", 1)] == [b"v1", b"w1", b"p1"]


def test_gzip_batches_are_stored_compressed_and_read_back(server):
    messages = [{"key": f"k{i}", "value": f"gzip value {i} " * 20, "partition": 0} for i in range(50)]
    created, sent = kafkajs(server.bootstrap, create("gzipped"), send("gzipped", messages, compression="gzip"))
    value(created)
    assert [(r["partition"], r["baseOffset"]) for r in value(sent)] == [(0, "0")]
    got = read_back(server, "gzipped", 0)
    assert [(o, k, v) for o, k, v, _h, _t in got] == [
        (i, f"k{i}".encode(), f"gzip value {i} ".encode() * 20) for i in range(50)]
    assert scan_log_dirs(server.log_dirs)["gzipped-0"].codecs == {GZIP}


def test_offsets_by_timestamp_find_records_inside_a_gzip_batch(server):
    # One compressed batch of three records: the lookup answers the record's own offset, not the batch's base.
    stamped = [{"value": v, "partition": 0, "timestamp": str(t)} for v, t in (("a", 1000), ("b", 2000), ("c", 3000))]
    created, sent, *found = kafkajs(
        server.bootstrap, create("gzip-times"), send("gzip-times", stamped, compression="gzip"),
        *[admin("fetchTopicOffsetsByTimestamp", "gzip-times", t) for t in (0, 2000, 2500, 3000)])
    value(created), value(sent)
    assert [value(f) for f in found] == [[{"partition": 0, "offset": o}] for o in ("0", "1", "2", "2")]
    assert scan_log_dirs(server.log_dirs)["gzip-times-0"].codecs == {GZIP}


def test_keys_headers_and_explicit_timestamps_round_trip(server):
    messages = [
        {"key": "user-1", "value": "first", "partition": 0, "timestamp": "1700000000000",
         "headers": {"trace": "abc", "multi": ["x", "y"]}},
        {"key": None, "value": "second", "partition": 0, "timestamp": "1700000005000"},
        {"key": "user-1", "value": None, "partition": 0, "timestamp": "1700000009000"},  # a tombstone
    ]
    created, sent, by_time, after = kafkajs(
        server.bootstrap, create("stamped"), send("stamped", messages),
        admin("fetchTopicOffsetsByTimestamp", "stamped", 1700000004000),
        admin("fetchTopicOffsetsByTimestamp", "stamped", 1800000000000))
    value(created)
    assert [(r["partition"], r["baseOffset"]) for r in value(sent)] == [(0, "0")]
    assert read_back(server, "stamped", 0) == [
        (0, b"user-1", b"first", [("trace", b"abc"), ("multi", b"x"), ("multi", b"y")], 1700000000000),
        (1, None, b"second", [], 1700000005000),
        (2, b"user-1", None, [], 1700000009000),
    ]
    assert value(by_time) == [{"partition": 0, "offset": "1"}]  # the first record at or after the time
    assert value(after) == [{"partition": 0, "offset": "3"}]  # none: KafkaJS puts the log end in (Kafka's -1)


def test_send_batch_across_topics_and_partitions(server):
    batch = {"acks": -1, "topicMessages": [
        {"topic": "batch-a", "messages": [{"value": "a0", "partition": 0}, {"value": "a2", "partition": 2}]},
        {"topic": "batch-b", "messages": [{"value": "b1", "partition": 1}, {"value": "b1'", "partition": 1}]},
    ]}
    created_a, created_b, sent = kafkajs(server.bootstrap, create("batch-a", 3), create("batch-b", 2),
                                         {"do": "sendBatch", "batch": batch})
    value(created_a), value(created_b)
    assert sorted((r["topicName"], r["partition"], r["errorCode"], r["baseOffset"]) for r in value(sent)) == [
        ("batch-a", 0, 0, "0"), ("batch-a", 2, 0, "0"), ("batch-b", 1, 0, "0")]
    assert [v for _o, _k, v, _h, _t in read_back(server, "batch-a", 2)] == [b"a2"]
    assert [v for _o, _k, v, _h, _t in read_back(server, "batch-b", 1)] == [b"b1", b"b1'"]


def test_a_record_over_max_message_bytes_is_message_too_large(server):
    created, too_big, fits, ends = kafkajs(
        server.bootstrap, create("small", configEntries=[{"name": "max.message.bytes", "value": "1000"}]),
        send("small", [{"value": "x" * 2000, "partition": 0}]),
        send("small", [{"value": "x" * 100, "partition": 0}]),
        admin("fetchTopicOffsets", "small"))
    value(created)
    e = error(too_big)
    assert (e["name"], e["type"], e["code"], e["retriable"]) == ("KafkaJSProtocolError", "MESSAGE_TOO_LARGE",
                                                                 ErrorCode.MESSAGE_TOO_LARGE, False)
    assert [r["baseOffset"] for r in value(fits)] == ["0"]
    assert offsets(ends) == {0: ("0", "1", "1")}


@pytest.mark.parametrize("allow_auto_topic_creation", [True, False])
def test_send_to_a_topic_that_does_not_exist_is_unknown_topic(server, allow_auto_topic_creation):
    """The server has auto.create.topics.enable=false, so KafkaJS's Metadata request (which asks for creation
    unless the producer says allowAutoTopicCreation: false) is answered UNKNOWN_TOPIC_OR_PARTITION either way, as
    Kafka answers it; KafkaJS retries that and then gives up with the cause."""
    (sent,) = kafkajs(server.bootstrap, send("missing", [{"value": "x"}],
                                             producer={"allowAutoTopicCreation": allow_auto_topic_creation}))
    e = error(sent)
    assert e["name"] == "KafkaJSNumberOfRetriesExceeded"
    assert (e["cause"]["type"], e["cause"]["code"]) == ("UNKNOWN_TOPIC_OR_PARTITION",
                                                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    (listed,) = kafkajs(server.bootstrap, admin("listTopics"))
    assert "missing" not in value(listed)


# ------------------------------------------------------------------------------------------------- admin


def test_create_topics_with_partitions_replication_and_configs(server):
    created, again, metadata, configs = kafkajs(
        server.bootstrap,
        create("made", 4, replicationFactor=1, configEntries=[{"name": "retention.ms", "value": "3600000"},
                                                               {"name": "cleanup.policy", "value": "delete"}]),
        create("made", 4),
        admin("fetchTopicMetadata", {"topics": ["made"]}),
        admin("describeConfigs", {"includeSynonyms": False, "resources": [
            {"type": 2, "name": "made", "configNames": ["retention.ms", "cleanup.policy", "segment.bytes"]}]}))
    assert value(created) is True
    assert value(again) is False  # KafkaJS's answer when every topic already exists (TOPIC_ALREADY_EXISTS)
    (topic,) = value(metadata)["topics"]
    assert topic["name"] == "made"
    assert [(p["partitionId"], p["leader"], p["replicas"], p["isr"], p["partitionErrorCode"])
            for p in sorted(topic["partitions"], key=lambda p: p["partitionId"])] == [
        (i, 1, [1], [1], 0) for i in range(4)]
    (resource,) = value(configs)["resources"]
    assert (resource["errorCode"], resource["resourceName"]) == (0, "made")
    entries = {c["configName"]: (c["configValue"], c["isDefault"], c["configSource"])
               for c in resource["configEntries"]}
    # Sources: 1 is TOPIC_CONFIG (set on the topic), 5 DEFAULT_CONFIG.
    assert entries == {"retention.ms": ("3600000", False, 1), "cleanup.policy": ("delete", False, 1),
                       "segment.bytes": ("1073741824", True, 5)}


def test_create_topics_validate_only_creates_nothing(server):
    """KafkaJS waits for the new topics' leaders after CreateTopics even when validateOnly is set (its
    waitForLeaders defaults to true): against Kafka with auto-creation off that wait fails the same way, since the
    topic was never made (with auto-creation on, KafkaJS's Metadata request would create it).  Users pass
    waitForLeaders: false with validateOnly; the KafkaJS default is shown too."""
    validated, waited, bad, listed = kafkajs(
        server.bootstrap,
        admin("createTopics", {"validateOnly": True, "waitForLeaders": False,
                               "topics": [{"topic": "checked", "numPartitions": 2}]}),
        admin("createTopics", {"validateOnly": True, "topics": [{"topic": "checked", "numPartitions": 2}]}),
        admin("createTopics", {"validateOnly": True, "waitForLeaders": False, "topics": [
            {"topic": "checked", "configEntries": [{"name": "retention.ms", "value": "soon"}]}]}),
        admin("listTopics"))
    assert value(validated) is True
    e = error(waited)
    assert (e["type"], e["code"]) == ("UNKNOWN_TOPIC_OR_PARTITION", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    (problem,) = error(bad)["errors"]
    assert (problem["type"], problem["topic"]) == ("INVALID_CONFIG", "checked")
    assert "checked" not in value(listed)


@pytest.mark.parametrize(("config", "setting", "named"), [
    ("a bad value", {"name": "retention.ms", "value": "abc"}, ["retention.ms", "abc"]),
    ("an unknown name", {"name": "no.such.config", "value": "1"}, ["no.such.config"]),
])
def test_create_topics_with_a_bad_config_is_invalid_config(server, config, setting, named):
    topic = "bad-" + setting["name"].replace(".", "-")
    failed, listed = kafkajs(server.bootstrap, create(topic, configEntries=[setting]), admin("listTopics"))
    e = error(failed)
    assert e["name"] == "KafkaJSAggregateError"
    assert [(x["name"], x["type"], x["code"], x["topic"]) for x in e["errors"]] == [
        ("KafkaJSCreateTopicError", "INVALID_CONFIG", ErrorCode.INVALID_CONFIG, topic)]
    assert topic not in value(listed)
    # KafkaJS keeps only the code; the message it was sent (CreateTopics v3, KafkaJS's version) names the problem.
    client = RawClient.to(server)
    try:
        answer = create_topic(client, topic, configs={setting["name"]: setting["value"]}, version=3)
    finally:
        client.sock.close()
    assert answer.error_code == ErrorCode.INVALID_CONFIG
    assert all(word in answer.error_message for word in named), f"{config}: {answer.error_message}"


def test_create_topics_with_more_replicas_than_brokers_is_invalid_replication_factor(server):
    (failed,) = kafkajs(server.bootstrap, create("rf3", replicationFactor=3))
    (e,) = error(failed)["errors"]
    assert (e["type"], e["code"], e["topic"]) == ("INVALID_REPLICATION_FACTOR",
                                                  ErrorCode.INVALID_REPLICATION_FACTOR, "rf3")


def test_delete_topics(server):
    created, before, deleted, after, again = kafkajs(
        server.bootstrap, create("doomed", 2), admin("listTopics"), admin("deleteTopics", {"topics": ["doomed"]}),
        admin("listTopics"), admin("deleteTopics", {"topics": ["doomed"]}))
    value(created)
    assert "doomed" in value(before)
    assert value(deleted) is None
    assert "doomed" not in value(after)
    e = error(again)
    assert e["name"] == "KafkaJSNumberOfRetriesExceeded"  # KafkaJS retries UNKNOWN_TOPIC_OR_PARTITION
    assert (e["cause"]["type"], e["cause"]["code"]) == ("UNKNOWN_TOPIC_OR_PARTITION",
                                                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


def test_describe_cluster(server):
    (cluster,) = kafkajs(server.bootstrap, admin("describeCluster"))
    assert value(cluster) == {"brokers": [{"nodeId": 1, "host": "127.0.0.1", "port": server.port}],
                              "controller": 1, "clusterId": server.cluster_id}


def test_alter_and_describe_topic_configs(server):
    created, altered, described, bad = kafkajs(
        server.bootstrap, create("tuned", configEntries=[{"name": "retention.ms", "value": "1000000"}]),
        admin("alterConfigs", {"resources": [{"type": 2, "name": "tuned", "configEntries": [
            {"name": "segment.bytes", "value": "1048576"}]}]}),
        admin("describeConfigs", {"includeSynonyms": True, "resources": [
            {"type": 2, "name": "tuned", "configNames": ["retention.ms", "segment.bytes"]}]}),
        admin("alterConfigs", {"resources": [{"type": 2, "name": "tuned", "configEntries": [
            {"name": "retention.ms", "value": "later"}]}]}))
    value(created)
    assert [(r["errorCode"], r["resourceType"], r["resourceName"]) for r in value(altered)["resources"]] == [
        (0, 2, "tuned")]
    (resource,) = value(described)["resources"]
    # AlterConfigs (the old API KafkaJS uses) replaces the topic's whole set: retention.ms is back to default.
    entries = {c["configName"]: (c["configValue"], c["isDefault"], c["configSource"])
               for c in resource["configEntries"]}
    assert entries == {"retention.ms": ("604800000", True, 5), "segment.bytes": ("1048576", False, 1)}
    e = error(bad)
    assert (e["name"], e["type"], e["code"]) == ("KafkaJSProtocolError", "INVALID_CONFIG", ErrorCode.INVALID_CONFIG)


def test_alter_and_describe_broker_configs(server):
    rate = "replica.alter.log.dirs.io.max.bytes.per.second"
    altered, described, refused = kafkajs(
        server.bootstrap,
        admin("alterConfigs", {"resources": [{"type": 4, "name": "1", "configEntries": [
            {"name": rate, "value": "5000000"}]}]}),
        admin("describeConfigs", {"includeSynonyms": False, "resources": [
            {"type": 4, "name": "1", "configNames": [rate, "node.id"]}]}),
        admin("alterConfigs", {"resources": [{"type": 4, "name": "1", "configEntries": [
            {"name": "no.such.broker.key", "value": "2"}]}]}))
    assert [(r["errorCode"], r["resourceType"], r["resourceName"]) for r in value(altered)["resources"]] == [
        (0, 4, "1")]
    (resource,) = value(described)["resources"]
    entries = {c["configName"]: (c["configValue"], c["readOnly"], c["configSource"])
               for c in resource["configEntries"]}
    # Sources: 2 is DYNAMIC_BROKER_CONFIG, 4 STATIC_BROKER_CONFIG (server.properties).
    assert entries == {rate: ("5000000", False, 2), "node.id": ("1", True, 4)}
    e = error(refused)
    assert (e["type"], e["code"]) == ("INVALID_CONFIG", ErrorCode.INVALID_CONFIG)


def test_fetch_topic_offsets(server):
    created, sent, ends = kafkajs(
        server.bootstrap, create("counted", 3),
        {"do": "sendBatch", "batch": {"topicMessages": [{"topic": "counted", "messages": [
            {"value": "a", "partition": 0}, {"value": "b", "partition": 0}, {"value": "c", "partition": 2}]}]}},
        admin("fetchTopicOffsets", "counted"))
    value(created), value(sent)
    assert offsets(ends) == {0: ("0", "2", "2"), 1: ("0", "0", "0"), 2: ("0", "1", "1")}


def test_create_partitions_grows_a_topic_whose_new_partitions_take_records(server):
    """KafkaJS's createPartitions (it sends v1, with no assignments as a null array): validateOnly adds nothing
    (the real request after it, to fewer partitions, is still an increase), the real one adds two partitions
    that Metadata lists with a leader and ISR and that take records; asking for the same count again is
    INVALID_PARTITIONS, and explicit assignments naming this broker are taken."""
    node = server.node_id
    created, checked, grown, again, assigned, metadata, sent, ends = kafkajs(
        server.bootstrap, create("fixed", 2),
        admin("createPartitions", {"topicPartitions": [{"topic": "fixed", "count": 6}], "validateOnly": True}),
        admin("createPartitions", {"topicPartitions": [{"topic": "fixed", "count": 4}]}),
        admin("createPartitions", {"topicPartitions": [{"topic": "fixed", "count": 4}]}),
        admin("createPartitions", {"topicPartitions": [{"topic": "fixed", "count": 5, "assignments": [[node]]}]}),
        admin("fetchTopicMetadata", {"topics": ["fixed"]}),
        send("fixed", [{"value": f"v{i}", "partition": i} for i in (2, 3, 4)]),
        admin("fetchTopicOffsets", "fixed"))
    value(created), value(checked), value(grown), value(assigned), value(sent)
    e = error(again)
    assert (e["name"], e["type"], e["retriable"]) == ("KafkaJSProtocolError", "INVALID_PARTITIONS", False)
    partitions = sorted(value(metadata)["topics"][0]["partitions"], key=lambda p: p["partitionId"])
    assert [(p["partitionId"], p["partitionErrorCode"], p["leader"], p["replicas"], p["isr"]) for p in partitions] \
        == [(i, 0, node, [node], [node]) for i in range(5)]
    assert offsets(ends) == {0: ("0", "0", "0"), 1: ("0", "0", "0"), 2: ("0", "1", "1"), 3: ("0", "1", "1"),
                             4: ("0", "1", "1")}
    assert [v for _, _, v, _, _ in read_back(server, "fixed", 3, at_least=1)] == [b"v3"]


def test_delete_topic_records_moves_the_low_offset(server):
    """KafkaJS's deleteTopicRecords (DeleteRecords v0 to each partition's leader): fetchTopicOffsets then
    answers the new low offset, offset -1 cuts to the high watermark, and an offset past it is refused (the
    broker's OFFSET_OUT_OF_RANGE)."""
    created, sent, known, cut, to_end, past, ends = kafkajs(
        server.bootstrap, create("trimmed", 2),
        send("trimmed", [{"value": f"v{i}", "partition": i % 2} for i in range(8)]),
        admin("fetchTopicMetadata", {"topics": ["trimmed"]}),  # the leaders it sends to, from its metadata
        admin("deleteTopicRecords", {"topic": "trimmed", "partitions": [{"partition": 0, "offset": "3"}]}),
        admin("deleteTopicRecords", {"topic": "trimmed", "partitions": [{"partition": 1, "offset": "-1"}]}),
        admin("deleteTopicRecords", {"topic": "trimmed", "partitions": [{"partition": 0, "offset": "9"}]}),
        admin("fetchTopicOffsets", "trimmed"))
    value(created), value(sent), value(known), value(cut), value(to_end)
    # The partition's OFFSET_OUT_OF_RANGE is not retriable: KafkaJS stops at once (run.js shows the error's
    # chain, not the partitions it names); the low offset below shows it cut nothing.
    e = error(past)
    assert (e["name"], e["cause"]["name"], e["retriable"]) == (
        "KafkaJSNonRetriableError", "KafkaJSDeleteTopicRecordsError", False)
    assert offsets(ends) == {0: ("3", "4", "4"), 1: ("4", "4", "4")}
    assert [o for o, _, _, _, _ in read_back(server, "trimmed", 0, at_least=4)] == [3]


@pytest.mark.slow
def test_replicated_topic_on_a_three_broker_cluster(tmp_path):
    """Replication factor 3 on `kjbod cluster up` (a KRaft controller and three brokers): Metadata names a broker
    as the controller, as Kafka's brokers do in KRaft mode, and KafkaJS sends CreateTopics and an idempotent
    producer's InitProducerId there.  Sends with acks -1 go to each partition's leader (answered once the ISR has
    the records)."""
    with running_cluster(tmp_path / "cluster") as cluster:
        brokers = sorted(cluster.broker_ids)
        described, created, sent, again, metadata, ends = kafkajs(
            cluster.bootstrap, admin("describeCluster"),
            create("replicated", 3, replicationFactor=3,
                   configEntries=[{"name": "min.insync.replicas", "value": "2"}]),
            {"do": "sendBatch", "batch": {"acks": -1, "topicMessages": [{"topic": "replicated", "messages": [
                {"value": f"r{i}", "partition": i % 3} for i in range(7)]}]}},
            {"do": "sendBatch", "producer": {"idempotent": True, "maxInFlightRequests": 1},
             "batch": {"acks": -1, "topicMessages": [{"topic": "replicated", "messages": [
                 {"value": f"i{i}", "partition": i % 3} for i in range(3)]}]}},
            admin("fetchTopicMetadata", {"topics": ["replicated"]}),
            admin("fetchTopicOffsets", "replicated"))
        cluster_view = value(described)
        assert sorted(b["nodeId"] for b in cluster_view["brokers"]) == brokers
        assert cluster_view["controller"] in brokers
        assert value(created) is True
        assert sorted((r["partition"], r["errorCode"], r["baseOffset"]) for r in value(sent)) == [
            (0, 0, "0"), (1, 0, "0"), (2, 0, "0")]
        assert sorted((r["partition"], r["errorCode"], r["baseOffset"]) for r in value(again)) == [
            (0, 0, "3"), (1, 0, "2"), (2, 0, "2")]
        (topic,) = value(metadata)["topics"]
        for p in topic["partitions"]:
            assert sorted(p["replicas"]) == sorted(p["isr"]) == brokers, p
            assert p["leader"] in brokers and p["partitionErrorCode"] == 0
        assert offsets(ends) == {0: ("0", "4", "4"), 1: ("0", "3", "3"), 2: ("0", "3", "3")}


# ------------------------------------------------------------------------------------------------- groups, transactions


def test_group_consumer_joins_and_reads(server):
    """KafkaJS consumers always join a group: FindCoordinator names kjbod, JoinGroup, SyncGroup (KafkaJS's leader
    assigns the partitions), OffsetFetch (nothing committed: from the beginning) and Fetch follow; the first
    record arrives, and after the consumer left the group is described as Empty."""
    created, sent, consumed, described = kafkajs(
        server.bootstrap, create("grouped", 2),
        send("grouped", [{"value": "v", "partition": 0}]),
        {"do": "consume", "consumer": {"groupId": "readers", "sessionTimeout": 10000}, "topic": "grouped",
         "timeoutMs": 60000},
        admin("describeGroups", ["readers"]))
    value(created), value(sent)
    seen = value(consumed)
    assert seen["crash"] is None
    assert [(m["partition"], m["offset"], m["value"]) for m in seen["messages"]] == [(0, "0", "v")]
    [group] = value(described)["groups"]
    assert (group["groupId"], group["state"], group["protocolType"]) == ("readers", "Empty", "consumer")


def test_transactional_producer_gets_a_coordinator_error(server):
    """A transactional KafkaJS producer asks FindCoordinator for its transactional id when it connects; a single
    broker left at transaction.state.log.replication.factor 3 cannot make __transaction_state, so kjbod answers
    COORDINATOR_NOT_AVAILABLE (Kafka's answer while no coordinator can be hosted), KafkaJS fails with
    KafkaJSGroupCoordinatorNotFound after its retries and writes nothing; the server's log says why."""
    created, sent, ends = kafkajs(
        server.bootstrap, create("txn"),
        {"do": "transaction", "producer": {"transactionalId": "tx-1", "idempotent": True, "maxInFlightRequests": 1},
         "send": {"topic": "txn", "messages": [{"value": "v", "partition": 0}]}},
        admin("fetchTopicOffsets", "txn"))
    value(created)
    assert error(sent)["name"] == "KafkaJSGroupCoordinatorNotFound"
    assert offsets(ends) == {0: ("0", "0", "0")}
    lines = coordinator_warnings(server, "transaction", "tx-1")
    assert lines, "no warning in the server's log about the transactional id"
    assert "__transaction_state could not be created" in lines[0]["reason"]


@pytest.mark.slow
def test_transactions_commit_and_abort_on_a_node_that_hosts_the_coordinator(tmp_path):
    """On a node that can make `__transaction_state` (one replica), KafkaJS's transactional producer commits and
    aborts: a read_committed reader (kafka-python) sees the committed records only, a read_uncommitted one all of
    them, and each transaction ended with a marker (a control batch) in the partition."""
    s = start_server(tmp_path, overrides={
        "auto.create.topics.enable": "false", "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1"})
    try:
        producer = {"transactionalId": "kjs-tx", "idempotent": True, "maxInFlightRequests": 1}

        def txn(value_: str, abort: bool = False) -> dict[str, Any]:
            return {"do": "transaction", "producer": producer, "abort": abort,
                    "send": {"topic": "kjs-txn", "messages": [{"value": value_, "partition": 0}]}}

        results = kafkajs(s.bootstrap, create("kjs-txn"), txn("kept-1"), txn("gone", abort=True), txn("kept-2"),
                          retry={"retries": 10, "initialRetryTime": 100, "maxRetryTime": 1000})
        for r in results:
            value(r)
        deadline = time.monotonic() + 30
        while len(markers := control_batches(s, "kjs-txn")) < 3:
            assert time.monotonic() < deadline, f"{len(markers)} markers, not 3"
            time.sleep(0.1)
        assert [(h.is_transactional, h.producer_epoch) for h in markers] == [(True, 0), (True, 1), (True, 2)]
        assert read_at(s, "kjs-txn", "read_committed") == [b"kept-1", b"kept-2"]
        assert read_at(s, "kjs-txn", "read_uncommitted") == [b"kept-1", b"gone", b"kept-2"]
    finally:
        s.stop()


def control_batches(server: LiveServer, topic: str) -> list:
    from kjbod.storage.records import iter_batches

    return [h for d in server.log_dirs for path in sorted(Path(d).glob(f"{topic}-0/*.log"))
            for _pos, h in iter_batches(path.read_bytes()) if h.is_control]


def read_at(server: LiveServer, topic: str, isolation: str) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, enable_auto_commit=False, isolation_level=isolation,
                             auto_offset_reset="earliest", consumer_timeout_ms=2000)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        return [r.value for r in consumer]
    finally:
        consumer.close()


def coordinator_warnings(server: LiveServer, key_type: str, key: str, timeout: float = 10.0) -> list[dict]:
    """The server's warnings that it has no coordinator for `key`."""
    deadline = time.monotonic() + timeout
    while True:
        found = []
        for line in server.stderr_path.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == "coordinator_not_served" and event.get("key_type") == key_type \
                    and key in event.get("keys", []):
                found.append(event)
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)
