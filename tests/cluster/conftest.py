"""A real cluster for the tests here: `kjbod cluster up --detach` (a controller and three brokers with three log
dirs each, as separate processes started from the Kafka-style config files it writes), shared by the module's
tests and stopped with `kjbod cluster down`.  Short heartbeat and session timeouts keep fencing fast."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from live import COMMAND, cluster_ports, free_ports

from kjbod.cli.cluster import listen_port, node_dirs, node_pid, read_properties, wait_listening

HEARTBEAT_MS = 300
SESSION_MS = 2000
WAIT_S = 90.0


def wait_for(condition: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
    """Polls `condition` until it returns something true; fails naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g}s: {what}")
        time.sleep(0.05)


@dataclass
class Cluster:
    root: Path
    up_output: str
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)  # the nodes started here

    @property
    def homes(self) -> dict[str, Path]:
        return {home.name: home for home in node_dirs(self.root)}

    @property
    def broker_ids(self) -> list[int]:
        return [int(name.rpartition("-")[2]) for name in self.homes if name.startswith("broker-")]

    def port(self, name: str) -> int:
        return listen_port(self.homes[name])

    def broker_port(self, broker_id: int) -> int:
        return self.port(f"broker-{broker_id}")

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.broker_port(b)}" for b in self.broker_ids)

    def properties(self, name: str) -> dict[str, str]:
        return read_properties(self.homes[name] / "server.properties")

    def pid(self, name: str) -> int:
        pid = node_pid(self.homes[name])
        assert pid is not None, f"{name} is not running"
        return pid

    def signal(self, name: str, sig: signal.Signals) -> int | None:
        """Sends `sig` to the node and waits for it to end; returns its exit code when it is our child."""
        pid = self.pid(name)
        os.kill(pid, sig)
        process = self.processes.pop(name, None)
        if process is not None:
            code: int | None = process.wait(WAIT_S)
        else:  # started by `cluster up`, not by us: its exit code is not ours to read
            code = None
            wait_for(lambda: not Path(f"/proc/{pid}").exists(), f"{name} ends after {sig.name}")
        (self.homes[name] / "pid").unlink(missing_ok=True)
        return code

    def start(self, name: str) -> subprocess.Popen[bytes]:
        """Starts the node again by hand, as the README says (`kjbod serve -c <dir>/<node>/server.properties`, no
        pid file: `cluster down` finds it by its command line); returns once it listens (a broker: once
        unfenced)."""
        home = self.homes[name]
        (home / "pid").unlink(missing_ok=True)
        with open(home / "server.log", "ab") as log:
            process = subprocess.Popen([*COMMAND, "serve", "-c", str(home / "server.properties")],
                                       stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        self.processes[name] = process
        wait_listening(home, process, time.monotonic() + WAIT_S)
        return process

    def log(self, name: str) -> str:
        return (self.homes[name] / "server.log").read_text(errors="replace")


@contextlib.contextmanager
def running_cluster(root: Path, settings: dict[str, str] | None = None,
                    env: dict[str, str] | None = None, *, brokers: int = 3,
                    log_dirs: int = 3, racks: str | None = None,
                    release_version: str | None = None, controllers: int = 1) -> Iterator[Cluster]:
    """`kjbod cluster up --detach` in `root` (`controllers` controllers, a KRaft quorum when more than one, and
    `brokers` brokers x `log_dirs` dirs, this module's short timers unless `settings` say otherwise, and `settings`
    as more `--set key=value`), stopped with `kjbod cluster down` at the end; `env` is added to the nodes'
    environment."""
    ports = cluster_ports(brokers) if controllers == 1 else [
        "--base-port", str(free_ports(2 * (brokers + controllers))), "--controllers", str(controllers)]
    command = [*COMMAND, "cluster", "up", "--detach", "--brokers", str(brokers), "--log-dirs", str(log_dirs),
               "--dir", str(root), *ports]
    chosen = {"broker.heartbeat.interval.ms": str(HEARTBEAT_MS), "broker.session.timeout.ms": str(SESSION_MS),
              **(settings or {})}
    for key, value in chosen.items():
        command += ["--set", f"{key}={value}"]
    if racks is not None:
        command += ["--racks", racks]
    if release_version is not None:
        command += ["--release-version", release_version]
    cluster = Cluster(root, "")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300,
                              env={**os.environ, **env} if env else None)
        assert done.returncode == 0, f"cluster up failed:\n{done.stdout}{done.stderr}"
        cluster = Cluster(root, done.stdout)
        yield cluster
    finally:
        subprocess.run([*COMMAND, "cluster", "down", "--dir", str(root)], capture_output=True, timeout=300)
        for process in cluster.processes.values():
            process.wait(WAIT_S)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster")) as running:
        yield running
