"""PartitionLog.read_tail: a caught-up follower's read from the bytes of the last small appends, kept as written.
Whatever it answers must be exactly what a file read (read_bytes) gives from that offset to the log end; what it
cannot answer exactly it leaves to the file (None)."""

from __future__ import annotations

import pytest

from kjbod.storage import log as log_module
from kjbod.storage.log import PartitionLog
from tests.storage.conftest import kp_batch

ALL = 1 << 20


def append(plog: PartitionLog, n: int = 1, *, size: int = 20, epoch: int = 0) -> int:
    """An append of one batch of `n` records; returns its base offset."""
    base = plog.log_end_offset
    plog.append(kp_batch([b"v" * size] * n), leader_epoch=epoch)
    return base


def test_the_last_appends_are_read_from_memory_exactly_as_the_file_has_them(plog):
    bases = [append(plog, n, size=150) for n in (1, 3, 2, 1)]
    assert len(plog.segments) > 1  # across a roll too (segment.bytes is 1024 in the fixture)
    for base in bases:
        data, hw, lso = plog.read_tail(base, ALL)
        assert data == plog.read_bytes(base, ALL)
        assert (hw, lso) == (plog.high_watermark, plog.log_start_offset)


def test_group_commit_and_epochs_are_kept_as_written(plog, clock):
    base = plog.log_end_offset
    group = [plog.validate(kp_batch([b"g%d" % i]), now_ms=clock()) for i in range(3)]
    plog.append_validated_together(group, leader_epoch=4)
    data, _hw, _lso = plog.read_tail(base, ALL)
    assert data == plog.read_bytes(base, ALL)
    append(plog, epoch=5)
    assert plog.read_tail(base, ALL)[0] == plog.read_bytes(base, ALL)


def test_a_followers_appends_are_kept_too(plog, clock):
    for n in (2, 1, 4):
        append(plog, n)
    io = plog.io
    copy = PartitionLog.create(io, io.join("topic-1"), "topic", 1, "3uI2M2AbQVO0J2cYw2xvOA", plog.config,
                               clock=clock)
    try:
        copy.append_as_follower(plog.read_bytes(0, ALL))  # three batches in one append
        later = append(plog, 2, epoch=3)
        copy.append_as_follower(plog.read_bytes(later, ALL))
        assert copy.read_tail(0, ALL)[0] == plog.read_bytes(0, ALL) == copy.read_bytes(0, ALL)
        assert copy.read_tail(later, ALL)[0] == plog.read_bytes(later, ALL)
    finally:
        copy.close_quietly()


def test_what_it_cannot_answer_exactly_is_left_to_the_file(plog):
    first = append(plog, 3)
    second = append(plog)
    assert plog.read_tail(first + 1, ALL) is None  # inside a batch: the file read starts at that batch
    assert plog.read_tail(plog.log_end_offset, ALL) is None  # nothing new: the file read's empty answer
    assert plog.read_tail(second, len(plog.read_bytes(second, ALL)) - 1) is None  # over the budget
    assert plog.read_tail(second, len(plog.read_bytes(second, ALL)))[0] == plog.read_bytes(second, ALL)


def test_a_big_append_empties_it_and_only_the_last_appends_are_kept(plog, monkeypatch):
    monkeypatch.setattr(log_module, "TAIL_APPEND_MAX", 200)
    small = append(plog)
    append(plog, size=300)
    assert plog.read_tail(small, ALL) is None
    after = append(plog)
    assert plog.read_tail(after, ALL)[0] == plog.read_bytes(after, ALL)
    bases = [append(plog) for _ in range(log_module.TAIL_APPENDS + 2)]
    assert plog.read_tail(bases[0], ALL) is None and plog.read_tail(bases[1], ALL) is None
    assert plog.read_tail(bases[2], ALL)[0] == plog.read_bytes(bases[2], ALL)


@pytest.mark.parametrize("fully", [False, True])
def test_a_truncation_forgets_what_it_kept(plog, fully):
    base = append(plog, 2)
    append(plog)
    if fully:
        plog.truncate_fully_and_start_at(base)
    else:
        plog.truncate_to(base)
    assert plog.read_tail(base, ALL) is None
    again = append(plog, 1, size=7)  # other bytes at the same offset
    assert again == base
    assert plog.read_tail(base, ALL)[0] == plog.read_bytes(base, ALL)
