"""A passthrough FUSE filesystem whose operations can be made slow or held: a disk that is slow or hangs, for tests.

    python tools/faultfs.py BACKING MOUNTPOINT CONTROL

Every file operation on MOUNTPOINT is done on BACKING. CONTROL is a JSON file, looked at (by its mtime) before each
operation, so a test changes the behaviour of a mounted filesystem by rewriting it:

* ``{"mode": "pass"}`` (or no file): operations run at once;
* ``{"mode": "sleep", "delay_ms": 200}``: each operation first sleeps that long (a slow disk);
* ``{"mode": "hang"}``: each operation waits until the mode is no longer "hang" (a disk that stops answering;
  operations held meanwhile go on when it changes).

Runs in the foreground, multi-threaded (a held operation holds only its own thread); unmount with
``fusermount3 -u MOUNTPOINT`` (or SIGTERM). Needs FUSE (/dev/fuse, libfuse3 or libfuse2) and the mfusepy package.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import threading
import time
from typing import Any

import mfusepy as fuse


class Control:
    def __init__(self, path: str) -> None:
        self.path = path
        self._sig: tuple[int, int] | None = None
        self._lock = threading.Lock()
        self.mode = "pass"
        self.delay_s = 0.0

    def _reload(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self.mode, self.delay_s, self._sig = "pass", 0.0, None
            return
        sig = (st.st_mtime_ns, st.st_size)
        if sig == self._sig:
            return
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return  # half-written: keep what was there, look again next time
        self._sig = sig
        self.mode = str(data.get("mode", "pass"))
        self.delay_s = float(data.get("delay_ms", 0)) / 1000

    def gate(self) -> None:
        """Before each operation: sleep or wait as the control file says."""
        with self._lock:
            self._reload()
            mode, delay = self.mode, self.delay_s
        if mode == "sleep" and delay:
            time.sleep(delay)
        while mode == "hang":
            time.sleep(0.05)
            with self._lock:
                self._reload()
                mode = self.mode


def _gated(fn: Any) -> Any:
    def op(self: FaultFS, *args: Any) -> Any:
        self.control.gate()
        try:
            return fn(self, *args)
        except OSError as e:
            raise fuse.FuseOSError(e.errno or errno.EIO) from None

    op.__name__ = fn.__name__
    return op


class FaultFS(fuse.Operations):
    use_ns = True

    def __init__(self, backing: str, control: Control) -> None:
        self.backing = os.path.realpath(backing)
        self.control = control

    def _real(self, path: str) -> str:
        return os.path.join(self.backing, path.lstrip("/"))

    @_gated
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        st = os.fstat(fh) if fh is not None else os.lstat(self._real(path))
        keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_atime_ns", "st_mtime_ns", "st_ctime_ns")
        out = {k: getattr(st, k) for k in keys}
        for k in ("st_atime", "st_mtime", "st_ctime"):
            out[k] = out.pop(k + "_ns")
        return out

    @_gated
    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self._real(path))]

    @_gated
    def access(self, path: str, amode: int) -> int:
        if not os.access(self._real(path), amode):
            raise fuse.FuseOSError(errno.EACCES)
        return 0

    @_gated
    def mkdir(self, path: str, mode: int) -> int:
        os.mkdir(self._real(path), mode)
        return 0

    @_gated
    def rmdir(self, path: str) -> int:
        os.rmdir(self._real(path))
        return 0

    @_gated
    def unlink(self, path: str) -> int:
        os.unlink(self._real(path))
        return 0

    @_gated
    def rename(self, old: str, new: str) -> int:
        os.replace(self._real(old), self._real(new))
        return 0

    @_gated
    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._real(path), mode)
        return 0

    @_gated
    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        os.utime(self._real(path), ns=times) if times else os.utime(self._real(path))
        return 0

    @_gated
    def open(self, path: str, flags: int) -> int:
        return os.open(self._real(path), flags & ~os.O_CREAT)

    @_gated
    def create(self, path: str, mode: int, fi: Any = None) -> int:
        # The caller's flags are not passed here: open read-write, so a file created for writing can be read back.
        return os.open(self._real(path), os.O_RDWR | os.O_CREAT, mode)

    @_gated
    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    @_gated
    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        return os.pwrite(fh, data, offset)

    @_gated
    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        if fh is not None:
            os.ftruncate(fh, length)
        else:
            os.truncate(self._real(path), length)
        return 0

    def flush(self, path: str, fh: int) -> int:  # every close() sends one: a disk's close does no I/O, so never held
        return 0

    @_gated
    def fsync(self, path: str, datasync: int, fh: int) -> int:
        os.fsync(fh)
        return 0

    def release(self, path: str, fh: int) -> int:  # never held: closing must not leak fds in the server
        os.close(fh)
        return 0

    @_gated
    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self._real(path))
        return {k: getattr(st, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree",
                                            "f_files", "f_flag", "f_frsize", "f_namemax")}


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    backing, mountpoint, control = argv
    fuse.FUSE(FaultFS(backing, Control(control)), mountpoint, foreground=True, nothreads=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
