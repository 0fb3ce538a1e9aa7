"""Start and stop real `kjbod serve` processes for integration tests (shared by every test package).

Strategy: each server gets its own temporary directory (config file, log dirs, metadata dir, stderr capture) and
free 127.0.0.1 ports, is formatted with `kjbod format` and started with `kjbod serve` as a subprocess of the
test's Python (`python -m kjbod`, so the tree under test is what runs), and counts as ready once its broker
listener accepts TCP connections.  If the process dies first, or does not come up in time, the error shows the
command and the tail of its stderr.  Stopping sends SIGTERM (a clean shutdown is part of the contract), waits, and
kills only if the process ignores it.

Plain functions for tests that need special set-ups (`start_server`, `write_config`, `format_storage`,
`read_meta_properties`, `free_port`), and fixtures for the common case:

    from live import kjbod_server  # noqa: F401  (a fixture: bring it into the test module)

    def test_something(kjbod_server):
        ... AdminClient(kjbod_server.bootstrap) ...

`kjbod_server_factory` starts any number of servers with custom settings and stops them all at teardown.
"""

from __future__ import annotations

import base64
import fcntl
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

__all__ = [
    "LiveServer",
    "format_storage",
    "free_port",
    "free_ports",
    "cluster_ports",
    "kafka_uuid",
    "kjbod_server",
    "kjbod_server_factory",
    "new_cluster_id",
    "read_meta_properties",
    "start_server",
    "write_config",
]

READY_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0
COMMAND = (sys.executable, "-m", "kjbod")


# Ports handed out for test servers: below the kernel's ephemeral range, so that no outgoing connection of any
# process can be given one before its server binds it, and a connect to one while nothing listens yet can never
# connect to itself (a TCP self-connect: the client's own port chosen equal to the one it dials, which a readiness
# poll would take for the server and which then holds the port against it).
PORT_RANGE = (12_000, 32_000)
# One byte per port of this file is locked (POSIX record locks: held by this process until it exits, however it
# exits) while the port is this process's: test runs of other worktrees never hand out the same port at once.
PORT_LOCKS = Path("/tmp/kjbod-test-ports.lock")
_port_locks: list[int] = []  # the fd of PORT_LOCKS, kept open (closing any fd of it drops every lock)
_ports_taken: set[int] = set()
_random = random.SystemRandom()  # not the random module's state, which tests may seed alike in every process


def free_port() -> int:
    """A TCP port on 127.0.0.1 for a test server: free now, never handed out before by this process, locked
    against every other process that asks here, and outside the ephemeral range (PORT_RANGE)."""
    return free_ports(1)


def free_ports(count: int) -> int:
    """The first of `count` consecutive ports that are each what free_port hands out (for `kjbod cluster up
    --base-port`, which numbers a cluster's ports from there)."""
    if not _port_locks:
        _port_locks.append(os.open(PORT_LOCKS, os.O_RDWR | os.O_CREAT, 0o666))
    low, high = PORT_RANGE
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    if ephemeral_low > low + 1000:
        high = min(high, ephemeral_low)
    for _ in range(1000):
        first = _random.randrange(low, high - count + 1)
        block = range(first, first + count)
        if _ports_taken.intersection(block):
            continue
        try:
            fcntl.lockf(_port_locks[0], fcntl.LOCK_EX | fcntl.LOCK_NB, count, first)
        except OSError:
            continue  # another test process holds one of them
        _ports_taken.update(block)  # locked until this process exits: not tried again either way
        if all(_bindable(port) for port in block):
            return first
    raise RuntimeError(f"no {count} free consecutive ports in {low}-{high} after 1000 tries")


def cluster_ports(brokers: int) -> list[str]:
    """`kjbod cluster up`'s --base-port for a new test cluster of `brokers` brokers: a block of ports of its own
    (each broker's listener and metrics port, the controller's two)."""
    return ["--base-port", str(free_ports(2 * brokers + 2))]


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False  # something else on the machine listens there
    return True


def new_cluster_id() -> str:
    """A cluster id in Kafka's format: a random uuid as 22 characters of URL-safe base64.

    Like Kafka's Uuid.randomUuid, ids starting with "-" are drawn again: they read as options on command lines.
    """
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def kafka_uuid(text: str) -> uuid.UUID:
    """Kafka's base64 text form of a uuid (as in meta.properties) -> uuid.UUID."""
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def read_meta_properties(directory: Path) -> dict[str, str]:
    """The key=value pairs of `directory/meta.properties`."""
    out = {}
    for line in (Path(directory) / "meta.properties").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def write_config(path: Path, *, node_id: int, port: int, controller_port: int, log_dirs: list[Path],
                 metadata_dir: Path, overrides: Mapping[str, str] | None = None) -> Path:
    """A combined broker+controller server.properties with Kafka's key names."""
    settings = {
        "node.id": str(node_id),
        "process.roles": "broker,controller",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "log.dirs": ",".join(str(d) for d in log_dirs),
        "metadata.log.dir": str(metadata_dir),
    }
    settings.update(overrides or {})
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


def format_storage(config: Path, cluster_id: str, *, timeout: float = 60.0, extra: Sequence[str] = ()) -> None:
    """`kjbod format -c config --cluster-id id [extra...]`; raises with the command's output if it fails."""
    command = [*COMMAND, "format", "-c", str(config), f"--cluster-id={cluster_id}", *extra]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited with {done.returncode}:\n{done.stdout}{done.stderr}")


@dataclass
class LiveServer:
    """A running `kjbod serve` and everything it was started with."""

    node_id: int
    cluster_id: str
    port: int
    controller_port: int
    directory: Path
    config: Path
    log_dirs: list[Path]
    metadata_dir: Path
    stderr_path: Path
    process: subprocess.Popen | None = None
    command: list[str] = field(default_factory=list)

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stderr(self, tail: int = 60) -> str:
        try:
            lines = self.stderr_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return ""
        return "\n".join(lines[-tail:])

    def start(self, timeout: float = READY_TIMEOUT) -> None:
        """Starts `kjbod serve` and waits until both its listeners accept connections. (The node binds them one
        after the other, the broker's first: a test that asked the controller as soon as the broker listener
        answered was once refused under load.)"""
        self.command = [*COMMAND, "serve", "-c", str(self.config)]
        with open(self.stderr_path, "ab") as err:
            self.process = subprocess.Popen(self.command, stdout=subprocess.DEVNULL, stderr=err,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            code = self.process.poll()
            if code is not None:
                raise RuntimeError(f"{' '.join(self.command)} exited with {code} before listening on "
                                   f"{self.bootstrap}; stderr:\n{self.stderr()}")
            try:
                for port in (self.port, self.controller_port):
                    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                        pass
                return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{' '.join(self.command)} did not listen on {self.bootstrap} within "
                                   f"{timeout:g}s; stderr:\n{self.stderr()}")
            time.sleep(0.05)

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM, wait up to `timeout`, then SIGKILL.  Returns the exit code (None if it was not running)."""
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        return process.returncode


def start_server(directory: Path, *, node_id: int = 1, log_dir_count: int = 3, cluster_id: str | None = None,
                 overrides: Mapping[str, str] | None = None, timeout: float = READY_TIMEOUT,
                 format_args: Sequence[str] = ()) -> LiveServer:
    """Formats `log_dir_count` log dirs under `directory` (`format_args`: more `kjbod format` options, such as
    `--release-version 3.9`) and starts a combined node there."""
    directory.mkdir(parents=True, exist_ok=True)
    log_dirs = [directory / f"logs-{i}" for i in range(log_dir_count)]
    server = LiveServer(
        node_id=node_id, cluster_id=cluster_id or new_cluster_id(), port=free_port(), controller_port=free_port(),
        directory=directory, config=directory / "server.properties", log_dirs=log_dirs,
        metadata_dir=directory / "metadata", stderr_path=directory / "stderr.log")
    write_config(server.config, node_id=node_id, port=server.port, controller_port=server.controller_port,
                 log_dirs=log_dirs, metadata_dir=server.metadata_dir, overrides=overrides)
    format_storage(server.config, server.cluster_id, extra=format_args)
    server.start(timeout)
    return server


@pytest.fixture
def kjbod_server_factory(tmp_path: Path) -> Iterator[Callable[..., LiveServer]]:
    """`factory(**start_server options)` -> a started server; every server is stopped at teardown."""
    servers: list[LiveServer] = []

    def factory(**options: object) -> LiveServer:
        server = start_server(tmp_path / f"server-{len(servers)}", **options)  # type: ignore[arg-type]
        servers.append(server)
        return server

    yield factory
    for server in servers:
        server.stop()


@pytest.fixture
def kjbod_server(kjbod_server_factory: Callable[..., LiveServer]) -> LiveServer:
    """One combined broker+controller (node 1) with three log dirs, started and stopped around the test."""
    return kjbod_server_factory()

