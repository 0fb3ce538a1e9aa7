"""Data-path benchmark: Produce against a plain file write, Fetch against raw sendfile, recovery after kill -9.

Every figure is a ratio against a reference measured in the same run, variants interleaved round by round (the
VM is shared and its speed drifts; see common.py):

* **Produce**: a load generator keeps DEPTH Produce requests in flight on one connection, each carrying one
  1 MiB record batch (acks=1), against a real `kjbod serve`; the reference writes the same bytes with os.write
  to a file in the same log dir (page cache, no fsync: acks=1 does not fsync either).  Target >= 70 %.  Three
  more runners (tools/bench/produce_sink.py) receive the same requests without parsing them: one writes each
  after receiving it, one receives and writes on two threads at once, one only receives.  They show what
  receiving over TCP costs on this machine before kjbod does anything, and what any TCP-fed writer reaches.
  Every timed run starts from a clean page cache (os.sync, untimed), so none pays for another's writeback.
* **Fetch**: a consumer reads three partitions (one per log dir, 1 MiB per partition per fetch, as a Kafka
  consumer's defaults ask) from a server with zero-copy on and from one with `kjbod.zero.copy=false` over a copy
  of the same data; the reference is raw os.sendfile of the same segment files into a loopback TCP socket in
  frames of the same size, drained by the same receive loop.  Target >= 70 % of raw sendfile.
* **Recovery**: 1 GiB in 1,000 partitions over 3 log dirs, written with kjbod.storage by a process that then
  kills itself with SIGKILL (no clean-shutdown marker, no checkpoint: the worst case, every byte re-validated);
  then the time LogManager.open() takes in a fresh process (page cache warm), and the same with 10,000
  partitions holding the same 1 GiB.  Target: close to linear in the partition count (factor <= 10 for 10x the
  partitions).

`python -m tools.bench.datapath [--quick]`; `run()` returns the ratios.  The work directory is a temporary
directory on the file system of $KJBOD_BENCH_DIR (default: the system temp dir).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from .common import heading, median, verdict, warm_memory

MIB = 1 << 20
SIZE = struct.Struct(">i")
BATCH_HEADER = struct.Struct(">qi")  # BaseOffset, Length
LAST_OFFSET_DELTA = struct.Struct(">i")
SERVER_READY_S = 60.0


# ================================================================================================ servers

_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def own_cpu() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime



def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BenchServer:
    """A `kjbod serve` subprocess in its own directory (three log dirs), logging warnings only."""

    def __init__(self, directory: Path, overrides: dict[str, str] | None = None, *, format_dirs: bool = True,
                 env: dict[str, str] | None = None):
        self.directory = directory
        self.env = None if env is None else {**os.environ, **env}
        self.port = _free_port()
        self.log_dirs = [directory / f"logs-{i}" for i in range(3)]
        self.config = directory / "server.properties"
        settings = {
            "node.id": "1",
            "process.roles": "broker,controller",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{_free_port()}",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": ",".join(str(d) for d in self.log_dirs),
            "metadata.log.dir": str(directory / "metadata"),
            "log.dir.placement.policy": "fewest-partitions",
            "message.max.bytes": str(2 * MIB),
            **(overrides or {}),
        }
        directory.mkdir(parents=True, exist_ok=True)
        self.config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        if format_dirs:
            subprocess.run([sys.executable, "-m", "kjbod", "format", "-c", str(self.config)], check=True,
                           stdout=subprocess.DEVNULL)
        self.process: subprocess.Popen | None = None

    def start(self) -> BenchServer:
        err = open(self.directory / "stderr.log", "ab")  # noqa: SIM115 (owned by the process)
        self.process = subprocess.Popen([sys.executable, "-m", "kjbod", "serve", "-c", str(self.config),
                                         "--log-level", "warning"], stdout=subprocess.DEVNULL, stderr=err,
                                        env=self.env)
        err.close()
        deadline = time.monotonic() + SERVER_READY_S
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"kjbod serve exited: see {self.directory / 'stderr.log'}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("kjbod serve did not start listening") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class Connection:
    """A blocking Kafka connection for the load generators: frames in, frames out, nothing decoded it can avoid."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray(8 * MIB)

    def close(self) -> None:
        self.sock.close()

    def read_frame(self) -> memoryview:
        """The next size-prefixed frame, in a buffer reused by the next call."""
        view = memoryview(self.buf)
        self._fill(view[:4])
        (size,) = SIZE.unpack_from(self.buf, 0)
        if size > len(self.buf):
            self.buf = bytearray(size)
            view = memoryview(self.buf)
        self._fill(view[:size])
        return view[:size]

    def _fill(self, view: memoryview) -> None:
        got, n = 0, len(view)
        recv_into = self.sock.recv_into
        while got < n:
            k = recv_into(view[got:])
            if k == 0:
                raise ConnectionError("connection closed by the server")
            got += k


def request_frame(request, version: int, correlation_id: int = 1) -> bytes:
    from kjbod.protocol.generated.request_header import RequestHeader
    from kjbod.protocol.headers import request_header_version

    header = RequestHeader(request_api_key=request.API_KEY, request_api_version=version,
                           correlation_id=correlation_id, client_id="kjbod-bench")
    body = header.encode(request_header_version(request.API_KEY, version)) + request.encode(version)
    return SIZE.pack(len(body)) + body


def call(port: int, request, version: int):
    from kjbod.protocol.generated.registry import APIS
    from kjbod.protocol.generated.response_header import ResponseHeader
    from kjbod.protocol.headers import response_header_version

    conn = Connection(port)
    try:
        conn.sock.sendall(request_frame(request, version))
        frame = bytes(conn.read_frame())
    finally:
        conn.close()
    _, pos = ResponseHeader.decode_from(frame, 0, response_header_version(request.API_KEY, version))
    return APIS[request.API_KEY].response.decode(frame[pos:], version)


def create_topic(port: int, name: str, partitions: int) -> None:
    from kjbod.protocol.generated import CreateTopicsRequest as C

    resp = call(port, C(timeout_ms=30_000, topics=[C.CreatableTopic(name=name, num_partitions=partitions,
                                                                    replication_factor=1)]), 7)
    if resp.topics[0].error_code:
        raise RuntimeError(f"CreateTopics {name}: error {resp.topics[0].error_code}")


def exact_batch(size: int, records: int) -> bytes:
    """A record batch of exactly `size` bytes: `records` records of random bytes (incompressible, like real
    data)."""
    from kjbod.storage.records import build_batch

    now = int(time.time() * 1000)
    probe = build_batch([(None, b"", [], now)] * records)
    per_record = (size - len(probe)) // records - 4  # minus the longer varints of non-empty values
    if per_record < 1:
        raise ValueError(f"{records} records do not fit in {size} bytes")
    values = [os.urandom(per_record) for _ in range(records)]
    data = build_batch([(None, v, [], now) for v in values])
    for _ in range(8):  # varint lengths move by a byte or two as the last value changes: converge
        if len(data) == size:
            return data
        values[-1] = values[-1][: size - len(data)] if len(data) > size else values[-1] + os.urandom(size - len(data))
        data = build_batch([(None, v, [], now) for v in values])
    if len(data) != size:
        raise ValueError(f"could not build a batch of exactly {size} bytes")
    return data


def one_mib_batch(records: int = 1024) -> bytes:
    return exact_batch(MIB, records)


# ================================================================================================ produce


def produce_frame(topic: str, partition: int, batch: bytes) -> bytes:
    from kjbod.protocol.generated import ProduceRequest as P

    req = P(acks=1, timeout_ms=30_000, topic_data=[P.TopicProduceData(name=topic, partition_data=[
        P.PartitionProduceData(index=partition, records=batch)])])
    return request_frame(req, 9)


def produce_pipelined(port: int, frame: bytes, count: int, depth: int) -> float:
    """Seconds to have `count` copies of `frame` acknowledged with at most `depth` in flight."""
    from kjbod.protocol.generated import ProduceResponse

    conn = Connection(port)
    conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * MIB)
    window = threading.Semaphore(depth)
    errors: list[str] = []

    def reader() -> None:
        try:
            for _ in range(count):
                frame_in = conn.read_frame()
                resp = ProduceResponse.decode(frame_in[5:], 9)  # correlation id + empty tagged fields
                code = resp.responses[0].partition_responses[0].error_code
                if code:
                    errors.append(f"Produce answered error {code}")
                window.release()
        except Exception as e:  # reported below; a dead reader must not hang the sender
            errors.append(repr(e))
            for _ in range(depth):
                window.release()

    t = threading.Thread(target=reader, daemon=True)
    started = time.perf_counter()
    t.start()
    try:
        for _ in range(count):
            window.acquire()
            if errors:
                break
            conn.sock.sendall(frame)
        t.join()
    finally:
        conn.close()
    if errors:
        raise RuntimeError(f"produce load failed: {errors[0]}")
    return time.perf_counter() - started


def sequential_write(path: Path, batch: bytes, count: int) -> float:
    """Seconds to write `count` copies of `batch` to a new file with os.write (page cache, no fsync)."""
    started = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    try:
        for _ in range(count):
            os.write(fd, batch)
    finally:
        os.close(fd)
    elapsed = time.perf_counter() - started
    path.unlink()
    return elapsed


def start_sink(directory: Path, mode: str) -> tuple[subprocess.Popen, int]:
    """tools/bench/produce_sink.py in `mode` (write, threads or discard) listening on a free port, writing in
    `directory`."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tools.bench.produce_sink", str(port), str(directory), mode],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            cwd=Path(__file__).resolve().parents[2])
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        raise RuntimeError(f"the produce sink ({mode}) did not start")
    return proc, port


def stop_sink(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


# The sinks of tools/bench/produce_sink.py, by mode, and how the report names them.
SINKS = {"write": "receive-then-write sink", "threads": "two-thread receive-and-write sink",
         "discard": "receive-only sink (no write)"}


def bench_produce(work: Path, rounds: int, mib_per_round: int, depth: int = 8) -> dict:
    heading(f"Produce: 1 MiB batches, acks=1, {depth} in flight, {mib_per_round} MiB per round, vs os.write "
            "of the same bytes in the same log dir")
    server = BenchServer(work / "produce").start()
    assert server.process is not None
    sinks: dict[str, tuple[subprocess.Popen, int]] = {}
    try:
        create_topic(server.port, "produce", 1)
        batch = one_mib_batch()
        frame = produce_frame("produce", 0, batch)
        log_dir = next(d for d in server.log_dirs if (d / "produce-0").exists())
        ports = {"kjbod": server.port}
        for mode in SINKS:
            sinks[mode] = start_sink(log_dir, mode)
            ports[mode] = sinks[mode][1]
        for port in ports.values():  # warm-up: connections, first segment, page cache
            produce_pipelined(port, frame, 16, depth)
        # The log and the sinks keep every byte: let all they will write land in memory the VM has backed.
        warmed = warm_memory((3 * rounds * mib_per_round + 1024) * MIB)
        times: dict[str, list[float]] = {name: [] for name in (*ports, "os.write")}
        server_cpu = client_cpu = 0.0
        for _ in range(rounds):
            # Each timed run starts with no dirty pages (os.sync, untimed).  The log and the sinks keep what they
            # were sent while the reference file is deleted after each run; without this, whoever runs after a
            # few hundred MiB of dirty data meets the kernel's writeback throttle (here it slows writers to disk
            # speed past roughly 0.7 GB of dirty pages) and the figure measures the disk, not the data path.
            os.sync()
            s0, c0 = process_cpu(server.process.pid), own_cpu()
            times["kjbod"].append(produce_pipelined(server.port, frame, mib_per_round, depth))
            server_cpu += process_cpu(server.process.pid) - s0
            client_cpu += own_cpu() - c0
            for mode in SINKS:
                os.sync()
                times[mode].append(produce_pipelined(ports[mode], frame, mib_per_round, depth))
            os.sync()
            times["os.write"].append(sequential_write(log_dir / "bench-sequential-write.tmp", batch, mib_per_round))
    finally:
        for proc, _ in sinks.values():
            stop_sink(proc)
        server.stop()

    def of_write(name: str) -> float:
        return median([w / t for w, t in zip(times["os.write"], times[name], strict=True)])

    ratio = of_write("kjbod")
    ceilings = {mode: of_write(mode) for mode in SINKS}
    best = max(("write", "threads"), key=lambda mode: ceilings[mode])
    of_best = median([s / k for s, k in zip(times[best], times["kjbod"], strict=True)])
    mb = mib_per_round * MIB / 1e6
    gb = rounds * mb / 1e3
    rates = ", ".join(f"{SINKS[mode]} {mb / median(times[mode]):,.0f}" for mode in SINKS)
    print(f"   MB/s (medians): kjbod Produce {mb / median(times['kjbod']):,.0f}, {rates}, "
          f"os.write {mb / median(times['os.write']):,.0f}")
    print(f"   CPU seconds per GB: kjbod server {server_cpu / gb:.2f}, load generator {client_cpu / gb:.2f} "
          f"(memory warmed first in {warmed:.1f} s, see common.warm_memory)")
    print("   the sinks (no parsing) as a share of os.write, the ceilings of a TCP-fed log here: "
          + ", ".join(f"{SINKS[mode]} {ceilings[mode]:.1%}" for mode in SINKS))
    print(f"   kjbod reaches {of_best:.1%} of the best writing sink (the {SINKS[best]})")
    print(f"   Produce reaches {ratio:.1%} of a sequential file write (target >= 70%: {verdict(ratio >= 0.70)})")
    return {"produce_vs_write": ratio, "produce_sink_vs_write": ceilings["write"],
            "produce_threaded_sink_vs_write": ceilings["threads"], "produce_receive_only_vs_write": ceilings["discard"],
            "produce_vs_best_sink": of_best, "produce_server_cpu_per_gb": server_cpu / gb}


# ================================================================================================ fetch


def fetch_frame(topic: str, offsets: list[int], partition_max: int) -> bytes:
    from kjbod.protocol.generated import FetchRequest as F

    req = F(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=50 * MIB, isolation_level=0, topics=[
        F.FetchTopic(topic=topic, partitions=[F.FetchPartition(partition=p, fetch_offset=o,
                                                               partition_max_bytes=partition_max)
                                              for p, o in enumerate(offsets)])])
    return request_frame(req, 11)


def parse_fetch_v11(frame: memoryview, offsets: list[int]) -> int:
    """Advances `offsets` past the whole batches of a one-topic Fetch v11 response; returns the record bytes.

    Walks the fixed layout with struct (v11 is not flexible) instead of decoding, so the consumer costs the same
    few microseconds per response whatever its size, as a real client that hands the bytes on."""
    pos = 4 + 4 + 2 + 4  # correlation id, throttle, error, session id
    (topics,) = struct.unpack_from(">i", frame, pos)
    pos += 4
    total = 0
    for _ in range(topics):
        (name_len,) = struct.unpack_from(">h", frame, pos)
        pos += 2 + name_len
        (parts,) = struct.unpack_from(">i", frame, pos)
        pos += 4
        for _ in range(parts):
            partition, error = struct.unpack_from(">ih", frame, pos)
            if error:
                raise RuntimeError(f"Fetch answered error {error} for partition {partition}")
            pos += 4 + 2 + 8 + 8 + 8
            (aborted,) = struct.unpack_from(">i", frame, pos)
            pos += 4 + max(aborted, 0) * 16 + 4  # aborted transactions, preferred read replica
            (size,) = struct.unpack_from(">i", frame, pos)
            pos += 4
            end = pos + max(size, 0)
            at = pos
            while at + 61 <= end:
                base, length = BATCH_HEADER.unpack_from(frame, at)
                if at + 12 + length > end:
                    break
                (delta,) = LAST_OFFSET_DELTA.unpack_from(frame, at + 23)
                offsets[partition] = base + delta + 1
                at += 12 + length
            total += max(size, 0)
            pos = end
    return total


def consume(port: int, topic: str, partitions: int, end_offset: int, partition_max: int = MIB) -> tuple[float, int]:
    """Seconds and bytes to fetch every partition from 0 to `end_offset`, one fetch in flight (a consumer)."""
    conn = Connection(port)
    offsets = [0] * partitions
    total = 0
    started = time.perf_counter()
    try:
        while min(offsets) < end_offset:
            conn.sock.sendall(fetch_frame(topic, offsets, partition_max))
            got = parse_fetch_v11(conn.read_frame(), offsets)
            if not got:
                raise RuntimeError(f"empty fetch at offsets {offsets} (end {end_offset})")
            total += got
    finally:
        conn.close()
    return time.perf_counter() - started, total


def raw_sendfile(files: list[Path], frame_bytes: int) -> tuple[float, int]:
    """Seconds and bytes to sendfile `files` through loopback TCP in frames of `frame_bytes`, drained by the
    consumer's receive loop: the ceiling for a Fetch path."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    sizes = [f.stat().st_size for f in files]
    failure: list[BaseException] = []

    def sender() -> None:
        try:
            out, _ = listener.accept()
            with out:
                out.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                fds = [os.open(f, os.O_RDONLY) for f in files]
                try:
                    positions = [0] * len(files)
                    while any(p < s for p, s in zip(positions, sizes, strict=True)):
                        # One frame carries up to frame_bytes/len(files) of each file, like a 3-partition fetch.
                        share = frame_bytes // len(files)
                        pieces = [(i, min(share, sizes[i] - positions[i])) for i in range(len(files))
                                  if positions[i] < sizes[i]]
                        out.sendall(SIZE.pack(sum(n for _i, n in pieces)))
                        for i, n in pieces:
                            sent = 0
                            while sent < n:
                                sent += os.sendfile(out.fileno(), fds[i], positions[i] + sent, n - sent)
                            positions[i] += n
                finally:
                    for fd in fds:
                        os.close(fd)
        except BaseException as e:  # reported by the caller
            failure.append(e)

    t = threading.Thread(target=sender, daemon=True)
    t.start()
    conn = Connection(port)
    total = 0
    started = time.perf_counter()
    try:
        while total < sum(sizes):
            total += len(conn.read_frame())
    finally:
        conn.close()
        listener.close()
    elapsed = time.perf_counter() - started
    t.join()
    if failure:
        raise RuntimeError(f"raw sendfile failed: {failure[0]!r}")
    return elapsed, total


def bench_fetch(work: Path, rounds: int, mib_per_partition: int) -> dict:
    partitions = 3
    heading(f"Fetch: a consumer reading {partitions} partitions x {mib_per_partition} MiB (1 MiB per partition "
            "per fetch), zero-copy vs copying vs raw sendfile")
    on = BenchServer(work / "fetch-zero-copy").start()
    off = None
    try:
        create_topic(on.port, "fetch", partitions)
        batch = one_mib_batch()
        for p in range(partitions):
            produce_pipelined(on.port, produce_frame("fetch", p, batch), mib_per_partition, 8)
        on.stop()
        # The same data for the server with zero-copy off: a copy of the whole directory, its own ports.
        shutil.copytree(work / "fetch-zero-copy", work / "fetch-copying", ignore=shutil.ignore_patterns("*.lock"))
        off = BenchServer(work / "fetch-copying", {"kjbod.zero.copy": "false"}, format_dirs=False)
        on.start()
        off.start()
        segments = sorted(p for d in on.log_dirs for p in d.glob("fetch-*/*.log"))
        end = mib_per_partition * 1024
        for server in (on, off):
            consume(server.port, "fetch", partitions, end)  # warm-up: page cache, connections
        samples: dict[str, list[float]] = {"zero-copy": [], "copying": [], "raw sendfile": []}
        cpu = dict.fromkeys(samples, 0.0)
        volume = 0
        assert on.process is not None and off.process is not None
        for _ in range(rounds):
            for name, server in (("zero-copy", on), ("copying", off)):
                c0 = process_cpu(server.process.pid)  # type: ignore[union-attr]
                t, volume = consume(server.port, "fetch", partitions, end)
                cpu[name] += process_cpu(server.process.pid) - c0  # type: ignore[union-attr]
                samples[name].append(t)
            c0 = own_cpu()
            t, _ = raw_sendfile(segments, partitions * MIB)
            cpu["raw sendfile"] += own_cpu() - c0  # sender and receiver: an upper bound for the sender
            samples["raw sendfile"].append(t)
    finally:
        on.stop()
        if off is not None:
            off.stop()
    mb = volume / 1e6
    print("   " + ", ".join(f"{k} {mb / median(v):,.0f} MB/s" for k, v in samples.items()) + " (medians)")
    gb = rounds * mb / 1e3
    print(f"   server CPU seconds per GB sent: zero-copy {cpu['zero-copy'] / gb:.2f}, copying {cpu['copying'] / gb:.2f} "
          f"(raw sendfile, sender and receiver together: {cpu['raw sendfile'] / gb:.2f})")
    vs_raw = median([r / z for r, z in zip(samples["raw sendfile"], samples["zero-copy"], strict=True)])
    vs_copy = median([c / z for c, z in zip(samples["copying"], samples["zero-copy"], strict=True)])
    print(f"   zero-copy Fetch reaches {vs_raw:.1%} of raw sendfile (target >= 70%: {verdict(vs_raw >= 0.70)}); "
          f"{vs_copy:.2f}x the speed of the same server with kjbod.zero.copy=false")
    return {"fetch_vs_raw_sendfile": vs_raw, "fetch_zero_copy_vs_copying": vs_copy}


# ================================================================================================ recovery


def build_logs(directory: Path, partitions: int, total_bytes: int, batch_bytes: int) -> None:
    """Formats three log dirs, fills `partitions` partitions with `total_bytes` in batches of `batch_bytes`, then
    dies by SIGKILL with everything open (run in a child process: `python -m tools.bench.datapath build ...`).

    The builder skips fsync: a kill -9 ends the process, not the machine, so the page cache keeps every byte
    (exactly what a crashed broker leaves), and 10,000 partition creations with two directory fsyncs each would
    otherwise dominate the benchmark's run time without being what it measures."""
    os.fsync = lambda fd: None  # this process only (see above)
    from kjbod.storage import LogConfig, LogManager, PartitionSpec, format_dirs

    dirs = [str(directory / f"logs-{i}") for i in range(3)]
    format_dirs({"log.dirs": ",".join(dirs), "node.id": 1})
    manager = LogManager(dirs, node_id=1, defaults=LogConfig(segment_bytes=64 * MIB),
                         placement_policy="fewest-partitions")
    manager.open()
    logs = manager.create_partitions([PartitionSpec("recovery", p, None) for p in range(partitions)])
    records = max(1, batch_bytes // 1024)
    batch = exact_batch(batch_bytes, records)
    per_partition = max(1, round(total_bytes / partitions / batch_bytes))
    for _ in range(per_partition):
        for plog in logs:
            plog.append(batch)
    sys.stdout.write(json.dumps({"batches": per_partition, "records": per_partition * records,
                                 "bytes": per_partition * len(batch) * partitions}) + "\n")
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def open_logs(directory: Path) -> None:
    """Opens (recovers) the three log dirs in this fresh process and prints the seconds open() took.  The process
    then exits without closing, so the dirs stay unclean and the next open recovers them again."""
    from kjbod.storage import LogManager

    dirs = [str(directory / f"logs-{i}") for i in range(3)]
    manager = LogManager(dirs, node_id=1)
    started = time.perf_counter()
    manager.open()
    elapsed = time.perf_counter() - started
    ends = sorted({plog.log_end_offset for plog in manager.partitions()})
    report = {"seconds": elapsed, "partitions": len(manager.partitions()), "end_offsets": ends[:3],
              "clean": any(manager.had_clean_shutdown(d) for d in dirs)}
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()
    os._exit(0)  # no close: no clean-shutdown marker, no checkpoint


def _child(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "tools.bench.datapath", *args], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], timeout=1800)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(lines[-1])


def bench_recovery(work: Path, rounds: int, total_mib: int, counts: tuple[int, int]) -> dict:
    heading(f"Recovery after kill -9: {total_mib} MiB over 3 log dirs, no checkpoint (every byte re-validated), "
            "page cache warm")
    built = {}
    for partitions in counts:
        directory = work / f"recovery-{partitions}"
        per_partition = total_mib * MIB // partitions
        batches = -(-per_partition // (64 * 1024))  # batches of at most 64 KiB, the same total either way
        built[partitions] = _child("build", str(directory), str(partitions), str(total_mib * MIB),
                                   str(per_partition // batches))
    seconds: dict[int, list[float]] = {p: [] for p in counts}
    for _ in range(rounds):
        for partitions in counts:
            opened = _child("open", str(work / f"recovery-{partitions}"))
            if opened["clean"] or opened["partitions"] != partitions or \
                    opened["end_offsets"] != [built[partitions]["records"]]:
                raise RuntimeError(f"recovery of {partitions} partitions went wrong: {opened} {built[partitions]}")
            seconds[partitions].append(opened["seconds"])
    for partitions in counts:
        t = median(seconds[partitions])
        size = built[partitions]["bytes"]
        print(f"   {partitions:>6,} partitions, {size / MIB:,.0f} MiB: recovery {t:.2f} s ({size / 1e6 / t:,.0f} MB/s, "
              f"{t / partitions * 1e3:.2f} ms per partition)")
    small, large = counts
    factor = median(seconds[large]) / median(seconds[small])
    scale = large / small
    ok = factor <= scale * 1.2
    print(f"   {scale:g}x the partitions (same bytes): recovery takes {factor:.2f}x as long (target: close to linear, "
          f"<= {scale:g}x: {verdict(ok)})")
    for partitions in counts:
        shutil.rmtree(work / f"recovery-{partitions}")
    return {"recovery_seconds": median(seconds[small]), "recovery_factor": factor}


# ================================================================================================ run


def run(rounds: int = 7, quick: bool = False) -> dict:
    base = os.environ.get("KJBOD_BENCH_DIR") or None
    work = Path(tempfile.mkdtemp(prefix="kjbod-bench-datapath-", dir=base))
    out: dict = {}
    try:
        steps: list[Callable[[], dict]] = [
            lambda: bench_produce(work, rounds, 32 if quick else 128),
            lambda: bench_fetch(work, rounds, 32 if quick else 128),
            lambda: bench_recovery(work, 1 if quick else 2, 128 if quick else 1024,
                                   (100, 1000) if quick else (1000, 10_000)),
        ]
        for step in steps:
            out.update(step())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.datapath")
    sub = parser.add_subparsers(dest="cmd")
    b = sub.add_parser("build", help="(internal) fill log dirs, then SIGKILL self")
    b.add_argument("dir", type=Path)
    b.add_argument("partitions", type=int)
    b.add_argument("bytes", type=int)
    b.add_argument("batch_bytes", type=int)
    o = sub.add_parser("open", help="(internal) time LogManager.open() on log dirs")
    o.add_argument("dir", type=Path)
    parser.add_argument("--quick", action="store_true", help="smaller data sets, for a smoke run")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    if args.cmd in ("build", "open"):
        # The children's timings are the point: keep per-partition info logs out of them.
        import logging

        import structlog

        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    if args.cmd == "build":
        build_logs(args.dir, args.partitions, args.bytes, args.batch_bytes)
    elif args.cmd == "open":
        open_logs(args.dir)
    else:
        run(args.rounds, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
