"""Bad input over the wire: exact Kafka error codes from raw requests encoded with kjbod's own codecs.

One server for the module (auto topic creation off, message.max.bytes 200,000, a short file-delete delay), so
each test uses its own topic names.  After every refused Produce the test checks the log did not move: an error
answer must mean nothing was appended.
"""

from __future__ import annotations

import struct
import time
import uuid
from pathlib import Path

import pytest
from live import start_server

from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import (
    DeleteTopicsRequest,
    FetchRequest,
    InitProducerIdRequest,
    MetadataRequest,
    ProduceRequest,
)
from kjbod.storage.records import build_batch

from .support import (
    RawClient,
    batch,
    create_topic,
    end_offset,
    fetch,
    fetch_all,
    list_offset,
    metadata,
    new_topic,
    partition_dirs,
    produce,
    recrc,
    refused,
    renamed_to_delete,
)

pytestmark = pytest.mark.slow

MESSAGE_MAX_BYTES = 200_000
DELETE_DELAY_MS = 3000


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = start_server(tmp_path_factory.mktemp("bad-input"), overrides={
        "auto.create.topics.enable": "false",
        "message.max.bytes": str(MESSAGE_MAX_BYTES),
        "log.segment.delete.delay.ms": str(DELETE_DELAY_MS),
    })
    yield s
    s.stop()


# ================================================================================================ produce


def test_produce_to_a_missing_topic_with_auto_create_off(raw, server):
    resp = produce(raw, "no-such-topic", 0, batch([b"x"]))
    assert resp.error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    # Metadata asking for auto-creation does not create it either: auto.create.topics.enable=false wins.
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="no-such-topic")],
                          allow_auto_topic_creation=True)
    (t,) = raw.call(req, 12).topics
    assert t.error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    assert "no-such-topic-0" not in partition_dirs(server.log_dirs)
    # A partition past the topic's last one is unknown too.
    new_topic(raw, "two-parts", 2)
    assert produce(raw, "two-parts", 2, batch([b"x"])).error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    assert produce(raw, "two-parts", -1, batch([b"x"])).error_code == E.UNKNOWN_TOPIC_OR_PARTITION


def test_batch_with_a_bad_crc_is_corrupt_message(raw):
    new_topic(raw, "crc")
    good = batch([b"first", b"second"])
    assert produce(raw, "crc", 0, good).error_code == 0
    damaged = bytearray(good)
    damaged[-3] ^= 0x01
    resp = refused(raw, "crc", bytes(damaged), E.CORRUPT_MESSAGE)
    assert resp.error_message and "CRC" in resp.error_message
    # v8+ also names the batch in record_errors.
    assert [e.batch_index for e in resp.record_errors] == [0]
    # A good batch followed by a bad one: the whole request is refused, nothing of it appended (Kafka refuses two
    # batches for one partition before it reads them: INVALID_RECORD).
    refused(raw, "crc", good + bytes(damaged), E.INVALID_RECORD)


def test_truncated_and_trailing_bytes_are_corrupt_message(raw):
    new_topic(raw, "torn")
    good = batch([b"a", b"b", b"c"])
    refused(raw, "torn", good[:-10], E.CORRUPT_MESSAGE)  # shorter than its length field says
    refused(raw, "torn", good + b"\x00" * 7, E.CORRUPT_MESSAGE)  # bytes after the last batch
    too_short = bytearray(good)
    struct.pack_into(">i", too_short, 8, 10)  # a length below the header size
    refused(raw, "torn", bytes(too_short), E.CORRUPT_MESSAGE)


def test_batch_over_max_message_bytes_is_message_too_large(raw):
    new_topic(raw, "small-max", configs={"max.message.bytes": "2000"})
    refused(raw, "small-max", batch([b"v" * 3000]), E.MESSAGE_TOO_LARGE)
    assert produce(raw, "small-max", 0, batch([b"v" * 1000])).error_code == 0
    # The broker default (message.max.bytes) applies to topics without an override...
    new_topic(raw, "default-max")
    refused(raw, "default-max", batch([b"v" * (MESSAGE_MAX_BYTES + 1000)]), E.MESSAGE_TOO_LARGE)
    # ...and a topic override may raise it.
    new_topic(raw, "big-max", configs={"max.message.bytes": str(4 * MESSAGE_MAX_BYTES)})
    assert produce(raw, "big-max", 0, batch([b"v" * (MESSAGE_MAX_BYTES + 1000)])).error_code == 0


def test_records_a_client_may_not_send_are_invalid_record(raw):
    new_topic(raw, "invalid")
    good = batch([b"a", b"b"])
    old_magic = bytearray(good)
    old_magic[16] = 1  # magic is not covered by the CRC
    refused(raw, "invalid", bytes(old_magic), E.INVALID_RECORD)
    # Byte 22 holds a v2 batch's transactional bit; in an older format it is something else: still INVALID_RECORD
    flagged = bytearray(good)
    flagged[16], flagged[22] = 1, flagged[22] | 0x10
    refused(raw, "invalid", bytes(flagged), E.INVALID_RECORD)
    control = build_batch([(None, b"\x00\x00\x00\x00", [], int(time.time() * 1000))], is_control=True)
    refused(raw, "invalid", control, E.INVALID_RECORD)
    miscounted = bytearray(good)
    struct.pack_into(">i", miscounted, 57, 5)  # RecordsCount 5 with LastOffsetDelta 1
    refused(raw, "invalid", recrc(bytes(miscounted)), E.INVALID_RECORD)
    offset_set = bytearray(good)
    struct.pack_into(">q", offset_set, 0, 42)  # clients send base offset 0
    refused(raw, "invalid", bytes(offset_set), E.INVALID_RECORD)
    refused(raw, "invalid", b"", E.INVALID_RECORD)
    refused(raw, "invalid", None, E.INVALID_RECORD)  # a null records field


def test_bad_acks_transactions_and_codec_versions(raw):
    new_topic(raw, "misc")
    resp = produce(raw, "misc", 0, batch([b"x"]), acks=2)
    assert resp.error_code == E.INVALID_REQUIRED_ACKS
    txn = ProduceRequest(transactional_id="txn-1", acks=-1, timeout_ms=1000, topic_data=[
        ProduceRequest.TopicProduceData(name="misc", partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch([b"x"]))])])
    (t,) = raw.call(txn, 9).responses
    # As Kafka: a transactional id matters only for transactional batches (tests/txn); a plain batch goes in.
    assert t.partition_responses[0].error_code == 0
    zstd = zstd_batch([b"compressed"] * 20)
    refused(raw, "misc", zstd, E.UNSUPPORTED_COMPRESSION_TYPE, version=6)  # zstd needs Produce v7
    assert produce(raw, "misc", 0, zstd, version=7).error_code == 0
    assert end_offset(raw, "misc") == 21


def test_acks_0_failure_closes_the_connection(server):
    with RawClient.to(server) as client:
        assert produce(client, "missing-acks0", 0, batch([b"x"]), acks=0) is None
        assert client.closed_by_server(), "an acks=0 produce that failed must close the connection"
    with RawClient.to(server) as client:  # the server is fine
        assert metadata(client, None).cluster_id == server.cluster_id


def test_acks_0_append_failure_on_a_dir_worker_closes_the_connection(server, raw):
    """The refusal comes back from the partition's dir worker (the answer is a future, not a coroutine): with
    acks=0 it still closes the connection, and a good acks=0 produce on the same topic does not."""
    new_topic(raw, "acks0-crc")
    good = batch([b"x"])
    damaged = bytearray(good)
    damaged[-1] ^= 0xFF
    with RawClient.to(server) as client:
        assert produce(client, "acks0-crc", 0, bytes(damaged), acks=0) is None
        assert client.closed_by_server(), "an acks=0 produce refused by the dir worker must close the connection"
    with RawClient.to(server) as client:
        assert produce(client, "acks0-crc", 0, good, acks=0) is None
        assert metadata(client, None).cluster_id == server.cluster_id  # still open, answered in order
    assert produce(raw, "acks0-crc", 0, good).base_offset == 1


def test_idempotent_producer_retries_and_gaps(raw):
    new_topic(raw, "idem")
    init = raw.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1000), 4)
    assert init.error_code == 0 and init.producer_id >= 0
    pid, epoch = init.producer_id, init.producer_epoch
    first = batch([b"a", b"b", b"c"], producer_id=pid, producer_epoch=epoch, base_sequence=0)
    assert produce(raw, "idem", 0, first).base_offset == 0
    # The same batch again (a retry after a lost answer) is acknowledged with its offsets, not stored twice.
    again = produce(raw, "idem", 0, first)
    assert again.error_code == 0 and again.base_offset == 0
    assert end_offset(raw, "idem") == 3
    gap = batch([b"d"], producer_id=pid, producer_epoch=epoch, base_sequence=7)
    refused(raw, "idem", gap, E.OUT_OF_ORDER_SEQUENCE_NUMBER)
    nxt = batch([b"d"], producer_id=pid, producer_epoch=epoch, base_sequence=3)
    assert produce(raw, "idem", 0, nxt).base_offset == 3
    # A bumped epoch fences the old one (an idempotent producer bumps its own epoch, without asking).
    fresh = batch([b"e"], producer_id=pid, producer_epoch=epoch + 1, base_sequence=0)
    assert produce(raw, "idem", 0, fresh).base_offset == 4
    stale = batch([b"f"], producer_id=pid, producer_epoch=epoch, base_sequence=4)
    refused(raw, "idem", stale, E.INVALID_PRODUCER_EPOCH)
    assert [r.value for r in fetch_all(raw, "idem", 0)] == [b"a", b"b", b"c", b"d", b"e"]


def test_undecodable_request_closes_only_that_connection(server):
    with RawClient.to(server) as bad, RawClient.to(server) as good:
        body = struct.pack(">hhi", 0, 9, 1) + b"\xff" * 20  # Produce v9 header, garbage after it
        bad.sock.sendall(struct.pack(">i", len(body)) + body)
        assert bad.closed_by_server()
        assert metadata(good, None).cluster_id == server.cluster_id


# ================================================================================================ fetch


def test_fetch_past_the_end_is_offset_out_of_range(raw):
    new_topic(raw, "ends")
    for i in range(3):
        produce(raw, "ends", 0, batch([b"r%d" % i]))
    at_end = fetch(raw, "ends", 0, 3)
    assert at_end.error_code == 0 and at_end.high_watermark == 3 and not at_end.records
    past = fetch(raw, "ends", 0, 4)
    assert past.error_code == E.OFFSET_OUT_OF_RANGE
    # No offsets with it, as Kafka's ReplicaManager (createLogReadResult): the consumer resets with ListOffsets.
    assert (past.high_watermark, past.last_stable_offset, past.log_start_offset) == (-1, -1, -1)
    assert fetch(raw, "ends", 0, -1).error_code == E.OFFSET_OUT_OF_RANGE
    assert fetch(raw, "ends", 0, 10**12).error_code == E.OFFSET_OUT_OF_RANGE
    assert fetch(raw, "no-such-topic", 0, 0).error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    assert fetch(raw, "ends", 5, 0).error_code == E.UNKNOWN_TOPIC_OR_PARTITION


def test_fetch_by_unknown_topic_id_and_sessions(raw):
    req = FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=[FetchRequest.FetchTopic(
        topic_id=uuid.uuid4(), partitions=[FetchRequest.FetchPartition(partition=0, partition_max_bytes=1024)])])
    (t,) = raw.call(req, 13).responses
    assert t.partitions[0].error_code == E.UNKNOWN_TOPIC_ID
    # kjbod keeps no fetch sessions: an incremental fetch is told to start over.
    req.session_id, req.session_epoch = 12345, 1
    assert raw.call(req, 13).error_code == E.FETCH_SESSION_ID_NOT_FOUND


def test_fetch_waits_for_data_up_to_max_wait(raw, server):
    new_topic(raw, "longpoll")
    started = time.monotonic()
    p = fetch(raw, "longpoll", 0, 0, max_wait_ms=300)
    waited = time.monotonic() - started
    assert p.error_code == 0 and not p.records and 0.25 <= waited < 5
    # Data that arrives during the wait ends it early.
    with RawClient.to(server) as other:
        corr = raw.send(FetchRequest(max_wait_ms=10_000, min_bytes=1, max_bytes=1 << 20, topics=[
            FetchRequest.FetchTopic(topic="longpoll", partitions=[
                FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]), 12)
        time.sleep(0.2)
        started = time.monotonic()
        assert produce(other, "longpoll", 0, batch([b"wake up"])).error_code == 0
        resp = raw.receive(FetchRequest(), 12, corr)
        assert time.monotonic() - started < 5
        assert resp.responses[0].partitions[0].records


# ================================================================================================ list offsets


def test_list_offsets_earliest_latest_and_by_timestamp(raw):
    new_topic(raw, "times")
    t0 = 1_700_000_000_000
    for b in range(3):  # offsets 5b..5b+4 with timestamps t0 + 1000 b + i
        produce(raw, "times", 0, batch([b"v%d" % (5 * b + i) for i in range(5)], timestamp=t0 + 1000 * b))
    assert list_offset(raw, "times", 0, -2).offset == 0
    assert list_offset(raw, "times", 0, -1).offset == 15
    exact = list_offset(raw, "times", 0, t0 + 1000)
    assert (exact.offset, exact.timestamp) == (5, t0 + 1000)
    between = list_offset(raw, "times", 0, t0 + 1002)
    assert (between.offset, between.timestamp) == (7, t0 + 1002)
    before_all = list_offset(raw, "times", 0, 0)
    assert (before_all.offset, before_all.timestamp) == (0, t0)
    after_all = list_offset(raw, "times", 0, t0 + 10**6)
    assert after_all.error_code == 0 and after_all.offset == -1
    newest = list_offset(raw, "times", 0, -3)  # KIP-734, v7+
    assert (newest.offset, newest.timestamp) == (14, t0 + 2004)
    assert list_offset(raw, "times", 0, -3, version=6).error_code == E.UNSUPPORTED_VERSION
    # KIP-1023 (v11): earliest pending upload; nothing is tiered here, so Kafka's answer is offset -1, epoch -1
    pending = list_offset(raw, "times", 0, -6, version=11)
    assert (pending.error_code, pending.offset, pending.timestamp, pending.leader_epoch) == (0, -1, -1, -1)
    assert list_offset(raw, "times", 0, -6, version=10).error_code == E.UNSUPPORTED_VERSION
    tiered = list_offset(raw, "times", 0, -5, version=9)
    assert (tiered.error_code, tiered.offset, tiered.leader_epoch) == (0, -1, -1)
    assert list_offset(raw, "times", 0, -5, version=8).error_code == E.UNSUPPORTED_VERSION
    # a negative timestamp Kafka does not define is UNSUPPORTED_VERSION at any version, checked before the
    # partition is looked up (as Kafka's ReplicaManager does)
    assert list_offset(raw, "times", 0, -7, version=11).error_code == E.UNSUPPORTED_VERSION
    assert list_offset(raw, "times", 0, -(2**63), version=11).error_code == E.UNSUPPORTED_VERSION
    assert list_offset(raw, "no-such-topic", 0, -6, version=10).error_code == E.UNSUPPORTED_VERSION
    assert list_offset(raw, "no-such-topic", 0, -6, version=11).error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    assert list_offset(raw, "times", 3, -1).error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    assert list_offset(raw, "no-such-topic", 0, -1).error_code == E.UNKNOWN_TOPIC_OR_PARTITION


# ================================================================================================ topics


@pytest.mark.parametrize("name", ["../x", "a/b", ".", "..", "x" * 250, "", "a b", "caf\u00e9", "a\x00b"])
def test_bad_topic_names_are_invalid_topic_exception(raw, server, name):
    def listing() -> set[str]:
        roots = [*server.log_dirs, Path(server.log_dirs[0]).parent]
        return {str(p) for root in roots for p in Path(root).iterdir()}

    before = listing()
    result = create_topic(raw, name, 1)
    assert result.error_code == E.INVALID_TOPIC_EXCEPTION, result.error_message
    assert result.error_message
    assert listing() == before, "a refused topic name created something on disk"
    assert metadata(raw, None).topics == [t for t in metadata(raw, None).topics if t.name != name]


def test_longest_legal_topic_name_works_and_deletes(raw, server):
    name = "y" * 249
    new_topic(raw, name)
    assert produce(raw, name, 0, batch([b"fits"])).error_code == 0
    parent = partition_dirs(server.log_dirs)[f"{name}-0"].parent
    # The -delete name (topic-0.<32 hex>-delete) would be 288 characters: the topic part is cut to fit 255.
    resp = raw.call(DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(name=name)], timeout_ms=1000), 6)
    assert resp.responses[0].error_code == 0
    (renamed,) = [p.name for p in parent.iterdir() if p.name.startswith("yyy")]
    assert renamed.endswith("-delete") and len(renamed) <= 255


def test_names_colliding_on_dot_and_underscore_are_refused(raw, server):
    new_topic(raw, "metrics.a")
    clash = create_topic(raw, "metrics_a", 1)
    assert clash.error_code == E.INVALID_TOPIC_EXCEPTION and "metrics.a" in clash.error_message
    from kjbod.protocol.generated import CreateTopicsRequest as C

    both = C(timeout_ms=1000, topics=[C.CreatableTopic(name=n, num_partitions=1, replication_factor=1)
                                      for n in ("in.one", "in_one")])
    assert [r.error_code for r in raw.call(both, 7).topics] == [0, E.INVALID_TOPIC_EXCEPTION]
    assert "metrics_a-0" not in partition_dirs(server.log_dirs)


def test_the_metadata_log_topic_name_is_reserved(raw, server):
    result = create_topic(raw, "__cluster_metadata", 1)
    assert result.error_code == E.INVALID_REQUEST and "__cluster_metadata" in result.error_message
    assert metadata(raw, ["__cluster_metadata"]).topics[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION


def test_create_topics_refusals(raw):
    new_topic(raw, "exists")
    assert create_topic(raw, "exists", 1).error_code == E.TOPIC_ALREADY_EXISTS
    assert create_topic(raw, "zero-parts", 0).error_code == E.INVALID_PARTITIONS
    assert create_topic(raw, "bad-config", 1, {"no.such.config": "1"}).error_code == E.INVALID_CONFIG
    assert create_topic(raw, "bad-value", 1, {"retention.ms": "soon"}).error_code == E.INVALID_CONFIG
    assert create_topic(raw, "bad-policy", 1, {"cleanup.policy": "shred"}).error_code == E.INVALID_CONFIG
    from kjbod.protocol.generated import CreateTopicsRequest as C

    rf = C(timeout_ms=1000, topics=[C.CreatableTopic(name="rf3", num_partitions=1, replication_factor=3)])
    assert raw.call(rf, 7).topics[0].error_code == E.INVALID_REPLICATION_FACTOR
    twice = C(timeout_ms=1000, topics=[C.CreatableTopic(name="twice", num_partitions=1, replication_factor=1)] * 2)
    assert {r.error_code for r in raw.call(twice, 7).topics} == {E.INVALID_REQUEST}
    for name in ("zero-parts", "bad-config", "bad-value", "bad-policy", "rf3", "twice"):
        assert produce(raw, name, 0, batch([b"x"])).error_code == E.UNKNOWN_TOPIC_OR_PARTITION


def test_delete_topics_renames_to_delete_and_removes_in_the_background(raw, server):
    new_topic(raw, "doomed", 3)
    for p in range(3):
        produce(raw, "doomed", p, batch([b"bye %d" % p]))
    dirs = partition_dirs(server.log_dirs)
    parents = {p: dirs[f"doomed-{p}"].parent for p in range(3)}
    resp = raw.call(DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(name="doomed")],
                                        timeout_ms=5000), 6)
    (result,) = resp.responses
    assert result.error_code == 0 and result.name == "doomed"
    # Renamed (on the dir's worker, right after), with Kafka's suffix, in the same log dir...
    for p, parent in parents.items():
        renamed = renamed_to_delete(parent, f"doomed-{p}")
        assert not (parent / f"doomed-{p}").exists()
        assert len(renamed) == 1, f"no -delete dir for doomed-{p} in {parent}"
    assert metadata(raw, ["doomed"]).topics[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    assert produce(raw, "doomed", 0, batch([b"late"])).error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    assert fetch(raw, "doomed", 0, 0).error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    # ...and removed in the background after the delete delay.
    deadline = time.monotonic() + DELETE_DELAY_MS / 1000 + 15
    while any(d.name.startswith("doomed-") for parent in parents.values() for d in parent.iterdir()):
        assert time.monotonic() < deadline, "-delete dirs still there long after the delete delay"
        time.sleep(0.2)
    # The name is free again: a new topic, a new id, offsets from 0.
    new_topic(raw, "doomed", 1)
    assert produce(raw, "doomed", 0, batch([b"again"])).base_offset == 0
    assert [r.value for r in fetch_all(raw, "doomed", 0)] == [b"again"]


def test_delete_topics_refusals(raw):
    unknown = raw.call(DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(name="never-was")],
                                           timeout_ms=1000), 6).responses[0]
    assert unknown.error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    by_id = raw.call(DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(topic_id=uuid.uuid4())],
                                         timeout_ms=1000), 6).responses[0]
    assert by_id.error_code == E.UNKNOWN_TOPIC_ID
    old = raw.call(DeleteTopicsRequest(topic_names=["never-was"], timeout_ms=1000), 3).responses[0]
    assert old.error_code == E.UNKNOWN_TOPIC_OR_PARTITION


# ================================================================================================ helpers


def zstd_batch(values: list[bytes]) -> bytes:
    """A zstd batch built by kafka-python's record builder (a second implementation of the format)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(magic=2, compression_type=4, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    now = int(time.time() * 1000)
    for i, v in enumerate(values):
        b.append(i, timestamp=now, key=None, value=v, headers=[])
    return bytes(b.build())
