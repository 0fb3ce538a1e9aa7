"""Idempotent producers against a live node: Kafka's answers on the wire, and real clients (kafka-python,
confluent-kafka) that rely on them.

Kafka's facts pinned here (TransactionCoordinator.handleInitProducerId, KafkaApis.handleInitProducerIdRequest,
UnifiedLog.append):

* InitProducerId without a transactional id always answers a fresh producer id with epoch 0, whatever id and
  epoch the request carries; an id without an epoch (or the reverse) and an empty transactional id are
  INVALID_REQUEST; every error answers producer id -1 and epoch -1.
* A duplicate batch (a retry of one of the producer's last five) is answered with the original offsets and the
  stored batch's max timestamp as its log_append_time_ms.
* A client's batch with a producer id but no sequence, and a Produce carrying two batches for one partition
  (v3+), are INVALID_RECORD (LogValidator, ProduceRequest.validateRecords).

A confluent-kafka idempotent producer's first record waits about 500 ms for its producer id whatever the broker:
librdkafka (2.10 and later) drops its bootstrap connection once Metadata names the brokers, finds no broker up
for InitProducerId at that moment, and retries from a 500 ms timer (rdkafka_idempotence.c; the same against
librdkafka's own mock cluster).  After that the producer runs without a retry, which the last test checks.
"""

from __future__ import annotations

import json
import time
import warnings

import pytest
from live import start_server

from kjbod.protocol.errors import ErrorCode as E
from kjbod.protocol.generated import InitProducerIdRequest
from kjbod.storage.records import iter_batches

from .support import batch, fetch, fetch_all, new_topic, produce

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's import uses a deprecated importlib API
    from kafka import KafkaProducer
    from kafka.errors import OutOfOrderSequenceNumberError

INIT_V = 4  # flexible, carries the producer id and epoch (v3+)
DELIVERY_TIMEOUT = 60.0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = start_server(tmp_path_factory.mktemp("idempotence"), log_dir_count=2,
                     overrides={"auto.create.topics.enable": "false"})
    yield s
    s.stop()


def init(raw, *, transactional_id: str | None = None, producer_id: int = -1, producer_epoch: int = -1):
    return raw.call(InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=1000,
                                          producer_id=producer_id, producer_epoch=producer_epoch), INIT_V)


def producer_ids(raw, topic: str, partition: int = 0) -> list[tuple[int, int, int]]:
    """(producer id, epoch, base sequence) of every batch of a partition, in offset order."""
    out: list[tuple[int, int, int]] = []
    offset = 0
    while True:
        p = fetch(raw, topic, partition, offset)
        assert p.error_code == 0
        found = list(iter_batches(p.records or b""))
        for _pos, h in found:
            out.append((h.producer_id, h.producer_epoch, h.base_sequence))
            offset = h.next_offset
        if offset >= p.high_watermark or not found:
            return out


def test_init_producer_id_without_a_transactional_id_always_answers_a_fresh_id(raw):
    first = init(raw)
    assert (first.error_code, first.producer_epoch) == (0, 0) and first.producer_id >= 0
    # A producer passing its id and epoch (KIP-360's request shape) still gets a new id at epoch 0, as from
    # Kafka's coordinator, not its own id with the next epoch.
    again = init(raw, producer_id=first.producer_id, producer_epoch=first.producer_epoch)
    assert again.error_code == 0
    assert again.producer_id not in (-1, first.producer_id) and again.producer_epoch == 0


@pytest.mark.parametrize("fields", [
    {"producer_id": 5, "producer_epoch": -1},
    {"producer_id": -1, "producer_epoch": 3},
    {"transactional_id": ""},
])
def test_init_producer_id_refusals_answer_no_id_and_no_epoch(raw, fields):
    resp = init(raw, **fields)
    assert (resp.error_code, resp.producer_id, resp.producer_epoch) == (E.INVALID_REQUEST, -1, -1)


def test_a_duplicate_batch_is_answered_with_its_stored_max_timestamp(raw):
    new_topic(raw, "idem-dup")
    got = init(raw)
    ts = int(time.time() * 1000) - 5_000
    records = batch([b"a", b"b"], timestamp=ts, producer_id=got.producer_id, producer_epoch=0, base_sequence=0)
    first = produce(raw, "idem-dup", 0, records)
    assert (first.error_code, first.base_offset, first.log_append_time_ms) == (0, 0, -1)
    retry = produce(raw, "idem-dup", 0, records)
    assert (retry.error_code, retry.base_offset, retry.log_append_time_ms) == (0, 0, ts + 1)
    assert [r.value for r in fetch_all(raw, "idem-dup", 0)] == [b"a", b"b"]


def test_a_batch_with_a_producer_id_but_no_sequence_is_an_invalid_record(raw):
    new_topic(raw, "idem-noseq")
    got = init(raw)
    resp = produce(raw, "idem-noseq", 0, batch([b"a"], producer_id=got.producer_id, producer_epoch=0))
    assert resp.error_code == E.INVALID_RECORD and "sequence" in resp.error_message
    assert fetch_all(raw, "idem-noseq", 0) == []


def test_two_batches_for_one_partition_in_one_produce_are_an_invalid_record(raw):
    new_topic(raw, "idem-two")
    got = init(raw)
    two = (batch([b"a"], producer_id=got.producer_id, producer_epoch=0, base_sequence=0)
           + batch([b"b"], producer_id=got.producer_id, producer_epoch=0, base_sequence=1))
    resp = produce(raw, "idem-two", 0, two)
    assert resp.error_code == E.INVALID_RECORD and "exactly one record batch" in resp.error_message
    assert fetch_all(raw, "idem-two", 0) == []
    assert produce(raw, "idem-two", 0, two[: len(two) // 2]).base_offset == 0  # each alone is fine


def test_kafka_python_recovers_from_a_sequence_gap_with_the_fresh_id_kafka_gives(raw, server):
    """kafka-python answers OUT_OF_ORDER_SEQUENCE_NUMBER by asking InitProducerId with its current id and epoch
    (KIP-360); Kafka answers a fresh id, so the producer's later batches carry a new id at epoch 0."""
    topic = "idem-gap"
    new_topic(raw, topic)
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, enable_idempotence=True, acks="all",
                             linger_ms=0, max_in_flight_requests_per_connection=5, retries=5)
    try:
        producer.send(topic, b"r0", partition=0).get(DELIVERY_TIMEOUT)
        ((pid, epoch, seq),) = producer_ids(raw, topic)
        assert (epoch, seq) == (0, 0)
        # Someone else writes sequences 1-2 under the producer's id: its own next batch (sequence 1) is now out of
        # order (not a duplicate: its range differs).
        other = produce(raw, topic, 0, batch([b"x1", b"x2"], producer_id=pid, producer_epoch=epoch, base_sequence=1))
        assert other.error_code == 0
        with pytest.raises(OutOfOrderSequenceNumberError):
            producer.send(topic, b"r1", partition=0).get(DELIVERY_TIMEOUT)
        producer.send(topic, b"r2", partition=0).get(DELIVERY_TIMEOUT)
    finally:
        producer.close(timeout=10)
    batches = producer_ids(raw, topic)
    new_pid, new_epoch, new_seq = batches[-1]
    assert new_pid not in (-1, pid) and (new_epoch, new_seq) == (0, 0), batches
    assert [r.value for r in fetch_all(raw, topic, 0)] == [b"r0", b"x1", b"x2", b"r2"]


def test_idempotent_real_clients_produce_without_an_error_or_a_retry(raw, server):
    from confluent_kafka import Producer

    topic, partitions, count = "idem-clients", 4, 4000
    new_topic(raw, topic, partitions)
    stats: list[dict] = []
    errors: list[str] = []
    failed: list[str] = []
    producer = Producer({"bootstrap.servers": server.bootstrap, "enable.idempotence": True, "linger.ms": 0,
                         "statistics.interval.ms": 100, "stats_cb": lambda s: stats.append(json.loads(s)),
                         "error_cb": lambda e: errors.append(str(e))})
    for i in range(count // 2):
        while True:
            try:
                producer.produce(topic, b"c%d" % i, partition=i % partitions,
                                 on_delivery=lambda err, _m: err is not None and failed.append(str(err)))
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    assert producer.flush(DELIVERY_TIMEOUT) == 0
    seen = len(stats)
    while len(stats) <= seen + 1:  # a report taken after every delivery
        producer.poll(0.1)
    assert errors == [] and failed == []
    (broker,) = [b for b in stats[-1]["brokers"].values() if b["nodeid"] >= 0]
    assert broker["txretries"] == 0 and broker["txerrs"] == 0
    assert broker["req"]["InitProducerId"] == 1
    assert stats[-1]["eos"]["epoch_cnt"] == 1  # never bumped

    kp = KafkaProducer(bootstrap_servers=server.bootstrap, enable_idempotence=True, acks="all", linger_ms=0,
                       batch_size=2048, max_in_flight_requests_per_connection=5, retries=5)
    try:
        futures = [kp.send(topic, b"k%d" % i, partition=i % partitions) for i in range(count // 2)]
        kp.flush(DELIVERY_TIMEOUT)
    finally:
        kp.close(timeout=10)
    assert [f.exception for f in futures if f.failed()] == []
    for p in range(partitions):
        values = [r.value for r in fetch_all(raw, topic, p)]
        expect = [b"c%d" % i for i in range(p, count // 2, partitions)]
        expect += [b"k%d" % i for i in range(p, count // 2, partitions)]
        assert values == expect, f"partition {p}: stored once each, in order"


def test_several_idempotent_producers_on_one_partition_store_each_record_once_in_order(raw, server):
    """Several idempotent producers writing one partition at once: their requests reach the dir's worker
    together and are written as a group (each batch checked against the sequences the batches before it in the
    group left); every record is stored once, each producer's in its order, and no producer sees an error."""
    from confluent_kafka import Producer

    topic, producers, count = "idem-group", 4, 1500
    new_topic(raw, topic, 1)
    failed: list[str] = []
    clients = [Producer({"bootstrap.servers": server.bootstrap, "enable.idempotence": True, "linger.ms": 0,
                         "max.in.flight.requests.per.connection": 5}) for _ in range(producers)]
    for i in range(count):
        for n, client in enumerate(clients):
            while True:
                try:
                    client.produce(topic, b"%d-%d" % (n, i), partition=0,
                                   on_delivery=lambda err, _m: err is not None and failed.append(str(err)))
                    break
                except BufferError:
                    client.poll(0.01)
            client.poll(0)
    assert [client.flush(DELIVERY_TIMEOUT) for client in clients] == [0] * producers
    assert failed == []
    values = [r.value for r in fetch_all(raw, topic, 0)]
    assert len(values) == producers * count
    for n in range(producers):
        assert [v for v in values if v.startswith(b"%d-" % n)] == [b"%d-%d" % (n, i) for i in range(count)]
    assert len({pid for pid, _epoch, _seq in producer_ids(raw, topic)}) == producers
