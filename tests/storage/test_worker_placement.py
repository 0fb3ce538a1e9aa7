"""Where the dir workers run (kjbod.storage.workers.Placement): on the event loop's CPU while the process is
quiet, on every allowed CPU while it is busy, a thread the loop starts meanwhile not kept on its CPU.

The reviews are driven by hand with scripted CPU figures (no clock, no load), and each test gives the threads
every CPU back when it ends (pytest's own thread is the "event loop" here). On a machine that allows this
process one CPU, placement is not done, and the tests check that instead.
"""

from __future__ import annotations

import asyncio
import os
import threading

import live
import pytest

from kjbod.storage import workers
from kjbod.storage.fsio import LogDirIO
from kjbod.storage.workers import DirWorker, Placement

ALLOWED = os.sched_getaffinity(0)
kjbod_server_factory = live.kjbod_server_factory  # the live-server fixtures
kjbod_server = live.kjbod_server


class _Scripted(Placement):
    """A Placement whose CPU figures (seconds run and waited per second) are set by the test, and whose reviews
    run when the test says (its reviewing thread waits an hour)."""

    REVIEW_S = 3600.0

    def __init__(self) -> None:
        self.ran = self.waited = 0.0
        super().__init__()

    def _usage(self) -> tuple[float, float]:
        return self.ran, self.waited

    def review(self, loop: asyncio.AbstractEventLoop, ran: float, waited: float = 0.0) -> None:
        self._last = (self._last[0] - 1.0, *self._last[1:])  # one second passed
        self.ran += ran
        self.waited += waited
        assert self._reviewer is not None and self._reviewer.is_alive()
        self._review()


def _cpus(thread: threading.Thread | DirWorker) -> set[int]:
    native = thread._thread.native_id if isinstance(thread, DirWorker) else thread.native_id
    assert native is not None
    return os.sched_getaffinity(native)


@pytest.fixture
def aloop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()
    os.sched_setaffinity(0, ALLOWED)  # whatever a failed test left behind
    workers._loop_cpus = None


@pytest.mark.skipif(len(ALLOWED) < 2, reason="this process may use one CPU only: see test_one_cpu_is_not_placed")
def test_quiet_places_busy_spreads_quiet_places_again(aloop, worker):
    placement = _Scripted()
    try:
        assert placement.start(aloop)
        here = os.sched_getaffinity(0)
        assert len(here) == 1  # the loop's thread, on the CPU it ran on
        assert _cpus(worker) == here  # a worker started before, moved there

        placement.review(aloop, ran=0.1)  # a moderate rate: stays
        assert os.sched_getaffinity(0) == here and _cpus(worker) == here

        placement.review(aloop, ran=0.5, waited=0.4)  # wanted 90 % of the CPU once: a burst, stays
        assert os.sched_getaffinity(0) == here and _cpus(worker) == here

        placement.review(aloop, ran=0.5, waited=0.4)  # and again: every CPU back
        assert os.sched_getaffinity(0) == ALLOWED and _cpus(worker) == ALLOWED

        placement.review(aloop, ran=0.5)  # still working: spread still
        assert _cpus(worker) == ALLOWED

        placement.review(aloop, ran=0.1)  # quiet again: placed on the loop's CPU of now
        again = os.sched_getaffinity(0)
        assert len(again) == 1 and _cpus(worker) == again
    finally:
        placement.stop()
    assert os.sched_getaffinity(0) == ALLOWED and _cpus(worker) == ALLOWED


@pytest.mark.skipif(len(ALLOWED) < 2, reason="this process may use one CPU only: see test_one_cpu_is_not_placed")
def test_a_thread_started_while_placed_gets_every_cpu_back(aloop, tmp_path):
    placement = _Scripted()
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    try:
        assert placement.start(aloop)
        here = os.sched_getaffinity(0)
        later = DirWorker(LogDirIO(str(tmp_path)))  # a worker started while placed: on the loop's CPU
        other.start()  # any other thread: inherits the loop's CPU until the next review
        assert _cpus(other) == here
        placement.review(aloop, ran=0.1)
        assert _cpus(other) == ALLOWED
        assert _cpus(later) == here
        later.stop()
        later.join(5)
    finally:
        stop.set()
        other.join(5)
        placement.stop()


@pytest.mark.skipif(len(ALLOWED) < 2, reason="this process may use one CPU only: see test_one_cpu_is_not_placed")
def test_single_busy_reviews_never_spread(aloop, worker):
    placement = _Scripted()
    try:
        assert placement.start(aloop)
        here = os.sched_getaffinity(0)
        for _ in range(5):  # busy, quiet, busy, ...: never two busy reviews in a row
            placement.review(aloop, ran=0.9)
            placement.review(aloop, ran=0.1)
            assert os.sched_getaffinity(0) == here and _cpus(worker) == here
    finally:
        placement.stop()


def test_the_review_reads_the_process_cpu_and_the_loops_wait(aloop):
    placement = Placement()  # the real figures of this process
    ran, waited = placement._usage()
    spin_until = ran + 0.05
    while placement._usage()[0] < spin_until:  # this thread's CPU time is the process's
        pass
    assert placement._usage()[1] >= waited >= 0.0
    placement.stop()
    assert placement._usage()[0] > ran  # the run time still, once its /proc file is closed


def test_unplaced_leaves_the_cpus_to_the_kernel(aloop, worker, monkeypatch):
    monkeypatch.setenv(workers.WORKERS_ENV, "unplaced")
    placement = _Scripted()
    assert not placement.start(aloop)
    assert os.sched_getaffinity(0) == ALLOWED and _cpus(worker) == ALLOWED
    assert workers._loop_cpus is None


def test_no_workers_no_placement(aloop, monkeypatch):
    """KJBOD_DIR_WORKERS=0 is the single-loop path the hand-off benchmark measures against: it had no placement,
    so its loop keeps every CPU."""
    monkeypatch.setenv(workers.WORKERS_ENV, "0")
    placement = _Scripted()
    assert not placement.start(aloop)
    assert os.sched_getaffinity(0) == ALLOWED
    assert workers._loop_cpus is None


def test_one_cpu_is_not_placed(aloop, worker):
    cpu = min(ALLOWED)
    os.sched_setaffinity(0, {cpu})
    try:
        placement = _Scripted()  # this process may use one CPU: nothing to choose
        assert not placement.start(aloop)
        assert workers._loop_cpus is None
    finally:
        os.sched_setaffinity(0, ALLOWED)


@pytest.mark.skipif(len(ALLOWED) < 2, reason="this process may use one CPU only: see test_one_cpu_is_not_placed")
def test_kjbod_serve_keeps_its_event_loop_on_one_cpu_while_quiet(kjbod_server: live.LiveServer):
    assert kjbod_server.process is not None
    pid = kjbod_server.process.pid
    with open(f"/proc/{pid}/task/{pid}/status") as f:
        allowed = f.read().split("Cpus_allowed_list:")[1].split()[0]
    assert allowed.isdigit(), f"the event loop's thread may run on CPUs {allowed}, not one"


@pytest.mark.skipif(len(ALLOWED) < 2, reason="this process may use one CPU only: see test_one_cpu_is_not_placed")
def test_a_starved_loop_is_spread_at_once(aloop, worker):
    placement = _Scripted()
    try:
        assert placement.start(aloop)
        here = os.sched_getaffinity(0)
        placement.review(aloop, ran=0.1, waited=0.3)  # waited for its CPU now and then: stays
        assert os.sched_getaffinity(0) == here and _cpus(worker) == here
        placement.review(aloop, ran=0.1, waited=0.6)  # its CPU crowded by another process: every CPU back now
        assert os.sched_getaffinity(0) == ALLOWED and _cpus(worker) == ALLOWED
    finally:
        placement.stop()


class _Counted(Placement):
    REVIEW_S = 0.01

    def __init__(self) -> None:
        self.reviewed_on: list[int] = []
        super().__init__()

    def _review(self) -> None:
        self.reviewed_on.append(threading.get_native_id())
        super()._review()


@pytest.mark.skipif(len(ALLOWED) < 2, reason="this process may use one CPU only: see test_one_cpu_is_not_placed")
def test_reviews_run_on_a_thread_of_their_own_that_is_never_placed(aloop, worker):
    placement = _Counted()
    try:
        assert placement.start(aloop)
        reviewer = placement._reviewer
        assert reviewer is not None and _cpus(reviewer) == ALLOWED  # the loop's CPU may be the crowded one
        for _ in range(6000):  # a few reviews (waits for them: no timing is asserted)
            if len(placement.reviewed_on) >= 3:
                break
            threading.Event().wait(0.01)
        assert len(placement.reviewed_on) >= 3
        assert set(placement.reviewed_on) == {reviewer.native_id} != {threading.get_native_id()}
    finally:
        placement.stop()
    assert placement._reviewer is None and not reviewer.is_alive()


def _heavy(release: threading.Event, ran: list[str], name: str):
    def fn() -> str:
        release.wait(30)
        ran.append(name)
        return name

    fn.at_once = True  # type: ignore[attr-defined]  # a big Produce's closure: validated and written on the worker
    return fn


def _submit_and_pass(aloop: asyncio.AbstractEventLoop, worker: DirWorker, fns: list, answers: list) -> None:
    """``fns`` submitted on ``aloop``, then one pass of it (the hand-overs scheduled at the pass's end run)."""
    async def go() -> None:
        for fn in fns:
            worker.submit(fn, lambda ok, value: answers.append((ok, value)))
        await asyncio.sleep(0)

    aloop.run_until_complete(go())


def _answered(aloop: asyncio.AbstractEventLoop, answers: list, count: int) -> None:
    async def wait() -> None:
        while len(answers) < count:  # the inbox's callbacks (no timing is asserted)
            await asyncio.sleep(0.01)

    aloop.run_until_complete(asyncio.wait_for(wait(), 30))


@pytest.fixture
def placed(aloop):
    """A started _Scripted placement (the loop and the workers on one CPU), and the Event that lets the heavy
    closures of the test finish; both undone at teardown."""
    if len(ALLOWED) < 2:
        pytest.skip("this process may use one CPU only: see test_one_cpu_is_not_placed")
    placement = _Scripted()
    release = threading.Event()
    assert placement.start(aloop)
    yield placement, release
    release.set()
    placement.stop()


def test_heavy_work_behind_heavy_work_spreads_at_once(aloop, worker, placed):
    placement, release = placed
    ran: list[str] = []
    answers: list[tuple[bool, str]] = []
    here = os.sched_getaffinity(0)
    _submit_and_pass(aloop, worker, [_heavy(release, ran, "first")], answers)
    assert os.sched_getaffinity(0) == here and _cpus(worker) == here  # one big request alone: stays
    _submit_and_pass(aloop, worker, [_heavy(release, ran, "second")], answers)  # the first still running
    assert os.sched_getaffinity(0) == ALLOWED and _cpus(worker) == ALLOWED  # no review needed
    assert workers._loop_cpus is None
    release.set()
    _answered(aloop, answers, 2)
    assert answers == [(True, "first"), (True, "second")] and ran == ["first", "second"]  # order kept
    placement.review(aloop, ran=0.9)  # still busy: the review does not place them back
    assert _cpus(worker) == ALLOWED
    placement.review(aloop, ran=0.1)  # quiet again: placed
    assert len(os.sched_getaffinity(0)) == 1 and _cpus(worker) == os.sched_getaffinity(0)


def test_light_work_behind_heavy_work_does_not_spread(aloop, worker, placed):
    placement, release = placed
    ran: list[str] = []
    answers: list[tuple[bool, str]] = []
    here = os.sched_getaffinity(0)
    _submit_and_pass(aloop, worker, [_heavy(release, ran, "big"), lambda: ran.append("small")], answers)
    _submit_and_pass(aloop, worker, [lambda: ran.append("small again")], answers)  # held behind the big one
    assert os.sched_getaffinity(0) == here and _cpus(worker) == here
    release.set()
    _answered(aloop, answers, 3)
    assert ran == ["big", "small", "small again"]
    placement.stop()
    assert workers._placement is None  # stopped: nothing left for a hand-over to spread


def test_a_big_send_on_the_loop_spreads_at_once_a_small_one_does_not(aloop, worker, placed):
    placement, _release = placed
    here = os.sched_getaffinity(0)
    workers.loop_sends(workers.LOOP_SENDS_HEAVY - 1)  # a follower's last batches, a consumer's small fetch
    assert os.sched_getaffinity(0) == here and _cpus(worker) == here
    workers.loop_sends(workers.LOOP_SENDS_HEAVY)  # a consumer's big fetch, copied by the loop's sendfile
    assert os.sched_getaffinity(0) == ALLOWED and _cpus(worker) == ALLOWED and workers._loop_cpus is None
    workers.loop_sends(workers.LOOP_SENDS_HEAVY)  # spread already: nothing to do
    placement.review(aloop, ran=0.1)  # quiet again: placed
    assert len(os.sched_getaffinity(0)) == 1 and _cpus(worker) == os.sched_getaffinity(0)


@pytest.mark.skipif(len(ALLOWED) < 2, reason="this process may use one CPU only: see test_one_cpu_is_not_placed")
def test_kjbod_serve_answering_a_big_fetch_spreads_its_threads(kjbod_server_factory, tmp_path, monkeypatch):
    """The Fetch path tells loop_sends what it sends: a consumer's fetch of 1.5 MiB spreads the serving node,
    seen in its KJBOD_TIMELINE (a review may place it again before a look from outside could see it)."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    from tools.bench.dir_workers import read_timeline

    monkeypatch.setenv("KJBOD_TIMELINE", str(tmp_path / "timeline"))
    server = kjbod_server_factory()
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, linger_ms=50, batch_size=1 << 20,
                             max_request_size=2 << 20, acks=1)
    for _ in range(24):
        producer.send("big-fetch", b"x" * (64 << 10), partition=0)
    producer.flush()
    producer.close()
    assert server.process is not None
    status = f"/proc/{server.process.pid}/task/{server.process.pid}/status"
    for _ in range(400):  # the reviews place the quiet node again after the produce (no timing is asserted)
        with open(status) as f:
            if f.read().split("Cpus_allowed_list:")[1].split()[0].isdigit():
                break
        threading.Event().wait(0.05)
    else:
        pytest.fail("the quiet node's event loop was never placed on one CPU")
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, fetch_max_bytes=4 << 20,
                             max_partition_fetch_bytes=4 << 20, consumer_timeout_ms=10_000, enable_auto_commit=False)
    consumer.assign([TopicPartition("big-fetch", 0)])
    consumer.seek_to_beginning()
    got = sum(1 for _, _m in zip(range(24), consumer, strict=False))
    consumer.close()
    assert got == 24
    assert server.stop() == 0
    spreads = [e for e in read_timeline(tmp_path / "timeline") if e[0] == "placement review"
               and e[3] == "spread, a big send on the loop"]
    assert spreads, "no fetch spread the node's threads"
