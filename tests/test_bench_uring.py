"""The benchmark's io_uring ring (tools/bench/uring.py) writes what it is given where it is told, and says so."""

from __future__ import annotations

import os
import select
from pathlib import Path

import pytest

from tools.bench.uring import open_ring


def test_a_write_through_the_ring_lands_at_its_offset_and_completes_on_the_eventfd(tmp_path: Path) -> None:
    ring, why = open_ring()
    if ring is None:
        pytest.skip(f"the benchmark prints this instead of its kernel-thread figure: {why}")
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        ring.write(fd, b"hello", 3, 7)
        ring.write(fd, b"abc", 0, 8)
        done: list[tuple[int, int]] = []
        while len(done) < 2:
            assert select.select([ring.eventfd], [], [], 10)[0], "no completion within 10 s"
            os.eventfd_read(ring.eventfd)
            done += ring.reap()
        assert sorted(done) == [(7, 5), (8, 3)]
        assert path.read_bytes() == b"abchello"
        ring.write(-1, b"x", 0, 9)  # a bad descriptor comes back as -EBADF, not as an exception
        assert select.select([ring.eventfd], [], [], 10)[0]
        os.eventfd_read(ring.eventfd)
        assert ring.reap() == [(9, -9)]
    finally:
        os.close(fd)
        ring.close()
