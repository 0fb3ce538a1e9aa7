"""Fixtures for the KIP-113 tests: formatted log dirs, LogManagers with a ReplicaMover, batch builders.

In-process tests drive a LogManager and a ReplicaMover directly; an "appender" runs under the same lock the
mover's ``exclusive`` step takes, which is what the node's event loop guarantees in production. Live tests
(test_*_live.py) start real ``kjbod serve`` processes through tests/live.py.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import structlog
from live import kjbod_server, kjbod_server_factory  # noqa: F401  (live-server fixtures)
from structlog.testing import capture_logs

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords

from kjbod.broker.kip113 import ReplicaMover, Throttle, failpoints
from kjbod.storage import fsio
from kjbod.storage.config import LogConfig
from kjbod.storage.manager import LogManager
from kjbod.storage.meta import format_dirs

TOPIC_ID = "3uI2M2AbQVO0J2cYw2xvOA"


def batch(values: list[bytes], *, timestamp: int = 1_700_000_000_000) -> bytes:
    """One record batch as kafka-python's producer builds it."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 26)
    for i, v in enumerate(values):
        b.append(i, timestamp=timestamp + i, key=None, value=v, headers=[])
    return bytes(b.build())


def records(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, value) of every record, decoded and CRC-checked by kafka-python."""
    out = []
    mr = MemoryRecords(data)
    while True:
        b = mr.next_batch()
        if b is None:
            return out
        assert b.validate_crc()
        out.extend((r.offset, r.value) for r in b)


@contextmanager
def captured_logs() -> Iterator[list[dict]]:
    """structlog's capture_logs, with every level let through (another test may have configured a filtering
    logger that drops info and debug before any processor sees them)."""
    old = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    try:
        with capture_logs() as logs:
            yield logs
    finally:
        structlog.configure(**old)


def wait_for(cond: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


@pytest.fixture(autouse=True)
def _clean_faults_failpoints_and_logging() -> Iterator[None]:
    # structlog's defaults for the test (another module may have bound it to a stream that is closed by now),
    # the previous configuration back afterwards.
    saved = structlog.get_config()
    structlog.reset_defaults()
    fsio.clear()
    failpoints.disarm_all()
    yield
    fsio.clear()
    failpoints.disarm_all()
    structlog.configure(**saved)


@pytest.fixture
def log_dirs(tmp_path) -> list[str]:
    dirs = [str(tmp_path / f"logs-{i}") for i in range(3)]
    format_dirs({"log.dirs": ",".join(dirs), "node.id": 1})
    return dirs


class Rig:
    """A LogManager, a ReplicaMover and the append lock the mover's final step holds."""

    def __init__(self, dirs: list[str], config: LogConfig, threads: int, rate: int | None) -> None:
        self.dirs = dirs
        self.config = config
        self.append_lock = threading.Lock()
        self.events: list[str] = []
        self.manager = LogManager(dirs, node_id=1, defaults=config, on_dir_offline=self.events.append)
        self.manager.open()
        self.mover = ReplicaMover(self.manager, threads=threads,
                                  throttle=Throttle(rate) if rate else Throttle(), exclusive=self._exclusive)

    def _exclusive(self, fn):
        with self.append_lock:
            return fn()

    def append(self, topic: str, partition: int, values: list[bytes]) -> int:
        with self.append_lock:
            return self.manager.get(topic, partition).append(batch(values)).base_offset

    def read_all(self, topic: str, partition: int) -> list[tuple[int, bytes]]:
        plog = self.manager.get(topic, partition)
        return records(plog.read_bytes(plog.log_start_offset, 1 << 31))

    def moved(self, topic: str, partition: int, dest: str) -> bool:
        plog = self.manager.find(topic, partition)
        return plog is not None and plog.log_dir == dest and self.mover.destination(topic, partition) is None

    def close(self) -> None:
        self.mover.stop()
        self.manager.close()

    def kill(self) -> None:
        """Stop as a kill -9 would leave things: threads stopped, files closed and locks released, and nothing
        written on the way out (no checkpoints, no clean-shutdown marker)."""
        self.mover.stop()
        for plog in self.manager.partitions() + self.manager.future_logs():
            plog.close_quietly()
        for d in self.manager._dirs.values():
            if d.lock is not None:
                d.lock.close()
                d.lock = None
        self.manager._closed = True


@pytest.fixture
def make_rig(log_dirs) -> Iterator[Callable[..., Rig]]:
    made: list[Rig] = []

    def make(*, config: LogConfig | None = None, threads: int = 2, rate: int | None = None,
             start: bool = True) -> Rig:
        rig = Rig(log_dirs, config or LogConfig(segment_bytes=64 << 10, file_delete_delay_ms=0), threads, rate)
        made.append(rig)
        if start:
            rig.mover.start()
        return rig

    yield make
    for rig in made:
        try:
            rig.close()
        except Exception:
            pass
