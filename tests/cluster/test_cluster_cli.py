"""`kjbod cluster` bad input: one line naming the problem, exit code 2, nothing left half-made."""

from __future__ import annotations

import subprocess

from live import COMMAND


def kjbod(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=120)


def test_a_bad_key_for_a_new_cluster_is_named_and_leaves_the_dir_empty(tmp_path):
    done = kjbod("cluster", "up", "--dir", str(tmp_path), "--set", "log.segment.bytes=abc")
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("kjbod: error: ") and "log.segment.bytes" in line and "'abc'" in line
    assert list(tmp_path.iterdir()) == []


def test_a_dir_without_a_cluster_is_refused(tmp_path):
    (tmp_path / "something").write_text("not a cluster")
    for args in (("cluster", "down", "--dir", str(tmp_path)), ("cluster", "up", "--dir", str(tmp_path))):
        done = kjbod(*args)
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert str(tmp_path) in done.stderr and "cluster" in done.stderr
    done = kjbod("cluster", "up", "--brokers", "0", "--dir", str(tmp_path))
    assert done.returncode == 2 and "--brokers: 0 is not positive" in done.stderr


def test_a_new_clusters_ports_count_up_from_base_port_skipping_a_taken_one(tmp_path):
    """Ports as an operator numbers them (brokers first, then the controller, then the metrics listeners), not
    bind(0)'s ephemeral ones, which an outgoing connection may take before the node binds them."""
    import socket

    from live import free_ports

    from kjbod.cli.cluster import create_cluster, listen_port, read_properties

    base = free_ports(8)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", base + 1))
        taken.listen()
        create_cluster(tmp_path, 2, 1, {}, base)
    homes = [tmp_path / "broker-1", tmp_path / "broker-2", tmp_path / "controller"]
    assert [listen_port(home) for home in homes] == [base, base + 2, base + 3]
    metrics = [read_properties(home / "server.properties")["kjbod.metrics.listener"] for home in homes]
    assert metrics == [f"127.0.0.1:{base + 5}", f"127.0.0.1:{base + 6}", f"127.0.0.1:{base + 4}"]
    assert read_properties(homes[0] / "server.properties")["controller.quorum.bootstrap.servers"] == (
        f"127.0.0.1:{base + 3}")


def test_base_port_is_checked_and_the_range_running_out_is_named(tmp_path):
    for bad, why in (("0", "0 is not positive"), ("70000", "70000 is not a TCP port"), ("x", "'x' is not a number")):
        done = kjbod("cluster", "up", "--dir", str(tmp_path), "--base-port", bad)
        assert done.returncode == 2 and why in done.stderr and "Traceback" not in done.stderr
    done = kjbod("cluster", "up", "--dir", str(tmp_path), "--brokers", "3", "--base-port", "65534")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "no free port" in line and "--base-port 65534" in line
    assert list(tmp_path.iterdir()) == []
