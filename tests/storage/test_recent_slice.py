"""PartitionLog.read from one of the last appends' boundaries: the slice is found from the positions the appends
left (PartitionLog._recent_slice), with no index lookup and no header read, and it is exactly what the scan of
the batches' headers answers, for every budget, limit and minOneMessage choice; where the boundaries cannot say
(an append of several batches cut by the budget or the limit, a read that goes on past a roll, an offset no
append began at) the scan answers instead."""

from __future__ import annotations

import itertools

import pytest

from kjbod.storage import fsio
from kjbod.storage.log import LogConfig, PartitionLog
from tests.storage.conftest import kp_batch, region_bytes


@pytest.fixture
def big_log(tmp_path, clock):
    """A log whose appends below stay in one segment unless a test rolls it."""
    io = fsio.LogDirIO(str(tmp_path / "d"))
    io.mkdir(io.path, parents=True)
    cfg = LogConfig(segment_bytes=1 << 20, index_interval_bytes=100, segment_index_bytes=4096)
    log = PartitionLog.create(io, io.join("topic-0"), "topic", 0, "3uI2M2AbQVO0J2cYw2xvOA", cfg, clock=clock)
    yield log
    log.close_quietly()


def _at(batch: bytes, offset: int) -> bytes:
    out = bytearray(batch)
    out[0:8] = offset.to_bytes(8, "big")
    return bytes(out)


def _scanned(plog, offset: int, budget: int, limit: int, min_one: bool) -> bytes:
    """What read() answers with the boundaries out of the way: the scan of the headers."""
    recent, plog._recent_slice = plog._recent_slice, lambda *_a: None
    try:
        return region_bytes(plog.read(offset, budget, max_offset=limit, min_one_batch=min_one))
    finally:
        del plog._recent_slice
        assert plog._recent_slice.__func__ is recent.__func__


def _compare_everywhere(plog) -> tuple[int, int]:
    """read() from every boundary the log keeps, against the scan, for budgets around each batch edge, limits at
    and inside every batch, and both minOneMessage choices; (reads the boundaries answered, reads compared)."""
    edges = sorted({pos for _seg, pos, _one in plog._ends.values()})
    starts = [off for off in plog._ends if off < plog.log_end_offset]
    limits = range(starts[0], plog.log_end_offset + 1)
    answered = compared = 0
    for offset, limit, min_one in itertools.product(starts, limits, (True, False)):
        if offset >= limit:
            continue
        start = plog._ends[offset][1]
        budgets = {-1, 0, 1, 1 << 20} | {e - start + d for e in edges for d in (-1, 0, 1) if e > start}
        for budget in sorted(budgets):
            recent = plog._recent_slice(offset, budget, limit, min_one)
            got = region_bytes(plog.read(offset, budget, max_offset=limit, min_one_batch=min_one))
            assert got == _scanned(plog, offset, budget, limit, min_one), (offset, budget, limit, min_one)
            compared += 1
            answered += recent is not None
    return answered, compared


def test_single_batch_appends_are_all_answered_from_the_boundaries_as_the_scan_answers(big_log):
    for i in range(6):  # batches of 1 to 3 records: limits inside a batch too
        big_log.append(kp_batch([b"v%d" % i * (i + 1)] * (1 + i % 3)))
    answered, compared = _compare_everywhere(big_log)
    assert answered == compared  # every read from a boundary: no header read


def test_appends_of_several_batches_and_offset_gaps_answer_as_the_scan(big_log):
    big_log.auto_high_watermark = False
    one, two = kp_batch([b"a", b"b"]), kp_batch([b"c" * 40])
    big_log.append_as_follower(_at(one, 0) + _at(two, 2))  # one append, two batches: offsets 0-1 and 2
    big_log.append_as_follower(_at(two, 3))
    big_log.append_as_follower(_at(one, 7))  # a gap (a compacted leader's log): 4-6 never written
    big_log.append_as_follower(_at(two, 9) + _at(one, 10) + _at(two, 12))
    big_log.append_as_follower(_at(one, 13))
    answered, compared = _compare_everywhere(big_log)
    assert 0 < answered < compared  # the several-batch appends cut inside: the scan's


def test_a_read_that_would_go_on_past_a_roll_is_the_scans(big_log):
    big_log.append(kp_batch([b"old"]))
    before = big_log.log_end_offset
    big_log.append(kp_batch([b"last of the old segment"]))
    big_log.roll()
    big_log.append(kp_batch([b"new"]))
    assert big_log._recent_slice(before, 1 << 20, big_log.log_end_offset, True) is None
    assert region_bytes(big_log.read(before, 1 << 20)) == _scanned(big_log, before, 1 << 20,
                                                                  big_log.log_end_offset, True)
    answered, compared = _compare_everywhere(big_log)
    assert 0 < answered < compared


def test_an_offset_inside_a_batch_or_forgotten_is_the_scans(big_log):
    big_log.append(kp_batch([b"a", b"b", b"c"]))
    big_log.append(kp_batch([b"d"]))
    assert big_log._recent_slice(1, 1 << 20, big_log.log_end_offset, True) is None
    assert region_bytes(big_log.read(1, 1 << 20)) == _scanned(big_log, 1, 1 << 20, 4, True)
    big_log.truncate_to(3)
    assert big_log._recent_slice(0, 1 << 20, 3, True) is None  # a truncation forgets the positions
    assert region_bytes(big_log.read(0, 1 << 20)) == _scanned(big_log, 0, 1 << 20, 3, True)


def test_a_consumers_fetch_at_the_end_reads_no_header(big_log, monkeypatch):
    for i in range(4):
        big_log.append(kp_batch([b"x" * 100, b"%d" % i]))
    seg = big_log.active_segment
    monkeypatch.setattr(seg, "iter_headers", lambda *_a, **_k: pytest.fail("a header was read"))
    got = region_bytes(big_log.read(2, 1 << 20))
    monkeypatch.undo()
    assert got == big_log.read_bytes(2, 1 << 20) and got
