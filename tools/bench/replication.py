"""Replication benchmarks on a 3-broker cluster (`kjbod cluster up --detach --brokers 3 --log-dirs 2`), each
against its reference measured in the same run:

* replicated produce: acks=all to an RF 3 topic against acks=1 to an RF 1 topic, the same confluent-kafka
  producer (1 MiB batches of 1 KiB records); throughputs and ratio (target >= 40%);
* follower catch-up: a follower that was down while its leader took a backlog (acks=1, RF 2) restarts; the
  time from when it begins to follow (its log's became_follower) until it is back in the ISR, against a consumer
  reading the same backlog from the leader (target: the follower's rate >= 70% of the consumer's); three
  samples on topics of their own, the consumer before the follower in one and after it in the others, each
  sample printed, the figure the median of the per-sample ratios with their spread; memory touched before each
  follower restart (common.warm_memory: the follower's appends, not the consumer's reads, meet this VM's slow
  first touch of fresh memory) and, with --trace, the copy's time split between waiting for the leader, the
  follower's dir worker and the way back to the next fetch;
* latency: produce p99 at a fixed moderate rate (500 records/s of 1 KiB, one producer per case, linger 0),
  acks=all RF 3 against acks=1 RF 1 on the RF 3 topic's leader (target <= 3x).  One p99 of a few thousand
  records swings with whatever else the shared cores run (single runs gave 0.36x to 5.10x), so the two cases
  alternate in rounds of 2,000 records each after a warm-up, and the figure is the ratio of the medians of the
  per-round p99s (the rounds are printed). Right after them, the cluster still up and idle, the topology's floor
  (tools.bench.replication_floor) runs as many rounds: three processes of its own, each a uvloop loop and one worker
  thread, pass records along the same chain with one 1 KiB pwrite per hop and nothing else. Its p99 ratio is what the
  hops and wake-ups alone cost on this machine at that moment, which only fewer processes, threads or wake-ups per
  record (or cores of their own) could lower, however little kjbod did per hop; kjbod's p99s are printed as multiples
  of the floor's. Three runs on this VM under other work (load 1.5-4.5) measured the floor's p99 ratio at 1.4-2.0x
  (1.7-2.1x timed from each record's send) with a CPU per record ratio of 3.3-3.5x, and kjbod's p99s at 6.0-7.3x the
  floor's acks=all and 1.8-3.8x its acks=1 (kjbod 3.4-5.1x): under such load most of kjbod's acks=all tail is its own
  per-hop work queueing for the cores, not the hops alone (the floor's ratio moves with the load too: one short floor
  run at load 0.8 gave 3.2x, others at load 1-2 gave 1.1-2.7x). Each of kjbod's rounds also prints, from the
  kernel's per-thread schedstat, the CPU time the three brokers used and the time their threads waited runnable for a
  core: the acks=all case's tail is set by those waits (its records pass through three processes and eight wake-ups in
  sequence on cores the load generator and everything else on the machine share), so the figure can be read against
  them. A summary line gives the brokers' CPU per record in each case: a follower's fetch round trip costs the leader
  and the follower together about what a produce request costs the leader, so acks=all RF 3 needs about 3x the CPU of
  acks=1 RF 1 (measured per broker thread from /proc schedstat, 500 records/s, load 2-5 from other work: the
  leader's loop ~550-600 us a record against ~270-350 us, its dir worker ~85 us in both, each follower's loop
  ~195-220 us and its dir worker ~80 us; before the follower fetches on both sides were answered by callbacks
  (a parked fetch completed in the append's own call at the leader, the next fetch sent from the callback that
  applied the last answer at the follower, no task, future or timeout scope per fetch) the leader's loop took
  ~630-750 us and each follower's ~255-280 us. Much of what is left is the wake-up of a thread or process each
  hop costs: an acks=1 record takes 4 (producer, leader's loop, its dir worker, loop, producer), an acks=all
  record 12, 8 of them in sequence; the follower's append must stay off its loop (its dir worker), and the
  leader's loop runs the Produce, two fetch answers and two fetches per record). Where a replicated record's CPU
  goes, per role (--profile, cProfile of each loop in CPU time): a follower fetch round trip is ~300 Python calls
  on the leader's loop and ~180 on the follower's, spread over many small steps (the request's decode and checks,
  the follower's position, the HW move and the acks=all answer it completes, the parked fetch's wake-up, the read,
  the answer's encoding, the connection's plumbing), the largest (the answer's build) about a seventh of it; the
  rest of the loops' CPU is uvloop's C side and the syscalls (a send per answer: ~20-30 us each on this VM, as
  py-spy sampling the paused brokers showed). Since the follower writes its fetch from a template and reads a
  plain answer by a short path (kjbod.net.fetch_fast: 1.8 us against 5.2 to build and encode, 2.8 against 5.8 to
  decode), a record costs a few us less CPU. (The leader's read for a caught-up follower from the bytes of its
  last appends kept in memory, 2.7 us against 15.8, was tried and left out: up to 64 KiB per partition for ~1% of
  a record's CPU.) Since then a caught-up follower's bytes are one pread from the positions where the last appends
  began and ended (PartitionLog.read_to_end: positions, not bytes; 6 us against 21 with the header scans and
  the region's dup and close), a one-partition follower fetch is answered on the leader's loop without the
  dirs' hand-off machinery, and an append wakes only the fetches parked on its partition (before, every
  append woke every parked fetch: on the acks=1 RF 1 rounds the RF 3 topic's two idle follower fetches, each
  record); the leader's checks and the follower's position take one lookup, the fetcher keeps each partition's
  log between fetches. In process the leader's answer to the two parked fetches of a record went from 85 to
  38 us; --profile counts 903 Python calls per acks=all record on the leader's loop (1183 before) and 291 per
  acks=1 record (331), 171 on each follower's (182); in the latency rounds (load 0.5-1.6) the brokers' CPU per
  acks=all record went from 1.23-1.32 ms to 1.09 ms, the leader's from 707-759 us to 600 (2.79x that run; under
  other work, load 2-4, 1.24-1.29 ms and 1.36x to 4.13x). The per-broker line splits each broker's event loop
  from its other threads (the dir workers): a follower's dir worker takes ~85-100 us a record for an append of
  ~11 us in process, the rest its hand-offs to and from the loop; what the leader's loop spends beyond its
  handlers (~80 us a record in process for the two fetch round trips) is the connection's reads, writes and
  reply queue and the wake-ups themselves. The request decode (4.7 us) and answer encode (2.8 us) per fetch are
  the generated codec's straight-line code: a hand-written short way would save ~1% of a record's CPU. Both together measured inside this VM's run-to-run spread: in eight runs interleaved with the
  code before (load 3-4) the brokers' CPU per acks=all record was 1.17-1.33 ms (median 1.19) against 1.12-1.38
  (median 1.33). Since then the leader answers a replica fetcher's repeated fetch from its bytes
  (kjbod.broker.handlers.follower_fetch_fast: no decode, resolution or generated encode; the request's fixed bytes
  and the answer's kept per connection, checked again whenever the image, leader epoch or ISR moves), with fewer
  calls for the follower's position, the HW and the log's read lock: --profile counts 589 Python calls per acks=all
  record on the leader's loop (941 before) and 291 per acks=1 record (300), ~149 per follower fetch round trip
  against ~320 (in process, the router, the handler and the append's wake-up, tools.bench.follower_fetch_leader: 96
  calls and 36 us per round trip against 236 and 90 for the general way on the same leader). One latency run after
  it (load 2.3-3.2) gave the brokers' CPU per acks=all record as 1.60 ms against 0.51 (the leader's loop 672 us
  against 368; 1.90 ms, 0.58, 873 and 418 as last measured before it) and still 3.86x for the p99s. What is left per
  record is spread thin (see above) or is the hops themselves: 3x on a quiet
  machine needs either fewer thread and process wake-ups per replicated record (the follower's append off its loop
  is one, by design) or cores the load generator and the other work do not share. On 2 shared cores the p99 ratio
  swings around that CPU ratio with the machine's other load (1.6x to 3.3x between runs of one session). Since a
  follower with one partition takes its leader's plain answers by a short way (kjbod.broker.replication.fetcher's
  _Lane: the answer read with one unpack and handed to the dir's worker as one job, the next fetch written from
  the last one's bytes) and its dir worker runs less Python around each append, --profile counts 89-91 Python
  calls per acks=all record on each follower's loop (175 before; the dir worker 83 against 96 in process,
  tools.bench.follower_answer), and in the latency rounds each follower's CPU per acks=all record went from
  450-454 us (its loop 297-300) to 289-292 (loop 168-169), the brokers' from 1.96 ms to 1.53 (the p99 ratio
  4.41x before, 2.18x after, each in one run at load 1.3-2.1: inside the spread above). --profile now profiles
  each broker's dir workers too: a follower's ran 80 Python calls per fetch answer, most of them the append's own
  steps (the batch check, the segment's write and indexes, the file seam's bookkeeping), the rest the hand-off;
  with the follower's append on a path of its own (PartitionLog._append_follower), a batch of one closure taken
  without looking for a group, and one timeout timer per fetcher instead of a timer made and cancelled per fetch,
  75 (tools.bench.follower_answer: 83 to 72 an answer; its CPU per answer in process 63-79 us to 56-65 on the
  worker, 86-109 to 79-92 on the loop, under load 2-2.5: inside that bench's spread). What is left on the worker
  is mostly its three system calls and two wake-ups per answer (the eventfd read that wakes it, the writev, the
  eventfd write that wakes the loop), which the append's place on the dir's worker requires. One latency run
  after it (load 1.9-2.6) gave each follower 306-319 us a record (its loop 183-192, its other threads 123-127;
  last measured before: ~338, ~198 and ~140), the brokers' CPU per acks=all record 1.50 ms against 0.61, and
  3.57x for the p99s. Since the followers one append wakes share the leader's one read of it, each follower
  connection's parked fetches share one max_wait_ms timer and the acks=all timer takes the loop kept at start
  (asyncio.get_running_loop() is a getpid system call each time), --syscalls counts 18.5 system calls per acks=all
  record on the leader against 23.6 (preadv2 1.0 against 1.7, getpid 1.3 against 2.4; the rest is the three
  sockets' reads and writes, the dir worker's eventfd hand-offs, epoll and the GIL's futexes) and --profile 571
  Python calls on its loop against 587 (tools.bench.follower_fetch_leader: 71 against 96 per round trip); one
  latency run after it, under other work (load 2.9-4.1, p99s of 20-138 ms), gave the brokers' CPU per acks=all
  record as 1.46 ms against 0.62 (the leader's loop 708 us against 439) and 4.14x for the p99s: inside the
  spread above. (Since then the connection writes the only Later reply out from its completion without the
  pump's batch: tools.bench.produce_loop_cpu counts 230 Python calls per Produce against 234, and the leader
  writes three such replies an acks=all record; one --profile run after it gave 574 calls per acks=all record on
  the leader's loop and 279 per acks=1 record, which says the figure moves by about ten between runs.) Since a
  follower's fetch with a small read to send that the leader's loop may not make because its dir's worker is busy
  with the partition's one next append (the worker moves the log end before the loop hears of that append) waits
  for the append's wake-up, once, instead of taking the general way (a decode, a read handed to that busy worker
  behind the append, an encode), --profile counts 0.013 and 0.158 general-way fetches per acks=all record in two
  runs against 0.306 (0.7% and 12% of the follower fetches against 23%; the second run's followers, a record behind
  as before, often had two appends in flight, which the wait leaves to the general way), and the leader's dir
  workers 74-75 Python calls a record against 82 (acks=1's 66-74: almost no reads left on them). Per record the
  counts follow how many records a fetch carries (the first run's followers fetched once a record, 0.97 each
  against 0.66: 545 calls on the leader's loop against 525, 88 on each follower's against 63; the second's 0.65:
  503 and 63). Two latency runs after it gave the brokers' CPU per acks=all record as 1.40 ms against 0.54 at load
  1.9-2.5 (the leader 792 us, its loop 661; each follower ~300 us, its loop ~180; 3.63x for the p99s) and 1.20 ms
  against 0.53 at load 5.7-6.6 (the leader 726 us, loop 590; each follower ~237, loop ~140; 3.36x, 1.16x for the
  floor); --syscalls counts 18.4 system calls per acks=all record on the leader, getpid 1.27 of them: one a
  Produce, DirWork's asyncio.get_running_loop() (kjbod.broker.dir_work). Since such a fetch waits for every
  append in flight when it begins to wait (up to 8; each wake-up one of them answered), not only when exactly one
  is, the general way's share of the leader's follower fetches at 500 records/s went from 3.5% and 16.8% to 0.7%
  and 5.3% (four clusters alternating the two rules under other work, load 4.3-6.1, counted by a patch not kept:
  most general-way fetches had had 2 to 18 appends in flight); the brokers' CPU per acks=all record stayed inside
  the spread (1.47, 1.51 and 1.54 ms against 0.63, 0.62 and 0.73 in three latency runs after it, load 1.8-3.6;
  4.47x, 2.26x and 2.29x).
  perf (cpu-clock samples at 500 records/s) puts 75% of the leader's CPU and 65% of each follower's in the
  interpreter (libpython; its eval loop about a third of all samples), 16-23% in the kernel and 3-5% in uvloop:
  what is left is Python run per record, and of the 265 calls an acks=all record adds on the leader's loop
  (--profile) the connection's plumbing makes 55, the Later callbacks (kjbod.wire.handler) 22 and the file seam's
  one pread (kjbod.storage.fsio) 17. Since a reply a callback gives (the acks=all Produce's, each parked follower
  fetch's) is written by its completion with its request's metadata from the read's first unpack (8 calls fewer
  each), the short way's read for a caught-up follower takes the log lock and the page cache without switching the
  thread's no-waiting mode (PartitionLog.read_to_end_cached), a fetch at the latest epoch skips the epoch cache's
  lookup, an acks=all Produce's wait for the HW hands its outcome on in one call (Later.take), the HW check looks up
  min.insync.replicas itself and DirWork takes the loop running on its thread without asyncio.get_running_loop() (the
  getpid a Produce), --profile counts 504 Python calls per acks=all record on the leader's loop against 551 and 270
  per acks=1 record against 283 (the calls acks=all adds 234 against 268; the followers' loops unchanged at 90-92;
  tools.bench.follower_fetch_leader 63 per round trip against 71; since that --profile run the first follower an
  append wakes no longer looks for another's read, 2 calls a record), and --syscalls 17.1-17.3 system calls per
  acks=all record on the leader against 18.2 (getpid 0.27 against 1.26: what is left is the background's) and
  10.7-13.4 per acks=1 record against 11.3, the GIL's futexes moving with contention (0.8-3.5; without them 9.9
  against 11.0). Two latency runs after it gave the brokers' CPU per acks=all record as 1.38 and 1.40 ms against 0.56
  and 0.54 (the leader 737 and 782 us, its loop 621 and 645; each follower 303-324 us) and 2.34x (load 1.6-2.4) and
  5.62x (load 1.5-4.0, rising with other work during the run: per-round p99s of 6.5-32.2 ms) for the p99s: inside the
  spread above. GC is not a factor: with KJBOD_GC_LOG=1 each broker logged one collection, under 1 ms, in a whole
  run. No broker of the latency rounds has the fault seam on (see Cluster). With --trace, the slowest records' legs
  show no periodic event behind the tail (heartbeats, metadata fetches, ISR ticks, placement reviews, dir ticks, the
  watchdog, GC: each under the slowest records about as often as chance gives windows that long): every leg grows,
  whole processes not running for tens of ms while work waits for them; and, in some runs, a follower whose loop the
  dir workers' Placement had pinned to one CPU not running for up to 540 ms (the per-follower hop line, split by
  Placement state, shows it);
* failover: kill -9 of a leader's broker while an acks=all producer writes to its partition; the time until
  the first acknowledgement after the kill, as a multiple of broker.session.timeout.ms (target <= 1.3x); and
  the same for the failure of the log dir holding the leader's replica (the fault seam: EIO on every operation),
  as a multiple of broker.heartbeat.interval.ms (target <= 2x).

The same producer settings on both sides, idempotence off.  An extra line after the latency figure compares an
idempotent acks=all RF 3 producer with the non-idempotent one in rounds of their own (interleaved, warmed up
the same way), and the first record of a fresh producer of each kind: librdkafka (2.10+) makes an idempotent
producer's first record wait about 500 ms for its producer id whatever the broker (it asks from a 500 ms timer
after dropping its bootstrap connection; the same against librdkafka's mock cluster), which a measurement
without a warm-up took for a p99 of ~500 ms on kjbod.  The three brokers, the controller and the load generator
share this machine's cores (printed).

    python -m tools.bench.replication [--rounds N] [--quick] [--latency-only] [--trace] [--profile] [--syscalls]

--latency-only runs the latency rounds and the floor's alone (7 of each, also with --quick) and keeps the cluster's
directory (printed; each broker's server.log is in it): with KJBOD_GC_LOG=1 in the environment every broker logs each
of its garbage collections there (kjbod.server.app). --trace runs the brokers with KJBOD_TRACE (kjbod.net.trace) and
prints, after the latency figure, where the slowest records' time went leg by leg and which background events ran
under them (tools.bench.latency_trace); the tracing's own cost is in the figure then. --profile measures no figure: it
profiles each broker's event loop and dir workers in CPU time (KJBOD_LOOP_PROFILE, kjbod.server.loop_profile) while
each case runs alone at PROFILE_RATE (100 records/s), and prints each role's loop and workers' CPU, Python calls and top costs per
record. --syscalls measures no figure either: it counts each broker's system calls (strace -f -c on every thread) while
each case runs alone as under --profile, and prints them per record, the most frequent by name.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

from .common import heading, median, p99, rounds_main, sched_ms, verdict, warm_memory
from .replication_floor import floor

ROOT = Path(__file__).resolve().parents[2]
SESSION_MS = 3000
HEARTBEAT_MS = 300
TARGET_THROUGHPUT = 0.40
TARGET_CATCH_UP = 0.70
TARGET_LATENCY = 3.0
TARGET_FAILOVER = 1.3
TARGET_DIR_FAILOVER = 2.0
RECORD = 1024
MIB = 1 << 20
LOOP_PROFILE_ENV = "KJBOD_LOOP_PROFILE"  # kjbod.server.loop_profile
PROFILE_RATE = 100  # records/s of --profile (profile_roles)


class Cluster:
    def __init__(self, work: Path) -> None:
        self.dir = work / "cluster"
        # The fault seam (kjbod.storage.fsio): the failed-dir measurement arms it by writing this file. Only the
        # brokers this bench restarts have it (start): a broker with the seam on keeps every read of its
        # followers' fetches off the event loop (kjbod.broker.dir_work's cached_first), which no production
        # broker does, and that doubled the leader's thread hand-offs in the latency rounds.
        self.faults = work / "faults.json"
        self.children: dict[int, subprocess.Popen[bytes]] = {}  # brokers this bench restarted (see kill)
        up = subprocess.run([sys.executable, "-m", "kjbod", "cluster", "up", "--detach", "--brokers", "3",
                             "--log-dirs", "2", "--dir", str(self.dir),
                             "--set", f"broker.session.timeout.ms={SESSION_MS}",
                             "--set", f"broker.heartbeat.interval.ms={HEARTBEAT_MS}",
                             "--set", "replica.lag.time.max.ms=5000", "--set", "replica.fetch.backoff.ms=200"],
                            capture_output=True, text=True, cwd=ROOT, timeout=300)
        line = next((x for x in up.stdout.splitlines() if x.startswith("bootstrap.servers=")), None)
        if up.returncode != 0 or line is None:
            # What did start (a controller, some brokers) is stopped, and the reason is shown, not swallowed.
            self.down()
            said = (up.stderr.strip() or up.stdout.strip() or "no output").splitlines()[-10:]
            raise RuntimeError(f"`kjbod cluster up` failed (exit status {up.returncode}); its last words:\n  "
                               + "\n  ".join(said) + f"\nthe nodes' logs are under {self.dir}")
        self.bootstrap = line.partition("=")[2]
        self.ports = {i + 1: int(hp.rpartition(":")[2]) for i, hp in enumerate(self.bootstrap.split(","))}

    def pid(self, broker: int) -> int:
        from kjbod.cli.cluster import node_pid

        pid = node_pid(self.dir / f"broker-{broker}")
        if pid is None:
            raise RuntimeError(f"broker {broker} is not running")
        return pid

    def kill(self, broker: int) -> None:
        """kill -9 of a broker, waiting until it is gone. One this bench restarted is its child: it is reaped here
        (else it stays a zombie whose /proc entry never goes away), and if it had already died on its own, that is
        a finding, not something to measure past: the bench stops, naming its exit status."""
        child = self.children.pop(broker, None)
        if child is not None and child.poll() is not None:
            raise RuntimeError(f"broker {broker} had exited on its own with status {child.returncode} (its stderr is "
                               f"at the end of {self.dir / f'broker-{broker}' / 'server.log'})")
        pid = child.pid if child is not None else self.pid(broker)
        os.kill(pid, signal.SIGKILL)
        if child is not None:
            child.wait()
            return
        while Path(f"/proc/{pid}").exists():
            time.sleep(0.01)

    def start(self, broker: int) -> subprocess.Popen[bytes]:
        home = self.dir / f"broker-{broker}"
        with open(home / "server.log", "ab") as out:
            process = subprocess.Popen([sys.executable, "-m", "kjbod", "serve", "-c", str(home / "server.properties")],
                                       stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                       env={**os.environ, "KJBOD_FAULTS": str(self.faults)})
        self.children[broker] = process
        return process  # `cluster down` finds it by its command line

    def down(self) -> None:
        subprocess.run([sys.executable, "-m", "kjbod", "cluster", "down", "--dir", str(self.dir)],
                       capture_output=True, cwd=ROOT, timeout=300)
        for child in self.children.values():  # stopped by `cluster down`; reaped here
            child.wait(timeout=60)


def _admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def create(bootstrap: str, topic: str, partitions: int, rf: int, configs: dict[str, str] | None = None, *,
           on: int | None = None, replicas: list[int] | None = None) -> None:
    """A topic of `partitions` partitions and replication factor `rf`, waited for until fully in sync; `on`:
    every partition's replicas on that one broker (rf 1); `replicas`: every partition's replicas, the first its
    leader."""
    from confluent_kafka.admin import NewTopic

    admin = _admin(bootstrap)
    if on is not None:
        replicas = [on]
    new = (NewTopic(topic, partitions, replica_assignment=[replicas] * partitions, config=configs or {})
           if replicas is not None else NewTopic(topic, partitions, rf, config=configs or {}))
    admin.create_topics([new])[topic].result(60)
    _wait(lambda: _in_sync(admin, topic, rf), f"{topic} fully in sync")


def _in_sync(admin, topic: str, rf: int) -> bool:
    md = admin.list_topics(topic, timeout=10).topics.get(topic)
    return bool(md and md.partitions) and all(p.leader >= 0 and len(p.isrs) == rf for p in md.partitions.values())


def _wait(cond, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout:g}s: {what}")
        time.sleep(0.05)


def produce_throughput(bootstrap: str, topic: str, acks: str, total: int) -> float:
    """MB/s for `total` bytes of 1 KiB records in 1 MiB batches."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "batch.size": MIB, "linger.ms": 20,
                         "queue.buffering.max.kbytes": 256 * 1024, "message.max.bytes": 2 * MIB,
                         "enable.idempotence": False})
    value = b"x" * RECORD
    failures: list[str] = []
    started = time.perf_counter()
    for _ in range(total // RECORD):
        while True:
            try:
                producer.produce(topic, value, on_delivery=lambda err, _m: err and failures.append(str(err)))
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(300)
    elapsed = time.perf_counter() - started
    if failures:
        raise RuntimeError(f"produce to {topic} failed: {failures[:3]}")
    return total / elapsed / 1e6


class Paced:
    """A producer sending 1 KiB records at a fixed rate, recording each record's latency (ms) from produce() to
    its delivery report; one per case, kept across rounds so its connections are warm."""

    def __init__(self, bootstrap: str, topic: str, acks: str, *, idempotent: bool = False) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0,
                                  "enable.idempotence": idempotent})
        self.records: list[tuple[float, float, int]] | None = None  # (sent, ms, offset) per record, when kept

    def run(self, rate: int, seconds: float) -> list[float]:
        """Latencies (ms) in delivery order; with `records` a list, each record's (send time on CLOCK_MONOTONIC,
        the clock of kjbod.net.trace, latency ms, offset) is appended to it."""
        producer = self.producer
        out: list[float] = []
        failures: list[str] = []
        value = b"x" * RECORD
        records = self.records

        def delivered(err, m, sent: float) -> None:
            if err is None:
                ms = (time.monotonic() - sent) * 1000
                out.append(ms)
                if records is not None:
                    records.append((sent, ms, m.offset()))
            else:
                failures.append(str(err))

        started = time.monotonic()
        n = 0
        while (now := time.monotonic()) - started < seconds:
            due = started + n / rate
            if now < due:
                producer.poll(min(due - now, 0.005))
                continue
            sent = time.monotonic()
            producer.produce(self.topic, value, on_delivery=lambda err, m, s=sent: delivered(err, m, s))
            n += 1
            producer.poll(0)
        producer.flush(60)
        if failures:
            raise RuntimeError(f"produce to {self.topic} failed: {failures[:3]}")
        return out


def latencies(bootstrap: str, topic: str, acks: str, rate: int, seconds: float) -> list[float]:
    """Per-record produce latencies (ms) at `rate` records per second, from a fresh producer (tools/bench/
    reassign.py's before/during comparison)."""
    return Paced(bootstrap, topic, acks).run(rate, seconds)


def latency_rounds(bootstrap: str, rate: int, rounds: int, seconds: float, pids: list[int] | None = None,
                   cpu: dict[str, float] | None = None, kept: dict[str, list[list[tuple[float, float, int]]]] | None
                   = None) -> tuple[list[float], list[float], int]:
    """Per-round p99 (ms) of acks=all to RF 3 and of acks=1 to RF 1, the two interleaved (which goes first
    alternates) after a warm-up that is not counted; and how many records each case sent in all. With the
    brokers' `pids`, each case's round also prints their CPU time and run-queue wait (sched_ms), and `cpu`
    (when given) gets each case's total brokers' CPU ms over the rounds (and each broker's, as "<case> <pid>");
    `kept` (when given) each case's
    records per round (Paced.records: for tools.bench.latency_trace)."""
    cases = {"all": Paced(bootstrap, "rf3", "all"), "one": Paced(bootstrap, "rf1", "1")}
    for paced in cases.values():
        paced.run(rate, 2.0)  # warm-up: connections, metadata, the followers' fetch sessions with the leader
    per_round: dict[str, list[float]] = {"all": [], "one": []}
    sched: dict[str, tuple[float, float]] = {}
    counted = 0
    for i in range(rounds):
        for name in ("all", "one") if i % 2 == 0 else ("one", "all"):
            each0 = [sched_ms([pid])[0] for pid in pids or []]
            loops0 = [sched_ms([pid], loop_only=True)[0] for pid in pids or []]
            cpu0, wait0 = sched_ms(pids or [])
            if kept is not None:
                cases[name].records = []
                kept.setdefault(name, []).append(cases[name].records)
            xs = cases[name].run(rate, seconds)
            cpu1, wait1 = sched_ms(pids or [])
            sched[name] = (cpu1 - cpu0, wait1 - wait0)
            if cpu is not None:
                cpu[name] = cpu.get(name, 0.0) + cpu1 - cpu0
                for pid, used, looped in zip(pids or [], each0, loops0, strict=True):  # per broker: "<case> <pid>"
                    key = f"{name} {pid}"
                    cpu[key] = cpu.get(key, 0.0) + sched_ms([pid])[0] - used
                    key = f"{name} {pid} loop"  # its event loop's thread
                    cpu[key] = cpu.get(key, 0.0) + sched_ms([pid], loop_only=True)[0] - looped
            per_round[name].append(p99(xs))
            counted += len(xs) if name == "all" else 0
        cost = (f" (brokers' CPU {sched['all'][0]:.0f} ms and run-queue wait {sched['all'][1]:.0f} ms, against "
                f"{sched['one'][0]:.0f} ms and {sched['one'][1]:.0f} ms; load {os.getloadavg()[0]:.1f})"
                if pids else "")
        print(f"     round {i + 1}: p99 acks=all RF 3 {per_round['all'][-1]:.1f} ms, acks=1 RF 1 "
              f"{per_round['one'][-1]:.1f} ms{cost}")
    return per_round["all"], per_round["one"], counted


def idempotent_latency(bootstrap: str, rate: int, rounds: int, seconds: float) -> None:
    """Prints the idempotent line of the latency section: acks=all RF 3 from an idempotent producer against the
    non-idempotent one, interleaved in rounds of their own after the same warm-up (median of per-round p99s);
    then the first record of a fresh producer of each kind (the median of three), where librdkafka's wait for
    its producer id shows."""
    cases = {True: Paced(bootstrap, "rf3", "all", idempotent=True), False: Paced(bootstrap, "rf3", "all")}
    for paced in cases.values():
        paced.run(rate, 2.0)
    per_round: dict[bool, list[float]] = {True: [], False: []}
    for i in range(rounds):
        for idempotent in (True, False) if i % 2 == 0 else (False, True):
            per_round[idempotent].append(p99(cases[idempotent].run(rate, seconds)))
    first = {idempotent: median([first_record_ms(bootstrap, idempotent) for _ in range(3)])
             for idempotent in (True, False)}
    idem, plain = median(per_round[True]), median(per_round[False])
    print(f"   idempotent producer, acks=all RF 3: median of per-round p99 {idem:.1f} ms against {plain:.1f} ms "
          f"non-idempotent in the same {rounds} rounds ({idem / plain:.2f}x); a fresh producer's first record "
          f"{first[True]:.0f} ms against {first[False]:.0f} ms (librdkafka's producer-id timer)")


def first_record_ms(bootstrap: str, idempotent: bool) -> float:
    """Milliseconds from a new acks=all producer's first produce() to its delivery report (RF 3 topic)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                         "enable.idempotence": idempotent})
    done: list[tuple[object, float]] = []
    started = time.perf_counter()
    producer.produce("rf3", b"x" * RECORD, on_delivery=lambda err, _m: done.append((err, time.perf_counter())))
    producer.flush(60)
    if not done or done[0][0] is not None:
        raise RuntimeError(f"the first record of a fresh producer failed: {done[0][0] if done else 'no report'}")
    return (done[0][1] - started) * 1000


def consume_seconds(bootstrap: str, topic: str, total: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time()}",
                         "enable.auto.commit": False, "fetch.max.bytes": 50 * MIB})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    started = time.perf_counter()
    while got < total:
        for m in consumer.consume(10_000, 1.0):
            if m.error() is None:
                got += len(m.value())
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def catch_up(cluster: Cluster, total: int, samples: int) -> list[tuple[float, float]]:
    """(follower seconds, consumer seconds) for a backlog of `total` bytes, `samples` times, each on a topic of
    its own (deleted after it): the follower of a new RF 2 topic is killed, the backlog produced (acks=1), the
    follower restarted and timed from when it begins to follow (its log says so, not its process start) until
    it is back in the ISR; the consumer reads the same backlog from the leader, before the restart in odd
    samples and after the follower is back in even ones (whether the page cache or the follower's writes favour
    one side, the order alternates). Dirty pages are written back before each sample, so no sample meets the
    writeback of an earlier one. Each sample is printed."""
    admin = _admin(cluster.bootstrap)
    out = []
    for i in range(samples):
        synced = time.perf_counter()
        os.sync()
        synced = time.perf_counter() - synced
        topic = f"backlog-{i}"
        create(cluster.bootstrap, topic, 1, 2)
        part = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
        follower = next(r for r in part.replicas if r != part.leader)

        def isr(topic: str = topic) -> list[int]:
            return list(admin.list_topics(topic, timeout=10).topics[topic].partitions[0].isrs)

        cluster.kill(follower)
        _wait(lambda f=follower: f not in isr(), "the stopped follower leaves the ISR")
        produce_throughput(cluster.bootstrap, topic, "1", total)
        consumer_first = i % 2 == 1
        consumer_s = consume_seconds(cluster.bootstrap, topic, total) if consumer_first else 0.0
        log = cluster.dir / f"broker-{follower}" / "server.log"
        skip = log.stat().st_size
        # The follower writes the backlog into page cache the consumer only reads: on this VM, memory the guest
        # has not touched lately takes a first write at 0.2-1 GB/s instead of ~4 (common.warm_memory; measured:
        # a 1 MB follower append took 6.9 ms cold and 1.9 ms after 256 MiB were touched), which made single
        # samples read 61% or 107%. A broker up for minutes has its page cache touched long since: so is it here.
        warmed = warm_memory(total + total // 2)
        cluster.start(follower)
        _wait(lambda f=follower: f in isr(), "the follower is back in the ISR", timeout=1800)
        done = time.time()
        began = began_following(log, skip, topic)
        follower_s = done - began
        if not consumer_first:
            consumer_s = consume_seconds(cluster.bootstrap, topic, total)
        print(f"     sample {i + 1}: follower {follower_s:.2f} s (broker {follower} from leader {part.leader}), "
              f"consumer {consumer_s:.2f} s ({'before' if consumer_first else 'after'} the follower): "
              f"{consumer_s / follower_s:.0%} (dirty pages written back first, {synced:.1f} s, memory touched "
              f"{warmed:.1f} s; load {os.getloadavg()[0]:.1f})")
        if os.environ.get("KJBOD_TRACE"):  # the copy fetch by fetch (tools.bench.latency_trace)
            from kjbod.net.trace import FLUSH_S

            from .latency_trace import Trace, copy_legs, read

            time.sleep(3 * FLUSH_S)
            path = Path(os.environ["KJBOD_TRACE"]) / f"trace-{cluster.children[follower].pid}.txt"
            offset = time.monotonic() - time.time()  # the follower's log is on the wall clock, the trace not
            print(f"       the copy: {copy_legs(Trace(read(str(path))), part.leader, topic, began + offset, done + offset)}")
        out.append((follower_s, consumer_s))
        admin.delete_topics([topic])[topic].result(60)
    return out


def began_following(log: Path, skip: int, topic: str) -> float:
    """When (epoch seconds) a broker's server.log, read from byte `skip`, says it began to follow `topic`."""
    with open(log, "rb") as f:
        f.seek(skip)
        lines = [json.loads(x) for x in f.read().decode(errors="replace").splitlines() if x.startswith("{")]
    return next(datetime.fromisoformat(x["timestamp"].replace("Z", "+00:00")).timestamp() for x in lines
                if x.get("event") == "became_follower" and x.get("topic") == topic)


def failover(cluster: Cluster, *, fail_dir: bool = False) -> float:
    """Seconds from kill -9 of a leader's broker (or the failure of the log dir holding its replica) to the first
    acks=all acknowledgement after it."""
    from confluent_kafka import Producer

    admin = _admin(cluster.bootstrap)
    topic = "dir-fails" if fail_dir else "failover"
    if fail_dir:  # led by a broker this bench restarted: one with the fault seam (Cluster.start)
        led_by = next(iter(cluster.children))
        # back in rf3's ISR: registered, unfenced and caught up, so the controller makes it the leader
        _wait(lambda: led_by in admin.list_topics("rf3", timeout=10).topics["rf3"].partitions[0].isrs,
              f"broker {led_by} back in the ISR of rf3")
        create(cluster.bootstrap, topic, 1, 3, replicas=[led_by] + [b for b in cluster.ports if b != led_by])
    else:
        create(cluster.bootstrap, topic, 1, 3)
    leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    if fail_dir and leader not in cluster.children:
        raise RuntimeError(f"{topic} is led by broker {leader}, which has no fault seam (not restarted by this bench)")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 0, "topic.metadata.refresh.interval.ms": 250, "retry.backoff.ms": 50,
                         "retry.backoff.max.ms": 100, "reconnect.backoff.max.ms": 200})
    acked: list[float] = []
    for _ in range(50):
        producer.produce(topic, b"warm", on_delivery=lambda err, _m: err is None and acked.append(time.time()))
    producer.flush(30)
    if fail_dir:
        home = cluster.dir / f"broker-{leader}"
        (doomed,) = [d for d in home.iterdir() if (d / f"{topic}-0").is_dir()]
        tmp = cluster.faults.with_suffix(".tmp")
        tmp.write_text(json.dumps({"faults": [{"dir": str(doomed), "errno": "EIO"}]}))
        os.replace(tmp, cluster.faults)
    else:
        cluster.kill(leader)
    killed = time.time()
    after = len(acked)
    while len(acked) == after and time.time() - killed < 120:
        producer.produce(topic, b"x", on_delivery=lambda err, _m: err is None and acked.append(time.time()))
        producer.poll(0.01)
    producer.flush(60)
    if fail_dir:
        cluster.faults.unlink()
        cluster.kill(leader)
    cluster.start(leader)
    return acked[after] - killed


def run(rounds: int = 3, seconds: float = 10.0, quick: bool = False, latency_only: bool = False,
        trace: bool = False) -> dict:
    produce_bytes = 64 * MIB if quick else 512 * MIB
    backlog = 64 * MIB if quick else 1024 * MIB
    rounds = 1 if quick else rounds
    catch_samples = 3
    seconds = 5.0 if quick else seconds
    heading(f"Replication on 3 brokers ({os.cpu_count()} cores shared by the 3 brokers, the controller and the "
            f"load generator)")
    work = Path(tempfile.mkdtemp(prefix="kjbod-bench-replication-", dir=os.environ.get("KJBOD_BENCH_DIR") or None))
    if trace:
        os.environ["KJBOD_TRACE"] = str(work / "trace")  # the brokers inherit it (kjbod.net.trace)
    cluster = Cluster(work)
    try:
        create(cluster.bootstrap, "rf3", 1, 3)
        # The RF 1 topic on the RF 3 topic's leader: both cases then load the same broker the same way, the
        # acks=all case adding only what replication costs.
        leader = _admin(cluster.bootstrap).list_topics("rf3", timeout=10).topics["rf3"].partitions[0].leader
        create(cluster.bootstrap, "rf1", 1, 1, on=leader)
        if latency_only:
            print(f"   the cluster: {cluster.dir} (kept; leader of rf3 and rf1: broker {leader})")
            return latency_figure(cluster, 7, 4.0, leader, trace)
        produce_throughput(cluster.bootstrap, "rf3", "all", 8 * MIB)  # warm up
        produce_throughput(cluster.bootstrap, "rf1", "1", 8 * MIB)
        replicated, single = [], []
        for _ in range(rounds):
            replicated.append(produce_throughput(cluster.bootstrap, "rf3", "all", produce_bytes))
            single.append(produce_throughput(cluster.bootstrap, "rf1", "1", produce_bytes))
        throughput = median([r / s for r, s in zip(replicated, single, strict=True)])
        print(f"   produce: acks=all RF 3 {median(replicated):.1f} MB/s, acks=1 RF 1 {median(single):.1f} MB/s: "
              f"{throughput:.0%} (target >= {TARGET_THROUGHPUT:.0%}: {verdict(throughput >= TARGET_THROUGHPUT)})")
        latency = latency_figure(cluster, 3 if quick else 7, 2.0 if quick else 4.0, leader, trace)
        idempotent_latency(cluster.bootstrap, 500, 3 if quick else 7, 2.0 if quick else 4.0)
        print(f"   catch-up of {backlog // MIB} MiB, {catch_samples} samples (a new follower's copy, from following to "
              f"back in the ISR, against a consumer reading the same backlog from the leader):")
        pairs = catch_up(cluster, backlog, catch_samples)
        ratios = [c / f for f, c in pairs]
        catch_ratio = median(ratios)
        print(f"   catch-up: median follower {median([f for f, _c in pairs]):.2f} s, consumer "
              f"{median([c for _f, c in pairs]):.2f} s; median of the per-sample ratios {catch_ratio:.0%} of the "
              f"consumer's rate (spread {min(ratios):.0%}-{max(ratios):.0%}) (target >= {TARGET_CATCH_UP:.0%}: "
              f"{verdict(catch_ratio >= TARGET_CATCH_UP)})")
        failover_s = failover(cluster)
        multiple = failover_s / (SESSION_MS / 1000)
        print(f"   failover after kill -9 of the leader's broker: {failover_s:.2f} s = {multiple:.2f}x "
              f"broker.session.timeout.ms ({SESSION_MS} ms) (target <= {TARGET_FAILOVER}x: "
              f"{verdict(multiple <= TARGET_FAILOVER)})")
        dir_s = failover(cluster, fail_dir=True)
        dir_multiple = dir_s / (HEARTBEAT_MS / 1000)
        print(f"   failover after the leader's log dir fails: {dir_s:.2f} s = {dir_multiple:.2f}x "
              f"broker.heartbeat.interval.ms ({HEARTBEAT_MS} ms) (target <= {TARGET_DIR_FAILOVER}x: "
              f"{verdict(dir_multiple <= TARGET_DIR_FAILOVER)})")
        return {"replication_produce_acks_all_rf3_vs_acks1_rf1": throughput,
                "replication_dir_failover_x_heartbeat_interval": dir_multiple,
                **latency,
                "replication_catch_up_vs_consumer": catch_ratio,
                "replication_failover_x_session_timeout": multiple}
    finally:
        cluster.down()


def latency_figure(cluster: Cluster, lat_rounds: int, lat_seconds: float, leader: int, trace: bool = False
                   ) -> dict[str, float]:
    """The latency rounds (latency_rounds) at 500 records/s, then the topology's floor in as many rounds
    (tools.bench.replication_floor), printed; returns the ratio of the medians of the per-round p99s (acks=all RF
    3 over acks=1 RF 1) and the floor's ratio. With `trace` (the brokers run with KJBOD_TRACE), where the slowest
    records' time went and what ran under them (tools.bench.latency_trace)."""
    rate = 500
    # The produce rounds before leave gigabytes of dirty pages that the kernel writes back 30 s later
    # (vm.dirty_expire_centisecs), in the middle of these rounds, where every append waits behind it; an acks=all
    # record waits for three appends in sequence. Written back first, so both cases meet a quiet disk.
    synced = time.perf_counter()
    os.sync()
    synced = time.perf_counter() - synced
    print(f"   latency at {rate} records/s of 1 KiB, {lat_rounds} rounds of {lat_seconds:g} s per case, "
          f"interleaved, after a 2 s warm-up ({os.cpu_count()} cores shared by the brokers, the controller "
          f"and the producer; the earlier rounds' dirty pages written back first, {synced:.1f} s):")
    cpu: dict[str, float] = {}
    kept: dict[str, list[list[tuple[float, float, int]]]] | None = {} if trace else None
    all_p99, one_p99, sent = latency_rounds(cluster.bootstrap, rate, lat_rounds, lat_seconds,
                                            [cluster.pid(b) for b in cluster.ports], cpu, kept)
    latency = median(all_p99) / median(one_p99)
    print(f"   latency: median of per-round p99 acks=all RF 3 {median(all_p99):.1f} ms, acks=1 RF 1 "
          f"{median(one_p99):.1f} ms ({sent} records per case): {latency:.2f}x (target <= {TARGET_LATENCY}x: "
          f"{verdict(latency <= TARGET_LATENCY)})")
    if cpu.get("one"):
        print(f"   the brokers' CPU per record in those rounds: acks=all RF 3 {cpu['all'] / sent:.2f} ms, acks=1 "
              f"RF 1 {cpu['one'] / sent:.2f} ms ({cpu['all'] / cpu['one']:.1f}x: the tail follows the queueing "
              f"for the cores this adds)")
        def us(key: str) -> str:
            return f"{cpu[key] / sent * 1000:.0f}"

        brokers = ", ".join(
            f"{'leader' if b == leader else f'follower {b}'} {us(f'all {cluster.pid(b)}')} us (its event loop "
            f"{us(f'all {cluster.pid(b)} loop')}; acks=1 {us(f'one {cluster.pid(b)}')} us, loop "
            f"{us(f'one {cluster.pid(b)} loop')})" for b in cluster.ports)
        print(f"   per broker, acks=all RF 3: {brokers} a record; the rest of a broker's CPU is its other threads, "
              f"the dir workers' appends and hand-offs above all (the leader's loop runs a Produce, two fetch "
              f"answers and two fetches per record; the p99 ratio follows the CPU ratio and each round's run-queue "
              f"wait: below 3x needs less CPU per replicated record or cores the other work does not queue for)")
    # Measured while the cluster is up and idle: the machine as the rounds above had it, less their load.
    bottom = floor(lat_rounds, lat_seconds, rate)
    floor_cpu, sent = bottom["cpu_us_per_record"], bottom["from_send"]
    print(f"   the topology's floor on this machine: the same chain of processes, threads and wake-ups with only a "
          f"1 KiB pwrite per hop: p99 {bottom['acks_all_p99_ms']:.2f} ms against {bottom['acks1_p99_ms']:.2f} ms, "
          f"{bottom['ratio']:.2f}x (kjbod's acks=all p99 is {median(all_p99) / bottom['acks_all_p99_ms']:.2f}x this "
          f"floor's acks=all, its acks=1 {median(one_p99) / bottom['acks1_p99_ms']:.2f}x its acks=1; the floor's "
          f"three processes' CPU per record {floor_cpu['acks_all']:.0f} us against {floor_cpu['acks1']:.0f} us, "
          f"{floor_cpu['acks_all'] / floor_cpu['acks1']:.1f}x; timed from each record's send, as the producer "
          f"above is, not from its schedule: {sent['acks_all_p99_ms']:.2f} ms against {sent['acks1_p99_ms']:.2f} "
          f"ms, {sent['ratio']:.2f}x)")
    if kept is not None:
        from kjbod.net.trace import FLUSH_S

        from .latency_trace import load, report

        time.sleep(3 * FLUSH_S)  # the brokers' last events written
        names = {cluster.pid(b): ("leader" if b == leader else f"follower {b}") + f" (broker {b})"
                 for b in cluster.ports}
        traces = load(os.environ["KJBOD_TRACE"], names)
        for case, rounds_kept in kept.items():  # kept beside the traces, for a closer look
            with open(Path(os.environ["KJBOD_TRACE"]) / f"records-{case}.txt", "w") as f:
                f.writelines(f"{i} {t:.6f} {ms:.3f} {o}\n" for i, recs in enumerate(rounds_kept) for t, ms, o in recs)
        followers = {b: names[cluster.pid(b)] for b in cluster.ports if b != leader}
        for line in report(traces, names[cluster.pid(leader)], followers, kept, {"all": "rf3", "one": "rf1"}):
            print(line)
    return {"replication_p99_acks_all_vs_acks1": latency, "replication_p99_floor_ratio": bottom["ratio"]}


def profile_roles(cluster: Cluster, leader: int, rate: int = PROFILE_RATE, seconds: float = 20.0,
                  top: int = 30) -> None:
    """--profile: each broker's event loop profiled in CPU time (kjbod.server.loop_profile, KJBOD_LOOP_PROFILE)
    while one case runs alone after the same warm-up as the latency rounds: acks=all RF 3, then acks=1 RF 1.
    Prints, per broker and case, the loop's CPU per record (the profiled window's thread CPU, cProfile's own cost
    in it), the Python calls per record (which no load changes) and the functions with the most own time per
    record (cProfile's tottime); the profiles stay beside the cluster (<case>-loop-<pid>.prof). The rate is below
    the latency rounds' 500/s: cProfile doubles the loops' cost, and at 500/s the profiled leader fell behind
    enough that the producer batched records and the followers took several per fetch, which the unprofiled
    rounds do not do: at PROFILE_RATE every record is a Produce of its own and a fetch of its own per follower,
    as in the rounds, so the calls per record are theirs. Each broker's dir workers are profiled over the same
    window (their threads merged: a follower's appends and the hand-offs around them) and printed the same way."""
    directory = Path(os.environ[LOOP_PROFILE_ENV])
    pids = {b: cluster.pid(b) for b in cluster.ports}
    cases = {"all": Paced(cluster.bootstrap, "rf3", "all"), "one": Paced(cluster.bootstrap, "rf1", "1")}
    for paced in cases.values():
        paced.run(rate, 2.0)  # warm-up, as latency_rounds
    for name, paced in cases.items():
        for pid in pids.values():
            os.kill(pid, signal.SIGUSR1)
        time.sleep(0.2)  # every loop has taken its signal before the first record
        sent = len(paced.run(rate, seconds))
        for pid in pids.values():
            os.kill(pid, signal.SIGUSR2)
        for b, pid in pids.items():
            _wait(lambda pid=pid: (directory / f"loop-{pid}.json").exists(), f"broker {b}'s loop profile")
        for f in [*directory.glob("loop-*"), *directory.glob("workers-*")]:
            f.rename(f.with_name(f"{name}-{f.name}"))
        label = "acks=all RF 3" if name == "all" else "acks=1 RF 1"
        print(f"   profile of each broker's event loop, {label} alone, {sent} records at {rate}/s (CPU time; "
              f"cProfile's own cost included):")
        for b, pid in pids.items():
            got = json.loads((directory / f"{name}-loop-{pid}.json").read_text())
            role = "leader" if b == leader else f"follower {b}"
            _print_profile(f"{role} (broker {b}): loop", got["loop_cpu_s"],
                           directory / f"{name}-loop-{pid}.prof", sent, top)
            workers = directory / f"{name}-workers-{pid}.prof"
            if workers.exists():  # the dir workers' threads, merged (kjbod.server.loop_profile)
                _print_profile(f"{role} (broker {b}): its {got['workers']} dir workers", got["workers_cpu_s"],
                               workers, sent, top // 2)


def syscall_roles(cluster: Cluster, leader: int, rate: int = PROFILE_RATE, seconds: float = 10.0,
                  top: int = 8) -> None:
    """--syscalls: each broker's system calls per record (`strace -f -c`, every thread of it) while one case runs
    alone at PROFILE_RATE after the same warm-up as the latency rounds: acks=all RF 3, then acks=1 RF 1. The
    counts do not move with the machine's load (their times under strace do, and are left out): a system call
    costs several us on this VM, as much as a few dozen Python calls."""
    import shutil

    strace = shutil.which("strace")
    if strace is None:
        raise RuntimeError("--syscalls needs strace on the PATH")
    pids = {b: cluster.pid(b) for b in cluster.ports}
    cases = {"all": Paced(cluster.bootstrap, "rf3", "all"), "one": Paced(cluster.bootstrap, "rf1", "1")}
    for paced in cases.values():
        paced.run(rate, 2.0)  # warm-up, as latency_rounds
    out = Path(tempfile.mkdtemp(prefix="kjbod-bench-syscalls-"))
    try:
        _count_syscalls(out, strace, pids, cases, leader, rate, seconds, top)
    finally:
        shutil.rmtree(out, ignore_errors=True)  # strace's tables, read above


def _count_syscalls(out: Path, strace: str, pids: dict[int, int], cases: dict[str, Paced], leader: int, rate: int,
                    seconds: float, top: int) -> None:
    for name, paced in cases.items():
        tracers = {b: subprocess.Popen([strace, "-f", "-c", "-o", str(out / f"{name}-{b}.txt"), "-p", str(pid)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                   for b, pid in pids.items()}
        time.sleep(1.0)  # strace has attached to every thread before the first record
        sent = len(paced.run(rate, seconds))
        for tracer in tracers.values():
            tracer.send_signal(signal.SIGINT)  # strace writes its summary as it detaches
        for tracer in tracers.values():
            tracer.wait(timeout=30)
        label = "acks=all RF 3" if name == "all" else "acks=1 RF 1"
        print(f"   system calls of each broker (all its threads), {label} alone, {sent} records at {rate}/s:")
        for b in pids:
            counts = _strace_counts((out / f"{name}-{b}.txt").read_text())
            role = "leader" if b == leader else f"follower {b}"
            total = sum(counts.values())
            most = ", ".join(f"{call} {n / sent:.2f}" for call, n in counts.most_common(top))
            print(f"     {role} (broker {b}): {total / sent:.2f} a record ({most})")


def _strace_counts(summary: str) -> Counter[str]:
    """Calls per system call from `strace -c`'s table (its rows: % time, seconds, usecs/call, calls, [errors,]
    syscall)."""
    counts: Counter[str] = Counter()
    for line in summary.splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[0][0].isdigit() and fields[-1] != "total" and fields[3].isdigit():
            counts[fields[-1]] += int(fields[3])
    return counts


def _print_profile(what: str, cpu: float, path: Path, sent: int, top: int) -> None:
    """One profile's CPU and Python calls per record, and its functions with the most own time."""
    import pstats

    stats = pstats.Stats(str(path))
    calls = stats.total_calls  # type: ignore[attr-defined]
    print(f"     {what} {cpu / sent * 1e6:.0f} us a record, {calls / sent:.0f} Python calls a record; most own "
          f"time (us a record, calls a record, function):")
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)  # type: ignore[attr-defined]
    for (file, line, func), (_cc, nc, tt, _ct, _callers) in rows[:top]:
        where = f"{Path(file).name}:{line}" if line else file
        print(f"       {tt / sent * 1e6:7.1f} {nc / sent:6.2f}  {func} ({where})")




def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--profile" in args or "--syscalls" in args:  # per-role costs under the latency load, no figure
        work = Path(tempfile.mkdtemp(prefix="kjbod-bench-replication-"))
        profiling = "--profile" in args
        if profiling:
            os.environ[LOOP_PROFILE_ENV] = str(work / "profiles")  # the brokers inherit it
        cluster = Cluster(work)
        try:
            create(cluster.bootstrap, "rf3", 1, 3)
            leader = _admin(cluster.bootstrap).list_topics("rf3", timeout=10).topics["rf3"].partitions[0].leader
            create(cluster.bootstrap, "rf1", 1, 1, on=leader)
            if profiling:
                profile_roles(cluster, leader)
            else:
                syscall_roles(cluster, leader)
        finally:
            cluster.down()
        return 0
    trace = "--trace" in args
    if trace:
        args.remove("--trace")
    latency_only = "--latency-only" in args
    if latency_only:
        args.remove("--latency-only")
    return rounds_main("python -m tools.bench.replication", __doc__,
                       lambda r, s, q: run(r, s, q, latency_only=latency_only, trace=trace), args, rounds=3)


if __name__ == "__main__":
    sys.exit(main())
