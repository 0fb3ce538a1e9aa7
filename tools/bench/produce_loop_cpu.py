"""The event loop's CPU per Produce, with the per-dir workers and without (``KJBOD_DIR_WORKERS=0``).

The p99 comparison of tools/bench/dir_workers.py measures wall-clock latency, which the other work on a shared
machine distorts; this measures what the load does not: the CPU time of the event loop's own thread (its
``pthread_getcpuclockid`` clock) per request. Each variant runs a real node in a process of its own (``serve``, as
``kjbod serve`` does, one topic of one partition), driven by a client thread of that process that sends one small
batch (four 1 KiB records, acks=1) at a time, paced at the p99 bench's moderate rate, so the loop sleeps between
requests as it does there. ``--profile`` adds cProfile of the loop's thread only (enabled and disabled on it,
timed in the thread's CPU time), prints its top costs (what the loop does around a hand-off) and the Python calls
per request, a figure no load changes (the CPU time is noisy on a shared VM: a stolen CPU counts as the thread's).

``python -m tools.bench.produce_loop_cpu [--requests N] [--rate R] [--profile] [--variant workers|loop]``
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .datapath import BenchServer, Connection, call, create_topic, produce_frame
from .dir_workers import MODERATE_RATE, small_batch

VARIANTS = {"workers": "1", "loop": "0"}
WARM_UP = 300


def _drive(port: int, requests: int, rate: float, loop_thread: list[int], loop: list[asyncio.AbstractEventLoop],
           profile: bool, out: dict) -> None:
    """The client thread: waits for the node, creates the topic, warms up, then sends `requests` Produces one at
    a time and reads the loop thread's CPU clock around them."""
    deadline = time.monotonic() + 60
    while True:
        try:
            Connection(port).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    create_topic(port, "t", 1)
    frame = produce_frame("t", 0, small_batch())
    conn = Connection(port)
    clock = time.pthread_getcpuclockid(loop_thread[0])
    profiler = cProfile.Profile(time.thread_time) if profile else None  # CPU, not wall: the loop is preempted inside its writes

    def send(n: int) -> None:
        gap = 1.0 / rate
        start = time.perf_counter()
        for i in range(n):
            conn.sock.sendall(frame)
            conn.read_frame()
            wait = start + (i + 1) * gap - time.perf_counter()
            if wait > 0:
                time.sleep(wait)

    send(WARM_UP)
    if profiler is not None:
        loop[0].call_soon_threadsafe(profiler.enable)
        time.sleep(0.05)
    cpu0 = time.clock_gettime(clock)
    wall0 = time.perf_counter()
    send(requests)
    cpu1 = time.clock_gettime(clock)
    wall1 = time.perf_counter()
    if profiler is not None:
        done = threading.Event()
        loop[0].call_soon_threadsafe(lambda: (profiler.disable(), done.set()))
        done.wait(10)
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        stats.sort_stats("cumulative").print_stats(60)
        out["profile"] = text.getvalue()
        # what load does not change at all: Python calls (functions and builtins) on the loop per request
        out["calls"] = stats.total_calls / requests  # type: ignore[attr-defined]
    conn.close()
    # every request appended: the partition's end offset counts them (no reply is decoded on the way)
    from kjbod.protocol.generated import ListOffsetsRequest as L

    offsets = call(port, L(replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(name="t", partitions=[
        L.ListOffsetsPartition(partition_index=0, timestamp=-1)])]), 7)
    out.update(loop_us=(cpu1 - cpu0) / requests * 1e6, wall_s=wall1 - wall0, requests=requests,
               end_offset=offsets.topics[0].partitions[0].offset)
    os.kill(os.getpid(), signal.SIGTERM)


def run_variant(directory: Path, requests: int, rate: float, profile: bool) -> dict:
    """In this process: a node serving on this thread's loop, the client on a thread of its own."""
    from kjbod.server.app import serve
    from kjbod.server.config import load_config

    server = BenchServer(directory)  # its config and formatted dirs (not started: served here)
    config = load_config(str(server.config))
    loop_thread = [threading.get_ident()]  # the pthread id pthread_getcpuclockid takes
    loop_ref: list[asyncio.AbstractEventLoop] = []
    out: dict = {}
    client = threading.Thread(target=_drive, args=(server.port, requests, rate, loop_thread, loop_ref, profile, out),
                              daemon=True)

    async def main() -> int:
        loop_ref.append(asyncio.get_running_loop())
        client.start()  # before serve() places this thread (Placement): the client keeps every CPU
        return await serve(config, whole_process=True)

    from kjbod.server.app import new_event_loop

    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        runner.run(main())
    client.join(5)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.produce_loop_cpu", description=__doc__)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=MODERATE_RATE)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--variant", choices=sorted(VARIANTS))
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    if args.variant is not None:  # a child: one variant, its figures as JSON on the last line
        os.environ["KJBOD_DIR_WORKERS"] = VARIANTS[args.variant]  # read when the node's storage opens
        from kjbod.server.logging import configure_logging

        configure_logging("json", "warning")  # as the bench's `kjbod serve --log-level warning`
        with tempfile.TemporaryDirectory(prefix="kjbod-loopcpu-") as work:
            out = run_variant(Path(work), args.requests, args.rate, args.profile)
        if "profile" in out:
            print(out.pop("profile"))
        print(json.dumps(out))
        return 0
    figures: dict[str, list[float]] = {name: [] for name in VARIANTS}
    calls: dict[str, float] = {}
    for _ in range(args.rounds):
        for name in VARIANTS:
            cmd = [sys.executable, "-m", "tools.bench.produce_loop_cpu", "--variant", name,
                   "--requests", str(args.requests), "--rate", str(args.rate)]
            if args.profile:
                cmd.append("--profile")
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
            lines = done.stdout.strip().splitlines()
            result = json.loads(lines[-1])
            figures[name].append(result["loop_us"])
            if "calls" in result:
                calls[name] = result["calls"]
            if args.profile:
                print(f"--- {name}: cProfile of the event loop's thread, {args.requests} requests")
                print("\n".join(lines[:-1]))
    for name, values in figures.items():
        shown = ", ".join(f"{v:.0f}" for v in values)
        print(f"{name:8s} event loop CPU per Produce: {min(values):.0f} us (rounds: {shown})"
              + (f"; {calls[name]:.0f} Python calls" if name in calls else ""))
    ratio = min(figures["workers"]) / min(figures["loop"])
    print(f"workers / loop: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
