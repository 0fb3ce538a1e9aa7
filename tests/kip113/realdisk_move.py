"""The disk-failure scenarios of test_disk_failure_live.py on real ext4 filesystems, run as root inside a
private mount and pid namespace (``unshare -m -p -f --kill-child``): each log dir is an ext4 image on a loop
device, and the failing dir's filesystem is shut down with FS_IOC_SHUTDOWN while a replica move runs (the
kernel then fails every operation on it with EIO, old fds included). The server is a real ``kjbod serve``
started inside the namespace. Prints one JSON object of observations; the namespace takes every mount and loop
device with it whatever happens.

Usage: python realdisk_move.py {probe|dest|source} BASE
"""

from __future__ import annotations

import fcntl
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path[:0] = [str(HERE.parents[2]), str(HERE.parents[1])]

FS_IOC_SHUTDOWN = 0x8004587D
NOLOGFLUSH = 2


def sh(*args: str) -> None:
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def mount_ext4(image: Path, path: Path, size_mb: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    with open(image, "wb") as f:
        f.truncate(size_mb << 20)
    sh("mkfs.ext4", "-q", "-F", "-m", "0", str(image))
    sh("mount", "-o", "loop", str(image), str(path))


def shutdown(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.ioctl(fd, FS_IOC_SHUTDOWN, struct.pack("I", NOLOGFLUSH))
    finally:
        os.close(fd)


def remount(path: str) -> None:
    """A shut-down ext4 stays dead until unmounted; mounting the image again replays its journal."""
    image = Path(path).parent / (Path(path).name + ".img")
    sh("umount", path)
    sh("mount", "-o", "loop", str(image), path)


def main(scenario: str, base: Path) -> dict:
    if scenario == "probe":
        mount_ext4(base / "probe.img", base / "probe", 8)
        return {"ext4_loop": True}
    from live import start_server

    from kip113 import diskfail

    directory = base / "server"
    for i in range(3):
        mount_ext4(directory / f"logs-{i}.img", directory / f"logs-{i}", 96)
    server = start_server(directory, overrides={"log.segment.delete.delay.ms": "0"})
    try:
        return diskfail.run(server, scenario, shutdown, remount)
    finally:
        server.stop()


if __name__ == "__main__":
    name, where = sys.argv[1], Path(sys.argv[2])
    where.mkdir(parents=True, exist_ok=True)
    print(json.dumps(main(name, where)), flush=True)
