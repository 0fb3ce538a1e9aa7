"""Server benchmark: ApiVersions v3 requests per second, kjbod against a Kafka-framed echo server.

The load generator (tools/bench/loadgen.c, compiled into bench-out/ with gcc -O2) keeps DEPTH requests in flight
on each of 32 connections: depth 1 (unpipelined, every request waits for its answer) and depth 16 (pipelined).
The peer is tools/bench/echo_server.py on the same event loop (uvloop): it only splits frames and answers each
with a fixed frame carrying the correlation id, the least work any Kafka server on that loop can do.  kjbod runs
as `kjbod serve` (uvloop, log level warning) and answers the same request in full: frame, header, router,
handler, encoded response.  Rounds alternate echo, kjbod, echo, kjbod, ... so drift on this shared VM hits both
alike; the report gives medians and the median of per-round ratios.  Target: kjbod >= 60 % of the echo server.

Each process gets its own CPU when there are at least two: the server under test (either one) is pinned to the
last CPU and the load generator to the others.  Unpinned, the scheduler on a 2-vCPU machine now and then puts both
on one CPU and a round swings by 30 % either way; pinned, both servers meet the same conditions.

Before timing, the request is sent once to each server and kjbod's answer is decoded (a benchmark of a server
that answers with an error would measure the wrong thing).

    python -m tools.bench.server [--rounds N] [--seconds S] [--quick]
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kjbod.protocol.generated import ApiVersionsRequest, ApiVersionsResponse
from kjbod.protocol.generated.request_header import RequestHeader

from .common import heading, median, rounds_main, verdict

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench-out"
LOADGEN_SRC = Path(__file__).with_name("loadgen.c")
ECHO = Path(__file__).with_name("echo_server.py")
CONNECTIONS = 32
DEPTHS = (1, 16)
TARGET = 0.60
READY_S = 60.0
SIZE = struct.Struct(">i")


def api_versions_frame(correlation_id: int = 1) -> bytes:
    """A size-prefixed ApiVersions v3 request, as a modern client sends it first on every connection."""
    header = RequestHeader(request_api_key=18, request_api_version=3, correlation_id=correlation_id,
                           client_id="loadgen").encode(2)
    body = ApiVersionsRequest(client_software_name="kjbod-loadgen", client_software_version="1.0").encode(3)
    return SIZE.pack(len(header) + len(body)) + header + body


def build_loadgen() -> Path:
    """bench-out/loadgen, rebuilt when the source is newer."""
    OUT.mkdir(exist_ok=True)
    binary = OUT / "loadgen"
    if not binary.exists() or binary.stat().st_mtime < LOADGEN_SRC.stat().st_mtime:
        subprocess.run(["gcc", "-O2", "-o", str(binary), str(LOADGEN_SRC)], check=True)
    return binary


def _cpu_split() -> tuple[set[int] | None, set[int] | None]:
    """(server CPUs, load generator CPUs), or (None, None) when there are too few CPUs to separate them."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None, None
    if len(cpus) < 2:
        return None, None
    return {cpus[-1]}, set(cpus[:-1])


SERVER_CPUS, LOADGEN_CPUS = _cpu_split()


def _pinned(cpus: set[int] | None):
    """A preexec_fn pinning the child (and every thread it starts) to `cpus`."""
    if cpus is None:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(proc: subprocess.Popen, port: int, what: str) -> None:
    deadline = time.monotonic() + READY_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening on port {port}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not listen on port {port} within {READY_S:g}s") from None
            time.sleep(0.05)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start_echo() -> tuple[subprocess.Popen, int]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(ECHO), str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, preexec_fn=_pinned(SERVER_CPUS))
    _wait_listening(proc, port, "echo server")
    return proc, port


def start_kjbod(work: Path) -> tuple[subprocess.Popen, int]:
    port = _free_port()
    return serve_kjbod(work, port, {
        "node.id": "1",
        "process.roles": "broker,controller",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{_free_port()}",
        "controller.listener.names": "CONTROLLER",
        "log.dirs": f"{work / 'logs-0'},{work / 'logs-1'}",
        "metadata.log.dir": str(work / "metadata"),
    }), port


def serve_kjbod(work: Path, port: int, settings: dict[str, str], *format_args: str) -> subprocess.Popen:
    """Writes `settings` as work/server.properties, formats, and starts `kjbod serve` (see launch_kjbod)."""
    config = work / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    subprocess.run([sys.executable, "-m", "kjbod", "format", "-c", str(config), *format_args], check=True,
                   stdout=subprocess.DEVNULL, cwd=ROOT)
    return launch_kjbod(work, port)


def launch_kjbod(work: Path, port: int) -> subprocess.Popen:
    """Starts `kjbod serve -c work/server.properties` (pinned, log level warning) and waits until it listens
    on `port`."""
    err = open(work / "stderr.log", "ab")  # noqa: SIM115 (handed to the child)
    proc = subprocess.Popen([sys.executable, "-m", "kjbod", "serve", "-c", str(work / "server.properties"),
                             "--log-level", "warning"],
                            stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT, preexec_fn=_pinned(SERVER_CPUS))
    err.close()
    _wait_listening(proc, port, "kjbod serve")
    return proc


def check_answer(port: int, frame: bytes, *, decode: bool) -> None:
    """One request, one answer with the right correlation id (and, for kjbod, a successful ApiVersions)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(frame)
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + SIZE.unpack_from(buf)[0]:
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError(f"server on port {port} closed the connection instead of answering")
            buf += chunk
    if SIZE.unpack_from(buf, 4)[0] != SIZE.unpack_from(frame, 8)[0]:
        raise RuntimeError(f"server on port {port} answered with the wrong correlation id")
    if decode:
        answer = ApiVersionsResponse.decode(buf[8:], 3)  # response header v0, then the v3 body
        if answer.error_code != 0 or not answer.api_keys:
            raise RuntimeError(f"kjbod answered ApiVersions with error {answer.error_code}")


_RESULT = re.compile(r"responses=(\d+) seconds=([\d.]+) rps=(\d+) errors=(\d+)")


def load(loadgen: Path, port: int, depth: int, seconds: float, frame: bytes) -> float:
    """Requests per second over CONNECTIONS connections at `depth`; refuses a run with errors."""
    return load_frames(loadgen, port, CONNECTIONS, depth, seconds, [frame])


def load_frames(loadgen: Path, port: int, connections: int, depth: int, seconds: float, frames: list[bytes]) -> float:
    """Requests per second over `connections` connections at `depth`, connection i sending frames[i % len];
    refuses a run with errors."""
    done = subprocess.run([str(loadgen), "127.0.0.1", str(port), str(connections), str(depth), f"{seconds:g}",
                           *(f.hex() for f in frames)], capture_output=True, text=True,
                          timeout=seconds + 30, preexec_fn=_pinned(LOADGEN_CPUS))
    m = _RESULT.search(done.stdout)
    if done.returncode != 0 or m is None:
        raise RuntimeError(f"loadgen failed ({done.returncode}): {done.stdout}{done.stderr}")
    if int(m.group(4)):
        raise RuntimeError(f"loadgen saw {m.group(4)} errors against port {port}: {done.stdout.strip()}")
    return float(m.group(3))


def run(rounds: int = 7, seconds: float = 2.0, quick: bool = False) -> dict:
    if quick:
        rounds, seconds = 3, 1.0
    heading(f"Server: ApiVersions v3 over {CONNECTIONS} connections, kjbod vs an echo server (uvloop both)")
    if SERVER_CPUS is not None:
        print(f"   server pinned to CPU {sorted(SERVER_CPUS)}, load generator to CPU {sorted(LOADGEN_CPUS or ())}")
    loadgen = build_loadgen()
    frame = api_versions_frame()
    work = Path(tempfile.mkdtemp(prefix="kjbod-bench-server-", dir=os.environ.get("KJBOD_BENCH_DIR") or None))
    echo = kjbod = None
    out: dict = {}
    try:
        echo, echo_port = start_echo()
        kjbod, kjbod_port = start_kjbod(work)
        check_answer(echo_port, frame, decode=False)
        check_answer(kjbod_port, frame, decode=True)
        for depth in DEPTHS:
            samples: dict[str, list[float]] = {"echo": [], "kjbod": []}
            load(loadgen, echo_port, depth, seconds / 2, frame)  # warm both up once (connections, caches)
            load(loadgen, kjbod_port, depth, seconds / 2, frame)
            for _ in range(rounds):
                samples["echo"].append(load(loadgen, echo_port, depth, seconds, frame))
                samples["kjbod"].append(load(loadgen, kjbod_port, depth, seconds, frame))
            ratio = median([k / e for k, e in zip(samples["kjbod"], samples["echo"], strict=True)])
            label = "unpipelined (depth 1)" if depth == 1 else f"pipelined (depth {depth})"
            print(f"   {label}: echo {median(samples['echo']):,.0f} req/s, kjbod {median(samples['kjbod']):,.0f} "
                  f"req/s; kjbod is {ratio:.0%} of echo (target >= {TARGET:.0%}: {verdict(ratio >= TARGET)})")
            out[f"api_versions_depth{depth}_vs_echo"] = ratio
    finally:
        for proc in (kjbod, echo):
            if proc is not None:
                _stop(proc)
        shutil.rmtree(work, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    return rounds_main("python -m tools.bench.server", __doc__, run, argv, rounds=7)


if __name__ == "__main__":
    raise SystemExit(main())
