"""Recovery after a crash: torn writes, flipped bytes, lost indexes, producer state, and what a clean shutdown
lets the loader skip."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import crc32c
import pytest
from structlog.testing import capture_logs

from kjbod.storage.config import LogConfig
from kjbod.storage.fsio import LogDirIO
from kjbod.storage.log import PartitionLog
from kjbod.storage.records import iter_batches
from tests.storage.conftest import T0, kp_batch, kp_records

CFG = LogConfig(segment_bytes=1024, index_interval_bytes=100, segment_index_bytes=4096)


def build_log(root: Path, batches: int, *, cfg: LogConfig = CFG, clock=None, **batch_kw) -> PartitionLog:
    io = LogDirIO(str(root))
    io.mkdir(io.path, parents=True, exist_ok=True)
    log = PartitionLog.create(io, io.join("t-0"), "t", 0, None, cfg, **({"clock": clock} if clock else {}))
    for i in range(batches):
        log.append(kp_batch([b"value-%03d" % i], timestamp=T0 + i, **batch_kw))
    return log


def reopen(root: Path, *, clean: bool, recovery_point: int = 0, cfg: LogConfig = CFG) -> PartitionLog:
    io = LogDirIO(str(root))
    return PartitionLog.load(io, io.join("t-0"), "t", 0, cfg, had_clean_shutdown=clean, recovery_point=recovery_point)


def offsets(log: PartitionLog) -> list[int]:
    return [o for o, _, _ in kp_records(log.read_bytes(log.log_start_offset, 1 << 30))]


def corrupt_files(log: PartitionLog) -> list[str]:
    return sorted(n for n in os.listdir(log.dir) if n.endswith(".corrupt"))


def flip(path: str, pos: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0xFF]))


# ---------------------------------------------------------------------------------------------- torn writes


def test_torn_write_at_every_byte_of_the_last_batch(tmp_path):
    base = tmp_path / "orig"
    log = build_log(base, 3)
    log.close()
    seg = Path(log.segments[-1].log_path)
    data = seg.read_bytes()
    starts = [p for p, _ in iter_batches(data)]
    last_start = starts[-1]
    assert len(data) - last_start > 60
    for cut in range(last_start + 1, len(data)):
        work = tmp_path / f"cut-{cut}"
        shutil.copytree(base, work)
        os.truncate(work / "t-0" / seg.name, cut)
        with capture_logs() as logs:
            rec = reopen(work, clean=False)
        assert rec.log_end_offset == 2, cut
        assert offsets(rec) == [0, 1]
        [aside] = corrupt_files(rec)
        assert (work / "t-0" / aside).read_bytes() == data[last_start:cut]
        [warning] = [e for e in logs if e["event"] == "corrupt_log_tail_truncated"]
        assert warning["log_level"] == "warning"
        assert warning["partition"] == "t-0" and warning["offset"] == 2
        assert warning["truncated_bytes"] == cut - last_start and warning["kept_bytes"] == last_start
        assert rec.append(kp_batch([b"after"])).base_offset == 2
        rec.close()


def test_clean_cut_at_a_batch_boundary_needs_no_truncation(tmp_path):
    log = build_log(tmp_path, 3)
    log.close()
    data = Path(log.active_segment.log_path).read_bytes()
    last_start = [p for p, _ in iter_batches(data)][-1]
    os.truncate(log.active_segment.log_path, last_start)
    rec = reopen(tmp_path, clean=False)
    assert rec.log_end_offset == 2 and corrupt_files(rec) == []
    rec.close()


# ---------------------------------------------------------------------------------------------- flipped bytes


def test_flipped_byte_in_the_active_tail(tmp_path):
    log = build_log(tmp_path, 6)
    log.close()
    path = log.active_segment.log_path
    data = Path(path).read_bytes()
    starts = [p for p, _ in iter_batches(data)]
    flip(path, starts[4] + 40)  # inside batch 4's CRC-covered bytes
    with capture_logs() as logs:
        rec = reopen(tmp_path, clean=False)
    assert rec.log_end_offset == 4 and offsets(rec) == [0, 1, 2, 3]
    [aside] = corrupt_files(rec)
    assert Path(rec.dir, aside).stat().st_size == len(data) - starts[4]
    assert any(e["event"] == "corrupt_log_tail_truncated" and "CRC" in e["reason"] for e in logs)
    rec.close()


def test_malformed_records_behind_a_valid_crc_are_cut_off(tmp_path):
    # A batch whose CRC matches but whose record a consumer could not read (here: offset delta 1 in a
    # one-record batch), as an older kjbod may have stored it: recovery walks the records too.
    log = build_log(tmp_path, 6)
    log.close()
    path = log.active_segment.log_path
    data = bytearray(Path(path).read_bytes())
    starts = [p for p, _ in iter_batches(data)]
    end = starts[5]
    data[starts[4] + 61 + 3] = 0x02  # record length, attributes, timestamp delta, then the offset delta
    struct.pack_into(">I", data, starts[4] + 17, crc32c.crc32c(bytes(data[starts[4] + 21 : end])))
    Path(path).write_bytes(data)
    with capture_logs() as logs:
        rec = reopen(tmp_path, clean=False)
    assert rec.log_end_offset == 4 and offsets(rec) == [0, 1, 2, 3]
    [event] = [e for e in logs if e["event"] == "corrupt_log_tail_truncated"]
    assert "record 0 of the batch is malformed: offset delta 1" in event["reason"]
    rec.close()


def test_flipped_byte_in_a_closed_segment(tmp_path):
    log = build_log(tmp_path, 40)
    log.close()
    assert len(log.segments) >= 3
    first = log.segments[0]
    data = Path(first.log_path).read_bytes()
    starts = [p for p, _ in iter_batches(data)]
    flip(first.log_path, starts[5] + 30)
    with capture_logs() as logs:
        rec = reopen(tmp_path, clean=False, recovery_point=0)
    assert rec.log_end_offset == 5 and offsets(rec) == [0, 1, 2, 3, 4]
    assert len(rec.segments) == 1
    # The tail of segment 0 and every later segment are kept aside, nothing is silently lost.
    aside = corrupt_files(rec)
    assert len(aside) == len(log.segments)
    kept = sum(Path(rec.dir, n).stat().st_size for n in aside)
    assert kept == sum(s.size for s in log.segments) - starts[5]
    assert {e["event"] for e in logs} >= {"corrupt_log_tail_truncated", "log_segment_after_corruption_set_aside"}
    assert rec.append(kp_batch([b"new"])).base_offset == 5
    rec.close()


def test_segments_below_the_recovery_point_are_trusted(tmp_path):
    log = build_log(tmp_path, 40)
    log.close()
    flip(log.segments[0].log_path, 70)
    rp = log.segments[-1].base_offset
    rec = reopen(tmp_path, clean=False, recovery_point=rp)
    assert rec.load_stats.recovered_segments == 1
    assert rec.log_end_offset == 40 and corrupt_files(rec) == []
    rec.close()


def test_clean_shutdown_skips_validation_entirely(tmp_path):
    log = build_log(tmp_path, 40)
    log.close()
    flip(log.segments[0].log_path, 70)  # would be found by a recovery
    rec = reopen(tmp_path, clean=True)
    assert rec.load_stats.recovered_segments == 0
    assert rec.log_end_offset == 40 and rec.recovery_point == 40
    assert not any(idx.loaded for s in rec.segments[:-1] for idx in (s.index, s.time_index))
    rec.close()


# ---------------------------------------------------------------------------------------------- indexes


def test_missing_and_corrupt_indexes_are_rebuilt(tmp_path):
    log = build_log(tmp_path, 40)
    log.close()
    first, second = log.segments[0], log.segments[1]
    expected = first.index.entries(), second.time_index.entries()
    os.unlink(first.index.path)
    Path(second.time_index.path).write_bytes(b"\x7f" * 24 + b"\x00" * 11 + b"\x01")
    rec = reopen(tmp_path, clean=True)
    assert offsets(rec) == list(range(40))
    assert rec.offset_for_timestamp(T0 + 20) == (20, T0 + 20)
    assert rec.segments[0].index.entries() == expected[0]
    assert rec.segments[1].time_index.entries() == expected[1]
    assert os.path.getsize(rec.segments[0].index.path) == 8 * len(expected[0])
    rec.close()


def test_crash_with_preallocated_indexes(tmp_path):
    """A crash leaves the active segment's indexes preallocated with a zero tail; recovery rebuilds them."""
    log = build_log(tmp_path, 12)
    entries = log.active_segment.index.entries()
    log.close_quietly()  # no trim, no snapshot: like a kill -9
    assert os.path.getsize(log.active_segment.index.path) == 4096
    rec = reopen(tmp_path, clean=False)
    assert rec.log_end_offset == 12 and rec.active_segment.index.entries() == entries
    rec.close()


# ---------------------------------------------------------------------------------------------- producer state


def idem(value: bytes, seq: int) -> bytes:
    return kp_batch([value], producer_id=77, producer_epoch=0, base_sequence=seq)


@pytest.mark.parametrize("clean", [True, False])
def test_producer_state_survives_restart(tmp_path, clean):
    io = LogDirIO(str(tmp_path))
    log = PartitionLog.create(io, io.join("t-0"), "t", 0, None, CFG)
    for i in range(30):
        log.append(idem(b"v%03d" % i, i))
    if clean:
        log.close()
    else:
        log.close_quietly()
    rec = reopen(tmp_path, clean=clean)
    assert rec.load_stats.replayed_batches == 0  # producer state is rebuilt lazily, on the first append
    retry = rec.append(idem(b"v029", 29))
    # Clean: the snapshot at the log end is enough. Crash: replay from the snapshot taken at the last roll.
    assert rec.load_stats.replayed_batches == (0 if clean else rec.log_end_offset - rec.active_segment.base_offset)
    assert retry.duplicate and retry.base_offset == 29
    from kjbod.storage.errors import OutOfOrderSequenceError

    with pytest.raises(OutOfOrderSequenceError):
        rec.append(idem(b"gap", 31))
    assert rec.append(idem(b"v030", 30)).base_offset == 30
    rec.close()


# ---------------------------------------------------------------------------------------------- a real crash


CRASHER = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {root!r})
    from kjbod.storage import LogManager, LogConfig
    from tests.storage.conftest import kp_batch
    lm = LogManager({dirs!r}, node_id=1, defaults=LogConfig(segment_bytes=4096))
    lm.open()
    log = lm.create_partition("crash", 0, "3uI2M2AbQVO0J2cYw2xvOA")
    for i in range(200):
        log.append(kp_batch([b"record-%04d" % i]))
    tail = log.active_segment.log_path
    os.write(os.open(tail, os.O_WRONLY | os.O_APPEND), b"\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x07\\x00\\x00")
    os._exit(0)  # no close: no flush, no checkpoints, no clean-shutdown marker
    """
)


def test_killed_process_recovers_with_a_torn_tail(log_dirs, make_manager):
    root = str(Path(__file__).resolve().parents[2])
    script = CRASHER.format(root=root, dirs=log_dirs)
    subprocess.run([sys.executable, "-c", script], check=True, cwd=root, timeout=60, capture_output=True)
    with capture_logs() as logs:
        lm = make_manager()
    log = lm.get("crash", 0)
    assert not lm.had_clean_shutdown(log.log_dir)
    assert log.log_end_offset == 200
    assert log.load_stats.truncated_bytes == 10
    assert [o for o, _, _ in kp_records(log.read_bytes(0, 1 << 30))] == list(range(200))
    assert any(e["event"] == "corrupt_log_tail_truncated" for e in logs)
    assert log.topic_id == "3uI2M2AbQVO0J2cYw2xvOA"
