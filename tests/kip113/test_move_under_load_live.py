"""The issue's end-to-end check: a producer writes continuously (acks=-1) to a 4-partition topic while every
partition moves among the three log dirs ten times; a consumer then reads everything back.

Checked: every acknowledged record is there, once, in order per partition; the size DescribeLogDirs reports
for each partition equals the bytes of its record batches as the broker serves them and as they lie on disk;
no ``-future`` or ``-delete`` dir is left once settled.
"""

from __future__ import annotations

import threading
import time
import warnings
from pathlib import Path

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic
    from kafka.errors import NoError

from .livehelp import RawClient, fetch_all, kafka_admin, log_file_bytes, partition_dirs, replicas, wait_moved

pytestmark = pytest.mark.slow

PARTITIONS = 4
ROUNDS = 10
RATE = 2_000  # records/s over all partitions (~1.4 MB/s)


class Producer(threading.Thread):
    """Sends numbered records round-robin over the partitions until stopped; keeps every acknowledgement."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks=-1, linger_ms=2, retries=10**6,
                                      delivery_timeout_ms=120_000)
        self.sent = [0] * PARTITIONS
        self.acked: list[list[int]] = [[] for _ in range(PARTITIONS)]
        self.errors: list[BaseException] = []
        self.stop_flag = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        # A steady stream at a fixed rate, paced by the clock: a loop that sends as fast as the CPU lets it would
        # take every core a slow or shared machine has, and the moves (background work for the scheduler, see
        # kjbod.broker.kip113.mover._lower_priority) could then fall behind the source's growth for good.
        i = 0
        started = time.monotonic()
        while not self.stop_flag.is_set():
            p = i % PARTITIONS
            seq = self.sent[p]
            self.sent[p] += 1
            value = b"%d:%09d:" % (p, seq) + b"z" * 700
            fut = self.producer.send("load", value, partition=p)
            fut.add_callback(self._ok, p, seq)
            fut.add_errback(self.errors.append)
            i += 1
            if i % 50 == 0:
                ahead = started + i / RATE - time.monotonic()
                if ahead > 0:
                    self.stop_flag.wait(ahead)

    def _ok(self, p: int, seq: int, _metadata) -> None:
        with self._lock:
            self.acked[p].append(seq)

    def finish(self) -> None:
        self.stop_flag.set()
        self.join()
        self.producer.flush()
        self.producer.close()


def test_ten_rounds_of_moves_under_continuous_produce(kjbod_server_factory):
    server = kjbod_server_factory(overrides={"log.segment.bytes": str(512 << 10),
                                             "log.segment.delete.delay.ms": "0"})
    dirs = [str(d) for d in server.log_dirs]
    admin = kafka_admin(server)
    admin.create_topics([NewTopic("load", PARTITIONS, 1)])
    producer = Producer(server.bootstrap)
    producer.start()
    time.sleep(1.0)
    try:
        for rnd in range(ROUNDS):
            targets = {}
            for p in range(PARTITIONS):
                cur = replicas(admin, {"load": [p]})[("load", p, False)]["dir"]
                targets[p] = dirs[(dirs.index(cur) + 1 + (rnd + p) % 2) % 3]
            result = admin.alter_replica_log_dirs({("load", p, 1): d for p, d in targets.items()})
            assert set(result.values()) == {NoError}, result
            for p, d in targets.items():
                wait_moved(admin, "load", p, d, timeout=120, server=server)
            assert not producer.errors, producer.errors[:3]
    finally:
        producer.finish()
    assert not producer.errors, producer.errors[:3]
    sent = producer.sent
    assert all(n > 500 for n in sent), sent
    assert [sorted(a) for a in producer.acked] == [list(range(n)) for n in sent]

    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, enable_auto_commit=False, group_id=None,
                             auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    tps = [TopicPartition("load", p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning()
    ends = consumer.end_offsets(tps)
    got: list[list[int]] = [[] for _ in range(PARTITIONS)]
    offsets: list[list[int]] = [[] for _ in range(PARTITIONS)]
    deadline = time.monotonic() + 120
    while any(consumer.position(tp) < ends[tp] for tp in tps):
        assert time.monotonic() < deadline
        for tp, recs in consumer.poll(timeout_ms=1000, max_records=5000).items():
            for r in recs:
                p, seq, _ = r.value.split(b":", 2)
                assert int(p) == tp.partition
                got[tp.partition].append(int(seq))
                offsets[tp.partition].append(r.offset)
    consumer.close()
    for p in range(PARTITIONS):
        # No loss, no duplicate, producer order kept; offsets contiguous from 0.
        assert got[p] == list(range(sent[p])), f"partition {p}"
        assert offsets[p] == list(range(sent[p]))

    # Sizes: DescribeLogDirs = bytes of the batches the broker serves = .log bytes on disk.
    final = replicas(admin, {"load": list(range(PARTITIONS))})
    with RawClient(server.bootstrap) as raw:
        for p in range(PARTITIONS):
            entry = final[("load", p, False)]
            served = fetch_all(raw, "load", p, sent[p])
            assert entry["size"] == len(served) == log_file_bytes(Path(entry["dir"], f"load-{p}"))
    assert not any(k[2] for k in final)
    admin.close()
    # Settled: only current partition dirs remain (the -delete dirs go with log.segment.delete.delay.ms=0).
    deadline = time.monotonic() + 10
    while True:
        names = [n for names in partition_dirs(server).values() for n in names]
        if sorted(names) == sorted(f"load-{p}" for p in range(PARTITIONS)):
            break
        assert time.monotonic() < deadline, names
        time.sleep(0.2)
