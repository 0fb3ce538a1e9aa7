"""The floor under the replication bench's latency figure: what the topology of a replicated record costs on this
machine with (almost) no work per hop.

kjbod's acks=all record to an RF 3 topic passes through three processes, each an event loop plus a dir worker
thread; its acks=1 record to an RF 1 topic through one. tools/bench/replication.py measures the p99 of both at
500 records/s and their ratio. Part of that ratio is kjbod's Python per hop; part is the topology itself: the
wake-ups of threads and processes in sequence, on cores that everything else on the machine shares. This module
measures the second part alone, so the first can be read against it: three processes of its own, a "leader" and
two "followers", each a uvloop event loop and one worker thread, pass records along the same chain as kjbod,
and the only work a hop does is one ``os.pwrite`` of the record's bytes on the worker.

* acks=1: client -> leader's loop (reads the frame) -> its worker (pwrite) -> its loop -> the reply.
* acks=all: client -> leader's loop -> its worker (pwrite) -> its loop, which answers the fetch each follower
  keeps parked at the leader (as Kafka's followers long-poll) with the record -> each follower's loop -> its
  worker (pwrite) -> its loop, which sends its next fetch carrying its new end offset -> the leader's loop,
  which replies once both followers' end offsets are past the record (the high watermark moved).

Each process's loop and worker wake each other as kjbod.storage.workers does, with its own few lines instead of
kjbod's machinery: the loop queues a job and writes to an eventfd the worker sleeps on in a read; the worker
queues its answers and writes to an eventfd the loop watches with add_reader. Both reads and writes run with the
GIL released. Every job rings the worker (kjbod holds a loop's jobs while a batch is in flight; at one record at a
time the two are the same). The threads' CPUs are left to the kernel; with ``placed`` (``--placed``) each
process keeps its loop and worker on the CPU its loop started on, as kjbod.storage.workers.Placement does for a
quiet broker (at 500 records/s kjbod's followers are quiet, its leader is not always): measured on this VM
under other work (load 1-3), the two gave the same figures within their spread.

The client, in the benchmark's process, has one TCP connection per case and sends one record at a time on a
schedule of `rate` a second; a record's latency runs from its scheduled send time to its reply, so a slow
reply that delays the next send counts in that one too. That also counts the client's own wake-up from its
sleep until the send, which on this VM under other work is a good part of an acks=1 p99 (measured at load 1.5:
~1 ms, the acks=1 p99 1.2-1.6 ms from the schedule, 0.44-0.71 ms from the send), so each figure is given a
second time from each record's actual send to its reply ("from_send"), which is when kjbod's Paced producer
(tools/bench/replication.py) starts its clock; librdkafka's hand-off of the record to its broker thread, a
wake-up the floor's client does not have, is inside that clock. The two cases alternate in rounds (which goes
first alternates too) after a warm-up, and the figure is the median of the per-round p99s, as the replication
bench's latency rounds (`latency_rounds`). Each case's CPU per record in the three processes (their threads'
schedstat, each event loop's share apart) comes with it: measured on this VM, 450-560 us an acks=all record
against 140-165 us an acks=1 record (3.2-3.7x, about the ratio of kjbod's brokers), four fifths of it in the
loops (the leader's ~210-245 us against ~115-130), which do little but their system calls and wake-ups.

Frames (not Kafka's: a floor needs none of it), each a 4-byte big-endian size and then:

* produce (client -> leader): kind (1 acks=1, 2 acks=all, 1 byte), sequence number (4 bytes), the record;
* its reply: the same kind and sequence number;
* fetch (follower -> leader): kind 3, the follower's id (1 byte), its end offset (8 bytes);
* records (leader -> follower): kind 4, the first record's offset (8 bytes), the count (4 bytes), the records.

    python -m tools.bench.replication_floor [--rounds N] [--seconds S] [--rate R] [--placed]

(``--role leader|follower`` runs one of the three processes: the benchmark starts them.) Each process exits when
its standard input closes, which the benchmark does when it is done, or dies: no process outlives it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from .common import median, p99, sched_ms

ROOT = Path(__file__).resolve().parents[2]
RECORD = 1024
FOLLOWERS = 2
WARM_UP_S = 2.0
START_TIMEOUT_S = 30.0
REPLY_TIMEOUT_S = 30.0  # a record unanswered this long: a process of the floor is gone or stuck

SIZE = struct.Struct(">I")
PRODUCE = struct.Struct(">BI")  # kind, sequence number (a produce and its reply)
FETCH = struct.Struct(">BBQ")  # kind, follower id, end offset
RECORDS = struct.Struct(">BQI")  # kind, first offset, count
ACKS_1, ACKS_ALL, FETCH_KIND, RECORDS_KIND = 1, 2, 3, 4
MAX_FRAME = 1 << 20  # a bigger size is a broken stream, not a frame


class Worker:
    """A process's one "dir worker": appends handed over by the loop, each a pwrite, and their callbacks back on
    the loop. The two threads wake each other through an eventfd each way (read and written with the GIL
    released, as kjbod.storage.workers' bells)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._jobs: deque[tuple[int, bytes, int, Callable[[], None]]] = deque()
        self._answers: deque[Callable[[], None]] = deque()
        self._wake = os.eventfd(0, os.EFD_CLOEXEC)  # blocking: the worker sleeps in its read
        self._back = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        loop.add_reader(self._back, self._answered)
        threading.Thread(target=self._run, name="floor-dir-worker", daemon=True).start()

    def append(self, fd: int, data: bytes, position: int, done: Callable[[], None]) -> None:
        """On the loop: `data` written at `position` of `fd` on the worker, then `done()` on the loop."""
        self._jobs.append((fd, data, position, done))
        os.eventfd_write(self._wake, 1)

    def _run(self) -> None:
        jobs, answers = self._jobs, self._answers
        while True:
            os.eventfd_read(self._wake)  # a ring before the read is counted: it returns at once
            while jobs:
                fd, data, position, done = jobs.popleft()
                try:
                    os.pwrite(fd, data, position)
                except OSError as e:  # the temp dir's disk: nothing to measure past
                    print(f"replication floor: the append failed: {e}", file=sys.stderr, flush=True)
                    os._exit(1)
                answers.append(done)
            os.eventfd_write(self._back, 1)

    def _answered(self) -> None:
        try:
            os.eventfd_read(self._back)  # cleared before the answers are taken: a later ring wakes the loop again
        except BlockingIOError:
            return
        answers = self._answers
        while answers:
            answers.popleft()()


class Log:
    """One partition's file. The loop gives each append its offset and position when it hands it to the worker;
    `end` counts the records the worker has written (the log end offset)."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        self.assigned = 0  # records handed to the worker
        self.position = 0  # bytes handed to the worker
        self.end = 0

    def reserve(self, data: bytes, count: int = 1) -> tuple[int, int]:
        """(first offset, position) of an append of `count` records in `data`."""
        offset, position = self.assigned, self.position
        self.assigned += count
        self.position += len(data)
        return offset, position


class Frames(asyncio.Protocol):
    """Splits a connection's bytes into frames (each without its size) for `frame`; a broken stream closes the
    connection with a message."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        while len(buf) >= SIZE.size:
            (size,) = SIZE.unpack_from(buf)
            if size > MAX_FRAME or size < 1:
                self.broken(f"a frame of {size} bytes")
                return
            if len(buf) < SIZE.size + size:
                break
            body = bytes(buf[SIZE.size:SIZE.size + size])
            del buf[:SIZE.size + size]
            self.frame(body)

    def frame(self, body: bytes) -> None:
        raise NotImplementedError

    def broken(self, what: str) -> None:
        print(f"replication floor ({type(self).__name__}): {what}; connection closed", file=sys.stderr, flush=True)
        self._buf.clear()
        if self.transport is not None:
            self.transport.close()

    def send(self, body: bytes) -> None:
        assert self.transport is not None
        self.transport.write(SIZE.pack(len(body)) + body)


class Leader:
    """The leader's state: an RF 1 log, an RF 3 log with its followers' end offsets and parked fetches, the
    acks=all produces waiting for the high watermark, and the RF 3 records a follower may still fetch."""

    def __init__(self, directory: Path, worker: Worker) -> None:
        self.worker = worker
        self.rf1 = Log(directory / "leader-rf1.log")
        self.rf3 = Log(directory / "leader-rf3.log")
        self.kept: list[bytes] = []  # RF 3 records from offset kept_from, until every follower has them
        self.kept_from = 0
        self.ends: dict[int, int] = {}  # follower id -> its end offset, from its last fetch
        self.parked: dict[int, LeaderConnection] = {}  # follower id -> the connection its fetch waits on
        self.waiting: deque[tuple[int, LeaderConnection, bytes]] = deque()  # (offset, client, reply)
        self.hw = 0

    def produce(self, conn: LeaderConnection, kind: int, reply: bytes, record: bytes) -> None:
        log = self.rf3 if kind == ACKS_ALL else self.rf1
        offset, position = log.reserve(record)
        if kind == ACKS_ALL:
            self.kept.append(record)
            self.worker.append(log.fd, record, position, lambda: self._replicate(offset, conn, reply))
        else:
            self.worker.append(log.fd, record, position, lambda: self._written(log, offset, conn, reply))

    @staticmethod
    def _written(log: Log, offset: int, conn: LeaderConnection, reply: bytes) -> None:
        log.end = offset + 1
        conn.send(reply)

    def _replicate(self, offset: int, conn: LeaderConnection, reply: bytes) -> None:
        self.rf3.end = offset + 1
        self.waiting.append((offset, conn, reply))
        parked, self.parked = self.parked, {}
        for follower, fetcher in parked.items():
            self._answer(follower, fetcher)

    def fetch(self, conn: LeaderConnection, follower: int, end: int) -> None:
        if end > self.rf3.end or end < self.kept_from:
            conn.broken(f"follower {follower} fetches from offset {end}, outside {self.kept_from}-{self.rf3.end}")
            return
        self.ends[follower] = end
        if len(self.ends) == FOLLOWERS:
            least = min(self.ends.values())  # a follower's end is never past the leader's: the high watermark
            if least > self.hw:
                self.hw = least
                waiting = self.waiting
                while waiting and waiting[0][0] < least:
                    _offset, client, reply = waiting.popleft()
                    client.send(reply)
            if least > self.kept_from:  # every follower has these
                del self.kept[:least - self.kept_from]
                self.kept_from = least
        if end < self.rf3.end:
            self._answer(follower, conn)
        else:
            self.parked[follower] = conn

    def _answer(self, follower: int, conn: LeaderConnection) -> None:
        end = self.ends[follower]
        records = self.kept[end - self.kept_from:self.rf3.end - self.kept_from]
        conn.send(RECORDS.pack(RECORDS_KIND, end, len(records)) + b"".join(records))

    def gone(self, conn: LeaderConnection) -> None:
        self.parked = {f: c for f, c in self.parked.items() if c is not conn}
        self.waiting = deque(w for w in self.waiting if w[1] is not conn)


class LeaderConnection(Frames):
    def __init__(self, leader: Leader) -> None:
        super().__init__()
        self.leader = leader
        self.closed = False

    def frame(self, body: bytes) -> None:
        kind = body[0]
        if kind in (ACKS_1, ACKS_ALL) and len(body) > PRODUCE.size:
            self.leader.produce(self, kind, body[:PRODUCE.size], body[PRODUCE.size:])
        elif kind == FETCH_KIND and len(body) == FETCH.size:
            _kind, follower, end = FETCH.unpack(body)
            self.leader.fetch(self, follower, end)
        else:
            self.broken(f"a frame of kind {kind} and {len(body)} bytes")

    def send(self, body: bytes) -> None:
        if not self.closed:
            super().send(body)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.leader.gone(self)


class FollowerConnection(Frames):
    """A follower: one fetch parked at the leader at a time; what it brings is appended on the worker, whose
    answer sends the next fetch with the new end offset."""

    def __init__(self, follower: int, log: Log, worker: Worker, lost: asyncio.Future[None]) -> None:
        super().__init__()
        self.follower = follower
        self.log = log
        self.worker = worker
        self.lost = lost

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._fetch()

    def _fetch(self) -> None:
        self.send(FETCH.pack(FETCH_KIND, self.follower, self.log.end))

    def frame(self, body: bytes) -> None:
        if len(body) < RECORDS.size or body[0] != RECORDS_KIND:
            self.broken(f"a frame of kind {body[0]} and {len(body)} bytes")
            return
        _kind, first, count = RECORDS.unpack_from(body)
        if first != self.log.assigned:
            self.broken(f"records from offset {first}, expected {self.log.assigned}")
            return
        data = body[RECORDS.size:]
        offset, position = self.log.reserve(data, count)
        self.worker.append(self.log.fd, data, position, lambda: self._written(offset + count))

    def _written(self, end: int) -> None:
        self.log.end = end
        if not self.lost.done():
            self._fetch()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)


def _until_stdin_closes(loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
    """A future done when standard input closes: the benchmark closes it to stop this process, and it closes
    when the benchmark dies too."""
    closed: asyncio.Future[None] = loop.create_future()
    fd = sys.stdin.fileno()

    def readable() -> None:
        if not os.read(fd, 4096):
            loop.remove_reader(fd)
            if not closed.done():
                closed.set_result(None)

    loop.add_reader(fd, readable)
    return closed


async def _serve(role: str, directory: Path, follower: int, leader_port: int) -> None:
    loop = asyncio.get_running_loop()
    closed = _until_stdin_closes(loop)
    worker = Worker(loop)
    if role == "leader":
        leader = Leader(directory, worker)
        server = await loop.create_server(lambda: LeaderConnection(leader), "127.0.0.1", 0)
        print(f"ready {server.sockets[0].getsockname()[1]}", flush=True)
        await closed
        server.close()
        return
    lost: asyncio.Future[None] = loop.create_future()
    log = Log(directory / f"follower-{follower}.log")
    await loop.create_connection(lambda: FollowerConnection(follower, log, worker, lost), "127.0.0.1", leader_port)
    print("ready", flush=True)
    await asyncio.wait([closed, lost], return_when=asyncio.FIRST_COMPLETED)


def serve(role: str, directory: Path, follower: int = 0, leader_port: int = 0, placed: bool = False) -> None:
    """One of the three processes (`role` leader or follower), until its standard input closes; `placed`: its
    loop and worker on the one CPU the loop starts on (as kjbod.storage.workers.Placement keeps a quiet broker's)."""
    import uvloop

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the benchmark, which stops this process
    if placed:  # the worker thread, started later from this one, inherits the CPU
        with open("/proc/thread-self/stat") as f:
            os.sched_setaffinity(0, {int(f.read().rsplit(")", 1)[1].split()[36])})
    uvloop.run(_serve(role, directory, follower, leader_port))


class Topology:
    """The leader and its two followers, started in a temp dir and stopped (and the dir removed) on exit, whatever
    ends the `with`."""

    def __init__(self, placed: bool = False) -> None:
        self.placed = placed
        self.processes: list[subprocess.Popen[str]] = []
        self.port = 0
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> Topology:
        try:
            self._dir = tempfile.TemporaryDirectory(prefix="kjbod-bench-floor-",
                                                    dir=os.environ.get("KJBOD_BENCH_DIR") or None)
            leader = self._start("leader")
            self.port = int(leader.partition(" ")[2])
            for follower in range(FOLLOWERS):
                self._start("follower", "--id", str(follower), "--leader-port", str(self.port))
        except BaseException:
            self.__exit__()
            raise
        return self

    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    @property
    def directory(self) -> Path:
        """Where the three processes keep their logs (leader-rf1.log, leader-rf3.log, follower-<id>.log)."""
        assert self._dir is not None
        return Path(self._dir.name)

    def _start(self, role: str, *args: str) -> str:
        """Starts one process and returns its "ready" line (the leader's names its port)."""
        assert self._dir is not None
        process = subprocess.Popen([sys.executable, "-m", "tools.bench.replication_floor", "--role", role,
                                    "--dir", self._dir.name, *args, *(["--placed"] if self.placed else [])],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        self.processes.append(process)
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], START_TIMEOUT_S)
        line = process.stdout.readline() if ready else ""
        if not line.startswith("ready"):
            raise RuntimeError(f"the replication floor's {role} did not start (exit status {process.poll()}; its "
                               f"stderr is above)")
        return line.strip()

    def __exit__(self, *_exc: object) -> None:
        for process in self.processes:
            if process.stdin is not None:
                try:
                    process.stdin.close()  # the process's signal to stop
                except OSError:
                    pass
        for process in self.processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()
        self.processes = []
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None


class Client:
    """One case's connection to the leader: records sent one at a time on a schedule."""

    def __init__(self, port: int, kind: int) -> None:
        self.kind = kind
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(REPLY_TIMEOUT_S)
        self.seq = 0
        self.record = b"x" * RECORD

    def run(self, rate: float, seconds: float, from_send: list[float] | None = None) -> list[float]:
        """Latencies (ms) of the records sent every 1/rate s for `seconds` (round(rate * seconds) records), each
        from its scheduled send time to its reply; `from_send` (when given) gets each one from its actual send."""
        out: list[float] = []
        reply = bytearray(SIZE.size + PRODUCE.size)
        view = memoryview(reply)
        started = time.perf_counter()
        for n in range(round(rate * seconds)):
            due = started + n / rate
            now = time.perf_counter()
            if due > now:
                time.sleep(due - now)
            self.seq += 1
            sent = time.perf_counter()
            self.sock.sendall(SIZE.pack(PRODUCE.size + RECORD) + PRODUCE.pack(self.kind, self.seq) + self.record)
            got = 0
            while got < len(reply):
                try:
                    k = self.sock.recv_into(view[got:])
                except TimeoutError:
                    raise RuntimeError(f"no reply from the replication floor's leader to record {self.seq} of kind "
                                       f"{self.kind} in {REPLY_TIMEOUT_S:g} s (a process of the floor gone or stuck: "
                                       f"its stderr is above)") from None
                if k == 0:
                    raise RuntimeError("the replication floor's leader closed the connection (its stderr is above)")
                got += k
            answered = time.perf_counter()
            out.append((answered - due) * 1000)
            if from_send is not None:
                from_send.append((answered - sent) * 1000)
            if PRODUCE.unpack_from(reply, SIZE.size) != (self.kind, self.seq):
                raise RuntimeError(f"the replication floor's leader answered {bytes(reply).hex()} to record "
                                   f"{self.seq} of kind {self.kind}")
        return out

    def close(self) -> None:
        self.sock.close()


def floor(rounds: int, seconds: float, rate: float = 500, warm_up: float = WARM_UP_S,
          show: Callable[[str], None] | None = None, placed: bool = False) -> dict:
    """The floor's p99s: `rounds` rounds of `seconds` per case at `rate` records a second, the cases interleaved
    (which goes first alternates) after `warm_up` seconds of each. Returns the medians of the per-round p99s
    (ms, "acks_all_p99_ms" and "acks1_p99_ms"), their "ratio", the per-round p99s ("rounds": (acks=all, acks=1)
    per round), the records each case sent ("records"), the three processes' CPU per record in each case
    ("cpu_us_per_record", from their threads' schedstat) and each one's, with its event loop's share
    ("cpu_us_per_record_by_process": case -> "leader", "follower 0" or "follower 1" -> "all" and "loop"), the
    time their threads waited runnable for a core per record ("run_queue_wait_us_per_record"); and "from_send":
    the p99s, their ratio and the rounds again, each record timed from its actual send (see the module's
    docstring). `show` gets a line per round."""
    per_round: dict[int, list[float]] = {ACKS_ALL: [], ACKS_1: []}
    per_round_sent: dict[int, list[float]] = {ACKS_ALL: [], ACKS_1: []}
    records = {ACKS_ALL: 0, ACKS_1: 0}
    names = ["leader", *(f"follower {f}" for f in range(FOLLOWERS))]  # in Topology.processes' order
    # ms per process: every thread's CPU, the loop's, every thread's wait for a core
    cpu = {kind: [[0.0, 0.0, 0.0] for _ in names] for kind in (ACKS_ALL, ACKS_1)}
    waited = {ACKS_ALL: 0.0, ACKS_1: 0.0}  # the last round's, all three processes
    with Topology(placed) as topology:
        clients = {kind: Client(topology.port, kind) for kind in (ACKS_ALL, ACKS_1)}
        try:
            for client in clients.values():
                client.run(rate, warm_up)  # connections, page cache, every thread's first wake-ups
            pids = topology.pids()
            for i in range(rounds):
                for kind in (ACKS_ALL, ACKS_1) if i % 2 == 0 else (ACKS_1, ACKS_ALL):
                    used = _sched(pids)
                    from_send: list[float] = []
                    xs = clients[kind].run(rate, seconds, from_send)
                    waited[kind] = 0.0
                    for total, before, after in zip(cpu[kind], used, _sched(pids), strict=True):
                        for j in range(3):
                            total[j] += after[j] - before[j]
                        waited[kind] += after[2] - before[2]
                    per_round[kind].append(p99(xs))
                    per_round_sent[kind].append(p99(from_send))
                    records[kind] += len(xs)
                if show is not None:
                    show(f"     floor round {i + 1}: p99 acks=all {per_round[ACKS_ALL][-1]:.2f} ms, acks=1 "
                         f"{per_round[ACKS_1][-1]:.2f} ms; from the send {per_round_sent[ACKS_ALL][-1]:.2f} and "
                         f"{per_round_sent[ACKS_1][-1]:.2f} ms (the processes' run-queue wait {waited[ACKS_ALL]:.0f} "
                         f"ms against {waited[ACKS_1]:.0f} ms; load {os.getloadavg()[0]:.1f})")
        finally:
            for client in clients.values():
                client.close()
    acks_all, acks1 = median(per_round[ACKS_ALL]), median(per_round[ACKS_1])
    sent_all, sent1 = median(per_round_sent[ACKS_ALL]), median(per_round_sent[ACKS_1])
    cases = {"acks_all": ACKS_ALL, "acks1": ACKS_1}

    def us(ms: float, kind: int) -> float:
        return ms / max(records[kind], 1) * 1000

    return {"acks_all_p99_ms": acks_all, "acks1_p99_ms": acks1, "ratio": acks_all / acks1,
            "rounds": list(zip(per_round[ACKS_ALL], per_round[ACKS_1], strict=True)),
            "records": {case: records[kind] for case, kind in cases.items()},
            "cpu_us_per_record": {case: us(sum(t[0] for t in cpu[kind]), kind) for case, kind in cases.items()},
            "cpu_us_per_record_by_process": {
                case: {name: {"all": us(t[0], kind), "loop": us(t[1], kind)}
                       for name, t in zip(names, cpu[kind], strict=True)}
                for case, kind in cases.items()},
            "run_queue_wait_us_per_record": {case: us(sum(t[2] for t in cpu[kind]), kind)
                                             for case, kind in cases.items()},
            "from_send": {"acks_all_p99_ms": sent_all, "acks1_p99_ms": sent1, "ratio": sent_all / sent1,
                          "rounds": list(zip(per_round_sent[ACKS_ALL], per_round_sent[ACKS_1], strict=True))}}


def _sched(pids: list[int]) -> list[tuple[float, float, float]]:
    """Each process's ms so far: every thread's CPU, its event loop's (its main thread's), and every thread's
    wait runnable for a core."""
    out = []
    for pid in pids:
        cpu, wait = sched_ms([pid])
        out.append((cpu, sched_ms([pid], loop_only=True)[0], wait))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench.replication_floor", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=4.0, help="per case and round")
    ap.add_argument("--rate", type=float, default=500, help="records a second")
    ap.add_argument("--placed", action="store_true",
                    help="each process's loop and worker on one CPU (as kjbod's Placement keeps a quiet broker's)")
    ap.add_argument("--role", choices=("leader", "follower"), help=argparse.SUPPRESS)
    ap.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--id", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--leader-port", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.role is not None:
        if args.dir is None or (args.role == "follower" and not args.leader_port):
            ap.error("--role needs --dir, and a follower --leader-port")
        serve(args.role, args.dir, args.id, args.leader_port, args.placed)
        return 0
    if args.rounds < 1 or args.seconds <= 0 or args.rate <= 0:
        ap.error("--rounds must be at least 1, --seconds and --rate above 0")
    print(f"replication floor: {args.rounds} rounds of {args.seconds:g} s per case at {args.rate:g} records/s of "
          f"{RECORD} bytes, interleaved, after a {WARM_UP_S:g} s warm-up ({os.cpu_count()} cores)")
    try:
        result = floor(args.rounds, args.seconds, args.rate, show=print, placed=args.placed)
    except KeyboardInterrupt:  # the three processes are stopped by then (Topology)
        print("replication floor: interrupted", file=sys.stderr)
        return 130
    cpu, sent = result["cpu_us_per_record"], result["from_send"]
    print(f"   median of per-round p99 acks=all {result['acks_all_p99_ms']:.2f} ms, acks=1 "
          f"{result['acks1_p99_ms']:.2f} ms: {result['ratio']:.2f}x ({result['records']['acks_all']} and "
          f"{result['records']['acks1']} records); from each record's send {sent['acks_all_p99_ms']:.2f} ms and "
          f"{sent['acks1_p99_ms']:.2f} ms: {sent['ratio']:.2f}x")
    wait = result["run_queue_wait_us_per_record"]
    print(f"   CPU per record of the three processes {cpu['acks_all']:.0f} us against {cpu['acks1']:.0f} us "
          f"({cpu['acks_all'] / cpu['acks1']:.1f}x); their threads' wait for a core {wait['acks_all']:.0f} us against "
          f"{wait['acks1']:.0f} us a record")
    for case, label in (("acks_all", "acks=all"), ("acks1", "acks=1")):
        each = result["cpu_us_per_record_by_process"][case]
        print(f"   per process, {label}: " + ", ".join(f"{name} {us['all']:.0f} us (its loop {us['loop']:.0f})"
                                                      for name, us in each.items()) + " a record")
    return 0


if __name__ == "__main__":
    sys.exit(main())
