"""Fixtures for the storage tests: formatted log dirs, a controllable clock, batch builders, region readers.

Every test gets fresh temporary dirs and a clean fault injector (rules left by one test never leak into the
next). Batches come from kafka-python's own record builder wherever a producer's bytes matter, so CRC
validation and the on-disk layout are checked against a second implementation.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator

import pytest

with warnings.catch_warnings():
    # kafka-python's package import uses importlib.resources.read_text, deprecated in 3.11; only the import warns.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords

from kjbod.storage import fsio
from kjbod.storage.config import LogConfig
from kjbod.storage.log import PartitionLog, ReadResult
from kjbod.storage.manager import LogManager
from kjbod.storage.meta import format_dirs
from kjbod.storage.workers import DirWorker

T0 = 1_700_000_000_000


class FakeClock:
    """Wall-clock milliseconds that only move when a test says so."""

    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


def kp_batch(
    values: list[bytes],
    *,
    timestamp: int = T0,
    step: int = 1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    compression: int = 0,
    key: bytes | None = None,
) -> bytes:
    """A batch as kafka-python's producer builds it (base offset 0, leader epoch -1)."""
    b = DefaultRecordBatchBuilder(
        magic=2, compression_type=compression, is_transactional=False, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, batch_size=1 << 24,
    )
    for i, v in enumerate(values):
        b.append(i, timestamp=timestamp + i * step, key=key, value=v, headers=[])
    return bytes(b.build())


def region_bytes(result: ReadResult) -> bytes:
    """Read and close the regions of a read (what the transport would sendfile)."""
    try:
        return b"".join(os.pread(r.fd, r.count, r.offset) for r in result.regions)
    finally:
        for r in result.regions:
            r.close()


def kp_records(data: bytes) -> list[tuple[int, bytes | None, int]]:
    """(offset, value, timestamp) of every record, decoded by kafka-python with its CRC check."""
    out = []
    mr = MemoryRecords(data)
    while True:
        batch = mr.next_batch()
        if batch is None:
            return out
        assert batch.validate_crc(), "kafka-python rejects the CRC of a stored batch"
        out.extend((r.offset, r.value, r.timestamp) for r in batch)


@pytest.fixture(autouse=True)
def _clean_faults() -> Iterator[None]:
    fsio.clear()
    yield
    fsio.clear()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def log_dirs(tmp_path) -> list[str]:
    dirs = [str(tmp_path / f"logs-{i}") for i in range(3)]
    format_dirs({"log.dirs": ",".join(dirs), "node.id": 1})
    return dirs


@pytest.fixture
def worker(tmp_path) -> Iterator[DirWorker]:
    """A bare dir worker on a fresh dir (the worker tests), stopped and joined at teardown."""
    w = DirWorker(fsio.LogDirIO(str(tmp_path)))
    yield w
    w.stop()
    w.join(60)


@pytest.fixture
def make_manager(log_dirs, clock):
    """Factory for LogManagers over the formatted dirs; every one made is closed at teardown."""
    made: list[LogManager] = []

    def make(*, dirs: list[str] | None = None, config: LogConfig | None = None, open: bool = True, **kw) -> LogManager:
        kw.setdefault("clock", clock)
        lm = LogManager(dirs or log_dirs, node_id=1, defaults=config or LogConfig(), **kw)
        made.append(lm)
        if open:
            lm.open()
        return lm

    yield make
    for lm in made:
        lm.close()


@pytest.fixture
def spread(make_manager, log_dirs):
    """A manager with partition t-0 in each of the three dirs' own topics: a-0 (dir 0), b-0 (dir 1), c-0 (dir 2)."""
    lm = make_manager(stall_timeout_ms=30_000)
    for name, d in zip("abc", log_dirs, strict=True):
        lm.create_partition(name, 0, "3uI2M2AbQVO0J2cYw2xvOA", dir=d)
    return lm


@pytest.fixture
def plog(tmp_path, clock) -> Iterator[PartitionLog]:
    """A standalone partition log (no manager) with small segments and a dense index."""
    io = fsio.LogDirIO(str(tmp_path / "d"))
    io.mkdir(io.path, parents=True)
    cfg = LogConfig(segment_bytes=1024, index_interval_bytes=100, segment_index_bytes=4096)
    log = PartitionLog.create(io, io.join("topic-0"), "topic", 0, "3uI2M2AbQVO0J2cYw2xvOA", cfg, clock=clock)
    yield log
    log.close_quietly()
