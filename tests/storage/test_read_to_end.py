"""PartitionLog.read_to_end: a caught-up follower's read, from where one of the last appends began or ended to the
log end, in one pread from the positions the appends left (no bytes kept). It answers exactly what read() up to
the log end answers, or None where it cannot (then read() does): an offset no recent append began or ended at, a
read across a roll, more than max_bytes, after a truncation, below the log start. bytes_to_end gives the size such a
read would carry, from the same positions. read_to_end_cached, the event loop's, answers the same from the page cache
only, or raises fsio.WouldBlock where it would wait (the log lock held elsewhere, a file to open)."""

from __future__ import annotations

import threading

import pytest

from kjbod.storage import fsio
from kjbod.storage.log import RECENT_ENDS
from tests.storage.conftest import kp_batch


def _to_end(plog, offset: int) -> bytes:
    return plog.read_bytes(offset, 1 << 20)


def _appends_after_a_roll(plog, values) -> list[int]:
    """A record, a roll, then three appends of `values(i)` in the new segment; the offsets they began at."""
    plog.append(kp_batch([b"a"]))
    plog.roll()
    starts = []
    for i in range(3):
        starts.append(plog.log_end_offset)
        plog.append(kp_batch(values(i)))
    return starts


def test_from_each_recent_append_boundary_to_the_end_it_answers_what_read_answers(plog):
    plog.append(kp_batch([b"a"]))
    plog.roll()  # the appends below all go to one segment
    starts = []
    for i in range(5):
        starts.append(plog.log_end_offset)
        plog.append(kp_batch([b"v%d" % i, b"w%d" % i]))
    for offset in starts:
        got = plog.read_to_end(offset, 1 << 20)
        assert got is not None
        data, hw, log_start = got
        assert data == _to_end(plog, offset) and data
        assert (hw, log_start) == (plog.high_watermark, plog.log_start_offset)
    assert plog.read_to_end(plog.log_end_offset, 1 << 20) is None  # nothing to read: read() answers that
    assert plog.read_to_end(starts[1] + 1, 1 << 20) is None  # inside an append's batch: not a known position
    assert plog.read_to_end(starts[0], len(_to_end(plog, starts[0])) - 1) is None  # more than max_bytes
    with fsio.no_waiting():  # from the page cache on the loop, as the follower's fetch reads
        assert plog.read_to_end(starts[-1], 1 << 20)[0] == _to_end(plog, starts[-1])


def test_it_keeps_the_last_appends_only_and_never_reads_across_a_roll(plog):
    first = plog.log_end_offset
    for i in range(RECENT_ENDS + 4):
        plog.append(kp_batch([b"%d" % i]))
    assert plog.read_to_end(first, 1 << 20) is None  # forgotten: positions of the last RECENT_ENDS boundaries
    assert len(plog._ends) <= RECENT_ENDS
    before_roll = plog.log_end_offset
    plog.roll()
    plog.append(kp_batch([b"after"]))
    assert plog.read_to_end(before_roll, 1 << 20)[0] == _to_end(plog, before_roll)  # began in the new segment
    last = plog.log_end_offset
    plog.append(kp_batch([b"x" * 100]))
    plog.roll()
    plog.append(kp_batch([b"y"]))
    assert plog.read_to_end(last, 1 << 20) is None  # from the old segment to the new one: read() does it


def test_a_followers_appends_are_known_and_a_truncation_forgets_them(plog):
    plog.auto_high_watermark = False
    for i in range(3):
        batch = bytearray(kp_batch([b"f%d" % i]))
        batch[0:8] = plog.log_end_offset.to_bytes(8, "big")  # the offsets the leader gave it
        plog.append_as_follower(bytes(batch))
    assert plog.read_to_end(1, 1 << 20)[0] == _to_end(plog, 1)
    plog.truncate_to(2)
    assert plog.read_to_end(1, 1 << 20) is None  # positions from before the truncation are gone
    batch = bytearray(kp_batch([b"again"]))
    batch[0:8] = (2).to_bytes(8, "big")
    plog.append_as_follower(bytes(batch))
    assert plog.read_to_end(2, 1 << 20)[0] == _to_end(plog, 2)


def test_below_the_log_start_it_leaves_the_error_to_read(plog):
    plog.roll()
    start = plog.log_end_offset
    plog.append(kp_batch([b"a"]))
    plog.append(kp_batch([b"b"]))
    plog.advance_log_start_offset(start + 1)
    assert plog.read_to_end(start, 1 << 20) is None
    assert plog.read_to_end(start + 1, 1 << 20)[0] == _to_end(plog, start + 1)


def test_bytes_to_end_is_the_size_read_to_end_reads_or_none_where_it_cannot_read(plog):
    """The loop's hint (no lock) of how much a read to the end would carry: the same positions read_to_end uses."""
    starts = _appends_after_a_roll(plog, lambda i: [b"v%d" % i, b"w" * (i + 1)])
    for offset in starts:
        assert plog.bytes_to_end(offset) == len(plog.read_to_end(offset, 1 << 20)[0])
    assert plog.bytes_to_end(plog.log_end_offset) == 0  # nothing to read
    assert plog.bytes_to_end(starts[1] + 1) is None  # inside an append's batch
    last = plog.log_end_offset
    plog.roll()
    plog.append(kp_batch([b"y"]))
    assert plog.bytes_to_end(last) == len(plog.read_to_end(last, 1 << 20)[0])  # began in the new segment
    assert plog.bytes_to_end(starts[0]) is None  # from the old segment to the new one


def test_the_loops_cached_read_answers_what_read_to_end_answers_or_would_block(plog):
    starts = _appends_after_a_roll(plog, lambda i: [b"v%d" % i])
    reads = sum(plog.io.latency_buckets["read"])
    for offset in starts:
        got = plog.read_to_end_cached(offset, 1 << 20)
        assert got is not None and got == plog.read_to_end(offset, 1 << 20)
    # Each read went through the file seam's bookkeeping (the watchdog's and the metrics' read latencies).
    assert sum(plog.io.latency_buckets["read"]) == reads + 2 * len(starts)
    assert fsio.waiting_allowed()  # the thread's mode was never switched on
    assert plog.read_to_end_cached(plog.log_end_offset, 1 << 20) is None  # nothing to read
    assert plog.read_to_end_cached(starts[0], 3) is None  # more than max_bytes

    taken, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with plog.lock:
            taken.set()
            leave.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        taken.wait(60)
        with pytest.raises(fsio.WouldBlock):  # an append holds the log: the loop does not wait for it
            plog.read_to_end_cached(starts[0], 1 << 20)
    finally:
        leave.set()
        holder.join(60)
    plog.active_segment.release()  # as a segment's fd given back after a read: reopening it is the worker's
    with pytest.raises(fsio.WouldBlock):
        plog.read_to_end_cached(starts[0], 1 << 20)
    assert plog.read_to_end(starts[0], 1 << 20)[0] == _to_end(plog, starts[0])  # the general read opens it again
