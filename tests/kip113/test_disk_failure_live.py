"""A disk fails during a move (issue item 6), against a real server:

* destination: the move is aborted (future replica gone), the dir is offline (KAFKA_STORAGE_ERROR in
  DescribeLogDirs), the partition keeps serving from its source, produce and fetch included;
* source: the partition goes offline with its dir (Fetch answers KAFKA_STORAGE_ERROR), the move stops and no
  future replica is reported; the future copy stays on disk, and a restart with the dir repaired resumes the
  move and finishes it with every byte as before.

Two ways to fail a disk: the fsio seam's fault file (KJBOD_FAULTS, any user), and, as root, an ext4
filesystem on a loop device shut down with FS_IOC_SHUTDOWN (realdisk_move.py, in a private mount namespace).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from . import diskfail

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
HELPER = Path(__file__).with_name("realdisk_move.py")


def check(out: dict, side: str) -> None:
    failing, source, dest = out["failing"], out["source"], out["dest"]
    assert out["dir_errors"][failing] == 56
    assert all(code == 0 for d, code in out["dir_errors"].items() if d != failing)
    assert out["future_reported"] is False
    if side == "dest":
        assert out["current_dir"] == source and out["fetch_error"] == 0
        assert out["produce_after_offset"] > 0 and out["data_intact"] is True
    else:
        assert out["current_dir"] is None  # the source dir reports no replicas while offline
        assert out["fetch_error"] == 56
        assert len(out["future_dirs_on_disk"][dest]) == 1  # kept, not deleted
        assert out["resumed_data_identical"] is True


@pytest.mark.parametrize("side", ["dest", "source"])
def test_disk_failure_through_the_fault_seam(side, kjbod_server_factory, tmp_path, monkeypatch):
    faults = tmp_path / "faults.json"
    monkeypatch.setenv("KJBOD_FAULTS", str(faults))
    server = kjbod_server_factory(overrides={"log.segment.delete.delay.ms": "0"})

    def fail(d: str) -> None:
        faults.write_text(json.dumps({"faults": [{"dir": d, "errno": "EIO"}]}))

    def repair(_d: str) -> None:
        faults.unlink()

    check(diskfail.run(server, side, fail, repair), side)


def run_helper(scenario: str, base: Path, helper: Path = HELPER, *, own_proc: bool = False) -> dict:
    """Runs `helper` (a script printing one JSON object last) as root in a private mount and pid namespace
    (`own_proc`: with its own /proc, so that pids it reads are the namespace's)."""
    args = [scenario, str(base)] if scenario else [str(base)]
    cmd = ["unshare", "-m", "-p", "-f", "--kill-child", "--propagation", "private",
           *(["--mount-proc"] if own_proc else []), sys.executable, str(helper), *args]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{scenario} failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


@functools.cache
def ext4_available(tmp_root: str) -> str | None:
    """None when loop-mounted ext4 works here, else why not."""
    if os.geteuid() != 0:
        return "needs root (mount and loop devices)"
    if shutil.which("unshare") is None or shutil.which("mkfs.ext4") is None:
        return "unshare or mkfs.ext4 not installed"
    try:
        run_helper("probe", Path(tmp_root) / "kip113-probe")
    except (RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
        return f"cannot mount a loop ext4 here: {e}"
    return None


@pytest.mark.parametrize("side", ["dest", "source"])
def test_disk_failure_on_a_real_ext4_shutdown(side, tmp_path, tmp_path_factory):
    reason = ext4_available(str(tmp_path_factory.getbasetemp()))
    if reason is not None:
        if os.geteuid() == 0 and os.environ.get("CI"):
            pytest.fail(f"CI runs as root, so the ext4 variant must run: {reason}")
        pytest.skip(reason)
    check(run_helper(side, tmp_path), side)
