"""The transactions' admin side on a real `kjbod serve`: DescribeProducers (KIP-664) asked by kafka-python's admin
client and by `kjbod transactions`, against producer state made by hand-made transactional and idempotent
requests (tests/txn/test_txn_coordinator_live.py's helpers).

Strategy: one single-node server for the module; each test uses its own topic and transactional id.  What the
answers must hold is known from the requests the test made: the producer ids and epochs InitProducerId gave out,
the sequences sent, the offset where the open transaction's first batch landed, and the coordinator epoch the
markers carry (the leader epoch of `__transaction_state`'s partition: 0 on a fresh node).
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid

import pytest
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaError, UnknownTopicOrPartitionError
from live import COMMAND, start_server

from kjbod.protocol.generated import DescribeProducersRequest
from kjbod.protocol.generated.describe_producers_request import TopicRequest

from .test_txn_coordinator_live import (
    OVERRIDES,
    Txn,
    connect,
    control_batches,
    end_offset,
    make_topic,
    produce_txn,
    wait_for,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    s = start_server(tmp_path_factory.mktemp("txn-admin"), log_dir_count=2, overrides=OVERRIDES)
    yield s
    s.stop()


def describe(server, topic: str, *partitions: int) -> dict:
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        got = admin.describe_producers([TopicPartition(topic, p) for p in partitions])
    finally:
        admin.close()
    return {tp.partition: sorted((p.producer_id, p.producer_epoch, p.last_sequence, p.coordinator_epoch,
                                  p.current_transaction_start_offset) for p in state.active_producers)
            for tp, state in got.items()}


def test_describe_producers_shows_open_and_ended_transactions(server):
    topic = make_topic(server, partitions=2)

    async def run():
        conn = await connect(server)
        try:
            ended = Txn(conn, f"tx-{uuid.uuid4().hex[:6]}")
            open_ = Txn(conn, f"tx-{uuid.uuid4().hex[:6]}")
            assert await ended.init() == 0 and await open_.init() == 0
            assert await ended.add(topic, 0) == [0]
            assert await produce_txn(conn, ended, topic, 0, [b"a", b"b", b"c"], 0) == 0  # offsets 0-2
            assert await ended.end(True) == 0  # marker at 3
            assert await open_.add(topic, 0) == [0]
            assert await produce_txn(conn, open_, topic, 0, [b"d", b"e"], 0) == 0  # offsets 4-5, left open
            return ended, open_
        finally:
            conn.close()

    ended, open_ = asyncio.run(run())
    wait_for(lambda: control_batches(server, topic, 0), "the commit marker")
    got = describe(server, topic, 0, 1)
    assert got[0] == sorted([(ended.pid, ended.epoch, 2, 0, -1), (open_.pid, open_.epoch, 1, -1, 4)])
    assert got[1] == []  # nobody wrote there

    # After a restart the state comes back from the clean shutdown's snapshot, loaded for this request.
    server.stop()
    server.start()
    assert wait_for(lambda: describe_when_led(server, topic, 0), "the partition led again")[0] == got[0]


def describe_when_led(server, topic: str, partition: int) -> dict | None:
    try:
        return describe(server, topic, partition)
    except KafkaError:  # not led yet: the restarted node is still taking its partitions
        return None


def test_describe_producers_errors(server):
    topic = make_topic(server, partitions=1)
    with pytest.raises(UnknownTopicOrPartitionError):
        describe(server, "no-such-topic", 0)

    async def ask(topics):
        conn = await connect(server)
        try:
            return await conn.request(61, 0, DescribeProducersRequest(topics=topics), 30.0)
        finally:
            conn.close()

    r = asyncio.run(ask([TopicRequest(name=topic, partition_indexes=[0, 7]),
                         TopicRequest(name="bad name!", partition_indexes=[0])]))
    known, bad = r.topics
    assert [(p.partition_index, p.error_code, p.active_producers) for p in known.partitions] == [
        (0, 0, []), (7, 3, [])]  # UNKNOWN_TOPIC_OR_PARTITION for a partition the topic lacks
    assert [(p.partition_index, p.error_code) for p in bad.partitions] == [(0, 17)]  # INVALID_TOPIC_EXCEPTION
    assert "bad name!" in bad.partitions[0].error_message


def test_read_committed_list_offsets_after_a_restart_stops_at_an_open_transaction(server):
    topic = make_topic(server, partitions=1)

    async def run():
        conn = await connect(server)
        try:
            t = Txn(conn, f"tx-{uuid.uuid4().hex[:6]}")
            assert await t.init(timeout_ms=120_000) == 0
            plain = Txn(conn, f"tx-{uuid.uuid4().hex[:6]}")
            assert await plain.init() == 0
            assert await plain.add(topic, 0) == [0]
            assert await produce_txn(conn, plain, topic, 0, [b"a", b"b"], 0) == 0  # 0-1
            assert await plain.end(True) == 0  # marker at 2
            assert await t.add(topic, 0) == [0]
            assert await produce_txn(conn, t, topic, 0, [b"open"], 0) == 0  # 3: left open
        finally:
            conn.close()

    asyncio.run(run())
    wait_for(lambda: control_batches(server, topic, 0), "the commit marker")
    assert (end_offset(server, topic, "read_committed"), end_offset(server, topic, "read_uncommitted")) == (3, 4)
    # After a restart nothing has loaded the partition's producer state yet when ListOffsets asks: the answer
    # must still stop at the open transaction (the clean shutdown's snapshot holds it).
    server.stop()
    server.start()
    assert wait_for(lambda: end_offset_when_led(server, topic, "read_committed"), "the partition led again") == 3
    assert end_offset(server, topic, "read_uncommitted") == 4


def end_offset_when_led(server, topic: str, isolation: str) -> int | None:
    try:
        return end_offset(server, topic, isolation)
    except KafkaError:
        return None


def kjbod_transactions(server, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, "transactions", "--bootstrap-server", server.bootstrap, *args],
                          capture_output=True, text=True, timeout=120)


def rows(out: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.split("\t")[:-1]] for line in out.splitlines()]


def test_kjbod_transactions_lists_and_describes_as_kafka_transactions(server):
    topic = make_topic(server, partitions=1)
    tid = f"tx-{uuid.uuid4().hex[:6]}"

    async def run():
        conn = await connect(server)
        try:
            t = Txn(conn, tid)
            assert await t.init(timeout_ms=45_000) == 0
            assert await t.add(topic, 0) == [0]
            assert await produce_txn(conn, t, topic, 0, [b"a", b"b"], 0) == 0  # offsets 0-1, left open
            return t
        finally:
            conn.close()

    t = asyncio.run(run())
    listed = kjbod_transactions(server, "list")
    assert listed.returncode == 0, listed.stderr
    table = rows(listed.stdout)
    assert table[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert [tid, "1", str(t.pid), "Ongoing"] in table[1:]
    # ListTransactions v2 (KIP-1152): only the ids the pattern matches whole
    matched = rows(kjbod_transactions(server, "list", "--transactional-id-pattern", tid[:3] + ".*").stdout)
    assert [tid, "1", str(t.pid), "Ongoing"] in matched[1:]
    assert rows(kjbod_transactions(server, "list", "--transactional-id-pattern", tid[:3]).stdout)[1:] == []
    bad = kjbod_transactions(server, "list", "--transactional-id-pattern", "tx-(")
    assert bad.returncode != 0 and "INVALID_REGULAR_EXPRESSION" in bad.stdout + bad.stderr

    described = kjbod_transactions(server, "describe", "--transactional-id", tid)
    assert described.returncode == 0, described.stderr
    header, row = rows(described.stdout)
    assert header[:5] == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState"]
    got = dict(zip(header, row, strict=True))
    assert (got["CoordinatorId"], got["TransactionalId"], got["ProducerId"], got["ProducerEpoch"],
            got["TransactionState"], got["TransactionTimeoutMs"], got["TopicPartitions"]) == (
        "1", tid, str(t.pid), str(t.epoch), "Ongoing", "45000", f"{topic}-0")
    assert int(got["CurrentTransactionStartTimeMs"]) > 0 and int(got["TransactionDurationMs"]) >= 0

    producers = kjbod_transactions(server, "describe-producers", "--topic", topic, "--partition", "0")
    assert producers.returncode == 0, producers.stderr
    header, row = rows(producers.stdout)
    assert header == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                      "CurrentTransactionStartOffset"]
    assert (row[:4], row[5]) == ([str(t.pid), str(t.epoch), "-1", "1"], "0")

    unknown = kjbod_transactions(server, "describe", "--transactional-id", "never-seen")
    assert unknown.returncode == 1
    assert "Failed to describe transaction state of transactional-id `never-seen`" in unknown.stderr
    assert "TRANSACTIONAL_ID_NOT_FOUND" in unknown.stderr
    # --broker-id asks that broker directly (no leader lookup, which would retry an unknown topic until the
    # timeout, as Kafka's admin client does).
    missing = kjbod_transactions(server, "describe-producers", "--topic", "no-such-topic", "--partition", "0",
                                 "--broker-id", "1")
    assert missing.returncode == 1
    assert "Failed to describe producers for partition no-such-topic-0 on broker 1" in missing.stderr
    assert "UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr


def test_kjbod_transactions_finds_and_aborts_a_hanging_transaction(server):
    """A transactional batch written without AddPartitionsToTxn (what KIP-890's verification refuses, so it is
    turned off here, and how transactions hung before it): its coordinator does not list the partition, so no
    marker will ever come, and the partition's last stable offset stays behind it. find-hanging names it, abort
    ends it with a marker."""
    from kjbod.admin import SyncAdminClient
    from kjbod.admin.types import ConfigResource

    topic = make_topic(server, partitions=2)
    verification = "transaction.partition.verification.enable"

    async def run():
        conn = await connect(server)
        try:
            stray = Txn(conn, f"tx-{uuid.uuid4().hex[:6]}")
            proper = Txn(conn, f"tx-{uuid.uuid4().hex[:6]}")
            assert await stray.init(timeout_ms=45_000) == 0 and await proper.init(timeout_ms=45_000) == 0
            deadline = time.monotonic() + 30
            while await produce_txn(conn, stray, topic, 0, [b"h1", b"h2"], 0):  # offsets 0-1, never added
                assert time.monotonic() < deadline, "the broker never took the dynamic value"
                await asyncio.sleep(0.1)
            assert await proper.add(topic, 1) == [0]
            assert await produce_txn(conn, proper, topic, 1, [b"ok"], 0) == 0  # open, but its coordinator knows
            return stray, proper
        finally:
            conn.close()

    with SyncAdminClient(server.bootstrap, request_timeout=30) as admin:
        admin.incremental_alter_configs({ConfigResource.broker(""): {verification: "false"}})
        try:
            stray, proper = asyncio.run(run())
        finally:
            admin.incremental_alter_configs({ConfigResource.broker(""): {verification: None}})
    found = kjbod_transactions(server, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
    assert found.returncode == 0, found.stderr
    table = rows(found.stdout)
    assert table[0] == ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                        "LastTimestamp", "Duration(min)"]
    assert [r[:6] for r in table[1:]] == [[topic, "0", str(stray.pid), str(stray.epoch), "-1", "0"]]
    # With the default 15 minutes nothing is old enough yet.
    assert rows(kjbod_transactions(server, "find-hanging", "--topic", topic).stdout)[1:] == []

    assert end_offset(server, topic, "read_committed") == 0  # held at the hanging transaction's start
    aborted = kjbod_transactions(server, "abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
    assert (aborted.returncode, aborted.stdout, aborted.stderr) == (0, "", "")
    assert [(pid, commit) for pid, _, _, commit, _ in control_batches(server, topic, 0)] == [(stray.pid, False)]
    wait_for(lambda: end_offset(server, topic, "read_committed") == 3, "the last stable offset past the marker")
    assert rows(kjbod_transactions(server, "find-hanging", "--topic", topic, "--partition", "0",
                                   "--max-transaction-timeout", "0").stdout)[1:] == []

    again = kjbod_transactions(server, "abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
    assert (again.returncode, again.stderr) == (
        1, f"Could not find any open transactions starting at offset 0 on partition {topic}-0\n")
    stale = kjbod_transactions(server, "abort", "--topic", topic, "--partition", "1", "--producer-id",
                               str(proper.pid), "--producer-epoch", str(proper.epoch - 1), "--coordinator-epoch", "0")
    assert stale.returncode == 1 and "INVALID_PRODUCER_EPOCH" in stale.stderr, stale.stderr
    assert stale.stderr.startswith(f"Failed to abort transaction AbortTransactionSpec(topicPartition={topic}-1, ")
    for argv, message in [
        (("find-hanging",), "requires either --topic or --broker-id"),
        (("find-hanging", "--broker-id", "1", "--partition", "0"), "The --partition argument requires --topic"),
        (("abort", "--topic", topic, "--partition", "0"), "must be identified either with --start-offset"),
        (("abort", "--topic", topic, "--partition", "0", "--producer-id", "5"),
         "Missing required argument --producer-epoch"),
    ]:
        done = kjbod_transactions(server, *argv)
        assert done.returncode == 2 and message in done.stderr, (argv, done.stderr)
