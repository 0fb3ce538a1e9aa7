"""Per-dir workers benchmark: what the hand-off to a log dir's worker costs, and what it buys when a disk is bad.

Every figure is a ratio against a reference measured in the same run, variants interleaved round by round:

* **Hand-off cost**: `kjbod serve` processes side by side, one with the per-dir workers (the default) and one
  with ``KJBOD_DIR_WORKERS=0`` (every append and read on the event loop, the path before the workers), and a
  third with the workers where the kernel puts them (``KJBOD_DIR_WORKERS=unplaced``: what keeping them on the
  event loop's CPU while quiet buys, workers.Placement). Four loads on each: Produce of 1 MiB batches, 8 in flight (throughput; target >= 95 %); Produce of small batches (four
  1 KiB records) at the highest rate the load generator reaches (32 connections x 16 in flight; target >= 85 %);
  a consumer fetching three partitions, one per dir, zero-copy (target >= 95 %); Produce p99 latency at a fixed
  moderate rate (500 requests/s of one small batch, after half a second unmeasured; target <= 1.2x).
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

`python -m tools.bench.dir_workers [--quick]`; `run()` returns the ratios.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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
ISOLATION_RATE = 200  # msg/s of the healthy-dir producer, as the table


def small_batch() -> bytes:
    return exact_batch(SMALL_RECORDS * 1100, SMALL_RECORDS)


def paced_produce(port: int, topic: str, partition: int, rate: float, seconds: float, batch: bytes,
                  stop: threading.Event | None = None) -> list[float]:
    """Latencies (s) of one Produce at a time sent every 1/rate s for `seconds` (acks=1)."""
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


# ================================================================================================ hand-off cost


def bench_handoff(work: Path, rounds: int, seconds: float) -> dict:
    heading("Hand-off to the per-dir workers vs appends and reads on the event loop (KJBOD_DIR_WORKERS=0)")
    servers = {
        "workers": BenchServer(work / "workers"),
        "loop": BenchServer(work / "loop", env={"KJBOD_DIR_WORKERS": "0"}),
        "unplaced": BenchServer(work / "unplaced", env={"KJBOD_DIR_WORKERS": "unplaced"}),
    }
    loadgen = build_loadgen()
    mib = one_mib_batch()
    small = small_batch()
    samples: dict[str, dict[str, list[float]]] = {k: {"mib": [], "small": [], "fetch": [], "p99": [], "p50": [],
                                                      "cpu": [], "loop_cpu": [], "workers_cpu": [],
                                                      "loop_wakeups": [], "workers_wakeups": []} for k in servers}
    trips: dict[str, dict[str, list[float]]] = {"placed": {}, "unplaced": {}}
    load_before = os.getloadavg()[0]
    fetch_mib = 16
    try:
        for server in servers.values():
            server.start()
            create_topic(server.port, "big", 3)
            create_topic(server.port, "small", 3)
            create_topic(server.port, "fetch", 3)
            for p in range(3):
                produce_pipelined(server.port, produce_frame("fetch", p, mib), fetch_mib, 8)
            consume(server.port, "fetch", 3, fetch_mib * 1024)  # warm-up
        small_frames = [produce_frame("small", p, small) for p in range(3)]
        for _ in range(rounds):
            for name, server in servers.items():
                s = samples[name]
                count = 32
                s["mib"].append(count / produce_pipelined(server.port, produce_frame("big", 0, mib), count, 8))
                assert server.process is not None
                cpu = process_cpu(server.process.pid)
                threads = thread_usage(server.process.pid)
                rate = load_frames(loadgen, server.port, CONNECTIONS, 16, seconds, small_frames)
                s["small"].append(rate)
                s["cpu"].append((process_cpu(server.process.pid) - cpu) / (rate * seconds))
                for kind, (spent, woken) in thread_usage(server.process.pid).items():
                    s[f"{kind}_cpu"].append((spent - threads[kind][0]) / (rate * seconds))
                    s[f"{kind}_wakeups"].append((woken - threads[kind][1]) / (rate * seconds))
                t, _ = consume(server.port, "fetch", 3, fetch_mib * 1024)
                s["fetch"].append(fetch_mib * 3 / t)
                # Half a second unmeasured first: a steady producer's latency, once the server has settled from the
                # loads before (its threads placed again on one CPU: workers.Placement reviews every 0.25 s).
                paced_produce(server.port, "small", 1, MODERATE_RATE, 0.5, small)
                latencies = paced_produce(server.port, "small", 1, MODERATE_RATE, seconds, small)
                s["p99"].append(p99(latencies))
                s["p50"].append(quantile(latencies, 0.5))
            for how in trips:
                for leg, took in worker_round_trips(work / "round-trip", how == "placed").items():
                    trips[how].setdefault(leg, []).extend(took)
    finally:
        for server in servers.values():
            server.stop()
    w, ref = samples["workers"], samples["loop"]

    def ratio(key: str, w: dict[str, list[float]] = w) -> float:
        return median([a / b for a, b in zip(w[key], ref[key], strict=True)])

    out = {"handoff_produce_1mib_vs_loop": ratio("mib"), "handoff_produce_small_vs_loop": ratio("small"),
           "handoff_fetch_vs_loop": ratio("fetch"), "handoff_produce_p99_vs_loop": ratio("p99")}
    print(f"   Produce 1 MiB batches: workers {median(w['mib']):,.0f} MiB/s, loop {median(ref['mib']):,.0f} MiB/s: "
          f"{out['handoff_produce_1mib_vs_loop']:.1%} (target >= 95%: "
          f"{verdict(out['handoff_produce_1mib_vs_loop'] >= 0.95)})")
    print(f"   Produce small batches ({SMALL_RECORDS} x 1 KiB): workers {median(w['small']):,.0f} req/s, loop "
          f"{median(ref['small']):,.0f} req/s: {out['handoff_produce_small_vs_loop']:.1%} (target >= 85%: "
          f"{verdict(out['handoff_produce_small_vs_loop'] >= 0.85)})")
    print(f"   Fetch zero-copy, 3 dirs: workers {median(w['fetch']):,.0f} MiB/s, loop {median(ref['fetch']):,.0f} "
          f"MiB/s: {out['handoff_fetch_vs_loop']:.1%} (target >= 95%: {verdict(out['handoff_fetch_vs_loop'] >= 0.95)})")
    print(f"   Produce p99 at {MODERATE_RATE} req/s: workers {median(w['p99']) * 1000:.2f} ms, loop "
          f"{median(ref['p99']) * 1000:.2f} ms: {out['handoff_produce_p99_vs_loop']:.2f}x (target <= 1.2x: "
          f"{verdict(out['handoff_produce_p99_vs_loop'] <= 1.2)})")
    u = samples["unplaced"]
    print(f"   Placement: the workers on the kernel's choice of CPU instead of the event loop's "
          f"(KJBOD_DIR_WORKERS=unplaced), against the loop: 1 MiB {ratio('mib', u):.1%}, small batches "
          f"{ratio('small', u):.1%}, fetch {ratio('fetch', u):.1%}, p99 {ratio('p99', u):.2f}x, median "
          f"{median(u['p50']) * 1e6:.0f} us (placed {median(w['p50']) * 1e6:.0f} us)")
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
        code = {} if tree is None else {"PYTHONSAFEPATH": "1", "PYTHONPATH": str(Path(tree).resolve())}
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


def run(rounds: int = 5, seconds: float = 3.0, quick: bool = False) -> dict:
    if quick:
        rounds, seconds = 2, 1.5
    work = Path(tempfile.mkdtemp(prefix="kjbod-bench-dirs-", dir=os.environ.get("KJBOD_BENCH_DIR") or None))
    try:
        out = bench_handoff(work, rounds, seconds)
        out.update(bench_idempotent_handoff(work, rounds, seconds))
        out.update(bench_isolation(work, rounds, seconds * 2))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    from .common import rounds_main

    return rounds_main("python -m tools.bench.dir_workers", __doc__, run, argv, rounds=5)


if __name__ == "__main__":
    raise SystemExit(main())

