"""Real-disk fault scenarios, run by test_realdisk.py inside a private mount namespace as root.

Usage: ``unshare -m -p -f --kill-child --propagation private python realdisk_scenarios.py SCENARIO BASE``.
Each scenario mounts what it needs under BASE, drives a LogManager against real kernel errors, and prints one
JSON object of observations on stdout (logs go to stderr). The namespace disappears with the process, taking
every mount and autoclear loop device with it, whatever happens.
"""

from __future__ import annotations

import fcntl
import json
import os
import struct
import subprocess
import sys

import structlog

structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from kjbod.storage import KafkaStorageError, LogConfig, LogManager, format_dirs  # noqa: E402
from tests.storage.conftest import kp_batch  # noqa: E402

FS_IOC_SHUTDOWN = 0x8004587D
NOLOGFLUSH = 2


def sh(*args: str) -> None:
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def mount_tmpfs(path: str, size: str) -> None:
    os.makedirs(path, exist_ok=True)
    sh("mount", "-t", "tmpfs", "-o", f"size={size}", "kjbod-test", path)


def mount_ext4(image: str, path: str, size_mb: int = 32) -> None:
    os.makedirs(path, exist_ok=True)
    with open(image, "wb") as f:
        f.truncate(size_mb << 20)
    sh("mkfs.ext4", "-q", "-F", "-m", "0", image)
    sh("mount", "-o", "loop", image, path)


def manager(dirs: list[str], events: dict) -> LogManager:
    format_dirs({"log.dirs": ",".join(dirs), "node.id": 1})
    lm = LogManager(
        dirs,
        node_id=1,
        defaults=LogConfig(segment_bytes=1 << 20),
        on_dir_offline=events.setdefault("offline", []).append,
        on_all_dirs_offline=lambda: events.__setitem__("all_offline", True),
    )
    lm.open()
    return lm


def cause_errno(exc: BaseException) -> int | None:
    cause = exc.__cause__
    return getattr(cause, "errno", None)


def probe(base: str) -> dict:
    mount_tmpfs(os.path.join(base, "t"), "1m")
    out = {"tmpfs": True}
    try:
        mount_ext4(os.path.join(base, "img"), os.path.join(base, "e"), 8)
        out["ext4_loop"] = True
    except (subprocess.CalledProcessError, OSError) as e:
        out["ext4_loop"] = False
        out["ext4_error"] = str(getattr(e, "stderr", b"") or e)[:200]
    return out


def tmpfs_enospc(base: str) -> dict:
    """A 2 MiB tmpfs fills: first the reserve stops appends (no ENOSPC), then, with no reserve and a file filling
    the disk behind the estimate's back, a real ENOSPC cuts an append short; the dir stays online, readable, and
    comes back once the tmpfs is grown."""
    good, small = os.path.join(base, "good"), os.path.join(base, "small")
    os.makedirs(good)
    mount_tmpfs(small, "2m")
    events: dict = {}
    lm = manager([good, small], events)
    a = lm.create_partition("fill", 0, None, dir=good)
    b = lm.create_partition("fill", 1, None, dir=small)
    batch = kp_batch([os.urandom(60_000)])
    appended = 0
    error = None
    for _ in range(200):
        try:
            b.append(batch)
            appended += 1
        except KafkaStorageError as e:
            error = e
            break
    state = {i.path: i.state.value for i in lm.dirs}
    out = {
        "appended_before_error": appended,
        "error_code": getattr(error, "error_code", None),
        "message": getattr(error, "message", None),
        "errno": cause_errno(error) if error else None,
        "small_online": b.online,
        "good_append_offset": a.append(batch).base_offset,
        "states": state,
        "read_back": len(b.read_bytes(0, 1 << 30)),
        "events": events,
    }
    # No reserve, and a file fills what is left without the seam knowing: the next append meets a real ENOSPC.
    lm.dir_io(small).reserved_bytes_config = 0
    sh("mount", "-o", "remount,size=4m", small)
    lm.check_space()
    out["state_after_first_growth"] = {i.path: i.state.value for i in lm.dirs}[small]
    def on_disk() -> int:
        return sum(os.path.getsize(os.path.join(b.dir, n)) for n in os.listdir(b.dir) if n.endswith(".log"))

    before = (on_disk(), b.size_bytes, b.log_end_offset)
    filler = os.path.join(small, "filler")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    try:
        b.append(batch)
        out["enospc_errno"] = None
    except KafkaStorageError as e:
        out["enospc_errno"] = cause_errno(e)
    out["size_unchanged"] = (on_disk(), b.size_bytes, b.log_end_offset) == before
    # Space returns (the tmpfs is grown, files stay open): the next check brings the dir back.
    sh("mount", "-o", "remount,size=8m", small)
    lm.check_space()
    out["state_after_growth"] = {i.path: i.state.value for i in lm.dirs}[small]
    out["append_after_growth"] = b.append(batch).base_offset
    out["offsets"] = b.log_end_offset
    lm.close()
    out["good_marker"] = os.path.exists(os.path.join(good, ".kafka_cleanshutdown"))
    out["small_marker"] = os.path.exists(os.path.join(small, ".kafka_cleanshutdown"))
    return out


def ext4_shutdown(base: str) -> dict:
    dirs = [os.path.join(base, "d0"), os.path.join(base, "d1")]
    for i, d in enumerate(dirs):
        mount_ext4(os.path.join(base, f"img{i}"), d)
    events: dict = {}
    lm = manager(dirs, events)
    logs = [lm.create_partition("shut", i, None, dir=d) for i, d in enumerate(dirs)]
    for log in logs:
        for i in range(50):
            log.append(kp_batch([b"record %d" % i]))
    held = logs[1].read(0, 1 << 20)  # a region fd opened before the failure
    fd = os.open(dirs[1], os.O_RDONLY | os.O_DIRECTORY)
    fcntl.ioctl(fd, FS_IOC_SHUTDOWN, struct.pack("I", NOLOGFLUSH))
    os.close(fd)
    out: dict = {"events": events}
    try:
        logs[1].append(kp_batch([b"after shutdown"]))
        out["append"] = "ok"
    except KafkaStorageError as e:
        out["append"] = e.error_code
        out["errno"] = cause_errno(e)
    try:
        logs[1].read(0, 100)
        out["read"] = "ok"
    except KafkaStorageError as e:
        out["read"] = e.error_code
    try:
        os.pread(held.regions[0].fd, 10, held.regions[0].offset)
        out["held_region_read"] = "ok"
    except OSError as e:
        out["held_region_read"] = e.errno
    for r in held.regions:
        r.close()
    out["good_append_offset"] = logs[0].append(kp_batch([b"fine"])).base_offset
    out["dirs_online"] = [i.online for i in lm.dirs]
    lm.close()
    out["markers"] = [os.path.exists(os.path.join(d, ".kafka_cleanshutdown")) for d in dirs]
    return out


SCENARIOS = {"probe": probe, "tmpfs-enospc": tmpfs_enospc, "ext4-shutdown": ext4_shutdown}

if __name__ == "__main__":
    name, base = sys.argv[1], sys.argv[2]
    print(json.dumps(SCENARIOS[name](base)), flush=True)
