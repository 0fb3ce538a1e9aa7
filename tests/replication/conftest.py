from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from kjbod.storage import fsio
from kjbod.storage.config import LogConfig
from kjbod.storage.log import PartitionLog
from kjbod.storage.records import build_batch


def batch(n: int = 1, *, epoch: int = -1, base_offset: int = 0, tag: bytes = b"v") -> bytes:
    """One v2 batch of `n` records."""
    now = int(time.time() * 1000)
    return build_batch([(None, tag + b"%d" % i, (), now) for i in range(n)], base_offset=base_offset,
                       partition_leader_epoch=epoch)


@pytest.fixture
def make_log(tmp_path) -> Iterator:
    made: list[PartitionLog] = []

    def make(name: str = "topic-0") -> PartitionLog:
        io = fsio.LogDirIO(str(tmp_path / f"d{len(made)}"))
        io.mkdir(io.path, parents=True)
        topic, _, p = name.rpartition("-")
        plog = PartitionLog.create(io, io.join(name), topic, int(p), "3uI2M2AbQVO0J2cYw2xvOA", LogConfig())
        made.append(plog)
        return plog

    yield make
    for plog in made:
        plog.close_quietly()
