"""KIP-113 benchmarks: the replica mover's copy speed, the throttle's accuracy, produce latency during a move,
and DescribeLogDirs at scale. Every comparison is measured in the same run, rounds interleaved (shared VM).

1. **Copy vs cp.** An unthrottled move of a 1 GiB partition (8 x 128 MiB segments, then 1,024 x 1 MiB) by
   the ReplicaMover (in-process, on one LogManager) against ``cp -r`` of the same partition dir to the same
   destination, warm source. Target: at least 0.9x cp's throughput. The mover makes every file durable before
   naming it, and plain ``cp -r`` only fills the page cache, so it is also compared with ``cp -r`` followed by
   an fsync of every copied file (what cp would need to be as safe) and with the durable physical limit
   measured in the same rounds (1 GiB written with O_DIRECT, then fsync); when 0.9x plain cp is above that
   limit the benchmark says so.
2. **Throttle accuracy** at 10 and 50 MB/s: a 4-second move, achieved rate = bytes charged to the throttle /
   wall time. Target: within 3 % of the setting.
3. **Produce p99 latency** (acks=-1, one 100-byte record per request, one request in flight) against a real
   ``kjbod serve``, with no move vs during unthrottled 1 GiB moves of another partition. Target: <= 2x.
4. **DescribeLogDirs** (all replicas, v4): the handler and the encoding of its response with 2,000 and 20,000
   partitions in 4 log dirs on tmpfs: time, and growth from 2,000 to 20,000 (target: linear, i.e. about 10x).

Run: ``python -m tools.bench.kip113`` (scratch data goes to ./bench-out/kip113 and /dev/shm, removed after).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from .common import heading, verdict

MB = 1_000_000
GIB = 1 << 30


def _batch(value: bytes, count: int) -> bytes:
    """One record batch of `count` records (kafka-python's builder: a second implementation of the format)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.record.default_records import DefaultRecordBatchBuilder
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 28)
    for i in range(count):
        b.append(i, timestamp=1_700_000_000_000 + i, key=None, value=value, headers=[])
    return bytes(b.build())


# ------------------------------------------------------------------------------------------------ in-process rig


class _Rig:
    def __init__(self, base: Path, segment_bytes: int, rate: int | None = None) -> None:
        from kjbod.broker.kip113 import ReplicaMover, Throttle
        from kjbod.storage.config import LogConfig
        from kjbod.storage.manager import LogManager
        from kjbod.storage.meta import format_dirs

        self.dirs = [str(base / f"d{i}") for i in range(3)]
        format_dirs({"log.dirs": ",".join(self.dirs), "node.id": 1})
        self.manager = LogManager(self.dirs, node_id=1, defaults=LogConfig(
            segment_bytes=segment_bytes, max_message_bytes=256 << 20, file_delete_delay_ms=0))
        self.manager.open()
        self.throttle = Throttle(rate) if rate else Throttle()
        self.mover = ReplicaMover(self.manager, threads=3, throttle=self.throttle)
        self.mover.start()

    def fill(self, topic: str, total: int, batch_bytes: int) -> None:
        plog = self.manager.create_partition(topic, 0, "3uI2M2AbQVO0J2cYw2xvOA", dir=self.dirs[0])
        value = os.urandom(min(batch_bytes, 1 << 20) - 100)
        per = max(1, batch_bytes // len(value))
        data = _batch(value, per)
        written = 0
        while written < total:
            plog.append(data)
            written += len(data)
        plog.roll()
        plog.flush()

    def move(self, topic: str, dest: str) -> float:
        started = time.perf_counter()
        self.mover.request_move(topic, 0, dest)
        # Woken by the mover when the move ends (no polling loop competing with it for the GIL).
        if not self.mover.wait_settled(topic, 0, timeout=600):
            raise RuntimeError(f"the move of {topic}-0 did not finish")
        elapsed = time.perf_counter() - started
        plog = self.manager.find(topic, 0)
        if plog is None or plog.log_dir != dest:
            raise RuntimeError(f"the move of {topic}-0 to {dest} failed: {self.mover.progress(topic, 0)}")
        self.manager.tick()  # removes the old copy (file.delete.delay.ms = 0), outside the timing
        return elapsed

    def partition_dir(self, topic: str = "big") -> str:
        return self.manager.get(topic, 0).dir

    def close(self) -> None:
        self.mover.stop()
        self.manager.close()


def _cp(source: Callable[[], str], dest: str, fsync: bool) -> float:
    """``cp -r src dest``; with ``fsync``, then an fsync of every copied file and of the new dir (what cp would
    need to be as durable as the move). The copy is removed afterwards, outside the timing."""
    src = source()  # where the partition is now (a move earlier in the round changed it)
    started = time.perf_counter()
    subprocess.run(["cp", "-r", src, dest], check=True)
    if fsync:
        for name in os.listdir(dest):
            fd = os.open(os.path.join(dest, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(fd)
        os.close(fd)
    elapsed = time.perf_counter() - started
    shutil.rmtree(dest)
    return elapsed


def _direct_write(dest_dir: str, size: int) -> float:
    """The durable physical limit: ``size`` bytes of random data written with O_DIRECT in 8 MiB blocks (no page
    cache, no copy in memory), then fsync (the disk's cache flushed), as ``dd oflag=direct conv=fsync`` does."""
    import mmap

    block = 8 << 20
    buf = mmap.mmap(-1, block)  # page-aligned, as O_DIRECT needs
    buf.write(os.urandom(block))
    path = os.path.join(dest_dir, "direct-write.bin")
    started = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_DIRECT", 0), 0o644)
    try:
        written = 0
        while written < size:
            written += os.write(fd, buf)
        os.fsync(fd)
    finally:
        os.close(fd)
    elapsed = time.perf_counter() - started
    os.unlink(path)
    buf.close()
    return elapsed * size / written


def bench_copy(scratch: Path, rounds: int, size: int = GIB) -> dict:
    """Each round runs the four variants in a rotated order, each after an untimed ``sync`` (so none pays for
    the previous one's dirty pages); the figures are medians of the per-round times and of paired ratios."""
    out = {}
    for label, segment_bytes, batch_bytes in (("128 MiB", 128 << 20, 8 << 20), ("1 MiB", 1 << 20, (1 << 20) - 200)):
        heading(f"KIP-113 move vs cp -r: {size / GIB:g} GiB partition as {label} segments (warm source, same "
                "filesystem, durable physical limit measured alongside)")
        base = scratch / f"copy-{segment_bytes}"
        base.mkdir(parents=True)
        rig = _Rig(base, segment_bytes)
        times: dict[str, list[float]] = {"move": [], "cp": [], "cp+fsync": [], "direct": []}
        try:
            rig.fill("big", size, batch_bytes)
            plog = rig.manager.get("big", 0)
            total = plog.size_bytes
            files = sum(1 for _ in Path(plog.dir).iterdir())
            print(f"   partition: {total / MB:.0f} MB in {len(plog.segments) - 1} closed segments, {files} files")
            for r in range(rounds):
                plog = rig.manager.get("big", 0)
                cur = plog.log_dir
                dest = rig.dirs[(rig.dirs.index(cur) + 1) % 3]
                other = rig.dirs[(rig.dirs.index(cur) + 2) % 3]
                variants = [
                    ("move", partial(rig.move, "big", dest)),
                    ("cp", partial(_cp, rig.partition_dir, os.path.join(other, f"cp-{r}"), fsync=False)),
                    ("cp+fsync", partial(_cp, rig.partition_dir, os.path.join(other, f"cps-{r}"), fsync=True)),
                    ("direct", partial(_direct_write, other, total)),
                ]
                k = r % len(variants)
                for name, run in variants[k:] + variants[:k]:
                    os.sync()
                    times[name].append(run())
        finally:
            rig.close()
            shutil.rmtree(base, ignore_errors=True)

        mbs = {name: total / MB / statistics.median(ts) for name, ts in times.items()}
        ratio = {name: statistics.median(t / m for t, m in zip(ts, times["move"], strict=True))
                 for name, ts in times.items()}
        print(f"   MB/s, median of {rounds} rounds: mover {mbs['move']:.0f}, cp -r {mbs['cp']:.0f}, "
              f"cp -r + fsync {mbs['cp+fsync']:.0f}, O_DIRECT write + fsync {mbs['direct']:.0f}")
        print("   per round (s): " + "; ".join(f"{k} " + " ".join(f"{t:.2f}" for t in v) for k, v in times.items()))
        limit = max(mbs["direct"], mbs["cp+fsync"])
        print(f"   mover / cp -r = {ratio['cp']:.2f}x (target >= 0.9x: {verdict(ratio['cp'] >= 0.9)}); "
              f"mover / (cp -r + fsync) = {ratio['cp+fsync']:.2f}x; mover / O_DIRECT write = {ratio['direct']:.2f}x")
        if 0.9 * mbs["cp"] > limit:
            print(f"   0.9x plain cp -r is {0.9 * mbs['cp']:.0f} MB/s, above the fastest durable write measured here "
                  f"({limit:.0f} MB/s): cp -r only fills the page cache, while the move must fsync every file "
                  "before it counts (issue 4), so that target is physically out of reach for these segments. "
                  "The durable comparisons are cp -r + fsync and the O_DIRECT write.")
        key = "8x128MiB" if segment_bytes == 128 << 20 else "1024x1MiB"
        out[f"move {key} / cp -r (target >= 0.9)"] = ratio["cp"]
        out[f"move {key} / (cp -r + fsync)"] = ratio["cp+fsync"]
        out[f"move {key} / O_DIRECT write + fsync (durable limit)"] = ratio["direct"]
    return out


def bench_throttle(scratch: Path, rounds: int) -> dict:
    out = {}
    for rate_mb in (10, 50):
        rate = rate_mb * MB
        heading(f"KIP-113 throttle accuracy at {rate_mb} MB/s (a 4-second move, one throttle for all threads)")
        base = scratch / f"throttle-{rate_mb}"
        base.mkdir(parents=True)
        rig = _Rig(base, 16 << 20, rate)
        errors = []
        try:
            rig.fill("t", rate * 4, 4 << 20)
            for _ in range(rounds):
                cur = rig.manager.get("t", 0).log_dir
                dest = rig.dirs[(rig.dirs.index(cur) + 1) % 3]
                before = rig.throttle.total_bytes
                elapsed = rig.move("t", dest)
                achieved = (rig.throttle.total_bytes - before) / elapsed
                errors.append(achieved / rate - 1)
        finally:
            rig.close()
            shutil.rmtree(base, ignore_errors=True)
        err = statistics.median(errors)
        print(f"   achieved / target - 1: median {err * 100:+.2f} % (rounds: "
              + ", ".join(f"{e * 100:+.2f}" for e in errors) + f"); target |x| <= 3 %: {verdict(abs(err) <= 0.03)}")
        out[f"throttle {rate_mb} MB/s: achieved / target (target 0.97-1.03)"] = 1 + err
    return out


# ------------------------------------------------------------------------------------------------ live server


class _Server:
    """A `kjbod serve` subprocess on free ports (what tests/live.py does, kept here so tools need no tests)."""

    def __init__(self, base: Path, dirs: list[Path], extra: dict[str, str] | None = None) -> None:
        self.base, self.dirs = base, dirs
        self.port, cport = _free_port(), _free_port()
        settings = {
            "node.id": "1", "process.roles": "broker,controller",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{cport}",
            "controller.listener.names": "CONTROLLER", "log.dirs": ",".join(str(d) for d in dirs),
            "metadata.log.dir": str(base / "metadata"), "log.segment.delete.delay.ms": "0",
        }
        settings.update(extra or {})
        self.config = base / "server.properties"
        self.config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        cmd = [sys.executable, "-m", "kjbod"]
        subprocess.run([*cmd, "format", "-c", str(self.config), "--cluster-id", "a2pib2Qtc2ltdWxhdGlvbg"],
                       check=True, capture_output=True)
        self.stderr = open(base / "stderr.log", "ab")  # noqa: SIM115 (closed in stop())
        self.process = subprocess.Popen([*cmd, "serve", "-c", str(self.config)], stdout=subprocess.DEVNULL,
                                        stderr=self.stderr, start_new_session=True, preexec_fn=_more_fds)
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("kjbod serve did not start") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.stderr.close()


def _more_fds() -> None:
    """A broker keeps one fd per partition (its active segment): 20,000 partitions need more than the usual
    limit, as Kafka's do (its docs ask for 100,000). Raised as far as this user may."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(hard, 65536), max(hard, 65536)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Raw:
    """Requests at an exact version over one socket, with kjbod's codecs."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.corr = 0

    def send(self, request, version: int) -> None:
        from kjbod.protocol.headers import request_header_version

        key = type(request).API_KEY
        self.corr += 1
        header = struct.pack(">hhih", key, version, self.corr, 5) + b"bench"
        if request_header_version(key, version) >= 2:
            header += b"\x00"
        body = request.encode(version)
        self.sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)

    def receive(self) -> bytes:
        size = struct.unpack(">i", self._read(4))[0]
        return self._read(size)

    def call(self, request, version: int):
        from kjbod.protocol.generated.registry import APIS
        from kjbod.protocol.headers import response_header_version

        self.send(request, version)
        frame = self.receive()
        key = type(request).API_KEY
        pos = 4 + (1 if response_header_version(key, version) >= 1 else 0)
        return APIS[key].response.decode(frame[pos:], version)

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("server closed the connection")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


def _create_topics(raw: _Raw, names: list[str], partitions: int) -> None:
    from kjbod.protocol.generated import CreateTopicsRequest

    req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=n, num_partitions=partitions, replication_factor=1) for n in names], timeout_ms=600_000)
    resp = raw.call(req, 5)
    bad = [(t.name, t.error_code) for t in resp.topics if t.error_code]
    if bad:
        raise RuntimeError(f"CreateTopics failed: {bad}")


def _log_dirs(raw: _Raw):
    from kjbod.protocol.generated import DescribeLogDirsRequest

    return raw.call(DescribeLogDirsRequest(topics=None), 4).results


def _where(raw: _Raw, topic: str) -> str:
    for r in _log_dirs(raw):
        for t in r.topics:
            if t.name == topic and any(not p.is_future_key for p in t.partitions):
                return r.log_dir
    raise RuntimeError(f"{topic} not found")


def pct(xs: list[float], q: float) -> float:
    """The q-quantile of `xs` (seconds) in milliseconds."""
    return sorted(xs)[min(len(xs) - 1, int(len(xs) * q))] * 1000


def bench_produce_latency(scratch: Path, rounds: int, size: int = GIB) -> dict:
    from kjbod.protocol.generated import AlterReplicaLogDirsRequest as ARD
    from kjbod.protocol.generated import DescribeLogDirsRequest, ProduceRequest

    heading(f"KIP-113 produce p99 latency (acks=-1, 1 record/request) during unthrottled {size / GIB:g} GiB moves "
            "vs none")
    base = scratch / "latency"
    base.mkdir(parents=True)
    dirs = [base / f"logs-{i}" for i in range(3)]
    server = _Server(base, dirs, {"log.segment.bytes": str(128 << 20), "message.max.bytes": str(16 << 20)})
    raw = _Raw(server.port)
    try:
        _create_topics(raw, ["lat", "big"], 1)
        big = _batch(os.urandom(1 << 20), 8)
        filler = _Raw(server.port)
        for _ in range(size // len(big)):
            filler.call(ProduceRequest(acks=1, timeout_ms=30_000, topic_data=[ProduceRequest.TopicProduceData(
                name="big", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=big)])]), 9)
        filler.close()
        record = _batch(b"x" * 100, 1)
        produce = ProduceRequest(acks=-1, timeout_ms=30_000, topic_data=[ProduceRequest.TopicProduceData(
            name="lat", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=record)])])

        def sample(until) -> list[float]:
            out = []
            while not until():
                t = time.perf_counter()
                raw.send(produce, 9)
                raw.receive()
                out.append(time.perf_counter() - t)
            return out

        idle: list[float] = []
        moving: list[float] = []
        per_round: list[float] = []
        control = _Raw(server.port)
        for _ in range(rounds):
            stop_at = time.monotonic() + 3.0
            idle_round = sample(lambda stop_at=stop_at: time.monotonic() >= stop_at)
            idle += idle_round
            cur = _where(control, "big")
            dest = str(dirs[([str(d) for d in dirs].index(cur) + 1) % 3])
            control.call(ARD(dirs=[ARD.AlterReplicaLogDir(path=dest, topics=[
                ARD.AlterReplicaLogDirTopic(name="big", partitions=[0])])]), 2)
            done = threading.Event()

            def watch(dest=dest, done=done) -> None:
                # A small request (one partition) every 100 ms: the watcher shares this process's GIL with the
                # sampling loop, and must not be what the samples measure.
                watcher = _Raw(server.port)
                only_big = DescribeLogDirsRequest(topics=[DescribeLogDirsRequest.DescribableLogDirTopic(
                    topic="big", partitions=[0])])
                while True:
                    results = watcher.call(only_big, 4).results
                    placed = {(r.log_dir, p.is_future_key) for r in results for t in r.topics for p in t.partitions}
                    if placed == {(dest, False)}:
                        break
                    time.sleep(0.1)
                watcher.close()
                done.set()

            threading.Thread(target=watch, daemon=True).start()
            moving_round = sample(done.is_set)
            moving += moving_round
            per_round.append(pct(moving_round, 0.99) / pct(idle_round, 0.99))
        control.close()
    finally:
        raw.close()
        server.stop()
        shutil.rmtree(base, ignore_errors=True)

    p99_idle, p99_move = pct(idle, 0.99), pct(moving, 0.99)
    ratio = statistics.median(per_round)
    print(f"   no move: {len(idle)} requests, p50 {pct(idle, 0.5):.3f} ms, p99 {p99_idle:.3f} ms")
    print(f"   moving:  {len(moving)} requests, p50 {pct(moving, 0.5):.3f} ms, p99 {p99_move:.3f} ms, "
          f"max {max(moving) * 1000:.1f} ms")
    print(f"   p99 during a move / p99 without, median of paired rounds: {ratio:.2f}x (rounds: "
          + ", ".join(f"{r:.2f}" for r in per_round) + f"; all samples pooled: {p99_move / p99_idle:.2f}x); "
          f"target <= 2x: {verdict(ratio <= 2)}")
    return {"produce p99 during a move / without (target <= 2)": ratio}


def bench_describe_log_dirs(scratch: Path, rounds: int) -> dict:
    """In-process: the DescribeLogDirs handler and the v4 encoding over two LogManagers, one with 2,000 and one
    with 20,000 partitions in 4 log dirs on tmpfs, timed in interleaved rounds (the growth is the median of the
    per-round ratios). A live server with 20,000 partitions needs more than 20,000 file descriptors, one per
    active segment, over this VM's hard limit; the handler and the encoding are where the time goes."""
    from types import SimpleNamespace

    from kjbod.broker.handlers.describe_log_dirs import handle
    from kjbod.protocol.generated import DescribeLogDirsRequest
    from kjbod.storage.config import LogConfig
    from kjbod.storage.manager import LogManager, PartitionSpec
    from kjbod.storage.meta import format_dirs

    heading("KIP-113 DescribeLogDirs (all replicas, v4): handler + encoding, 2,000 and 20,000 partitions, 4 dirs")
    shm = Path("/dev/shm")
    root = Path(tempfile.mkdtemp(prefix="kjbod-bench-", dir=shm if shm.is_dir() and os.access(shm, os.W_OK)
                                 else scratch))
    request = DescribeLogDirsRequest(topics=None)
    loop = asyncio.new_event_loop()  # the handler awaits each dir's size probe (a bounded wait)

    def answer(node):
        return loop.run_until_complete(handle(node, None, request))

    record = _batch(b"x" * 100, 1)
    managers: dict[int, LogManager] = {}
    nodes: dict[int, SimpleNamespace] = {}
    samples: dict[int, list[float]] = {2_000: [], 20_000: []}
    wire_size: dict[int, int] = {}
    try:
        for count in samples:
            dirs = [str(root / f"n{count}" / f"logs-{i}") for i in range(4)]
            format_dirs({"log.dirs": ",".join(dirs), "node.id": 1})
            manager = LogManager(dirs, node_id=1, defaults=LogConfig(segment_bytes=1 << 20),
                                 placement_policy="fewest-partitions")
            manager.open()
            managers[count] = manager
            for t in range(count // 1000):
                for plog in manager.create_partitions([PartitionSpec(f"t{t:03d}", p, None) for p in range(1000)]):
                    plog.append(record)
                    plog.active_segment.release()  # one fd per partition would exceed the VM's limit
            nodes[count] = SimpleNamespace(logs=SimpleNamespace(manager=manager), mover=None)
            response = answer(nodes[count])
            assert sum(len(t.partitions) for r in response.results for t in r.topics) == count
            wire_size[count] = len(response.encode(4))
        for _ in range(max(15, rounds * 5)):
            for count, node in nodes.items():
                t = time.perf_counter()
                answer(node).encode(4)
                samples[count].append(time.perf_counter() - t)
    finally:
        loop.close()
        for manager in managers.values():
            for plog in manager.partitions():
                plog.close_quietly()
            manager._closed = True
            for d in manager._dirs.values():
                if d.lock is not None:
                    d.lock.close()
        shutil.rmtree(root, ignore_errors=True)
    for count, xs in samples.items():
        ms = statistics.median(xs) * 1000
        print(f"   {count:>6,} partitions: {ms:.1f} ms per response (median), {wire_size[count]:,} bytes, "
              f"{ms * 1000 / count:.2f} us per partition")
    growth = statistics.median(b / a for a, b in zip(samples[2_000], samples[20_000], strict=True))
    print(f"   growth from 2,000 to 20,000 partitions: {growth:.1f}x (median of paired rounds; 10x is linear; "
          f"target <= 12x: {verdict(growth <= 12)})")
    return {"DescribeLogDirs time 20k / 2k partitions (linear = 10)": growth}


def run(rounds: int = 3, quick: bool = False) -> dict:
    """Every KIP-113 benchmark; ``quick``: 256 MiB instead of 1 GiB and one round (a smoke test)."""
    scratch = Path("bench-out").resolve() / "kip113"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    size = GIB // 4 if quick else GIB
    rounds = 1 if quick else rounds
    results: dict = {}
    try:
        results.update(bench_copy(scratch, 1 if quick else max(rounds, 5), size))
        results.update(bench_throttle(scratch, rounds))
        results.update(bench_produce_latency(scratch, max(rounds, 5) if not quick else 1, size))
        results.update(bench_describe_log_dirs(scratch, rounds))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return results


if __name__ == "__main__":
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    only = sys.argv[1:]
    if only:
        scratch = Path("bench-out").resolve() / "kip113"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        try:
            for name in only:
                globals()[f"bench_{name}"](scratch, 5 if name in ("produce_latency", "copy") else 3)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    else:
        run()
