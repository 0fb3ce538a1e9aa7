"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for brokers (type 4) and topics (type 2), against a
real server: sources and precedence, every error, persistence across a restart, topic changes applied to logs.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaProducer
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from kjbod.broker.broker_config import CLEANER_KEYS, CONNECTION_KEYS, LOG_CONFIG_KEYS
from kjbod.protocol.generated import (
    AlterConfigsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)

from .livehelp import THROTTLE, RawClient, kafka_admin

pytestmark = pytest.mark.slow

DC, AC, IAC = DescribeConfigsRequest, AlterConfigsRequest, IncrementalAlterConfigsRequest
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
BROKER, TOPIC = 4, 2
# DescribeConfigs sources
TOPIC_CONFIG, DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 1, 2, 3, 4, 5
INVALID_CONFIG, INVALID_REQUEST, UNKNOWN_TOPIC = 40, 42, 3


def describe(raw: RawClient, rtype: int, name: str, keys=None, *, version: int = 4, synonyms: bool = False,
             docs: bool = False):
    resp = raw.call(DC(resources=[DC.DescribeConfigsResource(resource_type=rtype, resource_name=name,
                                                               configuration_keys=keys)],
                       include_synonyms=synonyms, include_documentation=docs), version)
    [result] = resp.results
    return result


def incremental(raw: RawClient, *resources, validate_only: bool = False, version: int = 1):
    req = IAC(resources=[IAC.AlterConfigsResource(
        resource_type=rtype, resource_name=name,
        configs=[IAC.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])
        for rtype, name, ops in resources], validate_only=validate_only)
    return [(r.error_code, r.error_message) for r in raw.call(req, version).responses]


def legacy(raw: RawClient, rtype: int, name: str, configs: dict[str, str | None], *, version: int = 2):
    req = AC(resources=[AC.AlterConfigsResource(resource_type=rtype, resource_name=name, configs=[
        AC.AlterableConfig(name=k, value=v) for k, v in configs.items()])])
    [r] = raw.call(req, version).responses
    return r.error_code, r.error_message


def values(result) -> dict[str, tuple[str | None, int, bool]]:
    return {c.name: (c.value, c.config_source, c.read_only) for c in result.configs}


def test_broker_configs_sources_and_every_version(kjbod_server):
    with RawClient(kjbod_server.bootstrap) as raw:
        for version in (1, 2, 3, 4):
            r = describe(raw, BROKER, "1", version=version, docs=version >= 3)
            assert r.error_code == 0
            v = values(r)
            assert v["log.dirs"] == (",".join(str(p) for p in kjbod_server.log_dirs), STATIC, True)
            assert v["node.id"] == ("1", STATIC, True)
            assert v[THROTTLE] == (str((1 << 63) - 1), DEFAULT, False)
            assert v["num.replica.alter.log.dirs.threads"][1] == DEFAULT
            docs = {c.name: c.documentation for c in r.configs}
            types = {c.name: c.config_type for c in r.configs}
            if version >= 3:
                assert "log dirs" in docs["log.dirs"] and types[THROTTLE] == 5  # LONG
        only = describe(raw, BROKER, "1", ["log.dirs", "no.such.key"])
        assert [c.name for c in only.configs] == ["log.dirs"]
        assert only.configs[0].synonyms == []  # only when asked for
        # The only cluster-wide value of a new cluster: KIP-966's min.insync.replicas, written with ELR on.
        assert values(describe(raw, BROKER, "", version=4)) == {"min.insync.replicas": ("1", DYNAMIC_DEFAULT, False)}
        other = describe(raw, BROKER, "2")
        assert other.error_code == INVALID_REQUEST and "2" in other.error_message
        assert describe(raw, 99, "1").error_code == INVALID_REQUEST  # a resource type Kafka does not have
    admin = kafka_admin(kjbod_server)  # kafka-python reads it too, and finds the dynamic keys
    got = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")], config_filter="all")
    dynamic = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")], config_filter="dynamic")
    admin.close()
    assert got["broker"]["1"]["log.dirs"]["value"] == ",".join(str(p) for p in kjbod_server.log_dirs)
    assert sorted(dynamic["broker"]["1"]) == sorted([THROTTLE, "cordoned.log.dirs", "leader.replication.throttled.rate",
                                                     "follower.replication.throttled.rate",
                                                     "reassignment.parallel.replica.count",
                                                     "reassignment.parallel.partition.count",
                                                     "reassignment.parallel.leader.movements",
                                                     "transaction.partition.verification.enable",  # KIP-890
                                                     *CLEANER_KEYS,  # the log cleaner's own keys
                                                     *CONNECTION_KEYS,  # max.connections, ...
                                                     *LOG_CONFIG_KEYS])  # log.retention.ms, ... (DynamicLogConfig)


def test_dynamic_throttle_precedence_errors_and_restart(kjbod_server):
    with RawClient(kjbod_server.bootstrap) as raw:
        assert incremental(raw, (BROKER, "", [(THROTTLE, SET, "7000000")])) == [(0, None)]
        r = describe(raw, BROKER, "1", [THROTTLE], synonyms=True)
        assert values(r)[THROTTLE] == ("7000000", DYNAMIC_DEFAULT, False)
        assert incremental(raw, (BROKER, "1", [("intra.broker.throttled.rate", SET, "9000000")])) == [(0, None)]
        r = describe(raw, BROKER, "1", [THROTTLE], synonyms=True)
        assert values(r)[THROTTLE] == ("9000000", DYNAMIC_BROKER, False)
        assert [(s.value, s.source) for s in r.configs[0].synonyms] == [
            ("9000000", DYNAMIC_BROKER), ("7000000", DYNAMIC_DEFAULT), (str((1 << 63) - 1), DEFAULT)]
        assert values(describe(raw, BROKER, ""))[THROTTLE] == ("7000000", DYNAMIC_DEFAULT, False)
        # Errors, each naming what is wrong; nothing changes.
        errors = [incremental(raw, resource)[0] for resource in [
            (BROKER, "1", [("no.such.config", SET, "1")]),
            (BROKER, "1", [("log.dirs", SET, "/elsewhere")]),
            (BROKER, "1", [(THROTTLE, SET, "fast")]),
            (BROKER, "1", [(THROTTLE, SET, "0")]),
            (BROKER, "1", [(THROTTLE, APPEND, "1")]),
            (BROKER, "2", [(THROTTLE, SET, "1")]),
            (BROKER, "x", [(THROTTLE, SET, "1")]),
            (16, "whatever", [(THROTTLE, SET, "1")]),
        ]]
        codes = [c for c, _ in errors]
        # An unknown key is refused (INVALID_CONFIG); a bad value is Kafka's INVALID_REQUEST for a broker config.
        assert codes == [INVALID_CONFIG, INVALID_REQUEST, INVALID_REQUEST, INVALID_REQUEST, INVALID_REQUEST,
                         INVALID_REQUEST, INVALID_REQUEST, INVALID_REQUEST]
        assert "no.such.config" in errors[0][1] and "log.dirs" in errors[1][1] and "fast" in errors[2][1]
        dup = incremental(raw, (BROKER, "1", [(THROTTLE, SET, "1"), ("intra.broker.throttled.rate", SET, "2")]))
        assert dup[0][0] == INVALID_REQUEST
        twice = incremental(raw, (BROKER, "1", [(THROTTLE, SET, "1")]), (BROKER, "1", [(THROTTLE, SET, "2")]))
        assert [c for c, _ in twice] == [INVALID_REQUEST, INVALID_REQUEST]
        assert incremental(raw, (BROKER, "1", [(THROTTLE, SET, "5")]), validate_only=True) == [(0, None)]
        assert values(describe(raw, BROKER, "1", [THROTTLE]))[THROTTLE][0] == "9000000"
    kjbod_server.stop()
    kjbod_server.start()
    with RawClient(kjbod_server.bootstrap) as raw:
        # Persisted in the metadata log: the same values and sources after a restart.
        assert values(describe(raw, BROKER, "1", [THROTTLE]))[THROTTLE] == ("9000000", DYNAMIC_BROKER, False)
        assert incremental(raw, (BROKER, "1", [(THROTTLE, DELETE, None)])) == [(0, None)]
        assert values(describe(raw, BROKER, "1", [THROTTLE]))[THROTTLE] == ("7000000", DYNAMIC_DEFAULT, False)
        # AlterConfigs replaces the whole set. Naming nothing would remove the cluster-wide min.insync.replicas,
        # which Kafka refuses while ELR is on; nothing changes then.
        code, message = legacy(raw, BROKER, "", {})
        assert code == INVALID_CONFIG and "min.insync.replicas" in message
        assert values(describe(raw, BROKER, "1", [THROTTLE]))[THROTTLE] == ("7000000", DYNAMIC_DEFAULT, False)
        # Naming only min.insync.replicas removes the default's throttle.
        assert legacy(raw, BROKER, "", {"min.insync.replicas": "1"}) == (0, None)
        assert values(describe(raw, BROKER, "1", [THROTTLE]))[THROTTLE][1] == DEFAULT
        assert legacy(raw, BROKER, "1", {THROTTLE: "123456"}, version=0) == (0, None)
        assert values(describe(raw, BROKER, "1", [THROTTLE]))[THROTTLE] == ("123456", DYNAMIC_BROKER, False)
        # log.segment.bytes changes at runtime (DynamicLogConfig); its kind log.retention.hours stays static.
        assert legacy(raw, BROKER, "1", {"log.retention.hours": "1"})[0] == INVALID_REQUEST


def test_topic_configs_describe_alter_and_apply(kjbod_server):
    admin = kafka_admin(kjbod_server)
    admin.create_topics([NewTopic("tc", 1, 1, topic_configs={"retention.ms": "3600000"})])
    admin.close()
    with RawClient(kjbod_server.bootstrap) as raw:
        v = values(describe(raw, TOPIC, "tc"))
        assert v["retention.ms"] == ("3600000", TOPIC_CONFIG, False)
        assert v["segment.bytes"] == (str(1 << 30), DEFAULT, False)
        assert describe(raw, TOPIC, "nope").error_code == UNKNOWN_TOPIC
        # Incremental: set, delete, append/subtract on a list, errors.
        assert incremental(raw, (TOPIC, "tc", [("segment.bytes", SET, "20000"), ("retention.ms", DELETE, None)])) \
            == [(0, None)]
        v = values(describe(raw, TOPIC, "tc"))
        assert v["segment.bytes"] == ("20000", TOPIC_CONFIG, False) and v["retention.ms"][1] == DEFAULT
        assert incremental(raw, (TOPIC, "tc", [("cleanup.policy", APPEND, "delete")])) == [(0, None)]
        assert values(describe(raw, TOPIC, "tc"))["cleanup.policy"] == ("delete", TOPIC_CONFIG, False)
        assert incremental(raw, (TOPIC, "tc", [("cleanup.policy", SUBTRACT, "delete")])) == [(0, None)]
        assert values(describe(raw, TOPIC, "tc"))["cleanup.policy"][1] == DEFAULT
        bad = incremental(raw, (TOPIC, "tc", [("retention.ms", SET, "soon")]),
                          (TOPIC, "nope", [("retention.ms", SET, "1")]))
        assert bad[0][0] == INVALID_CONFIG and "retention.ms" in bad[0][1]
        assert bad[1][0] == UNKNOWN_TOPIC
        assert incremental(raw, (TOPIC, "tc", [("made.up", SET, "1")]))[0][0] == INVALID_CONFIG
        assert incremental(raw, (TOPIC, "tc", [("cleanup.policy", APPEND, "shred")]))[0][0] == INVALID_CONFIG
        assert incremental(raw, (TOPIC, "tc", [("retention.ms", APPEND, "1")]))[0][0] == INVALID_REQUEST
    # Applied to the partition's log at once: 20 kB segments now.
    producer = KafkaProducer(bootstrap_servers=kjbod_server.bootstrap, acks=-1)
    for i in range(200):
        producer.send("tc", b"%04d" % i + b"s" * 1000, partition=0)
    producer.flush()
    producer.close()
    [where] = [Path(d, "tc-0") for d in kjbod_server.log_dirs if Path(d, "tc-0").exists()]
    assert len([n for n in os.listdir(where) if n.endswith(".log")]) >= 5
    kjbod_server.stop()
    kjbod_server.start()
    with RawClient(kjbod_server.bootstrap) as raw:
        assert values(describe(raw, TOPIC, "tc"))["segment.bytes"] == ("20000", TOPIC_CONFIG, False)
        # AlterConfigs replaces the overrides: segment.bytes goes back to the default.
        assert legacy(raw, TOPIC, "tc", {"retention.ms": "5000"}) == (0, None)
        v = values(describe(raw, TOPIC, "tc"))
        assert v["retention.ms"] == ("5000", TOPIC_CONFIG, False) and v["segment.bytes"][1] == DEFAULT
