"""KIP-858's order for KIP-113 moves, in process: the mover asks its dir assigner (the controller, through the
node's AssignmentsManager in production) to record the destination once the future log has caught up, keeps
catching up while the answer is pending, and swaps only after it; a move that ends without its swap points the
metadata back at the source, or at LOST_DIR when the source failed."""

from __future__ import annotations

import errno
import threading
from concurrent.futures import Future

import pytest

from kjbod.broker.kip113 import ReplicaMover
from kjbod.storage import fsio
from kjbod.storage.config import LogConfig
from kjbod.storage.errors import KafkaStorageError

from .conftest import TOPIC_ID, Rig, wait_for


class Assigner:
    """A fake controller: records each assignment with the dir the replica was in when it was asked, and
    answers only when the test says so."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        self.calls: list[tuple[str, int, str | None, str]] = []  # (topic, partition, dir or None, current dir)
        self.pending: list[Future[bool]] = []
        self.lock = threading.Lock()

    def __call__(self, topic: str, partition: int, log_dir: str | None) -> Future[bool]:
        answer: Future[bool] = Future()
        with self.lock:
            self.calls.append((topic, partition, log_dir, self.rig.manager.get(topic, partition).log_dir))
            self.pending.append(answer)
        return answer

    def answer(self, ok: bool = True) -> None:
        with self.lock:
            pending, self.pending = self.pending, []
        for f in pending:
            f.set_result(ok)


@pytest.fixture
def rig(log_dirs):
    r = Rig(log_dirs, LogConfig(segment_bytes=64 << 10, file_delete_delay_ms=0), threads=1, rate=None)
    r.assigner = Assigner(r)
    r.mover = ReplicaMover(r.manager, threads=1, exclusive=r._exclusive, assign_dir=r.assigner)
    r.mover.start()
    yield r
    r.assigner.answer()
    r.close()


def start_move(rig: Rig, topic: str, source: str, dest: str) -> Assigner:
    rig.manager.create_partition(topic, 0, TOPIC_ID, dir=source)
    for i in range(300):
        rig.append(topic, 0, [b"%05d" % i])
    rig.mover.request_move(topic, 0, dest)
    wait_for(lambda: rig.assigner.calls, what="the assignment of the destination")
    return rig.assigner


def future_end(rig: Rig, topic: str) -> int:
    future = rig.manager.get_future(topic, 0)
    return -1 if future is None else future.log_end_offset


def test_the_swap_waits_for_the_controller_and_the_future_keeps_catching_up(rig, log_dirs):
    assigner = start_move(rig, "order", log_dirs[0], log_dirs[1])
    # Asked once, for the destination, while the replica is still in its source.
    assert assigner.calls == [("order", 0, log_dirs[1], log_dirs[0])]
    assert rig.mover.assigned_dirs() == {("order", 0): log_dirs[1]}
    # Unanswered: appends go on in the source and the future log follows them, unswapped.
    for i in range(300, 400):
        rig.append("order", 0, [b"%05d" % i])
    wait_for(lambda: future_end(rig, "order") == 400, what="the future log catching up while unanswered")
    assert rig.manager.get("order", 0).log_dir == log_dirs[0]
    assigner.answer()
    wait_for(lambda: rig.moved("order", 0, log_dirs[1]), what="the swap")
    assert [v for _, v in rig.read_all("order", 0)] == [b"%05d" % i for i in range(400)]
    assert len(assigner.calls) == 1 and rig.mover.assigned_dirs() == {}


def test_a_cancel_after_the_assignment_points_the_metadata_back_at_the_source(rig, log_dirs):
    assigner = start_move(rig, "cancel", log_dirs[0], log_dirs[1])
    assert rig.mover.cancel("cancel", 0)
    wait_for(lambda: len(assigner.calls) == 2, what="the revert")
    assert assigner.calls[1] == ("cancel", 0, log_dirs[0], log_dirs[0])
    wait_for(lambda: rig.mover.progress("cancel", 0) is None, what="the cancel")
    assert rig.manager.get("cancel", 0).log_dir == log_dirs[0]


def test_a_destination_failing_before_the_swap_reverts_the_assignment(rig, log_dirs):
    assigner = start_move(rig, "dest", log_dirs[0], log_dirs[1])
    fsio.inject(log_dirs[1], errno.EIO, ops={"write", "copy", "fsync", "open", "rename"})
    rig.append("dest", 0, [b"unwritten"])  # the catch-up has to write it into the failed destination
    wait_for(lambda: len(assigner.calls) == 2, what="the revert")
    assert assigner.calls[1] == ("dest", 0, log_dirs[0], log_dirs[0])
    assigner.answer()
    wait_for(lambda: rig.mover.progress("dest", 0) is None, what="the abort")
    assert rig.manager.get("dest", 0).log_dir == log_dirs[0]
    assert rig.append("dest", 0, [b"after"]) == 301  # the source serves on


@pytest.mark.parametrize("found_by", ["the catch-up", "a produce"])
def test_a_source_failing_after_the_assignment_reports_the_replica_lost(rig, log_dirs, found_by):
    assigner = start_move(rig, "src", log_dirs[0], log_dirs[1])
    if found_by == "the catch-up":
        fsio.inject(log_dirs[0], errno.EIO, ops={"read", "copy", "open"})
        rig.append("src", 0, [b"unread"])  # the catch-up has to read it from the failed source
    else:  # the move has nothing new to read: it learns of the failure from the dir's state
        fsio.inject(log_dirs[0], errno.EIO)
        with pytest.raises(KafkaStorageError):
            rig.append("src", 0, [b"unwritten"])
    wait_for(lambda: len(assigner.calls) == 2, what="the LOST_DIR report")
    assert assigner.calls[1][:3] == ("src", 0, None)
    assert log_dirs[0] not in rig.manager.online_dirs


def test_a_destination_failed_by_something_else_reverts_the_assignment(rig, log_dirs):
    assigner = start_move(rig, "dest2", log_dirs[0], log_dirs[1])
    rig.manager.create_partition("bystander", 0, TOPIC_ID, dir=log_dirs[1])
    fsio.inject(log_dirs[1], errno.EIO)
    with pytest.raises(KafkaStorageError):
        rig.append("bystander", 0, [b"unwritten"])  # a produce to another partition finds the failure
    wait_for(lambda: len(assigner.calls) == 2, what="the revert")
    assert assigner.calls[1] == ("dest2", 0, log_dirs[0], log_dirs[0])


def test_an_assignment_that_ends_unconfirmed_is_asked_again_before_the_swap(rig, log_dirs):
    assigner = start_move(rig, "again", log_dirs[0], log_dirs[1])
    assigner.answer(False)  # replaced or refused, while the move still stands
    wait_for(lambda: len(assigner.calls) == 2, what="the second request")
    assert assigner.calls[1] == ("again", 0, log_dirs[1], log_dirs[0])
    assert rig.manager.get("again", 0).log_dir == log_dirs[0]  # not swapped on a refusal
    assigner.answer()
    wait_for(lambda: rig.moved("again", 0, log_dirs[1]), what="the swap")
