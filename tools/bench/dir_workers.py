"""Per-dir workers benchmark: what the hand-off to a log dir's worker costs, and what it buys when a disk is bad.

Every figure is a ratio against a reference measured in the same run, variants interleaved round by round:

* **Hand-off cost**: `kjbod serve` processes side by side, one with the per-dir workers (the default) and one
  with ``KJBOD_DIR_WORKERS=0`` (every append and read on the event loop, the path before the workers), and a
  third with the workers where the kernel puts them (``KJBOD_DIR_WORKERS=unplaced``: what keeping them on the
  event loop's CPU while quiet buys, workers.Placement). Four loads on each: Produce of 1 MiB batches, 8 in
  flight (throughput; target >= 95 %; MIB_SAMPLES_PER_ROUND samples of MIB_COUNT MiB per round and server, the
  servers taking turns sample by sample in rotating order, each sample after an untimed ``os.sync()`` so none pays
  for the writeback of another's dirty pages; every sample's MiB/s is printed. Where its CPU went was measured on
  tmpfs, outside this bench: perf per request, and each thread's CPU and run-queue time from /proc's schedstat,
  with the servers interleaved as here); Produce of small batches (four
  1 KiB records) at the highest rate the load generator reaches (32 connections x 16 in flight; target >= 85 %);
  a consumer fetching three partitions, one per dir, zero-copy (target >= 95 %; FETCH_ROUNDS_PER_ROUND fetch
  rounds per round, each consuming every server's backlog of 48 MiB FETCH_PASSES times, the servers interleaved
  pass by pass, since one pass is only 20-30 ms; how many hand-offs to a worker the fetches made is counted from
  the servers' KJBOD_TIMELINE); Produce p99 latency at a fixed moderate rate (500 requests/s of one small batch, after half a second
  unmeasured; target <= 1.2x), in a phase of its own after the loads, P99_ROUNDS_PER_ROUND rounds for each of
  theirs, with a fourth server in that phase, the workers without the dirs' native append writers
  (``KJBOD_NATIVE_APPENDS=0``: every append handed to the worker). The throughput figures and the p99 are
  taken on servers as an operator runs them; the Fetch on a
  second set recording KJBOD_TIMELINE, which its explanation needs, and the p99's tail is explained from rounds
  of that second set taking turns with the first's (the record costs the workers path more CPU per request than
  the loop path: the output gives the small-batch rate and the p99 on both sets).
* **Why, where a target is missed**, in the same run: the server's CPU time per request under the small-batch
  load (from /proc; the ratio is the throughput each would reach with the CPU to itself, which is what a
  machine shared with other work leaves of the wall-clock ratio), and the bare cost of a hand-off on this
  machine, leg by leg: a closure sent to a real `DirWorker` at the moderate rate, the loop asleep in between
  (median and p99 of: to the worker, back to the loop, the whole), with the two threads on one CPU and where the
  kernel puts them, against the median Produce latency at that rate. A Produce handed to a worker pays that
  round trip once (two thread wake-ups) on top of the loop path's time.
* **Isolation**: one server, three dirs, ``KJBOD_FAULTS`` naming the third dir: a steady 200 msg/s producer
  (acks=1) and a consumer on partitions of the two healthy dirs, another producer writing to the bad dir. Produce
  p99 on the healthy dirs with the bad dir at 200 ms per operation, and with it hung (every operation held for
  an hour, the stall timeout off so it stays hung), against the same server with no fault. Target <= 2x both.

`python -m tools.bench.dir_workers [--quick] [--p99 | --fetch]`; `run()` returns the ratios. ``--fetch`` runs the
Fetch phase alone (15 rounds; ``KJBOD_BENCH_BEFORE=<a kjbod checkout>`` adds that code's servers to its rounds),
with what a fetch cost each server: CPU and run-queue time of the event loop and of the other threads, wake-ups,
system calls, the consumer's CPU, and whether Placement held the loop to one CPU.
"""

from __future__ import annotations

import bisect
import gc
import itertools
import json
import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from . import nowait_probe
from .common import heading, median, verdict
from .datapath import (
    BenchServer,
    Connection,
    consume,
    create_topic,
    exact_batch,
    one_mib_batch,
    process_cpu,
    produce_frame,
    produce_pipelined,
)
from .server import CONNECTIONS, build_loadgen, load_frames

SMALL_RECORDS = 4  # records of 1 KiB in a "small batch"
MODERATE_RATE = 500  # Produce requests per second for the p99 comparison
# p99 rounds per round of the whole hand-off bench (bench_handoff): a round's p99 ratio swings 1.1x-1.9x with this
# machine's other work, and the p99 rounds used to follow each round's load at the highest rate on the same server
# (5 rounds: 1.43x where 15 rounds of --p99 within the hour gave 1.20x).
P99_ROUNDS_PER_ROUND = 3
ISOLATION_RATE = 200  # msg/s of the healthy-dir producer, as the table
# The 1 MiB Produce samples (mib_samples): a sample of 32 MiB, one per round, swung 76-118 % against the loop path
# from run to run, the disk's writeback of one server's sample landing on the next; now each sample starts after a
# sync, and there are three times as many, each of 48 MiB.
MIB_SAMPLES_PER_ROUND = 3
MIB_COUNT = 48


def small_batch() -> bytes:
    return exact_batch(SMALL_RECORDS * 1100, SMALL_RECORDS)


def paced_produce(port: int, topic: str, partition: int, rate: float, seconds: float, batch: bytes,
                  stop: threading.Event | None = None, sent: list[float] | None = None) -> list[float]:
    """Latencies (s) of one Produce at a time sent every 1/rate s for `seconds` (acks=1); each one's send time
    (perf_counter) is appended to `sent` when given."""
    frame = produce_frame(topic, partition, batch)
    conn = Connection(port)
    latencies: list[float] = []
    try:
        start = time.perf_counter()
        n = 0
        while True:
            due = start + n / rate
            now = time.perf_counter()
            if now - start >= seconds or (stop is not None and stop.is_set()):
                break
            if due > now:
                time.sleep(due - now)
            t0 = time.perf_counter()
            conn.sock.sendall(frame)
            conn.read_frame()
            latencies.append(time.perf_counter() - t0)
            if sent is not None:
                sent.append(t0)
            n += 1
    finally:
        conn.close()
    return latencies


def p99(xs: list[float]) -> float:
    return quantile(xs, 0.99)


def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))]


def thread_usage(pid: int) -> dict[str, tuple[float, int]]:
    """Per kind of thread of a server ("loop": the event loop's, the process's main thread; "workers": every
    other thread together, which under a Produce load are the dir workers, the rest sleeping): CPU seconds and
    voluntary context switches (each one a sleep, so a wake-up) so far. (Python does not name OS threads.)"""
    out: dict[str, tuple[float, int]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                status = f.read()
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        kind = "loop" if tid == str(pid) else "workers"
        fields = stat.rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        switches = int(status.split("\nvoluntary_ctxt_switches:")[1].split()[0])
        before = out.get(kind, (0.0, 0))
        out[kind] = (before[0] + cpu, before[1] + switches)
    return out


def worker_round_trips(directory: Path, placed: bool, count: int = 500) -> dict[str, list[float]]:
    """One closure at a time sent to a real DirWorker and answered on a (uvloop) event loop, at MODERATE_RATE
    (the loop asleep in between, as a server's at that rate): the bare cost of a hand-off on this machine, in
    seconds per leg: "to worker" (submitted on the loop -> running on the worker: the loop's pass ends, the
    worker is woken and takes the GIL), "to loop" (worker -> the answer's callback on the loop: the loop is
    woken through its eventfd and takes the GIL) and "whole". ``placed``: the loop's thread and the worker on
    one CPU, as ``kjbod serve`` keeps them while quiet (workers.Placement); else where the kernel puts them."""
    import asyncio

    from kjbod.server.app import new_event_loop
    from kjbod.storage.fsio import LogDirIO
    from kjbod.storage.workers import DirWorker, Placement

    directory.mkdir(parents=True, exist_ok=True)
    legs: dict[str, list[float]] = {"to worker": [], "to loop": [], "whole": []}

    async def measure() -> None:
        loop = asyncio.get_running_loop()
        placement = Placement()
        if placed:
            placement.start(loop)
        worker = DirWorker(LogDirIO(str(directory)))
        try:
            for _ in range(count):
                answered: asyncio.Future[None] = loop.create_future()
                started: list[float] = []

                def fn(started: list[float] = started) -> None:
                    started.append(time.perf_counter())

                def done(_ok: bool, _value: object, answered: asyncio.Future[None] = answered) -> None:
                    answered.set_result(None)

                t0 = time.perf_counter()
                worker.submit(fn, done, loop)
                await answered
                t1 = time.perf_counter()
                legs["to worker"].append(started[0] - t0)
                legs["to loop"].append(t1 - started[0])
                legs["whole"].append(t1 - t0)
                await asyncio.sleep(1 / MODERATE_RATE)
        finally:
            worker.stop()
            worker.join(5)
            placement.stop()  # this process's threads get every CPU back

    loop = new_event_loop()
    try:
        loop.run_until_complete(measure())
    finally:
        loop.close()
    return legs


WRITE_BYTES = 4_400  # about one small batch's append (four 1 KiB records and their framing)


def write_round_trips(directory: Path, blocks: int = 6, per_block: int = 100) -> tuple[dict[str, list[float]], str]:
    """The same write of WRITE_BYTES to an ext4 file, from a (uvloop) event loop at MODERATE_RATE, four ways
    taking turns block by block: on the loop itself ("inline", the loop path's append), handed to a DirWorker on
    the loop's CPU as ``kjbod serve`` places it while quiet ("worker"), handed to a thread that runs no Python
    ("native", native_handoff.c: the loop waits for it with the GIL released, and the thread starts on the loop's
    CPU as the worker does), and handed to the kernel through io_uring ("kernel": ext4 takes no buffered write
    that must not wait, so the kernel passes it to a thread of its own and rings an eventfd the loop watches).
    Seconds from the call to its answer on the loop (the callback that receives it, where a server answers; the
    synchronous ways have none); and why "native" or "kernel" is missing where it is."""
    import asyncio

    from kjbod.server.app import new_event_loop
    from kjbod.storage.fsio import LogDirIO
    from kjbod.storage.workers import DirWorker, Placement

    from .native_handoff import NativeWriter, open_writer
    from .uring import open_ring

    directory.mkdir(parents=True, exist_ok=True)
    ring, why = open_ring()
    took: dict[str, list[float]] = {"inline": [], "worker": [], "native": [], **({"kernel": []} if ring else {})}
    whys = {"kernel": why}
    native: list[NativeWriter] = []
    data = os.urandom(WRITE_BYTES)

    async def measure() -> None:
        loop = asyncio.get_running_loop()
        placement = Placement()
        placement.start(loop)
        worker = DirWorker(LogDirIO(str(directory)))
        writer, whys["native"] = open_writer()  # after placement: its thread starts on the loop's CPU
        if writer is None:
            del took["native"]
        else:
            native.append(writer)
        fd = os.open(directory / "writes", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        waiting: dict[int, asyncio.Future[int]] = {}
        answered_at: dict[int, float] = {}

        def completions() -> None:
            assert ring is not None
            try:
                os.eventfd_read(ring.eventfd)
            except BlockingIOError:
                return
            for user_data, res in ring.reap():
                answered_at[user_data] = time.perf_counter()
                waiting.pop(user_data).set_result(res)

        if ring:
            loop.add_reader(ring.eventfd, completions)
        at = 0
        try:
            for n in range(blocks * per_block * len(took)):
                kind = list(took)[n // per_block % len(took)]
                t0 = time.perf_counter()
                if kind == "inline":
                    written = os.pwrite(fd, data, at)
                elif kind == "worker":
                    answer: asyncio.Future[int] = loop.create_future()
                    def done(_ok: bool, value: int, answer: asyncio.Future[int] = answer, n: int = n) -> None:
                        answered_at[n] = time.perf_counter()
                        answer.set_result(value)

                    worker.submit(lambda at=at: os.pwrite(fd, data, at), done, loop)
                    written = await answer
                elif kind == "native":
                    written = native[0].pwrite(fd, data, at)
                else:
                    assert ring is not None
                    waiting[n] = answer = loop.create_future()
                    ring.write(fd, data, at, n)
                    written = await answer
                # Until the answer's callback: what a server pays (it answers there), not the bench's future and task.
                took[kind].append(answered_at.pop(n, time.perf_counter()) - t0)
                assert written == WRITE_BYTES, (kind, written)
                at = (at + WRITE_BYTES) % (64 << 20)
                await asyncio.sleep(1 / MODERATE_RATE)
        finally:
            if ring:
                loop.remove_reader(ring.eventfd)
                ring.close()
            os.close(fd)
            worker.stop()
            worker.join(5)
            placement.stop()

    loop = new_event_loop()
    try:
        loop.run_until_complete(measure())
    finally:
        loop.close()
    return took, "; ".join(f"the {k} comparison did not run: {w}" for k, w in whys.items() if w)


def report_write_floor(directory: Path) -> dict:
    """Print what a write costs on the loop, through a DirWorker, through a thread that runs no Python and through
    a kernel thread (io_uring): how much of the hand-off's price is the two wake-ups any second thread costs and
    how much the workers' Python and the GIL."""
    took, why = write_round_trips(directory)

    def fig(kind: str) -> str:
        return f"{quantile(took[kind], 0.5) * 1e6:.0f}/{quantile(took[kind], 0.99) * 1e6:.0f}"

    inline, worker = (median(took[k]) * 1e6 for k in ("inline", "worker"))
    parts = [f"on the loop {fig('inline')}", f"through a DirWorker {fig('worker')}"]
    if "native" in took:
        parts.append(f"through a thread running no Python on the loop's CPU {fig('native')}")
    if "kernel" in took:
        parts.append(f"through a kernel thread (io_uring, no thread of kjbod's) {fig('kernel')}")
    print(f"   Why: a {WRITE_BYTES:,}-byte append's write at {MODERATE_RATE}/s from the event loop, median/p99 us: "
          + ", ".join(parts) + (f" ({why})" if why else ""))
    out: dict = {}
    if "kernel" in took:
        out["write_kernel_thread_vs_worker"] = median(took["kernel"]) / median(took["worker"])
    if "native" in took:
        native = median(took["native"]) * 1e6
        out["write_native_thread_vs_worker"] = native / worker
        print(f"     Of the {worker - inline:.0f} us the DirWorker adds to the write at the median, {native - inline:.0f} "
              f"are the two wake-ups (a thread of C code, woken and waited for through eventfds, the loop holding "
              f"no GIL) and {worker - native:.0f} the worker's Python and the GIL. A kernel thread is no floor: io_uring "
              f"runs a buffered ext4 write on a worker of its own wherever the kernel puts it, not on the loop's CPU")
    nowait = nowait_probe.probe(directory, count=100)
    out["nowait_appends_written"] = nowait["written"] / nowait["count"]
    print(f"   A write the loop could make without ever waiting (pwritev2 with RWF_NOWAIT, no hand-off) on this "
          f"benchmark's filesystem: {nowait_probe.describe(nowait)} (python -m tools.bench.nowait_probe for others)")
    return out


# ================================================================================================ the p99's tail

TAIL_SHARE = 0.02  # the requests "under" the p99 whose causes are looked for: each round's slowest 2 %
PERIODIC = ("placement review", "deadline tick", "background tick", "stall watchdog", "gc", "client gc")
# a hand-off's legs, the loop path's file work, an append written by the dir's native writer
LEGS = ("worker wake-up", "worker batch", "loop wake-up", "inline work", "native append")

Event = tuple[str, float, float, str]


def sched_totals(pid: int) -> tuple[float, int]:
    """A process's threads together: seconds waited on a run queue (/proc's schedstat) and involuntary context
    switches (preempted: another thread, this process's or another's, wanted the CPU) so far."""
    waited, preempted = 0.0, 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                waited += int(f.read().split()[1]) / 1e9
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                preempted += int(f.read().split("\nnonvoluntary_ctxt_switches:")[1].split()[0])
        except (OSError, IndexError, ValueError):  # a thread that ended meanwhile
            continue
    return waited, preempted


class ClientGC:
    """The load generator's own garbage collections while it measures (a client pause is in a latency too)."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._started = 0.0

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.events.append(("client gc", self._started, time.perf_counter(), f"generation {info['generation']}"))

    def __enter__(self) -> ClientGC:
        gc.callbacks.append(self._on_gc)
        return self

    def __exit__(self, *_exc: object) -> None:
        gc.callbacks.remove(self._on_gc)


def p99_round(server: BenchServer, batch: bytes, seconds: float) -> tuple[list[tuple[float, float]], float, float]:
    """One round of the moderate-rate phase on ``server``: the dirty pages of the loads before written back first
    (the kernel otherwise writes them back in the middle of some rounds, vm.dirty_expire_centisecs, where every
    append of the round waits behind it: one variant's round, by chance, not the other's), half a second
    unmeasured (the server settled from the loads before: its threads placed again on one CPU,
    workers.Placement reviews every 0.25 s), then ``seconds`` measured. Returns each request's (send time,
    latency) and, per request, the seconds the server's threads waited on a run queue and how often they were
    preempted."""
    assert server.process is not None
    pid = server.process.pid
    os.sync()
    paced_produce(server.port, "small", 1, MODERATE_RATE, 0.5, batch)
    sent: list[float] = []
    waited, preempted = sched_totals(pid)
    latencies = paced_produce(server.port, "small", 1, MODERATE_RATE, seconds, batch, sent=sent)
    waited2, preempted2 = sched_totals(pid)
    n = max(len(latencies), 1)
    return list(zip(sent, latencies, strict=True)), (waited2 - waited) / n, (preempted2 - preempted) / n


def read_timeline(path: Path) -> list[Event]:
    """What a server run with KJBOD_TIMELINE=path recorded (kjbod.storage.timeline), written when it exited."""
    try:
        return [tuple(json.loads(line)) for line in path.read_text().splitlines()]  # type: ignore[misc]
    except FileNotFoundError:
        return []


class _Spans:
    """One kind's events sorted by start, for finding those overlapping an interval."""

    def __init__(self, events: list[Event]) -> None:
        events = sorted(events, key=lambda e: e[1])
        self.starts = [e[1] for e in events]
        self.events = events
        self.longest = max((e[2] - e[1] for e in events), default=0.0)

    def overlapping(self, a: float, b: float) -> list[Event]:
        lo = bisect.bisect_left(self.starts, a - self.longest)
        hi = bisect.bisect_right(self.starts, b)
        return [e for e in self.events[lo:hi] if e[2] >= a]


# A request's way through the server, as KJBOD_TIMELINE records it: (kind, which end of the span) in order, and
# what the time up to each point is called; the legs through a worker where the server has them.
# The loop path (KJBOD_DIR_WORKERS=0) has the same points around its own file work ("inline work").
_CHAIN = [("server read", 1, "to the server's read"), ("worker wake-up", 1, "on the loop to the hand-over"),
          ("worker wake-up", 2, "the worker's wake-up"), ("worker batch", 2, "on the worker"),
          ("loop wake-up", 2, "the loop's wake-up"), ("inline work", 1, "on the loop to the append"),
          ("inline work", 2, "the append on the loop"), ("server write", 1, "on the loop to the reply's write")]
# An append whose write the dir's native writer made (PartitionLog.append_native), the loop waiting for it.
_CHAIN_NATIVE = [("server read", 1, "to the server's read"), ("native append", 1, "on the loop to the append"),
                 ("native append", 2, "the append, its write on the dir's native writer"),
                 ("server write", 1, "on the loop to the reply's write")]


def _chain(spans: dict[str, _Spans], reqs: list[tuple[float, float]]) -> tuple[list[str], list[list[float]]]:
    """Each request's time cut at the points of _CHAIN found within it (a request whose points are not all
    found, e.g. one that shares a hand-over with another, is left out): the parts' names and durations."""
    steps = [step for step in (_CHAIN_NATIVE if "native append" in spans else _CHAIN) if step[0] in spans]
    names = [name if kind != "server write" or len(steps) > 2 else "in the server" for kind, _end, name in steps]
    names.append("back to the client")
    parts: list[list[float]] = [[] for _ in names]
    for a, lat in reqs:
        after, points = a, [a]  # each step's span starts after the one before it started
        for kind, end, _name in steps:
            s = spans[kind]
            i = bisect.bisect_left(s.starts, after)
            if i == len(s.starts) or s.events[i][end] > a + lat:
                break
            after = s.starts[i]
            points.append(max(s.events[i][end], points[-1]))
        else:
            points.append(a + lat)
            for part, (x, y) in zip(parts, itertools.pairwise(points), strict=True):
                part.append(y - x)
    return names, parts


def _mean_us(xs: list[float]) -> str:
    return f"{sum(xs) / len(xs) * 1e6:.0f}" if xs else "-"


def explain_tail(rounds: list[list[tuple[float, float]]], events: list[Event]) -> list[str]:
    """Which recorded events sit under each round's slowest TAIL_SHARE of requests, against how many would by
    chance (a slow request is long, so it meets more of anything periodic) and how many sit under any request;
    where the slow ones' time went (to the server's read of it, in the server, back to the client) and the
    hand-off's legs under them, against all requests."""
    by_kind: dict[str, list[Event]] = {}
    for e in events:
        by_kind.setdefault(e[0], []).append(e)
    spans = {kind: _Spans(es) for kind, es in by_kind.items()}
    every = [r for rnd in rounds for r in rnd]
    slow: list[tuple[float, float]] = []
    early = 0
    for rnd in rounds:
        if not rnd:
            continue
        k = max(1, math.ceil(len(rnd) * TAIL_SHARE))
        worst = sorted(rnd, key=lambda r: r[1])[-k:]
        slow.extend(worst)
        first = rnd[0][0] + (rnd[-1][0] - rnd[0][0]) / 10
        early += sum(1 for r in worst if r[0] < first)
    if not slow:
        return ["no requests"]

    def share(reqs: list[tuple[float, float]], kind: str) -> float:
        s = spans.get(kind)
        if s is None:
            return 0.0
        return sum(1 for a, lat in reqs if s.overlapping(a, a + lat)) / len(reqs)

    windows = [(rnd[0][0], rnd[-1][0] + rnd[-1][1]) for rnd in rounds if rnd]
    measured = sum(b - a for a, b in windows)

    def chance(reqs: list[tuple[float, float]], kind: str, took: float) -> float:
        """How many of ``reqs`` one of ``kind`` would sit under if they fell at random (at its rate while
        measuring): a request of latency L meets one in about rate x (L + its duration)."""
        s = spans[kind]
        n = sum(len(s.overlapping(a, b)) for a, b in windows)
        rate = n / measured if measured > 0 else 0.0
        return sum(min(1.0, rate * (lat + took)) for _a, lat in reqs) / len(reqs)

    under = []
    for kind in PERIODIC:
        if kind in spans:
            n = len(spans[kind].events)
            took = median([e[2] - e[1] for e in spans[kind].events])
            under.append(f"{kind} {share(slow, kind):.0%} (by chance {chance(slow, kind, took):.1%}, any request "
                         f"{share(every, kind):.1%}; {n} of them, median {took * 1e6:.0f} us, longest "
                         f"{spans[kind].longest * 1e6:.0f} us)")
    explained = sum(1 for a, lat in slow if any(spans[k].overlapping(a, a + lat) for k in PERIODIC if k in spans))
    lines = [f"slowest {TAIL_SHARE:.0%} of each round: {len(slow)} requests, median {median([r[1] for r in slow]) * 1e6:.0f} us "
             f"(all: median {median([r[1] for r in every]) * 1e6:.0f} us), {early / len(slow):.0%} of them in the "
             f"first tenth of their round",
             "  under them: " + "; ".join(under) if under else "  no periodic event recorded",
             f"  under none of those: {1 - explained / len(slow):.0%}"]
    if "server read" in spans and "server write" in spans:
        lines.append("  where their time went, mean us (all requests): " + ", ".join(
            f"{what} {_mean_us(slow_took)} ({_mean_us(all_took)})"
            for what, slow_took, all_took in zip(*_chain(spans, slow), _chain(spans, every)[1], strict=True)))
    if "placement review" in spans:
        actions: dict[str, int] = {}
        for e in spans["placement review"].events:
            actions[e[3]] = actions.get(e[3], 0) + 1
        lines.append("  placement reviews: " + ", ".join(f"{what} {n}" for what, n in sorted(actions.items())))
    legs = []
    for kind in LEGS:
        if kind in spans:
            def leg(reqs: list[tuple[float, float]], kind: str = kind) -> float:
                took = [max(e[2] - e[1] for e in found) for a, lat in reqs
                        if (found := spans[kind].overlapping(a, a + lat))]
                return median(took) if took else 0.0
            legs.append(f"{kind} {leg(slow) * 1e6:.0f} us ({leg(every) * 1e6:.0f})")
    if legs:
        lines.append("  hand-off legs under them, median (all requests): " + ", ".join(legs))
    return lines


def report_p99(samples: dict[str, dict[str, list[float]]], requests: dict[str, list[list[tuple[float, float]]]],
               timelines: dict[str, list[Event]], client_gc: list[Event]) -> dict[str, float]:
    """The p99 figure with its spread over rounds and, per variant, what sits under its tail."""
    w, ref = samples["workers"], samples["loop"]
    out = {}
    keys = {"workers": "handoff_produce_p99_vs_loop", "unplaced": "handoff_produce_p99_unplaced_vs_loop",
            "no native": "handoff_produce_p99_no_native_vs_loop"}
    for name, key in keys.items():
        if name not in samples:
            continue
        s = samples[name]
        ratios = sorted(a / b for a, b in zip(s["p99"], ref["p99"], strict=True))
        r = median(ratios)
        out[key] = r
        timed = median([a / b for a, b in zip(s["p99_timed"], ref["p99_timed"], strict=True)])
        print(f"   Produce p99 at {MODERATE_RATE} req/s, {name}: {median(s['p99']) * 1e6:.0f} us, loop "
              f"{median(ref['p99']) * 1e6:.0f} us: {r:.2f}x (target <= 1.2x: {verdict(r <= 1.2)}); per-round "
              f"ratios min {ratios[0]:.2f}, median {r:.2f}, max {ratios[-1]:.2f} over {len(ratios)} rounds; median "
              f"{median(s['p50']) * 1e6:.0f} us vs {median(ref['p50']) * 1e6:.0f} us. On the servers recording "
              f"the timeline, in the same rounds: {median(s['p99_timed']) * 1e6:.0f} us vs "
              f"{median(ref['p99_timed']) * 1e6:.0f} us, {timed:.2f}x")
    if out["handoff_produce_p99_vs_loop"] > 1.2:
        print(f"   Why above 1.2x: a Produce on a quiet dir wakes the dir's native writer and waits for it, one "
              f"more thread than the loop path wakes (one through a worker wakes two, the worker and the loop "
              f"again), each one more wait for a CPU behind this machine's other work: the server's threads were "
              f"preempted {median(w['preempted']):.1f} times per request against {median(ref['preempted']):.1f} "
              f"on the loop path and waited on a run queue {median(w['waited']) * 1e6:.0f} us against "
              f"{median(ref['waited']) * 1e6:.0f} us; the lines below split the slowest requests' time (all "
              f"requests' in brackets) on both paths. What would reach it: no thread woken at all, a buffered "
              f"write the filesystem takes without ever waiting (RWF_NOWAIT, below), or the append run on the "
              f"loop while its dir is healthy, which the per-dir isolation forbids")
    for name, s in samples.items():
        print(f"   Tail, {name} (the servers recording the timeline): the server's threads waited on a run queue "
              f"{median(s['waited_timed']) * 1e6:.0f} us per request and were preempted "
              f"{median(s['preempted_timed']):.2f} times per request (median of rounds)")
        for line in explain_tail(requests[name], timelines[name] + client_gc):
            print(f"     {line}")
    return out


def p99_servers(work: Path, timeline: bool = True) -> dict[str, BenchServer]:
    """The servers the hand-off's cost is measured on (the p99 phase adds "no native": the workers without the
    dirs' native append writers, ``KJBOD_NATIVE_APPENDS=0``, every append handed to the worker as the code before
    them did, which is what that writer buys at this rate). With ``timeline``, each recording its periodic
    events and each request's legs (KJBOD_TIMELINE, written to <dir>/timeline when it exits), which the p99's
    and the Fetch's explanations need; else as an operator runs them, for the throughput figures (the record is
    not free: it cost the workers path 2-12 us of server CPU per small-batch Produce and the loop path none in four
    interleaved comparisons, though it keeps only a fifth of an event per request there)."""
    def server(name: str, **env: str) -> BenchServer:
        if not timeline:
            return BenchServer(work / f"plain-{name}", env=env)
        return BenchServer(work / name, env={**env, "KJBOD_TIMELINE": str(work / name / "timeline")})

    return {"workers": server("workers"), "loop": server("loop", KJBOD_DIR_WORKERS="0"),
            "unplaced": server("unplaced", KJBOD_DIR_WORKERS="unplaced")}


def no_native_server(work: Path, timeline: bool = True) -> dict[str, BenchServer]:
    """The p99 phase's fourth variant (see p99_servers), as a dict to merge."""
    if not timeline:
        return {"no native": BenchServer(work / "plain-no-native", env={"KJBOD_NATIVE_APPENDS": "0"})}
    return {"no native": BenchServer(work / "no native", env={
        "KJBOD_NATIVE_APPENDS": "0", "KJBOD_TIMELINE": str(work / "no native" / "timeline")})}


def bench_p99(work: Path, rounds: int, seconds: float) -> dict:
    """Only the moderate-rate p99 phase (``--p99``): more rounds in the time, and its explanation."""
    heading(f"Produce p99 at {MODERATE_RATE} req/s: per-dir workers vs the event loop (KJBOD_DIR_WORKERS=0)")
    plain = {**p99_servers(work, timeline=False), **no_native_server(work, timeline=False)}
    timed = {**p99_servers(work), **no_native_server(work)}
    small = small_batch()
    samples = {k: p99_keys() for k in plain}
    requests: dict[str, list[list[tuple[float, float]]]] = {k: [] for k in plain}
    load_before = os.getloadavg()
    try:
        for server in [*plain.values(), *timed.values()]:
            server.start()
            create_topic(server.port, "small", 3)
        with ClientGC() as client:
            p99_phase(plain, timed, small, seconds, rounds, samples, requests)
    finally:
        for server in [*plain.values(), *timed.values()]:
            server.stop()
    print(f"   load average {load_before[0]:.2f} {load_before[1]:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} at the end, on {os.cpu_count()} CPUs; {rounds} rounds "
          f"of {seconds:g} s per variant, interleaved, on servers as an operator runs them and on servers "
          f"recording KJBOD_TIMELINE")
    timelines = {name: read_timeline(work / name / "timeline") for name in timed}
    out = report_p99(samples, requests, timelines, client.events)
    out.update(report_write_floor(work / "writes"))
    return out


P99_KEYS = ("p99", "p50", "waited", "preempted")


def p99_keys() -> dict[str, list[float]]:
    """A variant's p99-phase samples: on the servers as an operator runs them (the figure) and, suffixed
    "_timed", on the servers recording KJBOD_TIMELINE (the tail's explanation)."""
    return {f"{key}{suffix}": [] for key in P99_KEYS for suffix in ("", "_timed")}


def p99_phase(plain: dict[str, BenchServer], timed: dict[str, BenchServer], batch: bytes, seconds: float,
              rounds: int, samples: dict[str, dict[str, list[float]]],
              requests: dict[str, list[list[tuple[float, float]]]]) -> None:
    """``rounds`` rounds of the moderate rate on every server, the variants interleaved, the order of the six
    servers rotated by one each round (so none is always first after the others' rounds, or always after the
    same one: with the plain servers always first, the two sets' ratios differed either way by more than the
    record's cost). The figure is the plain servers', what an operator gets (the record costs the workers path
    more per request than the loop path); the recording servers' requests, with their timelines, explain the
    tail."""
    order = [(name, server, "") for name, server in plain.items()]
    order += [(name, server, "_timed") for name, server in timed.items()]
    for rnd in range(rounds):
        turn = rnd % len(order)
        for name, server, suffix in order[turn:] + order[:turn]:
            reqs = _p99_sample(server, batch, seconds, samples[name], suffix)
            if suffix:
                requests[name].append(reqs)


def _p99_sample(server: BenchServer, batch: bytes, seconds: float, into: dict[str, list[float]],
                suffix: str = "") -> list[tuple[float, float]]:
    reqs, waited, preempted = p99_round(server, batch, seconds)
    latencies = [lat for _sent, lat in reqs]
    into[f"p99{suffix}"].append(p99(latencies))
    into[f"p50{suffix}"].append(quantile(latencies, 0.5))
    into[f"waited{suffix}"].append(waited)
    into[f"preempted{suffix}"].append(preempted)
    return reqs


# ================================================================================================ fetch

FETCH_MIB = 16  # backlog per partition, in 1 MiB batches: a consume fetches one batch of each partition at a time
FETCH_PASSES = 16  # consumes of the whole backlog per round and variant (one is ~20-30 ms: too short to measure)
# Fetch rounds per round of the whole hand-off bench: a round's ratio still swings +-20 % with this machine's other
# work, so the median needs about 15 of them (as --fetch takes) to settle within a few per cent.
FETCH_ROUNDS_PER_ROUND = 3


def fetch_keys() -> dict[str, list[float]]:
    """A variant's Fetch samples: MiB/s; per fetch request, for the server's event-loop thread and its other
    threads together, CPU seconds, seconds waited on a run queue (ready, another thread on the CPU) and voluntary
    context switches (each a sleep, so a wake-up); the server's read and write system calls; the consumer's own
    CPU seconds; and whether the server's threads were placed on one CPU (workers.Placement) when it ended."""
    return {k: [] for k in ("fetch", "fetch_client_cpu", "fetch_syscr", "fetch_syscw", "fetch_placed",
                            *(f"fetch_{kind}_{what}" for kind in ("loop", "workers")
                              for what in ("cpu", "waited", "wakeups")))}


def thread_sched(pid: int) -> dict[str, tuple[float, float, int]]:
    """Per kind of thread of a server, as thread_usage: CPU seconds and seconds waited on a run queue (/proc's
    schedstat, in nanoseconds) and voluntary context switches so far."""
    out: dict[str, tuple[float, float, int]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ran, waited = (int(x) / 1e9 for x in f.read().split()[:2])
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                switches = int(f.read().split("\nvoluntary_ctxt_switches:")[1].split()[0])
        except (OSError, IndexError, ValueError):  # a thread that ended meanwhile
            continue
        kind = "loop" if tid == str(pid) else "workers"
        before = out.get(kind, (0.0, 0.0, 0))
        out[kind] = (before[0] + ran, before[1] + waited, before[2] + switches)
    return out


def placed(pid: int) -> bool:
    """Whether the server's event-loop thread is held to fewer CPUs than this process may use (Placement)."""
    return len(os.sched_getaffinity(pid)) < len(os.sched_getaffinity(0))


def fetch_setup(server: BenchServer, mib: bytes) -> None:
    """Topic "fetch", one partition per dir, FETCH_MIB 1 MiB batches each, read through once (page cache warm)."""
    create_topic(server.port, "fetch", 3)
    for p in range(3):
        produce_pipelined(server.port, produce_frame("fetch", p, mib), FETCH_MIB, 8)
    consume(server.port, "fetch", 3, FETCH_MIB * 1024)


def syscalls(pid: int) -> tuple[int, int]:
    """A process's read and write system calls so far (/proc's io: a sendfile counts as one of each)."""
    with open(f"/proc/{pid}/io") as f:
        fields = dict(line.split(": ") for line in f.read().splitlines())
    return int(fields["syscr"]), int(fields["syscw"])


def fetch_round(servers: dict[str, BenchServer], passes: int, samples: dict[str, dict[str, list[float]]],
                windows: dict[str, list[tuple[float, float]]] | None = None) -> None:
    """One round: each server's backlog consumed ``passes`` times, one fetch in flight (each fetch one 1 MiB batch
    of each of the three partitions), the servers interleaved pass by pass in an order rotated each pass, so each
    sees the same moments of this machine's other work. Into each server's ``samples`` (fetch_keys): its MiB/s
    over the round and its costs per fetch; into ``windows``, when given, when each of its passes ran
    (perf_counter, the clock KJBOD_TIMELINE records on), for :func:`hand_offs`."""
    names = list(servers)
    pids = {name: server.process.pid for name, server in servers.items() if server.process is not None}
    threads = {name: thread_sched(pid) for name, pid in pids.items()}
    calls = {name: syscalls(pid) for name, pid in pids.items()}
    seconds = dict.fromkeys(names, 0.0)
    client = dict.fromkeys(names, 0.0)
    for i in range(passes):
        for name in names[i % len(names):] + names[:i % len(names)]:
            started, at = time.thread_time(), time.perf_counter()
            took, _got = consume(servers[name].port, "fetch", 3, FETCH_MIB * 1024)
            client[name] += time.thread_time() - started
            if windows is not None:
                windows.setdefault(name, []).append((at, time.perf_counter()))
            seconds[name] += took
    fetches = passes * FETCH_MIB
    for name, pid in pids.items():
        into = samples[name]
        into["fetch"].append(passes * FETCH_MIB * 3 / seconds[name])
        into["fetch_client_cpu"].append(client[name] / fetches)
        into["fetch_placed"].append(float(placed(pid)))
        for kind, now in thread_sched(pid).items():
            for what, a, b in zip(("cpu", "waited", "wakeups"), now, threads[name].get(kind, (0.0, 0.0, 0)),
                                  strict=True):
                into[f"fetch_{kind}_{what}"].append((a - b) / fetches)
        after = syscalls(pid)
        into["fetch_syscr"].append((after[0] - calls[name][0]) / fetches)
        into["fetch_syscw"].append((after[1] - calls[name][1]) / fetches)


def hand_offs(events: list[Event], windows: list[tuple[float, float]]) -> int:
    """How many batches a server's dir workers ran (KJBOD_TIMELINE's "worker batch" spans) that ended within
    ``windows``: each one a hand-off of the loop's closures to a worker."""
    ends = sorted(e[2] for e in events if e[0] == "worker batch")
    return sum(bisect.bisect_right(ends, b) - bisect.bisect_left(ends, a) for a, b in windows)


def report_fetch(samples: dict[str, dict[str, list[float]]], handed: dict[str, float] | None = None) -> float:
    """The Fetch zero-copy figure (workers against the loop path, per round, median and spread) and, per
    variant, what a fetch cost the server and (``handed``, where its timeline was recorded) how many hand-offs
    to a dir's worker it made; returns the median ratio."""
    ref = samples["loop"]
    ratio = 0.0
    for name in ("workers", "unplaced"):
        if name not in samples:
            continue
        ratios = sorted(a / b for a, b in zip(samples[name]["fetch"], ref["fetch"], strict=True))
        r = median(ratios)
        if name == "workers":
            ratio = r
        print(f"   Fetch zero-copy, 3 dirs, {name}: {median(samples[name]['fetch']):,.0f} MiB/s, loop "
              f"{median(ref['fetch']):,.0f} MiB/s: {r:.1%} (target >= 95%: {verdict(r >= 0.95)}); per-round ratios "
              f"min {ratios[0]:.1%}, median {r:.1%}, max {ratios[-1]:.1%} over {len(ratios)} rounds")
    cpu = sorted(sum(samples["loop"][f"fetch_{k}_cpu"][i] for k in ("loop", "workers")) /
                 sum(samples["workers"][f"fetch_{k}_cpu"][i] for k in ("loop", "workers"))
                 for i in range(len(ref["fetch"])))
    print(f"   Server CPU per fetch (every thread), loop path over workers: median {median(cpu):.1%}, per-round min "
          f"{cpu[0]:.1%}, max {cpu[-1]:.1%}: with the CPU to itself the workers would reach that share of the loop "
          f"path's rate (the wall-clock ratio also holds this machine's other work, which moves it round by round)")
    for name, s in samples.items():
        if "fetch" not in s:  # a variant of the p99 phase only
            continue
        print(f"     per fetch ({name}), median of rounds: event-loop thread {median(s['fetch_loop_cpu']) * 1e6:.0f} us "
              f"CPU, {median(s['fetch_loop_waited']) * 1e6:.0f} us on a run queue, "
              f"{median(s['fetch_loop_wakeups']):.2f} wake-ups; other threads {median(s['fetch_workers_cpu']) * 1e6:.0f}"
              f" us CPU, {median(s['fetch_workers_waited']) * 1e6:.0f} us on a run queue, "
              f"{median(s['fetch_workers_wakeups']):.2f} wake-ups; system calls {median(s['fetch_syscr']):.1f} read, "
              f"{median(s['fetch_syscw']):.1f} write (a sendfile is one of each); the consumer "
              f"{median(s['fetch_client_cpu']) * 1e6:.0f} us CPU; loop placed on one CPU at the end of "
              f"{sum(s['fetch_placed']):.0f} of {len(s['fetch_placed'])} rounds"
              + (f"; {handed[name]:.3f} hand-offs to a dir's worker (KJBOD_TIMELINE)" if handed and name in handed
                 else ""))
    if ratio < 0.95:
        _why_fetch_below(samples, handed, ratio)
    return ratio


def _why_fetch_below(samples: dict[str, dict[str, list[float]]], handed: dict[str, float] | None,
                     ratio: float) -> None:
    """Why the Fetch figure missed 95 %, from what this run measured: hand-offs (a read the page cache could
    not answer, or a dir busy or degraded, goes to its worker: a thread round trip per fetch), else the server's
    extra CPU per fetch, else the machine's other work (run-queue waits, the rounds' spread)."""
    w, ref = samples["workers"], samples["loop"]
    ratios = sorted(a / b for a, b in zip(w["fetch"], ref["fetch"], strict=True))

    def cpu(s: dict[str, list[float]]) -> float:
        return median([a + b for a, b in zip(s["fetch_loop_cpu"], s["fetch_workers_cpu"], strict=True)])

    extra = cpu(w) - cpu(ref)
    handed_w = handed.get("workers") if handed else None
    if handed_w is not None and handed_w >= 0.5:
        cause = (f"the workers' fetches were handed to a dir's worker ({handed_w:.2f} hand-offs per fetch: reads "
                 f"the page cache could not answer, or a dir busy or degraded), each a thread round trip the loop "
                 f"path does not make; what would reach it: the backlog in the page cache and the dirs idle")
    elif extra > 0.05 * cpu(ref):
        cause = (f"a fetch cost the workers' server {extra * 1e6:+.0f} us of CPU against the loop path's "
                 f"{cpu(ref) * 1e6:.0f} us with {handed_w if handed_w is not None else float('nan'):.2f} hand-offs: "
                 f"the read path's own cost on the loop (fsio.no_waiting's reads, DirWork's checks per dir)")
    else:
        cause = (f"not the fetch's cost: {handed_w if handed_w is not None else float('nan'):.2f} hand-offs per "
                 f"fetch and {extra * 1e6:+.0f} us of server CPU against the loop path's {cpu(ref) * 1e6:.0f} us; "
                 f"the event loop waited on a run queue {median(w['fetch_loop_waited']) * 1e6:.0f} us per fetch "
                 f"against {median(ref['fetch_loop_waited']) * 1e6:.0f} us, and single rounds ranged from "
                 f"{ratios[0]:.0%} to {ratios[-1]:.0%}: this machine's other work; what would reach it: more rounds "
                 f"(python -m tools.bench.dir_workers --fetch --rounds 45) or a quieter machine")
    print(f"   Why Fetch is below 95% ({ratio:.1%}): {cause}")


def fetch_hand_offs(work: Path, windows: dict[str, list[tuple[float, float]]], passes: int) -> dict[str, float]:
    """Hand-offs per fetch during the passes of each p99_servers server (their timelines, written at exit)."""
    return {name: hand_offs(read_timeline(work / name / "timeline"), windows[name]) / (passes * FETCH_MIB)
            for name in ("workers", "loop", "unplaced") if name in windows}


def bench_fetch(work: Path, rounds: int, passes: int) -> dict:
    """Only the Fetch zero-copy phase (``--fetch``): workers, unplaced workers and the loop path interleaved pass
    by pass, ``passes`` consumes of the backlog per round. With ``KJBOD_BENCH_BEFORE=<a checkout of other kjbod
    code>``, that code's workers and loop servers run in the same rounds too."""
    heading("Fetch zero-copy, a partition per dir: per-dir workers vs the event loop (KJBOD_DIR_WORKERS=0)")
    before = os.environ.get("KJBOD_BENCH_BEFORE")
    servers = p99_servers(work)
    if before:
        servers["workers before"] = BenchServer(work / "workers-before", env=code_env(before))
        servers["loop before"] = BenchServer(work / "loop-before", env={**code_env(before), "KJBOD_DIR_WORKERS": "0"})
    samples = {k: fetch_keys() for k in servers}
    windows: dict[str, list[tuple[float, float]]] = {}
    load_before = os.getloadavg()
    mib = one_mib_batch()
    try:
        for server in servers.values():
            server.start()
            fetch_setup(server, mib)
        for _ in range(rounds):
            fetch_round(servers, passes, samples, windows)
    finally:
        for server in servers.values():
            server.stop()
    print(f"   load average {load_before[0]:.2f} {load_before[1]:.2f} at the start, {os.getloadavg()[0]:.2f} "
          f"{os.getloadavg()[1]:.2f} at the end, on {os.cpu_count()} CPUs; {rounds} rounds of {passes} x "
          f"{FETCH_MIB * 3} MiB per variant, interleaved pass by pass")
    out = {"handoff_fetch_vs_loop": report_fetch(samples, fetch_hand_offs(work, windows, rounds * passes))}
    if before:
        for name in ("workers", "loop"):
            ratios = sorted(a / b for a, b in zip(samples[name]["fetch"], samples[name + " before"]["fetch"],
                                                  strict=True))
            out[f"fetch_{name}_vs_before"] = median(ratios)
            print(f"   {name}: {median(ratios):.1%} of the code before's rate ({before}; per-round min "
                  f"{ratios[0]:.1%}, max {ratios[-1]:.1%})")
        ratios = sorted(a / b for a, b in zip(samples["workers before"]["fetch"], samples["loop before"]["fetch"],
                                              strict=True))
        print(f"   the code before: workers {median(ratios):.1%} of its loop path (per-round min {ratios[0]:.1%}, "
              f"max {ratios[-1]:.1%})")
    return out


# ================================================================================================ hand-off cost


def mib_samples(servers: dict[str, BenchServer], frame: bytes, round_no: int,
                samples: dict[str, dict[str, list[float]]]) -> None:
    """One round's 1 MiB Produce samples: MIB_SAMPLES_PER_ROUND per server, MIB_COUNT requests of one 1 MiB
    batch each, 8 in flight, into each server's ``samples["mib"]`` (MiB/s). The servers take turns sample by
    sample, the order rotating, so no server always runs first or after the same one; before each sample, and
    not timed, ``os.sync()`` writes out every dirty page, so a sample pays the disk for its own writes only, not
    for the writeback of an earlier sample's (another server's) that the kernel would start in the middle of it."""
    names = list(servers)
    for k in range(MIB_SAMPLES_PER_ROUND):
        turn = (round_no * MIB_SAMPLES_PER_ROUND + k) % len(names)
        for name in names[turn:] + names[:turn]:
            os.sync()
            took = produce_pipelined(servers[name].port, frame, MIB_COUNT, 8)
            samples[name]["mib"].append(MIB_COUNT / took)


def bench_handoff(work: Path, rounds: int, seconds: float) -> dict:
    """The throughput figures (1 MiB and small batches) on servers run as an operator runs them; the p99 and the
    Fetch on servers recording KJBOD_TIMELINE (p99_servers), whose explanations need its record, with the
    small-batch load run on those too, so the output shows what the record itself costs."""
    heading("Hand-off to the per-dir workers vs appends and reads on the event loop (KJBOD_DIR_WORKERS=0)")
    servers = p99_servers(work, timeline=False)
    timed = p99_servers(work)
    loadgen = build_loadgen()
    mib = one_mib_batch()
    small = small_batch()
    samples: dict[str, dict[str, list[float]]] = {k: {"mib": [], "small": [], "small_timed": [], "cpu": [],
                                                      "cpu_timed": [], "loop_cpu": [], "workers_cpu": [],
                                                      "loop_wakeups": [], "workers_wakeups": [], **p99_keys(),
                                                      **fetch_keys()}
                                                  for k in servers}
    requests: dict[str, list[list[tuple[float, float]]]] = {k: [] for k in servers}
    client = ClientGC()
    trips: dict[str, dict[str, list[float]]] = {"placed": {}, "unplaced": {}}
    windows: dict[str, list[tuple[float, float]]] = {}  # when each server's fetch passes ran
    extra_plain, extra_timed = no_native_server(work, timeline=False), no_native_server(work)  # p99 phase only
    load_before = os.getloadavg()[0]
    try:
        for server in servers.values():
            server.start()
            create_topic(server.port, "big", 3)
            create_topic(server.port, "small", 3)
        for server in timed.values():
            server.start()
            create_topic(server.port, "small", 3)
            fetch_setup(server, mib)
        small_frames = [produce_frame("small", p, small) for p in range(3)]
        big_frame = produce_frame("big", 0, mib)
        for round_no in range(rounds):
            mib_samples(servers, big_frame, round_no, samples)
            for name, server in servers.items():
                s = samples[name]
                assert server.process is not None
                cpu = process_cpu(server.process.pid)
                threads = thread_usage(server.process.pid)
                rate = load_frames(loadgen, server.port, CONNECTIONS, 16, seconds, small_frames)
                s["small"].append(rate)
                s["cpu"].append((process_cpu(server.process.pid) - cpu) / (rate * seconds))
                for kind, (spent, woken) in thread_usage(server.process.pid).items():
                    s[f"{kind}_cpu"].append((spent - threads[kind][0]) / (rate * seconds))
                    s[f"{kind}_wakeups"].append((woken - threads[kind][1]) / (rate * seconds))
                recording = timed[name]
                assert recording.process is not None
                cpu = process_cpu(recording.process.pid)
                rate = load_frames(loadgen, recording.port, CONNECTIONS, 16, seconds, small_frames)
                s["small_timed"].append(rate)
                s["cpu_timed"].append((process_cpu(recording.process.pid) - cpu) / (rate * seconds))
            for _ in range(FETCH_ROUNDS_PER_ROUND):
                fetch_round(timed, FETCH_PASSES, samples, windows)
            for how in trips:
                for leg, took in worker_round_trips(work / "round-trip", how == "placed").items():
                    trips[how].setdefault(leg, []).extend(took)
        # The moderate rate's p99 in a phase of its own, as --p99 measures it: P99_ROUNDS_PER_ROUND rounds per
        # round above, the servers interleaved, each round right after the others' moderate rounds rather than
        # right after a load at the highest rate.
        for server in [*extra_plain.values(), *extra_timed.values()]:
            server.start()
            create_topic(server.port, "small", 3)
        for name in extra_plain:
            samples[name] = p99_keys()
            requests[name] = []
        with client:
            p99_phase({**servers, **extra_plain}, {**timed, **extra_timed}, small, seconds,
                      rounds * P99_ROUNDS_PER_ROUND, samples, requests)
    finally:
        for server in [*servers.values(), *timed.values(), *extra_plain.values(), *extra_timed.values()]:
            server.stop()
    w, ref = samples["workers"], samples["loop"]

    def ratio(key: str, w: dict[str, list[float]] = w) -> float:
        return median([a / b for a, b in zip(w[key], ref[key], strict=True)])

    out = {"handoff_produce_1mib_vs_loop": ratio("mib"), "handoff_produce_small_vs_loop": ratio("small"),
           "handoff_fetch_vs_loop": ratio("fetch")}
    print(f"   Produce 1 MiB batches: workers {median(w['mib']):,.0f} MiB/s, loop {median(ref['mib']):,.0f} MiB/s: "
          f"{out['handoff_produce_1mib_vs_loop']:.1%} (target >= 95%: "
          f"{verdict(out['handoff_produce_1mib_vs_loop'] >= 0.95)}; {len(w['mib'])} samples of {MIB_COUNT} MiB "
          f"a variant, each after an untimed sync)")
    for name in servers:
        print(f"     {name} MiB/s per sample: " + " ".join(f"{x:,.0f}" for x in samples[name]["mib"]))
    print(f"   Produce small batches ({SMALL_RECORDS} x 1 KiB): workers {median(w['small']):,.0f} req/s, loop "
          f"{median(ref['small']):,.0f} req/s: {out['handoff_produce_small_vs_loop']:.1%} (target >= 85%: "
          f"{verdict(out['handoff_produce_small_vs_loop'] >= 0.85)})")
    timed_small = ratio("small_timed")
    print(f"   (Both throughput figures, and the p99's, on servers as an operator runs them. The Fetch phase "
          f"below runs on servers recording KJBOD_TIMELINE, which its explanation needs, as does the p99's tail "
          f"(those servers take turns with the others in the p99's rounds); the same small-batch load on those: "
          f"workers {median(w['small_timed']):,.0f} req/s, loop {median(ref['small_timed']):,.0f} req/s: "
          f"{timed_small:.1%}, server CPU per request workers {median(w['cpu_timed']) * 1e6:.0f} us, loop "
          f"{median(ref['cpu_timed']) * 1e6:.0f} us, against {median(w['cpu']) * 1e6:.0f} us and "
          f"{median(ref['cpu']) * 1e6:.0f} us without the record)")
    report_fetch(samples, fetch_hand_offs(work, windows, rounds * FETCH_ROUNDS_PER_ROUND * FETCH_PASSES))
    u = samples["unplaced"]
    print(f"   Placement: the workers on the kernel's choice of CPU instead of the event loop's "
          f"(KJBOD_DIR_WORKERS=unplaced), against the loop: 1 MiB {ratio('mib', u):.1%}, small batches "
          f"{ratio('small', u):.1%}, fetch {ratio('fetch', u):.1%}")
    out.update(report_p99(samples, requests, {name: read_timeline(work / name / "timeline")
                                               for name in [*servers, *extra_timed]}, client.events))
    # What the figures above are made of, measured in this run.
    out["handoff_small_cpu_per_request_loop_vs_workers"] = median(
        [b / a for a, b in zip(w["cpu"], ref["cpu"], strict=True)])
    print(f"   Why: server CPU per small-batch Produce: workers {median(w['cpu']) * 1e6:.0f} us, loop "
          f"{median(ref['cpu']) * 1e6:.0f} us: with the CPU to itself the workers would reach "
          f"{out['handoff_small_cpu_per_request_loop_vs_workers']:.1%} of the loop's rate (load average "
          f"{load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, on {os.cpu_count()} CPUs)")
    woken = median(w["workers_wakeups"])
    print(f"   Why: per small-batch Produce with the workers: event-loop thread {median(w['loop_cpu']) * 1e6:.0f} us "
          f"CPU, dir workers {median(w['workers_cpu']) * 1e6:.0f} us (the append alone, validation stays on the "
          f"loop), the workers woken once per {1 / max(woken, 1e-9):,.0f} requests (one hand-over in flight per "
          f"dir, the small batches a hand-over brings to one partition written at once); on the loop path the "
          f"event loop's {median(ref['loop_cpu']) * 1e6:.0f} us is all. Python runs one thread at a time (the "
          f"GIL) and this machine has other work, so the two CPU figures add up")
    if out["handoff_produce_small_vs_loop"] < 0.85:
        extra = median(w["loop_cpu"]) - median(ref["loop_cpu"])
        print(f"   Why short of 85%: the event loop alone spends {extra * 1e6:+.0f} us per request against the loop "
              f"path, which also appends: the appends it no longer does are paid back in the hand-off's "
              f"bookkeeping (a wait per request, its answer's callbacks, the reply written from a callback); "
              f"what would reach it: less per-request Python on the loop (the request's validation and answer "
              f"slots built in one pass), or the CPU of a second core, which the GIL keeps from Python threads")

    def legs(how: str) -> str:
        return ", ".join(f"{leg} {quantile(took, 0.5) * 1e6:.0f}/{quantile(took, 0.99) * 1e6:.0f}"
                         for leg, took in trips[how].items())

    print(f"   Why: one bare hand-off at {MODERATE_RATE}/s on this machine (a DirWorker, the loop asleep between), "
          f"median/p99 us: with the worker on the loop's CPU (as kjbod serve places them while quiet): "
          f"{legs('placed')}; where the kernel puts them: {legs('unplaced')}. A Produce at {MODERATE_RATE} req/s "
          f"took {median(ref['p50']) * 1e6:.0f} us at the median on the loop and {median(w['p50']) * 1e6:.0f} us "
          f"with the workers: it pays the whole round trip on top of the loop path's time, two more thread "
          f"wake-ups, and at the tail each wake-up can wait behind this machine's other work")
    out.update(report_write_floor(work / "writes"))
    return out


# ================================================================================================ idempotent


def idempotent_batch(batch: bytes, producer_id: int) -> bytes:
    """``batch`` as an idempotent producer's: ``producer_id``, epoch 0, sequence 0, its CRC-32C recomputed (the
    load generator gives each connection its own id from this one and the next sequences)."""
    import crc32c

    out = bytearray(batch)
    out[43:57] = producer_id.to_bytes(8, "big") + (0).to_bytes(2, "big") + (0).to_bytes(4, "big")
    out[17:21] = crc32c.crc32c(bytes(out[21:])).to_bytes(4, "big")
    return bytes(out)


def produce_error_at(topic: str) -> int:
    """Where the error code of a one-partition Produce v9 answer is, counted from after the frame's size: the
    correlation id and the flexible header's tagged fields (5 bytes), then the body up to it."""
    from kjbod.protocol.generated import ProduceResponse as R

    sentinel = 0x7A7B
    body = R(responses=[R.TopicProduceResponse(name=topic, partition_responses=[
        R.PartitionProduceResponse(index=0, error_code=sentinel)])]).encode(9)
    return 5 + body.index(sentinel.to_bytes(2, "big"))


def bench_idempotent_handoff(work: Path, rounds: int, seconds: float) -> dict:
    """Small batches of idempotent producers (a producer id per connection, its batches in sequence, as Java
    clients, librdkafka with enable.idempotence and kafka-python with enable_idempotence send them) against the
    same batches without a producer id, workers against the loop path, in the same run. With
    ``KJBOD_BENCH_BEFORE=<a checkout of other kjbod code>``, that code's servers run in the same rounds too (as
    ``before``), so a change is measured against the code before it on the same machine at the same time."""
    heading("Hand-off with idempotent producers: small batches in sequence, workers vs the loop path")
    trees = {"": None}
    before = os.environ.get("KJBOD_BENCH_BEFORE")
    if before:
        trees[" before"] = before
    servers = {}
    for suffix, tree in trees.items():
        code = code_env(tree)
        servers["workers" + suffix] = BenchServer(work / f"idem-workers{len(servers)}", env=code)
        servers["loop" + suffix] = BenchServer(work / f"idem-loop{len(servers)}", env={**code, "KJBOD_DIR_WORKERS": "0"})
    loadgen = build_loadgen()
    small = small_batch()
    samples = {k: {"plain": [], "idem": [], "plain_cpu": [], "idem_cpu": []} for k in servers}
    error_at = produce_error_at("small")
    try:
        for server in servers.values():
            server.start()
            create_topic(server.port, "small", 3)
            wrong = Connection(server.port)  # the error code's place, checked on a real answer
            try:
                wrong.sock.sendall(produce_frame("small", 9, small))
                assert int.from_bytes(wrong.read_frame()[error_at: error_at + 2], "big") == 3  # UNKNOWN_TOPIC_OR_PART.
            finally:
                wrong.close()
        plain_frames = [produce_frame("small", p, small) for p in range(3)]
        for rnd in range(rounds):
            for name, server in servers.items():
                # fresh producer ids each round (a new connection starts its sequence at 0)
                batches = [idempotent_batch(small, (rnd + 1) << 32 | p << 16) for p in range(3)]
                idem_frames = [produce_frame("small", p, b) for p, b in enumerate(batches)]
                batch_at = idem_frames[0].index(batches[0])
                assert server.process is not None
                for kind, frames, env in (("plain", plain_frames, {"LOADGEN_ERROR_AT": str(error_at)}),
                                          ("idem", idem_frames, {"LOADGEN_BATCH_AT": str(batch_at),
                                                                 "LOADGEN_ERROR_AT": str(error_at)})):
                    cpu = process_cpu(server.process.pid)
                    with _environ(env):
                        rate = load_frames(loadgen, server.port, CONNECTIONS, 16, seconds, frames)
                    samples[name][kind].append(rate)
                    samples[name][f"{kind}_cpu"].append((process_cpu(server.process.pid) - cpu) / (rate * seconds))
    finally:
        for server in servers.values():
            server.stop()
    out = {}

    def ratio(a: str, b: str, key: str) -> float:
        return median([x / y for x, y in zip(samples[a][key], samples[b][key], strict=True)])

    for suffix in trees:
        w, ref = samples["workers" + suffix], samples["loop" + suffix]
        idem, plain = ratio("workers" + suffix, "loop" + suffix, "idem"), ratio("workers" + suffix, "loop" + suffix, "plain")
        key = "handoff_idempotent_small_vs_loop" + suffix.replace(" ", "_")
        out[key] = idem
        print(f"   {'this code' if not suffix else 'the code before (' + str(before) + ')'}: idempotent small batches "
              f"workers {median(w['idem']):,.0f} req/s, loop {median(ref['idem']):,.0f} req/s: {idem:.1%} "
              f"(target >= 85%: {verdict(idem >= 0.85)}); without a producer id in the same rounds: workers "
              f"{median(w['plain']):,.0f}, loop {median(ref['plain']):,.0f} req/s: {plain:.1%}. Server CPU per "
              f"request, idempotent: workers {median(w['idem_cpu']) * 1e6:.0f} us, loop "
              f"{median(ref['idem_cpu']) * 1e6:.0f} us (without a producer id: {median(w['plain_cpu']) * 1e6:.0f} "
              f"us, {median(ref['plain_cpu']) * 1e6:.0f} us)")
    if before:
        for name in ("workers", "loop"):
            gain = ratio(name, name + " before", "idem")
            out[f"idempotent_small_{name}_vs_before"] = gain
            print(f"   {name}: idempotent small batches at {gain:.1%} of the code before's rate "
                  f"(CPU per request {median(samples[name]['idem_cpu']) * 1e6:.0f} us vs "
                  f"{median(samples[name + ' before']['idem_cpu']) * 1e6:.0f} us)")
    print(f"   (load average {os.getloadavg()[0]:.1f} at the end, on {os.cpu_count()} CPUs)")
    return out


def code_env(tree: str | None) -> dict[str, str]:
    """The environment that runs a server from ``tree`` (another kjbod checkout, KJBOD_BENCH_BEFORE) instead of
    this code; nothing for this code."""
    return {} if tree is None else {"PYTHONSAFEPATH": "1", "PYTHONPATH": str(Path(tree).resolve())}


@contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    """``values`` in this process's environment meanwhile (what the load generator reads)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ================================================================================================ isolation


def _partition_dirs(server: BenchServer, topic: str) -> dict[int, int]:
    """partition -> index of the log dir holding it."""
    found = {}
    for i, d in enumerate(server.log_dirs):
        for entry in d.glob(f"{topic}-*"):
            found[int(entry.name.rsplit("-", 1)[1])] = i
    return found


def _background_load(port: int, topic: str, partitions: list[int], bad: int, stop: threading.Event,
                     batch: bytes) -> list[threading.Thread]:
    def consumer() -> None:
        conn = Connection(port)
        conn.sock.settimeout(5)
        from .datapath import fetch_frame, parse_fetch_v11

        offsets = dict.fromkeys(partitions, 0)
        try:
            while not stop.is_set():
                # fetch_frame numbers partitions from 0: ask for all up to the highest healthy one at offset 0..
                frame_offsets = [offsets.get(p, 0) for p in range(max(partitions) + 1)]
                conn.sock.sendall(fetch_frame(topic, frame_offsets, 64 * 1024))
                parse_fetch_v11(conn.read_frame(), frame_offsets)
                for p in partitions:
                    offsets[p] = frame_offsets[p]
                time.sleep(0.01)
        except (OSError, RuntimeError):
            pass
        finally:
            conn.close()

    def bad_producer() -> None:
        conn = Connection(port)
        frame = produce_frame(topic, bad, batch)
        try:
            while not stop.is_set():
                conn.sock.sendall(frame)
                conn.read_frame()
        except OSError:
            pass
        finally:
            conn.close()

    threads = [threading.Thread(target=consumer, daemon=True), threading.Thread(target=bad_producer, daemon=True)]
    for t in threads:
        t.start()
    return threads


def bench_isolation(work: Path, rounds: int, seconds: float) -> dict:
    heading(f"Isolation: healthy-dir Produce p99 at {ISOLATION_RATE} msg/s with a consumer, while a producer writes "
            "to a bad dir (200 ms per operation; hung), vs no fault")
    faults = work / "faults.json"
    server: BenchServer | None = None
    batch = small_batch()
    samples: dict[str, list[float]] = {"none": [], "slow": [], "hung": []}
    rules: dict[str, list[dict]] = {"none": [], "slow": [{"dir": None, "delay_ms": 200}], "hung": [{"dir": None, "delay_ms": 3_600_000}]}
    try:
        for rnd in range(rounds):
            for name, entries in rules.items():
                # A fresh process per variant: a hung operation never returns, so nothing after it is fair.
                shutil.rmtree(work / "isolation", ignore_errors=True)
                faults.write_text("[]")
                server = BenchServer(work / "isolation", {"log.dir.stall.timeout.ms": "0"},
                                     env={"KJBOD_FAULTS": str(faults)}).start()
                topic = f"iso{rnd}"
                create_topic(server.port, topic, 3)
                where = _partition_dirs(server, topic)
                bad_p = next(p for p, d in where.items() if d == 2)
                healthy = sorted(p for p in where if p != bad_p)
                faults.write_text(json.dumps([{**e, "dir": str(server.log_dirs[2])} for e in entries]))
                stop = threading.Event()
                threads = _background_load(server.port, topic, healthy, bad_p, stop, batch)
                try:
                    latencies = paced_produce(server.port, topic, healthy[0], ISOLATION_RATE, seconds, batch)
                finally:
                    stop.set()
                    for t in threads:
                        t.join(0.5)
                    faults.write_text("[]")
                    server.stop()
                samples[name].append(p99(latencies))
    finally:
        if server is not None:
            server.stop()
    out = {}
    for name in ("slow", "hung"):
        r = median([a / b for a, b in zip(samples[name], samples["none"], strict=True)])
        out[f"isolation_{name}_dir_p99_vs_none"] = r
        print(f"   bad dir {name}: healthy-dir p99 {median(samples[name]) * 1000:.2f} ms vs "
              f"{median(samples['none']) * 1000:.2f} ms with no fault: {r:.2f}x (target <= 2x: {verdict(r <= 2)})")
    return out


def run(rounds: int = 5, seconds: float = 3.0, quick: bool = False, p99_only: bool = False,
        fetch_only: bool = False) -> dict:
    if quick:
        rounds, seconds = 2, 1.5
    work = Path(tempfile.mkdtemp(prefix="kjbod-bench-dirs-", dir=os.environ.get("KJBOD_BENCH_DIR") or None))
    try:
        if p99_only:
            return bench_p99(work, rounds, seconds)
        if fetch_only:
            return bench_fetch(work, rounds, FETCH_PASSES)
        out = bench_handoff(work, rounds, seconds)
        out.update(bench_idempotent_handoff(work, rounds, seconds))
        out.update(bench_isolation(work, rounds, seconds * 2))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m tools.bench.dir_workers", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=None, help="rounds per variant (5; 15 with --p99 or --fetch)")
    ap.add_argument("--seconds", type=float, default=3.0, help="measured seconds per round and variant")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--p99", action="store_true", help="only the Produce p99 at the moderate rate, and its tail")
    ap.add_argument("--fetch", action="store_true", help="only the Fetch zero-copy phase, and its per-fetch costs")
    args = ap.parse_args(argv)
    rounds = args.rounds if args.rounds is not None else (15 if args.p99 or args.fetch else 5)
    run(rounds, args.seconds, args.quick, p99_only=args.p99, fetch_only=args.fetch)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

