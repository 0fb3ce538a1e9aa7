"""Offset and time index files: byte layout, lazy loading, preallocation and trimming, damaged files."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from kjbod.storage.fsio import LogDirIO
from kjbod.storage.index import OffsetIndex, TimeIndex


def make(tmp_path, cls, max_bytes=96):
    io = LogDirIO(str(tmp_path))
    suffix = ".index" if cls is OffsetIndex else ".timeindex"
    return cls(io, str(tmp_path / f"{100:020d}{suffix}"), 100, max_bytes)


def test_offset_index_layout_preallocation_and_trim(tmp_path):
    idx = make(tmp_path, OffsetIndex)
    idx.create()
    assert os.path.getsize(idx.path) == 96  # preallocated (sparse) to segment.index.bytes
    idx.append(103, 500)
    idx.append(107, 900)
    idx.append(106, 950)  # out of order: ignored
    assert Path(idx.path).read_bytes() == bytes(96)  # entries reach the file on sync, not per append
    idx.sync()
    assert Path(idx.path).read_bytes()[:16] == struct.pack(">iiii", 3, 500, 7, 900)
    idx.trim()
    assert Path(idx.path).read_bytes() == struct.pack(">iiii", 3, 500, 7, 900)
    assert idx.lookup(99) == (100, 0) and idx.lookup(103) == (103, 500)
    assert idx.lookup(106) == (103, 500) and idx.lookup(10**6) == (107, 900)
    assert idx.max_entries == 12 and not idx.is_full


def test_offset_index_load_peek_and_truncate(tmp_path):
    idx = make(tmp_path, OffsetIndex)
    idx.create()
    for i in range(1, 5):
        idx.append(100 + i, 100 * i)
    idx.trim()
    fresh = make(tmp_path, OffsetIndex)
    assert fresh.peek_last(log_size=1000) == (104, 400) and not fresh.loaded
    assert fresh.peek_last(log_size=400) is None  # the entry points past the log: needs a full look
    assert fresh.load(log_size=1000) and fresh.entries() == [(101, 100), (102, 200), (103, 300), (104, 400)]
    fresh.truncate_to(103)
    assert fresh.entries() == [(101, 100), (102, 200)]
    assert os.path.getsize(fresh.path) == 16


def test_offset_index_zero_tail_is_fine_garbage_is_not(tmp_path):
    idx = make(tmp_path, OffsetIndex)
    Path(idx.path).write_bytes(struct.pack(">ii", 1, 10) + bytes(40))  # untrimmed after a crash
    assert idx.load(log_size=100) and idx.entries() == [(101, 10)]
    Path(idx.path).write_bytes(struct.pack(">iiii", 5, 10, 2, 20))  # offsets going backwards
    assert not make(tmp_path, OffsetIndex).load(log_size=100)
    Path(idx.path).write_bytes(b"\x00" * 7)  # not a whole entry
    assert not make(tmp_path, OffsetIndex).load(log_size=100)
    os.unlink(idx.path)
    assert not make(tmp_path, OffsetIndex).load(log_size=100)


def test_time_index_layout_and_lookup(tmp_path):
    ti = make(tmp_path, TimeIndex)
    ti.create()
    ti.maybe_append(1000, 101)
    ti.maybe_append(1000, 102)  # not larger: ignored
    ti.maybe_append(2000, 105)
    ti.trim()
    assert Path(ti.path).read_bytes() == struct.pack(">qiqi", 1000, 1, 2000, 5)
    assert ti.lookup(999) == (-1, 100) and ti.lookup(1500) == (1000, 101) and ti.lookup(5000) == (2000, 105)
    again = make(tmp_path, TimeIndex)
    assert again.peek_last() == (2000, 105)
    assert again.load(0) and again.entries() == [(1000, 101), (2000, 105)]
    Path(ti.path).write_bytes(struct.pack(">qi", 5, 1) + bytes(24) + struct.pack(">qi", 9, 9))
    assert not make(tmp_path, TimeIndex).load(0)  # data after the zero tail: damaged
