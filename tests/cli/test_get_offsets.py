"""`kjbod get-offsets` (kafka-get-offsets.sh): the filters and --time as the tool reads them (in process), and the
command against a real `kjbod serve` with records produced at known times."""

from __future__ import annotations

import subprocess

import pytest
from live import COMMAND, LiveServer, kjbod_server, kjbod_server_factory  # noqa: F401

from kjbod.cli.get_offsets import parse_time, partition_rules
from kjbod.cli.main import UserError


def chosen(rules, pairs):
    return [(t, p) for t, p in pairs if any(pattern.fullmatch(t) and wanted(p) for pattern, wanted in rules)]


PAIRS = [(t, p) for t in ("a", "ab", "b") for p in range(6)]


def test_filters_as_the_tool_reads_them() -> None:
    assert chosen(partition_rules(None, None, None), PAIRS) == PAIRS
    assert chosen(partition_rules("a.*", "1,3", None), PAIRS) == [("a", 1), ("a", 3), ("ab", 1), ("ab", 3)]
    assert chosen(partition_rules(None, None, "a:1,b:2-4,ab:4-"), PAIRS) == [
        ("a", 1), ("ab", 4), ("ab", 5), ("b", 2), ("b", 3)]
    assert chosen(partition_rules(None, None, "b:-2,:5"), PAIRS) == [("a", 5), ("ab", 5), ("b", 0), ("b", 1), ("b", 5)]
    assert chosen(partition_rules(None, None, "a"), PAIRS) == [("a", p) for p in range(6)]


def test_times() -> None:
    assert [parse_time(t) for t in ("latest", "earliest", "max-timestamp", "earliest-local", "latest-tiered",
                                    "-2", "1700000000000")] == [-1, -2, -3, -4, -5, -2, 1700000000000]


@pytest.mark.parametrize(("call", "message"), [
    (lambda: partition_rules("a", None, "a:1"), "--topic-partitions cannot be used with --topic or --partitions"),
    (lambda: partition_rules(None, "1,x", None), "--partitions expects a comma separated list of numeric partition "
                                                 "ids, but received: 1,x"),
    (lambda: partition_rules(None, None, "a:1:2"), "Invalid rule specification: a:1:2"),
    (lambda: parse_time("yesterday"), "Malformed time argument yesterday"),
])
def test_mistakes(call, message: str) -> None:
    with pytest.raises(UserError) as raised:
        call()
    assert message in str(raised.value)


def get_offsets(server: LiveServer, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([*COMMAND, "get-offsets", "--bootstrap-server", server.bootstrap, *argv],
                          capture_output=True, text=True, timeout=120)


def test_offsets_live(kjbod_server: LiveServer) -> None:  # noqa: F811
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=kjbod_server.bootstrap)
    admin.create_topics([NewTopic("clicks", 12, 1), NewTopic("views", 1, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=kjbod_server.bootstrap, acks=1)
    for i in range(5):  # clicks-0: timestamps 1000..5000; clicks-10: three records
        producer.send("clicks", b"v", partition=0, timestamp_ms=1000 * (i + 1)).get(timeout=30)
    for _ in range(3):
        producer.send("clicks", b"v", partition=10).get(timeout=30)
    producer.close()

    done = get_offsets(kjbod_server, "--topic", "clicks")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # Sorted as text by topic-partition, as the tool does: clicks-10 before clicks-2.
    assert lines == [f"clicks:{p}:{ {0: 5, 10: 3}.get(p, 0)}" for p in sorted(range(12), key=lambda p: f"clicks-{p}")]
    done = get_offsets(kjbod_server, "--topic-partitions", "clicks:0,views", "--time", "earliest")
    assert done.stdout == "clicks:0:0\nviews:0:0\n", done.stderr
    done = get_offsets(kjbod_server, "--topic", "clicks", "--partitions", "0", "--time", "3000")
    assert done.stdout == "clicks:0:2\n", done.stderr
    done = get_offsets(kjbod_server, "--topic", "clicks", "--partitions", "0", "--time", "-3")
    assert done.stdout == "clicks:0:4\n", done.stderr  # the record with the largest timestamp
    # A time after every record: no offset, so no line (the tool prints nothing for it either).
    done = get_offsets(kjbod_server, "--topic", "clicks", "--partitions", "0", "--time", "9999999999999")
    assert (done.returncode, done.stdout) == (0, ""), done.stderr
    done = get_offsets(kjbod_server, "--topic", "nothing.*")
    assert (done.returncode, done.stderr) == (
        1, "Error occurred: Could not match any topic-partitions with the specified filters\n")
