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
