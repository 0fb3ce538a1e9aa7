"""Metrics benchmark: what the /metrics counters cost Produce, and what a scrape of a big node costs.

Every figure is a ratio against a reference measured in the same run, variants interleaved round by round:

* **Produce, metrics on against off**: two `kjbod serve` processes, one with `kjbod.metrics.listener` set (its
  request path bumps the counters; it is scraped once per round, as Prometheus would every few seconds) and one
  without; a load generator keeps requests in flight on one connection (acks=1), with small batches (1 KiB, 10
  records, 16 in flight) and with 1 MiB batches (8 in flight).  The figure is throughput on / off.  Target >= 97 %.
* **Scrape time of a node with 10,000 partitions**, against a DescribeLogDirs of the same node (every dir, every
  partition, the request `kjbod log-dirs describe` sends), each timed from request to last byte, median of rounds.
  Target <= 2x.

`python -m tools.bench.metrics [--quick] [--rounds N]`; `run()` returns the ratios.  The work directory is a
temporary directory on the file system of $KJBOD_BENCH_DIR (default: the system temp dir).
"""

from __future__ import annotations

import http.client
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from .common import heading, median, rounds_main, verdict
from .datapath import (
    MIB,
    BenchServer,
    Connection,
    create_topic,
    exact_batch,
    process_cpu,
    produce_frame,
    produce_pipelined,
    request_frame,
)

PRODUCE_TARGET = 0.97
SCRAPE_TARGET = 2.0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape_seconds(port: int) -> tuple[float, int]:
    """(seconds from request to the last byte of a /metrics answer, its size)."""
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"/metrics answered {resp.status}")
    finally:
        conn.close()
    return time.perf_counter() - started, len(body)


def describe_seconds(port: int) -> tuple[float, int]:
    """(seconds from request to the last byte of a DescribeLogDirs answer for every partition, its size)."""
    from kjbod.protocol.generated import DescribeLogDirsRequest

    frame = request_frame(DescribeLogDirsRequest(topics=None), 4)
    conn = Connection(port)
    try:
        started = time.perf_counter()
        conn.sock.sendall(frame)
        answer = conn.read_frame()
        return time.perf_counter() - started, len(answer)
    finally:
        conn.close()


def _timed(server: BenchServer, frame: bytes, count: int, depth: int) -> tuple[float, float]:
    """(wall seconds, the server's CPU seconds) of one pipelined Produce run."""
    assert server.process is not None
    cpu = process_cpu(server.process.pid)
    wall = produce_pipelined(server.port, frame, count, depth)
    return wall, process_cpu(server.process.pid) - cpu


def bench_produce(work: Path, rounds: int, quick: bool) -> dict:
    heading("Produce with the metrics counters on against off")
    metrics_port = _free_port()
    on = BenchServer(work / "on", {"kjbod.metrics.listener": f"127.0.0.1:{metrics_port}"}).start()
    off = BenchServer(work / "off").start()
    out: dict = {}
    try:
        for server in (on, off):
            create_topic(server.port, "small", 1)
            create_topic(server.port, "big", 1)
        cases = {
            "small": (produce_frame("small", 0, exact_batch(1024, 10)), 2_000 if quick else 20_000, 16),
            "1mib": (produce_frame("big", 0, exact_batch(MIB, 256)), 32 if quick else 128, 8),
        }
        for name, (frame, count, depth) in cases.items():
            for server in (on, off):  # warm up: the first requests pay for imports and page faults
                produce_pipelined(server.port, frame, max(4, count // 10), depth)
            ratios, cpu_ratios, rates = [], [], {"on": [], "off": []}

            for i in range(rounds):
                scrape_seconds(metrics_port)
                if i % 2:  # each goes first in every other round: neither always meets the other's writeback
                    (t_off, c_off), (t_on, c_on) = _timed(off, frame, count, depth), _timed(on, frame, count, depth)
                else:
                    (t_on, c_on), (t_off, c_off) = _timed(on, frame, count, depth), _timed(off, frame, count, depth)
                ratios.append(t_off / t_on)
                cpu_ratios.append(c_off / c_on if c_on > 0 else 1.0)
                rates["on"].append(count / t_on)
                rates["off"].append(count / t_off)
            ratio, cpu_ratio = median(ratios), median(cpu_ratios)
            print(f"  {name:>5} batches ({len(frame):,} B requests): metrics on {median(rates['on']):,.0f} req/s, "
                  f"off {median(rates['off']):,.0f} req/s: on/off {ratio:.3f} "
                  f"(target >= {PRODUCE_TARGET}: {verdict(ratio >= PRODUCE_TARGET)}); server CPU per request "
                  f"off/on {cpu_ratio:.3f} (the same figure, less moved by other load on the machine)")
            out[f"metrics_produce_{name}_on_vs_off"] = ratio
            out[f"metrics_produce_{name}_cpu_on_vs_off"] = cpu_ratio
    finally:
        on.stop()
        off.stop()
    return out


def bench_scrape(work: Path, rounds: int, partitions: int) -> dict:
    heading(f"Scrape of a node with {partitions:,} partitions against DescribeLogDirs of it")
    metrics_port = _free_port()
    server = BenchServer(work / "big", {"kjbod.metrics.listener": f"127.0.0.1:{metrics_port}",
                                        "log.initial.task.delay.ms": "3600000"}).start()
    try:
        per_topic = 1000
        for i in range(partitions // per_topic):
            create_topic(server.port, f"t{i}", per_topic)
        scrape_seconds(metrics_port)
        describe_seconds(server.port)
        scrapes, describes, ratios = [], [], []
        size = described = 0
        for _ in range(rounds):
            s, size = scrape_seconds(metrics_port)
            d, described = describe_seconds(server.port)
            scrapes.append(s)
            describes.append(d)
            ratios.append(s / d)
        ratio = median(ratios)
        print(f"  /metrics {median(scrapes) * 1000:,.0f} ms ({size:,} B), DescribeLogDirs "
              f"{median(describes) * 1000:,.0f} ms ({described:,} B): {ratio:.2f}x "
              f"(target <= {SCRAPE_TARGET}x: {verdict(ratio <= SCRAPE_TARGET)})")
        return {"metrics_scrape_vs_describe_log_dirs": ratio, "metrics_scrape_seconds": median(scrapes)}
    finally:
        server.stop()


def run(rounds: int = 5, quick: bool = False) -> dict:
    base = os.environ.get("KJBOD_BENCH_DIR") or None
    work = Path(tempfile.mkdtemp(prefix="kjbod-bench-metrics-", dir=base))
    out: dict = {}
    try:
        out.update(bench_produce(work, 2 if quick else rounds, quick))
        out.update(bench_scrape(work, 3 if quick else rounds, 2_000 if quick else 10_000))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    return rounds_main("python -m tools.bench.metrics", __doc__, lambda rounds, _seconds, quick: run(rounds, quick),
                       argv, rounds=5)


if __name__ == "__main__":
    sys.exit(main())
