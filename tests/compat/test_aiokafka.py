"""aiokafka, a third real client with its own protocol code, against a real `kjbod serve` process.

Strategy: one server per module (tests/live.py), with auto.create.topics.enable off so that a produce to a
missing topic gets Kafka's answer instead of creating it.  Every test makes its own topics (aiokafka's admin
client), drives aiokafka's producer, consumer and admin client as a user would, and checks what comes back
exactly: offsets, values, keys, headers, timestamps, error classes.  Where the client's word is not enough (was
the batch really gzip? did the idempotent producer really send a producer id?), the test reads the batch
headers kjbod wrote to its log dirs.

Group consumers work (the server makes `__consumer_offsets` with one replica).  What kjbod does not serve shows
as aiokafka shows it against a Kafka that cannot serve it either: a transactional producer is told
COORDINATOR_NOT_AVAILABLE, as Kafka's FindCoordinator answers when its coordinator topic has no leader, and
aiokafka keeps asking without a limit.  kjbod logs a warning naming the transactional id, which the tests find in
its stderr.  On a node that can host `__transaction_state`, aiokafka's transactions work (one test, own node).

Compression: aiokafka needs the `cramjam` package for lz4, zstd and snappy; without it only gzip is tested.
One case needs more than one broker (a topic replicated three ways, written with acks=all): it starts its own
`kjbod cluster up` (tests/cluster's running_cluster).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka import errors as aiokafka_errors
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from datapath.support import log_events, partition_dirs
from live import LiveServer, start_server

from kjbod.protocol.errors import ErrorCode
from kjbod.storage.records import iter_batches
from tests.cluster.conftest import Cluster, running_cluster

# The compression attribute bits of a record batch (Kafka's CompressionType ids).
CODEC_IDS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
# Every codec: aiokafka's snappy, lz4 and zstd come from cramjam, in the dev extras, so a missing one fails here.
CODECS = ["gzip", "snappy", "lz4", "zstd"]

WAIT_S = 30.0


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> LiveServer:
    s = start_server(tmp_path_factory.mktemp("aiokafka"), overrides={
        "auto.create.topics.enable": "false", "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "100"})
    yield s
    s.stop()


@asynccontextmanager
async def admin_client(server: LiveServer | Cluster) -> AsyncIterator[AIOKafkaAdminClient]:
    admin = AIOKafkaAdminClient(bootstrap_servers=server.bootstrap)
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


@asynccontextmanager
async def producer_for(server: LiveServer | Cluster, **options) -> AsyncIterator[AIOKafkaProducer]:
    producer = AIOKafkaProducer(bootstrap_servers=server.bootstrap, **options)
    await producer.start()
    try:
        yield producer
    finally:
        await producer.stop()


@asynccontextmanager
async def consumer_for(server: LiveServer | Cluster, *partitions: TopicPartition,
                       **options) -> AsyncIterator[AIOKafkaConsumer]:
    """A consumer without a group, assigned `partitions` and positioned at their beginning."""
    consumer = AIOKafkaConsumer(bootstrap_servers=server.bootstrap, enable_auto_commit=False, **options)
    await consumer.start()
    try:
        consumer.assign(list(partitions))
        await consumer.seek_to_beginning(*partitions)
        yield consumer
    finally:
        await consumer.stop()


async def create_topic(server: LiveServer, name: str, partitions: int = 1, configs: dict[str, str] | None = None):
    async with admin_client(server) as admin:
        answer = await admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs or {})])
    assert [(t[0], t[1]) for t in answer.topic_errors] == [(name, 0)], answer


async def consume(consumer: AIOKafkaConsumer, count: int, **getmany) -> list:
    """The next `count` records of the consumer's assignment, in the order getmany hands them out."""
    records: list = []
    deadline = time.monotonic() + WAIT_S
    while len(records) < count:
        assert time.monotonic() < deadline, f"only {len(records)} of {count} records within {WAIT_S:g}s"
        for batch in (await consumer.getmany(timeout_ms=500, **getmany)).values():
            records.extend(batch)
    assert len(records) == count, f"{len(records) - count} records more than the {count} produced"
    return records


def batch_headers(server: LiveServer, topic: str, partition: int = 0) -> list:
    """The headers of the record batches kjbod wrote for topic-partition, in log order."""
    path = partition_dirs(server.log_dirs)[f"{topic}-{partition}"]
    return [header for log in sorted(path.glob("*.log")) for _, header in iter_batches(log.read_bytes())]


async def wait_for_event(server: LiveServer, event: str, **fields) -> dict:
    deadline = time.monotonic() + WAIT_S
    while True:
        for found in log_events(server, event):
            if all(found.get(k) == v for k, v in fields.items()):
                return found
        assert time.monotonic() < deadline, f"no {event} {fields} in the server's log within {WAIT_S:g}s"
        await asyncio.sleep(0.05)


# --------------------------------------------------------------------------------------------- producer


@pytest.mark.parametrize("acks", [0, 1, "all"])
async def test_producer_acks(server, acks):
    topic = f"acks-{acks}"
    await create_topic(server, topic)
    async with producer_for(server, acks=acks) as producer:
        sent = [await producer.send_and_wait(topic, b"value-%d" % i, partition=0) for i in range(3)]
    if acks == 0:
        # No answer is asked for: aiokafka resolves the send with None.
        assert sent == [None, None, None]
    else:
        assert [(m.topic, m.partition, m.offset) for m in sent] == [(topic, 0, i) for i in range(3)]
    tp = TopicPartition(topic, 0)
    async with consumer_for(server, tp) as consumer:
        records = await consume(consumer, 3)
        assert await consumer.end_offsets([tp]) == {tp: 3}
    assert [(r.offset, r.value) for r in records] == [(i, b"value-%d" % i) for i in range(3)]


async def test_idempotent_producer_gets_a_producer_id_and_numbers_its_batches(server):
    topic = "idempotent"
    await create_topic(server, topic)
    async with producer_for(server, enable_idempotence=True) as producer:
        sent = [await producer.send_and_wait(topic, b"v%d" % i, partition=0) for i in range(4)]
    assert [m.offset for m in sent] == [0, 1, 2, 3]
    headers = batch_headers(server, topic)
    assert [h.base_offset for h in headers] == [0, 1, 2, 3]
    assert headers[0].producer_id >= 0
    assert {(h.producer_id, h.producer_epoch) for h in headers} == {(headers[0].producer_id, 0)}
    assert [h.base_sequence for h in headers] == [0, 1, 2, 3]


@pytest.mark.parametrize("codec", CODECS)
async def test_compressed_batches_are_stored_compressed_and_read_back(server, codec):
    topic = f"compressed-{codec}"
    await create_topic(server, topic)
    values = [(b"%s record %d " % (codec.encode(), i)) * 20 for i in range(50)]
    # 20 KB of values in one batch: aiokafka counts a snappy batch's size before compressing it, so its 16 KiB
    # default would close the batch early.
    async with producer_for(server, compression_type=codec, linger_ms=50, max_batch_size=65536) as producer:
        batch = producer.create_batch()
        for value in values:
            assert batch.append(key=None, value=value, timestamp=None) is not None
        sent = await (await producer.send_batch(batch, topic, partition=0))
    assert sent.offset == 0
    headers = batch_headers(server, topic)
    assert [(h.base_offset, h.records_count, h.attributes & 0x07) for h in headers] == [(0, 50, CODEC_IDS[codec])]
    tp = TopicPartition(topic, 0)
    async with consumer_for(server, tp) as consumer:
        records = await consume(consumer, 50)
    assert [(r.offset, r.value) for r in records] == list(enumerate(values))


async def test_keys_headers_and_timestamps_come_back_intact(server):
    topic = "keyed"
    await create_topic(server, topic, partitions=2)
    produced = [
        (0, b"k0", b"v0", [("trace", b"t0")], 1_700_000_000_000),
        (1, b"k1", b"v1", [], 1_700_000_000_005),
        (0, None, b"v2", [("a", b"1"), ("b", b"")], 1_700_000_001_000),
        (0, b"k3", None, [("empty", b"")], 1_600_000_000_000),  # a tombstone, with a timestamp in the past
    ]
    async with producer_for(server) as producer:
        sent = [await producer.send_and_wait(topic, value, key=key, partition=p, headers=h, timestamp_ms=ts)
                for p, key, value, h, ts in produced]
    assert [(m.partition, m.offset, m.timestamp) for m in sent] == [
        (0, 0, 1_700_000_000_000), (1, 0, 1_700_000_000_005), (0, 1, 1_700_000_001_000), (0, 2, 1_600_000_000_000)]
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    async with consumer_for(server, *tps) as consumer:
        records = await consume(consumer, 4)
    got = sorted((r.partition, r.offset, r.key, r.value, list(r.headers), r.timestamp, r.timestamp_type)
                 for r in records)
    assert got == [
        (0, 0, b"k0", b"v0", [("trace", b"t0")], 1_700_000_000_000, 0),
        (0, 1, None, b"v2", [("a", b"1"), ("b", b"")], 1_700_000_001_000, 0),
        (0, 2, b"k3", None, [("empty", b"")], 1_600_000_000_000, 0),
        (1, 0, b"k1", b"v1", [], 1_700_000_000_005, 0),
    ]


async def test_empty_keys_values_and_headers_are_kept_apart_from_null(server):
    topic = "empties"
    await create_topic(server, topic)
    async with producer_for(server) as producer:
        await producer.send_and_wait(topic, b"", key=b"", partition=0, headers=[("null", None), ("empty", b"")])
        await producer.send_and_wait(topic, None, key=b"k", partition=0, timestamp_ms=0)  # not both None: aiokafka
    tp = TopicPartition(topic, 0)
    async with consumer_for(server, tp) as consumer:
        records = await consume(consumer, 2)
    assert [(r.key, r.value, r.headers) for r in records] == [(b"", b"", (("null", None), ("empty", b""))),
                                                             (b"k", None, ())]
    assert records[1].timestamp == 0


async def test_a_burst_of_send_futures_lands_in_order(server):
    topic = "burst"
    await create_topic(server, topic)
    async with producer_for(server, linger_ms=5) as producer:
        futures = [await producer.send(topic, b"%04d" % i, partition=0) for i in range(300)]
        sent = await asyncio.gather(*futures)
    assert [m.offset for m in sent] == list(range(300))
    assert len(batch_headers(server, topic)) < 300, "aiokafka sent one record per batch: no burst was tested"
    tp = TopicPartition(topic, 0)
    async with consumer_for(server, tp) as consumer:
        records = await consume(consumer, 300)
    assert [r.value for r in records] == [b"%04d" % i for i in range(300)]


async def test_send_batch_writes_one_batch(server):
    topic = "send-batch"
    await create_topic(server, topic)
    async with producer_for(server) as producer:
        await producer.send_and_wait(topic, b"first", partition=0)
        batch = producer.create_batch()
        for i in range(5):
            batch.append(key=b"%d" % i, value=b"batched-%d" % i, timestamp=1_700_000_000_000 + i)
        assert batch.record_count() == 5
        sent = await (await producer.send_batch(batch, topic, partition=0))
    assert (sent.topic, sent.partition, sent.offset) == (topic, 0, 1)
    assert [(h.base_offset, h.records_count) for h in batch_headers(server, topic)] == [(0, 1), (1, 5)]
    tp = TopicPartition(topic, 0)
    async with consumer_for(server, tp) as consumer:
        records = await consume(consumer, 6)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in records[1:]] == [
        (1 + i, b"%d" % i, b"batched-%d" % i, 1_700_000_000_000 + i) for i in range(5)]


async def test_a_record_over_max_message_bytes_is_message_too_large(server):
    topic = "small-messages"
    await create_topic(server, topic, configs={"max.message.bytes": "1000"})
    async with producer_for(server) as producer:
        with pytest.raises(aiokafka_errors.MessageSizeTooLargeError) as raised:
            await producer.send_and_wait(topic, b"x" * 5000, partition=0)
        fits = await producer.send_and_wait(topic, b"y" * 100, partition=0)
    # The broker answered (10 is MESSAGE_TOO_LARGE, Kafka's RecordTooLargeException); aiokafka's own size check
    # (max_request_size, 1 MiB) never saw a problem.
    assert raised.value.errno == ErrorCode.MESSAGE_TOO_LARGE == 10
    assert fits.offset == 0, "the refused record was written"


async def test_produce_to_a_missing_topic_is_unknown_topic_or_partition(server):
    async with producer_for(server, request_timeout_ms=3000) as producer:
        # aiokafka asks Metadata for the topic until its request timeout, then gives up with Kafka's error.
        with pytest.raises(aiokafka_errors.UnknownTopicOrPartitionError):
            await producer.send_and_wait("no-such-topic", b"x")
        # What it was told each time: the topic named with error 3, and not created (auto-creation is off).
        node = producer.client.get_random_node()
        answer = await producer.client.send(node, MetadataRequest(["no-such-topic"]))
        # A Produce sent anyway, through aiokafka's own request and batch code, gets Kafka's per-partition error.
        batch = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                          producer_epoch=-1, base_sequence=-1, batch_size=16384)
        batch.append(0, timestamp=None, key=None, value=b"x", headers=[])
        produced = await producer.client.send(node, ProduceRequest(None, -1, 5000, [
            ("no-such-topic", [(0, bytes(batch.build()))])]))
    assert [(t[0], t[1]) for t in answer.topics] == [(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no-such-topic")]
    [(topic, [partition])] = produced.topics
    # (partition, error, base offset, log append time, log start offset, ...): no offsets for an error, as in Kafka
    assert (topic, tuple(partition)[:5]) == ("no-such-topic", (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1))
    async with admin_client(server) as admin:
        assert "no-such-topic" not in await admin.list_topics()


# --------------------------------------------------------------------------------------------- consumer


async def produce_numbered(server: LiveServer, topic: str, count: int, *, first_timestamp: int = 1_000_000) -> None:
    """`count` records "0", "1", ... to partition 0, record i stamped first_timestamp + 1000 * i."""
    await create_topic(server, topic)
    async with producer_for(server) as producer:
        futures = [await producer.send(topic, str(i).encode(), partition=0, timestamp_ms=first_timestamp + 1000 * i)
                   for i in range(count)]
        await asyncio.gather(*futures)


async def test_assign_seek_getone_and_position(server):
    topic = "seeking"
    await produce_numbered(server, topic, 10)
    tp = TopicPartition(topic, 0)
    async with consumer_for(server, tp) as consumer:
        first = await consumer.getone()
        assert (first.offset, first.value) == (0, b"0")
        assert await consumer.position(tp) == 1
        consumer.seek(tp, 7)
        seven = await consumer.getone()
        assert (seven.offset, seven.value) == (7, b"7")
        await consumer.seek_to_end(tp)
        assert await consumer.position(tp) == 10
        await consumer.seek_to_beginning(tp)
        assert await consumer.position(tp) == 0


async def test_getmany_honours_max_records(server):
    topic = "max-records"
    await produce_numbered(server, topic, 10)
    tp = TopicPartition(topic, 0)
    async with consumer_for(server, tp) as consumer:
        seen: list[int] = []
        deadline = time.monotonic() + WAIT_S
        while len(seen) < 10 and time.monotonic() < deadline:
            got = await consumer.getmany(tp, timeout_ms=500, max_records=3)
            assert sum(len(b) for b in got.values()) <= 3
            seen.extend(r.offset for b in got.values() for r in b)
    assert seen == list(range(10))


async def test_beginning_and_end_offsets(server):
    topic = "offsets"
    await create_topic(server, topic, partitions=2)
    async with producer_for(server) as producer:
        for i in range(5):
            await producer.send_and_wait(topic, b"%d" % i, partition=1)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    async with consumer_for(server, *tps) as consumer:
        assert await consumer.beginning_offsets(tps) == {tps[0]: 0, tps[1]: 0}
        assert await consumer.end_offsets(tps) == {tps[0]: 0, tps[1]: 5}


async def test_offsets_for_times(server):
    topic = "times"
    await produce_numbered(server, topic, 5, first_timestamp=1_000_000)  # stamped 1 000 000 ... 1 004 000
    tp = TopicPartition(topic, 0)
    async with consumer_for(server, tp) as consumer:
        exact = await consumer.offsets_for_times({tp: 1_002_000})
        between = await consumer.offsets_for_times({tp: 1_002_500})
        before = await consumer.offsets_for_times({tp: 0})
        past_end = await consumer.offsets_for_times({tp: 1_005_000})
    assert (exact[tp].offset, exact[tp].timestamp) == (2, 1_002_000)
    assert (between[tp].offset, between[tp].timestamp) == (3, 1_003_000)
    assert (before[tp].offset, before[tp].timestamp) == (0, 1_000_000)
    assert past_end == {tp: None}


@pytest.mark.parametrize("isolation_level", ["read_uncommitted", "read_committed"])
async def test_isolation_levels_read_every_record(server, isolation_level):
    # No transactions on kjbod: the last stable offset is the high watermark, so both levels read everything.
    topic = f"isolation-{isolation_level.replace('_', '-')}"
    await produce_numbered(server, topic, 6)
    tp = TopicPartition(topic, 0)
    async with consumer_for(server, tp, isolation_level=isolation_level) as consumer:
        records = await consume(consumer, 6)
        assert await consumer.end_offsets([tp]) == {tp: 6}
        assert consumer.last_stable_offset(tp) == 6
    assert [r.value for r in records] == [b"%d" % i for i in range(6)]


async def test_fetch_limits_smaller_than_a_batch_still_return_it(server):
    # Kafka answers the first batch whole even when it is larger than fetch.max.bytes or the partition's limit,
    # so a consumer always makes progress.
    topic = "big-batch"
    await create_topic(server, topic)
    values = [b"%03d" % i + b"z" * 500 for i in range(20)]
    async with producer_for(server) as producer:
        batch = producer.create_batch()
        for value in values:
            batch.append(key=None, value=value, timestamp=None)
        await (await producer.send_batch(batch, topic, partition=0))
    [header] = batch_headers(server, topic)
    assert header.size > 10_000
    tp = TopicPartition(topic, 0)
    async with consumer_for(server, tp, fetch_max_bytes=1024, max_partition_fetch_bytes=1024) as consumer:
        records = await consume(consumer, 20)
    assert [r.value for r in records] == values


@pytest.mark.parametrize(("auto_offset_reset", "expected"), [("earliest", 0), ("latest", 4), ("none", None)])
async def test_an_offset_past_the_end_resets_as_the_consumer_says(server, auto_offset_reset, expected):
    # Kafka answers a fetch past the log end OFFSET_OUT_OF_RANGE; the consumer then applies auto_offset_reset,
    # or raises with "none".
    topic = f"out-of-range-{auto_offset_reset}"
    await produce_numbered(server, topic, 4)
    tp = TopicPartition(topic, 0)
    async with consumer_for(server, tp, auto_offset_reset=auto_offset_reset) as consumer:
        consumer.seek(tp, 100)
        if expected is None:
            with pytest.raises(aiokafka_errors.OffsetOutOfRangeError) as raised:
                await consumer.getone()
            assert raised.value.args[0] == {tp: 100}
        elif expected == 0:
            record = await consumer.getone()
            assert (record.offset, record.value) == (0, b"0")
        else:
            with pytest.raises(asyncio.TimeoutError):  # nothing new past the end to hand out
                await asyncio.wait_for(consumer.getone(), 1)
            assert await consumer.position(tp) == expected


async def test_a_consumer_at_the_end_gets_a_record_produced_while_it_waits(server):
    # The fetch waits at the broker (fetch_max_wait_ms) and is answered when the record arrives.
    topic = "tail"
    await produce_numbered(server, topic, 2)
    tp = TopicPartition(topic, 0)
    async with consumer_for(server, tp, fetch_max_wait_ms=5000) as consumer:
        await consumer.seek_to_end(tp)
        assert await consumer.position(tp) == 2
        waiting = asyncio.ensure_future(consumer.getone())
        await asyncio.sleep(0.2)
        assert not waiting.done()
        async with producer_for(server) as producer:
            await producer.send_and_wait(topic, b"late", partition=0)
        record = await asyncio.wait_for(waiting, WAIT_S)
    assert (record.offset, record.value) == (2, b"late")


# --------------------------------------------------------------------------------------------- groups, transactions


async def waits_for_a_coordinator(server: LiveServer, client, key: str, key_type: str, says: str) -> None:
    """Starts `client` (aiokafka's producer), waits for kjbod's warning about `key`, and checks that start() is
    still waiting then: aiokafka retries COORDINATOR_NOT_AVAILABLE without a limit."""
    starting = asyncio.ensure_future(client.start())
    try:
        line = await wait_for_event(server, "coordinator_not_served", keys=[key])
        assert (line["level"], line["key_type"], line["answer"]) == ("warning", key_type, "COORDINATOR_NOT_AVAILABLE")
        assert says in line["reason"]
        assert not starting.done(), "aiokafka's start() returned: it found a coordinator somewhere"
    finally:
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        await client.stop()


async def test_group_consumer_subscribes_consumes_and_commits(server):
    """A consumer with a group_id: it finds kjbod as its coordinator, joins, is given both partitions, reads
    every record and commits; the committed offsets read back, a second consumer of the group starts after them,
    and aiokafka's admin client lists and describes the group."""
    await create_topic(server, "grouped", partitions=2)
    async with producer_for(server) as producer:
        for i in range(6):
            await producer.send_and_wait("grouped", f"v{i}".encode(), partition=i % 2)
    consumer = AIOKafkaConsumer("grouped", bootstrap_servers=server.bootstrap, group_id="aiokafka-group",
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    try:
        records = await consume(consumer, 6)
        assert sorted(r.value for r in records) == [f"v{i}".encode() for i in range(6)]
        assert consumer.assignment() == {TopicPartition("grouped", 0), TopicPartition("grouped", 1)}
        await consumer.commit()
        assert await consumer.committed(TopicPartition("grouped", 0)) == 3
        async with admin_client(server) as admin:
            listed = await admin.list_consumer_groups()
            assert ("aiokafka-group", "consumer") in listed
            [described] = await admin.describe_consumer_groups(["aiokafka-group"])
            assert described.groups[0][2] == "Stable" and len(described.groups[0][5]) == 1
    finally:
        await consumer.stop()
    async with producer_for(server) as producer:
        await producer.send_and_wait("grouped", b"after", partition=1)
    again = AIOKafkaConsumer("grouped", bootstrap_servers=server.bootstrap, group_id="aiokafka-group",
                             auto_offset_reset="earliest", enable_auto_commit=False)
    await again.start()
    try:
        [record] = await consume(again, 1)
        assert (record.partition, record.offset, record.value) == (1, 3, b"after")
    finally:
        await again.stop()


async def test_transactional_producer_waits_for_a_coordinator_and_kjbod_says_why(server):
    """A producer with a transactional_id on a single broker left at transaction.state.log.replication.factor 3:
    aiokafka asks FindCoordinator for a transaction coordinator first, gets COORDINATOR_NOT_AVAILABLE (as from a
    Kafka that cannot make __transaction_state with that many replicas) and asks again without a limit or a log
    line, so start() does not return.  kjbod logs why, naming the transactional id."""
    producer = AIOKafkaProducer(bootstrap_servers=server.bootstrap, transactional_id="aiokafka-tx")
    await waits_for_a_coordinator(server, producer, "aiokafka-tx", "transaction", "__transaction_state")


@pytest.mark.slow
async def test_three_brokers_replicated_topic_with_acks_all(tmp_path):
    """The one case that needs a cluster (`kjbod cluster up`: a controller and three brokers): a topic replicated
    three ways, its leaders spread over the brokers, written with acks=all by an idempotent producer that must
    route each partition to its own leader, and read back."""
    with running_cluster(tmp_path / "cluster", log_dirs=1) as cluster:
        brokers = sorted(cluster.broker_ids)
        async with admin_client(cluster) as admin:
            answer = await admin.create_topics([NewTopic("replicated", 3, 3)])
            assert [(t[0], t[1]) for t in answer.topic_errors] == [("replicated", 0)]
            described = await admin.describe_cluster()
            assert sorted(b["node_id"] for b in described["brokers"]) == brokers
            deadline = time.monotonic() + WAIT_S
            while True:
                [topic] = await admin.describe_topics(["replicated"])
                partitions = topic["partitions"]
                # Right after the cluster starts, the broker that answers may not have seen the leader's broker
                # yet: it names no leader then (LEADER_NOT_AVAILABLE, as Kafka's metadata cache does).
                if (all(sorted(p["isr"]) == brokers and p["leader"] in brokers for p in partitions)
                        or time.monotonic() > deadline):
                    break
                await asyncio.sleep(0.1)
        assert [(p["partition"], sorted(p["replicas"]), sorted(p["isr"])) for p in partitions] == [
            (i, brokers, brokers) for i in range(3)]
        assert sorted(p["leader"] for p in partitions) == brokers
        async with producer_for(cluster, acks="all", enable_idempotence=True) as producer:
            sent = [await producer.send_and_wait("replicated", b"%d-%d" % (p, i), partition=p)
                    for p in range(3) for i in range(5)]
        assert [(m.partition, m.offset) for m in sent] == [(p, i) for p in range(3) for i in range(5)]
        tps = [TopicPartition("replicated", p) for p in range(3)]
        async with consumer_for(cluster, *tps) as consumer:
            records = await consume(consumer, 15)
    assert sorted((r.partition, r.offset, r.value) for r in records) == [
        (p, i, b"%d-%d" % (p, i)) for p in range(3) for i in range(5)]


# --------------------------------------------------------------------------------------------- admin


async def test_admin_creates_a_topic_with_partitions_and_configs(server):
    async with admin_client(server) as admin:
        answer = await admin.create_topics([NewTopic("made-by-admin", 4, 1, topic_configs={
            "retention.ms": "3600000", "max.message.bytes": "65536"})])
        assert [(t[0], t[1]) for t in answer.topic_errors] == [("made-by-admin", 0)]
        [described] = await admin.describe_topics(["made-by-admin"])
        [configs] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "made-by-admin")])
        [some] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "made-by-admin",
                                                              {"retention.ms": None, "cleanup.policy": None})])
    assert described["error_code"] == 0 and described["is_internal"] is False
    assert [(p["partition"], p["leader"], p["replicas"], p["isr"]) for p in described["partitions"]] == [
        (i, 1, [1], [1]) for i in range(4)]
    [resource] = configs.resources
    assert (resource[0], resource[2], resource[3]) == (0, ConfigResourceType.TOPIC, "made-by-admin")
    entries = {e[0]: (e[1], e[3]) for e in resource[4]}
    # config_source 1 is DYNAMIC_TOPIC_CONFIG: set on the topic.
    assert entries["retention.ms"] == ("3600000", 1)
    assert entries["max.message.bytes"] == ("65536", 1)
    assert sorted((e[0], e[1], e[3]) for e in some.resources[0][4]) == [
        ("cleanup.policy", "delete", 5), ("retention.ms", "3600000", 1)]  # 5 is DEFAULT_CONFIG


async def test_admin_replication_factor_above_the_brokers_is_invalid_replication_factor(server):
    async with admin_client(server) as admin:
        answer = await admin.create_topics([NewTopic("too-many-replicas", 1, 3)])
        assert "too-many-replicas" not in await admin.list_topics()
    [(name, code, message)] = answer.topic_errors
    assert (name, code) == ("too-many-replicas", ErrorCode.INVALID_REPLICATION_FACTOR)
    assert "3" in message and "1" in message


@pytest.mark.parametrize(("configs", "named"), [
    ({"retention.ms": "soon"}, "retention.ms"),
    ({"no.such.config": "1"}, "no.such.config"),
], ids=["bad value", "unknown name"])
async def test_admin_invalid_topic_configs_are_invalid_config(server, configs, named):
    async with admin_client(server) as admin:
        answer = await admin.create_topics([NewTopic("bad-config", 1, 1, topic_configs=configs)])
        assert "bad-config" not in await admin.list_topics()
    [(name, code, message)] = answer.topic_errors
    assert (name, code) == ("bad-config", ErrorCode.INVALID_CONFIG)
    assert named in message


async def test_admin_describes_a_missing_topic_as_unknown(server):
    async with admin_client(server) as admin:
        [described] = await admin.describe_topics(["never-made"])
        [configs] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "never-made")])
    assert (described["topic"], described["error_code"], described["partitions"]) == (
        "never-made", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])
    [resource] = configs.resources
    assert (resource[0], resource[3], resource[4]) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "never-made", [])


async def test_admin_create_topics_answers_each_problem_with_its_kafka_code(server):
    await create_topic(server, "exists-already")
    async with admin_client(server) as admin:
        again = await admin.create_topics([NewTopic("exists-already", 1, 1)])
        bad_name = await admin.create_topics([NewTopic("bad name!", 1, 1)])
        no_partitions = await admin.create_topics([NewTopic("no-partitions", 0, 1)])
        validated = await admin.create_topics([NewTopic("only-validated", 2, 1)], validate_only=True)
        topics = await admin.list_topics()
    assert [(t[0], t[1]) for t in again.topic_errors] == [("exists-already", ErrorCode.TOPIC_ALREADY_EXISTS)]
    assert [(t[0], t[1]) for t in bad_name.topic_errors] == [("bad name!", ErrorCode.INVALID_TOPIC_EXCEPTION)]
    assert [(t[0], t[1]) for t in no_partitions.topic_errors] == [("no-partitions", ErrorCode.INVALID_PARTITIONS)]
    assert [(t[0], t[1]) for t in validated.topic_errors] == [("only-validated", 0)]
    assert "only-validated" not in topics and "no-partitions" not in topics


async def test_admin_deletes_a_topic(server):
    await create_topic(server, "doomed", partitions=2)
    async with admin_client(server) as admin:
        assert "doomed" in await admin.list_topics()
        answer = await admin.delete_topics(["doomed"])
        assert [(t[0], t[1]) for t in answer.topic_error_codes] == [("doomed", 0)]
        assert "doomed" not in await admin.list_topics()
        again = await admin.delete_topics(["doomed"])
    assert [(t[0], t[1]) for t in again.topic_error_codes] == [("doomed", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]


async def test_admin_describes_the_cluster(server):
    async with admin_client(server) as admin:
        cluster = await admin.describe_cluster()
    assert cluster["cluster_id"] == server.cluster_id
    assert cluster["controller_id"] == 1
    assert [(b["node_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [(1, "127.0.0.1", server.port)]


async def test_admin_describes_broker_configs(server):
    async with admin_client(server) as admin:
        [answer] = await admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")])
    [resource] = answer.resources
    assert (resource[0], resource[2], resource[3]) == (0, ConfigResourceType.BROKER, "1")
    entries = {e[0]: e[1] for e in resource[4]}
    assert entries["node.id"] == "1"
    assert entries["log.dirs"] == ",".join(str(d) for d in server.log_dirs)
    assert entries["auto.create.topics.enable"] == "false"


async def test_admin_alters_topic_configs(server):
    await create_topic(server, "altered", configs={"segment.ms": "7200000"})
    resource = ConfigResource(ConfigResourceType.TOPIC, "altered")
    async with admin_client(server) as admin:
        [answer] = await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "altered",
                                                             {"retention.ms": "1234567"})])
        [described] = await admin.describe_configs([resource])
    assert [(r[0], r[2], r[3]) for r in answer.resources] == [(0, ConfigResourceType.TOPIC, "altered")]
    entries = {e[0]: (e[1], e[3]) for e in described.resources[0][4]}
    assert entries["retention.ms"] == ("1234567", 1)
    # AlterConfigs replaces the topic's whole set, as in Kafka: segment.ms is back to the broker's default.
    assert entries["segment.ms"][1] != 1


async def test_admin_changes_a_broker_default_of_a_topic_config(server):
    """aiokafka's alter_configs on this broker: log.retention.ms is one of Kafka's dynamic broker configs (kjbod
    used to refuse it, INVALID_REQUEST "Cannot update these configs dynamically"); a topic without a retention.ms
    of its own takes it at once, shown with Kafka's source; AlterConfigs naming nothing removes it again."""
    await create_topic(server, "broker-default")
    topic = ConfigResource(ConfigResourceType.TOPIC, "broker-default")
    async with admin_client(server) as admin:
        # aiokafka sends the topics' request (none here) and one per broker: two answers.
        [_, answer] = await admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "1",
                                                                {"log.retention.ms": "86400000"})])
        [described] = await admin.describe_configs([topic])
        [_, cleared] = await admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "1", {})])
        [after] = await admin.describe_configs([topic])
    assert [(r[0], r[2], r[3]) for r in answer.resources] == [(0, ConfigResourceType.BROKER, "1")]
    assert [r[0] for r in cleared.resources] == [0]
    entries = {e[0]: (e[1], e[3]) for e in described.resources[0][4]}
    assert entries["retention.ms"] == ("86400000", 2)  # DYNAMIC_BROKER_CONFIG
    entries = {e[0]: (e[1], e[3]) for e in after.resources[0][4]}
    assert entries["retention.ms"][0] != "86400000" and entries["retention.ms"][1] in (4, 5)  # static or default


async def test_admin_grows_a_topic_whose_new_partitions_take_records(server):
    """CreatePartitions: validate_only adds nothing; a real request adds the partitions, which Metadata lists with
    this broker as leader and ISR and which take and serve records; asking again for the same count is
    InvalidPartitionsError with Kafka's message, and an unknown topic UnknownTopicOrPartitionError."""
    await create_topic(server, "growing")
    async with admin_client(server) as admin:
        await admin.create_partitions({"growing": NewPartitions(5)}, validate_only=True)
        [checked] = await admin.describe_topics(["growing"])
        await admin.create_partitions({"growing": NewPartitions(3)})
        [grown] = await admin.describe_topics(["growing"])
        with pytest.raises(aiokafka_errors.InvalidPartitionsError, match=r"Topic already has 3 partition\(s\)\."):
            await admin.create_partitions({"growing": NewPartitions(3)})
        with pytest.raises(aiokafka_errors.UnknownTopicOrPartitionError):
            await admin.create_partitions({"never-made": NewPartitions(3)})
    assert len(checked["partitions"]) == 1
    node = server.node_id
    assert sorted((p["partition"], p["leader"], p["replicas"], p["isr"]) for p in grown["partitions"]) == [
        (i, node, [node], [node]) for i in range(3)]
    async with producer_for(server) as producer:
        sent = [await producer.send_and_wait("growing", b"in-%d" % i, partition=i) for i in range(3)]
    assert [(m.partition, m.offset) for m in sent] == [(0, 0), (1, 0), (2, 0)]
    tps = [TopicPartition("growing", i) for i in range(3)]
    async with consumer_for(server, *tps) as consumer:
        records = await consume(consumer, 3)
    assert sorted((r.partition, r.value) for r in records) == [(i, b"in-%d" % i) for i in range(3)]


async def test_admin_deletes_the_records_below_an_offset(server):
    """DeleteRecords: aiokafka's delete_records answers each partition's low watermark; consumers then start
    there (seek_to_beginning), and an offset past the end is OffsetOutOfRangeError."""
    await create_topic(server, "cut-short")
    async with producer_for(server) as producer:
        for i in range(6):
            await producer.send_and_wait("cut-short", b"v%d" % i, partition=0)
    tp = TopicPartition("cut-short", 0)
    async with admin_client(server) as admin:
        assert await admin.delete_records({tp: RecordsToDelete(4)}) == {tp: 4}
        with pytest.raises(aiokafka_errors.OffsetOutOfRangeError):
            await admin.delete_records({tp: RecordsToDelete(7)})
    async with consumer_for(server, tp) as consumer:
        records = await consume(consumer, 2)
        assert await consumer.beginning_offsets([tp]) == {tp: 4}
    assert [(r.offset, r.value) for r in records] == [(4, b"v4"), (5, b"v5")]


async def test_admin_group_apis_answer_for_unknown_groups(server):
    """Describing a group nobody joined answers it Dead with no members, as Kafka does; deleting it is
    GROUP_ID_NOT_FOUND."""
    await create_topic(server, "fixed-partitions")
    async with admin_client(server) as admin:
        [described] = await admin.describe_consumer_groups(["some-group"])
        assert (described.groups[0][0], described.groups[0][1], described.groups[0][2]) == (0, "some-group", "Dead")
        assert described.groups[0][5] == []
        [described] = await admin.describe_topics(["fixed-partitions"])
    assert len(described["partitions"]) == 1


@pytest.mark.slow
async def test_transactions_commit_abort_offsets_and_fencing(tmp_path):
    """aiokafka's transactional producer on a node that can host `__transaction_state` (one replica): a committed
    transaction, an aborted one and a consume-transform-produce one (send_offsets_to_transaction) read back at both
    isolation levels; the group's offset appears once its transaction commits; the next producer instance with the
    same transactional id goes on where the first stopped.  (Fencing is shown with confluent-kafka in
    tests/txn: aiokafka leaves the fenced sender's error in a future nobody awaits.)"""
    s = start_server(tmp_path, overrides={
        "auto.create.topics.enable": "false", "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1", "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1", "transaction.state.log.num.partitions": "1"})
    try:
        await create_topic(s, "tx-in")
        await create_topic(s, "tx-out")
        tp_in, tp_out = TopicPartition("tx-in", 0), TopicPartition("tx-out", 0)
        first = AIOKafkaProducer(bootstrap_servers=s.bootstrap, transactional_id="aio-tx")
        await first.start()
        try:
            async with first.transaction():
                await first.send_and_wait("tx-out", b"kept-1", partition=0)
            await first.begin_transaction()
            await first.send_and_wait("tx-out", b"gone", partition=0)
            await first.abort_transaction()
            async with first.transaction():
                await first.send_and_wait("tx-out", b"kept-2", partition=0)
                await first.send_offsets_to_transaction({tp_in: 5}, "aio-group")

        finally:
            await first.stop()
        # The next instance of the same transactional id takes over (its InitProducerId bumps the epoch).
        async with producer_for(s, transactional_id="aio-tx") as second, second.transaction():
            await second.send_and_wait("tx-out", b"kept-3", partition=0)

        async with consumer_for(s, tp_out, isolation_level="read_committed") as committed:
            assert [r.value for r in await consume(committed, 3)] == [b"kept-1", b"kept-2", b"kept-3"]
        async with consumer_for(s, tp_out) as everything:
            assert [r.value for r in await consume(everything, 4)] == [b"kept-1", b"gone", b"kept-2", b"kept-3"]
        group = AIOKafkaConsumer(bootstrap_servers=s.bootstrap, group_id="aio-group", enable_auto_commit=False)
        await group.start()
        try:
            assert await group.committed(tp_in) == 5
        finally:
            await group.stop()
    finally:
        s.stop()
