"""A follower's append (PartitionLog.append_as_follower, its own path since the follower's dir worker runs it once
per fetch answer): what it leaves must be what the leader's append of the same records left, byte for byte and
structure for structure (segments and where they roll, both indexes, the epoch cache, the log end), whether the
follower takes the leader's appends one by one or several at once; a roll by segment.ms that needs the clock (no
record timestamps) still reads it."""

from __future__ import annotations

import os

from kjbod.storage import fsio
from kjbod.storage.config import LogConfig
from kjbod.storage.log import PartitionLog
from kjbod.storage.records import build_batch

CONFIG = LogConfig(segment_bytes=4000, index_interval_bytes=700)


def _log(tmp_path, name: str, config: LogConfig = CONFIG, **kwargs) -> PartitionLog:
    io = fsio.LogDirIO(str(tmp_path / name))
    io.mkdir(io.path, parents=True)
    return PartitionLog.create(io, io.join("t-0"), "t", 0, "3uI2M2AbQVO0J2cYw2xvOA", config, **kwargs)


def _records(i: int, batches: int) -> bytes:
    """A producer's request: `batches` batches of 1-3 records of ~300 bytes, timestamps rising."""
    out = b""
    for b in range(batches):
        n = 1 + (i + b) % 3
        out += build_batch([(None, b"%d-%d-%d" % (i, b, r) + b"x" * 300, (), 1_700_000_000_000 + 10 * i + r)
                            for r in range(n)])
    return out


def _leader_appends(leader: PartitionLog) -> list[bytes]:
    """The leader's appends, epochs moving between them; what each wrote, read back from its segment."""
    written = []
    for i, epoch in enumerate([0, 0, 0, 1, 1, 2, 2, 2, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6]):
        records = _records(i, 1 + i % 3)
        leader.append(records, leader_epoch=epoch, now_ms=1_700_000_000_000)
        seg = leader.segments[-1]
        with open(seg.log_path, "rb") as f:
            f.seek(seg.size - len(records))
            written.append(f.read(len(records)))
    return written


def _state(plog: PartitionLog) -> dict:
    segments = []
    for seg in plog.segments:
        with open(seg.log_path, "rb") as f:
            data = f.read()
        segments.append((seg.base_offset, seg.size, data, seg.index.entries(), seg.time_index.entries(),
                         seg.max_timestamp_and_offset))
    return {"segments": segments, "leo": plog.log_end_offset, "epochs": plog.leader_epochs.entries,
            "latest_epoch": plog.leader_epochs.latest_epoch,
            "map_end": plog.producer_state.map_end_offset}


def test_a_follower_taking_the_leaders_appends_one_by_one_ends_with_the_leaders_log(tmp_path):
    leader = _log(tmp_path, "leader")
    follower = _log(tmp_path, "follower")
    for data in _leader_appends(leader):
        follower.append_as_follower(data)
    assert len(leader.segments) > 2  # the appends rolled: the follower's rolls fell where the leader's did
    assert _state(follower) == _state(leader)


def test_a_follower_taking_batches_of_several_epochs_in_one_append_knows_each_epochs_start(tmp_path):
    leader = _log(tmp_path, "leader", LogConfig())
    follower = _log(tmp_path, "follower", LogConfig())
    written = _leader_appends(leader)
    info = follower.append_as_follower(b"".join(written[:9]))  # epochs 0, 1, 2 and 5 in one answer
    follower.append_as_follower(b"".join(written[9:]))  # 5 again, then 6
    assert (info.base_offset, info.log_start_offset) == (0, 0)
    assert info.last_offset == sum(1 + (i + b) % 3 for i in range(9) for b in range(1 + i % 3)) - 1
    assert len(follower.leader_epochs.entries) == 5
    assert _state(follower) == _state(leader)


def test_a_followers_roll_by_segment_ms_reads_the_clock_when_the_records_carry_no_timestamp(tmp_path):
    now = [1_000]
    follower = _log(tmp_path, "follower", LogConfig(segment_ms=100), clock=lambda: now[0])

    def batch(offset: int) -> bytes:
        return build_batch([(None, b"v", (), -1)], base_offset=offset, partition_leader_epoch=0)

    follower.append_as_follower(batch(0))
    now[0] += 50
    follower.append_as_follower(batch(1))
    assert [s.base_offset for s in follower.segments] == [0]
    now[0] += 100  # segment.ms since the segment was made
    follower.append_as_follower(batch(2))
    assert [s.base_offset for s in follower.segments] == [0, 2]
    assert os.path.getsize(follower.segments[0].log_path) == 2 * len(batch(0))
