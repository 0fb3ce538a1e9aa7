"""A KIP-113 move of a compacted partition while its dir's cleaner is cleaning it (in process: a LogManager on three
log dirs and the real ReplicaMover). The move first stops the clean and waits for it (Kafka's
abortAndPauseCleaning), so the cleaner never swaps segments the mover is copying; the moved copy keeps where the
cleaner had got to, and is compacted in its new dir afterwards."""

from __future__ import annotations

import os
import threading
import time

import pytest

from kjbod.broker.kip113 import ReplicaMover, Throttle
from kjbod.storage import cleaner as cleaner_module
from kjbod.storage.config import LogConfig
from kjbod.storage.manager import LogManager
from kjbod.storage.meta import format_dirs
from kjbod.storage.records import build_batch, iter_all_records

TOPIC_ID = "3uI2M2AbQVO0J2cYw2xvOA"
CONFIG = LogConfig(segment_bytes=2000, cleanup_policy="compact", min_cleanable_dirty_ratio=0.01,
                   file_delete_delay_ms=0)


@pytest.fixture
def setup(tmp_path):
    dirs = [str(tmp_path / f"logs-{i}") for i in range(3)]
    format_dirs({"log.dirs": ",".join(dirs), "node.id": 1})
    lock = threading.Lock()

    def exclusive(fn):
        with lock:
            return fn()

    manager = LogManager(dirs, node_id=1, defaults=CONFIG)
    manager.open()
    mover = ReplicaMover(manager, threads=1, throttle=Throttle(), exclusive=exclusive)
    mover.start()
    yield dirs, manager, mover, lock
    mover.stop()
    manager.close()


def served(plog) -> dict[bytes, tuple[int, bytes]]:
    """key -> (offset, value) of the last record of each key the log serves; offsets checked unique and rising."""
    records = list(iter_all_records(plog.read_bytes(plog.log_start_offset, 1 << 30)))
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets))
    return {r.key: (r.offset, r.value) for r in records}


def test_a_move_stops_a_clean_in_progress_and_the_copy_is_compacted_where_it_lands(setup, monkeypatch):
    dirs, manager, mover, lock = setup
    plog = manager.create_partition("c", 0, TOPIC_ID, dir=dirs[0])
    latest = {}
    for i in range(600):
        key, value = b"k%d" % (i % 5), b"v%05d" % i
        with lock:
            plog.append(build_batch([(key, value, [], 1_700_000_000_000 + i)]))
        latest[key] = value
    plog.roll()
    before = served(plog)
    in_clean = threading.Event()
    move_asked = threading.Event()

    def hold(name: str) -> None:
        if name == "cleaned_written" and not in_clean.is_set():
            in_clean.set()
            while not plog.clean_abort:  # until the mover asks the clean to stop
                time.sleep(0.01)
            move_asked.set()

    monkeypatch.setattr(cleaner_module, "failpoint", hold)
    results: list[bool] = []
    cleaning = threading.Thread(target=lambda: results.append(manager.clean_dir(dirs[0])))
    cleaning.start()
    assert in_clean.wait(30)
    mover.request_move("c", 0, dirs[2])
    deadline = time.monotonic() + 60
    while (manager.find("c", 0) is None or manager.find("c", 0).log_dir != dirs[2]
           or mover.destination("c", 0) is not None):
        assert time.monotonic() < deadline, "the move did not finish"
        time.sleep(0.02)
    cleaning.join(30)
    assert move_asked.is_set() and results == [False]  # the clean stopped for the move
    moved = manager.get("c", 0)
    assert served(moved) == before  # nothing lost, nothing added, every record at its offset
    assert not [n for n in os.listdir(moved.dir) if n.endswith((".cleaned", ".swap"))]
    # The moved copy is compacted by its new dir's cleaner.
    assert manager.clean_dir(dirs[2])
    assert {k: v for k, (_, v) in served(moved).items()} == latest
    assert len(list(iter_all_records(moved.read_bytes(0, 1 << 30)))) < 60
