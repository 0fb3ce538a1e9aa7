"""Config values a client sends (CreateTopics, (Incremental)AlterConfigs), in process: integers as Java parses
them for Kafka's ConfigDef (an optional sign and decimal digits), so what Kafka refuses kjbod refuses, with a
message naming the key and the value."""

from __future__ import annotations

import pytest

from kjbod.broker import broker_config as bc
from kjbod.protocol.errors import ErrorCode as E


@pytest.mark.parametrize("value", ["1_000", "0x10", "1e3", "", "12 000", "1.5"])
def test_integers_python_would_read_and_java_would_not_are_refused(value):
    """Python's int() reads "1_000"; Kafka's Long.parseLong does not.  Both a topic config and a dynamic broker
    config were once stored from it."""
    with pytest.raises(bc.ConfigProblem) as topic:
        bc.plan_topic_changes({}, [("retention.ms", bc.SET, value)], replace=False)
    assert topic.value.code == E.INVALID_CONFIG
    assert f"invalid value {value.strip()!r} for retention.ms: expected an integer" in topic.value.message
    with pytest.raises(bc.ConfigProblem) as broker:
        bc.parse_dynamic_value("leader.replication.throttled.rate", value)
    assert (broker.value.code, broker.value.message) == (  # a broker value: Kafka's INVALID_REQUEST
        E.INVALID_REQUEST, f"invalid value {value!r} for leader.replication.throttled.rate: expected an integer")


def test_signs_spaces_and_out_of_range_values():
    assert bc.plan_topic_changes({}, [("retention.ms", bc.SET, " +5 ")], replace=False) == {"retention.ms": " +5 "}
    huge = "9" * 5000  # beyond what Python's int() converts at all: still "out of range", not "not an integer"
    for value, kind in ((huge, "a long"), ("9223372036854775808", "a long")):
        with pytest.raises(bc.ConfigProblem) as too_big:
            bc.plan_topic_changes({}, [("retention.ms", bc.SET, value)], replace=False)
        assert f"for retention.ms: out of range for {kind}" in too_big.value.message
    with pytest.raises(bc.ConfigProblem) as too_big:
        bc.plan_topic_changes({}, [("min.insync.replicas", bc.SET, "2147483648")], replace=False)
    assert "out of range for an int" in too_big.value.message
    assert bc.parse_dynamic_value("leader.replication.throttled.rate", " 1000 ") == 1000
