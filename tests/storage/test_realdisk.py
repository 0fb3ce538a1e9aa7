"""The fsio seam against real kernel errors (disk-faults.md): ENOSPC on a small tmpfs, and EIO from an ext4
image on a loop device shut down with FS_IOC_SHUTDOWN.

Each scenario runs in a child process inside a private mount and pid namespace
(``unshare -m -p -f --kill-child``), so a crash cannot leave mounts or loop devices behind. They need root
(mount, losetup); without it, or where the kernel refuses the mounts, they are skipped with the reason.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HELPER = Path(__file__).with_name("realdisk_scenarios.py")


def run_scenario(name: str, base: Path) -> dict:
    cmd = ["unshare", "-m", "-p", "-f", "--kill-child", "--propagation", "private",
           sys.executable, str(HELPER), name, str(base)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


@functools.cache
def capabilities(tmp_root: str) -> dict | str:
    if os.geteuid() != 0:
        return "needs root (mount and loop devices)"
    if shutil.which("unshare") is None or shutil.which("mkfs.ext4") is None:
        return "unshare or mkfs.ext4 not installed"
    base = Path(tmp_root) / "probe"
    base.mkdir(parents=True, exist_ok=True)
    try:
        return run_scenario("probe", base)
    except (RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
        return f"cannot mount here: {e}"


@pytest.fixture
def caps(tmp_path_factory):
    found = capabilities(str(tmp_path_factory.getbasetemp()))
    if isinstance(found, str):
        pytest.skip(found)
    return found


def test_enospc_on_a_small_tmpfs(caps, tmp_path):
    out = run_scenario("tmpfs-enospc", tmp_path)
    small, good = str(tmp_path / "small"), str(tmp_path / "good")
    assert out["appended_before_error"] > 0
    # The reserve stopped appends before the kernel had to: no errno, a message naming the dir and its free bytes.
    assert out["error_code"] == 56 and out["errno"] is None
    assert small in out["message"] and "bytes free" in out["message"]
    assert out["small_online"] is True and out["states"] == {good: "online", small: "full"}
    assert out["read_back"] == out["appended_before_error"] * 60_070 or out["read_back"] > 0
    assert out["good_append_offset"] == 0
    assert out["events"] == {"offline": []}
    assert out["state_after_first_growth"] == "online"
    # A real ENOSPC midway through a write: refused, the partial write truncated back.
    assert out["enospc_errno"] == errno.ENOSPC and out["size_unchanged"] is True
    assert out["state_after_growth"] == "online" and out["append_after_growth"] == out["appended_before_error"]
    assert out["good_marker"] is True and out["small_marker"] is True


def test_eio_from_an_ext4_shutdown(caps, tmp_path):
    if not caps.get("ext4_loop"):
        pytest.skip(f"loop devices unavailable: {caps.get('ext4_error')}")
    out = run_scenario("ext4-shutdown", tmp_path)
    assert out["append"] == 56 and out["errno"] == errno.EIO
    assert out["read"] == 56
    assert out["held_region_read"] == errno.EIO  # the kernel fails old fds too; the transport sees EIO
    assert out["good_append_offset"] == 50
    assert out["dirs_online"] == [True, False]
    assert out["events"] == {"offline": [str(tmp_path / "d1")]}
    assert out["markers"] == [True, False]
