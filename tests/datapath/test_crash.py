"""Crashes and damaged files: kill -9 while producing with acks=-1, and flipped bytes found by recovery.

kill -9: a confluent-kafka idempotent producer (acks=all) writes to 6 partitions over 3 log dirs with small
segments (many rolls); the server is killed once tens of thousands of messages are acknowledged and while more are
in flight.  After a restart every acknowledged message is at the offset it was acknowledged with, no message is
there twice, and every `.log` file on disk is a valid run of CRC-checked batches to its last byte.

Corruption: the server is stopped, one byte of a batch is flipped, and recovery is forced the way a crash forces
it (kjbod.storage recovery rules: no `.kafka_cleanshutdown` marker means the dir's logs are re-validated from
their recovery point, so the marker is removed, and for a closed segment the recovery-point checkpoint too, as
after a crash before the first checkpoint).  Recovery must find the damaged batch, copy the tail aside to a
`.corrupt` file, truncate, log it, and keep serving every earlier offset.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from kjbod.protocol.errors import ErrorCode

from .support import (
    RawClient,
    batch,
    create_topic,
    fetch,
    fetch_all,
    flip_byte,
    list_offset,
    log_events,
    partition_dirs,
    produce,
    scan_log_dirs,
    scan_partition,
)

pytestmark = pytest.mark.slow

KILL_AFTER_S = 3.0
# Produce at least this long and until this many acknowledgements (about 2 MiB: every partition past its first
# 256 KiB segment), so the kill finds rolled segments however slow a loaded machine makes the producer.
ACKS_FOR_ROLLS = 30_000
MAX_PRODUCE_S = 30.0
MIN_ACKS = 5_000


def test_kill_9_while_producing_keeps_every_acknowledged_message(kjbod_server_factory):
    from confluent_kafka import Producer

    server = kjbod_server_factory(overrides={"log.segment.bytes": str(256 * 1024), "num.partitions": "6"})
    topic = "crash"
    with RawClient.to(server) as raw:
        assert create_topic(raw, topic, 6).error_code == 0

    acked: dict[tuple[int, int], bytes] = {}  # (partition, offset) -> key
    failed: list = []

    def delivered(err, msg) -> None:
        if err is None:
            acked[(msg.partition(), msg.offset())] = msg.key()
        else:
            failed.append(err)

    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "compression.type": "none", "message.timeout.ms": 5000, "log_level": 0})
    # Produce flat out; kill the server after KILL_AFTER_S, keep producing a little longer (those sends fail).
    i = 0
    produced_before_kill = None
    started = time.monotonic()
    stop_at = None
    while stop_at is None or time.monotonic() < stop_at:
        key = b"msg-%08d" % i
        try:
            producer.produce(topic, key=key, value=key * 4, on_delivery=delivered)
            i += 1
        except BufferError:
            producer.poll(0.01)
        if i % 100 == 0:
            producer.poll(0)
        elapsed = time.monotonic() - started
        if produced_before_kill is None and elapsed >= KILL_AFTER_S and (
                len(acked) >= ACKS_FOR_ROLLS or elapsed >= MAX_PRODUCE_S):
            server.process.send_signal(signal.SIGKILL)
            produced_before_kill = i
            server.process.wait()
            stop_at = time.monotonic() + 0.3
    # Collect the delivery reports, then drop whatever is still queued so nothing is retried into the restarted
    # server: what counts is what was acknowledged before the kill.
    producer.poll(1.0)
    producer.purge()
    producer.flush(5)
    del producer
    acked_count = len(acked)
    assert acked_count >= MIN_ACKS, f"only {acked_count} acknowledgements before the kill"
    unacked_before_kill = produced_before_kill - sum(1 for k in acked.values() if int(k[4:]) < produced_before_kill)
    assert unacked_before_kill > 0, "every message sent before the kill was acknowledged: no produce was in flight"

    server.start()
    loads = [e for e in log_events(server, "log_dir_loaded") if e.get("clean_shutdown") is False]
    assert len(loads) >= 2 * len(server.log_dirs), "the restart after kill -9 should recover every dir uncleanly"

    scans = scan_log_dirs(server.log_dirs)
    for name, scan in scans.items():
        assert not scan.problems, f"{name}: {scan.problems}"
    assert sum(len(s.segments) for s in scans.values()) > 6, "expected segment rolls before the kill"

    found: dict[tuple[int, int], bytes] = {}
    keys_seen: dict[bytes, tuple[int, int]] = {}
    with RawClient.to(server) as raw:
        for p in range(6):
            for r in fetch_all(raw, topic, p):
                assert r.key not in keys_seen, f"{r.key!r} stored twice: at {keys_seen[r.key]} and {(p, r.offset)}"
                keys_seen[r.key] = (p, r.offset)
                assert r.value == r.key * 4
                found[(p, r.offset)] = r.key
    missing = {k: v for k, v in acked.items() if found.get(k) != v}
    assert not missing, f"{len(missing)} acknowledged messages lost or moved, e.g. {list(missing.items())[:3]}"
    assert len(found) >= acked_count


# ================================================================================================ corruption


def _fill(server, topic: str, batches: int = 60, per_batch: int = 10) -> int:
    """`batches` batches of `per_batch` records each; returns the log end offset."""
    with RawClient.to(server) as raw:
        assert create_topic(raw, topic, 1, {"segment.bytes": "4096"}).error_code == 0
        for b in range(batches):
            values = [b"%s record %06d" % (topic.encode(), b * per_batch + j) for j in range(per_batch)]
            resp = produce(raw, topic, 0, batch(values))
            assert resp.error_code == 0 and resp.base_offset == b * per_batch
    return batches * per_batch


def _batches(log: Path) -> list[tuple[int, int, int]]:
    """(position, size, base offset) of each batch in a segment file."""
    from kjbod.storage.records import iter_batches

    return [(pos, h.size, h.base_offset) for pos, h in iter_batches(log.read_bytes())]


def _expect_records_below(server, topic: str, end: int) -> None:
    with RawClient.to(server) as raw:
        records = fetch_all(raw, topic, 0)
        assert [r.offset for r in records] == list(range(end))
        assert all(r.value == b"%s record %06d" % (topic.encode(), r.offset) for r in records)
        assert list_offset(raw, topic, 0, -1).offset == end
        # The old end is now past the end.
        gone = fetch(raw, topic, 0, end + 1)
        assert gone.error_code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_flipped_byte_in_the_active_tail_is_set_aside_and_truncated(kjbod_server):
    topic = "tail"
    leo = _fill(kjbod_server, topic)
    assert kjbod_server.stop() == 0
    pdir = partition_dirs(kjbod_server.log_dirs)[f"{topic}-0"]
    active = sorted(pdir.glob("*.log"))[-1]
    batches = _batches(active)
    assert len(batches) >= 3
    pos, size, bad_offset = batches[-2]  # the last batch but one: one good batch follows the bad one
    original_tail = active.read_bytes()[pos:]
    flip_byte(active, pos + size - 5)  # inside the records, covered only by the CRC
    (pdir.parent / ".kafka_cleanshutdown").unlink()

    kjbod_server.start()
    (event,) = [e for e in log_events(kjbod_server, "corrupt_log_tail_truncated") if e["partition"] == "tail-0"]
    assert event["segment"] == active.name and event["position"] == pos and event["offset"] == bad_offset
    assert event["truncated_bytes"] == len(original_tail) and "CRC" in event["reason"]
    (aside,) = [p for p in pdir.iterdir() if p.name.endswith(".corrupt")]
    damaged = bytearray(original_tail)
    damaged[size - 5] ^= 0xFF
    assert aside.read_bytes() == bytes(damaged), "the set-aside copy must hold exactly the cut bytes"
    assert active.stat().st_size == pos

    _expect_records_below(kjbod_server, topic, bad_offset)
    assert bad_offset < leo
    scan = scan_partition(pdir)
    assert not scan.problems and scan.next_offset == bad_offset
    # The log continues from the truncation point.
    with RawClient.to(kjbod_server) as raw:
        resp = produce(raw, topic, 0, batch([b"after recovery"]))
        assert resp.error_code == 0 and resp.base_offset == bad_offset


def test_flipped_byte_in_a_closed_segment_truncates_there_and_sets_later_segments_aside(kjbod_server):
    topic = "closed"
    _fill(kjbod_server, topic)
    assert kjbod_server.stop() == 0
    pdir = partition_dirs(kjbod_server.log_dirs)[f"{topic}-0"]
    logs = sorted(pdir.glob("*.log"))
    assert len(logs) >= 4, f"expected several segments, got {[p.name for p in logs]}"
    damaged_log = logs[1]
    later = logs[2:]
    pos, size, bad_offset = _batches(damaged_log)[2]
    flip_byte(damaged_log, pos + 70)
    # As after a crash before the first checkpoint: no marker, no recovery point, so every segment is checked.
    (pdir.parent / ".kafka_cleanshutdown").unlink()
    (pdir.parent / "recovery-point-offset-checkpoint").unlink(missing_ok=True)

    kjbod_server.start()
    (event,) = [e for e in log_events(kjbod_server, "corrupt_log_tail_truncated") if e["partition"] == "closed-0"]
    assert event["segment"] == damaged_log.name and event["offset"] == bad_offset and event["position"] == pos
    set_aside = [e for e in log_events(kjbod_server, "log_segment_after_corruption_set_aside")
                 if e["partition"] == "closed-0"]
    assert sorted(e["segment"] for e in set_aside) == [p.name for p in later]
    assert sorted(p.name for p in pdir.glob("*.log")) == [p.name for p in logs[:2]]
    corrupt = sorted(p.name for p in pdir.iterdir() if p.name.endswith(".corrupt"))
    assert len(corrupt) == 1 + len(later), corrupt

    _expect_records_below(kjbod_server, topic, bad_offset)
    scan = scan_partition(pdir)
    assert not scan.problems and scan.next_offset == bad_offset


def test_torn_write_at_the_tail_is_cut_after_a_crash(kjbod_server):
    """A batch only partly on disk (the process died mid-write) is cut; everything before it is kept."""
    topic = "torn"
    leo = _fill(kjbod_server, topic, batches=20)
    kjbod_server.process.send_signal(signal.SIGKILL)
    kjbod_server.process.wait()
    pdir = partition_dirs(kjbod_server.log_dirs)[f"{topic}-0"]
    active = sorted(pdir.glob("*.log"))[-1]
    size_before = active.stat().st_size
    half = batch([b"never acknowledged"] * 5)
    with open(active, "ab") as f:
        f.write(half[: len(half) // 2])
    kjbod_server.start()
    assert active.stat().st_size == size_before
    _expect_records_below(kjbod_server, topic, leo)
    (event,) = [e for e in log_events(kjbod_server, "corrupt_log_tail_truncated") if e["partition"] == "torn-0"]
    assert event["truncated_bytes"] == len(half) // 2
    assert not scan_partition(pdir).problems
    assert os.path.exists(event["copied_to"])
