"""`kjbod serve` and the server process: one-line errors with exit code 2, and graceful shutdown on signals.

Error cases run the real `python -m kjbod serve`. Shutdown cases run tests/helpers_server.py, which is the real
server shell (config, logging, listeners, signals, draining) around a fake node, in a subprocess.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kjbod.cli.main import main

HELPER = Path(__file__).with_name("helpers_server.py")
KJBOD = [sys.executable, "-m", "kjbod"]


def write_config(path: Path, **overrides: str) -> Path:
    settings = {
        "node.id": "1",
        "process.roles": "broker,controller",
        "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "controller.listener.names": "CONTROLLER",
        "log.dirs": str(path.parent / "logs-1"),
    }
    settings.update({k.replace("_", "."): v for k, v in overrides.items()})
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


def kjbod(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KJBOD, *args], capture_output=True, text=True, timeout=60, cwd=cwd)


def assert_one_line_error(done: subprocess.CompletedProcess[str], *fragments: str) -> str:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("kjbod: error: ")
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


# -- errors -------------------------------------------------------------------------------------------------------


def test_unknown_key_is_one_line_exit_2(tmp_path: Path) -> None:
    config = write_config(tmp_path / "server.properties", **{"log.dri": "/tmp/x"})
    line = assert_one_line_error(kjbod("serve", "-c", str(config)), "'log.dri'", "did you mean log.dir")
    assert "server.properties:6" in line  # where the key is


def test_bad_value_is_one_line_exit_2(tmp_path: Path) -> None:
    config = write_config(tmp_path / "server.properties", **{"num.partitions": "three"})
    assert_one_line_error(kjbod("serve", "-c", str(config)), "num.partitions", "'three'", "integer")


def test_fetch_max_bytes_below_1024_is_refused_at_start(tmp_path: Path) -> None:
    """Kafka's fetch.max.bytes is atLeast(1024): the node does not start, and says which key and value."""
    config = write_config(tmp_path / "server.properties", **{"fetch.max.bytes": "1023"})
    assert_one_line_error(kjbod("serve", "-c", str(config)), "fetch.max.bytes", "'1023'", ">= 1024")


def test_bad_override_is_one_line_exit_2(tmp_path: Path) -> None:
    config = write_config(tmp_path / "server.properties")
    assert_one_line_error(
        kjbod("serve", "-c", str(config), "--override", "socket.request.max.bytes=-1"),
        "--override",
        "socket.request.max.bytes",
        "'-1'",
    )
    assert_one_line_error(kjbod("serve", "-c", str(config), "--override", "novalue"), "key=value")


def test_missing_config_file(tmp_path: Path) -> None:
    assert_one_line_error(kjbod("serve", "-c", str(tmp_path / "nope.properties")), "nope.properties")


def test_usage_errors_are_one_line(tmp_path: Path) -> None:
    assert_one_line_error(kjbod("serve"), "-c/--config")
    assert_one_line_error(kjbod("serve", "-c", "x", "--log-format", "xml"), "--log-format")
    assert_one_line_error(kjbod("no-such-command"), "no-such-command")


def test_port_in_use_is_one_line_exit_2(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        config = write_config(
            tmp_path / "server.properties",
            listeners=f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:0",
        )
        done = kjbod("serve", "-c", str(config))
    line = assert_one_line_error(done)
    assert line == f"kjbod: error: cannot listen on 127.0.0.1:{port}: address already in use"


def test_unformatted_storage_is_one_line_exit_2(tmp_path: Path) -> None:
    # The real node refuses dirs without meta.properties; the CLI reports it like any other user error.
    config = write_config(tmp_path / "server.properties")
    done = kjbod("serve", "-c", str(config))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("kjbod: error: ")
    assert "format" in done.stderr.strip().splitlines()[-1]


def test_main_returns_the_exit_code_in_process(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = write_config(tmp_path / "server.properties", **{"log.segment.bytes": "10"})
    assert main(["serve", "-c", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "log.segment.bytes" in err and "'10'" in err
    assert main(["--version"]) == 0


# -- graceful shutdown ----------------------------------------------------------------------------------------------


class ServerProcess:
    """tests/helpers_server.py in a subprocess, with its JSON log lines collected by a thread."""

    def __init__(self, config: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HELPER), str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self.raw: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        listening = [self.wait_for("listening") for _ in range(2)]
        self.port = next(e["port"] for e in listening if e["listener"] == "PLAINTEXT")

    def _pump(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.raw.append(line)
            try:
                self.events.put(json.loads(line))
            except json.JSONDecodeError:
                pass

    def wait_for(self, event: str, timeout: float = 20) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                e = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {event!r} event; stderr so far:\n{''.join(self.raw)}") from None
            self.seen.append(e)
            if e.get("event") == event:
                return e

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 30) -> int:
        code = self.proc.wait(timeout)
        time.sleep(0.05)  # let the pump thread read the last lines
        while not self.events.empty():
            self.seen.append(self.events.get())
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stderr is not None:
            self.proc.stderr.close()

    def order(self, *names: str) -> list[int]:
        events = [e.get("event") for e in self.seen]
        return [events.index(n) for n in names]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(write_config(tmp_path / "server.properties"))
    yield proc
    proc.kill()


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=20)


def send(sock: socket.socket, body: bytes) -> None:
    sock.sendall(struct.pack(">i", len(body)) + body)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError(f"connection closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def recv_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    return recv_exact(sock, size)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_during_a_slow_request_delivers_the_reply_then_exits_0(
    server: ServerProcess, sig: signal.Signals
) -> None:
    with connect(server.port) as client:
        send(client, b"hello")
        assert recv_frame(client) == b"echo:hello"
        send(client, b"slow 1500")
        server.wait_for("slow request started")
        server.signal(sig)
        server.wait_for("shutdown requested")
        server.wait_for("waiting for open connections")
        # No longer accepting...
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", server.port), timeout=5).close()
        # ...but the request in flight is answered, and then the connection is closed.
        assert recv_frame(client) == b"slow done"
        assert client.recv(1) == b""
    assert server.wait() == 0
    started, finished, stopped, complete = server.order(
        "shutdown requested", "slow request finished", "fake node stopped", "shutdown complete"
    )
    assert started < finished < stopped < complete


def test_second_signal_aborts_the_wait(server: ServerProcess) -> None:
    with connect(server.port) as client:
        send(client, b"slow 60000")
        server.wait_for("slow request started")
        began = time.monotonic()
        server.signal(signal.SIGTERM)
        server.wait_for("shutdown requested")
        server.wait_for("waiting for open connections")
        server.signal(signal.SIGTERM)
        assert server.wait() == 0
        assert time.monotonic() - began < 10
        with pytest.raises((EOFError, ConnectionError)):
            recv_frame(client)
    (complete,) = [e for e in server.seen if e.get("event") == "shutdown complete"]
    assert complete["aborted_connections"] == 1


def test_node_requested_shutdown_exits_0(server: ServerProcess) -> None:
    with connect(server.port) as client:
        send(client, b"die")
        assert recv_frame(client) == b"dying"
        assert client.recv(1) == b""
    assert server.wait() == 0
    assert [e for e in server.seen if e.get("event") == "the node asked to shut down"]


def test_idle_server_stops_promptly_on_sigterm(server: ServerProcess) -> None:
    with connect(server.port) as idle:
        send(idle, b"x")
        assert recv_frame(idle) == b"echo:x"
        began = time.monotonic()
        server.signal(signal.SIGTERM)
        assert server.wait() == 0
        assert time.monotonic() - began < 5
        assert idle.recv(1) == b""


def test_console_log_format(tmp_path: Path) -> None:
    config = write_config(tmp_path / "server.properties")
    proc = subprocess.Popen(
        [*KJBOD, "serve", "-c", str(config), "--log-format", "console", "--log-level", "debug"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # Not formatted, so the node refuses to start; what matters here is that nothing is JSON.
    assert proc.returncode == 2
    assert not any(line.startswith("{") for line in err.splitlines())


def test_a_crash_in_native_code_leaves_every_threads_stack_in_the_log(server: ServerProcess) -> None:
    """A node that dies of a fatal signal (what a crash in a C extension raises) writes where each thread was."""
    server.signal(signal.SIGSEGV)
    assert server.wait() == -signal.SIGSEGV
    text = "".join(server.raw)
    assert "Fatal Python error: Segmentation fault" in text, text
    assert "most recent call first" in text, text
