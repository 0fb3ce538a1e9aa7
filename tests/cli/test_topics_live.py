"""`kjbod topics` (kafka-topics.sh's flags and output) against a live node, read back by kafka-python."""

from __future__ import annotations

import subprocess
import sys
import uuid
import warnings

import pytest

from kjbod.cli.main import UserError
from kjbod.cli.topics import matching, parse_replica_assignment, topic_filter
from kjbod.storage.ids import uuid_text

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.admin import KafkaAdminClient

KJBOD = [sys.executable, "-m", "kjbod"]


def topics(server, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KJBOD, "topics", "--bootstrap-server", server.bootstrap, *args], capture_output=True,
                          text=True, timeout=120)


def test_create_list_describe_alter_delete(kjbod_server):
    server = kjbod_server
    made = topics(server, "--create", "--topic", "orders", "--partitions", "3", "--replication-factor", "1",
                  "--config", "retention.ms=3600000", "--config", "cleanup.policy=compact")
    assert (made.returncode, made.stdout, made.stderr) == (0, "Created topic orders.\n", "")
    assert topics(server, "--create", "--topic", "payments").returncode == 0  # the broker's defaults
    again = topics(server, "--create", "--topic", "orders", "--partitions", "1")
    assert again.returncode == 1
    assert again.stderr.startswith("Error while executing topic command : ") and "TOPIC_ALREADY_EXISTS" in again.stderr
    assert topics(server, "--create", "--topic", "orders", "--if-not-exists").returncode == 0

    listed = topics(server, "--list")
    assert listed.returncode == 0 and listed.stdout.split() == ["orders", "payments"]
    assert topics(server, "--list", "--topic", "ord.*").stdout.split() == ["orders"]
    assert topics(server, "--list", "--topic", "orders,payments").stdout.split() == ["orders", "payments"]

    described = topics(server, "--describe", "--topic", "orders")
    assert described.returncode == 0, described.stderr
    head, *parts = described.stdout.splitlines()
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        (t,) = admin.describe_topics(["orders"])
    finally:
        admin.close()
    fields = dict(f.split(": ", 1) for f in head.split("\t"))
    # Kafka's Uuid text (22 characters of URL-safe base64), whatever form kafka-python gives it in.
    assert fields["Topic"] == "orders" and fields["TopicId"] == uuid_text(uuid.UUID(str(t["topic_id"])))
    assert (fields["PartitionCount"], fields["ReplicationFactor"]) == ("3", "1")
    # The configs set anywhere but Kafka's defaults, as kafka-topics.sh prints them: the topic's own and the
    # cluster-wide min.insync.replicas a new cluster writes with ELR on (Kafka 4.3 prints it the same way).
    assert sorted(fields["Configs"].split(",")) == ["cleanup.policy=compact", "min.insync.replicas=1",
                                                    "retention.ms=3600000"]
    # DescribeTopicPartitions carries the ELR lists: empty in kjbod, as in Kafka with ELR off
    assert parts == [f"\tTopic: orders\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1\tElr: \tLastKnownElr: "
                     for p in range(3)]
    paged = topics(server, "--describe", "--topic", "orders", "--partition-size-limit-per-response", "1")
    assert paged.returncode == 0 and paged.stdout == described.stdout

    # Only topics with configs set on the topic: not payments, whose only non-default is the cluster-wide
    # min.insync.replicas (Kafka's tool would list it too; see the README).
    overrides = topics(server, "--describe", "--topics-with-overrides")
    assert [line.split("\t")[0] for line in overrides.stdout.splitlines()] == ["Topic: orders"]
    assert topics(server, "--describe", "--under-replicated-partitions").stdout == ""
    at_min = topics(server, "--describe", "--topic", "payments", "--at-min-isr-partitions").stdout.splitlines()
    assert at_min and all(line.startswith("\tTopic: payments\tPartition: ") for line in at_min)

    grown = topics(server, "--alter", "--topic", "orders", "--partitions", "5")
    assert grown.returncode == 0, grown.stderr
    assert "PartitionCount: 5" in topics(server, "--describe", "--topic", "orders").stdout
    shrink = topics(server, "--alter", "--topic", "orders", "--partitions", "2")
    assert shrink.returncode == 1 and "INVALID_PARTITIONS" in shrink.stderr

    assert topics(server, "--delete", "--topic", "pay.*").returncode == 0
    assert topics(server, "--list").stdout.split() == ["orders"]
    missing = topics(server, "--delete", "--topic", "payments")
    assert (missing.returncode, missing.stderr) == (
        1, "Error while executing topic command : Topic 'payments' does not exist as expected\n")
    assert topics(server, "--delete", "--topic", "payments", "--if-exists").returncode == 0
    assert topics(server, "--describe", "--topic-id", fields["TopicId"]).stdout.startswith("Topic: orders\t")


@pytest.mark.parametrize(("args", "message"), [
    (["--create"], "--create needs --topic"),
    (["--alter", "--topic", "t"], "give --partitions"),
    (["--alter", "--topic", "t", "--partitions", "2", "--config", "a=b"], "--config goes with --create only"),
    (["--create", "--topic", "t", "--partitions", "2", "--replica-assignment", "1:2"], "leave out --partitions"),
    (["--create", "--topic", "t", "--replication-factor", "0"], "between 1 and 32767"),
    (["--list", "--under-replicated-partitions"], "goes with --describe only"),
    (["--list", "--describe"], "not allowed with argument"),
    (["--create", "--topic", "t", "--config", "novalue"], "expected KEY=VALUE"),
])
def test_bad_options_are_one_line(args, message):
    done = subprocess.run([*KJBOD, "topics", "--bootstrap-server", "127.0.0.1:1", *args], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_topic_filters_and_assignments_as_kafkas_tool_reads_them():
    names = ["__consumer_offsets", "a.b", "axb", "orders", "orders-dlq"]
    assert matching(names, "orders", False) == ["orders"]  # the whole name, not a prefix
    assert matching(names, " 'orders.*' ", False) == ["orders", "orders-dlq"]
    assert matching(names, "a.b", False) == ["a.b", "axb"]  # a regular expression, as in Kafka
    assert matching(names, None, True) == ["a.b", "axb", "orders", "orders-dlq"]
    assert matching(names, ".*", False)[0] == "__consumer_offsets"
    with pytest.raises(UserError, match="not a valid regular expression"):
        topic_filter("(")
    assert parse_replica_assignment("1:2, 2:3,3:1") == {0: [1, 2], 1: [2, 3], 2: [3, 1]}
    for bad, message in (("1:1", "names a broker twice"), ("1:2,3", "every partition needs the same number"),
                         ("1:x", "is not broker ids")):
        with pytest.raises(UserError, match=message):
            parse_replica_assignment(bad)
