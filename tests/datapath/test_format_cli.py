"""`kjbod format` and `kjbod serve` as a user runs them: meta.properties checks at the command line, and the
`make run` set-up (config/server.properties) in a fresh directory.

The storage tests cover the functions (kjbod.storage.meta, kjbod.storage.ids); here the commands are run as
subprocesses and judged by what a user sees: the exit code, one `kjbod: error: ...` line on stderr and nothing
else, and the files left behind.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from live import COMMAND, free_port, kafka_uuid, new_cluster_id, read_meta_properties, write_config

from kjbod.storage.ids import is_reserved_directory_id, uuid_from_str

REPO = Path(__file__).resolve().parents[2]


def kjbod(*args: str, cwd: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)


def one_error_line(done: subprocess.CompletedProcess) -> str:
    """The single stderr line of a command that failed as a user error."""
    assert done.returncode == 2, f"exit {done.returncode}; stdout {done.stdout!r}; stderr {done.stderr!r}"
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kjbod: error: "), done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    dirs = [tmp_path / f"logs-{i}" for i in range(3)]
    return write_config(tmp_path / "server.properties", node_id=1, port=free_port(), controller_port=free_port(),
                        log_dirs=dirs, metadata_dir=tmp_path / "metadata")


def meta_files(tmp_path: Path) -> dict[str, str]:
    return {str(p): p.read_text() for p in sorted(tmp_path.glob("*/meta.properties"))}


def test_format_refuses_a_dir_of_another_cluster(config, tmp_path):
    first = new_cluster_id()
    done = kjbod("format", "-c", str(config), "--cluster-id", first)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(": formatted") == 4
    before = meta_files(tmp_path)
    other = new_cluster_id()
    line = one_error_line(kjbod("format", "-c", str(config), "--cluster-id", other))
    assert first in line and other in line and "refusing" in line
    assert meta_files(tmp_path) == before, "a refused format changed meta.properties"
    # Formatting again with the same (or no) cluster id is harmless.
    again = kjbod("format", "-c", str(config))
    assert again.returncode == 0 and again.stdout.count("already formatted") == 4
    assert meta_files(tmp_path) == before


def test_format_refuses_a_dir_of_another_node(config, tmp_path):
    cluster = new_cluster_id()
    assert kjbod("format", "-c", str(config), "--cluster-id", cluster).returncode == 0
    text = config.read_text().replace("node.id=1", "node.id=2")
    other_node = tmp_path / "node2.properties"
    other_node.write_text(text)
    line = one_error_line(kjbod("format", "-c", str(other_node), "--cluster-id", cluster))
    assert "node.id 1" in line and "2" in line


def test_format_refuses_a_bad_cluster_id(config, tmp_path):
    line = one_error_line(kjbod("format", "-c", str(config), "--cluster-id", "not-a-uuid"))
    assert "not-a-uuid" in line
    assert meta_files(tmp_path) == {}


def test_format_writes_unique_unreserved_directory_ids(tmp_path):
    ids = []
    for round_ in range(2):
        base = tmp_path / f"round-{round_}"
        dirs = [base / f"logs-{i}" for i in range(15)]
        cfg = write_config(base.with_suffix(".properties"), node_id=1, port=9092, controller_port=9093,
                           log_dirs=dirs, metadata_dir=base / "metadata")
        base.mkdir()
        assert kjbod("format", "-c", str(cfg)).returncode == 0
        for d in [*dirs, base / "metadata"]:
            meta = read_meta_properties(d)
            assert meta["version"] == "1" and meta["node.id"] == "1"
            ids.append(meta["directory.id"])
    assert len(set(ids)) == len(ids) == 32
    for text in ids:
        uuid_from_str(text)  # 22 characters of URL-safe base64, 16 bytes
        assert not is_reserved_directory_id(text) and not text.startswith("-")
        assert kafka_uuid(text).version == 4  # like java.util.UUID.randomUUID
    for _ in range(2):
        out = kjbod("random-uuid").stdout.strip()
        uuid_from_str(out)
        assert not out.startswith("-") and not is_reserved_directory_id(out)


def test_serve_refuses_duplicate_and_reserved_directory_ids(config, tmp_path):
    assert kjbod("format", "-c", str(config), "--cluster-id", new_cluster_id()).returncode == 0
    shutil.copy(tmp_path / "logs-0" / "meta.properties", tmp_path / "logs-1" / "meta.properties")
    line = one_error_line(kjbod("serve", "-c", str(config), timeout=30))
    assert "same directory.id" in line and "logs-0" in line and "logs-1" in line
    # A reserved id (KIP-858's UNASSIGNED) put there by hand is refused too.
    meta = (tmp_path / "logs-1" / "meta.properties").read_text()
    own = read_meta_properties(tmp_path / "logs-1")["directory.id"]
    (tmp_path / "logs-1" / "meta.properties").write_text(meta.replace(own, "AAAAAAAAAAAAAAAAAAAAAQ"))
    line = one_error_line(kjbod("serve", "-c", str(config), timeout=30))
    assert "reserved" in line and "logs-1" in line


def test_serve_refuses_unformatted_dirs(config):
    line = one_error_line(kjbod("serve", "-c", str(config), timeout=30))
    assert "not formatted" in line and "kjbod format" in line


# ================================================================================================ make run


def make_run_recipe() -> list[str]:
    """The shell lines of the Makefile's `run` target, with make's variables as the test uses them."""
    text = (REPO / "Makefile").read_text()
    match = re.search(r"^run:.*\n((?:\t.*\n)+)", text, re.M)
    assert match, "the Makefile has no run target"
    return [line.strip().lstrip("@") for line in match.group(1).splitlines()]


@pytest.mark.slow
def test_make_run_configuration_works_for_a_new_user(tmp_path):
    """What `make run` does, in a fresh directory: format on the first start only, then serve; then a Kafka
    client produces to an auto-created topic and reads it back; a second start finds the data again."""
    recipe = make_run_recipe()
    assert recipe == [
        "test -f data/logs-1/meta.properties || $(VENV)/bin/kjbod format -c $(CONFIG)",
        "$(VENV)/bin/kjbod serve -c $(CONFIG) --log-format console",
    ], "make run changed: update this test to run what it runs"

    # The shipped config with free ports; every key and relative path as shipped.
    port, controller_port = free_port(), free_port()
    text = (REPO / "config" / "server.properties").read_text()
    assert "127.0.0.1:9092" in text and "127.0.0.1:9093" in text
    text = text.replace("127.0.0.1:9092", f"127.0.0.1:{port}").replace("127.0.0.1:9093", f"127.0.0.1:{controller_port}")
    text = text.replace("kjbod.metrics.listener=127.0.0.1:9100", f"kjbod.metrics.listener=127.0.0.1:{free_port()}")
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "server.properties").write_text(text)
    cfg = "config/server.properties"

    def first_line() -> None:
        if not (tmp_path / "data" / "logs-1" / "meta.properties").exists():
            done = kjbod("format", "-c", cfg, cwd=tmp_path)
            assert done.returncode == 0, done.stderr

    def serve() -> subprocess.Popen:
        proc = subprocess.Popen([*COMMAND, "serve", "-c", cfg, "--log-format", "console"], cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.monotonic() + 30
        import socket

        while True:
            assert proc.poll() is None, f"kjbod serve exited: {proc.communicate()[1][-2000:]}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return proc
            except OSError:
                assert time.monotonic() < deadline, "kjbod serve did not listen in time"
                time.sleep(0.05)

    def stop(proc: subprocess.Popen) -> str:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err[-2000:]
        return err

    first_line()
    for d in ("logs-1", "logs-2", "logs-3", "metadata"):
        assert (tmp_path / "data" / d / "meta.properties").exists()
    proc = serve()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from kafka import KafkaConsumer, KafkaProducer, TopicPartition

        producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", acks="all")
        for i in range(300):
            producer.send("quickstart", key=b"%d" % i, value=b"hello %d" % i)
        producer.flush(30)
        producer.close()
    finally:
        err = stop(proc)
    # Console logs for people, not JSON.
    assert err.strip() and not any(line.startswith("{") for line in err.splitlines())
    parts = sorted(p.name for d in ("logs-1", "logs-2", "logs-3") for p in (tmp_path / "data" / d).iterdir()
                   if p.name.startswith("quickstart-"))
    assert parts == ["quickstart-0", "quickstart-1", "quickstart-2"]  # num.partitions=3, one per log dir
    for d in ("logs-1", "logs-2", "logs-3"):
        assert (tmp_path / "data" / d / ".kafka_cleanshutdown").exists()

    # Second `make run`: no format (the data is there), serve, everything readable.
    first_line()
    proc = serve()
    try:
        consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}", auto_offset_reset="earliest",
                                 enable_auto_commit=False, consumer_timeout_ms=5000)
        tps = [TopicPartition("quickstart", p) for p in range(3)]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        values = sorted(m.value for m in consumer)
        consumer.close()
    finally:
        stop(proc)
    assert values == sorted(b"hello %d" % i for i in range(300))


def test_kjbod_module_and_console_script_agree():
    script = Path(sys.executable).with_name("kjbod")
    if not script.exists():
        pytest.skip(f"no console script next to {sys.executable} (not installed with pip -e)")
    a = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=30)
    b = kjbod("--version")
    assert a.returncode == b.returncode == 0 and a.stdout == b.stdout and a.stdout.startswith("kjbod ")
