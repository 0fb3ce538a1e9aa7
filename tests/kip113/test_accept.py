"""Accepting a move makes it survive a crash: its -future dir exists, durably, when the request returns.

In-process (a LogManager and a ReplicaMover on three log dirs): ReplicaMover.request_moves, which
AlterReplicaLogDirs calls before it answers, makes each new move's dir (with partition.metadata) in one batch,
one fsync per destination; a redirect replaces the dir, a cancel removes it; a destination that fails fails
only the moves into it. The AlterReplicaLogDirs handler is driven with a minimal node. A -future dir that a
crash left empty (no segments, partition.metadata present, missing or empty) resumes like any other.
"""

from __future__ import annotations

import asyncio
import errno
import inspect
import os
import types
from pathlib import Path

import pytest

from kjbod.broker.handlers import alter_replica_log_dirs
from kjbod.broker.kip113 import failpoints
from kjbod.broker.storage_glue import StorageAdapter
from kjbod.metadata import MetadataImage
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import AlterReplicaLogDirsRequest as ARD
from kjbod.storage import fsio
from kjbod.storage.checkpoint import PARTITION_METADATA_FILE, render_partition_metadata
from kjbod.storage.config import LogConfig
from kjbod.storage.errors import KafkaStorageError
from kjbod.storage.fsio import LogDirIO

from .conftest import TOPIC_ID, Rig, captured_logs, wait_for
from .test_mover import dir_kinds, fill, moving

METADATA = render_partition_metadata(TOPIC_ID).encode()


def futures_in(path: str) -> list[str]:
    return sorted(n for n, kind in dir_kinds(path).items() if kind == "-future")


def only_future(path: str, topic: str) -> Path:
    [name] = [n for n in futures_in(path) if n.startswith(f"{topic}-0.")]
    return Path(path, name)


def test_request_makes_every_future_dir_with_one_fsync_per_destination(make_rig, log_dirs, monkeypatch):
    rig = make_rig(start=False)  # no mover thread: every move stays queued
    topics = [f"t{i}" for i in range(40)]
    for t in topics:
        rig.manager.create_partition(t, 0, TOPIC_ID, dir=log_dirs[0])
    synced: list[str] = []
    real_fsync_dir = LogDirIO.fsync_dir

    def fsync_dir(self, path=None):
        synced.append(path or self.path)
        real_fsync_dir(self, path)

    monkeypatch.setattr(LogDirIO, "fsync_dir", fsync_dir)
    failures = rig.mover.request_moves([(t, 0, log_dirs[1 + i % 2]) for i, t in enumerate(topics)])
    assert failures == {}
    assert sorted(synced) == [log_dirs[1], log_dirs[2]]  # one per destination, none per partition
    for i, t in enumerate(topics):
        future = only_future(log_dirs[1 + i % 2], t)
        assert os.listdir(future) == [PARTITION_METADATA_FILE]
        assert (future / PARTITION_METADATA_FILE).read_bytes() == METADATA
        p = rig.mover.progress(t, 0)
        assert p is not None and p.state == "queued" and p.dest_dir == log_dirs[1 + i % 2]


def test_the_mover_thread_uses_the_dir_made_at_request_time(make_rig, log_dirs):
    rig = make_rig(start=False)
    rig.manager.create_partition("u", 0, TOPIC_ID, dir=log_dirs[0])
    values = fill(rig, "u", 600)
    assert rig.mover.request_move("u", 0, log_dirs[1]) is None
    made = futures_in(log_dirs[1])
    seen: list[list[str]] = []
    failpoints.arm("future_dir_created", action=lambda _name: seen.append(futures_in(log_dirs[1])))
    with captured_logs() as logs:
        rig.mover.start()
        wait_for(lambda: rig.moved("u", 0, log_dirs[1]))
    assert seen == [made]  # the same dir, not a second one
    started = next(e for e in logs if e["event"] == "replica_move_started")
    assert started["resumed"] is False  # nothing in it was copied before
    assert not any(e["event"] == "future_partition_metadata_rewritten" for e in logs)
    assert [v for _, v in rig.read_all("u", 0)] == values


def test_redirect_while_queued_replaces_the_dir(make_rig, log_dirs):
    rig = make_rig(start=False)
    rig.manager.create_partition("r", 0, TOPIC_ID, dir=log_dirs[0])
    values = fill(rig, "r", 300)
    rig.mover.request_move("r", 0, log_dirs[1])
    assert len(futures_in(log_dirs[1])) == 1
    assert rig.mover.request_move("r", 0, log_dirs[2]) is None
    # Renamed to -delete when the request returns, removed by the manager's background tick.
    assert list(dir_kinds(log_dirs[1]).values()) == ["-delete"]
    rig.manager.tick()
    assert dir_kinds(log_dirs[1]) == {}
    assert (only_future(log_dirs[2], "r") / PARTITION_METADATA_FILE).read_bytes() == METADATA
    assert rig.mover.destination("r", 0) == log_dirs[2]
    assert rig.mover.request_move("r", 0, log_dirs[2]) is None  # the same destination again: nothing changes
    assert len(futures_in(log_dirs[2])) == 1
    rig.mover.start()
    wait_for(lambda: rig.moved("r", 0, log_dirs[2]))
    assert [v for _, v in rig.read_all("r", 0)] == values
    assert dir_kinds(log_dirs[1]) == {}


@pytest.mark.parametrize("how", ["request", "cancel"])
def test_cancel_while_queued_removes_the_dir(make_rig, log_dirs, how):
    rig = make_rig(start=False)
    rig.manager.create_partition("c", 0, TOPIC_ID, dir=log_dirs[0])
    rig.mover.request_move("c", 0, log_dirs[1])
    assert len(futures_in(log_dirs[1])) == 1
    if how == "request":  # AlterReplicaLogDirs naming the current dir (or "any")
        assert rig.mover.request_moves([("c", 0, None)]) == {}
    else:  # the topic is being deleted
        assert rig.mover.cancel("c", 0)
    assert list(dir_kinds(log_dirs[1]).values()) == ["-delete"]  # removed by the manager's background tick
    rig.manager.tick()
    assert dir_kinds(log_dirs[1]) == {}
    assert rig.mover.progress("c", 0) is None and rig.mover.destination("c", 0) is None
    rig.mover.start()  # the cancelled queue entry is skipped
    assert rig.mover.wait_settled("c", 0, timeout=5)
    assert rig.manager.get("c", 0).log_dir == log_dirs[0]


def test_redirect_and_cancel_of_a_running_move_wait_for_its_thread(make_rig, log_dirs):
    rig = make_rig(rate=300_000)
    values = moving(rig, "w", log_dirs[1], copied=50_000)
    # When the request returns, the old future dir is gone and the new one is in place: a crash from here on
    # resumes the move toward the new destination.
    assert rig.mover.request_move("w", 0, log_dirs[2]) is None
    assert futures_in(log_dirs[1]) == [] and len(futures_in(log_dirs[2])) == 1
    assert rig.mover.request_moves([("w", 0, None)]) == {}
    assert futures_in(log_dirs[1]) == [] and futures_in(log_dirs[2]) == []
    assert rig.manager.get("w", 0).log_dir == log_dirs[0]
    assert [v for _, v in rig.read_all("w", 0)] == values


def test_an_io_error_on_one_destination_fails_only_the_moves_into_it(make_rig, log_dirs):
    rig = make_rig(start=False)
    for t in ("ok", "bad", "bad2"):
        rig.manager.create_partition(t, 0, TOPIC_ID, dir=log_dirs[0])
    values = fill(rig, "ok", 200)
    fsio.inject(log_dirs[2], errno.EIO, ops={"mkdir"}, count=1)
    failures = rig.mover.request_moves([("bad", 0, log_dirs[2]), ("ok", 0, log_dirs[1]), ("bad2", 0, log_dirs[2])])
    assert set(failures) == {("bad", 0), ("bad2", 0)}
    assert all(isinstance(e, KafkaStorageError) for e in failures.values())
    assert log_dirs[2] not in rig.manager.online_dirs and rig.events == [log_dirs[2]]
    assert rig.mover.progress("bad", 0) is None and rig.mover.progress("bad2", 0) is None
    assert len(futures_in(log_dirs[1])) == 1
    rig.mover.start()
    wait_for(lambda: rig.moved("ok", 0, log_dirs[1]))
    assert [v for _, v in rig.read_all("ok", 0)] == values
    assert rig.manager.get("bad", 0).log_dir == log_dirs[0] and rig.manager.get("bad2", 0).log_dir == log_dirs[0]


def _node(rig: Rig) -> types.SimpleNamespace:
    node = types.SimpleNamespace(metadata=MetadataImage(), mover=rig.mover)
    node.logs = StorageAdapter(node, rig.manager)
    return node


def _answer(node, moves: dict[tuple[str, int], str]) -> tuple[dict[tuple[str, int], int], bool]:
    """The handler's codes, and whether it answered only after awaiting (the mover's file work)."""
    by_path: dict[str, dict[str, list[int]]] = {}
    for (topic, partition), path in moves.items():
        by_path.setdefault(path, {}).setdefault(topic, []).append(partition)
    body = ARD(dirs=[ARD.AlterReplicaLogDir(path=path, topics=[ARD.AlterReplicaLogDirTopic(name=t, partitions=ps)
                                                                for t, ps in topics.items()])
                     for path, topics in by_path.items()])

    async def call():
        result = alter_replica_log_dirs.handle(node, None, body)
        awaited = inspect.isawaitable(result)
        return (await result if awaited else result), awaited

    response, awaited = asyncio.run(call())
    return {(t.topic_name, p.partition_index): p.error_code for t in response.results for p in t.partitions}, awaited


def test_handler_answers_storage_error_for_the_failed_destination_only(make_rig, log_dirs):
    rig = make_rig(start=False)
    for t in ("a", "b"):
        rig.manager.create_partition(t, 0, TOPIC_ID, dir=log_dirs[0])
    node = _node(rig)
    fsio.inject(log_dirs[2], errno.EIO, ops={"write"})  # mkdir works, partition.metadata does not
    codes, awaited = _answer(node, {("a", 0): log_dirs[1], ("b", 0): log_dirs[2]})
    assert awaited
    assert codes == {("a", 0): ErrorCode.NONE, ("b", 0): ErrorCode.KAFKA_STORAGE_ERROR}
    assert len(futures_in(log_dirs[1])) == 1 and log_dirs[2] not in rig.manager.online_dirs
    # Then: the dir is offline for every later request (checked on the event loop), a no-op answers at once.
    codes, awaited = _answer(node, {("b", 0): log_dirs[2], ("a", 0): log_dirs[0]})
    assert codes == {("b", 0): ErrorCode.KAFKA_STORAGE_ERROR, ("a", 0): ErrorCode.NONE}
    assert awaited  # a-0's cancel removes its future dir before the answer
    assert futures_in(log_dirs[1]) == []
    codes, awaited = _answer(node, {("a", 0): log_dirs[0]})
    assert codes == {("a", 0): ErrorCode.NONE} and not awaited  # nothing to cancel


def test_queued_moves_survive_a_crash(make_rig, log_dirs):
    config = LogConfig(segment_bytes=64 << 10, file_delete_delay_ms=0)
    rig = make_rig(config=config, start=False)
    data = {}
    for t in ("q0", "q1", "q2"):
        rig.manager.create_partition(t, 0, TOPIC_ID, dir=log_dirs[0])
        data[t] = fill(rig, t, 400)
    node = _node(rig)
    codes, _ = _answer(node, {(t, 0): log_dirs[1 + i % 2] for i, t in enumerate(data)})
    assert set(codes.values()) == {ErrorCode.NONE}
    rig.kill()  # answered, nothing started: only the -future dirs hold the moves now
    rig2 = make_rig(config=config)
    rig2.mover.resume_at_startup()
    for i, t in enumerate(data):
        wait_for(lambda t=t, i=i: rig2.moved(t, 0, log_dirs[1 + i % 2]), what=f"the move of {t}")
        assert [v for _, v in rig2.read_all(t, 0)] == data[t]
        assert rig2.manager.get(t, 0).topic_id == TOPIC_ID


@pytest.mark.parametrize("metadata", ["written", "missing", "empty", "torn"])
def test_an_empty_future_dir_resumes(make_rig, log_dirs, metadata):
    # What a crash can leave of a move accepted and not started: partition.metadata is not synced when the
    # dir is made, so it may be missing, empty or cut short. The loader opens the dir, the move resumes, and
    # the partition.metadata the moved log ends up with is whole and durable.
    config = LogConfig(segment_bytes=64 << 10, file_delete_delay_ms=0)
    rig = make_rig(config=config, start=False)
    rig.manager.create_partition("e", 0, TOPIC_ID, dir=log_dirs[0])
    values = fill(rig, "e", 1500)
    rig.kill()
    future = Path(log_dirs[1], "e-0.00112233445566778899aabbccddeeff-future")
    future.mkdir()
    content = {"written": METADATA, "empty": b"", "torn": METADATA[:12]}.get(metadata)
    if content is not None:
        (future / PARTITION_METADATA_FILE).write_bytes(content)
    rig2 = make_rig(config=config, start=False)
    assert rig2.manager.get_future("e", 0) is not None
    with captured_logs() as logs:
        rig2.mover.start()
        rig2.mover.resume_at_startup()
        wait_for(lambda: rig2.moved("e", 0, log_dirs[1]))
    rewritten = [e for e in logs if e["event"] == "future_partition_metadata_rewritten"]
    assert bool(rewritten) == (metadata != "written")
    moved = rig2.manager.get("e", 0)
    assert [v for _, v in rig2.read_all("e", 0)] == values
    assert Path(moved.dir, PARTITION_METADATA_FILE).read_bytes() == METADATA
    assert moved.topic_id == TOPIC_ID
    assert futures_in(log_dirs[1]) == []
