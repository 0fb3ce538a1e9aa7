"""What else runs on each log dir's worker, in process through the fsio seam: a follower's appends of what it
fetched, partition creation and deletion, and the KIP-113 mover's final step. One dir is held while the others
are shown to keep going; no test waits for a clock (a hold lasts until released, and the watchdog's clock runs an
hour ahead when a stall is wanted).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from types import SimpleNamespace

from structlog.testing import capture_logs

from kjbod.broker.replication import ReplicationConfig
from kjbod.broker.replication.fetcher import Fetcher, FetchState
from kjbod.protocol.generated.fetch_response import FetchableTopicResponse, FetchResponse
from kjbod.protocol.generated.fetch_response import PartitionData as FetchPart
from kjbod.storage import fsio
from tests.replication.conftest import batch
from tests.storage.conftest import kp_batch, kp_records
from tests.storage.test_dir_health import AN_HOUR, PATIENCE_S, _ahead, _held_in, _wait_for


async def _until(what: str, cond) -> None:
    """Awaits ``cond()`` with the event loop free meanwhile (the worker's answers reach it)."""
    deadline = time.monotonic() + PATIENCE_S
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(0.005)


class _FollowerNode:
    """What a fetcher asks of its node: the logs, the image (topic ids), its id and epoch, the append wake-up."""

    def __init__(self, lm) -> None:
        self.logs = SimpleNamespace(manager=lm)
        self.node_id, self.broker_epoch = 2, 7
        topics = {name: SimpleNamespace(name=name, topic_id=uuid.UUID(int=i + 1)) for i, name in enumerate("abc")}
        self.metadata = SimpleNamespace(topic=topics.get, topic_by_id=lambda tid: None)
        self.appends = 0

    def notify_append(self, topic: str, partition: int) -> None:
        self.appends += 1


def _online(plog):
    return plog if plog is not None and plog.online else None


def _follower(lm, followed: str) -> Fetcher:
    manager = SimpleNamespace(node=_FollowerNode(lm), config=ReplicationConfig(),
                              _local_log=lambda t, p: _online(lm.find(t, p)),  # as ReplicaManager._local_log
                              follower_throttled=lambda topic, partition, in_sync: False,  # no throttle here
                              follower_appended=lambda topic, partition, nbytes: None)
    fetcher = Fetcher(manager, 1, 0)
    for name in followed:
        fetcher.partitions[(name, 0)] = FetchState(name, 0, 0)
    return fetcher


def _leader_answer(records: dict[str, bytes], hw: int) -> FetchResponse:
    return FetchResponse(responses=[FetchableTopicResponse(topic=name, partitions=[
        FetchPart(partition_index=0, high_watermark=hw, log_start_offset=0, records=data)])
        for name, data in records.items()])


def _fetch_offsets(fetcher: Fetcher) -> dict[str, int]:
    request = fetcher._request(fetcher.ready(0.0), 12)
    return {t.topic: t.partitions[0].fetch_offset for t in request.topics} if request is not None else {}


def test_a_followers_partitions_on_healthy_dirs_keep_advancing_while_one_dir_is_held(spread, log_dirs):
    bad = log_dirs[2]
    fetcher = _follower(spread, "ac")
    a, c = spread.get("a", 0), spread.get("c", 0)

    async def scenario():
        rule = fsio.slow(bad, hold=True, ops={"write"})
        try:
            fetcher._process(_leader_answer({"a": batch(2, epoch=0), "c": batch(2, epoch=0)}, hw=2), 12)
            await _until("a-0's append on its worker", lambda: a.log_end_offset == 2)
            await _until("c-0's append to block", lambda: _held_in(spread.dir_io(bad), "write"))
            # c-0 is still on its worker: the next fetch leaves it out (its LEO would be stale), a-0 goes on.
            assert fetcher.partitions[("c", 0)].in_flight and c.log_end_offset == 0
            assert _fetch_offsets(fetcher) == {"a": 2}
            fetcher._process(_leader_answer({"a": batch(3, epoch=0, base_offset=2)}, hw=5), 12)
            await _until("a-0's second append", lambda: a.log_end_offset == 5)
            assert (a.high_watermark, fetcher.partitions[("a", 0)].leader_end_offset) == (5, 5)
        finally:
            rule.release()
        await _until("c-0's append once its dir moves", lambda: not fetcher.partitions[("c", 0)].in_flight)
        assert (c.log_end_offset, c.high_watermark) == (2, 2)
        assert _fetch_offsets(fetcher) == {"a": 5, "c": 2}

    asyncio.run(scenario())
    assert fetcher.node.appends == 3


def test_a_follower_partition_on_a_stalled_dir_fails_with_the_dir_and_the_others_go_on(spread, log_dirs):
    good, _, bad = log_dirs
    fetcher = _follower(spread, "ac")
    a = spread.get("a", 0)

    async def scenario():
        rule = fsio.slow(bad, hold=True, ops={"write"})
        try:
            fetcher._process(_leader_answer({"a": batch(1, epoch=0), "c": batch(1, epoch=0)}, hw=1), 12)
            await _until("c-0's append to block", lambda: _held_in(spread.dir_io(bad), "write"))
            _ahead(spread.watchdog, AN_HOUR)
            with capture_logs() as logs:
                assert spread.watchdog.check() == [bad]
                await _until("c-0's answer to fail with its dir", lambda: fetcher.partitions[("c", 0)].dropped)
            assert [e["topic"] for e in logs if e["event"] == "replica_fetch_append_failed"] == ["c"]
            fetcher._process(_leader_answer({"a": batch(1, epoch=0, base_offset=1)}, hw=2), 12)
            await _until("a-0's appends", lambda: a.log_end_offset == 2)
            assert _fetch_offsets(fetcher) == {"a": 2}
        finally:
            rule.release()

    asyncio.run(scenario())
    assert bad not in spread.online_dirs and good in spread.online_dirs


def test_a_truncation_is_ordered_with_the_appends_on_the_same_worker(spread):
    """A DivergingEpoch answer right behind an append of the same partition: the worker runs them in order."""
    fetcher = _follower(spread, "a")
    a = spread.get("a", 0)
    diverging = _leader_answer({"a": b""}, hw=3)
    diverging.responses[0].partitions[0].diverging_epoch.epoch = 0
    diverging.responses[0].partitions[0].diverging_epoch.end_offset = 3

    async def scenario():
        fetcher._process(_leader_answer({"a": batch(3, epoch=0) + batch(4, epoch=1, base_offset=3)}, hw=3), 12)
        fetcher.partitions[("a", 0)].in_flight = False  # as if the fetcher had not waited: the order is the worker's
        fetcher._process(diverging, 12)
        await _until("both answers applied", lambda: not fetcher.partitions[("a", 0)].in_flight
                     and a.log_end_offset == 3)

    asyncio.run(scenario())
    assert a.leader_epochs.entries == [(0, 0)]


def test_a_kip113_move_between_healthy_dirs_completes_while_a_third_is_held(spread, log_dirs):
    """The final catch-up and swap run on the source dir's worker (where the partition's appends run), with no
    event loop involved, while another dir's operations are held."""
    import threading

    from kjbod.broker.kip113 import ReplicaMover

    src, dest, bad = log_dirs
    a = spread.get("a", 0)
    a.append(kp_batch([b"one", b"two"]))
    swapped_on: list[str] = []
    swap = spread.replace_current_with_future

    def recording_swap(*args, **kw):
        swapped_on.append(threading.current_thread().name)
        return swap(*args, **kw)

    spread.replace_current_with_future = recording_swap
    on_loop: list[str] = []  # the node's run_exclusive (its event loop) would be asked here: it must not be

    def exclusive(fn):
        on_loop.append(threading.current_thread().name)
        return fn()

    mover = ReplicaMover(spread, threads=1, exclusive=exclusive, by_dir_worker=True)
    mover.start()
    rule = fsio.slow(bad, hold=True)
    try:
        blocked = threading.Thread(target=lambda: spread.get("c", 0).append(kp_batch([b"c"])), daemon=True)
        blocked.start()
        _wait_for("c-0's append to block", lambda: spread.dir_io(bad).oldest_outstanding() is not None)
        assert mover.request_move("a", 0, dest) is None
        _wait_for("the move to finish", lambda: mover.destination("a", 0) is None)
        moved = spread.get("a", 0)
        assert moved.log_dir == dest and moved.log_end_offset == 2
        assert swapped_on == [f"kjbod-dir-worker {src}"] and on_loop == []
        assert spread.dir_io(bad).oldest_outstanding() is not None  # still held: nothing waited for it
    finally:
        rule.release()
        mover.stop()
    assert [v for _, v, _ in kp_records(moved.read_bytes(0, 1 << 20))] == [b"one", b"two"]


def _adapter(lm):
    """The node's storage adapter over ``lm``, with what partition creation asks of the node."""
    from kjbod.broker.storage_glue import StorageAdapter
    from kjbod.storage.config import LogConfig

    node = SimpleNamespace(log_defaults=LogConfig(), mover=None)
    node.logs = StorageAdapter(node, lm)
    return node.logs


def test_a_create_on_a_healthy_dir_completes_while_a_create_on_a_held_dir_waits(spread, log_dirs):
    from kjbod.storage.errors import KafkaStorageError

    bad = log_dirs[2]
    adapter = _adapter(spread)
    adapter.preferred_dirs[("held", 0)] = bad  # as AlterReplicaLogDirs asks before the partition arrives

    async def scenario():
        rule = fsio.slow(bad, hold=True)
        try:
            held = asyncio.ensure_future(adapter.create_partitions_on_workers("held", uuid.UUID(int=8), [0], {}))
            await _until("the held dir's create to block", lambda: spread.dir_io(bad).oldest_outstanding())
            made = await adapter.create_partitions_on_workers("fresh", uuid.UUID(int=9), [0, 1], {})
            assert sorted(made) == [0, 1] and all(isinstance(d, uuid.UUID) for d in made.values())
            assert {spread.get("fresh", p).log_dir for p in (0, 1)} <= set(log_dirs[:2])  # placed where answered
            assert not held.done() and spread.find("held", 0) is None
            _ahead(spread.watchdog, AN_HOUR)
            assert spread.watchdog.check() == [bad]
            failed = await held  # failed with its dir, at once
            assert isinstance(failed[0], KafkaStorageError) and spread.find("held", 0) is None
        finally:
            rule.release()

    asyncio.run(scenario())
    assert spread.get("fresh", 0).read_bytes(0, 100) == b""


def test_a_delete_frees_the_name_at_once_and_renames_on_the_dirs_worker(spread, log_dirs):
    import os
    import threading

    good, _, bad = log_dirs
    adapter = _adapter(spread)
    gone = spread.get("a", 0)
    renamed_on: list[str] = []
    retire = spread.retire_detached

    def recording_retire(plog):
        renamed_on.append(threading.current_thread().name)
        retire(plog)

    spread.retire_detached = recording_retire

    async def scenario():
        rule = fsio.slow(bad, hold=True)
        try:
            adapter.preferred_dirs[("held", 0)] = bad
            blocked = asyncio.ensure_future(adapter.create_partitions_on_workers("held", uuid.UUID(int=8), [0], {}))
            await _until("the held dir's create to block", lambda: spread.dir_io(bad).oldest_outstanding())
            adapter.delete_topic_partitions("a", [0])
            assert spread.find("a", 0) is None  # the name is free before any file work
            made = await adapter.create_partitions_on_workers("a", uuid.UUID(int=10), [0], {})
            assert isinstance(made[0], uuid.UUID) and spread.get("a", 0) is not gone
            await _until("the old a-0 renamed", lambda: any(n.endswith("-delete") for n in os.listdir(good)))
            blocked.cancel()
        finally:
            rule.release()

    asyncio.run(scenario())
    assert renamed_on == [f"kjbod-dir-worker {good}"] and gone.closed


def test_strays_found_by_a_running_node_are_renamed_by_their_dirs_workers(spread, log_dirs):
    """A broker far behind gets a snapshot whose image no longer has a-0, b-0, c-0: each is out of service at
    once and renamed -stray by its own dir's worker; the held dir's rename waits for that dir alone."""
    import os

    from kjbod.broker.storage_glue import reconcile

    bad = log_dirs[2]
    node = SimpleNamespace(node_id=1, metadata=SimpleNamespace(topics=lambda: []))
    rule = fsio.slow(bad, hold=True)
    try:
        reconcile(node, spread, on_workers=True)
        assert [spread.find(n, 0) for n in "abc"] == [None, None, None]
        _wait_for("the strays renamed in the healthy dirs", lambda: len(spread.stray_dirs()) == 2)
        assert all(os.path.basename(p).endswith("-stray") and os.path.exists(p) for p in spread.stray_dirs())
        assert sorted(os.path.dirname(p) for p in spread.stray_dirs()) == log_dirs[:2]
        assert "c-0" in os.listdir(bad)  # its dir's worker is held: nothing waited for it
    finally:
        rule.release()
    _wait_for("the held dir's stray renamed", lambda: "c-0" not in os.listdir(bad))


def test_a_partition_refollowed_while_its_answer_is_on_the_worker_waits_for_it(spread, log_dirs):
    """A new leader epoch replaces the partition's fetch state: it is not fetched before the old answer is in."""
    bad = log_dirs[2]
    fetcher = _follower(spread, "ac")

    async def scenario():
        rule = fsio.slow(bad, hold=True, ops={"write"})
        try:
            fetcher._process(_leader_answer({"c": batch(2, epoch=0)}, hw=2), 12)
            await _until("c-0's append to block", lambda: _held_in(spread.dir_io(bad), "write"))
            fetcher.add(("c", 0), 1)
            assert _fetch_offsets(fetcher) == {"a": 0}
        finally:
            rule.release()
        await _until("the old answer applied", lambda: not fetcher.partitions[("c", 0)].in_flight)
        assert _fetch_offsets(fetcher) == {"a": 0, "c": 2}

    asyncio.run(scenario())


def test_jobs_handed_to_their_dirs_workers_on_the_loop_come_back_as_futures(spread, log_dirs):
    """The one hand-off both a delete's renames and a stray's use: a future per job, done once it ran (or failed:
    logged, the future still done), on the log's own dir's worker."""
    import threading

    from kjbod.broker.storage_glue import _on_their_workers

    logs = [spread.get(n, 0) for n in "abc"]
    ran: dict[str, str] = {}

    def job(plog):
        ran[plog.name] = threading.current_thread().name
        if plog.name == "c-0":
            raise OSError("a job that fails")

    async def scenario():
        with capture_logs() as logs_seen:
            futures = _on_their_workers(spread, logs, job, "test")
            assert len(futures) == 3
            await asyncio.wait_for(asyncio.gather(*futures), PATIENCE_S)
        assert [e["what"] for e in logs_seen if e["event"] == "dir_worker_job_failed"] == ["test c-0"]

    asyncio.run(scenario())
    assert ran == {f"{n}-0": f"kjbod-dir-worker {d}" for n, d in zip("abc", log_dirs, strict=True)}


class _ReplicaNode:
    """What the replica manager and the OffsetForLeaderEpoch handler ask of broker 1: its logs are ``lm``'s."""

    def __init__(self, lm, image) -> None:
        self.node_id, self.broker_epoch = 1, 7
        self.metadata = image
        self.config = SimpleNamespace(listeners=[], controller_listener_names=())
        self.logs = SimpleNamespace(manager=lm)
        self.replication = None

    def partition_log(self, topic: str, partition: int):
        return self.logs.manager.get(topic, partition)

    def leader_epoch(self, topic: str, partition: int) -> int:
        return self.replication.leader_epoch(topic, partition)

    def notify_append(self, topic: str, partition: int) -> None:
        pass

    def notify_high_watermark(self, topic: str, partition: int) -> None:
        pass


def test_leader_epochs_are_read_and_a_new_one_recorded_while_the_logs_dir_is_held(spread, log_dirs):
    """c-0 (on the held dir) is followed here, a fetched append of it holds its log in a write on its dir's
    worker. On the event loop meanwhile: the next fetch request is built (LastFetchedEpoch), the leadership
    moves here (an image delta: a new leader epoch in the cache at once), a follower's fetch is checked and
    OffsetForLeaderEpoch answered from it; none waits for the dir. Once it moves, the epoch starts after the
    append that was ahead of it and its file is written on the worker."""
    import threading
    from pathlib import Path

    from kjbod.broker.handlers import offset_for_leader_epoch
    from kjbod.broker.replication import ReplicaManager
    from kjbod.metadata import EMPTY_IMAGE, MetadataDelta, replay
    from kjbod.protocol.generated import OffsetForLeaderEpochRequest, PartitionChangeRecord
    from kjbod.protocol.generated.offset_for_leader_epoch_request import (
        OffsetForLeaderPartition,
        OffsetForLeaderTopic,
    )
    from kjbod.storage.epoch_cache import LEADER_EPOCH_CHECKPOINT
    from tests.metadata.test_replay import T1, topic
    from tests.storage.test_dir_health import _Blocked

    bad = log_dirs[2]
    c = spread.get("c", 0)
    c.auto_high_watermark = False  # a replica's log (as the replica manager makes it)
    c.append_as_follower(batch(2, epoch=0))
    epochs_file = Path(c.dir, LEADER_EPOCH_CHECKPOINT)
    assert epochs_file.read_text() == "0\n1\n0 0\n"
    node = _ReplicaNode(spread, replay(EMPTY_IMAGE, topic(tid=T1, name="c", partitions=1, replicas=(2, 1), dirs=())))
    held_phase_done = threading.Event()

    async def scenario():
        manager = node.replication = ReplicaManager(node, ReplicationConfig())
        try:
            manager.sync(node.metadata)  # broker 1 follows c-0, led by broker 2
            answered: list[bool] = []
            spread.worker(bad).submit(lambda: c.append_as_follower(batch(1, epoch=0, base_offset=2)),
                                      lambda ok, value: answered.append(ok))
            await _until("c-0's append to hold its log in a write",
                         lambda: _held_in(spread.dir_io(bad), "write") and c.lock.locked())
            (fetcher,) = manager.fetchers.fetchers.values()
            request = fetcher._request(fetcher.ready(0.0), 12)
            part = request.topics[0].partitions[0]
            assert (part.fetch_offset, part.last_fetched_epoch) == (2, 0)

            delta = MetadataDelta(node.metadata)
            delta.replay(PartitionChangeRecord(partition_id=0, topic_id=T1, leader=1))
            node.metadata = delta.apply()
            manager.sync(node.metadata, delta.changed_partitions(), delta.removed_topics.values())
            assert manager.leader_epoch("c", 0) == 1 and c.leader_epochs.entries == [(0, 0), (1, 2)]
            check = manager.check_follower_fetch("c", 0, 2, -1, 1, 2, 0)
            assert (check.error_code, check.diverging) == (0, None)
            answer = offset_for_leader_epoch.handle(node, None, OffsetForLeaderEpochRequest(topics=[
                OffsetForLeaderTopic(topic="c", partitions=[
                    OffsetForLeaderPartition(partition=0, current_leader_epoch=1, leader_epoch=0)])]))
            found = answer.topics[0].partitions[0]
            assert (found.error_code, found.leader_epoch, found.end_offset) == (0, 0, 2)
            assert epochs_file.read_text() == "0\n1\n0 0\n" and not answered  # the dir still held
            held_phase_done.set()
            await _until("the held append, then the epoch settled on the worker",
                         lambda: answered == [True] and epochs_file.read_text() == "0\n2\n0 0\n1 3\n")
            assert c.leader_epochs.entries == [(0, 0), (1, 3)]  # it starts after the append ahead of it
        finally:
            await manager.close()

    rule = fsio.slow(bad, hold=True, ops={"write"})
    try:
        run = _Blocked(lambda: asyncio.run(scenario()))
        _wait_for("the event loop's steps while the dir is held (a wait here: one waited for the dir)",
                  lambda: held_phase_done.is_set() or not run.thread.is_alive())
    finally:
        rule.release()
    run.join()
    if run.error is not None:
        raise run.error
