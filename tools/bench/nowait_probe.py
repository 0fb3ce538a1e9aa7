"""Would a filesystem let the event loop append without ever waiting?

The per-dir workers exist so that no log dir's file I/O runs on the event loop: a write to a slow or hung disk
would stop every other dir with it. The one write the loop could make safely is one the kernel promises not to
wait for: ``pwritev2`` with ``RWF_NOWAIT``, which either lands in the page cache at once or fails with EAGAIN
(and the work would then go to the dir's worker). Where that write mostly succeeds, appends could skip the
hand-off to the worker and its two thread wake-ups; this probe says whether it does on a given filesystem.

    python -m tools.bench.nowait_probe DIR [DIR ...]          # probe the filesystems those dirs are on
    python -m tools.bench.nowait_probe --loopback xfs,btrfs   # also fresh XFS/btrfs images on loop devices
                                                              # (needs root, mkfs.xfs / mkfs.btrfs)

Each probe appends ``count`` writes of a Produce-sized batch to a fresh file at the benchmark's moderate rate
and counts what the kernel did with them: written, EAGAIN (would have waited), or refused outright (the
filesystem takes no buffered ``RWF_NOWAIT`` write at all).
"""

from __future__ import annotations

import argparse
import errno
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WRITE_BYTES = 4_400
RATE = 500  # writes per second: the p99 benchmark's moderate rate


def fs_type(path: Path) -> str:
    """The type of the filesystem ``path`` is on (the longest mount point above it in /proc/self/mountinfo)."""
    best, kind = "", "unknown"
    target = str(path.resolve())
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                mount_point = left.split()[4]
                inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
                if inside and len(mount_point) >= len(best):
                    best, kind = mount_point, right.split()[0]
    except OSError:
        pass
    return kind


def probe(directory: Path, count: int = 200, rate: int = RATE) -> dict:
    """Append ``count`` writes with RWF_NOWAIT to a new file in ``directory``; what became of them."""
    flag = getattr(os, "RWF_NOWAIT", 0x8)
    payload = os.urandom(WRITE_BYTES)
    written = would_wait = 0
    refused = ""
    fd, name = tempfile.mkstemp(prefix="nowait-probe-", dir=directory)
    try:
        os.close(fd)
        fd = os.open(name, os.O_WRONLY | os.O_APPEND)
        try:
            for _ in range(count):
                try:
                    os.pwritev(fd, [payload], -1, flag)
                    written += 1
                except BlockingIOError:
                    would_wait += 1
                except OSError as e:
                    refused = errno.errorcode.get(e.errno or 0, str(e.errno))
                    break
                time.sleep(1 / rate)
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
    finally:
        os.unlink(name)
    return {"fs": fs_type(directory), "count": count, "written": written, "would_wait": would_wait,
            "refused": refused, "bytes_on_file": size}


def describe(result: dict) -> str:
    """One line for a probe's result."""
    if result["refused"]:
        return f"{result['fs']}: refuses buffered RWF_NOWAIT writes ({result['refused']})"
    return (f"{result['fs']}: {result['written']} of {result['count']} appends written without waiting, "
            f"{result['would_wait']} would have waited (EAGAIN)")


def probe_loopback(kind: str, count: int) -> str:
    """Probe a fresh ``kind`` filesystem on a loop device; a sentence saying why not where that cannot run."""
    mkfs = shutil.which(f"mkfs.{kind}")
    if os.geteuid() != 0:
        return f"{kind}: not probed (a loop mount needs root)"
    if mkfs is None:
        return f"{kind}: not probed (mkfs.{kind} is not installed)"
    with tempfile.TemporaryDirectory(prefix="nowait-probe-") as tmp:
        image, mount = Path(tmp) / "fs.img", Path(tmp) / "mnt"
        mount.mkdir()
        with open(image, "wb") as f:
            f.truncate(512 * 1024 * 1024)
        made = subprocess.run([mkfs, "-q", str(image)], capture_output=True, text=True)
        if made.returncode != 0:
            return f"{kind}: not probed (mkfs.{kind}: {made.stderr.strip() or made.returncode})"
        mounted = subprocess.run(["mount", "-o", "loop", str(image), str(mount)], capture_output=True, text=True)
        if mounted.returncode != 0:
            return f"{kind}: not probed (mount: {mounted.stderr.strip() or mounted.returncode})"
        try:
            return describe(probe(mount, count))
        finally:
            subprocess.run(["umount", str(mount)], capture_output=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.nowait_probe", description=__doc__.split("\n")[0])
    parser.add_argument("dirs", nargs="*", type=Path, help="directories whose filesystems to probe")
    parser.add_argument("--loopback", default="", help="filesystem types to probe on fresh loop devices, e.g. xfs,btrfs")
    parser.add_argument("--count", type=int, default=200, help="appends per probe (default 200)")
    args = parser.parse_args(argv)
    if not args.dirs and not args.loopback:
        parser.error("name a directory or --loopback")
    for directory in args.dirs:
        if not directory.is_dir():
            print(f"{directory}: not a directory", file=sys.stderr)
            return 2
        print(f"{directory} ({describe(probe(directory, args.count))})")
    for kind in filter(None, args.loopback.split(",")):
        print(probe_loopback(kind.strip(), args.count))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
